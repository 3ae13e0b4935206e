//! The ingress budget: bytes of request bodies (and snapshots being
//! assembled) held in memory at once, and each client's share of it.
//!
//! One budget bounds memory; shares keep one client from taking all of it.
//! A client is the account a credential names, or, for a request without
//! one (an open account's writers), its address: the socket's peer, or the
//! value of `client_address_header` when a trusted proxy in front names the
//! client (CloudFront's `CloudFront-Viewer-Address`; behind a CDN every
//! request comes from the CDN's few addresses). A client holds at most
//! `ingress_share_percent` of the budget; room past its share, like room
//! past the budget, is waited for up to `ingress_wait`, then refused with
//! 503 + `Retry-After`.
//!
//! Shares live in a map with an entry only while a client holds room, so it
//! is bounded by the bodies in flight (at most one per connection).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::error::ApiError;
use super::{HttpConfig, OwnLines};

/// Who a body's room is counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClientKey {
    Account(Box<str>),
    Address(IpAddr),
    /// A forwarding header's value that is not an address (kept bounded).
    Named(Box<str>),
}

/// The longest forwarding-header value kept as a client's name.
const LONGEST_NAME: usize = 64;

impl ClientKey {
    /// The client of a request: its caller's account, else the address the
    /// configured header names, else the socket's peer.
    pub fn of(
        account: Option<&str>,
        header: Option<&http::HeaderValue>,
        peer: Option<IpAddr>,
    ) -> ClientKey {
        if let Some(account) = account {
            return ClientKey::Account(account.into());
        }
        if let Some(value) = header.and_then(|v| v.to_str().ok()) {
            return ClientKey::from_forwarded(value);
        }
        match peer {
            Some(ip) => ClientKey::Address(ip),
            None => ClientKey::Named("".into()),
        }
    }

    /// `203.0.113.7:46532`, `[2001:db8::1]:443`, `2001:db8::1` or a bare
    /// address; the last entry of a comma-separated list (the one the
    /// nearest proxy wrote).
    fn from_forwarded(value: &str) -> ClientKey {
        let last = value.rsplit(',').next().unwrap_or("").trim();
        if let Ok(sa) = last.parse::<std::net::SocketAddr>() {
            return ClientKey::Address(sa.ip());
        }
        // `address:port` with IPv6 unbracketed (CloudFront's form: it
        // always names the port). An IPv6 address without one loses its
        // last group here, the same for every request of that client.
        if let Some(ip) = last
            .rsplit_once(':')
            .and_then(|(ip, _)| ip.parse::<IpAddr>().ok())
        {
            return ClientKey::Address(ip);
        }
        if let Ok(ip) = last.parse::<IpAddr>() {
            return ClientKey::Address(ip);
        }
        let mut end = last.len().min(LONGEST_NAME);
        while !last.is_char_boundary(end) {
            end -= 1;
        }
        ClientKey::Named(last[..end].into())
    }
}

/// The client a request's body is counted against (see [`ClientKey::of`]).
pub fn client_of(state: &super::AppState, req: &axum::extract::Request) -> ClientKey {
    let caller = req.extensions().get::<crate::auth::Caller>();
    let header = state
        .config
        .client_address_header
        .as_ref()
        .and_then(|name| req.headers().get(name));
    let peer = req.extensions().get::<shell::Client>().map(|c| c.addr.ip());
    ClientKey::of(caller.map(|c| c.account.as_str()), header, peer)
}

pub struct Ingress {
    /// Permits are bytes. On cache lines of their own: every request writes
    /// them, and the fields around them are read by every request on the
    /// other core.
    budget: OwnLines<Semaphore>,
    /// Bytes each client holds now; no entry for a client holding none.
    shares: Mutex<HashMap<ClientKey, u64>>,
    /// Woken when a client gives room back.
    returned: Notify,
    share: u64,
    whole: u64,
    wait: Duration,
}

/// Room held in the budget and in a client's share; given back on drop.
pub struct Room<'a> {
    ingress: &'a Ingress,
    permit: Option<SemaphorePermit<'a>>,
    client: Option<ClientKey>,
    bytes: u64,
}

impl Ingress {
    pub fn new(config: &HttpConfig) -> Ingress {
        let whole = config.ingress_budget.min(Semaphore::MAX_PERMITS as u64);
        let percent = u64::from(config.ingress_share_percent.clamp(1, 100));
        Ingress {
            budget: OwnLines(Semaphore::new(whole as usize)),
            shares: Mutex::new(HashMap::new()),
            returned: Notify::new(),
            // At least one largest body, so any single request can pass.
            share: (whole / 100 * percent).max(config.max_body.min(whole)),
            whole,
            wait: config.ingress_wait,
        }
    }

