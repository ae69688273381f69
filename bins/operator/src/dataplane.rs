//! Data-plane I/O: every data pod is dialled by pod IP (no cluster DNS needed by the operator),
//! Sentinel is asked who the master is, and without Sentinel the operator promotes the replica
//! the master authority chose (ADR 0005).
//!
//! A pass probes once ([`probe_round`]): one `INFO` per data pod and one `SENTINEL MASTER` +
//! `SENTINEL REPLICAS` per Sentinel. What they answered ([`PlaneAnswers`]) is read two ways, by
//! pure functions: as `vko-authority`'s [`PodProbe`]s and [`SentinelReport`]s (ADR 0014) for the
//! master authority and the status, and as `vko-roll`'s [`Server`]s for the rolling update.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use vko_authority::{HOLD_HOST, PodProbe, ProbeState, SentinelReport, ordinal_of};
use vko_render::Names;
use vko_roll::{ConnectedReplica, MasterInfo, ReplicaInfo, Server};
use vko_valkey::parse::{
    Info, KeyspaceInfo, LinkStatus, PersistenceInfo, ReplicaSyncState, ReplicationInfo,
    ReplicationRole,
};
use vko_valkey::switchover::Address;
use vko_valkey::{Dialer, SentinelClient};

use crate::error::Error;
use crate::leader::Leadership;

/// Bound on connect and on each call to a pod.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);
/// Bound on one data pod's probe (connect + `INFO`) in a probe round: a hung server must not hold
/// every pass for [`DIAL_TIMEOUT`], or a master Lease expiry is seen a pass late (ADR 0043).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The pod's IP while it runs and is not terminating; else why it cannot be dialled.
pub fn pod_ip_if_running(pod: &Pod) -> Result<String, String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Err("terminating".into());
    }
    pod_ip_while_running(pod)
}

/// The pod's IP while it runs, terminating or not: a master being deleted still acknowledges
/// writes until its preStop handover demotes it, so the probe must still hear it.
pub fn pod_ip_while_running(pod: &Pod) -> Result<String, String> {
    let status = pod.status.as_ref().ok_or("no status yet")?;
    if status.phase.as_deref() != Some("Running") {
        return Err(format!(
            "phase {}",
            status.phase.as_deref().unwrap_or("unknown")
        ));
    }
    status.pod_ip.clone().ok_or_else(|| "no pod IP yet".into())
}

/// `dialer` reaching `pods` by IP: an announced FQDN `<pod>.<headless>...` is dialled at the IP
/// of the running pod named by its first label (the certificate is verified against the FQDN).
pub fn by_pod_ip<'a>(mut dialer: Dialer, pods: impl Iterator<Item = &'a Arc<Pod>>) -> Dialer {
    let ips: BTreeMap<String, String> = pods
        .filter_map(|pod| Some((pod.name_any(), pod_ip_while_running(pod).ok()?)))
        .collect();
    dialer.connect_timeout = DIAL_TIMEOUT;
    dialer.command_timeout = DIAL_TIMEOUT;
    dialer.resolve = Some(Arc::new(move |host: &str| {
        let pod = host.split('.').next().unwrap_or_default();
        ips.get(pod)
            .cloned()
            .ok_or_else(|| vko_valkey::Error::Connection {
                addr: host.to_owned(),
                detail: format!("pod {pod} is not running or has no IP"),
            })
    }));
    dialer
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

/// What one data pod answered to the pass's `INFO`.
#[derive(Clone, Debug, PartialEq)]
pub enum DataAnswer {
    /// No pod, not running or no IP: not dialled; or terminating and silent.
    NotRunning(String),
    /// Dialling or `INFO` failed.
    Unreachable(String),
    Answered(Info),
    /// A pod being deleted whose server still answered.
    Leaving(Info),
}

/// What one Sentinel pod answered: `None` when it was not running, did not answer or
/// `SENTINEL MASTER` failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentinelPodAnswer {
    pub pod: String,
    /// `None` for a pod whose name carries no ordinal of the Sentinel StatefulSet (not dialled).
    pub ordinal: Option<u32>,
    pub answer: Option<SentinelAnswer>,
    /// The fingerprint of the certificate its TLS port serves, when the round was asked to
    /// measure it ([`ProbeTargets::sentinel_tls_ca`]) and the handshake succeeded.
    pub served_certificate: Option<String>,
}

