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
//! Behind a region's follower, the owner sees the follower's address on
//! every forwarded request; the follower names the client in
//! `ds-region-client` (vouched for by the region's peer key in
//! `ds-region-via`), and the owner counts that client ([`Vouched`]).
//!
//! Shares live in a map with an entry only while a client holds room, so it
//! is bounded by the bodies in flight (at most one per connection).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{Notify, Semaphore, SemaphorePermit};

use super::error::ApiError;
use super::{HttpConfig, OwnLines};

/// Who a body's room is counted against.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClientKey {
    Account(Box<str>),
    /// IPv4 addresses whole; IPv6 by their /64 (one host has a /64).
    Address(IpAddr),
    /// A forwarding header's value that is not an address (kept bounded).
    Named(Box<str>),
}

/// The longest forwarding-header value kept as a client's name.
const LONGEST_NAME: usize = 64;

impl ClientKey {
    fn address(ip: IpAddr) -> ClientKey {
        ClientKey::Address(match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
            },
            v4 => v4,
        })
    }

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
            Some(ip) => ClientKey::address(ip),
            None => ClientKey::Named("".into()),
        }
    }

    /// `203.0.113.7:46532`, `[2001:db8::1]:443`, `2001:db8::1` or a bare
    /// address; the last entry of a comma-separated list (the one the
    /// nearest proxy wrote).
    fn from_forwarded(value: &str) -> ClientKey {
        let last = value.rsplit(',').next().unwrap_or("").trim();
        if let Ok(sa) = last.parse::<std::net::SocketAddr>() {
            return ClientKey::address(sa.ip());
        }
        // `address:port` with IPv6 unbracketed (CloudFront's form: it
        // always names the port). An IPv6 address without one loses its
        // last group here, the same for every request of that client.
        if let Some(ip) = last
            .rsplit_once(':')
            .and_then(|(ip, _)| ip.parse::<IpAddr>().ok())
        {
            return ClientKey::address(ip);
        }
        if let Ok(ip) = last.parse::<IpAddr>() {
            return ClientKey::address(ip);
        }
        let mut end = last.len().min(LONGEST_NAME);
        while !last.is_char_boundary(end) {
            end -= 1;
        }
        ClientKey::Named(last[..end].into())
    }
}

/// On a request a region's follower forwarded: the client's address as the
/// follower saw it (`ds-region-client`, vouched for by the peer key). The
/// region's router sets it; no client can.
#[derive(Clone, Debug)]
pub struct Vouched(pub http::HeaderValue);

/// The client a request's body is counted against (see [`ClientKey::of`]).
pub fn client_of(state: &super::AppState, req: &axum::extract::Request) -> ClientKey {
    let caller = req.extensions().get::<crate::auth::Caller>();
    let header = req
        .extensions()
        .get::<Vouched>()
        .map(|v| &v.0)
        .or_else(|| address_header(&state.config, req));
    let peer = shell::request_id::client().map(|c| c.addr.ip());
    ClientKey::of(caller.map(|c| c.account.as_str()), header, peer)
}

/// The value of the configured client address header on a request.
fn address_header<'r, B>(
    config: &super::HttpConfig,
    req: &'r http::Request<B>,
) -> Option<&'r http::HeaderValue> {
    config
        .client_address_header
        .as_ref()
        .and_then(|name| req.headers().get(name))
}

/// The client's address as this origin sees it, as a header value a
/// forward names it by: what the configured header says, else the socket's
/// peer. None for a request with neither (made in process).
pub fn address_of<B>(
    config: &super::HttpConfig,
    req: &http::Request<B>,
) -> Option<http::HeaderValue> {
    if let Some(v) = req.extensions().get::<Vouched>() {
        return Some(v.0.clone());
    }
    let named = address_header(config, req)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .and_then(|last| http::HeaderValue::from_str(last.trim()).ok());
    if named.is_some() {
        return named;
    }
    // The socket address whole (`[v6]:port` or `v4:port`): a bare IPv6
    // address would be read back as `address:port` and cut short.
    let peer = shell::request_id::client()?;
    http::HeaderValue::from_str(&peer.addr.to_string()).ok()
}

pub struct Ingress {
    /// Permits are bytes. On cache lines of their own: every request writes
    /// them, and the fields around them are read by every request on the
    /// other core.
    budget: OwnLines<Semaphore>,
    /// What each client holds now; no entry for a client holding none with
    /// no request waiting.
    shares: Mutex<HashMap<ClientKey, Share>>,
    share: u64,
    whole: u64,
    wait: Duration,
}

/// One client's share in use.
struct Share {
    held: u64,
    /// Its requests waiting for room in the share, woken when it gives some
    /// back (only its own: one client's waiting costs no one else). Made
    /// by the first to wait, so a request that does not wait allocates none.
    returned: Option<Arc<Notify>>,
    waiting: usize,
}

/// Room in one client's share; given back on drop.
pub struct ShareRoom<'a> {
    ingress: &'a Ingress,
    client: ClientKey,
    bytes: u64,
}

