//! A data pod's part in a password rotation (ADR 0035). The kubelet rewrites the pod's password
//! file when the auth Secret changes; on seeing a new, usable password there the sidecar makes
//! its own server accept it next to the old one (`ACL SETUSER default >new`), and every Sentinel
//! too, writes it into the effective config (a restarted `valkey` container starts with it), the
//! probes' copy and the exporter's password map, dials with it from then on (the old one kept as
//! the fallback), and moves `masterauth` to it once its master accepts it. It never removes a
//! password: the operator retires the old one once every pod accepts the new one, every
//! `masterauth` moved and the grace period is over.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conf;
use crate::error::{Result, SidecarError};
use crate::node::Node;

/// How often the password file is read (a stat and a small read).
pub const PASSWORD_POLL: Duration = Duration::from_secs(1);
/// Bound on asking the exporter to reload its password map.
const EXPORTER_RELOAD_TIMEOUT: Duration = Duration::from_secs(2);

/// The password in `path` (a Secret volume's file): its exact bytes, refused when
/// `vko_api::usable_password` refuses them (never "no password").
pub fn read_password_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(SidecarError::file(path))?;
    vko_api::usable_password(&bytes)
        .map(str::to_owned)
        .map_err(|e| {
            SidecarError::Config(format!(
                "{} (the auth Secret's password): {e}; refusing to run without it",
                path.display()
            ))
        })
}

/// redis_exporter's password map, kept true to the password.
#[derive(Debug, Clone)]
pub struct ExporterMap {
    pub path: PathBuf,
    /// The exporter's `REDIS_ADDR`, the map's only key.
    pub address: String,
    /// The exporter's port on this pod, for `GET /-/reload`.
    pub port: u16,
}

/// What the rotation watch needs.
#[derive(Debug, Clone)]
pub struct PasswordWatch {
    pub file: PathBuf,
    /// Whether the Sentinels require a password (they are given the new one too).
    pub sentinel_auth: bool,
    pub exporter: Option<ExporterMap>,
}

/// Watches the password file for good.
pub async fn password_loop(node: Arc<Node>, watch: PasswordWatch) {
    let mut sentinels_pending = false;
    let mut reload_pending = false;
    let mut masterauth_pending = false;
    let mut last_error: Option<String> = None;
    loop {
        tokio::time::sleep(PASSWORD_POLL).await;
        let result = async {
            let password = read_password_file(&watch.file)?;
            let changed = node.dialer.password.current().as_deref() != Some(password.as_str());
            if changed {
                adopt(&node, &watch, &password).await?;
                sentinels_pending = watch.sentinel_auth && node.topology.sentinel_enabled();
                reload_pending = watch.exporter.is_some();
                masterauth_pending = true;
            }
            if masterauth_pending {
                masterauth_pending = !move_masterauth(&node, &password).await?;
            }
            if sentinels_pending {
                sentinels_pending = !add_to_sentinels(&node, &password).await;
            }
            if reload_pending && let Some(exporter) = &watch.exporter {
                reload_exporter(exporter.port).await.map_err(|e| {
                    SidecarError::Config(format!(
                        "the exporter did not reload its password map: {e}"
                    ))
                })?;
                reload_pending = false;
            }
            Ok::<(), SidecarError>(())
        }
        .await;
        match result {
            Ok(()) => last_error = None,
            Err(e) => {
                let text = e.to_string();
                if last_error.as_deref() != Some(text.as_str()) {
                    tracing::warn!(error = %e, "password rotation: retrying");
                    last_error = Some(text);
                }
            }
        }
    }
}

/// The local server accepts `password` as well, the effective config and the exporter's map
/// hold it, and the dialer sends it first (the exporter's reload and the Sentinels follow).
async fn adopt(node: &Node, watch: &PasswordWatch, password: &str) -> Result<()> {
    let local = node.local().await?;
    let added = local
        .add_default_user_password(password)
        .await
        .map_err(SidecarError::valkey(
            "ACL SETUSER default >… on the local server",
        ));
    local.close().await;
    added?;
    let path = &node.active_config;
    let text = std::fs::read_to_string(path).map_err(SidecarError::file(path))?;
    conf::write_private(path, &conf::with_password(&text, password))?;
    conf::write_private(&conf::probe_password_path(path), password)?;
    if let Some(exporter) = &watch.exporter {
        // Reloaded by the loop, until the exporter answers.
        crate::init::write_exporter_passwords(&exporter.path, &exporter.address, Some(password))?;
    }
    node.dialer.password.rotate_to(password.to_owned());
    tracing::info!(
        "password rotation: the local server accepts the new password; dialling with it"
    );
    Ok(())
}

