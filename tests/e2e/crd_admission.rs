//! The `Valkey` CRD against a real kube-apiserver: every bad input in the table is refused with
//! its message, every example in `examples/` is accepted and comes back with the server-filled
//! defaults, and `kubectl explain` prints our field docs.
//!
//! Needs `KUBECONFIG` (admin) and `VKO_TESTBED_BIN_DIR` (where `kubectl` is); `cargo xtask test`
//! sets both. Only the API server is used, plus the controller-manager that sets up the test's
//! namespace (the harness's `TestNamespace` waits for it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use vko_api::Valkey;
use vko_e2e::operator_support::OBSERVER_CHECKS;
use vko_testbed::harness::{TestNamespace, install_crd};

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_admission() -> anyhow::Result<()> {
    let kubeconfig = std::env::var_os("KUBECONFIG")
        .filter(|value| !value.is_empty())
        .context(
            "KUBECONFIG is not set: run this test with `cargo xtask test`, or point KUBECONFIG at \
             a running kube-apiserver (e.g. the one `cargo xtask testbed up` prints)",
        )?;
    let kubeconfig = PathBuf::from(kubeconfig);
    let client = Client::try_default()
        .await
        .context("connecting with KUBECONFIG")?;

    install_crd(&client, &vko_api::crd()).await?;
    let namespace = TestNamespace::create(&client, "crd-admission").await?;
    let result = run_all(&client, namespace.name(), &kubeconfig).await;
    let cleanup = namespace.cleanup().await.map_err(anyhow::Error::from);
    result?;
    cleanup
}

async fn run_all(client: &Client, namespace: &str, kubeconfig: &Path) -> anyhow::Result<()> {
    let valkeys: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<Valkey>(&()),
    );
    wait_until_servable(&valkeys).await?;

    let mut failures = Vec::new();
    failures.extend(refused_inputs(&valkeys).await?);
    failures.extend(accepted_edge_cases(&valkeys).await?);
    failures.extend(examples_with_defaults(&valkeys).await?);
    failures.extend(defaults_of_empty_objects(&valkeys).await?);
    if let Err(error) = explain_prints_field_docs(kubeconfig).await {
        failures.push(format!("kubectl explain: {error:#}"));
    }
    ensure!(
        failures.is_empty(),
        "{} check(s) failed:\n- {}",
        failures.len(),
        failures.join("\n- ")
    );
    Ok(())
}

/// Right after Established the resource can still be briefly unknown to the handler chain.
async fn wait_until_servable(valkeys: &Api<DynamicObject>) -> anyhow::Result<()> {
    poll("valkeys to be servable", || async {
        Ok(valkeys.list(&Default::default()).await.is_ok())
    })
    .await
}

fn object(name: &str, spec: Value) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": vko_api::API_VERSION,
        "kind": vko_api::KIND,
        "metadata": { "name": name },
        "spec": spec,
    }))?)
}

