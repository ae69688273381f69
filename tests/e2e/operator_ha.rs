//! Sentinel HA acceptance: 3 data pods + 3 Sentinels reach OK; exactly one pod is labelled master and
//! it is the one `INFO replication` says; `-rw` routes to it, `-r` to the two replicas, `-all` to
//! all three; every Sentinel knows 2 replicas and 2 other Sentinels; a key written on the master is
//! on both replicas; no IP address in any Sentinel reply or `INFO replication` (host names only).
//! Then every pod (data and Sentinel) is deleted once, one at a time, each time waiting until the
//! cluster is OK again, and all of it is checked again. Last, a Sentinel peer that does not exist
//! (a hello message published on the master with an unknown run id) makes every Sentinel count 3
//! others; the operator resets them itself, one at a time (a `SentinelReset` Event each, ADR
//! 0024), until every Sentinel knows its 2 real peers and `SentinelPeersStale` is False
//! (`SentinelPeersCurrent`).
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support};

use std::time::Duration;

use ha_support::{
    Pods, ROLE_LABEL, Reply, SENTINEL_PORT, call, contains_ipv4, endpoint_pods, info, info_field,
    pod_is_ready,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use operator_support::{OperatorTest, condition, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{apply_yaml, wait_until};

const NAME: &str = "ha";

/// Every pod Ready (data and Sentinel) and the Valkey OK.
async fn wait_all_ok(client: &kube::Client, ns: &str, what: &str) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(&valkeys, NAME, what, Duration::from_secs(240), ok_with(3)).await?;
    wait_until(what, Duration::from_secs(180), || async {
        let pods = Pods::list(client, ns)
            .await
            .map_err(|e| vko_testbed::Error::Other(format!("{e:#}")))?;
        let ready = pods
            .by_name
            .values()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_is_ready(p))
            .count();
        Ok((ready == 6).then_some(()))
    })
    .await?;
    Ok(())
}

