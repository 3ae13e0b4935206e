// Long-poll tails: TAILERS readers wait at the end of one stream (sending the
// cursor back, as a CDN needs to collapse them) while one writer appends
// RATE messages per second.
import http from 'k6/http';
import { check } from 'k6';
import { create, newRun, streamUrl, DURATION } from './lib.js';

const TAILERS = parseInt(__ENV.TAILERS || '100');
const RATE = parseInt(__ENV.RATE || '10');

export const options = {
  scenarios: {
    writer: { executor: 'constant-arrival-rate', rate: RATE, timeUnit: '1s', duration: DURATION, preAllocatedVUs: 2, exec: 'write' },
    tail: { executor: 'constant-vus', vus: TAILERS, duration: DURATION, exec: 'tail' },
  },
  thresholds: { checks: ['rate>0.99'] },
};

export function setup() {
  const url = streamUrl(newRun(), 'longpoll');
  create(url, 'text/plain');
  return { url };
}

export function write(data) {
  const r = http.post(data.url, `${Date.now()}\n`, { headers: { 'Content-Type': 'text/plain' } });
  check(r, { appended: (res) => res.status === 204 });
}

let offset = 'now';
let cursor = '';

export function tail(data) {
  const q = cursor ? `&cursor=${cursor}` : '';
  const r = http.get(`${data.url}?offset=${offset}&live=long-poll&timeout_ms=5000${q}`, { timeout: '20s' });
  check(r, { 'tail answered': (res) => res.status === 200 || res.status === 204 });
  if (r.headers['Stream-Next-Offset']) offset = r.headers['Stream-Next-Offset'];
  if (r.headers['Stream-Cursor']) cursor = r.headers['Stream-Cursor'];
}
