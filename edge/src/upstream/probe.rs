//! Whether an origin's address speaks HTTP/2 with prior knowledge, asked the
//! cheapest way that gives positive evidence: send HTTP/2's connection
//! preface and an empty `SETTINGS` frame, and read the first bytes back. An
//! HTTP/2 server's first frame is always its own `SETTINGS`; an HTTP/1.1
//! hop answers with an HTTP/1.1 error (nginx: `400`) or closes. No answer
//! within [`PROBE_TIMEOUT`] proves nothing (an origin at its connection cap
//! leaves new connections unread), so it is
//! [`Outcome::Inconclusive`](crate::core::upstream_protocol::Outcome).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::multiplexed::CONNECT_TIMEOUT;
use crate::core::upstream_protocol::Outcome;

/// How long the probe waits for the first bytes of the answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The client's connection preface (RFC 9113 §3.4) and an empty `SETTINGS`
/// frame (length 0, type 4, no flags, stream 0).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A frame header's length.
const FRAME_HEADER: usize = 9;

/// Probes `authority` (`host:port`).
pub async fn h2(authority: &str) -> Outcome {
    let connected =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(authority)).await;
    let Ok(Ok(tcp)) = connected else {
        return Outcome::Unreachable;
    };
    answer(tcp).await
}

/// Sends the preface on a connection and judges the answer.
async fn answer(mut tcp: tokio::net::TcpStream) -> Outcome {
    if tcp.write_all(PREFACE).await.is_err() {
        return Outcome::NoH2;
    }
    let mut head = [0u8; FRAME_HEADER];
    let mut got = 0;
    let read = tokio::time::timeout(PROBE_TIMEOUT, async {
        while got < FRAME_HEADER {
            match tcp.read(&mut head[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
    })
    .await;
    match (read, got) {
        (Err(_elapsed), 0) => Outcome::Inconclusive,
        _ => judge(&head[..got]),
    }
}

/// What the first bytes of an answer to the preface say.
fn judge(first: &[u8]) -> Outcome {
    // A frame header: 24-bit length, type, flags, 31-bit stream id.
    let settings = first.len() == FRAME_HEADER && first[3] == 0x04 && first[5..9] == [0; 4];
    if settings {
        Outcome::H2
    } else {
        Outcome::NoH2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settings_frame_is_h2_and_anything_else_is_not() {
        // An empty SETTINGS, and one of 18 bytes (3 settings).
        assert_eq!(judge(&[0, 0, 0, 4, 0, 0, 0, 0, 0]), Outcome::H2);
        assert_eq!(judge(&[0, 0, 18, 4, 0, 0, 0, 0, 0]), Outcome::H2);
        assert_eq!(
            judge(b"HTTP/1.1 400 Bad Request\r\n"[..9].as_ref()),
            Outcome::NoH2
        );
        assert_eq!(judge(b""), Outcome::NoH2, "closed with nothing");
        assert_eq!(judge(&[0, 0, 0, 4]), Outcome::NoH2, "cut short");
        // A frame of another type, or on a stream, first: not a server.
        assert_eq!(judge(&[0, 0, 8, 7, 0, 0, 0, 0, 0]), Outcome::NoH2);
        assert_eq!(judge(&[0, 0, 0, 4, 0, 0, 0, 0, 1]), Outcome::NoH2);
    }

    #[tokio::test]
    async fn a_closed_port_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        assert_eq!(h2(&addr.to_string()).await, Outcome::Unreachable);
    }

    #[tokio::test]
    async fn a_listener_that_never_reads_is_inconclusive() {
        // Accepted by the kernel's backlog, never answered: a paused clock
        // runs the probe's time out at once.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        tokio::time::pause();
        assert_eq!(answer(tcp).await, Outcome::Inconclusive);
        drop(listener);
    }

    #[tokio::test]
    async fn an_http1_server_answering_the_preface_is_no_h2() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
        });
        assert_eq!(h2(&addr).await, Outcome::NoH2);
        server.await.unwrap();
    }
}
