//! The sidecar's logic against real valkey-server / valkey-sentinel processes on 127.0.0.1.
//! The Kubernetes API is the `FakePods` recorder; the real wiring runs on the testbed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{
    FakePods, HOST, MONITOR, Sentinel, Server, WriterLog, eventually, missing, node_for, writer,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vko_authority::HOLD_HOST;
use vko_authority::InstanceRole;
use vko_sidecar::conf::{RoleLine, role_line_of};
use vko_sidecar::decide::{HoldExit, LiveRole};
use vko_sidecar::handover::{
    HandoverOutcome, HandoverSettings, SuccessorWait, ToLeaving, await_successor, handover,
};
use vko_sidecar::init::{InitSettings, decide_role};
use vko_sidecar::node::Node;
use vko_sidecar::run::{Keeper, Shared, router};
use vko_sidecar::topology::Endpoint;
use vko_valkey::parse::{ReplicationRole, RoleReply};
use vko_valkey::{ConnectOptions, SentinelClient, ValkeyClient};

async fn three_servers() -> (Server, Server, Server) {
    let master = Server::start(&RoleLine::Master);
    let r1 = Server::start(&RoleLine::ReplicaOf(master.endpoint()));
    let r2 = Server::start(&RoleLine::ReplicaOf(master.endpoint()));
    let m = master.client().await;
    eventually("2 replicas online", Duration::from_secs(20), || async {
        let info = m.info_replication().await.ok()?;
        (info.replicas.len() == 2
            && info
                .replicas
                .iter()
                .all(|r| r.state == vko_valkey::parse::ReplicaSyncState::Online))
        .then_some(())
    })
    .await;
    (master, r1, r2)
}

async fn three_sentinels(master: &Server) -> Vec<Sentinel> {
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
    for s in &sentinels {
        let c = s.client().await;
        eventually(
            "sentinel sees 2 replicas and 2 peers",
            Duration::from_secs(40),
            || async {
                let m = c.master(MONITOR).await.ok()?;
                (m.num_replicas == 2 && m.num_other_sentinels == 2).then_some(())
            },
        )
        .await;
    }
    sentinels
}

async fn sentinel_master(sentinels: Vec<Endpoint>) -> Option<Endpoint> {
    for ep in sentinels {
        let mut opts = ConnectOptions::new(ep.host.clone(), ep.port);
        opts.connect_timeout = Duration::from_millis(500);
        opts.command_timeout = Duration::from_millis(500);
        if let Ok(c) = SentinelClient::connect(&opts).await
            && let Ok(Some((host, port))) = c.get_master_addr_by_name(MONITOR).await
        {
            return Some(Endpoint::new(host, port));
        }
    }
    None
}

async fn role_master(candidates: Vec<Endpoint>) -> Option<Endpoint> {
    for ep in candidates {
        let mut opts = ConnectOptions::new(ep.host.clone(), ep.port);
        opts.connect_timeout = Duration::from_millis(500);
        opts.command_timeout = Duration::from_millis(500);
        if let Ok(c) = ValkeyClient::connect(&opts).await
            && let Ok(RoleReply::Master { .. }) = c.role().await
        {
            return Some(ep);
        }
    }
    None
}

fn report(name: &str, acked: usize, errors: u64, lost: usize, pause: Duration, gap: Duration) {
    println!(
        "MEASURED {name}: acked={acked} errors={errors} lost={lost} write_pause_ms={} max_write_gap_ms={}",
        pause.as_millis(),
        gap.as_millis()
    );
}

/// Hands the master of `node` over while a writer writes through `find_master`, `settle` after,
/// and returns the new master, the write pause and what the writer saw.
async fn handover_under_writes<F, Fut>(
    node: &Node,
    prefix: &str,
    settle: Duration,
    find_master: F,
) -> (Endpoint, Duration, WriterLog)
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Option<Endpoint>> + Send + 'static,
{
    let stop = Arc::new(AtomicBool::new(false));
    let writer_task = tokio::spawn(writer(stop.clone(), prefix.into(), find_master));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let outcome = handover(node, &HandoverSettings::default(), ToLeaving::Allowed)
        .await
        .unwrap();
    tokio::time::sleep(settle).await;
    stop.store(true, Ordering::SeqCst);
    let log = writer_task.await.unwrap();
    let HandoverOutcome::HandedOver {
        new_master,
        write_pause,
    } = outcome
    else {
        panic!("no handover: {outcome:?}")
    };
    (new_master, write_pause, log)
}

