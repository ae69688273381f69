//! The optional objects follow the spec: turned on, the operator creates the observer Deployment,
//! the PodDisruptionBudget, the NetworkPolicies, the Sentinel tier, the metrics Service, the
//! ServiceMonitor (the Prometheus-Operator's CRD installed) and the Certificate (the testbed's
//! cert-manager); turned off while the Valkey stays, it deletes them itself (owner-reference
//! garbage collection cannot: the owner still exists) — the watched kinds from its stores, the
//! Certificate and the ServiceMonitor after a LIST by the cluster's label.
//!
//! cert-manager leaving and coming back under a running operator: uninstalled, a `Valkey` with
//! `tls.certManager` gets `ReconcileBlocked=True/CertManagerMissing` and a Warning Event naming its
//! Certificate; reinstalled, the operator writes the Certificate again and the condition clears,
//! with no operator restart (it watches the Certificate CRD by name, ADR 0047).
//!
//! The operator runs with the chart's RBAC only (`operator_support`), so this also proves the chart
//! grants what these paths need, and it is what puts those writes into the audit log for
//! `rbac_least_privilege`. The Prometheus-Operator does not run, only its v0.85 CRDs are installed
//! (the API server checks our ServiceMonitors against the real schema; nothing acts on them here:
//! `helm_lifecycle` has a Prometheus scrape them).

use vko_e2e::operator_support;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Resource, ResourceExt};
use operator_support::{condition, ok_with, operator, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::cert_manager;
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, wait_until};
use vko_testbed::prometheus;

const TIMEOUT: Duration = Duration::from_secs(300);

/// The unwatched kinds: cert-manager's Certificate (the testbed's real CRD) and the
/// Prometheus-Operator's ServiceMonitor (its v0.85 CRD).
const FOREIGN_KINDS: [(&str, &str, &str, &str); 2] = [
    ("cert-manager.io", "v1", "Certificate", "certificates"),
    (
        "monitoring.coreos.com",
        "v1",
        "ServiceMonitor",
        "servicemonitors",
    ),
];
const CERTIFICATE: usize = 0;
const SERVICE_MONITOR: usize = 1;

/// Names of the `K`s in the namespace (minus what Kubernetes puts into every namespace).
async fn names<K>(client: &kube::Client, namespace: &str) -> Result<BTreeSet<String>, kube::Error>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .filter(|name| name != "default" && name != "kube-root-ca.crt")
        .collect())
}

/// The Deployments, PodDisruptionBudgets, NetworkPolicies and StatefulSets in `namespace`: the
/// kinds that come and go with the optional settings (the StatefulSets for the Sentinel tier).
async fn optional_object_names(
    client: &kube::Client,
    namespace: &str,
) -> Result<ObjectNames, kube::Error> {
    Ok((
        names::<Deployment>(client, namespace).await?,
        names::<PodDisruptionBudget>(client, namespace).await?,
        names::<NetworkPolicy>(client, namespace).await?,
        names::<StatefulSet>(client, namespace).await?,
    ))
}

/// Deployments, PodDisruptionBudgets, NetworkPolicies, StatefulSets.
type ObjectNames = (
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeSet<String>,
    BTreeSet<String>,
);

/// Waits until the optional kinds' names satisfy `wanted` and returns them.
async fn wait_for_optional_objects(
    client: &kube::Client,
    namespace: &str,
    what: &str,
    wanted: impl Fn(&ObjectNames) -> bool,
) -> vko_testbed::Result<ObjectNames> {
    let wanted = &wanted;
    wait_until(what, TIMEOUT, || async move {
        let names = optional_object_names(client, namespace).await?;
        Ok(wanted(&names).then_some(names))
    })
    .await
}

/// The Services, ConfigMaps and ServiceAccounts in `namespace` (some of them go with a setting,
/// none may appear when one is turned off).
async fn other_object_names(
    client: &kube::Client,
    namespace: &str,
) -> Result<(BTreeSet<String>, BTreeSet<String>, BTreeSet<String>), kube::Error> {
    Ok((
        names::<Service>(client, namespace).await?,
        names::<ConfigMap>(client, namespace).await?,
        names::<ServiceAccount>(client, namespace).await?,
    ))
}

/// Whether there are Deployments, PodDisruptionBudgets and NetworkPolicies, and how many of the
/// StatefulSets are "opt"'s (the data tier, and the Sentinel tier while it is on).
fn presence(names: &ObjectNames) -> ([bool; 3], usize) {
    let opt_statefulsets = names
        .3
        .iter()
        .filter(|name| name.starts_with("opt"))
        .count();
    (
        [
            !names.0.is_empty(),
            !names.1.is_empty(),
            !names.2.is_empty(),
        ],
        opt_statefulsets,
    )
}

