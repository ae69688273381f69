//! `cargo xtask exporter build | path`: redis_exporter (the metrics sidecar `spec.metrics` adds),
//! built from its Go module (`xtask/exporter`, which pins github.com/oliver006/redis_exporter and
//! every dependency in go.sum) into `~/.cache/vko/redis_exporter-<version>/redis_exporter`, keyed by
//! version like helm. The testbed's kubelet runs it for `oliver006/redis_exporter` images.
//! `cargo xtask test` builds it when it is missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use vko_testbed::controlplane::format_duration;
use vko_testbed::kubelet::images::{REDIS_EXPORTER_VERSION, redis_exporter_dir};
use vko_testbed::paths;

/// Written last into the cache directory: its presence (with this content) means "complete".
const STAMP: &str = "VERSION";
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
    redis_exporter_dir().join(BINARY)
}

fn stamp() -> String {
    format!("redis_exporter {REDIS_EXPORTER_VERSION}\n")
}

fn is_complete(dir: &Path) -> bool {
    dir.join(BINARY).is_file()
        && std::fs::read_to_string(dir.join(STAMP)).is_ok_and(|found| found == stamp())
}

/// Builds redis_exporter into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    let dest = redis_exporter_dir();
    if is_complete(&dest) {
        println!(
            "redis_exporter {REDIS_EXPORTER_VERSION}: cached in {}",
            dest.display()
        );
        return Ok(exporter_binary());
    }
    let parent = paths::cache_root();
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    // Built aside and renamed into place, so an interrupted build never looks complete.
    let staging = parent.join(format!(
        ".redis_exporter-{REDIS_EXPORTER_VERSION}.building-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let result = go_build(&staging).and_then(|elapsed| {
        std::fs::write(staging.join(STAMP), stamp()).context("writing the version stamp")?;
        if dest.exists() {
            std::fs::remove_dir_all(&dest)
                .with_context(|| format!("replacing {}", dest.display()))?;
        }
        std::fs::rename(&staging, &dest)
            .with_context(|| format!("moving redis_exporter to {}", dest.display()))?;
        println!(
            "redis_exporter {REDIS_EXPORTER_VERSION}: built into {} in {}",
            dest.display(),
            format_duration(elapsed)
        );
        Ok(exporter_binary())
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
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
