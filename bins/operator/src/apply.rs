//! The apply step: ownership first, then server-side apply with one field manager, only of objects
//! whose live copy does not already hold them (ADR 0018: no write without a change); objects that
//! should no longer exist are deleted only when this `Valkey` controls them (UID precondition).

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use serde_json::Value;

use crate::error::Error;
use crate::stores::{ManagedKind, ObservedMeta, ObservedObject};

/// The one field manager of every write.
pub const FIELD_MANAGER: &str = "vko-operator";

/// One rendered object, ready to apply.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObject {
    pub kind: ManagedKind,
    pub name: String,
    pub body: Value,
}

impl DesiredObject {
    /// Reads `apiVersion`, `kind` and `metadata.name` of a rendered object.
    pub fn from_value(body: Value) -> Result<DesiredObject, Error> {
        let api_version = body["apiVersion"].as_str().unwrap_or_default();
        let kind_text = body["kind"].as_str().unwrap_or_default();
        let kind = ManagedKind::of(api_version, kind_text).ok_or_else(|| {
            Error::InvalidObject(format!("unknown kind {api_version}/{kind_text}"))
        })?;
        let name = body["metadata"]["name"]
            .as_str()
            .ok_or_else(|| Error::InvalidObject(format!("{kind_text} without metadata.name")))?
            .to_owned();
        Ok(DesiredObject { kind, name, body })
    }

    pub fn key(&self) -> (ManagedKind, String) {
        (self.kind, self.name.clone())
    }
}

/// Who holds a generated name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Nothing under that name (as far as the store knows).
    Absent,
    /// An object controlled by this `Valkey`.
    Ours,
    /// An object without a controller ownerReference to this `Valkey`'s UID.
    Foreign,
}

/// Ownership of an observed object relative to the `Valkey` with `owner_uid`.
pub fn ownership(observed: Option<&ObservedMeta>, owner_uid: &str) -> Ownership {
    match observed {
        None => Ownership::Absent,
        Some(meta) if meta.controller_uid.as_deref() == Some(owner_uid) => Ownership::Ours,
        Some(_) => Ownership::Foreign,
    }
}

/// Objects this `Valkey` controls that are neither desired nor deliberately held back (`keep`):
/// they are to be deleted.
pub fn stale_objects(
    observed: &[ObservedMeta],
    desired: &BTreeSet<(ManagedKind, String)>,
    keep: &BTreeSet<(ManagedKind, String)>,
    owner_uid: &str,
) -> Vec<ObservedMeta> {
    observed
        .iter()
        .filter(|meta| meta.controller_uid.as_deref() == Some(owner_uid))
        .filter(|meta| !meta.terminating)
        .filter(|meta| {
            let key = (meta.kind, meta.name.clone());
            !desired.contains(&key) && !keep.contains(&key)
        })
        .cloned()
        .collect()
}

/// What the apply step did.
#[derive(Debug, Default)]
pub struct ApplyReport {
    pub applied: Vec<(ManagedKind, String)>,
    /// Ours already, and the live copy holds the desired object: not written.
    pub unchanged: Vec<(ManagedKind, String)>,
    pub deleted: Vec<(ManagedKind, String)>,
    /// Generated names held by objects this `Valkey` does not control.
    pub foreign: Vec<(ManagedKind, String)>,
    pub errors: Vec<Error>,
}

fn dynamic_api(client: &kube::Client, namespace: &str, kind: ManagedKind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.api_resource())
}

/// What to do with one desired object, given what is observed under its name.
#[derive(Debug, PartialEq)]
pub enum ApplyDecision {
    /// Someone else's object: never written.
    Foreign,
    /// Ours, and the live copy already holds the stamped desired object.
    Unchanged,
    /// Apply; `force` only over our own object (to win back our fields from other managers),
    /// never to take over a new name.
    Apply { force: bool },
}

/// Decides for the stamped `desired` body (see [`vko_render::live_holds`]).
pub fn decide(
    desired: &Value,
    observed: Option<&ObservedObject>,
    owner_uid: &str,
) -> ApplyDecision {
    match ownership(observed.map(|found| &found.meta), owner_uid) {
        Ownership::Foreign => ApplyDecision::Foreign,
        Ownership::Absent => ApplyDecision::Apply { force: false },
        Ownership::Ours => match observed.and_then(|found| found.live.as_ref()) {
            Some(live) if vko_render::live_holds(desired, live) => ApplyDecision::Unchanged,
            _ => ApplyDecision::Apply { force: true },
        },
    }
}

