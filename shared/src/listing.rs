//! Listing streams, `GET /_streams?prefix=P&after=CURSOR&limit=N`: the
//! query, the answer's shape, and how pages of several partitions merge
//! into one. No I/O.
//!
//! Field names follow Ursula's listing extension (`stream_id`, `status`,
//! `tail_offset`, `next_cursor`, `has_more`, ...). Streams come in path
//! order (bytes). The cursor is the last path a page looked at: the next
//! page starts after it. A page may hold fewer than `limit` streams (even
//! none) and still have more: a server looks at a bounded number of
//! paths per page (expired, soft-deleted or unreadable ones are skipped
//! but counted), so a client follows `has_more`, never the page's length.

use serde::{Deserialize, Serialize};

use crate::params::Consistency;

/// The listing's path (the first segment begins with `_`: no stream's).
pub const PATH: &str = "/_streams";

/// Streams a page holds at most, and when the query does not say.
pub const MAX_LIMIT: usize = 1000;
pub const DEFAULT_LIMIT: usize = 100;

/// A listing's query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListQuery {
    /// Only paths starting with this ("" lists all).
    pub prefix: String,
    /// Only paths after this one (the previous page's `next_cursor`).
    pub after: Option<String>,
    pub limit: usize,
    pub consistency: Consistency,
    /// A region's origins ask each other for one partition's page
    /// (`partition=N`); clients leave it out.
    pub partition: Option<u32>,
}

/// Why a listing's query is refused (400 `BAD_REQUEST`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ListQueryError {
    #[error("limit must be a whole number from 1 to {MAX_LIMIT}, not {0:?}")]
    Limit(String),
    #[error("consistency must be local or leader, not {0:?}")]
    Consistency(String),
    #[error("partition must be a partition number, not {0:?}")]
    Partition(String),
    #[error("the parameter {0} is given more than once")]
    Repeated(&'static str),
}

/// Parses a listing's query; unknown parameters are ignored, as reads
/// ignore theirs.
pub fn parse_query(query: Option<&str>) -> Result<ListQuery, ListQueryError> {
    let (mut prefix, mut after, mut limit, mut consistency, mut partition) =
        (None, None, None, None, None);
    fn once(
        slot: &mut Option<String>,
        value: String,
        name: &'static str,
    ) -> Result<(), ListQueryError> {
        match slot.replace(value) {
            Some(_) => Err(ListQueryError::Repeated(name)),
            None => Ok(()),
        }
    }
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let v = v.into_owned();
        match &*k {
            "prefix" => once(&mut prefix, v, "prefix")?,
            "after" => once(&mut after, v, "after")?,
            "limit" => once(&mut limit, v, "limit")?,
            "consistency" => once(&mut consistency, v, "consistency")?,
            "partition" => once(&mut partition, v, "partition")?,
            _ => {}
        }
    }
    let limit = match limit {
        None => DEFAULT_LIMIT,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => n,
            _ => return Err(ListQueryError::Limit(s)),
        },
    };
    let consistency = match consistency.as_deref() {
        None | Some("local") => Consistency::Local,
        Some("leader") => Consistency::Leader,
        Some(other) => return Err(ListQueryError::Consistency(other.to_owned())),
    };
    let partition = match partition {
        None => None,
        Some(s) => Some(s.parse::<u32>().map_err(|_| ListQueryError::Partition(s))?),
    };
    Ok(ListQuery {
        prefix: prefix.unwrap_or_default(),
        after: after.filter(|a| !a.is_empty()),
        limit,
        consistency,
        partition,
    })
}

impl ListQuery {
    /// The query string that asks for the same page (of `partition`, when
    /// one origin asks another).
    pub fn to_query(&self, partition: Option<u32>) -> String {
        let mut q = form_urlencoded::Serializer::new(String::new());
        q.append_pair("prefix", &self.prefix);
        if let Some(after) = &self.after {
            q.append_pair("after", after);
        }
        q.append_pair("limit", &self.limit.to_string());
        q.append_pair(
            "consistency",
            match self.consistency {
                Consistency::Local => "local",
                Consistency::Leader => "leader",
            },
        );
        if let Some(p) = partition {
            q.append_pair("partition", &p.to_string());
        }
        q.finish()
    }
}

/// One stream as a listing shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    pub stream_id: String,
    /// `open` or `closed`.
    pub status: String,
    pub content_type: String,
    /// The stream's end, as an offset (16 hex digits).
    pub tail_offset: String,
    pub created_at_ms: u64,
    pub last_write_at_ms: u64,
    pub closed: bool,
    /// The `Stream-Incarnation` token.
    pub incarnation: String,
    /// A sliding TTL (`Stream-TTL`), when the stream has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
    /// When it expires as things stand (RFC 3339), when it may.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A listing's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub streams: Vec<Listed>,
    /// Where the next page starts (pass it as `after`); null at the end.
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

