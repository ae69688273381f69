//! Reflector stores of everything the operator reads, and the kind table that ties a rendered
//! object's `apiVersion`/`kind` to its API resource and its store.
//!
//! Observation reads these stores (kept current by the same watches that trigger reconciles), never
//! fresh GETs.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use vko_api::Valkey;
use vko_api::consts::labels;

use crate::cache_sync::StoreWait;

/// The kinds the operator writes (and may therefore find foreign objects of, or delete).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ManagedKind {
    ServiceAccount,
    Role,
    RoleBinding,
    ConfigMap,
    Service,
    StatefulSet,
    PodDisruptionBudget,
    NetworkPolicy,
    Deployment,
    /// cert-manager; an optional CRD, watched only while served (`optional_watch`).
    Certificate,
    /// Prometheus-Operator; an optional CRD, watched only while served (`optional_watch`).
    ServiceMonitor,
}

impl ManagedKind {
    /// Every kind that has a store (the optional CRD kinds have none).
    pub const WATCHED: [ManagedKind; 9] = [
        ManagedKind::ServiceAccount,
        ManagedKind::Role,
        ManagedKind::RoleBinding,
        ManagedKind::ConfigMap,
        ManagedKind::Service,
        ManagedKind::StatefulSet,
        ManagedKind::PodDisruptionBudget,
        ManagedKind::NetworkPolicy,
        ManagedKind::Deployment,
    ];

    /// The optional CRD kinds: no store of [`Stores`], a gated watch each
    /// (`crate::optional_watch`).
    pub const OPTIONAL: [ManagedKind; 2] = [ManagedKind::Certificate, ManagedKind::ServiceMonitor];

    /// The kind named by a rendered object's `apiVersion` and `kind`.
    pub fn of(api_version: &str, kind: &str) -> Option<ManagedKind> {
        let found = match (api_version, kind) {
            ("v1", "ServiceAccount") => ManagedKind::ServiceAccount,
            ("rbac.authorization.k8s.io/v1", "Role") => ManagedKind::Role,
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => ManagedKind::RoleBinding,
            ("v1", "ConfigMap") => ManagedKind::ConfigMap,
            ("v1", "Service") => ManagedKind::Service,
            ("apps/v1", "StatefulSet") => ManagedKind::StatefulSet,
            ("policy/v1", "PodDisruptionBudget") => ManagedKind::PodDisruptionBudget,
            ("networking.k8s.io/v1", "NetworkPolicy") => ManagedKind::NetworkPolicy,
            ("apps/v1", "Deployment") => ManagedKind::Deployment,
            ("cert-manager.io/v1", "Certificate") => ManagedKind::Certificate,
            ("monitoring.coreos.com/v1", "ServiceMonitor") => ManagedKind::ServiceMonitor,
            _ => return None,
        };
        Some(found)
    }

    /// The `kind` string.
    pub fn name(self) -> &'static str {
        match self {
            ManagedKind::ServiceAccount => "ServiceAccount",
            ManagedKind::Role => "Role",
            ManagedKind::RoleBinding => "RoleBinding",
            ManagedKind::ConfigMap => "ConfigMap",
            ManagedKind::Service => "Service",
            ManagedKind::StatefulSet => "StatefulSet",
            ManagedKind::PodDisruptionBudget => "PodDisruptionBudget",
            ManagedKind::NetworkPolicy => "NetworkPolicy",
            ManagedKind::Deployment => "Deployment",
            ManagedKind::Certificate => "Certificate",
            ManagedKind::ServiceMonitor => "ServiceMonitor",
        }
    }

    /// The API resource (group, version, plural) to write through.
    pub fn api_resource(self) -> ApiResource {
        match self {
            ManagedKind::ServiceAccount => ApiResource::erase::<ServiceAccount>(&()),
            ManagedKind::Role => ApiResource::erase::<Role>(&()),
            ManagedKind::RoleBinding => ApiResource::erase::<RoleBinding>(&()),
            ManagedKind::ConfigMap => ApiResource::erase::<ConfigMap>(&()),
            ManagedKind::Service => ApiResource::erase::<Service>(&()),
            ManagedKind::StatefulSet => ApiResource::erase::<StatefulSet>(&()),
            ManagedKind::PodDisruptionBudget => ApiResource::erase::<PodDisruptionBudget>(&()),
            ManagedKind::NetworkPolicy => ApiResource::erase::<NetworkPolicy>(&()),
            ManagedKind::Deployment => ApiResource::erase::<Deployment>(&()),
            ManagedKind::Certificate => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("cert-manager.io", "v1", "Certificate"),
                "certificates",
            ),
            ManagedKind::ServiceMonitor => ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("monitoring.coreos.com", "v1", "ServiceMonitor"),
                "servicemonitors",
            ),
        }
    }
}

