//! Three data pods without Sentinel: the operator is the master authority (ADR 0005). The cluster
//! reaches OK with one master; when the master's valkey-server crashes (SIGKILL; the testbed
//! restarts it in place, into the hold) the operator promotes the most caught-up replica, records
//! it in `status.masterPod`, and a write acknowledged before the crash is still there. When the
//! master's POD is deleted (graceful), its sidecar hands the role over to a synced replica before
//! the server stops: under a plain-`SET` writer no OK'd write is lost, and `-rw` and
//! `status.masterPod` follow the new master.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support};

use std::time::{Duration, Instant};

use ha_support::{
    Follow, Pods, Writer, endpoint_pods, kill_valkey_server, missing_keys, role_master_pod,
    valkey_cli_reply,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use operator_support::{OperatorTest, events_about, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{apply_yaml, pod_ip, valkey_cli};

/// The Valkey `trio` (3 data pods, no Sentinel) applied in `ns` and OK with 3 ready; its API and
/// the master pod the status names.
async fn trio_ok(client: &kube::Client, ns: &str) -> anyhow::Result<(Api<Valkey>, String)> {
    apply_yaml(
        client,
        ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: trio}\nspec: {replicas: 3, image: valkey/valkey:8.0}\n",
    )
    .await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let valkey = wait_for_valkey(
        &valkeys,
        "trio",
        "3 ready and OK",
        Duration::from_secs(180),
        ok_with(3),
    )
    .await?;
    let master = valkey
        .status
        .and_then(|status| status.master_pod)
        .ok_or_else(|| anyhow::anyhow!("trio is OK without a masterPod"))?;
    Ok((valkeys, master))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_master_is_replaced_by_the_most_caught_up_replica() {
    let test = OperatorTest::start("op-trio").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    let (valkeys, old_master) = trio_ok(&client, &ns).await.unwrap();

    let ip = pod_ip(&client, &ns, &old_master).await.unwrap();
    assert_eq!(
        valkey_cli_reply(&ip, &["SET", "before-crash", "kept"])
            .await
            .unwrap(),
        "OK"
    );
    // Acknowledged by both replicas before the crash.
    assert_eq!(
        valkey_cli_reply(&ip, &["WAIT", "2", "5000"]).await.unwrap(),
        "2"
    );

    kill_valkey_server(&client, &ns, &old_master).await.unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        "trio",
        "a new master recorded and the cluster OK again",
        Duration::from_secs(120),
        |v| {
            ok_with(3)(v)
                && v.status.as_ref().and_then(|s| s.master_pod.as_deref())
                    != Some(old_master.as_str())
        },
    )
    .await
    .unwrap();
    let new_master = valkey.status.unwrap().master_pod.unwrap();
    let ip = pod_ip(&client, &ns, &new_master).await.unwrap();
    let role = valkey_cli(&ip, &["ROLE"]).await.unwrap();
    assert!(role.starts_with("master"), "{new_master}: {role}");
    assert_eq!(
        valkey_cli_reply(&ip, &["GET", "before-crash"])
            .await
            .unwrap(),
        "kept"
    );
    // The restarted former master follows the new one instead of serving empty.
    let old_ip = pod_ip(&client, &ns, &old_master).await.unwrap();
    let old_role = valkey_cli(&old_ip, &["ROLE"]).await.unwrap();
    assert!(old_role.starts_with("slave"), "{old_master}: {old_role}");

    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_master_pod_hands_over_to_a_synced_replica_without_losing_an_acknowledged_write()
 {
    let test = OperatorTest::start("op-trio-del").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    let (valkeys, old_master) = trio_ok(&client, &ns).await.unwrap();

    let writer = Writer::start_following(
        client.clone(),
        ns.clone(),
        "trio".into(),
        "handover".into(),
        None,
        Follow::RoleMaster,
    );
    while writer.acked().await < 500 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deleted_at = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.delete(&old_master, &DeleteParams::default())
        .await
        .unwrap();

    // A new master answers role:master (the sidecar handed over before its server stopped).
    let new_master = loop {
        assert!(
            deleted_at.elapsed() < Duration::from_secs(60),
            "no other pod answers role:master 60 s after deleting {old_master}"
        );
        let listed = Pods::list(&client, &ns).await.unwrap();
        if let Ok(pod) = role_master_pod(&listed, "trio").await
            && pod != old_master
        {
            break pod;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = deleted_at.elapsed();

    // status.masterPod and -rw follow it; the cluster is whole again.
    wait_for_valkey(
        &valkeys,
        "trio",
        "OK with the new master recorded",
        Duration::from_secs(180),
        |v| {
            ok_with(3)(v)
                && v.status.as_ref().and_then(|s| s.master_pod.as_deref())
                    == Some(new_master.as_str())
        },
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let rw = endpoint_pods(&client, &ns, "trio-rw").await.unwrap();
        if rw == vec![new_master.clone()] {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "-rw endpoints {rw:?}, want [{new_master}]"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let after = writer.acked().await;
    while writer.acked().await < after + 300 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = writer.stop().await;

    let ip = pod_ip(&client, &ns, &new_master).await.unwrap();
    let missing = missing_keys(&ip, &log.acked).await.unwrap();
    eprintln!(
        "no-Sentinel handover: {old_master} -> {new_master}, role:master after {took:?}; {} OK'd, {} lost; switchover gaps {:?}; longest gap {:?}; {} errors (first: {:?})",
        log.acked.len(),
        missing.len(),
        log.switchover_gaps(),
        log.longest_gap(),
        log.error_count,
        log.errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        missing.is_empty(),
        "acknowledged writes lost: {:?}",
        missing.iter().take(20).collect::<Vec<_>>()
    );
    // The sidecar handed over and the operator only adopted: a promotion of its own while the
    // terminating master still acknowledged writes is how writes got lost (CI of session 7).
    let promotions: Vec<_> = events_about(&client, &ns, "trio", "Normal")
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("MasterPromoted"))
        .filter_map(|e| e.note)
        .collect();
    assert!(
        promotions.is_empty(),
        "the operator promoted during the handover: {promotions:?}"
    );

    test.cleanup().await.unwrap();
}
