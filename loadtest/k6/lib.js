// Shared helpers of the k6 scripts. Every script reads BASE_URL (the server or
// the CDN in front of it). Each run names its streams with a run id made once
// in setup() (init code runs once per VU, so it cannot make the id).
import http from 'k6/http';

export const BASE = (__ENV.BASE_URL || 'http://127.0.0.1:4437').replace(/\/+$/, '');
export function newRun() {
  return __ENV.RUN_ID || `${Date.now()}`;
}
export const DURATION = __ENV.DURATION || '30s';

export function streamUrl(run, name) {
  return `${BASE}/v1/stream/k6-${run}-${name}`;
}

export function create(url, contentType) {
  const r = http.put(url, null, { headers: { 'Content-Type': contentType } });
  if (r.status !== 201 && r.status !== 200) {
    throw new Error(`creating ${url}: ${r.status} ${r.body}`);
  }
  return r;
}

// Reads a stream from the start to its current end; returns the bytes read.
export function catchUp(url, params) {
  let offset = '-1';
  let total = 0;
  for (let i = 0; i < 100000; i++) {
    const r = http.get(`${url}?offset=${offset}`, params);
    if (r.status !== 200) return -1;
    total += r.body ? r.body.length : 0;
    offset = r.headers['Stream-Next-Offset'];
    if (r.headers['Stream-Up-To-Date'] === 'true') return total;
  }
  return total;
}
