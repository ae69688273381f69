//! The chart's life cycle with real helm on the testbed, the operator running IN the cluster as the
//! chart's Deployment, under the chart's ServiceAccount and RBAC (the API server enforces RBAC, so a
//! missing rule shows up as a refused request and a Valkey that never reaches OK):
//!
//! 1. `helm install` → the operator pod becomes Ready (it holds the leader Lease: Ready means
//!    leading and listed) → a standalone Valkey reaches PHASE OK, and its Events name that pod as
//!    their reporting instance (it was this operator, not a host-process one, that reconciled).
//!    Prometheus scrapes it (1c): with the chart's ServiceMonitor and PrometheusRule (the
//!    Prometheus-Operator v0.85 CRDs installed, so the API server checks them against the real
//!    schema) and a Valkey `scraped` with the exporter, the observer and a ServiceMonitor, Debian's
//!    Prometheus 2.42 runs on the host with the scrape jobs generated from those ServiceMonitors
//!    (`vko_testbed::prometheus`: what the Prometheus-Operator would generate; the
//!    Prometheus-Operator itself does not run here) and the rule as its rule file. Every target
//!    (the operator pod, both exporters, the observer) is up, the documented series are there with
//!    the documented labels — the `vko_valkey_*` series keep the Valkey's own `namespace`
//!    (`honorLabels`) —, every rule evaluates without error and no alert is pending or firing
//!    for the healthy clusters.
//!    With NetworkPolicies enforced (the testbed's kube-router), the operator pod still acts on a
//!    Valkey whose policies are on (1b): a 3-pod cluster without Sentinel reaches OK, rolls (the
//!    master by the operator's switchover) and gets a new master from the operator when its
//!    master's valkey-server is SIGSTOPped — each needs the operator pod to reach the data pods.
//! 2. `helm upgrade` runs the pre-upgrade migrate hook. Beforehand the Valkey's stored form is made
//!    to lack its defaulted spec fields by writing etcd directly — exactly what an object written
//!    under an older CRD without those defaults looks like in storage (the API server fills defaults
//!    into every read, so only etcd shows the difference). After the upgrade etcd holds them: the
//!    hook wrote them. Without the hook (or with a no-op migrate) this step fails — and a control
//!    upgrade with `preUpgradeHook.enabled=false` first shows that nothing else (the upgrade, the
//!    operator pod's restart) stores them.
//! 3. `helm rollback` to revision 1 restores the first release's Deployment.
//! 4. `helm uninstall` removes every object of the release.
//!
//! Sharing the testbed: the release is installed with `crds.install=false`, because the CRD is
//! cluster-wide and shared with every concurrently running test (`helm uninstall` would delete it
//! and every Valkey in the cluster). That uninstall removes the CRD, the Valkeys' children but not
//! their PVCs is proven by `helm_uninstall_crd` (run alone, last). The operator takes part in the
//! same leader election as the host-process operators of the other tests (Lease
//! `default/valkey-operator.vko.gtrfc.com`, `leaderElection.namespace=default`) and runs the image tag `dev`,
//! the host operators' `--operator-image`, so whichever operator leads renders identical pods.
//!
//! The test is `exclusive_` (`cargo xtask test` runs it alone): the shared host operator holds the
//! Lease for as long as any other operator test runs, so the pod would not become Ready; while the
//! pod leads it reconciles every Valkey, and the upgrade and the rollback restart it. An operator
//! of an earlier test may still hold the Lease until it expires (a SIGKILLed one does not give it
//! up); the wait is printed.

