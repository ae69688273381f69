//! The disruption matrix (issue 15, ADR 0042): its topologies and rows — each fault's exact
//! definition and what vko does about it —, what one run of a row measured, the bound every run
//! is held to, and the page `cargo xtask matrix` writes (`docs/disruption-matrix.md`). Pure: the
//! end-to-end runner (`matrix_run`) measures, `cargo xtask matrix` aggregates; both read the rows
//! from here, so a row's definition, bound and sentence live in one place.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The fence bound F of the sidecar (`vko_authority::DEFAULT_FENCE_AFTER`) plus one 250 ms ask
/// and the fault's own latency on 2 cores: what a client on a cut-off master's side may lose.
pub const MASTER_SIDE_BOUND: Duration = Duration::from_millis(2_750);
/// Shorter pauses between two acknowledged writes are the writer's own pace, not an outage.
pub const OUTAGE_GAP: Duration = Duration::from_millis(250);
/// `appendfsync everysec`: Valkey fsyncs the AOF once a second and, while an fsync is still
/// running, postpones the next write for up to another second — what a crash of the only copy
/// may lose (a killed process normally loses nothing: the kernel holds what was written).
pub const AOF_FSYNC_TAIL: Duration = Duration::from_secs(2);
/// Issue 15's target for planned faults (a graceful delete, a roll).
pub const PLANNED_TARGET: Duration = Duration::from_secs(2);

/// A shape of cluster the matrix measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Topology {
    /// 3 data pods + 3 Sentinels.
    #[serde(rename = "3+3")]
    Sentinel3x3,
    /// 3 data pods without Sentinel (the operator promotes on the master Lease, ADR 0022).
    #[serde(rename = "3-no-sentinel")]
    Lease3,
    /// 3 data pods + 3 Sentinels with persistence (AOF and RDB on each pod's PVC), for the rows
    /// where the disks change what happens.
    #[serde(rename = "3+3-persistent")]
    Sentinel3x3Persistent,
    /// 1 data pod + 3 Sentinels with persistence: no replica holds a copy, so the pod's files
    /// are the only one.
    #[serde(rename = "1+3-persistent")]
    Sentinel1x3Persistent,
    /// A single data pod with persistence, no Sentinel.
    #[serde(rename = "1-persistent")]
    SinglePersistent,
}

impl Topology {
    pub const ALL: [Topology; 5] = [
        Topology::Sentinel3x3,
        Topology::Lease3,
        Topology::Sentinel3x3Persistent,
        Topology::Sentinel1x3Persistent,
        Topology::SinglePersistent,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Topology::Sentinel3x3 => "3+3",
            Topology::Lease3 => "3-no-sentinel",
            Topology::Sentinel3x3Persistent => "3+3-persistent",
            Topology::Sentinel1x3Persistent => "1+3-persistent",
            Topology::SinglePersistent => "1-persistent",
        }
    }

    /// The end-to-end test that measures its rows but the exclusive ones
    /// (`tests/e2e/disruption_matrix.rs`).
    pub fn test_name(self) -> &'static str {
        match self {
            Topology::Sentinel3x3 => "disruption_matrix::three_data_pods_and_three_sentinels",
            Topology::Lease3 => "disruption_matrix::three_data_pods_without_sentinel",
            Topology::Sentinel3x3Persistent => {
                "disruption_matrix::three_data_pods_and_three_sentinels_with_persistence"
            }
            // One test, the two shapes one after the other: each is small and its rows few.
            Topology::Sentinel1x3Persistent | Topology::SinglePersistent => {
                "disruption_matrix::one_data_pod_with_persistence"
            }
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Topology::Sentinel3x3 => "3 data pods + 3 Sentinels, without persistence",
            Topology::Lease3 => "3 data pods without Sentinel, without persistence",
            Topology::Sentinel3x3Persistent => {
                "3 data pods + 3 Sentinels with persistence (AOF and RDB on each pod's volume)"
            }
            Topology::Sentinel1x3Persistent => {
                "1 data pod + 3 Sentinels with persistence (AOF and RDB on its volume)"
            }
            Topology::SinglePersistent => {
                "A single data pod with persistence (AOF and RDB on its volume), no Sentinel"
            }
        }
    }

    pub fn has_sentinel(self) -> bool {
        matches!(
            self,
            Topology::Sentinel3x3
                | Topology::Sentinel3x3Persistent
                | Topology::Sentinel1x3Persistent
        )
    }

    /// Every data pod keeps its dataset on its PVC (`persistence.mode: both`).
    pub fn has_persistence(self) -> bool {
        matches!(
            self,
            Topology::Sentinel3x3Persistent
                | Topology::Sentinel1x3Persistent
                | Topology::SinglePersistent
        )
    }

    /// `spec.replicas`: how many data pods.
    pub fn data_pods(self) -> i32 {
        match self {
            Topology::Sentinel1x3Persistent | Topology::SinglePersistent => 1,
            _ => 3,
        }
    }

    /// Nothing but the master holds the data: no replica to hand over to or to confirm a write.
    pub fn has_replicas(self) -> bool {
        self.data_pods() > 1
    }

    /// The `spec` of the measured `Valkey` (flow YAML).
    pub fn spec(self) -> &'static str {
        match self {
            Topology::Sentinel3x3 => {
                "{replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}}"
            }
            Topology::Lease3 => "{replicas: 3, image: valkey/valkey:8.0}",
            Topology::Sentinel3x3Persistent => {
                "{replicas: 3, image: valkey/valkey:8.0, persistence: {enabled: true, mode: both, \
                 size: 100Mi}, sentinel: {enabled: true, replicas: 3}}"
            }
            Topology::Sentinel1x3Persistent => {
                "{replicas: 1, image: valkey/valkey:8.0, persistence: {enabled: true, mode: both, \
                 size: 100Mi}, sentinel: {enabled: true, replicas: 3}}"
            }
            Topology::SinglePersistent => {
                "{replicas: 1, image: valkey/valkey:8.0, persistence: {enabled: true, mode: both, \
                 size: 100Mi}}"
            }
        }
    }

    /// Issue 15's target for an unplanned fault: the time an unreachable master is given before
    /// another is promoted, + 3 s — Sentinel's down-after, or without Sentinel the master Lease's
    /// expiry as the operator sees it.
    pub fn unplanned_target(self) -> Duration {
        let detection = if self.has_sentinel() {
            Duration::from_millis(u64::from(vko_render::DOWN_AFTER_MS))
        } else {
            vko_authority::MASTER_LEASE_DURATION + vko_authority::LEASE_EXPIRY_MARGIN
        };
        detection + Duration::from_secs(3)
    }
}

/// How many acknowledged writes a row may lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossRule {
    /// None, from any writer.
    None,
    /// Only writes acknowledged within [`MASTER_SIDE_BOUND`] of the window's start (the cut of a
    /// partition, the resume of a paused server: the fence bound of ADR 0019/0022), or in the
    /// instant the fault hit (acknowledged, not yet replicated, as in a crash); by any writer.
    WithinFenceBound,
    /// Only writes acknowledged within [`AOF_FSYNC_TAIL`] before a crash (or in the instant it
    /// hit): a single copy is as durable as its AOF, which Valkey fsyncs once a second.
    UnsyncedTail,
}

