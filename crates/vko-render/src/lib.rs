//! Pure rendering of every Kubernetes object and config file a `Valkey` needs. No I/O.
//!
//! [`render`] turns a `Valkey` plus what the operator observed ([`RenderInputs`]) into every
//! desired object ([`Rendered`]). The same input always gives byte-identical output. The crate
//! depends on `k8s-openapi` types only (no async runtime, no Kubernetes client, no network
//! crate), so other tools can embed it:
//!
//! ```
//! use vko_api::Valkey;
//! use vko_render::{RenderInputs, render};
//!
//! let valkey: Valkey = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "vko.gtrfc.com/v1",
//!     "kind": "Valkey",
//!     "metadata": { "name": "cache", "namespace": "shop" },
//!     "spec": { "replicas": 3, "image": "valkey/valkey:8.0",
//!               "sentinel": { "enabled": true } }
//! }))?;
//! let inputs = RenderInputs::new("shop", "example.org/vko:1.0.0", "1.0.0");
//! let rendered = render(&valkey, &inputs)?;
//!
//! let names: Vec<String> = rendered.statefulsets.iter()
//!     .filter_map(|s| s.metadata.name.clone()).collect();
//! assert_eq!(names, ["cache", "cache-sentinel"]);
//! // Every object as JSON, ready for a server-side apply or `kubectl apply -f -`.
//! assert!(rendered.objects()?.iter().all(|o| o["metadata"]["namespace"] == "shop"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod adopt;
mod applied;
mod conf;
mod data;
mod error;
mod hash;
mod labels;
mod names;
mod objects;
mod pod;
mod ports;
mod sentinel;
mod tier;
mod version;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::Serialize;
use serde_json::Value;
use vko_api::{Valkey, ValkeySpec};

pub use adopt::{GO_OPERATOR_FIELD_MANAGERS, adopt_managed_fields, is_adoptable};
pub use applied::{applied_hash, live_holds, stamp_applied_hash};
pub use conf::{
    DATA_DIR, DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, MASTER_REBOOT_DOWN_AFTER_MS, SENTINEL_CONF_KEY,
    TLS_ACTIVE_CA_FILE, TLS_ACTIVE_CERT_FILE, TLS_ACTIVE_DIR, TLS_ACTIVE_KEY_FILE, TLS_CA_FILE,
    TLS_CERT_FILE, TLS_DIR, TLS_KEY_FILE, VALKEY_CONF_KEY, quote_arg, split_args,
};
pub use data::{SIDECAR_CONTAINER, VALKEY_CONTAINER, sidecar_runs_with_sentinel};
pub use error::RenderError;
pub use hash::{
    canonical_json, config_hash, differs_only_in_operator_image, pod_spec_hash,
    tls_material_fingerprint, tls_trust_fingerprint,
};
pub use labels::{
    APPLIED_HASH_ANNOTATION, CONFIG_HASH_ANNOTATION, Component, METRICS_LABEL,
    OPERATOR_VERSION_ANNOTATION, POD_SPEC_HASH_ANNOTATION, common_labels,
    is_reserved_annotation_key, is_reserved_label_key, selector_labels, version_label_value,
};
pub use names::{MAX_NAME_LENGTH, Names};
pub use pod::{
    ALIVE_SCRIPT, EXPORTER_ADDR_ENV, OBSERVER_BINARY, PASSWORD_FILE_ENV, READY_SCRIPT,
    SIDECAR_BINARY, TLS_HASH_ENV, mounted_auth_secret, paths, pod_has_password_file,
};
pub use ports::{PortPlan, SIDECAR_HEALTH};
pub use sentinel::TLS_RELOAD_CONTAINER;
pub use version::{Feature, ValkeyVersion};

/// The default cluster DNS domain.
pub const DEFAULT_CLUSTER_DOMAIN: &str = "cluster.local";

