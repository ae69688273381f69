//! Pod networking against the real kernel (needs root). A testbed may be running on the same
//! machine: these tests use the real bridge but only ever remove what they created themselves.
// Test helpers outside #[test] functions: failing loudly is what a test should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sched::{CloneFlags, setns};
use vko_testbed::net::{BRIDGE, NETNS_PREFIX, Network, PodNet, gateway};

mod common;
use common::{BridgeUse, any_testbed_netns, bridge_ports, link_exists, unique_uid};

const NEEDS_ROOT_FOR: &str = "network namespaces, veths, a bridge";

fn bridge() -> BridgeUse {
    common::bridge(NEEDS_ROOT_FOR)
}

/// A pod attachment that is detached on drop (also when the test fails).
struct Pod {
    network: Arc<Network>,
    net: PodNet,
}

impl Pod {
    fn attach(bridge: &BridgeUse) -> Pod {
        let uid = unique_uid("feed");
        let net = bridge
            .network
            .attach_pod(&uid)
            .unwrap_or_else(|error| panic!("attach_pod({uid}): {error}"));
        Pod {
            network: bridge.network.clone(),
            net,
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.network.detach_pod(&self.net);
    }
}

fn ip_output(args: &[&str]) -> String {
    let output = Command::new("ip").args(args).output().unwrap();
    assert!(output.status.success(), "ip {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs `f` on a thread that joined the pod's network namespace (netns membership is per thread).
fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap();
        setns(&file, CloneFlags::CLONE_NEWNET).unwrap();
        f()
    })
    .join()
    .unwrap()
}

fn listen_in(pod: &PodNet) -> (TcpListener, SocketAddr) {
    let ip = pod.ip;
    let listener = in_netns(&pod.netns, move || TcpListener::bind((ip, 0)).unwrap());
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

fn connects(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(1500)).is_ok()
}

fn connects_from(pod: &PodNet, addr: SocketAddr) -> bool {
    in_netns(&pod.netns, move || connects(addr))
}

fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn in_pod_range(ip: Ipv4Addr) -> bool {
    let [a, b, c, d] = ip.octets();
    a == 10 && b == 244 && ip != gateway() && !(c == 0 && d == 0) && !(c == 255 && d == 255)
}

// ---- tests ----

#[test]
fn pods_get_distinct_ips_a_default_route_and_reach_each_other_and_the_host() {
    let bridge = bridge();
    let a = Pod::attach(&bridge);
    let b = Pod::attach(&bridge);

    assert_ne!(a.net.ip, b.net.ip);
    assert!(in_pod_range(a.net.ip), "{:?}", a.net);
    assert!(in_pod_range(b.net.ip), "{:?}", b.net);
    for pod in [&a.net, &b.net] {
        assert!(pod.netns.starts_with(NETNS_PREFIX), "{pod:?}");
        assert!(pod.host_veth.len() <= 15, "{pod:?}");
        assert!(std::path::Path::new("/run/netns").join(&pod.netns).exists());
        let routes = ip_output(&["-n", &pod.netns, "route", "show", "default"]);
        assert!(routes.contains(&format!("via {}", gateway())), "{routes}");
        let lo = ip_output(&["-n", &pod.netns, "-o", "link", "show", "lo"]);
        assert!(lo.contains(",UP"), "{lo}");
        let ports = bridge_ports();
        assert!(ports.contains(&pod.host_veth), "{ports}");
    }

    let (_listener_a, addr_a) = listen_in(&a.net);
    assert!(connects(addr_a), "host -> pod A {addr_a}");
    assert!(connects_from(&b.net, addr_a), "pod B -> pod A {addr_a}");
    // The gateway (where the API server listens) is reachable from a pod.
    let host_listener = TcpListener::bind((gateway(), 0)).unwrap();
    let gateway_addr = host_listener.local_addr().unwrap();
    assert!(connects_from(&b.net, gateway_addr), "pod B -> gateway");
}

#[test]
fn attach_is_idempotent_and_detach_frees_everything() {
    let bridge = bridge();
    let pod = Pod::attach(&bridge);
    let uid_again = format!("{}-0000", pod.net.netns.trim_start_matches(NETNS_PREFIX));
    let again = bridge.network.attach_pod(&uid_again).unwrap();
    assert_eq!(again, pod.net);

    bridge.network.detach_pod(&pod.net).unwrap();
    assert!(
        !std::path::Path::new("/run/netns")
            .join(&pod.net.netns)
            .exists()
    );
    assert!(!link_exists(&pod.net.host_veth));
    // Detaching twice is fine.
    bridge.network.detach_pod(&pod.net).unwrap();
}

