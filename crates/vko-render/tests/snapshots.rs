//! insta snapshots of the full rendered set of every reference example, of a few extra shapes
//! the examples do not cover, and of the port matrix. Reviewed by hand; see the test names.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::fmt::Write as _;

use common::{examples, inputs_for, valkey_from_yaml};
use serde_json::Value;
use vko_api::Valkey;
use vko_render::{OperatorPeer, Rendered, render};

/// The config files of a render, as text, plus what was skipped.
fn configs_text(rendered: &Rendered) -> String {
    let mut out = String::new();
    for config_map in &rendered.config_maps {
        let name = config_map.metadata.name.clone().unwrap_or_default();
        for (key, text) in config_map.data.iter().flatten() {
            let _ = writeln!(out, "===== ConfigMap {name} / {key} =====");
            out.push_str(text);
        }
    }
    let _ = writeln!(out, "===== skipped =====");
    for skipped in &rendered.skipped {
        let _ = writeln!(
            out,
            "{} {}: {}",
            skipped.kind,
            skipped.name,
            skipped.reason.reason()
        );
    }
    out
}

fn snapshot_full(label: &str, valkey: &Valkey, inputs: &vko_render::RenderInputs) {
    let rendered = render(valkey, inputs).expect("renders");
    let objects = rendered.objects().expect("serializes");
    insta::assert_yaml_snapshot!(format!("{label}-objects"), objects);
    insta::assert_snapshot!(format!("{label}-configs"), configs_text(&rendered));
}

#[test]
fn reference_examples() {
    let all = examples();
    assert!(
        all.len() >= 13,
        "expected the reference README's examples, found {}",
        all.len()
    );
    for (stem, valkey) in all {
        snapshot_full(&format!("example-{stem}"), &valkey, &inputs_for(&valkey));
    }
}

#[test]
fn anti_affinity_hard_across_zones() {
    let valkey = valkey_from_yaml(
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: { name: zoned }
spec:
  replicas: 3
  image: valkey/valkey:8.0
  sentinel: { enabled: true, replicas: 3 }
  antiAffinity: { mode: hard, topologyKey: topology.kubernetes.io/zone }
"#,
    );
    let rendered = render(&valkey, &inputs_for(&valkey)).expect("renders");
    let affinities: Vec<Value> = rendered
        .statefulsets
        .iter()
        .map(|sts| {
            serde_json::to_value(
                &sts.spec
                    .as_ref()
                    .expect("spec")
                    .template
                    .spec
                    .as_ref()
                    .expect("pod")
                    .affinity,
            )
            .expect("json")
        })
        .collect();
    insta::assert_yaml_snapshot!(affinities);
}

#[test]
fn network_policies_with_prefix_metrics_observer_and_operator_peer() {
    let valkey = valkey_from_yaml(
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: { name: fenced }
spec:
  replicas: 3
  image: valkey/valkey:8.0
  sentinel: { enabled: true }
  tls:
    enabled: true
    allowUnencrypted: true
    secretName: fenced-tls
  metrics: { enabled: true }
  observer: { enabled: true }
  networkPolicy: { enabled: true, namePrefix: np }
"#,
    );
    let mut inputs = inputs_for(&valkey);
    inputs.operator_peer = Some(OperatorPeer {
        namespace: "vko-system".into(),
        pod_labels: [(
            "app.kubernetes.io/component".to_owned(),
            "operator".to_owned(),
        )]
        .into(),
    });
    let rendered = render(&valkey, &inputs).expect("renders");
    insta::assert_yaml_snapshot!(rendered.network_policies);
}

#[test]
fn the_exporter_port_admits_only_the_metrics_from_peers() {
    let valkey = valkey_from_yaml(
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: { name: scraped }
spec:
  replicas: 1
  image: valkey/valkey:8.0
  metrics: { enabled: true, port: 9200 }
  networkPolicy:
    enabled: true
    metricsFrom:
      - namespaceSelector: { matchLabels: { kubernetes.io/metadata.name: monitoring } }
        podSelector: { matchLabels: { app.kubernetes.io/name: prometheus } }
"#,
    );
    let rendered = render(&valkey, &inputs_for(&valkey)).expect("renders");
    insta::assert_yaml_snapshot!(rendered.network_policies);
}

