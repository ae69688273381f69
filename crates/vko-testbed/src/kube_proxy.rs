//! kube-proxy on the testbed: its configuration, its prerequisites, and removing the netfilter
//! rules it made.
//!
//! One kube-proxy (the Go-built `kube-proxy`, same version as the control plane) runs on the host in
//! iptables mode for every fake Node: all pods share the host's network namespace behind one bridge,
//! so one instance programming the host's netfilter routes every pod's ClusterIP traffic. It runs as
//! Node [`NODE`] (`hostnameOverride`), authenticating as `system:kube-proxy`, whom Kubernetes'
//! bootstrap RBAC binds to the ClusterRole `system:node-proxier`.
//!
//! Why iptables mode: it is kube-proxy's default and what most clusters run; the nftables mode (GA in
//! 1.33) would need Debian's `nft` as well. Debian's `iptables` is the nf_tables backend
//! (`iptables-nft`); the kernel has both.
//!
//! What the configuration leaves alone on the host: no conntrack sysctl (`maxPerCore: 0`, TCP
//! timeouts `0s` mean "keep the kernel's"), no `route_localnet` (`localhostNodePorts: false`), and
//! NodePorts only on the node IP (`nodePortAddresses: [primary]`, not the host's other addresses).
//! What the testbed adds for it: a route of the Service CIDR via the bridge, hairpin mode on every
//! pod's bridge port (see [`crate::net`]), and `net.bridge.bridge-nf-call-iptables=1` so bridged
//! pod-to-pod packets pass the NAT rules ([`ensure_bridge_netfilter`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::paths::Paths;
use crate::{Error, Result};

/// The Node kube-proxy says it runs on (its EndpointSlice topology and `…TrafficPolicy: Local`
/// decisions are made as this Node for every pod).
pub const NODE: &str = "node-1";
/// The user of kube-proxy's client certificate (bound to `system:node-proxier` by bootstrap RBAC).
pub const USER: &str = "system:kube-proxy";
/// File stem of its certificate, key and kubeconfig.
pub const STEM: &str = "kube-proxy";
/// `/healthz` (plain HTTP) on 127.0.0.1; kube-proxy's default port.
pub const HEALTHZ_PORT: u16 = 10256;
/// `/metrics` on 127.0.0.1; kube-proxy's default port.
pub const METRICS_PORT: u16 = 10249;
/// The proxy mode (see the module documentation).
pub const MODE: &str = "iptables";
/// What iptables mode runs (kube-proxy 1.34 clears conntrack entries over netlink: no `conntrack`).
pub const REQUIRED_COMMANDS: [&str; 3] = ["iptables", "iptables-save", "iptables-restore"];
/// The Debian package with [`REQUIRED_COMMANDS`].
pub const PACKAGE: &str = "iptables";
/// Every chain kube-proxy creates starts with this.
const CHAIN_PREFIX: &str = "KUBE-";
/// Whether bridged IPv4 traffic traverses iptables (br_netfilter; per network namespace).
const BRIDGE_NF_CALL_IPTABLES: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";
/// How long `kube-proxy --cleanup` and one `iptables-save`/`-restore` may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// kube-proxy's KubeProxyConfiguration file in the state directory.
pub fn config_file(paths: &Paths) -> PathBuf {
    paths.state_dir().join("kube-proxy.yaml")
}

/// The KubeProxyConfiguration (see the module documentation for each choice).
pub fn config_yaml(kubeconfig: &Path, cluster_cidr: &str) -> String {
    format!(
        "\
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE}
mode: {MODE}
clusterCIDR: {cluster_cidr}
detectLocalMode: ClusterCIDR
healthzBindAddress: 127.0.0.1:{HEALTHZ_PORT}
metricsBindAddress: 127.0.0.1:{METRICS_PORT}
enableProfiling: false
nodePortAddresses: [primary]
iptables:
  localhostNodePorts: false
  masqueradeAll: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
",
        kubeconfig = kubeconfig.display()
    )
}

/// The full path of `command` on `PATH` (plus `/usr/sbin` and `/sbin`, where iptables lives).
pub fn find_command(command: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(command))
        .find(|candidate| candidate.is_file())
}

