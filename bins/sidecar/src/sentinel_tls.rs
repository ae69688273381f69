//! A Sentinel pod's part in a certificate rotation (ADR 0053). Sentinel has no command that
//! reloads TLS files, but from Valkey 9.1 `tls-auto-reload-interval` makes it re-read them when
//! they change. It would re-read whatever the kubelet writes into the Secret volume, unchecked:
//! a certificate that does not name the pod would lock out every client that verifies it (the
//! data pods' fencers among them). So the Sentinel reads its files from an in-memory copy
//! (`vko_render::TLS_ACTIVE_DIR`): the init container copies the Secret volume's files there at
//! start, and afterwards `vko-sidecar sentinel-tls-reload` copies a new certificate and key only
//! when they pass the check a data pod's sidecar makes before its server reloads
//! (`vko_valkey::certificate::reload_plan`: same CA as the pod's template, issued by it, valid,
//! naming this pod), then proves with a handshake that the Sentinel serves them. The CA file is
//! never replaced: a new CA rolls the pods.

use std::path::{Path, PathBuf};
use std::time::Duration;

use vko_valkey::certificate::{ReloadPlan, UnixTime, leaf_fingerprint, reload_plan};

use crate::conf::write_private_bytes;
use crate::error::{Result, SidecarError};
use crate::tls_reload::{Outcome, TLS_POLL, log_change};

/// Bound on one handshake with the own Sentinel.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// After writing new files: how long to wait for the Sentinel to serve them (it looks every
/// `vko_render::SENTINEL_TLS_RELOAD_INTERVAL_SECONDS`), and how often to look.
const TAKE_WAIT: Duration = Duration::from_secs(6);
const TAKE_POLL: Duration = Duration::from_millis(500);

/// The TLS files as the Secret volume holds them, and where the Sentinel reads its own.
#[derive(Debug, Clone)]
pub struct MaterialPaths {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The Sentinel's copy: `ca.crt`, `tls.crt` and `tls.key` in this directory.
    pub active_dir: PathBuf,
}

impl MaterialPaths {
    fn active(&self, file: &str) -> PathBuf {
        self.active_dir.join(file)
    }
}

/// What the reload loop needs besides the files.
#[derive(Debug, Clone)]
pub struct SentinelTlsWatch {
    pub paths: MaterialPaths,
    /// The CA fingerprint the pod's template carries (`VKO_TLS_MATERIAL_HASH`); `None`: the pod
    /// was created without one, so nothing is reloaded.
    pub trust: Option<String>,
    /// The pod's own host name, which a certificate must carry.
    pub host: String,
    /// Where the own Sentinel's TLS port answers (`127.0.0.1:<port>`).
    pub local: String,
}

/// The init container's copy of the Secret volume's three files, before the Sentinel starts.
pub fn copy_initial_material(paths: &MaterialPaths) -> Result<()> {
    for (from, to) in [
        (&paths.ca, "ca.crt"),
        (&paths.key, "tls.key"),
        (&paths.cert, "tls.crt"),
    ] {
        let bytes = read(from)?;
        write_private_bytes(&paths.active(to), &bytes)?;
    }
    tracing::info!(dir = %paths.active_dir.display(), "TLS files copied for Sentinel");
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(SidecarError::file(path))
}

/// What the loop remembers between looks.
#[derive(Debug, Default)]
struct State {
    /// The fingerprint the Sentinel served at the last handshake.
    served: Option<String>,
    /// The certificate and key last written into the Sentinel's files.
    written: Option<(Vec<u8>, Vec<u8>)>,
}

/// Watches the Secret volume for good.
pub async fn reload_loop(watch: SentinelTlsWatch) {
    let mut state = State::default();
    let mut last = None;
    loop {
        let result = look(&watch, &mut state).await.map_err(|e| e.to_string());
        log_change("Sentinel", result, &mut last);
        tokio::time::sleep(TLS_POLL).await;
    }
}

