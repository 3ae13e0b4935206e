# Object storage: the data bucket for sealed 4 MiB chunks and snapshots
# and, in object durability, the region's WAL, epoch claims and heartbeats
# (private, SSE-KMS with a key of its own, versioned, TLS only, access-logged,
# lifecycle rules that only abort abandoned multipart uploads, expire
# replaced heartbeats and what a checkpoint deleted), and the log bucket
# every access log of the deployment goes to.

locals {
  bucket_name   = var.bucket_name != "" ? var.bucket_name : "${var.name}-streams-${local.account_id}-${var.region}"
  object_store  = "s3://${aws_s3_bucket.data.bucket}/${var.object_store_prefix}"
  prefix_arn    = "${aws_s3_bucket.data.arn}/${var.object_store_prefix}/*"
  logs_bucket   = "${var.name}-logs-${local.account_id}-${var.region}"
  s3_on_release = startswith(var.release_url, "s3://")
  # arn:aws:s3:::bucket/key of an s3:// release, so the roles may read that
  # one object and nothing else of its bucket.
  release_object_arn = local.s3_on_release ? "arn:${local.partition}:s3:::${trimprefix(var.release_url, "s3://")}" : ""
}

# ---- encryption key -----------------------------------------------------------

resource "aws_kms_key" "data" {
  description             = "${var.name}: sealed chunks and snapshots in ${local.bucket_name}, and the origin's data volume"
  enable_key_rotation     = true
  deletion_window_in_days = 30

  # The account administers and uses the key through IAM: the instance roles
  # get their use of it from their own policies (iam.tf).
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "AccountAdministersThroughIam"
      Effect    = "Allow"
      Principal = { AWS = "arn:${local.partition}:iam::${local.account_id}:root" }
      Action    = "kms:*"
      Resource  = "*"
    }]
  })
}

resource "aws_kms_alias" "data" {
  name          = "alias/${var.name}-data"
  target_key_id = aws_kms_key.data.key_id
}

# ---- data bucket --------------------------------------------------------------

resource "aws_s3_bucket" "data" {
  #checkov:skip=CKV_AWS_144:Cross-region replication doubles storage cost for a choice that belongs to the operator; S3 already stores every object across several availability zones; versioning (below) covers mistakes within the region.
  #checkov:skip=CKV2_AWS_62:Nothing consumes bucket events: the origin knows what it sealed, the edges read keys they are told about.
  bucket        = local.bucket_name
  force_destroy = var.bucket_force_destroy
}

resource "aws_s3_bucket_public_access_block" "data" {
  bucket                  = aws_s3_bucket.data.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = aws_kms_key.data.arn
    }
    # One KMS call per bucket key instead of per 4 MiB object.
    bucket_key_enabled = true
  }
}

# Versioning keeps an overwritten or deleted chunk recoverable. The origin
# writes each chunk once (create-only put) and deletes it when a stream's
# retention passes; those deleted versions stay until someone removes them
# (see README: "Cost of versioning").
resource "aws_s3_bucket_versioning" "data" {
  bucket = aws_s3_bucket.data.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "data" {
  bucket = aws_s3_bucket.data.id
  rule {
    id     = "abort-incomplete-multipart-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = var.abort_incomplete_uploads_days
    }
  }

  # Versioning keeps every replaced heartbeat (one per origin per second,
  # about 86,000 a day each), worth nothing once replaced, and every WAL
  # object, checkpoint and image the owner deletes below a newer checkpoint
  # (decision 0014): kept a day as noncurrent versions (an operator's
  # safety net), then gone, with their delete markers. Stream data is never
  # touched: expiring streams stays the origin's job.
  dynamic "rule" {
    for_each = local.origin_region ? [1] : []
    content {
      id     = "expire-replaced-heartbeats"
      status = "Enabled"
      filter {
        prefix = "${var.object_store_prefix}/region/nodes/"
      }
      noncurrent_version_expiration {
        noncurrent_days = 1
      }
    }
  }

  dynamic "rule" {
    for_each = local.origin_region ? [1] : []
    content {
      id     = "expire-deleted-wal-and-checkpoints"
      status = "Enabled"
      filter {
        prefix = "${var.object_store_prefix}/region/partitions/"
      }
      noncurrent_version_expiration {
        noncurrent_days = 1
      }
      expiration {
        expired_object_delete_marker = true
      }
    }
  }

  # The origins' logs (one WAL per origin, decision 0028), deleted below
  # the partitions' checkpoints by their writers: the same day's grace.
  dynamic "rule" {
    for_each = local.origin_region ? [1] : []
    content {
      id     = "expire-deleted-logs"
      status = "Enabled"
      filter {
        prefix = "${var.object_store_prefix}/region/logs/"
      }
      noncurrent_version_expiration {
        noncurrent_days = 1
      }
      expiration {
        expired_object_delete_marker = true
      }
    }
  }
}

resource "aws_s3_bucket_logging" "data" {
  bucket        = aws_s3_bucket.data.id
  target_bucket = aws_s3_bucket.logs.id
  target_prefix = "s3-access/${local.bucket_name}/"
}

