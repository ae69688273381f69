//! Property tests: rendering is deterministic, the pod-spec hash changes exactly when the pod
//! template changes, and no user-supplied string can add a directive to a config file or reach
//! a shell.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::{Value, json};
use vko_api::Valkey;
use vko_render::{
    POD_SPEC_HASH_ANNOTATION, RenderInputs, Rendered, canonical_json, render, split_args,
};

/// Strings meant to break things: newlines, quotes, command substitution, backticks, NUL,
/// arbitrary Unicode, and ordinary words.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z][a-z0-9-]{0,10}",
        any::<String>(),
        Just("a\nport 1".to_owned()),
        Just("x\r\nsentinel monitor evil 1.2.3.4 6379 1".to_owned()),
        Just("$(reboot)".to_owned()),
        Just("`id`".to_owned()),
        Just("\"; rm -rf / #".to_owned()),
        Just("nul\0byte".to_owned()),
        Just("it's".to_owned()),
        Just("ünïcødé".to_owned()),
    ]
}

fn nasty_map() -> impl Strategy<Value = Value> {
    proptest::collection::btree_map(nasty(), nasty(), 0..3).prop_map(|m| json!(m))
}

/// A `Valkey` with every optional feature drawn at random and user strings from `nasty()`.
fn valkey_json(names: impl Strategy<Value = String>) -> impl Strategy<Value = Value> {
    let features = (
        1..5i32,
        prop_oneof![
            Just("valkey/valkey:8.0".to_owned()),
            Just("valkey/valkey:7.2.5".to_owned()),
            Just("valkey/valkey:9.0".to_owned()),
            Just("valkey/valkey@sha256:0123".to_owned()),
            nasty().prop_map(|s| format!("valkey/valkey:{s}")),
        ],
        proptest::option::of((any::<bool>(), 1..6i32, any::<bool>(), any::<bool>())),
        proptest::option::of(nasty()),
        proptest::option::of((any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())),
        proptest::option::of((
            any::<bool>(),
            proptest::collection::vec(nasty(), 0..3),
            any::<bool>(),
        )),
    );
    let more = (
        proptest::option::of((any::<bool>(), 0..3usize)),
        0..3usize,
        any::<bool>(),
        proptest::option::of("[a-z]{1,5}"),
        any::<bool>(),
        nasty_map(),
        nasty_map(),
        proptest::collection::vec(nasty(), 0..3),
    );
    (names, features, more).prop_map(
        |(
            name,
            (replicas, image, sentinel, auth, tls, metrics),
            (persistence, anti, pdb, prefix, observer, pod_labels, pod_annotations, extra_dns),
        )| {
            let mut spec = json!({ "replicas": replicas, "image": image });
            if let Some((enabled, replicas, allow, disable)) = sentinel {
                spec["sentinel"] = json!({"enabled": enabled, "replicas": replicas,
                    "allowUnencrypted": allow, "disableAuth": disable,
                    "podLabels": pod_labels.clone(), "podAnnotations": pod_annotations.clone()});
            }
            if let Some(secret) = auth {
                spec["auth"] = json!({"secretName": secret, "secretPasswordKey": "pw"});
            }
            if let Some((enabled, cert_manager, allow, unified)) = tls {
                spec["tls"] = if cert_manager {
                    json!({"enabled": enabled, "allowUnencrypted": allow, "unifiedCertificate": unified,
                        "certManager": {"issuer": {"kind": "ClusterIssuer", "name": "ca"},
                                        "extraDnsNames": extra_dns}})
                } else {
                    json!({"enabled": enabled, "allowUnencrypted": allow, "secretName": "user-tls"})
                };
            }
            if let Some((enabled, extra_args, monitor)) = metrics {
                spec["metrics"] = json!({"enabled": enabled, "extraArgs": extra_args,
                    "service": {"labels": pod_labels.clone()},
                    "serviceMonitor": {"enabled": monitor, "labels": pod_labels.clone()}});
            }
            if let Some((enabled, mode)) = persistence {
                spec["persistence"] = json!({"enabled": enabled,
                    "mode": (["rdb", "aof", "both"][mode]), "storageClass": "fast"});
            }
            spec["antiAffinity"] = json!({"mode": (["off", "soft", "hard"][anti])});
            spec["podDisruptionBudget"] = json!({"enabled": pdb});
            spec["networkPolicy"] = json!({"enabled": prefix.is_some(), "namePrefix": prefix});
            spec["observer"] = json!({"enabled": observer, "mtls": {"valkey": true}});
            spec["podLabels"] = pod_labels;
            spec["podAnnotations"] = pod_annotations;
            json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                   "metadata": {"name": name}, "spec": spec})
        },
    )
}

