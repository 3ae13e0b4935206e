// Catch-up replay: READERS clients read a stream prefilled with FILL_MIB MiB
// from the start, again and again (through an edge/CDN, most reads are hits).
import http from 'k6/http';
import { check } from 'k6';
import { catchUp, create, newRun, streamUrl, DURATION } from './lib.js';

const READERS = parseInt(__ENV.READERS || '50');
const FILL_MIB = parseInt(__ENV.FILL_MIB || '16');

export const options = {
  scenarios: { catchup: { executor: 'constant-vus', vus: READERS, duration: DURATION } },
  thresholds: { checks: ['rate>0.99'] },
};

export function setup() {
  const url = streamUrl(newRun(), 'catchup');
  create(url, 'application/octet-stream');
  const chunk = 'c'.repeat(1024 * 1024);
  for (let i = 0; i < FILL_MIB; i++) {
    const r = http.post(url, chunk, { headers: { 'Content-Type': 'application/octet-stream' } });
    if (r.status !== 204) throw new Error(`filling: ${r.status}`);
  }
  return { url, bytes: FILL_MIB * 1024 * 1024 };
}

export default function (data) {
  const got = catchUp(data.url);
  check(got, { 'read everything': (n) => n >= data.bytes });
}
