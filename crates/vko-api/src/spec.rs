//! `spec` of the `Valkey` resource and every sub-object in it.
//!
//! Every optional field is an `Option` that is skipped when `None`, so a resource read from YAML
//! serializes back to exactly what was read. The defaults live in two places on purpose: in the
//! schema (`default:`), so the API server fills them in and `kubectl get -o yaml` shows them, and in
//! the helper methods in `crate::helpers`, because the API server only defaults fields of objects
//! that are present (a default on `spec.persistence.size` does nothing while `spec.persistence` is
//! omitted) and because objects built in code never pass through the API server.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::status::ValkeyStatus;

/// Desired state of one Valkey deployment: a standalone server, a replicated set, or a replicated
/// set watched by Sentinel.
// Each `printcolumn(...)` repeats `type_ = ...`; clippy reads that as a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "vko.gtrfc.com",
    version = "v1",
    kind = "Valkey",
    plural = "valkeys",
    shortname = "vk",
    namespaced,
    status = "ValkeyStatus",
    derive = "PartialEq",
    // Root rules: `self.metadata.name` is visible only here. The limits are those of
    // `vko_render::Names::new` (which stays as the second line); a vko-render test keeps the two
    // in step. 43: the Sentinel StatefulSet `<name>-sentinel` labels its pods
    // `controller-revision-hash: <name>-sentinel-<hash>` (hash: at most 10 characters, a
    // uint32's decimal digits), and a label value holds at most 63: 43 + 9 + 1 + 10 = 63.
    validation = Rule::new("size(self.metadata.name) <= 43").message(
        "metadata.name must be at most 43 characters: the Sentinel pods are labelled \
         controller-revision-hash=<name>-sentinel-<hash of up to 10 characters>, 20 more than \
         the name, and a label value holds at most 63"
    ),
    validation = Rule::new("self.metadata.name.matches('^[a-z]')").message(
        "metadata.name must start with a lowercase letter: the generated Service names \
         (<name>-rw, <name>-headless, ...) must be DNS-1035 labels"
    ),
    validation = Rule::new("!self.metadata.name.contains('.')").message(
        "metadata.name must not contain a dot: the generated Service names (<name>-rw, \
         <name>-headless, ...) must be DNS-1035 labels (lowercase letters, digits and '-')"
    ),
    doc = "A Valkey deployment managed by the vko operator: data pods, optional Sentinel, TLS, \
           persistence, metrics and a health observer.",
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".spec.replicas",
        description = "Requested number of Valkey pods"
    ),
    printcolumn(
        name = "Ready",
        type_ = "integer",
        json_path = ".status.readyReplicas",
        description = "Valkey pods that are ready"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        json_path = ".status.phase",
        description = "Lifecycle phase"
    ),
    printcolumn(
        name = "Master",
        type_ = "string",
        json_path = ".status.masterPod",
        description = "Pod that currently answers as master"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        json_path = ".spec.image",
        priority = 1,
        description = "Valkey image"
    ),
    printcolumn(
        name = "OperatorVersion",
        type_ = "string",
        json_path = ".status.operatorVersion",
        priority = 1,
        description = "Version of the operator that last reconciled this resource"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema_tidy::tidy)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.sentinel) || !has(self.sentinel.allowUnencrypted) || !self.sentinel.allowUnencrypted || (has(self.tls) && has(self.tls.enabled) && self.tls.enabled)",
        "message": "sentinel.allowUnencrypted requires tls.enabled: true (without TLS, Sentinel is plaintext anyway)",
        "fieldPath": ".sentinel.allowUnencrypted"
    }
]))]
pub struct ValkeySpec {
    /// Number of Valkey data pods, 1-100. With more than one pod, pod 0 starts as master and the
    /// others replicate from it.
    // 100: see ADR 0003 (the operator dials and lists every pod of the tier on each pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1), range(min = 1, max = 100))]
    pub replicas: Option<i32>,

    /// Valkey container image, for example `valkey/valkey:8.0`. May be pinned by digest
    /// (`repo:tag@sha256:...`). Required.
    #[schemars(length(min = 1))]
    pub image: String,