fn foreign_api(client: &kube::Client, namespace: &str, index: usize) -> Api<DynamicObject> {
    let (group, version, kind, plural) = FOREIGN_KINDS[index];
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Waits until the names of the objects of the foreign kind `index` in the namespace satisfy
/// `wanted`; returns them.
async fn wait_for_foreign(
    client: &kube::Client,
    namespace: &str,
    index: usize,
    what: &str,
    wanted: impl Fn(&BTreeSet<String>) -> bool,
) -> vko_testbed::Result<BTreeSet<String>> {
    let api = foreign_api(client, namespace, index);
    let wanted = &wanted;
    wait_until(
        &format!("{what} ({}s in {namespace})", FOREIGN_KINDS[index].2),
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let list = api.list(&ListParams::default()).await?;
                let names: BTreeSet<String> =
                    list.items.iter().map(ResourceExt::name_any).collect();
                Ok(wanted(&names).then_some(names))
            }
        },
    )
    .await
}

/// cert-manager leaves and comes back under the running operator: the `Valkey` "tls" (PHASE OK
/// from an issued Secret) is blocked with `CertManagerMissing` naming its Certificate while the
/// API group is gone, and its Certificate is written again (and issued) once it is back.
async fn cert_manager_leaves_and_comes_back(testbed: &Testbed, ns: &str) -> anyhow::Result<()> {
    let client = testbed.client();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let left = std::time::Instant::now();
    cert_manager::uninstall(&client, testbed.kubeconfig()).await?;
    eprintln!("cert-manager uninstalled in {:?}", left.elapsed());
    let blocked = wait_for_valkey(
        &valkeys,
        "tls",
        "ReconcileBlocked=True/CertManagerMissing",
        Duration::from_secs(120),
        |valkey| {
            condition(valkey, "ReconcileBlocked").is_some_and(|(status, reason, _)| {
                status == "True" && reason == "CertManagerMissing"
            })
        },
    )
    .await?;
    let (_, _, message) = condition(&blocked, "ReconcileBlocked").unwrap_or_default();
    anyhow::ensure!(
        message.contains("tls-tls") && message.contains("spec.tls.secretName"),
        "{message}"
    );
    let events = operator_support::events_about(&client, ns, "tls", "Warning").await;
    anyhow::ensure!(
        events
            .iter()
            .any(|event| event.reason.as_deref() == Some("CertManagerMissing")),
        "no CertManagerMissing Warning Event: {events:?}"
    );
    eprintln!(
        "without cert-manager, {:?} after it left: {message}",
        left.elapsed()
    );

    let back = std::time::Instant::now();
    cert_manager::install(&client, testbed.kubeconfig()).await?;
    eprintln!("cert-manager reinstalled in {:?}", back.elapsed());
    let api = foreign_api(&client, ns, CERTIFICATE);
    wait_until(
        "Certificate tls-tls written again and Ready",
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let certificate = api.get_opt("tls-tls").await?;
                Ok(certificate.filter(cert_manager::is_ready).map(|_| ()))
            }
        },
    )
    .await?;
    wait_for_valkey(
        &valkeys,
        "tls",
        "ReconcileBlocked=False and PHASE OK",
        Duration::from_secs(120),
        |valkey| {
            ok_with(1)(valkey)
                && condition(valkey, "ReconcileBlocked")
                    .is_some_and(|(status, _, _)| status == "False")
        },
    )
    .await?;
    eprintln!(
        "cert-manager back: Certificate tls-tls issued and the block cleared {:?} after the reinstall began, same operator",
        back.elapsed()
    );
    Ok(())
}

