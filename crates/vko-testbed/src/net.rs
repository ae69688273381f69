//! Pod networking: one Linux bridge (`vkotb0`, gateway 10.244.0.1/16, plus a route of the Service
//! CIDR and forwarding limited to the pod network, see [`enable_service_forwarding`]) and, per pod, a network namespace `vkotb-<12 hex of the pod UID>` joined to the bridge by a
//! veth pair whose bridge port is in hairpin mode (for kube-proxy, see [`crate::kube_proxy`]).
//!
//! Everything is done with the `ip` command (iproute2). The pod IP of an attached pod is recorded as
//! the alias (`ifalias`) of its host-side veth, so the set of IPs in use is read back from the kernel
//! with one `ip -j link show type veth`: it stays correct across processes (a running testbed and a
//! test may attach pods at the same time), and an IP is free again exactly when its veth is gone.
//! Allocation is serialised across processes with an exclusive `flock` on `/run/vkotb0.lock` (not on
//! `/run/netns` itself: `ip netns add` takes that lock).

use std::collections::HashSet;
use std::fs::File;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

use nix::fcntl::{Flock, FlockArg};

use crate::{Error, Result};

/// The bridge every pod's veth is attached to.
pub const BRIDGE: &str = "vkotb0";
/// Prefix of every pod network namespace (`/run/netns/vkotb-…`).
pub const NETNS_PREFIX: &str = "vkotb-";
/// Prefix of every host-side veth (`vk<12 hex>`, 14 characters: interface names are at most 15).
const HOST_VETH_PREFIX: &str = "vk";
/// Where `ip netns add` creates the named namespaces.
const NETNS_DIR: &str = "/run/netns";
/// Serialises attach/detach/teardown across threads and processes.
const LOCK_FILE: &str = "/run/vkotb0.lock";
/// Pod network prefix length (10.244.0.0/16).
const PREFIX_LEN: u8 = 16;
/// How many hex digits of the pod UID name its namespace and veth.
const UID_HEX_DIGITS: usize = 12;

/// The bridge's address: the API server binds here and every pod routes through it.
pub fn gateway() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 0, 1)
}

fn network_address() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 0, 0)
}

fn broadcast_address() -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 255, 255)
}

/// The host's pod network: the bridge plus the IP allocation cursor.
pub struct Network {
    /// Next IP to try. Allocation walks forward from here (wrapping) so a freed IP is not handed out
    /// again right away: Sentinel and replicas cache peer addresses for a while.
    next_ip: Mutex<u32>,
}

/// A pod's attachment to the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNet {
    /// Name of the network namespace (`/run/netns/<netns>`).
    pub netns: String,
    /// The pod IP (on the pod's `eth0`).
    pub ip: Ipv4Addr,
    /// Host side of the veth pair, enslaved to [`BRIDGE`].
    pub host_veth: String,
}

impl Network {
    /// Creates the bridge with the gateway address and brings it up. Idempotent: an existing bridge
    /// is reused (and its address and state fixed up).
    pub fn setup() -> Result<Network> {
        if !link_exists(None, BRIDGE)? {
            let created = ip(&["link", "add", BRIDGE, "type", "bridge"]);
            // Another process may have created it in between: only fail if it is still missing.
            if let Err(error) = created
                && !link_exists(None, BRIDGE)?
            {
                return Err(error);
            }
        }
        pin_bridge_mac()?;
        let gateway_cidr = format!("{}/{PREFIX_LEN}", gateway());
        ip(&["addr", "replace", &gateway_cidr, "dev", BRIDGE])?;
        ip(&["link", "set", BRIDGE, "up"])?;
        ip(&["link", "set", "lo", "up"])?;
        // ClusterIPs are reached via the bridge (source 10.244.0.1, inside the cluster CIDR, so
        // kube-proxy DNATs without masquerading); without this route the host's default route
        // would send them off the machine. It goes with the bridge.
        ip(&[
            "route",
            "replace",
            crate::controlplane::SERVICE_CIDR,
            "dev",
            BRIDGE,
            "src",
            &gateway().to_string(),
        ])?;
        enable_service_forwarding()?;
        Ok(Network {
            next_ip: Mutex::new(u32::from(gateway()) + 1),
        })
    }