use vko_e2e::{ha_support, helm_support, operator_support};

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use helm_support::{
    Helm, ReleaseGuard, chart, defaulted_spec_fields, set_args, store_valkey_raw, stored_valkey,
    wait_for_ready_operator,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use operator_support::{SOLO_VALKEY, cleanup_namespace, install_crd, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, kubectl, wait_until};
use vko_testbed::prometheus::{self, Prometheus};

const RELEASE: &str = "vko-helm";
/// The chart's objects for RELEASE (its full name).
const FULLNAME: &str = "vko-helm-valkey-operator";
/// The Lease every e2e operator shares (see the module documentation).
const LEASE_NAMESPACE: &str = "default";
const LEASE_NAME: &str = "valkey-operator.vko.gtrfc.com";
/// An earlier test's operator may hold the Lease until it expires or that test ends.
const LEADERSHIP_TIMEOUT: Duration = Duration::from_secs(1200);

/// The chart's monitoring objects, for step 1c (a short interval: the test waits for scrapes).
const MONITORING_VALUES: [&str; 3] = [
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.interval=5s",
    "metrics.prometheusRule.enabled=true",
];

/// The Valkey Prometheus scrapes in step 1c: two data pods with the exporter, and the observer.
const SCRAPED_VALKEY: &str = "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: scraped}\n\
     spec:\n  replicas: 2\n  image: valkey/valkey:8.0\n  observer: {enabled: true}\n\
     \x20 metrics: {enabled: true, serviceMonitor: {enabled: true, interval: 5s}}\n";

/// Label names of a query's result series.
fn label_names(series: &serde_json::Value) -> BTreeSet<String> {
    series["metric"]
        .as_object()
        .map(|labels| labels.keys().cloned().collect())
        .unwrap_or_default()
}

fn value_of(series: &serde_json::Value) -> f64 {
    series["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Step 1c (see the module documentation).
async fn prometheus_scrapes_every_target(
    client: &kube::Client,
    rel: &str,
    ns: &str,
    operator_pod: &str,
) -> anyhow::Result<()> {
    apply_yaml(client, ns, SCRAPED_VALKEY).await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        "scraped",
        "phase OK with 2 ready replicas",
        Duration::from_secs(240),
        ok_with(2),
    )
    .await?;
    let kind = |group: &str, kind: &str, plural: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
    };
    let monitor_kind = kind("monitoring.coreos.com", "ServiceMonitor", "servicemonitors");
    let mut monitors = Vec::new();
    for namespace in [rel, ns] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &monitor_kind);
        // The observer's ServiceMonitor follows its Deployment: wait for all three.
        let wanted = if namespace == rel { 1 } else { 2 };
        let listed = wait_until(
            &format!("{wanted} ServiceMonitor(s) in {namespace}"),
            Duration::from_secs(60),
            || {
                let api = api.clone();
                async move {
                    let items = api.list(&ListParams::default()).await?.items;
                    Ok((items.len() == wanted).then_some(items))
                }
            },
        )
        .await?;
        for monitor in listed {
            monitors.push(serde_json::to_value(monitor)?);
        }
    }
    let names: BTreeSet<String> = monitors
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    let metrics_service = format!("{FULLNAME}-metrics");
    assert_eq!(
        names,
        BTreeSet::from([
            FULLNAME.to_owned(),
            "scraped-metrics".to_owned(),
            "scraped-observer".to_owned()
        ])
    );
    let rule_kind = kind("monitoring.coreos.com", "PrometheusRule", "prometheusrules");
    let rules: Api<DynamicObject> = Api::namespaced_with(client.clone(), rel, &rule_kind);
    let rule = serde_json::to_value(rules.get(FULLNAME).await?)?;
    // Every scraped Service's EndpointSlice filled in: the operator pod, two data pods (their
    // exporter Ready), the observer (published while not ready).
    let wanted = [
        (metrics_service.as_str(), "metrics", 1),
        ("scraped-metrics", "metrics", 2),
        ("scraped-observer", "health", 1),
    ];
    let targets = wait_until(
        "every scraped Service's endpoints",
        Duration::from_secs(60),
        || async {
            let groups = prometheus::discover(client, &[rel, ns]).await?;
            let count = |service: &str, port: &str| {
                groups
                    .iter()
                    .filter(|g| {
                        g["labels"]["__meta_kubernetes_service_name"] == service
                            && g["labels"]["__meta_kubernetes_endpointslice_port_name"] == port
                    })
                    .count()
            };
            let complete = wanted
                .iter()
                .all(|(service, port, n)| count(service, port) == *n);
            Ok(complete.then_some(groups))
        },
    )
    .await?;
    let started = Instant::now();
    let prometheus = Prometheus::start(&monitors, &targets, &[rule["spec"].clone()]).await?;
    let outcome =
        scraped_series_and_rules(&prometheus, &metrics_service, rel, ns, operator_pod).await;
    if outcome.is_err() {
        println!("Prometheus log:\n{}", prometheus.log());
    }
    prometheus.stop().await;
    outcome?;
    println!(
        "Prometheus: every target up, the documented series present and every rule evaluated \
         {:.1} s after it started",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What step 1c checks once Prometheus runs.
async fn scraped_series_and_rules(
    prometheus: &Prometheus,
    metrics_service: &str,
    rel: &str,
    ns: &str,
    operator_pod: &str,
) -> anyhow::Result<()> {
    // Every target up: the operator pod, both exporters, the observer.
    let expected = BTreeSet::from([
        (
            metrics_service.to_owned(),
            rel.to_owned(),
            operator_pod.to_owned(),
        ),
        (
            "scraped-metrics".to_owned(),
            ns.to_owned(),
            "scraped-0".to_owned(),
        ),
        (
            "scraped-metrics".to_owned(),
            ns.to_owned(),
            "scraped-1".to_owned(),
        ),
        ("scraped-observer".to_owned(), ns.to_owned(), String::new()),
    ]);
    let waited = wait_until("every target up", Duration::from_secs(90), || async {
        let targets = prometheus.active_targets().await?;
        let up: BTreeSet<(String, String, String)> = targets
            .iter()
            .filter(|t| t["health"] == "up")
            .map(|t| {
                let label = |name: &str| t["labels"][name].as_str().unwrap_or_default().to_owned();
                let pod = label("pod");
                // The observer's pod name is generated.
                let pod = if label("job") == "scraped-observer" {
                    String::new()
                } else {
                    pod
                };
                (label("job"), label("namespace"), pod)
            })
            .collect();
        Ok((up == expected && targets.len() == expected.len()).then_some(targets))
    })
    .await;
    let targets = match waited {
        Ok(targets) => targets,
        Err(error) => bail!("{error}; targets: {:#?}", prometheus.active_targets().await),
    };
    for target in &targets {
        println!(
            "target {} {} up ({})",
            target["labels"]["job"], target["scrapeUrl"], target["labels"]["endpoint"]
        );
    }

    // The documented series with their documented labels (README, "Metrics").
    let valkey = format!("namespace=\"{ns}\",name=\"scraped\"");
    let operator_series: [(String, &[&str], Option<f64>); 8] = [
        (
            format!("vko_valkey_status_phase{{{valkey},phase=\"OK\"}}"),
            &["namespace", "name", "phase"],
            Some(1.0),
        ),
        (
            format!("vko_valkey_status_condition{{{valkey},condition=\"Ready\",status=\"True\"}}"),
            &["namespace", "name", "condition", "status", "reason"],
            Some(1.0),
        ),
        (
            format!("vko_valkey_status_ready_replicas{{{valkey}}}"),
            &["namespace", "name"],
            Some(2.0),
        ),
        (
            format!("vko_valkey_spec_replicas{{{valkey}}}"),
            &["namespace", "name"],
            Some(2.0),
        ),
        (
            format!("vko_valkey_metadata_generation{{{valkey}}}"),
            &["namespace", "name"],
            None,
        ),
        (
            format!("vko_valkey_status_observed_generation{{{valkey}}}"),
            &["namespace", "name"],
            None,
        ),
        (
            format!("vko_valkey_operator_version_info{{{valkey}}}"),
            &["namespace", "name", "version"],
            Some(1.0),
        ),
        (
            format!("vko_operator_build_info{{pod=\"{operator_pod}\"}}"),
            &["version", "commit"],
            Some(1.0),
        ),
    ];
    for (expr, labels, value) in operator_series {
        let series = wait_for_series(prometheus, &expr, 1).await?;
        let names = label_names(&series[0]);
        for label in labels {
            anyhow::ensure!(
                names.contains(*label),
                "{expr}: no label {label}: {names:?}"
            );
        }
        anyhow::ensure!(
            !names.contains("exported_namespace"),
            "{expr} was relabelled: {names:?}"
        );
        if let Some(value) = value {
            anyhow::ensure!(value_of(&series[0]) == value, "{expr}: {:?}", series[0]);
        }
    }
    let generations = wait_for_series(
        prometheus,
        &format!(
            "vko_valkey_metadata_generation{{{valkey}}} - \
             vko_valkey_status_observed_generation{{{valkey}}}"
        ),
        1,
    )
    .await?;
    anyhow::ensure!(value_of(&generations[0]) == 0.0, "{generations:?}");
    let collector = wait_for_series(
        prometheus,
        &format!("vko_valkey_collector_success{{job=\"{metrics_service}\"}}"),
        1,
    )
    .await?;
    anyhow::ensure!(value_of(&collector[0]) == 1.0, "{collector:?}");

    // Every exporter: up, and one master and one replica.
    wait_for_series(prometheus, "redis_up{job=\"scraped-metrics\"} == 1", 2).await?;
    let roles: BTreeSet<String> = wait_for_series(
        prometheus,
        "redis_instance_info{job=\"scraped-metrics\"}",
        2,
    )
    .await?
    .iter()
    .filter_map(|s| s["metric"]["role"].as_str().map(str::to_owned))
    .collect();
    anyhow::ensure!(
        roles == BTreeSet::from(["master".to_owned(), "slave".to_owned()]),
        "roles {roles:?}"
    );

    // The observer: ready, its ten checks, its loop, its build.
    let observer = "job=\"scraped-observer\"";
    wait_for_series(
        prometheus,
        &format!("vko_observer_ready{{{observer}}} == 1"),
        1,
    )
    .await?;
    for (name, count) in [
        ("vko_observer_check_ok", 10),
        ("vko_observer_check_failures_total", 10),
        ("vko_observer_rounds_total", 1),
        ("vko_observer_round_duration_seconds_count", 1),
        ("vko_observer_last_round_timestamp_seconds", 1),
        ("vko_observer_build_info", 1),
    ] {
        let series = wait_for_series(prometheus, &format!("{name}{{{observer}}}"), count).await?;
        let label = match name {
            "vko_observer_check_ok" | "vko_observer_check_failures_total" => Some("check"),
            "vko_observer_build_info" => Some("version"),
            _ => None,
        };
        if let Some(label) = label {
            anyhow::ensure!(
                series.iter().all(|s| label_names(s).contains(label)),
                "{name}: no {label} label: {series:?}"
            );
        }
    }

    // Every rule of the chart evaluated without error, and nothing alerts about these clusters.
    let groups = wait_until("every rule evaluated", Duration::from_secs(60), || async {
        let groups = prometheus.rule_groups().await?;
        let rules: Vec<&serde_json::Value> = groups
            .iter()
            .flat_map(|g| g["rules"].as_array().into_iter().flatten())
            .collect();
        let evaluated = !rules.is_empty()
            && rules.iter().all(|r| {
                r["lastEvaluation"]
                    .as_str()
                    .is_some_and(|t| !t.starts_with("0001"))
            });
        Ok(evaluated.then_some(groups))
    })
    .await?;
    let mut count = 0;
    for rule in groups
        .iter()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
    {
        count += 1;
        anyhow::ensure!(
            rule["health"] == "ok",
            "rule {} does not evaluate: {}",
            rule["name"],
            rule["lastError"]
        );
    }
    let active = prometheus.query("ALERTS").await?;
    let ours: Vec<&serde_json::Value> = active
        .iter()
        .filter(|alert| {
            alert["metric"]["namespace"]
                .as_str()
                .is_none_or(|namespace| namespace == ns || namespace == rel)
        })
        .collect();
    anyhow::ensure!(ours.is_empty(), "alerts about healthy clusters: {ours:?}");
    println!("{count} rules evaluated without error, no alert for {ns} and {rel}");
    Ok(())
}

/// Waits until `expr` returns at least `count` series; returns them.
async fn wait_for_series(
    prometheus: &Prometheus,
    expr: &str,
    count: usize,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let found = wait_until(
        &format!("{count} series of {expr}"),
        Duration::from_secs(60),
        || async {
            let series = prometheus.query(expr).await?;
            Ok((series.len() >= count).then_some(series))
        },
    )
    .await?;
    Ok(found)
}

fn base_values() -> Vec<&'static str> {
    vec![
        "image.repository=vko.local/vko",
        "image.tag=dev",
        "leaderElection.namespace=default",
        "crds.install=false",
        "logFormat=text",
    ]
}

