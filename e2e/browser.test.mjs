// Headless Chromium runs the official client in a page served from another
// origin (http://localhost:P1) than the edge (http://127.0.0.1:P2), so every
// request is cross-origin and the browser enforces CORS on it.
import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startOrigin, startEdge, createKey, tmpDir, readMetric, waitFor, uniquePath } from './lib/stack.mjs';
import { bundlePage, servePage, launchBrowser } from './lib/browser.mjs';

// The edge ends SSE sessions this quickly, so a test sees reconnects. The
// client counts a session under 1 s as "short" (and falls back to long-poll
// after 3), so keep it above that.
const SSE_SESSION = '2s';
const JSON_ACCEPT = { Accept: 'application/json' };

let origin;
let edge;
let site;
let context;
let page;
let key;
const sseRequests = []; // {url, finished, failed, request}

/** Runs window.app[fn](arg) in the page. */
const app = (fn, arg) => page.evaluate(([f, a]) => window.app[f](a), [fn, arg]);
const texts = (id) => page.locator(`#${id} ul.messages li`).allTextContents();
const status = (id) => page.locator(`#${id} .status`).getAttribute('data-state');
const edgeCount = (labels) => readMetric(edge.url, 'ds_edge_requests_total', labels).then((v) => v ?? 0);

before(async () => {
  const dataDir = tmpDir('ds-browser-origin-');
  key = await createKey({ dataDir, account: 'acme' });
  // Keepalive comments on every tail silent for 100 ms, so Chromium's
  // EventSource parses them in the gaps between events (decision 0019).
  const sse = ['--sse-session', SSE_SESSION, '--sse-keepalive', '100ms'];
  origin = await startOrigin({ dataDir, args: sse });
  edge = await startEdge({ origin: origin.url, args: sse });
  site = await servePage(await bundlePage());
  context = await launchBrowser();
  page = await context.newPage();
  page.on('request', (req) => {
    if (req.url().includes('live=sse')) sseRequests.push({ url: req.url(), finished: false, failed: null, request: req });
  });
  const finish = (req, failed = null) => {
    const entry = sseRequests.find((e) => e.request === req);
    if (entry) Object.assign(entry, { finished: true, failed });
  };
  page.on('requestfinished', (req) => finish(req));
  page.on('requestfailed', (req) => finish(req, req.failure()?.errorText ?? 'failed'));
  await page.goto(site.url);
  await page.waitForSelector('body[data-ready="true"]', { timeout: 10_000 });
});

after(async () => {
  const steps = [
    () => page?.evaluate(() => window.app.stopAll()),
    () => context?.close(),
    () => site?.stop(),
    () => edge?.stop(),
    () => origin?.stop(),
  ];
  const errors = [];
  for (const step of steps) {
    try {
      await step();
    } catch (err) {
      errors.push(err);
    }
  }
  // A server that did not exit cleanly fails the file.
  const serverError = errors.find((e) => /exited|did not exit/.test(e.message));
  if (serverError) throw serverError;
});