    /// Gives the pod its network namespace, veth pair and IP, with a default route via the gateway.
    /// Idempotent: attaching the same UID again returns the existing attachment.
    pub fn attach_pod(&self, pod_uid: &str) -> Result<PodNet> {
        let hex = uid_hex(pod_uid)?;
        let netns = format!("{NETNS_PREFIX}{hex}");
        let host_veth = format!("{HOST_VETH_PREFIX}{hex}");
        let _lock = lock_allocation()?;

        if let Some(existing) = existing_attachment(&netns, &host_veth)? {
            return Ok(existing);
        }
        // A half-built attachment (say, an earlier attach was interrupted): start over.
        remove_attachment(&netns, &host_veth)?;

        let used = used_ips()?;
        let ip = self.allocate(&used)?;
        let net = PodNet {
            netns,
            ip,
            host_veth,
        };
        if let Err(error) = build_attachment(&net) {
            // Leave nothing half-built behind; the original error is what matters.
            let _ = remove_attachment(&net.netns, &net.host_veth);
            return Err(error);
        }
        Ok(net)
    }

    /// Deletes the pod's veth pair and network namespace, which frees its IP. Idempotent.
    pub fn detach_pod(&self, net: &PodNet) -> Result<()> {
        let _lock = lock_allocation()?;
        remove_attachment(&net.netns, &net.host_veth)?;
        forget_neighbour(net.ip)
    }

    /// Cuts the pod off the network (its host-side veth goes down): established connections hang
    /// as on a real partition rather than being reset.
    pub fn partition(&self, net: &PodNet) -> Result<()> {
        ip(&["link", "set", &net.host_veth, "down"])?;
        Ok(())
    }

    /// Reverses [`Network::partition`].
    pub fn heal(&self, net: &PodNet) -> Result<()> {
        ip(&["link", "set", &net.host_veth, "up"])?;
        Ok(())
    }

    /// A one-way cut: inside the pod's namespace, drops TCP packets to `port` from each of `from`
    /// (iptables' INPUT chain of that namespace, which goes with the pod). The pod still reaches
    /// them: its connections to them use other ports.
    pub fn block_inbound(&self, net: &PodNet, port: u16, from: &[Ipv4Addr]) -> Result<()> {
        for source in from {
            pod_iptables(net, "-A", port, *source)?;
        }
        Ok(())
    }

    /// Reverses [`Network::block_inbound`] (a rule already gone is fine).
    pub fn unblock_inbound(&self, net: &PodNet, port: u16, from: &[Ipv4Addr]) -> Result<()> {
        for source in from {
            while pod_iptables(net, "-C", port, *source).is_ok() {
                pod_iptables(net, "-D", port, *source)?;
            }
        }
        Ok(())
    }

    /// Deletes every `vkotb-*` network namespace (with its veth) and the bridge.
    pub fn teardown(&self) -> Result<()> {
        let _lock = lock_allocation()?;
        for netns in testbed_netns()? {
            let hex = netns.trim_start_matches(NETNS_PREFIX);
            remove_attachment(&netns, &format!("{HOST_VETH_PREFIX}{hex}"))?;
        }
        // Host veths whose namespace name is already gone but whose namespace is still held open
        // by a process (the veth lives as long as the namespace does).
        for veth in testbed_host_veths()? {
            delete_link_if_exists(&veth)?;
        }
        delete_link_if_exists(BRIDGE)?;
        remove_policy_routing()?;
        // Last, while still holding it: the testbed leaves no file behind.
        let _ = std::fs::remove_file(LOCK_FILE);
        Ok(())
    }

