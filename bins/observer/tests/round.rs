//! One round of the observer (`probe::observe` + `evaluate`) against real throwaway
//! valkey-server / valkey-sentinel processes on this host. They are addressed as `localhost`
//! (the stand-in for a pod's DNS name; Sentinel announces host names), with a password on the
//! data tier and none on Sentinel (`--sentinel-auth-disabled`).

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vko_observer::check::{Check, Status};
use vko_observer::cli::{Config, SentinelTarget};
use vko_observer::evaluate::{Endpoint, Report, evaluate};
use vko_observer::probe::observe;
use vko_valkey::Dialer;
use vko_valkey::{ConnectOptions, Reply, ValkeyClient};

const HOST: &str = "localhost";
const PASSWORD: &str = "obs-pw";
const MONITOR: &str = "obs";
const KEY: &str = "vko:observer:health:test";

/// Ports 22500..22599: below the ephemeral range, away from the other suites' ranges.
fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % 100) as u16;
    for _ in 0..100 {
        let port = 22500 + (start + NEXT.fetch_add(1, Ordering::SeqCst)) % 100;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 22500..22599");
}

/// A process in its own temp dir; killed and the dir removed on drop.
struct Proc {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Proc {
    fn spawn(program: &str, args: &[String], dir: PathBuf, port: u16) -> Proc {
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(program)
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        let proc = Proc { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{program} did not start: {}",
                std::fs::read_to_string(proc.dir.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        proc
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn temp_dir(label: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "vko-observer-test-{label}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn valkey(replica_of: Option<u16>) -> Proc {
    let port = free_port();
    let dir = temp_dir("valkey");
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--dir",
        dir.to_str().unwrap(),
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
    Proc::spawn("valkey-server", &args, dir, port)
}

fn sentinel(master_port: u16) -> Proc {
    let port = free_port();
    let dir = temp_dir("sentinel");
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
             sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n\
             sentinel announce-ip {HOST}\nsentinel announce-port {port}\n\
             sentinel monitor {MONITOR} {HOST} {master_port} 2\n\
             sentinel auth-pass {MONITOR} {PASSWORD}\n\
             sentinel down-after-milliseconds {MONITOR} 60000\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    Proc::spawn("valkey-sentinel", &[conf.display().to_string()], dir, port)
}

fn config(data: &[&Proc], sentinels: &[&Proc]) -> Config {
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
    assert!(
        report.checks[&Check::MasterUnreachable]
            .detail
            .contains("named by 3 of 3 answering Sentinels"),
        "{:?}",
        report.checks[&Check::MasterUnreachable]
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
    assert!(
        report.checks[&Check::WriteTestFailure]
            .detail
            .contains("timed out"),
        "{:?}",
        report.checks[&Check::WriteTestFailure]
    );
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
