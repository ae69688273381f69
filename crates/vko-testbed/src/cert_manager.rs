//! cert-manager on the testbed, installed the way users install it: its own Helm chart (assembled
//! from its Go module by `cargo xtask cert-manager build`) with `installCRDs=true`, so the
//! controller, webhook and cainjector run as pods of the chart's Deployments (the kubelet maps
//! their `quay.io/jetstack/cert-manager-*` images to the built binaries), the API server calls the
//! webhook through its Service, and the cainjector fills in the webhooks' CA. Then a CA
//! ClusterIssuer for tests: a self-signed issuer signs a CA Certificate, whose Secret backs
//! [`CA_ISSUER`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};

use crate::error::{Error, Result};
use crate::harness::{apply_yaml, helm_binary, wait_until};
use crate::kubelet::images::cert_manager_dir;

/// The release and namespace (the chart's documented defaults).
pub const RELEASE: &str = "cert-manager";
pub const NAMESPACE: &str = "cert-manager";
/// The ClusterIssuer tests name in `spec.tls.certManager.issuer`: a CA issuer.
pub const CA_ISSUER: &str = "vko-testbed-ca";
/// Where the chart's components hold their leader-election Leases, and their names.
const LEADER_ELECTION_NAMESPACE: &str = "kube-system";
const LEADER_ELECTION_LEASES: [&str; 2] = [
    "cert-manager-controller",
    "cert-manager-cainjector-leader-election",
];
/// The self-signed ClusterIssuer that signs [`CA_ISSUER`]'s CA.
const SELF_SIGNED_ISSUER: &str = "vko-testbed-selfsigned";
/// How long `helm install --wait` may take (three Deployments on a 2-core machine).
const HELM_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the CA issuer may take to be Ready once the chart is up.
const ISSUER_TIMEOUT: Duration = Duration::from_secs(90);

/// The chart in the cache (`cargo xtask cert-manager build`).
pub fn chart_dir() -> PathBuf {
    cert_manager_dir().join("chart")
}

/// The issuers: self-signed → CA Certificate (its Secret in [`NAMESPACE`], where a ClusterIssuer
/// reads it) → the CA ClusterIssuer.
fn issuers_yaml() -> String {
    format!(
        "apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: {SELF_SIGNED_ISSUER}
spec:
  selfSigned: {{}}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {CA_ISSUER}
  namespace: {NAMESPACE}
spec:
  isCA: true
  commonName: vko testbed CA
  secretName: {CA_ISSUER}
  duration: 8760h
  privateKey:
    algorithm: ECDSA
    size: 256
  issuerRef:
    group: cert-manager.io
    kind: ClusterIssuer
    name: {SELF_SIGNED_ISSUER}
---
apiVersion: cert-manager.io/v1
kind: ClusterIssuer
metadata:
  name: {CA_ISSUER}
spec:
  ca:
    secretName: {CA_ISSUER}
"
    )
}

/// `helm upgrade --install` of the chart (waiting for its Deployments), then the issuers, waiting
/// until [`CA_ISSUER`] is Ready. Returns how long it took.
pub async fn install(client: &kube::Client, kubeconfig: &Path) -> Result<Duration> {
    let started = Instant::now();
    let chart = chart_dir();
    if !chart.join("Chart.yaml").is_file() {
        return Err(Error::Other(format!(
            "cert-manager's chart is not in {}: run `cargo xtask cert-manager build`",
            chart.display()
        )));
    }
    let timeout = format!("{}s", HELM_TIMEOUT.as_secs());
    let chart_arg = chart.display().to_string();
    let kubeconfig_arg = kubeconfig.display().to_string();
    helm(
        &[
            "upgrade",
            "--install",
            RELEASE,
            &chart_arg,
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "--set",
            "installCRDs=true",
            // Its post-install check runs `cmctl` (another image); the issuer below checks more.
            "--set",
            "startupapicheck.enabled=false",
            "--wait",
            "--timeout",
            &timeout,
            "--kubeconfig",
            &kubeconfig_arg,
        ],
        HELM_TIMEOUT + Duration::from_secs(30),
    )
    .await?;
    // The webhook admits Certificates once the cainjector has given the API server its CA; until
    // then applying fails, so the apply is retried.
    let yaml = issuers_yaml();
    wait_until(
        "cert-manager's webhook to admit the issuers",
        ISSUER_TIMEOUT,
        || async { apply_yaml(client, NAMESPACE, &yaml).await.map(Some) },
    )
    .await?;
    let issuers = cluster_issuers(client);
    wait_until(
        &format!("ClusterIssuer {CA_ISSUER} to be Ready"),
        ISSUER_TIMEOUT,
        || async { Ok(is_ready(&issuers.get(CA_ISSUER).await?).then_some(())) },
    )
    .await?;
    Ok(started.elapsed())
}

