//! The self-fencing loop of a master with Sentinel (ADR 0019): every [`FenceSettings::poll`]
//! it asks the local server whether it is master and every Sentinel whom they name; the decision
//! is `vko_authority::fence_action`. Fenced means `CLIENT PAUSE <pause> WRITE`, renewed every
//! round (Valkey keeps the later of two pause deadlines), so writes block instead of being
//! acknowledged; the pod's master label and the `vko.gtrfc.com/fenced` annotation follow in the
//! keeper's loop (`run.rs`) from [`FenceState::mark`].
//!
//! The fence and the preStop handover both pause the same server: they share
//! [`FenceState::begin_drain`]. Once a drain began the fencer never lifts a pause (the handover
//! owns it); a fence that was already up when the drain began stays up and is renewed, and the
//! handover is skipped (a master without authority has nothing to hand over).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use vko_authority::{
    FenceAction, FenceInput, FenceReason, HeldAnswer, LeaseSeen, UnfenceReason, fence_action,
    fence_deadline, lease_fence_action,
};
use vko_render::{DOWN_AFTER_MS, MASTER_REBOOT_DOWN_AFTER_MS};
use vko_valkey::ValkeyClient;
use vko_valkey::parse::RoleReply;

use crate::decide;
use crate::error::{Result, SidecarError};
use crate::lease_api::{HeldLease, LeaseApi, Written};
use crate::node::Node;
use crate::topology::{Endpoint, MasterReach, PeerEvidence, SentinelAnswer, ask_sentinels, probe};

/// F must stay below Sentinel's down-after: Sentinel starts a failover only after the master has
/// been unreachable that long, and the old master must have stopped acknowledging by then.
const _: () = assert!(
    vko_authority::DEFAULT_FENCE_AFTER.as_millis() < DOWN_AFTER_MS as u128
        && vko_authority::DEFAULT_FENCE_AFTER.as_millis() < MASTER_REBOOT_DOWN_AFTER_MS as u128
);

/// How the fencer runs.
#[derive(Debug, Clone)]
pub struct FenceSettings {
    /// F: a master whose authority was not proven for this long is fenced.
    pub fence_after: Duration,
    /// How often the Sentinels are asked.
    pub poll: Duration,
    /// The longest one ask of one Sentinel is waited for (each Sentinel call also has the
    /// dialer's own timeouts); a Sentinel that does not answer in time is asked again then.
    pub ask_timeout: Duration,
    /// The `CLIENT PAUSE` length, renewed every round while fenced: if this sidecar stops, the
    /// pause lapses after this long.
    pub pause: Duration,
}

impl Default for FenceSettings {
    fn default() -> Self {
        FenceSettings {
            fence_after: vko_authority::DEFAULT_FENCE_AFTER,
            poll: Duration::from_millis(250),
            // A TLS handshake on a busy 2-core node can take hundreds of milliseconds; each
            // Sentinel is asked on its own, so a slow one delays only its own answer.
            ask_timeout: Duration::from_secs(1),
            pause: Duration::from_secs(5),
        }
    }
}

/// The least time a round near its deadline still gives the Sentinel discovery.
const MIN_ASK: Duration = Duration::from_millis(100);
/// The local server answers ROLE / CLIENT PAUSE within this or is treated as not answering.
const LOCAL_TIMEOUT: Duration = Duration::from_millis(500);
/// A Sentinel's PING answered within this is the normal case, not worth a word in the fence log
/// (Sentinel PINGs every second; the reply takes well under a millisecond).
const UNANSWERED_PING_WORTH_NAMING: Duration = Duration::from_millis(500);

/// `fence_after` checked against Sentinel's down-after (a `--fence-after-ms` given at start).
pub fn check_fence_after(fence_after: Duration) -> Result<Duration> {
    let down_after =
        Duration::from_millis(u64::from(DOWN_AFTER_MS.min(MASTER_REBOOT_DOWN_AFTER_MS)));
    if fence_after.is_zero() || fence_after >= down_after {
        return Err(SidecarError::Config(format!(
            "fence-after {} ms must be above 0 and below Sentinel's down-after {} ms",
            fence_after.as_millis(),
            down_after.as_millis()
        )));
    }
    Ok(fence_after)
}

/// Why and since when this pod's server is fenced (the pod annotation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceMark {
    pub reason: FenceReason,
    pub since: SystemTime,
}