/// Each input must be refused, and the refusal must say the given text.
async fn refused_inputs(valkeys: &Api<DynamicObject>) -> anyhow::Result<Vec<String>> {
    let image = "valkey/valkey:8.0";
    let cert_manager = json!({ "issuer": { "kind": "ClusterIssuer", "name": "ca" } });
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "replicas zero",
            json!({ "image": image, "replicas": 0 }),
            "should be greater than or equal to 1",
        ),
        (
            "networkPolicy.metricsFrom empty (a rule from nobody in particular admits everyone)",
            json!({ "image": image, "networkPolicy": { "enabled": true, "metricsFrom": [] } }),
            "spec.networkPolicy.metricsFrom in body should have at least 1 items",
        ),
        (
            "networkPolicy.metricsFrom with an empty peer",
            json!({ "image": image, "networkPolicy": { "enabled": true, "metricsFrom": [{}] } }),
            "every networkPolicy.metricsFrom entry needs a podSelector, a namespaceSelector or an ipBlock",
        ),
        (
            "image missing",
            json!({ "replicas": 1 }),
            "spec.image: Required value",
        ),
        (
            "image empty",
            json!({ "image": "" }),
            "spec.image in body should be at least 1 chars long",
        ),
        (
            "sentinel replicas zero",
            json!({ "image": image, "sentinel": { "enabled": true, "replicas": 0 } }),
            "spec.sentinel.replicas in body should be greater than or equal to 1",
        ),
        (
            "tls without certManager or secretName",
            json!({ "image": image, "tls": { "enabled": true } }),
            "tls.enabled requires exactly one of tls.certManager or tls.secretName",
        ),
        (
            "tls with both certManager and secretName",
            json!({ "image": image, "tls": { "enabled": true, "secretName": "tls", "certManager": cert_manager } }),
            "tls.enabled requires exactly one of tls.certManager or tls.secretName",
        ),
        (
            "issuer kind unknown",
            json!({ "image": image, "tls": { "enabled": true, "certManager": { "issuer": { "kind": "Vault", "name": "ca" } } } }),
            "Unsupported value: \"Vault\"",
        ),
        (
            "issuer name empty",
            json!({ "image": image, "tls": { "enabled": true, "certManager": { "issuer": { "kind": "Issuer", "name": "" } } } }),
            "spec.tls.certManager.issuer.name in body should be at least 1 chars long",
        ),
        (
            "issuer name missing",
            json!({ "image": image, "tls": { "enabled": true, "certManager": { "issuer": { "kind": "Issuer" } } } }),
            "spec.tls.certManager.issuer.name: Required value",
        ),
        (
            "tls.allowUnencrypted without tls.enabled",
            json!({ "image": image, "tls": { "allowUnencrypted": true, "secretName": "tls" } }),
            "tls.allowUnencrypted requires tls.enabled: true",
        ),
        (
            "sentinel.allowUnencrypted without tls",
            json!({ "image": image, "sentinel": { "enabled": true, "allowUnencrypted": true } }),
            "sentinel.allowUnencrypted requires tls.enabled: true",
        ),
        (
            "sentinel.allowUnencrypted with tls disabled",
            json!({ "image": image, "sentinel": { "enabled": true, "allowUnencrypted": true }, "tls": { "enabled": false } }),
            "sentinel.allowUnencrypted requires tls.enabled: true",
        ),
        (
            "persistence mode unknown",
            json!({ "image": image, "persistence": { "enabled": true, "mode": "zfs" } }),
            "Unsupported value: \"zfs\"",
        ),
        (
            "persistence size zero",
            json!({ "image": image, "persistence": { "enabled": true, "size": "0" } }),
            "persistence.size must be a positive quantity",
        ),
        (
            "persistence size negative",
            json!({ "image": image, "persistence": { "enabled": true, "size": "-1Gi" } }),
            "persistence.size must be a positive quantity",
        ),
        (
            "persistence size not a quantity",
            json!({ "image": image, "persistence": { "enabled": true, "size": "lots" } }),
            "persistence.size must be a positive quantity",
        ),
        (
            "persistence size integer zero",
            json!({ "image": image, "persistence": { "enabled": true, "size": 0 } }),
            "persistence.size must be a positive quantity",
        ),
        (
            "observer db above 15",
            json!({ "image": image, "observer": { "enabled": true, "db": 16 } }),
            "spec.observer.db in body should be less than or equal to 15",
        ),
        (
            "observer db negative",
            json!({ "image": image, "observer": { "enabled": true, "db": -1 } }),
            "spec.observer.db in body should be greater than or equal to 0",
        ),
        (
            "observer log level unknown",
            json!({ "image": image, "observer": { "enabled": true, "logLevel": "trace" } }),
            "Unsupported value: \"trace\"",
        ),
        (
            "metrics port zero",
            json!({ "image": image, "metrics": { "enabled": true, "port": 0 } }),
            "spec.metrics.port in body should be greater than or equal to 1",
        ),
        (
            "metrics port above 65535",
            json!({ "image": image, "metrics": { "enabled": true, "port": 65536 } }),
            "spec.metrics.port in body should be less than or equal to 65535",
        ),
        (
            "serviceMonitor interval not a duration",
            json!({ "image": image, "metrics": { "enabled": true, "serviceMonitor": { "enabled": true, "interval": "30 seconds" } } }),
            "serviceMonitor.interval must be a Prometheus duration",
        ),
        (
            "serviceMonitor scrapeTimeout without unit",
            json!({ "image": image, "metrics": { "enabled": true, "serviceMonitor": { "enabled": true, "scrapeTimeout": "10" } } }),
            "serviceMonitor.scrapeTimeout must be a Prometheus duration",
        ),
        (
            "antiAffinity mode unknown",
            json!({ "image": image, "antiAffinity": { "mode": "always" } }),
            "Unsupported value: \"always\"",
        ),
        (
            "pdb maxUnavailable zero",
            json!({ "image": image, "podDisruptionBudget": { "enabled": true, "maxUnavailable": 0 } }),
            "spec.podDisruptionBudget.maxUnavailable in body should be greater than or equal to 1",
        ),
        (
            "syncTimeout zero",
            json!({ "image": image, "rollingUpdate": { "syncTimeout": "0s" } }),
            "rollingUpdate.syncTimeout must be a positive duration",
        ),
        (
            "syncTimeout not a duration",
            json!({ "image": image, "rollingUpdate": { "syncTimeout": "five minutes" } }),
            "rollingUpdate.syncTimeout must be a positive duration",
        ),
        (
            "syncTimeout negative",
            json!({ "image": image, "rollingUpdate": { "syncTimeout": "-5m" } }),
            "rollingUpdate.syncTimeout must be a positive duration",
        ),
        (
            "auth secretName not a Secret name",
            json!({ "image": image, "auth": { "secretName": "Valkey_Auth" } }),
            "auth.secretName must be a valid Secret name",
        ),
        (
            "tls secretName not a Secret name",
            json!({ "image": image, "tls": { "enabled": true, "secretName": "-tls" } }),
            "tls.secretName must be a valid Secret name",
        ),
        (
            "replicas above 100",
            json!({ "image": image, "replicas": 101 }),
            "spec.replicas in body should be less than or equal to 100",
        ),
        (
            "sentinel replicas above 9",
            json!({ "image": image, "sentinel": { "enabled": true, "replicas": 10 } }),
            "spec.sentinel.replicas in body should be less than or equal to 9",
        ),
        // kube-apiserver 1.34 names an int-or-string map value's type as "" in these messages
        // (an object's as "object"): the field path and the rule's message are what matters.
        (
            "memory limit not a quantity",
            json!({ "image": image, "resources": { "limits": { "memory": "1 GB" } } }),
            "spec.resources.limits[memory]: Invalid value: \"\": must be a non-negative quantity",
        ),
        (
            "sentinel cpu request negative",
            json!({ "image": image, "sentinel": { "enabled": true, "resources": { "requests": { "cpu": "-1" } } } }),
            "spec.sentinel.resources.requests[cpu]: Invalid value: \"\": must be a non-negative quantity",
        ),
        (
            "metrics integer cpu limit negative",
            json!({ "image": image, "metrics": { "enabled": true, "resources": { "limits": { "cpu": -2 } } } }),
            "spec.metrics.resources.limits[cpu]: Invalid value: \"\": must be a non-negative quantity",
        ),
        (
            "observer memory request with a unit Kubernetes does not know",
            json!({ "image": image, "observer": { "enabled": true, "resources": { "requests": { "memory": "64MB" } } } }),
            "spec.observer.resources.requests[memory]: Invalid value: \"\": must be a non-negative quantity",
        ),
        (
            "cpu request above the cpu limit",
            json!({ "image": image, "resources": { "requests": { "cpu": "2" }, "limits": { "cpu": "1500m" } } }),
            "spec.resources.requests: Invalid value: \"object\": requests must not exceed limits",
        ),
        (
            "integer memory request above the memory limit",
            json!({ "image": image, "resources": { "requests": { "memory": 2147483648_i64 }, "limits": { "memory": "1Gi" } } }),
            "spec.resources.requests: Invalid value: \"object\": requests must not exceed limits",
        ),
    ];

    // Names the generated names cannot carry (the limits of vko_render::Names::new).
    let names: Vec<(&str, String, &str)> = vec![
        (
            "name of 44 characters",
            "a".repeat(44),
            "metadata.name must be at most 43 characters",
        ),
        (
            "name starting with a digit",
            "1valkey".to_owned(),
            "metadata.name must start with a lowercase letter",
        ),
        (
            "name with a dot",
            "valkey.prod".to_owned(),
            "metadata.name must not contain a dot",
        ),
    ];
    let cases = cases
        .into_iter()
        .enumerate()
        .map(|(index, (case, spec, expected))| (case, format!("refused-{index}"), spec, expected))
        .chain(
            names
                .into_iter()
                .map(|(case, name, expected)| (case, name, json!({ "image": image }), expected)),
        );

    let mut failures = Vec::new();
    for (case, name, spec, expected) in cases {
        match valkeys
            .create(&PostParams::default(), &object(&name, spec)?)
            .await
        {
            Ok(_) => {
                failures.push(format!(
                    "{case}: accepted, expected refusal with {expected:?}"
                ));
                // Keep going: the next cases must not trip over this object.
                valkeys.delete(&name, &DeleteParams::default()).await.ok();
            }
            Err(kube::Error::Api(status)) if status.code == 422 => {
                if !status.message.contains(expected) {
                    failures.push(format!(
                        "{case}: refused, but the message lacks {expected:?}: {}",
                        status.message
                    ));
                }
            }
            Err(other) => failures.push(format!("{case}: unexpected error {other}")),
        }
    }
    Ok(failures)
}

