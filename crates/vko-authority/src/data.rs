//! What one data pod answered ([`PodProbe`]), read by the master Lease decision without
//! Sentinel (`lease.rs`, ADR 0022), and the replica sync state the status reports.

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

    /// (offset, keys): how caught up it is; `(-1, 0)` for a pod that did not answer.
    pub(crate) fn progress(&self) -> (i64, u64) {
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
