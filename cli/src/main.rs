//! `ds`: parses the command line, runs it, prints a failure as one line on
//! stderr and exits with its code (see the crate doc of `cli`).

use clap::Parser;

fn main() {
    let cli = match cli::args::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let usage = e.use_stderr();
            let _ = e.print();
            std::process::exit(if usage { cli::error::exit::USAGE } else { 0 });
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(cli::run(cli)) {
        Ok(()) | Err(cli::Failure::StdoutClosed) => {}
        Err(failure) => {
            eprintln!("ds: {failure}");
            std::process::exit(failure.exit_code());
        }
    }
}