/// How long a row may leave the cluster unwritable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutageRule {
    /// A planned change: [`PLANNED_TARGET`].
    Planned,
    /// An unplanned fault: [`Topology::unplanned_target`].
    Unplanned,
    /// Writes stop until the fault ends, by design; the sentence of the row says why.
    UntilTheFaultEnds,
}

/// Where vko does not meet issue 15's target yet: why, measured, and the bound every run is held
/// to meanwhile (a regression guard, not the goal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownGap {
    pub why: &'static str,
    pub enforced: Duration,
}

/// A switchover seen through `-rw`.
const RW_SWITCHOVER: KnownGap = KnownGap {
    why: "through `-rw` a switchover costs the switchover itself (~1 s with Sentinel, whose \
          once-a-second `INFO` sees the promotion; ~0.1 s without), then the label's move (on \
          the failover's proof since ADR 0049, before it once the Sentinel majority named the new \
          master; or the Lease), the EndpointSlice and kube-proxy's rules (at most one sync a \
          second): 1.1–1.9 s on 3 + 3 after ADR 0049, 2–3.5 s before",
    enforced: Duration::from_secs(5),
};
/// A Sentinel failover seen through `-rw`.
const RW_FAILOVER: KnownGap = KnownGap {
    why: "after down-after (5 s) Sentinel needs 1–2 s to agree, elect a leader and promote, \
          then `-rw` follows as for a switchover (6.9–7.7 s on 3 + 3 after ADR 0049, 8.5–9.3 s \
          before)",
    enforced: Duration::from_secs(11),
};
/// A hung master without Sentinel.
const LEASE_LOOK: KnownGap = KnownGap {
    why: "nothing in the API changes when a hung or cut-off holder stops renewing its Lease (a \
          hung server's pod stays Ready until its readiness probe fails three times): the \
          operator sees the Lease unchanged only when it looks — every 2 s while steady (ADR 0043) — and promotes 6 s \
          after it first saw that version",
    enforced: Duration::from_secs(16),
};
/// Without Sentinel only the operator promotes.
const OPERATOR_BACK: KnownGap = KnownGap {
    why: "without Sentinel only the operator promotes (ADR 0022): writes wait for it to be back, \
          to lead again, and to see the master Lease unrenewed 6 s",
    enforced: Duration::from_secs(60),
};
/// Without Sentinel the master's authority is a Lease renewed through the API server.
const API_DOWN_FENCES: KnownGap = KnownGap {
    why: "without Sentinel a master proves its authority by renewing its Lease through the API \
          server (ADR 0022); while kube-apiserver is down it cannot, so it fences after F and \
          takes writes again at its first renewal once the API server is back",
    enforced: Duration::from_secs(20),
};
/// Every pod deleted at once with Sentinel.
const EVERY_POD_WITH_SENTINEL: KnownGap = KnownGap {
    why: "the Sentinels are deleted too: until a majority of the new ones names it, the master \
          waiting for its successor, or the replacement they promote, cannot prove its authority \
          and pauses writes (ADR 0019; unwritable 1.4–8.3 s in 8 runs on 2026-12-07 after ADR \
          0051, the longest spent fenced); one run before ADR 0051 was unwritable 32.7 s, its \
          cause not traced",
    enforced: Duration::from_secs(40),
};
/// A single copy replaced.
const ONE_COPY_REPLACED: KnownGap = KnownGap {
    why: "a single data pod has no replica to take over: writes wait while it stops, while its \
          replacement is created once the old pod is gone, starts, loads its files and becomes \
          Ready (its readiness probe runs every 5 s), and while `-rw` follows — more replicas \
          are the remedy",
    enforced: Duration::from_secs(20),
};
/// A single copy and the Sentinels replaced at once.
const ONE_COPY_AND_SENTINELS_REPLACED: KnownGap = KnownGap {
    why: "as for one data pod deleted, and the Sentinels are replaced at the same time: the new \
          server takes writes only once a majority of the new Sentinels names it (ADR 0019; 6.3 \
          s of the 13.1 s measured on 2026-12-07)",
    enforced: Duration::from_secs(30),
};
/// Writes wait for the stopped Sentinels, by design.
const SENTINELS_BACK: KnownGap = KnownGap {
    why: "the master fences while no Sentinel majority answers; writes resume with their answers",
    enforced: Duration::from_secs(30),
};

/// One fault of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Row {
    ReplicaDelete,
    MasterDelete,
    MasterKill,
    MasterKillThrice,
    #[serde(rename = "master-pause-15s")]
    MasterPause15s,
    #[serde(rename = "master-pause-60s")]
    MasterPause60s,
    #[serde(rename = "master-partition-40s")]
    MasterPartition40s,
    #[serde(rename = "replica-partition-40s")]
    ReplicaPartition40s,
    SentinelDelete,
    SentinelMajorityStopped,
    EveryPodDeleted,
    RollingUpdate,
    ScaleDownMasterOrdinal,
    MasterNodeStopped,
    OperatorKilledMidRoll,
    OperatorDownMasterKill,
    ApiserverRestartMidRoll,
}

/// The end-to-end test that measures the exclusive rows of every topology, alone on the testbed.
pub const EXCLUSIVE_TEST: &str = "disruption_matrix::exclusive_control_plane_and_node_faults";

impl Row {
    pub const ALL: [Row; 17] = [
        Row::ReplicaDelete,
        Row::MasterDelete,
        Row::MasterKill,
        Row::MasterKillThrice,
        Row::MasterPause15s,
        Row::MasterPause60s,
        Row::MasterPartition40s,
        Row::ReplicaPartition40s,
        Row::SentinelDelete,
        Row::SentinelMajorityStopped,
        Row::EveryPodDeleted,
        Row::RollingUpdate,
        Row::ScaleDownMasterOrdinal,
        Row::MasterNodeStopped,
        Row::OperatorKilledMidRoll,
        Row::OperatorDownMasterKill,
        Row::ApiserverRestartMidRoll,
    ];

