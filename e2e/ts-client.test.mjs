// The official TypeScript client (@durable-streams/client) against real
// processes: the origin directly, an edge in front of it, and Varnish
// (deploy/varnish/edge.vcl, a real varnishd) in front of that edge, so every
// test also runs through a real shared cache that stores answers per
// Cache-Control and coalesces requests; each in two modes:
//   array:  origin started with `--json-reads array`, the client used plainly;
//   accept: origin in its default mode (JSON streams read as NDJSON), the
//           client sending `Accept: application/json`, which the servers
//           answer with JSON arrays (content negotiation).
// The Varnish target is skipped (with the reason) when varnishd is not
// installed. Varnish refuses /metrics (404), so metrics are read from the
// edge behind it, which every request passed through Varnish reaches.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { DurableStream, IdempotentProducer, DurableStreamError } from '@durable-streams/client';
import { startOrigin, startEdge, stopInOrder, uniquePath, waitFor, readMetric } from './lib/stack.mjs';
import { withTimeout, testSignal, BACKOFF } from './lib/client.mjs';
import { startVarnish, varnishAvailable } from './lib/varnish.mjs';

const noVarnish = varnishAvailable() ? false : 'varnishd is not installed (apt-get install varnish)';

const MODES = [
  { name: 'array', jsonReads: 'array', headers: {} },
  { name: 'accept', jsonReads: 'ndjson', headers: { Accept: 'application/json' } },
];

/** A handle on a fresh stream under `base`. */
function handle(base, headers, signal, extra = {}) {
  return new DurableStream({
    url: base + uniquePath(),
    headers,
    signal,
    backoffOptions: BACKOFF,
    ...extra,
  });
}

/** A fetch that records each producer answer's Producer-Outcome. */
function recordingFetch(outcomes, inner = fetch) {
  return async (url, init) => {
    const res = await inner(url, init);
    if (init?.headers?.['Producer-Seq'] !== undefined) {
      outcomes.push(`${init.headers['Producer-Seq']}:${res.status}:${res.headers.get('producer-outcome')}`);
    }
    return res;
  };
}

/** Consumes a jsonStream until it ends, pushing every item. */
async function drain(res, items) {
  for await (const item of res.jsonStream()) items.push(item);
}

