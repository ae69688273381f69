//! Who is out there: the data pods and Sentinels of this cluster (found by DNS in a pod, or given
//! explicitly in tests), how to dial them, and what they report.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use vko_authority::HOLD_HOST;
use vko_valkey::parse::{InstanceFlag, ReplicationRole};
use vko_valkey::{Dialer, ValkeyClient};

use crate::error::{Result, SidecarError};

/// A Valkey or Sentinel instance as it is announced (host name and port). Identity is compared
/// on both: in a pod the host differs per instance, in tests the port does.
pub type Endpoint = vko_valkey::switchover::Address;

/// Where the cluster's pods are found in a real pod: stable DNS names through the headless
/// Services (`<cluster>-<i>.<headless>.<ns>.svc.<domain>`).
#[derive(Debug, Clone)]
pub struct DnsNames {
    pub cluster: String,
    pub headless_service: String,
    pub sentinel_service: Option<String>,
    pub namespace: String,
    pub cluster_domain: String,
    pub valkey_port: u16,
    pub sentinel_port: u16,
}

impl DnsNames {
    fn service_suffix(&self, service: &str) -> String {
        format!(".{service}.{}.svc.{}", self.namespace, self.cluster_domain)
    }

    pub fn data_pod_fqdn(&self, pod: &str) -> String {
        format!("{pod}{}", self.service_suffix(&self.headless_service))
    }

    pub fn sentinel_pod_fqdn(&self, pod: &str) -> Option<String> {
        let service = self.sentinel_service.as_ref()?;
        Some(format!("{pod}{}", self.service_suffix(service)))
    }
}

/// How peers are found.
#[derive(Debug, Clone)]
pub enum Discovery {
    Dns(DnsNames),
    /// Fixed lists (tests: processes on 127.0.0.1). Pod names are `pod-<port>`.
    Static {
        peers: Vec<Endpoint>,
        sentinels: Vec<Endpoint>,
    },
}

/// Ordinals probed per round; scanning stops after a round in which none resolved (the hosts
/// file / DNS holds only pods that exist, and ordinals are dense apart from short gaps).
const SCAN_BATCH: u32 = 8;
const SCAN_MAX: u32 = 256;

async fn resolves(host: &str) -> bool {
    match tokio::time::timeout(Duration::from_secs(1), tokio::net::lookup_host((host, 0))).await {
        Ok(Ok(mut addrs)) => addrs.next().is_some(),
        _ => false,
    }
}

async fn scan(names: impl Fn(u32) -> String, port: u16) -> Vec<Endpoint> {
    let mut found = Vec::new();
    let mut start = 0;
    while start < SCAN_MAX {
        let batch: Vec<String> = (start..start + SCAN_BATCH).map(&names).collect();
        let hits = join_all(batch.iter().map(|h| resolves(h))).await;
        let mut any = false;
        for (host, hit) in batch.into_iter().zip(hits) {
            if hit {
                any = true;
                found.push(Endpoint::new(host, port));
            }
        }
        if !any {
            break;
        }
        start += SCAN_BATCH;
    }
    found
}

/// The Sentinels that exist now (by DNS: `<cluster>-sentinel-<i>.<sentinel-service>...`).
pub async fn sentinels_of(discovery: &Discovery) -> Vec<Endpoint> {
    match discovery {
        Discovery::Static { sentinels, .. } => sentinels.clone(),
        Discovery::Dns(names) => match &names.sentinel_service {
            None => Vec::new(),
            Some(_) => {
                scan(
                    |i| {
                        names
                            .sentinel_pod_fqdn(&format!("{}-sentinel-{i}", names.cluster))
                            .unwrap_or_default()
                    },
                    names.sentinel_port,
                )
                .await
            }
        },
    }
}

/// This pod's place in the cluster.
#[derive(Debug, Clone)]
pub struct Topology {
    /// This server as announced (`replica-announce-ip`/`-port`).
    pub me: Endpoint,
    /// Where this pod's own server is dialled (127.0.0.1 in a pod).
    pub local: Endpoint,
    /// Sentinel's monitor name; `None` without Sentinel.
    pub monitor: Option<String>,
    pub discovery: Discovery,
    /// The replica config template (the operator's recorded master without Sentinel).
    pub replica_config: PathBuf,
    /// The last non-empty Sentinel list and when it was found: the loop asks Sentinel every
    /// second while master, and the set of Sentinel pods rarely changes.
    pub sentinel_cache: SentinelCache,
    /// The replicas this server listed while master: a stopping master's successor wait knows
    /// its peers even when their pods are already gone from DNS.
    pub seen_replicas: SeenReplicas,
}

