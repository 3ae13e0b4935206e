//! One webhook delivery (protocol §7.1): a signed `POST` of the wake, and
//! what the receiver's answer means for it. Bounded in time (the client's
//! timeout) and in what is read of the answer (`answer_max` bytes; an
//! answer past it is taken as "received, not done").

use super::keys::Keys;

/// What became of a delivery.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx with `{"done": true}`: the wake's snapshot is acked.
    Done,
    /// 2xx otherwise: the receiver took the wake and calls back.
    Taken,
    /// No 2xx (or no answer): retried later.
    Failed(String),
}

pub async fn deliver(
    client: &reqwest13::Client,
    keys: &Keys,
    url: &str,
    body: Vec<u8>,
    now_ms: u64,
    answer_max: usize,
) -> Outcome {
    let signature = keys.sign(now_ms, &body);
    let sent = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header("webhook-signature", signature)
        .body(body)
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => return Outcome::Failed(format!("{e}")),
    };
    if !resp.status().is_success() {
        return Outcome::Failed(format!("the receiver answered {}", resp.status()));
    }
    let mut answer = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if answer.len() + chunk.len() > answer_max {
                    return Outcome::Taken;
                }
                answer.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            // The receiver answered 2xx: it has the wake, whatever became
            // of the rest of its answer.
            Err(_) => return Outcome::Taken,
        }
    }
    let done = serde_json::from_slice::<serde_json::Value>(&answer)
        .ok()
        .and_then(|v| v.get("done").and_then(serde_json::Value::as_bool))
        .unwrap_or(false);
    if done {
        Outcome::Done
    } else {
        Outcome::Taken
    }
}