    /// Sentinel: a separate set of pods that watches the data pods and fails over automatically
    /// when the master is lost. Omitted means no Sentinel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel: Option<SentinelSpec>,

    /// Password authentication for Valkey (and Sentinel). Omitted means no password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,

    /// TLS for client, replication and Sentinel traffic. Omitted means plaintext only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// Prometheus exporter sidecar in every Valkey pod, its Service and ServiceMonitor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<MetricsSpec>,

    /// NetworkPolicies that admit only the traffic the deployment needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicySpec>,

    /// Persistent storage for the data pods. Omitted means data lives in memory (emptyDir) only.
    /// Storage settings are fixed once the StatefulSet exists; see the documentation before
    /// changing them on a running deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<PersistenceSpec>,

    /// Cluster observer: a small Deployment that continuously health-checks the deployment and
    /// reports through its readiness and Prometheus metrics on port 8084.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer: Option<ObserverSpec>,

    /// PodDisruptionBudgets for the data pods and (with Sentinel) the Sentinel pods. Omitted means
    /// the operator creates none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetSpec>,

    /// Pod anti-affinity that spreads the data pods (and separately the Sentinel pods) across
    /// nodes or zones. Omitted means off: no anti-affinity term is rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anti_affinity: Option<AntiAffinitySpec>,

    /// Timing of the operator's failover-aware rolling updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateSpec>,

    /// Extra labels for the Valkey data pods. Changing them rolls the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,

    /// Extra annotations for the Valkey data pods. Changing them rolls the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,

    /// CPU and memory requests and limits of the Valkey container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::schema_tidy::resource_quantities)]
    pub resources: Option<ResourceRequirements>,
}

/// Sentinel settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SentinelSpec {
    /// Run Sentinel next to the data pods and let it fail over automatically. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// Number of Sentinel pods, 1-9. Use an odd number of 3 or more: a failover needs a majority
    /// (replicas/2 + 1), so 2 Sentinels tolerate no Sentinel outage at all. Default 3.
    // 9: see ADR 0003 (tolerates 4 Sentinel outages; every further Sentinel only adds gossip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 3), range(min = 1, max = 9))]
    pub replicas: Option<i32>,

    /// Keep the plaintext Sentinel port 26379 open next to the TLS port 36379. Only allowed
    /// together with tls.enabled: true. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub allow_unencrypted: Option<bool>,

    /// Let clients talk to Sentinel without a password. Sentinel itself still authenticates to
    /// the data pods. Only has an effect when spec.auth is set. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub disable_auth: Option<bool>,

    /// Extra labels for the Sentinel pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_labels: Option<BTreeMap<String, String>>,

    /// Extra annotations for the Sentinel pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_annotations: Option<BTreeMap<String, String>>,

    /// CPU and memory requests and limits of the Sentinel container (also applied to its init
    /// container, so a namespace ResourceQuota admits the pod). Changing them rolls the
    /// Sentinel pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::schema_tidy::resource_quantities)]
    pub resources: Option<ResourceRequirements>,
}

/// Password authentication.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// Name of a Secret in the same namespace that holds the password. Authentication is on
    /// when this is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("x-kubernetes-validations" = [{
        "rule": r"self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
        "message": "auth.secretName must be a valid Secret name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
    }]))]
    pub secret_name: Option<String>,

    /// Key inside the Secret whose value is the password. Default `password`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "password"), length(min = 1, max = 253), extend("x-kubernetes-validations" = [{
        "rule": r"self.matches('^[-._a-zA-Z0-9]+$')",
        "message": "auth.secretPasswordKey must be a valid Secret key: letters, digits, '-', '_' and '.'"
    }]))]
    pub secret_password_key: Option<String>,

    /// When the password in the Secret changes, how long the old one is still accepted once
    /// every server and Sentinel accepts the new one: the time your clients have to move to the
    /// new password. Nothing restarts. Keep it above the kubelet's Secret-volume update delay
    /// (about a minute by default). A duration such as `5m`, `90s` or `0s`. Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "5m"), length(max = 64), extend("x-kubernetes-validations" = [{
        "rule": r"self.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$')",
        "message": "auth.oldPasswordGracePeriod must be a duration such as 5m, 90s or 0s"
    }]))]
    pub old_password_grace_period: Option<String>,
}

