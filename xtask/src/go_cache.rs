//! The cache of built tools (helm and redis_exporter from Go, Valkey from C):
//! `~/.cache/vko/<name>-<version>/<binary>`, built aside and renamed into place, complete only once
//! its version stamp is written.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
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

/// `cargo xtask helm | exporter`: the two subcommands every Go-built tool has.
#[derive(clap::Args)]
pub struct ToolArgs {
    #[command(subcommand)]
    command: ToolCommand,
}

#[derive(clap::Subcommand)]
enum ToolCommand {
    /// Build the tool into the cache unless it is there already.
    Build,
    /// Print the path of the cached binary.
    Path,
}

impl ToolArgs {
    /// Builds with `build`, or prints where the cached binary is.
    pub fn run(
        self,
        build: impl FnOnce() -> anyhow::Result<PathBuf>,
        binary: PathBuf,
    ) -> anyhow::Result<()> {
        match self.command {
            ToolCommand::Build => build().map(|_| ()),
            ToolCommand::Path => {
                println!("{}", binary.display());
                Ok(())
            }
        }
    }
}

/// A tool built from a Go module of this repository (`xtask/<dir>`, whose go.mod requires `module`
/// at `version` and whose go.sum pins every dependency).
pub struct GoModule {
    /// Name in messages (`helm`, `redis_exporter`).
    pub name: &'static str,
    /// The Go module's directory below `xtask/`.
    pub dir: &'static str,
    /// The module go.mod requires, at `version`.
    pub module: &'static str,
    pub version: &'static str,
    /// The packages `go build` builds (each a `main`; the binary is named after the package's
    /// last path element).
    pub packages: &'static [&'static str],
    /// Path of the (first) binary inside the cache directory.
    pub binary: &'static str,
    /// The directory of the binaries inside the cache directory (`""`: the cache directory).
    pub bin_subdir: &'static str,
    /// Called with the Go module's directory in the module cache and the staging directory after
    /// the build, to copy more of the module (cert-manager's chart).
    pub after_build: Option<fn(&Path, &Path) -> anyhow::Result<()>>,
    /// What to expect, after the "building ..." line.
    pub build_note: &'static str,
    /// The cache directory (`~/.cache/vko/<name>-<version>`).
    pub cache_dir: fn() -> PathBuf,
    /// The `-X` stamps of the tool's own release build.
    pub ldflags: fn() -> String,
}

impl GoModule {
    fn module_dir(&self) -> PathBuf {
        crate::testbed::repo_root().join("xtask").join(self.dir)
    }

    fn cached(&self) -> CachedTool<'static> {
        CachedTool {
            name: self.name,
            version: self.version,
            dir: (self.cache_dir)(),
            binary: self.binary,
        }
    }

    /// The cached binary (which may not be built yet).
    pub fn binary_path(&self) -> PathBuf {
        self.cached().binary_path()
    }

    /// The cached binary, built first when missing.
    pub fn build_cached(&self) -> anyhow::Result<PathBuf> {
        self.cached().build_with(|out_dir| {
            let elapsed = self.go_build(&(self.ldflags)(), &out_dir.join(self.bin_subdir))?;
            if let Some(after_build) = self.after_build {
                after_build(&self.source_dir()?, out_dir)?;
            }
            Ok(elapsed)
        })
    }

    /// Where the required module's source is in Go's module cache (`go list -m`).
    fn source_dir(&self) -> anyhow::Result<PathBuf> {
        let output = Command::new("go")
            .current_dir(self.module_dir())
            .args(["list", "-m", "-f", "{{.Dir}}", self.module])
            .stdin(Stdio::null())
            .output()
            .context("could not start `go`")?;
        let dir = String::from_utf8_lossy(&output.stdout).trim().to_owned();
        if !output.status.success() || dir.is_empty() {
            bail!(
                "go list -m {} failed ({}): {}",
                self.module,
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(PathBuf::from(dir))
    }

    /// `go build` of the packages into the directory `output`, as static binaries; returns how
    /// long it took.
    fn go_build(&self, ldflags: &str, output: &Path) -> anyhow::Result<Duration> {
        let module_dir = self.module_dir();
        eprintln!(
            "building {} {} from {}{}",
            self.name,
            self.version,
            module_dir.display(),
            self.build_note
        );
        let started = Instant::now();
        std::fs::create_dir_all(output)
            .with_context(|| format!("creating {}", output.display()))?;
        // `-o` naming an existing directory: each package's binary is written into it.
        let status = Command::new("go")
            .current_dir(&module_dir)
            .args(["build", "-trimpath", "-ldflags", ldflags, "-o"])
            .arg(output)
            .args(self.packages)
            // A static binary: no C toolchain needed, and it runs anywhere on this machine, inside
            // the testbed's containers too.
            .env("CGO_ENABLED", "0")
            .stdin(Stdio::null())
            .status()
            .context("could not start `go` (is Go installed and on PATH?)")?;
        if !status.success() {
            bail!(
                "go build of {} ({} {}) failed ({status}); its output is above",
                self.name,
                self.module,
                self.version
            );
        }
        Ok(started.elapsed())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_version_is_the_one_its_go_mod_requires() {
        for tool in [
            crate::helm::GO_MODULE,
            crate::exporter::GO_MODULE,
            crate::cert_manager::GO_MODULE,
            crate::kube_router::GO_MODULE,
        ] {
            let go_mod = std::fs::read_to_string(tool.module_dir().join("go.mod")).unwrap();
            assert!(
                go_mod
                    .lines()
                    .any(|line| line.trim() == format!("require {} {}", tool.module, tool.version)),
                "xtask/{}/go.mod does not require {} {}",
                tool.dir,
                tool.module,
                tool.version
            );
        }
    }
}