/// What the operator knows besides the `Valkey` itself.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderInputs {
    /// Namespace of the `Valkey` and of every rendered object.
    pub namespace: String,
    /// Image of the sidecar, the init containers and the observer (the operator's own image).
    pub operator_image: String,
    /// Written as `vko.gtrfc.com/operator-version` on every object.
    pub operator_version: String,
    /// Cluster DNS domain for every pod and Service host name.
    pub cluster_domain: String,
    /// Controller ownerReference (to the `Valkey`) put on every object.
    pub owner: Option<OwnerReference>,
    /// The fingerprint the data pods' template carries for the TLS Secret they mount
    /// ([`TlsSecrets::data`]); a change rolls them. The operator passes
    /// [`tls_trust_fingerprint`] (the CA alone: its sidecars reload a new certificate in place,
    /// ADR 0038); [`tls_material_fingerprint`] rolls on every change. `None` while it is not known
    /// yet: with TLS on, the data StatefulSet is held back (see [`Rendered::skipped`]) until it
    /// is known, so every pod carries it from its first start.
    pub tls_material_hash: Option<String>,
    /// The fingerprint the Sentinel pods' template carries for the Secret they mount (their own
    /// with separate cert-manager certificates, [`TlsSecrets::sentinel`], else the data tier's);
    /// the operator passes [`tls_material_fingerprint`] where Sentinel cannot reload its
    /// certificate, so every change rolls it, and [`tls_trust_fingerprint`] where it can
    /// ([`ValkeyVersion::sentinel_reloads_tls`], ADR 0053). When both tiers mount the same Secret
    /// and this is `None`, `tls_material_hash` is used for both.
    pub sentinel_tls_material_hash: Option<String>,
    /// The Prometheus-Operator CRDs exist: a wanted ServiceMonitor is rendered only then.
    pub prometheus_operator_present: bool,
    /// The cert-manager CRDs exist: wanted Certificates are rendered only then.
    pub cert_manager_present: bool,
    /// Ordinal of the data pod the operator recorded as master. Seeds the `replicaof` line of
    /// the replica config and the Sentinel `monitor` line (default pod 0); it is left out of
    /// the config hash, so moving the master never rolls a pod.
    pub recorded_master: Option<u32>,
    /// Ordinals of data pods that exist right now. The sidecar Role also covers them, so a pod
    /// that is being scaled away can still label itself while it hands over.
    pub live_pod_ordinals: BTreeSet<u32>,
    /// The data StatefulSet's `replicas` when it differs from `spec.replicas`: a scale-down
    /// held while the master serves from an ordinal it would remove (`vko_roll::scale`, ADR
    /// 0024). `None` renders `spec.replicas`.
    pub data_replicas: Option<u32>,
    /// Where the operator pod runs, for the NetworkPolicy rules that admit it. `None` renders
    /// no rule for it (an operator in the same namespace is admitted anyway).
    pub operator_peer: Option<OperatorPeer>,
}

/// The operator pod as a NetworkPolicy peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorPeer {
    /// The operator's namespace.
    pub namespace: String,
    /// Labels that select the operator pod in that namespace.
    pub pod_labels: BTreeMap<String, String>,
}

impl RenderInputs {
    /// Inputs with the defaults: cluster domain `cluster.local`, no owner, nothing observed yet,
    /// neither cert-manager nor the Prometheus-Operator present.
    pub fn new(
        namespace: impl Into<String>,
        operator_image: impl Into<String>,
        operator_version: impl Into<String>,
    ) -> Self {
        RenderInputs {
            namespace: namespace.into(),
            operator_image: operator_image.into(),
            operator_version: operator_version.into(),
            cluster_domain: DEFAULT_CLUSTER_DOMAIN.to_owned(),
            owner: None,
            tls_material_hash: None,
            sentinel_tls_material_hash: None,
            prometheus_operator_present: false,
            cert_manager_present: false,
            recorded_master: None,
            live_pod_ordinals: BTreeSet::new(),
            data_replicas: None,
            operator_peer: None,
        }
    }
}

/// The TLS Secrets the pods mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSecrets {
    /// Secret of the data pods: the user's `spec.tls.secretName` or `<name>-tls`.
    pub data: String,
    /// Secret of the Sentinel pods when it is a different one (`<name>-sentinel-tls`: Sentinel
    /// on, cert-manager, not unified). `None` means the Sentinel pods mount `data` as well.
    pub sentinel: Option<String>,
}

