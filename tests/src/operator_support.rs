//! Shared by the `operator_*` end-to-end tests: the CRD, the operator as a host process (one for
//! the whole test binary, shared by every test that runs at the same time, stopped with SIGTERM
//! when the last test using it ends and started again by the next one), `OperatorTest` (where an
//! operator test starts: CRD, operator, a namespace of its own), `spawn_operator` for the tests
//! that run an operator process of their own, shared fixtures (`SOLO_VALKEY`, `OBSERVER_CHECKS`)
//! and small helpers to read a `Valkey`'s status.
//!
//! The operator runs with the testbed's `operator.kubeconfig` (user `vko-e2e-operator`, no groups)
//! and the chart's ClusterRole and leader-election Role bound to that user, so every operator test
//! runs on exactly the chart's RBAC: a missing rule fails the test (the request is refused), and the
//! audit log records what the operator used (`rbac_least_privilege`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use kube::api::{Api, ListParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vko_api::Valkey;
use vko_testbed::harness::{
    E2E_LEASE_NAMESPACE, TestNamespace, Testbed, install_operator_rbac, wait_until,
};
use vko_testbed::paths::Paths;

/// The Cluster Observer's ten checks, by the names `spec.observer.unreadyWhen` and `/readyz` use.
pub const OBSERVER_CHECKS: [&str; 10] = [
    "masterUnreachable",
    "writeTestFailure",
    "readTestFailure",
    "replicaSyncFailure",
    "replicaReadTestFailure",
    "sentinelUnreachable",
    "sentinelQuorumFailure",
    "sentinelMasterDown",
    "sentinelMasterHostnameInvalid",
    "sentinelReplicaHostnamesInvalid",
];

/// A standalone Valkey 8.0 named `solo`: one data pod, no Sentinel.
pub const SOLO_VALKEY: &str = "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: solo}\n\
    spec: {replicas: 1, image: valkey/valkey:8.0}\n";

/// PHASE OK with `replicas` ready data pods.
pub fn ok_with(replicas: i32) -> impl Fn(&Valkey) -> bool + Copy {
    move |v: &Valkey| {
        v.status.as_ref().is_some_and(|s| {
            s.phase == Some(vko_api::Phase::Ok) && s.ready_replicas == Some(replicas)
        })
    }
}

/// Installs (server-side applies) the Valkey CRD and waits until it is Established.
pub async fn install_crd(client: &kube::Client) -> anyhow::Result<()> {
    vko_testbed::harness::install_crd(client, &vko_api::crd())
        .await
        .context("installing the Valkey CRD")
}

/// The Helm chart whose RBAC the operator under test runs with.
pub fn chart_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/valkey-operator")
}

/// Whether this process already applied the chart's RBAC (once is enough; the objects stay).
static RBAC_INSTALLED: AtomicBool = AtomicBool::new(false);

/// The chart's operator RBAC, bound to the operator's user (see the module documentation).
async fn ensure_operator_rbac() -> anyhow::Result<()> {
    if RBAC_INSTALLED.load(Ordering::Acquire) {
        return Ok(());
    }
    let testbed = Testbed::from_env().await?;
    install_operator_rbac(&testbed.client(), &chart_dir())
        .await
        .context("binding the chart's operator RBAC to the e2e operator user")?;
    RBAC_INSTALLED.store(true, Ordering::Release);
    Ok(())
}

/// The operator binary the tests run: `VKO_OPERATOR_BIN`, else cargo's debug build.
fn operator_binary() -> PathBuf {
    std::env::var_os("VKO_OPERATOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // The same target directory cargo builds into (and the testbed maps the operator image to).
            std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"))
                .join("debug/vko-operator")
        })
}

