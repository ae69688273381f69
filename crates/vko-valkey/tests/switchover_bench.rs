//! `cargo xtask bench switchover` (ignored here): a planned switchover with Sentinel, measured
//! the way a client sees it, on real valkey-server / valkey-sentinel processes on 127.0.0.1 (a
//! master, two replicas, three Sentinels, all announcing `localhost`). The `valkey-server` and
//! `valkey-sentinel` on `PATH` are the release measured (the xtask puts the one asked for first).
//!
//! A writer sends `SET`s in a loop and, after any error, asks the Sentinels where the master is
//! (as a Sentinel-aware client does); every `OK` is an acknowledged write. Each switchover is one
//! of two paths, alternated on the same processes:
//! - `vko`: `vko_valkey::switchover` with `Promoter::Sentinel`, the rolling update's path (ADR
//!   0006): `CLIENT PAUSE WRITE`, replicas caught up, `SENTINEL FAILOVER`, the old master demoted
//!   while paused, unpause;
//! - `coordinated` (only with `VKO_BENCH_COORDINATED=1`, Valkey 9): `SENTINEL FAILOVER <name>
//!   COORDINATED`, the old master pausing itself and handing over with `FAILOVER TO`.
//!
//! Each prints one `BENCH` line: the writer's longest interval between two `OK`s across the
//! switchover (`gap_ms`), when the new master answered `role:master` (`role_ms`) and when a
//! majority of the Sentinels named it (`named_ms`), both from the command; how many acknowledged
//! writes the new master lacks (`lost`); and whether every process still answers (`crashed`).

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{LocalDial, Sentinel, Server, eventually, local_opts};
use vko_valkey::parse::{ReplicaSyncState, ReplicationRole};
use vko_valkey::switchover::{self, Address, Outcome, Promoter};
use vko_valkey::{ConnectOptions, SentinelClient, ValkeyClient};

const NAME: &str = "benchmaster";
/// How long a step may take before the run is given up.
const PATIENCE: Duration = Duration::from_secs(60);

/// What the writer saw: the time of every `OK` and the key it acknowledged.
#[derive(Default)]
struct WriteLog {
    ok_times: Vec<Instant>,
    acked: Vec<String>,
    errors: usize,
}

/// The writer's connection options: a `SET` held by a write pause waits for it (20 s), so a
/// switchover shows as one long interval, not as timeouts.
fn writer_opts(port: u16) -> ConnectOptions {
    let mut opts = local_opts(port);
    opts.command_timeout = Duration::from_secs(20);
    opts
}

/// The master's port as the first Sentinel that answers names it.
async fn master_by_sentinel(sentinels: &[u16]) -> Option<u16> {
    for port in sentinels {
        let Ok(client) = SentinelClient::connect(&local_opts(*port)).await else {
            continue;
        };
        if let Ok(Some((_, master))) = client.get_master_addr_by_name(NAME).await {
            return Some(master);
        }
    }
    None
}

/// `SET`s `<prefix>-<n>` until `stop`, finding the master through the Sentinels after any error.
async fn write(prefix: String, sentinels: Vec<u16>, stop: Arc<AtomicBool>) -> WriteLog {
    let mut log = WriteLog::default();
    let mut client: Option<ValkeyClient> = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(connected) = client.as_ref() else {
            if let Some(port) = master_by_sentinel(&sentinels).await {
                client = ValkeyClient::connect(&writer_opts(port)).await.ok();
            }
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            continue;
        };
        n += 1;
        let key = format!("{prefix}-{n}");
        match connected.set(&key, b"v").await {
            Ok(()) => {
                log.ok_times.push(Instant::now());
                log.acked.push(key);
            }
            Err(_) => {
                log.errors += 1;
                client = None;
            }
        }
    }
    log
}

/// The longest interval between two consecutive `OK`s of which the second came after `from`.
fn gap_across(ok_times: &[Instant], from: Instant) -> Duration {
    ok_times
        .windows(2)
        .filter(|w| w[1] >= from)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default()
}