/// The TLS Secrets of a `Valkey`; `None` without TLS. The operator fingerprints exactly these.
pub fn tls_secrets(valkey: &Valkey) -> Result<Option<TlsSecrets>, RenderError> {
    let spec = &valkey.spec;
    if !spec.tls_enabled() {
        return Ok(None);
    }
    let name = valkey_name(valkey)?;
    let names_only = Names::new(name, "x", DEFAULT_CLUSTER_DOMAIN)?;
    Ok(Some(objects::tls_secrets(spec, &names_only)))
}

/// Why a wanted object is not in [`Rendered`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// TLS is on and the fingerprint of the Secret is not known yet (the Secret does not exist
    /// or cert-manager has not issued yet).
    TlsMaterialUnknown,
    /// The cert-manager CRDs are not installed.
    CertManagerMissing,
    /// The Prometheus-Operator CRDs are not installed.
    PrometheusOperatorMissing,
}

impl SkipReason {
    /// Stable CamelCase reason.
    pub fn reason(self) -> &'static str {
        match self {
            SkipReason::TlsMaterialUnknown => "TLSMaterialUnknown",
            SkipReason::CertManagerMissing => "CertManagerMissing",
            SkipReason::PrometheusOperatorMissing => "PrometheusOperatorMissing",
        }
    }
}

/// A wanted object that was not rendered, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Kind of the object.
    pub kind: &'static str,
    /// Name it would have.
    pub name: String,
    /// Why it is missing.
    pub reason: SkipReason,
}

/// Config and pod-spec hash of one tier (also when its StatefulSet was held back).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierHashes {
    /// Value of `vko.gtrfc.com/config-hash`.
    pub config: String,
    /// Value of `vko.gtrfc.com/pod-spec-hash`.
    pub pod_spec: String,
}

/// The hashes of both tiers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashes {
    /// Data tier.
    pub data: TierHashes,
    /// Sentinel tier, when Sentinel is on.
    pub sentinel: Option<TierHashes>,
}

/// The observer's objects.
#[derive(Clone, Debug, PartialEq)]
pub struct ObserverObjects {
    /// `<name>-observer` ServiceAccount (no Role: the observer makes no API calls).
    pub service_account: ServiceAccount,
    /// `<name>-observer` Deployment.
    pub deployment: Deployment,
}

/// The sidecar's RBAC objects, all named `<name>-sidecar`.
#[derive(Clone, Debug, PartialEq)]
pub struct SidecarRbac {
    /// The data pods' ServiceAccount.
    pub service_account: ServiceAccount,
    /// `get` and `patch` on this cluster's own data pods, nothing else.
    pub role: Role,
    /// Binds the Role to the ServiceAccount.
    pub role_binding: RoleBinding,
}

/// Every object one `Valkey` needs.
#[derive(Clone, Debug, PartialEq)]
pub struct Rendered {
    /// Sidecar ServiceAccount, Role, RoleBinding.
    pub rbac: SidecarRbac,
    /// `<name>-config`, `<name>-replica-config` (Sentinel or more than one pod),
    /// `<name>-sentinel-config` (Sentinel).
    pub config_maps: Vec<ConfigMap>,
    /// `-headless`, `-rw`, `-r`/`-all` (more than one pod), `-sentinel-headless`, `-metrics`.
    pub services: Vec<Service>,
    /// cert-manager `Certificate`s (not in k8s-openapi, hence JSON).
    pub certificates: Vec<Value>,
    /// Data StatefulSet, then the Sentinel StatefulSet (either may be held back, see
    /// `skipped`).
    pub statefulsets: Vec<StatefulSet>,
    /// Data and Sentinel PodDisruptionBudgets.
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    /// Data, Sentinel and observer NetworkPolicies.
    pub network_policies: Vec<NetworkPolicy>,
    /// The observer, when enabled.
    pub observer: Option<ObserverObjects>,
    /// The Prometheus-Operator `ServiceMonitor`s (JSON): the exporters', then the observer's.
    pub service_monitors: Vec<Value>,
    /// Hashes written into the pod templates.
    pub hashes: Hashes,
    /// Wanted objects that were not rendered, and why.
    pub skipped: Vec<Skipped>,
}

