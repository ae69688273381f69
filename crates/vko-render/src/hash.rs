//! Fingerprints: config hash, pod-spec hash, TLS-material and TLS-trust fingerprints. All are SHA-256, hex.
//!
//! The pod-spec hash is computed over a canonical JSON text that this module writes itself
//! (object keys sorted, no whitespace), not over `serde_json::to_string`: serde_json keeps
//! insertion order when another crate in the same build enables its `preserve_order` feature,
//! and a hash that depends on the build would roll every pod after an unrelated dependency bump.

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::RenderError;
use crate::labels::POD_SPEC_HASH_ANNOTATION;

/// Hex SHA-256 of several parts, each prefixed with its length so that moving bytes from one
/// part to the next changes the hash.
fn digest_parts(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part);
    }
    hex::encode(hasher.finalize())
}

/// Hash of a tier's generated config files, in order.
pub fn config_hash(files: &[&str]) -> String {
    let parts: Vec<&[u8]> = files.iter().map(|f| f.as_bytes()).collect();
    digest_parts(&parts)
}

/// Fingerprint of TLS material: the certificate, the key and the CA bundle, as read from the
/// Secret. A rotation changes it; identical bytes give the identical fingerprint.
pub fn tls_material_fingerprint(cert: &[u8], key: &[u8], ca: &[u8]) -> String {
    digest_parts(&[cert, key, ca])
}

/// Fingerprint of the trust a TLS Secret carries: its CA bundle alone. The operator puts this on
/// the data tier's template (ADR 0038): a new certificate and key under the same CA is reloaded in
/// place by the sidecar, so only a new `ca.crt` (which a running server cannot safely take in
/// place, mid-roll its peers still present the old chain) rolls the data pods.
pub fn tls_trust_fingerprint(ca: &[u8]) -> String {
    digest_parts(&[b"trust", ca])
}

/// Writes `value` as canonical JSON: keys sorted bytewise, no insignificant whitespace.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Hash of a rendered pod template, ignoring its own `vko.gtrfc.com/pod-spec-hash` annotation
/// (so the hash of a template that already carries it is the same as before it was added).
pub fn pod_spec_hash(template: &PodTemplateSpec) -> Result<String, RenderError> {
    let mut value = serde_json::to_value(template)
        .map_err(|e| RenderError::serialization("pod template", &e))?;
    if let Some(annotations) = value
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(POD_SPEC_HASH_ANNOTATION);
        if annotations.is_empty()
            && let Some(metadata) = value
                .pointer_mut("/metadata")
                .and_then(Value::as_object_mut)
        {
            metadata.remove("annotations");
        }
    }
    Ok(digest_parts(&[canonical_json(&value).as_bytes()]))
}

