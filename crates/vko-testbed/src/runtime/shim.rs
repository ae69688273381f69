//! `vko-testbed shim --spec FILE`: becomes one container.
//!
//! In order: join the pod's network namespace; new mount and UTS namespaces; make every mount
//! private (nothing below propagates to the host); an overlay root (lower: the host's `/` without
//! its submounts; upper/work in the scratch dir) with a fresh /proc, /dev (rbind), a fresh read-only
//! /sys, fresh tmpfs /tmp and /run, an /etc/resolv.conf that fails fast (names come from the hosts
//! file); the volumes and the hosts file bind-mounted in; `pivot_root`
//! into it; hostname, working dir, groups, gid, uid; then `execve` of the command with exactly the
//! spec's environment. stdin/stdout/stderr were set up by the runtime (log file, /dev/null).
//!
//! All mounts live only in the container's mount namespace and vanish with it. A failure before
//! `exec` writes one line to stderr (the log) and exits 127 (command not found), 126 (found but
//! cannot be executed) or 1 (anything else), so the kubelet can report it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::unistd::{AccessFlags, Gid, Uid, access, chdir, execve, pivot_root, sethostname};

use super::ContainerSpec;

const EXIT_SETUP_FAILED: i32 = 1;
const EXIT_CANNOT_EXECUTE: i32 = 126;
const EXIT_NOT_FOUND: i32 = 127;
/// What runc uses when the container's env has no PATH.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// See [`write_resolv_conf`].
const RESOLV_CONF: &str = "# vko-testbed: names resolve through /etc/hosts; a miss fails at once\n\
                           nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";
/// Linux's own limit on symlinks followed in one path lookup.
const MAX_SYMLINKS: usize = 40;

/// Why the shim gave up, and with which exit code.
struct Failure {
    exit_code: i32,
    message: String,
}

fn setup_failed(message: impl Into<String>) -> Failure {
    Failure {
        exit_code: EXIT_SETUP_FAILED,
        message: message.into(),
    }
}

/// Entry point of `vko-testbed shim --spec FILE`. Never returns: it either becomes the container
/// (exec) or exits with a code the kubelet reports.
pub fn shim_main(args: &[String]) -> crate::Result<()> {
    let failure = match run(args) {
        Ok(never) => match never {},
        Err(failure) => failure,
    };
    // stderr is the container's log file.
    eprintln!("vko-testbed shim: {}", failure.message);
    std::process::exit(failure.exit_code);
}

fn run(args: &[String]) -> Result<Infallible, Failure> {
    let spec_path = match args {
        [flag, path] if flag == "--spec" => PathBuf::from(path),
        _ => {
            return Err(setup_failed(format!(
                "usage: vko-testbed shim --spec FILE (got {args:?})"
            )));
        }
    };
    let spec_json = std::fs::read(&spec_path)
        .map_err(|error| setup_failed(format!("reading {}: {error}", spec_path.display())))?;
    let spec: ContainerSpec = serde_json::from_slice(&spec_json)
        .map_err(|error| setup_failed(format!("parsing {}: {error}", spec_path.display())))?;
    let in_container = |failure: Failure| Failure {
        exit_code: failure.exit_code,
        message: format!("container {}: {}", spec.name, failure.message),
    };
    enter_namespaces(&spec).map_err(in_container)?;
    build_root(&spec).map_err(in_container)?;
    become_container(&spec).map_err(in_container)
}

fn enter_namespaces(spec: &ContainerSpec) -> Result<(), Failure> {
    let netns_path = Path::new("/run/netns").join(&spec.netns);
    let netns = File::open(&netns_path).map_err(|error| {
        setup_failed(format!(
            "opening network namespace {}: {error}",
            netns_path.display()
        ))
    })?;
    setns(&netns, CloneFlags::CLONE_NEWNET).map_err(|errno| {
        setup_failed(format!("joining network namespace {}: {errno}", spec.netns))
    })?;
    unshare(CloneFlags::CLONE_NEWNS | CloneFlags::CLONE_NEWUTS)
        .map_err(|errno| setup_failed(format!("creating mount and UTS namespaces: {errno}")))?;
    // Before any mount: nothing done below may propagate back to the host.
    mount_or_fail(
        None,
        Path::new("/"),
        None,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None,
    )
}

