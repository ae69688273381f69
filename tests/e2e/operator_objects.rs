//! The operator (a host process with the admin kubeconfig) against the testbed, without relying
//! on the data pods becoming Ready: every child carries a controller ownerReference and goes with
//! the CR (the PVC stays); a foreign ConfigMap under a generated name blocks with ForeignObject
//! and is left untouched; a missing auth Secret holds the StatefulSet back with a condition and a
//! Warning Event, and the Secret's creation alone brings the reconcile back; deleting it again blocks
//! again without touching the StatefulSet, the repeat counted on the same Event; an empty or blank
//! password is refused (`PasswordUnusable`), by the operator and by a data pod's sidecar; a risky
//! spec (no auth, `disableAuth`, metrics, 1/2 Sentinels, the PDB cases) gets a
//! `ConfigurationWarning` condition and one Warning Event per warning, not repeated (ADR 0015); a
//! pod that cannot start (no such image, hard anti-affinity with more pods than nodes, no such
//! StorageClass) is named with its own reason in `PodsNotStarting` and a Warning Event; a
//! hand-written PodDisruptionBudget under our budget name is left alone and reported, not blocking.

use vko_e2e::ha_support::pod_is_ready;
use vko_e2e::operator_support;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMap, Node, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Resource, ResourceExt};
use operator_support::{OperatorTest, condition, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{apply_yaml, kubectl, pod_ip, valkey_cli, wait_until};

const TIMEOUT: Duration = Duration::from_secs(90);

fn controller_uid<K: Resource>(object: &K) -> Option<String> {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

async fn warning_events(client: &kube::Client, namespace: &str, regarding: &str) -> Vec<Event> {
    operator_support::events_about(client, namespace, regarding, "Warning").await
}

/// Waits for a Warning Event about `regarding` with `reason` whose note names `naming`.
async fn wait_for_warning(
    client: &kube::Client,
    namespace: &str,
    regarding: &str,
    reason: &str,
    naming: &str,
) -> anyhow::Result<()> {
    let what = format!("a {reason} Warning Event naming {naming}");
    wait_until(&what, TIMEOUT, || async {
        let events = warning_events(client, namespace, regarding).await;
        Ok(events
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.note.as_deref().is_some_and(|n| n.contains(naming))
            })
            .then_some(()))
    })
    .await?;
    Ok(())
}