/// Room held in the budget and in a client's share; given back on drop.
#[derive(Default)]
pub struct Room<'a> {
    permit: Option<SemaphorePermit<'a>>,
    share: Option<ShareRoom<'a>>,
}

const CLIENT_BUSY: &str = "this client has too many request bodies in flight; retry shortly";

impl Ingress {
    pub fn new(config: &HttpConfig) -> Ingress {
        let whole = config
            .ingress_budget
            .clamp(1, Semaphore::MAX_PERMITS as u64);
        let percent = u64::from(config.ingress_share_percent.clamp(1, 100));
        // At least one largest body, so any body can pass. A snapshot being
        // assembled (up to `max_snapshot`) takes the whole share at most
        // and the budget for all of it: one always passes, and a client's
        // second waits for the first.
        let largest = config.max_body.min(whole);
        Ingress {
            budget: OwnLines(Semaphore::new(whole as usize)),
            shares: Mutex::new(HashMap::new()),
            share: (whole / 100 * percent).max(largest),
            whole,
            wait: config.ingress_wait,
        }
    }

    /// Bytes one client may hold at once.
    pub fn share(&self) -> u64 {
        self.share
    }

    /// Room for `bytes` (at most the whole budget) in `client`'s share and
    /// in the budget, waiting `ingress_wait` at most for each: 503 +
    /// Retry-After past it.
    pub async fn reserve(&self, client: &ClientKey, bytes: u64) -> Result<Room<'_>, ApiError> {
        let share = self.share_room(client, bytes).await?;
        let mut room = self.memory(bytes).await?;
        room.share = Some(share);
        Ok(room)
    }

    /// Room for `bytes` in the budget only (the body's share was taken for
    /// its declared length).
    pub async fn memory(&self, bytes: u64) -> Result<Room<'_>, ApiError> {
        let permits = u32::try_from(bytes.clamp(1, self.whole)).unwrap_or(u32::MAX);
        let permit = match self.budget.try_acquire_many(permits) {
            Ok(p) => p,
            // Boxed, like every rare wait on a request's path: a future is
            // as large as everything it may wait on.
            Err(_) => Box::pin(tokio::time::timeout(
                self.wait,
                self.budget.acquire_many(permits),
            ))
            .await
            .map_err(|_| ApiError::Busy("too many request bodies in flight; retry shortly"))?
            .map_err(|_| ApiError::Busy("shutting down"))?,
        };
        Ok(Room {
            permit: Some(permit),
            share: None,
        })
    }

    /// Room for `bytes` in `client`'s share, waiting `ingress_wait` at most.
    pub async fn share_room(
        &self,
        client: &ClientKey,
        bytes: u64,
    ) -> Result<ShareRoom<'_>, ApiError> {
        // A share holds at most itself (a large snapshot takes all of it).
        let bytes = bytes.clamp(1, self.share);
        if !self.take_share(client, bytes, false) {
            Box::pin(tokio::time::timeout(
                self.wait,
                self.wait_for_share(client, bytes),
            ))
            .await
            .map_err(|_| ApiError::Busy(CLIENT_BUSY))?;
        }
        Ok(ShareRoom {
            ingress: self,
            client: client.clone(),
            bytes,
        })
    }

    /// Takes `bytes` of `client`'s share if they fit; `waited` when a
    /// waiter that registered itself takes them (it stops counting).
    fn take_share(&self, client: &ClientKey, bytes: u64, waited: bool) -> bool {
        let mut shares = self.shares.lock();
        let held = shares.get(client).map_or(0, |s| s.held);
        let fits = held.checked_add(bytes).filter(|after| *after <= self.share);
        let Some(after) = fits else {
            return false;
        };
        match shares.get_mut(client) {
            Some(s) => {
                s.held = after;
                if waited {
                    s.waiting = s.waiting.saturating_sub(1);
                }
            }
            None => {
                shares.insert(
                    client.clone(),
                    Share {
                        held: after,
                        returned: None,
                        waiting: 0,
                    },
                );
            }
        }
        true
    }

    async fn wait_for_share(&self, client: &ClientKey, bytes: u64) {
        let returned = {
            let mut shares = self.shares.lock();
            let s = shares.entry(client.clone()).or_insert_with(|| Share {
                held: 0,
                returned: None,
                waiting: 0,
            });
            s.waiting += 1;
            Arc::clone(s.returned.get_or_insert_with(Arc::default))
        };
        // Counted out on every way out: taken, or timed out (dropped).
        let mut waiter = Waiter {
            ingress: self,
            client,
            counted: true,
        };
        loop {
            let notified = returned.notified();
            if self.take_share(client, bytes, true) {
                waiter.counted = false;
                return;
            }
            notified.await;
        }
    }

    fn give_back(&self, client: &ClientKey, bytes: u64) {
        let mut shares = self.shares.lock();
        if let Some(s) = shares.get_mut(client) {
            s.held = s.held.saturating_sub(bytes);
            if let (1.., Some(returned)) = (s.waiting, &s.returned) {
                returned.notify_waiters();
            } else if s.held == 0 {
                shares.remove(client);
            }
        }
    }

    /// Clients holding room (or waiting for it) now.
    pub fn clients(&self) -> usize {
        self.shares.lock().len()
    }

    /// Bytes of the budget held now.
    pub fn in_use(&self) -> u64 {
        self.whole - self.budget.available_permits() as u64
    }

    /// The budget's gauges.
    pub fn expose(&self, e: &mut shell::metrics::Exposition) {
        e.gauge(
            "ds_origin_ingress_bytes",
            "Bytes of the request body budget held now.",
            self.in_use() as f64,
        )
        .gauge(
            "ds_origin_ingress_clients",
            "Clients holding room in the body budget (or waiting for it).",
            self.clients() as f64,
        )
        .gauge(
            "ds_origin_ingress_share_bytes",
            "The most of the body budget one client may hold.",
            self.share as f64,
        );
    }
}