/// Applies `desired` in order, each stamped with its applied hash, skipping those whose live copy
/// already holds them. `lookup` answers what the stores know under a name (`None` for an optional
/// CRD kind whose watch has not listed); a name they do not know is read with one GET. Continues past
/// failures; everything is in the report.
pub async fn apply_objects(
    client: &kube::Client,
    namespace: &str,
    owner_uid: &str,
    desired: &[DesiredObject],
    lookup: impl Fn(ManagedKind, &str) -> Option<ObservedObject>,
) -> ApplyReport {
    let mut report = ApplyReport::default();
    for object in desired {
        let api = dynamic_api(client, namespace, object.kind);
        // The stores hold only objects carrying our managed-by label (ADR 0028): a name they do
        // not know may still be held by someone else's object, and one GET is the only way to see
        // who holds it. At steady state every desired object is in its store, so no GET is made.
        let observed = match lookup(object.kind, &object.name) {
            Some(found) => Some(found),
            None => match api.get_opt(&object.name).await {
                Ok(found) => found.map(|found| ObservedObject::of(object.kind, &found)),
                Err(error) => {
                    report
                        .errors
                        .push(Error::from_write(object.kind.name(), &object.name, &error));
                    continue;
                }
            },
        };
        let mut body = object.body.clone();
        vko_render::stamp_applied_hash(&mut body);
        let mut decision = decide(&body, observed.as_ref(), owner_uid);
        if let (ApplyDecision::Unchanged | ApplyDecision::Apply { .. }, Some(found)) =
            (&decision, &observed)
            && found.meta.adoptable
        {
            // The Go operator wrote it: its fields become ours first, so the forced apply below
            // removes those we do not render (migration, `docs/migrate-from-go-operator.md`).
            if let Err(error) = take_over_fields(&api, object, found).await {
                report.errors.push(error);
                continue;
            }
            decision = ApplyDecision::Apply { force: true };
        }
        let params = match decision {
            // A hand-written budget for our pods is left alone and reported as a configuration
            // warning (the reference's PodDisruptionBudgetNotOwned), not a blocked pass.
            ApplyDecision::Foreign if object.kind == ManagedKind::PodDisruptionBudget => {
                report.foreign.push(object.key());
                continue;
            }
            ApplyDecision::Foreign => {
                report.foreign.push(object.key());
                report.errors.push(Error::ForeignObject {
                    kind: object.kind.name().to_owned(),
                    name: object.name.clone(),
                });
                continue;
            }
            ApplyDecision::Unchanged => {
                report.unchanged.push(object.key());
                continue;
            }
            ApplyDecision::Apply { force: true } => PatchParams::apply(FIELD_MANAGER).force(),
            ApplyDecision::Apply { force: false } => PatchParams::apply(FIELD_MANAGER),
        };
        match api.patch(&object.name, &params, &Patch::Apply(&body)).await {
            Ok(_) => report.applied.push(object.key()),
            Err(error) => {
                tracing::warn!(kind = object.kind.name(), name = %object.name, %error, "apply failed");
                report
                    .errors
                    .push(Error::from_write(object.kind.name(), &object.name, &error));
            }
        }
    }
    report
}

/// Moves the Go operator's field set of `found` into our apply entry (a merge patch of
/// `metadata.managedFields` conditioned on the resourceVersion seen; the API server takes
/// managedFields written by a request as they are).
async fn take_over_fields(
    api: &Api<DynamicObject>,
    object: &DesiredObject,
    found: &ObservedObject,
) -> Result<(), Error> {
    let metadata = found.live.as_ref().map(|live| &live["metadata"]);
    let entries: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry> = metadata
        .and_then(|meta| serde_json::from_value(meta["managedFields"].clone()).ok())
        .unwrap_or_default();
    let Some(adopted) = vko_render::adopt_managed_fields(
        &entries,
        FIELD_MANAGER,
        vko_render::GO_OPERATOR_FIELD_MANAGERS,
    ) else {
        return Ok(());
    };
    let resource_version = metadata.map(|meta| meta["resourceVersion"].clone());
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": resource_version, "managedFields": adopted}
    });
    api.patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|error| Error::from_write(object.kind.name(), &object.name, &error))?;
    tracing::info!(
        kind = object.kind.name(),
        name = %object.name,
        managers = ?vko_render::GO_OPERATOR_FIELD_MANAGERS,
        "took over the fields the Go operator wrote"
    );
    Ok(())
}

/// The objects of an optional kind (cert-manager's Certificate, the Prometheus-Operator's
/// ServiceMonitor) labelled as the cluster `cluster`'s: one metadata LIST, so a Certificate no
/// longer wanted (certManager turned off, the tiers unified) can be found and deleted. Used only
/// while that kind's watch has not listed (`optional_watch`).
pub async fn list_unwatched(
    client: &kube::Client,
    namespace: &str,
    cluster: &str,
    kind: ManagedKind,
) -> Result<Vec<ObservedMeta>, Error> {
    let api = dynamic_api(client, namespace, kind);
    let selector = format!("{}={cluster}", vko_api::consts::labels::CLUSTER);
    match api
        .list_metadata(&kube::api::ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => Ok(list
            .items
            .iter()
            .map(|object| ObservedMeta::from_meta(kind, &object.metadata))
            .collect()),
        // The CRD went away since the last discovery: nothing of that kind is left.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(error) => Err(Error::ListFailed {
            kind: kind.name(),
            namespace: namespace.to_owned(),
            message: error.to_string(),
        }),
    }
}