impl Rendered {
    /// Every object as JSON with `apiVersion` and `kind`, in apply order: RBAC, ConfigMaps,
    /// Services, Certificates, StatefulSets, PodDisruptionBudgets, NetworkPolicies, observer,
    /// ServiceMonitors.
    pub fn objects(&self) -> Result<Vec<Value>, RenderError> {
        fn push<T: Serialize>(
            out: &mut Vec<Value>,
            what: &str,
            object: &T,
        ) -> Result<(), RenderError> {
            out.push(
                serde_json::to_value(object).map_err(|e| RenderError::serialization(what, &e))?,
            );
            Ok(())
        }
        let mut out = Vec::new();
        push(&mut out, "ServiceAccount", &self.rbac.service_account)?;
        push(&mut out, "Role", &self.rbac.role)?;
        push(&mut out, "RoleBinding", &self.rbac.role_binding)?;
        for object in &self.config_maps {
            push(&mut out, "ConfigMap", object)?;
        }
        for object in &self.services {
            push(&mut out, "Service", object)?;
        }
        out.extend(self.certificates.iter().cloned());
        for object in &self.statefulsets {
            push(&mut out, "StatefulSet", object)?;
        }
        for object in &self.pod_disruption_budgets {
            push(&mut out, "PodDisruptionBudget", object)?;
        }
        for object in &self.network_policies {
            push(&mut out, "NetworkPolicy", object)?;
        }
        if let Some(observer) = &self.observer {
            push(&mut out, "ServiceAccount", &observer.service_account)?;
            push(&mut out, "Deployment", &observer.deployment)?;
        }
        out.extend(self.service_monitors.iter().cloned());
        Ok(out)
    }
}

/// Everything derived once per render and shared by the object builders.
pub(crate) struct Ctx<'a> {
    pub spec: &'a ValkeySpec,
    pub inputs: &'a RenderInputs,
    pub names: Names,
    pub ports: PortPlan,
}

impl Ctx<'_> {
    /// Metadata of a top-level object: name, namespace, labels, operator-version annotation,
    /// ownerReference.
    pub fn meta(&self, name: String, labels: BTreeMap<String, String>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.names.namespace().to_owned()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                OPERATOR_VERSION_ANNOTATION.to_owned(),
                self.inputs.operator_version.clone(),
            )])),
            owner_references: self.inputs.owner.clone().map(|owner| vec![owner]),
            ..ObjectMeta::default()
        }
    }

    /// Common labels of a component.
    pub fn labels(&self, component: Component) -> BTreeMap<String, String> {
        common_labels(self.names.name(), component, &self.spec.image)
    }

    /// Selector labels of a component.
    pub fn selector(&self, component: Component) -> BTreeMap<String, String> {
        selector_labels(self.names.name(), component)
    }

    /// Host name of the master the configs are seeded with.
    pub fn seeded_master_fqdn(&self, recorded: Option<u32>) -> String {
        self.names.data_pod_fqdn(recorded.unwrap_or(0))
    }
}

fn valkey_name(valkey: &Valkey) -> Result<&str, RenderError> {
    valkey
        .metadata
        .name
        .as_deref()
        .ok_or_else(|| RenderError::InvalidName {
            field: "metadata.name".to_owned(),
            value: String::new(),
            why: "it is missing",
        })
}

