//! vko-sidecar: `init`, `sentinel-init`, `run`. JSON logs on stdout.

use clap::Parser;
use vko_sidecar::cli::{Cli, Command, run_init, run_sentinel_init, run_sidecar};

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_env_filter(filter)
        .init();
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    init_logging();
    vko_valkey::install_default_crypto_provider();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init(args) => run_init(args).await,
        Command::SentinelInit(args) => run_sentinel_init(args).await,
        Command::Run(args) => run_sidecar(args).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, reason = e.reason(), "vko-sidecar failed");
            std::process::ExitCode::FAILURE
        }
    }
}
