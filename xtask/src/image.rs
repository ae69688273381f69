//! `cargo xtask image`: the vko image without a registry. Builds the three release binaries, puts
//! them on a base unpacked from pinned Debian packages (what `gcr.io/distroless/cc-debian12`
//! holds for a Rust binary: glibc, libgcc, CA certificates, netbase, tzdata; no shell, no package
//! manager), commits it with buildah as `vko.local/vko:<version>` into the local containers
//! storage, and runs each binary from it with `podman run --read-only --user 65532`.
//!
//! The base is the packages' files (`dpkg-deb -x`), as distroless makes it: no maintainer script
//! runs, so neither mmdebstrap nor debootstrap (which install dpkg, apt and a shell to run them) is
//! needed; the one file a script would make, the CA bundle, is made here. It is cached in
//! `~/.cache/vko/image-base-<key>/` (key: a hash of the pinned packages and the layout).
//!
//! The `Containerfile` is the same image for builders with registry access; a unit test below
//! keeps its files, user and entrypoint equal to this one's.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use vko_testbed::controlplane::format_duration;
use vko_testbed::kubelet::images::{UNPACKED_CONFIG, UNPACKED_ROOTFS};
use vko_testbed::paths;

use crate::test::{NoServiceStarts, POLICY_RC_D, apt, find_command, run_to_success};
use crate::testbed::{repo_root, target_dir};

/// The chart's default repository (`charts/valkey-operator/values.yaml`); the tag is the version.
pub const IMAGE_REPOSITORY: &str = "vko.local/vko";
/// The binaries the image holds, each in [`BIN_DIR`]; the chart names them as `command`.
pub const BINARIES: [&str; 3] = ["vko-operator", "vko-sidecar", "vko-observer"];
pub const BIN_DIR: &str = "/usr/local/bin";
/// distroless's `nonroot` user, the chart's `runAsUser` / `runAsGroup`.
pub const USER: &str = "65532:65532";
pub const ENTRYPOINT: [&str; 1] = ["vko-operator"];
/// `org.opencontainers.image.source`: the workspace's `repository`.
const SOURCE: &str = env!("CARGO_PKG_REPOSITORY");

/// The base: Debian 12 packages, pinned to the versions of bookworm (with its security and
/// updates suites) this was built with. `ldd` of the release binaries: libc.so.6, libm.so.6,
/// libgcc_s.so.1 and the loader, i.e. libc6 + libgcc-s1. ca-certificates, netbase and tzdata are
/// what distroless adds for any program (TLS roots, /etc/services and /etc/protocols, zone data).
/// When the mirror no longer has a version, `apt-get download` fails naming it: update the pin.
pub const BASE_PACKAGES: [(&str, &str); 5] = [
    ("libc6", "2.36-9+deb12u14"),
    ("libgcc-s1", "12.2.0-14+deb12u1"),
    ("ca-certificates", "20250419~deb12u2"),
    ("netbase", "6.4"),
    ("tzdata", "2026f-0+deb12u1"),
];
/// Bump when the base's layout (the files made below) changes: it is part of the cache key.
const BASE_LAYOUT: &str = "1";
/// distroless's three users; the image runs as `nonroot`. No login shell exists in the image.
const PASSWD: &str = "root:x:0:0:root:/root:/sbin/nologin\n\
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n\
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n";
/// Where update-ca-certificates puts the bundle; rustls-native-certs and OpenSSL read it.
const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
const CA_SOURCE_DIR: &str = "usr/share/ca-certificates/mozilla";
/// Commands the build needs, with the Debian package that provides each.
const HOST_COMMANDS: [(&str, &str); 5] = [
    ("buildah", "buildah"),
    ("podman", "podman"),
    // podman's default runtime, crun, refuses a host with cgroups v1 and v2 mounted together
    // ("cgroups in hybrid mode not supported"), as this machine has them; runc runs there.
    ("runc", "runc"),
    ("dpkg-deb", "dpkg"),
    ("apt-get", "apt"),
];
/// The containers storage on this machine: `vfs` works on any filesystem, also inside a
/// container where overlay mounts are refused. podman and buildah must use the same one.
const STORAGE_DRIVER: &str = "vfs";