/// TLS settings.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.enabled) || !self.enabled || has(self.certManager) != has(self.secretName)",
        "message": "tls.enabled requires exactly one of tls.certManager or tls.secretName"
    },
    {
        "rule": "!has(self.allowUnencrypted) || !self.allowUnencrypted || (has(self.enabled) && self.enabled)",
        "message": "tls.allowUnencrypted requires tls.enabled: true",
        "fieldPath": ".allowUnencrypted"
    }
]))]
pub struct TlsSpec {
    /// Turn TLS on: Valkey listens on 16379 and Sentinel on 36379, and replication is encrypted.
    /// Needs exactly one of certManager or secretName. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// Also keep the plaintext Valkey port 6379 open (dual-port mode, e.g. while migrating
    /// clients). Replication stays encrypted. Only allowed with enabled: true. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub allow_unencrypted: Option<bool>,

    /// Use one certificate, valid for both the Valkey and the Sentinel host names, for both
    /// tiers. Helps clients that share one TLS configuration between Sentinel discovery and the
    /// master connection. With cert-manager one Certificate is issued instead of two; with
    /// secretName it is informational. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub unified_certificate: Option<bool>,

    /// Have cert-manager issue the certificates. Set this or secretName, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_manager: Option<CertManagerSpec>,

    /// Name of an existing Secret in the same namespace with `tls.crt`, `tls.key` and `ca.crt`.
    /// Set this or certManager, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253), extend("x-kubernetes-validations" = [{
        "rule": r"self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",
        "message": "tls.secretName must be a valid Secret name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
    }]))]
    pub secret_name: Option<String>,
}

/// Certificates issued by cert-manager.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertManagerSpec {
    /// The cert-manager Issuer or ClusterIssuer that signs the certificates.
    pub issuer: IssuerRef,

    /// Additional DNS names to put into the certificate, besides the Service and pod names the
    /// operator adds itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_dns_names: Option<Vec<String>>,
}

/// Reference to a cert-manager issuer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuerRef {
    /// `Issuer` (in the same namespace) or `ClusterIssuer`.
    pub kind: IssuerKind,

    /// Name of the Issuer or ClusterIssuer.
    #[schemars(length(min = 1))]
    pub name: String,

    /// API group of the issuer. Default `cert-manager.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "cert-manager.io"))]
    pub group: Option<String>,
}

/// Kind of a cert-manager issuer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(transform = crate::schema_tidy::drop_description)]
pub enum IssuerKind {
    /// A namespaced cert-manager Issuer.
    Issuer,
    /// A cluster-wide cert-manager ClusterIssuer.
    ClusterIssuer,
}

/// Metrics exporter sidecar.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsSpec {
    /// Add a Prometheus exporter container to every Valkey pod. Turning it on or off rolls the
    /// pods. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// Exporter image. Default `oliver006/redis_exporter:v1.66.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "oliver006/redis_exporter:v1.66.0"), length(min = 1))]
    pub image: Option<String>,

    /// Port on which the exporter serves `/metrics` (container and Service port named
    /// `metrics`), 1-65535. Default 9121.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 9121), range(min = 1, max = 65535))]
    pub port: Option<i32>,

    /// CPU and memory requests and limits of the exporter container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::schema_tidy::resource_quantities)]
    pub resources: Option<ResourceRequirements>,

    /// Extra command-line arguments for the exporter, e.g. `--check-keys=*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<Vec<String>>,

    /// The dedicated `<name>-metrics` Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<MetricsServiceSpec>,

    /// A Prometheus-Operator ServiceMonitor for the metrics Service (and, with the observer, one
    /// for the observer's Service). Skipped (not an error) when the monitoring.coreos.com CRDs
    /// are not installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor: Option<ServiceMonitorSpec>,
}

