//! The status of a `Valkey`, as pure functions of one observed world (a [`Snapshot`]): phase,
//! message and conditions; conditions keep `lastTransitionTime` unless their status flips;
//! Events only on transitions. The operator observes and writes; this crate decides (and can be
//! tested from fixtures, without a client).
//!
//! [`storage`] compares the live data StatefulSet's claims with the rendered ones.

pub mod advisory;
pub mod downgrade;
pub mod password;
pub mod pods;
pub mod recreation;
pub mod storage;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use vko_api::{ConditionReason, ConditionType, Phase, RollingUpdateStatus, ValkeyStatus};
use vko_authority::{PodProbe, ProbeState, unsynced_replicas};
pub use vko_roll::EventType;
use vko_roll::RollState;

use crate::advisory::Advisory;
use crate::pods::{FencedPod, PodProblem};
use crate::storage::StorageConflict;

/// Why the pass could not converge the spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// `ForeignObject`, `AdmissionWebhookDenied`, `WriteFailed`, `SecretMissing`, or a render
    /// error's reason.
    pub reason: ConditionReason,
    pub message: String,
}

/// Everything the status is computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    pub name: String,
    pub generation: Option<i64>,
    pub spec_replicas: i32,
    pub sentinel: bool,
    pub statefulset_exists: bool,
    pub ready_pods: i32,
    pub probes: Vec<PodProbe>,
    /// The master (live answer; without Sentinel and with replicas the record).
    pub master: Option<u32>,
    /// Sentinel's majority answer is missing or disagrees with the pods.
    pub sentinel_failover: bool,
    /// Synced replicas some Sentinel naming the master does not list yet (not failover
    /// candidates, not reconfigured by a failover).
    pub sentinel_unaware: Vec<String>,
    /// Why the authority did not act, when it did not (e.g. waiting for the hold to clear).
    pub authority_note: Option<String>,
    pub blocked: Option<Blocked>,
    /// The rolling update's step in this pass (`None`: the roll was not evaluated, so the
    /// recorded roll state stays as it is).
    pub roll: Option<vko_roll::Decision>,
    /// `status.observerReady`: `None` without an observer.
    pub observer_ready: Option<bool>,
    /// The TLS fingerprints of both tiers (`None`: TLS is off).
    pub tls_material: Option<Vec<TierMaterial>>,
    /// The data StatefulSet's claims against the spec.
    pub storage: StorageCheck,
    /// Data pods labelled `instanceRole=master` (the `-rw` Service's endpoints).
    pub labeled_masters: Vec<String>,
    /// The Sentinels' peer counts; `None` unless every data and Sentinel pod is ready and one
    /// answered.
    pub sentinel_peers: Option<SentinelPeers>,
    /// The spec's configuration warnings ([`advisory::advisories`]).
    pub advisories: Vec<Advisory>,
    /// The cluster's pods that cannot start, and why ([`pods::pod_problems`]).
    pub pod_problems: Vec<PodProblem>,
    /// Data pods whose master fenced itself ([`pods::fenced_pods`], ADR 0019).
    pub fenced_pods: Vec<FencedPod>,
    /// The password rotation after this pass (`None`: auth off or not evaluated, so the
    /// condition and the record stay as they are).
    pub password_rotation: Option<password::PasswordRotation>,
}

/// The data StatefulSet's `volumeClaimTemplates` against the rendered ones in one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageCheck {
    /// Not compared this pass (no live StatefulSet, or nothing rendered): the condition stays.
    NotCompared,
    /// Compared: they match.
    Matches,
    /// Compared: they differ.
    Conflict(StorageConflict),
}

impl From<Option<StorageConflict>> for StorageCheck {
    /// A comparison's result: `None` is a match.
    fn from(found: Option<StorageConflict>) -> StorageCheck {
        found.map_or(StorageCheck::Matches, StorageCheck::Conflict)
    }
}

/// How many other Sentinels one Sentinel knows (`num-other-sentinels`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PeerCount {
    /// The Sentinel pod.
    pub pod: String,
    /// The peers it knows.
    pub others: u32,
}

/// The peer counts of the Sentinels that answered, with the number of Sentinels the spec asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelPeers {
    /// One per Sentinel that answered, sorted by pod.
    pub answers: Vec<PeerCount>,
    /// `spec.sentinel.replicas`.
    pub sentinels: u32,
}

/// One tier's TLS fingerprints: its Secret's now, and the one each pod was started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TierMaterial {
    /// `data` or `Sentinel`, for the message.
    pub tier: &'static str,
    /// The fingerprint of the tier's Secret now (`None`: the Secret cannot be read or used, so the
    /// tier cannot be measured).
    pub current: Option<String>,
    /// (pod, its material as measured: the template's fingerprint on the Sentinel tier,
    /// [`data_pod_tls_material`] on the data tier; `None`: not measured).
    pub pods: Vec<(String, Option<String>)>,
}

/// The data tier's material as `TLSMaterialStale` compares it (ADR 0038): the CA fingerprint
/// the pod's template carries (a new CA rolls the pods) and the certificate its server serves
/// (a new certificate under the same CA is reloaded in place by the sidecar).
pub fn data_tls_material(trust: &str, certificate: &str) -> String {
    format!("{trust}/{certificate}")
}

/// A data pod's [`data_tls_material`]: its template's fingerprint and the certificate its
/// sidecar last saw served (`vko.gtrfc.com/tls-certificate`); `None` until both are known (a pod
/// just started, or created by an older operator).
pub fn data_pod_tls_material(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let trust = pod_tls_fingerprint(pod)?;
    let served = pod
        .metadata
        .annotations
        .as_ref()?
        .get(vko_api::consts::annotations::TLS_CERTIFICATE)?;
    Some(data_tls_material(&trust, served))
}

/// The fingerprint a pod was created with: `VKO_TLS_MATERIAL_HASH` on whichever container carries
/// it (the sidecar on the data tier, the sentinel container on the Sentinel tier), or the annotation
/// older operators wrote.
pub fn pod_tls_fingerprint(pod: &k8s_openapi::api::core::v1::Pod) -> Option<String> {
    let from_env = pod.spec.as_ref().and_then(|spec| {
        spec.containers.iter().find_map(|container| {
            container
                .env
                .iter()
                .flatten()
                .find(|env| env.name == vko_render::TLS_HASH_ENV)
                .and_then(|env| env.value.clone())
        })
    });
    from_env.or_else(|| {
        pod.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(LEGACY_TLS_HASH_ANNOTATION).cloned())
    })
}

/// Where operators before 2026-08-27 recorded the fingerprint.
const LEGACY_TLS_HASH_ANNOTATION: &str = "vko.gtrfc.com/tls-material-hash";

/// `SentinelPeersStale`: a Sentinel that knows more peers than the cluster has Sentinels counts a
/// failover majority over Sentinels that are gone (Sentinel never forgets a peer by itself).
pub fn sentinel_peers_condition(peers: &SentinelPeers) -> (bool, ConditionReason, String) {
    let expected = peers.sentinels.saturating_sub(1);
    let stale: Vec<String> = peers
        .answers
        .iter()
        .filter(|peer| peer.others > expected)
        .map(|peer| format!("{} knows {}", peer.pod, peer.others))
        .collect();
    if stale.is_empty() {
        (
            false,
            ConditionReason::SentinelPeersCurrent,
            format!("every Sentinel that answered knows {expected} other Sentinels"),
        )
    } else {
        (
            true,
            ConditionReason::SentinelPeersExceedReplicas,
            format!(
                "Sentinels know more peers than the {expected} others this cluster has ({}): a \
                 failover needs a majority of all of them; run SENTINEL RESET <name> on one Sentinel \
                 at a time while the master is healthy, or let the next Sentinel roll clear it",
                stale.join(", ")
            ),
        )
    }
}

