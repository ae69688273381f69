//! The one master authority of a Valkey cluster (ADR 0005, ADR 0014): who is master, decided in
//! one place and the same way for every caller. The operator, the sidecar, the observer and
//! `vko-valkey`'s switchover all ask this crate; none of them counts Sentinel votes itself.
//!
//! - [`ordinal_of`]: the pod ordinal of `<name>-<ordinal>` or of a host name under the headless
//!   Service (the one ordinal parser).
//! - [`sentinel_majority`] / [`tally`]: the one Sentinel-majority rule. The electorate is every
//!   Sentinel the cluster has ([`Electorate`]), never only those that answered, so a partitioned
//!   minority never names a master.
//! - [`sentinel_view`]: the operator's reading of every Sentinel's answer in ordinals (the
//!   majority master and the replicas every agreeing Sentinel knows).
//! - [`unsynced_replicas`], [`replicas_unknown_to_sentinel`]: replica sync state.
//! - [`instance_role`]: which pod is labelled `instanceRole=master`.
//! - [`fence_action`]: when a master that cannot prove its authority pauses its writes (ADR 0019).
//! - [`decide_master_by_lease`], [`lease_fence_action`]: the master Lease without Sentinel
//!   (ADR 0022): who may promote, when the Lease has expired, when its holder fences.
//!
//! Pure: no I/O, no clock, no dependency. Callers gather the answers and act on the result.

mod data;
mod fence;
mod label;
mod lease;
mod ordinal;
mod sentinel;

/// The host a held server replicates from (ADR 0005): `.invalid` never resolves (RFC 2606), so a
/// server started with `replicaof vko-hold.invalid <port>` is a replica whose link stays down: it
/// serves no writes and refuses to be synced from. The sidecar writes it; the operator reads it.
pub const HOLD_HOST: &str = "vko-hold.invalid";

pub use data::{PodProbe, ProbeState, replicas_unknown_to_sentinel, unsynced_replicas};
pub use fence::{
    DEFAULT_FENCE_AFTER, FenceAction, FenceAnswer, FenceInput, FenceReason, HeldAnswer, Proof,
    UnfenceReason, authority_proof, fence_action, fence_deadline, held_majority_proof,
    proves_authority,
};
pub use label::{InstanceRole, SentinelWord, instance_role};
pub use lease::{
    HOLDER_SETTLE, LEASE_EXPIRY_MARGIN, LEASE_FENCE_LEAD, LEASE_RENEW_INTERVAL,
    LEASE_STEADY_RECHECK, LeaseDecision, LeaseSeen, LeaseSighting, LeaseView,
    MASTER_LEASE_DURATION, decide_master_by_lease, lease_fence_action, lease_fence_after,
    master_lease_name,
};
pub use ordinal::ordinal_of;
pub use sentinel::{
    Electorate, SentinelReport, SentinelVerdict, Tally, Vote, sentinel_majority, sentinel_view,
    tally,
};
