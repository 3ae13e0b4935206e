# The origins. Object durability (the default): origin_count instances spread
# over the private subnets' zones, a region on one bucket and prefix: one
# serves, the others forward to it and take over when it dies. Every
# acknowledged append is in the bucket, so they need no data volume (the root
# disk holds a cache rebuilt at start). Sync durability: one instance in the
# first private subnet with a separate encrypted gp3 volume for the log that
# outlives the instance (a replaced instance mounts the same log and
# recovers it). Either way each origin has a fixed private address the edges
# are configured with.

data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.architecture}"
}

locals {
  ami_id        = var.ami_id != "" ? var.ami_id : nonsensitive(data.aws_ssm_parameter.al2023.value)
  origin_region = var.origin_durability == "object"
  # Origin i in subnet i % zones, at host 10 + i of it (unique across the
  # subnets): fixed, so the edges' EDGE_ORIGIN survives a replacement.
  # Origin 0 keeps the address the single origin always had.
  origin_subnets     = [for i in range(var.origin_count) : aws_subnet.private[i % length(aws_subnet.private)]]
  origin_private_ips = [for i, s in local.origin_subnets : cidrhost(s.cidr_block, 10 + i)]
  origin_urls        = [for ip in local.origin_private_ips : "http://${ip}:4437"]

  install_release = templatefile("${path.module}/templates/install-release.sh.tftpl", {
    release_url    = var.release_url
    release_sha256 = var.release_sha256
  })
}

resource "aws_ebs_volume" "origin_data" {
  count             = local.origin_region ? 0 : 1
  availability_zone = local.azs[0]
  type              = "gp3"
  size              = var.origin_data_volume_size_gib
  iops              = var.origin_data_volume_iops
  throughput        = var.origin_data_volume_throughput
  encrypted         = true
  kms_key_id        = aws_kms_key.data.arn

  tags = { Name = "${var.name}-origin-data" }
}

resource "aws_instance" "origin" {
  count                       = var.origin_count
  ami                         = local.ami_id
  instance_type               = var.origin_instance_type
  subnet_id                   = local.origin_subnets[count.index].id
  private_ip                  = local.origin_private_ips[count.index]
  vpc_security_group_ids      = [aws_security_group.origin.id]
  iam_instance_profile        = aws_iam_instance_profile.origin.name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true
  user_data_replace_on_change = true

  user_data = templatefile("${path.module}/templates/origin.sh.tftpl", {
    data_volume_id  = local.origin_region ? "" : aws_ebs_volume.origin_data[0].id
    region_mode     = local.origin_region
    node_id         = "origin-${count.index}"
    advertise_url   = local.origin_urls[count.index]
    object_store    = local.object_store
    region          = var.region
    open_accounts   = var.open_accounts
    sse_keepalive   = var.sse_keepalive_seconds
    partitions      = var.region_partitions
    region_wal      = var.region_wal
    extra_env       = var.origin_extra_env
    install_release = local.install_release
  })

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1
  }

  root_block_device {
    volume_type = "gp3"
    volume_size = local.origin_region ? var.origin_root_volume_size_gib : 16
    encrypted   = true
  }

  # A sync origin keeps the name it always had.
  tags = { Name = local.origin_region ? "${var.name}-origin-${count.index}" : "${var.name}-origin" }

  lifecycle {
    precondition {
      condition     = local.origin_region || var.origin_count == 1
      error_message = "origin_durability = \"sync\" needs origin_count = 1: a sync origin's log is on its own volume, and several origins need object durability to form a region."
    }
    precondition {
      condition     = var.sse_keepalive_seconds < var.cdn_origin_read_timeout
      error_message = "sse_keepalive_seconds must be below cdn_origin_read_timeout, or CloudFront cuts quiet SSE tails between keepalives."
    }
    # A newer AMI alone is no reason to replace an origin; change ami_id (or
    # taint) to roll it deliberately.
    ignore_changes = [ami]
  }
}

resource "aws_volume_attachment" "origin_data" {
  count       = local.origin_region ? 0 : 1
  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.origin_data[0].id
  instance_id = aws_instance.origin[0].id
  # Stop the instance (systemd sends the origin SIGTERM) before detaching the
  # log on a replacement, so the log is never detached under a live writer.
  stop_instance_before_detaching = true
}

# Deployments made before origin_durability had these without an index: a
# sync deployment keeps its origin and its volume.
moved {
  from = aws_instance.origin
  to   = aws_instance.origin[0]
}

moved {
  from = aws_ebs_volume.origin_data
  to   = aws_ebs_volume.origin_data[0]
}

moved {
  from = aws_volume_attachment.origin_data
  to   = aws_volume_attachment.origin_data[0]
}
