//! What the machine remembers between passes ([`RollState`]) and what it decides ([`Decision`]).

use serde::{Deserialize, Serialize};
use vko_api::{ConditionReason, ConditionType, Phase};

use crate::world::{Millis, Tier};

/// The roll's memory, recorded by the operator on the `Valkey` status after every pass and handed
/// back unchanged on the next one, so a restarted operator resumes exactly where it stopped.
/// `RollState::default()` means "not rolling".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollState {
    /// The tier being rolled; `None` = no roll in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Tier>,
    /// The data template hash this roll brings the data tier to. A different hash in the world
    /// (a spec change mid-roll) restarts the roll from the beginning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_target: Option<String>,
    /// The Sentinel template hash the Sentinel tier rolls to (set when that tier starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_target: Option<String>,
    /// The progress last shown (`Rolling Update current/total`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Whether this roll replaced at least one data pod (gates the `RollingUpdateComplete` Event).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_rolled: bool,
    /// Whether the data tier of this roll is complete (the Sentinel tier rolls only after it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub data_completed: bool,
    /// The wait in progress and when it started (its deadline is derived from this).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<WaitRecord>,
    /// The pod the roll deleted last and when (for the recreation stall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_deleted: Option<DeletedPod>,
    /// A master switchover that was issued and has not been seen to complete yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switchover: Option<SwitchoverRecord>,
    /// Since when more than one data pod answers master (MultipleMasters bound).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multiple_masters_since: Option<Millis>,
    /// The `SplitBrainDetected` Event for the current multiple-master episode was emitted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub split_brain_reported: bool,
}

/// `current` of `total` pods of the rolling tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// 1-based position of the pod being replaced.
    pub current: u32,
    /// Pods in the tier.
    pub total: u32,
}

/// A wait that has started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitRecord {
    /// What is being waited for.
    pub reason: WaitReason,
    /// When this wait began.
    pub since: Millis,
}

/// A pod the roll deleted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletedPod {
    /// Its tier.
    pub tier: Tier,
    /// Its ordinal.
    pub ordinal: u32,
    /// When the delete was issued.
    pub at: Millis,
}

/// A switchover the machine asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchoverRecord {
    /// The outgoing master's ordinal.
    pub from: u32,
    /// The ordinal chosen to become master.
    pub to: u32,
    /// When it was issued.
    pub started: Millis,
    /// How many times it has been issued in this roll (retries after a switchover that did not
    /// take effect).
    pub attempts: u32,
}

/// What a [`Action::Wait`] waits for. Every wait has a deadline; past it the machine pauses with
/// a named condition (see [`WaitReason::exit`]) instead of waiting again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WaitReason {
    /// A pod of the rolling tier is terminating; no other pod of the tier is deleted meanwhile.
    /// Deadline: its grace deadline + 2 min, then `PodTerminationStalled`. Also used right after
    /// a delete the observed world does not show yet: deadline
    /// [`crate::DELETE_OBSERVED_MS`] after the delete, then the delete is issued again.
    PodTerminating,
    /// A pod of the tier does not exist (deleted, not recreated yet). Deadline: 2 min after the
    /// deletion (or after the wait began), then `PodRecreationStalled`.
    PodRecreation,
    /// A pod that already runs the target template is not ready, or (data tier) not yet a linked,
    /// caught-up replica. Deadline: syncTimeout, then `RollingUpdatePaused`.
    PodSync,
    /// No single reachable master that the authority (Sentinel majority, or the operator's
    /// record) agrees on. Deadline: syncTimeout, then `RollingUpdatePaused`.
    MasterUnknown,
    /// The master must be switched over but no updated replica is an eligible (caught-up,
    /// non-empty, Sentinel-known) candidate. Deadline: syncTimeout, then `RollingUpdatePaused`.
    SwitchoverCandidate,
    /// A switchover was issued; waiting for the old master to follow the new one. Deadline:
    /// [`crate::SWITCHOVER_SETTLE_MS`] after it was issued, then retry or `RollingUpdatePaused`.
    SwitchoverSettling,
    /// More than one data pod answers master and the evidence does not (yet) say which to keep.
    /// Deadline: [`crate::MULTIPLE_MASTERS_BOUND_MS`] after it was first seen, then
    /// `MultipleMasters` (persisted) and a hold.
    MultipleMasters,
    /// The Sentinel tier cannot lose a pod now: fewer than quorum + 1 Sentinels ready, or the
    /// Sentinels do not agree on the master. Deadline: syncTimeout, then `RollingUpdatePaused`.
    SentinelQuorum,
}

/// A named hold: the roll stops and says why with a condition. See [`PauseReason::condition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum PauseReason {
    /// A wait bounded by syncTimeout expired. Like the reference, this is a report, not a halt:
    /// the roll state is cleared and the next pass starts again on a fresh budget.
    SyncTimeoutExpired,
    /// A switchover was issued [`crate::MAX_SWITCHOVER_ATTEMPTS`] times without taking effect, or
    /// the old master did not follow the new one. The roll state is cleared (a later pass starts
    /// again).
    SwitchoverFailed,
    /// A pod of the tier is terminating 2 min past its grace deadline. Hold (state kept) until it
    /// is gone.
    PodTerminationStalled,
    /// A deleted pod was not recreated within 2 min. Hold (state kept) until it exists.
    PodRecreationStalled,
    /// Several masters past the transition bound and no safe resolution (demoting would risk
    /// the only copy of some data). Hold (state kept) until a single master remains.
    MultipleMastersUnresolved,
    /// Single-replica cluster whose only pod differs only in the sidecar image: deliberately not
    /// restarted (`SidecarUpdatePending`).
    SidecarUpdateDeferred,
}

