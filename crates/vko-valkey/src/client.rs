//! Async clients for Valkey and Sentinel: one connection each, no automatic reconnects or retries
//! (a failure must surface, not be hidden), a bound on every call, TLS via rustls with ring.
//!
//! fred does the wire work; none of its types leave this module.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::Client as FredClient;
use fred::error::{Error as FredError, ErrorKind as FredErrorKind};
use fred::interfaces::ClientLike;
use fred::types::config::{
    Config, ConnectionConfig, Options, PerformanceConfig, Server, ServerConfig, TcpConfig,
    TlsConfig, TlsConnector, TlsHostMapping,
};
use fred::types::{ClusterHash, ConnectHandle, CustomCommand, RespVersion, Value};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::error::{Error, Result};
use crate::parse::{
    Info, KeyspaceInfo, PersistenceInfo, QuorumStatus, ReplicationInfo, RoleReply, SentinelMaster,
    SentinelPeer, SentinelReplica, ServerInfo, parse_ckquorum_text, parse_master_addr,
    parse_sentinel_master, parse_sentinel_masters, parse_sentinel_peers, parse_sentinel_replicas,
};
use crate::reply::Reply;

/// Extra time given to the wire library's own per-command timeout before ours fires, so that its
/// (more precise) timeout normally wins and the command is dropped from its queue.
const TIMEOUT_GRACE: Duration = Duration::from_millis(250);

/// TLS material, PEM-encoded.
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// CA certificate(s) that must have signed the server certificate.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain, for servers with `tls-auth-clients yes`.
    pub client_cert_pem: Option<Vec<u8>>,
    /// Private key of the client certificate (PKCS#8, PKCS#1 or SEC1).
    pub client_key_pem: Option<Vec<u8>>,
    /// Name to verify the server certificate against; defaults to `host` (e.g. dial a pod IP, verify
    /// its DNS name).
    pub server_name: Option<String>,
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsOptions")
            .field("ca_pem", &format_args!("{} bytes", self.ca_pem.len()))
            .field(
                "client_cert_pem",
                &self.client_cert_pem.as_ref().map(Vec::len),
            )
            .field(
                "client_key_pem",
                &self.client_key_pem.as_ref().map(|_| "<redacted>"),
            )
            .field("server_name", &self.server_name)
            .finish()
    }
}

/// Where and how to connect.
#[derive(Clone)]
pub struct ConnectOptions {
    pub host: String,
    pub port: u16,
    pub tls: Option<TlsOptions>,
    /// ACL user; `None` means `default`.
    pub username: Option<String>,
    pub password: Option<String>,
    /// Bound on TCP connect + TLS handshake + AUTH/setup.
    pub connect_timeout: Duration,
    /// Bound on each call (blocking calls such as WAIT add their own timeout to it).
    pub command_timeout: Duration,
}

impl ConnectOptions {
    /// Plain TCP, no auth, 5 s connect and command timeouts.
    pub fn new(host: impl Into<String>, port: u16) -> ConnectOptions {
        ConnectOptions {
            host: host.into(),
            port,
            tls: None,
            username: None,
            password: None,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(5),
        }
    }

    /// `host:port`, with brackets around an IPv6 address.
    pub fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for ConnectOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectOptions")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

/// Install ring as the process-wide rustls provider unless one is installed already. Binaries
/// normally do this in `main`; calling it again (or after the binary did) is harmless.
pub fn install_default_crypto_provider() {
    if CryptoProvider::get_default().is_none() {
        // Losing a race against another installer is fine: a provider is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

pub(crate) fn crypto_provider() -> Arc<CryptoProvider> {
    install_default_crypto_provider();
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::ring::default_provider()))
}

fn rustls_config(tls: &TlsOptions) -> Result<rustls::ClientConfig> {
    let invalid = |what: &str, e: &dyn fmt::Display| Error::InvalidOptions(format!("{what}: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&tls.ca_pem) {
        let cert = cert.map_err(|e| invalid("CA PEM", &e))?;
        roots.add(cert).map_err(|e| invalid("CA certificate", &e))?;
    }
    if roots.is_empty() {
        return Err(Error::InvalidOptions("CA PEM holds no certificate".into()));
    }
    let builder = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS versions", &e))?
        .with_root_certificates(roots);
    match (&tls.client_cert_pem, &tls.client_key_pem) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert_pem), Some(key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| invalid("client certificate PEM", &e))?;
            if chain.is_empty() {
                return Err(Error::InvalidOptions(
                    "client certificate PEM holds no certificate".into(),
                ));
            }
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| invalid("client key PEM", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid("client certificate", &e))
        }
        _ => Err(Error::InvalidOptions(
            "client certificate and key must be given together".into(),
        )),
    }
}

