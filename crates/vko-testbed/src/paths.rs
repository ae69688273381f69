//! Where a testbed keeps its state, where the Go-built binaries are cached, and the root check.
//!
//! One layout for every part (supervisor, kubelet, xtask, tests) so that `cargo xtask testbed down`
//! knows exactly what to sweep.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// The Kubernetes release the testbed runs (matches k8s-openapi's `v1_34` and `xtask/k8s/go.mod`).
pub const KUBERNETES_VERSION: &str = "v1.34.4";
/// The etcd server release pinned in `xtask/k8s/go.mod`.
pub const ETCD_VERSION: &str = "v3.6.4";
/// The default state directory of a running testbed.
pub const DEFAULT_STATE_DIR: &str = "/run/vko-testbed";
/// Overrides the state directory.
pub const STATE_DIR_ENV: &str = "VKO_TESTBED_DIR";
/// Overrides the directory holding the Go-built binaries (also read by tests to find `kubectl`).
pub const BIN_DIR_ENV: &str = "VKO_TESTBED_BIN_DIR";
/// The Go-built binaries, as named in the cache directory.
pub const GO_BINARIES: [&str; 6] = [
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kube-proxy",
    "etcd",
];
/// Name of the stamp file written last into the binary cache; its presence means "complete".
pub const VERSION_STAMP: &str = "VERSION";
/// The bridge every pod hangs off; also the address the API server binds.
pub const BRIDGE_NAME: &str = "vkotb0";
/// Prefix of every pod network namespace (`vkotb-<12 hex digits of the pod UID>`).
pub const NETNS_PREFIX: &str = "vkotb-";

/// The layout of one testbed's state directory.
#[derive(Debug, Clone)]
pub struct Paths {
    state_dir: PathBuf,
}

impl Paths {
    /// The state directory from `VKO_TESTBED_DIR`, else `/run/vko-testbed`.
    pub fn from_env() -> Paths {
        match std::env::var_os(STATE_DIR_ENV) {
            Some(dir) if !dir.is_empty() => Paths::new(PathBuf::from(dir)),
            _ => Paths::new(PathBuf::from(DEFAULT_STATE_DIR)),
        }
    }

    pub fn new(state_dir: impl Into<PathBuf>) -> Paths {
        Paths {
            state_dir: state_dir.into(),
        }
    }

    pub fn state_dir(&self) -> &Path {
        &self.state_dir
    }
    /// CA, serving and client certificates, the service-account key pair.
    pub fn pki_dir(&self) -> PathBuf {
        self.state_dir.join("pki")
    }
    pub fn etcd_data_dir(&self) -> PathBuf {
        self.state_dir.join("etcd")
    }
    /// One log file per control-plane component.
    pub fn logs_dir(&self) -> PathBuf {
        self.state_dir.join("logs")
    }
    pub fn component_log(&self, component: &str) -> PathBuf {
        self.logs_dir().join(format!("{component}.log"))
    }
    /// Kubeconfigs of the admin and of each control-plane component.
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.state_dir.join(format!("{user}.kubeconfig"))
    }
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.kubeconfig("admin")
    }
    /// Per-pod directories (container specs, logs, volumes, hosts files).
    pub fn pods_dir(&self) -> PathBuf {
        self.state_dir.join("pods")
    }
    /// Host directories backing provisioned PersistentVolumes.
    pub fn pv_dir(&self) -> PathBuf {
        self.state_dir.join("pv")
    }
    pub fn supervisor_pid(&self) -> PathBuf {
        self.state_dir.join("supervisor.pid")
    }
    /// Written by the supervisor once the cluster is usable; removed at teardown.
    pub fn ready_marker(&self) -> PathBuf {
        self.state_dir.join("ready")
    }
    pub fn supervisor_log(&self) -> PathBuf {
        self.state_dir.join("supervisor.log")
    }
}

/// The directory with the Go-built binaries: `VKO_TESTBED_BIN_DIR`, else
/// `~/.cache/vko/k8s-<version>/`.
pub fn bin_dir() -> PathBuf {
    match std::env::var_os(BIN_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => default_bin_dir(),
    }
}

/// `~/.cache/vko/k8s-<version>/` (or under `$XDG_CACHE_HOME`), ignoring `VKO_TESTBED_BIN_DIR`.
pub fn default_bin_dir() -> PathBuf {
    cache_root().join(format!("k8s-{KUBERNETES_VERSION}"))
}

/// `~/.cache/vko`.
pub fn cache_root() -> PathBuf {
    let cache = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => {
            let home = std::env::var_os("HOME").filter(|home| !home.is_empty());
            PathBuf::from(home.unwrap_or_else(|| "/root".into())).join(".cache")
        }
    };
    cache.join("vko")
}

