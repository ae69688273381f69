//! No write without a change (ADR 0018), counted from the API server's audit log: a Sentinel 3+3
//! (with PodDisruptionBudgets) and a standalone Valkey with TLS from cert-manager (its
//! Certificate written by the operator) reach OK; then, for 60 s of steady state, the operator's
//! identity (`vko-e2e-operator`) makes no request at all in the test's namespace — no write, and
//! no GET or LIST either: the Certificates are read from their watch, not fetched per pass
//! (ADR 0046) — (its leader Lease renewals in `default` are counted and printed, not failed).
//! After a spec change that only one
//! PodDisruptionBudget renders, exactly that PodDisruptionBudget and the Valkey's status (its
//! observedGeneration) are written; after someone edits a label the operator owns on a ConfigMap,
//! exactly that ConfigMap is written back.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).
//! `VKO_OPERATOR_BIN` runs another operator binary (an older build, for a before/after figure).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_e2e::operator_support;
use vko_testbed::cert_manager::CA_ISSUER;
use vko_testbed::harness::apply_yaml;
use vko_testbed::paths::Paths;
use vko_testbed::pki::E2E_OPERATOR_USER;

/// How long steady state is counted.
const STEADY_WINDOW: Duration = Duration::from_secs(60);
/// After OK: the passes the last transitions trigger settle before counting starts.
const SETTLE: Duration = Duration::from_secs(30);
/// After a change: long enough for the pass it triggers and any follow-up pass.
const AFTER_CHANGE: Duration = Duration::from_secs(20);

/// One request of the operator's identity, as the audit log records it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Request {
    verb: String,
    resource: String,
    subresource: String,
    namespace: String,
    name: String,
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sub = if self.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", self.subresource)
        };
        write!(
            f,
            "{} {}{sub} {}/{}",
            self.verb, self.resource, self.namespace, self.name
        )
    }
}

/// Which requests [`operator_requests`] returns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// Any verb but get, list and watch.
    Writes,
    /// Writes, gets and lists (a watch is long-lived: opened once, not per pass).
    WritesAndReads,
}

/// Every request of the operator's identity received in `[from, to)` that `counted` names.
fn operator_requests(
    from: Timestamp,
    to: Timestamp,
    counted: Counted,
) -> anyhow::Result<Vec<Request>> {
    let path = vko_testbed::controlplane::audit_log(&Paths::from_env());
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the audit log {}", path.display()))?;
    let mut writes = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |pointer: &str| event.pointer(pointer).and_then(|v| v.as_str());
        if field("/stage") != Some("ResponseComplete")
            || field("/user/username") != Some(E2E_OPERATOR_USER)
        {
            continue;
        }
        let verb = field("/verb").unwrap_or_default();
        let skipped: &[&str] = match counted {
            Counted::Writes => &["get", "list", "watch"],
            Counted::WritesAndReads => &["watch"],
        };
        if skipped.contains(&verb) {
            continue;
        }
        let Some(received) =
            field("/requestReceivedTimestamp").and_then(|at| at.parse::<Timestamp>().ok())
        else {
            continue;
        };
        if received < from || received >= to {
            continue;
        }
        let object = |key: &str| field(&format!("/objectRef/{key}")).unwrap_or_default();
        writes.push(Request {
            verb: verb.to_owned(),
            resource: object("resource").to_owned(),
            subresource: object("subresource").to_owned(),
            namespace: object("namespace").to_owned(),
            name: object("name").to_owned(),
        });
    }
    Ok(writes)
}

/// The writes of `writes` to objects in `namespace`, and how many went elsewhere (the leader
/// Lease's renewals in `default`; objects of other test namespaces, e.g. one still terminating).
fn in_namespace(writes: Vec<Request>, namespace: &str) -> (Vec<Request>, BTreeMap<String, usize>) {
    let (here, elsewhere): (Vec<Request>, Vec<Request>) =
        writes.into_iter().partition(|w| w.namespace == namespace);
    let mut others = BTreeMap::new();
    for write in elsewhere {
        *others
            .entry(format!("{} {}", write.resource, write.namespace))
            .or_insert(0) += 1;
    }
    (here, others)
}

fn tally(writes: &[Request]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for write in writes {
        *counts.entry(write.to_string()).or_insert(0) += 1;
    }
    counts
}

