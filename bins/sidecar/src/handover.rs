//! The planned, lossless switchover of a master that is about to stop
//! (shared/design/switchover-facts.md, method B2):
//!
//! with Sentinel: `CLIENT PAUSE WRITE` → every online replica caught up → `SENTINEL FAILOVER` →
//! a Sentinel majority names the new master → `REPLICAOF <new>` on the old master while still
//! paused → `CLIENT UNPAUSE`. The old master is a replica before any postponed write runs, so
//! each of them gets `READONLY` instead of an OK that would be lost.
//!
//! without Sentinel: pause → the most caught-up replica reaches the master's offset →
//! `REPLICAOF NO ONE` on it → `REPLICAOF <it>` here → unpause → labels.
//!
//! Rollback: whatever fails before the old master is a replica ends with `CLIENT UNPAUSE` and an
//! error; the pod then terminates and Sentinel (or the operator) handles the loss of the master.

use std::time::{Duration, Instant};

use vko_valkey::ValkeyClient;
use vko_valkey::parse::{ReplicaSyncState, ReplicationInfo, ReplicationRole};

use crate::decide::{self, InstanceRole};
use crate::error::{Result, SidecarError};
use crate::node::Node;
use crate::topology::{Endpoint, ask_sentinels};

#[derive(Debug, Clone)]
pub struct HandoverSettings {
    /// `CLIENT PAUSE` length: the bound on the whole switchover. Measured: catch-up 15–24 ms,
    /// Sentinel promotion about 1.1 s.
    pub pause: Duration,
    /// Poll interval while waiting for offsets and Sentinel.
    pub poll: Duration,
}

