//! SentinelClient against a real master + replica + 3 valkey-sentinel processes, all announcing
//! `localhost` (hostnames, not IPs).

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Sentinel, Server, eventually};
use vko_valkey::parse::{InstanceFlag, RoleReply};
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
