//! The Helm chart, rendered by real helm (no cluster needed): `helm lint --strict` is clean, the
//! rendered objects are snapshot-tested for the default values and with every optional block on,
//! and the properties that matter are asserted directly (the CRD is exactly vko-api's, the sidecar
//! image is the chart's image, the pods are hardened, the ClusterRole has no wildcard or `update`).
//!
//! Needs helm: `cargo xtask helm build` puts it in ~/.cache/vko/helm-<version>/helm (or set
//! VKO_HELM_BIN). A missing helm fails these tests; it does not skip them.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;
use vko_testbed::harness::{HELM_BIN_ENV, helm_binary, yaml_documents};

const RELEASE: &str = "vko";
const NAMESPACE: &str = "vko-system";
/// Every optional block of values.yaml turned on (and every label map filled in).
const ALL_ON: &[&str] = &[
    "metrics.service.enabled=true",
    "metrics.service.labels.team=storage",
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.scrapeTimeout=10s",
    "metrics.serviceMonitor.labels.release=prometheus",
    "metrics.prometheusRule.enabled=true",
    "metrics.prometheusRule.labels.release=prometheus",
    "replicaCount=2",
    "leaderElection.namespace=vko-leases",
    "image.tag=1.2.3",
    "imagePullSecrets[0].name=registry",
    "serviceAccount.annotations.example\\.com/role=operator",
    "podAnnotations.example\\.com/scrape=false",
    "podLabels.tier=control",
    "preUpgradeHook.podLabels.tier=control",
    "nodeSelector.kubernetes\\.io/os=linux",
    "tolerations[0].key=dedicated",
    "tolerations[0].operator=Exists",
    "priorityClassName=system-cluster-critical",
];

fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/valkey-operator")
}

/// Runs helm; fails with its output when it fails, and with how to get it when it is missing.
fn helm(args: &[&str]) -> anyhow::Result<String> {
    let binary = helm_binary();
    if !binary.is_file() {
        bail!(
            "helm is missing at {}: run `cargo xtask helm build` (or set {HELM_BIN_ENV})",
            binary.display()
        );
    }
    let output = Command::new(&binary).args(args).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!(
            "helm {} failed:\n{stdout}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(stdout)
}

fn template(set: &[&str]) -> anyhow::Result<String> {
    let chart = chart();
    let mut args = vec!["template", RELEASE];
    args.push(chart.to_str().context("chart path is not UTF-8")?);
    args.extend(["--namespace", NAMESPACE]);
    for value in set {
        args.extend(["--set", value]);
    }
    helm(&args)
}

/// The rendered output without the generated CRD (vko-api snapshots that; here it is compared as a
/// whole against `vko_api::crd()` instead), one `# Source:` section per object.
fn without_crd(rendered: &str) -> String {
    rendered
        .split("---\n")
        .filter(|section| !section.trim().is_empty())
        .filter(|section| !section.contains("# Source: valkey-operator/templates/crd.yaml"))
        .map(|section| format!("---\n{section}"))
        .collect()
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> anyhow::Result<&'a Value> {
    objects
        .iter()
        .find(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} rendered"))
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|object| {
            format!(
                "{}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

#[test]
fn helm_lint_is_clean_for_defaults_and_every_option() {
    let chart = chart();
    let chart = chart.to_str().unwrap();
    for set in [&[][..], ALL_ON] {
        let mut args = vec!["lint", chart, "--strict"];
        for value in set {
            args.extend(["--set", value]);
        }
        let report = helm(&args).unwrap();
        assert!(
            report.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{report}"
        );
        assert!(
            !report.contains("[WARNING]") && !report.contains("[ERROR]"),
            "{report}"
        );
    }
}

#[test]
fn default_values_render_the_snapshot() {
    let rendered = template(&[]).unwrap();
    insta::assert_snapshot!("default_values", without_crd(&rendered));
}

#[test]
fn every_optional_block_on_renders_the_snapshot() {
    let rendered = template(ALL_ON).unwrap();
    insta::assert_snapshot!("all_optional_blocks_on", without_crd(&rendered));
}

#[test]
fn the_rendered_crd_is_exactly_vko_apis_and_crds_install_false_drops_it() {
    let objects = yaml_documents(&template(&[]).unwrap()).unwrap();
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "valkeys.vko.gtrfc.com",
    )
    .unwrap();
    assert_eq!(crd, &serde_json::to_value(vko_api::crd()).unwrap());

    let objects = yaml_documents(&template(&["crds.install=false"]).unwrap()).unwrap();
    assert!(
        !objects
            .iter()
            .any(|object| object["kind"] == "CustomResourceDefinition"),
        "{:?}",
        kinds(&objects)
    );
}

#[test]
fn the_operator_hands_its_own_image_to_the_pods_it_renders() {
    for (set, image) in [
        (&[][..], "vko.local/vko:0.1.0"),
        (
            &["image.repository=registry.example/vko", "image.tag=2.0.0"][..],
            "registry.example/vko:2.0.0",
        ),
    ] {
        let objects = yaml_documents(&template(set).unwrap()).unwrap();
        let deployment = find(&objects, "Deployment", "vko-valkey-operator").unwrap();
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], image);
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| arg.as_str().unwrap())
            .collect();
        assert!(
            args.contains(&format!("--operator-image={image}").as_str()),
            "{args:?}"
        );
        let job = find(&objects, "Job", "vko-valkey-operator-migrate").unwrap();
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"][0]["image"],
            image
        );
    }
}