/// A request waiting for its client's share; counted out when it leaves.
struct Waiter<'a> {
    ingress: &'a Ingress,
    client: &'a ClientKey,
    counted: bool,
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if !self.counted {
            return;
        }
        let mut shares = self.ingress.shares.lock();
        if let Some(s) = shares.get_mut(self.client) {
            s.waiting = s.waiting.saturating_sub(1);
            if s.waiting == 0 && s.held == 0 {
                shares.remove(self.client);
            }
        }
    }
}

impl<'a> Room<'a> {
    /// Gives back the share this room holds past `bytes` (a body that took
    /// share for its declared length and then paused keeps what it sent).
    pub fn shrink_share(&mut self, bytes: u64) {
        if let Some(s) = &mut self.share {
            if s.bytes > bytes {
                s.ingress.give_back(&s.client, s.bytes - bytes);
                s.bytes = bytes;
            }
        }
    }

    /// Room in a share alone.
    pub fn of_share(share: ShareRoom<'a>) -> Room<'a> {
        Room {
            permit: None,
            share: Some(share),
        }
    }

    /// Adds `other`'s room to this one (the same request's).
    pub fn merge(&mut self, other: Room<'a>) {
        let Room { permit, share } = other;
        match (&mut self.permit, permit) {
            (Some(p), Some(o)) => p.merge(o),
            (mine @ None, Some(o)) => *mine = Some(o),
            _ => {}
        }
        match (&mut self.share, share) {
            (Some(s), Some(mut o)) => {
                debug_assert!(s.client == o.client, "one request, one client");
                s.bytes = s.bytes.saturating_add(std::mem::take(&mut o.bytes));
            }
            (mine @ None, Some(o)) => *mine = Some(o),
            _ => {}
        }
    }
}

impl Drop for ShareRoom<'_> {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.ingress.give_back(&self.client, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_named_by_its_socket_address_is_read_back_as_that_client() {
        for sa in [
            "1.2.3.4:80",
            "[::ffff:1.2.3.4]:5",
            "[2001:0:0:2:3:4:5:6]:443",
            "[2001:db8::1]:1",
        ] {
            let sa: std::net::SocketAddr = sa.parse().unwrap();
            assert_eq!(
                ClientKey::from_forwarded(&sa.to_string()),
                ClientKey::address(sa.ip()),
                "{sa}"
            );
        }
        // The IPv4-mapped address is its IPv4 client.
        assert_eq!(
            ClientKey::from_forwarded("[::ffff:1.2.3.4]:5"),
            ClientKey::from_forwarded("1.2.3.4:9")
        );
    }

    fn ingress(budget: u64, percent: u8, max_body: u64) -> Ingress {
        Ingress::new(&HttpConfig {
            ingress_budget: budget,
            ingress_share_percent: percent,
            max_body,
            max_snapshot: max_body,
            ingress_wait: Duration::from_secs(5),
            ..HttpConfig::default()
        })
    }

    fn addr(last: u8) -> ClientKey {
        ClientKey::address(IpAddr::from([127, 0, 0, last]))
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
        assert_eq!(i.shares.lock()[&addr(1)].held, 250);
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
            ("2001:db8::1:443", "2001:db8::"),
            ("[2001:db8:0:7::2]:443", "2001:db8:0:7::"),
            ("198.51.100.1, 203.0.113.9", "203.0.113.9"),
            ("192.0.2.3", "192.0.2.3"),
        ] {
            assert_eq!(
                ClientKey::of(None, Some(&h(value)), peer),
                ClientKey::address(ip.parse().unwrap()),
                "{value}"
            );
        }
        let long = http::HeaderValue::from_str(&"x".repeat(500)).unwrap();
        match ClientKey::of(None, Some(&long), peer) {
            ClientKey::Named(n) => assert_eq!(n.len(), LONGEST_NAME),
            other => panic!("{other:?}"),
        }
        assert_eq!(ClientKey::of(None, None, peer), ClientKey::address(ip));
    }
}
