//! The forwarding ceiling: a bare hyper reverse proxy with no logic. Each
//! request goes to the origin as it came (the URI pointed at the origin,
//! nothing else changed) over a pooled client, and the origin's answer
//! comes back as it streams. What the edge's forwarding costs beyond this
//! is the edge's own (`compare-forward`).

use std::net::SocketAddr;

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
    /// The origin, `http://host:port`.
    #[arg(long)]
    pub origin: String,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    println!("proxy listening on {}", listener.local_addr()?);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> =
        Client::builder(TokioExecutor::new()).build(connector);
    let origin: std::sync::Arc<str> = args.origin.trim_end_matches('/').into();
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (client, origin) = (client.clone(), origin.clone());
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                let client = client.clone();
                let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
                let uri = format!("{origin}{pq}").parse::<Uri>();
                async move {
                    *req.uri_mut() = uri?;
                    req.headers_mut().remove(hyper::header::HOST);
                    Ok::<_, anyhow::Error>(client.request(req).await?)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