/// One fred client driving exactly one connection.
struct Connection {
    client: FredClient,
    /// Ends fred's connection task (which owns the socket).
    task: AbortHandle,
    /// Becomes `true` when the connection task has ended (connection lost or closed). fred keeps
    /// accepting commands after that and they would only time out, so calls race against this.
    closed: watch::Receiver<bool>,
    addr: String,
    tls: bool,
    command_timeout: Duration,
}

impl Connection {
    async fn open(opts: &ConnectOptions) -> Result<Connection> {
        let addr = opts.addr();
        let (server, tls) = match &opts.tls {
            None => (Server::new(opts.host.clone(), opts.port), None),
            Some(tls) => {
                let name = tls.server_name.clone().unwrap_or_else(|| opts.host.clone());
                ServerName::try_from(name.clone())
                    .map_err(|e| Error::InvalidOptions(format!("TLS server name {name:?}: {e}")))?;
                let config = TlsConfig {
                    connector: TlsConnector::from(rustls_config(tls)?),
                    hostnames: TlsHostMapping::None,
                };
                (
                    Server::new_with_tls(opts.host.clone(), opts.port, Some(name)),
                    Some(config),
                )
            }
        };
        let uses_tls = tls.is_some();
        let config = Config {
            // Commands on a dead connection fail at once instead of waiting for a reconnect.
            fail_fast: true,
            username: opts.username.clone(),
            password: opts.password.clone(),
            server: ServerConfig::Centralized { server },
            version: RespVersion::RESP2,
            tls,
            ..Config::default()
        };
        let connection = ConnectionConfig {
            connection_timeout: opts.connect_timeout,
            internal_command_timeout: opts.connect_timeout,
            // Never resend a command: a resent REPLICAOF/FAILOVER could act twice.
            max_command_attempts: 1,
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        };
        // No ReconnectPolicy: a lost connection ends this client.
        let client = FredClient::new(
            config,
            Some(PerformanceConfig::default()),
            Some(connection),
            None,
        );
        let task = match tokio::time::timeout(opts.connect_timeout, client.init()).await {
            Err(_) => {
                return Err(Error::Timeout {
                    what: format!("connect to {addr}"),
                    after: opts.connect_timeout,
                });
            }
            Ok(Err(e)) => {
                return Err(map_fred_error(
                    &e,
                    &addr,
                    uses_tls,
                    "connect",
                    opts.connect_timeout,
                ));
            }
            Ok(Ok(task)) => task,
        };
        let abort = task.abort_handle();
        let (closed_tx, closed) = watch::channel(false);
        tokio::spawn(watch_connection_task(task, closed_tx));
        Ok(Connection {
            client,
            task: abort,
            closed,
            addr,
            tls: uses_tls,
            command_timeout: opts.command_timeout,
        })
    }

    /// Send one command (`args[0]` is the command name) and wait at most `timeout` for its reply.
    async fn call_within(&self, args: Vec<Value>, timeout: Duration) -> Result<Reply> {
        let mut args = args.into_iter();
        let name = match args.next() {
            Some(Value::String(name)) => name,
            _ => {
                return Err(Error::InvalidOptions(
                    "command name must be a string".into(),
                ));
            }
        };
        let what = name.to_string();
        let options = Options {
            max_attempts: Some(1),
            timeout: Some(timeout),
            fail_fast: true,
            ..Options::default()
        };
        let command = CustomCommand::new(name, ClusterHash::Random, false);
        let lost = || Error::Connection {
            addr: self.addr.clone(),
            detail: "connection closed".into(),
        };
        let mut closed = self.closed.clone();
        if *closed.borrow() {
            return Err(lost());
        }
        let client = self.client.with_options(&options);
        let call = client.custom::<Value, Value>(command, args.collect());
        tokio::select! {
            biased;
            result = tokio::time::timeout(timeout + TIMEOUT_GRACE, call) => match result {
                Err(_) => Err(Error::Timeout { what, after: timeout }),
                Ok(Err(e)) => Err(map_fred_error(&e, &self.addr, self.tls, &what, timeout)),
                Ok(Ok(value)) => Ok(to_reply(value)),
            },
            _ = closed.wait_for(|closed| *closed) => Err(lost()),
        }
    }