#[derive(clap::Args, Default)]
pub struct Args {
    /// Take the three binaries from this directory instead of the release build (for example
    /// `target/debug` after `cargo build --workspace --bins`: seconds instead of a release build,
    /// but unstripped and unoptimised). The annotations still name this checkout's HEAD.
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    let built = build(args.bin_dir.as_deref())?;
    println!(
        "image {}: {} ({} bytes uncompressed), built in {}",
        built.reference,
        format_size(built.size_bytes),
        built.size_bytes,
        format_duration(started.elapsed())
    );
    smoke_test(&built.reference)?;
    println!(
        "image {} ready in {}",
        built.reference,
        format_duration(started.elapsed())
    );
    Ok(())
}

/// The workspace version, the image's tag and `org.opencontainers.image.version`.
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// `vko.local/vko:<version>`.
pub fn reference() -> String {
    format!("{IMAGE_REPOSITORY}:{}", version())
}

pub struct BuiltImage {
    pub reference: String,
    pub size_bytes: u64,
}

/// Installs what is missing, builds the binaries (unless `bin_dir` holds them) and the image;
/// returns its reference and size.
pub fn build(bin_dir: Option<&Path>) -> anyhow::Result<BuiltImage> {
    paths::require_root()?;
    install_host_commands()?;
    let revision = git_head()?;
    let bin_dir = match bin_dir {
        Some(dir) => dir.to_path_buf(),
        None => {
            let step = Instant::now();
            build_binaries(&revision)?;
            println!(
                "release binaries: built in {}",
                format_duration(step.elapsed())
            );
            target_dir().join("release")
        }
    };
    let base = base()?;
    let step = Instant::now();
    let reference = reference();
    assemble(&base, &bin_dir, &reference, &revision)?;
    println!(
        "image assembled and committed in {}",
        format_duration(step.elapsed())
    );
    let size = podman(&["image", "inspect", "--format", "{{.Size}}", &reference])?;
    let size_bytes = size
        .trim()
        .parse()
        .with_context(|| format!("podman image inspect reported size {size:?}"))?;
    Ok(BuiltImage {
        reference,
        size_bytes,
    })
}

/// Exports `reference` into `dir` as the testbed runs it (`vko_testbed`'s `UnpackedImage`):
/// `dir/rootfs/`, the files of a container created from the image, and `dir/config.json`, the
/// image's config (entrypoint, env, user). Whatever `dir` held is replaced.
pub fn unpack(reference: &str, dir: &Path) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    let rootfs = dir.join(UNPACKED_ROOTFS);
    std::fs::create_dir_all(&rootfs).with_context(|| format!("creating {}", rootfs.display()))?;
    let config = podman(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config}}",
        reference,
    ])?;
    let config_path = dir.join(UNPACKED_CONFIG);
    std::fs::write(&config_path, config.trim())
        .with_context(|| format!("writing {}", config_path.display()))?;
    let container = format!("vko-image-unpack-{}", std::process::id());
    let archive = dir.join("rootfs.tar");
    podman(&[
        "create",
        "--name",
        &container,
        "--network",
        "none",
        reference,
    ])?;
    let exported = podman(&["export", "--output", &path_str(&archive)?, &container]);
    if let Err(error) = podman(&["rm", &container]) {
        eprintln!("could not remove the container {container}: {error:#}");
    }
    exported?;
    run_checked(
        Command::new("tar")
            .arg("--extract")
            .arg("--file")
            .arg(&archive)
            .arg("--directory")
            .arg(&rootfs),
    )?;
    std::fs::remove_file(&archive).with_context(|| format!("removing {}", archive.display()))?;
    Ok(())
}