/// Which mechanism switches the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SwitchoverKind {
    /// `SENTINEL FAILOVER <name>` (all replicas caught up first, so whichever replica Sentinel
    /// picks holds every acknowledged write).
    SentinelFailover,
    /// Without Sentinel: `REPLICAOF NO ONE` on `to` (the operator is the authority).
    Promote,
}

/// The single thing the operator does in this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Delete this pod; its StatefulSet recreates it from the target template.
    DeletePod {
        /// The pod's tier.
        tier: Tier,
        /// Its ordinal.
        ordinal: u32,
        /// Its name.
        pod: String,
    },
    /// Switch the master from `from` to `to` losslessly (switchover-facts.md, method B2):
    /// `CLIENT PAUSE WRITE` on `from` → wait until `to` (with Sentinel: every replica) has
    /// `from`'s offset → `SENTINEL FAILOVER` or `REPLICAOF NO ONE` on `to` → `REPLICAOF to` on
    /// `from` while still paused → `CLIENT UNPAUSE`. Without Sentinel the executor also records
    /// `to` as master (ADR 0005) and points the other replicas at it. On any failure before
    /// `from` is a replica: unpause and report; the machine sees the unchanged world and retries.
    Switchover {
        /// Outgoing master ordinal.
        from: u32,
        /// Outgoing master pod name.
        from_pod: String,
        /// Ordinal to promote.
        to: u32,
        /// Pod name to promote.
        to_pod: String,
        /// How.
        kind: SwitchoverKind,
    },
    /// `REPLICAOF <replica_of>` on a rogue master whose data the keeper provably holds (split
    /// brain resolution). Never issued for a pod that may hold the only copy of some data.
    Demote {
        /// The rogue master's ordinal.
        ordinal: u32,
        /// Its pod name.
        pod: String,
        /// The master to follow.
        replica_of: u32,
        /// That master's pod name.
        replica_of_pod: String,
    },
    /// Single-replica cluster: delete the only data pod (no failover target exists).
    RestartInPlace {
        /// Ordinal of the only pod (0).
        ordinal: u32,
        /// Its name.
        pod: String,
        /// True when persistence is off and the server holds data: the restart empties it.
        loses_data: bool,
    },
    /// Nothing to do until something changes or the deadline passes; requeue by `deadline`.
    Wait {
        /// What is awaited.
        reason: WaitReason,
        /// The pod concerned, when there is one.
        pod: Option<String>,
        /// When the machine stops waiting (always later than `now`).
        deadline: Millis,
    },
    /// A named hold; the condition in [`Decision::conditions`] says why. Requeue normally.
    Pause {
        /// Which hold.
        reason: PauseReason,
        /// The pod concerned, when there is one.
        pod: Option<String>,
        /// Human-readable explanation (also the condition message).
        message: String,
    },
    /// The roll finished in this pass (Events say which tier).
    Done,
    /// No roll in flight and nothing to roll.
    Idle,
}

/// When the executor writes a [`ConditionChange`]: clears are only written on clusters that
/// carry the condition, as in the reference ("written only on a cluster that ...").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WriteWhen {
    /// Always set it.
    Always,
    /// Only if the condition is present on the status (any status).
    IfPresent,
    /// Only if the condition is present with status `True`.
    IfTrue,
}

/// A condition the executor sets on the status (it keeps `lastTransitionTime` when the status
/// does not change).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionChange {
    /// The condition type.
    pub type_: ConditionType,
    /// `True` / `False`.
    pub status: bool,
    /// The reason.
    pub reason: ConditionReason,
    /// The message.
    pub message: String,
    /// Whether to write it unconditionally.
    pub when: WriteWhen,
}

/// Event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// Event reasons the machine emits (each exactly once per occurrence).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// Normal: the data tier finished rolling.
    RollingUpdateComplete,
    /// Normal: the Sentinel tier finished rolling (after the data tier).
    SentinelUpdateComplete,
    /// Warning: several masters past the transition bound.
    SplitBrainDetected,
}

impl EventReason {
    /// The Event `reason` string.
    pub const fn as_str(self) -> &'static str {
        match self {
            EventReason::RollingUpdateComplete => "RollingUpdateComplete",
            EventReason::SentinelUpdateComplete => "SentinelUpdateComplete",
            EventReason::SplitBrainDetected => "SplitBrainDetected",
        }
    }

    /// `Normal` or `Warning`.
    pub const fn event_type(self) -> EventType {
        match self {
            EventReason::RollingUpdateComplete | EventReason::SentinelUpdateComplete => {
                EventType::Normal
            }
            EventReason::SplitBrainDetected => EventType::Warning,
        }
    }
}

/// An Event to emit on the `Valkey`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    /// Reason (and through it the type).
    pub reason: EventReason,
    /// Message.
    pub message: String,
}

/// The outcome of one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Exactly one action.
    pub action: Action,
    /// The state to record (record it before or together with executing the action).
    pub state: RollState,
    /// The phase to show; `None` = the machine has no say (not rolling: the operator computes
    /// `OK`/`Syncing`/... itself).
    pub phase: Option<Phase>,
    /// One line for `status.message` and logs.
    pub summary: String,
    /// Conditions to write.
    pub conditions: Vec<ConditionChange>,
    /// Events to emit.
    pub events: Vec<EventNote>,
}
