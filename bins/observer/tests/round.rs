//! One round of the observer (`probe::observe` + `evaluate`) against real throwaway
//! valkey-server / valkey-sentinel processes on this host. They are addressed as `localhost`
//! (the stand-in for a pod's DNS name; Sentinel announces host names), with a password on the
//! data tier and none on Sentinel (`--sentinel-auth-disabled`).

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use vko_observer::check::{Check, Status};
use vko_observer::cli::{Config, SentinelTarget};
use vko_observer::evaluate::{Endpoint, Report, evaluate};
use vko_observer::probe::observe;
use vko_testkit::{Ports, Proc, SentinelSetup, TempDir, spawn_sentinel};
use vko_valkey::Dialer;
use vko_valkey::{ConnectOptions, Reply, ValkeyClient};

const HOST: &str = "localhost";
const PASSWORD: &str = "obs-pw";
const MONITOR: &str = "obs";
const KEY: &str = "vko:observer:health:test";

/// Ports 22500..22599, apart from the other suites' ranges.
static PORTS: Ports = Ports::new(22500, 100);

fn free_port() -> u16 {
    PORTS.free()
}

fn temp_dir(label: &str) -> TempDir {
    TempDir::new("vko-observer", label)
}

/// One server or Sentinel. Field order: the process dies before its dir is removed.
struct Instance {
    proc: Proc,
    port: u16,
    _dir: TempDir,
}

impl Instance {
    fn spawn(program: &str, args: &[String], dir: TempDir, port: u16) -> Instance {
        let proc = Proc::spawn(program, args, dir.path(), "log");
        proc.wait_listening(port, program);
        Instance {
            proc,
            port,
            _dir: dir,
        }
    }

    fn kill(&mut self) {
        self.proc.kill();
    }
}

fn valkey(replica_of: Option<u16>) -> Instance {
    let port = free_port();
    let dir = temp_dir("valkey");
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        dir.path().to_str().unwrap(),
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--requirepass",
        PASSWORD,
        "--masterauth",
        PASSWORD,
        "--replica-announce-ip",
        HOST,
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    if let Some(master) = replica_of {
        args.extend(["--replicaof".into(), format!("{HOST} {master}")]);
    }
    Instance::spawn("valkey-server", &args, dir, port)
}

fn sentinel(master_port: u16) -> Instance {
    let port = free_port();
    let dir = temp_dir("sentinel");
    let setup = SentinelSetup {
        host: HOST,
        monitor: MONITOR,
        master_port,
        quorum: 2,
        options: &[
            ("auth-pass", PASSWORD.into()),
            ("down-after-milliseconds", "60000".into()),
        ],
    };
    let proc = spawn_sentinel(dir.path(), port, &setup);
    Instance {
        proc,
        port,
        _dir: dir,
    }
}

fn config(data: &[&Instance], sentinels: &[&Instance]) -> Config {
    let mut dialer = Dialer::new(Some(PASSWORD.into()));
    dialer.sentinel_password = None;
    Config {
        listen_port: 0,
        replicas: u32::try_from(data.len()).unwrap(),
        db: 15,
        unready_on: Check::ALL.into_iter().collect(),
        data_pods: data
            .iter()
            .enumerate()
            .map(|(i, p)| (format!("c-{i}"), Endpoint::new(HOST, p.port)))
            .collect(),
        sentinel: (!sentinels.is_empty()).then(|| SentinelTarget {
            monitor: MONITOR.into(),
            configured: u32::try_from(sentinels.len()).unwrap(),
            pods: sentinels
                .iter()
                .enumerate()
                .map(|(i, p)| (format!("c-sentinel-{i}"), Endpoint::new(HOST, p.port)))
                .collect(),
        }),
        dialer,
        interval: Duration::from_secs(1),
        catch_up: Duration::from_secs(2),
        health_key: KEY.into(),
        health_key_ttl: Duration::from_secs(60),
        password_file: None,
    }
}

async fn client(port: u16) -> ValkeyClient {
    let mut opts = ConnectOptions::new(HOST, port);
    opts.password = Some(PASSWORD.into());
    ValkeyClient::connect(&opts).await.unwrap()
}

async fn round(cfg: &Config, n: u64) -> Report {
    evaluate(&observe(cfg, n).await, &cfg.unready_on)
}

fn failing(report: &Report) -> BTreeSet<Check> {
    report.failures().map(|(check, _)| *check).collect()
}