impl FenceMark {
    /// `vko.gtrfc.com/fenced`: `<reason> since <RFC 3339>`.
    pub fn annotation(&self) -> String {
        let since = k8s_openapi::jiff::Timestamp::try_from(self.since)
            .map(|t| {
                t.round(k8s_openapi::jiff::Unit::Second)
                    .unwrap_or(t)
                    .to_string()
            })
            .unwrap_or_else(|_| "unknown".into());
        format!("{} since {since}", self.reason.as_str())
    }
}

#[derive(Debug, Default)]
struct Gate {
    draining: bool,
    fenced: bool,
}

/// What the fencer, the keeper and the drain share.
#[derive(Debug, Default)]
pub struct FenceState {
    /// Held across every pause / unpause of the fencer and while a drain begins.
    gate: tokio::sync::Mutex<Gate>,
    /// `Some` while fenced; read by the keeper for the label and the annotation.
    mark: Mutex<Option<FenceMark>>,
    /// Without Sentinel: until when this pod holds the master Lease (its last renewal's start
    /// plus F, ADR 0022); the keeper labels a master `master` only before then. A deadline, not
    /// a flag: a server stopped for longer than F renews nothing and the fencer's rounds end
    /// early, so a flag would still say "held" when it answers again, before the next round.
    lease_held_until: Mutex<Option<Instant>>,
    /// Without Sentinel: the pod the master Lease names when the fencer last read it held by
    /// another pod (`None`: held by this pod, missing, or unreadable); a replica follows it.
    other_holder: Mutex<Option<String>>,
}

impl FenceState {
    pub fn mark(&self) -> Option<FenceMark> {
        self.mark.lock().ok().and_then(|m| m.clone())
    }

    pub fn is_fenced(&self) -> bool {
        self.mark().is_some()
    }

    /// Whether this pod holds the master Lease, renewed within F, and is not fenced.
    pub fn holds_lease(&self) -> bool {
        let until = self.lease_held_until.lock().ok().and_then(|until| *until);
        until.is_some_and(|until| Instant::now() < until) && !self.is_fenced()
    }

    /// The other pod the master Lease names, as last read (see `other_holder`).
    pub fn other_lease_holder(&self) -> Option<String> {
        self.other_holder.lock().ok().and_then(|h| h.clone())
    }

    fn set_other_lease_holder(&self, holder: Option<String>) {
        if let Ok(mut h) = self.other_holder.lock() {
            *h = holder;
        }
    }

    fn set_lease_held_until(&self, until: Option<Instant>) {
        if let Ok(mut held) = self.lease_held_until.lock() {
            *held = until;
        }
    }

    fn set_mark(&self, mark: Option<FenceMark>) {
        if let Ok(mut m) = self.mark.lock() {
            *m = mark;
        }
    }

    /// A drain begins: from now on the fencer lifts no pause. Returns whether the server was
    /// fenced at that moment (then the fence stays and the handover is skipped).
    pub async fn begin_drain(&self) -> bool {
        let mut gate = self.gate.lock().await;
        gate.draining = true;
        gate.fenced
    }
}

/// The fencer's memory between rounds.
struct Fencer {
    node: Arc<Node>,
    state: Arc<FenceState>,
    settings: FenceSettings,
    clock: Instant,
    local: Option<ValkeyClient>,
    last_proven: Option<Duration>,
    /// Each Sentinel asked on its own, its latest answer held (ADR 0040).
    askers: Askers,
    /// Logged once per change of what the Sentinels say.
    last_view: Option<String>,
    /// The local role seen by the last round that reached the server.
    was_master: Option<bool>,
    /// How many replicas the local server listed then (`ROLE`).
    local_replicas: usize,
    /// Without Sentinel: the master Lease as last read or written, and what it says.
    lease: Option<HeldLease>,
    lease_seen: LeaseSeen,
    rounds: u64,
}

/// The fencer, forever (only with Sentinel).
pub async fn fence_loop(node: Arc<Node>, state: Arc<FenceState>, settings: FenceSettings) {
    tracing::info!(
        fence_after_ms = settings.fence_after.as_millis() as u64,
        poll_ms = settings.poll.as_millis() as u64,
        "fencer running: a master the Sentinel majority does not name for fence-after pauses its writes"
    );
    let mut fencer = Fencer {
        node,
        state,
        settings,
        clock: Instant::now(),
        local: None,
        last_proven: None,
        askers: Askers::default(),
        last_view: None,
        was_master: None,
        local_replicas: 0,
        lease: None,
        lease_seen: LeaseSeen::Unknown {
            renew_started: None,
        },
        rounds: 0,
    };
    loop {
        fencer.round().await;
        tokio::time::sleep(fencer.until_next_round()).await;
    }
}

