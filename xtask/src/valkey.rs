//! `cargo xtask valkey build [--version X]`: the Valkey releases the testbed runs for
//! `valkey/valkey` tags besides the host's 8.0.1 (see
//! `vko_testbed::kubelet::images::valkey_release`), built from Debian's source packages into
//! `~/.cache/vko/valkey-<version>/bin/` (cached by version like helm). Their binary packages need
//! a newer glibc than bookworm's, so the source is built here: `apt-get source` of a pinned Debian
//! version (from a deb-src-only apt source, so apt never installs a trixie or sid binary), checked
//! against a pinned SHA-256, then upstream's `make BUILD_TLS=yes` with the dependencies the
//! tarball bundles.
//!
//! Only the upstream tarball (`--tar-only`) is fetched: 8.1.1's Debian revision files (`.dsc`,
//! `.debian.tar.xz`) are not served by the mirror this project's machines reach (404), while both
//! tarballs are; 9.1.2 is built the same way, for one recipe. So the binaries are upstream's
//! release, built from the pinned tarballs without Debian's patches.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vko_testbed::kubelet::images::{
    BUILT_VALKEY_VERSIONS, HOST_VALKEY_VERSION, valkey_bin_dir, valkey_dir,
};
use vko_testbed::paths;

use crate::go_cache::CachedTool;

/// One Valkey release and the Debian source package it is built from.
#[derive(Debug)]
struct DebianSource {
    /// The upstream release (`valkey_version` in `INFO server`, the cache key).
    version: &'static str,
    /// The exact Debian version `apt-get source` fetches.
    debian_version: &'static str,
    /// The suite whose deb-src index lists it (for messages).
    suite: &'static str,
    /// The upstream tarball of that source package, and its SHA-256 (as the suite's index lists).
    tarball: &'static str,
    sha256: &'static str,
}

/// The pinned sources, one per entry of [`BUILT_VALKEY_VERSIONS`]. `apt-cache showsrc valkey`
/// lists them once [`APT_SOURCE`] is added. Debian's `+dfsg1` repack of 8.1.1 still bundles the
/// dependencies upstream's Makefile builds (jemalloc, Lua, hiredis, linenoise, hdr_histogram,
/// fpconv, fast_float).
const SOURCES: [DebianSource; 2] = [
    DebianSource {
        version: "8.1.1",
        debian_version: "8.1.1+dfsg1-3+deb13u3",
        suite: "trixie",
        tarball: "valkey_8.1.1+dfsg1.orig.tar.xz",
        sha256: "d9bbd82eecb82f359e649a0007ad3dc1b47cc15afa626348ca86b73c4ae2c7ee",
    },
    DebianSource {
        version: "9.1.2",
        debian_version: "9.1.2-1",
        suite: "sid",
        tarball: "valkey_9.1.2.orig.tar.gz",
        sha256: "8e8557da7426a51b4e0fb514a65ef6241dc7c85cb408243af389070abf379cec",
    },
];

const APT_SOURCE_FILE: &str = "/etc/apt/sources.list.d/vko-valkey-src.sources";
/// Source indices only (`Types: deb-src`): no binary package of trixie or sid becomes installable.
const APT_SOURCE: &str = "Types: deb-src\n\
URIs: http://deb.debian.org/debian\n\
Suites: trixie sid\n\
Components: main\n\
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";

/// What `make BUILD_TLS=yes` needs from bookworm (the tarballs bundle everything else).
const BUILD_PACKAGES: [&str; 3] = ["build-essential", "pkg-config", "libssl-dev"];

/// Parallel jobs of `make`: the project's machines have 2 cores.
const MAKE_JOBS: &str = "-j2";

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ValkeyCommand,
}

#[derive(clap::Subcommand)]
enum ValkeyCommand {
    /// Build a Valkey release (every one the testbed maps, without --version) into the cache
    /// unless it is there already.
    Build {
        /// The release to build: 8.1.1 or 9.1.2.
        #[arg(long)]
        version: Option<String>,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        ValkeyCommand::Build { version: None } => build_all().map(|_| ()),
        ValkeyCommand::Build {
            version: Some(version),
        } => build(source_of(&version)?).map(|_| ()),
    }
}

/// Builds every release of [`SOURCES`] that is not cached yet; returns their bin directories.
pub fn build_all() -> anyhow::Result<Vec<PathBuf>> {
    SOURCES.iter().map(build).collect()
}

fn source_of(version: &str) -> anyhow::Result<&'static DebianSource> {
    if version == HOST_VALKEY_VERSION {
        bail!(
            "Valkey {HOST_VALKEY_VERSION} is not built: the testbed runs the host's packages \
             for it (bookworm-backports; `cargo xtask test` installs them)"
        );
    }
    SOURCES
        .iter()
        .find(|source| source.version == version)
        .with_context(|| {
            format!(
                "no pinned source for Valkey {version} (known: {})",
                BUILT_VALKEY_VERSIONS.join(", ")
            )
        })
}

