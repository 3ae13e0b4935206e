// The browser side of the e2e tests: bundle e2e/browser/page.js with esbuild,
// serve it from its own origin, and drive headless Debian Chromium.
//
//   bundlePage()                   -> directory holding page.html and page.js
//   servePage(dir)                 -> { url, port, requests, stop() }  (http://localhost:PORT/)
//   launchBrowser({userDataDir})   -> playwright BrowserContext
//   CHROMIUM                       CHROMIUM_PATH or /usr/bin/chromium
import http from 'node:http';
import { copyFileSync, existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';
import { chromium } from 'playwright-core';
import { tmpDir } from './stack.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const PAGE_SRC = path.resolve(here, '..', 'browser');

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Bundles the page (the client included) into a fresh temp dir. */
export async function bundlePage() {
  const out = tmpDir('ds-page-');
  await esbuild.build({
    entryPoints: [path.join(PAGE_SRC, 'page.js')],
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'chrome110',
    outfile: path.join(out, 'page.js'),
    logLevel: 'warning',
  });
  copyFileSync(path.join(PAGE_SRC, 'page.html'), path.join(out, 'page.html'));
  return out;
}

const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8' };

/**
 * Serves `dir` on 127.0.0.1, addressed as http://localhost:PORT so that its
 * origin differs from the servers' (http://127.0.0.1:…) by host and port.
 */
export function servePage(dir) {
  const requests = [];
  const server = http.createServer((req, res) => {
    requests.push(`${req.method} ${req.url}`);
    const name = req.url === '/' ? 'page.html' : req.url.replace(/^\/+/, '').split('?')[0];
    const file = path.join(dir, path.basename(name));
    if (req.method !== 'GET' || !existsSync(file)) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    res.writeHead(200, {
      'content-type': TYPES[path.extname(file)] ?? 'application/octet-stream',
      'cache-control': 'no-store',
    });
    res.end(readFileSync(file));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      resolve({
        url: `http://localhost:${port}/`,
        port,
        requests,
        stop: () =>
          new Promise((done) => {
            server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
  });
}

/** Headless Chromium with a fresh profile. */
export async function launchBrowser({ userDataDir = tmpDir('ds-chromium-') } = {}) {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} not found: apt-get install -y chromium, or set CHROMIUM_PATH`);
  }
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1000, height: 800 },
  });
}
