//! Data-plane I/O: every data pod is dialled by pod IP (no cluster DNS needed by the operator),
//! Sentinel is asked who the master is, and without Sentinel the operator promotes the replica
//! the master authority chose (ADR 0005).
//!
//! The decisions are `vko-authority`'s (ADR 0014): this module only turns answers into its
//! [`PodProbe`]s and [`SentinelReport`]s and executes a promotion.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use vko_authority::{PodProbe, ProbeState, SentinelReport, ordinal_of};
use vko_valkey::parse::{LinkStatus, ReplicationRole};
use vko_valkey::{ConnectOptions, SentinelClient, TlsOptions, ValkeyClient};

use crate::error::Error;
use crate::leader::Leadership;

/// The host a held server replicates from (ADR 0005): it never resolves.
pub const HOLD_HOST: &str = "vko-hold.invalid";
/// Bound on connect and on each call to a pod.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

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

/// The pod's IP while it runs and is not terminating; else why it cannot be dialled.
pub fn pod_ip_if_running(pod: &Pod) -> Result<String, String> {
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

impl SentinelAnswer {
    /// The answer in data-pod ordinals, as the master authority counts it.
    pub fn report(&self, name: &str) -> SentinelReport {
        SentinelReport {
            master: ordinal_of(name, &self.master),
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

/// Promotes `candidate` (REPLICAOF NO ONE), checks it answers master, then points `redirect` at
/// it. Returns only once the candidate is master; redirect failures are logged (the sidecars
/// follow the record too).
pub async fn promote(
    name: &str,
    candidate: (u32, &Pod, &str),
    redirect: &[(u32, &Pod, &str)],
    dial: &DialConfig,
    leadership: &Leadership,
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
    let port = dial.valkey_port;
    for (other, other_pod, other_fqdn) in redirect {
        let Ok(ip) = pod_ip_if_running(other_pod) else {
            continue;
        };
        let other_name = format!("{name}-{other}");
        let failed = |action, source| Error::DataPlane {
            action,
            pod: other_name.clone(),
            source,
        };
        let result = async {
            let client =
                ValkeyClient::connect(&dial.options(&ip, port, dial.password.as_ref(), other_fqdn))
                    .await
                    .map_err(|e| failed("connect", e))?;
            let result = match leadership.check("REPLICAOF") {
                Ok(()) => client
                    .replicaof(fqdn, port)
                    .await
                    .map_err(|e| failed("REPLICAOF", e)),
                Err(refused) => Err(refused),
            };
            client.close().await;
            result
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(pod = %other_name, %error, "could not point the replica at the promoted master");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_running_pod_that_is_not_terminating_is_dialled() {
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
            replicas: vec![
                "a-0.a-headless.ns.svc.cluster.local".into(),
                "10.0.0.7".into(),
                "a-2.a-headless.ns.svc.cluster.local".into(),
            ],
            other_sentinels: 2,
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
}