/// `TLSMaterialStale` for this pass: (status, reason, message), or `None` to leave it as it is.
/// True while a measured pod runs material older than its Secret's (a rotation the roll has not
/// reached yet, or a roll that never started); stale pods are named even when the other tier
/// cannot be measured, the all-clear only when both can. With TLS off, a standing `True` is
/// retracted once.
pub fn tls_material_condition(
    tiers: Option<&[TierMaterial]>,
    present: Option<&Condition>,
) -> Option<(bool, ConditionReason, String)> {
    let Some(tiers) = tiers else {
        return present.filter(|c| c.status == "True").map(|_| {
            (
                false,
                ConditionReason::TLSMaterialNotApplicable,
                "TLS is turned off".to_owned(),
            )
        });
    };
    let list = |select: &dyn Fn(&TierMaterial, &Option<String>) -> bool| -> Vec<String> {
        tiers
            .iter()
            .filter_map(|tier| {
                let pods: Vec<&str> = tier
                    .pods
                    .iter()
                    .filter(|(_, hash)| select(tier, hash))
                    .map(|(pod, _)| pod.as_str())
                    .collect();
                (!pods.is_empty()).then(|| format!("{} tier: {}", tier.tier, pods.join(", ")))
            })
            .collect()
    };
    let stale = list(&|tier, hash| match (&tier.current, hash) {
        (Some(current), Some(hash)) => current != hash,
        _ => false,
    });
    if !stale.is_empty() {
        return Some((
            true,
            ConditionReason::TLSMaterialRollPending,
            format!(
                "pods still run the TLS material from before the last certificate change ({}); \
                 a new certificate under the same CA is reloaded in place (data pods; Sentinels \
                 from Valkey 9.1), a new CA rolls the pods, and so does any change on older \
                 Sentinels",
                stale.join("; ")
            ),
        ));
    }
    let unmeasured = list(&|_, hash| hash.is_none());
    if !unmeasured.is_empty() {
        return Some((
            false,
            ConditionReason::TLSMaterialUnmeasured,
            format!(
                "pods carry no TLS fingerprint yet (a data pod's sidecar reports the \
                 certificate it serves shortly after it starts, the operator measures a \
                 reloading Sentinel's on its next pass; pods created by an older operator carry \
                 none until something replaces them): {}",
                unmeasured.join("; ")
            ),
        ));
    }
    tiers.iter().all(|tier| tier.current.is_some()).then(|| {
        (
            false,
            ConditionReason::TLSMaterialCurrent,
            "every pod runs the current TLS material".to_owned(),
        )
    })
}

/// `status.observerReady` from the observer Deployment under its generated name: ready only
/// when this Valkey controls it and at least one of its pods is ready (the observer's
/// readiness is its last health verdict). A foreign or missing Deployment reads as not ready.
pub fn observer_ready(
    enabled: bool,
    deployment: Option<&k8s_openapi::api::apps::v1::Deployment>,
    valkey_uid: &str,
) -> Option<bool> {
    if !enabled {
        return None;
    }
    let Some(deployment) = deployment else {
        return Some(false);
    };
    let controlled = deployment
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == valkey_uid);
    let ready = deployment
        .status
        .as_ref()
        .and_then(|status| status.ready_replicas)
        .unwrap_or(0);
    Some(controlled && ready > 0)
}

/// The data-plane verdict of a snapshot, before the blocked override.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub phase: Phase,
    pub message: String,
    pub ready: bool,
}

/// Phase and message of the data plane alone.
pub fn data_plane_verdict(s: &Snapshot) -> Verdict {
    let not_ready = |phase, message: String| Verdict {
        phase,
        message,
        ready: false,
    };
    if !s.statefulset_exists {
        return not_ready(
            Phase::Provisioning,
            "Waiting for StatefulSet creation".into(),
        );
    }
    if s.ready_pods < s.spec_replicas {
        return not_ready(
            Phase::Provisioning,
            format!("{}/{} data pods ready", s.ready_pods, s.spec_replicas),
        );
    }
    let unreachable: Vec<String> = s
        .probes
        .iter()
        .filter_map(|p| match &p.state {
            ProbeState::Unreachable(why) | ProbeState::NotRunning(why) => {
                Some(format!("{}: {why}", p.pod))
            }
            _ => None,
        })
        .collect();
    if !unreachable.is_empty() {
        return not_ready(
            Phase::Error,
            format!("Instance unreachable: {}", unreachable.join("; ")),
        );
    }
    let Some(master) = s.master else {
        if s.sentinel {
            return not_ready(
                Phase::FailoverInProgress,
                "Sentinel names no reachable master".into(),
            );
        }
        let note = s.authority_note.clone().unwrap_or_default();
        return not_ready(
            Phase::Error,
            format!(
                "no master found among {} pods{}{note}",
                s.probes.len(),
                if note.is_empty() { "" } else { ": " }
            ),
        );
    };
    let master_answers = s
        .probes
        .iter()
        .any(|p| p.ordinal == master && p.is_master());
    let masters = s.probes.iter().filter(|p| p.is_master()).count();
    if s.sentinel && (s.sentinel_failover || !master_answers) {
        return not_ready(
            Phase::FailoverInProgress,
            format!("Sentinel is moving the master ({}-{master})", s.name),
        );
    }
    if !master_answers {
        return not_ready(
            Phase::Error,
            format!(
                "the recorded master {}-{master} does not answer as master",
                s.name
            ),
        );
    }
    if masters > 1 {
        return not_ready(
            Phase::Error,
            format!(
                "{masters} pods answer as master; the recorded master is {}-{master}",
                s.name
            ),
        );
    }
    let unsynced = unsynced_replicas(&s.probes, master);
    if !unsynced.is_empty() {
        return not_ready(
            Phase::Syncing,
            format!("Replication sync in progress: {}", unsynced.join(", ")),
        );
    }
    if !s.sentinel_unaware.is_empty() {
        return not_ready(
            Phase::Syncing,
            format!(
                "Sentinel has not discovered replica {} yet",
                s.sentinel_unaware.join(", ")
            ),
        );
    }
    Verdict {
        phase: Phase::Ok,
        message: "Cluster is healthy".into(),
        ready: true,
    }
}

fn condition(
    type_: ConditionType,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    Condition {
        type_: type_.as_str().to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message,
        observed_generation: generation,
        last_transition_time: now.clone(),
    }
}

/// Sets `new` in `conditions`, keeping the old `lastTransitionTime` unless the status flipped.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = new;
        }
        None => conditions.push(new),
    }
}