/// The distinct writes of the operator in `namespace` in `[from, now)` once `AFTER_CHANGE` has
/// passed.
async fn writes_after_change(
    from: Timestamp,
    namespace: &str,
    what: &str,
) -> anyhow::Result<Vec<Request>> {
    tokio::time::sleep(AFTER_CHANGE).await;
    let requests = operator_requests(from, Timestamp::now(), Counted::Writes)?;
    let (writes, elsewhere) = in_namespace(requests, namespace);
    eprintln!(
        "after {what}: {} write(s) in {namespace}: {:#?}; elsewhere: {elsewhere:?}",
        writes.len(),
        tally(&writes)
    );
    let mut distinct = writes;
    distinct.sort();
    distinct.dedup();
    Ok(distinct)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_valkey_costs_no_write_and_a_change_writes_only_what_changed() {
    let test = OperatorTest::start("op-steady").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: ha}\nspec: {replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}, podDisruptionBudget: {enabled: true, maxUnavailable: 1}}\n",
    )
    .await
    .unwrap();
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: solo}}\n\
             spec: {{replicas: 1, image: valkey/valkey:8.0, tls: {{enabled: true, certManager: \
             {{issuer: {{kind: ClusterIssuer, name: {CA_ISSUER}}}}}}}}}\n"
        ),
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let long = Duration::from_secs(300);
    wait_for_valkey(&valkeys, "ha", "ha OK with 3 ready", long, ok_with(3))
        .await
        .unwrap();
    wait_for_valkey(&valkeys, "solo", "solo OK with 1 ready", long, ok_with(1))
        .await
        .unwrap();
    tokio::time::sleep(SETTLE).await;

    // Steady state.
    let from = Timestamp::now();
    tokio::time::sleep(STEADY_WINDOW).await;
    let to = Timestamp::now();
    let requests = operator_requests(from, to, Counted::WritesAndReads).unwrap();
    let (steady, elsewhere) = in_namespace(requests, &ns);
    eprintln!(
        "steady state {from} .. {to}: {} request(s) in {ns}: {:#?}; elsewhere: {elsewhere:?}",
        steady.len(),
        tally(&steady)
    );
    for name in ["ha", "solo"] {
        let valkey = valkeys.get(name).await.unwrap();
        assert!(
            ok_with(if name == "ha" { 3 } else { 1 })(&valkey),
            "{name} stayed OK: {:?}",
            valkey.status
        );
    }
    assert!(
        steady.is_empty(),
        "steady state made {} request(s): {:#?}",
        steady.len(),
        tally(&steady)
    );

    // A spec change that only the data PodDisruptionBudget renders.
    let from = Timestamp::now();
    valkeys
        .patch(
            "ha",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"podDisruptionBudget": {"maxUnavailable": 2}}}),
            ),
        )
        .await
        .unwrap();
    let written = writes_after_change(from, &ns, "maxUnavailable 1 -> 2")
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
    let changed: Vec<String> = pdbs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|pdb| {
            pdb.spec.as_ref().and_then(|s| s.max_unavailable.clone())
                == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2))
        })
        .filter_map(|pdb| pdb.metadata.name)
        .collect();
    assert_eq!(
        changed.len(),
        1,
        "one PodDisruptionBudget took maxUnavailable 2"
    );
    let mut expected = vec![
        Request {
            verb: "patch".into(),
            resource: "poddisruptionbudgets".into(),
            subresource: String::new(),
            namespace: ns.clone(),
            name: changed[0].clone(),
        },
        Request {
            verb: "patch".into(),
            resource: "valkeys".into(),
            subresource: "status".into(),
            namespace: ns.clone(),
            name: "ha".into(),
        },
    ];
    expected.sort();
    assert_eq!(written, expected, "the spec change wrote exactly these");

    // Drift: someone else edits a label the operator owns on solo's ConfigMap.
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let config_map = config_maps
        .list(&ListParams::default().labels("vko.gtrfc.com/cluster=solo"))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
        .and_then(|cm| cm.metadata.name)
        .expect("solo has a ConfigMap");
    let from = Timestamp::now();
    config_maps
        .patch(
            &config_map,
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"metadata": {"labels": {"app.kubernetes.io/name": "edited"}}}),
            ),
        )
        .await
        .unwrap();
    let written = writes_after_change(from, &ns, "a label edit on solo's ConfigMap")
        .await
        .unwrap();
    assert_eq!(
        written,
        vec![Request {
            verb: "patch".into(),
            resource: "configmaps".into(),
            subresource: String::new(),
            namespace: ns.clone(),
            name: config_map.clone(),
        }],
        "the drift was written back, and only it"
    );
    let repaired = config_maps.get(&config_map).await.unwrap();
    assert_eq!(
        repaired
            .metadata
            .labels
            .unwrap_or_default()
            .get("app.kubernetes.io/name")
            .map(String::as_str),
        Some("valkey"),
        "the operator's label value is back"
    );

    test.cleanup().await.unwrap();
}
