//! The planned, lossless switchover of a master that is about to stop: the shared procedure of
//! [`vko_valkey::switchover`] (pause writes → replicas caught up → `SENTINEL FAILOVER` or
//! `REPLICAOF NO ONE` → `REPLICAOF <new>` here while paused → unpause), run from this pod with
//! its DNS names, followed by what only the pod does: its effective config and role labels.
//!
//! Rollback: whatever fails before the old master is a replica ends with `CLIENT UNPAUSE` and
//! an error; the pod then terminates and Sentinel (or the operator) handles the loss of the master.

use std::time::Duration;

use vko_authority::InstanceRole;
use vko_valkey::switchover::{self, Dial, Outcome, Promoter};
use vko_valkey::{SentinelClient, ValkeyClient};

use crate::decide;
use crate::error::{Result, SidecarError};
use crate::lease_api::{LeaseApi, Written};
use crate::node::Node;
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
}

impl Default for HandoverSettings {
    fn default() -> Self {
        let shared = switchover::Settings::default();
        HandoverSettings {
            pause: shared.pause,
            poll: shared.poll,
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

/// Hand the master role over if this server is the master.
pub async fn handover(node: &Node, settings: &HandoverSettings) -> Result<HandoverOutcome> {
    let local = node.local().await?;
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
                // A pod stopping hands over to any replica (a scale-down's switchover is the
                // operator's, before it removes pods).
                never_promote: Vec::new(),
            }
        }
        None => Promoter::Direct { target: None },
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