/// Every write the writer saw acknowledged is on `promoted`; the figures are printed.
async fn assert_no_acknowledged_write_lost(
    name: &str,
    promoted: &ValkeyClient,
    log: &WriterLog,
    write_pause: Duration,
) {
    let lost = missing(promoted, &log.acked).await;
    report(
        name,
        log.acked.len(),
        log.errors,
        lost,
        write_pause,
        log.max_gap,
    );
    assert!(
        log.acked.len() > 200,
        "writer barely wrote: {}",
        log.acked.len()
    );
    assert_eq!(lost, 0, "OK-acknowledged writes lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handover_with_sentinel_loses_no_acknowledged_write() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (master, r1, r2) = three_servers().await;
    let sentinels = three_sentinels(&master).await;
    let pods = Arc::new(FakePods::default());
    let node = node_for(
        &master,
        &[&r1, &r2],
        &sentinels.iter().collect::<Vec<_>>(),
        pods.clone(),
    );

    let eps: Vec<Endpoint> = sentinels.iter().map(Sentinel::endpoint).collect();
    let (new_master, write_pause, log) =
        handover_under_writes(&node, "ws", Duration::from_secs(3), move || {
            sentinel_master(eps.clone())
        })
        .await;
    assert!(
        new_master == r1.endpoint() || new_master == r2.endpoint(),
        "{new_master}"
    );
    // The old master became a replica of the new one.
    match master.client().await.role().await.unwrap() {
        RoleReply::Replica { master_port, .. } => assert_eq!(master_port, new_master.port),
        other => panic!("old master: {other:?}"),
    }
    let promoted = ValkeyClient::connect(&ConnectOptions::new(HOST, new_master.port))
        .await
        .unwrap();
    assert_no_acknowledged_write_lost("sentinel-handover", &promoted, &log, write_pause).await;
    assert_eq!(
        pods.last_label(&format!("pod-{}", master.port)),
        Some(InstanceRole::Replica)
    );
    // The file of the old master describes a safe restart: the hold it had as master stays
    // (the new master's address is an IP here, which is never written).
    assert!(matches!(
        role_line_of(&std::fs::read_to_string(master.config_path()).unwrap()),
        RoleLine::Master | RoleLine::Hold { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handover_without_sentinel_loses_no_acknowledged_write() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (master, r1, r2) = three_servers().await;
    let pods = Arc::new(FakePods::default());
    let node = node_for(&master, &[&r1, &r2], &[], pods.clone());

    let all = vec![master.endpoint(), r1.endpoint(), r2.endpoint()];
    let (new_master, write_pause, log) =
        handover_under_writes(&node, "wn", Duration::from_secs(2), move || {
            role_master(all.clone())
        })
        .await;
    let (target, other) = if new_master == r1.endpoint() {
        (&r1, &r2)
    } else {
        (&r2, &r1)
    };
    assert_eq!(new_master, target.endpoint());
    let promoted = target.client().await;
    assert!(matches!(
        promoted.role().await.unwrap(),
        RoleReply::Master { .. }
    ));
    assert_no_acknowledged_write_lost("no-sentinel-handover", &promoted, &log, write_pause).await;
    // Old master and the other replica follow the promoted one.
    for server in [&master, other] {
        match server.client().await.role().await.unwrap() {
            RoleReply::Replica { master_port, .. } => assert_eq!(master_port, target.port),
            r => panic!("{}: {r:?}", server.port),
        }
    }
    // The promoted pod is labelled master (the operator adopts it), the old one replica.
    assert_eq!(
        pods.last_label(&format!("pod-{}", target.port)),
        Some(InstanceRole::Master)
    );
    assert_eq!(
        pods.last_label(&format!("pod-{}", master.port)),
        Some(InstanceRole::Replica)
    );
}

/// Every pod deleted at once (issue 15): the stopping master's replicas are leaving too. The
/// drain serves writes (the master is not paused) until a replica whose pod stays is online,
/// then hands over to that one, never to the replica still leaving; nothing acknowledged is
/// lost. `sentinels` empty: the direct promotion without Sentinel.
async fn a_master_whose_replicas_all_leave_waits_for_one_that_stays(with_sentinel: bool) {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (master, r1, r2) = three_servers().await;
    let sentinels = if with_sentinel {
        three_sentinels(&master).await
    } else {
        Vec::new()
    };
    let pods = Arc::new(FakePods::default());
    for replica in [&r1, &r2] {
        pods.leaving
            .lock()
            .unwrap()
            .insert(format!("pod-{}", replica.port));
    }
    let node = Arc::new(node_for(
        &master,
        &[&r1, &r2],
        &sentinels.iter().collect::<Vec<_>>(),
        pods.clone(),
    ));
    let settings = HandoverSettings {
        successor_wait: Duration::from_secs(40),
        ..HandoverSettings::default()
    };

    // No online replica stays: the handover does not pick a leaving one (nothing paused) until
    // the wait for one that stays is over.
    assert_eq!(
        handover(&node, &settings, ToLeaving::WaitForOneThatStays)
            .await
            .unwrap(),
        HandoverOutcome::NoReplicaThatStays
    );
    // No replica stays and none comes: the wait ends at its limit, having paused nothing.
    let short = HandoverSettings {
        successor_wait: Duration::from_millis(1500),
        ..settings.clone()
    };
    assert!(matches!(
        await_successor(&node, &short).await,
        SuccessorWait::TimedOut { .. }
    ));
    if !with_sentinel {
        // Both replica pods gone and not recreated (the cluster itself is being deleted): the
        // wait ends after the replacement grace, long before its limit.
        let replica_pods = [format!("pod-{}", r1.port), format!("pod-{}", r2.port)];
        *pods.gone.lock().unwrap() = replica_pods.iter().cloned().collect();
        pods.leaving.lock().unwrap().clear();
        assert!(matches!(
            await_successor(&node, &settings).await,
            SuccessorWait::NoReplacement { .. }
        ));
        pods.gone.lock().unwrap().clear();
        // The replica pods leaving, then the API refusing the sidecar (its Role deleted with
        // the namespace): the wait ends at once.
        *pods.leaving.lock().unwrap() = replica_pods.iter().cloned().collect();
        let refusing = tokio::spawn({
            let pods = pods.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(700)).await;
                pods.refused.store(true, Ordering::SeqCst);
            }
        });
        assert!(matches!(
            await_successor(&node, &settings).await,
            SuccessorWait::NoReplacement { .. }
        ));
        refusing.await.unwrap();
        pods.refused.store(false, Ordering::SeqCst);
        *pods.leaving.lock().unwrap() = replica_pods.into_iter().collect();
    }

    let stop = Arc::new(AtomicBool::new(false));
    let all = vec![master.endpoint(), r1.endpoint(), r2.endpoint()];
    let eps: Vec<Endpoint> = sentinels.iter().map(Sentinel::endpoint).collect();
    let writer_task = tokio::spawn(writer(stop.clone(), "wl".into(), move || {
        let (all, eps) = (all.clone(), eps.clone());
        async move {
            if eps.is_empty() {
                role_master(all).await
            } else {
                sentinel_master(eps).await
            }
        }
    }));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let shared = Shared::new(node.clone(), settings);
    let drain = tokio::spawn({
        let shared = shared.clone();
        async move { shared.drain().await }
    });
    // The drain waits and the master takes writes meanwhile: a paused server would not answer
    // within the command timeout.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !drain.is_finished(),
        "the drain did not wait for a successor"
    );
    let mut opts = ConnectOptions::new(HOST, master.port);
    opts.command_timeout = Duration::from_secs(1);
    let direct = ValkeyClient::connect(&opts).await.unwrap();
    direct.set("written-while-waiting", b"1").await.unwrap();
    direct.close().await;

    // r2's pod is back (a replacement under its name, already synced): the master hands over
    // to it, not to r1, which is still leaving.
    pods.leaving
        .lock()
        .unwrap()
        .remove(&format!("pod-{}", r2.port));
    let report = tokio::time::timeout(Duration::from_secs(60), drain)
        .await
        .unwrap()
        .unwrap();
    assert!(report.ok, "{}", report.message);
    assert!(
        report
            .message
            .starts_with(&format!("handed over to {}", r2.endpoint())),
        "{}",
        report.message
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let log = writer_task.await.unwrap();
    let promoted = r2.client().await;
    assert!(matches!(
        promoted.role().await.unwrap(),
        RoleReply::Master { .. }
    ));
    let name = if with_sentinel {
        "every-pod-leaving-sentinel"
    } else {
        "every-pod-leaving-direct"
    };
    assert_none_lost_measured(name, &promoted, &log).await;
    assert_eq!(
        missing(&promoted, &["written-while-waiting".to_owned()]).await,
        0
    );
}

/// Every write the writer saw acknowledged is on `promoted`; the figures are printed.
async fn assert_none_lost_measured(name: &str, promoted: &ValkeyClient, log: &WriterLog) {
    let lost = missing(promoted, &log.acked).await;
    report_measured(name, log, lost);
    assert!(
        log.acked.len() > 200,
        "writer barely wrote: {}",
        log.acked.len()
    );
    assert_eq!(lost, 0, "OK-acknowledged writes lost");
}

fn report_measured(name: &str, log: &WriterLog, lost: usize) {
    println!(
        "MEASURED {name}: acked={} errors={} lost={lost} max_write_gap_ms={}",
        log.acked.len(),
        log.errors,
        log.max_gap.as_millis()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_sentinel_a_master_whose_replicas_all_leave_hands_over_to_one_that_stays() {
    a_master_whose_replicas_all_leave_waits_for_one_that_stays(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_sentinel_a_master_whose_replicas_all_leave_hands_over_to_one_that_stays() {
    a_master_whose_replicas_all_leave_waits_for_one_that_stays(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crashed_master_restarts_in_the_hold_and_sentinel_fails_over() {
    let (mut master, r1, r2) = three_servers().await;
    let sentinels = three_sentinels(&master).await;
    let sentinel_refs: Vec<&Sentinel> = sentinels.iter().collect();
    let pods = Arc::new(FakePods::default());
    let node_m = Arc::new(node_for(&master, &[&r1, &r2], &sentinel_refs, pods.clone()));
    let node_r1 = Arc::new(node_for(&r1, &[&master, &r2], &sentinel_refs, pods.clone()));

    let m = master.client().await;
    for i in 0..1000 {
        m.set(&format!("h:{i}"), b"v").await.unwrap();
    }
    assert_eq!(m.wait(2, Duration::from_secs(5)).await.unwrap(), 2);
    drop(m);

    // The boot decision a pod would take now (ADR 0005): a replica of the named master; the
    // named master itself, with replicas holding data, the hold.
    let init = InitSettings {
        master_template: "/nonexistent".into(),
        data_dir: "/nonexistent".into(),
        attempts: 1,
        retry_delay: Duration::ZERO,
    };
    assert_eq!(
        decide_role(&node_r1, &init).await.unwrap(),
        RoleLine::ReplicaOf(master.endpoint())
    );
    assert_eq!(
        decide_role(&node_m, &init).await.unwrap(),
        RoleLine::Hold { port: master.port }
    );

    let mut keeper_m = Keeper::new(node_m.clone());
    let tick = keeper_m.tick().await.unwrap();
    assert_eq!(
        (tick.live, tick.label),
        (LiveRole::Master, InstanceRole::Master)
    );
    // While master, the file says hold.
    assert_eq!(
        role_line_of(&std::fs::read_to_string(master.config_path()).unwrap()),
        RoleLine::Hold { port: master.port }
    );
    assert_eq!(
        pods.last_label(&format!("pod-{}", master.port)),
        Some(InstanceRole::Master)
    );

    // Crash: kill -9 and restart from the file, persistence off, faster than down-after.
    master.crash_and_restart();
    let restarted = master.client().await;
    let info = restarted.info_replication().await.unwrap();
    assert_eq!(info.role, ReplicationRole::Replica);
    assert_eq!(info.upstream.unwrap().master_host, HOLD_HOST);
    assert_eq!(restarted.dbsize().await.unwrap(), 0);
    // A write is refused: it does not serve as an empty master.
    assert!(restarted.set("x", b"y").await.is_err());
    // The replicas keep their data: they cannot sync from a server in the hold.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for r in [&r1, &r2] {
        assert_eq!(
            r.client().await.dbsize().await.unwrap(),
            1000,
            "replica {}",
            r.port
        );
    }

    // The sidecar sees the restart in the hold, Sentinel still names this pod, replicas hold
    // data: it asks Sentinel for a failover and follows the new master.
    let tick = keeper_m.tick().await.unwrap();
    assert_eq!(tick.hold_exit, Some(HoldExit::RequestFailover));
    assert_eq!(tick.label, InstanceRole::Replica);
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    let new_master = loop {
        if let Ok(tick) = keeper_m.tick().await
            && let LiveRole::ReplicaOf(m) = tick.live
            && (m.port == r1.port || m.port == r2.port)
        {
            break m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hold never followed a new master"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let promoted = ValkeyClient::connect(&ConnectOptions::new(HOST, new_master.port))
        .await
        .unwrap();
    assert!(matches!(
        promoted.role().await.unwrap(),
        RoleReply::Master { .. }
    ));
    assert_eq!(promoted.dbsize().await.unwrap(), 1000);
    eventually(
        "the restarted pod resynced from the data",
        Duration::from_secs(30),
        || {
            let c = &restarted;
            async move { (c.dbsize().await.ok()? == 1000).then_some(()) }
        },
    )
    .await;
    println!(
        "MEASURED hold: replicas kept 1000/1000 keys; new master {new_master} has {} keys",
        promoted.dbsize().await.unwrap()
    );
}

/// ADR 0050: the master crashes and restarts in the hold, and the only Sentinels are new ones
/// that never saw a replica (they learn replicas from the master's INFO, and a server in the hold
/// lists none): each refuses the failover with NOGOODSLAVE. The sidecar copies the data back from
/// the most caught-up replica and serves it; the Sentinels keep naming the same server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_held_master_no_sentinel_can_fail_over_copies_its_data_back_from_a_replica() {
    let (mut master, r1, r2) = three_servers().await;
    let m = master.client().await;
    for i in 0..1000 {
        m.set(&format!("relay:{i}"), b"v").await.unwrap();
    }
    assert_eq!(m.wait(2, Duration::from_secs(5)).await.unwrap(), 2);
    drop(m);
    // What the sidecar keeps in a master's file (ADR 0005): a restart comes back in the hold.
    let before = node_for(&master, &[&r1, &r2], &[], Arc::new(FakePods::default()));
    before
        .keep_role_line(&RoleLine::Hold { port: master.port })
        .unwrap();
    master.crash_and_restart();
    let restarted = master.client().await;
    assert_eq!(restarted.dbsize().await.unwrap(), 0);
    let info = restarted.info_replication().await.unwrap();
    assert_eq!(info.upstream.unwrap().master_host, HOLD_HOST);

    // Sentinels that start now see a master in the hold and no replica.
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
    for s in &sentinels {
        let c = s.client().await;
        eventually("sentinel sees 2 peers", Duration::from_secs(40), || async {
            let m = c.master(MONITOR).await.ok()?;
            (m.num_other_sentinels == 2).then_some(())
        })
        .await;
        assert_eq!(c.master(MONITOR).await.unwrap().num_replicas, 0);
    }
    let sentinel_refs: Vec<&Sentinel> = sentinels.iter().collect();
    let pods = Arc::new(FakePods::default());
    let node_m = Arc::new(node_for(&master, &[&r1, &r2], &sentinel_refs, pods.clone()));

    // The replicas' key counts, sampled until the relay is done: never below what they had.
    let stop = Arc::new(AtomicBool::new(false));
    let watch = {
        let stop = stop.clone();
        let (c1, c2) = (r1.client().await, r2.client().await);
        tokio::spawn(async move {
            let mut lowest = u64::MAX;
            while !stop.load(Ordering::SeqCst) {
                for c in [&c1, &c2] {
                    if let Ok(n) = c.dbsize().await {
                        lowest = lowest.min(n);
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            lowest
        })
    };

    // The first pass asks for the failover, is refused by all three, starts the relay and, on
    // 127.0.0.1 with a small dataset, may finish it at once.
    let started = std::time::Instant::now();
    let mut keeper = Keeper::new(node_m.clone());
    let mut tick = keeper.tick().await.unwrap();
    assert_eq!(tick.hold_exit, Some(HoldExit::RequestFailover));
    let deadline = started + Duration::from_secs(40);
    while tick.live != LiveRole::Master {
        assert!(
            std::time::Instant::now() < deadline,
            "the relay never finished: {tick:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        tick = keeper.tick().await.unwrap();
    }
    let took = started.elapsed();
    assert_eq!(tick.label, InstanceRole::Master);
    // The data came back: not a promotion of the empty server.
    assert_eq!(restarted.dbsize().await.unwrap(), 1000);
    // Both replicas follow it with their link up (the relay source re-pointed, unpaused; the
    // other resynced from the data), and writes are served and reach both.
    for r in [&r1, &r2] {
        let c = r.client().await;
        eventually(
            "the replica follows the master",
            Duration::from_secs(20),
            || async {
                let info = c.info_replication().await.ok()?;
                info.applied_from(HOST, master.port).map(|_| ())
            },
        )
        .await;
    }
    restarted.set("after", b"relay").await.unwrap();
    assert_eq!(restarted.wait(2, Duration::from_secs(20)).await.unwrap(), 2);
    stop.store(true, Ordering::SeqCst);
    let lowest = watch.await.unwrap();
    assert!(lowest >= 1000, "a replica fell to {lowest} keys");
    // The Sentinels never changed their answer, and now list both replicas.
    let endpoints: Vec<Endpoint> = sentinels.iter().map(Sentinel::endpoint).collect();
    assert_eq!(sentinel_master(endpoints).await, Some(master.endpoint()));
    let c = sentinels[0].client().await;
    eventually(
        "sentinel lists 2 replicas",
        Duration::from_secs(30),
        || async { (c.master(MONITOR).await.ok()?.num_replicas == 2).then_some(()) },
    )
    .await;
    println!("MEASURED relay: copied 1000 keys back in {took:?}; replicas never below {lowest}");
}

async fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect((HOST, port)).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_acts_only_when_terminating() {
    let master = Server::start(&RoleLine::Master);
    let pods = Arc::new(FakePods::default());
    let shared = Shared::new(
        Arc::new(node_for(&master, &[], &[], pods.clone())),
        HandoverSettings::default(),
    );
    let port = common::free_port();
    let listener = tokio::net::TcpListener::bind((HOST, port)).await.unwrap();
    let server = tokio::spawn(axum::serve(listener, router(shared.clone())).into_future());

    assert_eq!(http_get(port, "/healthz").await.0, 200);
    // No keeper pass yet: not ready.
    assert_eq!(http_get(port, "/readyz").await.0, 503);
    // Not terminating (neither SIGTERM nor deletionTimestamp): refused, nothing done.
    let (status, _) = http_get(port, "/drain").await;
    assert_eq!(status, 409);
    assert!(matches!(
        master.client().await.role().await.unwrap(),
        RoleReply::Master { .. }
    ));
    // The pod is being deleted: the drain runs (a master without replicas has nobody to hand to).
    pods.terminating.store(true, Ordering::SeqCst);
    let (status, body) = http_get(port, "/drain").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("without an online replica"), "{body}");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_init_follows_the_other_sentinels_not_the_stale_seed() {
    let master = Server::start(&RoleLine::Master);
    let replica = Server::start(&RoleLine::ReplicaOf(master.endpoint()));
    let sentinels: Vec<Sentinel> = (0..2).map(|_| Sentinel::start(master.port)).collect();
    for s in &sentinels {
        let c = s.client().await;
        eventually(
            "sentinel sees the replica and its peer",
            Duration::from_secs(40),
            || async {
                let m = c.master(MONITOR).await.ok()?;
                (m.num_replicas == 1 && m.num_other_sentinels == 1).then_some(())
            },
        )
        .await;
    }
    // A failover happened while this Sentinel was away: the rendered seed is now stale.
    sentinels[0].client().await.failover(MONITOR).await.unwrap();
    for s in &sentinels {
        let c = s.client().await;
        eventually(
            "sentinels name the replica",
            Duration::from_secs(30),
            || async {
                let addr = c.get_master_addr_by_name(MONITOR).await.ok()??;
                (addr.1 == replica.port).then_some(())
            },
        )
        .await;
    }

    let dir = common::temp_dir("sentinel-init");
    let port = common::free_port();
    let template = dir.path().join("template.conf");
    std::fs::write(
        &template,
        format!(
            "port {port}\nbind {HOST}\nsentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n\
             sentinel monitor {MONITOR} {HOST} {} 2\nsentinel down-after-milliseconds {MONITOR} 5000\n",
            master.port
        ),
    )
    .unwrap();
    let output = dir.path().join("sentinel.conf");
    let init = vko_sidecar::sentinel_init::SentinelInit {
        template,
        output: output.clone(),
        monitor_name: MONITOR.to_owned(),
        me: Endpoint::new(HOST, port),
        others: sentinels.iter().map(Sentinel::endpoint).collect(),
        password: None,
        sentinel_auth_disabled: false,
        myid: vko_sidecar::conf::sentinel_myid("vkt-sentinel-2", "test"),
        attempts: 2,
        retry_delay: Duration::from_millis(200),
    };
    let dialer = vko_valkey::Dialer::new(None);
    let target = vko_sidecar::sentinel_init::sentinel_init(&dialer, &init)
        .await
        .unwrap();
    assert_eq!(target, Some(replica.endpoint()));

    // The written config starts a Sentinel that monitors the current master under its stable id.
    let _proc = common::Proc::spawn("valkey-sentinel", &[&output], dir.path(), "valkey-sentinel");
    let mut opts = ConnectOptions::new(HOST, port);
    opts.connect_timeout = Duration::from_millis(500);
    let client = eventually("new sentinel answers", Duration::from_secs(10), || async {
        SentinelClient::connect(&opts).await.ok()
    })
    .await;
    let view = client.master(MONITOR).await.unwrap();
    assert_eq!((view.host.as_str(), view.port), (HOST, replica.port));
    // Its peers know it by the stable id (so a restart does not add a peer).
    let myid = vko_sidecar::conf::sentinel_myid("vkt-sentinel-2", "test");
    let peer = sentinels[0].client().await;
    eventually(
        "peers know the new sentinel by its myid",
        Duration::from_secs(20),
        || async {
            let peers = peer.sentinels(MONITOR).await.ok()?;
            peers
                .iter()
                .any(|p| p.name == myid && p.port == port)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_a_config_valkey_accepts_following_the_recorded_master() {
    let master = Server::start(&RoleLine::Master);
    let dir = common::temp_dir("init");
    let port = common::free_port();
    let template = dir.path().join("master.conf");
    std::fs::write(
        &template,
        format!(
            "port {port}\nbind {HOST}\nprotected-mode no\nsave \"\"\nappendonly no\ndir {}\n",
            dir.path().display()
        ),
    )
    .unwrap();
    // Without Sentinel the operator's record is the replica config's replicaof line.
    let replica_config = dir.path().join("replica.conf");
    std::fs::write(
        &replica_config,
        format!("port {port}\nreplicaof {HOST} {}\n", master.port),
    )
    .unwrap();
    let output = dir.path().join("active.conf");
    let node = vko_sidecar::node::Node {
        topology: vko_sidecar::topology::Topology {
            me: Endpoint::new(HOST, port),
            local: Endpoint::new(HOST, port),
            monitor: None,
            discovery: vko_sidecar::topology::Discovery::Static {
                peers: vec![master.endpoint()],
                sentinels: vec![],
            },
            replica_config,
            sentinel_cache: Default::default(),
            seen_replicas: Default::default(),
        },
        dialer: vko_valkey::Dialer::new(None),
        pods: Arc::new(FakePods::default()),
        lease: None,
        my_pod: "pod-new".into(),
        active_config: output.clone(),
    };
    let settings = InitSettings {
        master_template: template,
        data_dir: dir.path().to_owned(),
        attempts: 1,
        retry_delay: Duration::ZERO,
    };
    let password = "p w\"#x\\y";
    let role = vko_sidecar::init::init(&node, &settings, Some(password))
        .await
        .unwrap();
    assert_eq!(role, RoleLine::ReplicaOf(master.endpoint()));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&output).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    let _proc = common::Proc::spawn("valkey-server", &[&output], dir.path(), "valkey-server");
    let mut opts = ConnectOptions::new(HOST, port);
    opts.password = Some(password.to_owned());
    opts.connect_timeout = Duration::from_millis(500);
    let client = eventually(
        "server from the written config",
        Duration::from_secs(10),
        || async { ValkeyClient::connect(&opts).await.ok() },
    )
    .await;
    client.ping().await.unwrap();
    match client.role().await.unwrap() {
        RoleReply::Replica { master_port, .. } => assert_eq!(master_port, master.port),
        other => panic!("{other:?}"),
    }
    let announced = client.config_get("replica-announce-ip").await.unwrap();
    assert_eq!(
        announced.get("replica-announce-ip").map(String::as_str),
        Some(HOST)
    );
}

/// `sentinel.disableAuth`: Sentinel takes no password while the data tier does; the sidecar and
/// init get no flag for it, so the dialer falls back to no AUTH when Sentinel refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_without_auth_is_reached_by_a_dialer_with_a_password() {
    let master = Server::start(&RoleLine::Master);
    let sentinel = Sentinel::start(master.port);
    let dialer = vko_valkey::Dialer::new(Some("secret".into()));
    let client = dialer.sentinel(&sentinel.endpoint()).await.unwrap();
    let view = client.master(MONITOR).await.unwrap();
    assert_eq!(view.port, master.port);
}

/// The switchover's dialer, pausing a replica's commands (its drain, as when its pod's DELETE
/// lands) right before `SENTINEL FAILOVER` is asked for.
struct DrainBeforeFailover<'a> {
    dialer: &'a vko_valkey::Dialer,
    replica: Arc<Shared>,
    report: std::sync::Mutex<Option<String>>,
}

impl vko_valkey::switchover::Dial for DrainBeforeFailover<'_> {
    async fn valkey(&self, at: &Endpoint) -> vko_valkey::Result<ValkeyClient> {
        self.dialer.valkey(at).await
    }

    async fn sentinel(&self, at: &Endpoint) -> vko_valkey::Result<SentinelClient> {
        self.dialer.sentinel(at).await
    }

    fn may_proceed(&self, step: &'static str) -> Result<(), String> {
        if step == "sentinel-failover" {
            let replica = self.replica.clone();
            let report = tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(replica.drain())
            });
            *self.report.lock().unwrap() = Some(report.message);
        }
        Ok(())
    }
}

/// Every pod deleted at once with Sentinel (issue 15, ADR 0051): the master's handover asks for
/// `SENTINEL FAILOVER`, and the replica Sentinel picks has just started stopping. Its drain
/// pauses every command, so Sentinel's `REPLICAOF NO ONE` never runs and it stops as a replica
/// (before, it was promoted and left as master with the data). The master's switchover fails
/// and rolls back, keeping every write; once that replica is gone, the next handover skips the
/// Sentinel whose failover can no longer finish and another Sentinel promotes the replica that
/// stays. Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_replica_sentinel_picks_is_never_promoted_and_the_master_hands_over_again() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (master, mut r1, r2) = three_servers().await;
    let sentinels = three_sentinels(&master).await;
    // Sentinel prefers r1 (a lower replica-priority wins).
    r1.client()
        .await
        .config_set("replica-priority", "50")
        .await
        .unwrap();
    for s in &sentinels {
        let c = s.client().await;
        eventually(
            "Sentinel reads r1's priority",
            Duration::from_secs(30),
            || async {
                let replicas = c.replicas(MONITOR).await.ok()?;
                replicas
                    .iter()
                    .any(|r| r.port == r1.port && r.priority == Some(50))
                    .then_some(())
            },
        )
        .await;
    }
    let pods = Arc::new(FakePods::default());
    let sentinel_refs: Vec<&Sentinel> = sentinels.iter().collect();
    let master_node = node_for(&master, &[&r1, &r2], &sentinel_refs, pods.clone());
    let r1_node = Arc::new(node_for(&r1, &[&master, &r2], &sentinel_refs, pods.clone()));
    let r1_shared = Shared::new(r1_node, HandoverSettings::default());

    let stop = Arc::new(AtomicBool::new(false));
    let eps: Vec<Endpoint> = sentinels.iter().map(Sentinel::endpoint).collect();
    let writer_task = tokio::spawn(writer(stop.clone(), "sp".into(), move || {
        sentinel_master(eps.clone())
    }));
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let local = master.client().await;
    let promoter = vko_valkey::switchover::Promoter::Sentinel {
        name: MONITOR.to_owned(),
        sentinels: sentinels.iter().map(Sentinel::endpoint).collect(),
        configured: 3,
        never_promote: Vec::new(),
    };
    let settings = vko_valkey::switchover::Settings {
        pause: Duration::from_secs(5),
        ..vko_valkey::switchover::Settings::default()
    };
    let dial = DrainBeforeFailover {
        dialer: &master_node.dialer,
        replica: r1_shared,
        report: std::sync::Mutex::new(None),
    };
    let first =
        vko_valkey::switchover::switchover(&dial, &local, &master.endpoint(), &promoter, &settings)
            .await;
    local.close().await;
    // The kubelet stops the paused replica's server.
    r1.proc.kill();
    assert!(
        !r1.proc.log_text().contains("MODE enabled"),
        "the stopping replica was promoted (switchover: {first:?}):\n{}",
        r1.proc.log_text()
    );
    let drained = dial.report.lock().unwrap().take().unwrap();
    assert!(
        drained.starts_with("replica: every command paused"),
        "{drained}"
    );
    assert!(first.is_err(), "{first:?}");
    assert!(matches!(
        master.client().await.role().await.unwrap(),
        RoleReply::Master { .. }
    ));

    // The drain's next attempt: Sentinel's first failover is stuck on the replica that left.
    let started = std::time::Instant::now();
    let outcome = handover(
        &master_node,
        &HandoverSettings::default(),
        ToLeaving::Allowed,
    )
    .await
    .unwrap();
    let again = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let log = writer_task.await.unwrap();
    let HandoverOutcome::HandedOver { new_master, .. } = outcome else {
        panic!("no handover: {outcome:?}")
    };
    assert_eq!(new_master, r2.endpoint());
    assert!(
        again < Duration::from_secs(10),
        "handing over again took {again:?}"
    );
    assert_none_lost_measured("stopping-replica-never-promoted", &r2.client().await, &log).await;
}

/// Every pod deleted at once (ADR 0051): the master's replicas are gone already and their
/// replacements, staying, have not copied it yet. A master that left then took the only copy
/// with it (`NoReplica`); now it waits until a replacement has copied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_master_whose_replicas_are_gone_waits_for_a_replacement_to_copy_it() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let (master, mut r1, mut r2) = three_servers().await;
    let pods = Arc::new(FakePods::default());
    let node = node_for(&master, &[&r1, &r2], &[], pods);
    r1.proc.kill();
    r2.proc.kill();
    let m = master.client().await;
    eventually("no replica online", Duration::from_secs(10), || async {
        let info = m.info_replication().await.ok()?;
        info.replicas.is_empty().then_some(())
    })
    .await;
    m.set("only-on-the-master", b"1").await.unwrap();
    let short = HandoverSettings {
        successor_wait: Duration::from_millis(1500),
        ..HandoverSettings::default()
    };
    assert!(matches!(
        await_successor(&node, &short).await,
        SuccessorWait::TimedOut { .. }
    ));
    assert_eq!(
        handover(&node, &short, ToLeaving::WaitForOneThatStays)
            .await
            .unwrap(),
        HandoverOutcome::NoReplicaThatStays
    );
    // A replacement starts under r2's name and copies the master: the handover goes to it.
    r2.crash_and_restart();
    eventually(
        "the replacement copied the master",
        Duration::from_secs(20),
        || async {
            let info = m.info_replication().await.ok()?;
            info.replicas
                .iter()
                .any(|r| {
                    r.port == r2.port && r.state == vko_valkey::parse::ReplicaSyncState::Online
                })
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        await_successor(&node, &HandoverSettings::default()).await,
        SuccessorWait::NotNeeded
    );
    let outcome = handover(
        &node,
        &HandoverSettings::default(),
        ToLeaving::WaitForOneThatStays,
    )
    .await
    .unwrap();
    assert!(
        matches!(&outcome, HandoverOutcome::HandedOver { new_master, .. } if *new_master == r2.endpoint()),
        "{outcome:?}"
    );
    assert_eq!(
        r2.client().await.get("only-on-the-master").await.unwrap(),
        Some(b"1".to_vec())
    );
    r1.crash_and_restart();
}
