//! A TCP proxy that makes a server slow: everything the server sends back
//! is held for [`DelayProxy::set`]'s delay before it is passed on (a bucket
//! answering every request late). This kernel has no `netem`, so the delay
//! is made here, in user space, in front of the server's port.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub struct DelayProxy {
    pub addr: SocketAddr,
    delay_ms: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on `ip` (a free port) and passes connections on to `to`.
    pub async fn start(ip: &str, to: SocketAddr) -> DelayProxy {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind the proxy");
        let addr = listener.local_addr().expect("addr");
        let delay_ms = Arc::new(AtomicU64::new(0));
        let delay = Arc::clone(&delay_ms);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let delay = Arc::clone(&delay);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(to).await {
                        pump(client, server, delay).await;
                    }
                });
            }
        });
        DelayProxy {
            addr,
            delay_ms,
            task,
        }
    }

    /// From now on, the server's bytes reach the client this much later.
    pub fn set(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Client to server as it comes; server to client each read held for the
/// delay at the time it was read.
async fn pump(client: TcpStream, server: TcpStream, delay: Arc<AtomicU64>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let hold = delay.load(Ordering::Relaxed);
            if hold > 0 {
                tokio::time::sleep(Duration::from_millis(hold)).await;
            }
            if client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}