/// The whole conformance check; retried by the caller until it holds (labels, endpoints and
/// Sentinel views converge within seconds after a change).
async fn check_conformance(client: &kube::Client, ns: &str, key: &str) -> anyhow::Result<()> {
    let pods = Pods::list(client, ns).await?;
    let data = pods.names_with_prefix(&format!("{NAME}-"));
    anyhow::ensure!(data.len() == 3, "data pods {data:?}");
    let sentinels = pods.names_with_prefix(&format!("{NAME}-sentinel-"));
    anyhow::ensure!(sentinels.len() == 3, "sentinel pods {sentinels:?}");

    let mut labelled_master = Vec::new();
    let mut real_master = Vec::new();
    for pod in &data {
        let ip = pods
            .ip(pod)
            .ok_or_else(|| anyhow::anyhow!("{pod} has no IP"))?;
        let label = pods.by_name[pod]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ROLE_LABEL).cloned());
        if label.as_deref() == Some("master") {
            labelled_master.push(pod.clone());
        }
        let name_label = pods.by_name[pod]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("vko.gtrfc.com/instanceName").cloned());
        anyhow::ensure!(
            name_label.as_deref() == Some(pod.as_str()),
            "{pod} instanceName label {name_label:?}"
        );
        let replication = info(&ip, "replication").await?;
        anyhow::ensure!(
            !contains_ipv4(&replication),
            "IP address in INFO replication of {pod}:\n{replication}"
        );
        match info_field(&replication, "role") {
            Some("master") => {
                real_master.push(pod.clone());
                anyhow::ensure!(
                    info_field(&replication, "connected_slaves") == Some("2"),
                    "{pod} is master without 2 replicas:\n{replication}"
                );
                anyhow::ensure!(label.as_deref() == Some("master"), "{pod} label {label:?}");
            }
            Some("slave") => {
                anyhow::ensure!(
                    info_field(&replication, "master_link_status") == Some("up"),
                    "{pod} link down:\n{replication}"
                );
                anyhow::ensure!(label.as_deref() == Some("replica"), "{pod} label {label:?}");
            }
            other => anyhow::bail!("{pod} role {other:?}"),
        }
    }
    anyhow::ensure!(
        labelled_master.len() == 1 && labelled_master == real_master,
        "labelled master {labelled_master:?}, INFO says {real_master:?}"
    );
    let master = &real_master[0];
    let replicas: Vec<String> = data.iter().filter(|p| *p != master).cloned().collect();

    assert_eq_sets(
        endpoint_pods(client, ns, &format!("{NAME}-rw")).await?,
        vec![master.clone()],
        "-rw",
    )?;
    assert_eq_sets(
        endpoint_pods(client, ns, &format!("{NAME}-r")).await?,
        replicas.clone(),
        "-r",
    )?;
    assert_eq_sets(
        endpoint_pods(client, ns, &format!("{NAME}-all")).await?,
        data.clone(),
        "-all",
    )?;
    // The Services the reference runs (ADR 0026: no `<name>` Service), and its healthy message.
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = services
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    names.sort();
    anyhow::ensure!(
        names
            == [
                "ha-all",
                "ha-headless",
                "ha-r",
                "ha-rw",
                "ha-sentinel-headless"
            ],
        "Services {names:?}"
    );
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let message = valkeys.get(NAME).await?.status.and_then(|s| s.message);
    anyhow::ensure!(
        message.as_deref() == Some("Cluster is healthy"),
        "status.message {message:?}"
    );

    for sentinel in &sentinels {
        let ip = pods
            .ip(sentinel)
            .ok_or_else(|| anyhow::anyhow!("{sentinel} has no IP"))?;
        let master_reply = call(&ip, SENTINEL_PORT, &["SENTINEL", "MASTER", NAME]).await?;
        let replicas_reply = call(&ip, SENTINEL_PORT, &["SENTINEL", "REPLICAS", NAME]).await?;
        let sentinels_reply = call(&ip, SENTINEL_PORT, &["SENTINEL", "SENTINELS", NAME]).await?;
        for (what, reply) in [
            ("MASTER", &master_reply),
            ("REPLICAS", &replicas_reply),
            ("SENTINELS", &sentinels_reply),
        ] {
            let strings = reply.strings();
            anyhow::ensure!(
                !strings.iter().any(|s| contains_ipv4(s)),
                "IP address in SENTINEL {what} of {sentinel}: {strings:?}"
            );
        }
        let master_map = master_reply.as_map();
        anyhow::ensure!(
            master_map
                .get("ip")
                .is_some_and(|h| h.split('.').next() == Some(master.as_str())),
            "{sentinel} names master {:?}, INFO says {master}",
            master_map.get("ip")
        );
        let known: Vec<String> = replicas_reply
            .items()
            .iter()
            .map(Reply::as_map)
            .filter(|m| {
                m.get("flags")
                    .is_some_and(|f| !f.contains("s_down") && !f.contains("disconnected"))
            })
            .filter_map(|m| Some(m.get("ip")?.split('.').next()?.to_owned()))
            .collect();
        assert_eq_sets(
            known,
            replicas.clone(),
            &format!("{sentinel}: healthy replicas ({replicas_reply:?})"),
        )?;
        anyhow::ensure!(
            replicas_reply.items().len() == 2,
            "{sentinel} lists {} replicas",
            replicas_reply.items().len()
        );
        let peers: Vec<String> = sentinels_reply
            .items()
            .iter()
            .map(Reply::as_map)
            .filter(|m| m.get("flags").is_some_and(|f| !f.contains("s_down")))
            .filter_map(|m| Some(m.get("ip")?.split('.').next()?.to_owned()))
            .collect();
        let mut others: Vec<String> = sentinels
            .iter()
            .filter(|s| *s != sentinel)
            .cloned()
            .collect();
        others.sort();
        assert_eq_sets(peers, others, &format!("{sentinel}: other Sentinels"))?;
        anyhow::ensure!(
            sentinels_reply.items().len() == 2,
            "{sentinel} lists {} Sentinels",
            sentinels_reply.items().len()
        );
    }

    // A key written on the master reaches both replicas.
    let master_ip = pods.ip(master).unwrap_or_default();
    let set = call(&master_ip, 6379, &["SET", key, "on-every-pod"]).await?;
    anyhow::ensure!(
        set == Reply::Simple("OK".into()),
        "SET on {master}: {set:?}"
    );
    let waited = call(&master_ip, 6379, &["WAIT", "2", "5000"]).await?;
    anyhow::ensure!(waited == Reply::Int(2), "WAIT on {master}: {waited:?}");
    for replica in &replicas {
        let ip = pods.ip(replica).unwrap_or_default();
        let got = call(&ip, 6379, &["GET", key]).await?;
        anyhow::ensure!(
            got.text() == Some("on-every-pod"),
            "GET {key} on {replica}: {got:?}"
        );
    }
    eprintln!("conformance holds: master {master}, replicas {replicas:?}");
    Ok(())
}

fn assert_eq_sets(mut got: Vec<String>, mut want: Vec<String>, what: &str) -> anyhow::Result<()> {
    got.sort();
    want.sort();
    anyhow::ensure!(got == want, "{what}: got {got:?}, want {want:?}");
    Ok(())
}

