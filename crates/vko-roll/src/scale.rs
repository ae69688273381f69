//! Scaling a running cluster: how many data pods the StatefulSet may have this pass, and which
//! Sentinel (if any) is reset to forget what a scale-down removed. Pure; the operator applies
//! the count and sends the reset (ADR 0024).
//!
//! A StatefulSet always removes its highest ordinals. If the master is among them, shrinking
//! first would stop the master and leave the failover to chance; so the StatefulSet keeps its
//! current size until the master serves from an ordinal that stays. The switchover that moves
//! it there is the rolling update's lossless one ([`crate::next`] treats a master at or above
//! `spec.replicas` like an outdated master).

/// Why the data StatefulSet is not shrunk to `spec.replicas` yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleHold {
    /// The master serves from an ordinal the scale-down removes; it is switched over first.
    MasterOnRemovedOrdinal {
        /// The master's ordinal.
        master: u32,
    },
    /// No master is known: where it is cannot be ruled out to be a removed ordinal.
    MasterUnknown,
    /// A pod on a removed ordinal still carries the master label (a master just switched over,
    /// whose sidecar relabels it within a second): removed now, its sidecar stops on SIGTERM and
    /// the terminating pod keeps the label next to the new master's.
    MasterLabelOnRemovedOrdinal {
        /// The labelled pod's ordinal.
        ordinal: u32,
    },
}

/// The data StatefulSet's `replicas` for this pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataReplicas {
    /// The count to apply.
    pub apply: u32,
    /// Set while a scale-down waits (`apply` > `spec.replicas`).
    pub hold: Option<ScaleHold>,
}

/// The data StatefulSet's `replicas` to apply: `desired` (`spec.replicas`) unless that would
/// remove the master's pod. `live` is the StatefulSet's current `spec.replicas` (`None` before
/// it exists), `master` the master's ordinal as the authority last recorded it
/// (`status.masterPod`), `None` when unknown; `labelled` the ordinals of the data pods that are
/// not terminating and carry the master label.
///
/// Scale-up and no change apply `desired` at once. A scale-down applies `desired` only when the
/// master is known and below it and no pod at a removed ordinal is labelled master; with the
/// master at a removed ordinal the pods above the master may already go (they are replicas), the
/// master's ordinal stays; with no master known nothing is removed; a removed pod still labelled
/// master stays (with the pods below it) until its sidecar relabels it.
pub fn data_replicas(
    desired: u32,
    live: Option<u32>,
    master: Option<u32>,
    labelled: &[u32],
) -> DataReplicas {
    let at = |apply: u32, hold: Option<ScaleHold>| DataReplicas { apply, hold };
    let Some(live) = live else {
        return at(desired, None);
    };
    if desired >= live {
        return at(desired, None);
    }
    let labelled_removed = labelled
        .iter()
        .copied()
        .filter(|o| *o >= desired && *o < live)
        .max();
    match master {
        Some(master) if master < desired => match labelled_removed {
            None => at(desired, None),
            Some(ordinal) => at(
                ordinal.saturating_add(1).max(desired),
                Some(ScaleHold::MasterLabelOnRemovedOrdinal { ordinal }),
            ),
        },
        Some(master) => at(
            master.saturating_add(1).min(live).max(desired),
            Some(ScaleHold::MasterOnRemovedOrdinal { master }),
        ),
        None => at(live, Some(ScaleHold::MasterUnknown)),
    }
}

/// The data pods a Sentinel switchover away from `from` must not promote: every pod at an
/// ordinal the scale-down removes (`spec.replicas` and above), the old master excepted. Sentinel
/// picks from its own view and would otherwise hand the master to a pod about to be removed,
/// costing a second switchover (seen on the testbed in 2 of 4 runs, one of them an 8.3 s pause).
pub fn never_promote(data: &crate::DataTier, from: u32) -> Vec<u32> {
    data.pods
        .iter()
        .map(|pod| pod.ordinal)
        .filter(|ordinal| *ordinal >= data.replicas && *ordinal != from)
        .collect()
}

/// One Sentinel as the reset decision sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelAnswerView {
    /// The Sentinel pod's ordinal.
    pub ordinal: u32,
    /// The pod is Ready and not being deleted.
    pub ready: bool,
    /// What it answered; `None` when it did not answer.
    pub answer: Option<SentinelMemory>,
}

/// What one Sentinel remembers about the cluster it monitors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelMemory {
    /// The master ordinal it names; `None` when it names none of this cluster's pods or
    /// considers the master down.
    pub master: Option<u32>,
    /// `num-other-sentinels`.
    pub other_sentinels: u32,
    /// Data-pod ordinals of every replica it lists, down or not.
    pub replicas: Vec<u32>,
}