fn install_host_commands() -> anyhow::Result<()> {
    let missing: Vec<&str> = HOST_COMMANDS
        .iter()
        .filter(|(command, _)| find_command(command).is_none())
        .map(|(_, package)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    println!("installing {}", missing.join(", "));
    apt(&["update"])?;
    // podman's package ships services (a socket, auto-update timers): start none of them.
    let _no_service_starts = NoServiceStarts::install(Path::new(POLICY_RC_D))?;
    let mut args = vec!["install", "--yes", "--no-install-recommends"];
    args.extend(&missing);
    apt(&args)
}

pub(crate) fn git_head() -> anyhow::Result<String> {
    let output = Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(repo_root())
        .output()
        .context("running git rev-parse HEAD")?;
    if !output.status.success() {
        bail!(
            "git rev-parse HEAD failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// `cargo build --release` of the three binaries (stripped by the release profile), with the
/// commit the operator reports in `vko_operator_build_info`.
pub(crate) fn build_binaries(revision: &str) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut args = vec!["build", "--release", "--locked"];
    for binary in BINARIES {
        args.extend(["--package", binary]);
    }
    let shown = format!("cargo {}", args.join(" "));
    println!("{shown}");
    let mut command = Command::new(cargo);
    command
        .args(&args)
        .env("VKO_GIT_COMMIT", revision)
        .current_dir(repo_root());
    run_to_success(command, &shown)
}

/// What the cache key covers: every pinned package and the layout.
fn base_description() -> String {
    let mut description = format!("layout {BASE_LAYOUT}\n");
    for (package, version) in BASE_PACKAGES {
        description.push_str(&format!("{package}={version}\n"));
    }
    description
}

/// FNV-1a, 64 bits: a stable key (std's hasher is not stable across releases).
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `~/.cache/vko/image-base-<key>/`; the root filesystem is its `rootfs/`.
pub fn base_dir() -> PathBuf {
    paths::cache_root().join(format!("image-base-{:016x}", fnv1a(&base_description())))
}

const BASE_STAMP: &str = "PACKAGES";

/// The cached base's root filesystem, unpacked first when missing.
fn base() -> anyhow::Result<PathBuf> {
    let dir = base_dir();
    let rootfs = dir.join("rootfs");
    let description = base_description();
    if std::fs::read_to_string(dir.join(BASE_STAMP)).is_ok_and(|found| found == description) {
        println!("image base: cached in {}", dir.display());
        return Ok(rootfs);
    }
    let started = Instant::now();
    let parent = paths::cache_root();
    // Made aside and renamed into place, so an interrupted run never looks complete.
    let staging = parent.join(format!(".image-base.building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    let result = unpack_base(&staging).and_then(|()| {
        std::fs::remove_dir_all(staging.join("debs")).context("removing the downloaded .debs")?;
        std::fs::write(staging.join(BASE_STAMP), &description).context("writing the stamp")?;
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .with_context(|| format!("replacing {}", dir.display()))?;
        }
        std::fs::rename(&staging, &dir).with_context(|| format!("moving to {}", dir.display()))
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result?;
    println!(
        "image base: unpacked into {} in {}",
        dir.display(),
        format_duration(started.elapsed())
    );
    Ok(rootfs)
}

fn unpack_base(staging: &Path) -> anyhow::Result<()> {
    let debs = staging.join("debs");
    let rootfs = staging.join("rootfs");
    for dir in [&debs, &rootfs] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let pins: Vec<String> = BASE_PACKAGES
        .iter()
        .map(|(package, version)| format!("{package}={version}"))
        .collect();
    let mut args = vec!["download"];
    args.extend(pins.iter().map(String::as_str));
    if download(&debs, &args).is_err() {
        // A machine whose package lists are older than the pins: refresh them once.
        apt(&["update"])?;
        download(&debs, &args)?;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&debs)
        .context("listing the downloaded .debs")?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .collect();
    files.sort();
    if files.len() != BASE_PACKAGES.len() {
        bail!(
            "apt-get download left {} files in {}, expected {}",
            files.len(),
            debs.display(),
            BASE_PACKAGES.len()
        );
    }
    for deb in &files {
        run_checked(Command::new("dpkg-deb").arg("-x").arg(deb).arg(&rootfs))?;
    }
    write_ca_bundle(&rootfs)?;
    for (path, text) in [("etc/passwd", PASSWD), ("etc/group", GROUP)] {
        std::fs::write(rootfs.join(path), text).with_context(|| format!("writing /{path}"))?;
    }
    // A mount point for an emptyDir; on a read-only root nothing else is writable.
    let tmp = rootfs.join("tmp");
    std::fs::create_dir_all(&tmp).context("creating /tmp")?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
        .context("chmod 1777 /tmp")?;
    Ok(())
}

fn download(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    println!("apt-get {}", args.join(" "));
    run_checked(Command::new("apt-get").args(args).current_dir(dir)).map(|_| ())
}

/// What ca-certificates' postinst makes with the default configuration (every Mozilla root
/// enabled): the certificates in file-name order, one bundle.
fn write_ca_bundle(rootfs: &Path) -> anyhow::Result<()> {
    let source = rootfs.join(CA_SOURCE_DIR);
    let mut certificates: Vec<PathBuf> = std::fs::read_dir(&source)
        .with_context(|| format!("listing {}", source.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "crt"))
        .collect();
    certificates.sort();
    if certificates.is_empty() {
        bail!("no certificates in {}", source.display());
    }
    let mut bundle = String::new();
    for certificate in &certificates {
        let pem = std::fs::read_to_string(certificate)
            .with_context(|| format!("reading {}", certificate.display()))?;
        bundle.push_str(&pem);
        if !pem.ends_with('\n') {
            bundle.push('\n');
        }
    }
    let path = rootfs.join(CA_BUNDLE);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(&path, bundle).with_context(|| format!("writing {}", path.display()))?;
    println!(
        "image base: {} certificates in /{CA_BUNDLE}",
        certificates.len()
    );
    Ok(())
}

/// The OCI annotations (also set as labels, which `podman inspect` and docker show).
fn annotations(revision: &str) -> Vec<(&'static str, String)> {
    vec![
        ("org.opencontainers.image.version", version().to_string()),
        ("org.opencontainers.image.revision", revision.to_string()),
        ("org.opencontainers.image.source", SOURCE.to_string()),
        ("org.opencontainers.image.title", "vko".to_string()),
        (
            "org.opencontainers.image.description",
            "vko: Kubernetes operator for Valkey (vko-operator, vko-sidecar, vko-observer)"
                .to_string(),
        ),
    ]
}

/// `buildah from scratch`, the base and the binaries copied in, the config, `buildah commit`.
fn assemble(base: &Path, bin_dir: &Path, reference: &str, revision: &str) -> anyhow::Result<()> {
    // The image this build replaces: removed once the tag has moved, so rebuilds leave no
    // untagged copies behind (each is a full copy of the files with the vfs driver).
    let replaced = podman(&["image", "inspect", "--format", "{{.Id}}", reference])
        .ok()
        .map(|id| id.trim().to_string());
    let container = format!("vko-image-build-{}", std::process::id());
    buildah(&["from", "--name", &container, "scratch"])?;
    let result = (|| {
        buildah(&["copy", &container, &path_str(base)?, "/"])?;
        for binary in BINARIES {
            let path = bin_dir.join(binary);
            if !path.is_file() {
                bail!("{} is missing", path.display());
            }
            let dest = format!("{BIN_DIR}/{binary}");
            buildah(&[
                "copy",
                "--chmod",
                "0755",
                &container,
                &path_str(&path)?,
                &dest,
            ])?;
        }
        let entrypoint = serde_json::to_string(&ENTRYPOINT).context("encoding the entrypoint")?;
        let mut config = vec![
            "config".to_string(),
            format!("--user={USER}"),
            format!("--entrypoint={entrypoint}"),
            "--cmd=".to_string(),
            "--workingdir=/".to_string(),
            "--env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            // As distroless sets it: TLS libraries that do not probe for the bundle find it.
            format!("--env=SSL_CERT_FILE=/{CA_BUNDLE}"),
        ];
        for (key, value) in annotations(revision) {
            config.push(format!("--annotation={key}={value}"));
            config.push(format!("--label={key}={value}"));
        }
        config.push(container.clone());
        buildah(&config.iter().map(String::as_str).collect::<Vec<_>>())?;
        buildah(&[
            "commit", "--format", "oci", "--quiet", &container, reference,
        ])
    })();
    if let Err(error) = buildah(&["rm", &container]) {
        eprintln!("could not remove the working container {container}: {error:#}");
    }
    let committed = result?;
    if let Some(old) = replaced
        && !old.is_empty()
        && !committed.trim().ends_with(&old)
        && let Err(error) = podman(&["rmi", &old])
    {
        eprintln!("could not remove the replaced image {old}: {error:#}");
    }
    Ok(())
}

/// Each binary from the image as the chart runs it: read-only root, uid 65532, no network.
fn smoke_test(reference: &str) -> anyhow::Result<()> {
    let checks: [(&str, &str); 3] = [
        ("vko-operator", "--version"),
        ("vko-sidecar", "--help"),
        ("vko-observer", "--help"),
    ];
    for (binary, flag) in checks {
        let entrypoint = format!("--entrypoint={binary}");
        let args = [
            "run",
            "--rm",
            "--read-only",
            "--user",
            "65532",
            "--network=none",
            // podman's default limits (nofile 1048576, nproc the host's) are above what root
            // may set here: crun and runc fail with "setrlimit: Operation not permitted".
            "--ulimit=nofile=1024:1024",
            "--ulimit=nproc=1024:1024",
            &entrypoint,
            reference,
            flag,
        ];
        let output = podman(&args).with_context(|| format!("{binary} {flag} in the image"))?;
        let first_line = output.lines().next().unwrap_or("");
        println!("podman {}: {first_line}", args.join(" "));
    }
    Ok(())
}

/// The storage flag buildah and podman share (podman adds its own in [`podman`]).
fn storage_flags() -> [String; 1] {
    [format!("--storage-driver={STORAGE_DRIVER}")]
}

fn buildah(args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new("buildah");
    command.args(storage_flags()).args(args);
    run_checked(&mut command)
}

/// podman as it works here: no systemd (cgroupfs, events to a file), runc (see [`HOST_COMMANDS`]).
pub fn podman(args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new("podman");
    command
        .args(storage_flags())
        .args([
            "--cgroup-manager=cgroupfs",
            "--events-backend=file",
            "--runtime=runc",
        ])
        .args(args);
    run_checked(&mut command)
}

/// Runs a command; returns its stdout, or an error with its stderr.
fn run_checked(command: &mut Command) -> anyhow::Result<String> {
    let description = format!("{command:?}");
    let Output {
        status,
        stdout,
        stderr,
    } = command
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting {description}"))?;
    if !status.success() {
        bail!(
            "{description} failed ({status}): {}",
            String::from_utf8_lossy(&stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&stdout).into_owned())
}

fn path_str(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_string)
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

fn format_size(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1_000_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Containerfile's instructions, continuation lines joined: (stage index, keyword, rest).
    fn instructions(text: &str) -> Vec<(usize, String, String)> {
        let mut joined: Vec<String> = Vec::new();
        let mut pending = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
                continue;
            }
            match trimmed.strip_suffix('\\') {
                Some(head) => {
                    pending.push_str(head.trim_end());
                    pending.push(' ');
                }
                None => {
                    pending.push_str(trimmed);
                    joined.push(std::mem::take(&mut pending));
                }
            }
        }
        let mut stage = 0;
        let mut result = Vec::new();
        for instruction in joined {
            let (keyword, rest) = instruction.split_once(' ').unwrap_or((&instruction, ""));
            let keyword = keyword.to_ascii_uppercase();
            if keyword == "FROM" {
                stage += 1;
            }
            result.push((stage, keyword, rest.trim().to_string()));
        }
        result
    }

    fn containerfile() -> Vec<(usize, String, String)> {
        let path = repo_root().join("Containerfile");
        instructions(&std::fs::read_to_string(path).unwrap())
    }

    fn last_stage() -> Vec<(String, String)> {
        let all = containerfile();
        let last = all.iter().map(|(stage, _, _)| *stage).max().unwrap();
        all.into_iter()
            .filter(|(stage, _, _)| *stage == last)
            .map(|(_, keyword, rest)| (keyword, rest))
            .collect()
    }

    fn only(stage: &[(String, String)], keyword: &str) -> String {
        let found: Vec<&String> = stage
            .iter()
            .filter(|(found, _)| found == keyword)
            .map(|(_, rest)| rest)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "the final stage has {} {keyword}",
            found.len()
        );
        found[0].clone()
    }

    #[test]
    fn the_containerfile_runs_the_same_user_and_entrypoint() {
        let stage = last_stage();
        assert_eq!(only(&stage, "USER"), USER);
        let entrypoint: Vec<String> = serde_json::from_str(&only(&stage, "ENTRYPOINT")).unwrap();
        assert_eq!(entrypoint, ENTRYPOINT);
        assert_eq!(
            only(&stage, "FROM"),
            "gcr.io/distroless/cc-debian12:nonroot",
            "the base this image's Debian 12 packages stand in for"
        );
        assert!(BASE_PACKAGES.iter().all(|(_, version)| !version.is_empty()));
        assert!(PASSWD.contains(&format!("nonroot:x:{USER}:")));
    }

    #[test]
    fn the_containerfile_ships_the_same_binaries_in_the_same_place() {
        let stage = last_stage();
        // The final stage adds exactly the build stage's /out/ to BIN_DIR.
        assert_eq!(
            only(&stage, "COPY"),
            format!("--from=build /out/ {BIN_DIR}/")
        );
        let build_stage_runs: Vec<String> = containerfile()
            .into_iter()
            .filter(|(stage, keyword, _)| *stage == 1 && keyword == "RUN")
            .map(|(_, _, rest)| rest)
            .collect();
        assert_eq!(build_stage_runs.len(), 1);
        let words: Vec<&str> = build_stage_runs[0].split_whitespace().collect();
        let packages: Vec<&str> = words
            .windows(2)
            .filter(|pair| pair[0] == "--package")
            .map(|pair| pair[1])
            .collect();
        assert_eq!(packages, BINARIES, "the packages the Containerfile builds");
        let copied: Vec<&str> = words
            .iter()
            .filter_map(|word| word.strip_prefix("target/release/"))
            .collect();
        assert_eq!(
            copied, BINARIES,
            "the binaries the Containerfile puts in /out/"
        );
        let cp = words.iter().position(|word| *word == "cp").unwrap();
        assert_eq!(words[cp + 1 + BINARIES.len()], "/out/", "cp's destination");
    }

    #[test]
    fn the_parser_joins_continuations_and_counts_stages() {
        let parsed = instructions(
            "# comment\nFROM a AS b\nRUN x \\\n  y\n\nFROM c\nUSER 1:1\nENTRYPOINT [\"z\"]\n",
        );
        let short: Vec<(usize, &str, &str)> = parsed
            .iter()
            .map(|(stage, keyword, rest)| (*stage, keyword.as_str(), rest.as_str()))
            .collect();
        assert_eq!(
            short,
            [
                (1, "FROM", "a AS b"),
                (1, "RUN", "x y"),
                (2, "FROM", "c"),
                (2, "USER", "1:1"),
                (2, "ENTRYPOINT", "[\"z\"]"),
            ]
        );
    }

    #[test]
    fn the_base_cache_is_keyed_by_every_pin_and_the_layout() {
        let key = fnv1a(&base_description());
        let description = base_description();
        assert!(description.contains("libc6=2.36-9+deb12u14\n"));
        assert!(description.contains(&format!("layout {BASE_LAYOUT}\n")));
        assert_ne!(key, fnv1a(&description.replace("deb12u14", "deb12u15")));
        assert!(
            base_dir()
                .to_string_lossy()
                .ends_with(&format!("vko/image-base-{key:016x}"))
        );
        // FNV-1a's published test vectors: the key does not change between Rust releases.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn the_ca_bundle_is_every_mozilla_certificate_in_name_order() {
        let rootfs = std::env::temp_dir().join(format!("vko-image-test-{}", std::process::id()));
        let source = rootfs.join(CA_SOURCE_DIR);
        std::fs::create_dir_all(&source).unwrap();
        std::fs::write(source.join("b.crt"), "B\n").unwrap();
        std::fs::write(source.join("a.crt"), "A").unwrap();
        std::fs::write(source.join("README"), "not a certificate").unwrap();
        write_ca_bundle(&rootfs).unwrap();
        let bundle = std::fs::read_to_string(rootfs.join(CA_BUNDLE)).unwrap();
        std::fs::remove_dir_all(&rootfs).unwrap();
        assert_eq!(bundle, "A\nB\n");
    }

    #[test]
    fn the_tag_is_the_charts_default_image() {
        let chart =
            std::fs::read_to_string(repo_root().join("charts/valkey-operator/Chart.yaml")).unwrap();
        assert!(chart.contains(&format!("appVersion: \"{}\"", version())));
        let values =
            std::fs::read_to_string(repo_root().join("charts/valkey-operator/values.yaml"))
                .unwrap();
        assert!(values.contains(&format!("repository: {IMAGE_REPOSITORY}")));
        assert_eq!(reference(), format!("vko.local/vko:{}", version()));
    }
}