impl Default for HandoverSettings {
    fn default() -> Self {
        HandoverSettings {
            pause: Duration::from_secs(20),
            poll: Duration::from_millis(10),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandoverOutcome {
    /// This server is not the master: nothing to hand over.
    NotMaster,
    /// A master without an online replica: nobody to hand over to.
    NoReplica,
    HandedOver {
        new_master: Endpoint,
        /// From `CLIENT PAUSE` to `CLIENT UNPAUSE`: the longest a write waited.
        write_pause: Duration,
    },
}

fn online(info: &ReplicationInfo) -> impl Iterator<Item = &vko_valkey::parse::ConnectedReplica> {
    info.replicas
        .iter()
        .filter(|r| r.state == ReplicaSyncState::Online)
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn info(local: &ValkeyClient) -> Result<ReplicationInfo> {
    local
        .info_replication()
        .await
        .map_err(SidecarError::valkey("INFO replication on the local server"))
}

/// Hand the master role over if this server is the master.
pub async fn handover(node: &Node, settings: &HandoverSettings) -> Result<HandoverOutcome> {
    let local = node.local().await?;
    let before = info(&local).await?;
    if before.role != ReplicationRole::Master {
        tracing::info!(step = "check", "not master; nothing to hand over");
        return Ok(HandoverOutcome::NotMaster);
    }
    if online(&before).next().is_none() {
        tracing::warn!(
            step = "check",
            "master without an online replica; nothing to hand over to"
        );
        return Ok(HandoverOutcome::NoReplica);
    }
    let outcome = if let Some(name) = node.topology.monitor.clone() {
        if let Some(named) = node.sentinel_master().await
            && named != *node.me()
        {
            tracing::info!(step = "check", sentinel_master = %named, "Sentinel names another master; nothing to hand over");
            return Ok(HandoverOutcome::NotMaster);
        }
        with_sentinel(node, &local, &name, settings).await
    } else {
        without_sentinel(node, &local, settings).await
    };
    local.close().await;
    outcome
}

/// Pause writes; returns the deadline by which the switchover must be done (a margin before the
/// server lifts the pause by itself).
async fn pause(local: &ValkeyClient, settings: &HandoverSettings) -> Result<(Instant, Instant)> {
    let started = Instant::now();
    local
        .client_pause_write(settings.pause)
        .await
        .map_err(SidecarError::valkey("CLIENT PAUSE WRITE"))?;
    let margin = (settings.pause / 10).min(Duration::from_secs(2));
    tracing::info!(
        step = "pause",
        pause_ms = ms(settings.pause),
        "writes paused"
    );
    Ok((started, started + settings.pause - margin))
}

async fn unpause(local: &ValkeyClient, started: Instant) -> Duration {
    let result = local.client_unpause().await;
    let held = started.elapsed();
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

/// Undo the pause and report `step` as the failure.
async fn roll_back<T>(
    local: &ValkeyClient,
    started: Instant,
    step: &'static str,
    detail: String,
) -> Result<T> {
    tracing::error!(step, %detail, "handover failed; rolling back (unpause, keep the role)");
    unpause(local, started).await;
    Err(SidecarError::Handover { step, detail })
}

/// The offset a replica has processed, asked of the replica itself: the master learns it only
/// from the replica's once-a-second `REPLCONF ACK` (and sends no `GETACK` while writes are
/// paused), so asking the replica turns a wait of up to a second into milliseconds.
async fn replica_offset(
    node: &Node,
    clients: &mut Vec<(Endpoint, ValkeyClient)>,
    replica: &Endpoint,
) -> Option<i64> {
    if !clients.iter().any(|(ep, _)| ep == replica) {
        let client = node.dialer.valkey(replica).await.ok()?;
        clients.push((replica.clone(), client));
    }
    let (_, client) = clients.iter().find(|(ep, _)| ep == replica)?;
    let info = client.info_replication().await.ok()?;
    info.upstream.map(|u| u.repl_offset)
}

/// Wait until each replica `which` names (all online ones, or the chosen target) has processed
/// the master's offset: by the master's view (its ACKs) or the replica's own. Returns that INFO.
async fn wait_caught_up(
    node: &Node,
    local: &ValkeyClient,
    deadline: Instant,
    poll: Duration,
    which: impl Fn(&ReplicationInfo) -> Vec<Endpoint>,
) -> std::result::Result<ReplicationInfo, String> {
    let started = Instant::now();
    let mut clients = Vec::new();
    loop {
        let now = info(local).await.map_err(|e| e.to_string())?;
        let wanted = which(&now);
        let mut behind = Vec::new();
        for replica in online(&now) {
            let ep = Endpoint::new(replica.host.clone(), replica.port);
            if !wanted.contains(&ep) || replica.offset >= now.master_repl_offset {
                continue;
            }
            let own = replica_offset(node, &mut clients, &ep).await;
            if own.is_none_or(|offset| offset < now.master_repl_offset) {
                behind.push(format!("{ep} at {}", own.unwrap_or(replica.offset)));
            }
        }
        if !wanted.is_empty() && behind.is_empty() {
            tracing::info!(
                step = "catch-up",
                offset = now.master_repl_offset,
                replicas = wanted.len(),
                elapsed_ms = ms(started.elapsed()),
                "replicas caught up"
            );
            for (_, client) in clients {
                client.close().await;
            }
            return Ok(now);
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "replicas not caught up with offset {}: {}",
                now.master_repl_offset,
                behind.join(", ")
            ));
        }
        tokio::time::sleep(poll).await;
    }
}

async fn with_sentinel(
    node: &Node,
    local: &ValkeyClient,
    name: &str,
    settings: &HandoverSettings,
) -> Result<HandoverOutcome> {
    let sentinels = node.topology.sentinels().await;
    let (started, deadline) = pause(local, settings).await?;
    // Sentinel picks the replica from its own view, so every online replica must be caught up.
    let all_online = |i: &ReplicationInfo| -> Vec<Endpoint> {
        online(i)
            .map(|r| Endpoint::new(r.host.clone(), r.port))
            .collect()
    };
    if let Err(detail) = wait_caught_up(node, local, deadline, settings.poll, all_online).await {
        return roll_back(local, started, "catch-up", detail).await;
    }

    let failover_started = Instant::now();
    let mut asked = None;
    let mut errors = Vec::new();
    for sentinel in &sentinels {
        let result = async {
            let client = node.dialer.sentinel(sentinel).await?;
            let r = client
                .failover(name)
                .await
                .map_err(SidecarError::valkey(format!(
                    "SENTINEL FAILOVER on {sentinel}"
                )));
            client.close().await;
            r
        }
        .await;
        match result {
            Ok(()) => {
                asked = Some(sentinel.clone());
                break;
            }
            Err(SidecarError::Valkey { source, .. }) if source.reason() == "FailoverInProgress" => {
                asked = Some(sentinel.clone());
                break;
            }
            Err(e) => errors.push(e.to_string()),
        }
    }
    let Some(asked) = asked else {
        return roll_back(
            local,
            started,
            "sentinel-failover",
            format!(
                "no Sentinel accepted SENTINEL FAILOVER: {}",
                errors.join("; ")
            ),
        )
        .await;
    };
    tracing::info!(step = "sentinel-failover", sentinel = %asked, "SENTINEL FAILOVER accepted");

    let new_master = loop {
        let answers = ask_sentinels(&node.dialer, &sentinels, name).await;
        if let Some(named) = decide::sentinel_majority(&answers, sentinels.len())
            && named != *node.me()
        {
            break named;
        }
        if Instant::now() >= deadline {
            return roll_back(
                local,
                started,
                "sentinel-majority",
                "no Sentinel majority named a new master before the pause deadline".to_owned(),
            )
            .await;
        }
        tokio::time::sleep(settings.poll.max(Duration::from_millis(50))).await;
    };
    tracing::info!(
        step = "sentinel-majority",
        new_master = %new_master,
        elapsed_ms = ms(failover_started.elapsed()),
        "Sentinel majority names the new master"
    );
    demote_and_unpause(node, local, &new_master, started).await
}

/// `REPLICAOF <new>` while paused, then unpause. REPLICAOF is not a write, so it runs during the
/// pause, and postponed writes meet a replica.
async fn demote_and_unpause(
    node: &Node,
    local: &ValkeyClient,
    new_master: &Endpoint,
    started: Instant,
) -> Result<HandoverOutcome> {
    if let Err(e) = local.replicaof(&new_master.host, new_master.port).await {
        return roll_back(local, started, "demote", e.to_string()).await;
    }
    tracing::info!(step = "demote", new_master = %new_master, "local server is a replica of the new master");
    if let Some(role) = decide::file_role(
        &decide::LiveRole::ReplicaOf(new_master.clone()),
        false,
        node.me().port,
    ) && let Err(e) = node.keep_role_line(&role)
    {
        tracing::error!(error = %e, "could not rewrite the effective config");
    }
    let write_pause = unpause(local, started).await;
    if let Err(e) = node
        .pods
        .set_role_label(&node.my_pod, InstanceRole::Replica)
        .await
    {
        tracing::warn!(error = %e, "could not label this pod replica");
    }
    Ok(HandoverOutcome::HandedOver {
        new_master: new_master.clone(),
        write_pause,
    })
}

async fn without_sentinel(
    node: &Node,
    local: &ValkeyClient,
    settings: &HandoverSettings,
) -> Result<HandoverOutcome> {
    let (started, deadline) = pause(local, settings).await?;
    // The most caught-up online replica (first listed on a tie), chosen once, under the pause.
    let paused = match info(local).await {
        Ok(i) => i,
        Err(e) => return roll_back(local, started, "choose", e.to_string()).await,
    };
    let Some(target) = online(&paused)
        .max_by_key(|r| (r.offset, std::cmp::Reverse(r.port)))
        .map(|r| Endpoint::new(r.host.clone(), r.port))
    else {
        return roll_back(local, started, "choose", "no online replica".to_owned()).await;
    };
    tracing::info!(step = "choose", target = %target, "most caught-up replica chosen");
    let only_target = {
        let target = target.clone();
        move |_: &ReplicationInfo| vec![target.clone()]
    };
    let caught_up = match wait_caught_up(node, local, deadline, settings.poll, only_target).await {
        Ok(i) => i,
        Err(detail) => return roll_back(local, started, "catch-up", detail).await,
    };

    let promoted = async {
        let client = node.dialer.valkey(&target).await?;
        client
            .replicaof_no_one()
            .await
            .map_err(SidecarError::valkey(format!(
                "REPLICAOF NO ONE on {target}"
            )))?;
        let role = client
            .info_replication()
            .await
            .map_err(SidecarError::valkey(format!(
                "INFO replication on {target}"
            )))?
            .role;
        client.close().await;
        Ok::<_, SidecarError>(role)
    }
    .await;
    match promoted {
        Ok(ReplicationRole::Master) => {
            tracing::info!(step = "promote", target = %target, "replica promoted");
        }
        Ok(ReplicationRole::Replica) => {
            return roll_back(
                local,
                started,
                "promote",
                format!("{target} is still a replica"),
            )
            .await;
        }
        // REPLICAOF NO ONE may have run: two masters until the operator resolves it, but the
        // old one keeps every write it acknowledged, so nothing acknowledged is lost.
        Err(e) => return roll_back(local, started, "promote", e.to_string()).await,
    }

    let outcome = demote_and_unpause(node, local, &target, started).await?;
    // The other replicas follow the new master (they would otherwise chain through this one,
    // which is about to stop).
    for other in online(&caught_up)
        .map(|r| Endpoint::new(r.host.clone(), r.port))
        .filter(|ep| *ep != target)
    {
        let result = async {
            let client = node.dialer.valkey(&other).await?;
            client
                .replicaof(&target.host, target.port)
                .await
                .map_err(SidecarError::valkey(format!("REPLICAOF on {other}")))
        }
        .await;
        match result {
            Ok(()) => {
                tracing::info!(step = "repoint", replica = %other, new_master = %target, "replica follows the new master")
            }
            Err(e) => {
                tracing::warn!(step = "repoint", replica = %other, error = %e, "could not repoint replica")
            }
        }
    }
    // The operator adopts the promoted pod as its recorded master (ADR 0005).
    match node.topology.pod_of(&target) {
        Some(pod) => {
            if let Err(e) = node.pods.set_role_label(&pod, InstanceRole::Master).await {
                tracing::warn!(pod, error = %e, "could not label the promoted pod master");
            }
        }
        None => {
            tracing::warn!(target = %target, "promoted replica is not one of this cluster's pods")
        }
    }
    Ok(outcome)
}
