//! The master authority without Sentinel (ADR 0005): the operator adopts a single answering
//! master and promotes the most caught-up replica when the recorded master is gone or held; and
//! the replica sync state the status reports.

use crate::sentinel::SentinelVerdict;

/// What one data pod answered.
#[derive(Clone, Debug, PartialEq)]
pub struct PodProbe {
    pub ordinal: u32,
    pub pod: String,
    pub state: ProbeState,
}

/// The server's state as far as the authority cares.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeState {
    /// No pod, no IP, not running, or being deleted and not the master.
    NotRunning(String),
    /// Dialling or asking failed.
    Unreachable(String),
    Master {
        repl_offset: i64,
        keys: u64,
        connected_replicas: u32,
    },
    Replica {
        /// Ordinal of the data pod it replicates from; `None` for the hold or a foreign host.
        master_ordinal: Option<u32>,
        in_hold: bool,
        link_up: bool,
        syncing: bool,
        repl_offset: i64,
        keys: u64,
    },
}

impl PodProbe {
    pub fn is_master(&self) -> bool {
        matches!(self.state, ProbeState::Master { .. })
    }

    /// Whether the server holds data worth keeping: it has keys or has taken part in replication.
    pub fn holds_data(&self) -> bool {
        match self.state {
            ProbeState::Master {
                repl_offset, keys, ..
            }
            | ProbeState::Replica {
                repl_offset, keys, ..
            } => repl_offset > 0 || keys > 0,
            _ => false,
        }
    }

    fn progress(&self) -> (i64, u64) {
        match self.state {
            ProbeState::Master {
                repl_offset, keys, ..
            }
            | ProbeState::Replica {
                repl_offset, keys, ..
            } => (repl_offset, keys),
            _ => (-1, 0),
        }
    }
}

/// What the master authority decided (no Sentinel, more than one replica).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MasterDecision {
    /// The recorded master answers as the only master.
    Steady(u32),
    /// Exactly one pod answers master and it is not the record (first boot, or a drain handover
    /// by the sidecar): record it.
    Adopt(u32),
    /// The recorded master is gone or held and a replica holds data: promote the most caught-up
    /// one and point the others at it.
    Promote { candidate: u32, redirect: Vec<u32> },
    /// Nothing safe to do now; the text says why.
    Wait(String),
    /// Several pods answer master; nobody is demoted here (their data may differ).
    SplitBrain(Vec<u32>),
}

/// The authority's decision from the record and the probes. `name` is the cluster's name, for
/// the messages.
pub fn decide_master(name: &str, recorded: Option<u32>, probes: &[PodProbe]) -> MasterDecision {
    let masters: Vec<u32> = probes
        .iter()
        .filter(|p| p.is_master())
        .map(|p| p.ordinal)
        .collect();
    match masters.as_slice() {
        [only] if recorded == Some(*only) => return MasterDecision::Steady(*only),
        [only] => return MasterDecision::Adopt(*only),
        [] => {}
        several => return MasterDecision::SplitBrain(several.to_vec()),
    }
    let Some(recorded) = recorded else {
        return MasterDecision::Wait(format!(
            "no pod answers master yet; {name}-0 starts as master of a new cluster"
        ));
    };
    let recorded_probe = probes.iter().find(|p| p.ordinal == recorded);
    let recorded_lost = match recorded_probe.map(|p| &p.state) {
        None | Some(ProbeState::NotRunning(_)) | Some(ProbeState::Unreachable(_)) => true,
        Some(ProbeState::Replica { in_hold, .. }) => *in_hold,
        Some(ProbeState::Master { .. }) => false,
    };
    if !recorded_lost {
        return MasterDecision::Wait(format!(
            "{name}-{recorded} is recorded as master but answers as a replica of another pod"
        ));
    }
    let candidate = probes
        .iter()
        .filter(|p| p.ordinal != recorded)
        .filter(|p| matches!(p.state, ProbeState::Replica { .. }) && p.holds_data())
        .max_by(|a, b| {
            a.progress()
                .cmp(&b.progress())
                // Ties go to the lower ordinal.
                .then(b.ordinal.cmp(&a.ordinal))
        });
    let Some(candidate) = candidate else {
        return MasterDecision::Wait(format!(
            "the recorded master {name}-{recorded} is gone or held and no replica holds data; it leaves the hold by itself when no pod holds data"
        ));
    };
    let redirect = probes
        .iter()
        .filter(|p| p.ordinal != candidate.ordinal)
        .filter(|p| matches!(p.state, ProbeState::Replica { .. }))
        .map(|p| p.ordinal)
        .collect();
    MasterDecision::Promote {
        candidate: candidate.ordinal,
        redirect,
    }
}

/// Pods still catching up (not linked to `master` or in a full sync), by name.
pub fn unsynced_replicas(probes: &[PodProbe], master: u32) -> Vec<String> {
    probes
        .iter()
        .filter(|p| p.ordinal != master)
        .filter(|p| match &p.state {
            ProbeState::Replica {
                master_ordinal,
                link_up,
                syncing,
                ..
            } => *master_ordinal != Some(master) || !link_up || *syncing,
            _ => true,
        })
        .map(|p| p.pod.clone())
        .collect()
}

