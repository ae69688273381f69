//! Whether applying a desired object would change anything (ADR 0018): the operator writes an
//! object only when the API server's copy differs from it.
//!
//! Two checks, both needed. The desired object carries the hash of itself as the annotation
//! [`APPLIED_HASH_ANNOTATION`], so a field the operator stopped rendering (which server-side apply
//! would remove) changes the hash and so the annotation. And every field of the desired object
//! must hold the same value in the live object, so a field another writer changed (drift) is
//! written back. Fields the live object has beyond the desired ones (defaults, other managers'
//! fields, status) are not compared: server-side apply leaves them alone too.

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::hash::canonical_json;
use crate::labels::APPLIED_HASH_ANNOTATION;

/// Hex SHA-256 of `desired`'s canonical JSON, without its own applied-hash annotation (so the hash
/// of an object that already carries it is the same as before it was added).
pub fn applied_hash(desired: &Value) -> String {
    let mut value = desired.clone();
    if let Some(annotations) = value
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(APPLIED_HASH_ANNOTATION);
        if annotations.is_empty()
            && let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut)
        {
            metadata.remove("annotations");
        }
    }
    hex::encode(Sha256::digest(canonical_json(&value).as_bytes()))
}

/// Puts [`applied_hash`] of `desired` into its `metadata.annotations`. An object without a
/// `metadata` map is left as it is (it cannot be applied anyway).
pub fn stamp_applied_hash(desired: &mut Value) {
    let hash = applied_hash(desired);
    let Some(metadata) = desired.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = metadata
        .entry("annotations")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(serde_json::Map::new());
    }
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(APPLIED_HASH_ANNOTATION.to_owned(), Value::String(hash));
    }
}

/// Whether `live` (the API server's object, as cached) already holds the stamped `desired`
/// object: its applied-hash annotation is the desired one and every desired field has the
/// desired value. `false` means: apply.
pub fn live_holds(desired: &Value, live: &Value) -> bool {
    let stamped = desired
        .pointer(&format!(
            "/metadata/annotations/{}",
            APPLIED_HASH_ANNOTATION
                .replace('~', "~0")
                .replace('/', "~1")
        ))
        .and_then(Value::as_str);
    // Unstamped, the hash check cannot be made: a removed field would go unnoticed.
    stamped == Some(applied_hash(desired).as_str()) && holds(desired, live)
}

/// A desired value the API server stores as an absent field: Go's `omitempty` drops empty strings,
/// `false`, `0`, empty maps and lists, and a JSON `null` in an apply means "no opinion".
fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(flag) => !flag,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

