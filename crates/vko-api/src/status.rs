//! `status` of the `Valkey` resource, its phase, and the condition types and reasons.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Observed state, written by the operator only.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema_tidy::tidy)]
pub struct ValkeyStatus {
    /// Number of Valkey data pods that are ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,

    /// Name of the pod that currently answers as master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_pod: Option<String>,

    /// Whether the observer Deployment has a ready pod; only set when the observer is enabled.
    /// The observer is ready when its last health verdict was good, so this is a health signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observer_ready: Option<bool>,

    /// Lifecycle phase: `OK`, `Provisioning`, `Syncing`, `Rolling Update i/n`,
    /// `Sentinel Rolling Update i/n`, `Failover in progress` or `Error` (see message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,

    /// Human-readable explanation of the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// Standard Kubernetes conditions (Ready, ReconcileBlocked, RollingUpdatePaused, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,

    /// Version of the operator that last reconciled this resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,

    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The rolling update in flight, as the operator's state machine recorded it after its last
    /// step, so that a restarted operator resumes exactly there. Absent when no roll is in
    /// flight. Written by the operator only; its fields are internal and may change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateStatus>,

    /// A password rotation past its first step (ADR 0035): every server and Sentinel accepts the
    /// new password next to the old one. Absent otherwise. Written by the operator only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_rotation: Option<PasswordRotationStatus>,
}

/// The recorded state of a password rotation. Times are milliseconds since the Unix epoch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PasswordRotationStatus {
    /// When every server and Sentinel was first seen accepting the new password: the old one is
    /// retired `spec.auth.oldPasswordGracePeriod` after it.
    pub accepted_since: i64,
}

/// The recorded state of a rolling update (the operator's `vko-roll` `RollState`, field for
/// field). Times are milliseconds since the Unix epoch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema_tidy::tidy)]
pub struct RollingUpdateStatus {
    /// The tier being rolled: `data` or `sentinel`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// The data pod-template hash this roll brings the data tier to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_target: Option<String>,
    /// The Sentinel pod-template hash the Sentinel tier rolls to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_target: Option<String>,
    /// The progress last shown in the phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<RollProgress>,
    /// Whether this roll replaced at least one data pod.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_rolled: bool,
    /// Whether the data tier of this roll is complete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_completed: bool,
    /// The wait in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<RollWait>,
    /// The pod the roll deleted last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deleted: Option<RollDeletedPod>,
    /// A master switchover that was issued and not yet seen to complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<RollSwitchover>,
    /// Since when more than one data pod answers master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiple_masters_since: Option<i64>,
    /// The split-brain Event of the current multiple-master episode was emitted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_brain_reported: bool,
}

/// `current` of `total` pods of the rolling tier.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollProgress {
    /// 1-based position of the pod being replaced.
    pub current: i64,
    /// Pods in the tier.
    pub total: i64,
}

/// A wait of the roll that has started.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollWait {
    /// What is awaited (e.g. `podSync`, `podRecreation`, `switchoverSettling`).
    pub reason: String,
    /// When the wait began.
    pub since: i64,
}

/// A pod the roll deleted.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollDeletedPod {
    /// `data` or `sentinel`.
    pub tier: String,
    /// The pod's ordinal.
    pub ordinal: i64,
    /// When the delete was issued.
    pub at: i64,
}

/// A switchover the roll issued.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollSwitchover {
    /// The outgoing master's ordinal.
    pub from: i64,
    /// The ordinal chosen to become master.
    pub to: i64,
    /// When it was issued.
    pub started: i64,
    /// How many times it was issued in this roll.
    pub attempts: i64,
}

