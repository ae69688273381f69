//! The control plane from real binaries: building them from `xtask/k8s` (Go), starting etcd,
//! kube-apiserver, kube-controller-manager and kube-scheduler with the testbed's PKI, then (once the
//! Nodes exist) kube-proxy, waiting until they serve, stopping them; and `vko-testbed serve`, the
//! supervisor that runs a whole testbed.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use crate::paths::{self, Paths};
use crate::pki::{APISERVER_BRIDGE_IP, E2E_OPERATOR_STEM, E2E_OPERATOR_USER, Pki};
use crate::{Error, Result, control, kube_proxy, kube_router, net};

/// etcd's client and peer ports (off the defaults so a host etcd does not collide).
pub const ETCD_CLIENT_PORT: u16 = 12379;
pub const ETCD_PEER_PORT: u16 = 12380;
pub const APISERVER_PORT: u16 = 6443;
const CONTROLLER_MANAGER_PORT: u16 = 10257;
const SCHEDULER_PORT: u16 = 10259;
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// The pod network (kube-proxy's `clusterCIDR`: traffic from outside it to a Service is masqueraded).
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Short, so node-loss tests see a NotReady node within half a minute.
pub const NODE_MONITOR_GRACE_PERIOD: &str = "20s";

/// How long a stopping component gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
const LOG_TAIL_LINES: usize = 30;

/// The API server's URL, as every client (host, pods) sees it.
pub fn apiserver_url() -> String {
    format!("https://{APISERVER_BRIDGE_IP}:{APISERVER_PORT}")
}

/// The API server's audit policy: every request at level Metadata (who, verb, resource, response
/// code; no bodies), without the RequestReceived stage (each request would be logged once more for
/// nothing). The least-privilege check reads which requests the operator made from it.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
";

/// The audit log's size before the API server would rotate it, in MB: far above a full suite's
/// (over 100 MB), so it never does.
const AUDIT_LOG_MAX_MB: u32 = 1_000_000;

/// The API server's audit log (JSON lines), thrown away with the testbed.
pub fn audit_log(paths: &Paths) -> PathBuf {
    paths.logs_dir().join("audit.log")
}

/// Parts the API server rotated away from [`audit_log`] (`audit-<time>.log` beside it): none while
/// `--audit-log-maxsize` is far above what a suite writes; any would leave a reader of
/// [`audit_log`] with only the tail.
pub fn rotated_audit_logs(paths: &Paths) -> std::io::Result<Vec<String>> {
    let mut rotated: Vec<String> = std::fs::read_dir(paths.logs_dir())?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("audit-") && name.ends_with(".log"))
        .collect();
    rotated.sort();
    Ok(rotated)
}

/// The testbed's record of every kube-apiserver start: one `<began> <ready>` line each, in the audit
/// log's timestamp format (see [`crate::rbac_audit::read_apiserver_starts`]). Until it is ready, the
/// API server's RBAC authorizer may refuse what the Roles grant; the RBAC check needs to know when.
pub fn apiserver_starts(paths: &Paths) -> PathBuf {
    paths.logs_dir().join("kube-apiserver-starts")
}

/// `at` as the audit log writes times: RFC 3339, UTC, microseconds (so they compare as text).
fn audit_timestamp(at: time::OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second(),
        at.microsecond()
    )
}

/// Appends one start (began now-ish, ready now) to [`apiserver_starts`].
fn record_apiserver_start(paths: &Paths, began: time::OffsetDateTime) -> Result<()> {
    use std::io::Write;
    let path = apiserver_starts(paths);
    let line = format!(
        "{} {}\n",
        audit_timestamp(began),
        audit_timestamp(time::OffsetDateTime::now_utc())
    );
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(line.as_bytes()))
        .map_err(Error::io(format!("writing {}", path.display())))
}

/// The audit policy file the API server reads ([`AUDIT_POLICY`]).
pub fn audit_policy(paths: &Paths) -> PathBuf {
    paths.state_dir().join("audit-policy.yaml")
}

/// The kubeconfig of the operator under test ([`E2E_OPERATOR_USER`], no groups, only what RBAC
/// grants): `<state dir>/operator.kubeconfig`.
pub fn operator_kubeconfig(paths: &Paths) -> PathBuf {
    paths.kubeconfig(E2E_OPERATOR_STEM)
}

// ---------------------------------------------------------------------------------------------
// Building the Go binaries
// ---------------------------------------------------------------------------------------------

/// What [`build_binaries`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildOutcome {
    /// The cache was complete; nothing was built.
    AlreadyBuilt,
    Built {
        elapsed: Duration,
    },
}

/// Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd from the wrapper
/// module in `go_module_dir` into `dest` (skipped when `dest` is already complete). Builds into a
/// sibling temp directory and renames it into place, so an interrupted build never leaves a
/// half-filled cache. `extra_env` is passed to `go` (for example an empty `GOCACHE` for a cold build).
pub fn build_binaries(
    go_module_dir: &Path,
    dest: &Path,
    extra_env: &[(String, String)],
) -> Result<BuildOutcome> {
    if paths::bin_dir_is_complete(dest) {
        return Ok(BuildOutcome::AlreadyBuilt);
    }
    let parent = dest.parent().ok_or_else(|| Error::Invalid {
        what: "binary cache directory".into(),
        detail: format!("{} has no parent", dest.display()),
    })?;
    std::fs::create_dir_all(parent).map_err(Error::io(format!("creating {}", parent.display())))?;
    let dest_name = dest
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = parent.join(format!(".{dest_name}.building-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(Error::io(format!("creating {}", staging.display())))?;

    let result = run_go_build(go_module_dir, &staging, extra_env).and_then(|elapsed| {
        std::fs::rename(staging.join("server"), staging.join("etcd"))
            .map_err(Error::io("renaming etcd's `server` binary to `etcd`"))?;
        std::fs::write(staging.join(paths::VERSION_STAMP), paths::version_stamp())
            .map_err(Error::io("writing the version stamp"))?;
        if dest.exists() {
            std::fs::remove_dir_all(dest)
                .map_err(Error::io(format!("replacing {}", dest.display())))?;
        }
        std::fs::rename(&staging, dest).map_err(Error::io(format!(
            "moving the binaries to {}",
            dest.display()
        )))?;
        Ok(BuildOutcome::Built { elapsed })
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// The `-X` version stamps Kubernetes' own build sets (`kubectl version` and `/version` report them).
fn version_ldflags() -> String {
    let version = paths::KUBERNETES_VERSION;
    let (major, minor) = {
        let mut parts = version.trim_start_matches('v').split('.');
        (
            parts.next().unwrap_or("1").to_string(),
            parts.next().unwrap_or("0").to_string(),
        )
    };
    [
        format!("-X k8s.io/component-base/version.gitVersion={version}"),
        format!("-X k8s.io/component-base/version.gitMajor={major}"),
        format!("-X k8s.io/component-base/version.gitMinor={minor}"),
        format!("-X k8s.io/client-go/pkg/version.gitVersion={version}"),
        "-X k8s.io/component-base/version.gitTreeState=clean".to_string(),
    ]
    .join(" ")
}

fn run_go_build(
    go_module_dir: &Path,
    out_dir: &Path,
    extra_env: &[(String, String)],
) -> Result<Duration> {
    let ldflags = format!("-s -w {}", version_ldflags());
    let mut out = out_dir.as_os_str().to_os_string();
    out.push("/");
    let packages = [
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
        "k8s.io/kubernetes/cmd/kubectl",
        "k8s.io/kubernetes/cmd/kube-proxy",
        "go.etcd.io/etcd/server/v3",
    ];
    let mut command = Command::new("go");
    command
        .current_dir(go_module_dir)
        .args(["build", "-trimpath", "-ldflags", &ldflags, "-o"])
        .arg(&out)
        .args(packages)
        .envs(extra_env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null());
    eprintln!(
        "building Kubernetes {} and etcd {} from {} (a cold build takes many minutes on 2 cores)",
        paths::KUBERNETES_VERSION,
        paths::ETCD_VERSION,
        go_module_dir.display()
    );
    let started = Instant::now();
    let mut child = command.spawn().map_err(|error| Error::Command {
        command: "go build".into(),
        detail: format!("could not start `go` (is Go installed and on PATH?): {error}"),
    })?;
    let mut last_heartbeat = Instant::now();
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(Error::io("waiting for go build"))?
        {
            break status;
        }
        if last_heartbeat.elapsed() >= Duration::from_secs(30) {
            eprintln!(
                "  ... go build still running ({} elapsed)",
                format_duration(started.elapsed())
            );
            last_heartbeat = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    if !status.success() {
        return Err(Error::Command {
            command: "go build".into(),
            detail: format!("{status} (its output is above)"),
        });
    }
    let elapsed = started.elapsed();
    eprintln!("built the Go binaries in {}", format_duration(elapsed));
    Ok(elapsed)
}

/// `1m05s`-style durations for progress lines and reports.
pub fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs_f64();
    if seconds < 60.0 {
        format!("{seconds:.1}s")
    } else {
        let whole = duration.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes that die with the supervisor
// ---------------------------------------------------------------------------------------------

/// Makes the child get SIGKILL when the thread that spawned it exits (`PR_SET_PDEATHSIG`), so a
/// SIGKILLed supervisor leaves no orphans. The signal follows the spawning THREAD, not the process:
/// spawn from a thread that lives as long as the child should (the supervisor's main thread, a tokio
/// worker thread), never from a `spawn_blocking` thread, which exits when idle.
#[allow(unsafe_code)]
pub fn die_with_parent(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec and only makes async-signal-safe
    // system calls (prctl, getppid); it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)
                .map_err(|errno| std::io::Error::from_raw_os_error(errno as i32))?;
            // The parent may have died before prctl took effect.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// One running control-plane component.
struct Component {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Component {
    fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Component> {
        let log_file = std::fs::File::create(&log)
            .map_err(Error::io(format!("creating {}", log.display())))?;
        let stderr = log_file
            .try_clone()
            .map_err(Error::io(format!("opening {}", log.display())))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(stderr);
        // Own process group: a Ctrl-C on the terminal reaches only the supervisor, which then stops
        // the components in order.
        command.process_group(0);
        die_with_parent(&mut command);
        let child = command.spawn().map_err(|error| Error::Command {
            command: program.display().to_string(),
            detail: format!("could not start {name}: {error}"),
        })?;
        tracing::info!(component = name, pid = child.id(), log = %log.display(), "started");
        Ok(Component { name, child, log })
    }

    /// Fails (with the log's tail) when the process has exited.
    fn check_running(&mut self) -> Result<()> {
        match self
            .child
            .try_wait()
            .map_err(Error::io(format!("waiting for {}", self.name)))?
        {
            None => Ok(()),
            Some(status) => Err(Error::Command {
                command: self.name.to_string(),
                detail: format!(
                    "exited during startup ({status}); its log is {}:\n{}",
                    self.log.display(),
                    log_tail(&self.log, LOG_TAIL_LINES)
                ),
            }),
        }
    }

    /// SIGTERM, then SIGKILL after [`STOP_GRACE`]; reaps the process.
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                tracing::info!(component = self.name, "stopped");
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        tracing::warn!(
            component = self.name,
            "did not stop within {STOP_GRACE:?} of SIGTERM; killing it"
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The last `lines` lines of a log file (or a note that it cannot be read).
pub fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::File::open(path) {
        Ok(mut file) => file_tail(&mut file, lines),
        Err(error) => format!("(cannot read {}: {error})", path.display()),
    }
}

/// The last `lines` lines of an open file. Taking the open file lets a caller read a log that its
/// writer may already have deleted (xtask keeps the supervisor's log open for that).
pub fn file_tail(file: &mut std::fs::File, lines: usize) -> String {
    // Only the end matters; component logs can be large.
    let length = file.metadata().map(|metadata| metadata.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(64 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// The control plane
// ---------------------------------------------------------------------------------------------

/// etcd, kube-apiserver, kube-controller-manager and kube-scheduler of one testbed.
pub struct ControlPlane {
    paths: Paths,
    bin_dir: PathBuf,
    pki: Option<Pki>,
    /// In start order; stopped in reverse.
    components: Vec<Component>,
    /// Set once kube-proxy was started: its rules are removed after it stops.
    kube_proxy_config: Option<PathBuf>,
    /// Set once kube-router was started: its ipsets are removed after its chains.
    kube_router_started: bool,
    /// What `net.bridge.bridge-nf-call-iptables` was before the testbed set it to 1, if it had to.
    bridge_netfilter_before: Option<String>,
}

impl ControlPlane {
    /// A control plane that has not started anything yet.
    pub fn new(paths: Paths, bin_dir: PathBuf) -> ControlPlane {
        ControlPlane {
            paths,
            bin_dir,
            pki: None,
            components: Vec::new(),
            kube_proxy_config: None,
            kube_router_started: false,
            bridge_netfilter_before: None,
        }
    }

    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// Generates the PKI and kubeconfigs, starts every component and waits until each one serves.
    /// On error, whatever was started is still recorded: call [`ControlPlane::stop`].
    pub async fn start(&mut self) -> Result<()> {
        for binary in paths::GO_BINARIES {
            if !self.bin_dir.join(binary).is_file() {
                return Err(Error::Other(format!(
                    "{} is missing from {}: run `cargo xtask testbed build`",
                    binary,
                    self.bin_dir.display()
                )));
            }
        }
        for dir in [self.paths.logs_dir(), self.paths.etcd_data_dir()] {
            std::fs::create_dir_all(&dir)
                .map_err(Error::io(format!("creating {}", dir.display())))?;
        }
        let pki = Pki::generate(&self.paths.pki_dir())?;
        for (user, cert_stem) in [
            ("admin", "admin"),
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
        ] {
            write_kubeconfig(&self.paths.kubeconfig(user), &pki, user, cert_stem)?;
        }
        write_kubeconfig(
            &operator_kubeconfig(&self.paths),
            &pki,
            E2E_OPERATOR_USER,
            E2E_OPERATOR_STEM,
        )?;
        let policy = audit_policy(&self.paths);
        std::fs::write(&policy, AUDIT_POLICY)
            .map_err(Error::io(format!("writing {}", policy.display())))?;
        self.pki = Some(pki.clone());

        let etcd = self.spawn("etcd", self.etcd_args())?;
        wait_ready(
            &mut self.components[etcd],
            Duration::from_secs(30),
            probe_etcd,
        )
        .await?;
        tracing::info!("etcd is healthy");

        let began = time::OffsetDateTime::now_utc();
        let apiserver = self.spawn("kube-apiserver", self.apiserver_args(&pki))?;
        let admin = admin_client(&self.paths).await?;
        wait_ready(
            &mut self.components[apiserver],
            Duration::from_secs(90),
            || probe_get(&admin, "/readyz"),
        )
        .await?;
        record_apiserver_start(&self.paths, began)?;
        tracing::info!("kube-apiserver is ready");

        let controller_manager = self.spawn(
            "kube-controller-manager",
            self.controller_manager_args(&pki),
        )?;
        let scheduler = self.spawn("kube-scheduler", self.scheduler_args())?;
        let cm_health = insecure_local_client(CONTROLLER_MANAGER_PORT)?;
        let scheduler_health = insecure_local_client(SCHEDULER_PORT)?;
        wait_ready(
            &mut self.components[controller_manager],
            Duration::from_secs(60),
            || probe_get(&cm_health, "/healthz"),
        )
        .await?;
        wait_ready(
            &mut self.components[scheduler],
            Duration::from_secs(60),
            || probe_get(&scheduler_health, "/healthz"),
        )
        .await?;
        tracing::info!("kube-controller-manager and kube-scheduler are healthy");
        Ok(())
    }

    /// Starts kube-proxy (see [`crate::kube_proxy`]) and waits until its `/healthz` reports a
    /// completed IPv4 sync. Call it once the Nodes exist: kube-proxy reads its node's IPs at start.
    pub async fn start_kube_proxy(&mut self) -> Result<()> {
        kube_proxy::check_prerequisites()?;
        let pki = self
            .pki
            .clone()
            .ok_or_else(|| Error::Other("the control plane has no PKI yet".into()))?;
        let kubeconfig = self.paths.kubeconfig(kube_proxy::STEM);
        write_kubeconfig(&kubeconfig, &pki, kube_proxy::USER, kube_proxy::STEM)?;
        let config = kube_proxy::config_file(&self.paths);
        std::fs::write(&config, kube_proxy::config_yaml(&kubeconfig, CLUSTER_CIDR))
            .map_err(Error::io(format!("writing {}", config.display())))?;
        self.bridge_netfilter_before = kube_proxy::ensure_bridge_netfilter()?;
        // From here on its rules may exist: `stop` removes them.
        self.kube_proxy_config = Some(config.clone());
        let index = self.spawn("kube-proxy", vec![format!("--config={}", config.display())])?;
        wait_ready(
            &mut self.components[index],
            Duration::from_secs(60),
            probe_kube_proxy,
        )
        .await?;
        tracing::info!(
            "kube-proxy ({} mode) has synced its rules",
            kube_proxy::MODE
        );
        Ok(())
    }

    /// Starts kube-router from `binary`, the network policy controller alone (see
    /// [`crate::kube_router`]), and waits until it is healthy and its `FORWARD` chain exists.
    /// Call it after kube-proxy (which sets `bridge-nf-call-iptables`).
    pub async fn start_kube_router(&mut self, binary: &Path) -> Result<()> {
        kube_router::check_prerequisites()?;
        if !binary.is_file() {
            return Err(Error::Other(format!(
                "{} is missing: run `cargo xtask kube-router build`",
                binary.display()
            )));
        }
        let args = kube_router::args(&self.paths.admin_kubeconfig(), SERVICE_CIDR);
        // From here on its rules may exist: `stop` removes them.
        self.kube_router_started = true;
        let log = self.paths.component_log("kube-router");
        let component = Component::spawn("kube-router", binary, &args, log)?;
        self.components.push(component);
        let index = self.components.len() - 1;
        wait_ready(
            &mut self.components[index],
            Duration::from_secs(60),
            probe_kube_router,
        )
        .await?;
        tracing::info!("kube-router enforces NetworkPolicies");
        Ok(())
    }

    /// Components whose process has exited: (name, exit status, log).
    fn exited_components(&mut self) -> Vec<(&'static str, String, PathBuf)> {
        self.components
            .iter_mut()
            .filter_map(|component| match component.child.try_wait() {
                Ok(Some(status)) => {
                    Some((component.name, status.to_string(), component.log.clone()))
                }
                _ => None,
            })
            .collect()
    }

    /// Stops kube-apiserver (SIGTERM, as a rolling control-plane upgrade would) and starts it again
    /// with the same flags; returns once it is ready. Its previous log is kept as
    /// `kube-apiserver.log.previous`.
    pub async fn restart_apiserver(&mut self) -> Result<()> {
        const NAME: &str = "kube-apiserver";
        let index = self
            .components
            .iter()
            .position(|component| component.name == NAME)
            .ok_or_else(|| Error::Other(format!("{NAME} is not running")))?;
        let pki = self
            .pki
            .clone()
            .ok_or_else(|| Error::Other("the control plane has no PKI yet".into()))?;
        let began = time::OffsetDateTime::now_utc();
        self.components[index].stop();
        let log = self.paths.component_log(NAME);
        let mut previous = log.clone().into_os_string();
        previous.push(".previous");
        let _ = std::fs::rename(&log, previous);
        let program = self.bin_dir.join(NAME);
        self.components[index] = Component::spawn(NAME, &program, &self.apiserver_args(&pki), log)?;
        let admin = admin_client(&self.paths).await?;
        wait_ready(&mut self.components[index], Duration::from_secs(90), || {
            probe_get(&admin, "/readyz")
        })
        .await?;
        record_apiserver_start(&self.paths, began)?;
        tracing::info!("kube-apiserver restarted and ready");
        Ok(())
    }

    /// Stops every started component, newest first, then removes kube-proxy's rules. Idempotent.
    pub fn stop(&mut self) {
        while let Some(mut component) = self.components.pop() {
            component.stop();
        }
        // kube-router's chains start with `KUBE-` too: this removes them as well.
        if let Some(config) = self.kube_proxy_config.take() {
            let binary = self.bin_dir.join("kube-proxy");
            match kube_proxy::cleanup(&binary, Some(&config)) {
                Ok(()) => {
                    tracing::info!("kube-proxy's and kube-router's iptables rules are removed")
                }
                Err(error) => tracing::error!(
                    "removing kube-proxy's rules: {error}; `cargo xtask testbed down` retries"
                ),
            }
        }
        if std::mem::take(&mut self.kube_router_started) {
            match kube_router::remove_sets() {
                Ok(()) => tracing::info!("kube-router's ipsets are removed"),
                Err(error) => tracing::error!(
                    "removing kube-router's ipsets: {error}; `cargo xtask testbed down` retries"
                ),
            }
        }
        if let Some(previous) = self.bridge_netfilter_before.take() {
            kube_proxy::restore_bridge_netfilter(&previous);
        }
    }

    fn spawn(&mut self, name: &'static str, args: Vec<String>) -> Result<usize> {
        let program = self.bin_dir.join(name);
        let component = Component::spawn(name, &program, &args, self.paths.component_log(name))?;
        self.components.push(component);
        Ok(self.components.len() - 1)
    }

    fn etcd_args(&self) -> Vec<String> {
        let client = format!("http://127.0.0.1:{ETCD_CLIENT_PORT}");
        let peer = format!("http://127.0.0.1:{ETCD_PEER_PORT}");
        vec![
            "--name=testbed".into(),
            format!("--data-dir={}", self.paths.etcd_data_dir().display()),
            format!("--listen-client-urls={client}"),
            format!("--advertise-client-urls={client}"),
            format!("--listen-peer-urls={peer}"),
            format!("--initial-advertise-peer-urls={peer}"),
            format!("--initial-cluster=testbed={peer}"),
            "--initial-cluster-state=new".into(),
            // The data is thrown away with the testbed; fsync only slows every write down.
            "--unsafe-no-fsync=true".into(),
            "--log-level=warn".into(),
        ]
    }

    fn apiserver_args(&self, pki: &Pki) -> Vec<String> {
        let path = |path: PathBuf| path.display().to_string();
        vec![
            format!("--advertise-address={APISERVER_BRIDGE_IP}"),
            format!("--bind-address={APISERVER_BRIDGE_IP}"),
            format!("--secure-port={APISERVER_PORT}"),
            format!("--etcd-servers=http://127.0.0.1:{ETCD_CLIENT_PORT}"),
            format!("--client-ca-file={}", path(pki.ca_cert())),
            format!("--tls-cert-file={}", path(pki.apiserver_cert())),
            format!("--tls-private-key-file={}", path(pki.apiserver_key())),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
            format!(
                "--service-account-key-file={}",
                path(pki.service_account_public_key())
            ),
            format!(
                "--service-account-signing-key-file={}",
                path(pki.service_account_key())
            ),
            "--authorization-mode=Node,RBAC".into(),
            "--allow-privileged=true".into(),
            // No real endpoints behind the `kubernetes` Service: clients use the bridge address.
            "--endpoint-reconciler-type=none".into(),
            format!(
                "--kubelet-client-certificate={}",
                path(pki.cert("apiserver-kubelet-client"))
            ),
            format!(
                "--kubelet-client-key={}",
                path(pki.key("apiserver-kubelet-client"))
            ),
            // Fake node names do not resolve; their InternalIP does.
            "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
            // The kubelet API's serving certificate comes from the testbed CA (IP SAN 10.244.0.1).
            format!("--kubelet-certificate-authority={}", path(pki.ca_cert())),
            // `kubectl exec` speaks WebSocket; with the translation on, the API server would turn it
            // into SPDY towards the kubelet. Off, it passes the WebSocket through to the testbed
            // kubelet, which speaks the v4/v5 channel protocol (beta gate, not locked in 1.34).
            "--feature-gates=TranslateStreamCloseWebsocketRequests=false".into(),
            "--profiling=false".into(),
            format!("--audit-policy-file={}", path(audit_policy(&self.paths))),
            // Appended to (also across an API-server restart), never rotated: the whole suite's
            // requests stay in one file for the least-privilege check. `0` is not "unlimited": the
            // API server's log writer (lumberjack) then rotates at its default 100 MB, which a
            // full suite passes (a CI run checked the tail only and found most grants unused).
            format!("--audit-log-path={}", path(audit_log(&self.paths))),
            "--audit-log-format=json".into(),
            format!("--audit-log-maxsize={AUDIT_LOG_MAX_MB}"),
        ]
    }

    fn controller_manager_args(&self, pki: &Pki) -> Vec<String> {
        let kubeconfig = self
            .paths
            .kubeconfig("kube-controller-manager")
            .display()
            .to_string();
        vec![
            format!("--kubeconfig={kubeconfig}"),
            // So /healthz is served to anonymous probes like on a kubeadm cluster.
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={CONTROLLER_MANAGER_PORT}"),
            "--leader-elect=false".into(),
            "--controllers=*".into(),
            "--use-service-account-credentials=true".into(),
            format!(
                "--service-account-private-key-file={}",
                pki.service_account_key().display()
            ),
            format!("--root-ca-file={}", pki.ca_cert().display()),
            format!("--cluster-signing-cert-file={}", pki.ca_cert().display()),
            format!("--cluster-signing-key-file={}", pki.ca_key().display()),
            format!("--service-cluster-ip-range={SERVICE_CIDR}"),
            format!("--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}"),
            // Nodes lose their not-ready taint (and become schedulable) sooner after start.
            "--node-monitor-period=2s".into(),
            "--profiling=false".into(),
        ]
    }

    fn scheduler_args(&self) -> Vec<String> {
        let kubeconfig = self
            .paths
            .kubeconfig("kube-scheduler")
            .display()
            .to_string();
        vec![
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={SCHEDULER_PORT}"),
            "--leader-elect=false".into(),
            "--profiling=false".into(),
        ]
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes a kubeconfig for `user` authenticating with the client certificate `<cert_stem>.crt`.
fn write_kubeconfig(path: &Path, pki: &Pki, user: &str, cert_stem: &str) -> Result<()> {
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": "vko-testbed",
            "cluster": {
                "server": apiserver_url(),
                "certificate-authority": pki.ca_cert().display().to_string(),
            },
        }],
        "users": [{
            "name": user,
            "user": {
                "client-certificate": pki.cert(cert_stem).display().to_string(),
                "client-key": pki.key(cert_stem).display().to_string(),
            },
        }],
        "contexts": [{
            "name": "vko-testbed",
            "context": { "cluster": "vko-testbed", "user": user },
        }],
        "current-context": "vko-testbed",
    });
    let text = serde_norway::to_string(&kubeconfig)
        .map_err(|error| Error::Other(format!("kubeconfig: {error}")))?;
    std::fs::write(path, text).map_err(Error::io(format!("writing {}", path.display())))
}

/// A client for the testbed's API server with the admin identity.
pub async fn admin_client(paths: &Paths) -> Result<kube::Client> {
    client_from_kubeconfig(&paths.admin_kubeconfig()).await
}

/// The node heartbeat's API configuration: the admin identity, with connect and read timeouts within
/// one renewal interval.
async fn heartbeat_config(paths: &Paths) -> Result<kube::Config> {
    let mut config = config_from_kubeconfig(&paths.admin_kubeconfig()).await?;
    config.connect_timeout = Some(crate::kubelet::nodes::HEARTBEAT_TIMEOUT);
    config.read_timeout = Some(crate::kubelet::nodes::HEARTBEAT_TIMEOUT);
    Ok(config)
}

/// A client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client> {
    Ok(kube::Client::try_from(config_from_kubeconfig(path).await?)?)
}

/// The client configuration in a kubeconfig file.
pub async fn config_from_kubeconfig(path: &Path) -> Result<kube::Config> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|error| Error::Other(format!("reading kubeconfig {}: {error}", path.display())))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|error| Error::Other(format!("kubeconfig {}: {error}", path.display())))
}

/// A client for a component's own HTTPS health endpoint on localhost (self-signed serving cert).
fn insecure_local_client(port: u16) -> Result<kube::Client> {
    let url = format!("https://127.0.0.1:{port}")
        .parse()
        .map_err(|error| Error::Invalid {
            what: "health URL".into(),
            detail: format!("{error}"),
        })?;
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(kube::Client::try_from(config)?)
}

async fn probe_etcd() -> Result<()> {
    let url = format!("http://127.0.0.1:{ETCD_CLIENT_PORT}")
        .parse()
        .map_err(|error| Error::Invalid {
            what: "etcd URL".into(),
            detail: format!("{error}"),
        })?;
    let mut config = kube::Config::new(url);
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    let client = kube::Client::try_from(config)?;
    let body = probe_text(&client, "/health").await?;
    if body.contains("\"health\":\"true\"") {
        Ok(())
    } else {
        Err(Error::Other(format!("etcd /health says {body}")))
    }
}

/// A plain-HTTP client of `component`'s health port on 127.0.0.1 (connect 2 s, read 5 s).
fn local_http_client(port: u16, component: &str) -> Result<kube::Client> {
    let url = format!("http://127.0.0.1:{port}")
        .parse()
        .map_err(|error| Error::Invalid {
            what: format!("{component} health URL"),
            detail: format!("{error}"),
        })?;
    let mut config = kube::Config::new(url);
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(5));
    Ok(kube::Client::try_from(config)?)
}

/// kube-router's `/healthz` answers 200 (every controller it runs reported in) and its policy
/// controller's `FORWARD` chain exists (made before its first sync).
async fn probe_kube_router() -> Result<()> {
    let client = local_http_client(kube_router::HEALTH_PORT, "kube-router")?;
    probe_text(&client, "/healthz").await?;
    let chains = kube_proxy::leftover_chains()?;
    if !chains
        .iter()
        .any(|chain| chain.table == "filter" && chain.name == kube_router::FORWARD_CHAIN)
    {
        return Err(Error::Other(format!(
            "kube-router has not made {} yet",
            kube_router::FORWARD_CHAIN
        )));
    }
    Ok(())
}

/// kube-proxy's `/healthz` (plain HTTP) answers healthy AND lists an IPv4 sync: before its first
/// sync it already answers 200 with no per-family status.
async fn probe_kube_proxy() -> Result<()> {
    let client = local_http_client(kube_proxy::HEALTHZ_PORT, "kube-proxy")?;
    let body = probe_text(&client, "/healthz").await?;
    let health: serde_json::Value =
        serde_json::from_str(&body).map_err(|error| Error::Invalid {
            what: "kube-proxy /healthz".into(),
            detail: format!("{error}: {body}"),
        })?;
    if health["status"]["IPv4"]["healthy"] == serde_json::Value::Bool(true) {
        Ok(())
    } else {
        Err(Error::Other(format!(
            "kube-proxy has not synced IPv4 rules yet: {body}"
        )))
    }
}

async fn probe_get(client: &kube::Client, path: &str) -> Result<()> {
    probe_text(client, path).await.map(|_| ())
}

async fn probe_text(client: &kube::Client, path: &str) -> Result<String> {
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(|error| Error::Other(format!("building GET {path}: {error}")))?;
    let text = tokio::time::timeout(Duration::from_secs(5), client.request_text(request))
        .await
        .map_err(|_| Error::Timeout {
            what: format!("GET {path}"),
            seconds: 5,
        })??;
    Ok(text)
}

/// Polls `probe` until it succeeds, failing early when the component exits and with its log's tail
/// on timeout.
async fn wait_ready<F, Fut>(
    component: &mut Component,
    timeout: Duration,
    mut probe: F,
) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        component.check_running()?;
        let last_error = match probe().await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if Instant::now() >= deadline {
            return Err(Error::Other(format!(
                "{} did not become ready within {}s (last probe: {last_error}); its log is {}:\n{}",
                component.name,
                timeout.as_secs(),
                component.log.display(),
                log_tail(&component.log, LOG_TAIL_LINES)
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// `vko-testbed serve`
// ---------------------------------------------------------------------------------------------

/// Options of `vko-testbed serve`.
#[derive(Debug)]
struct ServeOptions {
    state_dir: Option<PathBuf>,
    bin_dir: Option<PathBuf>,
    /// `--image PREFIX=DIR`: images starting with PREFIX run from the unpacked image in DIR
    /// (`kubelet::images::UnpackedImage`).
    extra_images: Vec<(String, PathBuf)>,
    /// `--cert-manager`: install cert-manager's chart from the cache and the tests' CA issuer
    /// ([`crate::cert_manager`]) before reporting ready.
    cert_manager: bool,
    /// `--kube-router BINARY`: run kube-router from BINARY as the NetworkPolicy engine
    /// ([`crate::kube_router`]) before reporting ready. Without it, policies are not enforced.
    kube_router: Option<PathBuf>,
}

impl ServeOptions {
    fn parse(args: &[String]) -> Result<ServeOptions> {
        let usage = || {
            Error::Invalid {
            what: "command line".into(),
            detail:
                "usage: vko-testbed serve [--state-dir DIR] [--bin-dir DIR] [--image PREFIX=DIR]... \
                 [--cert-manager] [--kube-router BINARY]"
                    .into(),
        }
        };
        let mut options = ServeOptions {
            state_dir: None,
            bin_dir: None,
            extra_images: Vec::new(),
            cert_manager: false,
            kube_router: None,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--state-dir" => options.state_dir = Some(args.next().ok_or_else(usage)?.into()),
                "--bin-dir" => options.bin_dir = Some(args.next().ok_or_else(usage)?.into()),
                "--cert-manager" => options.cert_manager = true,
                "--kube-router" => {
                    options.kube_router = Some(args.next().ok_or_else(usage)?.into())
                }
                "--image" => {
                    let (prefix, dir) = args
                        .next()
                        .and_then(|arg| arg.split_once('='))
                        .ok_or_else(usage)?;
                    options
                        .extra_images
                        .push((prefix.to_string(), PathBuf::from(dir)));
                }
                _ => return Err(usage()),
            }
        }
        Ok(options)
    }
}

/// Entry point of `vko-testbed serve`: runs a whole testbed until SIGTERM/SIGINT, then tears it down.
pub fn serve_main(args: &[String]) -> Result<()> {
    let options = ServeOptions::parse(args)?;
    paths::require_root()?;
    init_logging();
    let paths = options
        .state_dir
        .clone()
        .map(Paths::new)
        .unwrap_or_else(Paths::from_env);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(Error::io("starting the tokio runtime"))?;
    // block_on runs `serve` on this (main) thread, so the control-plane processes it spawns are tied
    // to a thread that lives until the end (see `die_with_parent`).
    runtime.block_on(serve(paths, options))
}

fn init_logging() {
    use std::io::IsTerminal;
    // Probe failures while a component starts are expected; kube's own logging of each one is noise.
    let default_filter = "info,kube_client::client::builder=off,kube_client::client::tls=error";
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}

/// How long the kubelet gets to stop every pod before the control plane goes.
const KUBELET_STOP_TIMEOUT: Duration = Duration::from_secs(90);
/// How long network teardown may take before the supervisor moves on (`testbed down` sweeps).
const NETWORK_TEARDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the nodes get to become Ready (and lose the not-ready taint) after the kubelet starts.
const NODES_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The running kubelet task.
struct RunningKubelet {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<()>>,
}

/// Everything the supervisor started, torn down in reverse order.
struct Supervised {
    network: Option<Arc<net::Network>>,
    control_plane: ControlPlane,
    kubelet: Option<RunningKubelet>,
    /// The kubelet's registry of running containers and stopped nodes (fault injection).
    kubelet_handles: crate::kubelet::KubeletHandles,
    /// The admin client, once the API server is up (fault injection).
    client: Option<kube::Client>,
}

impl Supervised {
    /// Injects one fault. Runs on the supervisor's main thread: a restarted API server must be a
    /// child of a thread that lives until the end (see [`die_with_parent`]).
    async fn inject(&mut self, fault: &control::Fault) -> Result<()> {
        if *fault == control::Fault::RestartApiserver {
            return self.control_plane.restart_apiserver().await;
        }
        let (Some(client), Some(network)) = (&self.client, &self.network) else {
            return Err(Error::Other("the testbed is not running".into()));
        };
        crate::kubelet::faults::apply(client, network, &self.kubelet_handles, fault).await
    }

    async fn teardown(&mut self) {
        if let Some(kubelet) = self.kubelet.take() {
            kubelet.shutdown.cancel();
            match tokio::time::timeout(KUBELET_STOP_TIMEOUT, kubelet.task).await {
                Ok(Ok(Ok(()))) => tracing::info!("kubelet stopped"),
                Ok(Ok(Err(error))) => tracing::error!("kubelet: {error}"),
                Ok(Err(join_error)) => tracing::error!("kubelet task: {join_error}"),
                Err(_) => tracing::error!(
                    "kubelet did not stop within {}s; going on",
                    KUBELET_STOP_TIMEOUT.as_secs()
                ),
            }
        }
        self.control_plane.stop();
        if let Some(network) = self.network.take() {
            // `ip` may block (say, on the netns lock); a stuck teardown must not hang the supervisor.
            let (done, finished) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = done.send(network.teardown());
            });
            match finished.recv_timeout(NETWORK_TEARDOWN_TIMEOUT) {
                Ok(Ok(())) => tracing::info!("network torn down"),
                Ok(Err(error)) => tracing::error!("tearing down the network: {error}"),
                Err(_) => tracing::error!(
                    "network teardown did not finish within {}s; `cargo xtask testbed down` sweeps the rest",
                    NETWORK_TEARDOWN_TIMEOUT.as_secs()
                ),
            }
        }
    }
}

async fn serve(paths: Paths, options: ServeOptions) -> Result<()> {
    let state_dir = paths.state_dir().to_path_buf();
    let bin_dir = options.bin_dir.clone().unwrap_or_else(paths::bin_dir);
    claim_state_dir(&paths)?;
    tracing::info!(state_dir = %state_dir.display(), bin_dir = %bin_dir.display(), "starting the testbed");

    let shutdown = CancellationToken::new();
    spawn_signal_listener(shutdown.clone())?;

    let mut supervised = Supervised {
        network: None,
        control_plane: ControlPlane::new(paths.clone(), bin_dir),
        kubelet: None,
        kubelet_handles: crate::kubelet::KubeletHandles::default(),
        client: None,
    };
    let started = Instant::now();
    let mut outcome = tokio::select! {
        outcome = start(&paths, &options, &mut supervised) => outcome,
        () = shutdown.cancelled() => Err(Error::Other("stopped by a signal during startup".into())),
    };
    // Faults from tests and `cargo xtask testbed fault`; the socket exists once `ready` does.
    let (fault_sender, mut faults) = tokio::sync::mpsc::channel(8);
    if outcome.is_ok() {
        match control::bind(&control::socket_path(&state_dir)) {
            Ok(listener) => {
                tokio::spawn(control::serve(listener, fault_sender, shutdown.clone()));
            }
            Err(error) => outcome = Err(error),
        }
    }
    if outcome.is_ok() {
        outcome = std::fs::write(
            paths.ready_marker(),
            format!("{}\n", paths.admin_kubeconfig().display()),
        )
        .map_err(Error::io("writing the ready marker"));
    }
    match &outcome {
        Ok(()) => {
            tracing::info!("testbed ready in {}", format_duration(started.elapsed()));
            outcome = run_until_stopped(&mut supervised, &shutdown, &mut faults).await;
            tracing::info!("stopping the testbed");
        }
        Err(error) => tracing::error!("testbed startup failed: {error}"),
    }
    let _ = std::fs::remove_file(paths.ready_marker());
    supervised.teardown().await;
    let removed = paths::remove_state_dir(&state_dir);
    if let Err(error) = &removed {
        tracing::error!("{error}");
    }
    tracing::info!("testbed stopped");
    outcome.and(removed)
}

async fn start(paths: &Paths, options: &ServeOptions, supervised: &mut Supervised) -> Result<()> {
    // The API server binds the bridge address, so the bridge comes first.
    let network = Arc::new(net::Network::setup()?);
    supervised.network = Some(network.clone());
    tracing::info!("bridge {} is up", paths::BRIDGE_NAME);
    supervised.control_plane.start().await?;

    let client = admin_client(paths).await?;
    supervised.client = Some(client.clone());
    let config = crate::kubelet::KubeletConfig {
        nodes: crate::kubelet::default_nodes(),
        state_dir: paths.state_dir().to_path_buf(),
        shim_exe: std::env::current_exe().map_err(Error::io("finding the vko-testbed binary"))?,
        cluster_domain: "cluster.local".into(),
        api_server: std::net::SocketAddrV4::new(APISERVER_BRIDGE_IP, APISERVER_PORT),
        extra_images: options
            .extra_images
            .iter()
            .map(|(prefix, dir)| {
                crate::kubelet::images::UnpackedImage::load(prefix, dir).map_err(|detail| {
                    Error::Invalid {
                        what: format!("--image {prefix}={}", dir.display()),
                        detail,
                    }
                })
            })
            .collect::<Result<_>>()?,
        heartbeat_api: heartbeat_config(paths).await?,
    };
    let node_names: Vec<String> = config.nodes.iter().map(|node| node.name.clone()).collect();
    let kubelet_shutdown = CancellationToken::new();
    let task = tokio::spawn(crate::kubelet::run(
        client.clone(),
        config,
        network,
        supervised.kubelet_handles.clone(),
        kubelet_shutdown.clone(),
    ));
    supervised.kubelet = Some(RunningKubelet {
        shutdown: kubelet_shutdown,
        task,
    });
    wait_for_nodes(&client, &node_names, supervised).await?;
    tracing::info!("nodes {} are Ready", node_names.join(", "));
    supervised.control_plane.start_kube_proxy().await?;
    if let Some(binary) = &options.kube_router {
        supervised.control_plane.start_kube_router(binary).await?;
    }
    if options.cert_manager {
        // After kube-proxy: the API server reaches cert-manager's webhook through its Service.
        let took = crate::cert_manager::install(&client, &paths.admin_kubeconfig()).await?;
        tracing::info!(
            "cert-manager is installed and ClusterIssuer {} is Ready ({})",
            crate::cert_manager::CA_ISSUER,
            format_duration(took)
        );
    }
    Ok(())
}

/// Waits until every node is Ready and the node lifecycle controller has lifted its not-ready taint
/// (until then the scheduler places nothing there); fails early when the kubelet stops.
async fn wait_for_nodes(
    client: &kube::Client,
    names: &[String],
    supervised: &mut Supervised,
) -> Result<()> {
    use k8s_openapi::api::core::v1::Node;
    let nodes: kube::Api<Node> = kube::Api::all(client.clone());
    let deadline = Instant::now() + NODES_READY_TIMEOUT;
    loop {
        if let Some(kubelet) = &supervised.kubelet
            && kubelet.task.is_finished()
        {
            let kubelet = supervised.kubelet.take();
            let detail = match kubelet.map(|kubelet| kubelet.task) {
                Some(task) => match task.await {
                    Ok(Ok(())) => "it returned".to_string(),
                    Ok(Err(error)) => error.to_string(),
                    Err(join_error) => join_error.to_string(),
                },
                None => "unknown".to_string(),
            };
            return Err(Error::Other(format!(
                "the kubelet stopped during startup: {detail}"
            )));
        }
        let mut pending = Vec::new();
        for name in names {
            let usable = match nodes.get_opt(name).await {
                Ok(Some(node)) => node_is_usable(&node),
                _ => false,
            };
            if !usable {
                pending.push(name.as_str());
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: format!("nodes {} to be Ready and untainted", pending.join(", ")),
                seconds: NODES_READY_TIMEOUT.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Ready and without the node lifecycle controller's not-ready taint: what a node must be before
/// the testbed reports it up (its tests wait for the same).
pub fn node_is_usable(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        });
    let not_ready_taint = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .is_some_and(|taints| {
            taints
                .iter()
                .any(|taint| taint.key == "node.kubernetes.io/not-ready")
        });
    ready && !not_ready_taint
}

/// Runs until SIGTERM/SIGINT. Ends early with an error when the kubelet stops on its own; logs (once)
/// when a control-plane component exits.
async fn run_until_stopped(
    supervised: &mut Supervised,
    shutdown: &CancellationToken,
    faults: &mut tokio::sync::mpsc::Receiver<control::FaultRequest>,
) -> Result<()> {
    let mut reported_exits = Vec::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
            Some((fault, done)) = faults.recv() => {
                let outcome = supervised.inject(&fault).await.map_err(|error| error.to_string());
                let _ = done.send(outcome);
                // An API-server restart is an exit we caused, not one to report.
                reported_exits.clear();
                continue;
            }
        }
        for (name, status, log) in supervised.control_plane.exited_components() {
            if !reported_exits.contains(&name) {
                tracing::error!(
                    "{name} exited ({status}); its log is {}:\n{}",
                    log.display(),
                    log_tail(&log, LOG_TAIL_LINES)
                );
                reported_exits.push(name);
            }
        }
        if supervised
            .kubelet
            .as_ref()
            .is_some_and(|kubelet| kubelet.task.is_finished())
            && let Some(kubelet) = supervised.kubelet.take()
        {
            let detail = match kubelet.task.await {
                Ok(Ok(())) => "it returned".to_string(),
                Ok(Err(error)) => error.to_string(),
                Err(join_error) => join_error.to_string(),
            };
            return Err(Error::Other(format!("the kubelet stopped: {detail}")));
        }
    }
}

/// Creates the state directory and records this supervisor's pid; refuses when another live
/// supervisor owns it.
fn claim_state_dir(paths: &Paths) -> Result<()> {
    if let Some(pid) = read_supervisor_pid(paths)
        && pid != std::process::id()
        && process_is_alive(pid)
    {
        return Err(Error::Other(format!(
            "a testbed supervisor (pid {pid}) already runs with state directory {}",
            paths.state_dir().display()
        )));
    }
    std::fs::create_dir_all(paths.state_dir()).map_err(Error::io(format!(
        "creating {}",
        paths.state_dir().display()
    )))?;
    let _ = std::fs::remove_file(paths.ready_marker());
    std::fs::write(paths.supervisor_pid(), format!("{}\n", std::process::id()))
        .map_err(Error::io("writing the supervisor pid file"))
}

/// The pid recorded in `supervisor.pid`, if any.
pub fn read_supervisor_pid(paths: &Paths) -> Option<u32> {
    std::fs::read_to_string(paths.supervisor_pid())
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Whether a process with this pid exists (and is not a zombie).
pub fn process_is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name, which may itself contain spaces.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn spawn_signal_listener(shutdown: CancellationToken) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate =
        signal(SignalKind::terminate()).map_err(Error::io("listening for SIGTERM"))?;
    let mut interrupt =
        signal(SignalKind::interrupt()).map_err(Error::io("listening for SIGINT"))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => tracing::info!("SIGTERM received"),
            _ = interrupt.recv() => tracing::info!("SIGINT received"),
        }
        shutdown.cancel();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_ldflags_stamp_major_and_minor() {
        let flags = version_ldflags();
        assert!(flags.contains("gitVersion=v1.34.4"));
        assert!(flags.contains("gitMajor=1 "));
        assert!(flags.contains("gitMinor=34 "));
        assert!(flags.contains("k8s.io/client-go/pkg/version.gitVersion=v1.34.4"));
    }

    #[test]
    fn audit_timestamps_have_the_audit_logs_shape() {
        let at =
            time::OffsetDateTime::from_unix_timestamp_nanos(1_796_000_000_123_456_789).unwrap();
        assert_eq!(audit_timestamp(at), "2026-11-30T00:53:20.123456Z");
        let east = at.to_offset(time::UtcOffset::from_hms(2, 0, 0).unwrap());
        assert_eq!(audit_timestamp(east), "2026-11-30T00:53:20.123456Z");
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let path = std::env::temp_dir().join(format!("vko-log-tail-{}", std::process::id()));
        let text: String = (1..=100).map(|line| format!("line {line}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 2), "line 99\nline 100");
        std::fs::remove_file(&path).unwrap();
        assert!(log_tail(&path, 2).contains("cannot read"));
    }

    #[test]
    fn serve_options_parse_and_reject_unknown_flags() {
        let options = ServeOptions::parse(&[
            "--state-dir".into(),
            "/x".into(),
            "--image".into(),
            "example/operator=/opt/bin".into(),
        ])
        .unwrap();
        assert_eq!(options.state_dir, Some(PathBuf::from("/x")));
        assert_eq!(
            options.extra_images,
            vec![("example/operator".to_string(), PathBuf::from("/opt/bin"))]
        );
        assert!(ServeOptions::parse(&["--image".into(), "no-equals-sign".into()]).is_err());
        assert!(ServeOptions::parse(&["--bogus".into()]).is_err());
        assert!(ServeOptions::parse(&["--state-dir".into()]).is_err());
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(process_is_alive(std::process::id()));
        assert!(!process_is_alive(u32::MAX - 1));
    }

    #[test]
    fn a_child_spawned_with_die_with_parent_runs() {
        let mut command = Command::new("true");
        die_with_parent(&mut command);
        assert!(command.status().unwrap().success());
    }

    #[test]
    fn rotated_audit_log_parts_are_found_beside_the_log() {
        let root = std::env::temp_dir().join(format!("vko-audit-rotated-{}", std::process::id()));
        let paths = Paths::new(&root);
        std::fs::create_dir_all(paths.logs_dir()).unwrap();
        std::fs::write(audit_log(&paths), "{}\n").unwrap();
        std::fs::write(paths.logs_dir().join("kube-apiserver.log"), "").unwrap();
        assert!(rotated_audit_logs(&paths).unwrap().is_empty());
        let part = "audit-2026-12-05T00-48-28.793.log";
        std::fs::write(paths.logs_dir().join(part), "{}\n").unwrap();
        assert_eq!(rotated_audit_logs(&paths).unwrap(), vec![part.to_owned()]);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn apiserver_writes_the_audit_log_with_the_metadata_policy() {
        let paths = Paths::new("/run/vko-testbed-audit-test");
        let control_plane = ControlPlane::new(paths.clone(), PathBuf::from("/nonexistent"));
        let args = control_plane.apiserver_args(&Pki::open(&paths.pki_dir()));
        assert!(
            args.contains(&"--audit-log-path=/run/vko-testbed-audit-test/logs/audit.log".into())
        );
        assert!(
            args.contains(
                &"--audit-policy-file=/run/vko-testbed-audit-test/audit-policy.yaml".into()
            )
        );
        assert!(args.contains(&"--audit-log-format=json".into()));
        // Never rotated (0 would mean lumberjack's 100 MB default).
        assert!(args.contains(&"--audit-log-maxsize=1000000".into()));
        let policy: serde_json::Value = serde_norway::from_str(AUDIT_POLICY).unwrap();
        assert_eq!(policy["kind"], "Policy");
        assert_eq!(policy["omitStages"], serde_json::json!(["RequestReceived"]));
        assert_eq!(
            policy["rules"],
            serde_json::json!([{ "level": "Metadata" }])
        );
    }

    #[test]
    fn kubeconfig_points_at_the_bridge_address_with_the_users_cert() {
        let dir = std::env::temp_dir().join(format!("vko-kubeconfig-{}", std::process::id()));
        let pki = Pki::generate(&dir).unwrap();
        let path = dir.join("admin.kubeconfig");
        write_kubeconfig(&path, &pki, "admin", "admin").unwrap();
        let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
        let cluster = kubeconfig.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://10.244.0.1:6443"));
        let user = kubeconfig.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_certificate.as_deref(),
            Some(pki.cert("admin").to_str().unwrap())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
