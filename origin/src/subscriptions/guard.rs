//! The webhook client's resolver: every address a webhook's host name
//! resolves to is checked when the delivery connects, and only permitted
//! ones are tried (`core::subscription::address`). A name that resolved to
//! a public address when the subscription was made and to a private one
//! now (DNS rebinding) reaches nothing. A URL with a literal address is
//! checked before the request is made (the client resolves nothing then).

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest13::dns::{Addrs, Name, Resolve, Resolving};

use crate::core::subscription::address::UrlPolicy;

pub struct GuardedResolver {
    pub policy: Arc<UrlPolicy>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let permitted: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| policy.permits(a.ip()))
                .collect();
            if permitted.is_empty() {
                return Err(format!(
                    "{host} resolves to no public address ({} refused)",
                    all.len()
                )
                .into());
            }
            Ok(Box::new(permitted.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::subscription::address::Cidr;

    #[tokio::test]
    async fn a_name_that_resolves_to_loopback_is_refused() {
        let strict = GuardedResolver {
            policy: Arc::new(UrlPolicy::default()),
        };
        let err = match strict.resolve("localhost".parse().unwrap()).await {
            Ok(_) => panic!("localhost resolved to a permitted address"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("no public address"), "{err}");
        let dev = GuardedResolver {
            policy: Arc::new(UrlPolicy {
                allow_http: true,
                allow: vec![
                    Cidr::parse("127.0.0.0/8").unwrap(),
                    Cidr::parse("::1").unwrap(),
                ],
            }),
        };
        let addrs: Vec<_> = dev
            .resolve("localhost".parse().unwrap())
            .await
            .unwrap()
            .collect();
        assert!(!addrs.is_empty());
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
