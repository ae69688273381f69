//! Watches of the optional CRD kinds (cert-manager's Certificate, the Prometheus-Operator's
//! ServiceMonitor), open only while their API group is served ([`crate::discovery`]; ADR 0046).
//!
//! While a kind's watch has listed, the apply step reads that kind from it like any other store:
//! no GET of a desired object and no LIST by the cluster's label in a steady-state pass. While
//! it has not (the group just appeared, the watch failed and is listing again), the step falls
//! back to one GET per desired object and one LIST per pass, as before the watch.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use tokio_util::sync::CancellationToken;

use crate::discovery::OptionalApis;
use crate::stores::{self, ManagedKind, ObservedMeta, ObservedObject};

/// How often a kind's served flag is looked at (an atomic, no request).
pub const GATE_POLL: Duration = Duration::from_secs(1);
/// After a failed watch, how long before it lists again (passes list meanwhile).
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(5);

/// The store of one optional kind, present only while its watch has listed and runs.
#[derive(Clone, Default)]
struct Listed(Arc<RwLock<Option<Store<DynamicObject>>>>);

impl Listed {
    fn get(&self) -> Option<Store<DynamicObject>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, store: Option<Store<DynamicObject>>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = store;
    }
}

/// The optional kinds' stores. [`OptionalStores::default`] has never listed (every pass falls
/// back to GET and LIST).
#[derive(Clone, Default)]
pub struct OptionalStores {
    certificates: Listed,
    service_monitors: Listed,
}

impl OptionalStores {
    /// Starts one gated watch per optional kind on `client` (the watch client) until `shutdown`.
    pub fn spawn(
        client: &kube::Client,
        apis: Arc<OptionalApis>,
        shutdown: &CancellationToken,
    ) -> OptionalStores {
        let stores = OptionalStores::default();
        for kind in ManagedKind::OPTIONAL {
            if let Some(slot) = stores.slot(kind) {
                tokio::spawn(watch(
                    client.clone(),
                    kind,
                    slot.clone(),
                    apis.clone(),
                    shutdown.clone(),
                ));
            }
        }
        stores
    }

    fn slot(&self, kind: ManagedKind) -> Option<&Listed> {
        match kind {
            ManagedKind::Certificate => Some(&self.certificates),
            ManagedKind::ServiceMonitor => Some(&self.service_monitors),
            _ => None,
        }
    }

    fn listed(&self, kind: ManagedKind) -> Option<Store<DynamicObject>> {
        self.slot(kind).and_then(Listed::get)
    }

    /// The observed object of an optional `kind` under `namespace/name`; `None` when its watch
    /// has not listed or holds no such object (the apply step then GETs the name).
    pub fn object(&self, kind: ManagedKind, namespace: &str, name: &str) -> Option<ObservedObject> {
        let store = self.listed(kind)?;
        let key = ObjectRef::new_with(name, kind.api_resource()).within(namespace);
        store
            .get(&key)
            .map(|object| ObservedObject::of(kind, object.as_ref()))
    }

    /// Every object of an optional `kind` in `namespace` the watch holds; `None` while it has not
    /// listed (the pass then LISTs the kind by the cluster's label).
    pub fn listed_in(&self, kind: ManagedKind, namespace: &str) -> Option<Vec<ObservedMeta>> {
        let store = self.listed(kind)?;
        Some(
            store
                .state()
                .iter()
                .filter(|object| object.namespace().as_deref() == Some(namespace))
                .map(|object| ObservedMeta::from_meta(kind, &object.metadata))
                .collect(),
        )
    }

    /// Stores that hold `objects` as listed, for tests.
    #[cfg(test)]
    pub fn listed_with(kind: ManagedKind, objects: Vec<DynamicObject>) -> OptionalStores {
        let stores = OptionalStores::default();
        let mut writer = reflector::store::Writer::new(kind.api_resource());
        writer.apply_watcher_event(&watcher::Event::Init);
        for object in objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(object));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        if let Some(slot) = stores.slot(kind) {
            slot.set(Some(writer.as_reader()));
        }
        stores
    }
}