    /// The row's name on the command line and in the page.
    pub fn id(self) -> &'static str {
        match self {
            Row::ReplicaDelete => "replica-delete",
            Row::MasterDelete => "master-delete",
            Row::MasterKill => "master-kill",
            Row::MasterKillThrice => "master-kill-thrice",
            Row::MasterPause15s => "master-pause-15s",
            Row::MasterPause60s => "master-pause-60s",
            Row::MasterPartition40s => "master-partition-40s",
            Row::ReplicaPartition40s => "replica-partition-40s",
            Row::SentinelDelete => "sentinel-delete",
            Row::SentinelMajorityStopped => "sentinel-majority-stopped",
            Row::EveryPodDeleted => "every-pod-deleted",
            Row::RollingUpdate => "rolling-update",
            Row::ScaleDownMasterOrdinal => "scale-down-master-ordinal",
            Row::MasterNodeStopped => "master-node-stopped",
            Row::OperatorKilledMidRoll => "operator-killed-mid-roll",
            Row::OperatorDownMasterKill => "operator-down-master-kill",
            Row::ApiserverRestartMidRoll => "apiserver-restart-mid-roll",
        }
    }

    /// The fault hits more than one cluster (a node, the operator, the API server): the row runs
    /// in [`EXCLUSIVE_TEST`], alone on the testbed.
    pub fn exclusive(self) -> bool {
        matches!(
            self,
            Row::MasterNodeStopped
                | Row::OperatorKilledMidRoll
                | Row::OperatorDownMasterKill
                | Row::ApiserverRestartMidRoll
        )
    }

    pub fn applies_to(self, topology: Topology) -> bool {
        match topology {
            // The rows where the disks change what happens: every pod's data gone from memory,
            // a crashed master restarting with its files.
            Topology::Sentinel3x3Persistent => {
                matches!(self, Row::EveryPodDeleted | Row::MasterKill)
            }
            // What a single copy meets: its pod deleted, crashed or rolled, and with Sentinel the
            // Sentinels' own faults. No replica rows; the exclusive ones are not run (a stopped
            // node leaves the only copy unreachable until the node is back, by definition).
            Topology::Sentinel1x3Persistent => matches!(
                self,
                Row::MasterDelete
                    | Row::MasterKill
                    | Row::SentinelDelete
                    | Row::SentinelMajorityStopped
                    | Row::EveryPodDeleted
                    | Row::RollingUpdate
            ),
            Topology::SinglePersistent => {
                matches!(
                    self,
                    Row::MasterDelete | Row::MasterKill | Row::RollingUpdate
                )
            }
            Topology::Sentinel3x3 | Topology::Lease3 => match self {
                Row::SentinelDelete | Row::SentinelMajorityStopped => topology.has_sentinel(),
                _ => true,
            },
        }
    }

    /// The fault is or includes a rolling update, which replaces one pod of a tier at a time:
    /// the runner watches how many terminate at once.
    pub fn rolls(self) -> bool {
        matches!(
            self,
            Row::RollingUpdate | Row::OperatorKilledMidRoll | Row::ApiserverRestartMidRoll
        )
    }

    /// A client inside the master pod's network namespace writes too (to 127.0.0.1): the
    /// client on the master's side of a partition, or of a paused master (what it acknowledges
    /// after SIGCONT is what counts).
    pub fn has_master_side_client(self) -> bool {
        matches!(
            self,
            Row::MasterPartition40s | Row::MasterPause15s | Row::MasterPause60s
        )
    }

    /// What the master-side client's window starts at (its lost writes are allowed within
    /// [`MASTER_SIDE_BOUND`] of it): a paused server acknowledges nothing until SIGCONT.
    pub fn master_side_window(self) -> &'static str {
        match self {
            Row::MasterPause15s | Row::MasterPause60s => "the resume",
            _ => "the cut",
        }
    }

    /// Exactly what the runner does.
    pub fn definition(self) -> &'static str {
        match self {
            Row::ReplicaDelete => {
                "`DELETE` of a replica's pod through the API (graceful, as `kubectl delete pod`)"
            }
            Row::MasterDelete => {
                "`DELETE` of the master's pod through the API (graceful, as `kubectl delete pod`)"
            }
            Row::MasterKill => {
                "SIGKILL of the master's valkey-server; the kubelet restarts the container in place"
            }
            Row::MasterKillThrice => {
                "SIGKILL of the master's valkey-server three times, 1 s apart (each restart in \
                 place, faster than down-after), without persistence"
            }
            Row::MasterPause15s => {
                "SIGSTOP of the master's valkey container for 15 s, then SIGCONT, a client \
                 inside its network namespace writing to 127.0.0.1 throughout"
            }
            Row::MasterPause60s => {
                "SIGSTOP of the master's valkey container for 60 s, then SIGCONT, a client \
                 inside its network namespace writing to 127.0.0.1 throughout"
            }
            Row::MasterPartition40s => {
                "the master's pod cut off the network for 40 s (connections hang), a client \
                 inside its network namespace writing to 127.0.0.1 throughout"
            }
            Row::ReplicaPartition40s => "a replica's pod cut off the network for 40 s",
            Row::SentinelDelete => "`DELETE` of one Sentinel pod through the API",
            Row::SentinelMajorityStopped => {
                "SIGSTOP of 2 of the 3 Sentinel containers for 20 s, then SIGCONT"
            }
            Row::EveryPodDeleted => {
                "`DELETE` of every pod of the cluster (data and Sentinel) at once through the API"
            }
            Row::RollingUpdate => {
                "a change of `spec.podAnnotations`: every data pod is replaced (the roll of \
                 ADR 0006)"
            }
            Row::ScaleDownMasterOrdinal => {
                "`spec.replicas` 3 → 2 while the master serves from the highest ordinal (moved \
                 there first by deleting the master's pod); scaled back to 3 after the run"
            }
            Row::MasterNodeStopped => {
                "the node of the master's pod stopped for 45 s (its kubelet and heartbeats stop, \
                 its containers are SIGKILLed), then started again"
            }
            Row::OperatorKilledMidRoll => {
                "the operator SIGKILLed during a rolling update (`spec.podAnnotations` and, \
                 with Sentinel, `spec.sentinel.podAnnotations` changed) after the first data \
                 pod was deleted, after the master switchover and, with Sentinel, during the \
                 Sentinel tier, started again 1 s after each kill"
            }
            Row::OperatorDownMasterKill => {
                "the operator SIGKILLed, then the master's valkey-server SIGKILLed; the operator \
                 started again 20 s after the crash"
            }
            Row::ApiserverRestartMidRoll => {
                "kube-apiserver stopped and started again (as a control-plane upgrade does) \
                 during a rolling update, once its first data pod was deleted"
            }
        }
    }

    /// One sentence on what vko does about the fault.
    pub fn what_vko_does(self, topology: Topology) -> &'static str {
        let sentinel = topology.has_sentinel();
        let persistent = topology.has_persistence();
        let replicas = topology.has_replicas();
        match self {
            Row::MasterDelete if !replicas => {
                "No replica can take over: valkey-server writes its AOF and RDB as it shuts down, \
                 and writes wait until the StatefulSet's replacement has loaded them, is Ready \
                 and `-rw` routes to it."
            }
            Row::MasterKill if !replicas => {
                "The restarted server loads its AOF and, with no replica that could hold newer \
                 writes, comes back as master (ADR 0005; with Sentinel, once their majority names \
                 it). Valkey writes each write to the AOF before \
                 answering it, so a killed process loses nothing the kernel holds; the AOF is \
                 fsynced once a second (`appendfsync everysec`), so a node's crash — or a disk \
                 so slow that Valkey postpones the write — may lose the last one to two seconds."
            }
            Row::RollingUpdate if !replicas => {
                "With no replica to switch over to, the operator replaces the only pod (its \
                 volume kept); writes wait for the replacement as for a delete."
            }
            Row::EveryPodDeleted if !replicas => {
                "The data pod's files come back with its replacement, which, finding no peer \
                 that could hold newer writes, serves them as master — once a majority of the \
                 recreated Sentinels names it (ADR 0019)."
            }
            Row::ReplicaDelete => {
                "The StatefulSet recreates the pod; it resyncs from the master, which never stops \
                 taking writes."
            }
            Row::MasterDelete if sentinel => {
                "The sidecar's preStop hands the role over first (`CLIENT PAUSE WRITE`, a replica \
                 caught up, `SENTINEL FAILOVER`), then the pod goes; `-rw` follows the new master."
            }
            Row::MasterDelete => {
                "The sidecar's preStop hands the role over first (writes paused, a replica caught \
                 up, the Lease handed over, the replica promoted); `-rw` follows the new master."
            }
            Row::MasterKill if persistent => {
                "The restarted server loads its files but starts as a replica all the same (the \
                 restart guard of ADR 0005: its replicas may hold writes its files lack) and asks Sentinel to fail over at once; it then \
                 resyncs from the new master."
            }
            Row::MasterKill if sentinel => {
                "The restarted server starts as a replica (the restart guard of ADR 0005: an empty \
                 master would wipe its replicas) and asks Sentinel to fail over at once, without \
                 waiting for down-after."
            }
            Row::MasterKill => {
                "The restarted server starts as a replica (ADR 0005); the operator promotes the \
                 most advanced replica once the master Lease is unrenewed 6 s (ADR 0022)."
            }
            Row::MasterKillThrice => {
                "Each restart comes back as a replica, never as an empty master its replicas \
                 would copy; the cluster fails over once, as for one crash."
            }
            Row::MasterPause15s | Row::MasterPause60s if sentinel => {
                "Sentinel fails over after down-after; on SIGCONT the old master answers only what \
                 it had queued, finds itself unproven, fences and rejoins as a replica."
            }
            Row::MasterPause15s | Row::MasterPause60s => {
                "The operator promotes once the master Lease is unrenewed 6 s; on SIGCONT the old \
                 master cannot renew it, fences and rejoins as a replica."
            }
            Row::MasterPartition40s if sentinel => {
                "The cut-off master fences within F = 2 s (no Sentinel majority names it, ADR \
                 0019) and Sentinel fails over after down-after; what its own side was \
                 acknowledged in those 2 s is lost, nothing later."
            }
            Row::MasterPartition40s => {
                "The cut-off master fences within F = 2 s (it cannot renew its Lease, ADR 0022) \
                 and the operator promotes after 6 s; what its own side was acknowledged in \
                 those 2 s is lost, nothing later."
            }
            Row::ReplicaPartition40s => {
                "The master keeps taking writes; the replica resyncs when the network returns."
            }
            Row::SentinelDelete => {
                "The StatefulSet recreates the Sentinel; the other two keep the quorum and the \
                 master never stops."
            }
            Row::SentinelMajorityStopped => {
                "No Sentinel majority can vouch for the master, so it fences after F and writes \
                 wait until the Sentinels return (ADR 0019: it cannot tell stopped Sentinels \
                 from Sentinels that fail it over behind a partition)."
            }
            Row::EveryPodDeleted if persistent => {
                "Each data pod's files come back with its replacement, but only the running pods \
                 hold the latest writes: as without persistence, the master's preStop keeps \
                 taking writes until a replacement (started from its own files) has caught up \
                 with it, is Ready and is known to a Sentinel, then hands over to it (ADR 0048); \
                 the old master's replacement loads its files and rejoins as a replica (ADR 0005)."
            }
            Row::EveryPodDeleted if sentinel => {
                "Without persistence only the running pods hold the data. The StatefulSet \
                 recreates each pod once the old one is gone (Parallel policy), so the master's \
                 preStop keeps taking writes — its fencer on guard — until a replacement has \
                 copied it, is Ready and is known to a Sentinel, then hands over to it, never to \
                 a replica that is itself going (at most 35 s; ADR 0048); a stopping replica \
                 pauses every command so no failover can promote it (ADR 0051). Writes stop only \
                 for that switchover."
            }
            Row::EveryPodDeleted => {
                "Without persistence only the running pods hold the data: the master's preStop \
                 keeps the master Lease and takes writes until a replacement has copied it and \
                 is Ready, then moves the Lease and promotes it, never a replica that is itself \
                 going (at most 35 s; ADR 0048)."
            }
            Row::RollingUpdate => {
                "Replicas are replaced one at a time, then one switchover to an updated replica \
                 and the old master last; writes stop only for the switchover."
            }
            Row::ScaleDownMasterOrdinal => {
                "The operator switches the master over to a pod that stays before it shrinks the \
                 StatefulSet, so the removed ordinal is a replica by then; writes stop only for \
                 the switchover."
            }
            Row::MasterNodeStopped if sentinel => {
                "Kubernetes does not replace a StatefulSet pod on a node that stopped answering \
                 (it cannot know the pod is gone); Sentinel fails over after down-after, `-rw` \
                 follows, and the old master rejoins as a replica when its node is back."
            }
            Row::MasterNodeStopped => {
                "Kubernetes does not replace a StatefulSet pod on a node that stopped answering \
                 (it cannot know the pod is gone); the operator promotes once the master Lease \
                 is unrenewed 6 s, and the old master rejoins as a replica when its node is back."
            }
            Row::OperatorKilledMidRoll => {
                "The roll's progress lives in `status.rollingUpdate`: each new operator resumes \
                 it where the last one stopped, once it leads (the killed one's leader Lease \
                 expires first); the data path never waits for the operator."
            }
            Row::OperatorDownMasterKill if sentinel => {
                "Sentinel fails over and the sidecars move the master label without the \
                 operator; the operator only records the new master when it is back."
            }
            Row::OperatorDownMasterKill => {
                "Without Sentinel only the operator promotes: the restarted server stays a \
                 replica (ADR 0005) and writes wait until the operator is back and sees the \
                 master Lease unrenewed."
            }
            Row::ApiserverRestartMidRoll if sentinel => {
                "Writes do not need the API server with Sentinel; the roll waits while it is down \
                 (the operator's and the sidecars' calls time out and are retried) and resumes \
                 from `status.rollingUpdate`."
            }
            Row::ApiserverRestartMidRoll => {
                "The master cannot renew its Lease while the API server is down, so it fences \
                 after F and writes wait for the API server (a master cut off from it must stop, \
                 ADR 0022); the roll waits too and resumes from `status.rollingUpdate`."
            }
        }
    }

    pub fn loss_rule(self, topology: Topology) -> LossRule {
        match self {
            Row::MasterPartition40s | Row::MasterPause15s | Row::MasterPause60s => {
                LossRule::WithinFenceBound
            }
            Row::MasterKill if !topology.has_replicas() => LossRule::UnsyncedTail,
            _ => LossRule::None,
        }
    }

    pub fn outage_rule(self, topology: Topology) -> OutageRule {
        match self {
            // Without Sentinel only the operator promotes, and a master proves its authority
            // through the API server.
            Row::OperatorDownMasterKill | Row::ApiserverRestartMidRoll
                if !topology.has_sentinel() =>
            {
                OutageRule::UntilTheFaultEnds
            }
            Row::MasterDelete
            | Row::RollingUpdate
            | Row::ReplicaDelete
            | Row::ScaleDownMasterOrdinal
            | Row::OperatorKilledMidRoll
            | Row::ApiserverRestartMidRoll => OutageRule::Planned,
            Row::SentinelMajorityStopped => OutageRule::UntilTheFaultEnds,
            _ => OutageRule::Unplanned,
        }
    }

    /// Issue 15's target for how long the row may leave the cluster unwritable (`None`: writes
    /// wait for the fault's end by design).
    pub fn outage_target(self, topology: Topology) -> Option<Duration> {
        match self.outage_rule(topology) {
            OutageRule::Planned => Some(PLANNED_TARGET),
            OutageRule::Unplanned => Some(topology.unplanned_target()),
            OutageRule::UntilTheFaultEnds => None,
        }
    }

    /// Where the row does not meet its target yet (measured on the testbed, ADR 0042).
    pub fn known_gap(self, topology: Topology) -> Option<KnownGap> {
        let sentinel = topology.has_sentinel();
        match self {
            Row::EveryPodDeleted if !topology.has_replicas() && sentinel => {
                Some(ONE_COPY_AND_SENTINELS_REPLACED)
            }
            Row::MasterDelete | Row::RollingUpdate | Row::EveryPodDeleted
                if !topology.has_replicas() =>
            {
                Some(ONE_COPY_REPLACED)
            }
            Row::OperatorDownMasterKill if !sentinel => Some(OPERATOR_BACK),
            Row::ApiserverRestartMidRoll if !sentinel => Some(API_DOWN_FENCES),
            // Without Sentinel the switchover itself takes ~0.1 s, the `-rw` path 1–2 s more:
            // over the target on a loaded machine (the suite's run, 2026-12-06).
            Row::MasterDelete
            | Row::RollingUpdate
            | Row::ScaleDownMasterOrdinal
            | Row::OperatorKilledMidRoll
            | Row::ApiserverRestartMidRoll => Some(RW_SWITCHOVER),
            Row::SentinelMajorityStopped => Some(SENTINELS_BACK),
            Row::MasterPause15s
            | Row::MasterPause60s
            | Row::MasterPartition40s
            | Row::MasterNodeStopped
                if sentinel =>
            {
                Some(RW_FAILOVER)
            }
            Row::MasterPause15s
            | Row::MasterPause60s
            | Row::MasterPartition40s
            | Row::MasterNodeStopped => Some(LEASE_LOOK),
            // A crash changes the pod at once: the restarted server comes back a replica and
            // the failover starts without waiting for down-after or the Lease.
            Row::MasterKill
            | Row::MasterKillThrice
            | Row::OperatorDownMasterKill
            | Row::ReplicaDelete
            | Row::ReplicaPartition40s
            | Row::SentinelDelete => None,
            Row::EveryPodDeleted if sentinel => Some(EVERY_POD_WITH_SENTINEL),
            // The master's preStop waits for a replacement and switches over to it (ADR 0048):
            // a switchover, well within the unplanned target.
            Row::EveryPodDeleted => None,
        }
    }

    /// What every run is held to: the known gap's bound, else the target.
    pub fn outage_enforced(self, topology: Topology) -> Option<Duration> {
        self.known_gap(topology)
            .map(|gap| gap.enforced)
            .or(self.outage_target(topology))
    }

    /// The rows whose id contains one of the comma-separated `filter`s (all when empty).
    pub fn selected(filter: &str) -> Vec<Row> {
        let wanted: Vec<&str> = filter.split(',').filter(|f| !f.is_empty()).collect();
        Row::ALL
            .into_iter()
            .filter(|row| wanted.is_empty() || wanted.iter().any(|w| row.id().contains(w)))
            .collect()
    }
}

