// The browser side of e2e/browser.test.mjs: the official client in a page
// on another origin than the server. The test drives it through window.app
// and reads what it rendered from the DOM.
import { DurableStream, IdempotentProducer, stream } from '@durable-streams/client';

const BACKOFF = { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: 5 };
const producers = new Map();
const controllers = [];

document.getElementById('page-origin').textContent = location.origin;

function handle(url, headers) {
  return new DurableStream({ url, headers, contentType: 'application/json', warnOnHttp: false, backoffOptions: BACKOFF });
}

/** A section of the page showing one tail: its messages and its state. */
function tailSection(id, title) {
  const section = document.createElement('section');
  section.id = id;
  const h2 = document.createElement('h2');
  h2.textContent = title;
  const list = document.createElement('ul');
  list.className = 'messages';
  const status = document.createElement('p');
  status.className = 'status';
  status.dataset.state = 'connecting';
  status.textContent = 'connecting';
  section.append(h2, list, status);
  document.getElementById('tails').append(section);
  return { list, status };
}

function setStatus(status, state, text = state) {
  status.dataset.state = state;
  status.textContent = text;
}

window.app = {
  async create({ url, headers = {} }) {
    document.getElementById('server').textContent = new URL(url).origin;
    const h = await DurableStream.create({
      url, headers, contentType: 'application/json', warnOnHttp: false, backoffOptions: BACKOFF,
    });
    return { contentType: h.contentType ?? null };
  },

  /** Appends `messages` with one IdempotentProducer per (url, producerId). */
  async append({ url, headers = {}, producerId, messages }) {
    const key = `${url} ${producerId}`;
    let entry = producers.get(key);
    if (!entry) {
      const errors = [];
      const producer = new IdempotentProducer(handle(url, headers), producerId, {
        lingerMs: 0,
        onError: (e) => errors.push(`${e.name}: ${e.message}`),
      });
      entry = { producer, errors };
      producers.set(key, entry);
    }
    for (const m of messages) entry.producer.append(JSON.stringify(m));
    await entry.producer.flush();
    return { lastSuccessfulOffset: entry.producer.lastSuccessfulOffset ?? null, errors: entry.errors.slice() };
  },

  async close({ url, producerId }) {
    const entry = producers.get(`${url} ${producerId}`);
    const result = await entry.producer.close();
    return { finalOffset: result.finalOffset };
  },

  /** Tails `url` with SSE into a new section `id`; resolves once the first catch-up is shown. */
  async tail({ id, url, headers = {}, title = url }) {
    const { list, status } = tailSection(id, title);
    const controller = new AbortController();
    controllers.push(controller);
    const res = await stream({
      url, headers, live: 'sse', signal: controller.signal, warnOnHttp: false, backoffOptions: BACKOFF,
    });
    setStatus(status, 'live');
    (async () => {
      try {
        for await (const item of res.jsonStream()) {
          const li = document.createElement('li');
          li.textContent = JSON.stringify(item);
          list.append(li);
        }
        setStatus(status, res.streamClosed ? 'closed' : 'ended', res.streamClosed ? `closed at ${res.offset}` : 'ended');
      } catch (e) {
        setStatus(status, 'error', `${e.name}: ${e.message}`);
      }
    })();
    return { contentType: res.contentType ?? null };
  },

  /** Catch-up read of every JSON message. */
  async readAll({ url, headers = {} }) {
    const res = await stream({ url, headers, live: false, warnOnHttp: false, backoffOptions: BACKOFF });
    return { items: await res.json(), offset: res.offset, upToDate: res.upToDate };
  },

  /**
   * A plain fetch: what JS can see of the answer (status, the named headers:
   * null when CORS hides one), or how the browser refused it.
   */
  async rawFetch({ url, method = 'GET', headers = {}, body, credentials = 'same-origin', read = [] }) {
    try {
      const res = await fetch(url, { method, headers, body, credentials });
      const seen = {};
      for (const name of read) seen[name] = res.headers.get(name);
      const text = method === 'HEAD' ? '' : await res.text();
      return { ok: true, status: res.status, headers: seen, body: text };
    } catch (e) {
      return { ok: false, error: `${e.name}: ${e.message}` };
    }
  },

  stopAll() {
    for (const c of controllers) c.abort();
  },
};
document.body.dataset.ready = 'true';
