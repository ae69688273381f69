//! Read accessors on the spec that apply the documented defaults. Other crates read the spec
//! only through these, so an omitted field and a server-defaulted field mean the same thing.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::Error;
use crate::consts::{defaults, images, ports};
use crate::duration::parse_go_duration;
use crate::spec::{
    AntiAffinityMode, CertManagerSpec, ObserverLogLevel, ObserverUnreadyWhenSpec, PersistenceMode,
    ValkeySpec,
};

/// The ten observer checks, each resolved to whether its failure makes the observer not-ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObserverUnreadyChecks {
    /// See `ObserverUnreadyWhenSpec::master_unreachable`.
    pub master_unreachable: bool,
    /// See `ObserverUnreadyWhenSpec::write_test_failure`.
    pub write_test_failure: bool,
    /// See `ObserverUnreadyWhenSpec::read_test_failure`.
    pub read_test_failure: bool,
    /// See `ObserverUnreadyWhenSpec::replica_sync_failure`.
    pub replica_sync_failure: bool,
    /// See `ObserverUnreadyWhenSpec::replica_read_test_failure`.
    pub replica_read_test_failure: bool,
    /// See `ObserverUnreadyWhenSpec::sentinel_unreachable`.
    pub sentinel_unreachable: bool,
    /// See `ObserverUnreadyWhenSpec::sentinel_quorum_failure`.
    pub sentinel_quorum_failure: bool,
    /// See `ObserverUnreadyWhenSpec::sentinel_master_down`.
    pub sentinel_master_down: bool,
    /// See `ObserverUnreadyWhenSpec::sentinel_master_hostname_invalid`.
    pub sentinel_master_hostname_invalid: bool,
    /// See `ObserverUnreadyWhenSpec::sentinel_replica_hostnames_invalid`.
    pub sentinel_replica_hostnames_invalid: bool,
}

impl ObserverUnreadyWhenSpec {
    /// Resolves every omitted check to its default, true.
    pub fn resolve(&self) -> ObserverUnreadyChecks {
        let on = |flag: Option<bool>| flag.unwrap_or(true);
        ObserverUnreadyChecks {
            master_unreachable: on(self.master_unreachable),
            write_test_failure: on(self.write_test_failure),
            read_test_failure: on(self.read_test_failure),
            replica_sync_failure: on(self.replica_sync_failure),
            replica_read_test_failure: on(self.replica_read_test_failure),
            sentinel_unreachable: on(self.sentinel_unreachable),
            sentinel_quorum_failure: on(self.sentinel_quorum_failure),
            sentinel_master_down: on(self.sentinel_master_down),
            sentinel_master_hostname_invalid: on(self.sentinel_master_hostname_invalid),
            sentinel_replica_hostnames_invalid: on(self.sentinel_replica_hostnames_invalid),
        }
    }
}

/// Container resources from `(resource, quantity)` pairs, as the defaults write them
/// (`("cpu", "10m")`).
pub fn resource_requirements(
    requests: &[(&str, &str)],
    limits: &[(&str, &str)],
) -> ResourceRequirements {
    let quantities = |pairs: &[(&str, &str)]| -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(resource, quantity)| ((*resource).to_owned(), Quantity((*quantity).to_owned())))
            .collect()
    };
    ResourceRequirements {
        requests: Some(quantities(requests)),
        limits: Some(quantities(limits)),
        ..ResourceRequirements::default()
    }
}

/// `app.kubernetes.io/version` for an image reference: its tag, `""` for a digest-only
/// reference, `latest` when it has neither.
pub fn image_version(image: &str) -> &str {
    let (name, has_digest) = match image.split_once('@') {
        Some((name, _digest)) => (name, true),
        None => (image, false),
    };
    // A ':' before the last '/' belongs to a registry port, not a tag.
    let last_component = name.rsplit('/').next().unwrap_or(name);
    match last_component.split_once(':') {
        Some((_, tag)) => tag,
        None if has_digest => "",
        None => "latest",
    }
}

fn flag(value: Option<bool>) -> bool {
    value.unwrap_or(false)
}

impl ValkeySpec {
    /// Number of data pods (default 1).
    pub fn replicas(&self) -> i32 {
        self.replicas.unwrap_or(defaults::REPLICAS)
    }