fn valkey(value: &Value) -> Valkey {
    serde_json::from_value(value.clone()).expect("generated Valkey deserializes")
}

fn inputs(valkey: &Valkey) -> RenderInputs {
    common::inputs_for(valkey)
}

fn config_texts(rendered: &Rendered) -> Vec<String> {
    rendered
        .config_maps
        .iter()
        .flat_map(|c| c.data.iter().flat_map(|d| d.values().cloned()))
        .collect()
}

/// Every directive the renderer may write. A line starting with anything else would be an
/// injected directive.
const DIRECTIVES: &[&str] = &[
    "bind",
    "protected-mode",
    "port",
    "tls-port",
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-replication",
    "tls-auth-clients",
    "tcp-backlog",
    "timeout",
    "tcp-keepalive",
    "daemonize",
    "loglevel",
    "logfile",
    "databases",
    "always-show-logo",
    "enable-debug-command",
    "enable-module-command",
    "hide-user-data-from-log",
    "replicaof",
    "replica-serve-stale-data",
    "replica-read-only",
    "repl-diskless-sync",
    "repl-diskless-sync-delay",
    "dir",
    "save",
    "stop-writes-on-bgsave-error",
    "rdbcompression",
    "rdbchecksum",
    "dbfilename",
    "appendonly",
    "appendfilename",
    "appendfsync",
    "no-appendfsync-on-rewrite",
    "auto-aof-rewrite-percentage",
    "auto-aof-rewrite-min-size",
    "maxmemory-policy",
    "lazyfree-lazy-eviction",
    "lazyfree-lazy-expire",
    "lazyfree-lazy-server-del",
    "lazyfree-lazy-user-del",
    "sentinel",
];

fn assert_config_is_well_formed(text: &str) {
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let tokens = split_args(line).unwrap_or_else(|| panic!("unparsable line {line:?}"));
        let directive = String::from_utf8(tokens[0].clone()).expect("ascii directive");
        assert!(
            DIRECTIVES.contains(&directive.as_str()),
            "unexpected directive in {line:?}"
        );
        for token in &tokens {
            assert!(!token.contains(&b'\n') && !token.contains(&0), "{line:?}");
        }
    }
}