    /// A command whose reply must be `OK`; `what` names it in the error.
    async fn call_ok<I, S>(&self, parts: I, what: &str) -> Result<()>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.call(args(parts)).await?.expect_ok(what)
    }

    async fn call(&self, args: Vec<Value>) -> Result<Reply> {
        self.call_within(args, self.command_timeout).await
    }

    async fn close(self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.client.quit()).await;
        let mut closed = self.closed.clone();
        let _ =
            tokio::time::timeout(Duration::from_secs(1), closed.wait_for(|closed| *closed)).await;
        // Drop aborts the task if QUIT did not end it.
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The connection task owns the socket; ending it closes the connection.
        self.task.abort();
    }
}

async fn watch_connection_task(task: ConnectHandle, closed: watch::Sender<bool>) {
    let _ = task.await;
    let _ = closed.send(true);
}

fn args<I, S>(parts: I) -> Vec<Value>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    parts
        .into_iter()
        .map(|part| Value::from(part.into()))
        .collect()
}

fn to_reply(value: Value) -> Reply {
    match value {
        Value::Null => Reply::Nil,
        Value::Boolean(b) => Reply::Bool(b),
        Value::Integer(n) => Reply::Int(n),
        Value::Double(d) => Reply::Double(d),
        Value::String(s) => Reply::Text(s.to_string()),
        Value::Bytes(bytes) => match String::from_utf8(bytes.to_vec()) {
            Ok(text) => Reply::Text(text),
            Err(e) => Reply::Bytes(e.into_bytes()),
        },
        Value::Queued => Reply::Text("QUEUED".into()),
        Value::Array(items) => Reply::Array(items.into_iter().map(to_reply).collect()),
        Value::Map(map) => Reply::Map(
            map.inner()
                .into_iter()
                .map(|(key, value)| {
                    let key = match key.as_str() {
                        Some(text) => Reply::Text(text.to_owned()),
                        None => Reply::Bytes(key.as_bytes().to_vec()),
                    };
                    (key, to_reply(value))
                })
                .collect(),
        ),
    }
}

/// Is `details` the text of a server error reply (`CODE message`, CODE in upper case)?
fn looks_like_server_error(details: &str) -> bool {
    let code = details.split(' ').next().unwrap_or("");
    !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_')
}

fn map_fred_error(e: &FredError, addr: &str, tls: bool, what: &str, timeout: Duration) -> Error {
    let details = e.details();
    match e.kind() {
        FredErrorKind::Timeout => Error::Timeout {
            what: what.to_owned(),
            after: timeout,
        },
        FredErrorKind::Tls => Error::Tls(details.to_owned()),
        FredErrorKind::IO => {
            if details.contains("ConnectionRefused") {
                Error::ConnectionRefused {
                    addr: addr.to_owned(),
                }
            } else if details.contains("TimedOut") {
                Error::Timeout {
                    what: what.to_owned(),
                    after: timeout,
                }
            } else if tls && is_tls_failure(details) {
                Error::Tls(details.to_owned())
            } else {
                Error::Connection {
                    addr: addr.to_owned(),
                    detail: details.to_owned(),
                }
            }
        }
        FredErrorKind::Canceled => Error::Connection {
            addr: addr.to_owned(),
            detail: format!("connection closed ({details})"),
        },
        FredErrorKind::Protocol | FredErrorKind::Parse => Error::Parse {
            what: what.to_owned(),
            detail: details.to_owned(),
        },
        FredErrorKind::Config | FredErrorKind::Url => Error::InvalidOptions(details.to_owned()),
        _ if looks_like_server_error(details) => Error::from_server_reply(details),
        kind => Error::Server {
            code: kind.to_str().to_owned(),
            message: details.to_owned(),
        },
    }
}

