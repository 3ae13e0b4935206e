# A minimal VPC of its own: two public subnets for the load balancer and the
# NAT gateway, two private subnets for the origins and the edges, an S3 gateway
# endpoint so chunk reads, seals and WAL puts never cross the NAT, flow logs,
# and the security groups that make the origins reachable from the edges (and
# each other) only.

data "aws_availability_zones" "chosen" {
  state = "available"
  filter {
    name   = "zone-name"
    values = [for letter in var.availability_zone_letters : "${var.region}${letter}"]
  }

  lifecycle {
    postcondition {
      condition     = length(self.names) == 2
      error_message = "Both availability_zone_letters must name available zones of the region."
    }
  }
}

locals {
  # Exactly the two chosen zones (the postcondition fails the plan if one
  # is not available, rather than silently using another).
  azs = data.aws_availability_zones.chosen.names
}

resource "aws_vpc" "main" {
  cidr_block           = var.vpc_cidr
  enable_dns_support   = true
  enable_dns_hostnames = true

  tags = { Name = "${var.name}-vpc" }
}

# The default security group is left with no rules, so nothing lands in it by
# accident with open traffic.
resource "aws_default_security_group" "default" {
  vpc_id = aws_vpc.main.id
}

resource "aws_flow_log" "vpc" {
  vpc_id               = aws_vpc.main.id
  traffic_type         = "ALL"
  log_destination_type = "s3"
  log_destination      = "${aws_s3_bucket.logs.arn}/vpc-flow-logs/"

  depends_on = [aws_s3_bucket_policy.logs]
}

resource "aws_internet_gateway" "main" {
  vpc_id = aws_vpc.main.id
  tags   = { Name = "${var.name}-igw" }
}

resource "aws_subnet" "public" {
  count                   = length(local.azs)
  vpc_id                  = aws_vpc.main.id
  availability_zone       = local.azs[count.index]
  cidr_block              = cidrsubnet(var.vpc_cidr, 8, count.index)
  map_public_ip_on_launch = false

  tags = { Name = "${var.name}-public-${local.azs[count.index]}" }
}

resource "aws_subnet" "private" {
  count             = length(local.azs)
  vpc_id            = aws_vpc.main.id
  availability_zone = local.azs[count.index]
  cidr_block        = cidrsubnet(var.vpc_cidr, 8, 10 + count.index)

  tags = { Name = "${var.name}-private-${local.azs[count.index]}" }
}

# One NAT gateway: instances need it at boot for https:// release URLs and OS
# packages, and for SSM. A second one per AZ buys little for that traffic.
resource "aws_eip" "nat" {
  domain = "vpc"
  tags   = { Name = "${var.name}-nat" }
}

resource "aws_nat_gateway" "main" {
  allocation_id = aws_eip.nat.id
  subnet_id     = aws_subnet.public[0].id
  tags          = { Name = "${var.name}-nat" }

  depends_on = [aws_internet_gateway.main]
}

resource "aws_route_table" "public" {
  vpc_id = aws_vpc.main.id
  tags   = { Name = "${var.name}-public" }
}

resource "aws_route" "public_internet" {
  route_table_id         = aws_route_table.public.id
  destination_cidr_block = "0.0.0.0/0"
  gateway_id             = aws_internet_gateway.main.id
}

resource "aws_route_table_association" "public" {
  count          = length(aws_subnet.public)
  subnet_id      = aws_subnet.public[count.index].id
  route_table_id = aws_route_table.public.id
}

resource "aws_route_table" "private" {
  vpc_id = aws_vpc.main.id
  tags   = { Name = "${var.name}-private" }
}

resource "aws_route" "private_nat" {
  route_table_id         = aws_route_table.private.id
  destination_cidr_block = "0.0.0.0/0"
  nat_gateway_id         = aws_nat_gateway.main.id
}

resource "aws_route_table_association" "private" {
  count          = length(aws_subnet.private)
  subnet_id      = aws_subnet.private[count.index].id
  route_table_id = aws_route_table.private.id
}

resource "aws_vpc_endpoint" "s3" {
  vpc_id            = aws_vpc.main.id
  service_name      = "com.amazonaws.${var.region}.s3"
  vpc_endpoint_type = "Gateway"
  route_table_ids   = [aws_route_table.private.id]
  tags              = { Name = "${var.name}-s3" }
}