/// The status this pass should leave behind.
pub fn desired_status(
    current: Option<&ValkeyStatus>,
    snapshot: &Snapshot,
    operator_version: &str,
    now: Time,
) -> ValkeyStatus {
    let verdict = data_plane_verdict(snapshot);
    let rolling_phase = snapshot
        .roll
        .as_ref()
        .and_then(|roll| Some((roll.phase.clone()?, roll.summary.clone())));
    let rolling = rolling_phase.is_some();
    let (phase, message) = match (&snapshot.blocked, rolling_phase) {
        // A fresh cluster waiting for its Secret (cert-manager still issuing, the auth Secret not
        // created yet) is being provisioned, not broken: the reference's phase and message.
        // `ReconcileBlocked=True/SecretMissing` still names the Secret.
        (Some(blocked), _)
            if blocked.reason == ConditionReason::SecretMissing && !snapshot.statefulset_exists =>
        {
            (
                Phase::Provisioning,
                format!("Waiting for StatefulSet creation: {}", blocked.message),
            )
        }
        (Some(blocked), _) => (
            Phase::Error,
            format!("Failed to reconcile resources: {}", blocked.message),
        ),
        (None, Some(rolling)) => rolling,
        (None, None) => (verdict.phase.clone(), verdict.message.clone()),
    };
    let mut conditions = current
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let rolling_update = match &snapshot.roll {
        Some(roll) => rolling_update_status(&roll.state),
        None => current.and_then(|status| status.rolling_update.clone()),
    };
    // A roll in flight keeps Ready at its pre-roll value (the reference's contract: a planned pod
    // replacement is not the data plane failing; the phase says "Rolling Update i/n"). A pass
    // that did not evaluate the roll (`snapshot.roll` is `None`) keeps the recorded roll, so it
    // keeps Ready with it: a restarted operator's passes must not report the roll's pods as a
    // failing data plane.
    let keep_ready = (rolling || rolling_update.is_some())
        && conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Ready.as_str());
    if !keep_ready {
        set_ready(&mut conditions, &verdict, snapshot.generation, &now);
    }
    set_condition(
        &mut conditions,
        match &snapshot.blocked {
            Some(blocked) => condition(
                ConditionType::ReconcileBlocked,
                true,
                blocked.reason.as_str(),
                blocked.message.clone(),
                snapshot.generation,
                &now,
            ),
            None => condition(
                ConditionType::ReconcileBlocked,
                false,
                ConditionReason::ReconcileSucceeded.as_str(),
                "every managed object is applied".into(),
                snapshot.generation,
                &now,
            ),
        },
    );
    if let Some(roll) = &snapshot.roll {
        for change in &roll.conditions {
            let present = conditions.iter().find(|c| c.type_ == change.type_.as_str());
            let write = match change.when {
                vko_roll::WriteWhen::Always => true,
                vko_roll::WriteWhen::IfPresent => present.is_some(),
                vko_roll::WriteWhen::IfTrue => present.is_some_and(|c| c.status == "True"),
            };
            if write {
                set_condition(
                    &mut conditions,
                    condition(
                        change.type_,
                        change.status,
                        change.reason.as_str(),
                        change.message.clone(),
                        snapshot.generation,
                        &now,
                    ),
                );
            }
        }
    }
    let tls_present = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::TLSMaterialStale.as_str())
        .cloned();
    if let Some((status, reason, message)) =
        tls_material_condition(snapshot.tls_material.as_deref(), tls_present.as_ref())
    {
        set_condition(
            &mut conditions,
            condition(
                ConditionType::TLSMaterialStale,
                status,
                reason.as_str(),
                message,
                snapshot.generation,
                &now,
            ),
        );
    }
    if let Some(rotation) = &snapshot.password_rotation {
        let present = conditions
            .iter()
            .find(|c| c.type_ == ConditionType::PasswordRotation.as_str());
        if let Some((status, reason, message)) =
            password::password_rotation_condition(rotation, present)
        {
            set_condition(
                &mut conditions,
                condition(
                    ConditionType::PasswordRotation,
                    status,
                    reason.as_str(),
                    message,
                    snapshot.generation,
                    &now,
                ),
            );
        }
    }
    if snapshot.storage != StorageCheck::NotCompared {
        let standing = conditions
            .iter()
            .find(|c| c.type_ == ConditionType::StorageSpecNotApplied.as_str())
            .is_some_and(|c| c.status == "True");
        let next = match &snapshot.storage {
            StorageCheck::Conflict(conflict) => Some(condition(
                ConditionType::StorageSpecNotApplied,
                true,
                match conflict {
                    StorageConflict::RecreateRequired { .. } => {
                        ConditionReason::RecreateRequired.as_str()
                    }
                    StorageConflict::Immutable { .. } => {
                        ConditionReason::VolumeClaimTemplatesImmutable.as_str()
                    }
                },
                conflict.difference().to_owned(),
                snapshot.generation,
                &now,
            )),
            // Written only on a cluster that had a conflict.
            StorageCheck::Matches | StorageCheck::NotCompared => standing.then(|| {
                condition(
                    ConditionType::StorageSpecNotApplied,
                    false,
                    ConditionReason::StorageSpecApplied.as_str(),
                    "the StatefulSet's volume claims match spec.persistence".to_owned(),
                    snapshot.generation,
                    &now,
                )
            }),
        };
        if let Some(next) = next {
            set_condition(&mut conditions, next);
        }
    }
    let rw_standing = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::RWServiceEmpty.as_str())
        .is_some_and(|c| c.status == "True");
    // Judged only on a settled cluster: every pod ready and answering, no roll, no failover. The
    // sidecars write the label, so this reports on them.
    let settled = verdict.ready && rolling_update.is_none() && !snapshot.sentinel_failover;
    let rw = if snapshot.labeled_masters.is_empty() {
        settled.then(|| {
            condition(
                ConditionType::RWServiceEmpty,
                true,
                ConditionReason::NoPodLabeledMaster.as_str(),
                format!(
                    "no data pod carries the {}={} label, so the {}-rw Service has no endpoints and \
                     serves no writes; the sidecars set it: check the sidecar container logs of the \
                     data pods",
                    vko_api::consts::labels::INSTANCE_ROLE,
                    vko_api::consts::labels::ROLE_MASTER,
                    snapshot.name
                ),
                snapshot.generation,
                &now,
            )
        })
    } else {
        rw_standing.then(|| {
            condition(
                ConditionType::RWServiceEmpty,
                false,
                ConditionReason::MasterLabeled.as_str(),
                format!(
                    "{} carries the master label",
                    snapshot.labeled_masters.join(", ")
                ),
                snapshot.generation,
                &now,
            )
        })
    };
    if let Some(rw) = rw {
        set_condition(&mut conditions, rw);
    }
    if let Some((status, reason, message)) = snapshot
        .sentinel_peers
        .as_ref()
        .map(sentinel_peers_condition)
    {
        set_condition(
            &mut conditions,
            condition(
                ConditionType::SentinelPeersStale,
                status,
                reason.as_str(),
                message,
                snapshot.generation,
                &now,
            ),
        );
    }
    let lists = [
        ListCondition {
            type_: ConditionType::ConfigurationWarning,
            items: snapshot
                .advisories
                .iter()
                .map(|a| (a.reason, a.message.clone()))
                .collect(),
            separator: ". ",
            cleared: (
                ConditionReason::NoConfigurationWarnings,
                "the spec raises no configuration warning",
            ),
        },
        ListCondition {
            type_: ConditionType::PodsNotStarting,
            items: snapshot
                .pod_problems
                .iter()
                .map(|p| (p.reason, p.line()))
                .collect(),
            separator: "; ",
            cleared: (
                ConditionReason::PodsStarted,
                "every pod of the cluster has started",
            ),
        },
        ListCondition {
            type_: ConditionType::MasterFenced,
            items: snapshot
                .fenced_pods
                .iter()
                .map(|p| (p.reason, p.line()))
                .collect(),
            separator: "; ",
            cleared: (ConditionReason::NoMasterFenced, "no master is fenced"),
        },
    ];
    for list in lists {
        if let Some((status, reason, message)) = list.verdict(&conditions) {
            set_condition(
                &mut conditions,
                condition(
                    list.type_,
                    status,
                    reason.as_str(),
                    message,
                    snapshot.generation,
                    &now,
                ),
            );
        }
    }
    let master_pod = snapshot
        .master
        .map(|ordinal| format!("{}-{ordinal}", snapshot.name))
        .or_else(|| current.and_then(|status| status.master_pod.clone()));
    ValkeyStatus {
        ready_replicas: Some(snapshot.ready_pods),
        master_pod,
        observer_ready: snapshot.observer_ready,
        phase: Some(phase),
        message: Some(message),
        conditions: Some(conditions),
        operator_version: Some(operator_version.to_owned()),
        observed_generation: snapshot.generation,
        rolling_update,
        password_rotation: password::password_rotation_record(
            snapshot.password_rotation.as_ref(),
            current.and_then(|status| status.password_rotation.as_ref()),
        ),
    }
}

/// `Ready` from the data-plane verdict.
fn set_ready(
    conditions: &mut Vec<Condition>,
    verdict: &Verdict,
    generation: Option<i64>,
    now: &Time,
) {
    let (status, reason) = if verdict.ready {
        (true, ConditionReason::ClusterReady)
    } else {
        (false, ConditionReason::ClusterNotReady)
    };
    set_condition(
        conditions,
        condition(
            ConditionType::Ready,
            status,
            reason.as_str(),
            verdict.message.clone(),
            generation,
            now,
        ),
    );
}

/// A condition that lists what stands (configuration warnings, pods that cannot start): True with
/// the first item's reason and every item's line joined by `separator`; once the list is empty,
/// False with `cleared` — written only on a cluster that had it True.
struct ListCondition<'a> {
    type_: ConditionType,
    items: Vec<(ConditionReason, String)>,
    separator: &'a str,
    cleared: (ConditionReason, &'a str),
}