/// rustls reports handshake failures as `io::ErrorKind::InvalidData` wrapping its own error.
fn is_tls_failure(details: &str) -> bool {
    [
        "InvalidData",
        "InvalidCertificate",
        "AlertReceived",
        "HandshakeFailure",
        "PeerIncompatible",
        "PeerMisbehaved",
        "NoCertificatesPresented",
        "CertificateRequired",
        "UnexpectedEof",
    ]
    .iter()
    .any(|marker| details.contains(marker))
}

fn expect_pong(reply: Reply) -> Result<()> {
    match reply {
        Reply::Text(text) if text == "PONG" => Ok(()),
        other => Err(Error::parse(
            "PING",
            format!("expected PONG, got {other:?}"),
        )),
    }
}

fn expect_count(reply: &Reply, what: &str) -> Result<u64> {
    let n = reply.expect_int(what)?;
    u64::try_from(n).map_err(|_| Error::parse(what, format!("negative count {n}")))
}

fn ms(duration: Duration) -> String {
    duration.as_millis().to_string()
}

/// A connection to one valkey-server (or Redis 7).
pub struct ValkeyClient {
    conn: Connection,
}

/// What a Valkey and a Sentinel client have alike, on their one [`Connection`]: `Debug` (the
/// address only), connect, addr, close, PING, ROLE and INFO.
macro_rules! connection_client {
    ($client:ident, $info_doc:literal) => {
        impl fmt::Debug for $client {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($client))
                    .field("addr", &self.conn.addr)
                    .finish()
            }
        }

        impl $client {
            /// Connect (TCP, TLS, AUTH) within `connect_timeout`.
            pub async fn connect(opts: &ConnectOptions) -> Result<$client> {
                Ok($client {
                    conn: Connection::open(opts).await?,
                })
            }

            /// `host:port` this client talks to.
            pub fn addr(&self) -> &str {
                &self.conn.addr
            }

            /// Send QUIT and close the connection (dropping the client also closes it, without
            /// QUIT).
            pub async fn close(self) {
                self.conn.close().await;
            }

            pub async fn ping(&self) -> Result<()> {
                expect_pong(self.conn.call(args(["PING"])).await?)
            }

            pub async fn role(&self) -> Result<RoleReply> {
                RoleReply::parse(self.conn.call(args(["ROLE"])).await?)
            }

            /// The default user's passwords as Valkey keeps them (SHA-256, hex; see
            /// [`crate::password_hash`]), in the order they were added. A Sentinel
            /// authenticates to its peers with the first.
            pub async fn default_user_passwords(&self) -> Result<Vec<String>> {
                let reply = self.conn.call(args(["ACL", "GETUSER", "default"])).await?;
                crate::parse::parse_acl_passwords(reply)
            }

            /// `ACL SETUSER default >password`: the default user accepts `password` as well as
            /// the ones it had.
            pub async fn add_default_user_password(&self, password: &str) -> Result<()> {
                let rule = format!(">{password}");
                self.conn
                    .call(args(["ACL", "SETUSER", "default", rule.as_str()]))
                    .await?
                    .expect_ok("ACL SETUSER default >…")
            }

            /// `ACL SETUSER default nopass`: any client is accepted, with or without a
            /// password (auth being turned off).
            pub async fn allow_any_client(&self) -> Result<()> {
                self.conn
                    .call(args(["ACL", "SETUSER", "default", "nopass"]))
                    .await?
                    .expect_ok("ACL SETUSER default nopass")
            }

            /// `ACL SETUSER default resetpass >first #hash…`: the default user accepts `first`
            /// (now its first password) and the passwords whose hashes are in `also`, nothing
            /// else. One command, so no moment accepts neither.
            pub async fn set_default_user_passwords(
                &self,
                first: &str,
                also: &[String],
            ) -> Result<()> {
                let mut call = vec![
                    "ACL".to_owned(),
                    "SETUSER".to_owned(),
                    "default".to_owned(),
                    "resetpass".to_owned(),
                    format!(">{first}"),
                ];
                call.extend(also.iter().map(|hash| format!("#{hash}")));
                self.conn
                    .call(args(call))
                    .await?
                    .expect_ok("ACL SETUSER default resetpass …")
            }

            #[doc = $info_doc]
            pub async fn info(&self, section: &str) -> Result<Info> {
                let text = self
                    .conn
                    .call(args(["INFO", section]))
                    .await?
                    .expect_text("INFO")?;
                Ok(Info::parse(&text))
            }
        }
    };
}