fn context<'a>(valkey: &'a Valkey, inputs: &'a RenderInputs) -> Result<Ctx<'a>, RenderError> {
    let spec = &valkey.spec;
    if let Some(namespace) = valkey.metadata.namespace.as_deref()
        && namespace != inputs.namespace
    {
        return Err(RenderError::InvalidInput {
            field: "namespace",
            why: format!(
                "the Valkey lives in {namespace:?}, not in {:?}",
                inputs.namespace
            ),
        });
    }
    let names = Names::new(
        valkey_name(valkey)?,
        &inputs.namespace,
        &inputs.cluster_domain,
    )?;
    if spec.replicas() < 1 {
        return Err(RenderError::OutOfRange {
            field: "spec.replicas",
            value: spec.replicas().into(),
            min: 1,
        });
    }
    if spec.sentinel_enabled() && spec.sentinel_replicas() < 1 {
        return Err(RenderError::OutOfRange {
            field: "spec.sentinel.replicas",
            value: spec.sentinel_replicas().into(),
            min: 1,
        });
    }
    let data_replicas = inputs
        .data_replicas
        .map_or(i64::from(spec.replicas()), i64::from);
    if let Some(ordinal) = inputs.recorded_master
        && i64::from(ordinal) >= data_replicas
    {
        return Err(RenderError::RecordedMasterOutOfRange {
            ordinal,
            replicas: i32::try_from(data_replicas).unwrap_or(i32::MAX),
        });
    }
    for (field, value) in [
        ("operator_image", &inputs.operator_image),
        ("operator_version", &inputs.operator_version),
    ] {
        if value.is_empty() || value.chars().any(char::is_control) {
            return Err(RenderError::InvalidInput {
                field,
                why: "must be non-empty and free of control characters".to_owned(),
            });
        }
    }
    Ok(Ctx {
        spec,
        inputs,
        names,
        ports: PortPlan::of(spec),
    })
}

/// The master `valkey.conf` (`replica_of: None`) or the replica `valkey.conf` seeded with the
/// given master ordinal.
pub fn valkey_conf(
    valkey: &Valkey,
    inputs: &RenderInputs,
    replica_of: Option<u32>,
) -> Result<String, RenderError> {
    let ctx = context(valkey, inputs)?;
    let master = replica_of.map(|ordinal| ctx.names.data_pod_fqdn(ordinal));
    Ok(conf::render_valkey_conf(ctx.spec, master.as_deref()))
}

/// `sentinel.conf`, monitoring the data pod with the given ordinal.
pub fn sentinel_conf(
    valkey: &Valkey,
    inputs: &RenderInputs,
    master_ordinal: u32,
) -> Result<String, RenderError> {
    let ctx = context(valkey, inputs)?;
    Ok(conf::render_sentinel_conf(
        ctx.spec,
        ctx.names.name(),
        &ctx.names.data_pod_fqdn(master_ordinal),
    ))
}