/// Fails, naming the package, unless every command iptables mode needs is installed and the kernel
/// exposes the br_netfilter sysctl.
pub fn check_prerequisites() -> Result<()> {
    let missing: Vec<&str> = REQUIRED_COMMANDS
        .iter()
        .copied()
        .filter(|command| find_command(command).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(Error::Other(format!(
            "kube-proxy (iptables mode) needs {}, which {} not installed: `apt-get install {PACKAGE}` \
             (`cargo xtask test` and `cargo xtask demo` install it)",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        )));
    }
    if !Path::new(BRIDGE_NF_CALL_IPTABLES).is_file() {
        return Err(Error::Other(format!(
            "{BRIDGE_NF_CALL_IPTABLES} does not exist: the kernel lacks br_netfilter, so pod-to-pod \
             Service traffic over the bridge would bypass kube-proxy's rules"
        )));
    }
    Ok(())
}

/// Makes bridged IPv4 traffic traverse iptables; returns the value it replaced when it had to change
/// it (give that to [`restore_bridge_netfilter`] at teardown), `None` when it already was `1`.
pub fn ensure_bridge_netfilter() -> Result<Option<String>> {
    let current = std::fs::read_to_string(BRIDGE_NF_CALL_IPTABLES)
        .map_err(Error::io(format!("reading {BRIDGE_NF_CALL_IPTABLES}")))?;
    if current.trim() == "1" {
        return Ok(None);
    }
    std::fs::write(BRIDGE_NF_CALL_IPTABLES, "1")
        .map_err(Error::io(format!("writing 1 to {BRIDGE_NF_CALL_IPTABLES}")))?;
    tracing::info!(
        "set {BRIDGE_NF_CALL_IPTABLES} to 1 (was {}) until the testbed stops",
        current.trim()
    );
    Ok(Some(current.trim().to_string()))
}

/// Puts back what [`ensure_bridge_netfilter`] replaced.
pub fn restore_bridge_netfilter(previous: &str) {
    match std::fs::write(BRIDGE_NF_CALL_IPTABLES, previous) {
        Ok(()) => tracing::info!("restored {BRIDGE_NF_CALL_IPTABLES} to {previous}"),
        Err(error) => tracing::error!("restoring {BRIDGE_NF_CALL_IPTABLES} to {previous}: {error}"),
    }
}

/// One chain kube-proxy made, as `iptables-save` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    /// `iptables` or `ip6tables`.
    pub family: &'static str,
    pub table: String,
    pub name: String,
}

impl std::fmt::Display for Chain {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} -t {} {}", self.family, self.table, self.name)
    }
}

/// The `KUBE-*` chains in `iptables-save` output, as (table, chain).
pub fn kube_chains(save_output: &str) -> Vec<(String, String)> {
    let mut table = None;
    let mut chains = Vec::new();
    for line in save_output.lines() {
        if let Some(name) = line.strip_prefix('*') {
            table = Some(name.trim().to_string());
        } else if let (Some(table), Some(declaration)) = (&table, line.strip_prefix(':'))
            && let Some(name) = declaration.split_whitespace().next()
            && name.starts_with(CHAIN_PREFIX)
        {
            chains.push((table.clone(), name.to_string()));
        }
    }
    chains
}

/// An `iptables-restore --noflush` script that removes every `KUBE-*` chain of `save_output`: the
/// rules of other chains that jump to one are deleted, then each is flushed and deleted. Rules and
/// chains of anyone else stay. `None` when there is nothing to remove.
pub fn removal_script(save_output: &str) -> Option<String> {
    let mut script = String::new();
    let mut current: Option<TableRemoval> = None;
    for line in save_output.lines() {
        if let Some(name) = line.strip_prefix('*') {
            if let Some(done) = current.take() {
                done.write(&mut script);
            }
            current = Some(TableRemoval {
                table: name.trim().to_string(),
                deletions: Vec::new(),
                chains: Vec::new(),
            });
            continue;
        }
        let Some(table) = current.as_mut() else {
            continue;
        };
        if let Some(declaration) = line.strip_prefix(':') {
            if let Some(name) = declaration.split_whitespace().next()
                && name.starts_with(CHAIN_PREFIX)
            {
                table.chains.push(name.to_string());
            }
        } else if let Some(rule) = line.strip_prefix("-A ") {
            let words: Vec<&str> = rule.split_whitespace().collect();
            let chain = words.first().copied().unwrap_or_default();
            let jumps_to_kube = words
                .windows(2)
                .any(|pair| matches!(pair[0], "-j" | "-g") && pair[1].starts_with(CHAIN_PREFIX));
            if !chain.starts_with(CHAIN_PREFIX) && jumps_to_kube {
                table.deletions.push(format!("-D {rule}"));
            }
        }
    }
    if let Some(done) = current.take() {
        done.write(&mut script);
    }
    (!script.is_empty()).then_some(script)
}

