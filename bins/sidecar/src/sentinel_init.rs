//! `vko-sidecar sentinel-init`: the Sentinel pod's init container. Copies the template into the
//! writable directory, points the monitor at the master the other Sentinels report (so a
//! restarted Sentinel never resurrects a stale master), and adds identity and credentials.

use std::path::PathBuf;
use std::time::Duration;

use crate::conf::{self, SentinelIdentity};
use crate::decide;
use crate::error::{Result, SidecarError};
use crate::topology::{Endpoint, ask_sentinels};
use vko_valkey::Dialer;

#[derive(Debug, Clone)]
pub struct SentinelInit {
    pub template: PathBuf,
    pub output: PathBuf,
    pub monitor_name: String,
    pub me: Endpoint,
    /// The other Sentinels that exist (this one excluded).
    pub others: Vec<Endpoint>,
    pub password: Option<String>,
    pub sentinel_auth_disabled: bool,
    pub myid: String,
    pub attempts: u32,
    pub retry_delay: Duration,
}

/// Returns the master the monitor points at (`None`: the rendered seed kept).
pub async fn sentinel_init(dialer: &Dialer, s: &SentinelInit) -> Result<Option<Endpoint>> {
    let template = std::fs::read_to_string(&s.template).map_err(SidecarError::file(&s.template))?;
    let mut target = None;
    for attempt in 1..=s.attempts.max(1) {
        if s.others.is_empty() {
            break;
        }
        let answers = ask_sentinels(dialer, &s.others, &s.monitor_name).await;
        // The electorate: the others and this Sentinel (ADR 0014).
        target = decide::monitor_target(&answers, s.others.len() + 1);
        let answered = answers.iter().flatten().count();
        tracing::info!(attempt, asked = s.others.len(), answered, target = ?target, "asked the other Sentinels");
        if target.is_some() || attempt == s.attempts {
            break;
        }
        tokio::time::sleep(s.retry_delay).await;
    }
    if target.is_none() {
        tracing::info!(seed = ?conf::seeded_monitor(&template, &s.monitor_name), "no other Sentinel answered; keeping the rendered seed");
    }
    let me = SentinelIdentity {
        monitor_name: &s.monitor_name,
        announce_host: &s.me.host,
        announce_port: s.me.port,
        password: s.password.as_deref(),
        sentinel_auth_disabled: s.sentinel_auth_disabled,
        myid: &s.myid,
    };
    let text = conf::sentinel_config(&template, &me, target.as_ref()).map_err(|e| match e {
        SidecarError::Template { detail, .. } => SidecarError::Template {
            path: s.template.clone(),
            detail,
        },
        other => other,
    })?;
    conf::write_private(&s.output, &text)?;
    tracing::info!(output = %s.output.display(), "sentinel config written");
    Ok(target)
}