    /// `app.kubernetes.io/version` of the data image.
    pub fn image_version(&self) -> &str {
        image_version(&self.image)
    }

    /// Sentinel is on.
    pub fn sentinel_enabled(&self) -> bool {
        self.sentinel.as_ref().is_some_and(|s| flag(s.enabled))
    }

    /// More than one data pod and no Sentinel: the operator itself keeps one master.
    pub fn multi_replica_without_sentinel(&self) -> bool {
        self.replicas() > 1 && !self.sentinel_enabled()
    }

    /// Number of Sentinel pods (default 3); meaningful only when Sentinel is enabled.
    pub fn sentinel_replicas(&self) -> i32 {
        self.sentinel
            .as_ref()
            .and_then(|s| s.replicas)
            .unwrap_or(defaults::SENTINEL_REPLICAS)
    }

    /// Sentinels that must agree on a failover: a majority of the Sentinel pods.
    pub fn sentinel_quorum(&self) -> i32 {
        self.sentinel_replicas() / 2 + 1
    }

    /// [`replicas`](Self::replicas) as a count. The CRD's schema keeps it at 1 or more; a value
    /// below (an object the API server did not validate) counts as 0 pods here, and vko-render
    /// refuses that spec (`OutOfRange`), so the pass reports it once instead of dividing by it.
    pub fn replicas_u32(&self) -> u32 {
        self.replicas().max(0).unsigned_abs()
    }

    /// [`sentinel_replicas`](Self::sentinel_replicas) as a count; below the schema's minimum of 1
    /// it counts as 0, as [`replicas_u32`](Self::replicas_u32).
    pub fn sentinel_replicas_u32(&self) -> u32 {
        self.sentinel_replicas().max(0).unsigned_abs()
    }

    /// [`sentinel_quorum`](Self::sentinel_quorum) as a count (0 only below the schema's minimum).
    pub fn sentinel_quorum_u32(&self) -> u32 {
        self.sentinel_quorum().max(0).unsigned_abs()
    }

    /// Resources of the Sentinel container, if given.
    pub fn sentinel_resources(&self) -> Option<&ResourceRequirements> {
        self.sentinel.as_ref().and_then(|s| s.resources.as_ref())
    }

    /// Password authentication is on (a Secret is named).
    pub fn auth_enabled(&self) -> bool {
        self.auth_secret_name().is_some()
    }

    /// The Secret holding the password, if auth is on.
    pub fn auth_secret_name(&self) -> Option<&str> {
        self.auth
            .as_ref()
            .and_then(|a| a.secret_name.as_deref())
            .filter(|name| !name.is_empty())
    }

    /// The key of the password inside the Secret (default `password`).
    pub fn auth_password_key(&self) -> &str {
        self.auth
            .as_ref()
            .and_then(|a| a.secret_password_key.as_deref())
            .unwrap_or(defaults::AUTH_PASSWORD_KEY)
    }

    /// Clients may talk to Sentinel without a password (only with auth on).
    pub fn sentinel_auth_disabled(&self) -> bool {
        self.auth_enabled() && self.sentinel.as_ref().is_some_and(|s| flag(s.disable_auth))
    }

