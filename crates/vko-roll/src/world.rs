//! What the operator observed, as the state machine sees it. The operator builds a [`World`] from
//! its stores (StatefulSets, pods) and from asking every data pod and Sentinel; nothing here does
//! I/O.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, supplied by the caller (the machine never reads a clock).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Millis(pub u64);

impl Millis {
    /// `self + ms`, saturating (a deadline never wraps around).
    pub const fn plus(self, ms: u64) -> Millis {
        Millis(self.0.saturating_add(ms))
    }

    /// `self - earlier` in milliseconds, 0 when `earlier` is later (the clock may jump back).
    pub const fn since(self, earlier: Millis) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

/// The two StatefulSets a `Valkey` rolls, data first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Tier {
    /// The Valkey data pods `<name>-<ordinal>`.
    Data,
    /// The Sentinel pods.
    Sentinel,
}

/// Everything the machine looks at in one pass.
#[derive(Clone, Debug, PartialEq)]
pub struct World {
    /// The data tier: shape, target template and every data pod that exists.
    pub data: DataTier,
    /// The Sentinel tier; `None` when Sentinel is disabled.
    pub sentinel: Option<SentinelTier>,
    /// `spec.rollingUpdate.syncTimeout` in milliseconds: the bound on every wait for a replaced pod
    /// (and for a master to be known, a switchover candidate, Sentinels to be ready).
    pub sync_timeout_ms: u64,
    /// `spec.persistence.enabled`: whether a restarted server reloads its data from disk. Only
    /// used to say whether an in-place restart of a single-replica cluster loses the dataset.
    pub persistence: bool,
}

/// The data StatefulSet and its pods.
#[derive(Clone, Debug, PartialEq)]
pub struct DataTier {
    /// The data StatefulSet's name; its pods are `<statefulset>-<ordinal>`.
    pub statefulset: String,
    /// `spec.replicas`: ordinals `0..replicas` make up the tier.
    pub replicas: u32,
    /// The pod-template hash of the StatefulSet (its update revision) every pod must carry.
    pub target_hash: String,
    /// True when the outdated pods differ from the target only in the sidecar image (used for
    /// `SidecarUpdatePending` on a single-replica cluster, where no pod is restarted for that).
    pub sidecar_only_change: bool,
    /// The master recorded by the operator without Sentinel (`status.masterPod`, ADR 0005), as an
    /// ordinal. Ignored with Sentinel, whose majority answer is the authority.
    pub recorded_master: Option<u32>,
    /// Every data pod object that exists (any ordinal, including ones above `replicas` that the
    /// StatefulSet is scaling away), in any order.
    pub pods: Vec<DataPod>,
}

/// One data pod: what its object says and what its server answered.
#[derive(Clone, Debug, PartialEq)]
pub struct DataPod {
    /// The ordinal of `<name>-<ordinal>`.
    pub ordinal: u32,
    /// The pod name, used verbatim in actions and messages.
    pub name: String,
    /// `metadata.creationTimestamp` (the API server's clock). Informational: decisions compare
    /// template hashes, never this against the operator's clock.
    pub created_at: Millis,
    /// The pod-template hash the pod was created from (`controller-revision-hash`).
    pub template_hash: String,
    /// The pod's Ready condition is True (and it is not being deleted).
    pub ready: bool,
    /// Set when the pod has a deletion timestamp.
    pub terminating: Option<Terminating>,
    /// What `valkey-server` in the pod answered.
    pub server: Server,
}

/// A pod that is on its way out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminating {
    /// When the deletion was requested.
    pub since: Millis,
    /// `metadata.deletionTimestamp`: the end of its graceful termination period.
    pub grace_deadline: Millis,
}

/// The answer of one `valkey-server` (`INFO replication` + `INFO keyspace` + `LOADING`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Server {
    /// Not running, not dialable, or did not answer.
    Unreachable,
    /// `role:master`.
    Master(MasterInfo),
    /// `role:slave`.
    Replica(ReplicaInfo),
}

/// A server answering `role:master`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterInfo {
    /// `master_repl_offset`.
    pub offset: u64,
    /// Keys over all databases.
    pub keys: u64,
    /// The `slaveN:` lines: the replicas connected to it.
    pub replicas: Vec<ConnectedReplica>,
    /// `master_replid`: the id of the replication history it serves.
    pub replid: String,
    /// `master_replid2`: the history it continued when it was promoted; `None` when all zeros.
    pub replid2: Option<String>,
    /// `second_repl_offset`: the offset at which it took over `replid2`'s history; `None` when -1.
    /// Every write of `replid2` up to `second_offset - 1` is in its history.
    pub second_offset: Option<u64>,
}

/// One `slaveN:` line of a master.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectedReplica {
    /// The data-pod ordinal of the announced host, `None` for a foreign host.
    pub ordinal: Option<u32>,
    /// `state=online`.
    pub online: bool,
    /// `offset=`.
    pub offset: u64,
}