/// The local server authenticates to its master with `password` (`CONFIG SET masterauth`)
/// once that master accepts it (a master sets it for when it becomes a replica). Whether it is
/// done; the operator retires the old password only after every data pod's `masterauth` moved,
/// which is how it knows every sidecar, and so every probe, uses the new one.
async fn move_masterauth(node: &Node, password: &str) -> Result<bool> {
    let local = node.local().await?;
    let moved = async {
        let replication = local
            .info_replication()
            .await
            .map_err(SidecarError::valkey("INFO replication on the local server"))?;
        if let Some(upstream) = &replication.upstream {
            let at = vko_valkey::switchover::Address::new(
                upstream.master_host.clone(),
                upstream.master_port,
            );
            match node.dialer.valkey_as(&at, password).await {
                Ok(client) => client.close().await,
                Err(e) => {
                    tracing::debug!(%at, error = %e, "the master does not accept the new password yet");
                    return Ok(false);
                }
            }
        }
        local
            .config_set("masterauth", password)
            .await
            .map_err(SidecarError::valkey("CONFIG SET masterauth on the local server"))?;
        tracing::info!("password rotation: masterauth moved to the new password");
        Ok(true)
    }
    .await;
    local.close().await;
    moved
}

/// Every Sentinel accepts `password` as well; whether all of them answered.
async fn add_to_sentinels(node: &Node, password: &str) -> bool {
    let mut all = true;
    for sentinel in node.topology.sentinels().await {
        let result = node
            .on_sentinel(&sentinel, "ACL SETUSER default >…", async |client| {
                client.add_default_user_password(password).await
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(%sentinel, error = %e, "password rotation: a Sentinel does not accept the new password yet");
            all = false;
        }
    }
    all
}

/// `GET /-/reload` on the pod's exporter: it re-reads its password map.
async fn reload_exporter(port: u16) -> std::io::Result<()> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /-/reload HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).await?;
        let status = reply.split(|b| *b == b'\n').next().unwrap_or_default();
        if status.windows(5).any(|w| w == b" 200 ") {
            Ok(())
        } else {
            Err(std::io::Error::other(format!(
                "reload answered {:?}",
                String::from_utf8_lossy(status).trim_end()
            )))
        }
    };
    tokio::time::timeout(EXPORTER_RELOAD_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::other("reload timed out"))?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_file_is_read_exactly_and_an_unusable_one_is_refused() {
        let dir = std::env::temp_dir().join(format!("vko-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("password");
        std::fs::write(&file, "s3 cret\n").unwrap();
        assert_eq!(read_password_file(&file).unwrap(), "s3 cret\n");
        std::fs::write(&file, " \n").unwrap();
        let error = read_password_file(&file).unwrap_err().to_string();
        assert!(error.contains("holds only whitespace"), "{error}");
        assert!(read_password_file(&dir.join("missing")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn the_exporter_is_asked_to_reload_and_a_refusal_is_an_error() {
        for (answer, ok) in [
            ("HTTP/1.1 200 OK\r\n\r\nok", true),
            (
                "HTTP/1.1 400 Bad Request\r\n\r\nThere is no pwd file specified",
                false,
            ),
        ] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = tokio::spawn(async move {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = vec![0u8; 256];
                let n = stream.read(&mut request).await.unwrap();
                stream.write_all(answer.as_bytes()).await.unwrap();
                String::from_utf8_lossy(&request[..n]).into_owned()
            });
            let result = reload_exporter(port).await;
            assert_eq!(result.is_ok(), ok, "{answer}: {result:?}");
            assert!(server.await.unwrap().starts_with("GET /-/reload "));
        }
    }
}
