//! Auth and persistence acceptance.
//! - Auth: the password comes from a Secret; a data pod refuses commands without it and refuses a
//!   wrong one; with `sentinel.disableAuth` Sentinel answers without AUTH while Valkey still
//!   requires it; a new cluster reports no password rotation; after the Secret's password
//!   changes (grace period 0 s) every server accepts only the new one, replication and the
//!   Sentinels' `auth-pass` moved with it, the Sentinels still without a password.
//! - Persistence rdb / aof / both: data survives deleting the (only) pod; each mode is its own
//!   one-pod Valkey in the test's namespace. Every pod of a persistent 3 data + 3 Sentinel
//!   cluster deleted at once is a row of the disruption matrix (`3+3-persistent`).
//! - Storage changes on an existing cluster (volumeClaimTemplates are immutable): a bigger size is
//!   reported (`StorageSpecNotApplied=True/VolumeClaimTemplatesImmutable`, a Warning Event) while
//!   another change in the same edit still rolls the pod, the claims untouched; turning
//!   persistence off holds the StatefulSet back (`RecreateRequired`, also on `ReconcileBlocked`) with
//!   its claims and pod template untouched and the data still there; changing the spec back clears
//!   both (`StorageSpecApplied`).
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support};

use std::time::Duration;

use ha_support::{Conn, Pods, Reply, SENTINEL_PORT, VALKEY_PORT, call};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, condition, events_about, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{apply_yaml, wait_until};

const PASSWORD: &str = "s3cret-pässword with spaces";
/// What the auth test rotates to.
const ROTATED: &str = "rotated pässword, also with spaces";

