//! `vko-sidecar run`: the per-pod loop (labels, the effective config, leaving the hold), the
//! health server with `/drain`, and the handover on SIGTERM.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::sync::OnceCell;
use vko_authority::HOLD_HOST;
use vko_authority::{InstanceRole, SentinelWord};
use vko_valkey::ValkeyClient;
use vko_valkey::parse::ReplicationRole;

use crate::decide::{self, Authority, HoldExit, LiveRole};
use crate::error::{Result, SidecarError};
use crate::fence::{FenceSettings, FenceState, fence_loop, lease_fence_loop};
use crate::handover::{
    Closed, HandoverOutcome, HandoverSettings, SuccessorWait, ToLeaving, await_successor,
    close_to_promotion, handover,
};

/// How many times a stopping master tries to hand over (ADR 0048).
const HANDOVER_ATTEMPTS: u32 = 3;

/// No new handover attempt starts this long after the drain began: one more (its pause 20 s)
/// still ends within the pod's 75 s grace period.
const HANDOVER_RETRY_BEFORE: Duration = Duration::from_secs(45);
use crate::node::Node;
use crate::pod_api::PodPresence;
use crate::topology::{Endpoint, PeerEvidence, probe_all, report_of};

/// How often the loop looks at the local server.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// While in the hold, peers and the authority are asked at most this often.
const HOLD_RECHECK: Duration = Duration::from_secs(2);
/// `SENTINEL FAILOVER` requests out of the hold are repeated at most this often (a failover
/// takes about a second; Sentinel refuses a second one while one runs).
const FAILOVER_REQUEST_INTERVAL: Duration = Duration::from_secs(15);
/// A replica compares its upstream with Sentinel's master at most this often; it re-points only
/// when two checks in a row see the same mismatch (Sentinel reconfigures the replicas it knows
/// itself within a second of a failover: this must not race it).
const REPLICA_RECHECK: Duration = Duration::from_secs(3);
/// ADR 0050: the relay source's `CLIENT PAUSE WRITE`, renewed every pass while the held master
/// copies from it; if this sidecar stops, the pause lapses after this long (the source's own
/// fencer still pauses a master the Sentinels do not name).
const RELAY_PAUSE: Duration = Duration::from_secs(30);

/// What one pass of the loop saw and did (for logs and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub run_id: String,
    pub live: LiveRole,
    pub label: InstanceRole,
    /// The hold decision, when the server was in the hold and it was evaluated.
    pub hold_exit: Option<HoldExit>,
}

/// How often the loop reads its pod's role label back.
const LABEL_RECHECK: Duration = Duration::from_secs(10);

/// The loop's memory between passes.
pub struct Keeper {
    node: Arc<Node>,
    local: Option<ValkeyClient>,
    last_run_id: Option<String>,
    last_label: Option<InstanceRole>,
    /// When the pod's label was last read back (see [`LABEL_RECHECK`]).
    last_label_check: Option<Instant>,
    last_hold_check: Option<Instant>,
    last_failover_request: Option<Instant>,
    last_wait_reason: Option<&'static str>,
    last_replica_check: Option<Instant>,
    /// The master Sentinel named at the last replica check when it was not this replica's
    /// upstream.
    replica_mismatch: Option<Endpoint>,
    /// The fencer's state (ADR 0019): a fenced master is labelled replica and annotated.
    fence: Arc<FenceState>,
    /// The `vko.gtrfc.com/fenced` annotation last written (`Some(None)`: written absent).
    last_fence_annotation: Option<Option<String>>,
    /// ADR 0050: the peer this held master copies its data back from, while it does.
    relay: Option<Endpoint>,
}

impl Keeper {
    pub fn new(node: Arc<Node>) -> Keeper {
        Keeper::with_fence(node, Arc::new(FenceState::default()))
    }

    pub fn with_fence(node: Arc<Node>, fence: Arc<FenceState>) -> Keeper {
        Keeper {
            node,
            local: None,
            last_run_id: None,
            last_label: None,
            last_label_check: None,
            last_hold_check: None,
            last_failover_request: None,
            last_wait_reason: None,
            last_replica_check: None,
            replica_mismatch: None,
            fence,
            last_fence_annotation: None,
            relay: None,
        }
    }

