//! The fencer without Sentinel (ADR 0022) against a real valkey-server and a fake master Lease
//! API: while this pod renews the Lease it holds, it stays writable; when the API stops
//! answering it stops acknowledging writes within F of its last renew; a Lease held by another
//! pod fences it at once; given back, it unfences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{FakePods, Server, eventually, node_for};
use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use vko_sidecar::conf::RoleLine;
use vko_sidecar::error::{Result, SidecarError};
use vko_sidecar::fence::{FenceSettings, FenceState, lease_fence_loop};
use vko_sidecar::lease_api::{HeldLease, LeaseApi, Written};
use vko_sidecar::run::Keeper;
use vko_valkey::{ConnectOptions, ValkeyClient};

#[derive(Default)]
struct World {
    holder: Option<String>,
    version: u64,
    /// The API does not answer (every call fails).
    cut: bool,
    renews: u32,
}

#[derive(Default)]
struct FakeLease(Mutex<World>);

impl FakeLease {
    fn lease(world: &World) -> HeldLease {
        let mut object = Lease::default();
        object.metadata.resource_version = Some(world.version.to_string());
        HeldLease {
            holder: world.holder.clone(),
            object,
        }
    }

    fn write(&self, read: &HeldLease, holder: Option<String>) -> Result<Written> {
        let mut world = self.0.lock().unwrap();
        if world.cut {
            return Err(SidecarError::Kube("connection timed out".into()));
        }
        if read.object.metadata.resource_version != Some(world.version.to_string()) {
            return Ok(Written::Conflict);
        }
        world.version += 1;
        world.holder = holder;
        world.renews += 1;
        Ok(Written::Done(Box::new(FakeLease::lease(&world))))
    }
}

impl LeaseApi for FakeLease {
    fn read(&self) -> BoxFuture<'_, Result<Option<HeldLease>>> {
        Box::pin(async move {
            let world = self.0.lock().unwrap();
            if world.cut {
                return Err(SidecarError::Kube("connection timed out".into()));
            }
            Ok(Some(FakeLease::lease(&world)))
        })
    }

    fn renew<'a>(&'a self, lease: &'a HeldLease) -> BoxFuture<'a, Result<Written>> {
        Box::pin(async move { self.write(lease, lease.holder.clone()) })
    }

    fn transfer<'a>(&'a self, lease: &'a HeldLease, to: &'a str) -> BoxFuture<'a, Result<Written>> {
        Box::pin(async move { self.write(lease, Some(to.to_owned())) })
    }
}

async fn acknowledged(server: &Server, key: &str) -> bool {
    let mut opts = ConnectOptions::new(common::HOST, server.port);
    opts.connect_timeout = Duration::from_millis(500);
    opts.command_timeout = Duration::from_millis(300);
    let Ok(client) = ValkeyClient::connect(&opts).await else {
        return false;
    };
    let ok = client.set(key, b"v").await.is_ok();
    client.close().await;
    ok
}

