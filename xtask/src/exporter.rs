//! `cargo xtask exporter build | path`: redis_exporter (the metrics sidecar `spec.metrics` adds),
//! built from its Go module (`xtask/exporter`, which pins github.com/oliver006/redis_exporter and
//! every dependency in go.sum) into `~/.cache/vko/redis_exporter-<version>/redis_exporter`, keyed by
//! version like helm. The testbed's kubelet runs it for `oliver006/redis_exporter` images.
//! `cargo xtask test` builds it when it is missing.

use std::path::PathBuf;

use vko_testbed::kubelet::images::{REDIS_EXPORTER_VERSION, redis_exporter_dir};

use crate::go_cache::{GoModule, ToolArgs};

pub type Args = ToolArgs;

pub fn run(args: Args) -> anyhow::Result<()> {
    args.run(build, exporter_binary())
}

/// The cached redis_exporter binary.
pub fn exporter_binary() -> PathBuf {
    GO_MODULE.binary_path()
}

/// Builds redis_exporter into the cache when missing; returns its path.
pub fn build() -> anyhow::Result<PathBuf> {
    GO_MODULE.build_cached()
}

/// Its Go module, `xtask/exporter`.
pub const GO_MODULE: GoModule = GoModule {
    name: "redis_exporter",
    dir: "exporter",
    module: "github.com/oliver006/redis_exporter",
    version: REDIS_EXPORTER_VERSION,
    binary: "redis_exporter",
    build_note: "",
    cache_dir: redis_exporter_dir,
    ldflags,
    packages: &["github.com/oliver006/redis_exporter"],
    bin_subdir: "",
    after_build: None,
};

/// The `-X` stamp the exporter's own release build sets (its log line and
/// redis_exporter_build_info report it).
fn ldflags() -> String {
    format!("-s -w -X main.BuildVersion={REDIS_EXPORTER_VERSION}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_is_keyed_by_version_and_is_where_the_kubelet_looks() {
        assert!(
            redis_exporter_dir().ends_with(format!("vko/redis_exporter-{REDIS_EXPORTER_VERSION}"))
        );
        assert_eq!(
            exporter_binary().parent(),
            Some(redis_exporter_dir().as_path())
        );
        assert_eq!(exporter_binary().file_name().unwrap(), GO_MODULE.binary);
    }
}