/// What the client on the master's side of a partition or pause saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MasterSide {
    pub acked: u64,
    pub lost: u64,
    /// The latest of its lost writes, after the window start (the cut, or the resume of a
    /// pause; ms); `None`: nothing lost.
    pub last_lost_ms: Option<u64>,
    /// Lost writes acknowledged before the fault or later than [`MASTER_SIDE_BOUND`] after the
    /// window start.
    pub lost_outside_bound: u64,
}

/// One run of one row.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measurement {
    pub topology: Topology,
    pub row: Row,
    pub run: usize,
    /// Plain `SET`s through `<name>-rw` answered `OK`, and how many of them the final master lacks.
    pub acked: u64,
    pub lost: u64,
    /// `SET` + `WAIT 1 1000` through `<name>-rw` reaching one replica, and how many are lacking.
    pub confirmed: u64,
    pub confirmed_lost: u64,
    /// Of the lost, how many the row's [`LossRule::WithinFenceBound`] does not allow.
    pub lost_outside_bound: u64,
    pub master_side: Option<MasterSide>,
    /// The longest time between two `OK`s of the plain writer from the fault until it stopped, 300
    /// `OK`s after the cluster was healthy again (ms):
    /// for a fault that stops writes at once, the time from the fault to the first write after it.
    /// 0 when they never stopped longer than [`OUTAGE_GAP`]; `None` when none came after the fault.
    pub unwritable_ms: Option<u64>,
    /// From the fault to Phase OK with every replica linked to the one master (ms).
    pub healthy_ms: u64,
    /// The most pods labelled master, and `-rw` endpoints, at one sample.
    pub max_master_labels: u64,
    pub max_rw_endpoints: u64,
    pub samples: u64,
    /// For a row that rolls: the most pods of one tier terminating at once (a roll replaces
    /// one at a time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_terminating: Option<u64>,
    /// The master before and after.
    pub master_before: String,
    pub master_after: String,
}