#[test]
fn unified_certificate_and_observer_mtls() {
    let valkey = valkey_from_yaml(
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: { name: oauth2-valkey }
spec:
  replicas: 3
  image: valkey/valkey:9.0.0
  sentinel: { enabled: true, replicas: 3 }
  auth: { secretName: valkey-auth }
  tls:
    enabled: true
    unifiedCertificate: true
    certManager:
      issuer: { kind: ClusterIssuer, name: cluster-ca }
  observer:
    enabled: true
    mtls: { valkey: true, sentinel: true }
    unreadyWhen: { replicaSyncFailure: false }
"#,
    );
    snapshot_full("unified-certificate", &valkey, &inputs_for(&valkey));
}

/// With auth and metrics the exporter gets no `REDIS_PASSWORD`, only `REDIS_PASSWORD_FILE`: a
/// password map the init writes (from `VALKEY_PASSWORD`) into an in-memory emptyDir under the
/// exporter's exact `REDIS_ADDR`; without TLS that is `redis://127.0.0.1:<port>`, with TLS the
/// pod's DNS name. The init, the exporter and the volumes of the data pod, plain and TLS.
#[test]
fn exporter_password_map_with_auth() {
    let mut out = Vec::new();
    for (label, tls) in [
        ("plain", ""),
        ("tls", "  tls: { enabled: true, secretName: mx-tls }\n"),
    ] {
        let valkey = valkey_from_yaml(&format!(
            r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {{ name: mx }}
spec:
  replicas: 2
  image: valkey/valkey:8.0
  auth: {{ secretName: pw }}
  metrics: {{ enabled: true }}
{tls}"#
        ));
        let rendered = render(&valkey, &inputs_for(&valkey)).expect("renders");
        let pod = rendered.statefulsets[0]
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.clone())
            .expect("pod spec");
        let exporter = pod
            .containers
            .iter()
            .find(|c| c.name == "exporter")
            .expect("exporter");
        out.push(serde_json::json!({
            "case": label,
            "init": pod.init_containers.as_ref().expect("init")[0],
            "exporter": exporter,
            "volumes": pod.volumes,
        }));
    }
    insta::assert_yaml_snapshot!(out);
}

#[test]
fn fresh_tls_cluster_waits_for_its_fingerprint_and_missing_crds_are_reported() {
    let valkey = valkey_from_yaml(
        r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: { name: fresh }
spec:
  replicas: 2
  image: valkey/valkey:8.0
  sentinel: { enabled: true }
  tls:
    enabled: true
    certManager:
      issuer: { kind: Issuer, name: ca }
  metrics: { enabled: true, serviceMonitor: { enabled: true } }
"#,
    );
    let mut inputs = inputs_for(&valkey);
    inputs.tls_material_hash = None;
    inputs.sentinel_tls_material_hash = None;
    inputs.cert_manager_present = false;
    inputs.prometheus_operator_present = false;
    let rendered = render(&valkey, &inputs).expect("renders");
    assert!(rendered.statefulsets.is_empty());
    assert!(rendered.certificates.is_empty());
    assert!(rendered.service_monitors.is_empty());
    insta::assert_snapshot!(
        configs_text(&rendered)
            .split("===== skipped =====")
            .nth(1)
            .unwrap_or_default()
    );
}

/// Ports of every container, Service and config file: the reference's Port Summary.
fn port_view(rendered: &Rendered) -> String {
    let mut out = String::new();
    for sts in &rendered.statefulsets {
        let pod = sts
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod spec");
        for container in &pod.containers {
            let ports: Vec<String> = container
                .ports
                .iter()
                .flatten()
                .map(|p| {
                    format!(
                        "{}={}",
                        p.name.clone().unwrap_or_default(),
                        p.container_port
                    )
                })
                .collect();
            let probe = container
                .readiness_probe
                .as_ref()
                .and_then(|p| p.exec.as_ref())
                .and_then(|e| e.command.as_ref())
                .map(|c| c[4..].join(" "))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "container {}/{}: ports [{}] probe [{}]",
                sts.metadata.name.clone().unwrap_or_default(),
                container.name,
                ports.join(", "),
                probe
            );
        }
    }
    for service in &rendered.services {
        let ports: Vec<String> = service
            .spec
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .map(|p| format!("{}={}", p.name.clone().unwrap_or_default(), p.port))
            .collect();
        let _ = writeln!(
            out,
            "service {}: [{}]",
            service.metadata.name.clone().unwrap_or_default(),
            ports.join(", ")
        );
    }
    for config_map in &rendered.config_maps {
        for text in config_map.data.iter().flat_map(|d| d.values()) {
            for line in text.lines().filter(|l| {
                l.starts_with("port ")
                    || l.starts_with("tls-port ")
                    || l.starts_with("sentinel monitor ")
            }) {
                let _ = writeln!(
                    out,
                    "config {}: {line}",
                    config_map.metadata.name.clone().unwrap_or_default()
                );
            }
        }
    }
    out
}