/// Waits until the Valkey reports `ReconcileBlocked=True` with `reason`.
async fn wait_blocked(
    valkeys: &Api<Valkey>,
    name: &str,
    reason: &str,
    what: &str,
) -> anyhow::Result<Valkey> {
    wait_for_valkey(valkeys, name, what, TIMEOUT, |v| {
        condition(v, "ReconcileBlocked")
            .is_some_and(|(status, found, _)| status == "True" && found == reason)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_owned_and_go_with_the_valkey_but_the_pvc_stays() {
    let test = OperatorTest::start("op-owners").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(
        &client,
        &ns,
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {name: own}
spec:
  replicas: 1
  image: valkey/valkey:8.0
  persistence: {enabled: true, size: 16Mi}
"#,
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey = wait_for_valkey(
        &valkeys,
        "own",
        "a status with ReconcileBlocked=False",
        TIMEOUT,
        |v| {
            condition(v, "ReconcileBlocked").is_some_and(|(status, reason, _)| {
                status == "False" && reason == "ReconcileSucceeded"
            })
        },
    )
    .await
    .unwrap();
    let uid = valkey.uid().unwrap();
    let status = valkey.status.clone().unwrap();
    assert_eq!(
        status.operator_version.as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(status.observed_generation, valkey.metadata.generation);

    // Every child is controlled by this Valkey.
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    let roles: Api<Role> = Api::namespaced(client.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let mut owners = BTreeMap::new();
    owners.insert(
        "ServiceAccount own-sidecar",
        controller_uid(&sa.get("own-sidecar").await.unwrap()),
    );
    owners.insert(
        "Role own-sidecar",
        controller_uid(&roles.get("own-sidecar").await.unwrap()),
    );
    owners.insert(
        "RoleBinding own-sidecar",
        controller_uid(&bindings.get("own-sidecar").await.unwrap()),
    );
    owners.insert(
        "ConfigMap own-config",
        controller_uid(&cms.get("own-config").await.unwrap()),
    );
    owners.insert(
        "StatefulSet own",
        controller_uid(&sts.get("own").await.unwrap()),
    );
    let service_list = services.list(&ListParams::default()).await.unwrap().items;
    let mut service_names: Vec<String> = service_list.iter().map(|s| s.name_any()).collect();
    service_names.sort();
    assert_eq!(
        service_names,
        ["own-headless", "own-rw"],
        "a single replica has only -rw and -headless"
    );
    for service in &service_list {
        assert_eq!(
            controller_uid(service).as_deref(),
            Some(uid.as_str()),
            "{}",
            service.name_any()
        );
    }
    for (what, owner) in &owners {
        assert_eq!(
            owner.as_deref(),
            Some(uid.as_str()),
            "{what} is not controlled by the Valkey"
        );
    }
    // No replica ConfigMap and no PDB for one replica without Sentinel.
    assert!(cms.get_opt("own-replica-config").await.unwrap().is_none());
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    assert!(
        pdbs.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The StatefulSet controller creates the pod's claim.
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    wait_until("the data PVC", TIMEOUT, || {
        let pvcs = pvcs.clone();
        async move {
            Ok(pvcs
                .list(&ListParams::default())
                .await?
                .items
                .first()
                .map(|p| p.name_any()))
        }
    })
    .await
    .unwrap();

    valkeys
        .delete("own", &DeleteParams::background())
        .await
        .unwrap();
    wait_until("the children to be garbage-collected", TIMEOUT, || {
        let (sa, cms, services, sts) = (sa.clone(), cms.clone(), services.clone(), sts.clone());
        async move {
            let gone = sa.get_opt("own-sidecar").await?.is_none()
                && cms.get_opt("own-config").await?.is_none()
                && services
                    .list(&ListParams::default())
                    .await?
                    .items
                    .is_empty()
                && sts.get_opt("own").await?.is_none();
            Ok(gone.then_some(()))
        }
    })
    .await
    .unwrap();
    let claims = pvcs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(claims.len(), 1, "the PVC is never touched: {claims:?}");
    assert!(claims[0].metadata.deletion_timestamp.is_none());

    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_config_map_blocks_with_foreign_object_and_stays_untouched() {
    let test = OperatorTest::start("op-foreign").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let foreign: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "fo-config", "labels": {"made-by": "hand"}},
        "data": {"valkey.conf": "# mine\n"}
    }))
    .unwrap();
    let before = cms.create(&PostParams::default(), &foreign).await.unwrap();
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: fo}\nspec: {replicas: 1, image: valkey/valkey:8.0}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey = wait_blocked(
        &valkeys,
        "fo",
        "ForeignObject",
        "ReconcileBlocked=True/ForeignObject",
    )
    .await
    .unwrap();
    let (_, _, message) = condition(&valkey, "ReconcileBlocked").unwrap();
    assert!(message.contains("ConfigMap fo-config"), "{message}");
    let status = valkey.status.clone().unwrap();
    assert_eq!(
        status.phase.map(|p| p.to_string()).as_deref(),
        Some("Error")
    );

    // The rest of the pipeline went on.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    assert!(services.get_opt("fo-rw").await.unwrap().is_some());

    let events = wait_until("a ForeignObject Warning Event", TIMEOUT, || {
        let client = client.clone();
        let ns = ns.clone();
        async move {
            let events = warning_events(&client, &ns, "fo").await;
            Ok(events
                .iter()
                .any(|e| e.reason.as_deref() == Some("ForeignObject"))
                .then_some(events))
        }
    })
    .await
    .unwrap();
    let note = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("ForeignObject"))
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    assert!(
        note.contains("fo-config") && note.contains("delete or rename"),
        "{note}"
    );

    // Several passes later, the foreign object is exactly as it was.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = cms.get("fo-config").await.unwrap();
    assert_eq!(after.data, before.data);
    assert_eq!(
        after.metadata.resource_version,
        before.metadata.resource_version
    );
    assert!(after.metadata.owner_references.is_none());
    assert_eq!(
        events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("ForeignObject"))
            .count(),
        1,
        "one Event per transition, not per pass"
    );

    // Removing it hands the name over: the operator creates its own and unblocks.
    cms.delete("fo-config", &DeleteParams::default())
        .await
        .unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        "fo",
        "ReconcileBlocked=False after the foreign object went",
        Duration::from_secs(120),
        |v| condition(v, "ReconcileBlocked").is_some_and(|(status, _, _)| status == "False"),
    )
    .await
    .unwrap();
    let ours = cms.get("fo-config").await.unwrap();
    assert_eq!(controller_uid(&ours), valkey.uid());

    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_auth_secret_holds_the_statefulset_back_until_it_appears() {
    let test = OperatorTest::start("op-secret").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(
        &client,
        &ns,
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {name: sec}
spec:
  replicas: 1
  image: valkey/valkey:8.0
  auth: {secretName: sec-password}
"#,
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey = wait_blocked(
        &valkeys,
        "sec",
        "SecretMissing",
        "ReconcileBlocked=True/SecretMissing",
    )
    .await
    .unwrap();
    let (_, _, message) = condition(&valkey, "ReconcileBlocked").unwrap();
    assert!(message.contains("sec-password"), "{message}");
    // Waiting for a Secret before the StatefulSet exists is provisioning, not an error (the
    // reference's phase and message; no ValkeyPhaseNotOK page for a normal issuance wait).
    let status = valkey.status.as_ref().unwrap();
    assert_eq!(
        status.phase.as_ref().map(ToString::to_string).as_deref(),
        Some("Provisioning")
    );
    assert!(
        status.message.as_deref().is_some_and(|m| m
            .starts_with("Waiting for StatefulSet creation")
            && m.contains("sec-password")),
        "{:?}",
        status.message
    );
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(
        sts.get_opt("sec").await.unwrap().is_none(),
        "no StatefulSet without its Secret"
    );
    wait_for_warning(&client, &ns, "sec", "SecretMissing", "sec-password")
        .await
        .unwrap();

    // Let the backoff grow, so the recovery is the Secret watch's doing rather than a retry.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sec-password"},
        "stringData": {"password": "s3cret"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    wait_for_valkey(
        &valkeys,
        "sec",
        "ReconcileBlocked=False after the Secret appeared",
        Duration::from_secs(15),
        |v| condition(v, "ReconcileBlocked").is_some_and(|(status, _, _)| status == "False"),
    )
    .await
    .unwrap();
    eprintln!(
        "recovered {:?} after the Secret was created",
        started.elapsed()
    );
    let statefulset_uid = sts.get("sec").await.unwrap().uid();
    assert!(statefulset_uid.is_some(), "the StatefulSet exists now");

    // The Secret deleted by mistake: the same problem again. The StatefulSet (and its running pods)
    // stay; the condition comes back, and the repeat is counted on the first Warning Event
    // (events.k8s.io series) rather than written as a second one.
    secrets
        .delete("sec-password", &DeleteParams::default())
        .await
        .unwrap();
    let broken = wait_blocked(
        &valkeys,
        "sec",
        "SecretMissing",
        "ReconcileBlocked=True/SecretMissing after the Secret was deleted",
    )
    .await
    .unwrap();
    // Under a running cluster the same problem is an error: something removed what it runs on.
    assert_eq!(
        broken
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map(ToString::to_string)
            .as_deref(),
        Some("Error")
    );
    let repeated = wait_until(
        "the SecretMissing Warning Event counted twice",
        TIMEOUT,
        || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let events = warning_events(&client, &ns, "sec").await;
                let missing: Vec<Event> = events
                    .into_iter()
                    .filter(|e| e.reason.as_deref() == Some("SecretMissing"))
                    .collect();
                let counted = missing
                    .iter()
                    .any(|e| e.series.as_ref().is_some_and(|series| series.count == 2));
                Ok(counted.then_some(missing))
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(
        repeated.len(),
        1,
        "one Event object for the repeated problem: {repeated:#?}"
    );
    assert!(
        repeated[0]
            .note
            .as_deref()
            .is_some_and(|note| note.contains("sec-password")),
        "{:?}",
        repeated[0].note
    );
    assert_eq!(
        sts.get("sec").await.unwrap().uid(),
        statefulset_uid,
        "the StatefulSet stays while its Secret is missing"
    );
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        "sec",
        "ReconcileBlocked=False after the Secret came back",
        TIMEOUT,
        |v| condition(v, "ReconcileBlocked").is_some_and(|(status, _, _)| status == "False"),
    )
    .await
    .unwrap();

    test.cleanup().await.unwrap();
}

/// Sets the `password` key of the auth Secret `name` (created if missing).
async fn put_password(secrets: &Api<Secret>, name: &str, password: &str) -> anyhow::Result<()> {
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"password": password}
    }))?;
    secrets
        .patch(
            name,
            &kube::api::PatchParams::apply("vko-e2e").force(),
            &kube::api::Patch::Apply(&secret),
        )
        .await?;
    Ok(())
}

