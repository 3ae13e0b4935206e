//! A region origin's role as its `/metrics` tells it: the partitions it
//! serves and the partitions it follows (forwards to their owners). Used
//! by the origin's region tests and the edge's differential test.

/// (served, followed) partitions of the origin at `base`; None if it did
/// not answer.
pub async fn roles(client: &reqwest::Client, base: &str) -> Option<(i64, i64)> {
    let text = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .ok()?
        .text()
        .await
        .ok()?;
    let value = |name: &str| {
        text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
            l.strip_prefix(name)?
                .strip_prefix(' ')?
                .trim()
                .parse::<i64>()
                .ok()
        })
    };
    Some((
        value("ds_origin_region_serving")?,
        value("ds_origin_region_following")?,
    ))
}

/// Whether the origin at `base` serves its region's one partition
/// (Some(false): it follows another; None: no answer, or joining).
pub async fn serving(client: &reqwest::Client, base: &str) -> Option<bool> {
    match roles(client, base).await? {
        (1, _) => Some(true),
        (_, 1) => Some(false),
        _ => None,
    }
}