/// When set, the runner also appends every `MATRIX` line to this file (`cargo xtask test` sets
/// it: libtest shows a passing test's output to nobody, and the page can be rendered from the
/// suite's own runs with `cargo xtask matrix --from-log`).
pub const LOG_ENV: &str = "VKO_MATRIX_LOG";

/// What the `MATRIX` line of a run starts with.
const LINE_PREFIX: &str = "MATRIX ";

impl Measurement {
    /// The line the runner prints and `cargo xtask matrix` reads.
    pub fn line(&self) -> String {
        format!(
            "{LINE_PREFIX}{}",
            serde_json::to_string(self).unwrap_or_default()
        )
    }

    /// The measurement of a `MATRIX` line; `None` for any other line.
    pub fn parse_line(line: &str) -> Option<Measurement> {
        serde_json::from_str(line.strip_prefix(LINE_PREFIX)?).ok()
    }

    /// Whether the run met issue 15's unwritable target (`None`: the row has none).
    pub fn target_met(&self) -> Option<bool> {
        let target = self.row.outage_target(self.topology)?;
        Some(
            self.unwritable_ms
                .is_some_and(|ms| Duration::from_millis(ms) <= target),
        )
    }

    /// What breaks the row's bound (empty: none).
    pub fn violations(&self) -> Vec<String> {
        let mut broken = Vec::new();
        let rule = self.row.loss_rule(self.topology);
        match rule {
            LossRule::None if self.lost > 0 => {
                broken.push(format!(
                    "{} acknowledged writes lost through -rw",
                    self.lost
                ));
            }
            LossRule::WithinFenceBound if self.lost_outside_bound > 0 => {
                broken.push(format!(
                    "{} of {} acknowledged writes lost through -rw outside {MASTER_SIDE_BOUND:?} of the fault",
                    self.lost_outside_bound, self.lost
                ));
            }
            LossRule::UnsyncedTail if self.lost_outside_bound > 0 => {
                broken.push(format!(
                    "{} of {} acknowledged writes lost through -rw, acknowledged more than \
                     {AOF_FSYNC_TAIL:?} before the crash",
                    self.lost_outside_bound, self.lost
                ));
            }
            _ => {}
        }
        if self.confirmed_lost > 0 {
            broken.push(format!("{} confirmed writes lost", self.confirmed_lost));
        }
        if let Some(side) = &self.master_side {
            let allowed = rule == LossRule::WithinFenceBound;
            if side.lost_outside_bound > 0 || (!allowed && side.lost > 0) {
                broken.push(format!(
                    "the client on the master's side lost {} ({} outside {MASTER_SIDE_BOUND:?})",
                    side.lost, side.lost_outside_bound
                ));
            }
        }
        if self.max_master_labels > 1 {
            broken.push(format!(
                "{} pods labelled master at once",
                self.max_master_labels
            ));
        }
        if self.max_rw_endpoints > 1 {
            broken.push(format!("{} -rw endpoints at once", self.max_rw_endpoints));
        }
        if let Some(n) = self.max_terminating.filter(|n| *n > 1) {
            broken.push(format!(
                "{n} pods of a tier terminating at once during a roll"
            ));
        }
        match (self.unwritable_ms, self.row.outage_enforced(self.topology)) {
            (None, _) => broken.push("no write acknowledged after the fault".into()),
            (Some(ms), Some(bound)) if Duration::from_millis(ms) > bound => {
                broken.push(format!("unwritable {ms} ms, over its bound {bound:?}"));
            }
            _ => {}
        }
        broken
    }
}

