//! The cache of built tools (helm and redis_exporter from Go, Valkey from C):
//! `~/.cache/vko/<name>-<version>/<binary>`, built aside and renamed into place, complete only once
//! its version stamp is written.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use vko_testbed::controlplane::format_duration;
use vko_testbed::paths;

/// Written last into the cache directory: its presence (with this content) means "complete".
const STAMP: &str = "VERSION";

/// One cached tool.
pub struct CachedTool<'a> {
    /// Name in messages and the stamp (`helm`, `redis_exporter`).
    pub name: &'a str,
    pub version: &'a str,
    /// The cache directory, keyed by version.
    pub dir: PathBuf,
    /// File name of the binary inside `dir`.
    pub binary: &'a str,
}

impl CachedTool<'_> {
    pub fn binary_path(&self) -> PathBuf {
        self.dir.join(self.binary)
    }

    fn stamp(&self) -> String {
        format!("{} {}\n", self.name, self.version)
    }

    fn is_complete(&self) -> bool {
        self.binary_path().is_file()
            && std::fs::read_to_string(self.dir.join(STAMP))
                .is_ok_and(|found| found == self.stamp())
    }

    /// Returns the cached binary, running `build(staging_dir)` first when it is missing.
    pub fn build_with(
        &self,
        build: impl FnOnce(&Path) -> anyhow::Result<Duration>,
    ) -> anyhow::Result<PathBuf> {
        let (name, version, dest) = (self.name, self.version, &self.dir);
        if self.is_complete() {
            println!("{name} {version}: cached in {}", dest.display());
            return Ok(self.binary_path());
        }
        let parent = paths::cache_root();
        std::fs::create_dir_all(&parent)
            .with_context(|| format!("creating {}", parent.display()))?;
        // Built aside and renamed into place, so an interrupted build never looks complete.
        let staging = parent.join(format!(".{name}-{version}.building-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&staging);
        std::fs::create_dir_all(&staging)
            .with_context(|| format!("creating {}", staging.display()))?;
        let result = build(&staging).and_then(|elapsed| {
            std::fs::write(staging.join(STAMP), self.stamp())
                .context("writing the version stamp")?;
            if dest.exists() {
                std::fs::remove_dir_all(dest)
                    .with_context(|| format!("replacing {}", dest.display()))?;
            }
            std::fs::rename(&staging, dest)
                .with_context(|| format!("moving {name} to {}", dest.display()))?;
            println!(
                "{name} {version}: built into {} in {}",
                dest.display(),
                format_duration(elapsed)
            );
            Ok(self.binary_path())
        });
        if result.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        result
    }
}