/// A pod that does not hold the Lease reads it this often (every this many rounds) to learn
/// that it was given it; a master that does not hold it reads it every round.
const LEASE_READ_EVERY: u64 = 4;

/// The fencer without Sentinel (ADR 0022), forever: every [`vko_authority::LEASE_RENEW_INTERVAL`]
/// the holder of the master Lease renews it; a master whose last successful renew started F ago,
/// or that finds the Lease held by another pod, is fenced exactly as with Sentinel, and follows
/// the holder once the holder answers as master. Inert while the pod is standalone.
pub async fn lease_fence_loop(
    node: Arc<Node>,
    state: Arc<FenceState>,
    settings: FenceSettings,
    lease: Arc<dyn LeaseApi>,
) {
    // F less a lead, so the fence lands within F although the renew times out at the deadline.
    let settings = FenceSettings {
        poll: vko_authority::LEASE_RENEW_INTERVAL,
        fence_after: vko_authority::lease_fence_after(settings.fence_after),
        ..settings
    };
    tracing::info!(
        fences_after_ms = settings.fence_after.as_millis() as u64,
        renew_ms = vko_authority::LEASE_RENEW_INTERVAL.as_millis() as u64,
        "lease fencer running: the master Lease holder renews it; a master that cannot for that long (F less a lead) pauses its writes"
    );
    let mut fencer = Fencer {
        node,
        state,
        settings,
        clock: Instant::now(),
        local: None,
        last_proven: None,
        askers: Askers::default(),
        last_view: None,
        was_master: None,
        local_replicas: 0,
        lease: None,
        lease_seen: LeaseSeen::Unknown {
            renew_started: None,
        },
        rounds: 0,
    };
    loop {
        fencer.lease_round(lease.as_ref()).await;
        tokio::time::sleep(fencer.until_next_round()).await;
    }
}

impl Fencer {
    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// The poll interval, but never past the moment the last proof turns F old.
    fn until_next_round(&self) -> Duration {
        let poll = self.settings.poll;
        if self.state.is_fenced() {
            return poll;
        }
        match fence_deadline(self.last_proven, self.settings.fence_after) {
            Some(deadline) => poll.min(deadline.saturating_sub(self.now())),
            None => poll,
        }
    }

    async fn local(&mut self) -> Option<&ValkeyClient> {
        if self.local.is_none() {
            match tokio::time::timeout(LOCAL_TIMEOUT, self.node.local()).await {
                Ok(Ok(client)) => self.local = Some(client),
                Ok(Err(e)) => tracing::debug!(error = %e, "fencer: local server not reachable"),
                Err(_) => tracing::debug!("fencer: local server connect timed out"),
            }
        }
        self.local.as_ref()
    }

    /// Whether the local server is master, and how many replicas it lists (ADR 0041: a replica
    /// Sentinel could promote makes the Sentinels' waits matter).
    async fn local_is_master(&mut self) -> Option<bool> {
        let local = self.local().await?;
        match tokio::time::timeout(LOCAL_TIMEOUT, local.role()).await {
            Ok(Ok(role)) => {
                self.local_replicas = match &role {
                    RoleReply::Master { replicas, .. } => replicas.len(),
                    _ => 0,
                };
                Some(matches!(role, RoleReply::Master { .. }))
            }
            _ => {
                self.local = None;
                None
            }
        }
    }

