vcl 4.1;
# Varnish in front of one durable-streams edge (deploy/varnish/README.md).
#
# Written for Varnish 7.1 (Debian 12's package); nothing here is newer than
# that. Varnish's own built-in VCL still runs after every subroutine below
# that does not return: the Authorization / Cookie pass, the Host check,
# hit-for-miss of uncacheable answers. The rules below only add what the
# protocol needs, and never `return (hash)` or `return (lookup)`, so the
# built-in safety checks are never skipped for a request that can be cached.
#
# The protocol decides freshness: the edge (and the origin behind it) says in
# Cache-Control how long each answer may be kept (README "Caching"):
#   reads with bytes, long-poll 200s   public, max-age=60, stale-while-revalidate=300
#   complete chunks and snapshots      public, max-age=31536000, immutable
#   empty reads at the open end, offset=now, long-poll 204, HEAD, errors
#                                      no-store
#   SSE                                no-cache
#   any answer to a credentialed request
#                                      private
# Varnish honours those as they are (max-age -> TTL, stale-while-revalidate ->
# grace). The only TTLs set here are the "waiting list only" ones of
# long-polls, below.
#
# Machine-readable summary. scripts/check-cdn-rules (run by
# scripts/check-terraform) checks that terraform/cdn.tf's CloudFront
# behaviours say the same, and e2e/varnish.test.mjs checks that this VCL
# answers what the `refuse` lines say. One rule per line:
# `@cdn <rule> <args> -- <why>`.
#
# @cdn refuse /_admin 404 -- admin API: never through a shared cache
# @cdn allow POST /_auth/token -- key-for-token exchange: passed, never cached
# @cdn refuse /_auth/ 403 -- the rest of /_auth (edges ask the origin for the public key)
# @cdn refuse /_ 404 -- every other reserved /_ path
# @cdn refuse-exact /metrics 404 -- the edge's metrics are for the operators' scraper
# @cdn immutable */incarnation/*/chunk/* -- cached per Cache-Control, keyed by the path alone
# @cdn immutable */incarnation/*/snapshot/* -- the same for snapshots
# @cdn key-query offset cursor live max_bytes -- select the bytes or the collapse group
# @cdn forward-query timeout_ms consistency -- reach the edge, change neither
# @cdn key-header Stream-Incarnation -- a read naming an incarnation never gets another's answer
# @cdn vary Accept -- JSON streams' reads: arrays or NDJSON by Accept
# @cdn never-shared Authorization -- passed here; keyed and `private` (not stored) at CloudFront
# @cdn no-cookies -- the servers never read cookies: none selects or reaches a shared answer
# @cdn ttl-from-edge -- the edge's Cache-Control decides; without it nothing is stored
# @cdn sse-not-cached live=sse -- passed here; keyed by `live` and `no-cache` there
# @cdn writes PUT POST PATCH DELETE -- passed to the edge, never cached

import std;

# The edge. deploy/varnish/run rewrites the two marked lines from $EDGE
# (host:port); as shipped they name the edge's default address.
backend edge {
    .host = "127.0.0.1"; # @edge-host
    .port = "4438"; # @edge-port
    .connect_timeout = 2s;
    # A long-poll answers within its timeout_ms (at most 60 s) plus the
    # edge's grace for a shared wait (10 s): the first byte may take 70 s.
    .first_byte_timeout = 75s;
    # A quiet SSE tail sends a keepalive comment every --sse-keepalive
    # (15 s by default). Keep this above it, or Varnish cuts quiet tails.
    .between_bytes_timeout = 75s;
    # Readiness: an edge that is draining (SIGTERM) or whose invalidation
    # feed has not caught up since it started answers 503 here, and Varnish
    # stops sending it requests. Healthy from the start (initial =
    # threshold), so a restart of Varnish sends at once.
    .probe = {
        .url = "/readyz";
        .interval = 2s;
        .timeout = 1s;
        .window = 3;
        .threshold = 2;
        .initial = 2;
    }
}

