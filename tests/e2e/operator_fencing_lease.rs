//! Master self-fencing without Sentinel (ADR 0022, issue 14 row 1): the master of a cluster of 3
//! data pods without Sentinel is cut off the network for 40 s (the testbed's `partition` fault)
//! while one writer runs inside the master pod's network namespace (writing to 127.0.0.1) and one
//! writes through `<name>-rw`'s ClusterIP, every `OK` counted. Before the master Lease the
//! operator promoted a replica on its first failed probe and both kept the master label (1,453 of
//! 1,566 writes lost, two masters forever). Asserted: acknowledged writes are lost only among
//! those acknowledged within F (+ one renew interval and the fault's latency) of the cut, none of
//! the `-rw` writer's; at every sample at most one pod is labelled master and `-rw` has at most one
//! endpoint; after the heal Phase OK, one master, both replicas linked to it.
//!
//! `exclusive_`: a timing bound measured on a 2-core machine; it runs alone.

use vko_e2e::{fence_support, ha_support, operator_support};

use std::time::{Duration, Instant};

use fence_support::{AckWriter, Sampler, pod_netns, sidecar_log_lines};
use ha_support::{
    Pods, dump_container_logs, endpoint_pods, eventually, info, info_field, missing_keys,
};
use kube::api::Api;
use operator_support::{OperatorTest, ok_with};
use vko_api::Valkey;
use vko_testbed::control::Fault;

const NAME: &str = "fencel";
/// The sidecar's default F (`vko_authority::DEFAULT_FENCE_AFTER`).
const F: Duration = Duration::from_secs(2);
/// The holder renews every 500 ms; its last renew can be that much older than the cut.
const POLL: Duration = Duration::from_millis(500);
/// The fault's own latency (the control socket, `ip link set`) and scheduling on 2 cores.
const SLACK: Duration = Duration::from_millis(500);
const PARTITION: Duration = Duration::from_secs(40);

/// Phase OK with 3 ready, the recorded master alone behind `-rw`, answering master with both
/// replicas online; returns it.
async fn whole(client: &kube::Client, ns: &str, timeout: Duration) -> anyhow::Result<String> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    eventually(timeout, "the cluster whole", || async {
        let valkey = valkeys.get(NAME).await?;
        anyhow::ensure!(ok_with(3)(&valkey), "status {:?}", valkey.status);
        let master = valkey
            .status
            .as_ref()
            .and_then(|s| s.master_pod.clone())
            .ok_or_else(|| anyhow::anyhow!("no masterPod"))?;
        let rw = endpoint_pods(client, ns, &format!("{NAME}-rw")).await?;
        anyhow::ensure!(rw == [master.clone()], "-rw {rw:?}");
        let ip = Pods::list(client, ns)
            .await?
            .ip(&master)
            .unwrap_or_default();
        let replication = info(&ip, "replication").await?;
        anyhow::ensure!(
            info_field(&replication, "role") == Some("master")
                && info_field(&replication, "connected_slaves") == Some("2"),
            "{master}: {replication}"
        );
        for i in 0..2 {
            let line = info_field(&replication, &format!("slave{i}")).unwrap_or_default();
            anyhow::ensure!(line.contains("state=online"), "{master} slave{i}: {line}");
        }
        Ok(master)
    })
    .await
}

