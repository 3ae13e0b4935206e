//! What a request to a region's bucket is, for counting them (the
//! region's idle-cost test and `ds-load bucket-proxy`): the method
//! (`LIST` for a listing) and what its key is, from `region/` on with
//! names and numbers as `*` (`region/logs`, `region/partitions/*/tenures`).

/// The kind of an S3 request with `method`, `path` (`/{bucket}/{key}`) and
/// `query`.
pub fn request_kind(method: &str, path: &str, query: &str) -> String {
    if query.contains("list-type=2") {
        let prefix = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("prefix="))
            .unwrap_or("");
        return format!("LIST {}", what(&prefix.replace("%2F", "/")));
    }
    let key = path.trim_start_matches('/');
    let key = key.split_once('/').map_or("", |(_, key)| key);
    format!("{method} {}", what(key))
}

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
    use super::request_kind;

    #[test]
    fn requests_are_counted_by_what_their_key_is() {
        assert_eq!(
            request_kind(
                "HEAD",
                "/bench/p8/region/partitions/0003/tenures/00000000000000000001",
                ""
            ),
            "HEAD region/partitions/*/tenures"
        );
        assert_eq!(
            request_kind("GET", "/bench/p8/region/logs/ab12/00000000000000000007", ""),
            "GET region/logs"
        );
        assert_eq!(
            request_kind("GET", "/bench", "list-type=2&prefix=p8%2Fregion%2Fnodes%2F"),
            "LIST region/nodes"
        );
        assert_eq!(request_kind("PUT", "/bench/p8/streams/x", ""), "PUT other");
    }
}