/// Metadata of an observed object: just what ownership decisions need.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedMeta {
    pub kind: ManagedKind,
    pub name: String,
    pub uid: Option<String>,
    /// UID of the controller ownerReference, if any.
    pub controller_uid: Option<String>,
    pub terminating: bool,
    /// Written by the Go operator (its field set not yet taken over by this one).
    pub adoptable: bool,
}

impl ObservedMeta {
    pub fn from_meta(kind: ManagedKind, meta: &ObjectMeta) -> ObservedMeta {
        let controller_uid = meta
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.controller == Some(true))
            .map(|owner| owner.uid.clone());
        ObservedMeta {
            kind,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            controller_uid,
            terminating: meta.deletion_timestamp.is_some(),
            adoptable: meta.managed_fields.iter().flatten().any(|entry| {
                vko_render::is_adoptable(entry, vko_render::GO_OPERATOR_FIELD_MANAGERS)
            }),
        }
    }
}

/// Every kind the operator watches, listed once. Each row is a `Stores` field, its type, the name
/// the cache-sync wait logs, and its watcher configuration; the macro derives the stores, the
/// reflectors, the waits for their initial lists, the Controller's triggers and the test stores
/// from it, so a new kind cannot be watched without being waited for (or the reverse).
/// `owned` kinds trigger the Valkey named by their controller ownerReference; `mapped` kinds are
/// mapped to Valkeys by the Controller's own functions (pods by label); `metadata` kinds are
/// watched and cached as metadata only (Secrets, ADR 0021) and mapped likewise (by reference).
macro_rules! watched_kinds {
    (
        owned { $($owned:ident: $owned_kind:ty => $owned_name:literal, $owned_watch:expr;)* }
        mapped { $($mapped:ident: $mapped_kind:ty => $mapped_name:literal, $mapped_watch:expr;)* }
        metadata { $($meta:ident: $meta_kind:ty => $meta_name:literal, $meta_watch:expr;)* }
    ) => {
        /// Every reflector store.
        #[derive(Clone)]
        pub struct Stores {
            $(pub $owned: Store<$owned_kind>,)*
            $(pub $mapped: Store<$mapped_kind>,)*
            $(pub $meta: Store<PartialObjectMeta<$meta_kind>>,)*
        }

        /// The change streams of the `owned` kinds, for `Controller::owns_stream`.
        pub struct OwnedStreams {
            $(pub $owned: WatchStream<$owned_kind>,)*
        }

        /// The change streams of the `mapped` and `metadata` kinds, for
        /// `Controller::watches_stream`.
        pub struct MappedStreams {
            $(pub $mapped: WatchStream<$mapped_kind>,)*
            $(pub $meta: WatchStream<PartialObjectMeta<$meta_kind>>,)*
        }

        /// The writers of [`Stores::empty`], so a test can put objects into the stores.
        #[cfg(test)]
        #[allow(dead_code, reason = "each test takes the writers of the stores it fills")]
        pub struct StoreWriters {
            $(pub $owned: kube::runtime::reflector::store::Writer<$owned_kind>,)*
            $(pub $mapped: kube::runtime::reflector::store::Writer<$mapped_kind>,)*
            $(pub $meta: kube::runtime::reflector::store::Writer<PartialObjectMeta<$meta_kind>>,)*
        }

        impl Stores {
            /// Starts one reflector per watched kind, cluster-wide, on `client` (the watch client:
            /// its idle watches are bounded by kube-runtime's watcher, not by a read timeout).
            pub fn reflect(client: &kube::Client) -> (Stores, OwnedStreams, MappedStreams) {
                $(let $owned = reflect::<$owned_kind>(client, $owned_watch);)*
                $(let $mapped = reflect::<$mapped_kind>(client, $mapped_watch);)*
                $(let $meta = reflect::<PartialObjectMeta<$meta_kind>>(client, $meta_watch);)*
                (
                    Stores {
                        $($owned: $owned.0,)*
                        $($mapped: $mapped.0,)*
                        $($meta: $meta.0,)*
                    },
                    OwnedStreams { $($owned: $owned.1,)* },
                    MappedStreams {
                        $($mapped: $mapped.1,)*
                        $($meta: $meta.1,)*
                    },
                )
            }

            /// One wait per store for its initial list, named as the cache-sync timeout logs it.
            pub fn initial_lists(&self) -> Vec<(&'static str, StoreWait)> {
                vec![
                    $(store_wait($owned_name, self.$owned.clone()),)*
                    $(store_wait($mapped_name, self.$mapped.clone()),)*
                    $(store_wait($meta_name, self.$meta.clone()),)*
                ]
            }

            /// Empty stores (never listed) and their writers.
            #[cfg(test)]
            pub fn empty() -> (Stores, StoreWriters) {
                $(let $owned = kube::runtime::reflector::store::<$owned_kind>();)*
                $(let $mapped = kube::runtime::reflector::store::<$mapped_kind>();)*
                $(let $meta = kube::runtime::reflector::store::<PartialObjectMeta<$meta_kind>>();)*
                (
                    Stores {
                        $($owned: $owned.0,)*
                        $($mapped: $mapped.0,)*
                        $($meta: $meta.0,)*
                    },
                    StoreWriters {
                        $($owned: $owned.1,)*
                        $($mapped: $mapped.1,)*
                        $($meta: $meta.1,)*
                    },
                )
            }
        }

        impl OwnedStreams {
            /// Every owned kind's changes requeue the Valkey that controls the object.
            pub fn trigger(self, controller: Controller<Valkey>) -> Controller<Valkey> {
                controller $(.owns_stream(self.$owned))*
            }
        }
    };
}