/// A server answering `role:slave`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// The data-pod ordinal of `master_host`; `None` for the hold (ADR 0005) or a foreign host.
    pub following: Option<u32>,
    /// `master_link_status:up`.
    pub link_up: bool,
    /// `master_sync_in_progress:1`.
    pub syncing: bool,
    /// The server is loading its dataset (`loading:1` or a `LOADING` reply).
    pub loading: bool,
    /// The replication offset it has processed (`slave_repl_offset`, else `master_repl_offset`).
    pub offset: u64,
    /// Keys over all databases.
    pub keys: u64,
}

/// The Sentinel StatefulSet, its pods and what the Sentinels say.
#[derive(Clone, Debug, PartialEq)]
pub struct SentinelTier {
    /// The Sentinel StatefulSet's name; its pods are `<statefulset>-<ordinal>`.
    pub statefulset: String,
    /// `spec.sentinel.replicas`: ordinals `0..replicas` make up the tier.
    pub replicas: u32,
    /// `spec.sentinel.quorum`: the Sentinel tier never has fewer ready pods than this during a roll.
    pub quorum: u32,
    /// The pod-template hash of the Sentinel StatefulSet.
    pub target_hash: String,
    /// Every Sentinel pod object that exists.
    pub pods: Vec<SentinelPod>,
    /// What the answering Sentinels say about the data tier.
    pub view: SentinelView,
}

/// One Sentinel pod.
#[derive(Clone, Debug, PartialEq)]
pub struct SentinelPod {
    /// The ordinal within the Sentinel StatefulSet.
    pub ordinal: u32,
    /// The pod name, used verbatim in actions and messages.
    pub name: String,
    /// `metadata.creationTimestamp`.
    pub created_at: Millis,
    /// The pod-template hash the pod was created from.
    pub template_hash: String,
    /// Ready and not being deleted.
    pub ready: bool,
    /// Set when the pod has a deletion timestamp.
    pub terminating: Option<Terminating>,
}

/// The Sentinels' collective answer (`SENTINEL MASTER` / `SENTINEL REPLICAS` on each pod).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelView {
    /// How many Sentinels answered at all.
    pub answered: u32,
    /// The data-pod ordinal named as master by a strict majority of every Sentinel of the tier
    /// (configured, existing or reported; `vko-authority`, ADR 0014), not only those answering.
    pub master: Option<u32>,
    /// How many Sentinels name [`SentinelView::master`].
    pub agreeing: u32,
    /// Data-pod ordinals the majority Sentinels list as replicas of that master.
    pub known_replicas: Vec<u32>,
    /// A Sentinel that answered knows more peers than the tier has Sentinels: removed ones
    /// (a scale-down) it has not been reset to forget. They count in every electorate (ADR
    /// 0014), so a ready Sentinel is not replaced until the reset (ADR 0024) cleared them.
    pub stale_peers: bool,
}

impl World {
    /// The data pod with this ordinal, if its object exists.
    pub fn data_pod(&self, ordinal: u32) -> Option<&DataPod> {
        self.data.pods.iter().find(|pod| pod.ordinal == ordinal)
    }

    /// The Sentinel pod with this ordinal, if its object exists.
    pub fn sentinel_pod(&self, ordinal: u32) -> Option<&SentinelPod> {
        self.sentinel
            .as_ref()
            .and_then(|tier| tier.pods.iter().find(|pod| pod.ordinal == ordinal))
    }
}

impl MasterInfo {
    /// Whether every write `other` ever acknowledged is provably in this master's history:
    /// `other` holds nothing, or serves the same history and is not ahead, or this master was
    /// promoted out of `other`'s history after `other`'s last write.
    pub fn contains(&self, other: &MasterInfo) -> bool {
        let other_empty = other.keys == 0 && other.offset == 0;
        let same_history = other.replid == self.replid && other.offset <= self.offset;
        let promoted_after = self.replid2.as_deref() == Some(other.replid.as_str())
            && self
                .second_offset
                .is_some_and(|fork| other.offset < fork && fork <= self.offset.saturating_add(1));
        other_empty || same_history || promoted_after
    }
}

impl Server {
    /// Whether the server answers `role:master`.
    pub fn is_master(&self) -> bool {
        matches!(self, Server::Master(_))
    }

    /// `(offset, keys)`, or `None` when unreachable.
    pub fn progress(&self) -> Option<(u64, u64)> {
        match self {
            Server::Unreachable => None,
            Server::Master(master) => Some((master.offset, master.keys)),
            Server::Replica(replica) => Some((replica.offset, replica.keys)),
        }
    }

    /// Whether the server holds data worth keeping: keys, or it took part in replication.
    pub fn holds_data(&self) -> bool {
        self.progress()
            .is_some_and(|(offset, keys)| offset > 0 || keys > 0)
    }
}
