//! Everything vko-render produces is accepted by a real kube-apiserver: every reference example
//! (and a few shapes the examples do not cover) is created as a `Valkey`, read back with the
//! server's defaults, rendered with its real uid as owner, and every rendered object is
//! server-side applied with `dryRun=All` (cert-manager's Certificate too: the testbed installs
//! cert-manager, whose webhook then sees it). Kinds whose CRDs are not installed (the
//! Prometheus-Operator's ServiceMonitor) are skipped, and the test says so.
//!
//! Needs `KUBECONFIG` (admin); only the API server is used, plus the controller-manager that sets
//! up the test's namespace (`cargo xtask test` provides a full testbed).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::discovery::Scope;
use kube::{Client, Discovery};
use serde_json::{Value, json};
use vko_api::Valkey;
use vko_render::{OperatorPeer, RenderInputs, render};
use vko_testbed::harness::{TestNamespace, install_crd};

const FIELD_MANAGER: &str = "vko-e2e-render-dry-run";
const TIMEOUT: Duration = Duration::from_secs(60);

/// Shapes the reference examples do not cover: network policies with every peer, a unified
/// certificate with observer mTLS on a 9.0 tag, hard anti-affinity across zones, a user TLS
/// Secret with Sentinel and dual ports everywhere, and a persistent aof cluster without
/// Sentinel.
fn extra_cases() -> Vec<(&'static str, Value)> {
    vec![
        (
            "fenced",
            json!({"replicas": 3, "image": "valkey/valkey:8.0",
                   "sentinel": {"enabled": true},
                   "auth": {"secretName": "valkey-auth"},
                   "metrics": {"enabled": true, "extraArgs": ["--check-keys=*"],
                               "serviceMonitor": {"enabled": true, "labels": {"release": "prometheus"}}},
                   "observer": {"enabled": true},
                   "podDisruptionBudget": {"enabled": true},
                   "networkPolicy": {"enabled": true, "namePrefix": "np"}}),
        ),
        (
            "oauth2-valkey",
            json!({"replicas": 3, "image": "valkey/valkey:9.0.0",
                   "sentinel": {"enabled": true, "replicas": 3},
                   "tls": {"enabled": true, "unifiedCertificate": true,
                           "certManager": {"issuer": {"kind": "ClusterIssuer", "name": "cluster-ca"},
                                           "extraDnsNames": ["valkey.example.com"]}},
                   "observer": {"enabled": true, "mtls": {"valkey": true, "sentinel": true}}}),
        ),
        (
            "zoned",
            json!({"replicas": 3, "image": "valkey/valkey:8.0",
                   "sentinel": {"enabled": true, "replicas": 3},
                   "antiAffinity": {"mode": "hard", "topologyKey": "topology.kubernetes.io/zone"}}),
        ),
        (
            "dual",
            json!({"replicas": 2, "image": "valkey/valkey:8.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                   "sentinel": {"enabled": true, "allowUnencrypted": true},
                   "tls": {"enabled": true, "allowUnencrypted": true, "secretName": "dual-tls"},
                   "metrics": {"enabled": true},
                   "observer": {"enabled": true, "mtls": {"sentinel": true}}}),
        ),
        (
            "aof",
            json!({"replicas": 2, "image": "valkey/valkey:8.0",
                   "persistence": {"enabled": true, "mode": "aof", "size": "2Gi"}}),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_is_accepted_by_the_api_server() -> anyhow::Result<()> {
    std::env::var_os("KUBECONFIG")
        .filter(|value| !value.is_empty())
        .context(
            "KUBECONFIG is not set: run this test with `cargo xtask test`, or point KUBECONFIG at \
             a running kube-apiserver (e.g. the one `cargo xtask testbed up` prints)",
        )?;
    let client = Client::try_default()
        .await
        .context("connecting with KUBECONFIG")?;
    install_crd(&client, &vko_api::crd()).await?;
    let namespace = TestNamespace::create(&client, "render-dry-run").await?;
    let result = run(&client, namespace.name()).await;
    let cleanup = namespace.cleanup().await.map_err(anyhow::Error::from);
    result?;
    cleanup
}

async fn run(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), namespace);
    poll("valkeys to be servable", || async {
        Ok(valkeys.list(&Default::default()).await.is_ok())
    })
    .await?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("API discovery")?;

    let mut cases: Vec<(String, Value)> = Vec::new();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&examples)
        .with_context(|| format!("reading {}", examples.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    for path in paths {
        let text = std::fs::read_to_string(&path)?;
        let value: Value =
            serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        cases.push((path.display().to_string(), value));
    }
    for (name, spec) in extra_cases() {
        cases.push((
            format!("extra case {name}"),
            json!({"apiVersion": vko_api::API_VERSION, "kind": vko_api::KIND,
                   "metadata": {"name": name}, "spec": spec}),
        ));
    }
    ensure!(
        cases.len() >= 13,
        "expected the reference examples, found {}",
        cases.len()
    );

    let mut failures = Vec::new();
    let mut applied = 0usize;
    let mut skipped_kinds = std::collections::BTreeSet::new();
    let mut used_names = std::collections::BTreeSet::new();
    for (label, mut value) in cases {
        value["metadata"]["namespace"] = json!(namespace);
        // Two reference examples share the name ha-valkey; each gets its own object here.
        let base = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let mut name = base.clone();
        for suffix in 2.. {
            if used_names.insert(name.clone()) {
                break;
            }
            name = format!("{base}-{suffix}");
        }
        value["metadata"]["name"] = json!(name);
        let valkey: Valkey =
            serde_json::from_value(value).with_context(|| format!("{label}: not a Valkey"))?;
        // Created for real, so the render sees the server's defaults and a real owner uid.
        let created = valkeys
            .create(&PostParams::default(), &valkey)
            .await
            .with_context(|| format!("{label}: creating the Valkey"))?;
        let mut inputs = RenderInputs::new(namespace, "ghcr.io/example/vko:0.1.0", "0.1.0");
        inputs.owner = Some(OwnerReference {
            api_version: vko_api::API_VERSION.into(),
            kind: vko_api::KIND.into(),
            name: created.metadata.name.clone().unwrap_or_default(),
            uid: created.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        });
        inputs.tls_material_hash = Some("0".repeat(64));
        inputs.sentinel_tls_material_hash = Some("1".repeat(64));
        inputs.cert_manager_present = true;
        inputs.prometheus_operator_present = true;
        inputs.operator_peer = Some(OperatorPeer {
            namespace: "vko-system".into(),
            pod_labels: [(
                "app.kubernetes.io/component".to_owned(),
                "operator".to_owned(),
            )]
            .into(),
        });
        let rendered = render(&created, &inputs).with_context(|| format!("{label}: render"))?;
        ensure!(
            rendered.skipped.is_empty(),
            "{label}: skipped {:?}",
            rendered.skipped
        );
        for object in rendered.objects()? {
            let kind = object["kind"].as_str().unwrap_or_default().to_owned();
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let (group, version) = match object["apiVersion"]
                .as_str()
                .unwrap_or_default()
                .split_once('/')
            {
                Some((group, version)) => (group.to_owned(), version.to_owned()),
                None => (
                    String::new(),
                    object["apiVersion"].as_str().unwrap_or_default().to_owned(),
                ),
            };
            let gvk = GroupVersionKind::gvk(&group, &version, &kind);
            let Some((resource, capabilities)) = discovery.resolve_gvk(&gvk) else {
                skipped_kinds.insert(format!("{group}/{version} {kind}"));
                continue;
            };
            let api: Api<DynamicObject> = match capabilities.scope {
                Scope::Namespaced => Api::namespaced_with(client.clone(), namespace, &resource),
                Scope::Cluster => Api::all_with(client.clone(), &resource),
            };
            let dynamic: DynamicObject = serde_json::from_value(object.clone())?;
            let params = PatchParams::apply(FIELD_MANAGER).force().dry_run();
            match api.patch(&name, &params, &Patch::Apply(&dynamic)).await {
                Ok(_) => applied += 1,
                Err(error) => failures.push(format!("{label}: {kind} {name}: {error}")),
            }
        }
    }
    for kind in &skipped_kinds {
        eprintln!("SKIPPED (CRD not installed on this API server): {kind}");
    }
    eprintln!("accepted with dryRun=All: {applied} objects");
    if !failures.is_empty() {
        bail!(
            "the API server refused {} object(s):\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    ensure!(applied > 100, "suspiciously few objects applied: {applied}");
    Ok(())
}

async fn poll<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + TIMEOUT;
    let mut last_error = None;
    while Instant::now() < deadline {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(error) => last_error = Some(error),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("timed out waiting for {what} (last error: {last_error:?})")
}
