// Starts the Node reference server (@durable-streams/server, pinned in
// package.json) for `ds-load peers`: in memory, or file-backed with
// --data-dir. The package has no start command of its own.
//
//   node server.mjs [--host 127.0.0.1] [--port 0] [--data-dir DIR]
//
// The first stdout line names the address, in the form the origin uses
// ("... addr=HOST:PORT"), so `ds-load` starts both the same way. Port 0
// picks a free port. SIGTERM and SIGINT stop the server cleanly.
import { DurableStreamTestServer } from '@durable-streams/server';

function parseArgs(argv) {
  const opts = { host: '127.0.0.1', port: 0, dataDir: undefined };
  for (let i = 0; i < argv.length; i++) {
    const value = argv[i + 1];
    switch (argv[i]) {
      case '--host': opts.host = value; i++; break;
      case '--port': opts.port = Number.parseInt(value, 10); i++; break;
      case '--data-dir': opts.dataDir = value; i++; break;
      default:
        console.error(`unknown argument ${argv[i]}`);
        process.exit(2);
    }
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
// The server logs with console.info (recovery, slow appends); send all of it
// to stderr so that stdout carries only the address line.
console.log = console.info = console.warn = console.error;
const server = new DurableStreamTestServer({
  host: opts.host,
  port: opts.port,
  dataDir: opts.dataDir,
});
const url = new URL(await server.start());
const mode = opts.dataDir ? `file-backed in ${opts.dataDir}` : 'in memory';
process.stdout.write(`node reference server listening addr=${url.host} (${mode})\n`);

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  await server.stop();
  process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