async fn look(watch: &SentinelTlsWatch, state: &mut State) -> Result<Outcome> {
    let paths = &watch.paths;
    let ca = read(&paths.ca)?;
    let cert = read(&paths.cert)?;
    let same_trust = watch.trust.as_deref() == Some(&vko_render::tls_trust_fingerprint(&ca));
    loop {
        match reload_plan(
            same_trust,
            &ca,
            &cert,
            &watch.host,
            state.served.as_deref(),
            UnixTime::now(),
        ) {
            ReloadPlan::Measure => state.served = Some(handshake(watch).await?),
            ReloadPlan::Current => return Ok(Outcome::Current),
            ReloadPlan::AwaitRoll => return Ok(Outcome::AwaitRoll),
            ReloadPlan::Refuse(problem) => return Ok(Outcome::Refused(problem)),
            ReloadPlan::Reload => return reload(watch, state, cert).await,
        }
    }
}

/// Writes the key, then the certificate (a Sentinel that reads between the two refuses the
/// mismatched pair, keeps its current one and re-reads on the second change), unless these very
/// files were written already, then waits for the Sentinel to serve them.
async fn reload(watch: &SentinelTlsWatch, state: &mut State, cert: Vec<u8>) -> Result<Outcome> {
    let paths = &watch.paths;
    let key = read(&paths.key)?;
    let wanted = leaf_fingerprint(&cert).map_err(SidecarError::Config)?;
    let pair = (cert, key);
    if state.written.as_ref() != Some(&pair) {
        write_private_bytes(&paths.active("tls.key"), &pair.1)?;
        write_private_bytes(&paths.active("tls.crt"), &pair.0)?;
        state.written = Some(pair);
        let deadline = tokio::time::Instant::now() + TAKE_WAIT;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(TAKE_POLL).await;
            // Measured again, not assumed: what the Sentinel serves now.
            let now = handshake(watch).await?;
            state.served = Some(now.clone());
            if now == wanted {
                return Ok(Outcome::Reloaded(now));
            }
        }
    } else {
        state.served = Some(handshake(watch).await?);
    }
    match state.served.clone() {
        Some(served) if served == wanted => Ok(Outcome::Reloaded(served)),
        Some(served) => Ok(Outcome::NotTaken(served)),
        None => Err(SidecarError::Config(
            "no handshake with the own Sentinel".to_owned(),
        )),
    }
}

/// The fingerprint of the certificate the own Sentinel serves, verified against the CA the
/// Sentinel was started with (the copy) for the pod's own name.
async fn handshake(watch: &SentinelTlsWatch) -> Result<String> {
    let ca = read(&watch.paths.active("ca.crt"))?;
    vko_valkey::served::served_certificate(&watch.local, &watch.host, &ca, HANDSHAKE_TIMEOUT)
        .await
        .map_err(SidecarError::valkey(format!(
            "TLS handshake with {}",
            watch.local
        )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn paths(dir: &Path) -> MaterialPaths {
        let secret = dir.join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        let active = dir.join("active");
        std::fs::create_dir_all(&active).unwrap();
        for (file, text) in [("ca.crt", "ca"), ("tls.crt", "cert"), ("tls.key", "key")] {
            std::fs::write(secret.join(file), text).unwrap();
        }
        MaterialPaths {
            ca: secret.join("ca.crt"),
            cert: secret.join("tls.crt"),
            key: secret.join("tls.key"),
            active_dir: active,
        }
    }

    /// A fresh directory of this test's own.
    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("vko-sentinel-tls-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn the_initial_copy_holds_the_three_files_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("copy");
        let paths = paths(&dir);
        copy_initial_material(&paths).unwrap();
        for (file, text) in [("ca.crt", "ca"), ("tls.crt", "cert"), ("tls.key", "key")] {
            let path = paths.active(file);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{file}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_secret_file_is_an_error_naming_it() {
        let dir = scratch("missing");
        let paths = paths(&dir);
        std::fs::remove_file(&paths.key).unwrap();
        let error = copy_initial_material(&paths).unwrap_err().to_string();
        assert!(error.contains("tls.key"), "{error}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
