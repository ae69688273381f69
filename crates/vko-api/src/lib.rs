//! The `Valkey` custom resource (`vko.gtrfc.com/v1`): spec and status types, defaults, validation,
//! condition/phase/reason enums, label keys and port numbers. No I/O: `Valkey::crd()` is the single
//! source of the CRD.

pub mod consts;
mod duration;
mod error;
mod helpers;
mod password;
mod schema_tidy;
mod spec;
mod status;

pub use duration::parse_go_duration;
pub use error::Error;
pub use helpers::{ObserverUnreadyChecks, image_version, resource_requirements};
pub use password::{password_from_env_value, usable_password};
pub use spec::{
    AntiAffinityMode, AntiAffinitySpec, AuthSpec, CertManagerSpec, IssuerKind, IssuerRef,
    MetricsServiceSpec, MetricsSpec, NetworkPolicySpec, ObserverLogLevel, ObserverMtlsSpec,
    ObserverSpec, ObserverUnreadyWhenSpec, PersistenceMode, PersistenceSpec,
    PodDisruptionBudgetSpec, RollingUpdateSpec, SentinelSpec, ServiceMonitorSpec, TlsSpec, Valkey,
    ValkeySpec,
};
pub use status::{
    ConditionReason, ConditionType, PasswordRotationStatus, Phase, RollDeletedPod, RollProgress,
    RollSwitchover, RollWait, RollingUpdateStatus, ValkeyStatus,
};

/// `apiVersion` of the resource.
pub const API_VERSION: &str = "vko.gtrfc.com/v1";
/// `kind` of the resource.
pub const KIND: &str = "Valkey";
/// Name of the CustomResourceDefinition object.
pub const CRD_NAME: &str = "valkeys.vko.gtrfc.com";

/// The CustomResourceDefinition for `Valkey`, exactly as `kube::CustomResourceExt::crd()` builds
/// it (a free function so tools need not depend on kube to call it).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    <Valkey as kube::CustomResourceExt>::crd()
}
