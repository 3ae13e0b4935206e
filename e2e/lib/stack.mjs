// Real origin and edge processes on loopback for end-to-end tests.
//
// API (kept stable; other test files rely on it):
//
//   BIN_DIR                          DS_BIN_DIR or <repo>/target/release
//   tmpDir(prefix?)                  fresh directory under the OS temp dir (removed at exit)
//   startOrigin({jsonReads, args, dataDir, env, keepData})
//       -> { url, addr, dataDir, process, log(), waitForLog(re, ms), stop(), kill() }
//   startEdge({origin, args, cache, env})
//       -> { url, addr, process, log(), waitForLog(re, ms), stop(), kill() }
//   startStack({jsonReads, originArgs, edgeArgs})
//       -> { origin, edge, stop() }        (edge in front of origin)
//   createKey({dataDir, account, readOnly, prefix, agent}) -> "dsk_…"
//       (runs `origin keys create`; do it before startOrigin on that dataDir
//        or let the running origin pick the key store up itself)
//   scrapeMetrics(url)              -> [{ name, labels, value }]
//   readMetric(url, name, labels?)  -> sum of the samples of `name` whose labels
//                                      include `labels`, or undefined if none
//   waitFor(fn, {timeout, interval, message}) -> fn's first truthy result
//   spawnProcess(name, file, args, env, {logLimit})
//       -> { process, log(), exited, exitInfo(), waitForLog(re, ms), stop(), kill() }
//       (any process, tracked like the servers; see its comment)
//   stopInOrder(...servers)          stops each in turn (undefined skipped),
//                                      then throws the first failure
//
// stop() sends SIGTERM, awaits the exit (bounded) and throws unless the
// process exited by itself with code 0. Every process started here is
// SIGKILLed when the test process exits, however it exits, so a failed test
// never leaves a server behind; tests should still call stop() in an
// after() hook to check the clean shutdown.

import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(here, '..', '..');
export const BIN_DIR = process.env.DS_BIN_DIR
  ? path.resolve(process.env.DS_BIN_DIR)
  : path.join(REPO_ROOT, 'target', 'release');

const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 15_000;
const LOG_LIMIT = 4 * 1024 * 1024; // bytes of log kept per process

const live = new Set(); // child processes not yet exited
const tmpDirs = new Set();

function killAll() {
  for (const child of live) {
    try {
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
  if (!process.env.DS_KEEP_TMP) {
    for (const dir of tmpDirs) {
      try {
        rmSync(dir, { recursive: true, force: true });
      } catch {
        // best effort
      }
    }
  }
}
process.on('exit', killAll);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killAll();
    process.kill(process.pid, signal);
  });
}

/** A fresh temporary directory, removed when the test process exits (unless DS_KEEP_TMP is set). */
export function tmpDir(prefix = 'ds-e2e-') {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  tmpDirs.add(dir);
  return dir;
}

function binary(name) {
  const file = path.join(BIN_DIR, name);
  if (!existsSync(file)) {
    throw new Error(`${file} not found: build it (cargo build --release -p ${name}) or set DS_BIN_DIR`);
  }
  return file;
}

// eslint-disable-next-line no-control-regex
const ANSI = /\x1b\[[0-9;]*m/g;

/** Polls `fn` until it returns a truthy value (returned), or throws after `timeout` ms. */
export async function waitFor(fn, { timeout = 10_000, interval = 25, message = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let lastError;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() >= deadline) {
      const why = lastError ? ` (last error: ${lastError.message})` : '';
      throw new Error(`timed out after ${timeout} ms waiting for ${message}${why}`);
    }
    await new Promise((resolve) => setTimeout(resolve, interval));
  }
}

