# The origin: one instance in the first private subnet, at a fixed private
# address the edges are configured with, and a separate encrypted gp3 volume
# for the log that outlives the instance (a replaced instance mounts the same
# log and recovers it).

data "aws_ssm_parameter" "al2023" {
  name = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-${var.architecture}"
}

locals {
  ami_id = var.ami_id != "" ? var.ami_id : nonsensitive(data.aws_ssm_parameter.al2023.value)
  # Fixed, so the edges' EDGE_ORIGIN survives a replacement of the origin.
  origin_private_ip = cidrhost(aws_subnet.private[0].cidr_block, 10)
  origin_url        = "http://${local.origin_private_ip}:4437"

  install_release = templatefile("${path.module}/templates/install-release.sh.tftpl", {
    release_url    = var.release_url
    release_sha256 = var.release_sha256
  })
}

resource "aws_ebs_volume" "origin_data" {
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
  ami                         = local.ami_id
  instance_type               = var.origin_instance_type
  subnet_id                   = aws_subnet.private[0].id
  private_ip                  = local.origin_private_ip
  vpc_security_group_ids      = [aws_security_group.origin.id]
  iam_instance_profile        = aws_iam_instance_profile.origin.name
  associate_public_ip_address = false
  ebs_optimized               = true
  monitoring                  = true
  user_data_replace_on_change = true

  user_data = templatefile("${path.module}/templates/origin.sh.tftpl", {
    data_volume_id  = aws_ebs_volume.origin_data.id
    object_store    = local.object_store
    region          = var.region
    open_accounts   = var.open_accounts
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
    volume_size = 16
    encrypted   = true
  }

  tags = { Name = "${var.name}-origin" }

  lifecycle {
    # A newer AMI alone is no reason to replace the only origin; change
    # ami_id (or taint) to roll it deliberately.
    ignore_changes = [ami]
  }
}

resource "aws_volume_attachment" "origin_data" {
  device_name = "/dev/sdf"
  volume_id   = aws_ebs_volume.origin_data.id
  instance_id = aws_instance.origin.id
  # Stop the instance (systemd sends the origin SIGTERM) before detaching the
  # log on a replacement, so the log is never detached under a live writer.
  stop_instance_before_detaching = true
}
