//! `ds keys`: API keys through the origin's admin API (`GET`/`POST
//! /_admin/keys`, `DELETE /_admin/keys/{id}`), authorised by the admin
//! token (`--admin-token` / `DS_ADMIN_TOKEN`, else `--key`). Edges do not
//! serve the admin API: point `--url` at the origin.

use clap::Subcommand;
use reqwest::Method;

use super::Ctx;
use crate::client::send_ok;
use crate::error::Failure;
use crate::output;
use crate::paths::query_value;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The origin's admin token (default: --key).
    #[arg(long, env = "DS_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// List keys (never their secrets).
    List {
        /// Only this account's.
        #[arg(long)]
        account: Option<String>,
    },
    /// Make a key; prints its secret, shown this once.
    Create {
        #[arg(long)]
        account: String,
        #[arg(long)]
        read_only: bool,
        /// Only streams whose name starts with this.
        #[arg(long)]
        prefix: Option<String>,
        /// An agent's key: exchanged for tokens, never sent directly.
        #[arg(long)]
        agent: bool,
    },
    /// Revoke a key at once.
    #[command(alias = "revoke")]
    Delete { id: String },
}

/// A new key's request body.
pub fn new_key(
    account: &str,
    read_only: bool,
    prefix: Option<&str>,
    agent: bool,
) -> serde_json::Value {
    let mut v = serde_json::json!({"account": account, "read_only": read_only, "agent": agent});
    if let Some(p) = prefix {
        v["prefix"] = p.into();
    }
    v
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let token = a.admin_token.as_deref().filter(|t| !t.is_empty());
    let c = &ctx.client;
    match a.action {
        Action::List { account } => {
            let path = match account {
                Some(acct) => format!("/_admin/keys?account={}", query_value(&acct)),
                None => "/_admin/keys".into(),
            };
            let resp = send_ok(c.request_as(Method::GET, &path, token)).await?;
            let keys: serde_json::Value = resp
                .json()
                .await
                .map_err(|e| Failure::Protocol(format!("a key list that is not one: {e}")))?;
            if ctx.json {
                return output::json_line(&keys);
            }
            for k in keys.as_array().into_iter().flatten() {
                let text = |f: &str| match k.get(f) {
                    Some(serde_json::Value::String(s)) => s.clone(),
                    Some(serde_json::Value::Null) | None => "-".into(),
                    Some(v) => v.to_string(),
                };
                output::line(&format!(
                    "{}\t{}\tread_only={}\tprefix={}\tagent={}\trevoked_at={}",
                    text("id"),
                    text("account"),
                    text("read_only"),
                    text("prefix"),
                    text("agent"),
                    text("revoked_at"),
                ))?;
            }
            Ok(())
        }
        Action::Create {
            account,
            read_only,
            prefix,
            agent,
        } => {
            let body = new_key(&account, read_only, prefix.as_deref(), agent);
            let resp = send_ok(
                c.request_as(Method::POST, "/_admin/keys", token)
                    .header("content-type", "application/json")
                    .body(body.to_string()),
            )
            .await?;
            let made: serde_json::Value = resp
                .json()
                .await
                .map_err(|e| Failure::Protocol(format!("a new key that is not one: {e}")))?;
            if ctx.json {
                return output::json_line(&made);
            }
            let key = made
                .get("key")
                .and_then(|k| k.as_str())
                .ok_or_else(|| Failure::Protocol("a new key's answer without its key".into()))?;
            output::line(key)
        }
        Action::Delete { id } => {
            let path = format!("/_admin/keys/{}", query_value(&id));
            send_ok(c.request_as(Method::DELETE, &path, token)).await?;
            if ctx.json {
                output::json_line(&serde_json::json!({"id": id, "revoked": true}))
            } else {
                output::line(&format!("revoked {id}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_names_what_it_may_do() {
        assert_eq!(
            new_key("acme", true, Some("s.chat"), false),
            serde_json::json!({"account": "acme", "read_only": true, "agent": false, "prefix": "s.chat"})
        );
    }
}
