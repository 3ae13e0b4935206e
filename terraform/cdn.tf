# The CloudFront distribution in front of the edges, its cache and origin
# request policies, its security response headers, and its WAF. The README's
# "CloudFront cache behaviours" table explains every choice here.
#
# The behaviours express the same rules as deploy/varnish/edge.vcl (what is
# cached and by which key, what is passed, what is refused);
# scripts/check-cdn-rules compares the two and fails when they disagree.

locals {
  cdn_custom_cert      = var.cdn_certificate_arn != ""
  origin_verify_header = "X-DS-Origin-Verify"
  alb_origin_id        = "edges"

  # The request headers the protocol reads (origin/src/http/request.rs)
  # that change no cacheable read. The ones that do are in the stream reads'
  # cache key instead, which forwards them too: Authorization (CloudFront
  # forwards it on GET/HEAD only when it is part of the key), Accept (JSON
  # streams' reads are arrays or NDJSON by Accept) and Stream-Incarnation (a
  # read naming an incarnation must never get another incarnation's cached
  # answer). CORS needs nothing forwarded: the edge answers `*` and static
  # preflights. (An origin request policy holds at most 10 headers by
  # default.) CloudFront-Viewer-Address names the client, which the origin
  # counts anonymous writers' share of its ingress budget by
  # (ORIGIN_CLIENT_ADDRESS_HEADER in templates/origin.sh.tftpl).
  protocol_headers = [
    "Content-Type",
    "Producer-Id", "Producer-Epoch", "Producer-Seq",
    "Stream-Seq", "Stream-TTL", "Stream-Expires-At", "Stream-Closed",
    "CloudFront-Viewer-Address",
  ]


  # Error answers CloudFront would otherwise cache for 10 s. Cached under a
  # key that leaves out forwarded-but-unkeyed parameters (timeout_ms,
  # consistency), one bad request could poison the key for others.
  uncached_errors = [400, 403, 404, 405, 414, 416, 500, 501, 502, 503, 504]
}

# The secret CloudFront adds to every origin request; the balancer forwards
# only requests that carry it (edge.tf). No `*` or `?`: the listener rule
# treats them as wildcards.
resource "random_password" "origin_verify" {
  length  = 40
  special = false
}

# ---- cache policies -----------------------------------------------------------

# Chunk and snapshot URLs: the path is the whole key. Authorization is in the
# key only so that CloudFront forwards it to the edge and never answers a
# credentialed request from an anonymous entry (or the other way round); the
# edge marks credentialed answers `private`, which CloudFront does not store
# because min_ttl is 0. Without Cache-Control nothing is stored (default 0);
# immutable answers say max-age=31536000, which max_ttl allows.
resource "aws_cloudfront_cache_policy" "immutable" {
  name        = "${var.name}-immutable-chunks"
  comment     = "Chunk and snapshot URLs: key = path (+ Authorization when present); TTL from the edge's Cache-Control"
  min_ttl     = 0
  default_ttl = 0
  max_ttl     = 31536000

  parameters_in_cache_key_and_forwarded_to_origin {
    enable_accept_encoding_gzip   = true
    enable_accept_encoding_brotli = true

    query_strings_config {
      query_string_behavior = "none"
    }
    headers_config {
      header_behavior = "whitelist"
      headers {
        items = ["Authorization"]
      }
    }
    cookies_config {
      cookie_behavior = "none"
    }
  }
}

# Stream reads: the key is the path and exactly the query parameters that
# select the bytes (offset, max_bytes) or the collapse group (live, cursor),
# and the headers that select the answer: Accept (JSON streams' reads are
# arrays or NDJSON by Accept, and say `Vary: Accept`, which CloudFront does
# not read), Stream-Incarnation (a read naming another incarnation answers
# 412, never the cached bytes), Authorization (never an anonymous entry for
# a credentialed request). The edge sends max-age=60 for ranges with bytes
# and no-store / no-cache for open-ended answers, long-poll 204s and SSE;
# min_ttl 0 honours all of them.
resource "aws_cloudfront_cache_policy" "stream_reads" {
  name        = "${var.name}-stream-reads"
  comment     = "Stream reads: key = path + offset, cursor, live, max_bytes + Accept, Stream-Incarnation (+ Authorization); TTL from the edge"
  min_ttl     = 0
  default_ttl = 0
  max_ttl     = 31536000

  parameters_in_cache_key_and_forwarded_to_origin {
    enable_accept_encoding_gzip   = true
    enable_accept_encoding_brotli = true

    query_strings_config {
      query_string_behavior = "whitelist"
      query_strings {
        items = ["offset", "cursor", "live", "max_bytes"]
      }
    }
    headers_config {
      header_behavior = "whitelist"
      headers {
        # The last six are writes' headers that do not fit in the origin
        # request policy (10 at most): a fork's, a create's Stream-Public
        # and a snapshot publish's. Keyed, they are forwarded; no read
        # sends them, so no read's entry changes.
        items = [
          "Authorization", "Accept", "Stream-Incarnation",
          "Stream-Forked-From", "Stream-Fork-Offset", "Stream-Fork-Sub-Offset",
          "Stream-Public", "Stream-Snapshot-Match", "Stream-Snapshot-Parts",
        ]
      }
    }
    cookies_config {
      cookie_behavior = "none"
    }
  }
}