/// Whether a pod created from a template with hash `pod_hash` differs from `target` only in
/// the image of the containers that run `operator_image` (the sidecar and its init containers):
/// `target` with those images set back to what the pod runs (`pod_images`: container name →
/// image, init containers included) hashes to `pod_hash`, and at least one image differs. A
/// single-replica cluster defers exactly this change (SidecarUpdatePending) instead of
/// restarting its only pod.
pub fn differs_only_in_operator_image(
    target: &PodTemplateSpec,
    operator_image: &str,
    pod_images: &std::collections::BTreeMap<String, String>,
    pod_hash: &str,
) -> bool {
    let mut template = target.clone();
    let mut changed = false;
    if let Some(spec) = template.spec.as_mut() {
        let init = spec.init_containers.iter_mut().flatten();
        for container in spec.containers.iter_mut().chain(init) {
            if container.image.as_deref() != Some(operator_image) {
                continue;
            }
            match pod_images.get(&container.name) {
                Some(running) if running != operator_image => {
                    container.image = Some(running.clone());
                    changed = true;
                }
                Some(_) => {}
                // The pod lacks a container the target has: more than an image changed.
                None => return false,
            }
        }
    }
    changed && pod_spec_hash(&template).is_ok_and(|hash| hash == pod_hash)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let value = json!({"b": 1, "a": {"d": [true, null, "x\n"], "c": 2.5}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{"c":2.5,"d":[true,null,"x\n"]},"b":1}"#
        );
    }

    #[test]
    fn config_hash_separates_files() {
        assert_ne!(config_hash(&["ab", "c"]), config_hash(&["a", "bc"]));
        assert_eq!(config_hash(&["x"]), config_hash(&["x"]));
        assert_eq!(config_hash(&["x"]).len(), 64);
    }

    #[test]
    fn tls_fingerprint_depends_on_every_part() {
        let base = tls_material_fingerprint(b"cert", b"key", b"ca");
        assert_ne!(base, tls_material_fingerprint(b"cert2", b"key", b"ca"));
        assert_ne!(base, tls_material_fingerprint(b"cert", b"key2", b"ca"));
        assert_ne!(base, tls_material_fingerprint(b"cert", b"key", b"ca2"));
        assert_ne!(base, tls_material_fingerprint(b"cer", b"tkey", b"ca"));
        assert_eq!(base, tls_material_fingerprint(b"cert", b"key", b"ca"));
    }

    #[test]
    fn pod_spec_hash_ignores_its_own_annotation() {
        let mut template = PodTemplateSpec {
            metadata: Some(ObjectMeta {
                annotations: Some(BTreeMap::from([("a".to_owned(), "1".to_owned())])),
                ..ObjectMeta::default()
            }),
            spec: None,
        };
        let before = pod_spec_hash(&template).expect("hash");
        if let Some(annotations) = template
            .metadata
            .as_mut()
            .and_then(|m| m.annotations.as_mut())
        {
            annotations.insert(POD_SPEC_HASH_ANNOTATION.to_owned(), before.clone());
        }
        assert_eq!(pod_spec_hash(&template).expect("hash"), before);
        if let Some(annotations) = template
            .metadata
            .as_mut()
            .and_then(|m| m.annotations.as_mut())
        {
            annotations.insert("a".to_owned(), "2".to_owned());
        }
        assert_ne!(pod_spec_hash(&template).expect("hash"), before);
    }

    #[test]
    fn an_operator_image_change_alone_is_told_apart_from_any_other_change() {
        use k8s_openapi::api::core::v1::{Container, PodSpec};
        let template = |sidecar: &str, memory_env: &str| PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    image: Some(sidecar.into()),
                    ..Container::default()
                }]),
                containers: vec![
                    Container {
                        name: "valkey".into(),
                        image: Some("valkey/valkey:8.0".into()),
                        args: Some(vec![memory_env.into()]),
                        ..Container::default()
                    },
                    Container {
                        name: "sidecar".into(),
                        image: Some(sidecar.into()),
                        ..Container::default()
                    },
                ],
                ..PodSpec::default()
            }),
        };
        let old = template("op:1", "a");
        let old_hash = pod_spec_hash(&old).unwrap();
        let running: BTreeMap<String, String> = [
            ("init".to_owned(), "op:1".to_owned()),
            ("valkey".to_owned(), "valkey/valkey:8.0".to_owned()),
            ("sidecar".to_owned(), "op:1".to_owned()),
        ]
        .into();
        // Only the operator image moved: deferred.
        assert!(differs_only_in_operator_image(
            &template("op:2", "a"),
            "op:2",
            &running,
            &old_hash
        ));
        // The operator image and something else moved: a real template change.
        assert!(!differs_only_in_operator_image(
            &template("op:2", "b"),
            "op:2",
            &running,
            &old_hash
        ));
        // Nothing moved in the images: not a sidecar-only change.
        assert!(!differs_only_in_operator_image(
            &template("op:1", "b"),
            "op:1",
            &running,
            &old_hash
        ));
    }
}