/// Inputs that look close to a rule but are legitimate.
async fn accepted_edge_cases(valkeys: &Api<DynamicObject>) -> anyhow::Result<Vec<String>> {
    let image = "valkey/valkey:8.0";
    let cases: Vec<(&str, Value)> = vec![
        (
            "tls disabled may keep both certManager and secretName",
            json!({ "image": image, "tls": { "enabled": false, "secretName": "tls", "certManager": { "issuer": { "kind": "Issuer", "name": "ca" } } } }),
        ),
        (
            "sentinel.allowUnencrypted with tls enabled",
            json!({ "image": image, "sentinel": { "enabled": true, "allowUnencrypted": true }, "tls": { "enabled": true, "secretName": "tls" } }),
        ),
        (
            "compound durations and integer size",
            json!({ "image": image, "rollingUpdate": { "syncTimeout": "1h30m0.5s" }, "persistence": { "enabled": true, "size": 1073741824 },
                    "metrics": { "enabled": true, "serviceMonitor": { "enabled": true, "interval": "1m30s", "scrapeTimeout": "500ms" } } }),
        ),
        (
            "observer db zero and extreme ports",
            json!({ "image": image, "observer": { "enabled": true, "db": 0 }, "metrics": { "enabled": true, "port": 65535 } }),
        ),
        (
            "networkPolicy.metricsFrom naming Prometheus's namespace and pods",
            json!({ "image": image, "metrics": { "enabled": true }, "networkPolicy": { "enabled": true, "metricsFrom": [
                { "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "monitoring" } },
                  "podSelector": { "matchLabels": { "app.kubernetes.io/name": "prometheus" } } },
                { "ipBlock": { "cidr": "10.0.0.0/8" } } ] } }),
        ),
        (
            "the largest tiers",
            json!({ "image": image, "replicas": 100, "sentinel": { "enabled": true, "replicas": 9 } }),
        ),
        (
            "integer and fractional quantities, requests equal to limits",
            json!({ "image": image, "resources": { "requests": { "cpu": 2, "memory": "1.5Gi" }, "limits": { "cpu": "2000m", "memory": "1536Mi" } },
                    "sentinel": { "enabled": true, "resources": { "requests": { "cpu": "0", "memory": "1e3" } } },
                    "metrics": { "enabled": true, "resources": { "requests": { "cpu": "50m" }, "limits": { "memory": "128Mi" } } } }),
        ),
    ];
    let mut failures = Vec::new();
    let cases = cases
        .into_iter()
        .enumerate()
        .map(|(index, (case, spec))| (case, format!("edge-{index}"), spec))
        .chain(std::iter::once((
            "name of exactly 43 characters",
            format!("a{}", "-b".repeat(21)),
            json!({ "image": image, "sentinel": { "enabled": true } }),
        )));
    for (case, name, spec) in cases {
        if let Err(error) = valkeys
            .create(&PostParams::default(), &object(&name, spec)?)
            .await
        {
            failures.push(format!("{case}: refused: {error}"));
        }
    }
    Ok(failures)
}