#[test]
fn port_matrix() {
    for (label, tls) in [
        ("no-tls", ""),
        ("tls", "tls: { enabled: true, secretName: pm-tls }"),
        (
            "tls-allow-unencrypted",
            "tls: { enabled: true, allowUnencrypted: true, secretName: pm-tls }",
        ),
    ] {
        let sentinel_plain = if label == "tls-allow-unencrypted" {
            ", allowUnencrypted: true"
        } else {
            ""
        };
        let valkey = valkey_from_yaml(&format!(
            r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {{ name: pm }}
spec:
  replicas: 2
  image: valkey/valkey:8.0
  sentinel: {{ enabled: true{sentinel_plain} }}
  metrics: {{ enabled: true }}
  {tls}
"#
        ));
        let rendered = render(&valkey, &inputs_for(&valkey)).expect("renders");
        insta::assert_snapshot!(format!("port-matrix-{label}"), port_view(&rendered));
    }
}

/// Valkey 9.1's Sentinels reload a new certificate in place (ADR 0053): `sentinel.conf` names the
/// in-memory copy and `tls-auto-reload-interval`, the init container fills the copy, the
/// `tls-reload` container refreshes it, the `sentinel` container reads it. On 8.1 and on a tag
/// that names no version, none of it: the Sentinel reads the Secret volume and is rolled.
#[test]
fn a_9_1_sentinel_reloads_its_certificate_from_a_checked_copy() {
    let yaml = |image: &str| {
        valkey_from_yaml(&format!(
            r#"
apiVersion: vko.gtrfc.com/v1
kind: Valkey
metadata: {{ name: rl }}
spec:
  replicas: 3
  image: {image}
  sentinel: {{ enabled: true, replicas: 3 }}
  tls: {{ enabled: true, secretName: rl-tls }}
"#
        ))
    };
    let sentinel_pod = |rendered: &Rendered| {
        rendered
            .statefulsets
            .iter()
            .find(|sts| sts.metadata.name.as_deref() == Some("rl-sentinel"))
            .and_then(|sts| sts.spec.as_ref())
            .and_then(|spec| spec.template.spec.clone())
            .expect("Sentinel pod spec")
    };
    let sentinel_conf = |rendered: &Rendered| {
        rendered
            .config_maps
            .iter()
            .find_map(|cm| cm.data.as_ref()?.get("sentinel.conf").cloned())
            .expect("sentinel.conf")
    };

    let valkey = yaml("valkey/valkey:9.1");
    let mut inputs = inputs_for(&valkey);
    inputs.tls_material_hash = Some("trust-fingerprint".into());
    inputs.sentinel_tls_material_hash = Some("trust-fingerprint".into());
    let rendered = render(&valkey, &inputs).expect("renders");
    let pod = sentinel_pod(&rendered);
    insta::assert_yaml_snapshot!(serde_json::json!({
        "sentinel.conf": sentinel_conf(&rendered),
        "init": pod.init_containers,
        "containers": pod.containers,
        "volumes": pod.volumes,
    }));

    for image in ["valkey/valkey:8.1", "valkey/valkey:latest"] {
        let valkey = yaml(image);
        let rendered = render(&valkey, &inputs_for(&valkey)).expect("renders");
        let pod = sentinel_pod(&rendered);
        let names: Vec<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["sentinel"], "{image}");
        let conf = sentinel_conf(&rendered);
        assert!(!conf.contains("tls-auto-reload-interval"), "{image}");
        assert!(conf.contains("tls-cert-file /tls/tls.crt"), "{image}");
        assert!(
            !pod.volumes.iter().flatten().any(|v| v.name == "tls-active"),
            "{image}"
        );
    }
}