/// Why a Sentinel is reset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResetCause {
    /// It remembers more peers than the tier has Sentinels (removed by a scale-down).
    StalePeers {
        /// `num-other-sentinels`.
        knows: u32,
        /// `spec.sentinel.replicas - 1`.
        expected: u32,
    },
    /// It lists replicas whose pods a data scale-down removed.
    RemovedReplicas(Vec<u32>),
}

/// `SENTINEL RESET <name>` on one Sentinel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelReset {
    /// The Sentinel pod's ordinal.
    pub ordinal: u32,
    pub cause: ResetCause,
}

/// What the Sentinels need this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResetPlan {
    /// Nothing to forget.
    Nothing,
    /// Reset this one Sentinel now.
    Reset(SentinelReset),
    /// Something is left to forget, but not now (the reason); look again soon.
    Pending(&'static str),
}

/// The Sentinel to reset this pass, if any, so that Sentinels forget the peers and replicas a
/// scale-down removed (Sentinel never forgets them by itself).
///
/// Only on a calm cluster, one Sentinel at a time: every Sentinel of the tier (`sentinels` =
/// `spec.sentinel.replicas`, ordinals `0..sentinels`, no other pod) is ready and answers, all
/// name the same master (no failover runs), none knows fewer peers than `sentinels - 1` and
/// none lists fewer replicas than `data_pods` holds besides the master (so a Sentinel reset
/// earlier has rediscovered both before the next one forgets). `data_pods` are the ordinals of
/// the data pods that exist; `data_replicas` is `spec.replicas`. The lowest ordinal with
/// something to forget goes first. A reset Sentinel forgets its peers and replicas and learns
/// them again within seconds (hello messages every 2 s, the master's INFO every 10 s); while it
/// does, the plan is [`ResetPlan::Pending`] (so is a calm cluster's absence: the caller looks
/// again soon while anything is left to forget).
pub fn sentinel_to_reset(
    sentinels: u32,
    views: &[SentinelAnswerView],
    data_pods: &[u32],
    data_replicas: u32,
) -> ResetPlan {
    let expected = sentinels.saturating_sub(1);
    let forget = |memory: &SentinelMemory| -> Option<ResetCause> {
        if memory.other_sentinels > expected {
            return Some(ResetCause::StalePeers {
                knows: memory.other_sentinels,
                expected,
            });
        }
        let removed: Vec<u32> = memory
            .replicas
            .iter()
            .copied()
            .filter(|o| *o >= data_replicas && !data_pods.contains(o))
            .collect();
        (!removed.is_empty()).then_some(ResetCause::RemovedReplicas(removed))
    };
    let anything = views
        .iter()
        .filter_map(|v| v.answer.as_ref())
        .any(|memory| forget(memory).is_some());
    if !anything {
        return ResetPlan::Nothing;
    }
    let tier: Vec<u32> = (0..sentinels).collect();
    let mut ordinals: Vec<u32> = views.iter().map(|v| v.ordinal).collect();
    ordinals.sort_unstable();
    if ordinals != tier || views.iter().any(|v| !v.ready) {
        return ResetPlan::Pending("a Sentinel pod is missing, extra or not ready");
    }
    let Some(memories) = views
        .iter()
        .map(|v| Some((v.ordinal, v.answer.as_ref()?)))
        .collect::<Option<Vec<(u32, &SentinelMemory)>>>()
    else {
        return ResetPlan::Pending("a Sentinel does not answer");
    };
    let master = memories.first().and_then(|(_, m)| m.master);
    if master.is_none() || memories.iter().any(|(_, m)| m.master != master) {
        return ResetPlan::Pending("the Sentinels do not all name the same master");
    }
    // Replicas that exist and stay (the Sentinels must know them before and after a reset).
    let live_replicas: Vec<u32> = data_pods
        .iter()
        .copied()
        .filter(|o| Some(*o) != master && *o < data_replicas)
        .collect();
    let rediscovering = memories.iter().any(|(_, m)| {
        m.other_sentinels < expected || live_replicas.iter().any(|o| !m.replicas.contains(o))
    });
    if rediscovering {
        return ResetPlan::Pending("a Sentinel is still rediscovering its peers or replicas");
    }
    memories
        .into_iter()
        .find_map(|(ordinal, memory)| {
            Some(ResetPlan::Reset(SentinelReset {
                ordinal,
                cause: forget(memory)?,
            }))
        })
        .unwrap_or(ResetPlan::Nothing)
}