/// An empty or blank password never means "no password": the operator holds the cluster back
/// (`ReconcileBlocked/PasswordUnusable` naming the Secret and key, a Warning Event, no
/// StatefulSet), and a data pod started while the Secret is empty never runs a server: the
/// sidecar's init refuses an empty password file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_or_blank_password_is_refused_and_never_means_no_password() {
    let test = OperatorTest::start("op-pwempty").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    put_password(&secrets, "pwe-password", "").await.unwrap();

    apply_yaml(
        &client,
        &ns,
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {name: pwe}
spec:
  replicas: 1
  image: valkey/valkey:8.0
  auth: {secretName: pwe-password}
"#,
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let names_the_problem = |problem: &'static str| {
        move |v: &Valkey| {
            condition(v, "ReconcileBlocked").is_some_and(|(status, reason, message)| {
                status == "True"
                    && reason == "PasswordUnusable"
                    && message.contains("pwe-password")
                    && message.contains("\"password\"")
                    && message.contains(problem)
            })
        }
    };
    wait_for_valkey(
        &valkeys,
        "pwe",
        "ReconcileBlocked=True/PasswordUnusable: is empty",
        TIMEOUT,
        names_the_problem("is empty"),
    )
    .await
    .unwrap();
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    assert!(
        sts.get_opt("pwe").await.unwrap().is_none(),
        "no StatefulSet while the password is empty"
    );
    wait_for_warning(&client, &ns, "pwe", "PasswordUnusable", "pwe-password")
        .await
        .unwrap();

    put_password(&secrets, "pwe-password", "  \t ")
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        "pwe",
        "ReconcileBlocked=True/PasswordUnusable: holds only whitespace",
        TIMEOUT,
        names_the_problem("holds only whitespace"),
    )
    .await
    .unwrap();
    assert!(sts.get_opt("pwe").await.unwrap().is_none());

    put_password(&secrets, "pwe-password", "s3cret")
        .await
        .unwrap();
    wait_for_valkey(&valkeys, "pwe", "PHASE OK", TIMEOUT, ok_with(1))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "pwe-0").await.unwrap();
    let open = valkey_cli(&ip, &["PING"]).await.unwrap();
    assert!(
        open.contains("NOAUTH"),
        "the server requires the password: {open}"
    );
    let authed = valkey_cli(&ip, &["--no-auth-warning", "-a", "s3cret", "PING"])
        .await
        .unwrap();
    assert_eq!(authed.trim(), "PONG");

    // Emptied under a running cluster: held back again, the running pod untouched; a pod started
    // now gets an empty password file and its sidecar init refuses to configure a server.
    put_password(&secrets, "pwe-password", "").await.unwrap();
    wait_for_valkey(
        &valkeys,
        "pwe",
        "ReconcileBlocked=True/PasswordUnusable on a running cluster",
        TIMEOUT,
        names_the_problem("is empty"),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let old_uid = pods.get("pwe-0").await.unwrap().uid();
    pods.delete("pwe-0", &DeleteParams::default())
        .await
        .unwrap();
    let refused = wait_until("the new pod's init container refusing", TIMEOUT, || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            let Some(pod) = pods.get_opt("pwe-0").await? else {
                return Ok(None);
            };
            if pod.uid() == old_uid {
                return Ok(None);
            }
            let failed_init = pod
                .status
                .as_ref()
                .and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten()
                .find(|c| {
                    [c.state.as_ref(), c.last_state.as_ref()]
                        .into_iter()
                        .flatten()
                        .filter_map(|s| s.terminated.as_ref())
                        .any(|t| t.exit_code != 0)
                })
                .map(|c| c.name.clone());
            Ok(failed_init.map(|name| (pod, name)))
        }
    })
    .await
    .unwrap();
    let (pod, init) = refused;
    let ready = pod_is_ready(&pod);
    assert!(!ready, "a pod without its password is never Ready");
    let log = kubectl(&["logs", "-n", &ns, "pwe-0", "-c", &init])
        .await
        .unwrap_or_default();
    eprintln!("init container {init} refused: {}", log.trim());
    assert!(log.contains("refusing"), "the refusal is logged: {log}");
    if let Ok(ip) = pod_ip(&client, &ns, "pwe-0").await {
        let answer = valkey_cli(&ip, &["PING"]).await;
        assert!(
            answer.as_ref().map_or(true, |out| !out.contains("PONG")),
            "no server answers without a password: {answer:?}"
        );
    }

    put_password(&secrets, "pwe-password", "s3cret")
        .await
        .unwrap();
    pods.delete("pwe-0", &DeleteParams::default())
        .await
        .unwrap();
    wait_for_valkey(&valkeys, "pwe", "PHASE OK again", TIMEOUT, ok_with(1))
        .await
        .unwrap();
    test.cleanup().await.unwrap();
}

