//! Data-plane checks: every data pod is dialled by pod IP (no cluster DNS needed by the operator),
//! Sentinel is asked who the master is, and without Sentinel the operator acts as the master
//! authority (ADR 0005): it adopts a single answering master and promotes the most caught-up
//! replica when the recorded master is gone or held.
//!
//! The decisions are pure functions over [`PodProbe`]s; only `probe_*` and `promote` do I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use vko_valkey::parse::{LinkStatus, ReplicationRole};
use vko_valkey::{ConnectOptions, SentinelClient, TlsOptions, ValkeyClient};

use crate::error::Error;

/// The host a held server replicates from (ADR 0005): it never resolves.
pub const HOLD_HOST: &str = "vko-hold.invalid";
/// Bound on connect and on each call to a pod.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// What one data pod answered.
#[derive(Clone, Debug, PartialEq)]
pub struct PodProbe {
    pub ordinal: u32,
    pub pod: String,
    pub state: ProbeState,
}

/// The server's state as far as the pipeline cares.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeState {
    /// No pod, no IP, not running, or being deleted.
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

/// The ordinal of `<name>-<n>` or of a host name whose first label is that.
pub fn ordinal_of(name: &str, host_or_pod: &str) -> Option<u32> {
    let first = host_or_pod.split('.').next()?;
    first.strip_prefix(name)?.strip_prefix('-')?.parse().ok()
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

/// The authority's decision from the record and the probes.
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

/// The master a majority of the answering Sentinels names (hosts mapped to ordinals).
pub fn sentinel_majority(name: &str, answers: &[Option<String>]) -> Option<u32> {
    let mut votes: BTreeMap<u32, usize> = BTreeMap::new();
    let answered = answers.iter().flatten().count();
    for host in answers.iter().flatten() {
        if let Some(ordinal) = ordinal_of(name, host) {
            *votes.entry(ordinal).or_default() += 1;
        }
    }
    votes
        .into_iter()
        .find(|(_, count)| *count * 2 > answered)
        .map(|(ordinal, _)| ordinal)
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

/// How to reach the servers of one `Valkey`.
#[derive(Clone, Debug)]
pub struct DialConfig {
    pub valkey_port: u16,
    pub sentinel_port: u16,
    pub password: Option<String>,
    pub sentinel_password: Option<String>,
    pub tls: Option<TlsOptions>,
}

impl DialConfig {
    fn options(
        &self,
        ip: &str,
        port: u16,
        password: Option<&String>,
        fqdn: &str,
    ) -> ConnectOptions {
        let mut options = ConnectOptions::new(ip, port);
        options.password = password.cloned();
        options.connect_timeout = DIAL_TIMEOUT;
        options.command_timeout = DIAL_TIMEOUT;
        options.tls = self.tls.clone().map(|tls| TlsOptions {
            server_name: Some(fqdn.to_owned()),
            ..tls
        });
        options
    }
}

fn pod_ip_if_running(pod: &Pod) -> Result<String, String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("terminating".into());
    }
    let status = pod.status.as_ref().ok_or("no status yet")?;
    if status.phase.as_deref() != Some("Running") {
        return Err(format!(
            "phase {}",
            status.phase.as_deref().unwrap_or("unknown")
        ));
    }
    status.pod_ip.clone().ok_or_else(|| "no pod IP yet".into())
}

/// Whether the pod's Ready condition is True.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
}