/// The one probe round of a pass.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PlaneAnswers {
    /// Every ordinal below `spec.replicas` and every data pod that exists.
    pub data: BTreeMap<u32, DataAnswer>,
    /// Every Sentinel pod, in the stores' order (empty without Sentinel).
    pub sentinels: Vec<SentinelPodAnswer>,
}

/// Where and how the probe round dials.
pub struct ProbeTargets<'a> {
    /// The pods' names and announced FQDNs.
    pub names: &'a Names,
    pub valkey_port: u16,
    pub sentinel_port: u16,
    pub data_pods: &'a BTreeMap<u32, Arc<Pod>>,
    /// Ordinals `0..replicas` are probed even without a pod.
    pub replicas: u32,
    /// Empty without Sentinel.
    pub sentinel_pods: &'a [Arc<Pod>],
    /// With Sentinels that reload their certificate in place (ADR 0053): the CA their Secret
    /// holds, against which each one's served certificate is measured with a handshake of its own.
    pub sentinel_tls_ca: Option<&'a [u8]>,
}

/// Asks every data pod (one `INFO`) and every Sentinel pod, concurrently.
pub async fn probe_round(dialer: &Dialer, targets: &ProbeTargets<'_>) -> PlaneAnswers {
    let names = targets.names;
    let sentinel_statefulset = &names.sentinel_statefulset();
    let mut ordinals: Vec<u32> = (0..targets.replicas).collect();
    ordinals.extend(targets.data_pods.keys().filter(|o| **o >= targets.replicas));
    let data = futures::future::join_all(ordinals.into_iter().map(|ordinal| async move {
        let pod = targets.data_pods.get(&ordinal);
        let at = Address::new(names.data_pod_fqdn(ordinal), targets.valkey_port);
        let answer = ask_data_pod(dialer, pod, &at).await;
        (ordinal, answer)
    }));
    let sentinels = futures::future::join_all(targets.sentinel_pods.iter().map(|pod| async move {
        let ordinal = ordinal_of(sentinel_statefulset, &pod.name_any());
        let (answer, served_certificate) = match (ordinal, pod_ip_if_running(pod)) {
            (Some(ordinal), Ok(ip)) => {
                let fqdn = names.sentinel_pod_fqdn(ordinal);
                let at = Address::new(fqdn.clone(), targets.sentinel_port);
                let served = async {
                    let ca = targets.sentinel_tls_ca?;
                    let addr = format!("{ip}:{}", targets.sentinel_port);
                    vko_valkey::served::served_certificate(&addr, &fqdn, ca, PROBE_TIMEOUT)
                        .await
                        .inspect_err(|error| {
                            tracing::debug!(pod = %fqdn, %error, "served certificate: no handshake");
                        })
                        .ok()
                };
                tokio::join!(ask_sentinel(dialer, names.name(), &at), served)
            }
            _ => (None, None),
        };
        SentinelPodAnswer {
            pod: pod.name_any(),
            ordinal,
            answer,
            served_certificate,
        }
    }));
    let (data, sentinels) = tokio::join!(data, sentinels);
    PlaneAnswers {
        data: data.into_iter().collect(),
        sentinels,
    }
}

