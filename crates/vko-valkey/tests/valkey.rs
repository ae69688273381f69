//! ValkeyClient against real throwaway valkey-server processes.

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::{Server, eventually, free_port, temp_dir};
use vko_valkey::parse::{
    ConnectedReplica, LinkStatus, ReplicationInfo, ReplicationRole, RoleReply, UpstreamState,
};
use vko_valkey::{ConnectOptions, Error, Reply, ValkeyClient};

#[tokio::test]
async fn standalone_calls() {
    let server = Server::start(&[]);
    let client = server.client().await;
    client.ping().await.unwrap();

    let info = client.info_server().await.unwrap();
    assert_eq!(info.version(), "8.0.1");
    assert_eq!(info.tcp_port, Some(server.port));
    assert_eq!(info.server_mode.as_deref(), Some("standalone"));
    assert!(
        matches!(client.role().await.unwrap(), RoleReply::Master { replicas, .. } if replicas.is_empty())
    );
    assert_eq!(
        client.info_replication().await.unwrap().role,
        ReplicationRole::Master
    );

    assert_eq!(client.dbsize().await.unwrap(), 0);
    client.set("k", b"v\xff").await.unwrap();
    assert_eq!(client.get("k").await.unwrap(), Some(b"v\xff".to_vec()));
    assert_eq!(client.get("missing").await.unwrap(), None);
    assert_eq!(client.dbsize().await.unwrap(), 1);
    assert_eq!(client.info_keyspace().await.unwrap().total_keys(), 1);
    assert!(!client.info_persistence().await.unwrap().loading);

    client.config_set("replica-priority", "7").await.unwrap();
    let got = client.config_get("replica-priority").await.unwrap();
    assert_eq!(got.get("replica-priority").map(String::as_str), Some("7"));
    assert!(client.config_get("no-such-*").await.unwrap().is_empty());
    let err = client
        .config_set("no-such-parameter", "1")
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ServerError", "{err}");

    // No replicas: WAIT returns 0 after its timeout.
    let started = Instant::now();
    assert_eq!(client.wait(1, Duration::from_millis(300)).await.unwrap(), 0);
    assert!(started.elapsed() >= Duration::from_millis(290));

    let err = client.failover_abort().await.unwrap_err();
    assert_eq!(err.reason(), "ServerError", "{err}");
    assert_eq!(
        client.command(["ECHO", "hi"]).await.unwrap(),
        Reply::Text("hi".into())
    );
    let all = client.info("all").await.unwrap();
    assert!(all.section("clients").is_some());
    client.close().await;
}