/// Deletes `stale` objects, each with a UID precondition so a replacement under the same name
/// (possibly someone else's) is never hit.
pub async fn delete_objects(
    client: &kube::Client,
    namespace: &str,
    stale: &[ObservedMeta],
    report: &mut ApplyReport,
) {
    for meta in stale {
        let Some(uid) = meta.uid.clone() else {
            continue;
        };
        let api = dynamic_api(client, namespace, meta.kind);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match api.delete(&meta.name, &params).await {
            Ok(_) => report.deleted.push((meta.kind, meta.name.clone())),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                report
                    .errors
                    .push(Error::from_write(meta.kind.name(), &meta.name, &error))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(kind: ManagedKind, name: &str, controller: Option<&str>) -> ObservedMeta {
        ObservedMeta {
            kind,
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            controller_uid: controller.map(str::to_owned),
            terminating: false,
            adoptable: false,
        }
    }

    #[test]
    fn only_a_controller_reference_to_this_uid_makes_an_object_ours() {
        assert_eq!(ownership(None, "me"), Ownership::Absent);
        let ours = meta(ManagedKind::ConfigMap, "a-config", Some("me"));
        assert_eq!(ownership(Some(&ours), "me"), Ownership::Ours);
        let unowned = meta(ManagedKind::ConfigMap, "a-config", None);
        assert_eq!(ownership(Some(&unowned), "me"), Ownership::Foreign);
        // A former Valkey of the same name (other UID) does not make it ours either.
        let other = meta(ManagedKind::ConfigMap, "a-config", Some("previous"));
        assert_eq!(ownership(Some(&other), "me"), Ownership::Foreign);
    }

    fn observed(body: &Value, controller: Option<&str>) -> ObservedObject {
        ObservedObject {
            meta: meta(ManagedKind::ConfigMap, "a-config", controller),
            live: Some(body.clone()),
        }
    }

    #[test]
    fn only_our_object_whose_live_copy_holds_the_desired_one_is_left_unwritten() {
        let mut desired = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a-config"}, "data": {"k": "v"}});
        vko_render::stamp_applied_hash(&mut desired);
        assert_eq!(
            decide(&desired, None, "me"),
            ApplyDecision::Apply { force: false }
        );
        assert_eq!(
            decide(&desired, Some(&observed(&desired, Some("me"))), "me"),
            ApplyDecision::Unchanged
        );
        // Identical content under someone else's name stays theirs.
        assert_eq!(
            decide(&desired, Some(&observed(&desired, None)), "me"),
            ApplyDecision::Foreign
        );
        let mut drifted = desired.clone();
        drifted["data"]["k"] = "edited".into();
        assert_eq!(
            decide(&desired, Some(&observed(&drifted, Some("me"))), "me"),
            ApplyDecision::Apply { force: true }
        );
        let unserializable = ObservedObject {
            live: None,
            ..observed(&desired, Some("me"))
        };
        assert_eq!(
            decide(&desired, Some(&unserializable), "me"),
            ApplyDecision::Apply { force: true }
        );
    }

    #[test]
    fn stale_objects_are_ours_undesired_and_not_held_back() {
        let observed = vec![
            meta(ManagedKind::Service, "a-rw", Some("me")),
            meta(ManagedKind::Service, "a-r", Some("me")),
            meta(ManagedKind::Service, "a-all", None),
            meta(ManagedKind::PodDisruptionBudget, "a", Some("other")),
            meta(ManagedKind::StatefulSet, "a", Some("me")),
            ObservedMeta {
                terminating: true,
                ..meta(ManagedKind::ConfigMap, "a-replica-config", Some("me"))
            },
        ];
        let desired = BTreeSet::from([(ManagedKind::Service, "a-rw".to_owned())]);
        let keep = BTreeSet::from([(ManagedKind::StatefulSet, "a".to_owned())]);
        let stale = stale_objects(&observed, &desired, &keep, "me");
        let names: Vec<_> = stale.iter().map(|m| (m.kind, m.name.as_str())).collect();
        assert_eq!(names, vec![(ManagedKind::Service, "a-r")]);
    }

    #[test]
    fn desired_objects_are_read_from_rendered_json() {
        let object = DesiredObject::from_value(serde_json::json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "a"}
        }))
        .unwrap();
        assert_eq!(object.key(), (ManagedKind::PodDisruptionBudget, "a".into()));
        assert!(
            DesiredObject::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "x"}}))
            .is_err()
        );
    }
}