/// Every `sh -c` in the rendered pods, as (script, positional arguments).
fn shell_invocations(objects: &[Value]) -> Vec<(String, Vec<String>)> {
    fn walk(value: &Value, out: &mut Vec<(String, Vec<String>)>) {
        match value {
            Value::Array(items) => {
                let strings: Vec<&str> = items.iter().filter_map(Value::as_str).collect();
                if strings.len() == items.len() && strings.first() == Some(&"sh") {
                    assert_eq!(strings.get(1), Some(&"-c"), "sh without -c: {strings:?}");
                    out.push((
                        strings.get(2).copied().unwrap_or_default().to_owned(),
                        strings.iter().skip(4).map(|s| (*s).to_owned()).collect(),
                    ));
                }
                items.iter().for_each(|item| walk(item, out));
            }
            Value::Object(map) => map.values().for_each(|item| walk(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    objects.iter().for_each(|o| walk(o, &mut out));
    out
}

fn pod_templates(rendered: &Rendered) -> Vec<(String, String)> {
    rendered
        .statefulsets
        .iter()
        .map(|sts| {
            let template = &sts.spec.as_ref().expect("spec").template;
            let hash = template
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .and_then(|a| a.get(POD_SPEC_HASH_ANNOTATION))
                .cloned()
                .expect("pod-spec hash annotation");
            let mut value = serde_json::to_value(template).expect("json");
            if let Some(annotations) = value
                .pointer_mut("/metadata/annotations")
                .and_then(Value::as_object_mut)
            {
                annotations.remove(POD_SPEC_HASH_ANNOTATION);
            }
            (canonical_json(&value), hash)
        })
        .collect()
}

/// One small change to a spec or to the inputs, or none.
fn mutate(value: &mut Value, inputs: &mut RenderInputs, which: usize) {
    let spec = &mut value["spec"];
    match which {
        0 => {}
        1 => spec["replicas"] = json!(spec["replicas"].as_i64().unwrap_or(1) % 4 + 1),
        2 => spec["podLabels"]["extra"] = json!("label"),
        3 => spec["image"] = json!("valkey/valkey:8.0.2"),
        4 => spec["podDisruptionBudget"] = json!({"enabled": true}),
        5 => inputs.tls_material_hash = Some("rotated".into()),
        6 => inputs.recorded_master = Some(0),
        7 => spec["persistence"] = json!({"enabled": true, "mode": "aof"}),
        8 => spec["metrics"] = json!({"enabled": true, "port": 9200}),
        9 => inputs.operator_image = "ghcr.io/example/vko:0.2.0".into(),
        10 => inputs.prometheus_operator_present = !inputs.prometheus_operator_present,
        _ => spec["antiAffinity"] = json!({"mode": "soft"}),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn rendering_is_deterministic(value in valkey_json(Just("prop".to_owned()))) {
        let valkey = valkey(&value);
        let inputs = inputs(&valkey);
        match (render(&valkey, &inputs), render(&valkey.clone(), &inputs.clone())) {
            (Ok(a), Ok(b)) => {
                let a = a.objects().expect("json");
                let b = b.objects().expect("json");
                let text_a: Vec<String> = a.iter().map(canonical_json).collect();
                let text_b: Vec<String> = b.iter().map(canonical_json).collect();
                prop_assert_eq!(text_a, text_b);
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "one render failed: {:?} / {:?}", a.err(), b.err()),
        }
    }

    /// The operator's watches of the kinds it writes select on this label (ADR 0028): an object
    /// rendered without it would be invisible to them and read with a GET on every pass.
    #[test]
    fn every_rendered_object_carries_the_managed_by_label_the_watches_select_on(
        value in valkey_json(Just("prop".to_owned())),
    ) {
        let valkey = valkey(&value);
        let Ok(rendered) = render(&valkey, &inputs(&valkey)) else {
            return Ok(());
        };
        let (key, wanted) = vko_api::consts::labels::MANAGED_BY_SELECTOR
            .split_once('=')
            .expect("key=value");
        prop_assert_eq!(key, vko_api::consts::labels::MANAGED_BY);
        prop_assert_eq!(wanted, vko_api::consts::labels::MANAGED_BY_VALUE);
        for object in rendered.objects().expect("json") {
            let label = &object["metadata"]["labels"][key];
            prop_assert_eq!(label.as_str(), Some(wanted), "{} {}", object["kind"],
                object["metadata"]["name"]);
        }
    }

    /// Every ServiceMonitor selects exactly one rendered Service, that Service names the
    /// endpoint's port and selects pods of a rendered workload (a monitor that selects nothing
    /// scrapes nothing, silently); the observer is scraped whenever it and a monitor are on.
    #[test]
    fn every_service_monitor_selects_one_service_with_its_port(
        value in valkey_json(Just("prop".to_owned())),
    ) {
        let valkey = valkey(&value);
        let Ok(rendered) = render(&valkey, &inputs(&valkey)) else {
            return Ok(());
        };
        let objects = rendered.objects().expect("json");
        let selects = |selector: &Value, labels: &Value| {
            selector.as_object().is_some_and(|selector| {
                selector.iter().all(|(key, value)| labels.get(key) == Some(value))
            })
        };
        let workloads: Vec<&Value> = objects.iter()
            .filter(|o| o["kind"] == "StatefulSet" || o["kind"] == "Deployment")
            .collect();
        let monitors: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "ServiceMonitor")
            .collect();
        for monitor in &monitors {
            let services: Vec<&Value> = objects.iter()
                .filter(|o| o["kind"] == "Service")
                .filter(|s| selects(&monitor["spec"]["selector"]["matchLabels"],
                    &s["metadata"]["labels"]))
                .collect();
            prop_assert_eq!(services.len(), 1, "{} selects {:?}", monitor["metadata"]["name"],
                services.iter().map(|s| &s["metadata"]["name"]).collect::<Vec<_>>());
            let service = services[0];
            let port = &monitor["spec"]["endpoints"][0]["port"];
            let ports = service["spec"]["ports"].as_array().expect("ports");
            prop_assert!(ports.iter().any(|p| &p["name"] == port), "{} has no port {}",
                service["metadata"]["name"], port);
            prop_assert!(workloads.iter().any(|w| selects(&service["spec"]["selector"],
                &w["spec"]["template"]["metadata"]["labels"])),
                "{} selects no rendered pods", service["metadata"]["name"]);
        }
        let scraped_observer = monitors.iter()
            .any(|m| m["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("-observer")));
        let spec = &valkey.spec;
        prop_assert_eq!(scraped_observer,
            spec.observer_enabled() && spec.service_monitor_enabled()
                && inputs(&valkey).prometheus_operator_present);
    }

    #[test]
    fn pod_spec_hash_changes_iff_the_pod_template_changes(
        value in valkey_json(Just("prop".to_owned())),
        which in 0..12usize,
    ) {
        let base = valkey(&value);
        let base_inputs = inputs(&base);
        let mut changed_value = value.clone();
        let mut changed_inputs = base_inputs.clone();
        mutate(&mut changed_value, &mut changed_inputs, which);
        let changed = valkey(&changed_value);
        let (Ok(a), Ok(b)) = (render(&base, &base_inputs), render(&changed, &changed_inputs)) else {
            return Ok(());
        };
        let (ta, tb) = (pod_templates(&a), pod_templates(&b));
        prop_assume!(ta.len() == tb.len());
        for ((template_a, hash_a), (template_b, hash_b)) in ta.iter().zip(&tb) {
            prop_assert_eq!(template_a == template_b, hash_a == hash_b,
                "mutation {} broke the iff", which);
        }
    }

    #[test]
    fn user_strings_never_reach_configs_or_shells(
        value in valkey_json(nasty()),
    ) {
        let valkey = valkey(&value);
        let inputs = inputs(&valkey);
        let Ok(rendered) = render(&valkey, &inputs) else {
            return Ok(());
        };
        // A render that succeeded had a name that is a plain DNS label.
        let name = valkey.metadata.name.clone().unwrap_or_default();
        prop_assert!(vko_render::Names::new(&name, "demo", "cluster.local").is_ok());
        for text in config_texts(&rendered) {
            assert_config_is_well_formed(&text);
        }
        // Labels, annotations, extraArgs, extraDnsNames and the image do not change the
        // configs at all: the same spec with those replaced renders the same files (the
        // image only through the version it names, which stays the same here).
        let mut tame = value.clone();
        for path in ["podLabels", "podAnnotations"] {
            tame["spec"][path] = json!({});
        }
        if tame["spec"]["metrics"].is_object() {
            tame["spec"]["metrics"]["extraArgs"] = json!([]);
            tame["spec"]["metrics"]["service"] = json!({});
            tame["spec"]["metrics"]["serviceMonitor"]["labels"] = json!({});
        }
        if tame["spec"]["tls"]["certManager"].is_object() {
            tame["spec"]["tls"]["certManager"]["extraDnsNames"] = json!([]);
        }
        if tame["spec"]["sentinel"].is_object() {
            tame["spec"]["sentinel"]["podLabels"] = json!({});
            tame["spec"]["sentinel"]["podAnnotations"] = json!({});
        }
        let tame = render(&self::valkey(&tame), &inputs).expect("the tame variant renders");
        prop_assert_eq!(config_texts(&rendered), config_texts(&tame));

        // Every shell is one of the fixed probe scripts or the Sentinel's preStop, fed only fixed
        // arguments (the preStop also the Valkey's name, a DNS label, as a positional argument).
        let objects = rendered.objects().expect("json");
        let scripts: BTreeSet<String> = shell_invocations(&tame.objects().expect("json"))
            .into_iter().map(|(script, _)| script).collect();
        let name = value["metadata"]["name"].as_str().expect("a name").to_owned();
        for (script, mut args) in shell_invocations(&objects) {
            prop_assert!(scripts.contains(&script) || scripts.is_empty());
            if script.contains("sentinel master \"$name\"") {
                prop_assert_eq!(args.first(), Some(&name));
                args.remove(0);
            } else {
                prop_assert!(script.contains("valkey-cli \"$@\" ping"));
            }
            for arg in args {
                prop_assert!(
                    ["-h", "127.0.0.1", "-p", "--tls", "--cacert", "/tls/ca.crt"].contains(&arg.as_str())
                        || arg.chars().all(|c| c.is_ascii_digit()),
                    "unexpected probe argument {arg:?}"
                );
            }
        }
        // The version label is always a valid label value.
        for object in &objects {
            if let Some(version) = object["metadata"]["labels"]["app.kubernetes.io/version"].as_str() {
                prop_assert!(version.len() <= 63);
                prop_assert!(version.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)));
                prop_assert!(version.is_empty() || (version.starts_with(|c: char| c.is_ascii_alphanumeric())
                    && version.ends_with(|c: char| c.is_ascii_alphanumeric())));
            }
        }
    }
}

#[test]
fn reserved_user_keys_are_refused_with_the_field_named() {
    let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": "x"},
        "spec": {"image": "valkey/valkey:8.0",
                 "podLabels": {"vko.gtrfc.com/instanceRole": "master"}}});
    let err =
        render(&valkey(&value), &RenderInputs::new("demo", "op:1", "1")).expect_err("refused");
    assert_eq!(err.reason().as_str(), "ReservedKey");
    assert!(err.to_string().contains("spec.podLabels"), "{err}");
}

#[test]
fn extra_args_with_nul_and_bad_dns_names_are_refused() {
    let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": "x"},
        "spec": {"image": "valkey/valkey:8.0",
                 "metrics": {"enabled": true, "extraArgs": ["--ok", "bad\u{0}"]}}});
    let err =
        render(&valkey(&value), &RenderInputs::new("demo", "op:1", "1")).expect_err("refused");
    assert_eq!(err.reason().as_str(), "InvalidArgument");
    assert!(
        err.to_string().contains("spec.metrics.extraArgs[1]"),
        "{err}"
    );

    let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": "x"},
        "spec": {"image": "valkey/valkey:8.0",
                 "tls": {"enabled": true, "certManager": {"issuer": {"kind": "Issuer", "name": "ca"},
                         "extraDnsNames": ["ok.example", "bad name\nx"]}}}});
    let mut inputs = RenderInputs::new("demo", "op:1", "1");
    inputs.cert_manager_present = true;
    let err = render(&valkey(&value), &inputs).expect_err("refused");
    assert_eq!(err.reason().as_str(), "InvalidDnsName");
}