/// The Warning Events with `reason` about `regarding`.
async fn warnings_with(
    client: &kube::Client,
    namespace: &str,
    regarding: &str,
    reason: &str,
) -> Vec<Event> {
    warning_events(client, namespace, regarding)
        .await
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .collect()
}

/// The `cw` Valkey of the warnings test with auth on, 3 + 3 and a PDB; Sentinel's auth off or on.
fn secured_cw(sentinel_auth_disabled: bool) -> String {
    format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: cw}}\nspec:\n  replicas: 3\n  \
         image: valkey/valkey:8.0\n  auth: {{secretName: cw-password}}\n  sentinel: {{enabled: true, \
         replicas: 3, disableAuth: {sentinel_auth_disabled}}}\n  podDisruptionBudget: {{enabled: true}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn risky_specs_get_a_configuration_warning_condition_and_one_event_per_warning() {
    let test = OperatorTest::start("op-cfgwarn").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    // No auth, metrics on, 2 Sentinels with a PDB, Sentinel over one data pod.
    apply_yaml(
        &client,
        &ns,
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {name: cw}
spec:
  replicas: 1
  image: valkey/valkey:8.0
  sentinel: {enabled: true, replicas: 2}
  metrics: {enabled: true}
  podDisruptionBudget: {enabled: true}
"#,
    )
    .await
    .unwrap();
    let expected = [
        "AuthDisabled",
        "ExporterScrapeUnrestricted",
        "SentinelCountNotHighlyAvailable",
        "SentinelWithOneDataPod",
        "SentinelPodDisruptionBudgetBlocksDrains",
    ];
    let warned = wait_for_valkey(&valkeys, "cw", "ConfigurationWarning=True", TIMEOUT, |v| {
        condition(v, "ConfigurationWarning")
            .is_some_and(|(status, reason, _)| status == "True" && reason == "AuthDisabled")
    })
    .await
    .unwrap();
    let (_, _, message) = condition(&warned, "ConfigurationWarning").unwrap();
    for field in [
        "spec.auth",
        "/scrape",
        "spec.sentinel.replicas is 2",
        "spec.replicas 1",
        "minAvailable 2",
    ] {
        assert!(message.contains(field), "{field} in {message}");
    }
    for reason in expected {
        wait_for_warning(&client, &ns, "cw", reason, "spec.")
            .await
            .unwrap();
    }

    // Auth on with Sentinel's disabled, 3 + 3, metrics off: only the disableAuth warning stands.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    put_password(&secrets, "cw-password", "s3cret")
        .await
        .unwrap();
    apply_yaml(&client, &ns, &secured_cw(true)).await.unwrap();
    wait_for_valkey(
        &valkeys,
        "cw",
        "ConfigurationWarning=SentinelAuthDisabled",
        TIMEOUT,
        |v| {
            condition(v, "ConfigurationWarning").is_some_and(|(status, reason, message)| {
                status == "True"
                    && reason == "SentinelAuthDisabled"
                    && message.contains("spec.sentinel.disableAuth")
                    && !message.contains("spec.auth is not set")
            })
        },
    )
    .await
    .unwrap();
    wait_for_warning(&client, &ns, "cw", "SentinelAuthDisabled", "disableAuth")
        .await
        .unwrap();
    // Each warning was published once, when it appeared: passes since then did not repeat it.
    for reason in expected {
        let events = warnings_with(&client, &ns, "cw", reason).await;
        assert_eq!(events.len(), 1, "{reason}: {events:#?}");
        assert!(events[0].series.is_none(), "{reason} repeated: {events:#?}");
    }

    // Sentinel's auth back on: the condition clears.
    apply_yaml(&client, &ns, &secured_cw(false)).await.unwrap();
    wait_for_valkey(&valkeys, "cw", "ConfigurationWarning=False", TIMEOUT, |v| {
        condition(v, "ConfigurationWarning").is_some_and(|(status, reason, _)| {
            status == "False" && reason == "NoConfigurationWarnings"
        })
    })
    .await
    .unwrap();
}

/// Waits until the Valkey reports `PodsNotStarting=True` with a line naming `pod` and `reason`,
/// and the Warning Event for it; returns the condition's message.
async fn wait_pod_problem(
    client: &kube::Client,
    valkeys: &Api<Valkey>,
    name: &str,
    pod: &str,
    reason: &str,
) -> anyhow::Result<String> {
    let line = format!("{pod}: {reason}:");
    let what = format!("PodsNotStarting=True naming {line}");
    let valkey = wait_for_valkey(valkeys, name, &what, TIMEOUT, |v| {
        condition(v, "PodsNotStarting")
            .is_some_and(|(status, _, message)| status == "True" && message.contains(&line))
    })
    .await?;
    let namespace = valkeys_namespace(&valkey)?;
    wait_for_warning(client, &namespace, name, reason, pod).await?;
    let (_, _, message) = condition(&valkey, "PodsNotStarting")
        .ok_or_else(|| anyhow::anyhow!("PodsNotStarting vanished"))?;
    Ok(message)
}

fn valkeys_namespace(valkey: &Valkey) -> anyhow::Result<String> {
    valkey
        .metadata
        .namespace
        .clone()
        .ok_or_else(|| anyhow::anyhow!("a Valkey without a namespace"))
}

/// A pod that cannot start is named with the scheduler's or kubelet's own reason, on the Valkey
/// (`PodsNotStarting` and one Warning Event), not left as "n/N ready": an image that does not
/// exist, hard anti-affinity with more pods than nodes (the first three spread over the three
/// nodes), a StorageClass that does not exist; fixing the image clears it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_cannot_start_is_named_with_its_own_reason() {
    let test = OperatorTest::start("op-podwhy").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let image_yaml = |image: &str| {
        format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: img}}\nspec: {{replicas: 1, image: {image}}}\n"
        )
    };
    apply_yaml(&client, &ns, &image_yaml("valkey/valkey:7.2"))
        .await
        .unwrap();
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: spread}\nspec: {replicas: 4, image: valkey/valkey:8.0, antiAffinity: {mode: hard}}\n",
    )
    .await
    .unwrap();
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: disk}\nspec: {replicas: 1, image: valkey/valkey:8.0, persistence: {enabled: true, size: 100Mi, storageClass: no-such-class}}\n",
    )
    .await
    .unwrap();

    let image = wait_pod_problem(&client, &valkeys, "img", "img-0", "ImagePullFailed")
        .await
        .unwrap();
    assert!(image.contains("valkey/valkey:7.2"), "{image}");
    let spread = wait_pod_problem(&client, &valkeys, "spread", "spread-3", "PodUnschedulable")
        .await
        .unwrap();
    assert!(spread.contains("anti-affinity"), "{spread}");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut nodes = Vec::new();
    for ordinal in 0..3 {
        let pod = pods.get(&format!("spread-{ordinal}")).await.unwrap();
        nodes.push(pod.spec.and_then(|s| s.node_name).unwrap_or_default());
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(
        nodes.len(),
        3,
        "hard anti-affinity spreads 3 pods over 3 nodes: {nodes:?}"
    );
    let disk = wait_pod_problem(&client, &valkeys, "disk", "disk-0", "PodUnschedulable")
        .await
        .unwrap();
    assert!(disk.contains("PersistentVolumeClaim"), "{disk}");
    eprintln!("image: {image}\nspread: {spread}\ndisk: {disk}");

    // The image fixed: the pod is replaced and starts; the condition clears.
    apply_yaml(&client, &ns, &image_yaml("valkey/valkey:8.0"))
        .await
        .unwrap();
    wait_for_valkey(&valkeys, "img", "PodsNotStarting=False", TIMEOUT, |v| {
        condition(v, "PodsNotStarting")
            .is_some_and(|(status, reason, _)| status == "False" && reason == "PodsStarted")
    })
    .await
    .unwrap();
    wait_for_valkey(&valkeys, "img", "PHASE OK", TIMEOUT, ok_with(1))
        .await
        .unwrap();
}

