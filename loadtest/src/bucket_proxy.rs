//! What a region asks of its bucket, counted: a proxy in front of the
//! S3 endpoint that passes every request on as it came (the Host header
//! kept, so signatures hold) and prints, every `--report-every`, one line
//! of the requests since the last by kind: the method (`LIST` for a
//! listing) and what the key is (`region/nodes`, `region/logs`,
//! `region/partitions/*/tenures`, ...). `loadtest/region-idle-cost.sh`
//! reads it.

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

/// `METHOD what`, or `LIST what` for a listing (of its prefix).
fn kind<B>(req: &Request<B>) -> String {
    let query = req.uri().query().unwrap_or("");
    if query.contains("list-type=2") {
        let prefix = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("prefix="))
            .unwrap_or("");
        return format!("LIST {}", what(&prefix.replace("%2F", "/")));
    }
    // The path is `/{bucket}/{key}`.
    let key = req.uri().path().trim_start_matches('/');
    let key = key.split_once('/').map_or("", |(_, key)| key);
    format!("{} {}", req.method(), what(key))
}

/// What a key is: the part from `region/` on, names and numbers as `*`.
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

#[cfg(test)]
mod tests {
    use super::kind;

    fn of(method: &str, uri: &str) -> String {
        let req = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap();
        kind(&req)
    }

    #[test]
    fn requests_are_counted_by_what_their_key_is() {
        assert_eq!(
            of(
                "HEAD",
                "/bench/p8/region/partitions/0003/tenures/00000000000000000001"
            ),
            "HEAD region/partitions/*/tenures"
        );
        assert_eq!(
            of("GET", "/bench/p8/region/logs/ab12/00000000000000000007"),
            "GET region/logs"
        );
        assert_eq!(
            of("GET", "/bench?list-type=2&prefix=p8%2Fregion%2Fnodes%2F"),
            "LIST region/nodes"
        );
        assert_eq!(of("PUT", "/bench/p8/streams/x"), "PUT other");
    }
}