/// Renders every object a `Valkey` needs.
pub fn render(valkey: &Valkey, inputs: &RenderInputs) -> Result<Rendered, RenderError> {
    let ctx = context(valkey, inputs)?;
    let spec = ctx.spec;
    let mut skipped = Vec::new();

    // The config hash covers the configs as seeded with pod 0, not with the recorded master:
    // a failover must not roll anything.
    let seeded_master = ctx.seeded_master_fqdn(inputs.recorded_master);
    let canonical_master = ctx.seeded_master_fqdn(None);
    let master_conf = conf::render_valkey_conf(spec, None);
    let replica_conf = conf::render_valkey_conf(spec, Some(&seeded_master));
    let data_config_hash = config_hash(&[
        &master_conf,
        &conf::render_valkey_conf(spec, Some(&canonical_master)),
    ]);

    // The master and the replica config of the data tier, both under `valkey.conf`.
    let data_config_map =
        |name, text| objects::config_map(&ctx, name, Component::Valkey, VALKEY_CONF_KEY, text);
    let mut config_maps = vec![data_config_map(ctx.names.config_map(), master_conf)];
    if spec.sentinel_enabled() || spec.replicas() > 1 {
        config_maps.push(data_config_map(
            ctx.names.replica_config_map(),
            replica_conf,
        ));
    }

    let tls = spec
        .tls_enabled()
        .then(|| objects::tls_secrets(spec, &ctx.names));
    let data_tls_hash = inputs.tls_material_hash.as_deref();
    let sentinel_tls_hash = match &tls {
        Some(TlsSecrets {
            sentinel: Some(_), ..
        }) => inputs.sentinel_tls_material_hash.as_deref(),
        _ => inputs
            .sentinel_tls_material_hash
            .as_deref()
            .or(data_tls_hash),
    };

    // Each tier's StatefulSet, and whether its TLS material's fingerprint is still unknown.
    let tls_hash_unknown = |hash: Option<&str>| tls.is_some() && hash.is_none();
    let (data_sts, data_hashes) =
        data::statefulset(&ctx, tls.as_ref(), data_tls_hash, &data_config_hash)?;
    let mut tiers = vec![(data_sts, tls_hash_unknown(data_tls_hash))];

    let mut sentinel_hashes = None;
    if spec.sentinel_enabled() {
        let sentinel_conf_text = conf::render_sentinel_conf(spec, ctx.names.name(), &seeded_master);
        let sentinel_config_hash = config_hash(&[&conf::render_sentinel_conf(
            spec,
            ctx.names.name(),
            &canonical_master,
        )]);
        config_maps.push(objects::config_map(
            &ctx,
            ctx.names.sentinel_config_map(),
            Component::Sentinel,
            SENTINEL_CONF_KEY,
            sentinel_conf_text,
        ));
        let (sentinel_sts, hashes) =
            sentinel::statefulset(&ctx, tls.as_ref(), sentinel_tls_hash, &sentinel_config_hash)?;
        tiers.push((sentinel_sts, tls_hash_unknown(sentinel_tls_hash)));
        sentinel_hashes = Some(hashes);
    }
    let statefulsets = hold_back_without_tls_hash(tiers, &mut skipped);

    let mut certificates = Vec::new();
    if spec.cert_manager().is_some() {
        certificates = present_or_skipped(
            objects::certificates(&ctx)?,
            inputs.cert_manager_present,
            ("Certificate", SkipReason::CertManagerMissing),
            &mut skipped,
        );
    }

    let mut service_monitors = Vec::new();
    if spec.service_monitor_enabled() {
        service_monitors = present_or_skipped(
            objects::service_monitors(&ctx)?,
            inputs.prometheus_operator_present,
            ("ServiceMonitor", SkipReason::PrometheusOperatorMissing),
            &mut skipped,
        );
    }

    Ok(Rendered {
        rbac: objects::sidecar_rbac(&ctx),
        config_maps,
        services: objects::services(&ctx)?,
        certificates,
        statefulsets,
        pod_disruption_budgets: objects::pod_disruption_budgets(&ctx),
        network_policies: objects::network_policies(&ctx),
        observer: objects::observer(&ctx, tls.as_ref())?,
        service_monitors,
        hashes: Hashes {
            data: data_hashes,
            sentinel: sentinel_hashes,
        },
        skipped,
    })
}

/// Objects of a kind another operator defines: all of `wanted` when its API is served, else none,
/// each reported in `skipped` with the kind and reason given.
fn present_or_skipped(
    wanted: Vec<Value>,
    served: bool,
    (kind, reason): (&'static str, SkipReason),
    skipped: &mut Vec<Skipped>,
) -> Vec<Value> {
    if served {
        return wanted;
    }
    skipped.extend(wanted.iter().map(|object| {
        Skipped {
            kind,
            name: object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            reason,
        }
    }));
    Vec::new()
}

/// The tiers' StatefulSets to apply: a tier whose TLS material's fingerprint is not known yet
/// (`true` next to it) is held back instead and reported in `skipped` as
/// [`SkipReason::TlsMaterialUnknown`].
fn hold_back_without_tls_hash(
    tiers: Vec<(StatefulSet, bool)>,
    skipped: &mut Vec<Skipped>,
) -> Vec<StatefulSet> {
    let mut statefulsets = Vec::new();
    for (statefulset, tls_hash_unknown) in tiers {
        if tls_hash_unknown {
            skipped.push(Skipped {
                kind: "StatefulSet",
                name: statefulset.metadata.name.unwrap_or_default(),
                reason: SkipReason::TlsMaterialUnknown,
            });
        } else {
            statefulsets.push(statefulset);
        }
    }
    statefulsets
}
