//! `valkey.conf` and `sentinel.conf` text.
//!
//! Two rules keep user input from adding a directive:
//! - comments are `&'static str` only, so no user string ever lands on a comment line;
//! - every argument goes through [`quote_arg`], which emits it as one Valkey config token
//!   (Valkey's own `sdssplitargs` quoting), whatever bytes it holds. [`split_args`] is that
//!   tokenizer, used by the tests to prove the round trip.
//!
//! The only non-constant arguments are host names built from validated names (see
//! [`crate::names`]), numbers, and nothing else: the password is never rendered (the init
//! containers add `requirepass`/`masterauth`/`sentinel auth-pass` from the Secret at runtime).

use vko_api::{PersistenceMode, ValkeySpec};

use crate::ports::PortPlan;
use crate::version::{Feature, ValkeyVersion};

/// Where the TLS Secret is mounted in every pod.
pub const TLS_DIR: &str = "/tls";
/// Certificate file.
pub const TLS_CERT_FILE: &str = "/tls/tls.crt";
/// Private key file.
pub const TLS_KEY_FILE: &str = "/tls/tls.key";
/// CA bundle.
pub const TLS_CA_FILE: &str = "/tls/ca.crt";
/// A Sentinel that reloads its certificate in place (ADR 0053) reads its TLS files from this
/// in-memory directory, not from the Secret volume: its `tls-reload` container copies only
/// material that passed the checks into it.
pub const TLS_ACTIVE_DIR: &str = "/tls-active";
/// Certificate file the Sentinel serves from [`TLS_ACTIVE_DIR`].
pub const TLS_ACTIVE_CERT_FILE: &str = "/tls-active/tls.crt";
/// Private key file in [`TLS_ACTIVE_DIR`].
pub const TLS_ACTIVE_KEY_FILE: &str = "/tls-active/tls.key";
/// CA bundle in [`TLS_ACTIVE_DIR`].
pub const TLS_ACTIVE_CA_FILE: &str = "/tls-active/ca.crt";
/// How often (seconds) such a Sentinel looks for changed TLS files.
pub const SENTINEL_TLS_RELOAD_INTERVAL_SECONDS: u32 = 1;
/// Data directory of the Valkey container.
pub const DATA_DIR: &str = "/data";
/// Key of the config file inside its ConfigMap.
pub const VALKEY_CONF_KEY: &str = "valkey.conf";
/// Key of the Sentinel config file inside its ConfigMap.
pub const SENTINEL_CONF_KEY: &str = "sentinel.conf";

/// Sentinel: time without a valid reply before a master is subjectively down.
pub const DOWN_AFTER_MS: u32 = 5000;
/// Sentinel: failover timeout.
pub const FAILOVER_TIMEOUT_MS: u32 = 60000;
/// Sentinel: a master that rebooted and does not answer PONG (e.g. still LOADING) within this
/// time is treated as down and failed over (beyond.md #1).
pub const MASTER_REBOOT_DOWN_AFTER_MS: u32 = 5000;

fn is_plain_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b".-_:/*@+,=".contains(&b)
}

/// One config token for `arg`: unchanged when it only holds safe characters, otherwise in double
/// quotes with `\\`, `\"` and `\xHH` escapes, which Valkey's config parser turns back into the
/// exact bytes. A newline, quote or NUL therefore can never end the directive.
pub fn quote_arg(arg: &str) -> String {
    if !arg.is_empty() && arg.bytes().all(is_plain_byte) {
        return arg.to_owned();
    }
    let mut quoted = String::with_capacity(arg.len() + 2);
    quoted.push('"');
    for b in arg.bytes() {
        match b {
            b'\\' => quoted.push_str("\\\\"),
            b'"' => quoted.push_str("\\\""),
            b' '..=b'~' => quoted.push(char::from(b)),
            other => quoted.push_str(&format!("\\x{other:02x}")),
        }
    }
    quoted.push('"');
    quoted
}

