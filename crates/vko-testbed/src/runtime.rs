//! Containers as processes. A container is `vko-testbed shim --spec FILE`, which enters the pod's
//! network namespace, builds a private mount and UTS namespace with an overlay root over the host's
//! `/` (or the image's own root filesystem), and then `exec`s the container's command: the pid of the spawned shim IS the container's pid.
//! See [`shim`] for what happens inside. [`exec`] runs a command in a running container's namespaces.

mod shim;

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use crate::{Error, Result};

pub use shim::shim_main;

/// Name of the spec file the runtime writes into the container's scratch directory.
const SPEC_FILE: &str = "spec.json";
/// nsenter is part of util-linux, present on every machine the testbed runs on.
const NSENTER: &str = "nsenter";

/// A host path bind-mounted into the container.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct BindMount {
    /// Host path (file or directory).
    pub source: PathBuf,
    /// Absolute path inside the container; created in the overlay when missing.
    pub target: String,
    pub read_only: bool,
}

/// Everything the shim needs to start one container.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ContainerSpec {
    /// For messages.
    pub name: String,
    /// `argv[0]` is resolved via the `PATH` of [`ContainerSpec::env`] inside the container.
    pub argv: Vec<String>,
    /// The complete environment: nothing is inherited from the supervisor.
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// Network namespace to join (`/run/netns/<netns>`).
    pub netns: String,
    /// UTS hostname (the pod name).
    pub hostname: String,
    /// Bind-mounted at `/etc/hosts`; edit it in place (same inode) to update the container's view.
    pub hosts_file: PathBuf,
    /// Volumes at their mount paths.
    pub mounts: Vec<BindMount>,
    /// Per-container directory owned by the runtime: the overlay's upper, work and merged dirs live
    /// here. Whoever owns the container deletes it after the container ended.
    pub scratch_dir: PathBuf,
    /// stdout and stderr are appended here.
    pub log_path: PathBuf,
    /// uid and gid to drop to (None: stay root).
    pub user: Option<(u32, u32)>,
    pub supplementary_groups: Vec<u32>,
    /// Mount the overlay root (and its `/tmp`, `/run`) read-only; volumes stay as given.
    pub read_only_root: bool,
    /// The image's root filesystem, the overlay's lower layer; `None`: the host's `/`.
    #[serde(default)]
    pub rootfs: Option<PathBuf>,
}

/// How a container (or an exec'd command) ended, Kubernetes-style.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitStatusInfo {
    /// The exit code, or 128 + the signal number when killed by a signal.
    pub exit_code: i32,
    pub signal: Option<i32>,
}

impl From<ExitStatus> for ExitStatusInfo {
    fn from(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => ExitStatusInfo {
                exit_code: code,
                signal: None,
            },
            (None, Some(signal)) => ExitStatusInfo {
                exit_code: 128 + signal,
                signal: Some(signal),
            },
            // Neither code nor signal only happens for stopped/continued states, which wait() does
            // not report; treat it as a generic failure rather than success.
            (None, None) => ExitStatusInfo {
                exit_code: 1,
                signal: None,
            },
        }
    }
}

/// What an [`exec`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecOutput {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// A running (or ended) container.
pub struct Container {
    name: String,
    pid: u32,
    child: Child,
    exited: Option<ExitStatusInfo>,
}

impl Container {
    /// Writes the spec into `scratch_dir` and starts `shim_exe shim --spec <file>`, with stdout and
    /// stderr appended to the log file (so even a shim failure before its own setup is logged) and
    /// stdin from /dev/null, in its own process group (a signal to the supervisor's group does not
    /// reach containers). Needs a tokio runtime. Dropping a `Container` kills it (SIGKILL).
    pub fn spawn(shim_exe: &Path, spec: &ContainerSpec) -> Result<Container> {
        validate_spec(spec)?;
        std::fs::create_dir_all(&spec.scratch_dir).map_err(Error::io(format!(
            "creating {}",
            spec.scratch_dir.display()
        )))?;
        let spec_path = spec.scratch_dir.join(SPEC_FILE);
        let spec_json = serde_json::to_vec(spec)
            .map_err(|error| Error::Other(format!("serializing container spec: {error}")))?;
        // The spec holds the container's environment (secrets): readable by root only.
        let mut spec_file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&spec_path)
            .map_err(Error::io(format!("writing {}", spec_path.display())))?;
        spec_file
            .write_all(&spec_json)
            .map_err(Error::io(format!("writing {}", spec_path.display())))?;
        drop(spec_file);

