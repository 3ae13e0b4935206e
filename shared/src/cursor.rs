//! The long-poll cursor rule (upstream protocol, "Caching and Collapsing").
//!
//! A cache in front of us keys long-polls by `offset` and `cursor`. If the
//! cursor never changed, a cache could answer the same empty result forever.
//! So the cursor is the number of 20-second intervals since 2024-10-09 UTC,
//! and when a reader sends a cursor that is not behind the current interval we
//! answer a strictly larger one, moved on by a random 1..=3600 s. Cursors thus
//! only grow, and no cache key is ever reused for a later wait.
//!
//! Pure: the caller passes the time and the jitter.

/// Start of interval 0: 2024-10-09T00:00:00Z.
pub const CURSOR_EPOCH_UNIX_SECS: u64 = 1_728_432_000;
/// Length of one cursor interval.
pub const CURSOR_INTERVAL_SECS: u64 = 20;
/// The largest jitter added to a cursor that caught up with the clock.
pub const CURSOR_MAX_JITTER_SECS: u64 = 3600;

/// The interval number at a wall-clock time.
pub fn current_interval(now_unix_secs: u64) -> u64 {
    now_unix_secs.saturating_sub(CURSOR_EPOCH_UNIX_SECS) / CURSOR_INTERVAL_SECS
}

/// The cursor to answer, given the reader's cursor and a jitter in seconds
/// (the caller draws it uniformly from `1..=CURSOR_MAX_JITTER_SECS`).
pub fn next_cursor(now_unix_secs: u64, client_cursor: Option<&str>, jitter_secs: u64) -> u64 {
    let current = current_interval(now_unix_secs);
    match client_cursor.and_then(|c| c.parse::<u64>().ok()) {
        Some(client) if client >= current => {
            let jitter = jitter_secs.clamp(1, CURSOR_MAX_JITTER_SECS);
            client.saturating_add(jitter.div_ceil(CURSOR_INTERVAL_SECS).max(1))
        }
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = CURSOR_EPOCH_UNIX_SECS + 20_000;

    #[test]
    fn fresh_reader_gets_the_current_interval() {
        assert_eq!(next_cursor(NOW, None, 7), 1000);
        assert_eq!(next_cursor(NOW, Some("garbage"), 7), 1000);
        assert_eq!(next_cursor(NOW, Some("999"), 7), 1000);
    }

    #[test]
    fn a_cursor_that_caught_up_moves_strictly_forward() {
        assert_eq!(next_cursor(NOW, Some("1000"), 1), 1001);
        assert_eq!(next_cursor(NOW, Some("1000"), 3600), 1180);
        assert_eq!(next_cursor(NOW, Some("5000"), 40), 5002);
        for jitter in [0, 1, 19, 20, 21, 3600, 99_999] {
            assert!(next_cursor(NOW, Some("1000"), jitter) > 1000);
        }
    }
}
