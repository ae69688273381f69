//! SentinelClient against a real master + replica + 3 valkey-sentinel processes, all announcing
//! `localhost` (hostnames, not IPs).

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{LocalDial, Sentinel, Server, eventually};
use vko_valkey::parse::{InstanceFlag, RoleReply};
use vko_valkey::switchover::{self, Address, Outcome, Promoter};
use vko_valkey::{Error, SentinelClient};

const NAME: &str = "mymaster";

#[tokio::test]
async fn sentinel_view_queries_and_failover() {
    let master = Server::start(&[]);
    let replica = Server::start(&[
        "--replicaof",
        "localhost",
        &master.port.to_string(),
        "--replica-announce-ip",
        "localhost",
    ]);
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(NAME, master.port, 2))
        .collect();
    let mut clients: Vec<SentinelClient> = Vec::new();
    for sentinel in &sentinels {
        clients.push(sentinel.client().await);
    }

    // Every Sentinel discovers the replica (from the master's INFO) and its two peers (hello messages).
    for client in &clients {
        eventually(
            "sentinel sees 1 replica and 2 peers",
            Duration::from_secs(30),
            || async {
                let view = client.master(NAME).await.ok()?;
                (view.num_replicas == 1 && view.num_other_sentinels == 2).then_some(())
            },
        )
        .await;
    }
    let s = &clients[0];
    s.ping().await.unwrap();
    assert_eq!(
        s.role().await.unwrap(),
        RoleReply::Sentinel {
            masters: vec![NAME.to_owned()]
        }
    );

    let view = s.master(NAME).await.unwrap();
    assert_eq!((view.host.as_str(), view.port), ("localhost", master.port));
    assert!(view.flags.contains(&InstanceFlag::Master));
    assert_eq!(view.quorum, 2);
    assert_eq!(view.down_after_ms, Some(2000));
    let run_id = master.client().await.info_server().await.unwrap().run_id;
    assert_eq!(view.runid, Some(run_id));
    assert_eq!(s.masters().await.unwrap().len(), 1);
    let info = s.info("sentinel").await.unwrap();
    assert_eq!(
        info.get("sentinel", "master0"),
        Some(
            format!(
                "name={NAME},status=ok,address=localhost:{},slaves=1,sentinels=3",
                master.port
            )
            .as_str()
        )
    );

    let replicas = eventually(
        "replica's link reported ok",
        Duration::from_secs(15),
        || async {
            let replicas = s.replicas(NAME).await.ok()?;
            (replicas.len() == 1 && replicas[0].master_link_status.as_deref() == Some("ok"))
                .then_some(replicas)
        },
    )
    .await;
    assert_eq!(
        (replicas[0].host.as_str(), replicas[0].port),
        ("localhost", replica.port)
    );
    assert_eq!(replicas[0].master_port, Some(master.port));
    assert!(replicas[0].flags.contains(&InstanceFlag::Slave));

    let peers = s.sentinels(NAME).await.unwrap();
    let mut peer_ports: Vec<u16> = peers.iter().map(|p| p.port).collect();
    peer_ports.sort_unstable();
    let mut expected: Vec<u16> = sentinels[1..].iter().map(|s| s.port).collect();
    expected.sort_unstable();
    assert_eq!(peer_ports, expected);
    assert!(peers.iter().all(|p| p.host == "localhost"));

    assert_eq!(
        s.get_master_addr_by_name(NAME).await.unwrap(),
        Some(("localhost".to_owned(), master.port))
    );
    assert_eq!(s.get_master_addr_by_name("nope").await.unwrap(), None);

    let quorum = s.ckquorum(NAME).await.unwrap();
    assert!(quorum.reachable, "{quorum:?}");
    assert_eq!(quorum.usable_sentinels, 3);

    for err in [
        s.master("nope").await.unwrap_err(),
        s.replicas("nope").await.unwrap_err(),
        s.ckquorum("nope").await.unwrap_err(),
        s.failover("nope").await.unwrap_err(),
    ] {
        assert_eq!(err, Error::UnknownMaster("nope".into()));
        assert_eq!(err.reason(), "UnknownMaster");
    }

    assert_eq!(s.reset("no-such-master-*").await.unwrap(), 0);
    s.set(NAME, "down-after-milliseconds", "3000")
        .await
        .unwrap();
    assert_eq!(s.master(NAME).await.unwrap().down_after_ms, Some(3000));

    // A forced failover promotes the replica; every Sentinel follows.
    s.failover(NAME).await.unwrap();
    let err = s.failover(NAME).await.unwrap_err();
    assert!(
        matches!(err.reason(), "FailoverInProgress" | "NoGoodReplica"),
        "second failover: {err}"
    );
    for client in &clients {
        eventually(
            "sentinel reports the promoted replica",
            Duration::from_secs(30),
            || async {
                let addr = client.get_master_addr_by_name(NAME).await.ok()??;
                (addr == ("localhost".to_owned(), replica.port)).then_some(())
            },
        )
        .await;
    }
    let promoted = replica.client().await;
    eventually("replica is master", Duration::from_secs(10), || async {
        matches!(promoted.role().await.ok()?, RoleReply::Master { .. }).then_some(())
    })
    .await;
}