async fn ask_data_pod(dialer: &Dialer, pod: Option<&Arc<Pod>>, at: &Address) -> DataAnswer {
    let Some(pod) = pod else {
        return DataAnswer::NotRunning("pod does not exist".into());
    };
    if let Err(why) = pod_ip_while_running(pod) {
        return DataAnswer::NotRunning(why);
    }
    let leaving = pod.metadata.deletion_timestamp.is_some();
    let answer = async {
        let client = dialer.valkey(at).await?;
        let info = client.info("default").await;
        client.close().await;
        info
    };
    let answer = tokio::time::timeout(PROBE_TIMEOUT, answer)
        .await
        .unwrap_or_else(|_| {
            Err(vko_valkey::Error::Connection {
                addr: at.to_string(),
                detail: format!("no answer to INFO within {} ms", PROBE_TIMEOUT.as_millis()),
            })
        });
    match answer {
        Ok(info) if leaving => DataAnswer::Leaving(info),
        Ok(info) => DataAnswer::Answered(info),
        Err(error) if leaving => DataAnswer::NotRunning(format!("terminating, no answer: {error}")),
        Err(error) => {
            tracing::debug!(pod = %at, %error, "probe: no answer");
            DataAnswer::Unreachable(error.to_string())
        }
    }
}

/// The master authority's view of one data pod's answer.
pub fn pod_probe(name: &str, ordinal: u32, answer: &DataAnswer) -> PodProbe {
    let state = match answer {
        DataAnswer::NotRunning(why) => ProbeState::NotRunning(why.clone()),
        DataAnswer::Unreachable(why) => ProbeState::Unreachable(why.clone()),
        DataAnswer::Answered(info) => probe_state(name, info)
            .unwrap_or_else(|error| ProbeState::Unreachable(error.to_string())),
        // A master being deleted is still the master: its preStop handover may be running, and
        // until it demotes itself it acknowledges writes that a promotion elsewhere would lose.
        // Anything else about to stop is neither a candidate nor a replica to repoint.
        DataAnswer::Leaving(info) => match probe_state(name, info) {
            Ok(master @ ProbeState::Master { .. }) => master,
            Ok(_) => ProbeState::NotRunning("terminating".into()),
            Err(error) => ProbeState::NotRunning(format!("terminating: {error}")),
        },
    };
    PodProbe {
        ordinal,
        pod: format!("{name}-{ordinal}"),
        state,
    }
}

fn probe_state(name: &str, info: &Info) -> vko_valkey::Result<ProbeState> {
    let replication = ReplicationInfo::from_info(info)?;
    let keys = KeyspaceInfo::from_info(info)?.total_keys();
    Ok(match replication.role {
        ReplicationRole::Master => ProbeState::Master {
            repl_offset: replication.master_repl_offset,
            keys,
            connected_replicas: replication.connected_replicas,
        },
        ReplicationRole::Replica => {
            let upstream = replication.upstream.as_ref();
            let host = upstream.map(|u| u.master_host.as_str()).unwrap_or_default();
            ProbeState::Replica {
                master_ordinal: ordinal_of(name, host),
                in_hold: host == HOLD_HOST,
                link_up: upstream.is_some_and(|u| u.link_status == LinkStatus::Up),
                syncing: upstream.is_some_and(|u| u.sync_in_progress),
                repl_offset: upstream.map_or(replication.master_repl_offset, |u| {
                    u.repl_offset.max(replication.master_repl_offset)
                }),
                keys,
            }
        }
    })
}

