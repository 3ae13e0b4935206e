// Appends: STREAMS streams, one closed-loop writer (VU) each, BODY_BYTES per
// append, with producer headers when PRODUCER=1.
import http from 'k6/http';
import { check } from 'k6';
import { create, newRun, streamUrl, DURATION } from './lib.js';

const STREAMS = parseInt(__ENV.STREAMS || '100');
const BODY = 'a'.repeat(parseInt(__ENV.BODY_BYTES || '256'));
const PRODUCER = __ENV.PRODUCER === '1';

export const options = {
  scenarios: { append: { executor: 'constant-vus', vus: STREAMS, duration: DURATION } },
  thresholds: { checks: ['rate>0.99'] },
};

export function setup() {
  const run = newRun();
  for (let i = 1; i <= STREAMS; i++) create(streamUrl(run, `append-${i}`), 'application/octet-stream');
  return { run };
}

let seq = 0; // per VU: each VU is one producer

export default function (data) {
  const headers = { 'Content-Type': 'application/octet-stream' };
  if (PRODUCER) {
    headers['Producer-Id'] = `k6-${__VU}`;
    headers['Producer-Epoch'] = '0';
    headers['Producer-Seq'] = `${seq}`;
  }
  const r = http.post(streamUrl(data.run, `append-${__VU}`), BODY, { headers });
  if (check(r, { appended: (res) => res.status === 200 || res.status === 204 })) seq++;
}
