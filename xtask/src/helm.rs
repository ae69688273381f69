//! `cargo xtask helm build | path`: helm, built from its Go module (`xtask/helm`, which pins
//! helm.sh/helm/v3 and every dependency in go.sum) into `~/.cache/vko/helm-<version>/helm`, keyed by
//! version like the testbed's Kubernetes binaries. `cargo xtask test` and `cargo xtask demo` build it
//! when it is missing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use vko_testbed::paths;

use crate::go_cache::CachedTool;

/// The helm release `xtask/helm/go.mod` requires (a unit test keeps the two equal).
pub const HELM_VERSION: &str = "v3.22.0";

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: HelmCommand,
}

#[derive(clap::Subcommand)]
enum HelmCommand {
    /// Build helm into the cache unless it is there already.
    Build,
    /// Print the path of the cached helm binary.
    Path,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        HelmCommand::Build => build().map(|_| ()),
        HelmCommand::Path => {
            println!("{}", helm_binary().display());
            Ok(())
        }
    }
}

/// `~/.cache/vko/helm-<version>/`.
pub fn helm_dir() -> PathBuf {
    paths::cache_root().join(format!("helm-{HELM_VERSION}"))
}

/// The cached helm binary.
pub fn helm_binary() -> PathBuf {
    tool().binary_path()
}

fn tool() -> CachedTool<'static> {
    CachedTool {
        name: "helm",
        version: HELM_VERSION,
        dir: helm_dir(),
        binary: "helm",
    }
}

/// Builds helm into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    tool().build_with(go_build)
}

fn go_build(out_dir: &std::path::Path) -> anyhow::Result<std::time::Duration> {
    let module = crate::testbed::repo_root().join("xtask").join("helm");
    // The -X stamps helm's own release build sets (`helm version` reports them).
    let ldflags = format!(
        "-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION} \
         -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    );
    eprintln!(
        "building helm {HELM_VERSION} from {} (a cold build takes a few minutes on 2 cores)",
        module.display()
    );
    let started = Instant::now();
    let status = Command::new("go")
        .current_dir(&module)
        .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(out_dir.join("helm"))
        .arg("helm.sh/helm/v3/cmd/helm")
        // A static binary: no C toolchain needed, runs anywhere on this machine.
        .env("CGO_ENABLED", "0")
        .stdin(Stdio::null())
        .status()
        .context("could not start `go` (is Go installed and on PATH?)")?;
    if !status.success() {
        bail!("go build of helm failed ({status}); its output is above");
    }
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_one_go_mod_requires() {
        let go_mod =
            std::fs::read_to_string(crate::testbed::repo_root().join("xtask/helm/go.mod")).unwrap();
        assert!(
            go_mod
                .lines()
                .any(|line| line.trim() == format!("require helm.sh/helm/v3 {HELM_VERSION}")),
            "xtask/helm/go.mod does not require helm.sh/helm/v3 {HELM_VERSION}"
        );
    }

    #[test]
    fn the_e2e_harness_looks_for_the_same_helm() {
        assert_eq!(HELM_VERSION, vko_testbed::harness::HELM_VERSION);
        if std::env::var_os(vko_testbed::harness::HELM_BIN_ENV).is_none() {
            assert_eq!(vko_testbed::harness::helm_binary(), helm_binary());
        }
    }

    #[test]
    fn the_cache_is_keyed_by_version() {
        assert!(helm_dir().ends_with(format!("vko/helm-{HELM_VERSION}")));
        assert_eq!(helm_binary().file_name().unwrap(), "helm");
    }
}
