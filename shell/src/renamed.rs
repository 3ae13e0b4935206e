//! Flags, environment variables and metric series renamed so that each
//! word means one thing (`docs/glossary.md`), still answering to their old
//! names for one release: a deployment's command line, environment,
//! dashboards and alerts keep working, and the origin or edge logs a
//! warning naming the new name at start.
//!
//! Flags and variables: [`command_line`] rewrites the command line before
//! clap reads it (`--old` becomes `--new`; a set `OLD_VARIABLE` whose new
//! variable is unset becomes `--new=value`), so the flags themselves carry
//! only their new names, defaults and help. Metric series:
//! [`Exposition::deprecated`](crate::metrics::Exposition::deprecated)
//! repeats each renamed family under its old name.

use std::ffi::OsString;

/// One renamed flag and its environment variable.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// Without the leading `--`.
    pub old: &'static str,
    pub new: &'static str,
    /// The variables' names after the binary's prefix (`ORIGIN_`, `EDGE_`).
    pub old_env: &'static str,
    pub new_env: &'static str,
}

/// The flags renamed in both binaries, for one release.
pub const FLAGS: &[Flag] = &[
    Flag {
        old: "light-tails",
        new: "light-path",
        old_env: "LIGHT_TAILS",
        new_env: "LIGHT_PATH",
    },
    Flag {
        old: "account-tails",
        new: "account-live-reads",
        old_env: "ACCOUNT_TAILS",
        new_env: "ACCOUNT_LIVE_READS",
    },
];

/// The command line clap should read, and a warning for each old name
/// used. `env` reads one environment variable (the process's, in a
/// binary), `prefix` is the binary's (`ORIGIN`). A flag given under either
/// name wins over either variable; one made from a variable goes first,
/// before any subcommand.
pub fn command_line(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
    prefix: &str,
    renamed: &[Flag],
) -> (Vec<OsString>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut out: Vec<OsString> = Vec::new();
    let mut given = vec![false; renamed.len()];
    for arg in args {
        let Some(text) = arg.to_str().filter(|t| t.starts_with("--")) else {
            out.push(arg);
            continue;
        };
        let (name, value) = match text[2..].split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (&text[2..], None),
        };
        match renamed.iter().position(|f| f.old == name || f.new == name) {
            Some(i) => {
                given[i] = true;
                let flag = renamed[i];
                if name == flag.old {
                    warnings.push(format!(
                        "--{} is deprecated and will be removed: use --{}",
                        flag.old, flag.new
                    ));
                }
                out.push(OsString::from(match value {
                    Some(v) => format!("--{}={v}", flag.new),
                    None => format!("--{}", flag.new),
                }));
            }
            None => out.push(arg),
        }
    }
    for (flag, given) in renamed.iter().zip(given) {
        let (old_env, new_env) = (
            format!("{prefix}_{}", flag.old_env),
            format!("{prefix}_{}", flag.new_env),
        );
        if given || env(&new_env).is_some() {
            continue;
        }
        if let Some(value) = env(&old_env) {
            warnings.push(format!(
                "{old_env} is deprecated and will be removed: use {new_env}"
            ));
            let mut arg = OsString::from(format!("--{}=", flag.new));
            arg.push(value);
            // Right after the program's name: a top-level flag, before
            // any subcommand (`origin keys …`) and any `--`.
            out.insert(1.min(out.len()), arg);
        }
    }
    (out, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> (Vec<String>, usize) {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (out, warnings) = command_line(
            args.iter().map(OsString::from),
            |k| {
                env.iter()
                    .find(|(n, _)| n == k)
                    .map(|(_, v)| OsString::from(v))
            },
            "X",
            FLAGS,
        );
        (
            out.into_iter().map(|a| a.into_string().unwrap()).collect(),
            warnings.len(),
        )
    }

    #[test]
    fn an_old_flag_becomes_the_new_one_with_a_warning() {
        assert_eq!(
            run(&["origin", "--light-tails", "false", "--data", "d"], &[]),
            (
                vec!["origin", "--light-path", "false", "--data", "d"]
                    .into_iter()
                    .map(String::from)
                    .collect(),
                1
            )
        );
        assert_eq!(
            run(&["origin", "--light-tails=false"], &[]).0,
            ["origin", "--light-path=false"]
        );
        assert_eq!(run(&["origin", "--light-path=false"], &[]).1, 0);
    }

    #[test]
    fn an_old_variable_counts_only_when_neither_flag_nor_new_variable_is_set() {
        assert_eq!(
            run(&["origin"], &[("X_LIGHT_TAILS", "false")]),
            (vec!["origin".into(), "--light-path=false".into()], 1)
        );
        assert_eq!(
            run(
                &["origin"],
                &[("X_LIGHT_TAILS", "false"), ("X_LIGHT_PATH", "true")]
            ),
            (vec!["origin".into()], 0)
        );
        assert_eq!(
            run(
                &["origin", "--light-path", "true"],
                &[("X_LIGHT_TAILS", "false")]
            )
            .0,
            ["origin", "--light-path", "true"]
        );
    }

    #[test]
    fn a_flag_from_an_old_variable_goes_before_a_subcommand() {
        assert_eq!(
            run(&["origin", "keys", "list"], &[("X_ACCOUNT_TAILS", "4")]).0,
            ["origin", "--account-live-reads=4", "keys", "list"]
        );
    }

    #[test]
    fn values_and_other_flags_pass_unchanged() {
        let args = ["origin", "--listen", "--light-tails-ish", "x", "--data=d"];
        assert_eq!(run(&args, &[]).0, args);
    }
}
