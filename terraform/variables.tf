# Inputs. Only the three without a default must be set (see
# terraform.tfvars.example); everything else has a production-shaped default.

# ---- naming and placement ---------------------------------------------------

variable "name" {
  description = "Prefix of every resource name, and the value of the ds:deployment tag."
  type        = string
  default     = "ds"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,20}$", var.name))
    error_message = "name: 2-21 characters, lowercase letters, digits and '-', starting with a letter."
  }
}

variable "region" {
  description = "AWS region of the bucket, the origin and the edges. (CloudFront and its WAF are global; the web ACL is created in us-east-1 as AWS requires.)"
  type        = string
  default     = "eu-west-1"
}

variable "tags" {
  description = "Tags added to every resource."
  type        = map(string)
  default     = {}
}

variable "availability_zone_letters" {
  description = "The two availability zones of `region` to use, as letters (zone names are region + letter). Named, not picked, so the set never changes when AWS adds a zone. Some regions lack a letter (ap-northeast-1 has a, c, d): the plan then fails with a message saying so."
  type        = list(string)
  default     = ["a", "b"]

  validation {
    condition     = length(var.availability_zone_letters) == 2
    error_message = "availability_zone_letters: exactly two letters."
  }
}

variable "vpc_cidr" {
  description = "CIDR of the VPC this module creates: two public subnets (load balancer, NAT) and two private ones (origins, edges) in the two zones of availability_zone_letters."
  type        = string
  default     = "10.40.0.0/16"
}

# ---- binaries ---------------------------------------------------------------

variable "release_url" {
  description = "Where instances fetch the release tarball at boot: s3://bucket/key.tar.gz (read through the instance role; the bucket may be in another account if its policy allows the roles) or https://host/path.tar.gz. The tarball holds the `origin` and `edge` binaries at its top level or under bin/, built for `architecture`."
  type        = string

  validation {
    condition     = can(regex("^(s3://[^/]+/.+|https://.+)$", var.release_url))
    error_message = "release_url must be s3://bucket/key or https://..."
  }
}

variable "release_sha256" {
  description = "SHA-256 of the release tarball (hex). When set, boot fails unless the download matches. Strongly recommended for https:// URLs."
  type        = string
  default     = ""

  validation {
    condition     = var.release_sha256 == "" || can(regex("^[0-9a-f]{64}$", var.release_sha256))
    error_message = "release_sha256 must be empty or 64 lowercase hex digits."
  }
}

variable "architecture" {
  description = "CPU architecture of the instances and of the release binaries: x86_64 or arm64. Picks the Amazon Linux 2023 AMI when ami_id is empty."
  type        = string
  default     = "x86_64"

  validation {
    condition     = contains(["x86_64", "arm64"], var.architecture)
    error_message = "architecture must be x86_64 or arm64."
  }
}

variable "ami_id" {
  description = "AMI for origin and edges. Empty: the latest Amazon Linux 2023 for `architecture` (read from SSM at plan time). The user data needs systemd, cloud-init, curl, tar, the AWS CLI (for s3:// release URLs) and mkfs.xfs."
  type        = string
  default     = ""
}

# ---- origin -----------------------------------------------------------------

variable "origin_durability" {
  description = "object (the default): every acknowledged append is in the bucket, the origins form a region (one serves, the others forward to it and take over within seconds when it dies) and need no data volume. sync: one origin whose log is fsync'd to its own EBS volume (the layout before regions)."
  type        = string
  default     = "object"

  validation {
    condition     = contains(["object", "sync"], var.origin_durability)
    error_message = "origin_durability must be object or sync."
  }
}

variable "origin_count" {
  description = "Origins in the region (object durability), spread over the private subnets' zones. Must be 1 with sync durability (checked at plan)."
  type        = number
  default     = 3

  validation {
    condition     = var.origin_count >= 1 && floor(var.origin_count) == var.origin_count
    error_message = "origin_count must be a whole number, at least 1."
  }
}