/// The replicas a master listed (their pods' names stay the StatefulSet's).
#[derive(Debug, Clone, Default)]
pub struct SeenReplicas(Arc<Mutex<BTreeSet<Endpoint>>>);

/// A short-lived cache of the discovered Sentinels.
#[derive(Debug, Clone, Default)]
pub struct SentinelCache(Arc<Mutex<Option<Discovered>>>);

/// When a Sentinel list was found, and the list.
type Discovered = (Instant, Vec<Endpoint>);

/// How long a discovered Sentinel list is reused.
const SENTINEL_CACHE_TTL: Duration = Duration::from_secs(10);

impl Topology {
    pub fn sentinel_enabled(&self) -> bool {
        self.monitor.is_some()
    }

    /// Drops the cached Sentinel list: the next [`Topology::sentinels`] asks DNS again.
    pub fn forget_sentinels(&self) {
        if let Ok(mut cache) = self.sentinel_cache.0.lock() {
            *cache = None;
        }
    }

    /// Remembers the replicas the local master lists (only this cluster's pods).
    pub fn remember_replicas(&self, replicas: &[Endpoint]) {
        let ours = replicas.iter().filter(|r| self.pod_of(r).is_some());
        if let Ok(mut seen) = self.seen_replicas.0.lock() {
            seen.extend(ours.cloned());
        }
    }

    /// The other data pods that exist now, and the replicas this server listed as master (their
    /// pods may be gone from DNS a moment before their replacements appear under the same
    /// names).
    pub async fn peers_and_seen_replicas(&self) -> Vec<Endpoint> {
        let mut all: BTreeSet<Endpoint> = self.peers().await.into_iter().collect();
        if let Ok(seen) = self.seen_replicas.0.lock() {
            all.extend(seen.iter().filter(|ep| **ep != self.me).cloned());
        }
        all.into_iter().collect()
    }

    /// The other data pods that exist now.
    pub async fn peers(&self) -> Vec<Endpoint> {
        let all = match &self.discovery {
            Discovery::Static { peers, .. } => peers.clone(),
            Discovery::Dns(names) => {
                scan(
                    |i| names.data_pod_fqdn(&format!("{}-{i}", names.cluster)),
                    names.valkey_port,
                )
                .await
            }
        };
        all.into_iter().filter(|ep| *ep != self.me).collect()
    }

    /// The Sentinels that exist now.
    pub async fn sentinels(&self) -> Vec<Endpoint> {
        if let Ok(cache) = self.sentinel_cache.0.lock()
            && let Some((at, list)) = cache.as_ref()
            && at.elapsed() < SENTINEL_CACHE_TTL
        {
            return list.clone();
        }
        let found = sentinels_of(&self.discovery).await;
        if !found.is_empty()
            && let Ok(mut cache) = self.sentinel_cache.0.lock()
        {
            *cache = Some((Instant::now(), found.clone()));
        }
        found
    }

    /// The announced endpoint of one of this cluster's data pods, by pod name.
    pub fn endpoint_of_pod(&self, pod: &str) -> Option<Endpoint> {
        match &self.discovery {
            Discovery::Static { peers, .. } => {
                let port: u16 = pod.strip_prefix("pod-")?.parse().ok()?;
                peers.iter().find(|p| p.port == port).cloned()
            }
            Discovery::Dns(names) => Some(Endpoint::new(names.data_pod_fqdn(pod), self.me.port)),
        }
    }

    /// The pod behind an announced endpoint (for label patches), if it is one of ours.
    pub fn pod_of(&self, ep: &Endpoint) -> Option<String> {
        match &self.discovery {
            Discovery::Static { .. } => Some(format!("pod-{}", ep.port)),
            Discovery::Dns(names) => {
                let suffix = names.service_suffix(&names.headless_service);
                let pod = ep.host.strip_suffix(&suffix)?;
                (!pod.is_empty() && !pod.contains('.')).then(|| pod.to_owned())
            }
        }
    }
}

/// What one data pod reports about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerReport {
    pub endpoint: Endpoint,
    pub role: ReplicationRole,
    /// The master it replicates from (replicas only).
    pub upstream: Option<Endpoint>,
    pub master_repl_offset: i64,
    pub keys: u64,
    /// The replicas it lists (masters only), as they announce themselves.
    pub replicas: Vec<Endpoint>,
}

impl PeerReport {
    /// ADR 0005: a peer holds data when it has replicated anything or has keys.
    pub fn holds_data(&self) -> bool {
        self.master_repl_offset > 0 || self.keys > 0
    }

    pub fn is_master(&self) -> bool {
        self.role == ReplicationRole::Master
    }

    pub fn in_hold(&self) -> bool {
        self.upstream.as_ref().is_some_and(|u| u.host == HOLD_HOST)
    }
}

