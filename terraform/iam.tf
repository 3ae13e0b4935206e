# Instance roles. The origin may write, read and delete under the object-store
# prefix; the edges may only read it. Both may read the release tarball (when
# it is an s3:// URL) and, optionally, be reached through Session Manager.

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

# ---- origin: read-write -------------------------------------------------------

resource "aws_iam_role" "origin" {
  name               = "${var.name}-origin"
  description        = "Origin instance: seals chunks into ${local.bucket_name}/${var.object_store_prefix}"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

# Object durability's region needs nothing beyond these: WAL objects, epoch
# claims (create-only puts; If-None-Match needs no action of its own) and
# heartbeats are PutObject, the replay and the others' heartbeats GetObject,
# and listing {prefix}/region/... is ListBucket under the prefix.
data "aws_iam_policy_document" "origin" {
  statement {
    sid = "ObjectsUnderPrefix"
    actions = [
      "s3:PutObject", "s3:GetObject", "s3:DeleteObject",
      "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts",
    ]
    resources = [local.prefix_arn]
  }

  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket", "s3:ListBucketMultipartUploads"]
    resources = [aws_s3_bucket.data.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.object_store_prefix}/*", var.object_store_prefix]
    }
  }

  statement {
    sid       = "BucketKey"
    actions   = ["kms:GenerateDataKey", "kms:Decrypt", "kms:DescribeKey"]
    resources = [aws_kms_key.data.arn]
  }

  dynamic "statement" {
    for_each = local.s3_on_release ? [1] : []
    content {
      sid       = "ReleaseTarball"
      actions   = ["s3:GetObject"]
      resources = [local.release_object_arn]
    }
  }
}

resource "aws_iam_role_policy" "origin" {
  name   = "objects-read-write"
  role   = aws_iam_role.origin.id
  policy = data.aws_iam_policy_document.origin.json
}

resource "aws_iam_instance_profile" "origin" {
  name = "${var.name}-origin"
  role = aws_iam_role.origin.name
}

# ---- edges: read-only ---------------------------------------------------------

resource "aws_iam_role" "edge" {
  name               = "${var.name}-edge"
  description        = "Edge instances: read sealed chunks from ${local.bucket_name}/${var.object_store_prefix}"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
}

data "aws_iam_policy_document" "edge" {
  statement {
    sid       = "ReadObjectsUnderPrefix"
    actions   = ["s3:GetObject"]
    resources = [local.prefix_arn]
  }

  # Without ListBucket a missing key answers 403 instead of 404, and the edge
  # could not tell "not sealed yet" from "forbidden".
  statement {
    sid       = "ListPrefix"
    actions   = ["s3:ListBucket"]
    resources = [aws_s3_bucket.data.arn]
    condition {
      test     = "StringLike"
      variable = "s3:prefix"
      values   = ["${var.object_store_prefix}/*", var.object_store_prefix]
    }
  }

  statement {
    sid       = "BucketKeyDecrypt"
    actions   = ["kms:Decrypt", "kms:DescribeKey"]
    resources = [aws_kms_key.data.arn]
  }

  dynamic "statement" {
    for_each = local.s3_on_release ? [1] : []
    content {
      sid       = "ReleaseTarball"
      actions   = ["s3:GetObject"]
      resources = [local.release_object_arn]
    }
  }
}

resource "aws_iam_role_policy" "edge" {
  name   = "objects-read-only"
  role   = aws_iam_role.edge.id
  policy = data.aws_iam_policy_document.edge.json
}

resource "aws_iam_instance_profile" "edge" {
  name = "${var.name}-edge"
  role = aws_iam_role.edge.name
}

# ---- Session Manager (optional) -----------------------------------------------

resource "aws_iam_role_policy_attachment" "ssm" {
  for_each   = var.enable_ssm ? { origin = aws_iam_role.origin.name, edge = aws_iam_role.edge.name } : {}
  role       = each.value
  policy_arn = "arn:${local.partition}:iam::aws:policy/AmazonSSMManagedInstanceCore"
}