variable "region_partitions" {
  description = "Partitions of the region (object durability): streams are spread over them by a hash of their path, each owned by one origin at a time, so writes spread over the origins. Pinned in the bucket by the first origin: it cannot change for the bucket's life. With one WAL per origin (region_wal = \"auto\" or \"origin\") the count does not multiply puts, and an idle region's reads barely grow with it (about 48 requests a second at 8 partitions over 3 origins, 90 at 64: loadtest/region-idle-cost.sh); more partitions cost each origin a writer thread apiece (decision 0028)."
  type        = number
  default     = 8

  validation {
    condition     = var.region_partitions >= 1 && var.region_partitions <= 4096 && floor(var.region_partitions) == var.region_partitions
    error_message = "region_partitions must be a whole number from 1 to 4096."
  }
}

variable "region_wal" {
  description = "Where the region's origins put their commits: auto (the default: the layout pinned in the bucket, one WAL per origin for a new region), origin (one WAL per origin for every partition it serves) or partition (a WAL per partition, the layout of regions made before). Pinned in the bucket with the partition count."
  type        = string
  default     = "auto"

  validation {
    condition     = contains(["auto", "origin", "partition"], var.region_wal)
    error_message = "region_wal must be auto, origin or partition."
  }
}

variable "origin_instance_type" {
  description = "Instance type of each origin."
  type        = string
  default     = "m7i.large"
}

variable "origin_root_volume_size_gib" {
  description = "Root volume of each origin in object durability, which holds the data directory: a cache the origin rebuilds from the bucket at start. (In sync durability the root volume is 16 GiB and the data has a volume of its own.)"
  type        = number
  default     = 32
}

variable "origin_data_volume_size_gib" {
  description = "Sync durability only: size of the origin's data volume (the write-ahead log and unsealed chunks), mounted at /var/lib/origin."
  type        = number
  default     = 100
}

variable "origin_data_volume_iops" {
  description = "Sync durability only: provisioned IOPS of the gp3 data volume (3000 is gp3's free baseline)."
  type        = number
  default     = 3000
}

variable "origin_data_volume_throughput" {
  description = "Sync durability only: provisioned throughput of the gp3 data volume in MiB/s (125 is gp3's free baseline)."
  type        = number
  default     = 125
}

variable "open_accounts" {
  description = "Accounts usable without a credential or limits (comma-separated), on the origin and the edges. Empty (the default): every stream needs a key or token, since the CDN puts them on the open internet. Name an account here only for streams anyone may write."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[A-Za-z0-9_.,-]*$", var.open_accounts))
    error_message = "open_accounts is a comma-separated list of account names."
  }
}

variable "origin_extra_env" {
  description = "Extra environment variables for the origin's systemd unit (flags such as ORIGIN_SSE_SESSION or ORIGIN_LEASE); they win over the module's own settings. Not for secrets: user data is readable by anyone who can describe the instance."
  type        = map(string)
  default     = {}
}

# ---- edges ------------------------------------------------------------------

variable "edge_instance_type" {
  description = "Instance type of the edges."
  type        = string
  default     = "c7i.large"
}

variable "edge_min_size" {
  description = "Minimum number of edges in the auto-scaling group."
  type        = number
  default     = 2
}

variable "edge_max_size" {
  description = "Maximum number of edges in the auto-scaling group."
  type        = number
  default     = 6
}

variable "edge_desired_capacity" {
  description = "Number of edges to start with (the CPU target-tracking policy moves it between min and max)."
  type        = number
  default     = 2
}

variable "edge_cpu_target" {
  description = "Average CPU utilisation (percent) the edge scaling policy aims for."
  type        = number
  default     = 60
}

variable "edge_cache_size" {
  description = "The edge's chunk cache (--cache / EDGE_CACHE), a human size such as 2GiB. Leave room for the OS within the instance's memory."
  type        = string
  default     = "2GiB"
}

variable "edge_extra_env" {
  description = "Extra environment variables for the edge's systemd unit. Not for secrets (see origin_extra_env)."
  type        = map(string)
  default     = {}
}

# ---- object storage ---------------------------------------------------------

variable "bucket_name" {
  description = "Name of the S3 bucket for sealed chunks and snapshots. Empty: <name>-streams-<account id>-<region>."
  type        = string
  default     = ""
}

variable "object_store_prefix" {
  description = "Key prefix inside the bucket (the path part of --object-store s3://bucket/prefix)."
  type        = string
  default     = "streams"

  validation {
    condition     = can(regex("^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$", var.object_store_prefix))
    error_message = "object_store_prefix: path segments of letters, digits, '.', '_' and '-', without leading or trailing '/'."
  }
}