/// Per example file: JSON pointers into the stored object and the value the server must have
/// filled in (or kept).
fn expected_defaults(file_stem: &str) -> Vec<(&'static str, Value)> {
    match file_stem {
        "standalone-minimal" => vec![("/spec/replicas", json!(1))],
        "standalone-persistence" => vec![
            ("/spec/persistence/mode", json!("rdb")),
            ("/spec/persistence/size", json!("5Gi")),
        ],
        "standalone-tls-cert-manager" | "standalone-tls-dual-port" => vec![
            (
                "/spec/tls/certManager/issuer/group",
                json!("cert-manager.io"),
            ),
            ("/spec/tls/unifiedCertificate", json!(false)),
        ],
        "standalone-tls-secret" => vec![
            ("/spec/tls/allowUnencrypted", json!(false)),
            ("/spec/tls/unifiedCertificate", json!(false)),
        ],
        "ha-sentinel" => vec![
            ("/spec/sentinel/allowUnencrypted", json!(false)),
            ("/spec/sentinel/disableAuth", json!(false)),
        ],
        "ha-full-production" => vec![
            (
                "/spec/tls/certManager/issuer/group",
                json!("cert-manager.io"),
            ),
            ("/spec/persistence/mode", json!("both")),
        ],
        "ha-observer" => vec![
            ("/spec/observer/db", json!(15)),
            ("/spec/observer/logLevel", json!("info")),
        ],
        "ha-metrics" => vec![
            ("/spec/metrics/port", json!(9121)),
            (
                "/spec/metrics/image",
                json!("oliver006/redis_exporter:v1.66.0"),
            ),
            ("/spec/metrics/serviceMonitor/interval", json!("30s")),
        ],
        "ha-auth" | "ha-auth-sentinel-unauthenticated" => {
            vec![("/spec/auth/secretPasswordKey", json!("password"))]
        }
        "ha-pod-disruption-budget" => vec![("/spec/podDisruptionBudget/maxUnavailable", json!(1))],
        "ha-anti-affinity" => vec![(
            "/spec/antiAffinity/topologyKey",
            json!("kubernetes.io/hostname"),
        )],
        _ => vec![],
    }
}

