//! This machine's TCP connections, as `/proc/net` lists them.

/// ESTABLISHED TCP connections whose server side is `port` on this
/// machine (both /proc/net/tcp and tcp6).
pub fn established_to(port: u16) -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let fields: Vec<&str> = l.split_whitespace().collect();
                    let local_port = fields
                        .get(1)
                        .and_then(|a| a.rsplit(':').next())
                        .and_then(|p| u16::from_str_radix(p, 16).ok());
                    local_port == Some(port) && fields.get(3) == Some(&"01")
                })
                .count()
        })
        .sum()
}

/// Waits until the ESTABLISHED connections to `port` satisfy `ok`,
/// checking every 10 ms; panics with `why(count)` past `until`.
pub async fn wait_established(
    port: u16,
    until: std::time::Instant,
    ok: impl Fn(usize) -> bool,
    why: impl Fn(usize) -> String,
) {
    loop {
        let n = established_to(port);
        if ok(n) {
            return;
        }
        assert!(std::time::Instant::now() < until, "{}", why(n));
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