/// What [`removal_script`] removes from one table.
struct TableRemoval {
    table: String,
    /// `-D …` of the rules in other chains that jump to a `KUBE-*` chain.
    deletions: Vec<String>,
    chains: Vec<String>,
}

impl TableRemoval {
    fn write(self, script: &mut String) {
        if self.chains.is_empty() {
            return;
        }
        script.push_str(&format!("*{}\n", self.table));
        for deletion in &self.deletions {
            script.push_str(&format!("{deletion}\n"));
        }
        // Declaring a chain in a restore script flushes it; then it can go.
        for chain in &self.chains {
            script.push_str(&format!(":{chain} - [0:0]\n"));
        }
        for chain in &self.chains {
            script.push_str(&format!("-X {chain}\n"));
        }
        script.push_str("COMMIT\n");
    }
}

/// The families whose tools are installed: (`iptables-save`, `iptables-restore`, name).
fn families() -> Vec<(PathBuf, PathBuf, &'static str)> {
    [
        ("iptables-save", "iptables-restore", "iptables"),
        ("ip6tables-save", "ip6tables-restore", "ip6tables"),
    ]
    .into_iter()
    .filter_map(|(save, restore, family)| {
        Some((find_command(save)?, find_command(restore)?, family))
    })
    .collect()
}

/// Every `KUBE-*` chain in the host's iptables and ip6tables (any table). Without iptables installed
/// there are none (kube-proxy cannot have run).
pub fn leftover_chains() -> Result<Vec<Chain>> {
    let mut chains = Vec::new();
    for (save, _, family) in families() {
        let output = run(Command::new(&save), &save.display().to_string(), None)?;
        for (table, name) in kube_chains(&String::from_utf8_lossy(&output.stdout)) {
            chains.push(Chain {
                family,
                table,
                name,
            });
        }
    }
    Ok(chains)
}

