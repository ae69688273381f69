//! `vko-sidecar init`: the data pod's init container. Decides the first role line (ADR 0005)
//! and writes the effective config (and, with auth and metrics, redis_exporter's password map).

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
    )?;
    if let Some(password) = password {
        conf::write_private(&conf::probe_password_path(&node.active_config), password)?;
    }
    Ok(())
}

/// redis_exporter's password map (`--redis.password-file`): the password only under `address`,
/// the exporter's own `REDIS_ADDR`, so a `/scrape?target=` elsewhere is dialled without it.
pub fn exporter_password_map(address: &str, password: &str) -> Result<String> {
    serde_json::to_string(&std::collections::BTreeMap::from([(address, password)]))
        .map_err(|e| SidecarError::Config(format!("exporter password map: {e}")))
}

/// Write the exporter's password map to `path` (owner-only, like the effective config: the
/// exporter runs as the same uid). Auth is on whenever this is asked for, so no password is an
/// error, not an empty map.
pub fn write_exporter_passwords(path: &Path, address: &str, password: Option<&str>) -> Result<()> {
    let password = password.ok_or_else(|| {
        SidecarError::Config(format!(
            "--exporter-password-file needs the password file in {}",
            crate::cli::PASSWORD_FILE_ENV
        ))
    })?;
    if address.is_empty() {
        return Err(SidecarError::Config(
            "--exporter-password-file needs the exporter's address".into(),
        ));
    }
    conf::write_private(path, &exporter_password_map(address, password)?)?;
    tracing::info!(output = %path.display(), %address, "exporter password map written");
    Ok(())
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn exporter_password_map_has_only_the_own_address() {
        let map = exporter_password_map("redis://127.0.0.1:6379", "p\"w\\x").unwrap();
        assert_eq!(map, r#"{"redis://127.0.0.1:6379":"p\"w\\x"}"#);
        let parsed: std::collections::BTreeMap<String, String> =
            serde_json::from_str(&map).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed["redis://127.0.0.1:6379"], "p\"w\\x");
    }

    #[test]
    fn exporter_password_file_is_owner_only_and_needs_a_password() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("vko-sidecar-exporter-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("passwords.json");
        assert!(write_exporter_passwords(&path, "redis://127.0.0.1:6379", None).is_err());
        assert!(write_exporter_passwords(&path, "", Some("x")).is_err());
        assert!(!path.exists());
        write_exporter_passwords(&path, "rediss://a-0.h.ns.svc.cluster.local:6379", Some("x"))
            .unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(mode, 0o600);
        assert_eq!(text, r#"{"rediss://a-0.h.ns.svc.cluster.local:6379":"x"}"#);
    }
}