/// The three Sentinels and the master they name, with every replica online and listed, no
/// failover in flight: a cluster ready for the next switchover. Returns the master's port.
async fn settled(sentinels: &[u16], data: &[u16]) -> u16 {
    eventually("a settled cluster", PATIENCE, || async {
        let mut named = Vec::new();
        for port in sentinels {
            let client = SentinelClient::connect(&local_opts(*port)).await.ok()?;
            let master = client.master(NAME).await.ok()?;
            let replicas = client.replicas(NAME).await.ok()?;
            let calm = !master.flags.is_down()
                && !master
                    .flags
                    .contains(&vko_valkey::parse::InstanceFlag::FailoverInProgress)
                && master.role_reported.as_deref() == Some("master")
                && master.num_other_sentinels == 2
                && replicas.len() == data.len() - 1
                && replicas
                    .iter()
                    .all(|r| !r.flags.is_down() && r.role_reported.as_deref() == Some("slave"));
            if !calm {
                return None;
            }
            named.push(master.port);
        }
        let master = named[0];
        if named.iter().any(|p| *p != master) {
            return None;
        }
        let client = ValkeyClient::connect(&local_opts(master)).await.ok()?;
        let info = client.info_replication().await.ok()?;
        let online = info
            .replicas
            .iter()
            .filter(|r| r.state == ReplicaSyncState::Online)
            .count();
        (info.role == ReplicationRole::Master && online == data.len() - 1).then_some(master)
    })
    .await
}