# ---- security groups ----------------------------------------------------------
# Rules are separate resources so the three groups can name each other without
# a cycle.

# CloudFront's origin-facing addresses: the only sources the load balancer
# accepts. A shared secret header (cdn.tf) stops other CloudFront
# distributions from using it.
data "aws_ec2_managed_prefix_list" "cloudfront" {
  name = "com.amazonaws.global.cloudfront.origin-facing"
}

resource "aws_security_group" "alb" {
  name        = "${var.name}-alb"
  description = "Load balancer: HTTPS from CloudFront only"
  vpc_id      = aws_vpc.main.id
  tags        = { Name = "${var.name}-alb" }
}

resource "aws_vpc_security_group_ingress_rule" "alb_from_cloudfront" {
  security_group_id = aws_security_group.alb.id
  description       = "HTTPS from CloudFront origin-facing servers"
  prefix_list_id    = data.aws_ec2_managed_prefix_list.cloudfront.id
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "alb_to_edges" {
  security_group_id            = aws_security_group.alb.id
  description                  = "Requests and health checks to the edges"
  referenced_security_group_id = aws_security_group.edge.id
  ip_protocol                  = "tcp"
  from_port                    = 4438
  to_port                      = 4438
}

resource "aws_security_group" "edge" {
  name        = "${var.name}-edge"
  description = "Edges: port 4438 from the load balancer only"
  vpc_id      = aws_vpc.main.id
  tags        = { Name = "${var.name}-edge" }
}

resource "aws_vpc_security_group_ingress_rule" "edge_from_alb" {
  security_group_id            = aws_security_group.edge.id
  description                  = "Requests and health checks from the load balancer"
  referenced_security_group_id = aws_security_group.alb.id
  ip_protocol                  = "tcp"
  from_port                    = 4438
  to_port                      = 4438
}

resource "aws_vpc_security_group_egress_rule" "edge_to_origin" {
  security_group_id            = aws_security_group.edge.id
  description                  = "Forwarded writes, long-polls and tails to the origin"
  referenced_security_group_id = aws_security_group.origin.id
  ip_protocol                  = "tcp"
  from_port                    = 4437
  to_port                      = 4437
}

resource "aws_vpc_security_group_egress_rule" "edge_https" {
  security_group_id = aws_security_group.edge.id
  description       = "HTTPS: S3 (through the gateway endpoint), release download, OS packages, SSM"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_security_group" "origin" {
  name        = "${var.name}-origin"
  description = "Origin: port 4437 from the edges only"
  vpc_id      = aws_vpc.main.id
  tags        = { Name = "${var.name}-origin" }
}

resource "aws_vpc_security_group_ingress_rule" "origin_from_edges" {
  security_group_id            = aws_security_group.origin.id
  description                  = "Stream API from the edges"
  referenced_security_group_id = aws_security_group.edge.id
  ip_protocol                  = "tcp"
  from_port                    = 4437
  to_port                      = 4437
}

# A region's origins reach each other: a follower forwards every request to
# the owner's advertised address. Only in object durability; a sync origin
# is alone.
resource "aws_vpc_security_group_ingress_rule" "origin_from_origins" {
  count                        = local.origin_region ? 1 : 0
  security_group_id            = aws_security_group.origin.id
  description                  = "Requests forwarded by the region's other origins"
  referenced_security_group_id = aws_security_group.origin.id
  ip_protocol                  = "tcp"
  from_port                    = 4437
  to_port                      = 4437
}

resource "aws_vpc_security_group_egress_rule" "origin_to_origins" {
  count                        = local.origin_region ? 1 : 0
  security_group_id            = aws_security_group.origin.id
  description                  = "Requests forwarded to the region's owning origin"
  referenced_security_group_id = aws_security_group.origin.id
  ip_protocol                  = "tcp"
  from_port                    = 4437
  to_port                      = 4437
}

resource "aws_vpc_security_group_egress_rule" "origin_https" {
  security_group_id = aws_security_group.origin.id
  description       = "HTTPS: S3 (through the gateway endpoint), release download, OS packages, SSM"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}