/// The nodes (and their zones) the data pods `<name>-0..count` run on, once all are Ready.
async fn placement(
    client: &kube::Client,
    ns: &str,
    name: &str,
    count: u32,
) -> anyhow::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let nodes: Api<Node> = Api::all(client.clone());
    let mut placed = Vec::new();
    for ordinal in 0..count {
        let pod = pods.get(&format!("{name}-{ordinal}")).await?;
        let node = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
        let zone = nodes
            .get(&node)
            .await?
            .metadata
            .labels
            .unwrap_or_default()
            .get("topology.kubernetes.io/zone")
            .cloned()
            .unwrap_or_default();
        placed.push((node, zone));
    }
    Ok(placed)
}

/// The pod template's anti-affinity terms: (required topology keys, preferred topology keys).
async fn anti_affinity_terms(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .get(&format!("{name}-0"))
        .await?;
    let anti = pod
        .spec
        .and_then(|spec| spec.affinity)
        .and_then(|affinity| affinity.pod_anti_affinity);
    let required = anti
        .as_ref()
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| terms.iter().map(|t| t.topology_key.clone()).collect())
        .unwrap_or_default();
    let preferred = anti
        .as_ref()
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|terms| {
            terms
                .iter()
                .map(|t| t.pod_affinity_term.topology_key.clone())
                .collect()
        })
        .unwrap_or_default();
    Ok((required, preferred))
}

