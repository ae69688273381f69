//! vko-observer. JSON logs on stdout at `--log-level` (`RUST_LOG`, when set, overrides it).

use std::hash::{BuildHasher, Hasher};

use clap::Parser;
use vko_observer::cli::{Cli, password_file_from_env, read_password_file};

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_env_filter(filter)
        .init();
}

/// This process's part of the health key: the host name (the pod name) and a random suffix.
fn instance_id() -> String {
    let host: String = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '.')
        .take(63)
        .collect();
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let random = hasher.finish() & 0xffff_ffff;
    if host.is_empty() {
        format!("{random:08x}")
    } else {
        format!("{host}-{random:08x}")
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_level.as_str());
    vko_valkey::install_default_crypto_provider();
    let config = password_file_from_env()
        .map(|path| read_password_file(&path))
        .transpose()
        .and_then(|password| cli.config(password, &instance_id()));
    let result = match config {
        Ok(cfg) => vko_observer::run::run(cfg, env!("CARGO_PKG_VERSION")).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, reason = e.reason(), "vko-observer failed");
            std::process::ExitCode::FAILURE
        }
    }
}