#[tokio::test]
async fn select_keeps_databases_apart_and_set_with_expiry_expires() {
    let server = Server::start(&[]);
    let db0 = server.client().await;
    db0.set("k", b"in db 0").await.unwrap();
    let db15 = server.client().await;
    db15.select(15).await.unwrap();
    assert_eq!(db15.get("k").await.unwrap(), None);
    db15.set_with_expiry("k", b"in db 15", Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(db15.get("k").await.unwrap(), Some(b"in db 15".to_vec()));
    // Only db 15 holds the expiring key; db 0's key is untouched.
    let ttl = db15.command(["PTTL", "k"]).await.unwrap().as_int().unwrap();
    assert!((1..=300).contains(&ttl), "PTTL {ttl}");
    assert_eq!(db0.command(["PTTL", "k"]).await.unwrap(), Reply::Int(-1));
    eventually(
        "the key in db 15 expires",
        Duration::from_secs(3),
        || async { db15.get("k").await.unwrap().is_none().then_some(()) },
    )
    .await;
    assert_eq!(db0.get("k").await.unwrap(), Some(b"in db 0".to_vec()));
    let err = db15.select(16).await.unwrap_err();
    assert_eq!(err.reason(), "ServerError", "{err}");
}

#[tokio::test]
async fn closing_or_dropping_a_client_closes_its_connection() {
    let server = Server::start(&[]);
    let observer = server.client().await;
    let connected = || async {
        let list = observer.command(["CLIENT", "LIST"]).await.unwrap();
        list.as_text().unwrap().lines().count()
    };
    let closed = server.client().await;
    let dropped = server.client().await;
    assert_eq!(connected().await, 3);
    closed.close().await;
    drop(dropped);
    eventually(
        "only the observer is left",
        Duration::from_secs(5),
        || async { (connected().await == 1).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn connection_refused_is_typed_and_fast() {
    let port = free_port();
    let started = Instant::now();
    let err = ValkeyClient::connect(&ConnectOptions::new("127.0.0.1", port))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ConnectionRefused", "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn auth_password_and_acl_user() {
    let server = Server::start(&["--requirepass", "s3cret"]);

    let mut good = server.opts();
    good.password = Some("s3cret".into());
    let client = ValkeyClient::connect(&good).await.unwrap();
    client.ping().await.unwrap();

    let mut wrong = server.opts();
    wrong.password = Some("nope".into());
    let err = ValkeyClient::connect(&wrong).await.unwrap_err();
    assert_eq!(err.reason(), "AuthFailed", "{err}");

    let err = ValkeyClient::connect(&server.opts()).await.unwrap_err();
    assert_eq!(err.reason(), "AuthFailed", "no password: {err}");

    client
        .command(["ACL", "SETUSER", "operator", "on", ">op-pw", "~*", "+@all"])
        .await
        .unwrap();
    client
        .command([
            "ACL", "SETUSER", "reader", "on", ">r-pw", "~*", "+@read", "+ping",
        ])
        .await
        .unwrap();
    let mut user = server.opts();
    user.username = Some("operator".into());
    user.password = Some("op-pw".into());
    ValkeyClient::connect(&user)
        .await
        .unwrap()
        .ping()
        .await
        .unwrap();
    user.password = Some("s3cret".into());
    let err = ValkeyClient::connect(&user).await.unwrap_err();
    assert_eq!(err.reason(), "AuthFailed", "{err}");

    let mut reader = server.opts();
    reader.username = Some("reader".into());
    reader.password = Some("r-pw".into());
    let reader = ValkeyClient::connect(&reader).await.unwrap();
    let err = reader.set("k", b"v").await.unwrap_err();
    assert_eq!(err.reason(), "NoPermission", "{err}");
}

#[tokio::test]
async fn replicaof_role_info_wait_and_readonly() {
    let (master, replica, m, r) = master_and_replica().await;
    let up = eventually("replica link up", Duration::from_secs(10), || async {
        let info = r.info_replication().await.ok()?;
        let up = info.upstream?;
        (up.link_status == LinkStatus::Up).then_some(up)
    })
    .await;
    assert_eq!(up.master_host, "127.0.0.1");
    assert_eq!(up.master_port, master.port);
    match r.role().await.unwrap() {
        RoleReply::Replica {
            master_port, state, ..
        } => {
            assert_eq!(master_port, master.port);
            assert_eq!(state, UpstreamState::Connected);
        }
        other => panic!("expected replica role, got {other:?}"),
    }

    m.set("key", b"value").await.unwrap();
    assert_eq!(m.wait(1, Duration::from_secs(2)).await.unwrap(), 1);
    assert_eq!(r.get("key").await.unwrap(), Some(b"value".to_vec()));

    let master_offset = m.info_replication().await.unwrap().master_repl_offset;
    let info = until_a_replica(&m, "replica acked the master's offset", 5, |replica| {
        replica.offset >= master_offset
    })
    .await;
    assert_eq!(info.connected_replicas, 1);
    assert_eq!(info.replicas[0].port, replica.port);
    match m.role().await.unwrap() {
        RoleReply::Master { replicas, .. } => assert_eq!(replicas[0].port, replica.port),
        other => panic!("expected master role, got {other:?}"),
    }

    let err = r.set("key", b"x").await.unwrap_err();
    assert!(matches!(err, Error::ReadOnly(_)), "{err:?}");

    r.replicaof_no_one().await.unwrap();
    assert!(matches!(r.role().await.unwrap(), RoleReply::Master { .. }));
    r.set("key", b"x").await.unwrap();
}

#[tokio::test]
async fn client_pause_write_blocks_writes_until_unpause() {
    let server = Server::start(&[]);
    let admin = server.client().await;
    let writer = server.client().await;
    admin.set("k", b"before").await.unwrap();

    admin
        .client_pause_write(Duration::from_secs(20))
        .await
        .unwrap();
    let write = tokio::spawn(async move {
        let result = writer.set("k", b"after").await;
        (result, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !write.is_finished(),
        "SET completed while writes were paused"
    );
    // Reads and REPLICAOF-class admin commands still run while paused.
    assert_eq!(admin.get("k").await.unwrap(), Some(b"before".to_vec()));
    admin.info_replication().await.unwrap();

    let unpaused_at = Instant::now();
    admin.client_unpause().await.unwrap();
    let (result, finished_at) = write.await.unwrap();
    result.unwrap();
    assert!(finished_at >= unpaused_at);
    assert!(finished_at - unpaused_at < Duration::from_secs(1));
    assert_eq!(admin.get("k").await.unwrap(), Some(b"after".to_vec()));
}

#[tokio::test]
async fn failover_to_swaps_roles() {
    let (_master, replica, m, r) = master_and_replica().await;
    until_a_replica(&m, "replica online on master", 10, |replica| {
        replica.state == vko_valkey::parse::ReplicaSyncState::Online
    })
    .await;
    m.set("k", b"v").await.unwrap();

    let err = m
        .failover_to("no-such-host", 1, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ServerError", "{err}");

    m.failover_to("127.0.0.1", replica.port, Duration::from_secs(5))
        .await
        .unwrap();
    eventually(
        "old master became a replica",
        Duration::from_secs(10),
        || async { matches!(m.role().await.ok()?, RoleReply::Replica { .. }).then_some(()) },
    )
    .await;
    eventually("replica became master", Duration::from_secs(10), || async {
        matches!(r.role().await.ok()?, RoleReply::Master { .. }).then_some(())
    })
    .await;
    assert_eq!(r.get("k").await.unwrap(), Some(b"v".to_vec()));
}

#[tokio::test]
async fn stopped_server_times_out_within_the_bound() {
    let server = Server::start(&[]);
    let mut opts = server.opts();
    opts.command_timeout = Duration::from_millis(700);
    opts.connect_timeout = Duration::from_millis(700);
    let client = ValkeyClient::connect(&opts).await.unwrap();
    client.ping().await.unwrap();

    server.proc.signal("STOP");
    let started = Instant::now();
    let err = client.ping().await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(err.reason(), "Timeout", "{err}");
    assert!(took >= Duration::from_millis(650), "{took:?}");
    assert!(
        took < Duration::from_millis(700) + Duration::from_millis(600),
        "{took:?}"
    );

    // A new connection to the stopped server also gives up within connect_timeout.
    let started = Instant::now();
    let err = ValkeyClient::connect(&opts).await.unwrap_err();
    assert_eq!(err.reason(), "Timeout", "{err}");
    assert!(
        started.elapsed() < Duration::from_millis(1300),
        "{:?}",
        started.elapsed()
    );
    server.proc.signal("CONT");
}

#[tokio::test]
async fn lost_connection_is_reported_not_hidden() {
    let mut server = Server::start(&[]);
    let client = server.client().await;
    client.ping().await.unwrap();
    server.proc.kill();
    let started = Instant::now();
    let err = client.ping().await.unwrap_err();
    assert_eq!(err.reason(), "ConnectionFailed", "{err}");
    assert!(started.elapsed() < Duration::from_secs(2));
    // No silent reconnect even when the server is back on the same port.
    let _again = Server::start_on(temp_dir("again"), server.port, &[]);
    let err = client.ping().await.unwrap_err();
    assert_eq!(err.reason(), "ConnectionFailed", "{err}");
}

#[tokio::test]
async fn loading_server_is_reported_as_loading() {
    // Build an RDB big enough to load slowly, then start servers on copies of it with a per-key load
    // delay (200k keys x 50 us = 10 s of loading).
    let mut seed = Server::start(&["--enable-debug-command", "yes"]);
    let client = seed.client().await;
    client
        .command(["DEBUG", "POPULATE", "200000"])
        .await
        .unwrap();
    client.command(["SAVE"]).await.unwrap();
    drop(client);
    seed.proc.kill();
    let slow_load = [
        "--key-load-delay",
        "50",
        "--loading-process-events-interval-bytes",
        "1024",
    ];
    let copy = |label: &str| {
        let dir = temp_dir(label);
        std::fs::copy(
            seed.dir.path().join("dump.rdb"),
            dir.path().join("dump.rdb"),
        )
        .unwrap();
        dir
    };

    let with_password = Server::start_in(
        copy("loading-auth"),
        &[&["--requirepass", "pw"][..], &slow_load].concat(),
    );
    let mut opts = with_password.opts();
    opts.password = Some("pw".into());
    // AUTH and INFO are allowed while loading, so this connection comes up...
    let client = ValkeyClient::connect(&opts).await.unwrap();
    let persistence = client.info_persistence().await.unwrap();
    assert!(persistence.loading, "{persistence:?}");
    // ...but most commands answer LOADING.
    let err = client.ping().await.unwrap_err();
    assert_eq!(err.reason(), "Loading", "{err}");

    // Without a password the client's own handshake PING meets LOADING.
    let open = Server::start_in(copy("loading-open"), &slow_load);
    let err = ValkeyClient::connect(&open.opts()).await.unwrap_err();
    assert_eq!(err.reason(), "Loading", "{err}");
}

/// Two servers, the second told to replicate the first, with a client of each (the link may not
/// be up yet).
/// A stopping replica's drain (ADR 0051): from the paused instant on, a Sentinel's `REPLICAOF
/// NO ONE` waits, and the INFO read in the same transaction says what the server was then.
#[tokio::test]
async fn pause_all_reading_replication_holds_every_later_command_and_tells_the_role() {
    let (_master, replica, _m, r) = master_and_replica().await;
    let promoter = replica.client().await;
    let paused_at = Instant::now();
    let info = r
        .pause_all_reading_replication(Duration::from_millis(1000))
        .await
        .unwrap();
    assert_eq!(info.role, ReplicationRole::Replica);
    let promote = tokio::spawn(async move {
        let result = promoter.replicaof_no_one().await;
        (result, Instant::now())
    });
    let (result, ran_at) = promote.await.unwrap();
    result.unwrap();
    assert!(
        ran_at - paused_at >= Duration::from_millis(800),
        "REPLICAOF NO ONE ran {:?} into the pause",
        ran_at - paused_at
    );
    // Promoted before the pause: the same call says master.
    let info = r
        .pause_all_reading_replication(Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(info.role, ReplicationRole::Master);
}

async fn master_and_replica() -> (Server, Server, ValkeyClient, ValkeyClient) {
    let master = Server::start(&[]);
    let replica = Server::start(&[]);
    let m = master.client().await;
    let r = replica.client().await;
    r.replicaof("127.0.0.1", master.port).await.unwrap();
    (master, replica, m, r)
}

/// The master's `INFO replication` once one of its connected replicas `matches` (within
/// `seconds`).
async fn until_a_replica(
    master: &ValkeyClient,
    what: &str,
    seconds: u64,
    matches: impl Fn(&ConnectedReplica) -> bool,
) -> ReplicationInfo {
    eventually(what, Duration::from_secs(seconds), || async {
        let info = master.info_replication().await.ok()?;
        info.replicas.iter().any(&matches).then_some(info)
    })
    .await
}

/// A direct switchover dials its target by the name the master lists it under. A pod replaced
/// under the same name answers that name while the master still lists the old process's
/// connection, caught up (measured on the testbed: every pod deleted at once without Sentinel,
/// a replacement still copying was promoted empty and the master resynced from it). Stand-in:
/// the replica announces the port of an empty server, then stops answering (SIGSTOP: its
/// connection stays listed `online`); the switchover must refuse, not promote the empty server.
#[tokio::test]
async fn a_direct_switchover_never_promotes_another_process_answering_a_listed_replica_name() {
    use common::LocalDial;
    use vko_valkey::switchover::{self, Address, Promoter};

    let impostor = Server::start(&[]);
    let master = Server::start(&[]);
    let m = master.client().await;
    let announced = impostor.port.to_string();
    let replica = Server::start(&[
        "--replicaof",
        "localhost",
        &master.port.to_string(),
        "--replica-announce-ip",
        "localhost",
        "--replica-announce-port",
        &announced,
    ]);
    for i in 0..100 {
        m.set(&format!("k{i}"), b"v").await.unwrap();
    }
    // The master lists the replica under the impostor's port, online and caught up.
    let info = until_a_replica(&m, "the replica caught up", 20, |r| {
        r.port == impostor.port && r.state == vko_valkey::parse::ReplicaSyncState::Online
    })
    .await;
    eventually(
        "the listed offset caught up",
        Duration::from_secs(5),
        || async {
            let now = m.info_replication().await.ok()?;
            now.replicas
                .iter()
                .any(|r| r.offset >= now.master_repl_offset)
                .then_some(())
        },
    )
    .await;
    assert_eq!(info.replicas.len(), 1);
    replica.proc.signal("STOP");

    let settings = switchover::Settings {
        pause: Duration::from_secs(2),
        ..switchover::Settings::default()
    };
    let promoter = Promoter::Direct {
        target: Some(Address::new("localhost", impostor.port)),
    };
    let outcome = switchover::switchover(
        &LocalDial,
        &m,
        &Address::new("localhost", master.port),
        &promoter,
        &settings,
    )
    .await;
    replica.proc.signal("CONT");
    let error = match outcome {
        Err(error) => error,
        Ok(outcome) => {
            panic!("switched over to a server that never copied the master: {outcome:?}")
        }
    };
    assert!(
        matches!(
            &error,
            Error::Switchover {
                step: "catch-up",
                ..
            }
        ),
        "{error}"
    );
    // Nothing moved: the master keeps its role and its data, and takes writes again.
    assert_eq!(
        m.info_replication().await.unwrap().role,
        ReplicationRole::Master
    );
    assert_eq!(m.dbsize().await.unwrap(), 100);
    m.set("after", b"v").await.unwrap();
    let i = impostor.client().await;
    assert_eq!(i.dbsize().await.unwrap(), 0);
}