/// Anti-affinity with the real scheduler (the testbed's three nodes are in three zones): hard
/// spreading by zone puts 3 pods in 3 zones; soft never leaves a pod Pending (4 pods on 3 nodes all
/// run); off renders no term. (Hard by node, with a 4th pod Pending, is shown by
/// `a_pod_that_cannot_start_is_named_with_its_own_reason`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anti_affinity_by_zone_soft_and_off_with_the_scheduler() {
    let test = OperatorTest::start("op-spread").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    for (name, replicas, anti_affinity) in [
        (
            "zones",
            3,
            ", antiAffinity: {mode: hard, topologyKey: topology.kubernetes.io/zone}",
        ),
        ("soft", 4, ", antiAffinity: {mode: soft}"),
        ("off", 1, ""),
    ] {
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\n\
                 spec: {{replicas: {replicas}, image: valkey/valkey:8.0{anti_affinity}}}\n"
            ),
        )
        .await
        .unwrap();
    }
    for (name, replicas) in [("zones", 3), ("soft", 4), ("off", 1)] {
        wait_for_valkey(
            &valkeys,
            name,
            "PHASE OK",
            Duration::from_secs(180),
            ok_with(replicas),
        )
        .await
        .unwrap();
    }

    let zones = placement(&client, &ns, "zones", 3).await.unwrap();
    let mut distinct: Vec<&String> = zones.iter().map(|(_, zone)| zone).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "hard by zone: 3 pods in 3 zones: {zones:?}"
    );
    assert!(distinct.iter().all(|zone| !zone.is_empty()), "{zones:?}");
    assert_eq!(
        anti_affinity_terms(&client, &ns, "zones").await.unwrap(),
        (vec!["topology.kubernetes.io/zone".to_owned()], Vec::new())
    );

    let soft = placement(&client, &ns, "soft", 4).await.unwrap();
    assert_eq!(
        anti_affinity_terms(&client, &ns, "soft").await.unwrap(),
        (Vec::new(), vec!["kubernetes.io/hostname".to_owned()])
    );
    assert_eq!(
        anti_affinity_terms(&client, &ns, "off").await.unwrap(),
        (Vec::new(), Vec::new())
    );
    eprintln!("hard by zone: {zones:?}; soft, 4 pods on 3 nodes, all running: {soft:?}");
    test.cleanup().await.unwrap();
}