/// The longest time without an acknowledged write from `fault` to `until` (the first gap counted
/// from the last `OK` before the fault): `Some(ZERO)` when no gap reached [`OUTAGE_GAP`], `None`
/// when no `OK` came in `(fault, until]`. `oks` are in arrival order.
pub fn unwritable(oks: &[Instant], fault: Instant, until: Instant) -> Option<Duration> {
    let mut last = oks
        .iter()
        .rev()
        .find(|&&ok| ok <= fault)
        .copied()
        .unwrap_or(fault);
    let mut longest = Duration::ZERO;
    let mut any = false;
    for &ok in oks.iter().filter(|&&ok| ok > fault && ok <= until) {
        longest = longest.max(ok - last);
        last = ok;
        any = true;
    }
    any.then_some(if longest < OUTAGE_GAP {
        Duration::ZERO
    } else {
        longest
    })
}

/// The page `cargo xtask matrix` writes: one table per topology (median and max over the runs),
/// the commit and date, then each row's definition and what vko does.
pub fn render(measurements: &[Measurement], commit: &str, date: &str, command: &str) -> String {
    let mut page = String::new();
    let push = |page: &mut String, line: &str| {
        page.push_str(line);
        page.push('\n');
    };
    push(&mut page, "# The disruption matrix");
    push(&mut page, "");
    push(
        &mut page,
        &format!(
            "Generated by `{command}` on {date} at commit `{commit}` — never edited by hand. \
             Every figure is measured end to end on the testbed (a real kube-apiserver, \
             scheduler, controller-manager and etcd, pods as real processes, Services routed by \
             kube-proxy); how, and the bounds CI holds every run to: [ADR 0042](adr/0042-the-disruption-matrix.md)."
        ),
    );
    push(&mut page, "");
    push(
        &mut page,
        "Columns: **lost** — plain `SET`s through `<name>-rw` answered `OK` that the final master \
         lacks (of how many); **confirmed lost** — `SET` + `WAIT 1 1000` reaching a replica, \
         lacking afterwards; **unwritable** — the longest time without an acknowledged write \
         from the fault until 300 writes after healthy (for a fault that stops writes at once, the time to the \
         first write after it; 0: never longer than 250 ms); **healthy** — from the fault to \
         Phase OK with every replica linked to the one master; **masters / -rw** — the most pods \
         labelled master and `-rw` endpoints at one sample (a watch of each, every event). \
         Figures are `median / max` over the runs.",
    );
    for topology in Topology::ALL {
        let runs: Vec<&Measurement> = measurements
            .iter()
            .filter(|m| m.topology == topology)
            .collect();
        if runs.is_empty() {
            continue;
        }
        push(&mut page, "");
        push(&mut page, &format!("## {}", topology.title()));
        push(&mut page, "");
        push(
            &mut page,
            &format!(
                "Every run is held to: 0 lost ({}); never \
                 two pods labelled master or two `-rw` \
                 endpoints at one sample; unwritable within issue 15's target — {} s for an \
                 unplanned fault, {} s for a planned one — or, where vko does not meet it yet, \
                 within the bound its known gap states below. The **unwritable** column says \
                 how many runs met the target.",
                if topology.has_replicas() {
                    format!(
                        "a client on a partitioned or paused master's side: only writes \
                         acknowledged within {:.2} s of the cut or the resume",
                        MASTER_SIDE_BOUND.as_secs_f64()
                    )
                } else {
                    format!(
                        "a crash of the only copy may lose writes acknowledged within {} s \
                         before it, the AOF's fsync interval; no replica confirms a write, so \
                         the confirming writer does not run",
                        AOF_FSYNC_TAIL.as_secs()
                    )
                },
                topology.unplanned_target().as_secs(),
                PLANNED_TARGET.as_secs()
            ),
        );
        push(&mut page, "");
        push(
            &mut page,
            "| fault | runs | lost | confirmed lost | unwritable | target met | healthy | masters / -rw | bound held |",
        );
        push(&mut page, "|---|---|---|---|---|---|---|---|---|");
        for row in Row::ALL {
            let of_row: Vec<&Measurement> = runs.iter().copied().filter(|m| m.row == row).collect();
            if of_row.is_empty() {
                continue;
            }
            push(&mut page, &table_line(row, &of_row));
        }
        push(&mut page, "");
        for row in Row::ALL {
            if !runs.iter().any(|m| m.row == row) {
                continue;
            }
            let side = runs
                .iter()
                .filter(|m| m.row == row)
                .filter_map(|m| m.master_side.as_ref())
                .map(|s| {
                    format!(
                        " The client on the master's side: {} of {} lost, the latest acknowledged {} after {}.",
                        s.lost,
                        s.acked,
                        s.last_lost_ms
                            .map_or("—".into(), |ms| format!("{:.2} s", ms as f64 / 1000.0)),
                        row.master_side_window()
                    )
                })
                .collect::<Vec<_>>()
                .join("");
            let gap = row
                .known_gap(topology)
                .map(|gap| {
                    format!(
                        " *Known gap* (target {}, every run held to {} s meanwhile): {}.",
                        row.outage_target(topology)
                            .map_or("none".into(), |t| format!("{} s", t.as_secs())),
                        gap.enforced.as_secs(),
                        gap.why
                    )
                })
                .unwrap_or_default();
            push(
                &mut page,
                &format!(
                    "- **{}** — {}. {}{side}{gap}",
                    row.id(),
                    row.definition(),
                    row.what_vko_does(topology)
                ),
            );
        }
    }
    page
}