#[test]
fn leader_election_uses_the_configured_lease_namespace_or_none() {
    let objects =
        yaml_documents(&template(&["leaderElection.namespace=default"]).unwrap()).unwrap();
    let deployment = find(&objects, "Deployment", "vko-valkey-operator").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .contains(&Value::from("--leader-elect"))
    );
    assert!(
        args.as_array()
            .unwrap()
            .contains(&Value::from("--leader-election-namespace=default"))
    );
    let role = find(&objects, "Role", "vko-valkey-operator-leader-election").unwrap();
    assert_eq!(role["metadata"]["namespace"], "default");

    for flag in [
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
    ] {
        assert!(
            args.as_array().unwrap().contains(&Value::from(flag)),
            "{flag}"
        );
    }

    let objects = yaml_documents(&template(&["leaderElection.enabled=false"]).unwrap()).unwrap();
    let deployment = find(&objects, "Deployment", "vko-valkey-operator").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains("--leader-elect"), "{args}");
    assert!(!objects.iter().any(|object| object["kind"] == "Role"));
}

/// Timings under which a leader could still act while another takes over are refused at render
/// time, naming the values.
#[test]
fn leader_election_timings_that_would_overlap_are_refused() {
    let refused = [
        (
            [
                "leaderElection.leaseDurationSeconds=10",
                "leaderElection.renewDeadlineSeconds=10",
            ],
            "renewDeadlineSeconds must be less than leaderElection.leaseDurationSeconds",
        ),
        (
            [
                "leaderElection.renewDeadlineSeconds=10",
                "leaderElection.retryPeriodSeconds=10",
            ],
            "retryPeriodSeconds must be at least 1 and less than",
        ),
    ];
    for (values, message) in refused {
        let error = template(&values).unwrap_err().to_string();
        assert!(error.contains(message), "{values:?}: {error}");
    }
    let objects = yaml_documents(
        &template(&[
            "leaderElection.leaseDurationSeconds=60",
            "leaderElection.renewDeadlineSeconds=40",
            "leaderElection.retryPeriodSeconds=5",
        ])
        .unwrap(),
    )
    .unwrap();
    let deployment = find(&objects, "Deployment", "vko-valkey-operator").unwrap();
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--leader-elect-renew-deadline=40s"), "{args}");
}

#[test]
fn operator_and_hook_pods_are_hardened() {
    let objects = yaml_documents(&template(&[]).unwrap()).unwrap();
    for (kind, name) in [
        ("Deployment", "vko-valkey-operator"),
        ("Job", "vko-valkey-operator-migrate"),
    ] {
        let pod = &find(&objects, kind, name).unwrap()["spec"]["template"]["spec"];
        let pod_sc = &pod["securityContext"];
        assert_eq!(pod_sc["runAsNonRoot"], true, "{kind}");
        assert!(pod_sc["runAsUser"].as_i64().unwrap() > 0, "{kind}");
        assert_eq!(pod_sc["seccompProfile"]["type"], "RuntimeDefault", "{kind}");
        for container in pod["containers"].as_array().unwrap() {
            let sc = &container["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{kind}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{kind}");
            assert_eq!(sc["runAsNonRoot"], true, "{kind}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{kind}"
            );
            assert!(
                container["resources"]["limits"]["memory"].is_string(),
                "{kind}"
            );
        }
    }
    let deployment = find(&objects, "Deployment", "vko-valkey-operator").unwrap();
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
}

