//! `vko-sidecar init`: the data pod's init container. Decides the first role line (ADR 0005)
//! and writes the effective config.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::conf::{self, Identity, RoleLine};
use crate::decide::{self, Authority};
use crate::error::{Result, SidecarError};
use crate::node::Node;
use crate::topology::probe_all;

#[derive(Debug, Clone)]
pub struct InitSettings {
    pub master_template: PathBuf,
    pub data_dir: PathBuf,
    /// Rounds of asking the authority and the peers before settling for the hold.
    pub attempts: u32,
    pub retry_delay: Duration,
}

/// The data directory must be writable (a read-only volume would make the server fail later,
/// less clearly); and whether it holds a dataset is logged as evidence.
fn check_data_dir(dir: &Path) -> Result<()> {
    let probe = dir.join(".vko-write-check");
    std::fs::write(&probe, b"ok").map_err(SidecarError::file(&probe))?;
    std::fs::remove_file(&probe).map_err(SidecarError::file(&probe))?;
    let dataset: Vec<&str> = ["dump.rdb", "appendonlydir", "appendonly.aof"]
        .into_iter()
        .filter(|name| dir.join(name).exists())
        .collect();
    tracing::info!(data_dir = %dir.display(), ?dataset, "data directory writable");
    Ok(())
}

/// Decide the role line, with bounded retries: a hold is retried (the authority or a peer may
/// be starting), anything else is final. After the last round the hold is written and the
/// sidecar's loop takes over.
pub async fn decide_role(node: &Node, settings: &InitSettings) -> Result<RoleLine> {
    if node.standalone()? {
        tracing::info!("single pod without Sentinel: master config");
        return Ok(RoleLine::Master);
    }
    let mut attempt = 0;
    loop {
        attempt += 1;
        let authority = node.authority().await?;
        let peers = match &authority {
            // Only the authority naming this pod needs the peers' evidence.
            Authority::Names(master) if master == node.me() => {
                let peers = node.topology.peers().await;
                probe_all(&node.dialer, &peers).await
            }
            _ => Vec::new(),
        };
        let role = decide::boot_role(node.me(), &authority, &peers);
        tracing::info!(attempt, ?authority, peers = peers.len(), role = ?role, "boot role decided");
        if !matches!(role, RoleLine::Hold { .. }) || attempt >= settings.attempts {
            return Ok(role);
        }
        tokio::time::sleep(settings.retry_delay).await;
    }
}

/// Write the effective config for `role`.
pub fn write_active_config(
    node: &Node,
    settings: &InitSettings,
    password: Option<&str>,
    role: &RoleLine,
) -> Result<()> {
    // The replica template when there is one and this pod starts as a replica; the two differ
    // only in the replicaof line, which is replaced anyway.
    let replica = match role {
        RoleLine::Master => None,
        RoleLine::ReplicaOf(_) | RoleLine::Hold { .. } => {
            conf::read_optional(&node.topology.replica_config)?
        }
    };
    let template = match replica {
        Some(text) => text,
        None => std::fs::read_to_string(&settings.master_template)
            .map_err(SidecarError::file(&settings.master_template))?,
    };
    let me = Identity {
        announce_host: &node.me().host,
        announce_port: node.me().port,
        password,
    };
    conf::write_private(
        &node.active_config,
        &conf::active_config(&template, &me, role),
    )
}

pub async fn init(
    node: &Node,
    settings: &InitSettings,
    password: Option<&str>,
) -> Result<RoleLine> {
    check_data_dir(&settings.data_dir)?;
    let role = decide_role(node, settings).await?;
    write_active_config(node, settings, password, &role)?;
    tracing::info!(output = %node.active_config.display(), role = ?role, "effective config written");
    Ok(role)
}