/// Content of the version stamp in a complete binary cache.
pub fn version_stamp() -> String {
    format!("kubernetes {KUBERNETES_VERSION}\netcd {ETCD_VERSION}\n")
}

/// Whether `dir` holds every Go binary and the matching version stamp.
pub fn bin_dir_is_complete(dir: &Path) -> bool {
    let stamp_matches = std::fs::read_to_string(dir.join(VERSION_STAMP))
        .map(|stamp| stamp == version_stamp())
        .unwrap_or(false);
    stamp_matches && GO_BINARIES.iter().all(|binary| dir.join(binary).is_file())
}

/// Fails with a clear message unless the effective user is root.
pub fn require_root() -> Result<()> {
    if nix::unistd::geteuid().is_root() {
        Ok(())
    } else {
        Err(Error::NotRoot)
    }
}

/// Mount points at or below `dir` in this process's mount namespace, deepest first (the order to
/// unmount them in).
pub fn mounts_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(Error::io("reading /proc/self/mountinfo"))?;
    let mut mounts: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape_mount_path(field)))
        .filter(|mount_point| mount_point.starts_with(dir))
        .collect();
    mounts.sort_by_key(|mount_point| std::cmp::Reverse(mount_point.components().count()));
    mounts.dedup();
    Ok(mounts)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_path(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let octal = bytes.get(index + 1..index + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[index], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                index += 4;
            }
            (byte, _) => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts everything below `dir` (lazily, so a busy mount cannot block teardown), then deletes it.
/// Refuses to delete while anything is still mounted below it: a recursive delete would otherwise
/// descend into a bind mount and destroy whatever it exposes.
pub fn remove_state_dir(dir: &Path) -> Result<()> {
    for mount_point in mounts_under(dir)? {
        // Already gone (say, unmounted together with its parent) is fine.
        let _ = nix::mount::umount2(&mount_point, nix::mount::MntFlags::MNT_DETACH);
    }
    let remaining = mounts_under(dir)?;
    if !remaining.is_empty() {
        return Err(Error::Other(format!(
            "not deleting {}: still mounted below it: {}",
            dir.display(),
            remaining
                .iter()
                .map(|mount| mount.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    match std::fs::remove_dir_all(dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(Error::Io {
            what: format!("deleting {}", dir.display()),
            source: error,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_rooted_in_the_state_dir() {
        let paths = Paths::new("/tmp/tb");
        assert_eq!(
            paths.admin_kubeconfig(),
            PathBuf::from("/tmp/tb/admin.kubeconfig")
        );
        assert_eq!(
            paths.component_log("etcd"),
            PathBuf::from("/tmp/tb/logs/etcd.log")
        );
        assert_eq!(paths.ready_marker(), PathBuf::from("/tmp/tb/ready"));
        assert_eq!(
            paths.supervisor_pid(),
            PathBuf::from("/tmp/tb/supervisor.pid")
        );
    }

    #[test]
    fn bin_dir_is_complete_only_with_every_binary_and_the_stamp() {
        let dir = std::env::temp_dir().join(format!("vko-paths-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for binary in GO_BINARIES {
            std::fs::write(dir.join(binary), b"").unwrap();
        }
        assert!(!bin_dir_is_complete(&dir), "no stamp yet");
        std::fs::write(dir.join(VERSION_STAMP), "kubernetes v0.0.0\n").unwrap();
        assert!(!bin_dir_is_complete(&dir), "stamp of another version");
        std::fs::write(dir.join(VERSION_STAMP), version_stamp()).unwrap();
        assert!(bin_dir_is_complete(&dir));
        std::fs::remove_file(dir.join("etcd")).unwrap();
        assert!(!bin_dir_is_complete(&dir), "a binary is missing");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path("/run/a\\040b"), "/run/a b");
        assert_eq!(unescape_mount_path("/plain"), "/plain");
        assert_eq!(unescape_mount_path("/end\\"), "/end\\");
    }

    #[test]
    fn the_root_mount_is_found_under_root_and_nothing_under_a_fresh_dir() {
        assert!(
            mounts_under(Path::new("/"))
                .unwrap()
                .contains(&PathBuf::from("/"))
        );
        let dir = std::env::temp_dir().join(format!("vko-paths-mounts-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        assert!(mounts_under(&dir).unwrap().is_empty());
        remove_state_dir(&dir).unwrap();
        assert!(!dir.exists());
        remove_state_dir(&dir).unwrap();
    }
}