/// Builds the container's root under `<scratch>/merged` and pivots into it.
fn build_root(spec: &ContainerSpec) -> Result<(), Failure> {
    let upper = spec.scratch_dir.join("upper");
    let work = spec.scratch_dir.join("work");
    let merged = spec.scratch_dir.join("merged");
    // A restarted container starts from a clean filesystem, as in Kubernetes.
    for dir in [&upper, &work] {
        if dir.exists() {
            std::fs::remove_dir_all(dir)
                .map_err(|error| setup_failed(format!("clearing {}: {error}", dir.display())))?;
        }
    }
    for dir in [&upper, &work, &merged] {
        create_dir(dir)?;
    }
    let lower = spec.rootfs.as_deref().unwrap_or(Path::new("/"));
    let overlay_options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    mount_or_fail(
        Some(Path::new("overlay")),
        &merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(&overlay_options),
    )?;

    let no_dev_suid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    let proc_dir = in_root(&merged, "/proc")?;
    create_dir(&proc_dir)?;
    mount_or_fail(
        Some(Path::new("proc")),
        &proc_dir,
        Some("proc"),
        no_dev_suid | MsFlags::MS_NOEXEC,
        None,
    )?;
    let dev_dir = in_root(&merged, "/dev")?;
    create_dir(&dev_dir)?;
    mount_or_fail(
        Some(Path::new("/dev")),
        &dev_dir,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    // A fresh sysfs (rather than a bind of the host's) shows the pod's own network devices.
    let sys_dir = in_root(&merged, "/sys")?;
    create_dir(&sys_dir)?;
    mount_or_fail(
        Some(Path::new("sysfs")),
        &sys_dir,
        Some("sysfs"),
        no_dev_suid | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
        None,
    )?;
    // Hide the host's /tmp and /run (the testbed's own state lives under /run).
    let mut tmpfs_dirs = Vec::new();
    for (path, mode) in [("/tmp", "1777"), ("/run", "755")] {
        let dir = in_root(&merged, path)?;
        create_dir(&dir)?;
        mount_or_fail(
            Some(Path::new("tmpfs")),
            &dir,
            Some("tmpfs"),
            no_dev_suid,
            Some(&format!("mode={mode}")),
        )?;
        tmpfs_dirs.push(dir);
    }

    write_resolv_conf(&merged)?;
    if let Some(working_dir) = &spec.working_dir {
        create_dir(&in_root(&merged, working_dir)?)?;
    }
    for volume in &spec.mounts {
        bind_into_root(&merged, &volume.source, &volume.target, volume.read_only)?;
    }
    bind_into_root(&merged, &spec.hosts_file, "/etc/hosts", false)?;

    if spec.read_only_root {
        // Per-mount read-only flags: the volumes and /etc/hosts mounted on top stay as they are.
        for dir in std::iter::once(&merged).chain(&tmpfs_dirs) {
            remount_read_only(dir)?;
        }
    }

    // pivot_root(".", ".") stacks the old root on top of the new one; detaching it leaves only the
    // container's tree (no put_old directory needed).
    chdir(&merged).map_err(|errno| setup_failed(format!("chdir {}: {errno}", merged.display())))?;
    pivot_root(".", ".").map_err(|errno| setup_failed(format!("pivot_root: {errno}")))?;
    umount2(".", MntFlags::MNT_DETACH)
        .map_err(|errno| setup_failed(format!("detaching the old root: {errno}")))?;
    chdir("/").map_err(|errno| setup_failed(format!("chdir /: {errno}")))?;
    Ok(())
}

/// Pods reach nothing beyond the bridge, so the host's nameserver would make every lookup that
/// misses /etc/hosts hang for the resolver's full timeout (`getent hosts x` took >10 s). Point the
/// resolver at the pod's own loopback, where nothing listens: a miss fails at once, as NXDOMAIN
/// would from cluster DNS. A volume mounted at /etc/resolv.conf still overrides this.
fn write_resolv_conf(root: &Path) -> Result<(), Failure> {
    let etc = root.join("etc");
    create_dir(&etc)?;
    let path = etc.join("resolv.conf");
    // The host's may be a symlink (systemd-resolved): replace the link itself, in the overlay.
    if std::fs::symlink_metadata(&path).is_ok() {
        std::fs::remove_file(&path)
            .map_err(|error| setup_failed(format!("replacing {}: {error}", path.display())))?;
    }
    std::fs::write(&path, RESOLV_CONF)
        .map_err(|error| setup_failed(format!("writing {}: {error}", path.display())))
}

/// Hostname, working dir, groups, gid, uid, signal dispositions, then exec.
fn become_container(spec: &ContainerSpec) -> Result<Infallible, Failure> {
    sethostname(&spec.hostname)
        .map_err(|errno| setup_failed(format!("setting hostname {:?}: {errno}", spec.hostname)))?;
    let working_dir = spec.working_dir.as_deref().unwrap_or("/");
    chdir(working_dir).map_err(|errno| setup_failed(format!("chdir {working_dir}: {errno}")))?;

    let groups: Vec<Gid> = spec
        .supplementary_groups
        .iter()
        .copied()
        .map(Gid::from_raw)
        .collect();
    // Also for root: do not leak the supervisor's supplementary groups into the container.
    nix::unistd::setgroups(&groups).map_err(|errno| {
        setup_failed(format!("setting supplementary groups {groups:?}: {errno}"))
    })?;
    if let Some((uid, gid)) = spec.user {
        nix::unistd::setgid(Gid::from_raw(gid))
            .map_err(|errno| setup_failed(format!("setgid {gid}: {errno}")))?;
        nix::unistd::setuid(Uid::from_raw(uid))
            .map_err(|errno| setup_failed(format!("setuid {uid}: {errno}")))?;
    }
    reset_sigpipe();

    let program = find_program(spec)?;
    let argv = c_strings(spec.argv.iter().map(String::as_str), "argv")?;
    let env = c_strings(
        spec.env.iter().map(|(key, value)| format!("{key}={value}")),
        "env",
    )?;
    let errno = match execve(&program, &argv, &env) {
        Ok(never) => match never {},
        Err(errno) => errno,
    };
    let exit_code = match errno {
        Errno::ENOENT => EXIT_NOT_FOUND,
        _ => EXIT_CANNOT_EXECUTE,
    };
    Err(Failure {
        exit_code,
        message: format!("exec {:?}: {errno}", program),
    })
}

/// The Rust runtime ignores SIGPIPE, and ignored signals survive `exec`: give the container the
/// default disposition every process expects (a shell pipeline relies on it).
#[allow(unsafe_code)]
fn reset_sigpipe() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: installing SIG_DFL runs no Rust code in a signal handler, and this process is
    // single-threaded and about to exec.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

/// Resolves `argv[0]` like `execvp`, but with the container's PATH (the shim's own environment is
/// empty) and after the switch to the container's root and user.
fn find_program(spec: &ContainerSpec) -> Result<CString, Failure> {
    let name = spec
        .argv
        .first()
        .ok_or_else(|| setup_failed("argv is empty"))?;
    let to_c = |path: &Path| {
        CString::new(path.as_os_str().as_bytes())
            .map_err(|_| setup_failed(format!("command {name:?} contains a NUL byte")))
    };
    if name.contains('/') {
        return to_c(Path::new(name));
    }
    let path_var = spec
        .env
        .iter()
        .rev()
        .find_map(|(key, value)| (key == "PATH").then_some(value.as_str()))
        .unwrap_or(DEFAULT_PATH);
    let mut found_not_executable = None;
    for dir in path_var.split(':').filter(|dir| !dir.is_empty()) {
        let candidate = Path::new(dir).join(name);
        let Ok(metadata) = std::fs::metadata(&candidate) else {
            continue;
        };
        if !metadata.is_file() {
            continue;
        }
        if access(&candidate, AccessFlags::X_OK).is_ok() {
            return to_c(&candidate);
        }
        found_not_executable.get_or_insert(candidate);
    }
    match found_not_executable {
        Some(path) => Err(Failure {
            exit_code: EXIT_CANNOT_EXECUTE,
            message: format!("{} is not executable", path.display()),
        }),
        None => Err(Failure {
            exit_code: EXIT_NOT_FOUND,
            message: format!("executable {name:?} not found in PATH {path_var:?}"),
        }),
    }
}

fn c_strings<S: Into<Vec<u8>>>(
    items: impl Iterator<Item = S>,
    what: &str,
) -> Result<Vec<CString>, Failure> {
    items
        .map(|item| {
            CString::new(item).map_err(|_| setup_failed(format!("{what} contains a NUL byte")))
        })
        .collect()
}

/// Bind-mounts a host path at `target` inside the root, creating the mount point (a directory or
/// an empty file, like the source) in the overlay when missing.
fn bind_into_root(
    root: &Path,
    source: &Path,
    target: &str,
    read_only: bool,
) -> Result<(), Failure> {
    let metadata = std::fs::metadata(source)
        .map_err(|error| setup_failed(format!("volume source {}: {error}", source.display())))?;
    let mount_point = in_root(root, target)?;
    if metadata.is_dir() {
        create_dir(&mount_point)?;
    } else {
        if let Some(parent) = mount_point.parent() {
            create_dir(parent)?;
        }
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&mount_point)
            .map_err(|error| setup_failed(format!("creating mount point {target}: {error}")))?;
    }
    mount_or_fail(
        Some(source),
        &mount_point,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    if read_only {
        remount_read_only(&mount_point)?;
    }
    Ok(())
}

fn remount_read_only(path: &Path) -> Result<(), Failure> {
    mount_or_fail(
        None,
        path,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None,
    )
}

fn mount_or_fail(
    source: Option<&Path>,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), Failure> {
    mount(source, target, fstype, flags, data).map_err(|errno| {
        setup_failed(format!(
            "mount {} on {} (type {}, {flags:?}, {}): {errno}",
            source.map_or("none".into(), |source| source.display().to_string()),
            target.display(),
            fstype.unwrap_or("bind"),
            data.unwrap_or("")
        ))
    })
}

fn create_dir(dir: &Path) -> Result<(), Failure> {
    std::fs::create_dir_all(dir)
        .map_err(|error| setup_failed(format!("creating {}: {error}", dir.display())))
}

/// A container path must be absolute (Kubernetes requires that of mount paths and working dirs).
pub(super) fn check_container_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!("container path {path:?} is not absolute"));
    }
    Ok(())
}