/// Exclusive (`cargo xtask test` runs it alone): it uninstalls cert-manager, and the
/// Prometheus-Operator's CRDs come and go, under every other test's operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_optional_objects_come_with_their_settings_and_go_when_turned_off() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    operator_support::install_crd(&client).await.unwrap();
    prometheus::install_crds(&client).await.unwrap();
    let _operator = operator().await.unwrap();
    let namespace = TestNamespace::create(&client, "op-optional").await.unwrap();
    let ns = namespace.name().to_owned();

    // cert-manager TLS: the operator applies the Certificate, the testbed's cert-manager issues
    // it, and the StatefulSet follows once the Secret can be fingerprinted.
    let tls_on = format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: tls}}\n\
         spec: {{replicas: 1, image: valkey/valkey:8.0,\n\
         \x20 tls: {{enabled: true, certManager: {{issuer: {{kind: ClusterIssuer, name: {}}}}}}}}}\n",
        cert_manager::CA_ISSUER
    );
    apply_yaml(&client, &ns, &tls_on).await.unwrap();
    let all_on = "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: opt}\n\
         spec:\n  replicas: 2\n  image: valkey/valkey:8.0\n\
         \x20 sentinel: {enabled: true, replicas: 1}\n\
         \x20 observer: {enabled: true}\n\
         \x20 podDisruptionBudget: {enabled: true}\n\
         \x20 networkPolicy: {enabled: true}\n\
         \x20 metrics: {enabled: true, service: {enabled: true}, serviceMonitor: {enabled: true}}\n";
    apply_yaml(&client, &ns, all_on).await.unwrap();

    let certificates = wait_for_foreign(&client, &ns, CERTIFICATE, "tls's Certificate", |names| {
        names.contains("tls-tls")
    })
    .await
    .unwrap();
    let service_monitors = wait_for_foreign(
        &client,
        &ns,
        SERVICE_MONITOR,
        "opt's ServiceMonitors (the exporters' and the observer's)",
        |names| names.len() == 2,
    )
    .await
    .unwrap();
    eprintln!("certificates {certificates:?}, service monitors {service_monitors:?}");
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    wait_for_valkey(
        &valkeys,
        "tls",
        "tls OK from cert-manager's Secret",
        TIMEOUT,
        ok_with(1),
    )
    .await
    .unwrap();

    // Everything "opt" wants, with the Sentinel tier's StatefulSet next to the data one.
    let on = wait_for_optional_objects(&client, &ns, "opt's optional objects", |names| {
        presence(names) == ([true; 3], 2)
    })
    .await
    .unwrap();
    let (services_on, config_maps_on, service_accounts_on) =
        other_object_names(&client, &ns).await.unwrap();
    eprintln!(
        "on: deployments {:?}, budgets {:?}, network policies {:?}, statefulsets {:?}, services {services_on:?}, \
         config maps {config_maps_on:?}, service accounts {service_accounts_on:?}",
        on.0, on.1, on.2, on.3
    );

    // Everything optional off; "opt" itself stays, so only the operator can remove its children.
    let all_off = "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: opt}\n\
         spec: {replicas: 2, image: valkey/valkey:8.0}\n";
    // The same field manager applies without the optional fields: the API server drops them.
    apply_yaml(&client, &ns, all_off).await.unwrap();

    let off = wait_for_optional_objects(
        &client,
        &ns,
        "opt's optional objects to be deleted",
        |names| presence(names) == ([false; 3], 1),
    )
    .await
    .unwrap();
    let (services_off, config_maps_off, service_accounts_off) =
        other_object_names(&client, &ns).await.unwrap();
    eprintln!(
        "off: statefulsets {:?}, services {services_off:?}, config maps {config_maps_off:?}, \
         service accounts {service_accounts_off:?}",
        off.3
    );
    // The Sentinel tier's Service and config, the metrics Service and the observer's ServiceAccount
    // went with their settings; nothing new appeared.
    assert!(
        services_off.is_subset(&services_on) && services_off.len() < services_on.len(),
        "services {services_on:?} -> {services_off:?}"
    );
    assert!(
        config_maps_off.is_subset(&config_maps_on) && config_maps_off.len() < config_maps_on.len(),
        "config maps {config_maps_on:?} -> {config_maps_off:?}"
    );
    assert!(
        service_accounts_off.is_subset(&service_accounts_on)
            && service_accounts_off.len() < service_accounts_on.len(),
        "service accounts {service_accounts_on:?} -> {service_accounts_off:?}"
    );
    assert!(off.3.is_subset(&on.3));
    // The ServiceMonitor went with the metrics settings (listed by label, then deleted).
    wait_for_foreign(
        &client,
        &ns,
        SERVICE_MONITOR,
        "opt's ServiceMonitor deleted",
        |names| names.is_empty(),
    )
    .await
    .unwrap();

    let outcome = cert_manager_leaves_and_comes_back(&testbed, &ns).await;
    if let Err(error) = &outcome {
        // Later tests need cert-manager: put it back before failing.
        let _ = cert_manager::install(&client, testbed.kubeconfig()).await;
        panic!("{error:#}");
    }

    // TLS off: the Certificate goes (the operator's delete; its owner still exists).
    let tls_off = "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: tls}\n\
         spec: {replicas: 1, image: valkey/valkey:8.0}\n";
    apply_yaml(&client, &ns, tls_off).await.unwrap();
    wait_for_foreign(
        &client,
        &ns,
        CERTIFICATE,
        "tls's Certificate deleted",
        |names| names.is_empty(),
    )
    .await
    .unwrap();

    namespace.cleanup().await.unwrap();
    // Leave no Prometheus-Operator CRD for later tests (cert-manager's own stays installed).
    prometheus::uninstall_crds(&client).await.unwrap();
}