sub vcl_recv {
    # Our own marker between vcl_recv and vcl_backend_fetch; never a client's.
    unset req.http.X-DS-Tail;

    # ---- The servers' own endpoints -----------------------------------------
    # The first path segment may not begin with `_` for a stream: /_admin
    # (key management) and /_auth are the origin's. The admin API is for
    # operators, who reach the origin directly; a public cache never
    # routes it. POST /_auth/token exchanges an API key (Authorization) for
    # a token that the edge's caches accept; clients of a deployment whose
    # origin is private can only do that here, so it is passed (never
    # cached: POST, and credentialed). Everything else under /_auth is
    # refused: edges fetch the public key from the origin themselves.
    # Paths are compared as sent: the servers do not percent-decode them
    # either, so /%5Fadmin is no admin path to them.
    if (req.url ~ "^/_admin([/?].*)?$") {
        return (synth(404, "Not Found"));
    }
    if (req.url ~ "^/_auth/token(\?.*)?$" && req.method == "POST") {
        return (pass);
    }
    if (req.url ~ "^/_auth/") {
        return (synth(403, "Forbidden"));
    }
    if (req.url ~ "^/_") {
        return (synth(404, "Not Found"));
    }
    # /metrics is the edge's Prometheus text; /healthz its liveness and
    # /readyz its readiness, which a health check must see live.
    if (req.url ~ "^/metrics(\?.*)?$") {
        return (synth(404, "Not Found"));
    }
    if (req.url ~ "^/(healthz|readyz)(\?.*)?$") {
        return (pass);
    }

    # ---- Writes and HEAD: passed ----------------------------------------------
    # PUT/POST/DELETE/PATCH/OPTIONS are passed by the built-in VCL. HEAD is
    # passed here: on a miss Varnish would fetch a HEAD as a GET (to cache a
    # body), which for a stream is a whole read from offset -1 (up to 8 MiB)
    # whose answer (max-age=60) would then answer later HEADs with a stale
    # end. The edge marks HEAD no-store; it is always asked.
    if (req.method == "HEAD") {
        return (pass);
    }

    # ---- SSE: passed, streamed, never cached nor coalesced ---------------------
    # A tail is one long answer per reader: coalescing two readers onto one
    # fetch would make the second wait for the first to finish. `pass`
    # streams the body as the edge writes it (beresp.do_stream is on by
    # default): every event goes out when it comes in. The edge fans one
    # upstream tail out to all its readers itself.
    if (req.url ~ "[?&]live=sse(&|$)" || req.http.Accept ~ "(?i)text/event-stream") {
        return (pass);
    }

    # ---- Long-polls: coalesced -----------------------------------------------
    # Readers waiting at the same URL (offset, cursor, timeout_ms, ...) all
    # wait on one fetch (Varnish's waiting list), so N readers cost the edge
    # one request per append. The answer decides what is kept (see
    # vcl_backend_response).
    if (req.url ~ "[?&]live=long-poll(&|$)") {
        set req.http.X-DS-Tail = "long-poll";
    }

    # Everything else falls through to the built-in VCL: a request with
    # Authorization or Cookie is passed (never served from the cache, its
    # answer never stored), the rest is looked up.
}

sub vcl_hash {
    # A read that names an incarnation (Stream-Incarnation) must get that
    # incarnation's answer or a 412; keyed by it, it can never be served a
    # cached answer of another incarnation. The built-in hash (URL with its
    # whole query, Host) follows. `Vary: Accept` on JSON streams' reads is
    # honoured by Varnish itself (one variant per Accept value).
    if (req.http.Stream-Incarnation) {
        hash_data(req.http.Stream-Incarnation);
    }
}

sub vcl_backend_fetch {
    # (SSE tails live with the backend's timeouts above: a quiet tail sends
    # a keepalive comment every --sse-keepalive.)
    if (bereq.http.X-DS-Tail == "long-poll") {
        # Never make a long-poll conditional: a 304 would be merged into a
        # kept object, and conditional headers split the edge's collapse
        # groups (it keys them by If-None-Match).
        unset bereq.http.If-None-Match;
        unset bereq.http.If-Modified-Since;
    }
    unset bereq.http.X-DS-Tail;
}