    async fn round(&mut self) {
        let started = self.now();
        let Some(is_master) = self.local_is_master().await else {
            // A server that does not answer acknowledges nothing either; its last proof ages.
            return;
        };
        if is_master && self.was_master == Some(false) {
            // A replica became master: Sentinel's failover leader (elected by a majority),
            // the handover's SENTINEL FAILOVER, or the hold's exit on the majority's word
            // promoted it just now. That is the proof; the other Sentinels learn the new
            // master from the leader's hello within a few seconds, inside F or soon after.
            tracing::info!("local server promoted to master; its authority counts as proven now");
            self.last_proven = Some(started);
        }
        self.was_master = Some(is_master);
        // Decide once before asking: a round that starts at the deadline fences at once, and a
        // replica is unfenced at once. A master never proven is first asked (a sidecar start
        // must not pause a master the Sentinels name).
        if !is_master || self.last_proven.is_some() {
            // The FENCED line names what the Sentinels said last.
            let last_view = self.last_view.clone().unwrap_or_default();
            self.act(is_master, &last_view).await;
        }
        if !is_master {
            // A replica proves nothing: no Sentinel is asked for it.
            self.askers.stop();
            return;
        }
        let (proven_at, named, view) = self.ask(started).await;
        if let Some(at) = proven_at {
            self.last_proven = Some(self.last_proven.map_or(at, |last| last.max(at)));
        }
        if self.last_view.as_deref() != Some(view.as_str()) {
            // Once per change: an unproven round is what a later FENCED line is made of.
            if proven_at.is_some() {
                tracing::debug!(view, "fencer: Sentinel answers changed");
            } else {
                tracing::info!(
                    view,
                    "fencer: Sentinel answers do not prove this master's authority"
                );
            }
            self.last_view = Some(view.clone());
        }
        self.act(is_master, &view).await;
        if let Some(named) = named
            && self.state.is_fenced()
        {
            self.follow_named_master(&named).await;
        }
    }

    /// One round without Sentinel: the local role, the Lease (renewed when held), the decision.
    async fn lease_round(&mut self, api: &dyn LeaseApi) {
        let started = self.now();
        self.rounds = self.rounds.wrapping_add(1);
        if matches!(self.node.standalone(), Ok(true)) {
            // One pod: nothing to fence against; lift a fence left from before a scale-down.
            if self.state.is_fenced() {
                self.unfence(UnfenceReason::NowReplica, "standalone").await;
            }
            return;
        }
        let Some(is_master) = self.local_is_master().await else {
            // A server that does not answer acknowledges nothing; it renews nothing either, so
            // the operator sees its Lease expire and promotes a replica.
            return;
        };
        self.renew(api, is_master, started).await;
        if let LeaseSeen::Mine {
            renew_started: Some(at),
        } = self.lease_seen
        {
            self.last_proven = Some(at);
        }
        let view = self.lease_view();
        if self.last_view.as_deref() != Some(view.as_str()) {
            tracing::info!(view, is_master, "fencer: master Lease");
            self.last_view = Some(view.clone());
        }
        let action = lease_fence_action(
            is_master,
            &self.lease_seen,
            self.now(),
            self.settings.fence_after,
            self.state.is_fenced(),
        );
        match action {
            FenceAction::Keep => {}
            FenceAction::Fence(reason) => self.fence(reason, &view).await,
            FenceAction::Unfence(reason) => self.unfence(reason, &view).await,
        }
        let held = matches!(self.lease_seen, LeaseSeen::Mine { .. })
            && matches!(action, FenceAction::Keep | FenceAction::Unfence(_));
        let held_until = self
            .last_proven
            .filter(|_| held)
            .map(|at| self.clock + at + self.settings.fence_after);
        self.state.set_lease_held_until(held_until);
        self.state.set_other_lease_holder(match &self.lease_seen {
            LeaseSeen::Other(holder) => Some(holder.clone()),
            _ => None,
        });
        if let LeaseSeen::Other(holder) = &self.lease_seen
            && is_master
            && self.state.is_fenced()
            && let Some(endpoint) = self.node.topology.endpoint_of_pod(holder)
        {
            self.follow_named_master(&endpoint).await;
        }
    }

    /// What the Lease says, in words that change only when its meaning does (logged on change).
    fn lease_view(&self) -> String {
        match &self.lease_seen {
            LeaseSeen::Mine {
                renew_started: Some(_),
            } => "held by this pod, renewed".into(),
            LeaseSeen::Mine {
                renew_started: None,
            } => "held by this pod, never renewed".into(),
            LeaseSeen::Other(holder) => format!("held by {holder}"),
            LeaseSeen::Unknown { .. } => "not readable or not renewed (API unreachable)".into(),
            LeaseSeen::Missing => "no master Lease or no holder".into(),
        }
    }