# ---- origin request policies ----------------------------------------------------

# Chunk and snapshot URLs forward nothing beyond the cache key: a query on
# them is meaningless (the edge would refuse it) and is dropped here.
resource "aws_cloudfront_origin_request_policy" "immutable" {
  name    = "${var.name}-immutable-chunks"
  comment = "Forward nothing beyond the cache key"

  query_strings_config {
    query_string_behavior = "none"
  }
  headers_config {
    header_behavior = "none"
  }
  cookies_config {
    cookie_behavior = "none"
  }
}

# Streams: the protocol's request headers (needed by writes) and the two
# read parameters that change neither the bytes nor the collapse group.
resource "aws_cloudfront_origin_request_policy" "streams" {
  name    = "${var.name}-streams"
  comment = "Protocol headers for writes; timeout_ms and consistency forwarded but not keyed"

  query_strings_config {
    query_string_behavior = "whitelist"
    query_strings {
      items = ["timeout_ms", "consistency"]
    }
  }
  headers_config {
    header_behavior = "whitelist"
    headers {
      items = local.protocol_headers
    }
  }
  cookies_config {
    cookie_behavior = "none"
  }
}

# ---- the servers' own endpoints --------------------------------------------------

# Refuses them at the CDN, before any cache or origin: the admin API (404),
# /_auth except the key-for-token exchange (403), every other reserved /_
# path (404) and the edge's /metrics (404). The table in the code is the
# one deploy/varnish/edge.vcl declares in its `@cdn refuse` lines
# (scripts/check-cdn-rules compares them). Answers generated at viewer
# request are never cached.
resource "aws_cloudfront_function" "reserved_paths" {
  name    = "${var.name}-reserved-paths"
  runtime = "cloudfront-js-2.0"
  comment = "Refuses /_admin, /_auth (but POST /_auth/token), /_*, /metrics"
  publish = true
  code    = file("${path.module}/functions/reserved-paths.js")
}

# ---- response headers -----------------------------------------------------------

resource "aws_cloudfront_response_headers_policy" "security" {
  name    = "${var.name}-security-headers"
  comment = "HSTS, nosniff, no referrer; CORS stays the edge's"

  security_headers_config {
    strict_transport_security {
      access_control_max_age_sec = 31536000
      include_subdomains         = true
      preload                    = true
      override                   = true
    }
    content_type_options {
      override = true
    }
    referrer_policy {
      referrer_policy = "no-referrer"
      override        = true
    }
    frame_options {
      frame_option = "DENY"
      override     = true
    }
  }
}

# ---- distribution ---------------------------------------------------------------

