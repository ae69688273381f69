//! The planned, lossless switchover of a master that is about to stop: the shared procedure of
//! [`vko_valkey::switchover`] (pause writes → replicas caught up → `SENTINEL FAILOVER` or
//! `REPLICAOF NO ONE` → `REPLICAOF <new>` here while paused → unpause), run from this pod with
//! its DNS names, followed by what only the pod does: its effective config and role labels.
//!
//! Rollback: whatever fails before the old master is a replica ends with `CLIENT UNPAUSE` and
//! an error; the pod then terminates and Sentinel (or the operator) handles the loss of the master.

use std::time::{Duration, Instant};

use vko_authority::InstanceRole;
use vko_valkey::parse::{ReplicaSyncState, ReplicationInfo, ReplicationRole};
use vko_valkey::switchover::{self, Dial, Outcome, Promoter};
use vko_valkey::{SentinelClient, ValkeyClient};

use crate::decide::{self, Candidate, PeerPod};
use crate::error::{Result, SidecarError};
use crate::lease_api::{LeaseApi, Written};
use crate::node::Node;
use crate::pod_api::PodPresence;
use crate::topology::Endpoint;

/// The node's dialer, and the master Lease moved to the switchover's target right before its
/// promotion: this pod's writes are paused by then and it becomes a replica before the pause
/// ends, so it acknowledges nothing after it gave the authority away.
struct LeaseMovingDial<'a> {
    node: &'a Node,
    lease: &'a dyn LeaseApi,
}

impl Dial for LeaseMovingDial<'_> {
    async fn valkey(&self, at: &Endpoint) -> vko_valkey::Result<ValkeyClient> {
        self.node.dialer.valkey(at).await
    }

    async fn sentinel(&self, at: &Endpoint) -> vko_valkey::Result<SentinelClient> {
        self.node.dialer.sentinel(at).await
    }

    async fn before_promote(&self, target: &Endpoint) -> std::result::Result<(), String> {
        let Some(successor) = self.node.topology.pod_of(target) else {
            return Err(format!("{target} is not one of this cluster's pods"));
        };
        // Every pod deleted at once: the DELETEs land one by one, and a replica seen staying when
        // the handover began may be leaving now. Promoted, it would leave as master with the
        // only copy (measured: every write of the seconds before the fault lost). The drain
        // then waits for a replica that stays and hands over again (ADR 0048).
        if matches!(
            pod_state(self.node, &successor).await,
            PeerPod::Leaving | PeerPod::Gone
        ) {
            tracing::warn!(
                step = "lease",
                successor,
                "the successor's pod is leaving: not promoting it"
            );
            return Err(format!("{successor}'s pod is leaving"));
        }
        let moved = tokio::time::timeout(LEASE_MOVE_TIMEOUT, async {
            // Read fresh: the fencer's copy may be one renew old.
            for _ in 0..3 {
                let lease = self
                    .lease
                    .read()
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("the master Lease does not exist")?;
                if lease.holder.as_deref() != Some(self.node.my_pod.as_str()) {
                    return Err(format!(
                        "the master Lease is held by {}, not by this pod",
                        lease.holder.as_deref().unwrap_or("nobody")
                    ));
                }
                match self.lease.transfer(&lease, &successor).await {
                    Ok(Written::Done(_)) => return Ok(()),
                    // Our own fencer renewed it in between: read it again.
                    Ok(Written::Conflict) => continue,
                    Err(e) => return Err(e.to_string()),
                }
            }
            Err("the master Lease kept changing".to_owned())
        })
        .await
        .unwrap_or_else(|_| Err("moving the master Lease timed out".into()));
        match &moved {
            Ok(()) => tracing::info!(
                step = "lease",
                successor,
                "master Lease moved to the successor"
            ),
            Err(why) => tracing::error!(
                step = "lease",
                successor,
                why,
                "could not move the master Lease"
            ),
        }
        moved
    }
}

