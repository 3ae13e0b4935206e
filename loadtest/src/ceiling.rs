//! The ceiling: a bare hyper HTTP/1.1 server that reads each request body and
//! answers at once (POST: 204; PUT: 201, empty, as a create is answered;
//! anything else: 200 with a fixed body). A PUT answered with the fixed body
//! would make creating a million streams a transfer of a million read bodies.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Size of the body GET answers with.
    #[arg(long, default_value_t = 65536)]
    pub get_bytes: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).await?;
    println!("ceiling listening on {}", listener.local_addr()?);
    serve(listener, Bytes::from(vec![b'x'; args.get_bytes])).await
}

pub async fn serve(listener: TcpListener, get_body: Bytes) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let get_body = get_body.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                let get_body = get_body.clone();
                async move {
                    let empty = match *req.method() {
                        Method::POST => Some(204),
                        Method::PUT => Some(201),
                        _ => None,
                    };
                    let _ = req.into_body().collect().await;
                    let resp = match empty {
                        Some(status) => Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::new()))
                            .expect("response"),
                        None => Response::new(Full::new(get_body)),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
