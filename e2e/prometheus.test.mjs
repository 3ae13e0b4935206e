// A real Prometheus scrapes a real origin and edge during a known workload;
// PromQL through its HTTP API must give the workload's counts and plausible
// latencies. promtool checks both /metrics texts, the alert rules (with
// their unit tests) and every query of the Grafana dashboard, whose series
// must be ones the binaries export.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import {
  REPO_ROOT, startOrigin, startEdge, stopInOrder, tmpDir, spawnProcess, waitFor, uniquePath,
} from './lib/stack.mjs';

const run = promisify(execFile);
const SCRAPE = '1s';
const APPENDS = 40;
const BIG_APPENDS = 5; // of 1 MiB each: one complete 4 MiB chunk
const CATCH_UPS = 5;

let origin;
let edge;
let prom;
let promUrl;

/** A free loopback port. */
async function freePort() {
  const server = net.createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs `promtool args`, feeding `input` on stdin; resolves with its output. */
function promtool(args, input) {
  return new Promise((resolve, reject) => {
    const child = execFile('promtool', args, { cwd: path.join(REPO_ROOT, 'deploy', 'prometheus') }, (err, stdout, stderr) => {
      if (err) reject(new Error(`promtool ${args.join(' ')} failed: ${stdout}${stderr}`));
      else resolve(stdout + stderr);
    });
    if (input !== undefined) child.stdin.end(input);
  });
}

/** An instant PromQL query: the result vector. */
async function query(expr) {
  const url = new URL('/api/v1/query', promUrl);
  url.searchParams.set('query', expr);
  const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
  const body = await res.json();
  assert.equal(body.status, 'success', `${expr}: ${JSON.stringify(body)}`);
  return body.data.result;
}

/**
 * Waits until `expr` gives `want` (Prometheus scrapes each target on its
 * own schedule); fails naming the last value seen.
 */
async function eventually(expr, want) {
  let last;
  await waitFor(async () => {
    last = await scalar(expr);
    return last === want;
  }, { timeout: 20_000, message: `${expr} to be ${want}` }).catch((err) => {
    throw new Error(`${err.message}; last ${last}`);
  });
}

/** The one value an instant query gives (NaN when the vector is empty). */
async function scalar(expr) {
  const r = await query(expr);
  return r.length === 0 ? NaN : Number(r[0].value[1]);
}

async function send(method, url, body, headers = {}) {
  const res = await fetch(url, { method, body, headers, signal: AbortSignal.timeout(10_000) });
  await res.arrayBuffer();
  return res.status;
}

/** Series names a /metrics text exports. */
async function exported(url) {
  const text = await (await fetch(`${url}/metrics`)).text();
  return new Set(text.split('\n').filter((l) => l && !l.startsWith('#')).map((l) => l.split(/[{ ]/)[0]));
}

before(async () => {
  origin = await startOrigin();
  edge = await startEdge({ origin: origin.url });
  const dir = tmpDir('ds-prometheus-');
  const port = await freePort();
  promUrl = `http://127.0.0.1:${port}`;
  const config = path.join(dir, 'prometheus.yml');
  writeFileSync(config, [
    'global:',
    `  scrape_interval: ${SCRAPE}`,
    `  evaluation_interval: ${SCRAPE}`,
    'scrape_configs:',
    '  - job_name: origin',
    `    static_configs: [{ targets: ['${origin.addr}'] }]`,
    '  - job_name: edge',
    `    static_configs: [{ targets: ['${edge.addr}'] }]`,
    '',
  ].join('\n'));
  prom = spawnProcess('prometheus', 'prometheus', [
    `--config.file=${config}`,
    `--storage.tsdb.path=${path.join(dir, 'data')}`,
    `--web.listen-address=127.0.0.1:${port}`,
  ], process.env);
  await waitFor(async () => (await fetch(`${promUrl}/-/ready`)).status === 200, {
    timeout: 30_000, message: 'Prometheus ready',
  });
  // Both targets scraped at least once before the workload, so rates see it.
  await waitFor(async () => (await query('up == 1')).length === 2, { timeout: 30_000, message: 'both targets up' });
});

after(async () => {
  await stopInOrder(prom, edge, origin);
});

describe('a real Prometheus', () => {
  it('scrapes the workload: counts, rates, quantiles and the cache-hit ratio', async () => {
    const text = uniquePath('/v1/stream/prom-text');
    assert.equal(await send('PUT', `${edge.url}${text}`, undefined, { 'content-type': 'text/plain' }), 201);
    // One append first, seen by Prometheus: the series then exist before
    // the rest, so rates see the rest (a counter born at N shows no rate).
    assert.equal(await send('POST', `${edge.url}${text}`, 'line 0\n', { 'content-type': 'text/plain' }), 204);
    await eventually('sum(ds_origin_requests_total{route="append",status="204"})', 1);
    await eventually('sum(ds_edge_requests_total{route="append",status="204"})', 1);
    for (let i = 1; i < APPENDS; i += 1) {
      assert.equal(await send('POST', `${edge.url}${text}`, `line ${i}\n`, { 'content-type': 'text/plain' }), 204);
    }
    const bin = uniquePath('/v1/stream/prom-bin');
    const octets = { 'content-type': 'application/octet-stream' };
    assert.equal(await send('PUT', `${edge.url}${bin}`, undefined, octets), 201);
    const mib = new Uint8Array(1024 * 1024).fill(7);
    for (let i = 0; i < BIG_APPENDS; i += 1) {
      assert.equal(await send('POST', `${edge.url}${bin}`, mib, octets), 204);
    }
    for (let i = 0; i < CATCH_UPS; i += 1) {
      assert.equal(await send('GET', `${edge.url}${bin}?offset=-1`), 200);
    }
    // A long-poll parked at the end, woken by one more append: a delivery
    // at the origin and at the edge.
    const parked = fetch(`${edge.url}${text}?offset=now&live=long-poll&timeout_ms=20000`, { signal: AbortSignal.timeout(30_000) });
    await waitFor(async () => (await (await fetch(`${edge.url}/metrics`)).text()).includes('ds_edge_long_polls_waiting 1'), {
      message: 'the long-poll parked at the edge',
    });
    await waitFor(async () => (await (await fetch(`${origin.url}/metrics`)).text()).includes('ds_origin_long_polls_waiting 1'), {
      message: 'the long-poll parked at the origin',
    });
    assert.equal(await send('POST', `${edge.url}${text}`, 'woken\n', { 'content-type': 'text/plain' }), 204);
    const woken = await parked;
    assert.equal(woken.status, 200);
    assert.equal(await woken.text(), 'woken\n');
    const appends = APPENDS + BIG_APPENDS + 1;
    // Exact counts, once Prometheus has scraped past the workload.
    await eventually('sum(ds_origin_requests_total{route="append",status="204"})', appends);
    await eventually('sum(ds_edge_requests_total{route="append",status="204"})', appends);
    await eventually('sum(ds_origin_append_ack_duration_seconds_count)', appends);
    await eventually('sum(ds_edge_requests_total{route="read",status="200"})', CATCH_UPS);
    await eventually('sum(ds_edge_requests_total{route="long_poll",status="200"})', 1);
    await eventually('sum(ds_origin_delivery_lag_seconds_count{kind="long_poll"})', 1);
    await eventually('sum(ds_edge_delivery_lag_seconds_count{kind="long_poll"})', 1);
    await eventually('sum(ds_edge_long_poll_flight_waiters_count)', 1);
    // Rates over the window that holds the workload.
    await waitFor(async () => (await scalar('sum(rate(ds_origin_requests_total{route="append"}[1m]))')) > 0, {
      timeout: 20_000, message: 'a positive append rate',
    });
    // Quantiles from the histograms: positive, and under a second on loopback.
    for (const h of ['ds_origin_append_ack_duration_seconds', 'ds_origin_wal_sync_duration_seconds']) {
      const p99 = await scalar(`histogram_quantile(0.99, sum by (le) (rate(${h}_bucket[1m])))`);
      assert.ok(p99 > 0 && p99 < 1, `${h} p99 ${p99}`);
    }
    const edgeP99 = await scalar(
      'histogram_quantile(0.99, sum by (le) (rate(ds_edge_request_duration_seconds_bucket{route="append"}[1m])))',
    );
    assert.ok(edgeP99 > 0 && edgeP99 < 1, `edge append p99 ${edgeP99}`);
    // The edge kept the complete chunk: one fill, the other reads from memory.
    const hits = await scalar('sum(ds_edge_cache_hits_total{kind="chunk"})');
    const misses = await scalar('sum(ds_edge_cache_misses_total{kind="chunk"})');
    assert.equal(misses, 1, 'the chunk is filled once');
    assert.equal(hits, CATCH_UPS - 1, 'every later read of it is a hit');
    const ratio = await scalar(
      'sum(ds_edge_cache_hits_total{kind="chunk"}) / (sum(ds_edge_cache_hits_total{kind="chunk"}) + sum(ds_edge_cache_misses_total{kind="chunk"}))',
    );
    assert.equal(ratio, (CATCH_UPS - 1) / CATCH_UPS);
    // The process and the build.
    assert.ok((await scalar('process_resident_memory_bytes{job="edge"}')) > 1e6);
    assert.ok((await scalar('process_max_fds{job="origin"}')) > 0);
    assert.equal((await query('ds_build_info{role="edge"}')).length, 1);
    assert.equal((await query('ds_build_info{role="origin"}')).length, 1);
    // Readiness: both serve, the edge's feed is live.
    assert.equal(await send('GET', `${origin.url}/readyz`), 200);
    assert.equal(await send('GET', `${edge.url}/readyz`), 200);
  });

  it('finds nothing to report in either /metrics with promtool', async () => {
    for (const url of [origin.url, edge.url]) {
      const text = await (await fetch(`${url}/metrics`)).text();
      const out = await promtool(['check', 'metrics'], text);
      assert.equal(out.trim(), '', `promtool check metrics on ${url}: ${out}`);
    }
  });

  it('passes the alert rules\' unit tests', async () => {
    await promtool(['check', 'rules', 'alerts.yml']);
    const out = await promtool(['test', 'rules', 'alerts.test.yml']);
    assert.match(out, /SUCCESS/);
  });

  it('parses every dashboard query, each naming series the binaries export', async () => {
    // Sealing the complete chunk is what makes the object-store series.
    await waitFor(async () => (await scalar('sum(ds_origin_chunks_sealed_total)')) >= 1, {
      timeout: 20_000, message: 'the chunk sealed',
    });
    const dashboard = JSON.parse(readFileSync(path.join(REPO_ROOT, 'deploy', 'grafana', 'durable-streams.json'), 'utf8'));
    const exprs = dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr));
    assert.ok(exprs.length >= 20, `${exprs.length} queries`);
    // As recording rules, `$__rate_interval` made a plain range.
    const rules = ['groups:', '  - name: dashboard', '    rules:'];
    exprs.forEach((e, i) => {
      rules.push(`      - record: dashboard:query_${i}`);
      rules.push(`        expr: ${JSON.stringify(e.replaceAll('$__rate_interval', '1m'))}`);
    });
    const file = path.join(tmpDir('ds-dashboard-'), 'dashboard-rules.yml');
    writeFileSync(file, `${rules.join('\n')}\n`);
    await promtool(['check', 'rules', file]);
    const names = new Set([...(await exported(origin.url)), ...(await exported(edge.url))]);
    // Region series exist on region origins only: the names the code exports.
    const regionNames = readFileSync(path.join(REPO_ROOT, 'origin', 'src', 'metrics', 'region.rs'), 'utf8')
      .match(/ds_origin_region_[a-z_]+/g);
    for (const n of regionNames) names.add(n);
    const metricRefs = (e) => [...e.matchAll(/\b(ds_[a-z_]+|process_[a-z_]+)\b/g)].map((m) => m[1]);
    for (const e of exprs) {
      for (const name of metricRefs(e)) {
        assert.ok(names.has(name), `the dashboard's ${name} (in ${e}) is not exported`);
      }
    }
    // The alert rules' series are exported too.
    const alerts = readFileSync(path.join(REPO_ROOT, 'deploy', 'prometheus', 'alerts.yml'), 'utf8');
    for (const name of metricRefs(alerts)) {
      assert.ok(names.has(name) || names.has(`${name}_count`), `the alert's ${name} is not exported`);
    }
  });
});