impl ListCondition<'_> {
    fn verdict(&self, conditions: &[Condition]) -> Option<(bool, ConditionReason, String)> {
        match self.items.first() {
            Some((reason, _)) => Some((
                true,
                *reason,
                self.items
                    .iter()
                    .map(|(_, line)| line.as_str())
                    .collect::<Vec<_>>()
                    .join(self.separator),
            )),
            None => conditions
                .iter()
                .any(|c| c.type_ == self.type_.as_str() && c.status == "True")
                .then(|| (false, self.cleared.0, self.cleared.1.to_owned())),
        }
    }
}

/// One Warning Event per item whose `key` the previous status's `type_` condition (when True) does
/// not contain: what stands is not repeated every pass.
fn events_for_new<'a>(
    old: Option<&ValkeyStatus>,
    type_: ConditionType,
    items: impl Iterator<Item = (ConditionReason, String, String)> + 'a,
) -> Vec<EventSpec> {
    let standing = find(old, type_)
        .filter(|c| c.status == "True")
        .map(|c| c.message.as_str());
    items
        .filter(|(_, key, _)| !standing.is_some_and(|message| message.contains(key.as_str())))
        .map(|(reason, _, note)| EventSpec {
            type_: EventType::Warning,
            reason: reason.as_str().to_owned(),
            note,
        })
        .collect()
}

/// One Warning Event per configuration warning the previous status did not carry yet (a warning
/// that stands is not repeated every pass, unlike the reference's PDB Events: ADR 0015).
pub fn advisory_events(old: Option<&ValkeyStatus>, advisories: &[Advisory]) -> Vec<EventSpec> {
    events_for_new(
        old,
        ConditionType::ConfigurationWarning,
        advisories
            .iter()
            .map(|a| (a.reason, a.message.clone(), a.message.clone())),
    )
}

/// One Warning Event per pod and reason that newly cannot start (a changed scheduler or kubelet
/// message for the same pod and reason is not a new Event).
pub fn pod_problem_events(old: Option<&ValkeyStatus>, problems: &[PodProblem]) -> Vec<EventSpec> {
    events_for_new(
        old,
        ConditionType::PodsNotStarting,
        problems
            .iter()
            .map(|p| (p.reason, format!("{}: {}:", p.pod, p.reason), p.line())),
    )
}

/// One Warning Event per pod that newly fenced itself (a fence that stands is not repeated).
/// While the cluster is first provisioned, a master not yet named by the Sentinels is fenced by
/// design (ADR 0019: writes wait at bootstrap until a majority names it): the condition says so,
/// but it is no fault to warn of.
pub fn fenced_events(old: Option<&ValkeyStatus>, fenced: &[FencedPod]) -> Vec<EventSpec> {
    let provisioning = old
        .and_then(|status| status.phase.as_ref())
        .is_none_or(|phase| *phase == Phase::Provisioning);
    events_for_new(
        old,
        ConditionType::MasterFenced,
        fenced
            .iter()
            .filter(|p| !(provisioning && p.reason == ConditionReason::AuthorityNeverProven))
            .map(|p| (p.reason, format!("{}: {}:", p.pod, p.reason), p.line())),
    )
}

/// The roll state as `status.rollingUpdate` (`None` when not rolling).
pub fn rolling_update_status(state: &RollState) -> Option<RollingUpdateStatus> {
    if *state == RollState::default() {
        return None;
    }
    serde_json::to_value(state)
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
}

/// One Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    pub type_: EventType,
    pub reason: String,
    pub note: String,
}

fn find(status: Option<&ValkeyStatus>, type_: ConditionType) -> Option<&Condition> {
    status?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_.as_str())
}