    /// Reads the Lease when due and renews it when this pod holds it; every call within the
    /// round's budget (never past this pod's fence deadline). Updates `lease_seen`.
    async fn renew(&mut self, api: &dyn LeaseApi, is_master: bool, started: Duration) {
        let budget = if self.state.is_fenced() {
            self.settings.ask_timeout
        } else {
            fence_deadline(self.last_proven, self.settings.fence_after)
                .map_or(self.settings.ask_timeout, |d| d.saturating_sub(started))
                .clamp(MIN_ASK, self.settings.ask_timeout)
        };
        let deadline = tokio::time::Instant::now() + budget;
        let renewed_before = match &self.lease_seen {
            LeaseSeen::Mine { renew_started } | LeaseSeen::Unknown { renew_started } => {
                *renew_started
            }
            _ => None,
        };
        let holds = |lease: &Option<HeldLease>, me: &str| {
            lease.as_ref().and_then(|l| l.holder.as_deref()) == Some(me)
        };
        let me = self.node.my_pod.clone();
        let read_due = self.lease.is_none()
            || (is_master && !holds(&self.lease, &me))
            || (!holds(&self.lease, &me) && self.rounds.is_multiple_of(LEASE_READ_EVERY));
        if read_due {
            match tokio::time::timeout_at(deadline, api.read()).await {
                Ok(Ok(Some(lease))) => self.lease = Some(lease),
                Ok(Ok(None)) => {
                    self.lease = None;
                    self.lease_seen = LeaseSeen::Missing;
                    return;
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "fencer: cannot read the master Lease");
                    self.lease_seen = LeaseSeen::Unknown {
                        renew_started: renewed_before,
                    };
                    return;
                }
                Err(_) => {
                    self.lease_seen = LeaseSeen::Unknown {
                        renew_started: renewed_before,
                    };
                    return;
                }
            }
        }
        let Some(lease) = self.lease.clone() else {
            return;
        };
        match lease.holder.as_deref() {
            None => {
                self.lease_seen = LeaseSeen::Missing;
                return;
            }
            Some(holder) if holder != me => {
                self.lease_seen = LeaseSeen::Other(holder.to_owned());
                return;
            }
            Some(_) => {}
        }
        match tokio::time::timeout_at(deadline, api.renew(&lease)).await {
            Ok(Ok(Written::Done(lease))) => {
                self.lease = Some(*lease);
                self.lease_seen = LeaseSeen::Mine {
                    renew_started: Some(started),
                };
            }
            Ok(Ok(Written::Conflict)) => {
                // Someone else wrote it (the operator moved it, or our last renew landed after
                // its timeout): read it again next round; this renew proves nothing.
                self.lease = None;
                self.lease_seen = LeaseSeen::Unknown {
                    renew_started: renewed_before,
                };
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "fencer: renew of the master Lease failed");
                self.lease_seen = LeaseSeen::Unknown {
                    renew_started: renewed_before,
                };
            }
            Err(_) => {
                tracing::debug!("fencer: renew of the master Lease timed out");
                self.lease_seen = LeaseSeen::Unknown {
                    renew_started: renewed_before,
                };
            }
        }
    }

    /// What the Sentinels say (ADR 0040: each is asked on its own, and its latest answer younger
    /// than F counts): (when this pod's authority is proven from — the oldest vote of the
    /// youngest majority naming it, or the answers of a failover in progress that promotes it —,
    /// the master the majority names when it is another pod, a one-line summary for the log).
    async fn ask(&mut self, started: Duration) -> (Option<Duration>, Option<Endpoint>, String) {
        let node = self.node.clone();
        let Some(name) = node.topology.monitor.clone() else {
            return (None, None, "no Sentinel".into());
        };
        // Discovery is cached (10 s); a refresh that hangs must not make the fence late.
        let budget = if self.state.is_fenced() {
            self.settings.ask_timeout
        } else {
            fence_deadline(self.last_proven, self.settings.fence_after)
                .map_or(MIN_ASK, |d| d.saturating_sub(started))
                .clamp(MIN_ASK, self.settings.ask_timeout)
        };
        let discovery = tokio::time::timeout(budget, node.topology.sentinels()).await;
        if let Ok(sentinels) = &discovery {
            self.askers
                .follow(sentinels, &node, &name, self.clock, &self.settings);
        }
        if self.last_proven.is_none() {
            // Never proven (a sidecar start, a master's first round): hear every Sentinel first,
            // as a round did, so a master its Sentinels name is not paused for want of asking.
            self.askers
                .wait_for_answers(self.clock, self.settings.ask_timeout)
                .await;
        }
        let (now, fence_after) = (self.now(), self.settings.fence_after);
        let discovered = self.askers.asked();
        let fresh = self.askers.fresh(now, fence_after);
        let answers: Vec<Option<SentinelAnswer>> =
            fresh.iter().map(|(a, _)| Some(a.clone())).collect();
        let known: Vec<u32> = fresh.iter().map(|(a, _)| a.known_sentinels).collect();
        if decide::sentinel_discovery_behind(&known, discovered) {
            // Asked again next round, not in ten seconds.
            node.topology.forget_sentinels();
        }
        let held: Vec<HeldAnswer<Endpoint>> = fresh
            .iter()
            .map(|(a, at)| decide::held_answer(a, *at))
            .collect();
        let majority_at = decide::held_proof(
            node.me(),
            &held,
            discovered,
            self.local_replicas,
            now,
            fence_after,
        );
        let proof = decide::authority_proof(node.me(), &answers, discovered);
        let proven_at = match (majority_at, proof) {
            (Some(at), _) => Some(at),
            // The promotion rule over every fresh answer: dated by the oldest of them.
            (None, Some(vko_authority::Proof::Promotion)) => fresh.iter().map(|(_, at)| *at).min(),
            _ => None,
        };
        let named = decide::sentinel_master(&answers, discovered).filter(|m| m != node.me());
        let naming_me = fresh.iter().filter(|(a, _)| a.master == *node.me()).count();
        // ADR 0041: how the Sentinel naming this pod that hears it worst hears it.
        let worst_reach = fresh
            .iter()
            .filter(|(a, _)| a.master == *node.me())
            .map(|(a, _)| a.reach)
            .max_by_key(|reach| reach.vouch_wait())
            .filter(|reach| reach.vouch_wait() >= UNANSWERED_PING_WORTH_NAMING);
        let view = format!(
            "{} of {discovered} Sentinels answered within F, {naming_me} name this pod{}{}{}{}",
            fresh.len(),
            worst_reach
                .map(|reach| match reach {
                    MasterReach::Waited(waited) => format!(
                        ", one has waited {} ms for this pod to answer its PING",
                        waited.as_millis()
                    ),
                    MasterReach::FlagsDown => ", one flags this pod down".into(),
                    MasterReach::Unsaid => {
                        ", one did not say when this pod last answered its PING".into()
                    }
                })
                .unwrap_or_default(),
            named
                .as_ref()
                .map(|m| format!(", the majority names {m}"))
                .unwrap_or_default(),
            if majority_at.is_none() && proof == Some(vko_authority::Proof::Promotion) {
                ", the failover in progress promotes this pod"
            } else {
                ""
            },
            if discovery.is_err() {
                format!(", no Sentinel discovered within {} ms", budget.as_millis())
            } else {
                String::new()
            }
        );
        (proven_at, named, view)
    }

    async fn act(&mut self, is_master: bool, view: &str) {
        let action = fence_action(FenceInput {
            is_master,
            last_proven: self.last_proven,
            now: self.now(),
            fence_after: self.settings.fence_after,
            fenced: self.state.is_fenced(),
        });
        match action {
            FenceAction::Keep => {}
            FenceAction::Fence(reason) => self.fence(reason, view).await,
            FenceAction::Unfence(reason) => self.unfence(reason, view).await,
        }
    }

    async fn fence(&mut self, reason: FenceReason, view: &str) {
        let state = self.state.clone();
        let mut gate = state.gate.lock().await;
        if gate.draining && !gate.fenced {
            // The handover owns the pause now.
            return;
        }
        let pause = self.settings.pause;
        let last_proof_age = self.last_proven.map(|at| self.now().saturating_sub(at));
        let Some(local) = self.local().await else {
            return;
        };
        match tokio::time::timeout(LOCAL_TIMEOUT, local.client_pause_write(pause)).await {
            Ok(Ok(())) => {
                if !gate.fenced {
                    gate.fenced = true;
                    self.state.set_mark(Some(FenceMark {
                        reason,
                        since: SystemTime::now(),
                    }));
                    tracing::warn!(
                        reason = reason.as_str(),
                        last_proof_ms_ago = last_proof_age.map(|d| d.as_millis() as u64),
                        authority = view,
                        pause_ms = pause.as_millis() as u64,
                        "FENCED: this master cannot prove its authority; writes paused"
                    );
                }
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, reason = reason.as_str(), "fencer: CLIENT PAUSE failed");
                self.local = None;
            }
            Err(_) => {
                tracing::warn!(reason = reason.as_str(), "fencer: CLIENT PAUSE timed out");
                self.local = None;
            }
        }
    }

    async fn unfence(&mut self, reason: UnfenceReason, view: &str) {
        let state = self.state.clone();
        let mut gate = state.gate.lock().await;
        if gate.draining {
            return;
        }
        let Some(local) = self.local().await else {
            return;
        };
        match tokio::time::timeout(LOCAL_TIMEOUT, local.client_unpause()).await {
            Ok(Ok(())) => {
                let since = self.state.mark().map(|m| m.since);
                gate.fenced = false;
                self.state.set_mark(None);
                tracing::info!(
                    reason = ?reason,
                    fenced_ms = since
                        .and_then(|s| s.elapsed().ok())
                        .map(|d| d.as_millis() as u64),
                    authority = view,
                    "UNFENCED: writes resume"
                );
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "fencer: CLIENT UNPAUSE failed");
                self.local = None;
            }
            Err(_) => {
                tracing::warn!("fencer: CLIENT UNPAUSE timed out");
                self.local = None;
            }
        }
    }

    /// A fenced master whose Sentinel majority names another pod that answers as master: become
    /// its replica. Sentinel would demote this server itself, but its `+convert-to-slave`
    /// transaction waits behind the hello `PUBLISH` that the pause postpones, so while the pause
    /// is renewed it never runs (switchover-facts.md, method B). `REPLICAOF` is not a write: it
    /// runs while paused, and the next round lifts the fence of what is then a replica.
    async fn follow_named_master(&mut self, named: &Endpoint) {
        if self.state.gate.lock().await.draining {
            return;
        }
        let answers_master = matches!(
            probe(&self.node.dialer, named).await,
            PeerEvidence::Answered(r) if r.is_master()
        );
        if !answers_master {
            return;
        }
        let Some(local) = self.local().await else {
            return;
        };
        match tokio::time::timeout(LOCAL_TIMEOUT, local.replicaof(&named.host, named.port)).await {
            Ok(Ok(())) => tracing::warn!(
                new_master = %named,
                "fenced master demoted itself: its authority names another master"
            ),
            Ok(Err(e)) => tracing::warn!(error = %e, %named, "fencer: REPLICAOF failed"),
            Err(_) => {
                tracing::warn!(%named, "fencer: REPLICAOF timed out");
                self.local = None;
            }
        }
    }
}

