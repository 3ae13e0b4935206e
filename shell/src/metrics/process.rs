//! The process's own series: the standard `process_*` collector (resident
//! memory, open descriptors and their limit, CPU seconds, start time,
//! threads; read from `/proc` at each scrape), `ds_build_info`, and the
//! tasks alive in the async runtime (`ds_runtime_tasks`: a waiting reader
//! should hold none of its own, decision 0020).

use std::sync::OnceLock;

use prometheus::process_collector::ProcessCollector;

use super::Exposition;

/// The git revision this binary was built from (`unknown` outside a
/// checkout), set by `shell/build.rs`.
pub fn build_revision() -> &'static str {
    env!("DS_GIT_REVISION")
}

pub(super) fn add(e: &mut Exposition, role: &str) {
    // One per process: its CPU counter adds what passed since the last
    // scrape.
    static PROCESS: OnceLock<ProcessCollector> = OnceLock::new();
    e.collect(PROCESS.get_or_init(ProcessCollector::for_self));
    e.gauges(
        "ds_build_info",
        "Always 1; the labels name the binary's role, version and git revision.",
        [(
            [
                ("role", role),
                ("version", env!("CARGO_PKG_VERSION")),
                ("revision", build_revision()),
            ],
            1.0,
        )],
    );
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        e.gauge(
            "ds_runtime_tasks",
            "Tasks alive in the async runtime.",
            rt.metrics().num_alive_tasks() as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_series_and_build_info_are_there() {
        let mut e = Exposition::default();
        e.process("origin");
        let text = e.render();
        for name in [
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_cpu_seconds_total ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(name), "{name} missing in {text}");
        }
        assert!(text.contains("ds_build_info{role=\"origin\",version=\""));
    }
}