#[tokio::test]
async fn noquorum_is_a_result_not_an_error() {
    let master = Server::start(&[]);
    // Quorum 2 with a single Sentinel can never be reached.
    let sentinel = Sentinel::start(NAME, master.port, 2);
    let client = sentinel.client().await;
    let quorum = client.ckquorum(NAME).await.unwrap();
    assert!(!quorum.reachable, "{quorum:?}");
    assert_eq!(quorum.usable_sentinels, 1);
    assert!(quorum.message.starts_with("NOQUORUM"), "{}", quorum.message);
}

/// A scale-down's switchover must land on a replica that stays (ADR 0024). Sentinel picks by
/// `replica-priority` first, so the replica the scale-down removes is made the one Sentinel
/// prefers (priority 10 against 100): without `never_promote` Sentinel promotes it every time.
#[tokio::test]
async fn a_sentinel_switchover_never_promotes_a_replica_it_is_told_to_avoid() {
    let master = Server::start(&["--replica-announce-ip", "localhost"]);
    let replica_args = |priority: &'static str| {
        vec![
            "--replicaof".to_owned(),
            "localhost".to_owned(),
            master.port.to_string(),
            "--replica-announce-ip".to_owned(),
            "localhost".to_owned(),
            "--replica-priority".to_owned(),
            priority.to_owned(),
        ]
    };
    let args = replica_args("10");
    let removed = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let args = replica_args("100");
    let staying = Server::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let sentinels: Vec<Sentinel> = (0..3)
        .map(|_| Sentinel::start(NAME, master.port, 2))
        .collect();
    for sentinel in &sentinels {
        let client = sentinel.client().await;
        eventually(
            "every Sentinel lists both replicas, priority 10 and 100, and its 2 peers",
            Duration::from_secs(30),
            || async {
                let view = client.master(NAME).await.ok()?;
                let mut priorities: Vec<i64> = client
                    .replicas(NAME)
                    .await
                    .ok()?
                    .iter()
                    .filter_map(|r| r.priority)
                    .collect();
                priorities.sort_unstable();
                (view.num_other_sentinels == 2 && priorities == [10, 100]).then_some(())
            },
        )
        .await;
    }
    let old = master.client().await;
    eventually("both replicas online", Duration::from_secs(30), || async {
        let info = old.info_replication().await.ok()?;
        (info
            .replicas
            .iter()
            .filter(|r| r.state == vko_valkey::parse::ReplicaSyncState::Online)
            .count()
            == 2)
            .then_some(())
    })
    .await;
    let promoter = Promoter::Sentinel {
        name: NAME.to_owned(),
        sentinels: sentinels
            .iter()
            .map(|s| Address::new("localhost", s.port))
            .collect(),
        configured: 3,
        never_promote: vec![Address::new("localhost", removed.port)],
    };
    let outcome = switchover::switchover(
        &LocalDial,
        &old,
        &Address::new("localhost", master.port),
        &promoter,
        &switchover::Settings::default(),
    )
    .await
    .unwrap();
    let Outcome::HandedOver(report) = outcome else {
        panic!("no handover: {outcome:?}");
    };
    assert_eq!(report.new_master, Address::new("localhost", staying.port));
    let removed_priority = removed
        .client()
        .await
        .config_get("replica-priority")
        .await
        .unwrap();
    assert_eq!(
        removed_priority.get("replica-priority").map(String::as_str),
        Some("0")
    );
}