for (const mode of MODES) {
  describe(`ts client, ${mode.name} mode`, () => {
    let origin;
    let edge;
    let varnish;
    before(async () => {
      // Keepalive comments on every tail silent for 100 ms, so the
      // client's SSE parser meets them in the gaps between events (0019).
      const keepalive = ['--sse-keepalive', '100ms'];
      origin = await startOrigin({ jsonReads: mode.jsonReads, args: keepalive });
      edge = await startEdge({ origin: origin.url, args: keepalive });
      if (!noVarnish) varnish = await startVarnish({ edge });
    });
    after(async () => {
      // Front to back: Varnish forwards to the edge, the edge to the origin.
      await stopInOrder(varnish, edge, origin);
    });

    for (const target of ['origin', 'edge', 'varnish']) {
      const base = () => ({ origin, edge, varnish })[target].url;
      // The server whose /metrics counts this target's requests: Varnish
      // has none of its own (the VCL refuses /metrics); the edge behind it
      // sees every request Varnish passes on.
      const metricsServer = () => (target === 'origin' ? origin : edge);

      describe(`through ${target}`, { skip: target === 'varnish' && noVarnish }, () => {
        it('creates a JSON stream; IdempotentProducer retries and doubled sends append exactly once; json() reads them in order', async (t) => {
          const signal = testSignal(t);
          const h = handle(base(), mode.headers, signal);
          await h.create({ contentType: 'application/json' });

          // Producer A: seq 0 is accepted; the answer to seq 1 is lost after
          // the origin took it (the fetch throws once the answer came back).
          const outcomesA = [];
          const errorsA = [];
          let lose = true;
          const lossyFetch = async (url, init) => {
            const res = await fetch(url, init);
            if (init?.headers?.['Producer-Seq'] === '1' && lose) {
              lose = false;
              await res.arrayBuffer();
              throw new TypeError('injected: connection lost before the answer was read');
            }
            return res;
          };
          const a = new IdempotentProducer(h, 'writer-1', {
            fetch: recordingFetch(outcomesA, lossyFetch),
            onError: (e) => errorsA.push(e),
            lingerMs: 0,
          });
          a.append(JSON.stringify({ n: 0, text: 'zero' }));
          await a.flush();
          a.append(JSON.stringify({ n: 1, text: 'one' }));
          await a.flush();
          await a.detach();
          assert.equal(errorsA.length, 1, 'the lost answer is reported');
          assert.match(errorsA[0].message, /injected/);
          assert.deepEqual(outcomesA, ['0:200:accepted']);

          // Producer B: the same id and epoch after a restart replays its
          // input from the start; the server recognises seq 0 and 1. Every
          // request is also sent twice (a proxy retrying), and the second
          // answer is the one the producer sees.
          const outcomesB = [];
          const doubled = async (url, init) => {
            const first = await fetch(url, init);
            await first.arrayBuffer();
            outcomesB.push(`${init.headers['Producer-Seq']}:${first.status}:${first.headers.get('producer-outcome')}`);
            return fetch(url, init);
          };
          const errorsB = [];
          const b = new IdempotentProducer(h, 'writer-1', {
            fetch: recordingFetch(outcomesB, doubled),
            onError: (e) => errorsB.push(e),
            lingerMs: 0,
          });
          for (const [n, text] of [[0, 'zero'], [1, 'one'], [2, 'two'], [3, 'three']]) {
            b.append(JSON.stringify({ n, text }));
            await b.flush();
          }
          await b.detach();
          assert.deepEqual(errorsB, []);
          assert.deepEqual(outcomesB, [
            '0:204:duplicate', '0:204:duplicate',
            '1:204:duplicate', '1:204:duplicate',
            '2:200:accepted', '2:204:duplicate',
            '3:200:accepted', '3:204:duplicate',
          ]);

          const res = await h.stream({ live: false });
          assert.equal(res.contentType?.split(';')[0], 'application/json');
          assert.deepEqual(await res.json(), [
            { n: 0, text: 'zero' },
            { n: 1, text: 'one' },
            { n: 2, text: 'two' },
            { n: 3, text: 'three' },
          ]);
          assert.equal(res.upToDate, true);
          assert.equal(res.streamClosed, false);
        });

        it('creates a text/plain stream and reads it back with text()', async (t) => {
          const signal = testSignal(t);
          const h = handle(base(), mode.headers, signal);
          await h.create({ contentType: 'text/plain' });
          const p = new IdempotentProducer(h, 'text-writer', { lingerMs: 0 });
          for (const part of ['Hello, ', 'durable ', 'wörld', '\n']) {
            p.append(part);
            await p.flush();
          }
          await p.detach();
          const res = await h.stream({ live: false });
          assert.equal(res.contentType?.split(';')[0], 'text/plain');
          assert.equal(await res.text(), 'Hello, durable wörld\n');
          const head = await h.head();
          assert.equal(head.exists, true);
          assert.equal(head.offset, res.offset);
          assert.equal(head.offset, '0000000000000016');
        });

        for (const live of ['long-poll', 'sse']) {
          // A rollback (docs/guides/restore.md) under a live reader: the
          // long-poll waiting on the replaced incarnation answers 412; an SSE
          // reader's connection ends with an error event, the client opens
          // the next at the offset it holds, past the new end: 416. Either
          // way the reader ends with that error (and the session's `closed`
          // promise rejects with it: an application that does not await it
          // meets an unhandled rejection) and a read afterwards sees the kept
          // prefix and what follows.
          it(`a ${live} reader of a stream rolled back ends with an error; reads then see the kept prefix`, async (t) => {
            const signal = testSignal(t);
            const h = handle(base(), mode.headers, signal);
            await h.create({ contentType: 'application/json' });
            await h.append(JSON.stringify({ keep: 1 }));
            const point = (await h.head()).offset;
            await h.append(JSON.stringify({ drop: 2 }));
            const server = metricsServer();
            const gauge = `${target === 'origin' ? 'ds_origin' : 'ds_edge'}_long_polls_waiting`;
            const waitingBefore = (await readMetric(server.url, gauge)) ?? 0;
            const res = await h.stream({ live });
            const items = [];
            const ended = drain(res, items).then(() => null, (e) => e);
            const closed = res.closed.then(() => null, (e) => e);
            await waitFor(() => items.length === 2, { message: `the catch-up over ${live}` });
            if (live === 'long-poll') {
              await waitFor(async () => ((await readMetric(server.url, gauge)) ?? 0) > waitingBefore, { message: 'a waiting long-poll' });
            }
            const token = (await fetch(h.url, { method: 'HEAD', headers: mode.headers })).headers.get('stream-incarnation');
            const r = await fetch(`${h.url}/incarnation/${token}/restore`, {
              method: 'POST',
              headers: { ...mode.headers, 'Stream-Restore-Offset': point },
            });
            assert.equal(r.status, 200);
            assert.equal(r.headers.get('stream-previous-incarnation'), token);
            const err = await withTimeout(ended, 10_000, `the ${live} reader to end`);
            assert.equal(err?.status, live === 'sse' ? 416 : 412, `${err}`);
            assert.deepEqual(items, [{ keep: 1 }, { drop: 2 }]);
            assert.equal((await withTimeout(closed, 10_000, 'the session to close'))?.status, err.status);
            await h.append(JSON.stringify({ next: 3 }));
            const again = await h.stream({ offset: point, live: false });
            assert.deepEqual(await again.json(), [{ next: 3 }]);
          });
        }

        for (const live of ['long-poll', 'sse']) {
          it(`${live} subscription receives later appends, then sees the close and ends`, async (t) => {
            const signal = testSignal(t);
            const h = handle(base(), mode.headers, signal);
            await h.create({ contentType: 'application/json' });
            const p = new IdempotentProducer(h, `live-${live}`, { lingerMs: 0 });
            p.append(JSON.stringify({ i: 0, before: true }));
            await p.flush();

            const server = metricsServer();
            const metric = target === 'origin' ? 'ds_origin_requests_total' : 'ds_edge_requests_total';
            const route = live === 'sse' ? 'sse' : 'long_poll';
            const liveBefore = (await readMetric(server.url, metric, { route })) ?? 0;

            const res = await h.stream({ live });
            const items = [];
            const done = drain(res, items);
            done.catch(() => {}); // awaited below; keep an early failure from being unhandled
            await waitFor(() => res.upToDate && items.length === 1, { message: 'catch-up of the first message' });
            assert.deepEqual(items, [{ i: 0, before: true }]);

            // Appends after the subscription started, in three requests.
            const later = [[{ i: 1 }], [{ i: 2 }, { i: 3 }], [{ i: 4, text: 'ünïcode "quoted"\n' }]];
            for (const batch of later) {
              for (const m of batch) p.append(JSON.stringify(m));
              await p.flush();
              const want = 1 + later.slice(0, later.indexOf(batch) + 1).flat().length;
              await waitFor(() => items.length >= want, { message: `${want} items over ${live}` });
            }
            assert.deepEqual(items, [{ i: 0, before: true }, ...later.flat()]);
            assert.equal(res.streamClosed, false);

            // Close with a last message: the reader gets it, sees the close and ends.
            const closed = await p.close(JSON.stringify({ i: 5, last: true }));
            await withTimeout(done, 10_000, `the ${live} reader to end after the close`);
            assert.deepEqual(items, [{ i: 0, before: true }, ...later.flat(), { i: 5, last: true }]);
            assert.equal(res.streamClosed, true);
            assert.equal(res.offset, closed.finalOffset);
            // The later messages came over real live requests of that kind.
            const liveAfter = (await readMetric(server.url, metric, { route })) ?? 0;
            assert.ok(liveAfter > liveBefore, `${metric}{route="${route}"} grew: ${liveBefore} -> ${liveAfter}`);

            const head = await h.head();
            assert.equal(head.exists, true);
            assert.equal(head.streamClosed, true);
            assert.equal(head.contentType?.split(';')[0], 'application/json');
            assert.equal(head.offset, closed.finalOffset);
          });
        }

        it('HEAD reports the content type, end and open/closed state', async (t) => {
          const signal = testSignal(t);
          const h = handle(base(), mode.headers, signal);
          assert.deepEqual(await h.head(), { exists: false });
          await h.create({ contentType: 'application/json' });
          let head = await h.head();
          assert.equal(head.exists, true);
          assert.equal(head.contentType?.split(';')[0], 'application/json');
          assert.equal(head.offset, '0000000000000000');
          assert.equal(head.streamClosed, false);

          const p = new IdempotentProducer(h, 'head-writer', { lingerMs: 0 });
          p.append(JSON.stringify({ a: 1 }));
          p.append(JSON.stringify({ b: 2 }));
          await p.flush();
          await p.detach();
          head = await h.head();
          // Stored one message per line: {"a":1}\n{"b":2}\n = 16 bytes.
          assert.equal(head.offset, '0000000000000010');
          assert.equal(head.offset, p.lastSuccessfulOffset);

          const connected = await DurableStream.connect({ url: h.url, headers: mode.headers, signal });
          assert.equal(connected.contentType?.split(';')[0], 'application/json');
          const { finalOffset } = await connected.close();
          assert.equal(finalOffset, '0000000000000010');
          head = await DurableStream.head({ url: h.url, headers: mode.headers, signal });
          assert.equal(head.streamClosed, true);
          assert.equal(head.offset, '0000000000000010');
        });

        if (mode.name === 'accept') {
          it('negotiates: Accept application/json reads arrays, no Accept reads NDJSON; both Vary on Accept', async (t) => {
            const signal = testSignal(t);
            const h = handle(base(), {}, signal);
            await h.create({ contentType: 'application/json' });
            const p = new IdempotentProducer(h, 'neg', { lingerMs: 0 });
            p.append(JSON.stringify({ x: 1 }));
            p.append(JSON.stringify({ y: [2, 3] }));
            await p.flush();
            await p.detach();

            const url = `${h.url}?offset=-1`;
            const asJson = await fetch(url, { headers: { Accept: 'application/json' }, signal });
            assert.equal(asJson.status, 200);
            assert.equal(asJson.headers.get('content-type')?.split(';')[0], 'application/json');
            assert.match(asJson.headers.get('vary') ?? '', /accept/i);
            assert.deepEqual(JSON.parse(await asJson.text()), [{ x: 1 }, { y: [2, 3] }]);

            for (const accept of [undefined, '*/*', 'application/x-ndjson']) {
              const res = await fetch(url, { headers: accept ? { Accept: accept } : {}, signal });
              assert.equal(res.status, 200);
              assert.equal(res.headers.get('content-type')?.split(';')[0], 'application/x-ndjson', `Accept ${accept}`);
              assert.match(res.headers.get('vary') ?? '', /accept/i, `Accept ${accept}`);
              assert.equal(await res.text(), '{"x":1}\n{"y":[2,3]}\n');
            }
          });

          it('without the Accept header, json() refuses the NDJSON answer (why the header is needed)', async (t) => {
            const signal = testSignal(t);
            const h = handle(base(), {}, signal);
            await h.create({ contentType: 'application/json' });
            const p = new IdempotentProducer(h, 'plain', { lingerMs: 0 });
            p.append(JSON.stringify({ m: 1 }));
            await p.flush();
            await p.detach();
            const res = await h.stream({ live: false });
            assert.equal(res.contentType?.split(';')[0], 'application/x-ndjson');
            await assert.rejects(
              () => res.json(),
              (err) => err instanceof DurableStreamError && /only valid for JSON-mode streams/.test(err.message),
            );
            // The bytes themselves are the NDJSON the server stores.
            const again = await h.stream({ live: false });
            assert.equal(await again.text(), '{"m":1}\n');
          });
        }
      });
    }
  });
}