    /// One pass. An error means the local server could not be asked; the next pass reconnects.
    pub async fn tick(&mut self) -> Result<Tick> {
        let had_connection = self.local.is_some();
        let mut result = self.tick_inner().await;
        if result.is_err() && had_connection {
            // The kept connection may belong to a server process that is gone (a restart):
            // try once more on a fresh one before reporting.
            self.local = None;
            result = self.tick_inner().await;
        }
        if result.is_err() {
            self.local = None;
        }
        result
    }

    async fn tick_inner(&mut self) -> Result<Tick> {
        let node = self.node.clone();
        if self.local.is_none() {
            self.local = Some(node.local().await?);
        }
        let Some(local) = self.local.as_ref() else {
            return Err(SidecarError::Config("no local connection".into()));
        };
        let run_id = local
            .info_server()
            .await
            .map_err(SidecarError::valkey("INFO server on the local server"))?
            .run_id;
        let report = report_of(local, node.me()).await?;
        node.topology.remember_replicas(&report.replicas);
        let restarted = self.last_run_id.as_deref() != Some(run_id.as_str());
        if restarted {
            tracing::info!(run_id, role = ?report.role, "local valkey-server (re)started");
            self.last_run_id = Some(run_id.clone());
            self.last_hold_check = None;
        }
        let mut live = decide::live_role(&report);
        let standalone = node.standalone()?;

        let mut hold_exit = None;
        let due = self
            .last_hold_check
            .is_none_or(|t| t.elapsed() >= HOLD_RECHECK);
        if live == LiveRole::Hold && due {
            self.last_hold_check = Some(Instant::now());
            let (exit, peers) = self.leave_hold(standalone).await?;
            live = self.act_on_hold_exit(&exit, &peers).await?.unwrap_or(live);
            hold_exit = Some(exit);
        }
        if !matches!(&live, LiveRole::ReplicaOf(up) if self.relay.as_ref() == Some(up)) {
            self.relay = None;
        }

        // Without Sentinel a master is labelled master only while it holds the Lease (ADR 0022).
        let lease_mode = node.lease.is_some() && !node.topology.sentinel_enabled() && !standalone;
        if let LiveRole::ReplicaOf(upstream) = &live
            && self.relay.as_ref() == Some(upstream)
        {
            let source = upstream.clone();
            live = self.relay_step(&source).await?.unwrap_or(live);
        } else if let LiveRole::ReplicaOf(upstream) = &live
            && (node.topology.sentinel_enabled() || lease_mode)
            && self
                .last_replica_check
                .is_none_or(|t| t.elapsed() >= REPLICA_RECHECK)
        {
            self.last_replica_check = Some(Instant::now());
            if let Some(master) = self.check_upstream(upstream).await? {
                live = LiveRole::ReplicaOf(master);
            }
        } else if !matches!(live, LiveRole::ReplicaOf(_)) {
            self.replica_mismatch = None;
        }

        let sentinel = if !node.topology.sentinel_enabled() {
            SentinelWord::NoSentinel
        } else if live == LiveRole::Master {
            node.sentinel_word().await
        } else {
            // Not asked: a server that is not master is labelled replica whatever they say.
            SentinelWord::NoMajority
        };
        // A fenced master serves no write: it must not be where -rw sends them (ADR 0019).
        let fenced = self.fence.is_fenced();
        let label =
            if fenced || (lease_mode && live == LiveRole::Master && !self.fence.holds_lease()) {
                InstanceRole::Replica
            } else {
                decide::label_for(&live, node.me(), sentinel.as_ref(), self.last_label)
            };
        self.keep_fence_annotation().await;
        // What this loop wrote is not necessarily what the pod carries: anyone with access to the
        // pod can change or drop the label, and the -rw / -r Services would follow silently.
        if self.last_label == Some(label)
            && self
                .last_label_check
                .is_none_or(|at| at.elapsed() >= LABEL_RECHECK)
        {
            self.last_label_check = Some(Instant::now());
            match node.pods.role_label(&node.my_pod).await {
                Ok(found) if found.as_deref() != Some(label.as_str()) => {
                    tracing::warn!(
                        found = ?found,
                        label = label.as_str(),
                        "the pod's instanceRole label was changed by someone else; restoring it"
                    );
                    self.last_label = None;
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "could not read the pod label back"),
            }
        }
        if self.last_label != Some(label) {
            let proven = matches!(
                sentinel.as_ref(),
                SentinelWord::Names(m) | SentinelWord::Promotes(m) if m == node.me()
            );
            if label == InstanceRole::Master && (proven || lease_mode) {
                self.clear_other_master_labels().await;
            }
            match node.pods.set_role_label(&node.my_pod, label).await {
                Ok(()) => {
                    tracing::info!(label = label.as_str(), live = ?live, "pod label instanceRole set");
                    self.last_label = Some(label);
                }
                Err(e) => tracing::warn!(error = %e, "could not patch the pod label; retrying"),
            }
        }
        if let Some(role) = decide::file_role(&live, standalone, node.me().port) {
            node.keep_role_line(&role)?;
        }
        Ok(Tick {
            run_id,
            live,
            label,
            hold_exit,
        })
    }