    fn allocate(&self, used: &HashSet<Ipv4Addr>) -> Result<Ipv4Addr> {
        let mut next = self
            .next_ip
            .lock()
            .map_err(|_| Error::Other("pod IP allocator lock poisoned".into()))?;
        let first = u32::from(network_address());
        let last = u32::from(broadcast_address());
        let mut candidate = *next;
        for _ in first..=last {
            if candidate <= u32::from(gateway()) || candidate >= last {
                candidate = u32::from(gateway()) + 1;
            }
            let ip = Ipv4Addr::from(candidate);
            candidate += 1;
            if !used.contains(&ip) {
                *next = candidate;
                return Ok(ip);
            }
        }
        Err(Error::Other(format!(
            "no free pod IP left in {}/{PREFIX_LEN}",
            network_address()
        )))
    }
}

/// The routing table of everything that arrives from the bridge (see [`enable_service_forwarding`]).
pub const POD_ROUTE_TABLE: &str = "2440";
/// Priority of the rule that sends bridge traffic to [`POD_ROUTE_TABLE`] (before `main`, 32766).
const POD_RULE_PRIORITY: &str = "32000";

/// Lets a pod's packet to a ClusterIP, DNATed by kube-proxy to another pod on the bridge, through,
/// and nothing else. On this kernel (6.18) br_netfilter drops such bridged-and-DNATed packets unless
/// the bridge forwards (the documented fallback for `ip_forward=0` does not apply), so forwarding is
/// on for the bridge alone (`net.ipv4.conf.vkotb0.forwarding`, gone with the bridge;
/// `net.ipv4.ip_forward` stays as it is). So that forwarding reaches only pods, never beyond the
/// machine, what arrives from the bridge is routed by [`POD_ROUTE_TABLE`]: the pod network and
/// `unreachable default` (local addresses still come first, from the `local` table). The rule and
/// the unreachable route outlive the bridge: [`remove_policy_routing`] deletes them.
fn enable_service_forwarding() -> Result<()> {
    // Idempotent and never removing anything: a running testbed and tests set the bridge up at the
    // same time, and removing the rule for a moment would let the bridge forward anywhere.
    let _lock = lock_allocation()?;
    let pod_network = format!("{}/{PREFIX_LEN}", network_address());
    ip(&[
        "route",
        "replace",
        &pod_network,
        "dev",
        BRIDGE,
        "table",
        POD_ROUTE_TABLE,
    ])?;
    ip(&[
        "route",
        "replace",
        "unreachable",
        "default",
        "table",
        POD_ROUTE_TABLE,
    ])?;
    if !has_pod_rule()? {
        let added = ip(&[
            "rule",
            "add",
            "iif",
            BRIDGE,
            "lookup",
            POD_ROUTE_TABLE,
            "priority",
            POD_RULE_PRIORITY,
        ]);
        // The kernel refuses a duplicate ("File exists"): fine if the rule is there now.
        if let Err(error) = added
            && !has_pod_rule()?
        {
            return Err(error);
        }
    }
    // Only now that nothing can be forwarded beyond the pod network.
    let forwarding = format!("/proc/sys/net/ipv4/conf/{BRIDGE}/forwarding");
    std::fs::write(&forwarding, "1").map_err(Error::io(format!("writing 1 to {forwarding}")))
}

fn has_pod_rule() -> Result<bool> {
    Ok(ip(&["rule", "show", "iif", BRIDGE])?
        .lines()
        .any(|rule| rule.contains(&format!("lookup {POD_ROUTE_TABLE}"))))
}

/// The testbed's policy routing still in the kernel: `ip rule` lines naming the bridge and routes of
/// [`POD_ROUTE_TABLE`].
pub fn leftover_policy_routing() -> Result<Vec<String>> {
    let rules = ip(&["rule", "show", "iif", BRIDGE])?;
    // Fails ("FIB table does not exist") when the table is gone, which is the clean case.
    let routes = run_ip(&["route", "show", "table", POD_ROUTE_TABLE])?;
    let routes = if routes.status.success() {
        String::from_utf8_lossy(&routes.stdout).into_owned()
    } else {
        String::new()
    };
    Ok(rules
        .lines()
        .filter(|rule| !rule.trim().is_empty())
        .map(|rule| format!("ip rule {}", rule.trim()))
        .chain(
            routes
                .lines()
                .filter(|route| !route.trim().is_empty())
                .map(|route| format!("ip route {} table {POD_ROUTE_TABLE}", route.trim())),
        )
        .collect())
}

