//! Logs to standard output, filtered by `RUST_LOG` (default `info`): as
//! text (in colour only on a terminal and without `NO_COLOR`), or as one
//! JSON object per line for log shippers (`--log-format json`). A line
//! written inside a request carries its id (`request_id`, see
//! [`crate::request_id`]): at the end of a text line, as the first key of a
//! JSON one (such lines are written without colour).

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Adds the current request's id to each line `inner` writes.
struct WithRequestId<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for WithRequestId<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(id) = crate::request_id::current_id() else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        // Ids are letters, digits and `-_.:/+=@`: nothing to escape.
        if self.json {
            match line.strip_prefix('{') {
                Some(rest) => write!(writer, "{{\"request_id\":\"{id}\",{rest}"),
                None => writer.write_str(&line),
            }
        } else {
            let body = line.strip_suffix('\n').unwrap_or(&line);
            writeln!(writer, "{body} request_id={id}")
        }
    }
}

/// Installs the process's log subscriber (once, at start).
pub fn init(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder
            .with_ansi(
                std::io::IsTerminal::is_terminal(&std::io::stdout())
                    && std::env::var_os("NO_COLOR").is_none(),
            )
            .event_format(WithRequestId {
                inner: tracing_subscriber::fmt::format(),
                json: false,
            })
            .init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .event_format(WithRequestId {
                inner: tracing_subscriber::fmt::format().json(),
                json: true,
            })
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .init(),
    }
}
