// CloudFront Function (cloudfront-js-2.0, viewer request) of the behaviours
// "/_*" and "/metrics" (cdn.tf): refuses the servers' own endpoints at the
// CDN, as deploy/varnish/edge.vcl does. scripts/check-cdn-rules reads the
// two tables below (one entry a line) and compares them with the VCL's
// `@cdn refuse`, `@cdn refuse-exact` and `@cdn allow` lines.
//
// Paths are compared as sent, as the servers compare them (they do not
// percent-decode): /%5Fadmin is no admin path to them either.

// [method, path]: passed on to the edges.
var ALLOWED = [
  ['POST', '/_auth/token'],
];

// [path, match, status], first match wins: 'prefix' or 'exact'.
var REFUSED = [
  ['/_admin', 'prefix', 404],
  ['/_auth/', 'prefix', 403],
  ['/_', 'prefix', 404],
  ['/metrics', 'exact', 404],
];

var REASONS = { 403: 'Forbidden', 404: 'Not Found' };

function handler(event) {
  var request = event.request;
  var uri = request.uri;
  var i;
  for (i = 0; i < ALLOWED.length; i++) {
    if (request.method === ALLOWED[i][0] && uri === ALLOWED[i][1]) {
      return request;
    }
  }
  for (i = 0; i < REFUSED.length; i++) {
    var path = REFUSED[i][0];
    var hit = REFUSED[i][1] === 'exact' ? uri === path : uri.indexOf(path) === 0;
    if (hit) {
      var status = REFUSED[i][2];
      return {
        statusCode: status,
        statusDescription: REASONS[status],
        headers: {
          'cache-control': { value: 'no-store' },
          'x-content-type-options': { value: 'nosniff' },
        },
      };
    }
  }
  return request;
}