variable "abort_incomplete_uploads_days" {
  description = "Days after which S3 aborts a multipart upload that was never completed (a seal interrupted by a crash). The bucket's lifecycle never expires stream data (that is the origin's job); its only other rule expires replaced region heartbeats."
  type        = number
  default     = 2
}

variable "bucket_force_destroy" {
  description = "Let `terraform destroy` delete the data bucket with its objects. Keep false outside experiments."
  type        = bool
  default     = false
}

# ---- load balancer and CDN --------------------------------------------------

variable "alb_domain_name" {
  description = "DNS name CloudFront uses to reach the load balancer over HTTPS (e.g. edges-origin.example.com). It must be covered by alb_certificate_arn and point at the load balancer (set route53_zone_id to have this module create the record, or create a CNAME to the output alb_dns_name yourself)."
  type        = string
}

variable "alb_certificate_arn" {
  description = "ACM certificate in `region` for alb_domain_name, used by the load balancer's HTTPS listener."
  type        = string
}

variable "route53_zone_id" {
  description = "Public Route 53 zone holding alb_domain_name. When set, the module creates the alias record; empty: create it yourself."
  type        = string
  default     = ""
}

variable "alb_idle_timeout" {
  description = "Load balancer idle timeout in seconds. Above the edge's SSE session (60 s) and the longest long-poll, so the balancer never cuts a tail first."
  type        = number
  default     = 120
}

variable "cdn_aliases" {
  description = "Alternate domain names of the distribution (e.g. streams.example.com). Needs cdn_certificate_arn."
  type        = list(string)
  default     = []
}

variable "cdn_certificate_arn" {
  description = "ACM certificate in us-east-1 for cdn_aliases. Empty: the *.cloudfront.net certificate."
  type        = string
  default     = ""
}

variable "cdn_price_class" {
  description = "CloudFront price class: PriceClass_100, PriceClass_200 or PriceClass_All."
  type        = string
  default     = "PriceClass_100"
}

variable "cdn_origin_read_timeout" {
  description = "CloudFront origin response timeout in seconds: how long it waits for the first byte and between bytes. 60 is the most AWS allows without a quota increase (then up to 180). Long-polls must answer within it: clients through the CDN should use timeout_ms <= 55000."
  type        = number
  default     = 60

  validation {
    condition     = var.cdn_origin_read_timeout >= 1 && var.cdn_origin_read_timeout <= 180
    error_message = "cdn_origin_read_timeout must be between 1 and 180 (above 60 needs a CloudFront quota increase)."
  }
}

variable "sse_keepalive_seconds" {
  description = "How often an idle SSE tail sends a keepalive comment (EDGE_SSE_KEEPALIVE and ORIGIN_SSE_KEEPALIVE), in seconds: below cdn_origin_read_timeout, so CloudFront never cuts a quiet tail; 0 turns keepalives off."
  type        = number
  default     = 15

  validation {
    condition     = var.sse_keepalive_seconds >= 0 && floor(var.sse_keepalive_seconds) == var.sse_keepalive_seconds
    error_message = "sse_keepalive_seconds must be a whole number of seconds, 0 or more."
  }
}

variable "cdn_origin_keepalive_timeout" {
  description = "CloudFront origin keep-alive timeout in seconds (5-60 without a quota increase)."
  type        = number
  default     = 60
}

variable "waf_rate_limit" {
  description = "Requests per 5 minutes from one client IP above which the CloudFront WAF blocks it. Long-poll and SSE readers reconnect about once a minute, so this is generous."
  type        = number
  default     = 20000
}

variable "waf_log_retention_days" {
  description = "Days to keep the WAF's log of blocked and counted requests (CloudWatch Logs, us-east-1)."
  type        = number
  default     = 365
}

# ---- operations -------------------------------------------------------------

variable "log_retention_days" {
  description = "Days to keep access logs (S3, load balancer, CloudFront, VPC flow logs) in the log bucket."
  type        = number
  default     = 90
}

variable "enable_ssm" {
  description = "Attach AmazonSSMManagedInstanceCore to the instance roles, so operators reach the hosts with Session Manager (the module opens no SSH)."
  type        = bool
  default     = true
}