async fn conformance_eventually(client: &kube::Client, ns: &str, key: &str) -> anyhow::Result<()> {
    let mut last = String::new();
    for _ in 0..60 {
        match check_conformance(client, ns, key).await {
            Ok(()) => return Ok(()),
            Err(error) => last = format!("{error:#}"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    anyhow::bail!("conformance did not hold within 60 s: {last}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_ha_is_conformant_before_and_after_every_pod_was_deleted_once() {
    let test = OperatorTest::start("op-ha").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: ha}\nspec: {replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}}\n",
    )
    .await
    .unwrap();
    wait_all_ok(&client, &ns, "3 data + 3 Sentinel pods ready and OK")
        .await
        .unwrap();
    conformance_eventually(&client, &ns, "first").await.unwrap();

    // Every pod once, one at a time (Sentinels first, then the data pods, the master last so
    // the handover happens with a freshly restarted tier around it).
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pods = Pods::list(&client, &ns).await.unwrap();
    let master_host = ha_support::sentinel_master_host(&pods, NAME).await.unwrap();
    let master = master_host.split('.').next().unwrap().to_owned();
    let mut order = pods.names_with_prefix(&format!("{NAME}-sentinel-"));
    order.extend(
        pods.names_with_prefix(&format!("{NAME}-"))
            .into_iter()
            .filter(|p| *p != master),
    );
    order.push(master);
    for pod in order {
        let old_uid = pods.by_name[&pod].metadata.uid.clone();
        eprintln!("deleting {pod}");
        pods_api
            .delete(&pod, &DeleteParams::default())
            .await
            .unwrap();
        wait_until(
            &format!("{pod} to be replaced"),
            Duration::from_secs(180),
            || {
                let pods_api = pods_api.clone();
                let pod = pod.clone();
                let old_uid = old_uid.clone();
                async move {
                    let current = pods_api.get_opt(&pod).await?;
                    Ok(current.filter(|p| p.metadata.uid != old_uid).map(|_| ()))
                }
            },
        )
        .await
        .unwrap();
        wait_all_ok(&client, &ns, &format!("OK again after deleting {pod}"))
            .await
            .unwrap();
    }
    conformance_eventually(&client, &ns, "second")
        .await
        .unwrap();

    stale_sentinel_peers_are_reset_away_by_the_operator(&client, &ns)
        .await
        .unwrap();

    test.cleanup().await.unwrap();
}

/// `SentinelPeersStale` with reason `reason`, as (status, message).
fn peers_condition(valkey: &Valkey, reason: &str) -> Option<(String, String)> {
    condition(valkey, "SentinelPeersStale")
        .filter(|(_, found, _)| found == reason)
        .map(|(status, _, message)| (status, message))
}

async fn stale_sentinel_peers_are_reset_away_by_the_operator(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    // The operator re-checks a healthy cluster every 60 s.
    let recheck = Duration::from_secs(150);
    wait_for_valkey(&valkeys, NAME, "SentinelPeersStale=False", recheck, |v| {
        peers_condition(v, "SentinelPeersCurrent").is_some_and(|(status, _)| status == "False")
    })
    .await?;

    let pods = Pods::list(client, ns).await?;
    let master_host = ha_support::sentinel_master_host(&pods, NAME).await?;
    let master = master_host.split('.').next().unwrap_or_default().to_owned();
    let ip = pods.ip(&master).unwrap_or_default();
    // <ip>,<port>,<run id>,<epoch>,<master name>,<master host>,<master port>,<master epoch>: a
    // Sentinel that never existed, naming the current master at epoch 0 (no failover implied).
    let hello = format!(
        "10.255.255.254,26379,{},0,{NAME},{master_host},6379,0",
        "f".repeat(40)
    );
    let reply = call(
        &ip,
        ha_support::VALKEY_PORT,
        &["PUBLISH", "__sentinel__:hello", &hello],
    )
    .await?;
    eprintln!("published a hello of a Sentinel that does not exist: {reply:?}");
    // Every Sentinel now counts a fourth peer. The operator resets them itself, one at a time
    // and only once the one before has rediscovered its real peers (ADR 0024), with a Normal
    // Event each; the stale state lasts one pass per Sentinel, so it is read from the Events.
    wait_until(
        "a SentinelReset Event for each of the 3 Sentinels that knew the phantom peer",
        recheck,
        || async {
            let resets: Vec<String> = operator_support::events_about(client, ns, NAME, "Normal")
                .await
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some("SentinelReset"))
                .filter_map(|e| e.note)
                .filter(|note| note.contains("knew 3 other Sentinels"))
                .collect();
            Ok((resets.len() >= 3).then_some(()))
        },
    )
    .await?;
    for sentinel in pods.names_with_prefix(&format!("{NAME}-sentinel-")) {
        let sentinel_ip = pods.ip(&sentinel).unwrap_or_default();
        wait_until(
            &format!("{sentinel} to know its 2 real peers and 2 replicas again"),
            Duration::from_secs(60),
            || {
                let sentinel_ip = sentinel_ip.clone();
                async move {
                    let peers = call(
                        &sentinel_ip,
                        SENTINEL_PORT,
                        &["SENTINEL", "SENTINELS", NAME],
                    )
                    .await
                    .map_err(|e| vko_testbed::Error::Other(format!("{e:#}")))?;
                    let replicas =
                        call(&sentinel_ip, SENTINEL_PORT, &["SENTINEL", "REPLICAS", NAME])
                            .await
                            .map_err(|e| vko_testbed::Error::Other(format!("{e:#}")))?;
                    let count = |reply: &Reply| match reply {
                        Reply::Array(Some(items)) => items.len(),
                        _ => 0,
                    };
                    Ok((count(&peers) == 2 && count(&replicas) == 2).then_some(()))
                }
            },
        )
        .await?;
    }
    wait_for_valkey(
        &valkeys,
        NAME,
        "SentinelPeersStale=False after SENTINEL RESET",
        recheck,
        |v| peers_condition(v, "SentinelPeersCurrent").is_some_and(|(status, _)| status == "False"),
    )
    .await?;
    wait_all_ok(client, ns, "OK after the resets").await
}
