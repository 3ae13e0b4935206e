# What an operator or a client needs after `terraform apply`.

output "cdn_domain_name" {
  description = "The distribution's *.cloudfront.net name: clients use https://<this>/<stream path> (or a cdn_aliases name)."
  value       = aws_cloudfront_distribution.main.domain_name
}

output "cdn_distribution_id" {
  description = "CloudFront distribution id (for invalidations and metrics)."
  value       = aws_cloudfront_distribution.main.id
}

output "alb_dns_name" {
  description = "The load balancer's DNS name: point alb_domain_name at it (CNAME or alias) unless route53_zone_id lets the module do it."
  value       = aws_lb.edge.dns_name
}

output "origin_private_ips" {
  description = "The origins' fixed private addresses, origin-0 first; the edges reach them at http://<each>:4437 (EDGE_ORIGIN lists them all)."
  value       = local.origin_private_ips
}

output "origin_instance_ids" {
  description = "The origin instances, origin-0 first (for Session Manager: aws ssm start-session --target <one>)."
  value       = aws_instance.origin[*].id
}

output "origin_data_volume_id" {
  description = "Sync durability: the origin's log volume, mounted at /var/lib/origin; snapshot it before risky changes. Null in object durability (no data volume)."
  value       = one(aws_ebs_volume.origin_data[*].id)
}

output "edge_autoscaling_group" {
  description = "Name of the edges' auto-scaling group."
  value       = aws_autoscaling_group.edge.name
}

output "object_store_url" {
  description = "The --object-store URL both binaries were given: s3://bucket/prefix."
  value       = local.object_store
}

output "bucket_name" {
  description = "The data bucket (sealed chunks and snapshots)."
  value       = aws_s3_bucket.data.bucket
}

output "logs_bucket_name" {
  description = "The log bucket: s3-access/, alb/, cloudfront/, vpc-flow-logs/."
  value       = aws_s3_bucket.logs.bucket
}

output "kms_key_arn" {
  description = "KMS key of the data bucket and (sync durability) the origin's data volume."
  value       = aws_kms_key.data.arn
}

output "vpc_id" {
  description = "The VPC the module created."
  value       = aws_vpc.main.id
}
