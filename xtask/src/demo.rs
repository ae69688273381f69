//! `cargo xtask demo`: the README's "run it" command. On a fresh machine it installs what is missing,
//! builds the workspace and helm, starts a testbed (unless one runs), `helm upgrade --install`s the
//! chart — the operator runs IN the cluster as the chart's Deployment, with the chart's ServiceAccount
//! and RBAC — applies the HA example (3 Valkey pods + 3 Sentinels), waits for PHASE OK, checks that
//! the `ha-cluster-rw` Service reaches the master through kube-proxy (`valkey-cli … ROLE` on its
//! ClusterIP) and says how to connect. Running it again upgrades the release and re-applies the
//! example.
//!
//! The demo's operator joins the leader election of the end-to-end tests' operators (Leases in
//! `default`) and renders the same sidecar image (`vko.local/vko:dev`, which the testbed runs from
//! the image built of the workspace's binaries), so a demo next to running tests never has two operators
//! reconciling at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vko_testbed::paths::{self, Paths};

use crate::{helm, test, testbed};

const NAMESPACE: &str = "vko-demo";
/// The chart's release: its objects are named `vko-valkey-operator`.
const RELEASE: &str = "vko";
const OPERATOR_NAMESPACE: &str = "vko-system";
const CHART: &str = "charts/valkey-operator";
/// The operator pod is Ready once it stands by for the leader Lease or leads with its watches
/// listed (on a testbed where end-to-end tests run, their operators may hold the Lease for
/// minutes: the wait for PHASE OK below covers that).
const OPERATOR_READY_TIMEOUT: Duration = Duration::from_secs(900);
const EXAMPLE: &str = "examples/ha-sentinel.yaml";
/// The example's read-write Service (`<name>-rw`): the master, as clients reach it.
const SERVICE: &str = "ha-cluster-rw";
/// Three data pods and three Sentinels from a cold start, with images already on the host.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    let root = testbed::repo_root();
    test::install_testbed_prerequisites()?;
    testbed::build_go_binaries()?;
    let helm_binary = helm::build()?;
    testbed::cargo(&["build", "--workspace", "--bins"])?;
    let paths = Paths::from_env();
    if paths.ready_marker().exists() {
        println!("==> a testbed is already running; using it");
    } else {
        testbed::up()?;
    }
    let kubeconfig = paths.admin_kubeconfig();
    let kubectl = Kubectl::new(paths::bin_dir().join("kubectl"), kubeconfig.clone());

    install_chart(&root, &helm_binary, &kubeconfig, &kubectl)?;

    println!("==> applying {EXAMPLE} in namespace {NAMESPACE}");
    let namespace_yaml =
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n");
    kubectl.run_with_stdin(
        &[
            "apply",
            "--server-side",
            "--field-manager=vko-demo",
            "-f",
            "-",
        ],
        &namespace_yaml,
    )?;
    kubectl.run(&[
        "apply",
        "--server-side",
        "--field-manager=vko-demo",
        "-n",
        NAMESPACE,
        "-f",
        &root.join(EXAMPLE).display().to_string(),
    ])?;

    let mut phase = String::new();
    let waited = wait_until("PHASE OK", READY_TIMEOUT, Duration::from_secs(3), || {
        phase = kubectl.output(&[
            "get",
            "valkey",
            "ha-cluster",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.phase}",
        ])?;
        Ok(phase.trim() == "OK")
    })?;
    let Some(waited) = waited else {
        kubectl.run(&["get", "valkey,pods", "-n", NAMESPACE, "-o", "wide"])?;
        bail!(
            "ha-cluster did not reach PHASE OK within {} s (phase now {:?}); operator log: \
             kubectl -n {OPERATOR_NAMESPACE} logs deployment/vko-valkey-operator",
            READY_TIMEOUT.as_secs(),
            phase.trim(),
        );
    };
    println!("==> ready after {} s", waited.as_secs());
    kubectl.run(&["get", "valkey", "-n", NAMESPACE])?;
    kubectl.run(&[
        "get",
        "pods",
        "-n",
        NAMESPACE,
        "-L",
        "vko.gtrfc.com/instanceRole",
        "-o",
        "wide",
    ])?;

    let master_ip = kubectl.output(&[
        "get",
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        "vko.gtrfc.com/cluster=ha-cluster,vko.gtrfc.com/instanceRole=master",
        "-o",
        "jsonpath={.items[0].status.podIP}",
    ])?;
    let service_ip = kubectl.output(&[
        "get",
        "service",
        SERVICE,
        "-n",
        NAMESPACE,
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    let service_ip = service_ip.trim();
    check_service_reaches_the_master(service_ip)?;
    println!();
    println!("Connect (kube-proxy routes ClusterIPs on this host and in every pod):");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  export PATH={}:$PATH", paths::bin_dir().display());
    println!(
        "  valkey-cli -h {service_ip} -p 6379 SET greeting hello      # Service {SERVICE}: the master"
    );
    println!(
        "  valkey-cli -h {} -p 6379 GET greeting      # the master's pod IP (over the bridge)",
        master_ip.trim()
    );
    println!("  kubectl -n {NAMESPACE} get valkey,pods,svc");
    println!(
        "  kubectl -n {OPERATOR_NAMESPACE} logs deployment/vko-valkey-operator   # the operator"
    );
    println!(
        "  {} -n {OPERATOR_NAMESPACE} status {RELEASE}   # the chart's release",
        helm_binary.display()
    );
    println!("Stop everything: cargo xtask testbed down");
    Ok(())
}

/// Runs the printed Service connect line's client once (`ROLE` through the ClusterIP): it must
/// answer `master`. Retried for a while: kube-proxy applies a new endpoint within about a second.
fn check_service_reaches_the_master(service_ip: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let output = Command::new("valkey-cli")
            .args(["-h", service_ip, "-p", "6379", "-t", "2", "ROLE"])
            .stdin(Stdio::null())
            .output()
            .context("running valkey-cli")?;
        let reply = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() && reply.lines().next() == Some("master") {
            println!("==> valkey-cli -h {service_ip} -p 6379 ROLE (Service {SERVICE}): master");
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(30) {
            bail!(
                "the Service {SERVICE} ({service_ip}:6379) does not reach the master: ROLE answered \
                 {:?} {:?}; kube-proxy's log is {}",
                reply.trim(),
                String::from_utf8_lossy(&output.stderr).trim(),
                Paths::from_env().component_log("kube-proxy").display()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Where an earlier, host-process demo operator recorded its pid; `cargo xtask testbed down` still
/// stops such an operator when it finds one. The demo itself now runs the operator in the cluster.
pub fn operator_pid_file(paths: &Paths) -> PathBuf {
    paths.state_dir().join("operator.pid")
}

/// The `--set` values of the demo's release (see the module documentation).
const DEMO_VALUES: [&str; 2] = ["image.tag=dev", "leaderElection.namespace=default"];

/// `helm upgrade --install` of the chart, then waits for the operator pod to be Ready.
fn install_chart(
    root: &Path,
    helm_binary: &Path,
    kubeconfig: &Path,
    kubectl: &Kubectl,
) -> anyhow::Result<()> {
    // A CRD that exists but belongs to no release (installed by the end-to-end tests, say) cannot be
    // adopted by helm: leave it in place and install the rest of the chart.
    let crd_release = kubectl
        .output(&[
            "get",
            "crd",
            vko_api::CRD_NAME,
            "--ignore-not-found",
            "-o",
            "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}|{.metadata.name}",
        ])
        .unwrap_or_default();
    let (owner, crd_name) = crd_release.trim().split_once('|').unwrap_or(("", ""));
    let install_crd = crd_name.is_empty() || owner == RELEASE;
    let mut values: Vec<String> = DEMO_VALUES.iter().map(|v| (*v).to_owned()).collect();
    if !install_crd {
        println!("==> the Valkey CRD exists outside this release; installing the chart without it");
        values.push("crds.install=false".to_owned());
    }
    println!("==> helm upgrade --install {RELEASE} {CHART} (namespace {OPERATOR_NAMESPACE})");
    let mut command = Command::new(helm_binary);
    command
        .env("KUBECONFIG", kubeconfig)
        .args(["upgrade", "--install", RELEASE])
        .arg(root.join(CHART))
        .args(["--namespace", OPERATOR_NAMESPACE, "--create-namespace"]);
    for value in &values {
        command.args(["--set", value]);
    }
    let status = command.status().context("running helm")?;
    if !status.success() {
        bail!("helm upgrade --install failed ({status})");
    }
    let waited =
        wait_until(
            "the operator pod to be Ready",
            OPERATOR_READY_TIMEOUT,
            Duration::from_secs(2),
            || {
                let ready = kubectl.output(&[
            "get",
            "pods",
            "-n",
            OPERATOR_NAMESPACE,
            "-l",
            &format!("app.kubernetes.io/name=valkey-operator,app.kubernetes.io/instance={RELEASE}"),
            "-o",
            "jsonpath={.items[*].status.conditions[?(@.type==\"Ready\")].status}",
        ])?;
                Ok(ready.split_whitespace().any(|status| status == "True"))
            },
        )?;
    let Some(waited) = waited else {
        let _ = kubectl.run(&["get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide"]);
        bail!(
            "the operator pod was not Ready within {} s: kubectl -n {OPERATOR_NAMESPACE} logs \
             deployment/vko-valkey-operator",
            OPERATOR_READY_TIMEOUT.as_secs()
        );
    };
    println!("==> operator Ready (leading) after {} s", waited.as_secs());
    Ok(())
}

/// Polls `ready` every `poll` until it says yes (`Some(how long it took)`) or `timeout` has passed
/// (`None`); an error from `ready` ends the wait at once.
fn wait_until(
    what: &str,
    timeout: Duration,
    poll: Duration,
    mut ready: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Option<Duration>> {
    println!("==> waiting for {what} (up to {} s)", timeout.as_secs());
    let started = Instant::now();
    loop {
        if ready()? {
            return Ok(Some(started.elapsed()));
        }
        if started.elapsed() > timeout {
            return Ok(None);
        }
        std::thread::sleep(poll);
    }
}

struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn new(binary: PathBuf, kubeconfig: PathBuf) -> Kubectl {
        Kubectl { binary, kubeconfig }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command.env("KUBECONFIG", &self.kubeconfig).args(args);
        command
    }

    fn run(&self, args: &[&str]) -> anyhow::Result<()> {
        let status = self
            .command(args)
            .status()
            .with_context(|| format!("running kubectl {}", args.join(" ")))?;
        if !status.success() {
            bail!("kubectl {} failed ({status})", args.join(" "));
        }
        Ok(())
    }

    fn run_with_stdin(&self, args: &[&str], input: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .spawn()
            .with_context(|| format!("running kubectl {}", args.join(" ")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(input.as_bytes())?;
        }
        let status = child.wait()?;
        if !status.success() {
            bail!("kubectl {} failed ({status})", args.join(" "));
        }
        Ok(())
    }

    fn output(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = self
            .command(args)
            .output()
            .with_context(|| format!("running kubectl {}", args.join(" ")))?;
        if !output.status.success() {
            bail!(
                "kubectl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}
