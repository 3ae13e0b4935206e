// Small helpers for tests that drive @durable-streams/client.

/** Bounded retries for the client's fetches, so a stopped server ends a reader. */
export const BACKOFF = { initialDelay: 50, maxDelay: 500, multiplier: 2, maxRetries: 5 };

/** Rejects if `promise` has not settled within `ms`. */
export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** An AbortSignal aborted when test `t` ends, whatever its outcome (stops its readers). */
export function testSignal(t) {
  const controller = new AbortController();
  t.after(() => controller.abort(new Error('test ended')));
  return controller.signal;
}
