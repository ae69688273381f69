//! `vko-testbed serve`: the testbed supervisor. `vko-testbed shim --spec FILE`: runs one container.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("shim") => vko_testbed::runtime::shim_main(&args[1..]),
        Some("serve") => vko_testbed::controlplane::serve_main(&args[1..]),
        _ => Err(vko_testbed::Error::Invalid {
            what: "command line".into(),
            detail: "usage: vko-testbed serve | vko-testbed shim --spec FILE".into(),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("vko-testbed: {error}");
            ExitCode::FAILURE
        }
    }
}