async fn authed(ip: &str, password: &str) -> anyhow::Result<(Conn, Reply)> {
    let mut conn = Conn::connect(ip, VALKEY_PORT, Duration::from_secs(5)).await?;
    let reply = conn.call(&["AUTH", password]).await?;
    Ok((conn, reply))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secret_password_is_required_by_valkey_and_not_by_a_sentinel_with_auth_disabled() {
    let test = OperatorTest::start("op-auth").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    let (_, valkey) = test
        .apply_until_ok(
            &format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{PASSWORD}\"}}\n---\n\
                 apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: sec}}\nspec: {{replicas: 3, image: valkey/valkey:8.0, auth: {{secretName: pw, oldPasswordGracePeriod: 0s}}, sentinel: {{enabled: true, replicas: 3, disableAuth: true}}}}\n"
            ),
            "sec",
            3,
            Duration::from_secs(240),
        )
        .await
        .unwrap();
    // A new cluster rotated nothing: no PasswordRotation condition, no rotation Event (its
    // pods not answering yet once made one look like a rotation).
    assert_eq!(condition(&valkey, "PasswordRotation"), None);
    let events = events_about(&client, &ns, "sec", "Normal").await;
    assert!(
        !events
            .iter()
            .any(|e| e.reason.as_deref() == Some("PasswordRotated")),
        "a PasswordRotated Event on a new cluster"
    );
    let master = valkey.status.unwrap().master_pod.unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();

    for pod in pods.names_with_prefix("sec-") {
        let ip = pods.ip(&pod).unwrap();
        let anonymous = call(&ip, VALKEY_PORT, &["GET", "x"]).await.unwrap();
        assert!(
            matches!(&anonymous, Reply::Error(e) if e.starts_with("NOAUTH")),
            "{pod} without a password: {anonymous:?}"
        );
        let (_, wrong) = authed(&ip, "not-the-password").await.unwrap();
        assert!(
            matches!(&wrong, Reply::Error(e) if e.starts_with("WRONGPASS")),
            "{pod} with a wrong password: {wrong:?}"
        );
        let (_, right) = authed(&ip, PASSWORD).await.unwrap();
        assert_eq!(right, Reply::Simple("OK".into()), "{pod}");
    }
    let master_ip = pods.ip(&master).unwrap();
    write_reaches_both_replicas(
        &master_ip,
        PASSWORD,
        "k",
        "the replicas authenticate to the master (masterauth)",
    )
    .await
    .unwrap();

    for sentinel in pods.names_with_prefix("sec-sentinel-") {
        let ip = pods.ip(&sentinel).unwrap();
        let reply = call(
            &ip,
            SENTINEL_PORT,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "sec"],
        )
        .await
        .unwrap();
        let host = reply.items().first().and_then(Reply::text).unwrap_or("");
        assert_eq!(
            host.split('.').next(),
            Some(master.as_str()),
            "{sentinel} without AUTH: {reply:?}"
        );
        // Sentinel monitors the password-protected master (auth-pass), so it sees it up.
        let state = call(&ip, SENTINEL_PORT, &["SENTINEL", "MASTER", "sec"])
            .await
            .unwrap()
            .as_map();
        let flags = state.get("flags").cloned().unwrap_or_default();
        assert_eq!(flags, "master", "{sentinel}: {state:?}");
    }

    // A rotation with `sentinel.disableAuth` (issue 16): the servers move to the new password
    // and retire the old one (grace period 0 s) while the Sentinels keep answering without one
    // and their `auth-pass` to the servers moves with them. Before the data pods' sidecars
    // were told the Sentinels take no password, they gave them the new one and the rotation
    // never finished (the operator could not reach a Sentinel without it).
    Api::<Secret>::namespaced(client.clone(), &ns)
        .patch(
            "pw",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": ROTATED}})),
        )
        .await
        .unwrap();
    wait_until("a PasswordRotated Event", Duration::from_secs(150), || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let events = events_about(&client, &ns, "sec", "Normal").await;
            let rotated = events
                .iter()
                .any(|e| e.reason.as_deref() == Some("PasswordRotated"));
            Ok(rotated.then_some(()))
        }
    })
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    wait_for_valkey(
        &valkeys,
        "sec",
        "PasswordRotation=False/PasswordRotated and OK",
        Duration::from_secs(60),
        |v| {
            ok_with(3)(v)
                && condition(v, "PasswordRotation")
                    .is_some_and(|(s, r, _)| s == "False" && r == "PasswordRotated")
        },
    )
    .await
    .unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    for pod in pods.names_with_prefix("sec-") {
        if pod.starts_with("sec-sentinel-") {
            continue;
        }
        let ip = pods.ip(&pod).unwrap();
        let (_, old) = authed(&ip, PASSWORD).await.unwrap();
        assert!(
            matches!(&old, Reply::Error(e) if e.starts_with("WRONGPASS")),
            "{pod} after the rotation, the old password: {old:?}"
        );
        let (_, new) = authed(&ip, ROTATED).await.unwrap();
        assert_eq!(new, Reply::Simple("OK".into()), "{pod}, the new password");
    }
    write_reaches_both_replicas(
        &pods.ip(&master).unwrap(),
        ROTATED,
        "k2",
        "the replicas authenticate to the master with the new password (masterauth)",
    )
    .await
    .unwrap();
    // A Sentinel whose `auth-pass` were still the old password would have its PINGs refused
    // and flag the servers down after down-after (5 s): look for longer than that, without a
    // password.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        for sentinel in pods.names_with_prefix("sec-sentinel-") {
            let ip = pods.ip(&sentinel).unwrap();
            let state = call(&ip, SENTINEL_PORT, &["SENTINEL", "MASTER", "sec"])
                .await
                .unwrap()
                .as_map();
            let flags = state.get("flags").cloned().unwrap_or_default();
            assert_eq!(flags, "master", "{sentinel} after the rotation: {state:?}");
            let replicas = call(&ip, SENTINEL_PORT, &["SENTINEL", "REPLICAS", "sec"])
                .await
                .unwrap();
            for replica in replicas.items() {
                let replica = replica.as_map();
                let flags = replica.get("flags").cloned().unwrap_or_default();
                assert_eq!(flags, "slave", "{sentinel}: {replica:?}");
            }
        }
    }

    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_survives_deleting_the_pod_with_rdb_aof_and_both() {
    let test = OperatorTest::start("op-persist").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let modes = ["rdb", "aof", "both"];

    for mode in modes {
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: p-{mode}}}\nspec: {{replicas: 1, image: valkey/valkey:8.0, persistence: {{enabled: true, mode: {mode}, size: 100Mi}}}}\n"
            ),
        )
        .await
        .unwrap();
    }
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    for mode in modes {
        wait_for_valkey(
            &valkeys,
            &format!("p-{mode}"),
            "1 ready and OK",
            Duration::from_secs(240),
            ok_with(1),
        )
        .await
        .unwrap();
    }
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pods = Pods::list(&client, &ns).await.unwrap();
    let mut old_uids = Vec::new();
    for mode in modes {
        let pod = format!("p-{mode}-0");
        let ip = pods.ip(&pod).unwrap();
        for i in 0..100 {
            let reply = call(&ip, VALKEY_PORT, &["SET", &format!("key{i}"), mode])
                .await
                .unwrap();
            assert_eq!(reply, Reply::Simple("OK".into()), "{pod}");
        }
        old_uids.push(pods.by_name[&pod].metadata.uid.clone());
    }
    // Every pod deleted (gracefully: valkey-server stops as it would in a rollout).
    for mode in modes {
        pods_api
            .delete(&format!("p-{mode}-0"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for (mode, old_uid) in modes.iter().zip(&old_uids) {
        let pod = format!("p-{mode}-0");
        wait_until(&format!("{pod} replaced"), Duration::from_secs(180), || {
            let pods_api = pods_api.clone();
            let pod = pod.clone();
            let old_uid = old_uid.clone();
            async move {
                Ok(pods_api
                    .get_opt(&pod)
                    .await?
                    .filter(|p| p.metadata.uid != old_uid)
                    .map(|_| ()))
            }
        })
        .await
        .unwrap();
        wait_for_valkey(
            &valkeys,
            &format!("p-{mode}"),
            "OK again after the pod was deleted",
            Duration::from_secs(240),
            ok_with(1),
        )
        .await
        .unwrap();
    }
    let pods = Pods::list(&client, &ns).await.unwrap();
    for mode in modes {
        let pod = format!("p-{mode}-0");
        let ip = pods.ip(&pod).unwrap();
        let size = call(&ip, VALKEY_PORT, &["DBSIZE"]).await.unwrap();
        assert_eq!(size, Reply::Int(100), "{pod} ({mode}) after its deletion");
        let value = call(&ip, VALKEY_PORT, &["GET", "key42"]).await.unwrap();
        assert_eq!(value.text(), Some(mode), "{pod}");
        let persistence = ha_support::info(&ip, "persistence").await.unwrap();
        let aof = ha_support::info_field(&persistence, "aof_enabled");
        assert_eq!(
            aof,
            Some(if mode == "rdb" { "0" } else { "1" }),
            "{pod}: aof_enabled"
        );
    }

    test.cleanup().await.unwrap();
}

/// (size of the `data` claim template, the first container's resources) of the live StatefulSet.
async fn statefulset_storage_and_resources(
    statefulsets: &Api<StatefulSet>,
    name: &str,
) -> anyhow::Result<(Option<String>, serde_json::Value)> {
    use anyhow::Context;
    let sts = statefulsets.get(name).await?;
    let spec = sts.spec.context("StatefulSet without spec")?;
    let size = spec
        .volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .find(|claim| claim.metadata.name.as_deref() == Some("data"))
        .and_then(|claim| claim.spec?.resources?.requests?.get("storage").cloned())
        .map(|quantity| quantity.0);
    let pod_spec = spec.template.spec.context("pod template without spec")?;
    let first = pod_spec.containers.first().context("no container")?;
    Ok((size, serde_json::to_value(&first.resources)?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_changes_on_an_existing_cluster_are_reported_and_never_half_applied() {
    let test = OperatorTest::start("op-storage").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: st}\nspec: {replicas: 1, image: valkey/valkey:8.0, persistence: {enabled: true, mode: aof, size: 100Mi}}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let long = Duration::from_secs(180);
    wait_for_valkey(&valkeys, "st", "1 ready and OK", long, ok_with(1))
        .await
        .unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    let ip = pods.ip("st-0").unwrap();
    for i in 0..50 {
        let reply = call(&ip, VALKEY_PORT, &["SET", &format!("key{i}"), "kept"])
            .await
            .unwrap();
        assert_eq!(reply, Reply::Simple("OK".into()));
    }
    let first_uid = pods.by_name["st-0"].metadata.uid.clone();
    let condition_is = |type_: &'static str, status: &'static str, reason: &'static str| {
        move |v: &Valkey| condition(v, type_).is_some_and(|(s, r, _)| s == status && r == reason)
    };
    assert!(
        condition(&valkeys.get("st").await.unwrap(), "StorageSpecNotApplied").is_none(),
        "no storage conflict ever: no condition"
    );

    // 1. A bigger size together with another change: the other change applies (the pod is
    //    replaced with the new resources), the storage stays, and the difference is reported.
    valkeys
        .patch(
            "st",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "persistence": {"size": "200Mi"},
                "resources": {"requests": {"cpu": "37m"}},
            }})),
        )
        .await
        .unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        "st",
        "StorageSpecNotApplied=True/VolumeClaimTemplatesImmutable",
        long,
        condition_is(
            "StorageSpecNotApplied",
            "True",
            "VolumeClaimTemplatesImmutable",
        ),
    )
    .await
    .unwrap();
    let (_, _, message) = condition(&valkey, "StorageSpecNotApplied").unwrap();
    eprintln!("size changed: {message}");
    assert!(
        message.contains("100Mi") && message.contains("200Mi"),
        "{message}"
    );
    let blocked = condition(&valkey, "ReconcileBlocked").unwrap();
    assert_eq!(
        blocked.0, "False",
        "a size change does not block: {blocked:?}"
    );
    let (size, resources) = statefulset_storage_and_resources(&statefulsets, "st")
        .await
        .unwrap();
    assert_eq!(
        size.as_deref(),
        Some("100Mi"),
        "the claims stay as they are"
    );
    assert_eq!(resources["requests"]["cpu"], "37m", "{resources}");
    wait_until("the pod replaced with the new resources", long, || {
        let pods_api = pods_api.clone();
        let first_uid = first_uid.clone();
        async move {
            let pod = pods_api.get_opt("st-0").await?;
            Ok(pod
                .filter(|pod| pod.metadata.uid != first_uid)
                .filter(|pod| {
                    pod.spec.as_ref().is_some_and(|spec| {
                        spec.containers[0]
                            .resources
                            .as_ref()
                            .and_then(|r| r.requests.as_ref())
                            .and_then(|r| r.get("cpu"))
                            .is_some_and(|cpu| cpu.0 == "37m")
                    })
                })
                .map(|_| ()))
        }
    })
    .await
    .unwrap();
    wait_for_valkey(&valkeys, "st", "OK after the restart", long, ok_with(1))
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let warned = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| {
            e.reason.as_deref() == Some("StatefulSetRecreateRequired")
                && e.type_.as_deref() == Some("Warning")
                && e.note.as_deref().is_some_and(|n| n.contains("200Mi"))
        });
    assert!(
        warned,
        "a StatefulSetRecreateRequired Warning Event naming the size"
    );

    // 2. Back to the size the claims have: resolved.
    valkeys
        .patch(
            "st",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"persistence": {"size": "100Mi"}}})),
        )
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        "st",
        "StorageSpecNotApplied=False/StorageSpecApplied",
        long,
        condition_is("StorageSpecNotApplied", "False", "StorageSpecApplied"),
    )
    .await
    .unwrap();

    // 3. Persistence turned off: nothing is written to the StatefulSet (its pod template would
    //    lose the claim while the claims stay); blocked with RecreateRequired. The data is there.
    let before = statefulsets.get("st").await.unwrap();
    valkeys
        .patch(
            "st",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "persistence": null,
                "resources": {"requests": {"cpu": "41m"}},
            }})),
        )
        .await
        .unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        "st",
        "StorageSpecNotApplied=True/RecreateRequired and ReconcileBlocked=True/RecreateRequired",
        long,
        |v| {
            condition_is("StorageSpecNotApplied", "True", "RecreateRequired")(v)
                && condition_is("ReconcileBlocked", "True", "RecreateRequired")(v)
        },
    )
    .await
    .unwrap();
    let (_, _, message) = condition(&valkey, "ReconcileBlocked").unwrap();
    eprintln!("persistence turned off: {message}");
    // A few more passes must not write it either.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = statefulsets.get("st").await.unwrap();
    assert_eq!(
        before.metadata.generation, after.metadata.generation,
        "the StatefulSet was written while persistence was off in the spec"
    );
    let (size, resources) = statefulset_storage_and_resources(&statefulsets, "st")
        .await
        .unwrap();
    assert_eq!(size.as_deref(), Some("100Mi"));
    assert_eq!(resources["requests"]["cpu"], "37m", "{resources}");
    let pods = Pods::list(&client, &ns).await.unwrap();
    let ip = pods.ip("st-0").unwrap();
    assert_eq!(
        call(&ip, VALKEY_PORT, &["DBSIZE"]).await.unwrap(),
        Reply::Int(50)
    );

    // 4. Persistence back: both conditions clear by themselves, and the held change applies.
    valkeys
        .patch(
            "st",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "persistence": {"enabled": true, "mode": "aof", "size": "100Mi"},
            }})),
        )
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        "st",
        "StorageSpecNotApplied=False and ReconcileBlocked=False",
        long,
        |v| {
            condition_is("StorageSpecNotApplied", "False", "StorageSpecApplied")(v)
                && condition(v, "ReconcileBlocked").is_some_and(|(s, _, _)| s == "False")
        },
    )
    .await
    .unwrap();
    let (_, resources) = statefulset_storage_and_resources(&statefulsets, "st")
        .await
        .unwrap();
    assert_eq!(resources["requests"]["cpu"], "41m", "{resources}");

    test.cleanup().await.unwrap();
}

/// A `SET` of `key` on the master at `ip` with `password` is acknowledged and reaches both
/// replicas (`WAIT 2`): they authenticate to it.
async fn write_reaches_both_replicas(
    ip: &str,
    password: &str,
    key: &str,
    why: &str,
) -> anyhow::Result<()> {
    let (mut conn, _) = authed(ip, password).await?;
    let set = conn.call(&["SET", key, "v"]).await?;
    anyhow::ensure!(set == Reply::Simple("OK".into()), "SET {key}: {set:?}");
    let wait = conn.call(&["WAIT", "2", "5000"]).await?;
    anyhow::ensure!(wait == Reply::Int(2), "{why}: WAIT 2 answered {wait:?}");
    Ok(())
}
