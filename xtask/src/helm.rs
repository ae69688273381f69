//! `cargo xtask helm build | path`: helm, built from its Go module (`xtask/helm`, which pins
//! helm.sh/helm/v3 and every dependency in go.sum) into `~/.cache/vko/helm-<version>/helm`, keyed by
//! version like the testbed's Kubernetes binaries. `cargo xtask test` and `cargo xtask demo` build it
//! when it is missing.

use std::path::PathBuf;

use vko_testbed::paths;

use crate::go_cache::{GoModule, ToolArgs};

/// The helm release `xtask/helm/go.mod` requires (a unit test keeps the two equal).
pub const HELM_VERSION: &str = "v3.22.0";

pub type Args = ToolArgs;

pub fn run(args: Args) -> anyhow::Result<()> {
    args.run(build, helm_binary())
}

/// `~/.cache/vko/helm-<version>/`.
pub fn helm_dir() -> PathBuf {
    paths::cache_root().join(format!("helm-{HELM_VERSION}"))
}

/// The cached helm binary.
pub fn helm_binary() -> PathBuf {
    GO_MODULE.binary_path()
}

/// Builds helm into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    GO_MODULE.build_cached()
}

/// Its Go module, `xtask/helm`.
pub const GO_MODULE: GoModule = GoModule {
    name: "helm",
    dir: "helm",
    module: "helm.sh/helm/v3",
    version: HELM_VERSION,
    binary: "helm",
    build_note: " (a cold build takes a few minutes on 2 cores)",
    cache_dir: helm_dir,
    ldflags,
    packages: &["helm.sh/helm/v3/cmd/helm"],
    bin_subdir: "",
    after_build: None,
};

/// The `-X` stamps helm's own release build sets (`helm version` reports them).
fn ldflags() -> String {
    format!(
        "-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION} \
         -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