    /// TLS is on.
    pub fn tls_enabled(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| flag(t.enabled))
    }

    /// cert-manager settings, when TLS is on and cert-manager issues the certificates.
    pub fn cert_manager(&self) -> Option<&CertManagerSpec> {
        self.tls
            .as_ref()
            .filter(|_| self.tls_enabled())
            .and_then(|t| t.cert_manager.as_ref())
    }

    /// The user-provided TLS Secret, when TLS is on and a Secret is named.
    pub fn tls_secret_name(&self) -> Option<&str> {
        self.tls
            .as_ref()
            .filter(|_| self.tls_enabled())
            .and_then(|t| t.secret_name.as_deref())
            .filter(|name| !name.is_empty())
    }

    /// Valkey and Sentinel share one certificate (only with TLS on).
    pub fn unified_certificate(&self) -> bool {
        self.tls_enabled()
            && self
                .tls
                .as_ref()
                .is_some_and(|t| flag(t.unified_certificate))
    }

    /// Plaintext 6379 stays open next to TLS 16379 (only with TLS on).
    pub fn valkey_unencrypted_allowed(&self) -> bool {
        self.tls_enabled() && self.tls.as_ref().is_some_and(|t| flag(t.allow_unencrypted))
    }

    /// Plaintext 26379 stays open next to TLS 36379 (only with TLS on).
    pub fn sentinel_unencrypted_allowed(&self) -> bool {
        self.tls_enabled()
            && self
                .sentinel
                .as_ref()
                .is_some_and(|s| flag(s.allow_unencrypted))
    }

    /// The metrics exporter sidecar is on.
    pub fn metrics_enabled(&self) -> bool {
        self.metrics.as_ref().is_some_and(|m| flag(m.enabled))
    }

    /// Exporter image (default [`images::METRICS_EXPORTER`]).
    pub fn metrics_image(&self) -> &str {
        self.metrics
            .as_ref()
            .and_then(|m| m.image.as_deref())
            .filter(|image| !image.is_empty())
            .unwrap_or(images::METRICS_EXPORTER)
    }

    /// Exporter port (default 9121).
    pub fn metrics_port(&self) -> i32 {
        self.metrics
            .as_ref()
            .and_then(|m| m.port)
            .unwrap_or(ports::METRICS)
    }

    /// A ServiceMonitor is wanted (only with metrics on).
    pub fn service_monitor_enabled(&self) -> bool {
        self.metrics_enabled()
            && self
                .metrics
                .as_ref()
                .and_then(|m| m.service_monitor.as_ref())
                .is_some_and(|sm| flag(sm.enabled))
    }

    /// The observer's metrics are scraped too: the observer and a ServiceMonitor both on. Then the
    /// `<name>-observer` Service and ServiceMonitor are rendered (a ServiceMonitor selects
    /// Services, and the observer has no other).
    pub fn observer_service_monitor_enabled(&self) -> bool {
        self.observer_enabled() && self.service_monitor_enabled()
    }

    /// The `<name>-metrics` Service is wanted: metrics on, and the Service not switched off,
    /// or a ServiceMonitor (which needs it) enabled.
    pub fn metrics_service_enabled(&self) -> bool {
        let service_flag = self
            .metrics
            .as_ref()
            .and_then(|m| m.service.as_ref())
            .and_then(|s| s.enabled)
            .unwrap_or(true);
        self.metrics_enabled() && (service_flag || self.service_monitor_enabled())
    }

    /// ServiceMonitor scrape interval (default `30s`).
    pub fn metrics_scrape_interval(&self) -> &str {
        self.metrics
            .as_ref()
            .and_then(|m| m.service_monitor.as_ref())
            .and_then(|sm| sm.interval.as_deref())
            .unwrap_or(defaults::SCRAPE_INTERVAL)
    }

    /// NetworkPolicies are wanted.
    pub fn network_policy_enabled(&self) -> bool {
        self.network_policy
            .as_ref()
            .is_some_and(|n| flag(n.enabled))
    }

    /// PodDisruptionBudgets are wanted (whether a tier gets one also depends on its size).
    pub fn pod_disruption_budget_enabled(&self) -> bool {
        self.pod_disruption_budget
            .as_ref()
            .is_some_and(|p| flag(p.enabled))
    }

    /// `maxUnavailable` of the data PDB (default 1).
    pub fn pod_disruption_budget_max_unavailable(&self) -> i32 {
        self.pod_disruption_budget
            .as_ref()
            .and_then(|p| p.max_unavailable)
            .unwrap_or(defaults::PDB_MAX_UNAVAILABLE)
    }

    /// The data pods get a PDB: enabled and at least two pods.
    pub fn needs_data_pod_disruption_budget(&self) -> bool {
        self.pod_disruption_budget_enabled() && self.replicas() >= 2
    }

    /// The Sentinel pods get a PDB: enabled, Sentinel on, and at least two Sentinels.
    pub fn needs_sentinel_pod_disruption_budget(&self) -> bool {
        self.pod_disruption_budget_enabled()
            && self.sentinel_enabled()
            && self.sentinel_replicas() >= 2
    }

    /// Anti-affinity mode (default off).
    pub fn anti_affinity_mode(&self) -> AntiAffinityMode {
        self.anti_affinity
            .as_ref()
            .and_then(|a| a.mode)
            .unwrap_or_default()
    }

    /// Anti-affinity topology key (default `kubernetes.io/hostname`).
    pub fn anti_affinity_topology_key(&self) -> &str {
        self.anti_affinity
            .as_ref()
            .and_then(|a| a.topology_key.as_deref())
            .filter(|key| !key.is_empty())
            .unwrap_or(defaults::TOPOLOGY_KEY)
    }

    /// The data pods get an anti-affinity term: mode not off and at least two pods.
    pub fn needs_data_anti_affinity(&self) -> bool {
        self.anti_affinity_mode() != AntiAffinityMode::Off && self.replicas() >= 2
    }

    /// The Sentinel pods get an anti-affinity term: mode not off, Sentinel on, two or more.
    pub fn needs_sentinel_anti_affinity(&self) -> bool {
        self.anti_affinity_mode() != AntiAffinityMode::Off
            && self.sentinel_enabled()
            && self.sentinel_replicas() >= 2
    }

    /// Persistent volumes are wanted.
    pub fn persistence_enabled(&self) -> bool {
        self.persistence.as_ref().is_some_and(|p| flag(p.enabled))
    }

    /// Persistence mode (default rdb). Applies to the config even without volumes.
    pub fn persistence_mode(&self) -> PersistenceMode {
        self.persistence
            .as_ref()
            .and_then(|p| p.mode)
            .unwrap_or_default()
    }

    /// Claim size (default `1Gi`).
    pub fn persistence_size(&self) -> Quantity {
        self.persistence
            .as_ref()
            .and_then(|p| p.size.clone())
            .unwrap_or_else(|| Quantity(defaults::PERSISTENCE_SIZE.to_owned()))
    }

    /// StorageClass of the claims; `None` means the cluster default.
    pub fn storage_class(&self) -> Option<&str> {
        self.persistence
            .as_ref()
            .and_then(|p| p.storage_class.as_deref())
            .filter(|class| !class.is_empty())
    }

    /// The observer Deployment is wanted.
    pub fn observer_enabled(&self) -> bool {
        self.observer.as_ref().is_some_and(|o| flag(o.enabled))
    }

    /// Database index of the observer's health key (default 15).
    pub fn observer_db(&self) -> i32 {
        self.observer
            .as_ref()
            .and_then(|o| o.db)
            .unwrap_or(defaults::OBSERVER_DB)
    }

    /// Observer log level (default info).
    pub fn observer_log_level(&self) -> ObserverLogLevel {
        self.observer
            .as_ref()
            .and_then(|o| o.log_level)
            .unwrap_or_default()
    }

    /// Observer presents a client certificate to Valkey (only with TLS on).
    pub fn observer_valkey_mtls(&self) -> bool {
        self.tls_enabled()
            && self
                .observer
                .as_ref()
                .and_then(|o| o.mtls.as_ref())
                .is_some_and(|m| flag(m.valkey))
    }

    /// Observer presents a client certificate to Sentinel (only with TLS on).
    pub fn observer_sentinel_mtls(&self) -> bool {
        self.tls_enabled()
            && self
                .observer
                .as_ref()
                .and_then(|o| o.mtls.as_ref())
                .is_some_and(|m| flag(m.sentinel))
    }

    /// Observer container resources: as given, or requests 50m/64Mi with a 128Mi memory limit.
    pub fn observer_resources(&self) -> ResourceRequirements {
        if let Some(resources) = self.observer.as_ref().and_then(|o| o.resources.clone()) {
            return resources;
        }
        resource_requirements(
            &[
                ("cpu", defaults::OBSERVER_CPU_REQUEST),
                ("memory", defaults::OBSERVER_MEMORY_REQUEST),
            ],
            &[("memory", defaults::OBSERVER_MEMORY_LIMIT)],
        )
    }

    /// Which observer check failures make it not-ready (all true by default).
    pub fn observer_unready_when(&self) -> ObserverUnreadyChecks {
        self.observer
            .as_ref()
            .and_then(|o| o.unready_when.as_ref())
            .map(ObserverUnreadyWhenSpec::resolve)
            .unwrap_or_else(|| ObserverUnreadyWhenSpec::default().resolve())
    }

    /// `rollingUpdate.syncTimeout` as a duration (default 5 minutes). Fails only on text the
    /// API server's validation would have refused.
    /// `spec.auth.oldPasswordGracePeriod`, parsed.
    pub fn old_password_grace_period(&self) -> Result<Duration, Error> {
        let text = self
            .auth
            .as_ref()
            .and_then(|a| a.old_password_grace_period.as_deref())
            .unwrap_or(defaults::OLD_PASSWORD_GRACE_PERIOD);
        parse_go_duration(text)
    }

    pub fn sync_timeout(&self) -> Result<Duration, Error> {
        let text = self
            .rolling_update
            .as_ref()
            .and_then(|r| r.sync_timeout.as_deref())
            .unwrap_or(defaults::SYNC_TIMEOUT);
        parse_go_duration(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{
        AntiAffinitySpec, AuthSpec, IssuerKind, IssuerRef, MetricsServiceSpec, MetricsSpec,
        ObserverMtlsSpec, ObserverSpec, PersistenceSpec, PodDisruptionBudgetSpec,
        RollingUpdateSpec, SentinelSpec, ServiceMonitorSpec, TlsSpec,
    };

    fn minimal() -> ValkeySpec {
        ValkeySpec {
            image: "valkey/valkey:8.0".into(),
            ..ValkeySpec::default()
        }
    }

    #[test]
    fn counts_are_u32_and_below_the_schema_minimum_count_as_zero() {
        let spec = minimal();
        assert_eq!(
            (
                spec.replicas_u32(),
                spec.sentinel_replicas_u32(),
                spec.sentinel_quorum_u32()
            ),
            (1, 3, 2)
        );
        let sentinels = |replicas| SentinelSpec {
            enabled: Some(true),
            replicas: Some(replicas),
            ..SentinelSpec::default()
        };
        let five = ValkeySpec {
            replicas: Some(5),
            sentinel: Some(sentinels(5)),
            ..minimal()
        };
        assert_eq!(
            (
                five.replicas_u32(),
                five.sentinel_replicas_u32(),
                five.sentinel_quorum_u32()
            ),
            (5, 5, 3)
        );
        let unvalidated = ValkeySpec {
            replicas: Some(-2),
            sentinel: Some(sentinels(-7)),
            ..minimal()
        };
        assert_eq!(
            (
                unvalidated.replicas_u32(),
                unvalidated.sentinel_replicas_u32(),
                unvalidated.sentinel_quorum_u32()
            ),
            (0, 0, 0)
        );
    }

    #[test]
    fn omitted_fields_read_as_their_defaults() {
        let spec = minimal();
        assert_eq!(spec.replicas(), 1);
        assert!(!spec.sentinel_enabled());
        assert_eq!(spec.sentinel_replicas(), 3);
        assert_eq!(spec.sentinel_quorum(), 2);
        assert!(!spec.auth_enabled());
        assert_eq!(spec.auth_password_key(), "password");
        assert!(!spec.tls_enabled());
        assert!(!spec.metrics_enabled());
        assert!(!spec.metrics_service_enabled());
        assert_eq!(spec.metrics_image(), "oliver006/redis_exporter:v1.66.0");
        assert_eq!(spec.metrics_port(), 9121);
        assert_eq!(spec.metrics_scrape_interval(), "30s");
        assert!(!spec.network_policy_enabled());
        assert!(!spec.pod_disruption_budget_enabled());
        assert_eq!(spec.pod_disruption_budget_max_unavailable(), 1);
        assert_eq!(spec.anti_affinity_mode(), AntiAffinityMode::Off);
        assert_eq!(spec.anti_affinity_topology_key(), "kubernetes.io/hostname");
        assert!(!spec.persistence_enabled());
        assert_eq!(spec.persistence_mode(), PersistenceMode::Rdb);
        assert_eq!(spec.persistence_size(), Quantity("1Gi".into()));
        assert_eq!(spec.storage_class(), None);
        assert!(!spec.observer_enabled());
        assert_eq!(spec.observer_db(), 15);
        assert_eq!(spec.observer_log_level(), ObserverLogLevel::Info);
        assert!(spec.observer_unready_when().master_unreachable);
        assert!(
            spec.observer_unready_when()
                .sentinel_replica_hostnames_invalid
        );
        assert_eq!(spec.sync_timeout(), Ok(Duration::from_secs(300)));
        let observer = spec.observer_resources();
        assert_eq!(
            observer.requests.as_ref().and_then(|r| r.get("cpu")),
            Some(&Quantity("50m".into()))
        );
        assert_eq!(
            observer.limits.as_ref().and_then(|r| r.get("memory")),
            Some(&Quantity("128Mi".into()))
        );
    }

    #[test]
    fn explicit_values_win_over_defaults() {
        let spec = ValkeySpec {
            replicas: Some(3),
            sentinel: Some(SentinelSpec {
                enabled: Some(true),
                replicas: Some(5),
                disable_auth: Some(true),
                allow_unencrypted: Some(true),
                ..SentinelSpec::default()
            }),
            auth: Some(AuthSpec {
                secret_name: Some("valkey-auth".into()),
                secret_password_key: Some("pw".into()),
                old_password_grace_period: Some("90s".into()),
            }),
            tls: Some(TlsSpec {
                enabled: Some(true),
                allow_unencrypted: Some(true),
                unified_certificate: Some(true),
                cert_manager: Some(CertManagerSpec {
                    issuer: IssuerRef {
                        kind: IssuerKind::ClusterIssuer,
                        name: "ca".into(),
                        group: None,
                    },
                    extra_dns_names: None,
                }),
                secret_name: None,
            }),
            persistence: Some(PersistenceSpec {
                enabled: Some(true),
                mode: Some(PersistenceMode::Both),
                storage_class: Some("fast".into()),
                size: Some(Quantity("20Gi".into())),
            }),
            pod_disruption_budget: Some(PodDisruptionBudgetSpec {
                enabled: Some(true),
                max_unavailable: Some(2),
            }),
            anti_affinity: Some(AntiAffinitySpec {
                mode: Some(AntiAffinityMode::Hard),
                topology_key: Some("topology.kubernetes.io/zone".into()),
            }),
            observer: Some(ObserverSpec {
                enabled: Some(true),
                db: Some(3),
                log_level: Some(ObserverLogLevel::Debug),
                mtls: Some(ObserverMtlsSpec {
                    valkey: Some(true),
                    sentinel: None,
                }),
                unready_when: Some(ObserverUnreadyWhenSpec {
                    replica_sync_failure: Some(false),
                    ..ObserverUnreadyWhenSpec::default()
                }),
                ..ObserverSpec::default()
            }),
            rolling_update: Some(RollingUpdateSpec {
                sync_timeout: Some("1h30m".into()),
            }),
            ..minimal()
        };
        assert_eq!(spec.replicas(), 3);
        assert!(spec.sentinel_enabled());
        assert!(!spec.multi_replica_without_sentinel());
        assert_eq!(spec.sentinel_quorum(), 3);
        assert_eq!(spec.auth_secret_name(), Some("valkey-auth"));
        assert_eq!(spec.auth_password_key(), "pw");
        assert!(spec.sentinel_auth_disabled());
        assert!(spec.tls_enabled());
        assert!(spec.cert_manager().is_some());
        assert_eq!(spec.tls_secret_name(), None);
        assert!(spec.unified_certificate());
        assert!(spec.valkey_unencrypted_allowed());
        assert!(spec.sentinel_unencrypted_allowed());
        assert!(spec.persistence_enabled());
        assert_eq!(spec.persistence_mode(), PersistenceMode::Both);
        assert_eq!(spec.persistence_size(), Quantity("20Gi".into()));
        assert_eq!(spec.storage_class(), Some("fast"));
        assert!(spec.needs_data_pod_disruption_budget());
        assert!(spec.needs_sentinel_pod_disruption_budget());
        assert_eq!(spec.pod_disruption_budget_max_unavailable(), 2);
        assert!(spec.needs_data_anti_affinity());
        assert!(spec.needs_sentinel_anti_affinity());
        assert_eq!(
            spec.anti_affinity_topology_key(),
            "topology.kubernetes.io/zone"
        );
        assert_eq!(spec.observer_db(), 3);
        assert_eq!(spec.observer_log_level(), ObserverLogLevel::Debug);
        assert!(spec.observer_valkey_mtls());
        assert!(!spec.observer_sentinel_mtls());
        let checks = spec.observer_unready_when();
        assert!(!checks.replica_sync_failure);
        assert!(checks.replica_read_test_failure);
        assert_eq!(spec.sync_timeout(), Ok(Duration::from_secs(5400)));
    }

    #[test]
    fn tls_dependent_flags_are_off_without_tls() {
        let spec = ValkeySpec {
            tls: Some(TlsSpec {
                enabled: Some(false),
                allow_unencrypted: Some(true),
                unified_certificate: Some(true),
                secret_name: Some("tls".into()),
                ..TlsSpec::default()
            }),
            sentinel: Some(SentinelSpec {
                allow_unencrypted: Some(true),
                ..SentinelSpec::default()
            }),
            observer: Some(ObserverSpec {
                mtls: Some(ObserverMtlsSpec {
                    valkey: Some(true),
                    sentinel: Some(true),
                }),
                ..ObserverSpec::default()
            }),
            ..minimal()
        };
        assert!(!spec.tls_enabled());
        assert_eq!(spec.tls_secret_name(), None);
        assert!(!spec.unified_certificate());
        assert!(!spec.valkey_unencrypted_allowed());
        assert!(!spec.sentinel_unencrypted_allowed());
        assert!(!spec.observer_valkey_mtls());
        assert!(!spec.observer_sentinel_mtls());
    }

    #[test]
    fn single_pod_tiers_get_no_pdb_or_anti_affinity() {
        let spec = ValkeySpec {
            replicas: Some(1),
            sentinel: Some(SentinelSpec {
                enabled: Some(true),
                replicas: Some(1),
                ..SentinelSpec::default()
            }),
            pod_disruption_budget: Some(PodDisruptionBudgetSpec {
                enabled: Some(true),
                max_unavailable: None,
            }),
            anti_affinity: Some(AntiAffinitySpec {
                mode: Some(AntiAffinityMode::Soft),
                topology_key: None,
            }),
            ..minimal()
        };
        assert!(!spec.needs_data_pod_disruption_budget());
        assert!(!spec.needs_sentinel_pod_disruption_budget());
        assert!(!spec.needs_data_anti_affinity());
        assert!(!spec.needs_sentinel_anti_affinity());
    }

    #[test]
    fn metrics_service_follows_service_monitor() {
        let with = |service: Option<bool>, monitor: Option<bool>| ValkeySpec {
            metrics: Some(MetricsSpec {
                enabled: Some(true),
                service: Some(MetricsServiceSpec {
                    enabled: service,
                    labels: None,
                }),
                service_monitor: Some(ServiceMonitorSpec {
                    enabled: monitor,
                    ..ServiceMonitorSpec::default()
                }),
                ..MetricsSpec::default()
            }),
            ..minimal()
        };
        assert!(with(None, None).metrics_service_enabled());
        assert!(!with(Some(false), None).metrics_service_enabled());
        assert!(with(Some(false), Some(true)).metrics_service_enabled());
        assert!(with(Some(false), Some(true)).service_monitor_enabled());
    }

    #[test]
    fn sync_timeout_reports_unparsable_text() {
        let spec = ValkeySpec {
            rolling_update: Some(RollingUpdateSpec {
                sync_timeout: Some("five minutes".into()),
            }),
            ..minimal()
        };
        assert!(matches!(
            spec.sync_timeout(),
            Err(Error::InvalidDuration { .. })
        ));
    }

    #[test]
    fn the_old_password_grace_period_defaults_to_five_minutes_and_zero_is_allowed() {
        assert_eq!(
            minimal().old_password_grace_period(),
            Ok(Duration::from_secs(300))
        );
        let with = |text: &str| ValkeySpec {
            auth: Some(AuthSpec {
                secret_name: Some("a".into()),
                old_password_grace_period: Some(text.into()),
                ..AuthSpec::default()
            }),
            ..minimal()
        };
        assert_eq!(with("0s").old_password_grace_period(), Ok(Duration::ZERO));
        assert_eq!(
            with("1m30s").old_password_grace_period(),
            Ok(Duration::from_secs(90))
        );
        assert!(with("soon").old_password_grace_period().is_err());
    }

    #[test]
    fn image_version_label() {
        assert_eq!(image_version("valkey/valkey:8.0"), "8.0");
        assert_eq!(image_version("registry:5000/valkey/valkey:8.0.1"), "8.0.1");
        assert_eq!(image_version("valkey/valkey:8.0@sha256:abc"), "8.0");
        assert_eq!(image_version("valkey/valkey@sha256:abc"), "");
        assert_eq!(image_version("registry:5000/valkey"), "latest");
        assert_eq!(image_version("valkey"), "latest");
    }
}