/// The metrics Service.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsServiceSpec {
    /// Create the `<name>-metrics` Service. An enabled ServiceMonitor forces it on. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub enabled: Option<bool>,

    /// Extra labels for the metrics Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The Prometheus-Operator ServiceMonitor.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorSpec {
    /// Create a ServiceMonitor `<name>-metrics` that selects the metrics Service; with
    /// `observer.enabled`, also the headless Service and ServiceMonitor `<name>-observer` (its
    /// /metrics on 8084). Needs `metrics.enabled`. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// How often Prometheus scrapes, as a Prometheus duration such as `30s` or `1m`.
    /// Default `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "30s"), length(max = 64), extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^([0-9]+(ms|s|m|h|d|w|y))+$')",
        "message": "serviceMonitor.interval must be a Prometheus duration such as 30s, 1m or 1m30s"
    }]))]
    pub interval: Option<String>,

    /// Timeout of one scrape, as a Prometheus duration such as `10s`. Omitted means
    /// Prometheus' own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^([0-9]+(ms|s|m|h|d|w|y))+$')",
        "message": "serviceMonitor.scrapeTimeout must be a Prometheus duration such as 10s or 1m"
    }]))]
    pub scrape_timeout: Option<String>,

    /// Extra labels for the ServiceMonitor, typically to match a Prometheus
    /// `serviceMonitorSelector` (e.g. `release: prometheus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// NetworkPolicies.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Create NetworkPolicies for the data, Sentinel and observer pods. false removes the ones
    /// the operator created. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// Prefix for the NetworkPolicy names, joined with `-`. Lowercase letters, digits and `-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63), extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",
        "message": "networkPolicy.namePrefix must be lowercase letters, digits and '-', starting and ending with a letter or digit"
    }]))]
    pub name_prefix: Option<String>,

    /// Who may reach the metrics exporter's port (`metrics.port`), as NetworkPolicy peers (for
    /// Prometheus in another namespace, e.g. a `namespaceSelector` on
    /// `kubernetes.io/metadata.name: monitoring`). Omitted: pods in this namespace only. The
    /// exporter dials any `/scrape?target=` it is given, so the port is not opened wider by
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 32), extend("x-kubernetes-validations" = [{
        "rule": "self.all(p, has(p.podSelector) || has(p.namespaceSelector) || has(p.ipBlock))",
        "message": "every networkPolicy.metricsFrom entry needs a podSelector, a namespaceSelector or an ipBlock (an empty one would admit everyone)"
    }]))]
    pub metrics_from: Option<Vec<NetworkPolicyPeer>>,
}

/// Persistent storage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PersistenceSpec {
    /// Give every data pod a PersistentVolumeClaim for `/data`. Fixed once the StatefulSet
    /// exists: toggling it later blocks the StatefulSet until it is recreated. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// How Valkey saves data: `rdb` (snapshots), `aof` (append-only file) or `both`. Can be
    /// changed at any time (rolls the pods). Default `rdb`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "rdb"))]
    pub mode: Option<PersistenceMode>,

    /// StorageClass of the claims. Omitted or empty means the cluster's default StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,

    /// Size of each claim, a positive quantity such as `1Gi`. Default `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "1Gi"), extend("x-kubernetes-validations" = [{
        "rule": "type(self) == int ? self > 0 : (isQuantity(self) && quantity(self).isGreaterThan(quantity('0')))",
        "message": "persistence.size must be a positive quantity such as 1Gi or 500Mi"
    }]))]
    pub size: Option<Quantity>,
}

/// How Valkey persists data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = crate::schema_tidy::drop_description)]
pub enum PersistenceMode {
    /// Periodic snapshots (RDB).
    #[default]
    Rdb,
    /// Append-only file (AOF).
    Aof,
    /// Both snapshots and append-only file.
    Both,
}

/// Cluster observer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserverSpec {
    /// Deploy the observer. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// Valkey database index (0-15) in which the observer writes its health key. Default 15.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 15), range(min = 0, max = 15))]
    pub db: Option<i32>,

    /// Log verbosity: `debug`, `info`, `warn` or `error`. `debug` adds stack traces to errors.
    /// Default `info`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "info"))]
    pub log_level: Option<ObserverLogLevel>,

    /// Whether the observer presents a client certificate (mutual TLS) to Valkey and Sentinel.
    /// Only has an effect with tls.enabled: true; the observer always verifies the servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtls: Option<ObserverMtlsSpec>,

    /// CPU and memory of the observer container. Omitted means requests of 50m CPU and 64Mi
    /// memory and a 128Mi memory limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(transform = crate::schema_tidy::resource_quantities)]
    pub resources: Option<ResourceRequirements>,

    /// Which failed checks make the observer report not-ready. Failures are always logged.
    /// Every check counts unless set to false here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_when: Option<ObserverUnreadyWhenSpec>,
}