/// Events for what changed between two statuses (nothing when nothing changed).
pub fn transition_events(old: Option<&ValkeyStatus>, new: &ValkeyStatus) -> Vec<EventSpec> {
    let mut events = Vec::new();
    let old_blocked = find(old, ConditionType::ReconcileBlocked);
    let new_blocked = find(Some(new), ConditionType::ReconcileBlocked);
    if let Some(new_blocked) = new_blocked {
        let was_true = old_blocked.is_some_and(|c| c.status == "True");
        if new_blocked.status == "True" {
            let same = old_blocked.is_some_and(|c| {
                c.status == "True"
                    && c.reason == new_blocked.reason
                    && c.message == new_blocked.message
            });
            if !same {
                events.push(EventSpec {
                    type_: EventType::Warning,
                    reason: new_blocked.reason.clone(),
                    note: new_blocked.message.clone(),
                });
            }
        } else if was_true {
            events.push(EventSpec {
                type_: EventType::Normal,
                reason: ConditionReason::ReconcileSucceeded.as_str().to_owned(),
                note: "Every managed object is applied again".into(),
            });
        }
    }
    // Each step of a password rotation once (ADR 0035).
    if let Some(rotation) = find(Some(new), ConditionType::PasswordRotation)
        && find(old, ConditionType::PasswordRotation).is_none_or(|c| c.reason != rotation.reason)
    {
        let failed = rotation.reason == ConditionReason::OldPasswordRetireFailed.as_str();
        events.push(EventSpec {
            type_: if failed {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: rotation.reason.clone(),
            note: rotation.message.clone(),
        });
    }
    if let Some(storage) = find(Some(new), ConditionType::StorageSpecNotApplied)
        && storage.status == "True"
    {
        let same = find(old, ConditionType::StorageSpecNotApplied)
            .is_some_and(|c| c.status == "True" && c.message == storage.message);
        if !same {
            events.push(EventSpec {
                type_: EventType::Warning,
                reason: "StatefulSetRecreateRequired".into(),
                note: storage.message.clone(),
            });
        }
    }
    let old_ready = find(old, ConditionType::Ready).map(|c| c.status == "True");
    // A pod being replaced by a roll is planned, not a fault: no Warning for it.
    let rolling = new.rolling_update.is_some()
        || matches!(
            new.phase,
            Some(Phase::RollingUpdate { .. } | Phase::SentinelRollingUpdate { .. })
        );
    if let Some(new_ready) = find(Some(new), ConditionType::Ready) {
        match (old_ready, new_ready.status == "True") {
            (Some(true), false) if rolling => {}
            (Some(true), false) => events.push(EventSpec {
                type_: EventType::Warning,
                reason: "ClusterNotReady".into(),
                note: new_ready.message.clone(),
            }),
            (Some(false) | None, true) => events.push(EventSpec {
                type_: EventType::Normal,
                reason: "ClusterReady".into(),
                note: new_ready.message.clone(),
            }),
            _ => {}
        }
    }
    if let (Some(before), Some(after)) = (
        old.and_then(|s| s.master_pod.as_ref()),
        new.master_pod.as_ref(),
    ) && before != after
    {
        events.push(EventSpec {
            type_: EventType::Normal,
            reason: "MasterChanged".into(),
            note: format!("The master moved from {before} to {after}"),
        });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn probe(ordinal: u32, state: ProbeState) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state,
        }
    }

    fn master(ordinal: u32) -> PodProbe {
        probe(
            ordinal,
            ProbeState::Master {
                repl_offset: 10,
                keys: 1,
                connected_replicas: 1,
            },
        )
    }

    fn replica(ordinal: u32, of: u32, link_up: bool) -> PodProbe {
        probe(
            ordinal,
            ProbeState::Replica {
                master_ordinal: Some(of),
                in_hold: false,
                link_up,
                syncing: false,
                repl_offset: 10,
                keys: 1,
            },
        )
    }

    fn standalone_ok() -> Snapshot {
        Snapshot {
            name: "a".into(),
            generation: Some(3),
            spec_replicas: 1,
            sentinel: false,
            statefulset_exists: true,
            ready_pods: 1,
            probes: vec![master(0)],
            master: Some(0),
            sentinel_failover: false,
            sentinel_unaware: Vec::new(),
            authority_note: None,
            blocked: None,
            roll: None,
            observer_ready: None,
            tls_material: None,
            storage: StorageCheck::NotCompared,
            labeled_masters: vec!["a-0".into()],
            sentinel_peers: None,
            advisories: Vec::new(),
            pod_problems: Vec::new(),
            fenced_pods: Vec::new(),
            password_rotation: None,
        }
    }

    #[test]
    fn observer_ready_needs_our_deployment_with_a_ready_pod() {
        use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
        let deployment = |controller_uid: &str, ready: Option<i32>| Deployment {
            metadata: ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    uid: controller_uid.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            status: Some(DeploymentStatus {
                ready_replicas: ready,
                ..DeploymentStatus::default()
            }),
            ..Deployment::default()
        };
        let ours_ready = deployment("uid-1", Some(1));
        assert_eq!(observer_ready(false, Some(&ours_ready), "uid-1"), None);
        assert_eq!(observer_ready(true, None, "uid-1"), Some(false));
        assert_eq!(observer_ready(true, Some(&ours_ready), "uid-1"), Some(true));
        assert_eq!(
            observer_ready(true, Some(&deployment("uid-1", Some(0))), "uid-1"),
            Some(false)
        );
        assert_eq!(
            observer_ready(true, Some(&deployment("uid-1", None)), "uid-1"),
            Some(false)
        );
        // A foreign Deployment under the generated name is never reported as our observer.
        assert_eq!(
            observer_ready(true, Some(&deployment("someone-else", Some(1))), "uid-1"),
            Some(false)
        );
        // The status carries the snapshot's value, also back to unset.
        let mut snapshot = standalone_ok();
        snapshot.observer_ready = Some(true);
        let now = at(0);
        let with = desired_status(None, &snapshot, "v", now.clone());
        assert_eq!(with.observer_ready, Some(true));
        snapshot.observer_ready = None;
        assert_eq!(
            desired_status(Some(&with), &snapshot, "v", now).observer_ready,
            None
        );
    }

    #[test]
    fn phases_follow_the_data_plane() {
        let ok = standalone_ok();
        assert_eq!(data_plane_verdict(&ok).phase, Phase::Ok);
        assert!(data_plane_verdict(&ok).ready);

        let no_sts = Snapshot {
            statefulset_exists: false,
            ready_pods: 0,
            probes: vec![],
            master: None,
            ..ok.clone()
        };
        assert_eq!(data_plane_verdict(&no_sts).phase, Phase::Provisioning);

        let starting = Snapshot {
            spec_replicas: 3,
            ready_pods: 2,
            ..ok.clone()
        };
        let verdict = data_plane_verdict(&starting);
        assert_eq!(verdict.phase, Phase::Provisioning);
        assert_eq!(verdict.message, "2/3 data pods ready");

        let syncing = Snapshot {
            spec_replicas: 2,
            ready_pods: 2,
            probes: vec![master(0), replica(1, 0, false)],
            ..ok.clone()
        };
        assert_eq!(data_plane_verdict(&syncing).phase, Phase::Syncing);
        let synced = Snapshot {
            probes: vec![master(0), replica(1, 0, true)],
            ..syncing.clone()
        };
        assert_eq!(data_plane_verdict(&synced).phase, Phase::Ok);
        let undiscovered = Snapshot {
            sentinel: true,
            sentinel_unaware: vec!["a-1".into()],
            ..synced.clone()
        };
        let verdict = data_plane_verdict(&undiscovered);
        assert_eq!(verdict.phase, Phase::Syncing);
        assert_eq!(
            verdict.message,
            "Sentinel has not discovered replica a-1 yet"
        );

        let unreachable = Snapshot {
            probes: vec![probe(0, ProbeState::Unreachable("timed out".into()))],
            ..ok.clone()
        };
        let verdict = data_plane_verdict(&unreachable);
        assert_eq!(verdict.phase, Phase::Error);
        assert!(
            verdict.message.contains("a-0: timed out"),
            "{}",
            verdict.message
        );

        let failover = Snapshot {
            sentinel: true,
            spec_replicas: 2,
            ready_pods: 2,
            probes: vec![replica(0, 1, false), replica(1, 0, false)],
            master: Some(1),
            ..ok.clone()
        };
        assert_eq!(
            data_plane_verdict(&failover).phase,
            Phase::FailoverInProgress
        );
        let split = Snapshot {
            spec_replicas: 2,
            ready_pods: 2,
            probes: vec![master(0), master(1)],
            ..ok
        };
        assert_eq!(data_plane_verdict(&split).phase, Phase::Error);
    }

    #[test]
    fn a_blocked_pass_reports_error_but_ready_keeps_the_data_plane_truth() {
        let snapshot = Snapshot {
            blocked: Some(Blocked {
                reason: ConditionReason::ForeignObject,
                message: "ConfigMap a-config exists but is not controlled by this Valkey".into(),
            }),
            ..standalone_ok()
        };
        let status = desired_status(None, &snapshot, "0.1.0", at(100));
        assert_eq!(status.phase, Some(Phase::Error));
        assert!(
            status
                .message
                .as_deref()
                .unwrap()
                .starts_with("Failed to reconcile resources: ConfigMap a-config")
        );
        let conditions = status.conditions.unwrap();
        let ready = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "True");
        let blocked = conditions
            .iter()
            .find(|c| c.type_ == "ReconcileBlocked")
            .unwrap();
        assert_eq!(
            (blocked.status.as_str(), blocked.reason.as_str()),
            ("True", "ForeignObject")
        );
        assert_eq!(blocked.observed_generation, Some(3));
        assert_eq!(status.master_pod.as_deref(), Some("a-0"));
        assert_eq!(status.observed_generation, Some(3));
    }

    #[test]
    fn a_roll_in_flight_keeps_ready_at_its_pre_roll_value() {
        let before = desired_status(None, &standalone_ok(), "v", at(1));
        let mut rolling = standalone_ok();
        // The pod being replaced: not ready, not answering.
        rolling.ready_pods = 0;
        rolling.probes = vec![probe(0, ProbeState::Unreachable("gone".into()))];
        rolling.roll = Some(rolling_decision());
        let during = desired_status(Some(&before), &rolling, "v", at(2));
        assert_eq!(
            find(Some(&during), ConditionType::Ready),
            find(Some(&before), ConditionType::Ready),
            "Ready is the pre-roll value while the roll is in flight"
        );
        assert_eq!(transition_events(Some(&before), &during), vec![]);
        // The roll over (no phase from the machine): Ready is the data plane's again.
        rolling.roll = None;
        let after = desired_status(Some(&during), &rolling, "v", at(3));
        let ready = find(Some(&after), ConditionType::Ready).unwrap();
        assert_eq!(ready.status, "False");
        // A pass that did not evaluate the roll keeps the roll the status records, and Ready
        // with it (a restarted operator's first passes, a pass whose roll step was skipped).
        rolling.roll = Some(rolling_decision_recorded());
        let recorded = desired_status(Some(&before), &rolling, "v", at(5));
        assert!(recorded.rolling_update.is_some());
        rolling.roll = None;
        let skipped = desired_status(Some(&recorded), &rolling, "v", at(6));
        assert_eq!(skipped.rolling_update, recorded.rolling_update);
        assert_eq!(
            find(Some(&skipped), ConditionType::Ready),
            find(Some(&before), ConditionType::Ready),
            "Ready is kept while the status still records the roll"
        );
        // A first pass that is already rolling has no pre-roll value: it writes the truth.
        rolling.roll = Some(rolling_decision());
        let fresh = desired_status(None, &rolling, "v", at(4));
        assert!(find(Some(&fresh), ConditionType::Ready).is_some());
    }

    /// The machine waiting for a replaced pod, mid-roll.
    fn rolling_decision() -> vko_roll::Decision {
        vko_roll::Decision {
            action: vko_roll::Action::Wait {
                reason: vko_roll::WaitReason::PodRecreation,
                pod: None,
                deadline: vko_roll::Millis(10_000),
            },
            state: RollState::default(),
            phase: Some(Phase::RollingUpdate {
                current: 1,
                total: 1,
            }),
            summary: "rolling".into(),
            conditions: Vec::new(),
            events: Vec::new(),
        }
    }

    /// As [`rolling_decision`], with a roll recorded in the state (the data tier in flight).
    fn rolling_decision_recorded() -> vko_roll::Decision {
        vko_roll::Decision {
            state: RollState {
                tier: Some(vko_roll::Tier::Data),
                data_target: Some("target".into()),
                ..RollState::default()
            },
            ..rolling_decision()
        }
    }

    #[test]
    fn a_missing_secret_is_provisioning_before_the_statefulset_and_error_after() {
        let missing = Blocked {
            reason: ConditionReason::SecretMissing,
            message: "the TLS Secret tls does not exist".into(),
        };
        let mut fresh = standalone_ok();
        fresh.statefulset_exists = false;
        fresh.ready_pods = 0;
        fresh.probes.clear();
        fresh.master = None;
        fresh.blocked = Some(missing.clone());
        let waiting = desired_status(None, &fresh, "v", at(1));
        assert_eq!(waiting.phase, Some(Phase::Provisioning));
        assert_eq!(
            waiting.message.as_deref(),
            Some("Waiting for StatefulSet creation: the TLS Secret tls does not exist")
        );
        let blocked = find(Some(&waiting), ConditionType::ReconcileBlocked).unwrap();
        assert_eq!(
            (blocked.status.as_str(), blocked.reason.as_str()),
            ("True", "SecretMissing")
        );

        // Deleted under a running cluster: something broke.
        let mut running = standalone_ok();
        running.blocked = Some(missing);
        let broken = desired_status(None, &running, "v", at(2));
        assert_eq!(broken.phase, Some(Phase::Error));
        // Any other refusal before the StatefulSet is an error too.
        fresh.blocked = Some(Blocked {
            reason: ConditionReason::PasswordUnusable,
            message: "empty".into(),
        });
        assert_eq!(
            desired_status(None, &fresh, "v", at(3)).phase,
            Some(Phase::Error)
        );
    }

    #[test]
    fn master_fenced_names_the_pod_and_why_and_warns_once() {
        use k8s_openapi::api::core::v1::Pod;
        let pod = |name: &str, fenced: Option<&str>| {
            let mut p = Pod::default();
            p.metadata.name = Some(name.into());
            if let Some(value) = fenced {
                p.metadata.annotations = Some(
                    [(
                        vko_api::consts::annotations::FENCED.to_owned(),
                        value.to_owned(),
                    )]
                    .into(),
                );
            }
            p
        };
        let pods = [
            pod("a-0", Some("AuthorityNotProven since 2026-12-01T20:30:00Z")),
            pod("a-1", None),
        ];
        let mut snapshot = standalone_ok();
        snapshot.fenced_pods = pods::fenced_pods(&pods);
        let first = desired_status(None, &snapshot, "v", at(1));
        let condition = find(Some(&first), ConditionType::MasterFenced).unwrap();
        assert_eq!(condition.status, "True");
        assert_eq!(condition.reason, "AuthorityNotProven");
        assert!(
            condition
                .message
                .starts_with("a-0: AuthorityNotProven: writes paused since 2026-12-01T20:30:00Z"),
            "{}",
            condition.message
        );
        let events = fenced_events(None, &snapshot.fenced_pods);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].type_, EventType::Warning);
        assert_eq!(events[0].reason, "AuthorityNotProven");
        assert!(
            fenced_events(Some(&first), &snapshot.fenced_pods).is_empty(),
            "once"
        );
        snapshot.fenced_pods.clear();
        let cleared = desired_status(Some(&first), &snapshot, "v", at(1));
        let condition = find(Some(&cleared), ConditionType::MasterFenced).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "NoMasterFenced")
        );
        let never = desired_status(None, &snapshot, "v", at(1));
        assert!(find(Some(&never), ConditionType::MasterFenced).is_none());
        let other = pods::fenced_pods(&[pod("a-2", Some("AuthorityNeverProven since t"))]);
        assert_eq!(other[0].reason, ConditionReason::AuthorityNeverProven);
    }

    #[test]
    fn a_master_not_yet_named_at_bootstrap_is_reported_without_a_warning_event() {
        let mut snapshot = standalone_ok();
        snapshot.fenced_pods = vec![FencedPod {
            pod: "a-0".into(),
            reason: ConditionReason::AuthorityNeverProven,
            since: "t".into(),
        }];
        let mut provisioning = desired_status(None, &snapshot, "v", at(1));
        provisioning.phase = Some(Phase::Provisioning);
        let condition = find(Some(&provisioning), ConditionType::MasterFenced).unwrap();
        assert_eq!(condition.reason, "AuthorityNeverProven");
        assert!(fenced_events(None, &snapshot.fenced_pods).is_empty());
        assert!(fenced_events(Some(&provisioning), &snapshot.fenced_pods).is_empty());
        // Once the cluster ran, a master that lost its proof and restarted unproven is a fault.
        let mut ran = provisioning.clone();
        ran.phase = Some(Phase::Ok);
        ran.conditions = None;
        let events = fenced_events(Some(&ran), &snapshot.fenced_pods);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "AuthorityNeverProven");
    }

    #[test]
    fn pods_not_starting_names_each_pod_and_warns_once_per_pod_and_reason() {
        let problem = |pod: &str, reason, detail: &str| PodProblem {
            pod: pod.to_owned(),
            reason,
            detail: detail.to_owned(),
        };
        let mut snapshot = standalone_ok();
        snapshot.pod_problems = vec![problem(
            "a-0",
            ConditionReason::ImagePullFailed,
            "container valkey ErrImagePull: no binaries",
        )];
        let first = desired_status(None, &snapshot, "v", at(1));
        let condition = find(Some(&first), ConditionType::PodsNotStarting).unwrap();
        assert_eq!(
            (
                condition.status.as_str(),
                condition.reason.as_str(),
                condition.message.as_str()
            ),
            (
                "True",
                "ImagePullFailed",
                "a-0: ImagePullFailed: container valkey ErrImagePull: no binaries"
            )
        );
        let events = pod_problem_events(None, &snapshot.pod_problems);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "ImagePullFailed");
        // The kubelet's message changes (ErrImagePull ↔ ImagePullBackOff): no new Event.
        snapshot.pod_problems[0].detail = "container valkey ImagePullBackOff".into();
        assert_eq!(
            pod_problem_events(Some(&first), &snapshot.pod_problems),
            vec![]
        );
        // Another pod: one Event for it.
        snapshot.pod_problems.push(problem(
            "a-3",
            ConditionReason::PodUnschedulable,
            "0/3 nodes",
        ));
        let second = desired_status(Some(&first), &snapshot, "v", at(2));
        let events = pod_problem_events(Some(&first), &snapshot.pod_problems);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].note, "a-3: PodUnschedulable: 0/3 nodes");
        snapshot.pod_problems.clear();
        let cleared = desired_status(Some(&second), &snapshot, "v", at(3));
        let condition = find(Some(&cleared), ConditionType::PodsNotStarting).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "PodsStarted")
        );
        // Never had one: never written.
        let never = desired_status(None, &standalone_ok(), "v", at(4));
        assert!(find(Some(&never), ConditionType::PodsNotStarting).is_none());
    }

    #[test]
    fn configuration_warnings_are_one_condition_and_an_event_each_when_they_appear() {
        let warning = |reason, message: &str| Advisory {
            reason,
            message: message.to_owned(),
        };
        let auth = warning(ConditionReason::AuthDisabled, "spec.auth is not set");
        let scrape = warning(ConditionReason::ExporterScrapeUnrestricted, "/scrape");
        let never = desired_status(None, &standalone_ok(), "v", at(1));
        assert!(find(Some(&never), ConditionType::ConfigurationWarning).is_none());

        let mut snapshot = standalone_ok();
        snapshot.advisories = vec![auth.clone()];
        let first = desired_status(Some(&never), &snapshot, "v", at(2));
        let condition = find(Some(&first), ConditionType::ConfigurationWarning).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "AuthDisabled")
        );
        let events = advisory_events(Some(&never), &snapshot.advisories);
        assert_eq!(events.len(), 1);
        assert_eq!(
            (events[0].type_, events[0].reason.as_str()),
            (EventType::Warning, "AuthDisabled")
        );
        // Standing: not repeated; a new one next to it: only the new one.
        assert_eq!(advisory_events(Some(&first), &snapshot.advisories), vec![]);
        snapshot.advisories = vec![auth, scrape];
        let second = desired_status(Some(&first), &snapshot, "v", at(3));
        let condition = find(Some(&second), ConditionType::ConfigurationWarning).unwrap();
        assert_eq!(condition.message, "spec.auth is not set. /scrape");
        assert_eq!(condition.last_transition_time, at(2));
        let events = advisory_events(Some(&first), &snapshot.advisories);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "ExporterScrapeUnrestricted");

        snapshot.advisories.clear();
        let cleared = desired_status(Some(&second), &snapshot, "v", at(4));
        let condition = find(Some(&cleared), ConditionType::ConfigurationWarning).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "NoConfigurationWarnings")
        );
        assert_eq!(advisory_events(Some(&second), &[]), vec![]);
    }

    #[test]
    fn transition_time_changes_only_when_the_status_flips_and_an_unchanged_pass_is_equal() {
        let first = desired_status(None, &standalone_ok(), "0.1.0", at(100));
        let again = desired_status(Some(&first), &standalone_ok(), "0.1.0", at(200));
        assert_eq!(first, again, "nothing changed: no write");
        assert!(transition_events(Some(&first), &again).is_empty());

        let broken = Snapshot {
            probes: vec![probe(0, ProbeState::Unreachable("refused".into()))],
            ..standalone_ok()
        };
        let second = desired_status(Some(&first), &broken, "0.1.0", at(300));
        let ready = |s: &ValkeyStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .cloned()
                .unwrap()
        };
        assert_eq!(ready(&second).last_transition_time, at(300));
        let blocked_time = |s: &ValkeyStatus| {
            s.conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "ReconcileBlocked")
                .unwrap()
                .last_transition_time
                .clone()
        };
        assert_eq!(blocked_time(&second), at(100));
        let events = transition_events(Some(&first), &second);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].type_, EventType::Warning);
        assert_eq!(events[0].reason, "ClusterNotReady");
    }

    #[test]
    fn blocked_events_fire_once_per_new_problem_and_once_on_recovery() {
        let clean = desired_status(None, &standalone_ok(), "v", at(1));
        let blocked = |message: &str| Snapshot {
            blocked: Some(Blocked {
                reason: ConditionReason::SecretMissing,
                message: message.into(),
            }),
            ..standalone_ok()
        };
        let missing = desired_status(
            Some(&clean),
            &blocked("auth Secret pw does not exist"),
            "v",
            at(2),
        );
        let events = transition_events(Some(&clean), &missing);
        assert_eq!(
            events,
            vec![EventSpec {
                type_: EventType::Warning,
                reason: ConditionReason::SecretMissing.as_str().into(),
                note: "auth Secret pw does not exist".into()
            }]
        );
        let still = desired_status(
            Some(&missing),
            &blocked("auth Secret pw does not exist"),
            "v",
            at(3),
        );
        assert!(transition_events(Some(&missing), &still).is_empty());
        let recovered = desired_status(Some(&still), &standalone_ok(), "v", at(4));
        let events = transition_events(Some(&still), &recovered);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "ReconcileSucceeded");
    }

    #[test]
    fn the_master_pod_is_kept_when_nobody_answers_and_a_move_is_an_event() {
        let first = desired_status(None, &standalone_ok(), "v", at(1));
        let lost = Snapshot {
            master: None,
            ..standalone_ok()
        };
        let second = desired_status(Some(&first), &lost, "v", at(2));
        assert_eq!(second.master_pod.as_deref(), Some("a-0"));
        let moved = Snapshot {
            master: Some(1),
            ..standalone_ok()
        };
        let third = desired_status(Some(&second), &moved, "v", at(3));
        let events = transition_events(Some(&second), &third);
        assert!(
            events
                .iter()
                .any(|e| e.reason == "MasterChanged" && e.note.contains("a-0 to a-1"))
        );
    }

    mod tls_material {
        use super::*;

        fn tier(
            tier: &'static str,
            current: Option<&str>,
            pods: &[(&str, Option<&str>)],
        ) -> TierMaterial {
            TierMaterial {
                tier,
                current: current.map(str::to_owned),
                pods: pods
                    .iter()
                    .map(|(pod, hash)| (pod.to_string(), hash.map(str::to_owned)))
                    .collect(),
            }
        }

        fn standing(status: &str) -> Condition {
            Condition {
                type_: "TLSMaterialStale".into(),
                status: status.into(),
                reason: "x".into(),
                message: "x".into(),
                observed_generation: None,
                last_transition_time: at(0),
            }
        }

        #[test]
        fn table() {
            use ConditionReason::*;
            let current_data = tier(
                "data",
                Some("new"),
                &[("a-0", Some("new")), ("a-1", Some("new"))],
            );
            let current_sentinel = tier("Sentinel", Some("new"), &[("a-sentinel-0", Some("new"))]);
            // (name, tiers, the condition standing, the expected (status, reason, named parts)).
            type Case = (
                &'static str,
                Option<Vec<TierMaterial>>,
                Option<Condition>,
                Option<(bool, ConditionReason, &'static [&'static str])>,
            );
            let cases: Vec<Case> = vec![
                (
                    "all current",
                    Some(vec![current_data.clone(), current_sentinel.clone()]),
                    None,
                    Some((false, TLSMaterialCurrent, &[])),
                ),
                (
                    "a rotated data Secret, one pod replaced so far",
                    Some(vec![
                        tier(
                            "data",
                            Some("new"),
                            &[("a-0", Some("old")), ("a-1", Some("new"))],
                        ),
                        current_sentinel.clone(),
                    ]),
                    None,
                    Some((true, TLSMaterialRollPending, &["data tier: a-0"])),
                ),
                (
                    "stale on both tiers",
                    Some(vec![
                        tier("data", Some("new"), &[("a-0", Some("old"))]),
                        tier(
                            "Sentinel",
                            Some("new"),
                            &[("a-sentinel-0", Some("old")), ("a-sentinel-1", Some("old"))],
                        ),
                    ]),
                    None,
                    Some((
                        true,
                        TLSMaterialRollPending,
                        &[
                            "data tier: a-0",
                            "Sentinel tier: a-sentinel-0, a-sentinel-1",
                        ],
                    )),
                ),
                (
                    "stale is reported while the other tier cannot be measured",
                    Some(vec![
                        tier("data", Some("new"), &[("a-0", Some("old"))]),
                        tier("Sentinel", None, &[("a-sentinel-0", Some("x"))]),
                    ]),
                    None,
                    Some((true, TLSMaterialRollPending, &["data tier: a-0"])),
                ),
                (
                    "no all-clear while a tier cannot be measured",
                    Some(vec![
                        current_data.clone(),
                        tier("Sentinel", None, &[("a-sentinel-0", Some("x"))]),
                    ]),
                    Some(standing("True")),
                    None,
                ),
                (
                    "pods without a fingerprint are unmeasured, not stale",
                    Some(vec![tier(
                        "data",
                        Some("new"),
                        &[("a-0", None), ("a-1", Some("new"))],
                    )]),
                    None,
                    Some((false, TLSMaterialUnmeasured, &["data tier: a-0"])),
                ),
                (
                    "stale wins over unmeasured",
                    Some(vec![tier(
                        "data",
                        Some("new"),
                        &[("a-0", None), ("a-1", Some("old"))],
                    )]),
                    None,
                    Some((true, TLSMaterialRollPending, &["data tier: a-1"])),
                ),
                (
                    "TLS off retracts a standing True",
                    None,
                    Some(standing("True")),
                    Some((false, TLSMaterialNotApplicable, &[])),
                ),
                (
                    "TLS off leaves a False alone",
                    None,
                    Some(standing("False")),
                    None,
                ),
                ("TLS off and never written: nothing", None, None, None),
            ];
            for (name, tiers, present, want) in cases {
                let got = tls_material_condition(tiers.as_deref(), present.as_ref());
                match (got, want) {
                    (None, None) => {}
                    (Some((status, reason, message)), Some((want_status, want_reason, named))) => {
                        assert_eq!(
                            (status, reason),
                            (want_status, want_reason),
                            "{name}: {message}"
                        );
                        for part in named {
                            assert!(message.contains(part), "{name}: {message:?} lacks {part:?}");
                        }
                    }
                    (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
                }
            }
        }

        #[test]
        fn the_fingerprint_is_read_from_any_container_or_the_legacy_annotation() {
            let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a-0"},
                "spec": {"containers": [
                    {"name": "valkey", "env": [{"name": "OTHER", "value": "x"}]},
                    {"name": "sidecar", "env": [{"name": "VKO_TLS_MATERIAL_HASH", "value": "h1"}]}
                ]}
            }))
            .unwrap();
            assert_eq!(pod_tls_fingerprint(&pod).as_deref(), Some("h1"));
            let legacy: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a-0", "annotations": {"vko.gtrfc.com/tls-material-hash": "h0"}},
                "spec": {"containers": [{"name": "valkey"}]}
            }))
            .unwrap();
            assert_eq!(pod_tls_fingerprint(&legacy).as_deref(), Some("h0"));
            let none: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a-0"}, "spec": {"containers": [{"name": "valkey"}]}
            }))
            .unwrap();
            assert_eq!(pod_tls_fingerprint(&none), None);
        }

        #[test]
        fn a_data_pods_material_is_its_templates_ca_and_the_certificate_it_serves() {
            let pod = |annotations: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "a-0", "annotations": annotations},
                    "spec": {"containers": [
                        {"name": "sidecar", "env": [{"name": "VKO_TLS_MATERIAL_HASH", "value": "ca1"}]}
                    ]}
                }))
                .unwrap()
            };
            let serving = pod(serde_json::json!({"vko.gtrfc.com/tls-certificate": "cert1"}));
            assert_eq!(
                data_pod_tls_material(&serving),
                Some(data_tls_material("ca1", "cert1"))
            );
            // Reloaded in place: the template is unchanged, the material is current again.
            let reloaded = pod(serde_json::json!({"vko.gtrfc.com/tls-certificate": "cert2"}));
            assert_eq!(
                data_pod_tls_material(&reloaded),
                Some(data_tls_material("ca1", "cert2"))
            );
            assert_ne!(
                data_tls_material("ca1", "cert2"),
                data_tls_material("ca2", "cert2")
            );
            // Not reported yet: unmeasured, never "current".
            assert_eq!(data_pod_tls_material(&pod(serde_json::json!({}))), None);
        }

        #[test]
        fn desired_status_writes_it_and_keeps_its_transition_time() {
            let mut snapshot = super::standalone_ok();
            snapshot.tls_material = Some(vec![tier("data", Some("new"), &[("a-0", Some("old"))])]);
            let first = desired_status(None, &snapshot, "v", at(10));
            let stale = find(Some(&first), ConditionType::TLSMaterialStale).unwrap();
            assert_eq!(
                (stale.status.as_str(), stale.reason.as_str()),
                ("True", "TLSMaterialRollPending")
            );
            let again = desired_status(Some(&first), &snapshot, "v", at(20));
            assert_eq!(first, again, "an unchanged pass writes nothing new");
            snapshot.tls_material = Some(vec![tier("data", Some("new"), &[("a-0", Some("new"))])]);
            let cleared = desired_status(Some(&again), &snapshot, "v", at(30));
            let current = find(Some(&cleared), ConditionType::TLSMaterialStale).unwrap();
            assert_eq!(
                (current.status.as_str(), current.reason.as_str()),
                ("False", "TLSMaterialCurrent")
            );
            assert_eq!(current.last_transition_time, at(30));
        }
    }

    #[test]
    fn storage_spec_not_applied_is_written_only_after_a_conflict_and_warns_once_per_message() {
        let mut snapshot = standalone_ok();
        snapshot.storage = StorageCheck::Matches;
        let clean = desired_status(None, &snapshot, "v", at(10));
        assert!(
            find(Some(&clean), ConditionType::StorageSpecNotApplied).is_none(),
            "no conflict ever: no condition"
        );
        snapshot.storage = StorageCheck::Conflict(StorageConflict::Immutable {
            difference: "claim data: size 1Gi in the StatefulSet, 2Gi in the spec".into(),
        });
        let stuck = desired_status(Some(&clean), &snapshot, "v", at(20));
        let condition = find(Some(&stuck), ConditionType::StorageSpecNotApplied).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "VolumeClaimTemplatesImmutable")
        );
        let events = transition_events(Some(&clean), &stuck);
        assert!(
            events
                .iter()
                .any(|e| e.reason == "StatefulSetRecreateRequired"
                    && e.note.contains("2Gi")
                    && matches!(e.type_, EventType::Warning)),
            "{events:?}"
        );
        let again = desired_status(Some(&stuck), &snapshot, "v", at(30));
        assert!(transition_events(Some(&stuck), &again).is_empty());
        // Not compared this pass (e.g. nothing rendered): left as it is.
        snapshot.storage = StorageCheck::NotCompared;
        let unknown = desired_status(Some(&again), &snapshot, "v", at(35));
        assert_eq!(
            find(Some(&unknown), ConditionType::StorageSpecNotApplied),
            find(Some(&again), ConditionType::StorageSpecNotApplied)
        );
        snapshot.storage = StorageCheck::Matches;
        let resolved = desired_status(Some(&unknown), &snapshot, "v", at(40));
        let condition = find(Some(&resolved), ConditionType::StorageSpecNotApplied).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "StorageSpecApplied")
        );
    }

    #[test]
    fn rw_service_empty_only_on_a_settled_cluster_and_cleared_by_the_label() {
        let mut snapshot = standalone_ok();
        let labeled = desired_status(None, &snapshot, "v", at(10));
        assert!(find(Some(&labeled), ConditionType::RWServiceEmpty).is_none());
        snapshot.labeled_masters.clear();
        let empty = desired_status(Some(&labeled), &snapshot, "v", at(20));
        let condition = find(Some(&empty), ConditionType::RWServiceEmpty).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("True", "NoPodLabeledMaster")
        );
        assert!(condition.message.contains("a-rw"), "{}", condition.message);
        // Not settled (the pod is not ready): no verdict either way, a standing one stays.
        let mut unsettled = snapshot.clone();
        unsettled.ready_pods = 0;
        assert!(
            find(
                Some(&desired_status(Some(&labeled), &unsettled, "v", at(25))),
                ConditionType::RWServiceEmpty
            )
            .is_none()
        );
        snapshot.labeled_masters = vec!["a-0".into()];
        let back = desired_status(Some(&empty), &snapshot, "v", at(30));
        let condition = find(Some(&back), ConditionType::RWServiceEmpty).unwrap();
        assert_eq!(
            (condition.status.as_str(), condition.reason.as_str()),
            ("False", "MasterLabeled")
        );
    }

    #[test]
    fn sentinel_peers_stale_names_each_sentinel_that_knows_too_many() {
        let peers = |answers: &[(&str, u32)], sentinels| SentinelPeers {
            answers: answers
                .iter()
                .map(|(pod, others)| PeerCount {
                    pod: (*pod).to_owned(),
                    others: *others,
                })
                .collect(),
            sentinels,
        };
        let (status, reason, message) =
            sentinel_peers_condition(&peers(&[("a-sentinel-0", 2), ("a-sentinel-1", 2)], 3));
        assert_eq!(
            (status, reason),
            (false, ConditionReason::SentinelPeersCurrent)
        );
        assert!(message.contains("knows 2 other"), "{message}");
        let (status, reason, message) = sentinel_peers_condition(&peers(
            &[
                ("a-sentinel-0", 3),
                ("a-sentinel-1", 2),
                ("a-sentinel-2", 4),
            ],
            3,
        ));
        assert_eq!(
            (status, reason),
            (true, ConditionReason::SentinelPeersExceedReplicas)
        );
        assert!(
            message.contains("a-sentinel-0 knows 3") && message.contains("a-sentinel-2 knows 4"),
            "{message}"
        );
        assert!(!message.contains("a-sentinel-1"), "{message}");
        // Not measured this pass: the condition is left as it is.
        let mut snapshot = standalone_ok();
        snapshot.sentinel_peers = Some(peers(&[("a-sentinel-0", 3)], 3));
        let stale = desired_status(None, &snapshot, "v", at(1));
        snapshot.sentinel_peers = None;
        let kept = desired_status(Some(&stale), &snapshot, "v", at(2));
        assert_eq!(
            find(Some(&kept), ConditionType::SentinelPeersStale),
            find(Some(&stale), ConditionType::SentinelPeersStale)
        );
    }
}
