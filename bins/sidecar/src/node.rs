//! `Node`: this pod's server, its peers, its authority and its files, shared by `init`, `run`
//! and the handover.

use std::path::PathBuf;
use std::sync::Arc;

use vko_authority::SentinelWord;
use vko_valkey::{SentinelClient, ValkeyClient};

use crate::conf::{self, RoleLine};
use crate::decide::{self, Authority};
use crate::error::{Result, SidecarError};
use crate::lease_api::LeaseApi;
use crate::pod_api::PodApi;
use crate::topology::{Endpoint, Topology, ask_sentinels};
use vko_valkey::Dialer;

pub struct Node {
    pub topology: Topology,
    pub dialer: Dialer,
    pub pods: Arc<dyn PodApi>,
    /// The master Lease without Sentinel (ADR 0022); `None` with Sentinel and in the init
    /// container.
    pub lease: Option<Arc<dyn LeaseApi>>,
    /// This pod's name (label patches, drain check).
    pub my_pod: String,
    /// The effective config the sidecar keeps true (ADR 0005).
    pub active_config: PathBuf,
}

impl Node {
    pub fn me(&self) -> &Endpoint {
        &self.topology.me
    }

    /// The pod's own valkey-server, its certificate checked against the pod's FQDN.
    pub async fn local(&self) -> Result<ValkeyClient> {
        let local = &self.topology.local;
        self.dialer
            .valkey_via(local, &self.topology.me.host)
            .await
            .map_err(SidecarError::valkey(format!("connect to {local}")))
    }

    /// `call` on the Sentinel at `sentinel`, over a connection of its own; the error names the
    /// Sentinel and `what`.
    pub async fn on_sentinel<T>(
        &self,
        sentinel: &Endpoint,
        what: &str,
        call: impl AsyncFnOnce(&SentinelClient) -> vko_valkey::Result<T>,
    ) -> Result<T> {
        let client = self
            .dialer
            .sentinel(sentinel)
            .await
            .map_err(SidecarError::valkey(format!(
                "connect to sentinel {sentinel}"
            )))?;
        let result = call(&client)
            .await
            .map_err(SidecarError::valkey(format!("{what} on {sentinel}")));
        client.close().await;
        result
    }

    /// No Sentinel and no replica config: one pod, nothing to replicate or guard.
    pub fn standalone(&self) -> Result<bool> {
        Ok(!self.topology.sentinel_enabled()
            && conf::read_optional(&self.topology.replica_config)?.is_none())
    }

    /// The master the Sentinel majority names (`None` without Sentinel or without a majority).
    pub async fn sentinel_master(&self) -> Option<Endpoint> {
        let name = self.topology.monitor.as_ref()?;
        let sentinels = self.topology.sentinels().await;
        let answers = ask_sentinels(&self.dialer, &sentinels, name).await;
        decide::sentinel_master(&answers, sentinels.len())
    }

    /// What one round of Sentinel answers says for the label rule (`decide::sentinel_word`);
    /// `NoMajority` without Sentinel's monitor name.
    pub async fn sentinel_word(&self) -> SentinelWord<Endpoint> {
        let Some(name) = self.topology.monitor.as_ref() else {
            return SentinelWord::NoMajority;
        };
        let sentinels = self.topology.sentinels().await;
        let answers = ask_sentinels(&self.dialer, &sentinels, name).await;
        decide::sentinel_word(self.me(), &answers, sentinels.len())
    }

    /// ADR 0005's authority: Sentinel's majority, or the operator's record without Sentinel.
    pub async fn authority(&self) -> Result<Authority> {
        if self.topology.sentinel_enabled() {
            return Ok(match self.sentinel_master().await {
                Some(master) => Authority::Names(master),
                None => Authority::NoAnswer,
            });
        }
        Ok(match conf::read_optional(&self.topology.replica_config)? {
            None => Authority::Standalone,
            Some(text) => match conf::recorded_master(&text) {
                Some(master) => Authority::Names(master),
                None => Authority::NoAnswer,
            },
        })
    }

    /// Rewrite the role line of the effective config, only when it changes. Returns whether it
    /// wrote.
    pub fn keep_role_line(&self, role: &RoleLine) -> Result<bool> {
        let path = &self.active_config;
        let current = std::fs::read_to_string(path).map_err(SidecarError::file(path))?;
        let wanted = conf::with_role_line(&current, role);
        if wanted == current {
            return Ok(false);
        }
        conf::write_private(path, &wanted)?;
        tracing::info!(path = %path.display(), role = ?role, "effective config role line rewritten");
        Ok(true)
    }
}
