//! The failover-aware rolling update as one pure state machine: an observed world in, the next single
//! action out. No I/O.
//!
//! The operator calls [`next`] once per reconcile pass with what it observed ([`World`]), the
//! [`RollState`] it recorded on the `Valkey` status last time, and the current time. It executes
//! the one [`Action`] of the returned [`Decision`], records [`Decision::state`], writes the phase,
//! conditions and Events, and requeues. See docs/adr/0006-rolling-update-state-machine.md.

mod decision;
mod machine;
pub mod password;
pub mod scale;
mod world;

pub use decision::{
    Action, ConditionChange, Decision, DeletedPod, EventNote, EventReason, EventType, PauseReason,
    Progress, RollState, SwitchoverKind, SwitchoverRecord, WaitReason, WaitRecord, WriteWhen,
};
pub use machine::next;
pub use world::{
    ConnectedReplica, DataPod, DataTier, MasterInfo, Millis, ReplicaInfo, SentinelPod,
    SentinelTier, SentinelView, Server, Terminating, Tier, World,
};

use vko_api::{ConditionReason, ConditionType};

/// How long past its grace deadline a terminating pod may take before `PodTerminationStalled`.
pub const TERMINATION_STALL_MS: u64 = 2 * 60 * 1000;
/// How long after issuing a delete the machine waits to see the pod terminating (or replaced)
/// before it concludes the delete did not happen and may issue it again.
pub const DELETE_OBSERVED_MS: u64 = 30 * 1000;
/// How long a deleted pod may stay missing before `PodRecreationStalled`.
pub const RECREATION_STALL_MS: u64 = 2 * 60 * 1000;
/// How long several masters count as a transition (`MultipleMastersTransitional`) before they
/// are a persisted split brain (`MultipleMastersPersisted` + Warning `SplitBrainDetected`).
pub const MULTIPLE_MASTERS_BOUND_MS: u64 = 90 * 1000;
/// How long after a switchover was issued the old master may take to follow the new one.
pub const SWITCHOVER_SETTLE_MS: u64 = 30 * 1000;
/// How many times a switchover is issued before the roll pauses with `SwitchoverFailed`.
pub const MAX_SWITCHOVER_ATTEMPTS: u32 = 3;
/// A replica counts as caught up when it is at most this many bytes of replication stream behind
/// the master's offset as observed in the same pass (the two are read a few ms apart under live
/// writes, so exact equality is only demanded by the executor, while writes are paused).
pub const CATCH_UP_LAG_BYTES: u64 = 1024 * 1024;

impl PauseReason {
    /// The condition (type, reason) a pause sets to `True`.
    pub const fn condition(self) -> (ConditionType, ConditionReason) {
        match self {
            PauseReason::SyncTimeoutExpired => (
                ConditionType::RollingUpdatePaused,
                ConditionReason::SyncTimeoutExpired,
            ),
            PauseReason::SwitchoverFailed => (
                ConditionType::RollingUpdatePaused,
                ConditionReason::SwitchoverFailed,
            ),
            PauseReason::PodTerminationStalled => (
                ConditionType::PodTerminationStalled,
                ConditionReason::PodStuckTerminating,
            ),
            PauseReason::PodRecreationStalled => (
                ConditionType::PodRecreationStalled,
                ConditionReason::PodNotRecreated,
            ),
            PauseReason::MultipleMastersUnresolved => (
                ConditionType::MultipleMasters,
                ConditionReason::MultipleMastersPersisted,
            ),
            PauseReason::SidecarUpdateDeferred => (
                ConditionType::SidecarUpdatePending,
                ConditionReason::SidecarImageOutdated,
            ),
        }
    }

    /// Whether the pause ends the roll (state cleared, the next pass starts afresh) rather than
    /// holding it (state kept, the roll continues once the cause is gone).
    pub const fn clears_state(self) -> bool {
        matches!(
            self,
            PauseReason::SyncTimeoutExpired | PauseReason::SwitchoverFailed
        )
    }
}

impl WaitReason {
    /// The pause the wait ends in when its deadline passes (`SwitchoverSettling` first retries
    /// the switchover up to [`MAX_SWITCHOVER_ATTEMPTS`] times).
    pub const fn exit(self) -> PauseReason {
        match self {
            WaitReason::PodTerminating => PauseReason::PodTerminationStalled,
            WaitReason::PodRecreation => PauseReason::PodRecreationStalled,
            WaitReason::PodSync
            | WaitReason::MasterUnknown
            | WaitReason::SwitchoverCandidate
            | WaitReason::SentinelQuorum => PauseReason::SyncTimeoutExpired,
            WaitReason::SwitchoverSettling => PauseReason::SwitchoverFailed,
            WaitReason::MultipleMasters => PauseReason::MultipleMastersUnresolved,
        }
    }
}
