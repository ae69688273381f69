//! The one way to dial a server of a cluster, shared by the operator, the sidecar and the
//! observer: passwords for either tier, TLS material (in memory, or files re-read on every dial
//! so that a rotated Secret mounted in a pod is picked up), the timeouts, and a hook that turns an
//! announced host name into the address to connect to (the operator maps a pod's FQDN to its pod
//! IP; a pod resolves names itself). The certificate is always verified against the announced
//! name.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::client::{ConnectOptions, SentinelClient, TlsOptions, ValkeyClient};
use crate::error::{Error, Result};
use crate::switchover::{Address, Dial};

/// TLS client files, re-read on every dial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// Where a tier's TLS material comes from.
#[derive(Debug, Clone)]
pub enum TlsMaterial {
    /// PEM in memory (its `server_name` is replaced by the announced name on every dial).
    Pem(TlsOptions),
    /// Files, read on every dial.
    Files(TlsFiles),
}

/// Announced host name → the host or IP to connect to.
pub type Resolve = Arc<dyn Fn(&str) -> Result<String> + Send + Sync>;

/// How to reach the data pods and the Sentinels of one cluster.
#[derive(Clone)]
pub struct Dialer {
    pub password: Option<String>,
    /// Sent to Sentinel; `None` when its auth is disabled.
    pub sentinel_password: Option<String>,
    pub tls: Option<TlsMaterial>,
    pub sentinel_tls: Option<TlsMaterial>,
    /// Bound on TCP connect + TLS handshake + AUTH.
    pub connect_timeout: Duration,
    /// Bound on each command.
    pub command_timeout: Duration,
    /// `None`: the announced name is dialled as it is.
    pub resolve: Option<Resolve>,
}

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted = |p: &Option<String>| p.as_ref().map(|_| "<redacted>");
        f.debug_struct("Dialer")
            .field("password", &redacted(&self.password))
            .field("sentinel_password", &redacted(&self.sentinel_password))
            .field("tls", &self.tls)
            .field("sentinel_tls", &self.sentinel_tls)
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .field("resolve", &self.resolve.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

impl Dialer {
    /// `password` for both tiers, no TLS, 1.5 s to connect and 2 s a command, names dialled as
    /// they are.
    pub fn new(password: Option<String>) -> Dialer {
        Dialer {
            sentinel_password: password.clone(),
            password,
            tls: None,
            sentinel_tls: None,
            connect_timeout: Duration::from_millis(1500),
            command_timeout: Duration::from_secs(2),
            resolve: None,
        }
    }

    /// The same TLS material for both tiers.
    #[must_use]
    pub fn with_tls(mut self, tls: Option<TlsMaterial>) -> Dialer {
        self.sentinel_tls.clone_from(&tls);
        self.tls = tls;
        self
    }

    fn address_of(&self, host: &str) -> Result<String> {
        match &self.resolve {
            Some(resolve) => resolve(host),
            None => Ok(host.to_owned()),
        }
    }

    /// The options for one attempt: `dial` connected to, the certificate verified against
    /// `tls_name`, the client certificate presented only with `client_cert`.
    pub fn options(
        &self,
        dial: &Address,
        tls_name: &str,
        tls: Option<&TlsMaterial>,
        password: Option<&String>,
        client_cert: bool,
    ) -> Result<ConnectOptions> {
        let mut options = ConnectOptions::new(dial.host.clone(), dial.port);
        options.connect_timeout = self.connect_timeout;
        options.command_timeout = self.command_timeout;
        options.password = password.cloned();
        options.tls = tls.map(|tls| tls_options(tls, client_cert)).transpose()?;
        if let Some(tls) = &mut options.tls {
            tls.server_name = Some(tls_name.to_owned());
        }
        Ok(options)
    }

    /// A valkey-server at its announced address.
    pub async fn valkey(&self, at: &Address) -> Result<ValkeyClient> {
        let dial = Address::new(self.address_of(&at.host)?, at.port);
        self.valkey_via(&dial, &at.host).await
    }

    /// A valkey-server dialled at `dial`, its certificate verified against `tls_name` (a pod's
    /// own server through 127.0.0.1).
    ///
    /// The servers run `tls-auth-clients optional`, yet verify a certificate that is presented;
    /// a pod certificate without the `clientAuth` usage (a user-provided Secret) is refused
    /// then, so the handshake is retried once without presenting it.
    pub async fn valkey_via(&self, dial: &Address, tls_name: &str) -> Result<ValkeyClient> {
        let tls = self.tls.as_ref();
        let password = self.password.as_ref();
        let options = self.options(dial, tls_name, tls, password, true)?;
        match ValkeyClient::connect(&options).await {
            Err(error) if error.reason() == "Tls" && presents_certificate(&options) => {
                tracing::debug!(%dial, %error, "TLS refused with the client certificate; retrying without");
                let options = self.options(dial, tls_name, tls, password, false)?;
                ValkeyClient::connect(&options).await
            }
            result => result,
        }
    }

    /// A Sentinel at its announced address. With the password first; a Sentinel whose own auth
    /// is disabled refuses AUTH ("called without any password configured"), so then without. A
    /// refused client certificate is retried without it, as for [`Dialer::valkey_via`].
    pub async fn sentinel(&self, at: &Address) -> Result<SentinelClient> {
        let dial = Address::new(self.address_of(&at.host)?, at.port);
        let tls = self.sentinel_tls.as_ref();
        let has_password = self.sentinel_password.is_some();
        let has_cert = tls.is_some_and(has_client_certificate);
        let mut last = None;
        for (password, cert) in [(true, true), (false, true), (true, false), (false, false)] {
            if (!password && !has_password) || (!cert && !has_cert) {
                continue;
            }
            let secret = self.sentinel_password.as_ref().filter(|_| password);
            let options = self.options(&dial, &at.host, tls, secret, cert)?;
            match SentinelClient::connect(&options).await {
                Ok(client) => return Ok(client),
                Err(error) => {
                    let retry = refused_auth(&error) || error.reason() == "Tls";
                    last = Some(error);
                    if !retry {
                        break;
                    }
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidOptions("no connection attempt".into())))
    }
}

impl Dial for Dialer {
    async fn valkey(&self, at: &Address) -> Result<ValkeyClient> {
        Dialer::valkey(self, at).await
    }

    async fn sentinel(&self, at: &Address) -> Result<SentinelClient> {
        Dialer::sentinel(self, at).await
    }
}

fn presents_certificate(options: &ConnectOptions) -> bool {
    options
        .tls
        .as_ref()
        .is_some_and(|t| t.client_cert_pem.is_some())
}

fn has_client_certificate(tls: &TlsMaterial) -> bool {
    match tls {
        TlsMaterial::Pem(pem) => pem.client_cert_pem.is_some(),
        TlsMaterial::Files(files) => files.cert.is_some(),
    }
}

fn refused_auth(error: &Error) -> bool {
    error.reason() == "AuthFailed"
        || error
            .to_string()
            .contains("without any password configured")
}

fn tls_options(tls: &TlsMaterial, client_cert: bool) -> Result<TlsOptions> {
    match tls {
        TlsMaterial::Pem(pem) => Ok(TlsOptions {
            client_cert_pem: pem.client_cert_pem.clone().filter(|_| client_cert),
            client_key_pem: pem.client_key_pem.clone().filter(|_| client_cert),
            ..pem.clone()
        }),
        TlsMaterial::Files(files) => {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(|error| {
                    Error::InvalidOptions(format!("cannot read {}: {error}", path.display()))
                })
            };
            let client = |path: &Option<PathBuf>| {
                path.as_ref().filter(|_| client_cert).map(read).transpose()
            };
            Ok(TlsOptions {
                ca_pem: read(&files.ca)?,
                client_cert_pem: client(&files.cert)?,
                client_key_pem: client(&files.key)?,
                server_name: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn pem() -> TlsMaterial {
        TlsMaterial::Pem(TlsOptions {
            ca_pem: b"ca".to_vec(),
            client_cert_pem: Some(b"cert".to_vec()),
            client_key_pem: Some(b"key".to_vec()),
            server_name: Some("stale".into()),
        })
    }

    #[test]
    fn the_certificate_is_verified_against_the_announced_name_not_the_dialled_address() {
        let dialer = Dialer::new(Some("pw".into())).with_tls(Some(pem()));
        let at = Address::new("10.0.0.7", 6379);
        let options = dialer
            .options(
                &at,
                "a-0.a-headless.ns.svc.cluster.local",
                dialer.tls.as_ref(),
                None,
                true,
            )
            .unwrap();
        assert_eq!(options.host, "10.0.0.7");
        let tls = options.tls.unwrap();
        assert_eq!(
            tls.server_name.as_deref(),
            Some("a-0.a-headless.ns.svc.cluster.local")
        );
        assert_eq!(tls.client_cert_pem.as_deref(), Some(&b"cert"[..]));
        assert_eq!(options.password, None);
        assert_eq!(options.connect_timeout, Duration::from_millis(1500));
    }

    #[test]
    fn without_the_client_certificate_neither_certificate_nor_key_is_sent() {
        let options = tls_options(&pem(), false).unwrap();
        assert_eq!(options.client_cert_pem, None);
        assert_eq!(options.client_key_pem, None);
        assert_eq!(options.ca_pem, b"ca");
    }

    #[test]
    fn an_unreadable_tls_file_is_an_invalid_option_naming_the_path() {
        let files = TlsMaterial::Files(TlsFiles {
            ca: "/nonexistent/vko/ca.crt".into(),
            cert: None,
            key: None,
        });
        let error = tls_options(&files, true).unwrap_err();
        assert_eq!(error.reason(), "InvalidOptions");
        assert!(
            error.to_string().contains("/nonexistent/vko/ca.crt"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_resolve_hook_decides_where_a_name_is_dialled() {
        let mut dialer = Dialer::new(None);
        dialer.resolve = Some(Arc::new(|host: &str| {
            Err(Error::Connection {
                addr: host.to_owned(),
                detail: "not running".into(),
            })
        }));
        let error = dialer
            .valkey(&Address::new("a-0.a-headless", 6379))
            .await
            .unwrap_err();
        assert_eq!(
            error,
            Error::Connection {
                addr: "a-0.a-headless".into(),
                detail: "not running".into()
            }
        );
        assert!(dialer.sentinel(&Address::new("s-0", 26379)).await.is_err());
        assert_eq!(
            dialer.address_of("x").unwrap_err().reason(),
            "ConnectionFailed"
        );
    }
}