async fn deployment_args(client: &kube::Client, namespace: &str) -> anyhow::Result<Vec<String>> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment = deployments.get(FULLNAME).await?;
    Ok(deployment
        .spec
        .and_then(|spec| spec.template.spec)
        .and_then(|pod| pod.containers.into_iter().next())
        .and_then(|container| container.args)
        .unwrap_or_default())
}

async fn operator_logs(namespace: &str) -> String {
    kubectl(&[
        "logs",
        "-n",
        namespace,
        &format!("deployment/{FULLNAME}"),
        "--tail=60",
    ])
    .await
    .unwrap_or_else(|error| format!("(no logs: {error})"))
}

/// Rewrites what etcd stores for `solo` without its defaulted spec fields (see the module
/// documentation); returns the fields now missing from storage and the object as a read shows it.
async fn strip_stored_defaults(ns: &str) -> anyhow::Result<(Vec<String>, serde_json::Value)> {
    let defaulted = defaulted_spec_fields();
    let mut missing = Vec::new();
    for attempt in 1..=3 {
        let mut stored = stored_valkey(ns, "solo").await?;
        let spec = stored["spec"]
            .as_object_mut()
            .context("the stored Valkey has no spec")?;
        let stripped: Vec<String> = defaulted
            .iter()
            .filter(|field| spec.remove(field.as_str()).is_some())
            .cloned()
            .collect();
        if stripped.is_empty() && attempt == 1 {
            bail!("the stored Valkey holds none of the defaulted fields {defaulted:?}");
        }
        store_valkey_raw(ns, "solo", &stored).await?;
        // The operator sees the rewrite (a watch event) but has nothing to write: the status is
        // current. Give it time, then make sure nothing wrote the defaults back already.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = stored_valkey(ns, "solo").await?;
        missing = defaulted
            .iter()
            .filter(|field| after["spec"].get(field.as_str()).is_none())
            .cloned()
            .collect();
        if !missing.is_empty() {
            break;
        }
        println!("attempt {attempt}: something rewrote solo within 5 s; stripping again");
    }
    if missing.is_empty() {
        bail!("could not make the stored Valkey lack its defaults");
    }
    // The API server still shows them: read-time defaulting.
    let read = kubectl(&["get", "valkey", "solo", "-n", ns, "-o", "json"]).await?;
    let read: serde_json::Value = serde_json::from_str(&read)?;
    if let Some(field) = missing
        .iter()
        .find(|field| read["spec"].get(field.as_str()).is_none())
    {
        bail!("{field} is not filled in on read");
    }
    println!("stored solo lacks {missing:?} (a read still shows them)");
    Ok((missing, read))
}

