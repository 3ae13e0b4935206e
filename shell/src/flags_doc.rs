//! A binary's flags as a Markdown table, from clap's own model of its
//! command line: each flag, the environment variable that sets it, its
//! default and its help. `docs/configuration.md` is this for each binary,
//! and a test fails when the file and the flags differ, so the reference
//! never drifts from the code.

use std::fmt::Write;

/// `cmd`'s flags (help and version left out) as a table.
pub fn markdown(cmd: &clap::Command) -> String {
    let mut out =
        String::from("| flag | environment | default | what it does |\n|---|---|---|---|\n");
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let flag = match arg.get_long() {
            Some(long) => format!("`--{long}`"),
            None => format!("`{id}`"),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if defaults.is_empty() {
            String::new()
        } else {
            format!("`{}`", defaults.join(","))
        };
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let _ = writeln!(out, "| {flag} | {env} | {default} | {} |", cell(&help));
    }
    out
}

/// One line of text fit for a table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_flag_is_a_row_with_its_environment_default_and_help() {
        let cmd = clap::Command::new("x")
            .arg(
                clap::Arg::new("listen")
                    .long("listen")
                    .env("X_LISTEN")
                    .default_value("127.0.0.1:1")
                    .help("Where it listens;\n  a | b"),
            )
            .arg(clap::Arg::new("data").long("data"));
        let table = markdown(&cmd);
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 4, "{table}");
        assert_eq!(
            rows[2],
            "| `--listen` | `X_LISTEN` | `127.0.0.1:1` | Where it listens; a \\| b |"
        );
        assert_eq!(rows[3], "| `--data` |  |  |  |");
    }
}