/// A peer answered, or did not (then it proves nothing either way).
#[derive(Debug, Clone, PartialEq)]
pub enum PeerEvidence {
    Answered(PeerReport),
    Unreachable(Endpoint),
}

impl PeerEvidence {
    pub fn endpoint(&self) -> &Endpoint {
        match self {
            PeerEvidence::Answered(r) => &r.endpoint,
            PeerEvidence::Unreachable(ep) => ep,
        }
    }
}

/// `INFO replication` + `DBSIZE` of a client already connected.
pub async fn report_of(client: &ValkeyClient, endpoint: &Endpoint) -> Result<PeerReport> {
    let info = client
        .info_replication()
        .await
        .map_err(SidecarError::valkey(format!(
            "INFO replication on {endpoint}"
        )))?;
    let keys = client
        .dbsize()
        .await
        .map_err(SidecarError::valkey(format!("DBSIZE on {endpoint}")))?;
    Ok(PeerReport {
        endpoint: endpoint.clone(),
        role: info.role,
        upstream: info
            .upstream
            .as_ref()
            .map(|u| Endpoint::new(u.master_host.clone(), u.master_port)),
        master_repl_offset: info.master_repl_offset,
        keys,
        replicas: info
            .replicas
            .iter()
            .map(|r| Endpoint::new(r.host.clone(), r.port))
            .collect(),
    })
}

/// Ask one peer, with the dialer's short timeouts.
pub async fn probe(dialer: &Dialer, ep: &Endpoint) -> PeerEvidence {
    let answer = async {
        let client = dialer
            .valkey(ep)
            .await
            .map_err(SidecarError::valkey(format!("connect to {ep}")))?;
        let report = report_of(&client, ep).await;
        client.close().await;
        report
    };
    match answer.await {
        Ok(report) => PeerEvidence::Answered(report),
        Err(e) => {
            tracing::debug!(peer = %ep, error = %e, "peer did not answer");
            PeerEvidence::Unreachable(ep.clone())
        }
    }
}

pub async fn probe_all(dialer: &Dialer, peers: &[Endpoint]) -> Vec<PeerEvidence> {
    join_all(peers.iter().map(|ep| probe(dialer, ep))).await
}

/// One Sentinel's view of the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelAnswer {
    pub sentinel: Endpoint,
    pub master: Endpoint,
    /// This Sentinel plus the peers it knows.
    pub known_sentinels: u32,
    pub config_epoch: u64,
    /// While this Sentinel runs a failover of `master`: the replica it promotes (ADR 0030).
    pub promoting: Option<Endpoint>,
    /// How it hears `master` (ADR 0041).
    pub reach: MasterReach,
    /// It lists a replica of `master` (`num-slaves` > 0), one it could promote.
    pub lists_replicas: bool,
}

/// How a Sentinel hears the master it names (ADR 0041): what its vote vouches from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MasterReach {
    /// It has counted the master as not answering its PINGs this long (zero: every PING
    /// answered), the time it flags the master down on once above `down-after`.
    Waited(Duration),
    /// It flags the master `s_down` or `o_down` already.
    FlagsDown,
    /// Its answer did not say.
    Unsaid,
}

impl MasterReach {
    /// How far back its vote vouches: a Sentinel that flags the master down, or does not say,
    /// vouches for nothing (as if it had waited forever).
    pub fn vouch_wait(self) -> Duration {
        match self {
            MasterReach::Waited(waited) => waited,
            MasterReach::FlagsDown | MasterReach::Unsaid => Duration::MAX,
        }
    }
}

async fn ask_one(dialer: &Dialer, sentinel: &Endpoint, name: &str) -> Option<SentinelAnswer> {
    let answer = async {
        let client = dialer
            .sentinel(sentinel)
            .await
            .map_err(SidecarError::valkey(format!(
                "connect to sentinel {sentinel}"
            )))?;
        let asked = async {
            let master = client
                .master(name)
                .await
                .map_err(SidecarError::valkey(format!(
                    "SENTINEL MASTER on {sentinel}"
                )))?;
            // Only the Sentinel running a failover flags its master entry; the replica it
            // promotes is flagged in its replica list.
            let promoting = if master.flags.contains(&InstanceFlag::FailoverInProgress) {
                client
                    .replicas(name)
                    .await
                    .map_err(SidecarError::valkey(format!(
                        "SENTINEL REPLICAS on {sentinel}"
                    )))?
                    .into_iter()
                    .find(|r| r.flags.contains(&InstanceFlag::Promoted))
                    .map(|r| Endpoint::new(r.host, r.port))
            } else {
                None
            };
            Ok::<_, SidecarError>((master, promoting))
        };
        let answer = asked.await;
        client.close().await;
        answer
    };
    match answer.await {
        Ok((m, promoting)) => Some(SentinelAnswer {
            reach: if m.flags.contains(&InstanceFlag::SDown)
                || m.flags.contains(&InstanceFlag::ODown)
            {
                MasterReach::FlagsDown
            } else {
                m.unanswered_for_ms().map_or(MasterReach::Unsaid, |ms| {
                    MasterReach::Waited(Duration::from_millis(ms))
                })
            },
            lists_replicas: m.num_replicas > 0,
            sentinel: sentinel.clone(),
            master: Endpoint::new(m.host, m.port),
            known_sentinels: m.num_other_sentinels + 1,
            config_epoch: m.config_epoch.unwrap_or(0),
            promoting,
        }),
        Err(e) => {
            tracing::debug!(%sentinel, error = %e, "sentinel did not answer");
            None
        }
    }
}