connection_client!(
    ValkeyClient,
    "`INFO <section>` split into sections (`\"default\"`, `\"all\"` or one section name)."
);

impl ValkeyClient {
    /// Any command, for what the typed calls do not cover.
    pub async fn command<I, S>(&self, parts: I) -> Result<Reply>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.conn.call(args(parts)).await
    }

    pub async fn info_replication(&self) -> Result<ReplicationInfo> {
        ReplicationInfo::from_info(&self.info("replication").await?)
    }

    pub async fn info_server(&self) -> Result<ServerInfo> {
        ServerInfo::from_info(&self.info("server").await?)
    }

    pub async fn info_persistence(&self) -> Result<PersistenceInfo> {
        PersistenceInfo::from_info(&self.info("persistence").await?)
    }

    pub async fn info_keyspace(&self) -> Result<KeyspaceInfo> {
        KeyspaceInfo::from_info(&self.info("keyspace").await?)
    }

    /// `REPLICAOF host port`. Not a write: it runs while writes are paused.
    pub async fn replicaof(&self, host: &str, port: u16) -> Result<()> {
        self.conn
            .call_ok(
                ["REPLICAOF".to_owned(), host.to_owned(), port.to_string()],
                "REPLICAOF",
            )
            .await
    }

    /// `REPLICAOF NO ONE`: become a master.
    pub async fn replicaof_no_one(&self) -> Result<()> {
        self.conn
            .call_ok(["REPLICAOF", "NO", "ONE"], "REPLICAOF NO ONE")
            .await
    }

    /// `FAILOVER TO host port TIMEOUT ms` (Valkey / Redis >= 6.2): the master pauses writes, waits for
    /// that replica (named by its announced address) to catch up, promotes it and demotes itself.
    /// Returns once the failover has started; watch `master_failover_state` / ROLE for the outcome.
    pub async fn failover_to(&self, host: &str, port: u16, timeout: Duration) -> Result<()> {
        let (port, timeout) = (port.to_string(), ms(timeout));
        let call = ["FAILOVER", "TO", host, &port, "TIMEOUT", &timeout];
        self.conn.call_ok(call, "FAILOVER").await
    }

    pub async fn failover_abort(&self) -> Result<()> {
        self.conn
            .call_ok(["FAILOVER", "ABORT"], "FAILOVER ABORT")
            .await
    }

    /// `CONFIG GET pattern` as a map (empty when nothing matches).
    pub async fn config_get(&self, pattern: &str) -> Result<BTreeMap<String, String>> {
        let reply = self.conn.call(args(["CONFIG", "GET", pattern])).await?;
        let pairs: Vec<(Reply, Reply)> = match reply {
            Reply::Map(pairs) => pairs,
            reply => {
                let items = reply.expect_array("CONFIG GET")?;
                if items.len() % 2 != 0 {
                    return Err(Error::parse("CONFIG GET", "odd number of elements"));
                }
                let mut items = items.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    pairs.push((k, v));
                }
                pairs
            }
        };
        pairs
            .into_iter()
            .map(|(k, v)| Ok((k.expect_text("CONFIG GET")?, v.expect_text("CONFIG GET")?)))
            .collect()
    }

    pub async fn config_set(&self, parameter: &str, value: &str) -> Result<()> {
        self.conn
            .call_ok(["CONFIG", "SET", parameter, value], "CONFIG SET")
            .await
    }

    /// Re-reads the server's TLS files in place: `CONFIG SET tls-cert-file <cert> tls-key-file
    /// <key>` in one call, with the paths it already has. valkey-server applies these settings
    /// even when the value is unchanged (they name files), builds a new TLS context from the
    /// certificate, key and CA files, and keeps the old context when that fails (a key that does
    /// not match the certificate): the error says why. Connections already open keep theirs.
    pub async fn reload_tls_files(&self) -> Result<()> {
        let files = self.config_get("tls-*-file").await?;
        let path = |name: &str| {
            files
                .get(name)
                .filter(|path| !path.is_empty())
                .cloned()
                .ok_or_else(|| Error::parse("CONFIG GET tls-*-file", format!("no {name}")))
        };
        let (cert, key) = (path("tls-cert-file")?, path("tls-key-file")?);
        self.conn
            .call_ok(
                [
                    "CONFIG",
                    "SET",
                    "tls-cert-file",
                    cert.as_str(),
                    "tls-key-file",
                    key.as_str(),
                ],
                "CONFIG SET tls-cert-file tls-key-file",
            )
            .await
    }

    pub async fn dbsize(&self) -> Result<u64> {
        expect_count(&self.conn.call(args(["DBSIZE"])).await?, "DBSIZE")
    }

    /// `WAIT numreplicas timeout`: how many replicas acknowledged this connection's writes. The call
    /// may take `timeout` plus the command timeout.
    pub async fn wait(&self, numreplicas: u32, timeout: Duration) -> Result<u64> {
        let reply = self
            .conn
            .call_within(
                args(["WAIT".to_owned(), numreplicas.to_string(), ms(timeout)]),
                timeout + self.conn.command_timeout,
            )
            .await?;
        expect_count(&reply, "WAIT")
    }

    /// `CLIENT PAUSE ms WRITE`: postpone writes (and PUBLISH) of all clients until the deadline or
    /// `client_unpause`. Reads, REPLICAOF, INFO and ROLE still run.
    pub async fn client_pause_write(&self, duration: Duration) -> Result<()> {
        let duration = ms(duration);
        let call = ["CLIENT", "PAUSE", &duration, "WRITE"];
        self.conn.call_ok(call, "CLIENT PAUSE").await
    }

    /// `MULTI`, `CLIENT PAUSE ms ALL`, `INFO replication`, `EXEC`: from the same instant on,
    /// every command of every client — a Sentinel's `REPLICAOF NO ONE` among them — waits for
    /// the pause to end, and the returned INFO says what the server was at that instant (a
    /// promotion that ran just before shows as `role:master`). SIGTERM still stops the server.
    pub async fn pause_all_reading_replication(
        &self,
        duration: Duration,
    ) -> Result<ReplicationInfo> {
        const WHAT: &str = "MULTI CLIENT PAUSE ALL INFO replication EXEC";
        self.conn.call_ok(["MULTI"], "MULTI").await?;
        let queued = async {
            let duration = ms(duration);
            for call in [
                args(["CLIENT", "PAUSE", &duration, "ALL"]),
                args(["INFO", "replication"]),
            ] {
                match self.conn.call(call).await? {
                    Reply::Text(text) if text == "QUEUED" => {}
                    other => return Err(Error::parse(WHAT, format!("not queued: {other:?}"))),
                }
            }
            Ok(())
        };
        if let Err(e) = queued.await {
            // Nothing ran: drop the queued commands (a lost connection drops them too).
            let _ = self.conn.call(args(["DISCARD"])).await;
            return Err(e);
        }
        let replies = self.conn.call(args(["EXEC"])).await?.expect_array(WHAT)?;
        let mut replies = replies.into_iter();
        match (replies.next(), replies.next()) {
            (Some(paused), Some(info)) => {
                paused.expect_ok(WHAT)?;
                ReplicationInfo::from_info(&Info::parse(&info.expect_text(WHAT)?))
            }
            _ => Err(Error::parse(WHAT, "EXEC returned fewer than two replies")),
        }
    }

    pub async fn client_unpause(&self) -> Result<()> {
        self.conn
            .call_ok(["CLIENT", "UNPAUSE"], "CLIENT UNPAUSE")
            .await
    }

    pub async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let call = vec![
            Value::from("SET".to_owned()),
            Value::from(key.to_owned()),
            Value::from(Box::<[u8]>::from(value)),
        ];
        self.conn.call(call).await?.expect_ok("SET")
    }

    /// `SET key value PX ms`: the key expires after `ttl` (at least 1 ms).
    pub async fn set_with_expiry(&self, key: &str, value: &[u8], ttl: Duration) -> Result<()> {
        let call = vec![
            Value::from("SET".to_owned()),
            Value::from(key.to_owned()),
            Value::from(Box::<[u8]>::from(value)),
            Value::from("PX".to_owned()),
            Value::from(ms(ttl.max(Duration::from_millis(1)))),
        ];
        self.conn.call(call).await?.expect_ok("SET PX")
    }

    /// `SELECT db`: later calls on this client use database `db`. The client never reconnects,
    /// so the selection holds for its whole life.
    pub async fn select(&self, db: u32) -> Result<()> {
        self.conn
            .call_ok(["SELECT".to_owned(), db.to_string()], "SELECT")
            .await
    }

    pub async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        match self.conn.call(args(["GET", key])).await? {
            Reply::Nil => Ok(None),
            Reply::Text(text) => Ok(Some(text.into_bytes())),
            Reply::Bytes(bytes) => Ok(Some(bytes)),
            other => Err(Error::parse("GET", format!("unexpected {}", other.kind()))),
        }
    }
}

