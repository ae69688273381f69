//! Label keys, port numbers and default images: the one place every other crate reads them from.

/// Label keys and the fixed label values the operator writes on every object it manages.
pub mod labels {
    /// `valkey` for data pods and their objects, `sentinel` for the Sentinel tier.
    pub const COMPONENT: &str = "app.kubernetes.io/component";
    /// The name of the `Valkey` resource.
    pub const INSTANCE: &str = "app.kubernetes.io/instance";
    /// Always [`MANAGED_BY_VALUE`].
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// Always [`NAME_VALUE`].
    pub const NAME: &str = "app.kubernetes.io/name";
    /// The image tag of the data image (see `ValkeySpec::image_version`).
    pub const VERSION: &str = "app.kubernetes.io/version";
    /// The name of the `Valkey` resource (operator-specific twin of [`INSTANCE`]).
    pub const CLUSTER: &str = "vko.gtrfc.com/cluster";
    /// Pod-level: the pod's own name.
    pub const INSTANCE_NAME: &str = "vko.gtrfc.com/instanceName";
    /// Pod-level: [`ROLE_MASTER`] or [`ROLE_REPLICA`], kept true by the sidecar.
    pub const INSTANCE_ROLE: &str = "vko.gtrfc.com/instanceRole";

    /// Value of [`MANAGED_BY`].
    pub const MANAGED_BY_VALUE: &str = "vko.gtrfc.com";
    /// The label selector `MANAGED_BY=MANAGED_BY_VALUE`: every object the operator renders carries
    /// it, and its watches of the kinds it writes select on it (ADR 0028).
    pub const MANAGED_BY_SELECTOR: &str = "app.kubernetes.io/managed-by=vko.gtrfc.com";
    /// Value of [`NAME`].
    pub const NAME_VALUE: &str = "valkey";
    /// Value of [`COMPONENT`] on the data tier.
    pub const COMPONENT_VALKEY: &str = "valkey";
    /// Value of [`COMPONENT`] on the Sentinel tier.
    pub const COMPONENT_SENTINEL: &str = "sentinel";
    /// Value of [`INSTANCE_ROLE`] on the master pod.
    pub const ROLE_MASTER: &str = "master";
    /// Value of [`INSTANCE_ROLE`] on replica pods.
    pub const ROLE_REPLICA: &str = "replica";
}

/// Annotation keys written on pods by the sidecar.
pub mod annotations {
    /// On a data pod whose master fenced itself (ADR 0019): `<reason> since <RFC 3339 time>`,
    /// e.g. `AuthorityNotProven since 2026-12-01T20:30:00Z`; absent while not fenced. The
    /// operator turns it into the `MasterFenced` condition.
    pub const FENCED: &str = "vko.gtrfc.com/fenced";
    /// On a data pod with TLS: the SHA-256 (hex) of the certificate its valkey-server serves, as
    /// the sidecar last saw it in a handshake (after start and after each in-place reload, ADR
    /// 0038). The operator compares it with the Secret's `tls.crt` for `TLSMaterialStale`.
    pub const TLS_CERTIFICATE: &str = "vko.gtrfc.com/tls-certificate";
}

/// Port numbers. `i32` because that is what Kubernetes' container and service ports use.
pub mod ports {
    /// Plaintext Valkey.
    pub const VALKEY: i32 = 6379;
    /// TLS Valkey (plaintext + 10000, Valkey's convention).
    pub const VALKEY_TLS: i32 = 16379;
    /// Plaintext Sentinel.
    pub const SENTINEL: i32 = 26379;
    /// TLS Sentinel.
    pub const SENTINEL_TLS: i32 = 36379;
    /// Default metrics exporter port (`spec.metrics.port`).
    pub const METRICS: i32 = 9121;
    /// The cluster observer's health and metrics endpoint.
    pub const OBSERVER: i32 = 8084;
}

/// Default images.
pub mod images {
    /// Default `spec.metrics.image`.
    pub const METRICS_EXPORTER: &str = "oliver006/redis_exporter:v1.66.0";
}

/// Defaults that are written into the CRD schema and applied again by the spec's helper methods
/// (the helpers cover objects that never went through the API server, and nested fields whose
/// parent object was omitted: the API server only defaults inside objects that are present).
pub mod defaults {
    /// `spec.replicas`.
    pub const REPLICAS: i32 = 1;
    /// `spec.sentinel.replicas`.
    pub const SENTINEL_REPLICAS: i32 = 3;
    /// `spec.auth.secretPasswordKey`.
    pub const AUTH_PASSWORD_KEY: &str = "password";
    /// `spec.tls.certManager.issuer.group`.
    pub const CERT_MANAGER_GROUP: &str = "cert-manager.io";
    /// `spec.metrics.serviceMonitor.interval`.
    pub const SCRAPE_INTERVAL: &str = "30s";
    /// `spec.persistence.size`.
    pub const PERSISTENCE_SIZE: &str = "1Gi";
    /// `spec.observer.db`.
    pub const OBSERVER_DB: i32 = 15;
    /// `spec.podDisruptionBudget.maxUnavailable`.
    pub const PDB_MAX_UNAVAILABLE: i32 = 1;
    /// `spec.antiAffinity.topologyKey`.
    pub const TOPOLOGY_KEY: &str = "kubernetes.io/hostname";
    /// `spec.rollingUpdate.syncTimeout`.
    pub const SYNC_TIMEOUT: &str = "5m";
    /// `spec.auth.oldPasswordGracePeriod`.
    pub const OLD_PASSWORD_GRACE_PERIOD: &str = "5m";
    /// Observer container CPU request when `spec.observer.resources` is omitted.
    pub const OBSERVER_CPU_REQUEST: &str = "50m";
    /// Observer container memory request when `spec.observer.resources` is omitted.
    pub const OBSERVER_MEMORY_REQUEST: &str = "64Mi";
    /// Observer container memory limit when `spec.observer.resources` is omitted.
    pub const OBSERVER_MEMORY_LIMIT: &str = "128Mi";
}

/// Deadlines of every Kubernetes API call the operator, the sidecar and `migrate` make (kube's
/// client has no response timeout by default: a hung API server would stall a pass, or a Lease
/// renewal, forever).
pub mod kube_api {
    use std::time::Duration;

    /// Establishing the connection (TCP + TLS).
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    /// From a request written to its response read, for every call except watches (whose idle
    /// streams are bounded by kube-runtime's watcher, which reconnects after the server's watch
    /// timeout plus a margin).
    pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(20);
}
