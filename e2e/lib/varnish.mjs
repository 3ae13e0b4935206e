// Varnish in front of an edge, as a real process on loopback, for
// end-to-end tests (e2e/varnish.test.mjs).
//
//   varnishAvailable()                 -> path of varnishd, or null
//   startVarnish({edge, vclExtra, args, storage})
//       -> { url, addr, workdir, vcl, process, log(), stats(), counter(name),
//            counters(names), adm(...args), stop(), kill() }
//
// It runs deploy/varnish/run (the start script the project ships), which
// renders deploy/varnish/edge.vcl with the edge's address and becomes
// `varnishd -F -a 127.0.0.1:PORT -f VCL -n WORKDIR -s malloc,64m`. PORT is a
// free port found by binding port 0 first (a start that loses the port to
// another process is retried). startVarnish resolves once GET /healthz
// through Varnish answers 200 (passed to the edge: the whole chain is up).
// The process is run by stack.mjs's spawnProcess: stop() sends SIGTERM and
// expects varnishd to exit by itself with code 0, and every varnishd started
// here is SIGKILLed when the test process exits.

import { execFile } from 'node:child_process';
import { chmodSync, existsSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { REPO_ROOT, spawnProcess, tmpDir, waitFor } from './stack.mjs';

const RUN = path.join(REPO_ROOT, 'deploy', 'varnish', 'run');
export const VCL = path.join(REPO_ROOT, 'deploy', 'varnish', 'edge.vcl');
const START_TIMEOUT_MS = 20_000;
const LOG_LIMIT = 1024 * 1024;

const SBIN = ['/usr/sbin', '/usr/local/sbin', '/usr/bin', '/usr/local/bin'];

/** The varnishd binary, or null when Varnish is not installed. */
export function varnishAvailable() {
  for (const dir of [...(process.env.PATH ?? '').split(':').filter(Boolean), ...SBIN]) {
    const file = path.join(dir, 'varnishd');
    if (existsSync(file)) return file;
  }
  return null;
}

function toolPath() {
  const dirs = new Set([...(process.env.PATH ?? '').split(':').filter(Boolean), ...SBIN]);
  return [...dirs].join(':');
}

/** A port that was free a moment ago (bound to 127.0.0.1:0, then released). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function run(cmd, args, { timeout = 10_000 } = {}) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { env: { ...process.env, PATH: toolPath() }, timeout, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`${cmd} ${args.join(' ')} failed: ${err.message}\n${stderr}`));
      resolve(stdout);
    });
  });
}

async function spawnOnce({ edgeAddr, port, workdir, vclExtra, args, storage }) {
  const env = {
    ...process.env,
    PATH: toolPath(),
    EDGE: edgeAddr,
    LISTEN: `127.0.0.1:${port}`,
    VARNISH_WORKDIR: workdir,
    VARNISH_STORAGE: storage,
  };
  if (vclExtra) env.VARNISH_VCL_EXTRA = vclExtra;
  else delete env.VARNISH_VCL_EXTRA;
  const proc = spawnProcess('varnishd', RUN, args, env, { logLimit: LOG_LIMIT });
  const { exited, exitInfo, log } = proc;
  const url = `http://127.0.0.1:${port}`;
  try {
    // Up when /healthz answers 200 through Varnish; a varnishd that exits
    // (a VCL that does not compile, a port taken) fails at once.
    await Promise.race([
      waitFor(
        async () => {
          if (exitInfo()) return true; // the race below reports it
          const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2_000) });
          await res.arrayBuffer();
          return res.status === 200;
        },
        { timeout: START_TIMEOUT_MS, interval: 50, message: `varnishd on ${url} to pass /healthz to the edge` },
      ),
      exited.then((info) => {
        throw new Error(`varnishd exited ${JSON.stringify(info)} before it answered`);
      }),
    ]);
  } catch (err) {
    await proc.kill();
    throw Object.assign(new Error(`${err.message}\n${log()}`), { log: log(), exitInfo: exitInfo() });
  }
  return { ...proc, url };
}

/**
 * Starts Varnish with the shipped VCL in front of `edge` ({url} or
 * "http://host:port"). `vclExtra`: VCL text appended after the shipped
 * rules (deploy/varnish/run's VARNISH_VCL_EXTRA). `args`: more varnishd
 * arguments (e.g. ['-p', 'thread_pool_min=200']).
 */
export async function startVarnish({ edge, vclExtra, args = [], storage = 'malloc,64m' } = {}) {
  if (!varnishAvailable()) throw new Error('varnishd not found: apt-get install varnish');
  const edgeUrl = new URL(typeof edge === 'string' ? edge : edge.url);
  const edgeAddr = edgeUrl.host;
  const base = tmpDir('ds-varnish-');
  // varnishd's worker process drops root for its own user: it must be able
  // to walk into the working directory.
  chmodSync(base, 0o755);
  const workdir = path.join(base, 'work');
  let extraFile;
  if (vclExtra) {
    extraFile = path.join(base, 'extra.vcl');
    writeFileSync(extraFile, vclExtra);
  }
  let started;
  let lastError;
  for (let attempt = 0; attempt < 3 && !started; attempt++) {
    const port = await freePort();
    try {
      started = await spawnOnce({ edgeAddr, port, workdir, vclExtra: extraFile, args, storage });
    } catch (err) {
      lastError = err;
      // Only a lost port is worth another try.
      if (!/Could not get socket|Address already in use|bind/i.test(err.log ?? '')) throw err;
    }
  }
  if (!started) throw lastError;
  const { process: child, url, log, stop, kill } = started;

  const stats = async () => {
    const out = await run('varnishstat', ['-n', workdir, '-j']);
    const json = JSON.parse(out);
    const counters = json.counters ?? json; // 7.x has {version, counters}; 6.0 a flat map
    const values = {};
    for (const [name, c] of Object.entries(counters)) {
      if (c && typeof c === 'object' && 'value' in c) values[name] = c.value;
    }
    return values;
  };

  return {
    url,
    addr: new URL(url).host,
    workdir,
    vcl: path.join(workdir, 'ds-edge.vcl'),
    process: child,
    log,
    stats,
    /** One counter of `varnishstat -j` (e.g. 'MAIN.cache_hit'). */
    counter: async (name) => {
      const all = await stats();
      if (!(name in all)) throw new Error(`varnishstat has no counter ${name}`);
      return all[name];
    },
    /** Several counters at once: {name: value}. */
    counters: async (names) => {
      const all = await stats();
      return Object.fromEntries(names.map((n) => [n, all[n] ?? 0]));
    },
    /** varnishadm -n WORKDIR ARGS..., its output. */
    adm: (...a) => run('varnishadm', ['-n', workdir, ...a]),
    stop,
    kill,
  };
}