        if let Some(parent) = spec.log_path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("creating {}", parent.display())))?;
        }
        let log = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&spec.log_path)
            .map_err(Error::io(format!("opening {}", spec.log_path.display())))?;
        let log_for_stderr = log
            .try_clone()
            .map_err(Error::io(format!("opening {}", spec.log_path.display())))?;

        let child = Command::new(shim_exe)
            .arg("shim")
            .arg("--spec")
            .arg(&spec_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_for_stderr))
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(Error::io(format!(
                "starting container {} ({})",
                spec.name,
                shim_exe.display()
            )))?;
        let pid = child.id().ok_or_else(|| {
            Error::Other(format!(
                "container {} exited before it had a pid",
                spec.name
            ))
        })?;
        Ok(Container {
            name: spec.name.clone(),
            pid,
            child,
            exited: None,
        })
    }

    /// Pid of the container's main process (in the host's pid namespace).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal` to the container's main process. A container that already ended is left alone
    /// (its pid may belong to someone else by now).
    pub fn signal(&self, signal: Signal) -> Result<()> {
        // tokio forgets the pid once it has reaped the child.
        if self.exited.is_some() || self.child.id().is_none() {
            return Ok(());
        }
        match kill(pid_of(self.pid)?, signal) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(errno) => Err(Error::Io {
                what: format!(
                    "sending {signal} to container {} (pid {})",
                    self.name, self.pid
                ),
                source: errno.into(),
            }),
        }
    }

    /// Waits until the container ends. Cancel-safe: dropping the future leaves the container as it
    /// was, and a later call still gets the status.
    pub async fn wait(&mut self) -> Result<ExitStatusInfo> {
        if let Some(status) = self.exited {
            return Ok(status);
        }
        let status = self.child.wait().await.map_err(Error::io(format!(
            "waiting for container {} (pid {})",
            self.name, self.pid
        )))?;
        let info = ExitStatusInfo::from(status);
        self.exited = Some(info);
        Ok(info)
    }

    /// The exit status if the container has ended, without blocking.
    pub fn try_exit(&mut self) -> Result<Option<ExitStatusInfo>> {
        if let Some(status) = self.exited {
            return Ok(Some(status));
        }
        let status = self.child.try_wait().map_err(Error::io(format!(
            "checking container {} (pid {})",
            self.name, self.pid
        )))?;
        let info = status.map(ExitStatusInfo::from);
        self.exited = info;
        Ok(info)
    }
}

/// Runs `argv` inside the namespaces (mount, net, uts; same root, cwd and uid/gid) of the running
/// process `pid`, with exactly `env`, bounded by `timeout`: on expiry the command (and its process
/// group) is killed and an error is returned. For exec probes and `kubectl exec`.
pub async fn exec(
    pid: u32,
    argv: &[String],
    env: &[(String, String)],
    timeout: Duration,
) -> Result<ExecOutput> {
    let mut command = exec_command(pid, argv, env)?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(Error::io(format!("starting {NSENTER} into pid {pid}")))?;
    let group = child.id().map(pid_of).transpose()?;
    let mut stdout_pipe = child.stdout.take();
    let mut stderr_pipe = child.stderr.take();
    let run = async {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let read_stdout = async {
            if let Some(pipe) = stdout_pipe.as_mut() {
                pipe.read_to_end(&mut stdout).await?;
            }
            Ok::<(), std::io::Error>(())
        };
        let read_stderr = async {
            if let Some(pipe) = stderr_pipe.as_mut() {
                pipe.read_to_end(&mut stderr).await?;
            }
            Ok::<(), std::io::Error>(())
        };
        let (status, out, err) = tokio::join!(child.wait(), read_stdout, read_stderr);
        out?;
        err?;
        Ok::<_, std::io::Error>((status?, stdout, stderr))
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(Ok((status, stdout, stderr))) => Ok(ExecOutput {
            exit_code: ExitStatusInfo::from(status).exit_code,
            stdout,
            stderr,
        }),
        Ok(Err(error)) => {
            kill_group(group);
            Err(Error::io(format!("running {argv:?} in pid {pid}"))(error))
        }
        Err(_) => {
            // The whole group: a shell's children would otherwise outlive it.
            kill_group(group);
            let _ = child.wait().await;
            Err(Error::Timeout {
                what: format!("{argv:?} in pid {pid}"),
                seconds: timeout.as_secs(),
            })
        }
    }
}

