//! Taking over objects the Go operator wrote (issue 21 item 4, ADR 0025,
//! `docs/migrate-from-go-operator.md`). The Go operator writes with client-side `Update`s under
//! controller-runtime's field manager `manager`; vko writes with server-side apply. An apply never
//! removes a field another manager owns, so without a transfer a StatefulSet the Go operator
//! wrote would keep its init containers, volumes and env next to ours. Kubernetes' own answer
//! (client-go `csaupgrade`, what `kubectl apply --server-side` does for client-side-applied
//! objects) is to move the old manager's field set into the new manager's `Apply` entry; the next
//! apply then owns every field and drops those it no longer names.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
use serde_json::{Map, Value};

/// The field managers of the Go operator: controller-runtime's client names itself after the
/// binary (`manager`) unless told otherwise.
pub const GO_OPERATOR_FIELD_MANAGERS: &[&str] = &["manager"];

/// Whether `entry` is a client-side write of the main resource by one of `from` (a status
/// subresource entry is the status writer's and stays).
pub fn is_adoptable(entry: &ManagedFieldsEntry, from: &[&str]) -> bool {
    entry.operation.as_deref() == Some("Update")
        && entry.subresource.as_deref().unwrap_or("").is_empty()
        && entry
            .manager
            .as_deref()
            .is_some_and(|manager| from.contains(&manager))
}

/// The managedFields after moving every entry of `from` (see [`is_adoptable`]) into `ours`'s
/// `Apply` entry, or `None` when there is nothing to move. Entries of other managers stay as they
/// are. Every kind vko writes is served in one API version, so the field sets are merged as they
/// are.
pub fn adopt_managed_fields(
    entries: &[ManagedFieldsEntry],
    ours: &str,
    from: &[&str],
) -> Option<Vec<ManagedFieldsEntry>> {
    if !entries.iter().any(|entry| is_adoptable(entry, from)) {
        return None;
    }
    let is_our_apply = |entry: &ManagedFieldsEntry| {
        entry.manager.as_deref() == Some(ours)
            && entry.operation.as_deref() == Some("Apply")
            && entry.subresource.as_deref().unwrap_or("").is_empty()
    };
    let mut kept = Vec::new();
    let mut our_apply: Option<ManagedFieldsEntry> = None;
    let mut adopted = Vec::new();
    for entry in entries {
        if is_our_apply(entry) {
            our_apply = Some(entry.clone());
        } else if is_adoptable(entry, from) {
            adopted.push(entry.clone());
        } else {
            kept.push(entry.clone());
        }
    }
    let mut merged = our_apply.unwrap_or_else(|| ManagedFieldsEntry {
        api_version: adopted.first().and_then(|entry| entry.api_version.clone()),
        fields_type: Some("FieldsV1".to_owned()),
        fields_v1: Some(FieldsV1(Value::Object(Map::new()))),
        manager: Some(ours.to_owned()),
        operation: Some("Apply".to_owned()),
        subresource: None,
        time: adopted.first().and_then(|entry| entry.time.clone()),
    });
    for entry in adopted {
        let theirs = entry
            .fields_v1
            .map(|fields| fields.0)
            .unwrap_or(Value::Null);
        let mut fields = merged
            .fields_v1
            .take()
            .map(|fields| fields.0)
            .unwrap_or_else(|| Value::Object(Map::new()));
        merge_field_sets(&mut fields, &theirs);
        merged.fields_v1 = Some(FieldsV1(fields));
    }
    kept.push(merged);
    Some(kept)
}

/// Adds every path of `theirs` to `into` (a FieldsV1 trie: objects keyed by `f:`/`k:`/`v:`/`i:`
/// path elements, `{}` or `"."` leaves).
fn merge_field_sets(into: &mut Value, theirs: &Value) {
    let Value::Object(theirs) = theirs else {
        return;
    };
    if !into.is_object() {
        *into = Value::Object(Map::new());
    }
    if let Value::Object(into) = into {
        for (key, value) in theirs {
            match into.get_mut(key) {
                Some(existing) => merge_field_sets(existing, value),
                None => {
                    into.insert(key.clone(), value.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn entry(
        manager: &str,
        operation: &str,
        subresource: Option<&str>,
        fields: Value,
    ) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            api_version: Some("apps/v1".into()),
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            subresource: subresource.map(str::to_owned),
            time: None,
        }
    }

    #[test]
    fn nothing_is_moved_from_objects_the_go_operator_never_wrote() {
        let entries = [
            entry("vko-operator", "Apply", None, json!({"f:spec": {}})),
            entry(
                "kube-controller-manager",
                "Update",
                Some("status"),
                json!({"f:status": {}}),
            ),
            entry("kubectl-edit", "Update", None, json!({"f:metadata": {}})),
            // The Go operator's status writes are not a claim on the spec.
            entry("manager", "Update", Some("status"), json!({"f:status": {}})),
        ];
        assert_eq!(
            adopt_managed_fields(&entries, "vko-operator", GO_OPERATOR_FIELD_MANAGERS),
            None
        );
    }

    #[test]
    fn the_go_operators_fields_become_ours_and_every_other_entry_stays() {
        let status = entry(
            "kube-controller-manager",
            "Update",
            Some("status"),
            json!({"f:status": {}}),
        );
        let user = entry(
            "kubectl-edit",
            "Update",
            None,
            json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
        );
        let entries = [
            entry(
                "manager",
                "Update",
                None,
                json!({"f:spec": {"f:template": {"f:spec": {
                    "f:initContainers": {"k:{\"name\":\"init-config-selector\"}": {".": {}, "f:image": {}}},
                    "f:containers": {"k:{\"name\":\"valkey\"}": {"f:command": {}}}
                }}}}),
            ),
            status.clone(),
            user.clone(),
            entry(
                "vko-operator",
                "Apply",
                None,
                json!({"f:spec": {"f:template": {"f:spec": {
                    "f:containers": {"k:{\"name\":\"valkey\"}": {"f:image": {}}}
                }}}}),
            ),
        ];
        let adopted =
            adopt_managed_fields(&entries, "vko-operator", GO_OPERATOR_FIELD_MANAGERS).unwrap();
        assert_eq!(adopted.len(), 3);
        assert_eq!(adopted[0], status);
        assert_eq!(adopted[1], user);
        let ours = &adopted[2];
        assert_eq!(ours.manager.as_deref(), Some("vko-operator"));
        assert_eq!(ours.operation.as_deref(), Some("Apply"));
        assert_eq!(
            ours.fields_v1.as_ref().unwrap().0,
            json!({"f:spec": {"f:template": {"f:spec": {
                "f:initContainers": {"k:{\"name\":\"init-config-selector\"}": {".": {}, "f:image": {}}},
                "f:containers": {"k:{\"name\":\"valkey\"}": {"f:image": {}, "f:command": {}}}
            }}}})
        );
    }

    #[test]
    fn an_object_only_the_go_operator_wrote_gets_an_apply_entry_of_ours() {
        let fields = json!({"f:data": {"f:valkey.conf": {}}});
        let entries = [entry("manager", "Update", None, fields.clone())];
        let adopted =
            adopt_managed_fields(&entries, "vko-operator", GO_OPERATOR_FIELD_MANAGERS).unwrap();
        assert_eq!(adopted, vec![entry("vko-operator", "Apply", None, fields)]);
        // Applying it again finds nothing left to move.
        assert_eq!(
            adopt_managed_fields(&adopted, "vko-operator", GO_OPERATOR_FIELD_MANAGERS),
            None
        );
    }
}