#[test]
fn scaling_does_not_change_the_pod_template_and_a_recorded_master_does_not_change_hashes() {
    let at = |replicas: i32, master: Option<u32>| {
        let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": "s"},
            "spec": {"replicas": replicas, "image": "valkey/valkey:8.0",
                     "sentinel": {"enabled": true}}});
        let valkey = valkey(&value);
        let mut inputs = inputs(&valkey);
        inputs.recorded_master = master;
        render(&valkey, &inputs).expect("renders")
    };
    let one = at(1, None);
    let three = at(3, None);
    let moved = at(3, Some(2));
    assert_eq!(one.hashes, three.hashes);
    assert_eq!(three.hashes, moved.hashes);
    // ...while the seeded master really moved in the configs.
    assert_ne!(config_texts(&three), config_texts(&moved));
    assert!(
        config_texts(&moved)
            .iter()
            .any(|t| t.contains("replicaof s-2.s-headless.demo.svc.cluster.local 6379"))
    );
}

#[test]
fn a_held_scale_down_renders_the_held_count_and_accepts_a_master_on_a_removed_ordinal() {
    let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": "s"},
        "spec": {"replicas": 2, "image": "valkey/valkey:8.0"}});
    let valkey = valkey(&value);
    let mut inputs = inputs(&valkey);
    inputs.recorded_master = Some(4);
    let refused = render(&valkey, &inputs).expect_err("master 4 is not below 2");
    assert_eq!(refused.reason().as_str(), "RecordedMasterOutOfRange");
    inputs.data_replicas = Some(5);
    let held = render(&valkey, &inputs).expect("renders");
    let replicas = |rendered: &vko_render::Rendered| {
        rendered.statefulsets[0]
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
    };
    assert_eq!(replicas(&held), Some(5));
    inputs.recorded_master = Some(1);
    inputs.data_replicas = None;
    let shrunk = render(&valkey, &inputs).expect("renders");
    assert_eq!(replicas(&shrunk), Some(2));
    // The held count is not part of the pod template.
    assert_eq!(held.hashes, shrunk.hashes);
}

