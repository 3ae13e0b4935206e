//! The process's file-descriptor limit, which sizes the connection cap
//! (half of it) and the origin's pool of open stream files.

/// The soft `RLIMIT_NOFILE` (a generous figure when the platform cannot say).
pub fn limit() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(1 << 20)
}
