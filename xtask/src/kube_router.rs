//! `cargo xtask kube-router build | path`: kube-router, the testbed's NetworkPolicy engine, built
//! from its Go module (`xtask/kube-router`, which pins github.com/cloudnativelabs/kube-router/v2 and
//! every dependency in go.sum) into `~/.cache/vko/kube-router-<version>/kube-router`. The testbed's
//! supervisor runs it, firewall only (`vko_testbed::kube_router`). `cargo xtask test`,
//! `cargo xtask testbed up` and `cargo xtask demo` build it when it is missing.

use std::path::PathBuf;

use vko_testbed::kube_router::{VERSION, dir};

use crate::go_cache::{GoModule, ToolArgs};

pub type Args = ToolArgs;

pub fn run(args: Args) -> anyhow::Result<()> {
    args.run(build, GO_MODULE.binary_path())
}

/// Builds kube-router into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    GO_MODULE.build_cached()
}

/// Its Go module, `xtask/kube-router`.
pub const GO_MODULE: GoModule = GoModule {
    name: "kube-router",
    dir: "kube-router",
    module: "github.com/cloudnativelabs/kube-router/v2",
    version: VERSION,
    binary: "kube-router",
    build_note: " (2-3 min on 2 cores)",
    cache_dir: dir,
    ldflags,
    packages: &["github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"],
    bin_subdir: "",
    after_build: None,
};

/// The `-X` stamp of its release build (`pkg/version`; `kube-router --version` and its start-up
/// log print it).
fn ldflags() -> String {
    format!("-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version={VERSION}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_where_the_supervisor_is_pointed() {
        assert_eq!(GO_MODULE.binary_path(), vko_testbed::kube_router::binary());
    }
}