/// The operator tells a pod whose sidecar fences on the master Lease from one that fences on the
/// Sentinel majority by the arguments rendered here (a Sentinel turned off leaves pods of both
/// kinds until the roll replaces them).
#[test]
fn a_data_pod_tells_whether_its_sidecar_runs_with_sentinel() {
    for (sentinel, expected) in [
        (json!({"enabled": true, "replicas": 3}), true),
        (json!({"enabled": false}), false),
    ] {
        let value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": "s"},
            "spec": {"replicas": 3, "image": "valkey/valkey:8.0", "sentinel": sentinel}});
        let valkey = valkey(&value);
        let rendered = render(&valkey, &inputs(&valkey)).expect("renders");
        let pod = rendered.statefulsets[0]
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("a pod template");
        assert_eq!(
            vko_render::sidecar_runs_with_sentinel(pod),
            expected,
            "{value}"
        );
    }
}

/// A pod rendered with auth on names the Secret and key its password file comes from, on both
/// tiers; one rendered with auth off names none (ADR 0035: a restarted operator turning auth off
/// reads the password the pods not rolled yet still require from there).
#[test]
fn a_pod_names_the_auth_secret_and_key_it_mounts() {
    for (auth, expected) in [
        (
            json!({"secretName": "vk-auth", "secretPasswordKey": "pw"}),
            Some(("vk-auth", "pw")),
        ),
        (json!(null), None),
    ] {
        let mut value = json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": "a"},
            "spec": {"replicas": 3, "image": "valkey/valkey:8.0",
                     "sentinel": {"enabled": true, "replicas": 3}}});
        if !auth.is_null() {
            value["spec"]["auth"] = auth;
        }
        let valkey = valkey(&value);
        let rendered = render(&valkey, &inputs(&valkey)).expect("renders");
        assert_eq!(rendered.statefulsets.len(), 2);
        for statefulset in &rendered.statefulsets {
            let pod = statefulset
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .expect("a pod template");
            assert_eq!(vko_render::mounted_auth_secret(pod), expected, "{value}");
        }
    }
}