resource "aws_cloudfront_distribution" "main" {
  #checkov:skip=CKV_AWS_174:With an own certificate (cdn_certificate_arn, as in the example tfvars) the floor is TLSv1.2_2021; only the *.cloudfront.net fallback, where AWS accepts no other value, uses TLSv1. Checkov reads the fallback branch.
  #checkov:skip=CKV_AWS_310:One origin by design: the edges behind one balancer are the failover group already; a second origin would serve a different deployment's streams.
  #checkov:skip=CKV_AWS_305:An API, not a website: `/` is no document, and a default root object would rewrite it.
  #checkov:skip=CKV2_AWS_46:No S3 origin: the only origin is the edges' load balancer; the S3 bucket checkov connects to the distribution is the log bucket of logging_config.
  #checkov:skip=CKV_AWS_374:Streams are for clients anywhere; who may read is access control's job, not geography's.
  enabled         = true
  is_ipv6_enabled = true
  comment         = "${var.name}: durable streams"
  price_class     = var.cdn_price_class
  aliases         = var.cdn_aliases
  http_version    = "http2and3"
  web_acl_id      = aws_wafv2_web_acl.cdn.arn

  origin {
    origin_id   = local.alb_origin_id
    domain_name = var.alb_domain_name

    custom_origin_config {
      http_port                = 80
      https_port               = 443
      origin_protocol_policy   = "https-only"
      origin_ssl_protocols     = ["TLSv1.2"]
      origin_read_timeout      = var.cdn_origin_read_timeout
      origin_keepalive_timeout = var.cdn_origin_keepalive_timeout
    }

    custom_header {
      name  = local.origin_verify_header
      value = random_password.origin_verify.result
    }
  }

  # Stream reads (cached by offset/cursor/live/max_bytes, Accept and
  # Stream-Incarnation; SSE is `no-cache` and keyed apart by live), writes and HEAD
  # (never cached: CloudFront caches only GET/HEAD answers, and the edge marks
  # HEAD no-store).
  default_cache_behavior {
    target_origin_id           = local.alb_origin_id
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = aws_cloudfront_cache_policy.stream_reads.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.streams.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.security.id
    # CloudFront compresses only answers with a Content-Length, so SSE
    # (chunked, text/event-stream) is never compressed.
    compress = true
  }

  # The servers' own endpoints, first so that no other pattern routes them:
  # the function refuses them, except POST /_auth/token, which goes to the
  # edges as a write does (all methods are allowed here so that the
  # function, not CloudFront, answers every one of them).
  ordered_cache_behavior {
    path_pattern               = "/_*"
    target_origin_id           = local.alb_origin_id
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = aws_cloudfront_cache_policy.stream_reads.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.streams.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.security.id
    compress                   = true

    function_association {
      event_type   = "viewer-request"
      function_arn = aws_cloudfront_function.reserved_paths.arn
    }
  }

  ordered_cache_behavior {
    path_pattern               = "/metrics"
    target_origin_id           = local.alb_origin_id
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS", "PUT", "POST", "PATCH", "DELETE"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = aws_cloudfront_cache_policy.stream_reads.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.streams.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.security.id
    compress                   = true

    function_association {
      event_type   = "viewer-request"
      function_arn = aws_cloudfront_function.reserved_paths.arn
    }
  }

  ordered_cache_behavior {
    path_pattern               = "*/incarnation/*/chunk/*"
    target_origin_id           = local.alb_origin_id
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = aws_cloudfront_cache_policy.immutable.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.immutable.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.security.id
    compress                   = true
  }

  ordered_cache_behavior {
    path_pattern               = "*/incarnation/*/snapshot/*"
    target_origin_id           = local.alb_origin_id
    viewer_protocol_policy     = "https-only"
    allowed_methods            = ["GET", "HEAD", "OPTIONS"]
    cached_methods             = ["GET", "HEAD"]
    cache_policy_id            = aws_cloudfront_cache_policy.immutable.id
    origin_request_policy_id   = aws_cloudfront_origin_request_policy.immutable.id
    response_headers_policy_id = aws_cloudfront_response_headers_policy.security.id
    compress                   = true
  }

  dynamic "custom_error_response" {
    for_each = local.uncached_errors
    content {
      error_code            = custom_error_response.value
      error_caching_min_ttl = 0
    }
  }

  logging_config {
    bucket          = aws_s3_bucket.logs.bucket_domain_name
    prefix          = "cloudfront/"
    include_cookies = false
  }

  restrictions {
    geo_restriction {
      restriction_type = "none"
    }
  }

  viewer_certificate {
    cloudfront_default_certificate = !local.cdn_custom_cert
    acm_certificate_arn            = local.cdn_custom_cert ? var.cdn_certificate_arn : null
    ssl_support_method             = local.cdn_custom_cert ? "sni-only" : null
    # The *.cloudfront.net certificate accepts no protocol floor (AWS wants
    # TLSv1 there); with an own certificate, TLS 1.2 and newer only.
    minimum_protocol_version = local.cdn_custom_cert ? "TLSv1.2_2021" : "TLSv1"
  }

  depends_on = [aws_s3_bucket_acl.logs]
}

# ---- WAF (CloudFront web ACLs live in us-east-1) ---------------------------------