/// Deletes the rule(s) and routes [`enable_service_forwarding`] made. Idempotent.
pub fn remove_policy_routing() -> Result<()> {
    // `ip rule add` does not refuse duplicates: delete until none is left.
    for _ in 0..16 {
        if ip(&["rule", "show", "iif", BRIDGE])?.trim().is_empty() {
            break;
        }
        ip(&["rule", "del", "iif", BRIDGE, "lookup", POD_ROUTE_TABLE])
            .or_else(|_| ip(&["rule", "del", "iif", BRIDGE]))?;
    }
    // Fails when the table does not exist (nothing to flush); whatever remains is reported by
    // `leftover_policy_routing`.
    run_ip(&["route", "flush", "table", POD_ROUTE_TABLE])?;
    Ok(())
}

/// The first 12 hex digits of the pod UID (dashes removed), lower-case.
fn uid_hex(pod_uid: &str) -> Result<String> {
    let hex: String = pod_uid
        .chars()
        .filter(|c| *c != '-')
        .take(UID_HEX_DIGITS)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    if hex.len() < UID_HEX_DIGITS || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(Error::Invalid {
            what: "pod UID".into(),
            detail: format!("{pod_uid:?} does not start with {UID_HEX_DIGITS} hex digits"),
        });
    }
    Ok(hex)
}

/// Serialises allocation across threads and processes (flock is per open file, so two threads of
/// one process exclude each other too).
fn lock_allocation() -> Result<Flock<File>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .map_err(Error::io(format!("opening {LOCK_FILE}")))?;
    Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| Error::Io {
        what: format!("locking {LOCK_FILE}"),
        source: errno.into(),
    })
}

fn build_attachment(net: &PodNet) -> Result<()> {
    let PodNet {
        netns,
        ip: pod_ip,
        host_veth,
    } = net;
    let ip_text = pod_ip.to_string();
    let pod_cidr = format!("{pod_ip}/{PREFIX_LEN}");
    let gateway_text = gateway().to_string();
    // Also here, not only on detach: an earlier process may have died before it detached.
    forget_neighbour(*pod_ip)?;
    ip(&["netns", "add", netns])?;
    ip(&[
        "link", "add", host_veth, "type", "veth", "peer", "name", "eth0", "netns", netns,
    ])?;
    ip(&["link", "set", host_veth, "alias", &ip_text])?;
    ip(&["link", "set", host_veth, "master", BRIDGE, "up"])?;
    // Hairpin: a pod connecting to a Service whose endpoint is itself gets its own packet back
    // through the port it came from (kube-proxy masquerades such traffic; kubelet's
    // `hairpinMode: hairpin-veth` does the same).
    ip(&[
        "link",
        "set",
        "dev",
        host_veth,
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ])?;
    ip(&["-n", netns, "link", "set", "lo", "up"])?;
    ip(&["-n", netns, "addr", "add", &pod_cidr, "dev", "eth0"])?;
    ip(&["-n", netns, "link", "set", "eth0", "up"])?;
    ip(&[
        "-n",
        netns,
        "route",
        "replace",
        "default",
        "via",
        &gateway_text,
        "dev",
        "eth0",
    ])?;
    Ok(())
}