fn offset(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The rolling update's view of one data pod's answer.
pub fn server(name: &str, answer: &DataAnswer) -> Server {
    match answer {
        DataAnswer::Answered(info) => server_of(name, info).unwrap_or(Server::Unreachable),
        // The roll waits for a pod being deleted to come back.
        DataAnswer::NotRunning(_) | DataAnswer::Unreachable(_) | DataAnswer::Leaving(_) => {
            Server::Unreachable
        }
    }
}

/// The rolling update's view of one `INFO` answer.
pub fn server_of(name: &str, info: &Info) -> Option<Server> {
    let replication = ReplicationInfo::from_info(info).ok()?;
    let keys = KeyspaceInfo::from_info(info)
        .map(|k| k.total_keys())
        .unwrap_or(0);
    let loading = PersistenceInfo::from_info(info).is_ok_and(|p| p.loading);
    Some(match replication.role {
        ReplicationRole::Master => Server::Master(MasterInfo {
            offset: offset(replication.master_repl_offset),
            keys,
            replicas: replication
                .replicas
                .iter()
                .map(|r| ConnectedReplica {
                    ordinal: ordinal_of(name, &r.host),
                    online: r.state == ReplicaSyncState::Online,
                    offset: offset(r.offset),
                })
                .collect(),
            replid: replication.master_replid.clone(),
            replid2: replication
                .master_replid2
                .clone()
                .filter(|id| id.bytes().any(|b| b != b'0')),
            second_offset: replication
                .second_repl_offset
                .and_then(|o| u64::try_from(o).ok()),
        }),
        ReplicationRole::Replica => {
            let upstream = replication.upstream.as_ref();
            Server::Replica(ReplicaInfo {
                following: upstream
                    .filter(|u| u.master_host != HOLD_HOST)
                    .and_then(|u| ordinal_of(name, &u.master_host)),
                link_up: upstream.is_some_and(|u| u.link_status == LinkStatus::Up),
                syncing: upstream.is_some_and(|u| u.sync_in_progress),
                loading,
                offset: offset(upstream.map_or(replication.master_repl_offset, |u| u.repl_offset)),
                keys,
            })
        }
    })
}

/// One Sentinel's answer: the master it names (announced host), whether it considers it down,
/// and the replicas it knows in good health (announced hosts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelAnswer {
    pub master: String,
    pub master_down: bool,
    pub replicas: Vec<String>,
    /// `num-other-sentinels`: every peer this Sentinel has ever seen and not been reset to forget.
    pub other_sentinels: u32,
    /// Every replica it lists, down or not (a scale-down's removed pods stay listed until
    /// `SENTINEL RESET`; `vko_roll::scale::sentinel_to_reset`).
    pub listed_replicas: Vec<String>,
}

impl SentinelAnswer {
    /// The answer in data-pod ordinals; the master is `None` while this Sentinel considers it
    /// down (the rolling update counts such a Sentinel as answering, not agreeing).
    pub fn report(&self, name: &str) -> SentinelReport {
        SentinelReport {
            master: ordinal_of(name, &self.master).filter(|_| !self.master_down),
            replicas: self
                .replicas
                .iter()
                .filter_map(|host| ordinal_of(name, host))
                .collect(),
            known_sentinels: usize::try_from(self.other_sentinels)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        }
    }
}

/// Asks one Sentinel `SENTINEL MASTER <name>` and `SENTINEL REPLICAS <name>`; `None` when it
/// does not answer the first.
async fn ask_sentinel(dialer: &Dialer, name: &str, at: &Address) -> Option<SentinelAnswer> {
    let client: SentinelClient = match dialer.sentinel(at).await {
        Ok(client) => client,
        Err(error) => {
            tracing::debug!(sentinel = %at, %error, "sentinel unreachable");
            return None;
        }
    };
    let master = client.master(name).await;
    let replicas = client.replicas(name).await;
    client.close().await;
    match master {
        Ok(master) => {
            let replicas = replicas.unwrap_or_default();
            Some(SentinelAnswer {
                master_down: master.flags.is_down(),
                other_sentinels: master.num_other_sentinels,
                master: master.host,
                listed_replicas: replicas.iter().map(|r| r.host.clone()).collect(),
                replicas: replicas
                    .into_iter()
                    .filter(|r| !r.flags.is_down())
                    .map(|r| r.host)
                    .collect(),
            })
        }
        Err(error) => {
            tracing::debug!(sentinel = %at, %error, "SENTINEL MASTER failed");
            None
        }
    }
}