fn in_root(root: &Path, path: &str) -> Result<PathBuf, Failure> {
    check_container_path(path).map_err(setup_failed)?;
    resolve_in_root(root, Path::new(path)).map_err(setup_failed)
}

/// Maps a container path to the host path under `root`, following symlinks as the container would
/// see them: an absolute link (e.g. Debian's `/var/run -> /run`) or `..` stays inside `root`
/// instead of escaping to the host. Missing components are taken literally.
fn resolve_in_root(root: &Path, path: &Path) -> Result<PathBuf, String> {
    fn parts(path: &Path) -> impl Iterator<Item = OsString> + '_ {
        path.components().filter_map(|component| match component {
            Component::Normal(name) => Some(name.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
    }
    let mut resolved = PathBuf::new();
    let mut pending: VecDeque<OsString> = parts(path).collect();
    let mut links_followed = 0;
    while let Some(part) = pending.pop_front() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let candidate = resolved.join(&part);
        let host_path = root.join(&candidate);
        let is_symlink = std::fs::symlink_metadata(&host_path)
            .map(|metadata| metadata.file_type().is_symlink())
            .unwrap_or(false);
        if !is_symlink {
            resolved = candidate;
            continue;
        }
        links_followed += 1;
        if links_followed > MAX_SYMLINKS {
            return Err(format!("too many symlinks in {}", path.display()));
        }
        let link = std::fs::read_link(&host_path)
            .map_err(|error| format!("reading link {}: {error}", host_path.display()))?;
        if link.is_absolute() {
            resolved = PathBuf::new();
        }
        let mut expanded: VecDeque<OsString> = parts(&link).collect();
        expanded.extend(pending);
        pending = expanded;
    }
    Ok(root.join(resolved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolution_keeps_absolute_links_and_dot_dot_inside_the_root() {
        let root = std::env::temp_dir().join(format!("vko-shim-resolve-{}", std::process::id()));
        std::fs::create_dir_all(root.join("run")).unwrap();
        std::fs::create_dir_all(root.join("var")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var/run")).unwrap();
        std::os::unix::fs::symlink("../../../..", root.join("var/up")).unwrap();
        let result = std::panic::catch_unwind(|| {
            assert_eq!(
                resolve_in_root(&root, Path::new("/var/run/app/sock")).unwrap(),
                root.join("run/app/sock")
            );
            assert_eq!(
                resolve_in_root(&root, Path::new("/var/up/etc/hosts")).unwrap(),
                root.join("etc/hosts")
            );
            assert_eq!(
                resolve_in_root(&root, Path::new("/../../data")).unwrap(),
                root.join("data")
            );
        });
        std::fs::remove_dir_all(&root).unwrap();
        result.unwrap();
    }

    #[test]
    fn relative_container_paths_are_rejected() {
        assert!(check_container_path("/data").is_ok());
        assert!(check_container_path("data").is_err());
    }
}