/// Dials one data pod and classifies its answer.
pub async fn probe_data_pod(
    name: &str,
    ordinal: u32,
    pod: Option<&Pod>,
    fqdn: &str,
    dial: &DialConfig,
) -> PodProbe {
    let pod_name = format!("{name}-{ordinal}");
    let probe = |state| PodProbe {
        ordinal,
        pod: pod_name.clone(),
        state,
    };
    let Some(pod) = pod else {
        return probe(ProbeState::NotRunning("pod does not exist".into()));
    };
    let ip = match pod_ip_if_running(pod) {
        Ok(ip) => ip,
        Err(why) => return probe(ProbeState::NotRunning(why)),
    };
    let options = dial.options(&ip, dial.valkey_port, dial.password.as_ref(), fqdn);
    let client = match ValkeyClient::connect(&options).await {
        Ok(client) => client,
        Err(error) => return probe(ProbeState::Unreachable(error.to_string())),
    };
    let replication = client.info_replication().await;
    let keys = client.info_keyspace().await.map(|k| k.total_keys());
    client.close().await;
    let (replication, keys) = match (replication, keys) {
        (Ok(replication), Ok(keys)) => (replication, keys),
        (Err(error), _) | (_, Err(error)) => {
            return probe(ProbeState::Unreachable(error.to_string()));
        }
    };
    let state = match (replication.role, replication.upstream) {
        (ReplicationRole::Master, _) => ProbeState::Master {
            repl_offset: replication.master_repl_offset,
            keys,
            connected_replicas: replication.connected_replicas,
        },
        (ReplicationRole::Replica, upstream) => {
            let host = upstream
                .as_ref()
                .map(|u| u.master_host.clone())
                .unwrap_or_default();
            ProbeState::Replica {
                master_ordinal: ordinal_of(name, &host),
                in_hold: host == HOLD_HOST,
                link_up: upstream
                    .as_ref()
                    .is_some_and(|u| u.link_status == LinkStatus::Up),
                syncing: upstream.as_ref().is_some_and(|u| u.sync_in_progress),
                repl_offset: upstream
                    .as_ref()
                    .map_or(replication.master_repl_offset, |u| {
                        u.repl_offset.max(replication.master_repl_offset)
                    }),
                keys,
            }
        }
    };
    probe(state)
}

/// One Sentinel's answer: the master it names (announced host) and the replicas it knows in good
/// health (announced hosts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelAnswer {
    pub master: String,
    pub replicas: Vec<String>,
    /// `num-other-sentinels`: every peer this Sentinel has ever seen and not been reset to forget.
    pub other_sentinels: u32,
}

/// Asks one Sentinel pod `SENTINEL MASTER <name>` and `SENTINEL REPLICAS <name>`; `None` when it
/// does not answer or considers the master down.
pub async fn ask_sentinel(
    name: &str,
    pod: &Pod,
    fqdn: &str,
    dial: &DialConfig,
) -> Option<SentinelAnswer> {
    let ip = pod_ip_if_running(pod).ok()?;
    let options = dial.options(
        &ip,
        dial.sentinel_port,
        dial.sentinel_password.as_ref(),
        fqdn,
    );
    let client = match SentinelClient::connect(&options).await {
        Ok(client) => client,
        Err(error) => {
            tracing::debug!(pod = %pod.name_any(), %error, "sentinel unreachable");
            return None;
        }
    };
    let answer = client.master(name).await;
    let replicas = client.replicas(name).await;
    client.close().await;
    match answer {
        Ok(master) if !master.flags.is_down() => Some(SentinelAnswer {
            other_sentinels: master.num_other_sentinels,
            master: master.host,
            replicas: replicas
                .unwrap_or_default()
                .into_iter()
                .filter(|r| !r.flags.is_down())
                .map(|r| r.host)
                .collect(),
        }),
        Ok(_) => None,
        Err(error) => {
            tracing::debug!(pod = %pod.name_any(), %error, "SENTINEL MASTER failed");
            None
        }
    }
}

/// Replicas (pod names) that some Sentinel naming `master` does not list yet. Sentinel learns
/// replicas from the master's INFO every 10 s; a replica it does not know is neither a failover
/// candidate nor reconfigured after a failover, so the cluster is not healthy until every
/// agreeing Sentinel lists every synced replica.
pub fn replicas_unknown_to_sentinel(
    name: &str,
    master: u32,
    answers: &[Option<SentinelAnswer>],
    probes: &[PodProbe],
) -> Vec<String> {
    let agreeing: Vec<BTreeSet<u32>> = answers
        .iter()
        .flatten()
        .filter(|a| ordinal_of(name, &a.master) == Some(master))
        .map(|a| {
            a.replicas
                .iter()
                .filter_map(|host| ordinal_of(name, host))
                .collect()
        })
        .collect();
    if agreeing.is_empty() {
        return Vec::new();
    }
    probes
        .iter()
        .filter(|p| {
            p.ordinal != master
                && matches!(p.state, ProbeState::Replica { master_ordinal: Some(m), link_up: true, .. } if m == master)
        })
        .filter(|p| agreeing.iter().any(|known| !known.contains(&p.ordinal)))
        .map(|p| p.pod.clone())
        .collect()
}