/// Valkey's config-line tokenizer (`sdssplitargs`): splits on spaces, honours double quotes with
/// `\n \r \t \b \a \\ \" \xHH` escapes and single quotes with `\'`. `None` for unbalanced quotes
/// or a closing quote not followed by a space, exactly where Valkey reports a syntax error.
pub fn split_args(line: &str) -> Option<Vec<Vec<u8>>> {
    let bytes = line.as_bytes();
    let mut i = 0;
    let mut args = Vec::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= bytes.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            if in_double {
                let c = *bytes.get(i)?;
                let hex_escape = (bytes.get(i + 1), bytes.get(i + 2), bytes.get(i + 3));
                if let (b'\\', (Some(b'x'), Some(&high), Some(&low))) = (c, hex_escape)
                    && is_hex(high)
                    && is_hex(low)
                {
                    current.push(hex_value(high) * 16 + hex_value(low));
                    i += 3;
                } else if c == b'\\' && i + 1 < bytes.len() {
                    i += 1;
                    current.push(match bytes[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                } else if c == b'"' {
                    // The closing quote must be followed by a space or the end of the line.
                    if i + 1 < bytes.len() && !bytes[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    current.push(c);
                }
            } else if in_single {
                let c = *bytes.get(i)?;
                if c == b'\\' && bytes.get(i + 1) == Some(&b'\'') {
                    i += 1;
                    current.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < bytes.len() && !bytes[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    current.push(c);
                }
            } else {
                match bytes.get(i) {
                    None => break,
                    Some(b' ' | b'\n' | b'\r' | b'\t' | b'\0') => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(&c) => current.push(c),
                }
            }
            i += 1;
        }
        args.push(current);
    }
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// Builds config text one directive per line.
#[derive(Default)]
struct ConfWriter {
    text: String,
}

impl ConfWriter {
    fn comment(&mut self, text: &'static str) {
        self.text.push_str("# ");
        self.text.push_str(text);
        self.text.push('\n');
    }

    fn blank(&mut self) {
        self.text.push('\n');
    }

    fn directive(&mut self, name: &'static str, args: &[&str]) {
        self.text.push_str(name);
        for arg in args {
            self.text.push(' ');
            self.text.push_str(&quote_arg(arg));
        }
        self.text.push('\n');
    }

    fn tls_files(&mut self, cert: &str, key: &str, ca: &str) {
        self.directive("tls-cert-file", &[cert]);
        self.directive("tls-key-file", &[key]);
        self.directive("tls-ca-cert-file", &[ca]);
        self.directive("tls-replication", &["yes"]);
        // Clients may present a certificate but need not: the password is the client check.
        self.directive("tls-auth-clients", &["optional"]);
    }
}

/// `valkey.conf` of the data pods. `replica_of` is the master's host name for the replica
/// config (`None` renders the master config). The init container adds the pod's own
/// `replica-announce-ip`, its final `replicaof` and the password lines.
pub fn render_valkey_conf(spec: &ValkeySpec, replica_of: Option<&str>) -> String {
    let ports = PortPlan::of(spec);
    let version = ValkeyVersion::from_image(&spec.image);
    let mut w = ConfWriter::default();
    w.comment("Rendered by the vko operator. Do not edit: the operator overwrites this file.");
    w.comment("requirepass/masterauth, replica-announce-ip and the final replicaof are added by");
    w.comment("the init container at pod start; the password is never stored in a ConfigMap.");
    w.blank();
    w.comment("Network");
    w.directive("bind", &["*", "-::*"]);
    // With auth on the server has a password; otherwise the NetworkPolicy (if enabled) is the
    // fence. Protected mode would refuse every remote client of a password-less server.
    w.directive("protected-mode", &["no"]);
    if ports.tls {
        let plain = ports
            .valkey_plain
            .map_or_else(|| "0".to_owned(), |p| p.to_string());
        w.directive("port", &[&plain]);
        w.directive("tls-port", &[&ports.valkey.to_string()]);
        w.tls_files(TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE);
    } else {
        w.directive("port", &[&ports.valkey.to_string()]);
    }
    w.directive("tcp-backlog", &["511"]);
    w.directive("timeout", &["0"]);
    w.directive("tcp-keepalive", &["300"]);
    w.blank();
    w.comment("General");
    w.directive("daemonize", &["no"]);
    w.directive("loglevel", &["notice"]);
    w.directive("logfile", &[""]);
    w.directive("databases", &["16"]);
    w.directive("always-show-logo", &["no"]);
    w.directive("enable-debug-command", &["no"]);
    w.directive("enable-module-command", &["no"]);
    if version.supports(Feature::HideUserDataFromLog) {
        w.directive("hide-user-data-from-log", &["yes"]);
    }
    w.blank();
    w.comment("Replication");
    if let Some(master) = replica_of {
        w.directive("replicaof", &[master, &ports.valkey.to_string()]);
    }
    w.directive("replica-serve-stale-data", &["yes"]);
    w.directive("replica-read-only", &["yes"]);
    w.directive("repl-diskless-sync", &["yes"]);
    w.directive("repl-diskless-sync-delay", &["5"]);
    w.blank();
    w.comment("Persistence");
    w.directive("dir", &[DATA_DIR]);
    let mode = spec.persistence_enabled().then(|| spec.persistence_mode());
    let rdb = matches!(mode, Some(PersistenceMode::Rdb | PersistenceMode::Both));
    let aof = matches!(mode, Some(PersistenceMode::Aof | PersistenceMode::Both));
    if rdb {
        w.directive("save", &["900", "1"]);
        w.directive("save", &["300", "10"]);
        w.directive("save", &["60", "10000"]);
        w.directive("stop-writes-on-bgsave-error", &["yes"]);
        w.directive("rdbcompression", &["yes"]);
        w.directive("rdbchecksum", &["yes"]);
        w.directive("dbfilename", &["dump.rdb"]);
    } else {
        w.directive("save", &[""]);
    }
    if aof {
        w.directive("appendonly", &["yes"]);
        w.directive("appendfilename", &["appendonly.aof"]);
        w.directive("appendfsync", &["everysec"]);
        w.directive("no-appendfsync-on-rewrite", &["no"]);
        w.directive("auto-aof-rewrite-percentage", &["100"]);
        w.directive("auto-aof-rewrite-min-size", &["64mb"]);
    } else {
        w.directive("appendonly", &["no"]);
    }
    w.blank();
    w.comment("Memory");
    w.directive("maxmemory-policy", &["noeviction"]);
    w.directive("lazyfree-lazy-eviction", &["yes"]);
    w.directive("lazyfree-lazy-expire", &["yes"]);
    w.directive("lazyfree-lazy-server-del", &["yes"]);
    w.directive("lazyfree-lazy-user-del", &["yes"]);
    w.text
}

/// `sentinel.conf`. The Sentinel init container copies it into a writable directory (Sentinel
/// rewrites its config and cannot do that on a single-file mount) and adds the pod's
/// `sentinel announce-ip`, `announce-port`, and the password lines.
pub fn render_sentinel_conf(spec: &ValkeySpec, monitor_name: &str, master_host: &str) -> String {
    let ports = PortPlan::of(spec);
    let mut w = ConfWriter::default();
    w.comment("Rendered by the vko operator. Do not edit: the operator overwrites this file.");
    w.comment(
        "sentinel announce-ip/announce-port, requirepass and sentinel auth-pass are added by",
    );
    w.comment("the init container at pod start; the password is never stored in a ConfigMap.");
    w.blank();
    w.comment("Network");
    if ports.tls {
        let plain = ports
            .sentinel_plain
            .map_or_else(|| "0".to_owned(), |p| p.to_string());
        w.directive("port", &[&plain]);
        w.directive("tls-port", &[&ports.sentinel.to_string()]);
        if ValkeyVersion::sentinel_reloads_tls(spec) {
            w.tls_files(
                TLS_ACTIVE_CERT_FILE,
                TLS_ACTIVE_KEY_FILE,
                TLS_ACTIVE_CA_FILE,
            );
            w.comment("A changed certificate is re-read in place (ADR 0053).");
            w.directive(
                "tls-auto-reload-interval",
                &[&SENTINEL_TLS_RELOAD_INTERVAL_SECONDS.to_string()],
            );
        } else {
            w.tls_files(TLS_CERT_FILE, TLS_KEY_FILE, TLS_CA_FILE);
        }
    } else {
        w.directive("port", &[&ports.sentinel.to_string()]);
    }
    w.blank();
    w.comment("Host names everywhere: announced and resolved, never pod IPs.");
    w.directive("sentinel", &["resolve-hostnames", "yes"]);
    w.directive("sentinel", &["announce-hostnames", "yes"]);
    w.blank();
    w.comment("Monitor");
    let quorum = spec.sentinel_quorum().to_string();
    w.directive(
        "sentinel",
        &[
            "monitor",
            monitor_name,
            master_host,
            &ports.valkey.to_string(),
            &quorum,
        ],
    );
    w.directive(
        "sentinel",
        &[
            "down-after-milliseconds",
            monitor_name,
            &DOWN_AFTER_MS.to_string(),
        ],
    );
    w.directive(
        "sentinel",
        &[
            "failover-timeout",
            monitor_name,
            &FAILOVER_TIMEOUT_MS.to_string(),
        ],
    );
    w.directive("sentinel", &["parallel-syncs", monitor_name, "1"]);
    w.directive(
        "sentinel",
        &[
            "master-reboot-down-after-period",
            monitor_name,
            &MASTER_REBOOT_DOWN_AFTER_MS.to_string(),
        ],
    );
    w.text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_round_trips_through_the_tokenizer() {
        for arg in [
            "plain",
            "",
            "two words",
            "new\nline",
            "quote\"d",
            "back\\slash",
            "nul\0byte",
            "$(reboot)",
            "`id`",
            "'single'",
            "tab\there",
            "ünï",
            "\\x41",
        ] {
            let line = format!("directive {}", quote_arg(arg));
            assert!(!line.contains('\n'), "{line:?}");
            let tokens = split_args(&line).expect("parses");
            assert_eq!(
                tokens,
                vec![b"directive".to_vec(), arg.as_bytes().to_vec()],
                "{arg:?}"
            );
        }
    }

    #[test]
    fn version_gated_directives_follow_the_image_tag() {
        let conf = |image: &str| {
            let spec = ValkeySpec {
                image: image.to_owned(),
                ..ValkeySpec::default()
            };
            render_valkey_conf(&spec, None)
        };
        assert!(!conf("valkey/valkey:7.2.5").contains("hide-user-data-from-log"));
        for image in [
            "valkey/valkey:8.0",
            "valkey/valkey:9.0",
            "valkey/valkey:latest",
            "valkey/valkey@sha256:0123",
        ] {
            assert!(
                conf(image).contains("\nhide-user-data-from-log yes\n"),
                "{image}"
            );
        }
    }

    #[test]
    fn tokenizer_matches_valkey_on_known_lines() {
        assert_eq!(
            split_args(r#"save """#),
            Some(vec![b"save".to_vec(), Vec::new()])
        );
        assert_eq!(split_args(r#"a "b"c"#), None);
        assert_eq!(split_args(r#"a "b"#), None);
        assert_eq!(
            split_args("bind * -::*"),
            Some(vec![b"bind".to_vec(), b"*".to_vec(), b"-::*".to_vec()])
        );
        assert_eq!(split_args("  "), Some(Vec::new()));
    }
}