/// Removes what kube-proxy made: `kube-proxy --cleanup` (with `config` when it still exists), then,
/// for whatever is left (say, the binary is gone), [`removal_script`] per family. Fails when a
/// `KUBE-*` chain remains.
pub fn cleanup(kube_proxy: &Path, config: Option<&Path>) -> Result<()> {
    if leftover_chains()?.is_empty() {
        return Ok(());
    }
    if kube_proxy.is_file() {
        let mut command = Command::new(kube_proxy);
        command.arg("--cleanup");
        if let Some(config) = config.filter(|config| config.is_file()) {
            command.arg(format!("--config={}", config.display()));
        }
        match run(command, "kube-proxy --cleanup", None) {
            Ok(_) => tracing::info!("kube-proxy --cleanup removed its rules"),
            Err(error) => tracing::warn!("{error}; removing its chains directly"),
        }
    }
    for (save, restore, family) in families() {
        let output = run(Command::new(&save), &save.display().to_string(), None)?;
        if let Some(script) = removal_script(&String::from_utf8_lossy(&output.stdout)) {
            tracing::info!("removing the KUBE-* chains kube-proxy left in {family}");
            let mut command = Command::new(&restore);
            command.arg("--noflush");
            run(
                command,
                &format!("{} --noflush", restore.display()),
                Some(&script),
            )?;
        }
    }
    let left = leftover_chains()?;
    if !left.is_empty() {
        return Err(Error::Other(format!(
            "kube-proxy's chains are still there after the cleanup: {}",
            left.iter()
                .map(Chain::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// Runs `command` (with `stdin`, if any) for at most [`COMMAND_TIMEOUT`]; a non-zero exit is an error
/// carrying its stderr.
fn run(mut command: Command, description: &str, stdin: Option<&str>) -> Result<Output> {
    use std::io::Write;
    command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(Error::io(format!("running {description}")))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .map_err(Error::io(format!("writing to {description}")))?;
    }
    // Output can exceed a pipe's buffer (a big iptables-save): read it on threads while waiting.
    let stdout = child.stdout.take().map(read_on_thread);
    let stderr = child.stderr.take().map(read_on_thread);
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let status = loop {
        if let Some(status) = child
            .try_wait()
            .map_err(Error::io(format!("waiting for {description}")))?
        {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Timeout {
                what: description.to_string(),
                seconds: COMMAND_TIMEOUT.as_secs(),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let collect = |reader: Option<std::thread::JoinHandle<Vec<u8>>>| {
        reader
            .and_then(|handle| handle.join().ok())
            .unwrap_or_default()
    };
    let output = Output {
        status,
        stdout: collect(stdout),
        stderr: collect(stderr),
    };
    Error::unless_success(&output, description)?;
    Ok(output)
}

fn read_on_thread(
    mut pipe: impl std::io::Read + Send + 'static,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `iptables-save` printed on the testbed with kube-proxy running (shortened), plus a chain
    /// and a rule of someone else's.
    const SAVED: &str = "\
# Generated by iptables-save v1.8.9 (nf_tables) on Tue Dec  1 14:00:00 2026
*mangle
:PREROUTING ACCEPT [0:0]
:KUBE-PROXY-CANARY - [0:0]
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
:OTHER - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL
-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
-A FORWARD -s 192.0.2.0/24 -j OTHER
-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABC - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 10.96.0.10/32 -j KUBE-SVC-ABC
COMMIT
*raw
:PREROUTING ACCEPT [0:0]
COMMIT
";

    #[test]
    fn finds_the_kube_chains_of_every_table() {
        assert_eq!(
            kube_chains(SAVED),
            [
                ("mangle", "KUBE-PROXY-CANARY"),
                ("filter", "KUBE-FORWARD"),
                ("filter", "KUBE-SERVICES"),
                ("nat", "KUBE-SERVICES"),
                ("nat", "KUBE-SVC-ABC"),
            ]
            .map(|(table, chain)| (table.to_string(), chain.to_string()))
        );
        assert!(kube_chains("*filter\n:INPUT ACCEPT [0:0]\n:OTHER - [0:0]\nCOMMIT\n").is_empty());
    }

    #[test]
    fn the_removal_script_unlinks_flushes_and_deletes_only_kube_chains() {
        let script = removal_script(SAVED).unwrap();
        assert_eq!(
            script,
            "\
*mangle
:KUBE-PROXY-CANARY - [0:0]
-X KUBE-PROXY-CANARY
COMMIT
*filter
-D INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL
-D FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD
:KUBE-FORWARD - [0:0]
:KUBE-SERVICES - [0:0]
-X KUBE-FORWARD
-X KUBE-SERVICES
COMMIT
*nat
-D PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABC - [0:0]
-X KUBE-SERVICES
-X KUBE-SVC-ABC
COMMIT
"
        );
        assert!(!script.contains("OTHER"), "someone else's chain stays");
        assert_eq!(
            removal_script("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"),
            None
        );
        assert_eq!(removal_script(""), None);
    }

    #[test]
    fn the_configuration_keeps_host_sysctls_and_names_the_node_and_ports() {
        let yaml = config_yaml(Path::new("/run/tb/kube-proxy.kubeconfig"), "10.244.0.0/16");
        let config: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(config["kind"], "KubeProxyConfiguration");
        assert_eq!(config["mode"], "iptables");
        assert_eq!(config["hostnameOverride"], NODE);
        assert_eq!(config["clusterCIDR"], "10.244.0.0/16");
        assert_eq!(
            config["clientConnection"]["kubeconfig"],
            "/run/tb/kube-proxy.kubeconfig"
        );
        assert_eq!(config["healthzBindAddress"], "127.0.0.1:10256");
        assert_eq!(config["metricsBindAddress"], "127.0.0.1:10249");
        assert_eq!(config["iptables"]["localhostNodePorts"], false);
        assert_eq!(config["conntrack"]["maxPerCore"], 0);
        assert_eq!(config["conntrack"]["tcpEstablishedTimeout"], "0s");
        assert_eq!(config["conntrack"]["tcpCloseWaitTimeout"], "0s");
        assert_eq!(config["nodePortAddresses"], serde_json::json!(["primary"]));
    }
}