describe('browser client through the edge, cross-origin', () => {
  it('serves the page and the servers from different origins', () => {
    const pageOrigin = new URL(site.url).origin;
    const edgeOrigin = new URL(edge.url).origin;
    assert.notEqual(pageOrigin, edgeOrigin);
    assert.match(pageOrigin, /^http:\/\/localhost:\d+$/);
    assert.match(edgeOrigin, /^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('creates a JSON stream, appends with IdempotentProducer (preflighted), tails with SSE into the DOM', async (t) => {
    const url = edge.url + uniquePath('/v1/stream/browser');
    const preflightsBefore = await edgeCount({ route: 'preflight', status: '204' });

    assert.deepEqual(await app('create', { url, headers: JSON_ACCEPT }), { contentType: 'application/json' });
    await app('tail', { id: 'main', url, headers: JSON_ACCEPT, title: 'SSE tail (open account)' });
    const messages = [{ n: 1, text: 'hello' }, { n: 2, text: 'wörld' }, { n: 3, list: [1, 2, 3] }];
    const appended = await app('append', { url, headers: JSON_ACCEPT, producerId: 'page-1', messages });
    assert.deepEqual(appended.errors, []);
    // The producer read Stream-Next-Offset from the answer: an exposed header.
    assert.equal(appended.lastSuccessfulOffset, endOffset(messages));

    await waitFor(async () => (await texts('main')).length >= 3, { message: 'three messages in the DOM' });
    assert.deepEqual(await texts('main'), messages.map((m) => JSON.stringify(m)));
    assert.equal(await status('main'), 'live');

    // PUT and the producer's POST (custom headers) need a preflight; the
    // browser sent it, and the answer let the requests through.
    const preflightsAfter = await edgeCount({ route: 'preflight', status: '204' });
    assert.ok(preflightsAfter > preflightsBefore, `preflights ${preflightsBefore} -> ${preflightsAfter}`);
    assert.equal(await edgeCount({ route: 'preflight' }), preflightsAfter, 'every preflight answered 204');

    await screenshot(t);
  });

  it('JS reads the exposed protocol headers, and not the unexposed ones', async () => {
    const url = edge.url + uniquePath('/v1/stream/browser-headers');
    await app('create', { url, headers: JSON_ACCEPT });
    const post = await app('rawFetch', {
      url,
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'Producer-Id': 'raw', 'Producer-Epoch': '0', 'Producer-Seq': '0' },
      body: '[{"k":1},{"k":2}]',
      read: ['stream-offset', 'stream-next-offset', 'producer-outcome', 'producer-epoch', 'producer-seq', 'stream-incarnation'],
    });
    assert.equal(post.ok, true, post.error);
    assert.equal(post.status, 200);
    assert.equal(post.headers['stream-offset'], '0000000000000000');
    assert.equal(post.headers['stream-next-offset'], '0000000000000010');
    assert.equal(post.headers['producer-outcome'], 'accepted');
    assert.equal(post.headers['producer-epoch'], '0');
    assert.equal(post.headers['producer-seq'], '0');
    assert.match(post.headers['stream-incarnation'] ?? '', /\S/);

    const read = await app('rawFetch', {
      url: `${url}?offset=-1`,
      headers: JSON_ACCEPT,
      read: ['content-type', 'stream-next-offset', 'stream-up-to-date', 'etag', 'x-content-type-options', 'cross-origin-resource-policy'],
    });
    assert.equal(read.ok, true, read.error);
    assert.equal(read.status, 200);
    assert.deepEqual(JSON.parse(read.body), [{ k: 1 }, { k: 2 }]);
    assert.equal(read.headers['content-type'], 'application/json');
    assert.equal(read.headers['stream-next-offset'], '0000000000000010');
    assert.equal(read.headers['stream-up-to-date'], 'true');
    assert.match(read.headers.etag ?? '', /^"/);
    // Not in Access-Control-Expose-Headers, so CORS hides them from JS.
    assert.equal(read.headers['x-content-type-options'], null);
    assert.equal(read.headers['cross-origin-resource-policy'], null);
  });

  it('an SSE tail continues without loss or duplicates across sessions the edge ends', async (t) => {
    const url = edge.url + uniquePath('/v1/stream/browser-sse');
    const sseBefore = sseRequests.length;
    const mine = () => sseRequests.slice(sseBefore).filter((r) => r.url.startsWith(url + '?'));
    await app('create', { url, headers: JSON_ACCEPT });
    await app('tail', { id: 'reconnect', url, headers: JSON_ACCEPT, title: `SSE tail, ${SSE_SESSION} sessions` });

    const phases = [
      [{ phase: 1, i: 0 }, { phase: 1, i: 1 }],
      [{ phase: 2, i: 0 }, { phase: 2, i: 1 }, { phase: 2, i: 2 }],
      [{ phase: 3, i: 0 }],
    ];
    const sent = [];
    for (const [k, batch] of phases.entries()) {
      if (k > 0) {
        // Wait until the edge ended one more session, then append at once:
        // the messages land while the client reconnects.
        await waitFor(() => mine().filter((r) => r.finished).length >= k, {
          timeout: 10_000,
          message: `SSE session ${k} to end`,
        });
      }
      const result = await app('append', { url, headers: JSON_ACCEPT, producerId: 'sse-writer', messages: batch });
      assert.deepEqual(result.errors, []);
      sent.push(...batch);
      await waitFor(async () => (await texts('reconnect')).length >= sent.length, {
        timeout: 10_000,
        message: `${sent.length} messages in the DOM`,
      });
    }
    const close = await app('close', { url, producerId: 'sse-writer' });
    await waitFor(async () => (await status('reconnect')) === 'closed', { message: 'the tail to see the close' });

    assert.deepEqual(await texts('reconnect'), sent.map((m) => JSON.stringify(m)));
    const sessions = mine();
    assert.ok(sessions.length >= 3, `at least 3 SSE sessions, saw ${sessions.length}`);
    // Each session ended as a complete answer (the edge ended it), none failed.
    assert.deepEqual(sessions.filter((r) => r.failed).map((r) => `${r.url}: ${r.failed}`), []);
    // Every reconnect resumes at an offset past the start, never from -1.
    const offsets = sessions.map((r) => new URL(r.url).searchParams.get('offset'));
    for (const o of offsets.slice(1)) assert.match(o, /^[0-9a-f]{16}$/);
    assert.ok(offsets.slice(1).every((o, j) => o >= offsets[j]), `offsets never go back: ${offsets}`);
    assert.ok(offsets.at(-1) > '0000000000000000');
    assert.equal(await page.locator('#reconnect .status').textContent(), `closed at ${close.finalOffset}`);
    await screenshot(t);
  });

  it('a keyed account works cross-origin with Authorization: Bearer (create, produce, SSE, read)', async () => {
    const url = edge.url + uniquePath('/acme/s.browser');
    const auth = { ...JSON_ACCEPT, Authorization: `Bearer ${key}` };
    assert.deepEqual(await app('create', { url, headers: auth }), { contentType: 'application/json' });
    await app('tail', { id: 'acme', url, headers: auth, title: 'SSE tail, account acme with a key' });
    const messages = [{ secret: false, n: 1 }, { secret: false, n: 2 }];
    const appended = await app('append', { url, headers: auth, producerId: 'acme-writer', messages });
    assert.deepEqual(appended.errors, []);
    await waitFor(async () => (await texts('acme')).length >= 2, { message: 'the keyed tail to show two messages' });
    assert.deepEqual(await texts('acme'), messages.map((m) => JSON.stringify(m)));
    const all = await app('readAll', { url, headers: auth });
    assert.deepEqual(all.items, messages);
  });

  it('a keyed stream without a credential: the origin\'s 401 is readable from JS', async () => {
    const url = origin.url + uniquePath('/acme/s.browser-noauth');
    const res = await app('rawFetch', { url: `${url}?offset=-1`, read: ['content-type'] });
    assert.equal(res.ok, true, res.error);
    assert.equal(res.status, 401);
    assert.equal(JSON.parse(res.body).error.code, 'UNAUTHORIZED');
  });

  it("a keyed stream without a credential: the edge's own 401 is readable from JS", async () => {
    const url = edge.url + uniquePath('/acme/s.browser-noauth');
    const res = await app('rawFetch', { url: `${url}?offset=-1`, read: ['content-type'] });
    assert.equal(res.ok, true, res.error);
    assert.equal(res.status, 401);
  });

  it("a fetch with credentials: 'include' is refused by the browser: the answer is Access-Control-Allow-Origin: *", async () => {
    const url = edge.url + uniquePath('/v1/stream/browser-cred');
    await app('create', { url, headers: JSON_ACCEPT });
    await app('append', { url, headers: JSON_ACCEPT, producerId: 'c', messages: [{ c: 1 }] });
    const target = `${url}?offset=-1`;

    const included = await app('rawFetch', { url: target, headers: JSON_ACCEPT, credentials: 'include' });
    assert.equal(included.ok, false, 'the browser must refuse a credentialed read answered with ACAO *');
    assert.match(included.error, /^TypeError/);

    // The same read without credentials goes through ...
    const omitted = await app('rawFetch', { url: target, headers: JSON_ACCEPT, credentials: 'omit' });
    assert.equal(omitted.ok, true, omitted.error);
    assert.deepEqual(JSON.parse(omitted.body), [{ c: 1 }]);

    // ... and the server answered both alike: wildcard, no credentials allowed.
    const direct = await fetch(target, { headers: { ...JSON_ACCEPT, Origin: new URL(site.url).origin } });
    assert.equal(direct.status, 200);
    assert.equal(direct.headers.get('access-control-allow-origin'), '*');
    assert.equal(direct.headers.get('access-control-allow-credentials'), null);
    await direct.arrayBuffer();
  });
});

/** The end offset of a JSON stream holding `messages`: one line each. */
function endOffset(messages) {
  const bytes = messages.reduce((n, m) => n + Buffer.byteLength(JSON.stringify(m)) + 1, 0);
  return bytes.toString(16).padStart(16, '0');
}

let shotDir;
/** A full-page screenshot, kept after the run (not in a tmpDir()), named in the test's diagnostics. */
async function screenshot(t) {
  shotDir ??= mkdtempSync(path.join(tmpdir(), 'ds-e2e-screenshots-'));
  const file = path.join(shotDir, `${t.name.slice(0, 40).replace(/[^a-z0-9]+/gi, '-')}.png`);
  await page.screenshot({ path: file, fullPage: true });
  assert.equal(readFileSync(file).subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'a PNG');
  t.diagnostic(`screenshot: ${file}`);
}