    /// Bytes one client may hold at once.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// Takes `bytes` more of room for `client` (at most the whole budget),
    /// waiting `ingress_wait` at most: 503 + Retry-After past it.
    pub async fn reserve(&self, client: &ClientKey, bytes: u64) -> Result<Room<'_>, ApiError> {
        let bytes = bytes.clamp(1, self.whole.max(1));
        if !self.take_share(client, bytes) {
            // Boxed, like every rare wait on a request's path: a future is
            // as large as everything it may wait on.
            Box::pin(tokio::time::timeout(
                self.wait,
                self.wait_for_share(client, bytes),
            ))
            .await
            .map_err(|_| {
                ApiError::Busy("this client has too many request bodies in flight; retry shortly")
            })?;
        }
        let mut room = Room {
            ingress: self,
            permit: None,
            client: Some(client.clone()),
            bytes,
        };
        let permits = u32::try_from(bytes).unwrap_or(u32::MAX);
        room.permit = Some(match self.budget.try_acquire_many(permits) {
            Ok(p) => p,
            Err(_) => Box::pin(tokio::time::timeout(
                self.wait,
                self.budget.acquire_many(permits),
            ))
            .await
            .map_err(|_| ApiError::Busy("too many request bodies in flight; retry shortly"))?
            .map_err(|_| ApiError::Busy("shutting down"))?,
        });
        Ok(room)
    }

    fn take_share(&self, client: &ClientKey, bytes: u64) -> bool {
        let mut shares = self.shares.lock();
        let held = shares.get(client).copied().unwrap_or(0);
        match held.checked_add(bytes) {
            Some(after) if after <= self.share => {
                match shares.get_mut(client) {
                    Some(h) => *h = after,
                    None => {
                        shares.insert(client.clone(), after);
                    }
                }
                true
            }
            _ => false,
        }
    }

    async fn wait_for_share(&self, client: &ClientKey, bytes: u64) {
        loop {
            let returned = self.returned.notified();
            if self.take_share(client, bytes) {
                return;
            }
            returned.await;
        }
    }

    fn give_back(&self, client: &ClientKey, bytes: u64) {
        let mut shares = self.shares.lock();
        if let Some(held) = shares.get_mut(client) {
            *held = held.saturating_sub(bytes);
            if *held == 0 {
                shares.remove(client);
            }
        }
        drop(shares);
        self.returned.notify_waiters();
    }

    /// Clients holding room now.
    pub fn clients(&self) -> usize {
        self.shares.lock().len()
    }

    /// Bytes of the budget held now.
    pub fn in_use(&self) -> u64 {
        self.whole - self.budget.available_permits() as u64
    }

    /// The budget's gauges, as Prometheus text.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# TYPE ds_ingress_bytes gauge\nds_ingress_bytes {}\n\
             # TYPE ds_ingress_clients gauge\nds_ingress_clients {}\n\
             # TYPE ds_ingress_share_bytes gauge\nds_ingress_share_bytes {}",
            self.in_use(),
            self.clients(),
            self.share
        );
    }
}

impl<'a> Room<'a> {
    /// Adds `other`'s room to this one (the same client's).
    pub fn merge(&mut self, mut other: Room<'a>) {
        if let (Some(p), Some(o)) = (&mut self.permit, other.permit.take()) {
            p.merge(o);
        }
        self.bytes = self.bytes.saturating_add(other.bytes);
        other.client = None;
    }
}

impl Drop for Room<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            self.ingress.give_back(&client, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(budget: u64, percent: u8, max_body: u64) -> Ingress {
        Ingress::new(&HttpConfig {
            ingress_budget: budget,
            ingress_share_percent: percent,
            max_body,
            ingress_wait: Duration::from_secs(5),
            ..HttpConfig::default()
        })
    }

    fn addr(last: u8) -> ClientKey {
        ClientKey::Address(IpAddr::from([127, 0, 0, last]))
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_past_its_share_waits_then_is_refused_while_others_pass() {
        let i = ingress(1000, 25, 100);
        assert_eq!(i.share(), 250);
        let held = i.reserve(&addr(1), 250).await.unwrap();
        let started = tokio::time::Instant::now();
        assert!(matches!(
            i.reserve(&addr(1), 1).await,
            Err(ApiError::Busy(_))
        ));
        assert_eq!(started.elapsed(), Duration::from_secs(5));
        let other = i.reserve(&addr(2), 250).await.unwrap();
        drop((held, other));
        assert_eq!(i.clients(), 0, "no entry for a client holding nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn room_given_back_lets_a_waiting_client_in() {
        let i = ingress(1000, 25, 100);
        let held = i.reserve(&addr(1), 200).await.unwrap();
        let client = addr(1);
        let waiting = i.reserve(&client, 100);
        let release = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(held);
        };
        let (room, ()) = tokio::join!(waiting, release);
        assert!(room.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn merged_room_is_given_back_whole() {
        let i = ingress(1000, 50, 100);
        let mut a = i.reserve(&addr(1), 100).await.unwrap();
        let b = i.reserve(&addr(1), 150).await.unwrap();
        a.merge(b);
        assert_eq!(i.shares.lock()[&addr(1)], 250);
        drop(a);
        assert_eq!(i.clients(), 0);
        assert_eq!(i.budget.available_permits(), 1000);
    }

    #[test]
    fn a_share_holds_at_least_one_largest_body() {
        assert_eq!(ingress(1000, 1, 100).share(), 100);
    }

    #[test]
    fn clients_are_named_by_account_header_or_peer() {
        let ip = IpAddr::from([10, 0, 0, 1]);
        let peer = Some(ip);
        assert_eq!(
            ClientKey::of(Some("acme"), None, peer),
            ClientKey::Account("acme".into())
        );
        let h = |v: &'static str| http::HeaderValue::from_static(v);
        for (value, ip) in [
            ("203.0.113.7:46532", "203.0.113.7"),
            ("2001:db8::1:443", "2001:db8::1"),
            ("[2001:db8::2]:443", "2001:db8::2"),
            ("198.51.100.1, 203.0.113.9", "203.0.113.9"),
            ("192.0.2.3", "192.0.2.3"),
        ] {
            assert_eq!(
                ClientKey::of(None, Some(&h(value)), peer),
                ClientKey::Address(ip.parse().unwrap()),
                "{value}"
            );
        }
        let long = http::HeaderValue::from_str(&"x".repeat(500)).unwrap();
        match ClientKey::of(None, Some(&long), peer) {
            ClientKey::Named(n) => assert_eq!(n.len(), LONGEST_NAME),
            other => panic!("{other:?}"),
        }
        assert_eq!(ClientKey::of(None, None, peer), ClientKey::Address(ip));
    }
}