/// Rounds until `want` holds (replication and Sentinel discovery take a few seconds).
async fn round_until(cfg: &Config, what: &str, want: impl Fn(&Report) -> bool) -> Report {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    loop {
        n += 1;
        let report = round(cfg, n).await;
        if want(&report) {
            return report;
        }
        assert!(Instant::now() < deadline, "{what}: last report {report:#?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn replicated_cluster_with_sentinel() {
    let master = valkey(None);
    let replica1 = valkey(Some(master.port));
    let mut replica2 = valkey(Some(master.port));
    let sentinels = [
        sentinel(master.port),
        sentinel(master.port),
        sentinel(master.port),
    ];
    let db0 = client(master.port).await;
    db0.set("user-data", b"kept").await.unwrap();
    let cfg = config(
        &[&master, &replica1, &replica2],
        &sentinels.iter().collect::<Vec<_>>(),
    );

    let report = round_until(&cfg, "every check passes", |r| r.ready).await;
    for check in Check::ALL {
        assert_eq!(
            report.checks[&check].status,
            Status::Pass,
            "{check}: {}",
            report.checks[&check].detail
        );
    }
    assert_eq!(
        report.master.as_deref(),
        Some(format!("{HOST}:{}", master.port).as_str())
    );
    let master_check = &report.checks[&Check::MasterUnreachable];
    assert!(
        master_check
            .detail
            .contains("named by 3 of 3 answering Sentinels"),
        "{master_check:?}"
    );

    // The health key lives in db 15 only, with an expiry; db 0 holds exactly the user's key.
    assert_eq!(db0.dbsize().await.unwrap(), 1);
    assert_eq!(db0.get(KEY).await.unwrap(), None);
    let db15 = client(master.port).await;
    db15.select(15).await.unwrap();
    assert_eq!(db15.dbsize().await.unwrap(), 1);
    let ttl = db15.command(["PTTL", KEY]).await.unwrap();
    assert!(
        matches!(ttl, Reply::Int(ms) if ms > 0 && ms <= 60_000),
        "{ttl:?}"
    );

    // Writes paused on the master: the write times out (2 s), nothing can be read back.
    db0.client_pause_write(Duration::from_secs(6))
        .await
        .unwrap();
    let report = round(&cfg, 100).await;
    db0.client_unpause().await.unwrap();
    assert_eq!(
        failing(&report),
        BTreeSet::from([Check::WriteTestFailure, Check::ReadTestFailure]),
        "{report:#?}"
    );
    let write_check = &report.checks[&Check::WriteTestFailure];
    assert!(write_check.detail.contains("timed out"), "{write_check:?}");
    assert_eq!(
        report.checks[&Check::ReplicaReadTestFailure].status,
        Status::Skipped
    );
    assert!(!report.ready);

    // A replica dies: both replica checks name it.
    replica2.kill();
    let report = round(&cfg, 101).await;
    assert_eq!(
        failing(&report),
        BTreeSet::from([Check::ReplicaSyncFailure, Check::ReplicaReadTestFailure]),
        "{report:#?}"
    );
    for check in [Check::ReplicaSyncFailure, Check::ReplicaReadTestFailure] {
        let detail = &report.checks[&check].detail;
        assert!(
            detail.contains("c-2") && !detail.contains("c-1"),
            "{detail}"
        );
    }

    // Only the master checks make it unready: still ready.
    let mut cfg = cfg;
    cfg.unready_on = BTreeSet::from([
        Check::MasterUnreachable,
        Check::WriteTestFailure,
        Check::ReadTestFailure,
    ]);
    let report = round(&cfg, 102).await;
    assert!(report.ready, "{report:#?}");
    assert_eq!(failing(&report).len(), 2);
}

#[tokio::test]
async fn replicas_without_sentinel_and_a_stale_replica() {
    let master = valkey(None);
    let replica = valkey(Some(master.port));
    let cfg = config(&[&master, &replica], &[]);
    let report = round_until(&cfg, "replication is up", |r| r.ready).await;
    for check in [
        Check::SentinelUnreachable,
        Check::SentinelQuorumFailure,
        Check::SentinelMasterDown,
        Check::SentinelMasterHostnameInvalid,
        Check::SentinelReplicaHostnamesInvalid,
    ] {
        assert_eq!(report.checks[&check].status, Status::Skipped, "{check}");
    }
    assert!(
        report.checks[&Check::MasterUnreachable]
            .detail
            .contains("c-0 is the only pod reporting role:master")
    );

    // The replica follows a master that does not exist: it keeps an older round's value for
    // the whole catch-up time.
    let replica_client = client(replica.port).await;
    replica_client.replicaof(HOST, free_port()).await.unwrap();
    let report = round(&cfg, 50).await;
    let failed = failing(&report);
    assert!(
        failed.contains(&Check::ReplicaReadTestFailure)
            && failed.contains(&Check::ReplicaSyncFailure),
        "{report:#?}"
    );
    let detail = &report.checks[&Check::ReplicaReadTestFailure].detail;
    assert!(
        detail.contains("c-1: stale value") && detail.contains("after 2000 ms"),
        "{detail}"
    );

    // Two masters: no single master.
    replica_client.replicaof_no_one().await.unwrap();
    let report = round(&cfg, 51).await;
    let detail = &report.checks[&Check::MasterUnreachable].detail;
    assert!(
        detail.contains("2 data pods report role:master (c-0, c-1)"),
        "{detail}"
    );
    assert!(!report.ready);
}

#[tokio::test]
async fn standalone_passes_with_the_replica_and_sentinel_checks_skipped() {
    let server = valkey(None);
    let cfg = config(&[&server], &[]);
    let report = round(&cfg, 1).await;
    assert!(report.ready, "{report:#?}");
    let skipped: Vec<Check> = report
        .checks
        .iter()
        .filter(|(_, r)| r.status == Status::Skipped)
        .map(|(c, _)| *c)
        .collect();
    assert_eq!(skipped.len(), 7, "{report:#?}");
}