#[test]
fn the_cluster_roles_grant_no_wildcard_no_update_and_the_hook_only_valkeys() {
    let objects = yaml_documents(&template(&[]).unwrap()).unwrap();
    let operator = find(&objects, "ClusterRole", "vko-valkey-operator").unwrap();
    for rule in operator["rules"].as_array().unwrap() {
        let text = rule.to_string();
        assert!(!text.contains('*'), "wildcard in {text}");
        // The one update: the master Leases' resourceVersion-guarded PUT (ADR 0022).
        let leases = rule["resources"] == serde_json::json!(["leases"])
            && rule["apiGroups"] == serde_json::json!(["coordination.k8s.io"]);
        assert!(
            leases || !text.contains("\"update\""),
            "update in {text} (every write is an apply)"
        );
        assert!(!text.contains("persistentvolumeclaims"), "{text}");
    }
    let hook = find(&objects, "ClusterRole", "vko-valkey-operator-migrate").unwrap();
    assert_eq!(
        hook["rules"],
        serde_json::json!([{"apiGroups": ["vko.gtrfc.com"], "resources": ["valkeys"], "verbs": ["list", "patch"]}])
    );
    // The hook's RBAC exists before its Job runs, and all of it goes away once it succeeded.
    let weight = |kind: &str| -> i64 {
        find(&objects, kind, "vko-valkey-operator-migrate").unwrap()["metadata"]["annotations"]["helm.sh/hook-weight"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    for kind in ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"] {
        assert!(
            weight(kind) < weight("Job"),
            "{kind} must come before the Job"
        );
        let annotations = &find(&objects, kind, "vko-valkey-operator-migrate").unwrap()["metadata"]
            ["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "pre-upgrade");
        assert!(
            annotations["helm.sh/hook-delete-policy"]
                .as_str()
                .unwrap()
                .contains("hook-succeeded")
        );
    }
    let objects = yaml_documents(&template(&["preUpgradeHook.enabled=false"]).unwrap()).unwrap();
    assert!(!objects.iter().any(|object| object["kind"] == "Job"));
}

#[test]
fn the_prometheus_rule_ships_the_nine_alerts_each_guarded_on_the_collector() {
    let objects =
        yaml_documents(&template(&["metrics.prometheusRule.enabled=true"]).unwrap()).unwrap();
    let rule = find(&objects, "PrometheusRule", "vko-valkey-operator").unwrap();
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ValkeySpecNotObserved",
            "ValkeyReconcileBlocked",
            "ValkeySecretMissing",
            "ValkeyPhaseNotOK",
            "ValkeyReplicasMissing",
            "ValkeyOperatorVersionStale",
            "ValkeyTLSMaterialStale",
            "ValkeyMetricsCollectorFailing",
            "ValkeyMetricsAbsent",
        ]
    );
    for rule in rules {
        let expr = rule["expr"].as_str().unwrap();
        assert!(expr.contains("vko_valkey_collector_success"), "{expr}");
    }
    let tls = rules
        .iter()
        .find(|r| r["alert"] == "ValkeyTLSMaterialStale")
        .unwrap();
    assert_eq!(tls["for"], "72h");
    // Off by default, and a ServiceMonitor alone still renders the Service it selects.
    let objects = yaml_documents(&template(&[]).unwrap()).unwrap();
    assert!(!objects.iter().any(|o| o["kind"] == "PrometheusRule"
        || o["kind"] == "ServiceMonitor"
        || o["kind"] == "Service"));
    let objects =
        yaml_documents(&template(&["metrics.serviceMonitor.enabled=true"]).unwrap()).unwrap();
    find(&objects, "Service", "vko-valkey-operator-metrics").unwrap();
}
