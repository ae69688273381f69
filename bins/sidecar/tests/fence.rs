//! The fencer (ADR 0019) against a real valkey-server and three real Sentinels on 127.0.0.1: two
//! of the three Sentinels stopped (SIGSTOP: connections hang, as in a partition) leave the master
//! without a provable majority, so within F it stops acknowledging writes; when they resume it
//! acknowledges again.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{FakePods, MONITOR, Sentinel, Server, eventually, node_for};
use vko_sidecar::conf::RoleLine;
use vko_sidecar::fence::{FenceSettings, FenceState, fence_loop};
use vko_valkey::{ConnectOptions, ValkeyClient};

/// One `SET` with a short timeout: `true` when it was acknowledged.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_without_a_sentinel_majority_stops_acknowledging_within_f() {
    let master = Server::start(&RoleLine::Master);
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port)).collect();
    for s in &sentinels {
        let c = s.client().await;
        eventually(
            "sentinel sees its 2 peers",
            Duration::from_secs(40),
            || async {
                let m = c.master(MONITOR).await.ok()?;
                (m.num_other_sentinels == 2).then_some(())
            },
        )
        .await;
    }
    let node = Arc::new(node_for(
        &master,
        &[],
        &sentinels.iter().collect::<Vec<_>>(),
        Arc::new(FakePods::default()),
    ));
    let state = Arc::new(FenceState::default());
    let settings = FenceSettings::default();
    let f = settings.fence_after;
    let fencer = tokio::spawn(fence_loop(node, state.clone(), settings));

    // The majority names this master: it stays writable.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!state.is_fenced(), "fenced while the majority names it");
    assert!(acknowledged(&master, "before").await);

    // One of three Sentinels hangs: the two others are still a majority, and its hang must not
    // hide their answers (the round asks each on its own budget).
    sentinels[0].proc.signal("STOP");
    tokio::time::sleep(f + Duration::from_secs(2)).await;
    assert!(
        !state.is_fenced(),
        "fenced while 2 of 3 Sentinels name it and one hangs"
    );
    assert!(acknowledged(&master, "one-sentinel-hung").await);

    // Two of three Sentinels hang: one answering Sentinel is no majority.
    let cut = Instant::now();
    sentinels[1].proc.signal("STOP");
    let fenced_after = eventually("the master fences", Duration::from_secs(10), || async {
        state.is_fenced().then(|| cut.elapsed())
    })
    .await;
    let mark = state.mark().unwrap();
    assert_eq!(mark.reason.as_str(), "AuthorityNotProven");
    // Proof ages from the last round before the cut (≤ one poll + one ask earlier).
    assert!(
        fenced_after <= f + Duration::from_millis(700),
        "fenced {fenced_after:?} after the cut, F {f:?}"
    );
    assert!(
        !acknowledged(&master, "while-fenced").await,
        "a fenced master acknowledged"
    );
    // Renewed past the 5 s pause: still not writable.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(state.is_fenced());
    assert!(
        !acknowledged(&master, "still-fenced").await,
        "the pause lapsed"
    );

    sentinels[0].proc.signal("CONT");
    sentinels[1].proc.signal("CONT");
    let healed = Instant::now();
    eventually("the master unfences", Duration::from_secs(10), || async {
        (!state.is_fenced()).then_some(())
    })
    .await;
    let unfenced_after = healed.elapsed();
    assert!(acknowledged(&master, "after").await);
    println!(
        "MEASURED fence: fenced {} ms after 2 of 3 Sentinels stopped (F {} ms), unfenced {} ms after they resumed",
        fenced_after.as_millis(),
        f.as_millis(),
        unfenced_after.as_millis()
    );
    fencer.abort();
}