# Fencing rests on WAL and log objects, epoch claims and tenures never being
# overwritten: each is created once, by a put with If-None-Match: *. A put
# without it (a stray script, `aws s3 cp`) could replace what a takeover
# replays or who owns the partition, so in object durability the bucket
# refuses it, whoever sends it. Heartbeats (region/nodes) are overwritten every second and stay
# outside. The ObjectCreationOperation clause keeps CreateMultipartUpload and
# UploadPart, which cannot carry the header, out of the deny.
locals {
  deny_unconditional_partition_puts = {
    Sid       = "DenyUnconditionalPartitionPuts"
    Effect    = "Deny"
    Principal = "*"
    Action    = "s3:PutObject"
    Resource = [
      "${aws_s3_bucket.data.arn}/${var.object_store_prefix}/region/partitions/*",
      "${aws_s3_bucket.data.arn}/${var.object_store_prefix}/region/logs/*",
    ]
    Condition = {
      Null = { "s3:if-none-match" = "true" }
      Bool = { "s3:ObjectCreationOperation" = "true" }
    }
  }
}

resource "aws_s3_bucket_policy" "data" {
  bucket = aws_s3_bucket.data.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = concat([{
      Sid       = "DenyPlainHttp"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.data.arn, "${aws_s3_bucket.data.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }], local.origin_region ? [local.deny_unconditional_partition_puts] : [])
  })

  depends_on = [aws_s3_bucket_public_access_block.data]
}

# ---- log bucket ---------------------------------------------------------------

resource "aws_s3_bucket" "logs" {
  #checkov:skip=CKV_AWS_18:This is the access-log bucket; logging it into itself would log its own log writes without end.
  #checkov:skip=CKV_AWS_144:Access logs are not worth a second region's copy.
  #checkov:skip=CKV2_AWS_62:Nothing consumes log-bucket events.
  #checkov:skip=CKV_AWS_145:Load balancer access logs can only be delivered to buckets encrypted with SSE-S3, so this bucket uses SSE-S3 (AES-256), not KMS.
  bucket        = local.logs_bucket
  force_destroy = var.bucket_force_destroy
}

resource "aws_s3_bucket_public_access_block" "logs" {
  bucket                  = aws_s3_bucket.logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

# CloudFront's standard logs are written with a bucket ACL grant, which needs
# ACLs enabled (BucketOwnerPreferred); objects still end up owned by this
# account.
resource "aws_s3_bucket_ownership_controls" "logs" {
  #checkov:skip=CKV2_AWS_65:CloudFront standard logging delivers through an ACL grant (awslogsdelivery), so ACLs stay enabled on the log bucket only.
  bucket = aws_s3_bucket.logs.id
  rule {
    object_ownership = "BucketOwnerPreferred"
  }
}

resource "aws_s3_bucket_acl" "logs" {
  bucket     = aws_s3_bucket.logs.id
  acl        = "log-delivery-write"
  depends_on = [aws_s3_bucket_ownership_controls.logs]
}

resource "aws_s3_bucket_server_side_encryption_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "logs" {
  bucket = aws_s3_bucket.logs.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id
  rule {
    id     = "expire-logs"
    status = "Enabled"
    filter {}
    expiration {
      days = var.log_retention_days
    }
    noncurrent_version_expiration {
      noncurrent_days = 7
    }
    abort_incomplete_multipart_upload {
      days_after_initiation = 2
    }
  }
}

data "aws_elb_service_account" "current" {}

resource "aws_s3_bucket_policy" "logs" {
  bucket = aws_s3_bucket.logs.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "DenyPlainHttp"
        Effect    = "Deny"
        Principal = "*"
        Action    = "s3:*"
        Resource  = [aws_s3_bucket.logs.arn, "${aws_s3_bucket.logs.arn}/*"]
        Condition = { Bool = { "aws:SecureTransport" = "false" } }
      },
      {
        Sid       = "LoadBalancerAccessLogs"
        Effect    = "Allow"
        Principal = { AWS = data.aws_elb_service_account.current.arn }
        Action    = "s3:PutObject"
        Resource  = "${aws_s3_bucket.logs.arn}/alb/AWSLogs/${local.account_id}/*"
      },
      {
        Sid       = "LoadBalancerAccessLogsDelivery"
        Effect    = "Allow"
        Principal = { Service = "logdelivery.elasticloadbalancing.amazonaws.com" }
        Action    = "s3:PutObject"
        Resource  = "${aws_s3_bucket.logs.arn}/alb/AWSLogs/${local.account_id}/*"
      },
      {
        Sid       = "FlowLogsDelivery"
        Effect    = "Allow"
        Principal = { Service = "delivery.logs.amazonaws.com" }
        Action    = "s3:PutObject"
        Resource  = "${aws_s3_bucket.logs.arn}/vpc-flow-logs/AWSLogs/${local.account_id}/*"
        Condition = {
          StringEquals = {
            "s3:x-amz-acl"      = "bucket-owner-full-control"
            "aws:SourceAccount" = local.account_id
          }
        }
      },
      {
        Sid       = "FlowLogsAclCheck"
        Effect    = "Allow"
        Principal = { Service = "delivery.logs.amazonaws.com" }
        Action    = ["s3:GetBucketAcl", "s3:ListBucket"]
        Resource  = aws_s3_bucket.logs.arn
        Condition = { StringEquals = { "aws:SourceAccount" = local.account_id } }
      },
    ]
  })

  depends_on = [aws_s3_bucket_public_access_block.logs]
}