/// Starts an operator process on the host as every test runs one: leader election in the e2e Lease
/// namespace (so it is serialized with any other operator on the testbed), `/readyz` on
/// 127.0.0.1:`health_port`, no metrics listener, text logs (debug for the operator) into
/// `log_path`, acting as the user of `kubeconfig`. `extra_args` and `extra_env` come on top (a
/// Lease identity of its own, another sidecar image).
pub fn spawn_operator(
    kubeconfig: &Path,
    health_port: u16,
    log_path: &Path,
    extra_args: &[&str],
    extra_env: &[(&str, &str)],
) -> anyhow::Result<Child> {
    let binary = operator_binary();
    if !binary.is_file() {
        bail!(
            "{} does not exist: run `cargo build -p vko-operator` first",
            binary.display()
        );
    }
    let log = std::fs::File::create(log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    Command::new(&binary)
        .args([
            "--health-bind-address",
            &format!("127.0.0.1:{health_port}"),
            "--metrics-bind-address",
            "0",
            "--log-format",
            "text",
            "--leader-elect",
            "--leader-election-namespace",
            E2E_LEASE_NAMESPACE,
        ])
        .args(extra_args)
        .env("RUST_LOG", "info,kube=warn,vko_operator=debug")
        .env("KUBECONFIG", kubeconfig)
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))
}

struct Shared {
    users: usize,
    child: Option<Child>,
    health_port: u16,
    log_path: Option<PathBuf>,
    /// How many operator processes this test binary started (names each one's log).
    starts: usize,
    /// A test that used this operator process failed: its log stays.
    keep_log: bool,
    /// The logs of processes [`kill_operator`] killed, removed with the current one.
    earlier_logs: Vec<PathBuf>,
}

static OPERATOR: Mutex<Shared> = Mutex::new(Shared {
    users: 0,
    child: None,
    health_port: 0,
    log_path: None,
    starts: 0,
    keep_log: false,
    earlier_logs: Vec::new(),
});