watched_kinds! {
    owned {
        service_accounts: ServiceAccount => "ServiceAccount", owned();
        roles: Role => "Role", owned();
        role_bindings: RoleBinding => "RoleBinding", owned();
        config_maps: ConfigMap => "ConfigMap", owned();
        services: Service => "Service", owned();
        statefulsets: StatefulSet => "StatefulSet", owned();
        pdbs: PodDisruptionBudget => "PodDisruptionBudget", owned();
        network_policies: NetworkPolicy => "NetworkPolicy", owned();
        deployments: Deployment => "Deployment", owned();
    }
    mapped {
        pods: Pod => "Pod", watcher::Config::default().labels(labels::CLUSTER);
    }
    metadata {
        secrets: Secret => "Secret", watcher::Config::default();
    }
}

/// The watch of a kind the operator writes: only objects carrying its managed-by label (ADR 0028),
/// so the cache holds none of the cluster's other ConfigMaps, Services or Roles. A generated name
/// the store does not know is read with one GET before it is written (`apply::apply_objects`).
pub(crate) fn owned() -> watcher::Config {
    watcher::Config::default().labels(labels::MANAGED_BY_SELECTOR)
}

/// A reflector's change stream.
pub type WatchStream<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// A reflector for `K` on every namespace (managedFields dropped, they are often the larger part
/// of an object, except on the rare object the Go operator wrote, whose field set the apply step
/// takes over once: [`vko_render::adopt_managed_fields`]), and its stream of touched objects.
/// With `K = PartialObjectMeta<_>` it watches and caches metadata only.
fn reflect<K>(client: &kube::Client, config: watcher::Config) -> (Store<K>, WatchStream<K>)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let watch = watcher(Api::<K>::all(client.clone()), config).modify(strip_managed_fields);
    let stream = reflector::reflector(writer, watch)
        .default_backoff()
        .touched_objects()
        .boxed();
    (reader, stream)
}

/// Drops an object's managedFields unless the Go operator wrote it (its field set is taken over
/// once by the apply step).
pub(crate) fn strip_managed_fields<K: Resource>(object: &mut K) {
    let written_by_go_operator = object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .any(|entry| vko_render::is_adoptable(entry, vko_render::GO_OPERATOR_FIELD_MANAGERS));
    if !written_by_go_operator {
        object.meta_mut().managed_fields = None;
    }
}

/// Resolves once `store` has listed (`false` if its watch stopped first).
pub fn store_wait<K>(name: &'static str, store: Store<K>) -> (&'static str, StoreWait)
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    (
        name,
        Box::pin(async move { store.wait_until_ready().await.is_ok() }),
    )
}

/// An observed object: its metadata and the whole object as JSON (for the apply step's
/// "unchanged?" check). `live` is `None` only if the object could not be serialized.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedObject {
    pub meta: ObservedMeta,
    pub live: Option<serde_json::Value>,
}

