//! A webhook receiver for the region's tests: a real HTTP server on an
//! address the origins can reach (the test network's gateway), answering
//! every delivery `{"done": true}` and keeping, per stream, the highest
//! tail a delivered wake covered. Signatures are checked by the end-to-end
//! tests (`e2e/python/test_webhooks_region.py`); this one counts coverage.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

#[derive(Default)]
pub struct Covered {
    /// Stream path (root-relative) → the highest tail delivered.
    pub tails: HashMap<String, String>,
    pub deliveries: usize,
}

pub struct Receiver {
    pub url: String,
    pub covered: Arc<parking_lot::Mutex<Covered>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start(ip: &str) -> Receiver {
        let listener = tokio::net::TcpListener::bind(format!("{ip}:0"))
            .await
            .unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let covered: Arc<parking_lot::Mutex<Covered>> = Arc::default();
        let kept = Arc::clone(&covered);
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let kept = Arc::clone(&kept);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let kept = Arc::clone(&kept);
                            async move {
                                let body = req.into_body().collect().await?.to_bytes();
                                note(&kept, &body);
                                Ok::<_, hyper::Error>(hyper::Response::new(Full::new(
                                    Bytes::from_static(b"{\"done\":true}"),
                                )))
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(sock), service)
                        .await;
                });
            }
        });
        Receiver {
            url: format!("http://{addr}/hook"),
            covered,
            task,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn note(kept: &parking_lot::Mutex<Covered>, body: &[u8]) {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let mut c = kept.lock();
    c.deliveries += 1;
    for s in v["streams"].as_array().into_iter().flatten() {
        let (Some(path), Some(tail)) = (s["path"].as_str(), s["tail_offset"].as_str()) else {
            continue;
        };
        let t = c.tails.entry(path.to_owned()).or_default();
        if tail > t.as_str() {
            *t = tail.to_owned();
        }
    }
}
