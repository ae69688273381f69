//! The planned, lossless switchover of a master (shared/design/switchover-facts.md, method B2),
//! used by the sidecar when its master pod stops and by the operator during a rolling update:
//!
//! with Sentinel: `CLIENT PAUSE WRITE` → every online replica caught up → `SENTINEL FAILOVER` →
//! a Sentinel majority names the new master → `REPLICAOF <new>` on the old master while still
//! paused → `CLIENT UNPAUSE`. The old master is a replica before any postponed write runs, so
//! each of them gets `READONLY` instead of an OK that would be lost.
//!
//! without Sentinel: pause → the chosen (or most caught-up) replica reaches the master's offset →
//! `REPLICAOF NO ONE` on it → `REPLICAOF <it>` on the old master → unpause → the other replicas
//! follow the new master.
//!
//! Rollback: whatever fails before the old master is a replica ends with `CLIENT UNPAUSE` and
//! [`Error::Switchover`]; the old master keeps its role and every write it acknowledged.
//!
//! Addresses are the *announced* ones (host names in a pod); how they are dialled (DNS in a pod,
//! pod IPs from the operator) is the caller's [`Dial`].

use std::fmt;
use std::future::Future;
use std::time::{Duration, Instant};

use vko_authority::{Electorate, Vote};

use crate::client::{SentinelClient, ValkeyClient};
use crate::error::{Error, Result};
use crate::parse::{
    ConnectedReplica, InstanceFlag, ReplicaSyncState, ReplicationInfo, ReplicationRole,
};

/// A Valkey or Sentinel instance as it is announced (host name and port).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    pub host: String,
    pub port: u16,
}

impl Address {
    pub fn new(host: impl Into<String>, port: u16) -> Address {
        Address {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// How the switchover reaches the other instances by their announced addresses.
pub trait Dial: Sync {
    fn valkey(&self, at: &Address) -> impl Future<Output = Result<ValkeyClient>> + Send;
    fn sentinel(&self, at: &Address) -> impl Future<Output = Result<SentinelClient>> + Send;

    /// Asked right before each step that changes a server and is not a rollback (`pause`,
    /// `sentinel-failover`, `promote`); `Err(why)` ends the switchover like a failed step (unpause,
    /// the old master keeps its role). Once a new master is promoted, the demotion of the old
    /// one and the unpause always run: stopping there would leave two masters. The operator
    /// refuses once its leader Lease may have passed to another operator; the default allows.
    fn may_proceed(&self, step: &'static str) -> std::result::Result<(), String> {
        let _ = step;
        Ok(())
    }

    /// Run under the pause, once the direct promotion's target is caught up and right before its
    /// `REPLICAOF NO ONE`: without Sentinel the master Lease moves to the target here (ADR 0022),
    /// so the new master holds the authority before it is master. `Err(why)` ends the switchover
    /// like a failed step. The default does nothing.
    fn before_promote(
        &self,
        target: &Address,
    ) -> impl Future<Output = std::result::Result<(), String>> + Send {
        let _ = target;
        async { Ok(()) }
    }
}

fn proceed<D: Dial>(dial: &D, step: &'static str) -> Result<()> {
    dial.may_proceed(step).map_err(|why| failed(step, why))
}

/// Who promotes the new master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Promoter {
    /// `SENTINEL FAILOVER <name>` on one of `sentinels`; Sentinel picks the replica, so every
    /// online replica is caught up first.
    Sentinel {
        name: String,
        sentinels: Vec<Address>,
        /// How many Sentinels the cluster has (`spec.sentinel.replicas`), 0 when the caller
        /// cannot know: the new master must be named by a strict majority of the largest of
        /// this, `sentinels` and the peer counts the Sentinels report (ADR 0014).
        configured: usize,
        /// Replicas Sentinel must not pick (a scale-down removes them): before the pause each
        /// gets `replica-priority 0`, and the switchover starts only once every Sentinel that
        /// answers lists them with it (Sentinel reads a replica's priority from its INFO,
        /// every 10 s).
        never_promote: Vec<Address>,
    },
    /// `REPLICAOF NO ONE` on `target`, or on the most caught-up online replica when `None`.
    Direct { target: Option<Address> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `CLIENT PAUSE` length: the bound on the whole switchover. Measured: catch-up 15–24 ms,
    /// Sentinel promotion about 1.1 s.
    pub pause: Duration,
    /// Poll interval while waiting for offsets and Sentinel.
    pub poll: Duration,
    /// How long, before the pause, the Sentinels may take to see `replica-priority 0` on the
    /// replicas they must not pick (their INFO poll of a replica is every 10 s).
    pub steer: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            pause: Duration::from_secs(20),
            poll: Duration::from_millis(10),
            steer: Duration::from_secs(15),
        }
    }
}

/// What a finished switchover measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub new_master: Address,
    /// From `CLIENT PAUSE` to `CLIENT UNPAUSE`: the longest a write waited.
    pub write_pause: Duration,
    /// From `CLIENT PAUSE` until the replicas had the master's offset.
    pub catch_up: Duration,
    /// Replicas (other than the new master) that could not be pointed at the new master
    /// (direct promotion only; they are logged, and their sidecars follow the record).
    pub not_repointed: Vec<Address>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The server is not a master: nothing to hand over.
    NotMaster,
    /// A master without an online replica: nobody to hand over to.
    NoReplica,
    HandedOver(Report),
}