/// The Sentinels asked each on its own (ADR 0040): one task a Sentinel asks it every poll, and
/// keeps its latest answer with the time that ask began, so a Sentinel slow to answer delays only
/// its own answers, never the others' or the fence.
#[derive(Default)]
struct Askers {
    held: Arc<Mutex<Vec<(SentinelAnswer, Duration)>>>,
    tasks: Vec<(Endpoint, tokio::task::JoinHandle<()>)>,
}

impl Askers {
    /// Asks exactly `sentinels` from now on: a task for each new one, the others' stopped (the
    /// answers they gave stay until they are F old).
    fn follow(
        &mut self,
        sentinels: &[Endpoint],
        node: &Arc<Node>,
        name: &str,
        clock: Instant,
        settings: &FenceSettings,
    ) {
        self.tasks.retain(|(sentinel, task)| {
            let keep = sentinels.contains(sentinel);
            if !keep {
                task.abort();
            }
            keep
        });
        for sentinel in sentinels {
            if self.tasks.iter().any(|(s, _)| s == sentinel) {
                continue;
            }
            let task = tokio::spawn(ask_forever(
                node.clone(),
                sentinel.clone(),
                name.to_owned(),
                clock,
                settings.clone(),
                self.held.clone(),
            ));
            self.tasks.push((sentinel.clone(), task));
        }
    }

