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

/// `METHOD what`, or `LIST what` for a listing (`testkit::bucket`).
fn kind(req: &Request<Incoming>) -> String {
    testkit::bucket::request_kind(
        req.method().as_str(),
        req.uri().path(),
        req.uri().query().unwrap_or(""),
    )
}