/// Like [`exec`], with piped stdin/stdout/stderr handed back (for `kubectl exec -i`). The child is
/// killed when dropped.
pub fn exec_interactive(pid: u32, argv: &[String], env: &[(String, String)]) -> Result<Child> {
    let mut command = exec_command(pid, argv, env)?;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
        .spawn()
        .map_err(Error::io(format!("starting {NSENTER} into pid {pid}")))
}

/// `nsenter --target PID --mount --net --uts --root --wd [-S uid -G gid] -- argv…` with exactly
/// `env`. nsenter resolves `argv[0]` with that env's PATH after entering the container's root.
fn exec_command(pid: u32, argv: &[String], env: &[(String, String)]) -> Result<Command> {
    if argv.is_empty() {
        return Err(Error::Invalid {
            what: "exec command".into(),
            detail: "argv is empty".into(),
        });
    }
    let (uid, gid) = process_ids(pid)?;
    let mut command = Command::new(NSENTER);
    command
        .arg("--target")
        .arg(pid.to_string())
        .args(["--mount", "--net", "--uts", "--root", "--wd"]);
    // Run as the container's user, as a kubelet's exec does; root stays root with its groups.
    if uid != 0 || gid != 0 {
        command
            .arg("--setuid")
            .arg(uid.to_string())
            .arg("--setgid")
            .arg(gid.to_string());
    }
    command
        .arg("--")
        .args(argv)
        .env_clear()
        .envs(env.iter().map(|(key, value)| (key, value)))
        .process_group(0)
        .kill_on_drop(true);
    Ok(command)
}

/// Real uid and gid of a running process, from /proc.
fn process_ids(pid: u32) -> Result<(u32, u32)> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).map_err(Error::io(format!(
        "reading {path} (is the container running?)"
    )))?;
    let field = |name: &str| -> Result<u32> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| Error::Other(format!("no {name} line in {path}")))
    };
    Ok((field("Uid:")?, field("Gid:")?))
}

fn kill_group(group: Option<Pid>) {
    if let Some(group) = group {
        // Already gone is fine.
        let _ = killpg(group, Signal::SIGKILL);
    }
}

fn pid_of(pid: u32) -> Result<Pid> {
    i32::try_from(pid)
        .map(Pid::from_raw)
        .map_err(|_| Error::Invalid {
            what: "pid".into(),
            detail: pid.to_string(),
        })
}

/// Catches what would otherwise only fail inside the shim, where the message ends up in a log.
fn validate_spec(spec: &ContainerSpec) -> Result<()> {
    let invalid = |detail: String| Error::Invalid {
        what: format!("container spec {}", spec.name),
        detail,
    };
    if spec.argv.is_empty() {
        return Err(invalid("argv is empty".into()));
    }
    if spec.netns.is_empty() || spec.netns.contains('/') {
        return Err(invalid(format!(
            "bad network namespace name {:?}",
            spec.netns
        )));
    }
    // The overlay's mount options are comma/colon separated.
    let scratch = spec.scratch_dir.to_string_lossy();
    if !spec.scratch_dir.is_absolute() || scratch.contains([',', ':']) {
        return Err(invalid(format!(
            "scratch_dir {scratch:?} must be absolute and free of ',' and ':'"
        )));
    }
    if let Some(rootfs) = &spec.rootfs {
        let text = rootfs.to_string_lossy();
        if !rootfs.is_absolute() || text.contains([',', ':']) {
            return Err(invalid(format!(
                "rootfs {text:?} must be absolute and free of ',' and ':'"
            )));
        }
    }
    for mount in &spec.mounts {
        shim::check_container_path(&mount.target).map_err(invalid)?;
    }
    if let Some(dir) = &spec.working_dir {
        shim::check_container_path(dir).map_err(invalid)?;
    }
    Ok(())
}