    /// A master the Sentinel majority names takes the master label only after every other data
    /// pod lost it: a master cut off from the API (a partition) cannot remove its own label, and
    /// `-rw` must never have two endpoints (issue 14 item 3).
    async fn clear_other_master_labels(&self) {
        let node = &self.node;
        for peer in node.topology.peers().await {
            let Some(pod) = node.topology.pod_of(&peer) else {
                continue;
            };
            match node.pods.role_label(&pod).await {
                Ok(Some(found)) if found == InstanceRole::Master.as_str() => {
                    match node.pods.set_role_label(&pod, InstanceRole::Replica).await {
                        Ok(()) => tracing::warn!(
                            pod,
                            "removed the master label of a pod the authority does not name"
                        ),
                        Err(e) => {
                            tracing::warn!(pod, error = %e, "could not relabel a stale master")
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(pod, error = %e, "could not read a peer's label"),
            }
        }
    }

    /// Keeps `vko.gtrfc.com/fenced` true to the fence (the operator's `MasterFenced`).
    async fn keep_fence_annotation(&mut self) {
        let wanted = self.fence.mark().map(|m| m.annotation());
        if self.last_fence_annotation.as_ref() == Some(&wanted) {
            return;
        }
        let node = &self.node;
        match node
            .pods
            .set_fenced_annotation(&node.my_pod, wanted.as_deref())
            .await
        {
            Ok(()) => {
                tracing::info!(annotation = ?wanted, "pod annotation vko.gtrfc.com/fenced set");
                self.last_fence_annotation = Some(wanted);
            }
            Err(e) => tracing::warn!(error = %e, "could not patch the fenced annotation; retrying"),
        }
    }

    /// Re-points this replica at the master Sentinel names when it follows another server
    /// (see [`decide::repoint_replica`]); returns the new upstream when it did.
    /// A replica whose upstream is not the master the authority names — the Sentinel majority,
    /// or without Sentinel the master Lease's holder — re-points at it once it was seen twice
    /// and answers master: a replica that joined during a switchover can be left following the
    /// old master, chained behind it, and nothing else would move it.
    async fn check_upstream(&mut self, upstream: &Endpoint) -> Result<Option<Endpoint>> {
        let node = self.node.clone();
        let named = if node.topology.sentinel_enabled() {
            node.sentinel_master().await
        } else {
            self.fence
                .other_lease_holder()
                .and_then(|holder| node.topology.endpoint_of_pod(&holder))
        };
        if named.as_ref() == Some(node.me()) && node.topology.sentinel_enabled() {
            // Named master, yet following a master: a relay (ADR 0050) this sidecar began before
            // it restarted. It finishes it; nothing else would.
            let evidence = probe_all(&node.dialer, std::slice::from_ref(upstream)).await;
            if matches!(evidence.first(), Some(PeerEvidence::Answered(r)) if r.is_master()) {
                tracing::warn!(%upstream, "the Sentinels name this pod, which follows another master: taking the relay up");
                self.relay = Some(upstream.clone());
            }
            self.replica_mismatch = None;
            return Ok(None);
        }
        let Some(named) = named.filter(|m| m != upstream && m != node.me()) else {
            self.replica_mismatch = None;
            return Ok(None);
        };
        if self.replica_mismatch.as_ref() != Some(&named) {
            tracing::info!(%upstream, authority_master = %named, "upstream is not the master the authority names; checking again before re-pointing");
            self.replica_mismatch = Some(named);
            return Ok(None);
        }
        let evidence = probe_all(&node.dialer, std::slice::from_ref(&named)).await;
        let answers_master = evidence.iter().any(
            |e| matches!(e, PeerEvidence::Answered(r) if r.endpoint == named && r.is_master()),
        );
        let Some(target) =
            decide::repoint_replica(node.me(), upstream, Some(&named), answers_master)
        else {
            return Ok(None);
        };
        let Some(local) = self.local.as_ref() else {
            return Ok(None);
        };
        local
            .replicaof(&target.host, target.port)
            .await
            .map_err(SidecarError::valkey(format!("REPLICAOF {target}")))?;
        tracing::info!(%upstream, new_upstream = %target, "re-pointed at the master the authority names (nothing had reconfigured this replica)");
        self.replica_mismatch = None;
        Ok(Some(target))
    }

    /// The hold decision and the peers' evidence it was taken on.
    async fn leave_hold(&mut self, standalone: bool) -> Result<(HoldExit, Vec<PeerEvidence>)> {
        let node = &self.node;
        let authority = if standalone {
            Authority::Standalone
        } else {
            node.authority().await?
        };
        let mut peers = node.topology.peers().await;
        if let Authority::Names(master) = &authority
            && master != node.me()
            && !peers.contains(master)
        {
            peers.push(master.clone());
        }
        let evidence: Vec<PeerEvidence> = probe_all(&node.dialer, &peers).await;
        let exit = decide::leave_hold(
            node.me(),
            &authority,
            &evidence,
            node.topology.sentinel_enabled(),
        );
        match &exit {
            HoldExit::Wait(reason) => {
                if self.last_wait_reason != Some(reason) {
                    tracing::info!(?authority, reason, "staying in the hold");
                    self.last_wait_reason = Some(reason);
                }
            }
            other => {
                self.last_wait_reason = None;
                tracing::info!(?authority, decision = ?other, "leaving the hold");
            }
        }
        Ok((exit, evidence))
    }

    /// Carry out a hold decision; returns the new live role if it changed.
    async fn act_on_hold_exit(
        &mut self,
        exit: &HoldExit,
        peers: &[PeerEvidence],
    ) -> Result<Option<LiveRole>> {
        let node = self.node.clone();
        let Some(local) = self.local.as_ref() else {
            return Ok(None);
        };
        match exit {
            HoldExit::ReplicaOf(master) => {
                local
                    .replicaof(&master.host, master.port)
                    .await
                    .map_err(SidecarError::valkey(format!("REPLICAOF {master}")))?;
                Ok(Some(LiveRole::ReplicaOf(master.clone())))
            }
            HoldExit::PromoteSelf => {
                local
                    .replicaof_no_one()
                    .await
                    .map_err(SidecarError::valkey("REPLICAOF NO ONE"))?;
                Ok(Some(LiveRole::Master))
            }
            HoldExit::RequestFailover => {
                let due = self
                    .last_failover_request
                    .is_none_or(|t| t.elapsed() >= FAILOVER_REQUEST_INTERVAL);
                let (true, Some(name)) = (due, node.topology.monitor.as_ref()) else {
                    return Ok(None);
                };
                self.last_failover_request = Some(Instant::now());
                let answer = request_failover(&node, name).await;
                if answer.accepted
                    || !decide::sentinel_cannot_promote(answer.no_good_replica, answer.asked)
                {
                    return Ok(None);
                }
                let Some(source) = decide::relay_source(peers) else {
                    tracing::warn!(
                        "no Sentinel can promote a replica and no peer can be copied from yet (one is silent or serves as master); staying in the hold"
                    );
                    return Ok(None);
                };
                self.start_relay(&source).await.map(Some)
            }
            HoldExit::Wait(_) => Ok(None),
        }
    }

    /// ADR 0050: no Sentinel can fail this held master over (they know no replica: they learn
    /// replicas from its INFO, and a server in the hold lists none), so it copies the data back
    /// itself: the most caught-up peer is paused and made master, and this server replicates
    /// from it. [`Keeper::relay_step`] finishes once the copy is whole.
    async fn start_relay(&mut self, source: &Endpoint) -> Result<LiveRole> {
        let node = self.node.clone();
        let peer = node
            .dialer
            .valkey(source)
            .await
            .map_err(SidecarError::valkey(format!("connect to {source}")))?;
        let promoted = async {
            peer.client_pause_write(RELAY_PAUSE)
                .await
                .map_err(SidecarError::valkey(format!(
                    "CLIENT PAUSE WRITE on {source}"
                )))?;
            peer.replicaof_no_one()
                .await
                .map_err(SidecarError::valkey(format!(
                    "REPLICAOF NO ONE on {source}"
                )))
        }
        .await;
        peer.close().await;
        promoted?;
        let Some(local) = self.local.as_ref() else {
            return Err(SidecarError::Config("no local connection".into()));
        };
        local
            .replicaof(&source.host, source.port)
            .await
            .map_err(SidecarError::valkey(format!("REPLICAOF {source}")))?;
        tracing::warn!(%source, "no Sentinel can promote a replica (none known): copying the data back from the most caught-up peer, paused and made master for the copy");
        self.relay = Some(source.clone());
        Ok(LiveRole::ReplicaOf(source.clone()))
    }

    /// One pass of the relay: keep the source paused; once this server has everything it
    /// acknowledged and the Sentinel majority still names this pod, serve as master and make the
    /// source follow. Returns the new live role when it changed.
    async fn relay_step(&mut self, source: &Endpoint) -> Result<Option<LiveRole>> {
        let node = self.node.clone();
        let peer = match node.dialer.valkey(source).await {
            Ok(peer) => peer,
            Err(e) => {
                tracing::info!(%source, error = %e, "relay source not reachable; waiting");
                return Ok(None);
            }
        };
        let step = self.relay_on(&peer, source).await;
        peer.close().await;
        step
    }

    async fn relay_on(
        &mut self,
        peer: &ValkeyClient,
        source: &Endpoint,
    ) -> Result<Option<LiveRole>> {
        let node = self.node.clone();
        let me = node.me();
        let Some(local) = self.local.as_ref() else {
            return Ok(None);
        };
        let theirs = peer
            .info_replication()
            .await
            .map_err(SidecarError::valkey(format!(
                "INFO replication on {source}"
            )))?;
        if theirs.role != ReplicationRole::Master {
            // Someone moved the source (a failover, the operator): back to the hold, where the
            // usual rules decide again.
            local
                .replicaof(HOLD_HOST, me.port)
                .await
                .map_err(SidecarError::valkey("REPLICAOF the hold"))?;
            tracing::warn!(%source, "the relay source no longer serves as master; back in the hold");
            self.relay = None;
            return Ok(Some(LiveRole::Hold));
        }
        peer.client_pause_write(RELAY_PAUSE)
            .await
            .map_err(SidecarError::valkey(format!(
                "CLIENT PAUSE WRITE on {source}"
            )))?;
        let mine = local
            .info_replication()
            .await
            .map_err(SidecarError::valkey("INFO replication on the local server"))?;
        let applied = mine.applied_from(&source.host, source.port);
        if !decide::relay_copied(applied, theirs.master_repl_offset) {
            return Ok(None);
        }
        match node.sentinel_word().await {
            SentinelWord::Names(named) if named == *me => {}
            word => {
                tracing::info!(
                    ?word,
                    "relay copied, but the Sentinel majority does not name this pod now; waiting"
                );
                return Ok(None);
            }
        }
        local
            .replicaof_no_one()
            .await
            .map_err(SidecarError::valkey("REPLICAOF NO ONE"))?;
        self.relay = None;
        let follows = async {
            peer.replicaof(&me.host, me.port).await?;
            peer.client_unpause().await
        }
        .await;
        match follows {
            Ok(()) => {
                tracing::warn!(%source, offset = ?applied, "relay done: serving the copied data as master; the source follows this pod")
            }
            // Still paused (its own fencer pauses a master the Sentinels do not name); the
            // operator demotes a master whose writes the named master holds (vko-roll).
            Err(e) => {
                tracing::warn!(%source, error = %e, "relay done, but the source could not be made to follow this pod")
            }
        }
        Ok(Some(LiveRole::Master))
    }
}

/// How the Sentinels answered a failover request.
#[derive(Debug, Default)]
struct FailoverAnswer {
    /// One Sentinel started the failover.
    accepted: bool,
    /// The Sentinels there are (asked, answering or not).
    asked: usize,
    /// Those that refused for want of a replica they could promote (`NOGOODSLAVE`).
    no_good_replica: usize,
}

/// `SENTINEL FAILOVER` on the first Sentinel that accepts.
async fn request_failover(node: &Node, name: &str) -> FailoverAnswer {
    let sentinels = node.topology.sentinels().await;
    let mut answer = FailoverAnswer {
        asked: sentinels.len(),
        ..FailoverAnswer::default()
    };
    for sentinel in sentinels {
        let result = node
            .on_sentinel(&sentinel, "SENTINEL FAILOVER", async |client| {
                client.failover(name).await
            })
            .await;
        match result {
            Ok(()) => {
                tracing::info!(%sentinel, "SENTINEL FAILOVER requested: this pod restarted in the hold while replicas hold data");
                answer.accepted = true;
                return answer;
            }
            Err(e) => {
                if let SidecarError::Valkey {
                    source: vko_valkey::Error::NoGoodReplica(_),
                    ..
                } = &e
                {
                    answer.no_good_replica += 1;
                }
                tracing::warn!(%sentinel, error = %e, "SENTINEL FAILOVER refused");
            }
        }
    }
    answer
}

/// What `/drain` and SIGTERM report.
#[derive(Debug, Clone)]
pub struct DrainReport {
    pub ok: bool,
    pub message: String,
}

/// State shared by the loop, the health server and the signal handler.
pub struct Shared {
    pub node: Arc<Node>,
    pub settings: HandoverSettings,
    pub fence_settings: FenceSettings,
    /// Shared with the fencer: a drain stops it lifting pauses.
    pub fence: Arc<FenceState>,
    ready: AtomicBool,
    terminating: AtomicBool,
    drain: OnceCell<DrainReport>,
}

impl Shared {
    pub fn new(node: Arc<Node>, settings: HandoverSettings) -> Arc<Shared> {
        Shared::with_fence_settings(node, settings, FenceSettings::default())
    }

    pub fn with_fence_settings(
        node: Arc<Node>,
        settings: HandoverSettings,
        fence_settings: FenceSettings,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            node,
            settings,
            fence_settings,
            fence: Arc::new(FenceState::default()),
            ready: AtomicBool::new(false),
            terminating: AtomicBool::new(false),
            drain: OnceCell::new(),
        })
    }

    pub fn mark_terminating(&self) {
        self.terminating.store(true, Ordering::SeqCst);
    }

    /// The handover, run once however many times SIGTERM and `/drain` ask for it.
    pub async fn drain(&self) -> DrainReport {
        self.drain
            .get_or_init(|| async {
                let started = Instant::now();
                if self.node.topology.sentinel_enabled() {
                    match close_to_promotion(&self.node).await {
                        Ok(Closed::Replica) => {
                            let report = DrainReport {
                                ok: true,
                                message: "replica: every command paused, so no failover promotes \
                                          it while it stops"
                                    .into(),
                            };
                            tracing::info!(message = report.message, "drain finished");
                            return report;
                        }
                        Ok(Closed::Master) => {}
                        // Not answered: nothing runs a promotion on it either; as before.
                        Err(e) => {
                            tracing::warn!(error = %e, "could not pause the local server's commands")
                        }
                    }
                }
                // The fencer still guards this master while it waits (it stops lifting pauses
                // once the drain begins).
                let first_wait = if self.fence.is_fenced() {
                    SuccessorWait::NotNeeded
                } else {
                    await_successor(&self.node, &self.settings).await
                };
                if self.fence.begin_drain().await {
                    let report = DrainReport {
                        ok: true,
                        message: "fenced: this master cannot prove its authority; nothing handed \
                                  over, writes stay paused"
                            .into(),
                    };
                    tracing::warn!(message = report.message, "drain finished");
                    return report;
                }
                // A replica seen staying a moment ago may be leaving by now (every pod deleted
                // at once: the DELETEs land one by one), and a handover can fail (a Sentinel's
                // failover picked a replica that left): the master looks for a replica that
                // stays and hands over again, within the grace period.
                let mut to_leaving = matches!(
                    first_wait,
                    SuccessorWait::TimedOut { .. } | SuccessorWait::NoReplacement { .. }
                );
                let mut attempt = 1;
                let outcome = loop {
                    let leaving = if to_leaving {
                        ToLeaving::Allowed
                    } else {
                        ToLeaving::WaitForOneThatStays
                    };
                    let outcome = handover(&self.node, &self.settings, leaving).await;
                    let why = match &outcome {
                        Ok(HandoverOutcome::NoReplicaThatStays) => "no online replica stays".into(),
                        Err(e) => e.to_string(),
                        Ok(_) => break outcome,
                    };
                    let left = HANDOVER_RETRY_BEFORE.saturating_sub(started.elapsed());
                    if attempt >= HANDOVER_ATTEMPTS || left.is_zero() {
                        if matches!(outcome, Ok(HandoverOutcome::NoReplicaThatStays)) {
                            // Out of time: a leaving replica rather than nobody.
                            break handover(&self.node, &self.settings, ToLeaving::Allowed).await;
                        }
                        break outcome;
                    }
                    attempt += 1;
                    let settings = HandoverSettings {
                        successor_wait: self.settings.successor_wait.min(left),
                        ..self.settings.clone()
                    };
                    let wait = await_successor(&self.node, &settings).await;
                    tracing::warn!(why, attempt, ?wait, "no handover yet; handing over again");
                    to_leaving = to_leaving
                        || matches!(
                            wait,
                            SuccessorWait::TimedOut { .. } | SuccessorWait::NoReplacement { .. }
                        );
                };
                let report = match outcome {
                    Ok(HandoverOutcome::HandedOver {
                        new_master,
                        write_pause,
                    }) => DrainReport {
                        ok: true,
                        message: format!(
                            "handed over to {new_master}; writes paused {} ms",
                            write_pause.as_millis()
                        ),
                    },
                    Ok(HandoverOutcome::NotMaster) => DrainReport {
                        ok: true,
                        message: "not master; nothing to hand over".into(),
                    },
                    Ok(HandoverOutcome::NoReplicaThatStays) => DrainReport {
                        ok: false,
                        message: "no online replica stays and none that stays came online; \
                                  nothing handed over"
                            .into(),
                    },
                    Ok(HandoverOutcome::NoReplica) => DrainReport {
                        ok: true,
                        message: "master without an online replica; nothing to hand over to".into(),
                    },
                    Err(e) => DrainReport {
                        ok: false,
                        message: format!("{} ({})", e, e.reason()),
                    },
                };
                tracing::info!(
                    ok = report.ok,
                    message = report.message,
                    elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "drain finished"
                );
                report
            })
            .await
            .clone()
    }

    /// ADR 0004: `/drain` is reachable by every pod of the namespace, so it acts only once this
    /// pod is really going away: this process got SIGTERM, or the pod has a deletionTimestamp.
    async fn may_drain(&self) -> bool {
        if self.terminating.load(Ordering::SeqCst) {
            return true;
        }
        match self.node.pods.presence(&self.node.my_pod).await {
            // Refused: this pod's own Role or ServiceAccount is gone (its Valkey is being
            // deleted); SIGTERM decides below.
            Ok(PodPresence::Terminating | PodPresence::Gone) => return true,
            Ok(PodPresence::Running { .. }) => return false,
            Ok(PodPresence::Refused) => {
                tracing::warn!("the API refuses this pod's credentials; asking SIGTERM instead")
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot ask the API whether this pod is terminating")
            }
        }
        // API unreachable: the kubelet sends SIGTERM to this container right after starting the
        // valkey container's preStop hook, so wait a moment for it.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if self.terminating.load(Ordering::SeqCst) {
                return true;
            }
        }
        false
    }
}

