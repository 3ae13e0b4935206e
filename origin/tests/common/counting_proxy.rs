//! An HTTP proxy in front of the bucket that counts the requests passing
//! through it by kind: the method (`LIST` for a listing) and what the key
//! is (`region/nodes`, `region/partitions/*/tenures`, `region/logs`, ...).
//! What a region costs in requests is read off it. Requests go on as they
//! came (the Host header kept, so their signatures hold).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Counts = Arc<parking_lot::Mutex<BTreeMap<String, u64>>>;

pub struct CountingProxy {
    pub addr: SocketAddr,
    counts: Counts,
    task: tokio::task::JoinHandle<()>,
}

impl CountingProxy {
    /// Listens on a free loopback port and passes requests on to `to`.
    pub async fn start(to: &str) -> CountingProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let counts: Counts = Arc::default();
        let client: Client<HttpConnector, Incoming> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        let to: Arc<str> = to.trim_end_matches('/').into();
        let counted = Arc::clone(&counts);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (client, to, counted) = (client.clone(), to.clone(), counted.clone());
                tokio::spawn(async move {
                    let service = service_fn(move |mut req: Request<Incoming>| {
                        *counted.lock().entry(kind(&req)).or_default() += 1;
                        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
                        *req.uri_mut() = format!("{to}{path}").parse::<Uri>().expect("uri");
                        client.request(req)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        CountingProxy { addr, counts, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The counts since the last take, by kind; starts counting afresh.
    pub fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.counts.lock())
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `METHOD what`, or `LIST what` for a listing (its prefix's).
fn kind(req: &Request<Incoming>) -> String {
    let query = req.uri().query().unwrap_or("");
    if let Some(prefix) = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("prefix="))
        .filter(|_| query.contains("list-type=2"))
    {
        return format!("LIST {}", what(&prefix.replace("%2F", "/")));
    }
    // The path is `/{bucket}/{key}`.
    let key = req.uri().path().trim_start_matches('/');
    let key = key.split_once('/').map_or("", |(_, key)| key);
    format!("{} {}", req.method(), what(key))
}

/// What a key is: the part under `region/` with numbers and names
/// replaced by `*`.
fn what(key: &str) -> String {
    let Some(at) = key.find("region/") else {
        return "other".into();
    };
    let parts: Vec<&str> = key[at..].split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        ["region", "partitions", _, kind, ..] => format!("region/partitions/*/{kind}"),
        ["region", top, ..] => format!("region/{top}"),
        _ => "region".into(),
    }
}
