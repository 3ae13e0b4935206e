# The edges: an auto-scaling group in the private subnets behind an
# application load balancer in the public ones. The balancer answers only
# CloudFront (security group + secret header), over HTTPS.

resource "aws_launch_template" "edge" {
  name_prefix   = "${var.name}-edge-"
  image_id      = local.ami_id
  instance_type = var.edge_instance_type
  ebs_optimized = true

  iam_instance_profile {
    arn = aws_iam_instance_profile.edge.arn
  }

  network_interfaces {
    associate_public_ip_address = false
    security_groups             = [aws_security_group.edge.id]
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required" # IMDSv2 only
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_type           = "gp3"
      volume_size           = 16
      encrypted             = true
      delete_on_termination = true
    }
  }

  user_data = base64encode(templatefile("${path.module}/templates/edge.sh.tftpl", {
    origin_urls     = join(",", local.origin_urls)
    object_store    = local.object_store
    cache_size      = var.edge_cache_size
    region          = var.region
    open_accounts   = var.open_accounts
    sse_keepalive   = var.sse_keepalive_seconds
    drain_delay     = local.edge_drain_delay
    extra_env       = var.edge_extra_env
    install_release = local.install_release
  }))

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = "${var.name}-edge" }
  }

  tag_specifications {
    resource_type = "volume"
    tags          = { Name = "${var.name}-edge" }
  }
}

resource "aws_autoscaling_group" "edge" {
  #checkov:skip=CKV2_AWS_15:The balancer routes by readiness (/readyz), which an edge loses while its origin is down; replacing edges for that would replace every edge in a loop and fix nothing. Instances are replaced on EC2 health; the balancer alone stops sending to an unready one.
  name_prefix               = "${var.name}-edge-"
  vpc_zone_identifier       = aws_subnet.private[*].id
  min_size                  = var.edge_min_size
  max_size                  = var.edge_max_size
  desired_capacity          = var.edge_desired_capacity
  target_group_arns         = [aws_lb_target_group.edge.arn]
  health_check_type         = "EC2"
  health_check_grace_period = 180
  default_instance_warmup   = 120

  launch_template {
    id      = aws_launch_template.edge.id
    version = aws_launch_template.edge.latest_version
  }

  # A new launch template version (release, AMI, settings) rolls the edges,
  # keeping most of them serving.
  instance_refresh {
    strategy = "Rolling"
    preferences {
      min_healthy_percentage = 50
    }
  }

  tag {
    key                 = "Name"
    value               = "${var.name}-edge"
    propagate_at_launch = true
  }

  dynamic "tag" {
    for_each = merge(var.tags, { "ds:deployment" = var.name })
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity]
  }

  depends_on = [aws_instance.origin]
}

resource "aws_autoscaling_policy" "edge_cpu" {
  name                   = "${var.name}-edge-cpu"
  autoscaling_group_name = aws_autoscaling_group.edge.name
  policy_type            = "TargetTrackingScaling"

  target_tracking_configuration {
    predefined_metric_specification {
      predefined_metric_type = "ASGAverageCPUUtilization"
    }
    target_value = var.edge_cpu_target
  }
}

# ---- load balancer ------------------------------------------------------------

resource "aws_lb" "edge" {
  #checkov:skip=CKV2_AWS_28:The balancer accepts only CloudFront's origin-facing addresses carrying the distribution's secret header; the WAF sits on the distribution (cdn.tf), where every request passes first.
  name                       = "${var.name}-edge"
  load_balancer_type         = "application"
  internal                   = false
  subnets                    = aws_subnet.public[*].id
  security_groups            = [aws_security_group.alb.id]
  idle_timeout               = var.alb_idle_timeout
  drop_invalid_header_fields = true
  enable_deletion_protection = true

  access_logs {
    bucket  = aws_s3_bucket.logs.id
    prefix  = "alb"
    enabled = true
  }

  depends_on = [aws_s3_bucket_policy.logs]
}

locals {
  edge_check_interval  = 10
  edge_check_unhealthy = 3
  # An edge stopped by systemd (a restart, an upgrade) answers /readyz 503
  # this long before it closes its listener: as long as the balancer takes
  # to count it unhealthy.
  edge_drain_delay = local.edge_check_interval * local.edge_check_unhealthy
}

resource "aws_lb_target_group" "edge" {
  #checkov:skip=CKV_AWS_378:Balancer to edge is plain HTTP inside the VPC: the edges hold no certificate, and the hop never leaves the private subnets' security groups.
  name_prefix = "edge-"
  port        = 4438
  protocol    = "HTTP"
  vpc_id      = aws_vpc.main.id
  target_type = "instance"
  # SSE sessions last 60 s: give them time to end before an edge leaves.
  deregistration_delay = 65

  health_check {
    # Readiness: 503 while the edge drains or before its invalidation feed
    # caught up, so the balancer sends it nothing then.
    path                = "/readyz"
    port                = "traffic-port"
    protocol            = "HTTP"
    matcher             = "200"
    interval            = local.edge_check_interval
    timeout             = 5
    healthy_threshold   = 2
    unhealthy_threshold = local.edge_check_unhealthy
  }

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "https" {
  load_balancer_arn = aws_lb.edge.arn
  port              = 443
  protocol          = "HTTPS"
  ssl_policy        = "ELBSecurityPolicy-TLS13-1-2-2021-06"
  certificate_arn   = var.alb_certificate_arn

  # Anything that does not carry the distribution's secret header did not
  # come through CloudFront.
  default_action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      status_code  = "403"
      message_body = "{\"error\":{\"code\":\"FORBIDDEN\",\"message\":\"use the CDN\"}}"
    }
  }
}

# /metrics is for the operators' scraper inside the VPC, never the internet.
resource "aws_lb_listener_rule" "hide_metrics" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 10

  action {
    type = "fixed-response"
    fixed_response {
      content_type = "application/json"
      status_code  = "404"
      message_body = "{\"error\":{\"code\":\"NOT_FOUND\",\"message\":\"not found\"}}"
    }
  }

  condition {
    path_pattern {
      values = ["/metrics", "/metrics/*"]
    }
  }
}

resource "aws_lb_listener_rule" "from_cdn" {
  listener_arn = aws_lb_listener.https.arn
  priority     = 20

  action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.edge.arn
  }

  condition {
    http_header {
      http_header_name = local.origin_verify_header
      values           = [random_password.origin_verify.result]
    }
  }
}

resource "aws_route53_record" "alb" {
  count   = var.route53_zone_id != "" ? 1 : 0
  zone_id = var.route53_zone_id
  name    = var.alb_domain_name
  type    = "A"

  alias {
    name                   = aws_lb.edge.dns_name
    zone_id                = aws_lb.edge.zone_id
    evaluate_target_health = true
  }
}
