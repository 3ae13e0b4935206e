//! The command line of subscriptions and webhooks (`ORIGIN_*` variables
//! too), flattened into the origin's.

use std::time::Duration;

use clap::Args;

use super::SubscriptionsConfig;
use crate::config::{parse_duration, parse_size};
use crate::core::subscription::address::{Cidr, UrlPolicy};

#[derive(Debug, Clone, Args)]
pub struct SubscriptionFlags {
    /// The server's public URL (`https://streams.example.com`), for the
    /// callback and JWKS URLs subscriptions name; default: as each
    /// request reached the server (`Host`, `X-Forwarded-Host`,
    /// `X-Forwarded-Proto`).
    #[arg(long, env = "ORIGIN_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Development only: webhook URLs may use `http://`.
    #[arg(long, env = "ORIGIN_WEBHOOK_ALLOW_HTTP", default_value_t = false, action = clap::ArgAction::Set)]
    pub webhook_allow_http: bool,
    /// Development only: address blocks webhooks may reach though they are
    /// not public, comma-separated (e.g. `127.0.0.0/8` for a receiver on
    /// this machine). Every other loopback, private, link-local or
    /// reserved address is refused.
    #[arg(long, env = "ORIGIN_WEBHOOK_ALLOW", value_delimiter = ',', value_parser = Cidr::parse)]
    pub webhook_allow: Vec<Cidr>,
    /// A webhook delivery without a whole answer by then failed (retried).
    #[arg(long, env = "ORIGIN_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = parse_duration)]
    pub webhook_timeout: Duration,
    /// Bytes read of a webhook receiver's answer.
    #[arg(long, env = "ORIGIN_WEBHOOK_ANSWER_MAX", default_value = "64KiB", value_parser = parse_size)]
    pub webhook_answer_max: u64,
    /// Webhook deliveries in flight at once, in total and to one host.
    #[arg(long, env = "ORIGIN_WEBHOOK_DELIVERIES", default_value_t = 1024)]
    pub webhook_deliveries: usize,
    #[arg(long, env = "ORIGIN_WEBHOOK_DELIVERIES_PER_HOST", default_value_t = 64)]
    pub webhook_deliveries_per_host: usize,
    /// Subscriptions on this server, and of one account.
    #[arg(long, env = "ORIGIN_MAX_SUBSCRIPTIONS", default_value_t = 10_000)]
    pub max_subscriptions: usize,
    #[arg(
        long,
        env = "ORIGIN_MAX_SUBSCRIPTIONS_PER_ACCOUNT",
        default_value_t = 1_000
    )]
    pub max_subscriptions_per_account: usize,
    /// Streams one subscription links.
    #[arg(long, env = "ORIGIN_MAX_SUBSCRIPTION_STREAMS", default_value_t = 1_000)]
    pub max_subscription_streams: usize,
    /// Links of all subscriptions to streams together.
    #[arg(
        long,
        env = "ORIGIN_MAX_SUBSCRIPTION_LINKS",
        default_value_t = 1_000_000
    )]
    pub max_subscription_links: usize,
    /// The webhook signing key is replaced this often; a replaced key's
    /// public half stays published for `--webhook-key-retired-for`.
    #[arg(long, env = "ORIGIN_WEBHOOK_KEY_ROTATION", default_value = "720h", value_parser = parse_duration)]
    pub webhook_key_rotation: Duration,
    #[arg(long, env = "ORIGIN_WEBHOOK_KEY_RETIRED_FOR", default_value = "24h", value_parser = parse_duration)]
    pub webhook_key_retired_for: Duration,
    /// A new signing key is published this long before it signs (the JWK
    /// Set is cacheable for 300 s: keep this at least that).
    #[arg(long, env = "ORIGIN_WEBHOOK_KEY_PUBLISH_AHEAD", default_value = "5m", value_parser = parse_duration)]
    pub webhook_key_publish_ahead: Duration,
}

impl SubscriptionFlags {
    pub fn config(&self) -> SubscriptionsConfig {
        SubscriptionsConfig {
            public_url: self
                .public_url
                .clone()
                .map(|u| u.trim_end_matches('/').to_owned())
                .filter(|u| !u.is_empty()),
            url_policy: UrlPolicy {
                allow_http: self.webhook_allow_http,
                allow: self.webhook_allow.clone(),
            },
            webhook_timeout: self.webhook_timeout,
            webhook_answer_max: usize::try_from(self.webhook_answer_max).unwrap_or(usize::MAX),
            max_deliveries: self.webhook_deliveries.max(1),
            max_deliveries_per_host: self.webhook_deliveries_per_host.max(1),
            max_subscriptions: self.max_subscriptions,
            max_per_account: self.max_subscriptions_per_account,
            max_streams_per_subscription: self.max_subscription_streams,
            max_links: self.max_subscription_links,
            key_rotation: self.webhook_key_rotation.max(Duration::from_secs(1)),
            key_publish_ahead: self.webhook_key_publish_ahead,
            key_retired_for: self.webhook_key_retired_for,
            ..SubscriptionsConfig::default()
        }
    }
}