/// Lifecycle phase of a `Valkey`. Serialized exactly as the strings users see in
/// `kubectl get valkey` (`OK`, `Rolling Update 2/3`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Healthy.
    Ok,
    /// Initial setup in progress.
    Provisioning,
    /// Replication sync in progress.
    Syncing,
    /// Data-tier rolling update, `current` of `total` pods.
    RollingUpdate {
        /// 1-based position of the pod being replaced.
        current: i32,
        /// Pods in the tier.
        total: i32,
    },
    /// Sentinel-tier rolling update, `current` of `total` pods.
    SentinelRollingUpdate {
        /// 1-based position of the pod being replaced.
        current: i32,
        /// Pods in the tier.
        total: i32,
    },
    /// Sentinel is switching the master.
    FailoverInProgress,
    /// The data plane cannot be verified or the spec cannot be applied (see `status.message`).
    Error,
    /// A phase string this version does not know (written by another operator version or by
    /// hand). Kept verbatim so that reading such a resource never fails.
    Unrecognized(String),
}

const ROLLING_UPDATE_PREFIX: &str = "Rolling Update ";
const SENTINEL_ROLLING_UPDATE_PREFIX: &str = "Sentinel Rolling Update ";

impl Phase {
    /// The exact string written to `status.phase`.
    pub fn as_string(&self) -> Cow<'static, str> {
        match self {
            Phase::Ok => Cow::Borrowed("OK"),
            Phase::Provisioning => Cow::Borrowed("Provisioning"),
            Phase::Syncing => Cow::Borrowed("Syncing"),
            Phase::RollingUpdate { current, total } => {
                Cow::Owned(format!("{ROLLING_UPDATE_PREFIX}{current}/{total}"))
            }
            Phase::SentinelRollingUpdate { current, total } => {
                Cow::Owned(format!("{SENTINEL_ROLLING_UPDATE_PREFIX}{current}/{total}"))
            }
            Phase::FailoverInProgress => Cow::Borrowed("Failover in progress"),
            Phase::Error => Cow::Borrowed("Error"),
            Phase::Unrecognized(other) => Cow::Owned(other.clone()),
        }
    }

    /// Parses a phase string. Never fails: unknown strings become [`Phase::Unrecognized`].
    pub fn parse(text: &str) -> Phase {
        match text {
            "OK" => Phase::Ok,
            "Provisioning" => Phase::Provisioning,
            "Syncing" => Phase::Syncing,
            "Failover in progress" => Phase::FailoverInProgress,
            "Error" => Phase::Error,
            _ => {
                if let Some((current, total)) = text
                    .strip_prefix(SENTINEL_ROLLING_UPDATE_PREFIX)
                    .and_then(parse_progress)
                {
                    Phase::SentinelRollingUpdate { current, total }
                } else if let Some((current, total)) = text
                    .strip_prefix(ROLLING_UPDATE_PREFIX)
                    .and_then(parse_progress)
                {
                    Phase::RollingUpdate { current, total }
                } else {
                    Phase::Unrecognized(text.to_owned())
                }
            }
        }
    }
}

/// Parses `i/n` with two plain non-negative decimal numbers.
fn parse_progress(text: &str) -> Option<(i32, i32)> {
    let (current, total) = text.split_once('/')?;
    let number = |s: &str| -> Option<i32> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    Some((number(current)?, number(total)?))
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_string())
    }
}

impl FromStr for Phase {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Phase::parse(s))
    }
}

impl Serialize for Phase {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for Phase {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        Ok(Phase::parse(&text))
    }
}

impl JsonSchema for Phase {
    fn schema_name() -> Cow<'static, str> {
        "Phase".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

/// Declares a fieldless enum whose variants map one-to-one onto fixed strings.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+ }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $( $(#[$vmeta])* $variant, )+ }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )+ ];

