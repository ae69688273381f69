//! The one way to dial a server of a cluster, shared by the operator, the sidecar and the
//! observer: passwords for either tier, TLS material (in memory, or files re-read on every dial
//! so that a rotated Secret mounted in a pod is picked up), the timeouts, and a hook that turns an
//! announced host name into the address to connect to (the operator maps a pod's FQDN to its pod
//! IP; a pod resolves names itself). The certificate is always verified against the announced
//! name.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock};
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

/// The password a tier is dialled with, and while a rotation runs the one before it, shared by
/// every clone of a [`Dialer`]: a sidecar or operator that sees the auth Secret change moves all
/// its long-lived holders at once. A dial refused with the current password is tried once more
/// with the previous one (a server the rotation has not reached yet).
#[derive(Clone, Default)]
pub struct Credentials(Arc<RwLock<Passwords>>);

#[derive(Clone, Default, PartialEq, Eq)]
struct Passwords {
    current: Option<String>,
    previous: Option<String>,
}

impl Credentials {
    pub fn new(password: Option<String>) -> Credentials {
        Credentials(Arc::new(RwLock::new(Passwords {
            current: password,
            previous: None,
        })))
    }

    fn read(&self) -> Passwords {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The password dialled with first.
    pub fn current(&self) -> Option<String> {
        self.read().current
    }

    /// The password before the last [`Credentials::rotate_to`], until [`Credentials::forget_previous`].
    pub fn previous(&self) -> Option<String> {
        self.read().previous
    }

    /// `password` becomes the current one and the current one the previous; the same password
    /// again changes nothing. Returns whether it changed.
    pub fn rotate_to(&self, password: String) -> bool {
        let mut passwords = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if passwords.current.as_deref() == Some(password.as_str()) {
            return false;
        }
        passwords.previous = passwords.current.replace(password);
        true
    }

    /// Stop trying the previous password.
    pub fn forget_previous(&self) {
        self.0
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .previous = None;
    }

    /// The passwords to try, in order: the current one, then the previous one if there is one.
    fn attempts(&self) -> Vec<Option<String>> {
        let passwords = self.read();
        let mut attempts = vec![passwords.current.clone()];
        if let Some(previous) = passwords
            .previous
            .filter(|p| Some(p) != passwords.current.as_ref())
        {
            attempts.push(Some(previous));
        }
        attempts
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let passwords = self.read();
        let redacted = |p: &Option<String>| p.as_ref().map(|_| "<redacted>");
        f.debug_struct("Credentials")
            .field("current", &redacted(&passwords.current))
            .field("previous", &redacted(&passwords.previous))
            .finish()
    }
}

/// The ACL user every vko client authenticates as.
pub const DEFAULT_USER: &str = "default";

/// Announced host name → the host or IP to connect to.
pub type Resolve = Arc<dyn Fn(&str) -> Result<String> + Send + Sync>;

/// How to reach the data pods and the Sentinels of one cluster.
#[derive(Clone)]
pub struct Dialer {
    pub password: Credentials,
    /// Sent to Sentinel; `None` when its auth is disabled.
    pub sentinel_password: Option<Credentials>,
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
        f.debug_struct("Dialer")
            .field("password", &self.password)
            .field("sentinel_password", &self.sentinel_password)
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
        Dialer::with_credentials(Credentials::new(password))
    }

    /// As [`Dialer::new`], with credentials shared with whoever rotates them.
    pub fn with_credentials(password: Credentials) -> Dialer {
        Dialer {
            sentinel_password: Some(password.clone()),
            password,
            tls: None,
            sentinel_tls: None,
            connect_timeout: Duration::from_millis(1500),
            command_timeout: Duration::from_secs(2),
            resolve: None,
        }
    }

    /// Sentinel dialled without a password when its own auth is disabled
    /// (`spec.sentinel.disableAuth`).
    #[must_use]
    pub fn with_sentinel_auth(mut self, enabled: bool) -> Dialer {
        if !enabled {
            self.sentinel_password = None;
        }
        self
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
        // `AUTH default <password>`, never the one-argument form: a server without a password
        // (`nopass`) accepts it, where it refuses `AUTH <password>`. So a client given the password
        // reaches both sides while auth is turned on or off across a roll (ADR 0035).
        options.username = password.map(|_| DEFAULT_USER.to_owned());
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
    ///
    /// A password refused is tried once more with the previous one while a rotation runs.
    pub async fn valkey_via(&self, dial: &Address, tls_name: &str) -> Result<ValkeyClient> {
        let mut last = None;
        for password in self.password.attempts() {
            match self.valkey_with(dial, tls_name, password.as_ref()).await {
                Err(error) if refused_auth(&error) => last = Some(error),
                result => return result,
            }
        }
        Err(last.unwrap_or_else(|| Error::InvalidOptions("no connection attempt".into())))
    }

    /// A valkey-server at its announced address, dialled with exactly `password` (no fallback):
    /// whether it accepts that password.
    pub async fn valkey_as(&self, at: &Address, password: &str) -> Result<ValkeyClient> {
        let dial = Address::new(self.address_of(&at.host)?, at.port);
        self.valkey_with(&dial, &at.host, Some(&password.to_owned()))
            .await
    }

    async fn valkey_with(
        &self,
        dial: &Address,
        tls_name: &str,
        password: Option<&String>,
    ) -> Result<ValkeyClient> {
        let tls = self.tls.as_ref();
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
        let passwords = self
            .sentinel_password
            .as_ref()
            .map(Credentials::attempts)
            .unwrap_or_default();
        let has_cert = tls.is_some_and(has_client_certificate);
        let mut last = None;
        let mut attempts = Vec::new();
        for cert in [true, false] {
            for password in &passwords {
                attempts.push((password.clone(), cert));
            }
            if !passwords.contains(&None) {
                // A Sentinel whose own auth is disabled refuses every password.
                attempts.push((None, cert));
            }
        }
        for (secret, cert) in attempts {
            if !cert && !has_cert {
                continue;
            }
            let options = self.options(&dial, &at.host, tls, secret.as_ref(), cert)?;
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