/// The longest the handover waits for the master Lease to move (writes are paused meanwhile).
const LEASE_MOVE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone)]
pub struct HandoverSettings {
    /// `CLIENT PAUSE` length: the bound on the whole switchover. Measured: catch-up 15–24 ms,
    /// Sentinel promotion about 1.1 s.
    pub pause: Duration,
    /// Poll interval while waiting for offsets and Sentinel.
    pub poll: Duration,
    /// The longest a stopping master serves on while every other data pod is leaving, waiting
    /// for a replacement to copy it ([`await_successor`]). With Sentinel's steer (15 s) and the
    /// pause (20 s) it stays inside the pod's 75 s grace period.
    pub successor_wait: Duration,
    /// How often that wait looks.
    pub successor_poll: Duration,
}

impl Default for HandoverSettings {
    fn default() -> Self {
        let shared = switchover::Settings::default();
        HandoverSettings {
            pause: shared.pause,
            poll: shared.poll,
            successor_wait: Duration::from_secs(35),
            successor_poll: Duration::from_millis(500),
        }
    }
}

/// How the data pod `pod` stands.
async fn pod_state(node: &Node, pod: &str) -> PeerPod {
    match node.pods.presence(pod).await {
        Ok(PodPresence::Running { ready }) => PeerPod::Staying { ready },
        Ok(PodPresence::Terminating) => PeerPod::Leaving,
        Ok(PodPresence::Gone) => PeerPod::Gone,
        Ok(PodPresence::Refused) => PeerPod::Refused,
        Err(e) => {
            tracing::warn!(pod, error = %e, "cannot ask the API whether a peer pod is leaving");
            PeerPod::Unknown
        }
    }
}

/// How the other data pod behind `peer` stands.
async fn peer_pod_of(node: &Node, peer: &Endpoint) -> PeerPod {
    match node.topology.pod_of(peer) {
        Some(pod) => pod_state(node, &pod).await,
        None => PeerPod::Unknown,
    }
}

/// The local master's online replicas and whether their pods are leaving.
async fn candidates(node: &Node, info: &ReplicationInfo) -> Vec<Candidate> {
    let mut found = Vec::new();
    for replica in info
        .replicas
        .iter()
        .filter(|r| r.state == ReplicaSyncState::Online)
    {
        let endpoint = Endpoint::new(replica.host.clone(), replica.port);
        let pod = peer_pod_of(node, &endpoint).await;
        found.push(Candidate {
            endpoint,
            offset: replica.offset,
            pod,
        });
    }
    found
}

/// Whether no online replica of the local master stays: every one is leaving, or none is
/// online (the replicas gone, their replacements not copied yet). An unanswered `INFO`: no,
/// the handover decides as before.
async fn no_online_replica_stays(node: &Node) -> bool {
    let Ok(local) = node.local().await else {
        return false;
    };
    let picked = match local.info_replication().await {
        Ok(info) => Some(decide::successors(&candidates(node, &info).await)),
        Err(_) => None,
    };
    local.close().await;
    picked.is_some_and(|picked| picked.none_stays())
}

/// The first of `ready` whose server says it follows this master with its link up. The master
/// lists replicas by announced host name, and a pod replaced under the same name answers that
/// name while the master still lists the old process's connection (measured: a replacement
/// still copying was promoted empty, ADR 0048 amended).
async fn first_following(node: &Node, ready: &[Endpoint]) -> Option<Endpoint> {
    let me = node.me();
    for candidate in ready {
        let Ok(client) = node.dialer.valkey(candidate).await else {
            continue;
        };
        let follows = client
            .info_replication()
            .await
            .ok()
            .and_then(|info| info.applied_from(&me.host, me.port))
            .is_some();
        client.close().await;
        if follows {
            return Some(candidate.clone());
        }
    }
    None
}

/// Whether one of the Sentinels would promote one of `eligible` now.
async fn sentinel_would_promote(node: &Node, name: &str, eligible: &[Endpoint]) -> bool {
    for sentinel in node.topology.sentinels().await {
        let listed = node
            .on_sentinel(&sentinel, "SENTINEL REPLICAS", async |c| {
                c.replicas(name).await
            })
            .await;
        if let Ok(listed) = listed
            && listed.iter().any(|r| {
                decide::promotable_by_sentinel(r)
                    && eligible.contains(&Endpoint::new(r.host.clone(), r.port))
            })
        {
            return true;
        }
    }
    false
}

/// How long a stopping replica keeps every command of its server paused: past the pod's grace
/// period (75 s), since the server stops as soon as the drain returns and must never run a
/// promotion before that.
pub const LEAVING_REPLICA_PAUSE: Duration = Duration::from_secs(90);

