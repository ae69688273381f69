//! The sidecar's logic against real valkey-server / valkey-sentinel processes on 127.0.0.1.
//! The Kubernetes API is the `FakePods` recorder; the real wiring runs on the testbed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{FakePods, HOST, MONITOR, Sentinel, Server, eventually, missing, node_for, writer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vko_sidecar::conf::{HOLD_HOST, RoleLine, role_line_of};
use vko_sidecar::decide::{HoldExit, InstanceRole, LiveRole};
use vko_sidecar::handover::{HandoverOutcome, HandoverSettings, handover};
use vko_sidecar::init::{InitSettings, decide_role};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn handover_with_sentinel_loses_no_acknowledged_write() {
    let (master, r1, r2) = three_servers().await;
    let sentinels = three_sentinels(&master).await;
    let pods = Arc::new(FakePods::default());
    let node = node_for(
        &master,
        &[&r1, &r2],
        &sentinels.iter().collect::<Vec<_>>(),
        pods.clone(),
    );

    let stop = Arc::new(AtomicBool::new(false));
    let eps: Vec<Endpoint> = sentinels.iter().map(Sentinel::endpoint).collect();
    let writer_task = tokio::spawn(writer(stop.clone(), "ws".into(), move || {
        sentinel_master(eps.clone())
    }));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let outcome = handover(&node, &HandoverSettings::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    let log = writer_task.await.unwrap();

    let HandoverOutcome::HandedOver {
        new_master,
        write_pause,
    } = outcome
    else {
        panic!("no handover: {outcome:?}")
    };
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
    let lost = missing(&promoted, &log.acked).await;
    report(
        "sentinel-handover",
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
    let (master, r1, r2) = three_servers().await;
    let pods = Arc::new(FakePods::default());
    let node = node_for(&master, &[&r1, &r2], &[], pods.clone());

    let stop = Arc::new(AtomicBool::new(false));
    let all = vec![master.endpoint(), r1.endpoint(), r2.endpoint()];
    let writer_task = tokio::spawn(writer(stop.clone(), "wn".into(), move || {
        role_master(all.clone())
    }));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let outcome = handover(&node, &HandoverSettings::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let log = writer_task.await.unwrap();

    let HandoverOutcome::HandedOver {
        new_master,
        write_pause,
    } = outcome
    else {
        panic!("no handover: {outcome:?}")
    };
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
    let lost = missing(&promoted, &log.acked).await;
    report(
        "no-sentinel-handover",
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