/// Polls every 10 ms, from `from`, until the Sentinel majority names a master other than `old`
/// and that server answers `role:master`; returns (role, named) times from `from`.
async fn watch_handover(
    sentinels: &[u16],
    data: &[u16],
    old: u16,
    from: Instant,
) -> (u16, Duration, Duration) {
    let mut role_at: Option<(u16, Duration)> = None;
    let mut named_at: Option<(u16, Duration)> = None;
    loop {
        assert!(from.elapsed() < PATIENCE, "no handover within {PATIENCE:?}");
        if role_at.is_none() {
            for port in data.iter().filter(|p| **p != old) {
                if let Ok(client) = ValkeyClient::connect(&local_opts(*port)).await
                    && let Ok(info) = client.info_replication().await
                    && info.role == ReplicationRole::Master
                {
                    role_at = Some((*port, from.elapsed()));
                }
            }
        }
        if named_at.is_none() {
            let mut votes: Vec<u16> = Vec::new();
            for port in sentinels {
                if let Ok(client) = SentinelClient::connect(&local_opts(*port)).await
                    && let Ok(Some((_, master))) = client.get_master_addr_by_name(NAME).await
                {
                    votes.push(master);
                }
            }
            if let Some(new) = votes.iter().find(|p| **p != old)
                && votes.iter().filter(|p| *p == new).count() * 2 > sentinels.len()
            {
                named_at = Some((*new, from.elapsed()));
            }
        }
        if let (Some((promoted, role)), Some((named, at))) = (role_at, named_at) {
            assert_eq!(
                promoted, named,
                "the Sentinels named another pod than the one promoted"
            );
            return (named, role, at);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How many of `keys` `port` does not hold.
async fn missing(port: u16, keys: &[String]) -> usize {
    let client = ValkeyClient::connect(&local_opts(port)).await.unwrap();
    let mut found = 0usize;
    for chunk in keys.chunks(1000) {
        let mut command = vec!["EXISTS".to_owned()];
        command.extend(chunk.iter().cloned());
        let reply = client.command(command).await.unwrap();
        found += usize::try_from(reply.as_int().unwrap()).unwrap();
    }
    keys.len() - found
}

/// Whether every process answers `PING` (valkey-io/valkey#4066 reported a crash after a
/// coordinated failover on 9.1).
async fn every_process_answers(ports: &[u16]) -> bool {
    for port in ports {
        let answered = async {
            let client = ValkeyClient::connect(&local_opts(*port)).await.ok()?;
            client.ping().await.ok()
        }
        .await;
        if answered.is_none() {
            return false;
        }
    }
    true
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by `cargo xtask bench switchover`"]
async fn bench_switchover() {
    let runs: u32 = std::env::var("VKO_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let coordinated = std::env::var("VKO_BENCH_COORDINATED").is_ok_and(|v| v == "1");
    let announce = ["--replica-announce-ip", "localhost"];
    let master = Server::start(&announce);
    let replica_args = [
        "--replicaof",
        "localhost",
        &master.port.to_string(),
        "--replica-announce-ip",
        "localhost",
    ]
    .map(str::to_owned);
    let replica_args: Vec<&str> = replica_args.iter().map(String::as_str).collect();
    let replicas = [Server::start(&replica_args), Server::start(&replica_args)];
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(NAME, master.port, 2))
        .collect();
    let data: Vec<u16> = std::iter::once(master.port)
        .chain(replicas.iter().map(|r| r.port))
        .collect();
    let sentinel_ports: Vec<u16> = sentinels.iter().map(|s| s.port).collect();
    let version = master
        .client()
        .await
        .info_server()
        .await
        .unwrap()
        .valkey_version
        .unwrap_or_default();
    let paths: &[&str] = if coordinated {
        &["vko", "coordinated"]
    } else {
        &["vko"]
    };
    for run in 0..runs {
        for path in paths {
            let old = settled(&sentinel_ports, &data).await;
            let stop = Arc::new(AtomicBool::new(false));
            let writer = tokio::spawn(write(
                format!("{path}{run}"),
                sentinel_ports.clone(),
                stop.clone(),
            ));
            tokio::time::sleep(Duration::from_millis(1000)).await;
            let started = Instant::now();
            let handover = watch_handover(&sentinel_ports, &data, old, started);
            let command = async {
                if *path == "vko" {
                    let promoter = Promoter::Sentinel {
                        name: NAME.to_owned(),
                        sentinels: sentinel_ports
                            .iter()
                            .map(|p| Address::new("localhost", *p))
                            .collect(),
                        configured: 3,
                        never_promote: Vec::new(),
                    };
                    let client = ValkeyClient::connect(&local_opts(old)).await.unwrap();
                    let outcome = switchover::switchover(
                        &LocalDial,
                        &client,
                        &Address::new("localhost", old),
                        &promoter,
                        &switchover::Settings::default(),
                    )
                    .await
                    .unwrap();
                    assert!(matches!(outcome, Outcome::HandedOver(_)), "{outcome:?}");
                } else {
                    let client = SentinelClient::connect(&local_opts(sentinel_ports[0]))
                        .await
                        .unwrap();
                    client.failover_coordinated(NAME).await.unwrap();
                }
            };
            let ((new, role, named), ()) = tokio::join!(handover, command);
            // The Sentinels name the new master: two more seconds of writing, to it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            stop.store(true, Ordering::Relaxed);
            let log = writer.await.unwrap();
            assert!(
                log.ok_times.last().is_some_and(|t| *t > started + named),
                "{path}: no acknowledged write after the Sentinels named the new master"
            );
            let gap = gap_across(&log.ok_times, started);
            let lost = missing(new, &log.acked).await;
            let alive =
                every_process_answers(&data).await && every_process_answers(&sentinel_ports).await;
            println!(
                "BENCH version={version} path={path} run={run} gap_ms={} role_ms={} named_ms={} \
                 acked={} errors={} lost={lost} crashed={}",
                gap.as_millis(),
                role.as_millis(),
                named.as_millis(),
                log.acked.len(),
                log.errors,
                !alive
            );
            assert_eq!(
                lost, 0,
                "{path}: acknowledged writes missing on the new master"
            );
            assert!(alive, "{path}: a process stopped answering");
        }
    }
}