/// A hand-written PodDisruptionBudget under the data tier's budget name is left untouched and
/// reported (`ConfigurationWarning` naming it, a `PodDisruptionBudgetNotOwned` Warning Event), as
/// the reference does; the cluster is not blocked and reaches OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_pod_disruption_budget_is_left_alone_and_reported() {
    let test = OperatorTest::start("op-pdbown").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    apply_yaml(
        &client,
        &ns,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: budget}\nspec: {minAvailable: 1, selector: {matchLabels: {team: own}}}\n",
    )
    .await
    .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let before = pdbs.get("budget").await.unwrap();
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: budget}\nspec: {replicas: 2, image: valkey/valkey:8.0, podDisruptionBudget: {enabled: true}}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    wait_for_valkey(&valkeys, "budget", "PHASE OK", TIMEOUT, ok_with(2))
        .await
        .unwrap();
    let reported = wait_for_valkey(
        &valkeys,
        "budget",
        "ConfigurationWarning naming the budget",
        TIMEOUT,
        |v| {
            condition(v, "ConfigurationWarning").is_some_and(|(status, _, message)| {
                status == "True" && message.contains("PodDisruptionBudget budget is not controlled")
            })
        },
    )
    .await
    .unwrap();
    let blocked = condition(&reported, "ReconcileBlocked");
    assert!(
        blocked.is_some_and(|(status, _, _)| status == "False"),
        "a foreign budget does not block the cluster"
    );
    wait_for_warning(
        &client,
        &ns,
        "budget",
        "PodDisruptionBudgetNotOwned",
        "budget",
    )
    .await
    .unwrap();
    // The disruption controller writes its status (so the resourceVersion moves); the operator
    // never writes it: the same spec, no owner, no field of the operator's field manager.
    let after = pdbs.get("budget").await.unwrap();
    assert_eq!(
        after.spec, before.spec,
        "the foreign budget's spec was changed"
    );
    assert!(after.metadata.owner_references.is_none());
    let managers: Vec<String> = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.manager.clone())
        .collect();
    assert!(
        !managers.iter().any(|m| m == "vko-operator"),
        "the operator wrote the foreign budget: {managers:?}"
    );
    test.cleanup().await.unwrap();
}