/// A use of the shared operator process; the process stops when the last guard drops (also on
/// a panic).
pub struct OperatorGuard {
    pub health_port: u16,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// SIGKILLs the shared operator process (as an OOM kill or a lost node would: no graceful stop,
/// its leader Lease left to expire) and waits for it to be gone. Only for a test that runs alone
/// (`exclusive_`): every other user of the process loses its operator too.
pub fn kill_operator() -> anyhow::Result<()> {
    let mut shared = OPERATOR.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let mut child = shared.child.take().context("no operator process runs")?;
    child.kill().context("SIGKILL of the operator")?;
    child.wait().context("waiting for the killed operator")?;
    eprintln!("operator pid {} SIGKILLed", child.id());
    let log = shared.log_path.take();
    shared.earlier_logs.extend(log);
    Ok(())
}

/// Starts the shared operator process again after [`kill_operator`] (on the same `/readyz` port,
/// a log of its own), as its Deployment would; returns without waiting for it to lead.
pub fn restart_operator() -> anyhow::Result<()> {
    let kubeconfig = vko_testbed::controlplane::operator_kubeconfig(&Paths::from_env());
    let mut shared = OPERATOR.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    anyhow::ensure!(shared.child.is_none(), "the operator still runs");
    shared.starts += 1;
    let log_path = std::env::temp_dir().join(format!(
        "vko-operator-e2e-{}-{}.log",
        std::process::id(),
        shared.starts
    ));
    let child = spawn_operator(&kubeconfig, shared.health_port, &log_path, &[], &[])?;
    eprintln!("operator pid {} log {}", child.id(), log_path.display());
    shared.child = Some(child);
    shared.log_path = Some(log_path);
    Ok(())
}

/// Starts the operator (or joins the running one) and waits until `/readyz` answers 200.
pub async fn operator() -> anyhow::Result<OperatorGuard> {
    ensure_operator_rbac().await?;
    let kubeconfig = vko_testbed::controlplane::operator_kubeconfig(&Paths::from_env());
    if !kubeconfig.is_file() {
        bail!(
            "{} does not exist: the testbed predates the operator identity; restart it \
             (`cargo xtask testbed down && cargo xtask testbed up`)",
            kubeconfig.display()
        );
    }
    let port = {
        let mut shared = OPERATOR.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        if shared.child.is_none() {
            let port = free_port()?;
            shared.starts += 1;
            let log_path = std::env::temp_dir().join(format!(
                "vko-operator-e2e-{}-{}.log",
                std::process::id(),
                shared.starts
            ));
            // Not the admin: only what the chart's RBAC grants.
            let child = spawn_operator(&kubeconfig, port, &log_path, &[], &[])?;
            eprintln!("operator pid {} log {}", child.id(), log_path.display());
            shared.child = Some(child);
            shared.log_path = Some(log_path);
            shared.health_port = port;
            shared.keep_log = false;
        }
        shared.users += 1;
        shared.health_port
    };
    let guard = OperatorGuard { health_port: port };
    wait_until(
        "the operator's /readyz (it is ready once it leads; another operator may hold the lease)",
        Duration::from_secs(900),
        || async move {
            Ok(http_status(port, "/readyz")
                .await
                .ok()
                .filter(|s| *s == 200)
                .map(|_| ()))
        },
    )
    .await?;
    Ok(guard)
}

impl Drop for OperatorGuard {
    fn drop(&mut self) {
        let Ok(mut shared) = OPERATOR.lock() else {
            return;
        };
        shared.users = shared.users.saturating_sub(1);
        // The log stays when any test that used this process failed (it is named on stderr at
        // start), also when a passing test is the last to let go of it.
        shared.keep_log |= std::thread::panicking();
        if shared.users > 0 {
            return;
        }
        let mut logs = std::mem::take(&mut shared.earlier_logs);
        logs.extend(shared.log_path.take());
        if !shared.keep_log {
            for log in logs {
                let _ = std::fs::remove_file(log);
            }
        }
        if let Some(mut child) = shared.child.take() {
            // SIGTERM first: the operator gives its Lease up on a graceful stop.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            for _ in 0..100 {
                if matches!(child.try_wait(), Ok(Some(_))) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where an operator test starts: the Valkey CRD installed, the shared operator running and a
/// namespace of the test's own. The operator keeps running while this lives; dropped without
/// [`OperatorTest::cleanup`] (a failed test), the namespace goes first, best effort, as it would
/// from the test's own locals.
pub struct OperatorTest {
    pub testbed: Testbed,
    namespace: TestNamespace,
    _operator: OperatorGuard,
}

impl OperatorTest {
    /// Installs the CRD, starts (or joins) the operator, creates `<namespace_prefix>-<random>`.
    pub async fn start(namespace_prefix: &str) -> anyhow::Result<OperatorTest> {
        let testbed = Testbed::from_env().await?;
        install_crd(&testbed.client()).await?;
        let operator = operator().await?;
        let namespace = TestNamespace::create(&testbed.client(), namespace_prefix).await?;
        Ok(OperatorTest {
            testbed,
            namespace,
            _operator: operator,
        })
    }

    /// A client with the admin identity.
    pub fn client(&self) -> kube::Client {
        self.testbed.client()
    }

    /// The test's namespace.
    pub fn ns(&self) -> &str {
        self.namespace.name()
    }

    /// Applies `yaml` (a `Valkey` named `name`, and whatever it needs) in the test's namespace
    /// and waits up to `timeout` for PHASE OK with `replicas` ready; returns the Valkeys' API and
    /// the Valkey as it was then.
    pub async fn apply_until_ok(
        &self,
        yaml: &str,
        name: &str,
        replicas: i32,
        timeout: Duration,
    ) -> anyhow::Result<(Api<Valkey>, Valkey)> {
        vko_testbed::harness::apply_yaml(&self.client(), self.ns(), yaml).await?;
        let valkeys: Api<Valkey> = Api::namespaced(self.client(), self.ns());
        let what = format!("{replicas} ready and OK");
        let valkey = wait_for_valkey(&valkeys, name, &what, timeout, ok_with(replicas)).await?;
        Ok((valkeys, valkey))
    }

    /// Deletes the test's Valkeys, then its namespace (see [`cleanup_namespace`]) and waits until
    /// it is gone; the operator is let go after it.
    pub async fn cleanup(self) -> anyhow::Result<()> {
        cleanup_namespace(&self.testbed.client(), self.namespace).await
    }
}

/// Deletes the Valkeys in `namespace`, waits until the pods the operator rendered are gone (up to
/// 2 min), then deletes the namespace and waits until it is gone. Why the Valkeys first: the
/// namespace controller rechecks a namespace whose pods are still terminating only after half
/// their grace period (38 s for the data pods' 75 s), and a master waits a few seconds for a
/// successor that stays (ADR 0048); deleted through its Valkey, a cluster is gone in seconds and
/// the namespace then goes in one pass. A namespace without Valkeys (or without the CRD) goes
/// directly.
pub async fn cleanup_namespace(
    client: &kube::Client,
    namespace: TestNamespace,
) -> anyhow::Result<()> {
    let name = namespace.name().to_owned();
    let started = std::time::Instant::now();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &name);
    let deleted = match valkeys.list(&Default::default()).await {
        Ok(list) => {
            for valkey in &list.items {
                let valkey_name = valkey.metadata.name.as_deref().unwrap_or_default();
                match valkeys.delete(valkey_name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error.into()),
                }
            }
            !list.items.is_empty()
        }
        // The CRD is not installed (a test that uninstalled it): nothing of ours to delete.
        Err(kube::Error::Api(status)) if status.code == 404 => false,
        Err(error) => return Err(error.into()),
    };
    if deleted {
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &name);
        wait_until(
            &format!("the pods of the deleted Valkeys in {name} to be gone"),
            Duration::from_secs(120),
            || {
                let pods = pods.clone();
                async move {
                    let ours =
                        ListParams::default().labels(vko_api::consts::labels::MANAGED_BY_SELECTOR);
                    let left = pods.list(&ours).await?.items.len();
                    Ok((left == 0).then_some(()))
                }
            },
        )
        .await?;
    }
    let pods_gone = started.elapsed();
    namespace.cleanup().await?;
    eprintln!(
        "cleanup of {name}: Valkeys' pods gone after {pods_gone:.1?}, namespace after {:.1?}",
        started.elapsed()
    );
    Ok(())
}

/// Status code of `GET path` on 127.0.0.1:`port`.
pub async fn http_status(port: u16, path: &str) -> anyhow::Result<u16> {
    Ok(http_get(port, path).await?.0)
}

/// A GET of `path` on 127.0.0.1:`port`: the status code and the body.
pub async fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("no HTTP status line")?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((code, body.to_owned()))
}

/// The condition `type_` of a Valkey: (status, reason, message).
pub fn condition(valkey: &Valkey, type_: &str) -> Option<(String, String, String)> {
    valkey
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Waits until the named Valkey satisfies `check`.
pub async fn wait_for_valkey(
    api: &Api<Valkey>,
    name: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Valkey) -> bool,
) -> anyhow::Result<Valkey> {
    let check = &check;
    let found = wait_until(what, timeout, || {
        let api = api.clone();
        async move {
            let valkey = api.get(name).await?;
            Ok(check(&valkey).then_some(valkey))
        }
    })
    .await;
    match found {
        Ok(valkey) => Ok(valkey),
        Err(error) => {
            let last = api.get(name).await.ok().and_then(|v| v.status);
            bail!("{error}; last status: {last:#?}")
        }
    }
}

/// The namespace's Events about the object named `regarding`, of `type_` (`Normal` or
/// `Warning`); none when the list fails (the callers assert on what they expect to find).
pub async fn events_about(
    client: &kube::Client,
    namespace: &str,
    regarding: &str,
    type_: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    events
        .list(&kube::api::ListParams::default())
        .await
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding))
        .filter(|e| e.type_.as_deref() == Some(type_))
        .collect()
}