    /// Waits until every Sentinel asked has answered since the asking began, or `within` passed.
    async fn wait_for_answers(&self, clock: Instant, within: Duration) {
        let until = tokio::time::Instant::now() + within;
        loop {
            let now = clock.elapsed();
            let answered = self
                .held
                .lock()
                .map(|held| held.iter().filter(|(_, at)| *at <= now).count())
                .unwrap_or(0);
            if answered >= self.asked() || tokio::time::Instant::now() >= until {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// How many Sentinels are being asked.
    fn asked(&self) -> usize {
        self.tasks.len()
    }

    /// Each Sentinel's latest answer younger than `fence_after` (older ones are dropped).
    fn fresh(&self, now: Duration, fence_after: Duration) -> Vec<(SentinelAnswer, Duration)> {
        let Ok(mut held) = self.held.lock() else {
            return Vec::new();
        };
        held.retain(|(_, at)| *at <= now && now - *at < fence_after);
        held.clone()
    }

    /// No Sentinel is asked any more, and nothing they said is kept.
    fn stop(&mut self) {
        for (_, task) in self.tasks.drain(..) {
            task.abort();
        }
        if let Ok(mut held) = self.held.lock() {
            held.clear();
        }
    }
}

impl Drop for Askers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One Sentinel, asked every `poll` until aborted, each ask on its own and bounded by
/// `ask_timeout` (a hung ask does not hold back the next: the first one sent after a cut heals
/// answers); an answer replaces the held one when its ask began later, dated when it began (never
/// later than what it vouches for).
async fn ask_forever(
    node: Arc<Node>,
    sentinel: Endpoint,
    name: String,
    clock: Instant,
    settings: FenceSettings,
    held: Arc<Mutex<Vec<(SentinelAnswer, Duration)>>>,
) {
    let mut asks = tokio::task::JoinSet::new();
    let mut next = clock.elapsed();
    loop {
        tokio::select! {
            () = tokio::time::sleep(next.saturating_sub(clock.elapsed())) => {
                let asked_at = clock.elapsed();
                next = asked_at + settings.poll;
                let (node, sentinel, name) = (node.clone(), sentinel.clone(), name.clone());
                let timeout = settings.ask_timeout;
                asks.spawn(async move {
                    let answer = tokio::time::timeout(
                        timeout,
                        ask_sentinels(&node.dialer, std::slice::from_ref(&sentinel), &name),
                    )
                    .await
                    .ok()
                    .and_then(|mut one| one.pop().flatten());
                    (asked_at, answer)
                });
            }
            Some(Ok((asked_at, Some(answer)))) = asks.join_next(), if !asks.is_empty() => {
                if let Ok(mut held) = held.lock() {
                    let newer = held
                        .iter()
                        .find(|(a, _)| a.sentinel == sentinel)
                        .is_none_or(|(_, at)| *at < asked_at);
                    if newer {
                        held.retain(|(a, _)| a.sentinel != sentinel);
                        held.push((answer, asked_at));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn fence_after_stays_below_sentinels_down_after() {
        let f = vko_authority::DEFAULT_FENCE_AFTER;
        assert!(f < Duration::from_millis(u64::from(DOWN_AFTER_MS)));
        assert!(f < Duration::from_millis(u64::from(MASTER_REBOOT_DOWN_AFTER_MS)));
        assert_eq!(check_fence_after(f).unwrap(), f);
        assert_eq!(FenceSettings::default().fence_after, f);
        assert!(check_fence_after(Duration::from_millis(u64::from(DOWN_AFTER_MS))).is_err());
        assert!(check_fence_after(Duration::from_secs(60)).is_err());
        assert!(check_fence_after(Duration::ZERO).is_err());
        assert!(check_fence_after(Duration::from_millis(4_999)).is_ok());
    }

    #[test]
    fn the_poll_leaves_room_for_the_deadline() {
        let s = FenceSettings::default();
        assert!(s.poll + s.ask_timeout < s.fence_after);
        assert!(
            s.pause > s.poll + s.ask_timeout + LOCAL_TIMEOUT,
            "renewed before it lapses"
        );
    }

    #[test]
    fn the_annotation_names_reason_and_time() {
        let mark = FenceMark {
            reason: FenceReason::ProofExpired,
            since: SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_150_000_400),
        };
        assert_eq!(
            mark.annotation(),
            "AuthorityNotProven since 2026-12-01T18:33:20Z"
        );
    }

    #[tokio::test]
    async fn a_drain_sees_whether_the_fence_is_up() {
        let state = FenceState::default();
        assert!(!state.begin_drain().await);
        let state = FenceState::default();
        state.gate.lock().await.fenced = true;
        assert!(state.begin_drain().await);
        assert!(state.gate.lock().await.draining);
    }
}
