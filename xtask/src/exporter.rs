//! `cargo xtask exporter build | path`: redis_exporter (the metrics sidecar `spec.metrics` adds),
//! built from its Go module (`xtask/exporter`, which pins github.com/oliver006/redis_exporter and
//! every dependency in go.sum) into `~/.cache/vko/redis_exporter-<version>/redis_exporter`, keyed by
//! version like helm. The testbed's kubelet runs it for `oliver006/redis_exporter` images.
//! `cargo xtask test` builds it when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use vko_testbed::kubelet::images::{REDIS_EXPORTER_VERSION, redis_exporter_dir};

use crate::go_cache::CachedTool;

const BINARY: &str = "redis_exporter";

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ExporterCommand,
}

#[derive(clap::Subcommand)]
enum ExporterCommand {
    /// Build redis_exporter into the cache unless it is there already.
    Build,
    /// Print the path of the cached redis_exporter binary.
    Path,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        ExporterCommand::Build => build().map(|_| ()),
        ExporterCommand::Path => {
            println!("{}", exporter_binary().display());
            Ok(())
        }
    }
}

/// The cached redis_exporter binary.
pub fn exporter_binary() -> PathBuf {
    tool().binary_path()
}

fn tool() -> CachedTool<'static> {
    CachedTool {
        name: "redis_exporter",
        version: REDIS_EXPORTER_VERSION,
        dir: redis_exporter_dir(),
        binary: BINARY,
    }
}

/// Builds redis_exporter into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    tool().build_with(go_build)
}

fn go_build(out_dir: &Path) -> anyhow::Result<std::time::Duration> {
    let module = crate::testbed::repo_root().join("xtask").join("exporter");
    // The -X stamp the exporter's own release build sets (its log line and
    // redis_exporter_build_info report it).
    let ldflags = format!("-s -w -X main.BuildVersion={REDIS_EXPORTER_VERSION}");
    eprintln!(
        "building redis_exporter {REDIS_EXPORTER_VERSION} from {}",
        module.display()
    );
    let started = Instant::now();
    let status = Command::new("go")
        .current_dir(&module)
        .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(out_dir.join(BINARY))
        .arg("github.com/oliver006/redis_exporter")
        // A static binary: no C toolchain needed, and it runs inside the testbed's containers.
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .status()
        .context("could not start `go` (is Go installed and on PATH?)")?;
    if !status.success() {
        bail!("go build of redis_exporter failed ({status}); its output is above");
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_one_go_mod_requires() {
        let go_mod =
            std::fs::read_to_string(crate::testbed::repo_root().join("xtask/exporter/go.mod"))
                .unwrap();
        assert!(
            go_mod.lines().any(|line| line.trim()
                == format!("require github.com/oliver006/redis_exporter {REDIS_EXPORTER_VERSION}")),
            "xtask/exporter/go.mod does not require redis_exporter {REDIS_EXPORTER_VERSION}"
        );
    }

    #[test]
    fn the_cache_is_keyed_by_version_and_is_where_the_kubelet_looks() {
        assert!(
            redis_exporter_dir().ends_with(format!("vko/redis_exporter-{REDIS_EXPORTER_VERSION}"))
        );
        assert_eq!(
            exporter_binary().parent(),
            Some(redis_exporter_dir().as_path())
        );
        assert_eq!(exporter_binary().file_name().unwrap(), BINARY);
    }
}