/// What the local server was when [`close_to_promotion`] paused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closed {
    /// A replica, and from now on every command waits: it stops as a replica.
    Replica,
    /// Master (never paused; or promoted right before the pause, which is then lifted): it
    /// drains as a master.
    Master,
}

/// With Sentinel, a stopping replica's server must not run a promotion once its drain has
/// returned: the master's handover may have asked for `SENTINEL FAILOVER` a moment before this
/// pod's DELETE landed (every pod deleted at once), Sentinel may pick this replica, and it would
/// leave as master with the only copy (measured: every write of the seconds before the fault
/// lost, ADR 0051). So every command is paused — Sentinel's `REPLICAOF NO ONE` waits until the
/// server stops — and the role read at that same instant (one `MULTI`) says whether the
/// promotion already ran: then the pause is lifted and the pod drains as a master.
pub async fn close_to_promotion(node: &Node) -> Result<Closed> {
    let local = node.local().await?;
    // A master is not paused at all: `CLIENT UNPAUSE` would also lift its fencer's pause.
    match local.info_replication().await {
        Ok(info) if info.role == ReplicationRole::Master => {
            local.close().await;
            return Ok(Closed::Master);
        }
        Ok(_) => {}
        Err(e) => {
            local.close().await;
            return Err(SidecarError::valkey("INFO replication of the local server")(e));
        }
    }
    let info = local
        .pause_all_reading_replication(LEAVING_REPLICA_PAUSE)
        .await;
    let closed = match info {
        Ok(info) if info.role == ReplicationRole::Master => {
            let lifted = local.client_unpause().await;
            local.close().await;
            lifted.map_err(SidecarError::valkey("CLIENT UNPAUSE of the local master"))?;
            Closed::Master
        }
        Ok(_) => {
            // Not closed with QUIT: it would wait for the pause too.
            drop(local);
            Closed::Replica
        }
        Err(e) => {
            local.close().await;
            return Err(SidecarError::valkey(
                "pause every command of the local server",
            )(e));
        }
    };
    Ok(closed)
}

/// What [`await_successor`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SuccessorWait {
    /// This server is not master, or some other data pod stays: the handover runs at once.
    NotNeeded,
    /// A replica whose pod stays is online (and, with Sentinel, promotable) after `waited`.
    Found {
        successor: Endpoint,
        waited: Duration,
    },
    /// Every other data pod has been missing past [`decide::REPLACEMENT_GRACE`]: the cluster
    /// itself is going (its Valkey, StatefulSet or namespace deleted).
    NoReplacement { waited: Duration },
    /// None within the limit: the handover takes what there is.
    TimedOut { waited: Duration },
}

/// The local server's role, as far as the wait needs it.
enum Local {
    Master(Box<ReplicationInfo>),
    NotMaster,
    NoAnswer,
}

async fn local_role(node: &Node) -> Local {
    let Ok(local) = node.local().await else {
        return Local::NoAnswer;
    };
    let info = local.info_replication().await;
    local.close().await;
    match info {
        Ok(info) if info.role == ReplicationRole::Master => Local::Master(Box::new(info)),
        Ok(_) => Local::NotMaster,
        Err(e) => {
            tracing::warn!(step = "successor", error = %e, "INFO replication failed");
            Local::NoAnswer
        }
    }
}