/// Merges pages of the same query from disjoint sets of streams (a
/// region's partitions) into the page one set of all of them would give.
///
/// A page with more only vouches for paths up to its cursor: past the
/// smallest such cursor, another page may still hold paths unseen, so the
/// merged page stops there.
pub fn merge(pages: Vec<Page>, limit: usize) -> Page {
    let bound: Option<String> = pages
        .iter()
        .filter(|p| p.has_more)
        .filter_map(|p| p.next_cursor.clone())
        .min();
    let more_somewhere = pages.iter().any(|p| p.has_more);
    let mut streams: Vec<Listed> = pages
        .into_iter()
        .flat_map(|p| p.streams)
        .filter(|s| bound.as_deref().is_none_or(|b| s.stream_id.as_str() <= b))
        .collect();
    streams.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    streams.dedup_by(|a, b| a.stream_id == b.stream_id);
    if streams.len() > limit {
        streams.truncate(limit);
        let last = streams.last().map(|s| s.stream_id.clone());
        return Page {
            streams,
            next_cursor: last,
            has_more: true,
        };
    }
    // Every stream up to the bound is here.
    Page {
        streams,
        next_cursor: bound,
        has_more: more_somewhere,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(path: &str) -> Listed {
        Listed {
            stream_id: path.into(),
            status: "open".into(),
            content_type: "text/plain".into(),
            tail_offset: "0000000000000000".into(),
            created_at_ms: 0,
            last_write_at_ms: 0,
            closed: false,
            incarnation: "i".into(),
            ttl_seconds: None,
            expires_at: None,
        }
    }

    fn page(paths: &[&str], cursor: Option<&str>, more: bool) -> Page {
        Page {
            streams: paths.iter().map(|p| listed(p)).collect(),
            next_cursor: cursor.map(str::to_owned),
            has_more: more,
        }
    }

    fn ids(p: &Page) -> Vec<&str> {
        p.streams.iter().map(|s| s.stream_id.as_str()).collect()
    }

    #[test]
    fn queries_parse_with_bounds() {
        let q = parse_query(Some("prefix=%2Fa%2F&after=%2Fa%2Fb&limit=7&x=1")).unwrap();
        assert_eq!(q.prefix, "/a/");
        assert_eq!(q.after.as_deref(), Some("/a/b"));
        assert_eq!(q.limit, 7);
        assert_eq!(q.consistency, Consistency::Local);
        assert_eq!(parse_query(None).unwrap().limit, DEFAULT_LIMIT);
        assert_eq!(parse_query(Some("limit=1000")).unwrap().limit, 1000);
        for bad in ["limit=0", "limit=1001", "limit=x", "limit=-1", "limit="] {
            assert!(matches!(
                parse_query(Some(bad)),
                Err(ListQueryError::Limit(_))
            ));
        }
        assert!(parse_query(Some("consistency=strong")).is_err());
        assert!(parse_query(Some("limit=1&limit=2")).is_err());
        let q = parse_query(Some("consistency=leader&partition=3")).unwrap();
        assert_eq!(q.partition, Some(3));
        assert_eq!(parse_query(Some(&q.to_query(Some(3)))).unwrap(), q);
    }

    #[test]
    fn merged_pages_are_one_sorted_page() {
        let m = merge(
            vec![
                page(&["/a", "/d"], None, false),
                page(&["/b", "/c", "/e"], None, false),
            ],
            3,
        );
        assert_eq!(ids(&m), ["/a", "/b", "/c"]);
        assert_eq!((m.next_cursor.as_deref(), m.has_more), (Some("/c"), true));
        let m = merge(vec![page(&["/a"], None, false), page(&[], None, false)], 3);
        assert_eq!(ids(&m), ["/a"]);
        assert_eq!((m.next_cursor, m.has_more), (None, false));
    }

    #[test]
    fn a_short_page_bounds_the_merge() {
        // The second partition looked only up to /b: /d of the first may
        // not come before what it has past /b.
        let m = merge(
            vec![
                page(&["/a", "/d"], None, false),
                page(&["/b"], Some("/bz"), true),
            ],
            10,
        );
        assert_eq!(ids(&m), ["/a", "/b"]);
        assert_eq!((m.next_cursor.as_deref(), m.has_more), (Some("/bz"), true));
    }
}
