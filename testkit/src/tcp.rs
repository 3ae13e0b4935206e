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