/// The attachment as it exists in the kernel, if it is complete.
fn existing_attachment(netns: &str, host_veth: &str) -> Result<Option<PodNet>> {
    if !netns_exists(netns) {
        return Ok(None);
    }
    let Some(alias) = veth_aliases()?
        .into_iter()
        .find_map(|(name, alias)| (name == host_veth).then_some(alias))
    else {
        return Ok(None);
    };
    let Ok(pod_ip) = alias.parse::<Ipv4Addr>() else {
        return Ok(None);
    };
    let addresses =
        ip(&["-n", netns, "-o", "-4", "addr", "show", "dev", "eth0"]).unwrap_or_default();
    if !addresses.contains(&format!(" {pod_ip}/{PREFIX_LEN} ")) {
        return Ok(None);
    }
    Ok(Some(PodNet {
        netns: netns.to_string(),
        ip: pod_ip,
        host_veth: host_veth.to_string(),
    }))
}

/// The bridge's MAC, set once rather than left to the kernel. A bridge without a set address takes
/// the lowest MAC of its ports and changes it when that port goes: every pod's ARP entry for the
/// gateway (where the API server listens) would then point at a MAC nobody answers to, and the
/// host would flush all its ARP entries on the bridge, at random moments. Locally administered.
const BRIDGE_MAC: &str = "02:76:6b:6f:00:01";

fn pin_bridge_mac() -> Result<()> {
    let path = format!("/sys/class/net/{BRIDGE}/address");
    let current = std::fs::read_to_string(&path).map_err(Error::io(format!("reading {path}")))?;
    // Setting even the same address tells every listener it changed (the host's ARP table on the
    // bridge is flushed): only set it when it differs.
    if current.trim() != BRIDGE_MAC {
        ip(&["link", "set", BRIDGE, "address", BRIDGE_MAC])?;
    }
    Ok(())
}

/// Drops the host's ARP entry for a pod IP on the bridge. Without it a reused IP is unreachable
/// from the host for seconds: the kernel keeps sending to the old pod's MAC (a STALE entry goes
/// through DELAY and PROBE, 5 s and more) while pods on the bridge, which never saw the old MAC,
/// reach the new pod at once.
fn forget_neighbour(pod_ip: Ipv4Addr) -> Result<()> {
    if !link_exists(None, BRIDGE)? {
        return Ok(());
    }
    ip(&["neigh", "flush", "to", &pod_ip.to_string(), "dev", BRIDGE])?;
    Ok(())
}

/// Deletes the veth (both ends) and the namespace name; each step is skipped when already gone.
fn remove_attachment(netns: &str, host_veth: &str) -> Result<()> {
    // The veth first: if a process still holds the namespace open, deleting only the name would
    // keep the namespace, its veth and its IP alive.
    delete_link_if_exists(host_veth)?;
    if netns_exists(netns) {
        ip(&["netns", "delete", netns])?;
    }
    Ok(())
}

fn delete_link_if_exists(name: &str) -> Result<()> {
    if link_exists(None, name)? {
        let deleted = ip(&["link", "delete", name]);
        if let Err(error) = deleted
            && link_exists(None, name)?
        {
            return Err(error);
        }
    }
    Ok(())
}

fn netns_exists(netns: &str) -> bool {
    Path::new(NETNS_DIR).join(netns).exists()
}