/// A master of a cluster above one replica (its replica config exists) whose pod holds the
/// fake master Lease.
fn lease_holding_master() -> (Server, vko_sidecar::node::Node, Arc<FakeLease>) {
    let master = Server::start(&RoleLine::Master);
    let mut node = node_for(&master, &[], &[], Arc::new(FakePods::default()));
    std::fs::write(
        &node.topology.replica_config,
        "replicaof vko-hold.invalid 6379\n",
    )
    .unwrap();
    let lease = Arc::new(FakeLease::default());
    lease.0.lock().unwrap().holder = Some(node.my_pod.clone());
    node.lease = Some(lease.clone());
    (master, node, lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_cannot_renew_its_lease_stops_acknowledging_within_f() {
    let (master, node, lease) = lease_holding_master();
    let node = Arc::new(node);
    let state = Arc::new(FenceState::default());
    let settings = FenceSettings::default();
    let f = settings.fence_after;
    let fencer = tokio::spawn(lease_fence_loop(
        node.clone(),
        state.clone(),
        settings,
        lease.clone(),
    ));

    // The holder renews: writable, labelled as the holder.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!state.is_fenced(), "fenced while renewing");
    assert!(state.holds_lease());
    assert!(acknowledged(&master, "before").await);
    let renews = lease.0.lock().unwrap().renews;
    assert!(renews >= 4, "{renews} renews in 3 s");

    // The API stops answering (the pod is cut off): fenced within F of the last renew.
    let cut = Instant::now();
    lease.0.lock().unwrap().cut = true;
    let fenced_after = eventually("the master fences", Duration::from_secs(10), || async {
        state.is_fenced().then(|| cut.elapsed())
    })
    .await;
    assert_eq!(state.mark().unwrap().reason.as_str(), "AuthorityNotProven");
    assert!(
        fenced_after <= f + Duration::from_millis(100),
        "fenced {fenced_after:?} after the cut, F {f:?}"
    );
    assert!(!state.holds_lease());
    assert!(
        !acknowledged(&master, "while-fenced").await,
        "a fenced master acknowledged"
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        !acknowledged(&master, "still-fenced").await,
        "the pause lapsed"
    );

    // The API answers again and the Lease is still this pod's: unfenced.
    lease.0.lock().unwrap().cut = false;
    eventually("the master unfences", Duration::from_secs(5), || async {
        (!state.is_fenced()).then_some(())
    })
    .await;
    assert!(acknowledged(&master, "after").await);

    // The operator gave the Lease to another pod: fenced at once (no F to wait).
    let moved = Instant::now();
    {
        let mut world = lease.0.lock().unwrap();
        world.holder = Some("pod-1".into());
        world.version += 1;
    }
    let fenced_after_move = eventually(
        "fenced on a moved Lease",
        Duration::from_secs(5),
        || async { state.is_fenced().then(|| moved.elapsed()) },
    )
    .await;
    assert_eq!(
        state.mark().unwrap().reason.as_str(),
        "AuthorityHeldByOther"
    );
    assert!(
        fenced_after_move < f,
        "fenced {fenced_after_move:?} after the move"
    );
    assert!(!acknowledged(&master, "moved").await);
    println!(
        "MEASURED lease fence: fenced {} ms after the API cut (F {} ms), {} ms after the Lease moved",
        fenced_after.as_millis(),
        f.as_millis(),
        fenced_after_move.as_millis()
    );
    fencer.abort();
}

/// The keeper labels a master `master` only while it holds the Lease renewed within F. A server
/// stopped longer than F renews nothing (the fencer's rounds end at its unanswered ROLE), so on
/// SIGCONT the pod must not count as holding it before a round renewed it again — the keeper's
/// first tick after the resume would otherwise label it master next to the pod the operator
/// promoted meanwhile (seen once on the testbed: two master labels after a 60 s pause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_master_stops_holding_its_lease_within_f() {
    let (master, node, lease) = lease_holding_master();
    let state = Arc::new(FenceState::default());
    let settings = FenceSettings::default();
    let f = settings.fence_after;
    let fencer = tokio::spawn(lease_fence_loop(
        Arc::new(node),
        state.clone(),
        settings,
        lease.clone(),
    ));
    eventually("the holder renews", Duration::from_secs(5), || async {
        state.holds_lease().then_some(())
    })
    .await;

    master.proc.signal("STOP");
    let stopped = Instant::now();
    let released_after = eventually(
        "the stopped master no longer counts as holding the Lease",
        f + Duration::from_secs(2),
        || async { (!state.holds_lease()).then(|| stopped.elapsed()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!state.holds_lease(), "held again while stopped");
    master.proc.signal("CONT");
    println!(
        "MEASURED lease hold: released {} ms after the server stopped (F {} ms)",
        released_after.as_millis(),
        f.as_millis()
    );
    assert!(
        released_after <= f,
        "released {released_after:?} after the stop, F {f:?}"
    );
    // Answering again and still the holder: it renews and holds it again.
    eventually(
        "held again after the resume",
        Duration::from_secs(5),
        || async { state.holds_lease().then_some(()) },
    )
    .await;
    fencer.abort();
}

/// A replica left following a pod that is no longer master (it joined during a switchover:
/// chained behind a replica) re-points at the master Lease's holder once it was seen twice and
/// answers master — nothing else would move it without Sentinel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chained_replica_follows_the_lease_holder() {
    let holder = Server::start(&RoleLine::Master);
    let middle = Server::start(&RoleLine::ReplicaOf(holder.endpoint()));
    let chained = Server::start(&RoleLine::ReplicaOf(middle.endpoint()));
    let mut node = node_for(
        &chained,
        &[&holder, &middle],
        &[],
        Arc::new(FakePods::default()),
    );
    std::fs::write(
        &node.topology.replica_config,
        format!("replicaof {} {}\n", common::HOST, middle.port),
    )
    .unwrap();
    let lease = Arc::new(FakeLease::default());
    lease.0.lock().unwrap().holder = Some(format!("pod-{}", holder.port));
    node.lease = Some(lease.clone());
    let node = Arc::new(node);
    let state = Arc::new(FenceState::default());
    let fencer = tokio::spawn(lease_fence_loop(
        node.clone(),
        state.clone(),
        FenceSettings::default(),
        lease,
    ));
    let mut keeper = Keeper::with_fence(node, state);
    let client = chained.client().await;
    let started = Instant::now();
    let upstream = loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the chained replica never followed the holder"
        );
        let _ = keeper.tick().await;
        if let Some(upstream) = client
            .info_replication()
            .await
            .ok()
            .and_then(|r| r.upstream)
            .filter(|u| u.master_port == holder.port)
        {
            break upstream;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!(
        "MEASURED chained replica re-pointed at the holder after {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(upstream.master_host, common::HOST);
    client.close().await;
    fencer.abort();
}