async fn wait_for_acks(writer: &AckWriter, at_least: usize, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while writer.acked() < at_least {
        assert!(Instant::now() < deadline, "{what}: no progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_partitioned_master_without_sentinel_fences_on_its_lease() {
    let test = OperatorTest::start("op-fencel").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    test
        .apply_until_ok(
            &format!(
                "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0}}\n"
            ),
            NAME,
            3,
            Duration::from_secs(240),
        )
        .await
        .unwrap();
    let old_master = match whole(&client, &ns, Duration::from_secs(120)).await {
        Ok(m) => m,
        Err(e) => {
            dump_container_logs(&client, &ns, 60).await;
            panic!("{e:#}");
        }
    };
    let netns = pod_netns(&client, &ns, &old_master).await.unwrap();
    let inside = AckWriter::in_netns(&netns, "inside").unwrap();
    let rw = AckWriter::through_service(&client, &ns, &format!("{NAME}-rw"), "rw")
        .await
        .unwrap();
    wait_for_acks(&inside, 300, "the writer inside the master's netns").await;
    wait_for_acks(&rw, 300, "the writer through -rw").await;
    let sampler = Sampler::start(
        client.clone(),
        ns.clone(),
        NAME.into(),
        Duration::from_millis(150),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    eprintln!("partitioning the master {old_master} for {PARTITION:?}");
    let cut = Instant::now();
    test.testbed
        .fault(Fault::Partition {
            namespace: ns.clone(),
            pod: old_master.clone(),
        })
        .await
        .unwrap();
    let inside_at_cut = inside.acked();
    tokio::time::sleep(PARTITION).await;
    let inside_before_heal = inside.acked();
    test.testbed
        .fault(Fault::Heal {
            namespace: ns.clone(),
            pod: old_master.clone(),
        })
        .await
        .unwrap();
    let healed = Instant::now();
    eprintln!("healed after {:?}", cut.elapsed());

    let master = match whole(&client, &ns, Duration::from_secs(180)).await {
        Ok(m) => m,
        Err(e) => {
            dump_container_logs(&client, &ns, 80).await;
            panic!("{e:#}");
        }
    };
    eprintln!(
        "whole again {:?} after the heal, master {master}",
        healed.elapsed()
    );
    // Writes flow again through -rw after the heal.
    let rw_after = rw.acked();
    wait_for_acks(&rw, rw_after + 300, "the writer through -rw after the heal").await;
    let samples = sampler.stop().await;
    let inside = inside.stop().await;
    let rw = rw.stop().await;

    let ip = Pods::list(&client, &ns).await.unwrap().ip(&master).unwrap();
    let mut lost_at: Vec<(String, Duration)> = Vec::new();
    let mut lost_before_cut = 0;
    let mut rw_lost = 0;
    for (writer, acks) in [("inside", &inside), ("rw", &rw)] {
        let missing = missing_keys(&ip, &acks.keys).await.unwrap();
        let missing: std::collections::HashSet<&String> = missing.iter().collect();
        if writer == "rw" {
            rw_lost = missing.len();
        }
        for (key, at) in acks.keys.iter().zip(&acks.at) {
            if missing.contains(key) {
                match at.checked_duration_since(cut) {
                    Some(after) => lost_at.push((format!("{writer} {key}"), after)),
                    None => lost_before_cut += 1,
                }
            }
        }
        eprintln!(
            "{writer}: {} acknowledged, {} lost, {} errors (first: {:?})",
            acks.keys.len(),
            missing.len(),
            acks.errors,
            acks.first_errors.iter().take(4).collect::<Vec<_>>()
        );
    }
    let last_lost = lost_at.iter().map(|(_, at)| *at).max();
    let acked_inside_during = inside_before_heal - inside_at_cut;
    let inside_acked_late = inside
        .at
        .iter()
        .filter(|at| {
            at.checked_duration_since(cut)
                .is_some_and(|d| d > F + POLL + SLACK)
        })
        .filter(|at| at.checked_duration_since(healed).is_none())
        .count();
    eprintln!(
        "MEASURED fencing 3 without Sentinel partition {PARTITION:?}: {} acknowledged writes lost after the cut ({} before), the last acknowledged {:?} after the cut (F {F:?}); the writer inside the partitioned master's netns got {acked_inside_during} OKs during the partition, {inside_acked_late} of them later than F + {:?}; samples {} (longest interval {:?}, blind at most {:?}): at most {} pods labelled master ({:?} at {:?}), at most {} -rw endpoints ({:?})",
        lost_at.len(),
        lost_before_cut,
        last_lost,
        POLL + SLACK,
        samples.samples,
        samples.longest_interval,
        samples.longest_blind,
        samples.max_master_labels,
        samples.max_master_labels_pods,
        samples.max_master_labels_at,
        samples.max_rw_endpoints,
        samples.max_rw_endpoints_pods,
    );
    // What the old master's fencer logged (its fence, its demotion, its unfence), and whether the
    // operator reported MasterFenced.
    for line in sidecar_log_lines(
        &client,
        &ns,
        &old_master,
        &[
            "FENCED",
            "UNFENCED",
            "demoted itself",
            "fenced annotation",
            "master Lease",
        ],
    )
    .await
    {
        eprintln!("{old_master} sidecar: {line}");
    }
    let fenced_events: Vec<String> = operator_support::events_about(&client, &ns, NAME, "Warning")
        .await
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Authority"))
        })
        .map(|e| e.note.unwrap_or_default())
        .collect();
    eprintln!("MasterFenced Warning Events: {fenced_events:?}");
    if lost_before_cut > 0 || last_lost.is_some_and(|at| at > F + POLL + SLACK) {
        dump_container_logs(&client, &ns, 60).await;
    }
    assert_eq!(
        lost_before_cut, 0,
        "writes acknowledged before the cut were lost"
    );
    assert!(
        last_lost.is_none_or(|at| at <= F + POLL + SLACK),
        "a write acknowledged {last_lost:?} after the cut was lost: {:?}",
        lost_at.iter().rev().take(5).collect::<Vec<_>>()
    );
    assert_eq!(rw_lost, 0, "writes acknowledged through -rw were lost");
    assert_eq!(
        inside_acked_late, 0,
        "the partitioned master acknowledged writes after it should have fenced"
    );
    assert!(samples.samples > 100, "too few samples: {samples:?}");
    assert!(
        samples.longest_blind <= Duration::from_millis(250),
        "a watch blind too long: {samples:?}"
    );
    assert!(
        samples.max_master_labels <= 1,
        "two pods labelled master: {samples:?}"
    );
    assert!(
        samples.max_rw_endpoints <= 1,
        "two -rw endpoints: {samples:?}"
    );
    test.cleanup().await.unwrap();
}