/// Replicas (pod names) linked to the Sentinels' master that some agreeing Sentinel does not
/// list yet. Sentinel learns replicas from the master's INFO every 10 s; a replica it does not
/// know is neither a failover candidate nor reconfigured after a failover, so the cluster is
/// not healthy until every agreeing Sentinel lists every linked replica. Empty without a
/// Sentinel majority (a replica still syncing elsewhere is [`unsynced_replicas`]' business).
pub fn replicas_unknown_to_sentinel(verdict: &SentinelVerdict, probes: &[PodProbe]) -> Vec<String> {
    let Some(master) = verdict.master else {
        return Vec::new();
    };
    probes
        .iter()
        .filter(|p| {
            p.ordinal != master
                && matches!(p.state, ProbeState::Replica { master_ordinal: Some(m), link_up: true, .. } if m == master)
        })
        .filter(|p| !verdict.known_replicas.contains(&p.ordinal))
        .map(|p| p.pod.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sentinel::{Electorate, SentinelReport, sentinel_view};

    fn master(ordinal: u32, offset: i64, keys: u64) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::Master {
                repl_offset: offset,
                keys,
                connected_replicas: 0,
            },
        }
    }

    fn replica(ordinal: u32, of: Option<u32>, offset: i64, keys: u64) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::Replica {
                master_ordinal: of,
                in_hold: of.is_none(),
                link_up: of.is_some(),
                syncing: false,
                repl_offset: offset,
                keys,
            },
        }
    }

    fn gone(ordinal: u32) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::NotRunning("pod does not exist".into()),
        }
    }

    #[test]
    fn the_recorded_master_answering_is_steady_and_a_single_other_master_is_adopted() {
        let probes = [master(0, 10, 1), replica(1, Some(0), 10, 1)];
        assert_eq!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Steady(0)
        );
        // A drain handover promoted pod 1: adopt it.
        let probes = [replica(0, Some(1), 10, 1), master(1, 12, 1)];
        assert_eq!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Adopt(1)
        );
        assert_eq!(decide_master("a", None, &probes), MasterDecision::Adopt(1));
    }

    #[test]
    fn a_lost_master_is_replaced_by_the_most_caught_up_replica_with_data() {
        let probes = [
            gone(0),
            replica(1, Some(0), 100, 5),
            replica(2, Some(0), 120, 5),
        ];
        assert_eq!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Promote {
                candidate: 2,
                redirect: vec![1]
            }
        );
        // The recorded master restarted into the hold: it is redirected too.
        let probes = [
            replica(0, None, 0, 0),
            replica(1, Some(0), 100, 5),
            replica(2, Some(0), 100, 5),
        ];
        assert_eq!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Promote {
                candidate: 1,
                redirect: vec![0, 2]
            }
        );
    }

    #[test]
    fn an_empty_replica_is_never_promoted() {
        let probes = [replica(0, None, 50, 3), replica(1, None, 0, 0), gone(2)];
        assert!(matches!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Wait(_)
        ));
        let probes = [gone(0), replica(1, Some(0), 0, 0)];
        assert!(matches!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Wait(_)
        ));
    }

    #[test]
    fn no_record_and_no_master_waits_and_several_masters_are_reported_not_demoted() {
        let probes = [replica(0, None, 0, 0), replica(1, None, 0, 0)];
        assert!(matches!(
            decide_master("a", None, &probes),
            MasterDecision::Wait(_)
        ));
        let probes = [master(0, 5, 1), master(1, 7, 2)];
        assert_eq!(
            decide_master("a", Some(0), &probes),
            MasterDecision::SplitBrain(vec![0, 1])
        );
        // The recorded master answering as a replica of someone else: no action.
        let probes = [replica(0, Some(1), 5, 1), replica(1, Some(0), 5, 1)];
        assert!(matches!(
            decide_master("a", Some(0), &probes),
            MasterDecision::Wait(_)
        ));
    }

    #[test]
    fn a_linked_replica_some_agreeing_sentinel_does_not_list_is_reported() {
        let probes = [
            master(0, 100, 5),
            replica(1, Some(0), 100, 5),
            replica(2, Some(0), 100, 5),
        ];
        let answer = |master: u32, replicas: &[u32]| {
            Some(SentinelReport {
                master: Some(master),
                replicas: replicas.to_vec(),
                known_sentinels: 3,
            })
        };
        let three = Electorate::new(3, 3);
        let all_know = sentinel_view(three, &[answer(0, &[1, 2]), answer(0, &[2, 1]), None]);
        assert!(replicas_unknown_to_sentinel(&all_know, &probes).is_empty());
        let one_missing = sentinel_view(three, &[answer(0, &[1, 2]), answer(0, &[2]), None]);
        assert_eq!(
            replicas_unknown_to_sentinel(&one_missing, &probes),
            vec!["a-1".to_owned()]
        );
        // A Sentinel naming another master is not asked about this master's replicas.
        let disagreeing = sentinel_view(
            three,
            &[answer(0, &[1, 2]), answer(0, &[1, 2]), answer(1, &[])],
        );
        assert!(replicas_unknown_to_sentinel(&disagreeing, &probes).is_empty());
        // Without a majority nothing is reported.
        let minority = sentinel_view(three, &[answer(0, &[]), None, None]);
        assert!(replicas_unknown_to_sentinel(&minority, &probes).is_empty());
        // A replica still syncing elsewhere is the sync check's business, not this one's.
        let elsewhere = [master(0, 100, 5), replica(1, None, 0, 0)];
        let one = sentinel_view(Electorate::new(1, 1), &[answer(0, &[])]);
        assert!(replicas_unknown_to_sentinel(&one, &elsewhere).is_empty());
    }

    #[test]
    fn replicas_are_synced_only_when_linked_to_the_master() {
        let mut syncing = replica(2, Some(0), 10, 0);
        if let ProbeState::Replica { syncing: s, .. } = &mut syncing.state {
            *s = true;
        }
        let probes = [
            master(0, 10, 1),
            replica(1, Some(0), 10, 1),
            syncing,
            gone(3),
        ];
        assert_eq!(unsynced_replicas(&probes, 0), vec!["a-2", "a-3"]);
    }
}
