//! The fixture net.rs and runtime.rs share: the real bridge, set up by the first test that needs
//! it and removed by the last one out only if these tests created it, and unique pod UIDs.
// Test helpers outside #[test] functions: failing loudly is what a test should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use vko_testbed::net::{BRIDGE, NETNS_PREFIX, Network};

struct BridgeUsers {
    count: usize,
    preexisted: Option<bool>,
}

static BRIDGE_USERS: Mutex<BridgeUsers> = Mutex::new(BridgeUsers {
    count: 0,
    preexisted: None,
});

pub struct BridgeUse {
    pub network: Arc<Network>,
}

/// Fails unless the test runs as root, which it needs for `why`.
pub fn require_root(why: &str) {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "these tests need root ({why}): run them as root"
    );
}

/// The shared bridge, for a test that needs root for `why` (said when it is not root).
pub fn bridge(why: &str) -> BridgeUse {
    require_root(why);
    let mut users = BRIDGE_USERS.lock().unwrap_or_else(|e| e.into_inner());
    if users.count == 0 {
        users.preexisted = Some(link_exists(BRIDGE));
    }
    users.count += 1;
    drop(users);
    let network = Network::setup().unwrap_or_else(|error| {
        BRIDGE_USERS.lock().unwrap_or_else(|e| e.into_inner()).count -= 1;
        panic!("Network::setup: {error}")
    });
    BridgeUse {
        network: Arc::new(network),
    }
}

/// The last user out removes the bridge (and the network's lock file) if these tests created it
/// and nothing else uses it.
fn release_bridge(network: &Network) {
    let mut users = BRIDGE_USERS.lock().unwrap_or_else(|e| e.into_inner());
    users.count -= 1;
    if users.count == 0
        && users.preexisted == Some(false)
        && bridge_ports().is_empty()
        && !any_testbed_netns()
    {
        let _ = network.teardown();
    }
}

impl Drop for BridgeUse {
    fn drop(&mut self) {
        release_bridge(&self.network);
    }
}

pub fn any_testbed_netns() -> bool {
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with(NETNS_PREFIX))
        })
        .unwrap_or(false)
}

pub fn link_exists(name: &str) -> bool {
    Command::new("ip")
        .args(["link", "show", "dev", name])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

pub fn bridge_ports() -> String {
    Command::new("ip")
        .args(["-o", "link", "show", "master", BRIDGE])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Waits until no test of this binary uses the bridge, and keeps them out while the guard lives.
// Only net.rs (its teardown test) needs it; runtime.rs compiles this module too.
#[allow(dead_code)]
pub fn exclusive_bridge() -> impl Drop {
    loop {
        let users = BRIDGE_USERS.lock().unwrap_or_else(|e| e.into_inner());
        if users.count == 0 {
            return users;
        }
        drop(users);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A pod UID unique to this run and test, starting with `mark` (four hex digits) so that a
/// leftover is recognisably a test's.
pub fn unique_uid(mark: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    // pid, time and a counter keep runs and tests apart.
    format!(
        "{mark}{:04x}-{:04x}-4{:03x}-8000-000000000000",
        std::process::id() & 0xffff,
        nanos & 0xffff,
        count & 0xfff
    )
}