fn testbed_netns() -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(Error::io(format!("listing {NETNS_DIR}"))(error)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(Error::io(format!("listing {NETNS_DIR}")))?;
        if let Some(name) = entry.file_name().to_str()
            && name.starts_with(NETNS_PREFIX)
        {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

fn is_testbed_host_veth(name: &str) -> bool {
    name.strip_prefix(HOST_VETH_PREFIX).is_some_and(|hex| {
        hex.len() == UID_HEX_DIGITS && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

fn testbed_host_veths() -> Result<Vec<String>> {
    Ok(veth_aliases()?
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| is_testbed_host_veth(name))
        .collect())
}

/// Pod IPs held by attached pods: the aliases of the testbed's host-side veths.
fn used_ips() -> Result<HashSet<Ipv4Addr>> {
    Ok(veth_aliases()?
        .into_iter()
        .filter(|(name, _)| is_testbed_host_veth(name))
        .filter_map(|(_, alias)| alias.parse().ok())
        .collect())
}

/// (interface name, alias) of every veth in the host namespace.
fn veth_aliases() -> Result<Vec<(String, String)>> {
    #[derive(serde::Deserialize)]
    struct Link {
        ifname: String,
        #[serde(default)]
        ifalias: Option<String>,
    }
    let json = ip(&["-j", "link", "show", "type", "veth"])?;
    let json = if json.trim().is_empty() { "[]" } else { &json };
    let links: Vec<Link> = serde_json::from_str(json).map_err(|error| Error::Command {
        command: "ip -j link show type veth".into(),
        detail: format!("unexpected output: {error}"),
    })?;
    Ok(links
        .into_iter()
        .map(|link| (link.ifname, link.ifalias.unwrap_or_default()))
        .collect())
}

fn link_exists(netns: Option<&str>, name: &str) -> Result<bool> {
    let mut args = Vec::new();
    if let Some(netns) = netns {
        args.extend(["-n", netns]);
    }
    args.extend(["-o", "link", "show", "dev", name]);
    let output = run_ip(&args)?;
    Ok(output.status.success())
}

fn run_ip(args: &[&str]) -> Result<std::process::Output> {
    Command::new("ip")
        .args(args)
        .output()
        .map_err(Error::io(format!("running `ip {}`", args.join(" "))))
}

/// Runs `ip ARGS`, returning its stdout; a non-zero exit is an error carrying its stderr.
/// One `iptables` rule operation (`-A`, `-C`, `-D`) on the drop rule of
/// [`Network::block_inbound`], inside the pod's network namespace.
fn pod_iptables(net: &PodNet, operation: &str, port: u16, source: Ipv4Addr) -> Result<String> {
    let (port, source) = (port.to_string(), source.to_string());
    ip(&[
        "netns", "exec", &net.netns, "iptables", "-w", operation, "INPUT", "-p", "tcp", "-s",
        &source, "--dport", &port, "-j", "DROP",
    ])
}

fn ip(args: &[&str]) -> Result<String> {
    let output = run_ip(args)?;
    if !output.status.success() {
        return Err(Error::Command {
            command: format!("ip {}", args.join(" ")),
            detail: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_hex_takes_twelve_hex_digits_without_dashes() {
        assert_eq!(
            uid_hex("3F2A9B1C-44D0-4e1a-9c3b-0123456789ab").unwrap(),
            "3f2a9b1c44d0"
        );
        assert!(uid_hex("not-a-uid-at-all").is_err());
        assert!(uid_hex("abc").is_err());
    }

    #[test]
    fn host_veth_names_fit_in_an_interface_name() {
        let name = format!("{HOST_VETH_PREFIX}{}", uid_hex("0123456789abcdef").unwrap());
        assert!(name.len() <= 15);
        assert!(is_testbed_host_veth(&name));
        assert!(!is_testbed_host_veth("vkexp1"));
        assert!(!is_testbed_host_veth("eth0"));
    }

    #[test]
    fn allocation_skips_reserved_and_used_addresses_and_moves_forward() {
        let network = Network {
            next_ip: Mutex::new(u32::from(gateway()) + 1),
        };
        let mut used = HashSet::new();
        used.insert(Ipv4Addr::new(10, 244, 0, 3));
        assert_eq!(
            network.allocate(&used).unwrap(),
            Ipv4Addr::new(10, 244, 0, 2)
        );
        assert_eq!(
            network.allocate(&used).unwrap(),
            Ipv4Addr::new(10, 244, 0, 4)
        );
        // Freed addresses are not reused right away.
        assert_eq!(
            network.allocate(&HashSet::new()).unwrap(),
            Ipv4Addr::new(10, 244, 0, 5)
        );
        // Wraps around past the broadcast address, never handing out .0.0, .0.1 or .255.255.
        *network.next_ip.lock().unwrap() = u32::from(broadcast_address());
        assert_eq!(
            network.allocate(&HashSet::new()).unwrap(),
            Ipv4Addr::new(10, 244, 0, 2)
        );
    }
}