/// Every example is accepted, comes back with its defaults, and still decodes as `Valkey`.
async fn examples_with_defaults(valkeys: &Api<DynamicObject>) -> anyhow::Result<Vec<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    ensure!(
        files.len() >= 13,
        "expected the reference examples in {}",
        dir.display()
    );

    let mut failures = Vec::new();
    for path in files {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let text = std::fs::read_to_string(&path)?;
        let mut example: DynamicObject =
            serde_norway::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        // Two reference examples share a name; the file name is unique.
        example.metadata.name = Some(format!("example-{stem}"));
        let stored = match valkeys.create(&PostParams::default(), &example).await {
            Ok(stored) => serde_json::to_value(stored)?,
            Err(error) => {
                failures.push(format!("{stem}: refused: {error}"));
                continue;
            }
        };
        for (pointer, expected) in expected_defaults(&stem) {
            if stored.pointer(pointer) != Some(&expected) {
                failures.push(format!(
                    "{stem}: {pointer} is {:?}, expected {expected}",
                    stored.pointer(pointer)
                ));
            }
        }
        if let Err(error) = serde_json::from_value::<Valkey>(stored) {
            failures.push(format!(
                "{stem}: stored object does not decode as Valkey: {error}"
            ));
        }
    }
    Ok(failures)
}