#[test]
fn detach_drops_the_hosts_arp_entry_so_a_reused_ip_is_reachable_at_once() {
    let bridge = bridge();
    let bridge_mac =
        || std::fs::read_to_string(format!("/sys/class/net/{BRIDGE}/address")).unwrap();
    let gateway_mac = bridge_mac();
    let pod = Pod::attach(&bridge);
    let link = ip_output(&["-n", &pod.net.netns, "-o", "link", "show", "dev", "eth0"]);
    let mac = link
        .split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("no MAC in {link}"))
        .to_string();
    let (_listener, addr) = listen_in(&pod.net);
    assert!(connects(addr), "host -> pod {addr}");
    let ip = pod.net.ip.to_string();
    let learned = ip_output(&["neigh", "show", "to", &ip, "dev", BRIDGE]);
    assert!(learned.contains(&mac), "the host learned {mac}: {learned}");

    bridge.network.detach_pod(&pod.net).unwrap();
    // A pod that gets this IP next has another MAC: the host must not keep sending to this one.
    let left = ip_output(&["neigh", "show", "to", &ip, "dev", BRIDGE]);
    assert!(!left.contains(&mac), "{left}");
    // Pods' ARP entries for the gateway stay right: the bridge's MAC is not its lowest port's.
    assert_eq!(bridge_mac(), gateway_mac);
}

#[test]
fn an_ip_still_attached_is_never_handed_out_again() {
    let bridge = bridge();
    let first = Pod::attach(&bridge);
    // Another process's allocator (a fresh `Network`) must see the IPs in use too.
    let other_process = Network::setup().unwrap();
    let second_net = other_process.attach_pod(&unique_uid("feed")).unwrap();
    let second = Pod {
        network: bridge.network.clone(),
        net: second_net,
    };
    assert_ne!(first.net.ip, second.net.ip);
    let third = Pod::attach(&bridge);
    assert_ne!(third.net.ip, first.net.ip);
    assert_ne!(third.net.ip, second.net.ip);
}

#[test]
fn partition_cuts_a_pod_off_and_heal_restores_it() {
    let bridge = bridge();
    let a = Pod::attach(&bridge);
    let b = Pod::attach(&bridge);
    let (_listener, addr_a) = listen_in(&a.net);
    assert!(connects(addr_a));
    assert!(connects_from(&b.net, addr_a));

    bridge.network.partition(&a.net).unwrap();
    assert!(!connects(addr_a), "host still reaches the partitioned pod");
    assert!(
        !connects_from(&b.net, addr_a),
        "pod B still reaches the partitioned pod"
    );
    // Pod B is unaffected.
    let (_listener_b, addr_b) = listen_in(&b.net);
    assert!(connects(addr_b));

    bridge.network.heal(&a.net).unwrap();
    eventually("the host reaches the healed pod", || connects(addr_a));
    eventually("pod B reaches the healed pod", || {
        connects_from(&b.net, addr_a)
    });
}

#[test]
fn a_bad_pod_uid_is_refused() {
    let bridge = bridge();
    assert!(bridge.network.attach_pod("not-a-uid").is_err());
}

#[test]
fn teardown_removes_every_namespace_and_the_bridge() {
    // Teardown removes everything named vkotb-*: wait until the other tests of this file are done
    // and keep them out meanwhile, and only run it when no testbed uses the network.
    common::require_root(NEEDS_ROOT_FOR);
    let _exclusive = common::exclusive_bridge();
    if link_exists(BRIDGE) || any_testbed_netns() {
        eprintln!("skipped: a testbed network is in use on this machine; teardown would break it");
        return;
    }
    let network = Network::setup().unwrap();
    let pod = network.attach_pod(&unique_uid("feed"));
    let torn_down = network.teardown();
    let pod = pod.unwrap();
    torn_down.unwrap();
    assert!(!link_exists(BRIDGE));
    assert!(!link_exists(&pod.host_veth));
    assert!(!std::path::Path::new("/run/netns").join(&pod.netns).exists());
    assert!(!Path::new("/run/vkotb0.lock").exists());
    // Teardown twice is fine.
    network.teardown().unwrap();
}