/// `SENTINEL MASTER <name>` on every Sentinel, concurrently.
pub async fn ask_sentinels(
    dialer: &Dialer,
    sentinels: &[Endpoint],
    name: &str,
) -> Vec<Option<SentinelAnswer>> {
    join_all(sentinels.iter().map(|s| ask_one(dialer, s, name))).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn pod_names_come_from_the_headless_fqdn() {
        let names = DnsNames {
            cluster: "vk".into(),
            headless_service: "vk-headless".into(),
            sentinel_service: Some("vk-sentinel-headless".into()),
            namespace: "ns".into(),
            cluster_domain: "cluster.local".into(),
            valkey_port: 6379,
            sentinel_port: 26379,
        };
        assert_eq!(
            names.data_pod_fqdn("vk-1"),
            "vk-1.vk-headless.ns.svc.cluster.local"
        );
        assert_eq!(
            names.sentinel_pod_fqdn("vk-sentinel-0").as_deref(),
            Some("vk-sentinel-0.vk-sentinel-headless.ns.svc.cluster.local")
        );
        let topo = Topology {
            me: Endpoint::new(names.data_pod_fqdn("vk-0"), 6379),
            local: Endpoint::new("127.0.0.1", 6379),
            monitor: Some("vk".into()),
            discovery: Discovery::Dns(names),
            replica_config: PathBuf::from("/nonexistent"),
            sentinel_cache: SentinelCache::default(),
            seen_replicas: Default::default(),
        };
        assert_eq!(
            topo.pod_of(&Endpoint::new(
                "vk-2.vk-headless.ns.svc.cluster.local",
                6379
            ))
            .as_deref(),
            Some("vk-2")
        );
        assert_eq!(topo.pod_of(&Endpoint::new("other.example", 6379)), None);
        assert_eq!(
            topo.pod_of(&Endpoint::new("a.b.vk-headless.ns.svc.cluster.local", 6379)),
            None
        );
    }

    #[test]
    fn holding_data_means_replicated_or_keys() {
        let report = |offset, keys| PeerReport {
            endpoint: Endpoint::new("p", 1),
            role: ReplicationRole::Replica,
            upstream: Some(Endpoint::new(HOLD_HOST, 1)),
            master_repl_offset: offset,
            keys,
            replicas: Vec::new(),
        };
        assert!(!report(0, 0).holds_data());
        assert!(report(14, 0).holds_data());
        assert!(report(0, 3).holds_data());
        assert!(report(0, 0).in_hold());
    }

    #[tokio::test]
    async fn unresolvable_names_are_not_peers() {
        let names = DnsNames {
            cluster: "vk".into(),
            headless_service: "vk-headless".into(),
            sentinel_service: None,
            namespace: "ns".into(),
            cluster_domain: "cluster.invalid".into(),
            valkey_port: 6379,
            sentinel_port: 26379,
        };
        let topo = Topology {
            me: Endpoint::new(names.data_pod_fqdn("vk-0"), 6379),
            local: Endpoint::new("127.0.0.1", 6379),
            monitor: None,
            discovery: Discovery::Dns(names),
            replica_config: PathBuf::from("/nonexistent"),
            sentinel_cache: SentinelCache::default(),
            seen_replicas: Default::default(),
        };
        assert!(topo.peers().await.is_empty());
        assert!(topo.sentinels().await.is_empty());
        // Replicas the local master listed count as peers though DNS no longer has them; this
        // server and servers outside the cluster do not.
        let replica = Endpoint::new("vk-2.vk-headless.ns.svc.cluster.invalid", 6379);
        topo.remember_replicas(&[
            replica.clone(),
            topo.me.clone(),
            Endpoint::new("10.0.0.9", 6379),
        ]);
        assert_eq!(topo.peers_and_seen_replicas().await, vec![replica]);
    }
}