/// Defaults inside objects that are present but empty (a default only applies when its parent
/// object exists).
async fn defaults_of_empty_objects(valkeys: &Api<DynamicObject>) -> anyhow::Result<Vec<String>> {
    let mut failures = Vec::new();

    let bare = object("defaults-bare", json!({ "image": "valkey/valkey:8.0" }))?;
    let stored = serde_json::to_value(valkeys.create(&PostParams::default(), &bare).await?)?;
    let bare_expectations = [
        ("/spec/replicas", Some(json!(1))),
        // Parent omitted: nothing below it is filled in.
        ("/spec/persistence", None),
        ("/spec/sentinel", None),
    ];
    for (pointer, expected) in bare_expectations {
        if stored.pointer(pointer).cloned() != expected {
            failures.push(format!(
                "bare: {pointer} is {:?}, expected {expected:?}",
                stored.pointer(pointer)
            ));
        }
    }

    let empty_objects = object(
        "defaults-empty-objects",
        json!({
            "image": "valkey/valkey:8.0",
            "sentinel": {}, "auth": {}, "tls": {}, "metrics": { "service": {}, "serviceMonitor": {} },
            "networkPolicy": {}, "persistence": { "enabled": true }, "observer": { "mtls": {}, "unreadyWhen": {} },
            "podDisruptionBudget": {}, "antiAffinity": {}, "rollingUpdate": {},
        }),
    )?;
    let stored = serde_json::to_value(
        valkeys
            .create(&PostParams::default(), &empty_objects)
            .await?,
    )?;
    let mut expectations: Vec<(String, Value)> = [
        ("/spec/sentinel/enabled", json!(false)),
        ("/spec/sentinel/replicas", json!(3)),
        ("/spec/sentinel/allowUnencrypted", json!(false)),
        ("/spec/sentinel/disableAuth", json!(false)),
        ("/spec/auth/secretPasswordKey", json!("password")),
        ("/spec/tls/enabled", json!(false)),
        ("/spec/tls/allowUnencrypted", json!(false)),
        ("/spec/tls/unifiedCertificate", json!(false)),
        ("/spec/metrics/enabled", json!(false)),
        ("/spec/metrics/port", json!(9121)),
        (
            "/spec/metrics/image",
            json!("oliver006/redis_exporter:v1.66.0"),
        ),
        ("/spec/metrics/service/enabled", json!(true)),
        ("/spec/metrics/serviceMonitor/enabled", json!(false)),
        ("/spec/metrics/serviceMonitor/interval", json!("30s")),
        ("/spec/networkPolicy/enabled", json!(false)),
        ("/spec/persistence/mode", json!("rdb")),
        ("/spec/persistence/size", json!("1Gi")),
        ("/spec/observer/enabled", json!(false)),
        ("/spec/observer/db", json!(15)),
        ("/spec/observer/logLevel", json!("info")),
        ("/spec/observer/mtls/valkey", json!(false)),
        ("/spec/observer/mtls/sentinel", json!(false)),
        ("/spec/podDisruptionBudget/enabled", json!(false)),
        ("/spec/podDisruptionBudget/maxUnavailable", json!(1)),
        ("/spec/antiAffinity/mode", json!("off")),
        (
            "/spec/antiAffinity/topologyKey",
            json!("kubernetes.io/hostname"),
        ),
        ("/spec/rollingUpdate/syncTimeout", json!("5m")),
    ]
    .into_iter()
    .map(|(pointer, value)| (pointer.to_owned(), value))
    .collect();
    for check in OBSERVER_CHECKS {
        expectations.push((format!("/spec/observer/unreadyWhen/{check}"), json!(true)));
    }
    for (pointer, expected) in expectations {
        if stored.pointer(&pointer) != Some(&expected) {
            failures.push(format!(
                "empty objects: {pointer} is {:?}, expected {expected}",
                stored.pointer(&pointer)
            ));
        }
    }
    Ok(failures)
}

/// `kubectl explain` reads the published OpenAPI, which follows the CRD after a short delay.
async fn explain_prints_field_docs(kubeconfig: &Path) -> anyhow::Result<()> {
    let bin_dir = std::env::var_os("VKO_TESTBED_BIN_DIR")
        .filter(|value| !value.is_empty())
        .context("VKO_TESTBED_BIN_DIR is not set (the directory holding the testbed's kubectl)")?;
    let kubectl = PathBuf::from(bin_dir).join("kubectl");
    let wanted = [
        "Have cert-manager issue the certificates",
        "The cert-manager Issuer or ClusterIssuer that signs the certificates",
        "Additional DNS names to put into the certificate",
    ];
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let output = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["explain", "valkey.spec.tls.certManager"])
            .output()
            .await
            .with_context(|| format!("running {}", kubectl.display()))?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|w| !text.contains(w))
            .collect();
        if output.status.success() && missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "output lacks {missing:?}\nstdout:\n{text}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn poll<F, Fut>(what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let last = check().await;
        if matches!(last, Ok(true)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}: last check {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