/// Before the handover, while the fencer still guards this master: when every other data pod
/// is leaving too (every pod of the cluster deleted at once), keep serving writes until a
/// replica whose pod stays — a replacement the StatefulSet created under an old name — has
/// copied this master, its pod is Ready and, with Sentinel, a Sentinel would promote it; at most
/// `settings.successor_wait`, and only while replacements are being created. Handing over to a
/// leaving replica instead pauses writes and promotes a server that is about to stop (issue
/// 15's every-pod-deleted row: 8–18 s unwritable).
pub async fn await_successor(node: &Node, settings: &HandoverSettings) -> SuccessorWait {
    let started = Instant::now();
    if !matches!(local_role(node).await, Local::Master(_)) {
        return SuccessorWait::NotNeeded;
    }
    let mut peers = Vec::new();
    let mut states = Vec::new();
    for peer in node.topology.peers_and_seen_replicas().await {
        let Some(pod) = node.topology.pod_of(&peer) else {
            return SuccessorWait::NotNeeded;
        };
        states.push(pod_state(node, &pod).await);
        peers.push(pod);
    }
    // The peers' pods as read a moment ago, then this master's online replicas now: when every
    // pod is deleted at once the DELETEs land one by one, and a peer seen staying at SIGTERM may
    // be leaving by the time the handover would pick it (measured: 10 s of paused writes while
    // Sentinel promoted a replica that was itself going); or the replicas are gone already and
    // their replacements, staying, have not copied this master yet (ADR 0051).
    if !decide::awaits_successor(&states)
        && (peers.is_empty() || !no_online_replica_stays(node).await)
    {
        return SuccessorWait::NotNeeded;
    }
    tracing::info!(
        step = "successor",
        peers = ?peers,
        limit_ms = ms(settings.successor_wait),
        "every other data pod is leaving: serving writes until a replacement has copied this master"
    );
    let mut missing_since: Vec<Option<Instant>> = states
        .iter()
        .map(|state| (*state == PeerPod::Gone).then(Instant::now))
        .collect();
    loop {
        match local_role(node).await {
            Local::NotMaster => {
                tracing::info!(step = "successor", "no longer master; nothing to wait for");
                return SuccessorWait::NotNeeded;
            }
            Local::Master(info) => {
                let picked = decide::successors(&candidates(node, &info).await);
                // A Ready pod: `-rw` routes to it as soon as it is labelled master.
                let ready = match &node.topology.monitor {
                    Some(name) if !picked.ready.is_empty() => {
                        sentinel_would_promote(node, name, &picked.eligible).await
                    }
                    _ => !picked.ready.is_empty(),
                };
                if ready && let Some(successor) = first_following(node, &picked.ready).await {
                    let waited = started.elapsed();
                    tracing::info!(step = "successor", %successor, waited_ms = ms(waited), "a replica that stays is online and can be promoted");
                    return SuccessorWait::Found { successor, waited };
                }
            }
            Local::NoAnswer => {}
        }
        for ((pod, since), state) in peers
            .iter()
            .zip(missing_since.iter_mut())
            .zip(states.iter_mut())
        {
            *state = pod_state(node, pod).await;
            *since = match state {
                PeerPod::Gone => since.or_else(|| Some(Instant::now())),
                _ => None,
            };
        }
        let missing_for: Vec<Option<Duration>> = missing_since
            .iter()
            .map(|since| since.map(|since| since.elapsed()))
            .collect();
        let waited = started.elapsed();
        if decide::no_replacement_coming(&missing_for, &states) {
            tracing::info!(
                step = "successor",
                waited_ms = ms(waited),
                "no replacement pod is being created (the cluster is being deleted); handing over to what there is"
            );
            return SuccessorWait::NoReplacement { waited };
        }
        if waited >= settings.successor_wait {
            tracing::warn!(
                step = "successor",
                waited_ms = ms(waited),
                "no replica that stays came online in time; handing over to what there is"
            );
            return SuccessorWait::TimedOut { waited };
        }
        tokio::time::sleep(settings.successor_poll).await;
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Whether the handover may promote a replica whose pod is leaving when no other is online.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToLeaving {
    /// No: it ends with [`HandoverOutcome::NoReplicaThatStays`], nothing paused, and the drain
    /// waits for a replica that stays.
    WaitForOneThatStays,
    /// Yes: the wait for one that stays is over (timed out, or no replacement is coming).
    Allowed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoverOutcome {
    /// This server is not the master: nothing to hand over.
    NotMaster,
    /// Peers exist but no online replica's pod stays — every one is leaving, or none is online
    /// yet ([`ToLeaving::WaitForOneThatStays`]): nothing was paused or handed over.
    NoReplicaThatStays,
    /// A master without an online replica: nobody to hand over to.
    NoReplica,
    HandedOver {
        new_master: Endpoint,
        /// From `CLIENT PAUSE` to `CLIENT UNPAUSE`: the longest a write waited.
        write_pause: Duration,
    },
}

/// Hand the master role over if this server is the master.
pub async fn handover(
    node: &Node,
    settings: &HandoverSettings,
    to_leaving: ToLeaving,
) -> Result<HandoverOutcome> {
    let local = node.local().await?;
    // A replica whose pod is leaving is promoted only if no other is online.
    let picked = match local.info_replication().await {
        Ok(info) => decide::successors(&candidates(node, &info).await),
        Err(e) => {
            tracing::warn!(error = %e, "INFO replication failed; every online replica may be promoted");
            decide::Successors::default()
        }
    };
    if picked.none_stays()
        && to_leaving == ToLeaving::WaitForOneThatStays
        && !node.topology.peers_and_seen_replicas().await.is_empty()
    {
        tracing::info!(step = "check", leaving = ?picked.leaving, "no online replica stays: not handing over yet");
        local.close().await;
        return Ok(HandoverOutcome::NoReplicaThatStays);
    }
    if !picked.leaving.is_empty() {
        tracing::info!(step = "check", leaving = ?picked.leaving, eligible = ?picked.eligible, "replicas whose pods are leaving are not promoted while another is online");
    }
    let promoter = match node.topology.monitor.clone() {
        Some(name) => {
            if let Some(named) = node.sentinel_master().await
                && named != *node.me()
            {
                tracing::info!(step = "check", sentinel_master = %named, "Sentinel names another master; nothing to hand over");
                local.close().await;
                return Ok(HandoverOutcome::NotMaster);
            }
            let sentinels = node.topology.sentinels().await;
            Promoter::Sentinel {
                name,
                sentinels,
                // The data pod is not told `spec.sentinel.replicas` (ADR 0014): the electorate
                // is the Sentinels discovered and the peer counts they report.
                configured: 0,
                // Not to a replica that is leaving too (a scale-down's switchover is the
                // operator's, before it removes pods).
                never_promote: picked.never_promote(),
            }
        }
        None => Promoter::Direct {
            target: picked.direct_target(),
        },
    };
    let shared = switchover::Settings {
        pause: settings.pause,
        poll: settings.poll,
        ..switchover::Settings::default()
    };
    let result = match (&promoter, &node.lease) {
        // Without Sentinel the successor gets the master Lease before it is promoted (ADR 0022).
        (Promoter::Direct { .. }, Some(lease)) => {
            let dial = LeaseMovingDial {
                node,
                lease: lease.as_ref(),
            };
            switchover::switchover(&dial, &local, node.me(), &promoter, &shared).await
        }
        _ => switchover::switchover(&node.dialer, &local, node.me(), &promoter, &shared).await,
    };
    local.close().await;
    let report = match result {
        Ok(Outcome::NotMaster) => return Ok(HandoverOutcome::NotMaster),
        Ok(Outcome::NoReplica) => return Ok(HandoverOutcome::NoReplica),
        Ok(Outcome::HandedOver(report)) => report,
        Err(vko_valkey::Error::Switchover { step, detail }) => {
            return Err(SidecarError::Handover { step, detail });
        }
        Err(source) => {
            return Err(SidecarError::Valkey {
                what: "switchover of the local server".into(),
                source,
            });
        }
    };
    let new_master = report.new_master;
    // A restart of this server must come back as the new master's replica (ADR 0005).
    if let Some(role) = decide::file_role(
        &decide::LiveRole::ReplicaOf(new_master.clone()),
        false,
        node.me().port,
    ) && let Err(e) = node.keep_role_line(&role)
    {
        tracing::error!(error = %e, "could not rewrite the effective config");
    }
    if let Err(e) = node
        .pods
        .set_role_label(&node.my_pod, InstanceRole::Replica)
        .await
    {
        tracing::warn!(error = %e, "could not label this pod replica");
    }
    if !node.topology.sentinel_enabled() {
        // The operator adopts the promoted pod as its recorded master (ADR 0005).
        match node.topology.pod_of(&new_master) {
            Some(pod) => {
                if let Err(e) = node.pods.set_role_label(&pod, InstanceRole::Master).await {
                    tracing::warn!(pod, error = %e, "could not label the promoted pod master");
                }
            }
            None => {
                tracing::warn!(target = %new_master, "promoted replica is not one of this cluster's pods")
            }
        }
    }
    Ok(HandoverOutcome::HandedOver {
        new_master,
        write_pause: report.write_pause,
    })
}