            /// The exact string used in the Kubernetes API.
            pub const fn as_str(self) -> &'static str {
                match self { $( $name::$variant => $text, )+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = crate::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| crate::Error::UnknownName {
                        what: stringify!($name),
                        value: s.to_owned(),
                    })
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = Cow::<'de, str>::deserialize(deserializer)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}

string_enum! {
    /// `type` of a condition in `status.conditions`.
    pub enum ConditionType {
        /// The data plane is serving (independent of whether the operator can write its objects).
        Ready => "Ready",
        /// A rolling update stopped waiting for a replaced pod to sync.
        RollingUpdatePaused => "RollingUpdatePaused",
        /// The last data-tier roll of a non-Sentinel cluster handed the master back to pod 0.
        TopologyRestored => "TopologyRestored",
        /// The only pod of a single-replica cluster runs an outdated sidecar image.
        SidecarUpdatePending => "SidecarUpdatePending",
        /// A managed object could not be written or the operator refused to write it.
        ReconcileBlocked => "ReconcileBlocked",
        /// The storage the spec asks for is not the storage the StatefulSet has.
        StorageSpecNotApplied => "StorageSpecNotApplied",
        /// A Sentinel knows more peers than the cluster has.
        SentinelPeersStale => "SentinelPeersStale",
        /// The Sentinel tier is being rolled.
        SentinelUpdatePending => "SentinelUpdatePending",
        /// A pod of the tier being rolled is stuck terminating.
        PodTerminationStalled => "PodTerminationStalled",
        /// Some pod still runs TLS material from before the last rotation.
        TLSMaterialStale => "TLSMaterialStale",
        /// More than one data pod answers as master during a roll.
        MultipleMasters => "MultipleMasters",
        /// A pod deleted by the roll has not been recreated by its StatefulSet.
        PodRecreationStalled => "PodRecreationStalled",
        /// No data pod carries the master role label, so the `-rw` Service is empty.
        RWServiceEmpty => "RWServiceEmpty",
        /// The spec is accepted but weakens security or availability (vko; the reference only
        /// logs or emits Events for some of these).
        ConfigurationWarning => "ConfigurationWarning",
        /// A pod of the cluster cannot start: the scheduler or the kubelet says why.
        PodsNotStarting => "PodsNotStarting",
        /// A master paused its writes because it cannot prove a Sentinel majority names it
        /// (ADR 0019); the sidecar's `vko.gtrfc.com/fenced` pod annotation says why and since when.
        MasterFenced => "MasterFenced",
        /// The auth Secret's password changed and the old one is still accepted somewhere
        /// (ADR 0035); the reason names the step.
        PasswordRotation => "PasswordRotation",
    }
}

string_enum! {
    /// `reason` of a condition in `status.conditions`.
    pub enum ConditionReason {
        /// Ready=True: every requested pod is running, reachable and replicating.
        ClusterReady => "ClusterReady",
        /// Ready=False: the data plane is not (yet) serving as requested.
        ClusterNotReady => "ClusterNotReady",
        /// RollingUpdatePaused=True: a replaced pod did not sync within syncTimeout.
        SyncTimeoutExpired => "SyncTimeoutExpired",
        /// RollingUpdatePaused=True: the master switchover did not take effect (vko-roll).
        SwitchoverFailed => "SwitchoverFailed",
        /// RollingUpdatePaused / SentinelUpdatePending=False: the roll finished.
        Completed => "Completed",
        /// RollingUpdatePaused=False: nothing left to roll.
        Converged => "Converged",
        /// TopologyRestored=True: pod 0 is master again.
        MasterRestored => "MasterRestored",
        /// TopologyRestored=False: pod 0 did not sync in time; the promoted replica stays master.
        RestorationAbandoned => "RestorationAbandoned",
        /// SidecarUpdatePending=True.
        SidecarImageOutdated => "SidecarImageOutdated",
        /// SidecarUpdatePending=False.
        SidecarImageCurrent => "SidecarImageCurrent",
        /// ReconcileBlocked=True: an admission webhook or policy refused a write.
        AdmissionWebhookDenied => "AdmissionWebhookDenied",
        /// ReconcileBlocked=True: the auth Secret's password is empty, only whitespace or not
        /// UTF-8 (never taken to mean "no password").
        PasswordUnusable => "PasswordUnusable",
        /// ReconcileBlocked=True: any other write failure.
        WriteFailed => "WriteFailed",
        /// ReconcileBlocked=True: a generated name is held by an object this Valkey does not own.
        ForeignObject => "ForeignObject",
        /// ReconcileBlocked / StorageSpecNotApplied=True: the StatefulSet must be recreated.
        RecreateRequired => "RecreateRequired",
        /// ReconcileBlocked=True: `spec.image` names a Valkey that cannot load the files the
        /// running one saved on the persistent volumes (9.x to 8.x); the running image is kept.
        DowngradeUnsupported => "DowngradeUnsupported",
        /// ReconcileBlocked=False.
        ReconcileSucceeded => "ReconcileSucceeded",
        /// StorageSpecNotApplied=True: only size/class/access modes differ.
        VolumeClaimTemplatesImmutable => "VolumeClaimTemplatesImmutable",
        /// StorageSpecNotApplied=False.
        StorageSpecApplied => "StorageSpecApplied",
        /// SentinelPeersStale=True.
        SentinelPeersExceedReplicas => "SentinelPeersExceedReplicas",
        /// SentinelPeersStale=False.
        SentinelPeersCurrent => "SentinelPeersCurrent",
        /// SentinelUpdatePending=True.
        SentinelPodsOutdated => "SentinelPodsOutdated",
        /// SentinelUpdatePending=False: Sentinel was disabled while the roll stood.
        SentinelDisabled => "SentinelDisabled",
        /// PodTerminationStalled=True.
        PodStuckTerminating => "PodStuckTerminating",
        /// PodTerminationStalled=False.
        PodTerminationCleared => "PodTerminationCleared",
        /// TLSMaterialStale=True.
        TLSMaterialRollPending => "TLSMaterialRollPending",
        /// TLSMaterialStale=False: every measured pod is current.
        TLSMaterialCurrent => "TLSMaterialCurrent",
        /// TLSMaterialStale=False: some pods carry no fingerprint yet.
        TLSMaterialUnmeasured => "TLSMaterialUnmeasured",
        /// TLSMaterialStale=False: TLS was turned off.
        TLSMaterialNotApplicable => "TLSMaterialNotApplicable",
        /// MultipleMasters=True, inside the transition bound.
        MultipleMastersTransitional => "MultipleMastersTransitional",
        /// MultipleMasters=True, past the transition bound.
        MultipleMastersPersisted => "MultipleMastersPersisted",
        /// MultipleMasters=False.
        SingleMaster => "SingleMaster",
        /// PodRecreationStalled=True.
        PodNotRecreated => "PodNotRecreated",
        /// PodRecreationStalled=False.
        PodRecreated => "PodRecreated",
        /// RWServiceEmpty=True.
        NoPodLabeledMaster => "NoPodLabeledMaster",
        /// RWServiceEmpty=False.
        MasterLabeled => "MasterLabeled",
        /// ReconcileBlocked=True: a referenced Secret does not exist or lacks the key (the
        /// StatefulSets are held back).
        SecretMissing => "SecretMissing",
        /// ReconcileBlocked=True: a user-provided TLS certificate cannot serve the pods.
        TLSCertificateUnusable => "TLSCertificateUnusable",
        /// ReconcileBlocked=True: `spec.tls.certManager` is set and the API server does not serve
        /// cert-manager.io: the Certificate cannot be written, so nothing issues or renews it.
        CertManagerMissing => "CertManagerMissing",
        /// ReconcileBlocked=True: the object lacks a field the API server always sets, or a
        /// rendered object could not be turned into an API request.
        InvalidObject => "InvalidObject",
        /// ReconcileBlocked=True: writing the status failed.
        StatusWriteFailed => "StatusWriteFailed",
        /// Reason of a failed pass (metrics label): publishing an Event failed.
        EventPublishFailed => "EventPublishFailed",
        /// Reason of a failed pass (metrics label): the operator's leader gate refused to act (its
        /// Lease renewal is older than the renew deadline); nothing was written.
        NotLeader => "NotLeader",
        /// ReconcileBlocked=True: a data-plane command (promotion, redirection) failed.
        DataPlaneCommandFailed => "DataPlaneCommandFailed",
        /// ReconcileBlocked=True: a promotion could not be carried out or verified.
        PromotionFailed => "PromotionFailed",
        /// ReconcileBlocked=True: the spec's name does not fit the generated names (vko-render).
        InvalidName => "InvalidName",
        /// ReconcileBlocked=True: a user label or annotation uses a reserved key (vko-render).
        ReservedKey => "ReservedKey",
        /// ReconcileBlocked=True: a generated name is not a DNS name (vko-render).
        InvalidDnsName => "InvalidDnsName",
        /// ReconcileBlocked=True: a user-given argument is refused (vko-render).
        InvalidArgument => "InvalidArgument",
        /// ReconcileBlocked=True: a count or port is out of range (vko-render).
        OutOfRange => "OutOfRange",
        /// ReconcileBlocked=True: the recorded master is not one of the pods (vko-render).
        RecordedMasterOutOfRange => "RecordedMasterOutOfRange",
        /// ReconcileBlocked=True: the operator handed the renderer an unusable input (vko-render).
        InvalidRenderInput => "InvalidRenderInput",
        /// ReconcileBlocked=True: a rendered object could not be serialized (vko-render).
        SerializationFailed => "SerializationFailed",
        /// ConfigurationWarning=True: no `spec.auth`, so clients need no password.
        AuthDisabled => "AuthDisabled",
        /// ConfigurationWarning=True: `spec.sentinel.disableAuth` opens Sentinel's commands.
        SentinelAuthDisabled => "SentinelAuthDisabled",
        /// ConfigurationWarning=True: the exporter's `/scrape` dials any address for any caller.
        ExporterScrapeUnrestricted => "ExporterScrapeUnrestricted",
        /// ConfigurationWarning=True: 1 or 2 Sentinels tolerate no Sentinel outage.
        SentinelCountNotHighlyAvailable => "SentinelCountNotHighlyAvailable",
        /// ConfigurationWarning=True: an even Sentinel count tolerates no more failures than one
        /// fewer.
        SentinelCountEven => "SentinelCountEven",
        /// ConfigurationWarning=True: Sentinel with one data pod has nothing to fail over to.
        SentinelWithOneDataPod => "SentinelWithOneDataPod",
        /// ConfigurationWarning=True: the data PDB lets a drain evict every data pod at once (the
        /// reference's Event reason).
        PodDisruptionBudgetTooPermissive => "PodDisruptionBudgetTooPermissive",
        /// ConfigurationWarning=True: the Sentinel PDB permits no eviction at all (the
        /// reference's Event reason).
        SentinelPodDisruptionBudgetBlocksDrains => "SentinelPodDisruptionBudgetBlocksDrains",
        /// ConfigurationWarning=True: a PodDisruptionBudget under a generated name belongs to
        /// someone else; it is left untouched (the reference's Event reason).
        PodDisruptionBudgetNotOwned => "PodDisruptionBudgetNotOwned",
        /// ConfigurationWarning=False: the warnings that stood are gone.
        NoConfigurationWarnings => "NoConfigurationWarnings",
        /// PodsNotStarting=True: the scheduler finds no node for a pod (anti-affinity, an unbound
        /// claim, resources).
        PodUnschedulable => "PodUnschedulable",
        /// PodsNotStarting=True: a container's image cannot be pulled.
        ImagePullFailed => "ImagePullFailed",
        /// PodsNotStarting=True: a container keeps exiting.
        ContainerCrashLooping => "ContainerCrashLooping",
        /// PodsNotStarting=True: a container cannot be created from its spec (a missing Secret
        /// key, a bad mount).
        ContainerConfigInvalid => "ContainerConfigInvalid",
        /// PodsNotStarting=False: every pod that could not start has started or is gone.
        PodsStarted => "PodsStarted",
        /// MasterFenced=True: the master's last proof (a Sentinel majority naming it) is older
        /// than F.
        AuthorityNotProven => "AuthorityNotProven",
        /// MasterFenced=True: the master has not proven its authority since its sidecar started.
        AuthorityNeverProven => "AuthorityNeverProven",
        /// MasterFenced=False: no master is fenced any more.
        NoMasterFenced => "NoMasterFenced",
        /// PasswordRotation=True: some pods do not accept the new password yet (the kubelet has
        /// not updated their Secret volume, or their sidecar has not acted on it).
        NewPasswordPending => "NewPasswordPending",
        /// PasswordRotation=True: every server and Sentinel accepts both passwords; the old one
        /// is retired when the grace period ends.
        OldPasswordGracePeriod => "OldPasswordGracePeriod",
        /// PasswordRotation=True: the grace period is over, but some data pods' sidecars still
        /// use the old password (their Secret volume is not updated yet); the old one stays.
        SidecarsOnOldPassword => "SidecarsOnOldPassword",
        /// PasswordRotation=True: retiring the old password failed on a pod; retried.
        OldPasswordRetireFailed => "OldPasswordRetireFailed",
        /// PasswordRotation=False: every server and Sentinel accepts the new password only.
        PasswordRotated => "PasswordRotated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_serialize_to_the_reference_strings_and_back() {
        let cases = [
            (Phase::Ok, "OK"),
            (Phase::Provisioning, "Provisioning"),
            (Phase::Syncing, "Syncing"),
            (
                Phase::RollingUpdate {
                    current: 2,
                    total: 3,
                },
                "Rolling Update 2/3",
            ),
            (
                Phase::SentinelRollingUpdate {
                    current: 1,
                    total: 5,
                },
                "Sentinel Rolling Update 1/5",
            ),
            (Phase::FailoverInProgress, "Failover in progress"),
            (Phase::Error, "Error"),
        ];
        for (phase, text) in cases {
            assert_eq!(phase.to_string(), text);
            let json = serde_json::to_value(&phase).unwrap();
            assert_eq!(json, serde_json::Value::String(text.into()));
            let back: Phase = serde_json::from_value(json).unwrap();
            assert_eq!(back, phase);
        }
    }

    #[test]
    fn unknown_phase_strings_are_kept_verbatim() {
        for text in [
            "Degraded",
            "Rolling Update",
            "Rolling Update 1/",
            "Rolling Update a/3",
            "ok",
        ] {
            let phase: Phase = text.parse().unwrap();
            assert_eq!(phase, Phase::Unrecognized(text.into()));
            assert_eq!(serde_json::to_value(&phase).unwrap(), text);
        }
    }

    #[test]
    fn condition_types_and_reasons_round_trip() {
        assert_eq!(ConditionType::ALL.len(), 17);
        for ty in ConditionType::ALL {
            assert_eq!(ty.as_str().parse::<ConditionType>(), Ok(*ty));
            assert_eq!(serde_json::to_value(ty).unwrap(), ty.as_str());
        }
        for reason in ConditionReason::ALL {
            assert_eq!(reason.as_str().parse::<ConditionReason>(), Ok(*reason));
            assert_eq!(reason.to_string(), reason.as_str());
        }
        assert_eq!(ConditionType::RWServiceEmpty.as_str(), "RWServiceEmpty");
        assert_eq!(ConditionType::TLSMaterialStale.as_str(), "TLSMaterialStale");
        assert!("NoSuchCondition".parse::<ConditionType>().is_err());
    }

    #[test]
    fn status_round_trips() {
        let yaml = serde_json::json!({
            "readyReplicas": 3,
            "masterPod": "ha-0",
            "phase": "Rolling Update 1/3",
            "message": "rolling",
            "operatorVersion": "0.1.0",
            "observedGeneration": 4,
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "ClusterReady",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"
            }]
        });
        let status: ValkeyStatus = serde_json::from_value(yaml.clone()).unwrap();
        assert_eq!(
            status.phase,
            Some(Phase::RollingUpdate {
                current: 1,
                total: 3
            })
        );
        assert_eq!(serde_json::to_value(&status).unwrap(), yaml);
    }
}