impl ObservedObject {
    pub fn of<K: Resource + serde::Serialize>(kind: ManagedKind, object: &K) -> ObservedObject {
        ObservedObject {
            meta: ObservedMeta::from_meta(kind, object.meta()),
            live: serde_json::to_value(object).ok(),
        }
    }
}

fn get_object<K>(
    store: &Store<K>,
    kind: ManagedKind,
    namespace: &str,
    name: &str,
) -> Option<ObservedObject>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + 'static,
{
    store
        .get(&ObjectRef::new(name).within(namespace))
        .map(|object| ObservedObject::of(kind, object.as_ref()))
}

fn metas_in<K>(store: &Store<K>, kind: ManagedKind, namespace: &str) -> Vec<ObservedMeta>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|object| object.namespace().as_deref() == Some(namespace))
        .map(|object| ObservedMeta::from_meta(kind, object.meta()))
        .collect()
}

impl Stores {
    /// The observed object of `kind` under `namespace/name`; `None` when the store has none (or the
    /// kind has no store).
    pub fn object(&self, kind: ManagedKind, namespace: &str, name: &str) -> Option<ObservedObject> {
        match kind {
            ManagedKind::ServiceAccount => {
                get_object(&self.service_accounts, kind, namespace, name)
            }
            ManagedKind::Role => get_object(&self.roles, kind, namespace, name),
            ManagedKind::RoleBinding => get_object(&self.role_bindings, kind, namespace, name),
            ManagedKind::ConfigMap => get_object(&self.config_maps, kind, namespace, name),
            ManagedKind::Service => get_object(&self.services, kind, namespace, name),
            ManagedKind::StatefulSet => get_object(&self.statefulsets, kind, namespace, name),
            ManagedKind::PodDisruptionBudget => get_object(&self.pdbs, kind, namespace, name),
            ManagedKind::NetworkPolicy => get_object(&self.network_policies, kind, namespace, name),
            ManagedKind::Deployment => get_object(&self.deployments, kind, namespace, name),
            ManagedKind::Certificate | ManagedKind::ServiceMonitor => None,
        }
    }

    /// Every watched object in `namespace`, of every managed kind.
    pub fn all_in(&self, namespace: &str) -> Vec<ObservedMeta> {
        let mut out = Vec::new();
        for kind in ManagedKind::WATCHED {
            out.extend(match kind {
                ManagedKind::ServiceAccount => metas_in(&self.service_accounts, kind, namespace),
                ManagedKind::Role => metas_in(&self.roles, kind, namespace),
                ManagedKind::RoleBinding => metas_in(&self.role_bindings, kind, namespace),
                ManagedKind::ConfigMap => metas_in(&self.config_maps, kind, namespace),
                ManagedKind::Service => metas_in(&self.services, kind, namespace),
                ManagedKind::StatefulSet => metas_in(&self.statefulsets, kind, namespace),
                ManagedKind::PodDisruptionBudget => metas_in(&self.pdbs, kind, namespace),
                ManagedKind::NetworkPolicy => metas_in(&self.network_policies, kind, namespace),
                ManagedKind::Deployment => metas_in(&self.deployments, kind, namespace),
                ManagedKind::Certificate | ManagedKind::ServiceMonitor => Vec::new(),
            });
        }
        out
    }

    /// The Secret's metadata (the watch keeps no data; `secrets::SecretData` reads it).
    pub fn secret_meta(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<PartialObjectMeta<Secret>>> {
        self.secrets.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn statefulset(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.statefulsets
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Pods labelled as belonging to the cluster `name` in `namespace`.
    pub fn cluster_pods(&self, namespace: &str, name: &str) -> Vec<Arc<Pod>> {
        self.pods.state_filter(|pod| {
            pod.namespace().as_deref() == Some(namespace)
                && pod
                    .labels()
                    .get(vko_api::consts::labels::CLUSTER)
                    .map(String::as_str)
                    == Some(name)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rendered_kind_is_known_and_round_trips_to_its_resource() {
        for kind in ManagedKind::WATCHED
            .into_iter()
            .chain(ManagedKind::OPTIONAL)
        {
            let resource = kind.api_resource();
            assert_eq!(resource.kind, kind.name());
            assert_eq!(
                ManagedKind::of(&resource.api_version, &resource.kind),
                Some(kind)
            );
        }
        assert_eq!(ManagedKind::of("v1", "Secret"), None);
    }
}
