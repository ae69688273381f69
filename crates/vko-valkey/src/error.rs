//! The one error type of this crate. Each variant has a stable `reason()` string that the operator uses
//! for condition reasons, Event reasons and metric labels, so renaming one is a breaking change.

use std::time::Duration;

/// Everything that can go wrong talking to Valkey or Sentinel, or reading their replies.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The server did not answer within the configured bound (connect or per-call timeout).
    #[error("{what} timed out after {after:?}")]
    Timeout { what: String, after: Duration },

    /// Nothing listens on the address (TCP RST).
    #[error("connection to {addr} refused")]
    ConnectionRefused { addr: String },

    /// The TCP connection could not be made or was lost for another reason (DNS, unreachable, reset,
    /// closed by the server). The client never reconnects by itself; make a new one.
    #[error("connection to {addr} failed: {detail}")]
    Connection { addr: String, detail: String },

    /// Credentials were refused (`WRONGPASS`), missing (`NOAUTH`), or sent to a server that has none.
    #[error("authentication failed: {0}")]
    AuthFailed(String),

    /// The TLS handshake failed (untrusted or mismatched certificate, missing client certificate, ...).
    #[error("TLS: {0}")]
    Tls(String),

    /// The TLS or connection options are unusable (bad PEM, certificate without key, bad server name).
    #[error("invalid connection options: {0}")]
    InvalidOptions(String),

    /// `NOPERM`: the (ACL) user is authenticated but may not run this command or touch this key.
    #[error("permission denied: {0}")]
    NoPermission(String),

    /// `LOADING`: the server is loading its dataset and refuses most commands.
    #[error("server is loading its dataset: {0}")]
    Loading(String),

    /// `READONLY`: a write was sent to a replica.
    #[error("server is a read-only replica: {0}")]
    ReadOnly(String),

    /// `MASTERDOWN`: a replica with `replica-serve-stale-data no` lost its master.
    #[error("replica's link to its master is down: {0}")]
    MasterDown(String),

    /// `NOMASTERLINK`: the command needs a replica's link to its master, which is down.
    #[error("no link to master: {0}")]
    NoMasterLink(String),

    /// `BUSY`: a script or function is running.
    #[error("server busy: {0}")]
    Busy(String),

    /// Sentinel does not monitor a master by that name.
    #[error("sentinel does not monitor a master named {0:?}")]
    UnknownMaster(String),

    /// `NOGOODSLAVE`: Sentinel found no replica it could promote.
    #[error("no suitable replica to promote: {0}")]
    NoGoodReplica(String),

    /// `INPROG`: a failover is already in progress.
    #[error("failover already in progress: {0}")]
    FailoverInProgress(String),

    /// `NOQUORUM` from a command other than CKQUORUM (which reports it as a result instead).
    #[error("sentinel quorum not reachable: {0}")]
    NoQuorum(String),

    /// Any other error reply; `code` is its first word (`ERR`, `WRONGTYPE`, ...).
    #[error("server error {code}: {message}")]
    Server { code: String, message: String },

    /// A reply did not have the expected shape or a required field was missing or malformed.
    #[error("cannot parse {what}: {detail}")]
    Parse { what: String, detail: String },

    /// A planned switchover stopped at `step`; the old master was unpaused and kept its role.
    #[error("switchover failed at {step}: {detail}")]
    Switchover { step: &'static str, detail: String },
}

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A stable, CamelCase reason for conditions, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Timeout { .. } => "Timeout",
            Error::ConnectionRefused { .. } => "ConnectionRefused",
            Error::Connection { .. } => "ConnectionFailed",
            Error::AuthFailed(_) => "AuthFailed",
            Error::Tls(_) => "Tls",
            Error::InvalidOptions(_) => "InvalidOptions",
            Error::NoPermission(_) => "NoPermission",
            Error::Loading(_) => "Loading",
            Error::ReadOnly(_) => "ReadOnly",
            Error::MasterDown(_) => "MasterDown",
            Error::NoMasterLink(_) => "NoMasterLink",
            Error::Busy(_) => "Busy",
            Error::UnknownMaster(_) => "UnknownMaster",
            Error::NoGoodReplica(_) => "NoGoodReplica",
            Error::FailoverInProgress(_) => "FailoverInProgress",
            Error::NoQuorum(_) => "NoQuorum",
            Error::Server { .. } => "ServerError",
            Error::Parse { .. } => "ParseError",
            Error::Switchover { .. } => "SwitchoverFailed",
        }
    }

    /// Classify an error reply by its text (without the leading `-`), e.g.
    /// `LOADING Valkey is loading the dataset in memory`.
    pub fn from_server_reply(text: &str) -> Error {
        let text = text.trim_end_matches(['\r', '\n']);
        let (code, rest) = match text.split_once(' ') {
            Some((code, rest)) => (code, rest),
            None => (text, ""),
        };
        let whole = text.to_owned();
        match code {
            "LOADING" => Error::Loading(whole),
            "READONLY" => Error::ReadOnly(whole),
            "MASTERDOWN" => Error::MasterDown(whole),
            "NOMASTERLINK" => Error::NoMasterLink(whole),
            "NOAUTH" | "WRONGPASS" => Error::AuthFailed(whole),
            "NOPERM" => Error::NoPermission(whole),
            "BUSY" => Error::Busy(whole),
            "NOGOODSLAVE" => Error::NoGoodReplica(whole),
            "INPROG" => Error::FailoverInProgress(whole),
            "NOQUORUM" => Error::NoQuorum(whole),
            // Sent a password to a server that has none configured: a credentials mismatch.
            "ERR" if rest.contains("called without any password configured") => {
                Error::AuthFailed(whole)
            }
            "ERR" if rest.starts_with("No such master with that name") => {
                Error::UnknownMaster(String::new())
            }
            _ => Error::Server {
                code: code.to_owned(),
                message: rest.to_owned(),
            },
        }
    }

    pub(crate) fn parse(what: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Parse {
            what: what.into(),
            detail: detail.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_error_prefixes() {
        let cases = [
            ("LOADING Valkey is loading the dataset in memory", "Loading"),
            (
                "READONLY You can't write against a read only replica.",
                "ReadOnly",
            ),
            ("MASTERDOWN Link with MASTER is down", "MasterDown"),
            (
                "NOMASTERLINK Can't SYNC while not connected with my master",
                "NoMasterLink",
            ),
            ("NOAUTH Authentication required.", "AuthFailed"),
            ("WRONGPASS invalid username-password pair", "AuthFailed"),
            (
                "ERR AUTH <password> called without any password configured for the default user.",
                "AuthFailed",
            ),
            ("BUSY Valkey is busy running a script.", "Busy"),
            (
                "NOGOODSLAVE No suitable replica to promote",
                "NoGoodReplica",
            ),
            ("INPROG Failover already in progress", "FailoverInProgress"),
            ("NOQUORUM 1 usable Sentinels.", "NoQuorum"),
            ("ERR No such master with that name", "UnknownMaster"),
            ("NOPERM this user has no permissions", "NoPermission"),
            ("ERR unknown command 'X'", "ServerError"),
            ("WRONGTYPE Operation against a key", "ServerError"),
            ("ERR", "ServerError"),
        ];
        for (text, reason) in cases {
            assert_eq!(Error::from_server_reply(text).reason(), reason, "{text}");
        }
    }

    #[test]
    fn captured_error_replies_classify() {
        let cases = [
            ("error_loading", "Loading"),
            ("error_loading_get", "Loading"),
            ("error_readonly", "ReadOnly"),
            ("error_masterdown", "MasterDown"),
            ("error_noauth", "AuthFailed"),
            ("error_wrongpass", "AuthFailed"),
            ("error_wrongpass_user", "AuthFailed"),
            ("error_unknown_command", "ServerError"),
            ("error_failover_no_replica", "ServerError"),
            ("error_failover_abort_idle", "ServerError"),
            ("error_config_set_unknown", "ServerError"),
            ("sentinel_master_unknown", "UnknownMaster"),
            ("sentinel_ckquorum_unknown", "UnknownMaster"),
            ("sentinel_ckquorum_noquorum", "NoQuorum"),
        ];
        for (name, reason) in cases {
            let decoded = crate::reply::decode_resp2(&crate::parse::fixtures::raw(name));
            assert_eq!(decoded.map_err(|e| e.reason()), Err(reason), "{name}");
        }
    }

    #[test]
    fn server_error_keeps_code_and_message() {
        assert_eq!(
            Error::from_server_reply("ERR unknown command 'X'\r\n"),
            Error::Server {
                code: "ERR".into(),
                message: "unknown command 'X'".into()
            }
        );
    }
}