/// Promotes `candidate` (REPLICAOF NO ONE), checks it answers master, then points `redirect` at
/// it. Returns only once the candidate is master; redirect failures are logged (the sidecars
/// follow the record too).
pub async fn promote(
    name: &str,
    candidate: (u32, &Pod, &str),
    redirect: &[(u32, &Pod, &str)],
    dial: &DialConfig,
) -> Result<(), Error> {
    let (ordinal, pod, fqdn) = candidate;
    let pod_name = format!("{name}-{ordinal}");
    let data_plane = |action, source| Error::DataPlane {
        action,
        pod: pod_name.clone(),
        source,
    };
    let ip = pod_ip_if_running(pod).map_err(|why| Error::PromotionRefused {
        pod: pod_name.clone(),
        why,
    })?;
    let client =
        ValkeyClient::connect(&dial.options(&ip, dial.valkey_port, dial.password.as_ref(), fqdn))
            .await
            .map_err(|e| data_plane("connect", e))?;
    client
        .replicaof_no_one()
        .await
        .map_err(|e| data_plane("REPLICAOF NO ONE", e))?;
    let role = client
        .info_replication()
        .await
        .map_err(|e| data_plane("INFO replication", e))?;
    client.close().await;
    if role.role != ReplicationRole::Master {
        return Err(Error::PromotionRefused {
            pod: pod_name,
            why: "it still answers as a replica after REPLICAOF NO ONE".into(),
        });
    }
    let port = dial.valkey_port;
    for (other, other_pod, other_fqdn) in redirect {
        let Ok(ip) = pod_ip_if_running(other_pod) else {
            continue;
        };
        let result = async {
            let client =
                ValkeyClient::connect(&dial.options(&ip, port, dial.password.as_ref(), other_fqdn))
                    .await?;
            let result = client.replicaof(fqdn, port).await;
            client.close().await;
            result
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(pod = %format!("{name}-{other}"), %error, "could not point the replica at the promoted master");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn pod_ordinals_come_from_names_and_host_names() {
        assert_eq!(ordinal_of("a", "a-2"), Some(2));
        assert_eq!(
            ordinal_of("a", "a-1.a-headless.ns.svc.cluster.local"),
            Some(1)
        );
        assert_eq!(ordinal_of("a", "ab-1"), None);
        assert_eq!(ordinal_of("a", HOLD_HOST), None);
        assert_eq!(ordinal_of("a-b", "a-b-10.x"), Some(10));
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
        let answer = |master: &str, replicas: &[&str]| {
            Some(SentinelAnswer {
                other_sentinels: 2,
                master: format!("vk-{master}.vk-headless.ns.svc.cluster.local"),
                replicas: replicas
                    .iter()
                    .map(|r| format!("vk-{r}.vk-headless.ns.svc.cluster.local"))
                    .collect(),
            })
        };
        let all_know = [answer("0", &["1", "2"]), answer("0", &["2", "1"]), None];
        assert!(replicas_unknown_to_sentinel("vk", 0, &all_know, &probes).is_empty());
        let one_missing = [answer("0", &["1", "2"]), answer("0", &["2"]), None];
        assert_eq!(
            replicas_unknown_to_sentinel("vk", 0, &one_missing, &probes),
            vec!["a-1".to_owned()]
        );
        // A Sentinel naming another master is not asked about this master's replicas.
        let disagreeing = [answer("0", &["1", "2"]), answer("1", &[])];
        assert!(replicas_unknown_to_sentinel("vk", 0, &disagreeing, &probes).is_empty());
        // A replica still syncing elsewhere is the sync check's business, not this one's.
        let elsewhere = [master(0, 100, 5), replica(1, None, 0, 0)];
        assert!(replicas_unknown_to_sentinel("vk", 0, &[answer("0", &[])], &elsewhere).is_empty());
    }

    #[test]
    fn sentinel_majority_needs_more_than_half_of_the_answers() {
        let host = |n: u32| Some(format!("a-{n}.a-headless.ns.svc.cluster.local"));
        assert_eq!(
            sentinel_majority("a", &[host(1), host(1), host(0)]),
            Some(1)
        );
        assert_eq!(sentinel_majority("a", &[host(1), None, None]), Some(1));
        assert_eq!(sentinel_majority("a", &[host(1), host(0)]), None);
        assert_eq!(sentinel_majority("a", &[None, None]), None);
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