/// Promotes `candidate` (REPLICAOF NO ONE), checks it answers master, then points `redirect` at
/// it. Returns only once the candidate is master; redirect failures are logged (the sidecars
/// follow the record too). Pods are given with their announced FQDNs.
pub async fn promote(
    name: &str,
    candidate: (u32, &Pod, &str),
    redirect: &[(u32, &Pod, &str)],
    dialer: &Dialer,
    port: u16,
    leadership: &Leadership,
) -> Result<(), Error> {
    let (ordinal, pod, fqdn) = candidate;
    let pod_name = format!("{name}-{ordinal}");
    let data_plane = |action, source| Error::DataPlane {
        action,
        pod: pod_name.clone(),
        source,
    };
    pod_ip_if_running(pod).map_err(|why| Error::PromotionRefused {
        pod: pod_name.clone(),
        why,
    })?;
    let client = dialer
        .valkey(&Address::new(fqdn, port))
        .await
        .map_err(|e| data_plane("connect", e))?;
    if let Err(refused) = leadership.check("REPLICAOF NO ONE") {
        client.close().await;
        return Err(refused);
    }
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
    repoint(name, fqdn, redirect, dialer, port, leadership).await;
    Ok(())
}

/// Points every pod of `pods` that runs at `master_fqdn` (`REPLICAOF`); failures are logged
/// (the sidecars follow the record and the Lease holder too).
pub async fn repoint(
    name: &str,
    master_fqdn: &str,
    pods: &[(u32, &Pod, &str)],
    dialer: &Dialer,
    port: u16,
    leadership: &Leadership,
) {
    for (other, other_pod, other_fqdn) in pods {
        if pod_ip_if_running(other_pod).is_err() {
            continue;
        }
        let other_name = format!("{name}-{other}");
        let failed = |action, source| Error::DataPlane {
            action,
            pod: other_name.clone(),
            source,
        };
        let result = async {
            let client = dialer
                .valkey(&Address::new(*other_fqdn, port))
                .await
                .map_err(|e| failed("connect", e))?;
            let result = match leadership.check("REPLICAOF") {
                Ok(()) => client
                    .replicaof(master_fqdn, port)
                    .await
                    .map_err(|e| failed("REPLICAOF", e)),
                Err(refused) => Err(refused),
            };
            client.close().await;
            result
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(pod = %other_name, %error, "could not point the pod at the master");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_pod_is_dialled_and_a_terminating_one_only_to_hear_its_role() {
        let pod = |phase: &str, ip: Option<&str>, deleting: bool| -> Pod {
            let mut pod: Pod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a-0"},
                "status": {"phase": phase, "podIP": ip}
            }))
            .unwrap();
            if deleting {
                pod.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            pod
        };
        assert_eq!(
            pod_ip_if_running(&pod("Running", Some("10.0.0.1"), false)),
            Ok("10.0.0.1".into())
        );
        assert_eq!(
            pod_ip_if_running(&pod("Running", Some("10.0.0.1"), true)),
            Err("terminating".into())
        );
        assert_eq!(
            pod_ip_while_running(&pod("Running", Some("10.0.0.1"), true)),
            Ok("10.0.0.1".into())
        );
        assert_eq!(
            pod_ip_if_running(&pod("Pending", None, false)),
            Err("phase Pending".into())
        );
        assert_eq!(
            pod_ip_if_running(&pod("Running", None, false)),
            Err("no pod IP yet".into())
        );
    }

    #[test]
    fn a_sentinel_answer_is_counted_in_ordinals() {
        let answer = SentinelAnswer {
            master: "a-1.a-headless.ns.svc.cluster.local".into(),
            master_down: false,
            replicas: vec![
                "a-0.a-headless.ns.svc.cluster.local".into(),
                "10.0.0.7".into(),
                "a-2.a-headless.ns.svc.cluster.local".into(),
            ],
            other_sentinels: 2,
            ..SentinelAnswer::default()
        };
        assert_eq!(
            answer.report("a"),
            SentinelReport {
                master: Some(1),
                replicas: vec![0, 2],
                known_sentinels: 3,
            }
        );
        let held = SentinelAnswer {
            master: HOLD_HOST.into(),
            ..SentinelAnswer::default()
        };
        assert_eq!(held.report("a").master, None);
        assert_eq!(held.report("a").known_sentinels, 1);
    }

    #[test]
    fn the_roll_reads_a_master_and_a_held_replica_from_info() {
        let master = Info::parse(
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=a-1.a-headless.ns.svc.cluster.local,port=6379,state=online,offset=42,lag=0\r\nmaster_failover_state:no-failover\r\nmaster_replid:abc\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:42\r\nsecond_repl_offset:-1\r\n# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n",
        );
        let Some(Server::Master(info)) = server_of("a", &master) else {
            panic!("not a master: {:?}", server_of("a", &master));
        };
        assert_eq!(info.offset, 42);
        assert_eq!(info.keys, 3);
        assert_eq!(info.replid2, None);
        assert_eq!(info.second_offset, None);
        assert_eq!(
            info.replicas,
            vec![ConnectedReplica {
                ordinal: Some(1),
                online: true,
                offset: 42
            }]
        );
        let held = Info::parse(
            "# Replication\r\nrole:slave\r\nmaster_host:vko-hold.invalid\r\nmaster_port:6379\r\nmaster_link_status:down\r\nmaster_last_io_seconds_ago:-1\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:0\r\nslave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\nmaster_replid:abc\r\nmaster_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:0\r\nsecond_repl_offset:-1\r\n",
        );
        let Some(Server::Replica(info)) = server_of("a", &held) else {
            panic!("not a replica");
        };
        assert_eq!(info.following, None);
        assert!(!info.link_up);
    }

    const MASTER_INFO: &str = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=a-1.a-headless.ns.svc.cluster.local,port=6379,state=online,offset=42,lag=0\r\nmaster_replid:abc\r\nmaster_repl_offset:42\r\n# Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n";
    const REPLICA_INFO: &str = "# Replication\r\nrole:slave\r\nmaster_host:a-0.a-headless.ns.svc.cluster.local\r\nmaster_port:6379\r\nmaster_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:40\r\nconnected_slaves:0\r\nmaster_replid:abc\r\nmaster_repl_offset:41\r\n# Persistence\r\nloading:1\r\nrdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:0\r\nrdb_last_save_time:1700000000\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\n# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n";

    #[test]
    fn one_info_answer_feeds_both_the_authority_and_the_roll() {
        let master = DataAnswer::Answered(Info::parse(MASTER_INFO));
        assert_eq!(
            pod_probe("a", 0, &master),
            PodProbe {
                ordinal: 0,
                pod: "a-0".into(),
                state: ProbeState::Master {
                    repl_offset: 42,
                    keys: 3,
                    connected_replicas: 1
                },
            }
        );
        let Server::Master(info) = server("a", &master) else {
            panic!("not a master");
        };
        assert_eq!(
            (info.offset, info.keys, info.replid.as_str()),
            (42, 3, "abc")
        );
        let replica = DataAnswer::Answered(Info::parse(REPLICA_INFO));
        // The authority counts the larger of the two offsets, the roll the replication offset.
        assert_eq!(
            pod_probe("a", 1, &replica).state,
            ProbeState::Replica {
                master_ordinal: Some(0),
                in_hold: false,
                link_up: true,
                syncing: false,
                repl_offset: 41,
                keys: 2,
            }
        );
        let Server::Replica(info) = server("a", &replica) else {
            panic!("not a replica");
        };
        assert_eq!(info.following, Some(0));
        assert!(info.link_up && info.loading && !info.syncing);
        assert_eq!((info.offset, info.keys), (40, 2));
    }

    #[test]
    fn a_pod_that_did_not_answer_is_unreachable_to_both_readers() {
        let down = DataAnswer::NotRunning("phase Pending".into());
        assert_eq!(
            pod_probe("a", 2, &down).state,
            ProbeState::NotRunning("phase Pending".into())
        );
        assert_eq!(server("a", &down), Server::Unreachable);
        let refused = DataAnswer::Unreachable("connection refused".into());
        assert_eq!(
            pod_probe("a", 2, &refused).state,
            ProbeState::Unreachable("connection refused".into())
        );
        assert_eq!(server("a", &refused), Server::Unreachable);
        // An answer without a replication section is unreachable to the authority too.
        let garbled = DataAnswer::Answered(Info::parse("# Server\r\nredis_version:8.0.0\r\n"));
        assert!(matches!(
            pod_probe("a", 2, &garbled).state,
            ProbeState::Unreachable(_)
        ));
        assert_eq!(server("a", &garbled), Server::Unreachable);
    }

    #[test]
    fn a_master_being_deleted_is_still_the_master_and_nothing_else_leaving_counts() {
        let leaving_master = DataAnswer::Leaving(Info::parse(MASTER_INFO));
        assert!(pod_probe("a", 0, &leaving_master).is_master());
        assert_eq!(server("a", &leaving_master), Server::Unreachable);
        let leaving_replica = DataAnswer::Leaving(Info::parse(REPLICA_INFO));
        assert_eq!(
            pod_probe("a", 1, &leaving_replica).state,
            ProbeState::NotRunning("terminating".into())
        );
        assert_eq!(server("a", &leaving_replica), Server::Unreachable);
        // While the recorded master is being deleted and still answers master, nobody is
        // promoted: its handover (or its end) decides.
        let probes = [
            pod_probe("a", 0, &leaving_master),
            pod_probe("a", 1, &DataAnswer::Answered(Info::parse(REPLICA_INFO))),
        ];
        let fresh = vko_authority::LeaseView {
            holder: Some(0),
            unchanged_for: Duration::ZERO,
            held_for: Duration::from_secs(60),
        };
        assert_eq!(
            vko_authority::decide_master_by_lease("a", Some(fresh), &probes, &[]),
            vko_authority::LeaseDecision::Steady {
                master: 0,
                demote: vec![]
            }
        );
    }

    #[test]
    fn a_sentinel_that_considers_the_master_down_names_none() {
        let answer = SentinelAnswer {
            master: "a-1.a-headless.ns.svc.cluster.local".into(),
            master_down: true,
            replicas: vec!["a-0.a-headless.ns.svc.cluster.local".into()],
            other_sentinels: 2,
            ..SentinelAnswer::default()
        };
        assert_eq!(
            answer.report("a"),
            SentinelReport {
                master: None,
                replicas: vec![0],
                known_sentinels: 3,
            }
        );
    }

    #[test]
    fn an_fqdn_is_dialled_at_the_ip_of_its_running_pod() {
        let pod = |name: &str, phase: &str| -> Arc<Pod> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": name},
                    "status": {"phase": phase, "podIP": "10.0.0.9"}
                }))
                .unwrap(),
            )
        };
        let pods = [pod("a-0", "Running"), pod("a-1", "Pending")];
        let dialer = by_pod_ip(Dialer::new(None), pods.iter());
        let resolve = dialer.resolve.as_ref().unwrap();
        assert_eq!(
            resolve("a-0.a-headless.ns.svc.cluster.local").unwrap(),
            "10.0.0.9"
        );
        let error = resolve("a-1.a-headless.ns.svc.cluster.local").unwrap_err();
        assert!(
            error.to_string().contains("pod a-1 is not running"),
            "{error}"
        );
        assert_eq!(dialer.connect_timeout, DIAL_TIMEOUT);
    }
}
