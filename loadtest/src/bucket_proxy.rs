//! What a region asks of its bucket, counted: a proxy in front of the
//! S3 endpoint that passes every request on as it came (the Host header
//! kept, so signatures hold) and prints, every `--report-every`, one line
//! of the requests since the last by kind: the method (`LIST` for a
//! listing) and what the key is (`region/nodes`, `region/logs`,
//! `region/partitions/*/tenures`, ...: `testkit::bucket`).
//! `loadtest/region-idle-cost.sh` reads it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// The bucket's endpoint, `http://host:port`.
    #[arg(long)]
    pub to: String,
    /// Seconds between report lines.
    #[arg(long, default_value_t = 5)]
    pub report_every: u64,
}

type Counts = Arc<std::sync::Mutex<BTreeMap<String, u64>>>;

pub async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    println!("bucket proxy listening on {}", listener.local_addr()?);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let to: Arc<str> = args.to.trim_end_matches('/').into();
    let counts: Counts = Arc::default();
    let reported = Arc::clone(&counts);
    let every = Duration::from_secs(args.report_every.max(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.tick().await;
        loop {
            tick.tick().await;
            let counts = std::mem::take(&mut *reported.lock().expect("counts"));
            println!("{}", serde_json::to_string(&counts).expect("counts"));
        }
    });
    loop {
        let (stream, _) = listener.accept().await?;
        let (client, to, counts) = (client.clone(), to.clone(), counts.clone());
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                *counts
                    .lock()
                    .expect("counts")
                    .entry(kind(&req))
                    .or_default() += 1;
                let client = client.clone();
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                let uri = format!("{to}{pq}").parse::<Uri>();
                async move {
                    *req.uri_mut() = uri?;
                    Ok::<_, anyhow::Error>(client.request(req).await?)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// `METHOD what`, or `LIST what` for a listing (`testkit::bucket`).
fn kind<B>(req: &Request<B>) -> String {
    testkit::bucket::request_kind(
        req.method().as_str(),
        req.uri().path(),
        req.uri().query().unwrap_or(""),
    )
}