/// `helm uninstall` (the CRDs are part of the release with `installCRDs=true`, so every
/// Certificate and issuer goes with them), waiting until the `cert-manager.io` group is no longer
/// served.
pub async fn uninstall(client: &kube::Client, kubeconfig: &Path) -> Result<()> {
    let kubeconfig_arg = kubeconfig.display().to_string();
    helm(
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "120s",
            "--kubeconfig",
            &kubeconfig_arg,
        ],
        Duration::from_secs(150),
    )
    .await?;
    // The controller's and cainjector's leader-election Leases outlive the release; a reinstall
    // would wait for the dead holders' leases to expire (measured: 70 s without a CA injected
    // into the webhook configurations, so every cert-manager object refused meanwhile).
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEADER_ELECTION_NAMESPACE);
    for lease in LEADER_ELECTION_LEASES {
        match leases.delete(lease, &Default::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    wait_until(
        "the cert-manager.io API group to be gone",
        Duration::from_secs(60),
        || async {
            Ok(kube::discovery::group(client, "cert-manager.io")
                .await
                .is_err()
                .then_some(()))
        },
    )
    .await
}

fn cluster_issuers(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cert-manager.io", "v1", "ClusterIssuer"),
        "clusterissuers",
    );
    Api::all_with(client.clone(), &resource)
}

/// A cert-manager object's `Ready` condition is `True`.
pub fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition["type"] == "Ready" && condition["status"] == "True")
        })
}

async fn helm(args: &[&str], timeout: Duration) -> Result<()> {
    let description = format!("helm {}", args.join(" "));
    let mut command = tokio::process::Command::new(helm_binary());
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(timeout, command.output())
        .await
        .map_err(|_| Error::Timeout {
            what: description.clone(),
            seconds: timeout.as_secs(),
        })?
        .map_err(Error::io(format!("running {description}")))?;
    Error::unless_success(&output, &description)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issuers_chain_a_self_signed_ca_into_the_tests_cluster_issuer() {
        let documents = crate::harness::yaml_documents(&issuers_yaml()).unwrap();
        let kinds: Vec<_> = documents
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("ClusterIssuer", SELF_SIGNED_ISSUER),
                ("Certificate", CA_ISSUER),
                ("ClusterIssuer", CA_ISSUER)
            ]
        );
        assert_eq!(documents[1]["spec"]["isCA"], true);
        assert_eq!(documents[1]["metadata"]["namespace"], NAMESPACE);
        assert_eq!(documents[2]["spec"]["ca"]["secretName"], CA_ISSUER);
    }

    #[test]
    fn ready_means_a_true_ready_condition() {
        let object = |status: serde_json::Value| -> DynamicObject {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
                "metadata": {"name": "x"}, "status": status
            }))
            .unwrap()
        };
        assert!(is_ready(&object(serde_json::json!({"conditions": [
            {"type": "Ready", "status": "True"}]}))));
        assert!(!is_ready(&object(serde_json::json!({"conditions": [
            {"type": "Ready", "status": "False"}]}))));
        assert!(!is_ready(&object(serde_json::json!({}))));
    }
}