/// Exclusive (`cargo xtask test` runs it alone): see the module documentation.
/// With `networkPolicy.enabled`, the data pods' policy has a peer that selects `operator_pod` in
/// the release namespace (the chart passes its selector labels, `--operator-pod-labels`).
async fn operator_is_admitted_by_the_network_policy(
    client: &kube::Client,
    ns: &str,
    rel: &str,
    operator_pod: &str,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let patch = serde_json::json!({ "spec": { "networkPolicy": { "enabled": true } } });
    valkeys
        .patch("solo", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let policies: Api<NetworkPolicy> = Api::namespaced(client.clone(), ns);
    let policy = wait_until("the NetworkPolicy solo", Duration::from_secs(60), || {
        let policies = policies.clone();
        async move { Ok(policies.get_opt("solo").await?) }
    })
    .await?;
    let rules = policy
        .spec
        .and_then(|spec| spec.ingress)
        .context("the policy has no ingress rules")?;
    let peers: Vec<_> = rules
        .iter()
        .flat_map(|rule| rule.from.iter().flatten())
        .filter_map(|peer| {
            Some((
                peer.namespace_selector.as_ref()?,
                peer.pod_selector.as_ref()?,
            ))
        })
        .collect();
    let namespace_label = ("kubernetes.io/metadata.name".to_owned(), rel.to_owned());
    let Some((_, pod_selector)) = peers.iter().find(|(namespaces, _)| {
        namespaces
            .match_labels
            .as_ref()
            .is_some_and(|labels| labels.iter().eq([(&namespace_label.0, &namespace_label.1)]))
    }) else {
        bail!("no peer selects the namespace {rel}: {rules:?}");
    };
    let labels = pod_selector
        .match_labels
        .as_ref()
        .filter(|labels| !labels.is_empty())
        .context("the operator peer selects every pod")?;
    let selector = labels
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods: Api<Pod> = Api::namespaced(client.clone(), rel);
    let selected: Vec<String> = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .map(|pod| pod.metadata.name.unwrap_or_default())
        .collect();
    if !selected.iter().any(|name| name == operator_pod) {
        bail!("the operator peer {selector} selects {selected:?}, not {operator_pod}");
    }
    println!("the NetworkPolicy admits {operator_pod} by {selector} in {rel}");
    Ok(())
}

/// Exclusive (`cargo xtask test` runs it alone): see the module documentation.
/// With the policies enforced (the testbed's kube-router), the operator pod reaches the pods of a
/// Valkey whose `networkPolicy` is on: a 3-pod cluster without Sentinel reaches OK, rolls (the
/// master by the operator's switchover) and, its master's valkey-server stopped (SIGSTOP), gets a
/// new master from the operator. Each needs the operator to talk to the data pods; a policy that
/// did not admit this pod would hold the roll and leave the hung master in place.
async fn operator_acts_through_enforced_policies(
    client: &kube::Client,
    testbed: &Testbed,
    ns: &str,
) -> anyhow::Result<()> {
    use ha_support::{Pods, eventually};
    use vko_testbed::control::Fault;
    const NAME: &str = "guarded";
    let started = Instant::now();
    apply_yaml(
        client,
        ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\n\
             spec: {{replicas: 3, image: valkey/valkey:8.0, networkPolicy: {{enabled: true}}}}\n"
        ),
    )
    .await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        NAME,
        "3 ready and OK",
        Duration::from_secs(180),
        ok_with(3),
    )
    .await?;
    println!(
        "{NAME} (3 pods, policies enforced) OK after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let before = Pods::list(client, ns).await?;
    let uids = |pods: &Pods| -> Vec<(String, Option<String>)> {
        pods.names_with_prefix(&format!("{NAME}-"))
            .into_iter()
            .map(|pod| {
                let uid = pods.by_name.get(&pod).and_then(|p| p.metadata.uid.clone());
                (pod, uid)
            })
            .collect()
    };
    let uids_before = uids(&before);
    let started = Instant::now();
    let patch = serde_json::json!({ "spec": { "resources": { "requests": { "cpu": "11m" } } } });
    valkeys
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eventually(
        Duration::from_secs(300),
        "every data pod replaced and OK",
        || async {
            let now = uids(&Pods::list(client, ns).await?);
            for ((pod, old), (_, new)) in uids_before.iter().zip(&now) {
                anyhow::ensure!(new.is_some() && new != old, "{pod} not replaced yet");
            }
            let valkey = valkeys.get(NAME).await?;
            anyhow::ensure!(ok_with(3)(&valkey), "not OK with 3 ready");
            Ok(())
        },
    )
    .await?;
    println!(
        "the operator pod rolled {NAME} through its policies in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let master = Pods::list(client, ns).await?.labelled_master()?;
    let valkey_of = |pod: &str| (ns.to_owned(), pod.to_owned(), "valkey".to_owned());
    let (namespace, pod, container) = valkey_of(&master);
    let stopped = Instant::now();
    testbed
        .fault(Fault::Pause {
            namespace,
            pod,
            container,
        })
        .await?;
    let promoted = eventually(Duration::from_secs(90), "a new master", || async {
        let new = Pods::list(client, ns).await?.labelled_master()?;
        anyhow::ensure!(new != master, "{master} is still labelled master");
        Ok(new)
    })
    .await;
    let (namespace, pod, container) = valkey_of(&master);
    testbed
        .fault(Fault::Resume {
            namespace,
            pod,
            container,
        })
        .await?;
    let promoted = promoted?;
    println!(
        "{master} stopped: the operator pod made {promoted} master {:.1} s later",
        stopped.elapsed().as_secs_f64()
    );
    valkeys
        .delete(NAME, &kube::api::DeleteParams::default())
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_install_reconcile_upgrade_with_migrate_rollback_uninstall() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let helm = Helm::new(testbed.kubeconfig()).unwrap();
    let release_ns = TestNamespace::create(&client, "helm-rel").await.unwrap();
    let data_ns = TestNamespace::create(&client, "helm-vk").await.unwrap();
    let rel = release_ns.name().to_owned();
    let ns = data_ns.name().to_owned();
    let chart = chart();
    let chart = chart.to_str().unwrap();

    // ---- 1. install: the in-cluster operator reconciles a Valkey to OK ----
    // The chart's ServiceMonitor and PrometheusRule need their CRDs (step 1c).
    prometheus::install_crds(&client).await.unwrap();
    let mut install = vec!["install", RELEASE, chart, "--namespace", &rel];
    let values = set_args(&[base_values(), MONITORING_VALUES.to_vec()].concat());
    install.extend(values.iter().map(String::as_str));
    // A run killed before its guard could uninstall leaves cluster-scoped objects behind (its
    // namespace is gone); they would block this install.
    for (kinds, namespace) in [
        ("clusterrole,clusterrolebinding", None),
        ("role,rolebinding", Some(LEASE_NAMESPACE)),
    ] {
        let selector = format!("app.kubernetes.io/instance={RELEASE}");
        let mut args = vec!["delete", kinds, "-l", &selector, "--ignore-not-found"];
        args.extend(namespace.map(|ns| ["-n", ns]).into_iter().flatten());
        kubectl(&args).await.unwrap();
    }
    let _uninstall_on_failure = ReleaseGuard::new(&helm, RELEASE, &rel);
    println!("{}", helm.run(&install).await.unwrap());
    let waited = Instant::now();
    let operator_pod = match wait_for_ready_operator(
        &client,
        &rel,
        RELEASE,
        (LEASE_NAMESPACE, LEASE_NAME),
        LEADERSHIP_TIMEOUT,
    )
    .await
    {
        Ok(pod) => pod,
        Err(error) => panic!("{error}\noperator log:\n{}", operator_logs(&rel).await),
    };
    println!(
        "operator pod {operator_pod} Ready (leading) after {:.1} s",
        waited.elapsed().as_secs_f64()
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let holder = leases
        .get(LEASE_NAME)
        .await
        .unwrap()
        .spec
        .and_then(|spec| spec.holder_identity);
    assert_eq!(holder.as_deref(), Some(operator_pod.as_str()));

    apply_yaml(&client, &ns, SOLO_VALKEY).await.unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let started = Instant::now();
    if let Err(error) = wait_for_valkey(
        &valkeys,
        "solo",
        "phase OK with 1 ready replica",
        Duration::from_secs(180),
        ok_with(1),
    )
    .await
    {
        panic!("{error}\noperator log:\n{}", operator_logs(&rel).await);
    }
    println!(
        "solo reached PHASE OK after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    let reporters: Vec<String> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|event| event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("solo"))
        .filter_map(|event| event.reporting_instance)
        .collect();
    assert!(
        reporters.iter().any(|reporter| reporter == &operator_pod),
        "no Event about solo was reported by {operator_pod}: {reporters:?}"
    );

    // ---- 1b. the NetworkPolicies it renders admit this operator pod in its own namespace ----
    operator_is_admitted_by_the_network_policy(&client, &ns, &rel, &operator_pod)
        .await
        .unwrap();
    if let Err(error) = operator_acts_through_enforced_policies(&client, &testbed, &ns).await {
        panic!("{error:#}\noperator log:\n{}", operator_logs(&rel).await);
    }

    // ---- 1c. Prometheus scrapes the operator, the exporters and the observer ----
    if let Err(error) = prometheus_scrapes_every_target(&client, &rel, &ns, &operator_pod).await {
        panic!("{error:#}\noperator log:\n{}", operator_logs(&rel).await);
    }

    // ---- 2. upgrade: the pre-upgrade hook stores the defaults a stored object lacks ----
    // Control first: the same upgrade without the hook leaves them missing (so what stores them
    // below is the hook, not the upgrade's operator restart or anything else).
    let (missing, read) = strip_stored_defaults(&ns).await.unwrap();
    let mut upgrade = vec!["upgrade", RELEASE, chart, "--namespace", &rel];
    let values = set_args(
        &[
            base_values(),
            vec!["maxConcurrentReconciles=2", "preUpgradeHook.enabled=false"],
        ]
        .concat(),
    );
    upgrade.extend(values.iter().map(String::as_str));
    println!("{}", helm.run(&upgrade).await.unwrap());
    let stored = stored_valkey(&ns, "solo").await.unwrap();
    for field in &missing {
        assert!(
            stored["spec"].get(field.as_str()).is_none(),
            "{field} was stored by an upgrade without the hook; the migrate check below proves nothing"
        );
    }

    let mut upgrade = vec!["upgrade", RELEASE, chart, "--namespace", &rel];
    let values = set_args(&[base_values(), vec!["maxConcurrentReconciles=3"]].concat());
    upgrade.extend(values.iter().map(String::as_str));
    let started = Instant::now();
    println!("{}", helm.run(&upgrade).await.unwrap());
    println!(
        "helm upgrade (with the migrate hook) took {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let stored = stored_valkey(&ns, "solo").await.unwrap();
    for field in &missing {
        assert_eq!(
            stored["spec"].get(field.as_str()),
            read["spec"].get(field.as_str()),
            "the migrate hook did not store {field}: {}",
            stored["spec"]
        );
    }
    assert!(
        deployment_args(&client, &rel)
            .await
            .unwrap()
            .contains(&"--max-concurrent-reconciles=3".to_owned())
    );
    let revisions = helm
        .run(&["history", RELEASE, "--namespace", &rel, "-o", "json"])
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&revisions)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        3,
        "{revisions}"
    );
    // The hook's objects are gone once it succeeded.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &rel);
    let hook_roles: Api<ClusterRole> = Api::all(client.clone());
    let migrate_name = format!("{FULLNAME}-migrate");
    wait_until(
        "the migrate hook's Job and ClusterRole to be deleted",
        Duration::from_secs(60),
        || {
            let (jobs, hook_roles, name) = (jobs.clone(), hook_roles.clone(), migrate_name.clone());
            async move {
                let gone = jobs.get_opt(&name).await?.is_none()
                    && hook_roles.get_opt(&name).await?.is_none();
                Ok(gone.then_some(()))
            }
        },
    )
    .await
    .unwrap();

    // ---- 3. rollback to revision 1 ----
    println!(
        "{}",
        helm.run(&["rollback", RELEASE, "1", "--namespace", &rel])
            .await
            .unwrap()
    );
    let args = deployment_args(&client, &rel).await.unwrap();
    assert!(
        args.contains(&"--max-concurrent-reconciles=4".to_owned()),
        "{args:?}"
    );
    let history = helm
        .run(&["history", RELEASE, "--namespace", &rel, "-o", "json"])
        .await
        .unwrap();
    let history: serde_json::Value = serde_json::from_str(&history).unwrap();
    let last = history.as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["revision"], 4, "{history}");
    assert_eq!(last["description"], "Rollback to 1", "{history}");

    // ---- 4. uninstall: every object of the release goes ----
    println!(
        "{}",
        helm.run(&["uninstall", RELEASE, "--namespace", &rel, "--wait"])
            .await
            .unwrap()
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &rel);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &rel);
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let lease_roles: Api<Role> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease_role = format!("{FULLNAME}-leader-election");
    wait_until(
        "the release's objects to be deleted",
        Duration::from_secs(60),
        || {
            let (deployments, accounts, roles, bindings, lease_roles, lease_role) = (
                deployments.clone(),
                accounts.clone(),
                roles.clone(),
                bindings.clone(),
                lease_roles.clone(),
                lease_role.clone(),
            );
            async move {
                let gone = deployments.get_opt(FULLNAME).await?.is_none()
                    && accounts.get_opt(FULLNAME).await?.is_none()
                    && roles.get_opt(FULLNAME).await?.is_none()
                    && bindings.get_opt(FULLNAME).await?.is_none()
                    && lease_roles.get_opt(&lease_role).await?.is_none();
                Ok(gone.then_some(()))
            }
        },
    )
    .await
    .unwrap();
    // crds.install=false: the shared CRD, and with it this Valkey, stays.
    assert!(valkeys.get_opt("solo").await.unwrap().is_some());

    cleanup_namespace(&client, data_ns).await.unwrap();
    release_ns.cleanup().await.unwrap();
    prometheus::uninstall_crds(&client).await.unwrap();
}
