//! A data pod's part in a certificate rotation (ADR 0038). The kubelet rewrites the pod's TLS
//! Secret volume when the Secret changes; the sidecar reads the files every few seconds and, when
//! they hold a certificate other than the one the server serves, under the CA the pod was created
//! for, and one that can serve this pod (`vko_valkey::certificate::reload_plan`), has the server
//! re-read its files in place (`CONFIG SET tls-cert-file … tls-key-file …`). It then proves the
//! reload took with a handshake of its own and records the served certificate's fingerprint on
//! the pod (`vko.gtrfc.com/tls-certificate`), which the operator compares with the Secret for
//! `TLSMaterialStale`. A new CA is not reloaded: the data template carries the CA's fingerprint,
//! so the operator rolls the pods onto it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use vko_valkey::certificate::{ReloadPlan, UnixTime, reload_plan};

use crate::error::{Result, SidecarError};
use crate::node::Node;

/// How often the TLS files are read (three small reads).
pub const TLS_POLL: Duration = Duration::from_secs(2);
/// Bound on one handshake with the own server.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the TLS watch needs.
#[derive(Debug, Clone)]
pub struct TlsWatch {
    pub ca: PathBuf,
    pub cert: PathBuf,
    /// The CA fingerprint the pod's template carries (`VKO_TLS_MATERIAL_HASH`,
    /// `vko_render::tls_trust_fingerprint`); `None`: the pod was created without one, and the
    /// sidecar cannot prove the files' CA is the one the server started with, so it reloads
    /// nothing.
    pub trust: Option<String>,
}

/// What one look at the files found, for the log (said once per change). Shared with the
/// Sentinel pods' reload (`crate::sentinel_tls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    Current,
    Reloaded(String),
    AwaitRoll,
    Refused(String),
    /// Sentinel only: the files were written and it still serves another certificate (it
    /// refuses a key that does not match the certificate, and says so in its log).
    NotTaken(String),
}

/// Logs a look's result when it differs from the previous one; `process` names what reloads
/// ("the server", "Sentinel").
pub(crate) fn log_change(
    process: &str,
    result: std::result::Result<Outcome, String>,
    last: &mut Option<std::result::Result<Outcome, String>>,
) {
    if last.as_ref() == Some(&result) {
        return;
    }
    match &result {
        Ok(Outcome::Current) => {}
        Ok(Outcome::Reloaded(fingerprint)) => tracing::info!(
            %fingerprint,
            "TLS: {process} re-read its certificate in place and serves the new one"
        ),
        Ok(Outcome::AwaitRoll) => tracing::info!(
            "TLS: the Secret carries another CA than this pod was created for; the operator \
             rolls the pod onto it (no reload in place)"
        ),
        Ok(Outcome::Refused(problem)) => tracing::warn!(
            %problem,
            "TLS: the new certificate cannot serve this pod; {process} keeps its current one"
        ),
        Ok(Outcome::NotTaken(served)) => tracing::warn!(
            %served,
            "TLS: the new certificate and key were written and {process} still serves another \
             certificate (see its log: a key that does not match is refused)"
        ),
        Err(error) => tracing::warn!(%error, "TLS reload: retrying"),
    }
    *last = Some(result);
}

/// Watches the TLS files for good.
pub async fn tls_loop(node: Arc<Node>, watch: TlsWatch) {
    let mut served: Option<String> = None;
    let mut annotated: Option<String> = None;
    let mut last = None;
    loop {
        let result = look(&node, &watch, &mut served, &mut annotated)
            .await
            .map_err(|e| e.to_string());
        log_change("the server", result, &mut last);
        tokio::time::sleep(TLS_POLL).await;
    }
}

async fn look(
    node: &Node,
    watch: &TlsWatch,
    served: &mut Option<String>,
    annotated: &mut Option<String>,
) -> Result<Outcome> {
    let read = |path: &PathBuf| std::fs::read(path).map_err(SidecarError::file(path));
    let ca = read(&watch.ca)?;
    let cert = read(&watch.cert)?;
    let same_trust = watch.trust.as_deref() == Some(&vko_render::tls_trust_fingerprint(&ca));
    let host = &node.topology.me.host;
    let mut outcome = Outcome::Current;
    loop {
        match reload_plan(
            same_trust,
            &ca,
            &cert,
            host,
            served.as_deref(),
            UnixTime::now(),
        ) {
            ReloadPlan::Measure => {
                *served = Some(handshake(node, &ca).await?);
            }
            ReloadPlan::Current => break,
            ReloadPlan::AwaitRoll => {
                outcome = Outcome::AwaitRoll;
                break;
            }
            ReloadPlan::Refuse(problem) => {
                outcome = Outcome::Refused(problem);
                break;
            }
            ReloadPlan::Reload => {
                let local = node.local().await?;
                let reloaded = local.reload_tls_files().await.map_err(SidecarError::valkey(
                    "CONFIG SET tls-cert-file tls-key-file on the local server",
                ));
                local.close().await;
                reloaded?;
                // Measured again, not assumed: what the server serves now.
                let now = handshake(node, &ca).await?;
                *served = Some(now.clone());
                if vko_valkey::certificate::leaf_fingerprint(&cert)
                    .ok()
                    .as_deref()
                    != Some(now.as_str())
                {
                    return Err(SidecarError::Config(format!(
                        "the server accepted the reload but serves certificate {now}, not the \
                         Secret's"
                    )));
                }
                outcome = Outcome::Reloaded(now);
                break;
            }
        }
    }
    if let Some(fingerprint) = served.as_deref()
        && annotated.as_deref() != Some(fingerprint)
    {
        node.pods
            .set_tls_certificate_annotation(&node.my_pod, fingerprint)
            .await?;
        *annotated = Some(fingerprint.to_owned());
    }
    Ok(outcome)
}

/// The fingerprint of the certificate the own server serves, verified against `ca` for the
/// pod's own name.
async fn handshake(node: &Node, ca: &[u8]) -> Result<String> {
    let local = &node.topology.local;
    let addr = format!("{}:{}", local.host, local.port);
    vko_valkey::served::served_certificate(&addr, &node.topology.me.host, ca, HANDSHAKE_TIMEOUT)
        .await
        .map_err(SidecarError::valkey(format!("TLS handshake with {addr}")))
}
