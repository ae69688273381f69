//! kube-router on the testbed, firewall only: the engine that enforces NetworkPolicies.
//!
//! One kube-router (v2.1.0, built from its Go module by `cargo xtask kube-router build`) runs on
//! the host with only its network policy controller (`--run-firewall`; no routing, no service
//! proxy: kube-proxy routes Services). It programs the host's iptables and ipsets, as its
//! DaemonSet does on every node of a real cluster. Every fake Node has the same InternalIP and
//! every pod's `hostIP` is that address, so the instance running as Node [`NODE`] counts every pod
//! as local and filters the traffic of all of them; bridged pod-to-pod packets reach its
//! `FORWARD` rules (`-m physdev --physdev-is-bridged`) because `bridge-nf-call-iptables` is `1`
//! (set for kube-proxy, [`crate::kube_proxy::ensure_bridge_netfilter`]).
//!
//! What it does not cover (kube-router's own rules): traffic from the host itself reaches every
//! pod (`--src-type LOCAL` is admitted so that kubelet probes pass), and that includes the host
//! processes of the tests — the operator under test, Prometheus, the test binaries. A policy is
//! therefore only tested against pod-to-pod traffic. IPv4 only (no pod has an IPv6 address).
//!
//! Its rules outlive it (a stopped kube-router leaves the cluster closed, not open). Its own
//! `--cleanup-config` panics in v2.1.0 (the service proxy's cleanup dereferences an iptables
//! handler it never made), so the testbed removes what it made itself: its chains all start with
//! `KUBE-` and go with kube-proxy's ([`crate::kube_proxy::cleanup`]), its ipsets with
//! [`remove_sets`].

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::{Error, Result};

/// The release the testbed runs: the newest the Go module proxy serves (later tags are refused
/// with 403 there).
pub const VERSION: &str = "v2.1.0";
/// The Node it runs as (see the module documentation: it filters every pod).
pub const NODE: &str = "node-1";
/// Its `/healthz` on the host (kube-router's default port).
pub const HEALTH_PORT: u16 = 20244;
/// What its network policy controller runs besides iptables (kube-proxy's commands).
pub const REQUIRED_COMMANDS: [&str; 1] = ["ipset"];
/// The Debian package with [`REQUIRED_COMMANDS`].
pub const PACKAGE: &str = "ipset";
/// The chain every pod's traffic is sent through from `FORWARD`; it exists once the controller
/// has synced.
pub const FORWARD_CHAIN: &str = "KUBE-ROUTER-FORWARD";
/// Its ipsets (`KUBE-SRC-…`, `KUBE-DST-…` per policy) start with this.
const SET_PREFIX: &str = "KUBE-";
/// How long one `ipset` command may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// `~/.cache/vko/kube-router-<version>/`: where `cargo xtask kube-router build` puts `kube-router`.
pub fn dir() -> PathBuf {
    crate::paths::cache_root().join(format!("kube-router-{VERSION}"))
}

/// The cached binary.
pub fn binary() -> PathBuf {
    dir().join("kube-router")
}

/// Its command line: the network policy controller only, as [`NODE`], for the testbed's Service
/// CIDR (traffic to a ClusterIP is left to kube-proxy and filtered after its DNAT).
pub fn args(kubeconfig: &std::path::Path, service_cidr: &str) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={NODE}"),
        "--run-firewall=true".into(),
        "--run-router=false".into(),
        "--run-service-proxy=false".into(),
        "--run-loadbalancer=false".into(),
        "--enable-ipv4=true".into(),
        "--enable-ipv6=false".into(),
        format!("--service-cluster-ip-range={service_cidr}"),
        format!("--health-port={HEALTH_PORT}"),
        "--metrics-port=0".into(),
    ]
}

/// Fails, naming the package, unless `ipset` is installed (iptables is kube-proxy's check).
pub fn check_prerequisites() -> Result<()> {
    let missing: Vec<&str> = REQUIRED_COMMANDS
        .iter()
        .copied()
        .filter(|command| crate::kube_proxy::find_command(command).is_none())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::Other(format!(
        "kube-router (the NetworkPolicy engine) needs {}, which is not installed: \
         `apt-get install {PACKAGE}` (`cargo xtask test` and `cargo xtask demo` install it)",
        missing.join(", ")
    )))
}

/// The names in `ipset list -n` output that kube-router made.
pub fn kube_sets(list_output: &str) -> Vec<String> {
    list_output
        .lines()
        .map(str::trim)
        .filter(|name| name.starts_with(SET_PREFIX))
        .map(str::to_owned)
        .collect()
}

/// kube-router's ipsets on the host. Without `ipset` installed there are none.
pub fn leftover_sets() -> Result<Vec<String>> {
    let Some(ipset) = crate::kube_proxy::find_command("ipset") else {
        return Ok(Vec::new());
    };
    let output = run_ipset(&ipset, &["list", "-n"])?;
    Ok(kube_sets(&output))
}

/// Destroys kube-router's ipsets. Call it after its chains are gone (a set a rule still names
/// cannot be destroyed). Fails when one remains.
pub fn remove_sets() -> Result<()> {
    let Some(ipset) = crate::kube_proxy::find_command("ipset") else {
        return Ok(());
    };
    for set in leftover_sets()? {
        if let Err(error) = run_ipset(&ipset, &["destroy", &set]) {
            tracing::warn!("{error}");
        }
    }
    let left = leftover_sets()?;
    if !left.is_empty() {
        return Err(Error::Other(format!(
            "kube-router's ipsets are still there: {}",
            left.join(", ")
        )));
    }
    Ok(())
}

/// Runs `ipset <args>` for at most [`COMMAND_TIMEOUT`]; its stdout, or an error with its stderr.
fn run_ipset(ipset: &std::path::Path, args: &[&str]) -> Result<String> {
    let description = format!("ipset {}", args.join(" "));
    let mut child = Command::new(ipset)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io(format!("running {description}")))?;
    let deadline = std::time::Instant::now() + COMMAND_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Other(format!(
                    "{description} did not finish within {} s",
                    COMMAND_TIMEOUT.as_secs()
                )));
            }
            Err(error) => return Err(Error::io(format!("waiting for {description}"))(error)),
        }
    }
    let output = child
        .wait_with_output()
        .map_err(Error::io(format!("reading the output of {description}")))?;
    if !output.status.success() {
        return Err(Error::Other(format!(
            "{description} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_its_own_sets_are_removed() {
        let listed = "KUBE-SRC-D63TQXUYXGYMTEOM\nmy-own-set\nKUBE-DST-J4VJGP7S6GITIOSN\n\n";
        assert_eq!(
            kube_sets(listed),
            ["KUBE-SRC-D63TQXUYXGYMTEOM", "KUBE-DST-J4VJGP7S6GITIOSN"]
        );
    }

    #[test]
    fn it_runs_the_policy_controller_alone_as_the_first_node() {
        let args = args(std::path::Path::new("/k.kubeconfig"), "10.96.0.0/16");
        for expected in [
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            "--hostname-override=node-1",
            "--service-cluster-ip-range=10.96.0.0/16",
        ] {
            assert!(
                args.iter().any(|arg| arg == expected),
                "{expected}: {args:?}"
            );
        }
    }

    #[test]
    fn the_cache_is_keyed_by_version() {
        assert!(binary().ends_with(format!("kube-router-{VERSION}/kube-router")));
    }
}