/// `desired` is contained in `live`: maps key by key (extra live keys allowed), lists element by
/// element with the same length (a list the operator renders is the list it wants, in its order),
/// scalars equal (numbers by value).
fn holds(desired: &Value, live: &Value) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => {
            want.iter().all(|(key, value)| match have.get(key) {
                Some(found) => holds(value, found),
                None => is_empty_value(value),
            })
        }
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| holds(w, h))
        }
        (Value::Number(want), Value::Number(have)) => {
            want == have || (want.as_f64().is_some() && want.as_f64() == have.as_f64())
        }
        // An empty desired value and a live null (or empty) one are the same absent field.
        (want, Value::Null) => is_empty_value(want),
        (want, have) => want == have,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config_map() -> Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a-config", "namespace": "ns",
                "labels": {"app.kubernetes.io/name": "valkey"},
                "ownerReferences": [{"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                    "name": "a", "uid": "uid-a", "controller": true, "blockOwnerDeletion": true}]},
            "data": {"valkey.conf": "port 6379\n"}
        })
    }

    fn stamped(mut value: Value) -> Value {
        stamp_applied_hash(&mut value);
        value
    }

    /// What the API server returns for an applied object: the desired fields plus its own.
    fn as_served(desired: &Value) -> Value {
        let mut live = desired.clone();
        live["metadata"]["uid"] = "cm-uid".into();
        live["metadata"]["resourceVersion"] = "42".into();
        live["metadata"]["managedFields"] = json!([{"manager": "vko-operator"}]);
        live
    }

    #[test]
    fn the_hash_ignores_its_own_annotation_and_key_order() {
        let plain = config_map();
        let once = stamped(plain.clone());
        assert_eq!(applied_hash(&plain), applied_hash(&once));
        assert_eq!(
            stamped(once.clone()),
            once,
            "stamping twice changes nothing"
        );
        let reordered: Value = serde_json::from_str(
            r#"{"data": {"valkey.conf": "port 6379\n"}, "kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"ownerReferences": [{"blockOwnerDeletion": true, "controller": true,
            "uid": "uid-a", "name": "a", "kind": "Valkey", "apiVersion": "vko.gtrfc.com/v1"}],
            "labels": {"app.kubernetes.io/name": "valkey"}, "namespace": "ns", "name": "a-config"}}"#,
        )
        .unwrap();
        assert_eq!(applied_hash(&reordered), applied_hash(&plain));
        let mut other = plain.clone();
        other["data"]["valkey.conf"] = "port 6380\n".into();
        assert_ne!(applied_hash(&other), applied_hash(&plain));
    }

    #[test]
    fn a_live_object_as_applied_holds_the_desired_one() {
        let desired = stamped(config_map());
        assert!(live_holds(&desired, &as_served(&desired)));
    }

    #[test]
    fn an_unstamped_desired_object_is_always_applied() {
        let desired = config_map();
        assert!(!live_holds(&desired, &as_served(&desired)));
    }

    #[test]
    fn a_changed_desired_field_is_applied() {
        let before = stamped(config_map());
        let live = as_served(&before);
        let mut changed = config_map();
        changed["data"]["valkey.conf"] = "port 6380\n".into();
        assert!(!live_holds(&stamped(changed), &live));
    }

    /// Server-side apply removes a field the operator stopped applying; the subset check alone
    /// cannot see that, the hash does.
    #[test]
    fn a_field_no_longer_desired_is_applied_so_that_it_is_removed() {
        let mut before = config_map();
        before["metadata"]["labels"]["extra"] = "yes".into();
        let live = as_served(&stamped(before));
        assert!(!live_holds(&stamped(config_map()), &live));
    }

    #[test]
    fn drift_of_a_desired_field_is_applied() {
        let desired = stamped(config_map());
        let mut live = as_served(&desired);
        live["data"]["valkey.conf"] = "port 1\n".into();
        assert!(!live_holds(&desired, &live), "a changed value");
        let mut live = as_served(&desired);
        live["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("app.kubernetes.io/name");
        assert!(!live_holds(&desired, &live), "a removed label");
        let mut live = as_served(&desired);
        live["metadata"]["ownerReferences"]
            .as_array_mut()
            .unwrap()
            .push(json!({"uid": "other"}));
        assert!(!live_holds(&desired, &live), "a list grown by someone");
        let mut live = as_served(&desired);
        live["metadata"]["annotations"][APPLIED_HASH_ANNOTATION] = "edited".into();
        assert!(!live_holds(&desired, &live), "an edited hash annotation");
    }

    #[test]
    fn fields_only_the_live_object_has_are_not_compared() {
        let desired = stamped(config_map());
        let mut live = as_served(&desired);
        live["metadata"]["labels"]["added-by-someone"] = "x".into();
        live["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied"] = "{}".into();
        live["status"] = json!({"phase": "whatever"});
        assert!(live_holds(&desired, &live));
    }

    /// What the API server drops (Go's omitempty) or defaults is the same absent field.
    #[test]
    fn empty_desired_values_match_absent_live_fields() {
        let mut with_empties = config_map();
        with_empties["spec"] = json!({"list": [], "map": {}, "flag": false, "count": 0,
            "text": "", "none": null, "port": 6379});
        let desired = stamped(with_empties);
        let mut live = as_served(&desired);
        live["spec"] = json!({"port": 6379.0, "none": null, "defaulted": "by the server"});
        assert!(live_holds(&desired, &live));
        live["spec"]["flag"] = true.into();
        assert!(!live_holds(&desired, &live), "a set value is compared");
        live["spec"]["flag"] = false.into();
        live["spec"]["port"] = 6380.into();
        assert!(!live_holds(&desired, &live));
    }
}