fn online(info: &ReplicationInfo) -> impl Iterator<Item = &ConnectedReplica> {
    info.replicas
        .iter()
        .filter(|r| r.state == ReplicaSyncState::Online)
}

fn address_of(replica: &ConnectedReplica) -> Address {
    Address::new(replica.host.clone(), replica.port)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn failed(step: &'static str, detail: impl Into<String>) -> Error {
    Error::Switchover {
        step,
        detail: detail.into(),
    }
}

/// Hand the master role of `old` (announced as `old_address`) over to a replica, losing no write
/// `old` acknowledged. On success `old` is a replica of the new master and unpaused.
pub async fn switchover<D: Dial>(
    dial: &D,
    old: &ValkeyClient,
    old_address: &Address,
    promoter: &Promoter,
    settings: &Settings,
) -> Result<Outcome> {
    let before = old.info_replication().await?;
    if before.role != ReplicationRole::Master {
        tracing::info!(step = "check", master = %old_address, "not master; nothing to hand over");
        return Ok(Outcome::NotMaster);
    }
    if online(&before).next().is_none() {
        tracing::warn!(step = "check", master = %old_address, "master without an online replica; nothing to hand over to");
        return Ok(Outcome::NoReplica);
    }
    if let Promoter::Sentinel {
        name,
        sentinels,
        never_promote,
        ..
    } = promoter
        && !never_promote.is_empty()
    {
        steer_sentinel(dial, name, sentinels, never_promote, settings).await?;
    }
    proceed(dial, "pause")?;
    let paused = Paused::start(old, settings).await?;
    let result = match promoter {
        Promoter::Sentinel {
            name,
            sentinels,
            configured,
            ..
        } => {
            let electorate = Electorate::new(*configured, sentinels.len());
            with_sentinel(
                dial,
                &paused,
                old_address,
                name,
                sentinels,
                electorate,
                settings,
            )
            .await
        }
        Promoter::Direct { target } => {
            direct(dial, &paused, old_address, target.as_ref(), settings).await
        }
    };
    match result {
        Ok((new_master, catch_up, not_repointed)) => {
            let write_pause = paused.end().await;
            Ok(Outcome::HandedOver(Report {
                new_master,
                write_pause,
                catch_up,
                not_repointed,
            }))
        }
        Err(error) => {
            tracing::error!(master = %old_address, %error, "switchover failed; rolling back (unpause, keep the role)");
            paused.end().await;
            Err(error)
        }
    }
}

/// Before the pause: `replica-priority 0` on each of `never_promote`, then wait (at most
/// `settings.steer`) until every Sentinel that answers lists each of them it knows with priority
/// 0, so a `SENTINEL FAILOVER` cannot pick one. Nothing is paused yet: failing here costs no
/// write, and the priority set stays for the next try.
async fn steer_sentinel<D: Dial>(
    dial: &D,
    name: &str,
    sentinels: &[Address],
    never_promote: &[Address],
    settings: &Settings,
) -> Result<()> {
    proceed(dial, "steer")?;
    // A replica that cannot be reached is skipped: Sentinel does not pick a replica it cannot
    // reach either (a disconnected or subjectively down one).
    let mut steered = Vec::new();
    for replica in never_promote {
        let set = match dial.valkey(replica).await {
            Ok(client) => {
                let set = client.config_set("replica-priority", "0").await;
                client.close().await;
                set
            }
            Err(e) => Err(e),
        };
        match set {
            Ok(()) => steered.push(replica.clone()),
            Err(e) => {
                tracing::warn!(step = "steer", %replica, error = %e, "replica-priority 0 not set; a replica that does not answer is not picked by Sentinel either");
            }
        }
    }
    let never_promote = steered.as_slice();
    let started = Instant::now();
    loop {
        let mut unseen = Vec::new();
        for sentinel in sentinels {
            let Ok(client) = dial.sentinel(sentinel).await else {
                continue;
            };
            let listed = client.replicas(name).await;
            client.close().await;
            let Ok(listed) = listed else { continue };
            unseen.extend(
                listed
                    .iter()
                    .filter(|r| never_promote.contains(&Address::new(r.host.clone(), r.port)))
                    .filter(|r| r.priority != Some(0))
                    .map(|r| {
                        format!(
                            "{sentinel} lists {}:{} with priority {:?}",
                            r.host, r.port, r.priority
                        )
                    }),
            );
        }
        if unseen.is_empty() {
            tracing::info!(step = "steer", replicas = ?never_promote, elapsed_ms = ms(started.elapsed()), "every Sentinel sees replica-priority 0 on the replicas it must not pick");
            return Ok(());
        }
        if started.elapsed() >= settings.steer {
            return Err(failed(
                "steer",
                format!(
                    "Sentinel has not read replica-priority 0 yet: {}",
                    unseen.join("; ")
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The old master with writes paused.
struct Paused<'a> {
    old: &'a ValkeyClient,
    started: Instant,
    /// By when the switchover must be done: a margin before the server lifts the pause itself.
    deadline: Instant,
}

impl<'a> Paused<'a> {
    async fn start(old: &'a ValkeyClient, settings: &Settings) -> Result<Paused<'a>> {
        let started = Instant::now();
        old.client_pause_write(settings.pause).await?;
        let margin = (settings.pause / 10).min(Duration::from_secs(2));
        tracing::info!(
            step = "pause",
            pause_ms = ms(settings.pause),
            "writes paused"
        );
        Ok(Paused {
            old,
            started,
            deadline: started + settings.pause - margin,
        })
    }

    async fn end(self) -> Duration {
        let result = self.old.client_unpause().await;
        let held = self.started.elapsed();
        match result {
            Ok(()) => tracing::info!(
                step = "unpause",
                write_pause_ms = ms(held),
                "writes unpaused"
            ),
            // The pause still ends by itself at its deadline.
            Err(e) => {
                tracing::error!(step = "unpause", error = %e, "CLIENT UNPAUSE failed; the pause expires by itself")
            }
        }
        held
    }

    fn expired(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Clients to replicas, opened once per switchover.
struct Replicas<'d, D: Dial> {
    dial: &'d D,
    open: Vec<(Address, ValkeyClient)>,
}

impl<'d, D: Dial> Replicas<'d, D> {
    fn new(dial: &'d D) -> Self {
        Replicas {
            dial,
            open: Vec::new(),
        }
    }

    async fn client(&mut self, at: &Address) -> Result<&ValkeyClient> {
        let index = match self.open.iter().position(|(a, _)| a == at) {
            Some(index) => index,
            None => {
                let client = self.dial.valkey(at).await?;
                self.open.push((at.clone(), client));
                self.open.len() - 1
            }
        };
        Ok(&self.open[index].1)
    }

    /// The offset a replica has processed, asked of the replica itself: the master learns it
    /// only from the replica's once-a-second `REPLCONF ACK` (and sends no `GETACK` while writes
    /// are paused), so asking the replica turns a wait of up to a second into milliseconds.
    async fn offset(&mut self, at: &Address) -> Option<i64> {
        let info = self.client(at).await.ok()?.info_replication().await.ok()?;
        info.upstream.map(|u| u.repl_offset)
    }

    /// The offset the server now answering at `at` applied from `master`, if it follows it with
    /// its link up ([`ReplicationInfo::applied_from`]).
    async fn applied_from(&mut self, at: &Address, master: &Address) -> Option<i64> {
        let info = self.client(at).await.ok()?.info_replication().await.ok()?;
        info.applied_from(&master.host, master.port)
    }

    async fn close(self) {
        for (_, client) in self.open {
            client.close().await;
        }
    }
}

/// Which view of a replica's progress [`wait_caught_up`] accepts.
#[derive(Clone, Copy)]
enum Proof<'a> {
    /// The master's `slaveN:` offset or the replica's own: enough when Sentinel picks the
    /// replica, since it promotes only one it reaches itself.
    EitherView,
    /// Only the replica's own word that it follows this master (announced here), link up, at
    /// the offset: the replica promoted directly is dialled by name, and that name may already
    /// answer from a new process (a pod replaced under the same name) while the master still
    /// lists the old one's connection.
    FollowsMaster(&'a Address),
}

/// Wait until every replica in `wanted` has processed the old master's offset (`proof` says by
/// whose view). Returns the master's INFO at that point.
async fn wait_caught_up<D: Dial>(
    replicas: &mut Replicas<'_, D>,
    paused: &Paused<'_>,
    poll: Duration,
    proof: Proof<'_>,
    wanted: impl Fn(&ReplicationInfo) -> Vec<Address>,
) -> Result<ReplicationInfo> {
    loop {
        let now = paused.old.info_replication().await?;
        let wanted = wanted(&now);
        if wanted.is_empty() {
            // Every replica left under the pause: waiting for the deadline would only hold
            // the writes (measured: 18 s while a whole cluster was deleted).
            return Err(failed("catch-up", "no replica is online any more"));
        }
        let mut behind = Vec::new();
        let mut checked = Vec::new();
        for replica in online(&now) {
            let at = address_of(replica);
            if !wanted.contains(&at) || checked.contains(&at) {
                continue;
            }
            checked.push(at.clone());
            let own = match proof {
                Proof::EitherView if replica.offset >= now.master_repl_offset => continue,
                Proof::EitherView => replicas.offset(&at).await,
                Proof::FollowsMaster(master) => replicas.applied_from(&at, master).await,
            };
            if own.is_none_or(|offset| offset < now.master_repl_offset) {
                let own =
                    own.map_or_else(|| "not following this master".to_owned(), |o| o.to_string());
                behind.push(format!("{at} at {own}"));
            }
        }
        let missing: Vec<&Address> = wanted
            .iter()
            .filter(|w| !online(&now).any(|r| address_of(r) == **w))
            .collect();
        if !wanted.is_empty() && behind.is_empty() && missing.is_empty() {
            tracing::info!(
                step = "catch-up",
                offset = now.master_repl_offset,
                replicas = wanted.len(),
                elapsed_ms = ms(paused.started.elapsed()),
                "replicas caught up"
            );
            return Ok(now);
        }
        if paused.expired() {
            let mut detail = format!(
                "replicas not caught up with offset {}: {}",
                now.master_repl_offset,
                behind.join(", ")
            );
            for m in missing {
                detail.push_str(&format!(", {m} not online"));
            }
            return Err(failed("catch-up", detail));
        }
        tokio::time::sleep(poll).await;
    }
}

/// `REPLICAOF <new>` on the old master while paused. REPLICAOF is not a write, so it runs during
/// the pause, and postponed writes meet a replica.
async fn demote(paused: &Paused<'_>, new_master: &Address) -> Result<()> {
    paused
        .old
        .replicaof(&new_master.host, new_master.port)
        .await
        .map_err(|e| failed("demote", e.to_string()))?;
    tracing::info!(step = "demote", new_master = %new_master, "old master is a replica of the new master");
    Ok(())
}

type Switched = (Address, Duration, Vec<Address>);

async fn with_sentinel<D: Dial>(
    dial: &D,
    paused: &Paused<'_>,
    old_address: &Address,
    name: &str,
    sentinels: &[Address],
    electorate: Electorate,
    settings: &Settings,
) -> Result<Switched> {
    if sentinels.is_empty() {
        return Err(failed("sentinel-failover", "no Sentinel known"));
    }
    // Sentinel picks the replica from its own view, so every online replica must be caught up.
    let mut replicas = Replicas::new(dial);
    let caught_up = wait_caught_up(
        &mut replicas,
        paused,
        settings.poll,
        Proof::EitherView,
        |i| online(i).map(address_of).collect(),
    )
    .await;
    replicas.close().await;
    caught_up?;
    let catch_up = paused.started.elapsed();

    let failover_started = Instant::now();
    let mut clients: Vec<Option<SentinelClient>> = Vec::new();
    let mut asked = None;
    let mut errors = Vec::new();
    for sentinel in sentinels {
        let client = match dial.sentinel(sentinel).await {
            Ok(client) => client,
            Err(e) => {
                errors.push(format!("{sentinel}: {e}"));
                clients.push(None);
                continue;
            }
        };
        if asked.is_none() {
            if let Err(refused) = proceed(dial, "sentinel-failover") {
                clients.push(Some(client));
                close_sentinels(clients).await;
                return Err(refused);
            }
            match client.failover(name).await {
                Ok(()) => asked = Some(sentinel.clone()),
                Err(Error::FailoverInProgress(_)) => match dead_failover(dial, &client, name).await
                {
                    // Its failover can never finish (it waits until failover-timeout, 60 s):
                    // another Sentinel runs a new one.
                    Some(why) => errors.push(format!("{sentinel}: {why}")),
                    None => asked = Some(sentinel.clone()),
                },
                Err(e) => errors.push(format!("SENTINEL FAILOVER on {sentinel}: {e}")),
            }
        }
        clients.push(Some(client));
    }
    let Some(asked) = asked else {
        close_sentinels(clients).await;
        return Err(failed(
            "sentinel-failover",
            format!(
                "no Sentinel accepted SENTINEL FAILOVER: {}",
                errors.join("; ")
            ),
        ));
    };
    tracing::info!(step = "sentinel-failover", sentinel = %asked, "SENTINEL FAILOVER accepted");

    let mut next_look = Instant::now() + ABORT_LOOK;
    let new_master = loop {
        if let Some(named) =
            ask_who_is_master(dial, sentinels, &mut clients, name, electorate).await
            && named != *old_address
        {
            break named;
        }
        if Instant::now() >= next_look {
            next_look = Instant::now() + ABORT_LOOK;
            if let Some(why) = failover_abandoned(dial, &asked, name, old_address).await {
                close_sentinels(clients).await;
                return Err(failed("sentinel-failover", why));
            }
        }
        if paused.expired() {
            close_sentinels(clients).await;
            return Err(failed(
                "sentinel-majority",
                "no Sentinel majority named a new master before the pause deadline",
            ));
        }
        tokio::time::sleep(settings.poll.max(Duration::from_millis(20))).await;
    };
    close_sentinels(clients).await;
    tracing::info!(
        step = "sentinel-majority",
        new_master = %new_master,
        elapsed_ms = ms(failover_started.elapsed()),
        "Sentinel majority names the new master"
    );
    demote(paused, &new_master).await?;
    Ok((new_master, catch_up, Vec::new()))
}

/// How often the switchover asks the Sentinel running its failover whether it gave up.
const ABORT_LOOK: Duration = Duration::from_millis(250);

/// Why the failover `asked` ran is over without a new master, if it is: that Sentinel no longer
/// has a failover in progress and still names the old master (it aborted: no replica it could
/// promote, the one it picked left). The writes then need not stay paused until the deadline.
/// A Sentinel that does not answer says nothing.
async fn failover_abandoned<D: Dial>(
    dial: &D,
    asked: &Address,
    name: &str,
    old_address: &Address,
) -> Option<String> {
    let client = dial.sentinel(asked).await.ok()?;
    let master = client.master(name).await;
    let named = client.get_master_addr_by_name(name).await;
    client.close().await;
    let (master, named) = (master.ok()?, named.ok()??);
    let still_old = named.0 == old_address.host && named.1 == old_address.port;
    (still_old && !master.flags.contains(&InstanceFlag::FailoverInProgress))
        .then(|| format!("{asked} ended its failover without promoting a replica"))
}

/// Why the failover a Sentinel has in progress can never finish, if it cannot: the replica it
/// promotes does not answer as a master (its pod is gone, or replaced by a new replica under
/// the same name). A replica that answers nothing in time says nothing (it may be promoting).
async fn dead_failover<D: Dial>(dial: &D, sentinel: &SentinelClient, name: &str) -> Option<String> {
    let replicas = sentinel.replicas(name).await.ok()?;
    let promoted = replicas
        .iter()
        .find(|r| r.flags.contains(&InstanceFlag::Promoted))?;
    let at = Address::new(promoted.host.clone(), promoted.port);
    let role = match dial.valkey(&at).await {
        Ok(client) => {
            let info = client.info_replication().await;
            client.close().await;
            match info {
                Ok(info) => info.role,
                Err(Error::Timeout { .. }) => return None,
                Err(e) => return Some(format!("its failover promotes {at}, which fails: {e}")),
            }
        }
        Err(Error::Timeout { .. }) => return None,
        Err(e) => return Some(format!("its failover promotes {at}, which is gone: {e}")),
    };
    (role != ReplicationRole::Master)
        .then(|| format!("its failover promotes {at}, which answers as a replica"))
}

async fn close_sentinels(clients: Vec<Option<SentinelClient>>) {
    for client in clients.into_iter().flatten() {
        client.close().await;
    }
}

/// Asks every Sentinel whom it names and returns the master `vko-authority`'s one majority rule
/// accepts (ADR 0014). Lost connections are redialled.
async fn ask_who_is_master<D: Dial>(
    dial: &D,
    sentinels: &[Address],
    clients: &mut [Option<SentinelClient>],
    name: &str,
    electorate: Electorate,
) -> Option<Address> {
    let mut votes: Vec<Vote<Address>> = Vec::new();
    for (sentinel, slot) in sentinels.iter().zip(clients.iter_mut()) {
        if slot.is_none() {
            *slot = dial.sentinel(sentinel).await.ok();
        }
        let Some(client) = slot.as_ref() else {
            continue;
        };
        match client.master(name).await {
            Ok(master) => votes.push(Vote::new(
                Some(Address::new(master.host, master.port)),
                usize::try_from(master.num_other_sentinels)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            )),
            Err(e) => {
                tracing::debug!(%sentinel, error = %e, "sentinel did not answer");
                *slot = None;
            }
        }
    }
    vko_authority::sentinel_majority(electorate, votes)
}

async fn direct<D: Dial>(
    dial: &D,
    paused: &Paused<'_>,
    old_address: &Address,
    target: Option<&Address>,
    settings: &Settings,
) -> Result<Switched> {
    // Chosen once, under the pause: the given replica, or the most caught-up online one (first
    // listed on a tie).
    let under_pause = paused.old.info_replication().await?;
    let target = match target {
        Some(target) => target.clone(),
        None => online(&under_pause)
            .max_by_key(|r| (r.offset, std::cmp::Reverse(r.port)))
            .map(address_of)
            .ok_or_else(|| failed("choose", "no online replica"))?,
    };
    tracing::info!(step = "choose", target = %target, "replica chosen");
    let mut replicas = Replicas::new(dial);
    let result = async {
        let only_target = |_: &ReplicationInfo| vec![target.clone()];
        let proof = Proof::FollowsMaster(old_address);
        let caught_up =
            wait_caught_up(&mut replicas, paused, settings.poll, proof, only_target).await?;
        let catch_up = paused.started.elapsed();
        let client = replicas
            .client(&target)
            .await
            .map_err(|e| failed("promote", e.to_string()))?;
        proceed(dial, "promote")?;
        dial.before_promote(&target)
            .await
            .map_err(|why| failed("promote", why))?;
        // REPLICAOF NO ONE may run and the check fail: two masters until the operator resolves
        // it, but the old one keeps every write it acknowledged, so nothing acknowledged is lost.
        client
            .replicaof_no_one()
            .await
            .map_err(|e| failed("promote", format!("REPLICAOF NO ONE on {target}: {e}")))?;
        let role = client
            .info_replication()
            .await
            .map_err(|e| failed("promote", format!("INFO replication on {target}: {e}")))?
            .role;
        if role != ReplicationRole::Master {
            return Err(failed("promote", format!("{target} is still a replica")));
        }
        tracing::info!(step = "promote", target = %target, "replica promoted");
        demote(paused, &target).await?;
        // The other replicas follow the new master (they would otherwise chain through the old
        // one, which may be about to stop).
        let mut not_repointed = Vec::new();
        for other in online(&caught_up).map(address_of).filter(|a| *a != target) {
            let result = match replicas.client(&other).await {
                Ok(client) => client.replicaof(&target.host, target.port).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => {
                    tracing::info!(step = "repoint", replica = %other, new_master = %target, "replica follows the new master")
                }
                Err(e) => {
                    tracing::warn!(step = "repoint", replica = %other, error = %e, "could not repoint replica");
                    not_repointed.push(other);
                }
            }
        }
        Ok((target.clone(), catch_up, not_repointed))
    }
    .await;
    replicas.close().await;
    result
}