/// Observer log verbosity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = crate::schema_tidy::drop_description)]
pub enum ObserverLogLevel {
    /// Everything, with stack traces on errors.
    Debug,
    /// Normal operation.
    #[default]
    Info,
    /// Warnings and errors only.
    Warn,
    /// Errors only.
    Error,
}

/// Observer client certificates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserverMtlsSpec {
    /// Present a client certificate to the Valkey pods. Default false (server-only TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub valkey: Option<bool>,

    /// Present a client certificate to the Sentinel pods. Default false (server-only TLS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub sentinel: Option<bool>,
}

/// Which observer checks affect readiness. Each defaults to true.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObserverUnreadyWhenSpec {
    /// Not ready when PING to the master fails. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub master_unreachable: Option<bool>,

    /// Not ready when the health key cannot be written to the master. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub write_test_failure: Option<bool>,

    /// Not ready when the health key cannot be read back from the master. Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub read_test_failure: Option<bool>,

    /// Not ready when a replica is disconnected or still in a full sync (more than one
    /// replica only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub replica_sync_failure: Option<bool>,

    /// Not ready when a replica returns a stale or missing health key (more than one replica
    /// only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub replica_read_test_failure: Option<bool>,

    /// Not ready when a Sentinel does not answer PING (Sentinel only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub sentinel_unreachable: Option<bool>,

    /// Not ready when the Sentinels disagree about the master address (Sentinel only).
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub sentinel_quorum_failure: Option<bool>,

    /// Not ready when a Sentinel flags the master as down (s_down or o_down; Sentinel only).
    /// Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub sentinel_master_down: Option<bool>,

    /// Not ready when a Sentinel knows the master by bare IP instead of its DNS name (Sentinel
    /// only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub sentinel_master_hostname_invalid: Option<bool>,

    /// Not ready when a Sentinel knows a replica by bare IP instead of its DNS name (Sentinel
    /// only). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = true))]
    pub sentinel_replica_hostnames_invalid: Option<bool>,
}

/// PodDisruptionBudgets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDisruptionBudgetSpec {
    /// Create a budget for the data pods and, with Sentinel, one that keeps the Sentinel quorum
    /// (replicas/2 + 1 available). Tiers with fewer than 2 pods get none. Default false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub enabled: Option<bool>,

    /// How many data pods a drain or eviction may take at the same time, at least 1. Applies
    /// to the data pods only. Default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1), range(min = 1))]
    pub max_unavailable: Option<i32>,
}

/// Pod anti-affinity.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AntiAffinitySpec {
    /// `off` (no term), `soft` (the scheduler prefers to spread) or `hard` (pods that cannot be
    /// spread stay Pending). Changing it rolls the pods. Default `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "off"))]
    pub mode: Option<AntiAffinityMode>,

    /// Node label whose values are the spread domains, e.g. `topology.kubernetes.io/zone`.
    /// Default `kubernetes.io/hostname`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "kubernetes.io/hostname"), length(min = 1, max = 316))]
    pub topology_key: Option<String>,
}

/// Anti-affinity strength.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(transform = crate::schema_tidy::drop_description)]
pub enum AntiAffinityMode {
    /// No anti-affinity term.
    #[default]
    Off,
    /// Preferred spread (weight 100).
    Soft,
    /// Required spread.
    Hard,
}

/// Rolling update timing.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateSpec {
    /// How long to wait for a replaced pod to finish its replication sync (and for a replaced
    /// pod to become available) before the update stops waiting and reports it. A positive
    /// duration such as `5m`, `90s` or `1h30m`. Raise it for large datasets. Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "5m"), length(max = 64), extend("x-kubernetes-validations" = [{
        "rule": r"self.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$') && self.matches('[1-9]')",
        "message": "rollingUpdate.syncTimeout must be a positive duration such as 5m, 90s or 1h30m"
    }]))]
    pub sync_timeout: Option<String>,
}