fn tool(source: &DebianSource) -> CachedTool<'_> {
    CachedTool {
        name: "valkey",
        version: source.version,
        dir: valkey_dir(source.version),
        binary: "bin/valkey-server",
    }
}

/// Builds one release into the cache when missing; returns its bin directory.
fn build(source: &DebianSource) -> anyhow::Result<PathBuf> {
    tool(source).build_with(|staging| build_into(source, staging))?;
    Ok(valkey_bin_dir(source.version))
}

/// Fetches, builds and installs `source` into `staging/bin`, in a scratch directory that is
/// removed on success and kept (with its build log) on failure.
fn build_into(source: &DebianSource, staging: &Path) -> anyhow::Result<Duration> {
    paths::require_root()?;
    let started = Instant::now();
    ensure_source_listed(source)?;
    install_build_packages()?;
    let scratch = std::env::temp_dir().join(format!(
        "vko-valkey-{}.src-{}",
        source.version,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    build_in(source, &scratch, staging).with_context(|| {
        format!(
            "building Valkey {} in {}",
            source.version,
            scratch.display()
        )
    })?;
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(started.elapsed())
}

fn build_in(source: &DebianSource, scratch: &Path, staging: &Path) -> anyhow::Result<()> {
    let version = source.version;
    eprintln!(
        "fetching Debian source valkey {} ({}, upstream tarball only)",
        source.debian_version, source.suite
    );
    run_command(
        Command::new("apt-get")
            .current_dir(scratch)
            // The scratch directory is root's; apt's download user could not write into it.
            .args(["-o", "APT::Sandbox::User=root", "source", "--tar-only"])
            .args(["--download-only"])
            .arg(format!("valkey={}", source.debian_version)),
    )?;
    let tarball = scratch.join(source.tarball);
    let found = sha256_of(&tarball)?;
    if found != source.sha256 {
        bail!(
            "{} has SHA-256 {found}, not the pinned {}",
            tarball.display(),
            source.sha256
        );
    }
    let tree = scratch.join("tree");
    std::fs::create_dir_all(&tree).with_context(|| format!("creating {}", tree.display()))?;
    run_command(
        Command::new("tar")
            .arg("-xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&tree),
    )?;
    let source_dir = single_directory(&tree)?;

    let log_path = scratch.join("make.log");
    eprintln!(
        "building Valkey {version}: make BUILD_TLS=yes {MAKE_JOBS} (output in {})",
        log_path.display()
    );
    let prefix = format!("PREFIX={}", staging.display());
    // One make run that builds and installs: every run regenerates release.h (its build id), so a
    // separate `make install` would compile release.o and link valkey-server (LTO) once more.
    // Installed: valkey-server, valkey-cli, valkey-benchmark, and valkey-sentinel (like
    // valkey-check-aof and valkey-check-rdb) as a symlink to valkey-server, as upstream does.
    make(
        &source_dir,
        &[
            "BUILD_TLS=yes",
            MAKE_JOBS,
            "install",
            "USE_REDIS_SYMLINKS=no",
            &prefix,
        ],
        &log_path,
    )?;
    let reported = output_of(Command::new(staging.join("bin/valkey-server")).arg("--version"))?;
    if !reported.contains(&format!("v={version} ")) {
        bail!("the built valkey-server reports {reported:?}, not v={version}");
    }
    for name in ["valkey-sentinel", "valkey-cli", "valkey-benchmark"] {
        let binary = staging.join("bin").join(name);
        if !binary.is_file() {
            bail!("make install did not install {}", binary.display());
        }
    }
    Ok(())
}

/// Adds [`APT_SOURCE`] and refreshes apt's indices when `source` is not listed yet; fails naming
/// the listed versions when the mirror no longer serves the pinned one.
fn ensure_source_listed(source: &DebianSource) -> anyhow::Result<()> {
    let mut updated = false;
    if std::fs::read_to_string(APT_SOURCE_FILE).ok().as_deref() != Some(APT_SOURCE) {
        println!("adding the deb-src apt source of trixie and sid ({APT_SOURCE_FILE})");
        std::fs::write(APT_SOURCE_FILE, APT_SOURCE)
            .with_context(|| format!("writing {APT_SOURCE_FILE}"))?;
        apt(&["update"])?;
        updated = true;
    }
    loop {
        let listed = listed_versions()?;
        if listed.iter().any(|listed| listed == source.debian_version) {
            return Ok(());
        }
        if updated {
            bail!(
                "Debian's {} no longer lists the pinned source valkey {} (listed: {}); pin a \
                 listed version in xtask/src/valkey.rs (and its tarball's SHA-256)",
                source.suite,
                source.debian_version,
                if listed.is_empty() {
                    "none".to_string()
                } else {
                    listed.join(", ")
                }
            );
        }
        apt(&["update"])?;
        updated = true;
    }
}

/// The versions of the `valkey` source package apt's indices list.
fn listed_versions() -> anyhow::Result<Vec<String>> {
    let output = Command::new("apt-cache")
        .args(["showsrc", "--only-source", "valkey"])
        .stderr(Stdio::null())
        .output()
        .context("running apt-cache showsrc")?;
    // apt-cache exits non-zero when nothing is listed: that is an empty list, not an error.
    Ok(versions_in_showsrc(&String::from_utf8_lossy(
        &output.stdout,
    )))
}

fn versions_in_showsrc(showsrc: &str) -> Vec<String> {
    showsrc
        .lines()
        .filter_map(|line| line.strip_prefix("Version: "))
        .map(|version| version.trim().to_string())
        .collect()
}

fn install_build_packages() -> anyhow::Result<()> {
    let missing: Vec<&str> = BUILD_PACKAGES
        .iter()
        .copied()
        .filter(|package| !is_installed(package))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut args = vec!["install", "--yes", "--no-install-recommends"];
    args.extend(&missing);
    apt(&args)
}

fn is_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["--show", "--showformat=${db:Status-Status}", package])
        .output()
        .is_ok_and(|output| output.status.success() && output.stdout == b"installed")
}

fn apt(args: &[&str]) -> anyhow::Result<()> {
    println!("apt-get {}", args.join(" "));
    run_command(
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn make(dir: &Path, args: &[&str], log_path: &Path) -> anyhow::Result<()> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let status = Command::new("make")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("duplicating the log file")?)
        .stderr(log)
        .status()
        .context("could not start `make` (is build-essential installed?)")?;
    if !status.success() {
        let text = std::fs::read_to_string(log_path).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(30).collect();
        for line in tail.iter().rev() {
            eprintln!("  {line}");
        }
        bail!(
            "`make {}` failed ({status}); the end of {} is above",
            args.join(" "),
            log_path.display()
        );
    }
    Ok(())
}

fn run_command(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("could not start {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

fn output_of(command: &mut Command) -> anyhow::Result<String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("could not start {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed ({})", output.status);
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn sha256_of(file: &Path) -> anyhow::Result<String> {
    let output = output_of(Command::new("sha256sum").arg(file))?;
    output
        .split_whitespace()
        .next()
        .map(str::to_string)
        .with_context(|| format!("sha256sum printed nothing for {}", file.display()))
}

/// The one directory a tarball unpacked into (9.1.2's is `valkey-io-valkey-<commit>`).
fn single_directory(dir: &Path) -> anyhow::Result<PathBuf> {
    let entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    match entries.as_slice() {
        [only] if only.is_dir() => Ok(only.clone()),
        _ => bail!(
            "the tarball unpacked into {} entries in {}, not one directory",
            entries.len(),
            dir.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_release_has_one_pinned_source_and_no_other() {
        let pinned: Vec<&str> = SOURCES.iter().map(|source| source.version).collect();
        assert_eq!(pinned, BUILT_VALKEY_VERSIONS);
        for source in &SOURCES {
            assert!(
                source.debian_version.starts_with(source.version),
                "{source:?}"
            );
            assert!(
                source
                    .tarball
                    .starts_with(&format!("valkey_{}", source.version)),
                "{source:?}"
            );
            assert_eq!(source.sha256.len(), 64, "{source:?}");
            assert!(
                APT_SOURCE.contains(source.suite),
                "{source:?} needs its suite in the apt source"
            );
        }
    }

    #[test]
    fn the_apt_source_has_source_indices_only() {
        assert!(
            APT_SOURCE
                .lines()
                .filter(|line| line.starts_with("Types:"))
                .all(|line| line == "Types: deb-src")
        );
        assert!(APT_SOURCE.contains("Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"));
        // `cargo xtask test` adds bookworm-backports only when no apt source mentions it.
        assert!(!APT_SOURCE.contains("backports"));
    }

    #[test]
    fn versions_are_read_from_showsrc() {
        let showsrc = "Package: valkey\nVersion: 8.1.1+dfsg1-3+deb13u3\nBinary: valkey-server\n\n\
                       Package: valkey\nVersion: 9.1.2-1\n";
        assert_eq!(
            versions_in_showsrc(showsrc),
            vec!["8.1.1+dfsg1-3+deb13u3", "9.1.2-1"]
        );
        assert!(versions_in_showsrc("").is_empty());
    }

    #[test]
    fn versions_are_looked_up_and_the_host_one_is_not_built() {
        assert_eq!(source_of("9.1.2").unwrap().debian_version, "9.1.2-1");
        let error = source_of(HOST_VALKEY_VERSION).unwrap_err().to_string();
        assert!(error.contains("host"), "{error}");
        let error = source_of("7.2.5").unwrap_err().to_string();
        assert!(error.contains("8.1.1, 9.1.2"), "{error}");
    }

    #[test]
    fn the_cache_is_where_the_kubelet_looks() {
        for source in &SOURCES {
            assert_eq!(
                tool(source).binary_path().parent(),
                Some(valkey_bin_dir(source.version).as_path())
            );
        }
    }
}
