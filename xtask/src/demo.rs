//! `cargo xtask demo`: the README's "run it" command. On a fresh machine it installs what is missing,
//! builds the workspace, starts a testbed (unless one runs), installs the CRD, starts the operator,
//! applies the HA example (3 Valkey pods + 3 Sentinels), waits for PHASE OK and says how to connect.
//!
//! The operator runs as a host process with the testbed's admin kubeconfig; the Helm chart issue moves
//! it into the cluster. `cargo xtask testbed down` stops it together with the testbed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vko_testbed::controlplane::process_is_alive;
use vko_testbed::paths::{self, Paths};

use crate::{test, testbed};

const NAMESPACE: &str = "vko-demo";
const EXAMPLE: &str = "examples/ha-sentinel.yaml";
/// Three data pods and three Sentinels from a cold start, with images already on the host.
const READY_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    let root = testbed::repo_root();
    test::install_prerequisites()?;
    testbed::build_go_binaries()?;
    testbed::cargo(&["build", "--workspace", "--bins"])?;
    let paths = Paths::from_env();
    if paths.ready_marker().exists() {
        println!("==> a testbed is already running; using it");
    } else {
        testbed::up()?;
    }
    let kubeconfig = paths.admin_kubeconfig();
    let kubectl = Kubectl::new(paths::bin_dir().join("kubectl"), kubeconfig.clone());

    println!("==> installing the Valkey CRD");
    kubectl.run(&[
        "apply",
        "--server-side",
        "--field-manager=vko-demo",
        "-f",
        &root
            .join("charts/valkey-operator/templates/crd.yaml")
            .display()
            .to_string(),
    ])?;
    kubectl.run(&[
        "wait",
        "--for=condition=Established",
        "crd/valkeys.vko.gtrfc.com",
        "--timeout=60s",
    ])?;

    start_operator(&paths, &kubeconfig)?;

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

    println!(
        "==> waiting for PHASE OK (up to {} s)",
        READY_TIMEOUT.as_secs()
    );
    let started = Instant::now();
    loop {
        let phase = kubectl.output(&[
            "get",
            "valkey",
            "ha-cluster",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.phase}",
        ])?;
        if phase.trim() == "OK" {
            break;
        }
        if started.elapsed() > READY_TIMEOUT {
            kubectl.run(&["get", "valkey,pods", "-n", NAMESPACE, "-o", "wide"])?;
            bail!(
                "ha-cluster did not reach PHASE OK within {} s (phase now {:?}); operator log: {}",
                READY_TIMEOUT.as_secs(),
                phase.trim(),
                operator_log(&paths).display()
            );
        }
        std::thread::sleep(Duration::from_secs(3));
    }
    println!("==> ready after {} s", started.elapsed().as_secs());
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
    println!();
    println!("Connect (pod IPs are reachable from this host over the testbed bridge):");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  export PATH={}:$PATH", paths::bin_dir().display());
    println!(
        "  valkey-cli -h {} SET greeting hello      # the master",
        master_ip.trim()
    );
    println!("  kubectl -n {NAMESPACE} get valkey,pods,svc");
    println!("  operator log: {}", operator_log(&paths).display());
    println!("Stop everything: cargo xtask testbed down");
    Ok(())
}

fn operator_log(paths: &Paths) -> PathBuf {
    paths.state_dir().join("operator.log")
}

/// The pid file `testbed down` reads to stop the operator with the testbed.
pub fn operator_pid_file(paths: &Paths) -> PathBuf {
    paths.state_dir().join("operator.pid")
}

fn start_operator(paths: &Paths, kubeconfig: &Path) -> anyhow::Result<()> {
    let pid_file = operator_pid_file(paths);
    if let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        && process_is_alive(pid)
    {
        println!("==> the operator already runs (pid {pid})");
        return Ok(());
    }
    let log_path = operator_log(paths);
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let stderr = log.try_clone()?;
    let binary = testbed::target_dir().join("debug").join("vko-operator");
    // setsid: the operator outlives this command; `cargo xtask testbed down` stops it.
    let child = Command::new("setsid")
        .arg(&binary)
        .env("KUBECONFIG", kubeconfig)
        // Free ports: the demo runs on the host, next to whatever else listens on 8080/8081.
        .args(["--metrics-bind-address", "127.0.0.1:18080"])
        .args(["--health-bind-address", "127.0.0.1:18081"])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    std::fs::write(&pid_file, child.id().to_string())
        .with_context(|| format!("writing {}", pid_file.display()))?;
    println!(
        "==> operator started (pid {}), log {}",
        child.id(),
        log_path.display()
    );
    Ok(())
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
