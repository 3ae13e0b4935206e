// A mixed workload: appenders, catch-up readers and long-poll tailers at once.
import http from 'k6/http';
import { check } from 'k6';
import { catchUp, create, newRun, streamUrl, DURATION } from './lib.js';

const WRITERS = parseInt(__ENV.WRITERS || '20');
const READERS = parseInt(__ENV.READERS || '20');
const TAILERS = parseInt(__ENV.TAILERS || '20');

export const options = {
  scenarios: {
    write: { executor: 'constant-vus', vus: WRITERS, duration: DURATION, exec: 'write' },
    read: { executor: 'constant-vus', vus: READERS, duration: DURATION, exec: 'read' },
    tail: { executor: 'constant-vus', vus: TAILERS, duration: DURATION, exec: 'tail' },
  },
  thresholds: { checks: ['rate>0.99'] },
};

export function setup() {
  const url = streamUrl(newRun(), 'mixed');
  create(url, 'application/json');
  return { url };
}

export function write(data) {
  const r = http.post(data.url, JSON.stringify({ vu: __VU, at: Date.now() }), { headers: { 'Content-Type': 'application/json' } });
  check(r, { appended: (res) => res.status === 204 });
}

export function read(data) {
  check(catchUp(data.url), { 'read to the end': (n) => n >= 0 });
}

let offset = 'now';
export function tail(data) {
  const r = http.get(`${data.url}?offset=${offset}&live=long-poll&timeout_ms=2000`, { timeout: '20s' });
  check(r, { 'tail answered': (res) => res.status === 200 || res.status === 204 });
  if (r.headers['Stream-Next-Offset']) offset = r.headers['Stream-Next-Offset'];
}