fn table_line(row: Row, runs: &[&Measurement]) -> String {
    let median_max = |values: Vec<u64>, show: &dyn Fn(u64) -> String| -> String {
        let mut sorted = values;
        sorted.sort_unstable();
        let median = sorted.get(sorted.len().saturating_sub(1) / 2).copied();
        match (median, sorted.last()) {
            (Some(median), Some(&max)) if median == max => show(max),
            (Some(median), Some(&max)) => format!("{} / {}", show(median), show(max)),
            _ => "—".into(),
        }
    };
    let secs = |ms: u64| format!("{:.2} s", ms as f64 / 1000.0);
    let count = |n: u64| n.to_string();
    let lost = format!(
        "{} of {}",
        median_max(runs.iter().map(|m| m.lost).collect(), &count),
        median_max(runs.iter().map(|m| m.acked).collect(), &count)
    );
    let confirmed = if runs.iter().any(|m| m.topology.has_replicas()) {
        format!(
            "{} of {}",
            median_max(runs.iter().map(|m| m.confirmed_lost).collect(), &count),
            median_max(runs.iter().map(|m| m.confirmed).collect(), &count)
        )
    } else {
        "— (no replica)".into()
    };
    let never = runs.iter().any(|m| m.unwritable_ms.is_none());
    let unwritable = if never {
        "never writable again".into()
    } else {
        median_max(runs.iter().filter_map(|m| m.unwritable_ms).collect(), &secs)
    };
    let healthy = median_max(runs.iter().map(|m| m.healthy_ms).collect(), &secs);
    let most = |f: fn(&Measurement) -> u64| runs.iter().map(|m| f(m)).max().unwrap_or(0);
    let broken: usize = runs.iter().filter(|m| !m.violations().is_empty()).count();
    let verdict = match broken {
        0 => "yes".into(),
        n => format!("**broken in {n} of {}**", runs.len()),
    };
    let met: Vec<bool> = runs.iter().filter_map(|m| m.target_met()).collect();
    let target = if met.is_empty() {
        "— (waits for the fault's end)".into()
    } else {
        format!("{} of {}", met.iter().filter(|&&m| m).count(), met.len())
    };
    format!(
        "| {} | {} | {lost} | {confirmed} | {unwritable} | {target} | {healthy} | {} / {} | {verdict} |",
        row.id(),
        runs.len(),
        most(|m| m.max_master_labels),
        most(|m| m.max_rw_endpoints),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn unwritable_is_the_longest_gap_from_the_last_ok_before_the_fault() {
        let t0 = Instant::now();
        let at =
            |offsets: &[u64]| -> Vec<Instant> { offsets.iter().map(|&o| t0 + ms(o)).collect() };
        let fault = t0 + ms(1_000);
        let until = t0 + ms(20_000);
        #[rustfmt::skip]
        let cases: &[(&[u64], Option<u64>, &str)] = &[
            (&[900, 7_900, 8_000], Some(7_000), "a crash: from the last OK before it to the first after"),
            (&[900, 1_100, 1_300, 1_500], Some(0), "never paused 250 ms"),
            (&[900, 1_000, 5_000, 5_100, 6_000, 6_100], Some(4_000), "two gaps: the longer"),
            (&[900, 25_000], None, "nothing in the window"),
            (&[], None, "no OK at all"),
            (&[1_500, 1_600], Some(500), "no OK before the fault: counted from the fault"),
        ];
        for (offsets, want, why) in cases {
            assert_eq!(
                unwritable(&at(offsets), fault, until),
                want.map(ms),
                "{why}"
            );
        }
    }

    fn measurement(row: Row) -> Measurement {
        Measurement {
            topology: Topology::Sentinel3x3,
            row,
            run: 1,
            acked: 1_000,
            lost: 0,
            confirmed: 100,
            confirmed_lost: 0,
            lost_outside_bound: 0,
            master_side: None,
            unwritable_ms: Some(1_000),
            healthy_ms: 20_000,
            max_master_labels: 1,
            max_rw_endpoints: 1,
            samples: 300,
            max_terminating: None,
            master_before: "m-0".into(),
            master_after: "m-1".into(),
        }
    }

    #[test]
    fn each_bound_is_broken_by_what_it_names_and_nothing_else() {
        assert!(measurement(Row::MasterKill).violations().is_empty());
        let mut m = measurement(Row::MasterKill);
        m.unwritable_ms = Some(8_001);
        assert_eq!(
            m.violations().len(),
            1,
            "no known gap: the target is the bound"
        );
        let mut m = measurement(Row::MasterPause15s);
        m.unwritable_ms = Some(8_001);
        assert!(
            m.violations().is_empty(),
            "over the target, within the known gap"
        );
        assert_eq!(m.target_met(), Some(false));
        m.unwritable_ms = Some(8_000);
        assert_eq!(m.target_met(), Some(true), "at the target");
        m.unwritable_ms = Some(11_001);
        assert_eq!(m.violations().len(), 1, "over the known gap's bound");
        let mut m = measurement(Row::ReplicaDelete);
        m.unwritable_ms = Some(2_001);
        assert_eq!(
            m.violations().len(),
            1,
            "a planned fault without a known gap: 2 s"
        );
        let mut m = measurement(Row::SentinelMajorityStopped);
        m.unwritable_ms = Some(30_000);
        assert!(m.violations().is_empty(), "writes wait for the Sentinels");
        assert_eq!(m.target_met(), None);
        m.unwritable_ms = None;
        assert_eq!(m.violations().len(), 1, "but must come back");
        let mut m = measurement(Row::ReplicaDelete);
        m.lost = 1;
        m.max_master_labels = 2;
        m.max_rw_endpoints = 2;
        m.confirmed_lost = 1;
        assert_eq!(m.violations().len(), 4);
        let mut m = measurement(Row::MasterPartition40s);
        m.master_side = Some(MasterSide {
            acked: 10,
            lost: 3,
            last_lost_ms: Some(1_900),
            lost_outside_bound: 0,
        });
        assert!(m.violations().is_empty(), "within F of the cut");
        if let Some(side) = m.master_side.as_mut() {
            side.lost_outside_bound = 1;
        }
        assert_eq!(m.violations().len(), 1);
        // Every pod deleted: the master's preStop hands its data to a replacement (issue 15).
        let mut m = measurement(Row::EveryPodDeleted);
        m.lost = 1;
        assert_eq!(m.violations().len(), 1, "every pod deleted loses nothing");
        let mut m = measurement(Row::MasterPause15s);
        m.lost = 2;
        assert!(m.violations().is_empty(), "within F of the resume");
        m.lost_outside_bound = 1;
        assert_eq!(m.violations().len(), 1);
        let mut m = measurement(Row::MasterKill);
        m.topology = Topology::Lease3;
        m.unwritable_ms = Some(9_000);
        assert!(
            m.violations().is_empty(),
            "the Lease expires after 6 s: 9 s"
        );
    }

    #[test]
    fn a_single_copy_may_lose_only_its_unsynced_tail_to_a_crash_and_waits_for_its_replacement() {
        for topology in [Topology::Sentinel1x3Persistent, Topology::SinglePersistent] {
            assert!(!topology.has_replicas() && topology.has_persistence());
            let rows: Vec<Row> = Row::ALL
                .into_iter()
                .filter(|r| r.applies_to(topology))
                .collect();
            assert!(
                rows.iter().all(|r| !r.exclusive()
                    && !matches!(r, Row::ReplicaDelete | Row::ReplicaPartition40s)),
                "{rows:?}"
            );
            assert_eq!(Row::MasterKill.loss_rule(topology), LossRule::UnsyncedTail);
            assert_eq!(Row::MasterDelete.loss_rule(topology), LossRule::None);
            let mut m = measurement(Row::MasterKill);
            m.topology = topology;
            m.lost = 40;
            m.lost_outside_bound = 0;
            assert!(m.violations().is_empty(), "the AOF's last second");
            m.lost_outside_bound = 1;
            assert_eq!(m.violations().len(), 1, "older than the fsync interval");
            let mut m = measurement(Row::MasterDelete);
            m.topology = topology;
            m.unwritable_ms = Some(12_000);
            assert!(m.violations().is_empty(), "waits for the replacement");
            assert_eq!(m.target_met(), Some(false));
            m.lost = 1;
            assert_eq!(m.violations().len(), 1, "a graceful stop loses nothing");
        }
        assert!(Row::SentinelMajorityStopped.applies_to(Topology::Sentinel1x3Persistent));
        assert!(!Row::SentinelDelete.applies_to(Topology::SinglePersistent));
        // The 3-pod shapes keep the rule they had.
        assert_eq!(
            Row::MasterKill.loss_rule(Topology::Sentinel3x3Persistent),
            LossRule::None
        );
    }

    #[test]
    fn faults_the_whole_testbed_shares_run_alone_and_without_sentinel_wait_for_the_operator() {
        let exclusive: Vec<Row> = Row::ALL.into_iter().filter(|r| r.exclusive()).collect();
        assert_eq!(
            exclusive,
            vec![
                Row::MasterNodeStopped,
                Row::OperatorKilledMidRoll,
                Row::OperatorDownMasterKill,
                Row::ApiserverRestartMidRoll
            ]
        );
        assert_eq!(
            Row::OperatorDownMasterKill.outage_target(Topology::Sentinel3x3),
            Some(Duration::from_secs(8)),
            "Sentinel fails over without the operator"
        );
        assert_eq!(
            Row::OperatorDownMasterKill.outage_target(Topology::Lease3),
            None
        );
        let mut m = measurement(Row::OperatorDownMasterKill);
        m.topology = Topology::Lease3;
        m.unwritable_ms = Some(45_000);
        assert!(m.violations().is_empty(), "waits for the operator");
        assert_eq!(m.target_met(), None);
        m.unwritable_ms = Some(60_001);
        assert_eq!(m.violations().len(), 1, "but within its bound");
        let mut m = measurement(Row::OperatorKilledMidRoll);
        m.max_terminating = Some(2);
        assert_eq!(m.violations().len(), 1, "two pods of a tier going at once");
        m.max_terminating = Some(1);
        m.unwritable_ms = Some(5_001);
        assert_eq!(
            m.violations().len(),
            1,
            "a roll's switchover, killed or not"
        );
        assert_eq!(
            Row::ApiserverRestartMidRoll.outage_target(Topology::Sentinel3x3),
            Some(PLANNED_TARGET)
        );
        let mut m = measurement(Row::ApiserverRestartMidRoll);
        m.topology = Topology::Lease3;
        m.unwritable_ms = Some(9_400);
        assert!(
            m.violations().is_empty(),
            "without Sentinel the master fences while the API server is down"
        );
        assert_eq!(m.target_met(), None);
    }

    #[test]
    fn a_line_round_trips_and_other_lines_are_not_measurements() {
        let mut m = measurement(Row::MasterPartition40s);
        m.master_side = Some(MasterSide::default());
        m.unwritable_ms = None;
        assert_eq!(Measurement::parse_line(&m.line()), Some(m));
        assert_eq!(Measurement::parse_line("test foo ... ok"), None);
        assert_eq!(Measurement::parse_line("MATRIX {"), None);
    }

    #[test]
    fn rows_are_selected_by_any_part_of_their_id() {
        assert_eq!(Row::selected(""), Row::ALL.to_vec());
        assert_eq!(
            Row::selected("pause,sentinel-delete"),
            vec![
                Row::MasterPause15s,
                Row::MasterPause60s,
                Row::SentinelDelete
            ]
        );
        assert!(Row::selected("nothing-like-it").is_empty());
        assert!(!Row::SentinelDelete.applies_to(Topology::Lease3));
        let persistent: Vec<Row> = Row::ALL
            .into_iter()
            .filter(|row| row.applies_to(Topology::Sentinel3x3Persistent))
            .collect();
        assert_eq!(persistent, [Row::MasterKill, Row::EveryPodDeleted]);
        assert_eq!(
            Topology::Sentinel3x3Persistent.unplanned_target(),
            Topology::Sentinel3x3.unplanned_target()
        );
    }

    #[test]
    fn the_page_has_a_table_per_measured_topology_with_median_and_max() {
        let mut runs = vec![
            measurement(Row::MasterPause15s),
            measurement(Row::MasterPause15s),
        ];
        runs[1].run = 2;
        runs[1].unwritable_ms = Some(12_000);
        runs[1].healthy_ms = 30_000;
        let page = render(
            &runs,
            "abc1234",
            "2026-12-06",
            "cargo xtask matrix --runs 2",
        );
        assert!(page.contains("## 3 data pods + 3 Sentinels"), "{page}");
        assert!(!page.contains("## 3 data pods without Sentinel"), "{page}");
        assert!(!page.contains("with persistence"), "{page}");
        assert!(
            page.contains(
                "| master-pause-15s | 2 | 0 of 1000 | 0 of 100 | 1.00 s / 12.00 s | 1 of 2 | 20.00 s / 30.00 s | 1 / 1 | **broken in 1 of 2** |"
            ),
            "{page}"
        );
        assert!(page.contains("`abc1234`"), "{page}");
        assert!(page.contains("- **master-pause-15s** — SIGSTOP"), "{page}");
        assert!(
            page.contains("*Known gap* (target 8 s, every run held to 11 s"),
            "{page}"
        );
    }
}