/// A connection to one valkey-sentinel.
pub struct SentinelClient {
    conn: Connection,
}

connection_client!(
    SentinelClient,
    "`INFO <section>` of the Sentinel itself (`sentinel` lists each master's status and address)."
);

/// Sentinel says "No such master with that name" without the name; put it back.
fn name_unknown_master(name: &str) -> impl Fn(Error) -> Error + '_ {
    move |e| match e {
        Error::UnknownMaster(_) => Error::UnknownMaster(name.to_owned()),
        other => other,
    }
}

impl SentinelClient {
    async fn sentinel(&self, parts: &[&str]) -> Result<Reply> {
        let mut call = vec!["SENTINEL"];
        call.extend_from_slice(parts);
        self.conn.call(args(call)).await
    }

    /// `SENTINEL <subcommand> name [more]` about one monitored master: an unknown name is
    /// [`Error::UnknownMaster`] with that name.
    async fn about_master(&self, subcommand: &str, name: &str, more: &[&str]) -> Result<Reply> {
        let mut parts = vec![subcommand, name];
        parts.extend_from_slice(more);
        self.sentinel(&parts)
            .await
            .map_err(name_unknown_master(name))
    }

    /// `SENTINEL MASTER name`.
    pub async fn master(&self, name: &str) -> Result<SentinelMaster> {
        parse_sentinel_master(self.about_master("MASTER", name, &[]).await?)
    }