resource "aws_wafv2_web_acl" "cdn" {
  provider    = aws.us_east_1
  name        = "${var.name}-cdn"
  description = "Managed common, known-bad-input and IP-reputation rules, and a per-IP rate limit"
  scope       = "CLOUDFRONT"

  default_action {
    allow {}
  }

  rule {
    name     = "rate-limit-per-ip"
    priority = 0
    action {
      block {}
    }
    statement {
      rate_based_statement {
        limit              = var.waf_rate_limit
        aggregate_key_type = "IP"
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-rate-limit"
      sampled_requests_enabled   = true
    }
  }

  rule {
    name     = "aws-ip-reputation"
    priority = 1
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesAmazonIpReputationList"
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-ip-reputation"
      sampled_requests_enabled   = true
    }
  }

  # VPNs and Tor are blocked; cloud hosting ranges only count, because
  # services writing to streams from their own cloud hosts are normal clients.
  rule {
    name     = "aws-anonymous-ip"
    priority = 2
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesAnonymousIpList"

        rule_action_override {
          name = "HostingProviderIPList"
          action_to_use {
            count {}
          }
        }
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-anonymous-ip"
      sampled_requests_enabled   = true
    }
  }

  # Stream bodies are the users' own bytes: a message may well contain
  # "<script>" or a path. Rules that inspect bodies only count, so appends are
  # never refused for their contents (nor for being larger than 8 KiB).
  rule {
    name     = "aws-common"
    priority = 3
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesCommonRuleSet"

        dynamic "rule_action_override" {
          for_each = ["SizeRestrictions_BODY", "CrossSiteScripting_BODY", "GenericLFI_BODY", "GenericRFI_BODY", "EC2MetaDataSSRF_BODY"]
          content {
            name = rule_action_override.value
            action_to_use {
              count {}
            }
          }
        }
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-common"
      sampled_requests_enabled   = true
    }
  }

  rule {
    name     = "aws-known-bad-inputs"
    priority = 4
    override_action {
      none {}
    }
    statement {
      managed_rule_group_statement {
        vendor_name = "AWS"
        name        = "AWSManagedRulesKnownBadInputsRuleSet"

        dynamic "rule_action_override" {
          for_each = ["Log4JRCE_BODY", "JavaDeserializationRCE_BODY"]
          content {
            name = rule_action_override.value
            action_to_use {
              count {}
            }
          }
        }
      }
    }
    visibility_config {
      cloudwatch_metrics_enabled = true
      metric_name                = "${var.name}-known-bad-inputs"
      sampled_requests_enabled   = true
    }
  }

  visibility_config {
    cloudwatch_metrics_enabled = true
    metric_name                = "${var.name}-cdn"
    sampled_requests_enabled   = true
  }
}

# Only requests the WAF blocked or counted are logged (the rest would cost a
# log line per chunk read), with Authorization redacted.
resource "aws_wafv2_web_acl_logging_configuration" "cdn" {
  provider                = aws.us_east_1
  resource_arn            = aws_wafv2_web_acl.cdn.arn
  log_destination_configs = [aws_cloudwatch_log_group.waf.arn]

  redacted_fields {
    single_header {
      name = "authorization"
    }
  }

  logging_filter {
    default_behavior = "DROP"
    filter {
      behavior    = "KEEP"
      requirement = "MEETS_ANY"
      condition {
        action_condition {
          action = "BLOCK"
        }
      }
      condition {
        action_condition {
          action = "COUNT"
        }
      }
    }
  }
}

# WAF requires the log group's name to start with aws-waf-logs-.
resource "aws_cloudwatch_log_group" "waf" {
  provider          = aws.us_east_1
  name              = "aws-waf-logs-${var.name}"
  retention_in_days = var.waf_log_retention_days
  kms_key_id        = aws_kms_key.waf_logs.arn
}

resource "aws_kms_key" "waf_logs" {
  provider                = aws.us_east_1
  description             = "${var.name}: WAF logs of the CloudFront distribution"
  enable_key_rotation     = true
  deletion_window_in_days = 30

  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministersThroughIam"
        Effect    = "Allow"
        Principal = { AWS = "arn:${local.partition}:iam::${local.account_id}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "CloudWatchLogsEncryptsThisGroup"
        Effect    = "Allow"
        Principal = { Service = "logs.us-east-1.amazonaws.com" }
        Action    = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = {
          ArnEquals = {
            "kms:EncryptionContext:aws:logs:arn" = "arn:${local.partition}:logs:us-east-1:${local.account_id}:log-group:aws-waf-logs-${var.name}"
          }
        }
      },
    ]
  })
}
