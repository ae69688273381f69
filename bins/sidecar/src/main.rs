//! vko-sidecar: `init`, `sentinel-init`, `run`, `sentinel-tls-reload`. JSON logs on stdout.

use clap::Parser;
use vko_sidecar::cli::{
    Cli, Command, run_init, run_sentinel_init, run_sentinel_tls_reload, run_sidecar,
};

/// JSON logs at `RUST_LOG` (`target=level` directives, e.g. `info,kube=warn`), else `info`. A
/// `Targets` filter, not an `EnvFilter`: the same directives without span and field filters, and
/// without the regex engine in every data pod's binary.
fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let wanted = std::env::var("RUST_LOG").ok();
    let parsed = wanted
        .as_deref()
        .map(str::parse::<tracing_subscriber::filter::Targets>);
    let filter = match &parsed {
        Some(Ok(targets)) => targets.clone(),
        _ => tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                .with_current_span(false),
        )
        .with(filter)
        .init();
    if let (Some(value), Some(Err(error))) = (wanted, parsed) {
        tracing::warn!(rust_log = %value, %error, "RUST_LOG not understood; logging at info");
    }
}

// One thread: the sidecar's work is a few timed network calls, and each runtime worker thread
// costs its stack and a malloc arena in every data pod of the fleet (issue 20, measured in
// docs/status.md). Nothing here blocks a thread for long: config writes are a few hundred bytes.
#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    init_logging();
    vko_valkey::install_default_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init(args) => run_init(args).await,
        Command::SentinelInit(args) => run_sentinel_init(args).await,
        Command::Run(args) => run_sidecar(args).await,
        Command::SentinelTlsReload(args) => run_sentinel_tls_reload(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, reason = e.reason(), "vko-sidecar failed");
            std::process::ExitCode::FAILURE
        }
    }
}
