//! `docs/configuration.md` is the origin's and the edge's flags as clap
//! sees them (`shell::flags_doc`): this fails when the file and the flags
//! differ. `DS_BLESS=1 cargo test -p cli --test ds configuration` writes
//! it anew.

use clap::CommandFactory;

const PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/configuration.md");

fn reference() -> String {
    let mut doc = String::from(
        "# Configuration reference\n\n\
         Every flag of `origin` and `edge`, generated from their command lines \
         (`shell::flags_doc`; a test fails when this file and the flags differ: \
         `DS_BLESS=1 cargo test -p cli --test ds configuration` writes it anew). \
         Each flag can be set by its environment variable instead. Sizes take \
         `KiB`/`MiB`/`GiB`, durations `ms`/`s`/`m`/`h`. What the bounds do at \
         their limits is in the guides (`docs/guides/`) and `docs/operations.md`.\n\n",
    );
    for (name, cmd) in [
        ("origin", origin::config::Cli::command()),
        ("edge", edge::config::Cli::command()),
    ] {
        doc.push_str(&format!("## `{name}`\n\n"));
        if let Some(about) = cmd.get_about() {
            doc.push_str(&format!("{about}\n\n"));
        }
        doc.push_str(&shell::flags_doc::markdown(&cmd));
        doc.push('\n');
    }
    doc
}

#[test]
fn the_configuration_reference_is_the_flags() {
    let want = reference();
    if std::env::var_os("DS_BLESS").is_some() {
        std::fs::write(PATH, &want).expect("write docs/configuration.md");
        return;
    }
    let have = std::fs::read_to_string(PATH).unwrap_or_default();
    assert!(
        have == want,
        "docs/configuration.md differs from the flags: run \
         `DS_BLESS=1 cargo test -p cli --test ds configuration` and commit it"
    );
}