sub vcl_backend_response {
    # What the cache knows of an object, for bans (vcl_deliver) and tests.
    set beresp.http.X-DS-Path = regsub(bereq.url, "\?.*$", "");

    # ---- An answer without freshness is not stored -----------------------------
    # Varnish would keep it for default_ttl (120 s); CloudFront's policies
    # here keep it for 0 s. The edge says Cache-Control on everything it
    # means to be cached.
    if (!beresp.http.Cache-Control && !beresp.http.Expires) {
        set beresp.ttl = 0s;
    }

    # ---- Long-polls: what is not to be stored goes to the waiting list only ----
    # A long-poll that times out answers 204 `no-store`. The built-in VCL
    # would turn it into a hit-for-miss object for 120 s: every reader
    # waiting on the fetch is then woken a few at a time, and each sends a
    # long-poll of its own (waiting the full timeout again), and for two
    # minutes readers at that URL are not coalesced at all. Instead the
    # answer is made an object that only the requests already waiting can
    # use: Varnish judges freshness against the time a request arrived
    # (complete), not the time it looks up, and every waiter arrived before
    # the answer did, so a TTL of 1 µs covers all of them, however long
    # their wake-up takes (a 1,000-reader wake-up takes milliseconds). A
    # request arriving later (even a client re-sending the same URL the
    # instant it got the 204) finds it stale, with no grace (so it is never
    # served stale), misses, and waits for a fresh fetch; keep holds the
    # object 10 s so that the expiry thread does not remove it while the
    # waiters are still being woken. (It is never used for a conditional
    # fetch: see vcl_backend_fetch. Varnish 7.1 skips objects whose TTL is
    # 0 entirely, so the TTL must be positive.)
    # The same holds for a long-poll 200 at offset=now, which the origin
    # marks cacheable although "now" moves on: a reader arriving later must
    # not get bytes appended before it asked. A `private` answer or one with
    # Set-Cookie is never shared; the built-in VCL handles them.
    if (bereq.url ~ "[?&]live=long-poll(&|$)") {
        if ((beresp.ttl <= 0s ||
             beresp.http.Cache-Control ~ "(?i)no-store|no-cache" ||
             bereq.url ~ "[?&]offset=now(&|$)") &&
            beresp.http.Cache-Control !~ "(?i)private" &&
            !beresp.http.Set-Cookie &&
            beresp.http.Vary != "*") {
            set beresp.ttl = 0.001ms;
            set beresp.grace = 0s;
            set beresp.keep = 10s;
            set beresp.http.X-DS-Shared = "waiters";
            return (deliver);
        }
    }

    # ---- Revalidation ------------------------------------------------------
    # A read answer names its bytes in its ETag. Past max-age and within
    # stale-while-revalidate (grace), Varnish answers from the object and
    # revalidates it in the background with If-None-Match, at most one
    # fetch at a time; keep lets it revalidate (a 304 refreshes the object
    # without a body) for an hour after that too.
    if (beresp.http.ETag && beresp.ttl > 0s) {
        set beresp.keep = 1h;
    }

    # The built-in VCL follows: no-store / no-cache / private, Set-Cookie
    # and `Vary: *` become hit-for-miss; the rest is stored for its TTL.
}

sub vcl_deliver {
    # Deleting a stream (or creating one anew: 201) makes the cached reads
    # of its path describe an incarnation that is gone; they are banned
    # (chunk and snapshot URLs name the incarnation and need no ban). Reads
    # cached elsewhere (other Varnish instances, a CDN) run out with their
    # max-age, as the origin intends.
    if ((req.method == "DELETE" && resp.status >= 200 && resp.status < 300) ||
        (req.method == "PUT" && resp.status == 201)) {
        # The ban string is split at white space, which a URL never holds:
        # the path stays one value, never more ban syntax (std.ban does not
        # strip quotes, so it is not quoted).
        if (!std.ban("obj.http.X-DS-Path == " + regsub(req.url, "\?.*$", ""))) {
            std.log("ban failed: " + std.ban_error());
        }
    }
    # Whether the answer came from the cache (for operators and tests).
    if (obj.uncacheable) {
        set resp.http.X-Cache = "pass";
    } elsif (obj.hits > 0) {
        set resp.http.X-Cache = "hit";
    } else {
        set resp.http.X-Cache = "miss";
    }
    unset resp.http.X-DS-Path;
    unset resp.http.X-DS-Shared;
}

# Refusals in the shape of the servers' own errors (shared/src/error.rs).
sub vcl_synth {
    if (resp.status == 404 || resp.status == 403) {
        set resp.http.Content-Type = "application/json";
        set resp.http.Cache-Control = "no-store";
        set resp.http.X-Content-Type-Options = "nosniff";
        if (resp.status == 404) {
            set resp.body = """{"error":{"code":"NOT_FOUND","message":"not found"}}""";
        } else {
            set resp.body = """{"error":{"code":"FORBIDDEN","message":"not served here"}}""";
        }
        return (deliver);
    }
}

# The edge unreachable or too slow: 503 as the edge itself refuses.
sub vcl_backend_error {
    set beresp.http.Content-Type = "application/json";
    set beresp.http.Cache-Control = "no-store";
    set beresp.http.Retry-After = "1";
    set beresp.body = """{"error":{"code":"UNAVAILABLE","message":"the edge did not answer"}}""";
    # For the requests already waiting on this fetch only (as the long-poll
    # answers above): they all get the refusal at once, where a
    # hit-for-miss would wake them a few at a time, each to wait for the
    # edge again. A request arriving later asks the edge anew.
    set beresp.ttl = 0.001ms;
    set beresp.grace = 0s;
    set beresp.keep = 10s;
    return (deliver);
}