async fn healthz() -> &'static str {
    "alive"
}

async fn readyz(State(shared): State<Arc<Shared>>) -> (StatusCode, &'static str) {
    if shared.ready.load(Ordering::SeqCst) {
        (StatusCode::OK, "ready")
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "local server not reachable",
        )
    }
}

async fn drain_handler(State(shared): State<Arc<Shared>>) -> (StatusCode, String) {
    if !shared.may_drain().await {
        tracing::warn!("/drain refused: this pod is not terminating");
        return (StatusCode::CONFLICT, "not terminating\n".into());
    }
    let report = shared.drain().await;
    let status = if report.ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (status, format!("{}\n", report.message))
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/drain", get(drain_handler))
        .with_state(shared)
}

/// The loop, forever.
pub async fn keep(shared: Arc<Shared>) {
    let mut keeper = Keeper::with_fence(shared.node.clone(), shared.fence.clone());
    let mut last_error: Option<String> = None;
    loop {
        match keeper.tick().await {
            Ok(_) => {
                shared.ready.store(true, Ordering::SeqCst);
                last_error = None;
            }
            Err(e) => {
                shared.ready.store(false, Ordering::SeqCst);
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %e, reason = e.reason(), "loop pass failed");
                    last_error = Some(text);
                }
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// `vko-sidecar run`: serve health and `/drain`, keep the pod true, and on SIGTERM hand the
/// master role over and exit.
/// A task the sidecar runs until it is told to stop.
type Task = (&'static str, tokio::task::JoinHandle<()>);

/// Waits for `stop`, or for the first of `tasks` to end. None of them ends by itself: one that
/// does (a panic in a build that unwinds, a return) is an error, so the sidecar exits and the
/// kubelet restarts it rather than it running on without, say, its fencer (a master whose fencer
/// is gone would acknowledge writes it can no longer prove it may take; ADR 0033).
async fn until_stopped(
    stop: impl std::future::Future<Output = ()>,
    tasks: &mut [Task],
) -> Result<()> {
    if tasks.is_empty() {
        stop.await;
        return Ok(());
    }
    let first_ended = futures::future::select_all(tasks.iter_mut().map(|(_, task)| task));
    tokio::select! {
        () = stop => Ok(()),
        (ended, index, _) = first_ended => Err(SidecarError::TaskEnded {
            task: tasks.get(index).map_or("unknown", |(task, _)| *task),
            detail: ended.err().map_or_else(|| "it returned".into(), |join| join.to_string()),
        }),
    }
}

pub async fn run(
    shared: Arc<Shared>,
    health_port: u16,
    password: Option<crate::password::PasswordWatch>,
    tls: Option<crate::tls_reload::TlsWatch>,
) -> Result<()> {
    let addr = SocketAddr::from(([0, 0, 0, 0], health_port));
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| SidecarError::Config(format!("bind health port {addr}: {e}")))?;
    tracing::info!(%addr, pod = shared.node.my_pod, me = %shared.node.me(), "sidecar running");
    let server = axum::serve(listener, router(shared.clone())).into_future();
    let mut tasks: Vec<Task> = vec![
        (
            "health server",
            tokio::spawn(async move {
                if let Err(error) = server.await {
                    tracing::error!(%error, "the health server failed");
                }
            }),
        ),
        ("label keeper", tokio::spawn(keep(shared.clone()))),
    ];
    if let Some(watch) = password {
        tasks.push((
            "password watch",
            tokio::spawn(crate::password::password_loop(shared.node.clone(), watch)),
        ));
    }
    if let Some(watch) = tls {
        tasks.push((
            "TLS watch",
            tokio::spawn(crate::tls_reload::tls_loop(shared.node.clone(), watch)),
        ));
    }
    if shared.node.topology.sentinel_enabled() {
        tasks.push((
            "fencer",
            tokio::spawn(fence_loop(
                shared.node.clone(),
                shared.fence.clone(),
                shared.fence_settings.clone(),
            )),
        ));
    } else if let Some(lease) = shared.node.lease.clone() {
        tasks.push((
            "lease fencer",
            tokio::spawn(lease_fence_loop(
                shared.node.clone(),
                shared.fence.clone(),
                shared.fence_settings.clone(),
                lease,
            )),
        ));
    }

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| SidecarError::Config(format!("SIGTERM handler: {e}")))?;
    let stop = async {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT"),
        }
    };
    until_stopped(stop, &mut tasks).await?;
    shared.mark_terminating();
    let report = shared.drain().await;
    // Let a `/drain` that is waiting for the same handover get its answer.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (_, task) in &tasks {
        task.abort();
    }
    tracing::info!(ok = report.ok, message = report.message, "sidecar exiting");
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn forever() -> tokio::task::JoinHandle<()> {
        tokio::spawn(std::future::pending())
    }

    #[tokio::test]
    async fn a_task_that_panics_ends_the_sidecar_naming_the_task() {
        let mut tasks = vec![
            ("label keeper", forever()),
            ("fencer", tokio::spawn(async { panic!("a fencer bug") })),
        ];
        let error = until_stopped(std::future::pending(), &mut tasks)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, SidecarError::TaskEnded { task: "fencer", detail } if detail.contains("a fencer bug")),
            "{error}"
        );
        assert_eq!(error.reason(), "TaskEnded");
    }

    #[tokio::test]
    async fn a_task_that_returns_ends_the_sidecar() {
        let mut tasks = vec![
            ("health server", tokio::spawn(async {})),
            ("label keeper", forever()),
        ];
        let error = until_stopped(std::future::pending(), &mut tasks)
            .await
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "the health server task ended: it returned"
        );
    }

    #[tokio::test]
    async fn the_stop_signal_ends_the_wait_while_every_task_runs() {
        let mut tasks = vec![("label keeper", forever()), ("fencer", forever())];
        until_stopped(async {}, &mut tasks).await.unwrap();
        assert!(tasks.iter().all(|(_, task)| !task.is_finished()));
        until_stopped(async {}, &mut []).await.unwrap();
    }
}
