//! The bucket boundaries histograms use, named by what they measure.

/// Request and operation durations, 0.5 ms to 30 s: an append on a local
/// disk answers in well under a millisecond, a long-poll parks up to a
/// minute (its answer ends the timer), an object-store PUT takes 5–100 ms.
pub const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Lags that stretch further: delivery to a tail, the invalidation feed
/// (a second is already late; a minute means lost).
pub const LAG_SECONDS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0,
];

/// Counts per batch: appends in one group commit, waiters on one upstream
/// request.
pub const COUNT: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];