/**
 * Spawns `file args` with exactly `env` as its environment, and tracks it:
 * stdout+stderr are collected as its log (ANSI colours stripped, the last
 * `logLimit` bytes kept), its exit is recorded, and it is SIGKILLed when the
 * test process exits.
 *
 *   -> { process, log(), exited, exitInfo(), waitForLog(re, ms), stop(), kill() }
 *
 * `exited` resolves with {code, signal}; exitInfo() is that, or null while it
 * runs. waitForLog resolves with the first match of `re` in the log and
 * rejects if the process exits first or `ms` pass. stop() sends SIGTERM,
 * awaits the exit (at most STOP_TIMEOUT_MS, then SIGKILL) and throws unless
 * the process exited by itself with code 0; repeated calls share one stop.
 * kill() sends SIGKILL (unless it has exited) and resolves with the exit.
 */
export function spawnProcess(name, file, args, env, { logLimit = LOG_LIMIT } = {}) {
  const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  live.add(child);
  let text = '';
  const watchers = new Set();
  const onData = (chunk) => {
    text += chunk.toString('utf8').replace(ANSI, '');
    if (text.length > logLimit) text = text.slice(text.length - logLimit);
    for (const w of watchers) w();
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);

  let exitInfo = null;
  const exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => {
      live.delete(child);
      exitInfo = { code, signal };
      for (const w of watchers) w();
      resolve(exitInfo);
    });
  });
  child.once('error', (err) => {
    text += `\n[spawn error] ${err.message}\n`;
    for (const w of watchers) w();
  });

  const log = () => text;
  const waitForLog = (re, timeout = 10_000) =>
    new Promise((resolve, reject) => {
      const check = () => {
        const m = text.match(re);
        if (m) {
          done();
          resolve(m);
        } else if (exitInfo) {
          done();
          reject(new Error(`${name} exited (${JSON.stringify(exitInfo)}) before its log matched ${re}:\n${text}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`${name}: log did not match ${re} within ${timeout} ms:\n${text}`));
      }, timeout);
      const done = () => {
        clearTimeout(timer);
        watchers.delete(check);
      };
      watchers.add(check);
      check();
    });

  let stopping = null;
  const stop = () => {
    if (!stopping) {
      stopping = (async () => {
        if (!exitInfo) child.kill('SIGTERM');
        const result = await Promise.race([
          exited,
          new Promise((resolve) => setTimeout(() => resolve(null), STOP_TIMEOUT_MS).unref()),
        ]);
        if (!result) {
          child.kill('SIGKILL');
          await exited;
          throw new Error(`${name} did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM:\n${tail(text)}`);
        }
        if (result.code !== 0) {
          throw new Error(`${name} exited uncleanly after SIGTERM (${JSON.stringify(result)}):\n${tail(text)}`);
        }
        return result;
      })();
    }
    return stopping;
  };
  const kill = async () => {
    if (!exitInfo) child.kill('SIGKILL');
    return exited;
  };

  return { process: child, log, exited, exitInfo: () => exitInfo, waitForLog, stop, kill };
}

/**
 * spawnProcess with the test environment (NO_COLOR, RUST_LOG=info unless
 * set, plus `env`), resolved once a log line names `addr=HOST:PORT`.
 */
async function spawnServer(name, file, args, env) {
  const proc = spawnProcess(name, file, args, {
    ...process.env,
    NO_COLOR: '1',
    RUST_LOG: process.env.RUST_LOG ?? 'info',
    ...env,
  });
  const match = await proc.waitForLog(/addr=(\d+\.\d+\.\d+\.\d+:\d+)/, START_TIMEOUT_MS).catch((err) => {
    proc.process.kill('SIGKILL');
    throw err;
  });
  const addr = match[1];
  const { process: child, log, waitForLog, stop, kill, exited } = proc;
  return { url: `http://${addr}`, addr, process: child, log, waitForLog, stop, kill, exited };
}

/**
 * Stops `servers` one after the other, in the order given (front to back:
 * each forwards to the next), skipping undefined ones; every stop is tried,
 * then the first failure, if any, is thrown.
 */
export async function stopInOrder(...servers) {
  const results = [];
  for (const server of servers) {
    results.push(...(await Promise.allSettled([server?.stop()])));
  }
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

function tail(text, lines = 40) {
  return text.split('\n').slice(-lines).join('\n');
}

/**
 * Starts `origin --listen 127.0.0.1:0 --data <dir>` (`--json-reads array`
 * when asked) plus `args`.
 */
export async function startOrigin({ jsonReads = 'ndjson', args = [], dataDir, env = {} } = {}) {
  const data = dataDir ?? tmpDir('ds-origin-');
  const argv = ['--listen', '127.0.0.1:0', '--data', data];
  if (jsonReads === 'array') argv.push('--json-reads', 'array');
  else if (jsonReads !== 'ndjson') throw new Error(`jsonReads must be 'ndjson' or 'array', not ${jsonReads}`);
  argv.push(...args);
  const server = await spawnServer('origin', binary('origin'), argv, env);
  return { ...server, dataDir: data };
}

/** Starts `edge --listen 127.0.0.1:0 --origin URL --cache 256MiB` plus `args`. */
export async function startEdge({ origin, args = [], cache = '256MiB', env = {} } = {}) {
  if (!origin) throw new Error('startEdge needs {origin: url}');
  const originUrl = typeof origin === 'string' ? origin : origin.url;
  const argv = ['--listen', '127.0.0.1:0', '--origin', originUrl, '--cache', cache, ...args];
  return spawnServer('edge', binary('edge'), argv, env);
}

/** An origin and an edge in front of it; stop() stops the edge, then the origin. */
export async function startStack({ jsonReads = 'ndjson', originArgs = [], edgeArgs = [], dataDir } = {}) {
  const origin = await startOrigin({ jsonReads, args: originArgs, dataDir });
  let edge;
  try {
    edge = await startEdge({ origin: origin.url, args: edgeArgs });
  } catch (err) {
    await origin.kill();
    throw err;
  }
  return {
    origin,
    edge,
    stop: () => stopInOrder(edge, origin),
  };
}

/** Runs `origin keys create` on a data directory and returns the key it printed. */
export function createKey({ dataDir, account, readOnly = false, prefix, agent = false }) {
  const args = ['keys', 'create', '--account', account, '--data', dataDir];
  if (readOnly) args.push('--read-only');
  if (prefix) args.push('--prefix', prefix);
  if (agent) args.push('--agent');
  return new Promise((resolve, reject) => {
    execFile(binary('origin'), args, { env: { ...process.env, NO_COLOR: '1' }, timeout: 10_000 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`origin keys create failed: ${err.message}\n${stderr}`));
      const key = stdout.split('\n').map((l) => l.trim()).find((l) => l.startsWith('dsk_'));
      if (!key) return reject(new Error(`origin keys create printed no key:\n${stdout}\n${stderr}`));
      resolve(key);
    });
  });
}

/** Parses Prometheus text into samples: [{name, labels, value}]. */
export function parseMetrics(text) {
  const samples = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\d+)?$/);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    samples.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return samples;
}

/** GET {url}/metrics, parsed. */
export async function scrapeMetrics(url) {
  const res = await fetch(new URL('/metrics', url), { signal: AbortSignal.timeout(5_000) });
  if (res.status !== 200) throw new Error(`GET ${url}/metrics answered ${res.status}`);
  return parseMetrics(await res.text());
}

/**
 * The sum of the samples named `name` whose labels include every pair of
 * `labels` (undefined when no sample matches).
 */
export async function readMetric(url, name, labels = {}) {
  const samples = await scrapeMetrics(url);
  let sum;
  for (const s of samples) {
    if (s.name !== name) continue;
    if (!Object.entries(labels).every(([k, v]) => s.labels[k] === String(v))) continue;
    sum = (sum ?? 0) + s.value;
  }
  return sum;
}

let counter = 0;
/** A stream path unique within this test process. */
export function uniquePath(prefix = '/v1/stream/e2e') {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}