/// Runs `kind`'s watch while its group is served: closed while it is not (a watch of a resource
/// the server does not serve fails on every try), reopened with a fresh list after an error.
async fn watch(
    client: kube::Client,
    kind: ManagedKind,
    slot: Listed,
    apis: Arc<OptionalApis>,
    shutdown: CancellationToken,
) {
    loop {
        slot.set(None);
        while !apis.served().serves(kind) {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(GATE_POLL) => {}
            }
        }
        let resource = kind.api_resource();
        let writer = reflector::store::Writer::new(resource.clone());
        let reader = writer.as_reader();
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let events = watcher(api, stores::owned()).modify(stores::strip_managed_fields);
        let mut events = std::pin::pin!(reflector::reflector(writer, events));
        let mut gate = tokio::time::interval(GATE_POLL);
        let failure = loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = gate.tick() => {
                    if !apis.served().serves(kind) {
                        tracing::info!(kind = kind.name(), "group no longer served; watch closed");
                        break None;
                    }
                }
                event = events.next() => match event {
                    Some(Ok(watcher::Event::InitDone)) => {
                        tracing::debug!(kind = kind.name(), "optional kind listed");
                        slot.set(Some(reader.clone()));
                    }
                    Some(Ok(_)) => {}
                    Some(Err(error)) => break Some(error.to_string()),
                    None => break Some("the watch ended".to_owned()),
                },
            }
        };
        if let Some(error) = failure {
            slot.set(None);
            tracing::warn!(
                kind = kind.name(),
                %error,
                "optional kind's watch failed; passes GET and LIST it until it has listed again"
            );
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RETRY_AFTER_ERROR) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(namespace: &str, name: &str, owner: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {
                "name": name, "namespace": namespace, "uid": format!("uid-{name}"),
                "ownerReferences": [{"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                                     "name": "a", "uid": owner, "controller": true}]
            },
            "spec": {"secretName": format!("{name}-secret")}
        }))
        .unwrap()
    }

    #[test]
    fn a_kind_whose_watch_has_not_listed_answers_nothing_so_the_pass_gets_and_lists() {
        let stores = OptionalStores::default();
        assert_eq!(stores.object(ManagedKind::Certificate, "ns", "a-tls"), None);
        assert_eq!(stores.listed_in(ManagedKind::Certificate, "ns"), None);
        assert_eq!(stores.listed_in(ManagedKind::ServiceMonitor, "ns"), None);
    }

    #[test]
    fn a_listed_kind_answers_from_its_store_by_namespace() {
        let stores = OptionalStores::listed_with(
            ManagedKind::Certificate,
            vec![
                certificate("ns", "a-tls", "uid-a"),
                certificate("ns", "a-sentinel-tls", "uid-a"),
                certificate("other", "a-tls", "uid-b"),
            ],
        );
        let found = stores
            .object(ManagedKind::Certificate, "ns", "a-tls")
            .expect("held");
        assert_eq!(found.meta.uid.as_deref(), Some("uid-a-tls"));
        assert_eq!(found.meta.controller_uid.as_deref(), Some("uid-a"));
        assert_eq!(found.live.unwrap()["spec"]["secretName"], "a-tls-secret");
        // Listed and not there: absent (the apply step's GET tells whether someone else has it).
        assert_eq!(stores.object(ManagedKind::Certificate, "ns", "b-tls"), None);
        let mut names: Vec<String> = stores
            .listed_in(ManagedKind::Certificate, "ns")
            .expect("listed")
            .into_iter()
            .map(|meta| meta.name)
            .collect();
        names.sort();
        assert_eq!(names, ["a-sentinel-tls", "a-tls"]);
        // The other kind's watch has not listed.
        assert_eq!(stores.listed_in(ManagedKind::ServiceMonitor, "ns"), None);
        // Not an optional kind: never answered here.
        assert_eq!(stores.listed_in(ManagedKind::ConfigMap, "ns"), None);
    }
}