    /// `SENTINEL MASTERS`.
    pub async fn masters(&self) -> Result<Vec<SentinelMaster>> {
        parse_sentinel_masters(self.sentinel(&["MASTERS"]).await?)
    }

    /// `SENTINEL REPLICAS name`.
    pub async fn replicas(&self, name: &str) -> Result<Vec<SentinelReplica>> {
        parse_sentinel_replicas(self.about_master("REPLICAS", name, &[]).await?)
    }

    /// `SENTINEL SENTINELS name`: the other Sentinels monitoring `name`.
    pub async fn sentinels(&self, name: &str) -> Result<Vec<SentinelPeer>> {
        parse_sentinel_peers(self.about_master("SENTINELS", name, &[]).await?)
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME name`; `None` when the name is not monitored.
    pub async fn get_master_addr_by_name(&self, name: &str) -> Result<Option<(String, u16)>> {
        parse_master_addr(self.sentinel(&["GET-MASTER-ADDR-BY-NAME", name]).await?)
    }

    /// `SENTINEL FAILOVER name`: force a failover without asking the other Sentinels. Returns once
    /// it started; `NoGoodReplica` / `FailoverInProgress` when it cannot.
    pub async fn failover(&self, name: &str) -> Result<()> {
        self.about_master("FAILOVER", name, &[])
            .await?
            .expect_ok("SENTINEL FAILOVER")
    }

    /// `SENTINEL FAILOVER name COORDINATED` (Valkey 9): the old master pauses its own writes and
    /// hands over with `FAILOVER TO` instead of Sentinel promoting a replica beside it. Returns
    /// once it started; an older Sentinel refuses the argument with an error.
    pub async fn failover_coordinated(&self, name: &str) -> Result<()> {
        self.about_master("FAILOVER", name, &["COORDINATED"])
            .await?
            .expect_ok("SENTINEL FAILOVER COORDINATED")
    }

    /// `SENTINEL RESET pattern`: forget replicas and peers of matching masters (they are
    /// rediscovered). Returns how many masters matched.
    pub async fn reset(&self, pattern: &str) -> Result<u64> {
        expect_count(&self.sentinel(&["RESET", pattern]).await?, "SENTINEL RESET")
    }

    /// `SENTINEL CKQUORUM name`. An unreachable quorum is a result (`reachable: false`), not an error.
    pub async fn ckquorum(&self, name: &str) -> Result<QuorumStatus> {
        match self.sentinel(&["CKQUORUM", name]).await {
            Ok(reply) => parse_ckquorum_text(&reply.expect_text("SENTINEL CKQUORUM")?),
            Err(Error::NoQuorum(text)) => parse_ckquorum_text(&text),
            Err(e) => Err(name_unknown_master(name)(e)),
        }
    }

    /// `SENTINEL SET name option value` (e.g. `down-after-milliseconds`, `quorum`).
    pub async fn set(&self, name: &str, option: &str, value: &str) -> Result<()> {
        self.about_master("SET", name, &[option, value])
            .await?
            .expect_ok("SENTINEL SET")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_redacts_secrets() {
        let mut opts = ConnectOptions::new("h", 1);
        opts.password = Some("hunter2".into());
        opts.tls = Some(TlsOptions {
            client_key_pem: Some(b"-----BEGIN PRIVATE KEY-----secret".to_vec()),
            ..TlsOptions::default()
        });
        let shown = format!("{opts:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("secret"),
            "{shown}"
        );
    }

    #[test]
    fn ipv6_addr_is_bracketed() {
        assert_eq!(ConnectOptions::new("::1", 6379).addr(), "[::1]:6379");
        assert_eq!(ConnectOptions::new("v0.ns", 6379).addr(), "v0.ns:6379");
    }

    #[test]
    fn bad_tls_material_is_invalid_options() {
        let no_ca = TlsOptions::default();
        assert_eq!(
            rustls_config(&no_ca).map(|_| ()).map_err(|e| e.reason()),
            Err("InvalidOptions")
        );
        let garbage = TlsOptions {
            ca_pem: b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n".to_vec(),
            ..TlsOptions::default()
        };
        assert_eq!(
            rustls_config(&garbage).map(|_| ()).map_err(|e| e.reason()),
            Err("InvalidOptions")
        );
    }

    #[test]
    fn fred_errors_map_to_stable_reasons() {
        let timeout = Duration::from_secs(1);
        let cases = [
            (FredErrorKind::Timeout, "x", "Timeout"),
            (
                FredErrorKind::IO,
                "Os { code: 111, kind: ConnectionRefused, message: \"Connection refused\" }",
                "ConnectionRefused",
            ),
            (FredErrorKind::IO, "Kind(BrokenPipe)", "ConnectionFailed"),
            (
                FredErrorKind::Canceled,
                "Connection closed unexpectedly.",
                "ConnectionFailed",
            ),
            (
                FredErrorKind::Auth,
                "WRONGPASS invalid username-password pair",
                "AuthFailed",
            ),
            (
                FredErrorKind::Unknown,
                "LOADING Valkey is loading",
                "Loading",
            ),
            (
                FredErrorKind::InvalidArgument,
                "WRONGTYPE Operation",
                "ServerError",
            ),
            (FredErrorKind::Tls, "bad", "Tls"),
            (FredErrorKind::Protocol, "Expected string.", "ParseError"),
        ];
        for (kind, message, reason) in cases {
            let error = FredError::new(kind, message);
            assert_eq!(
                map_fred_error(&error, "h:1", false, "t", timeout).reason(),
                reason,
                "{error:?}"
            );
        }
        let handshake = FredError::new(
            FredErrorKind::IO,
            "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }",
        );
        assert_eq!(
            map_fred_error(&handshake, "h:1", true, "connect", timeout).reason(),
            "Tls"
        );
    }
}
