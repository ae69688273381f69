//! Assembly of the effective `valkey.conf` and `sentinel.conf` (pure text in, text out) and the
//! one place that writes them to disk.
//!
//! Every argument we add goes through `vko_render::quote_arg`, so neither a password nor a host
//! name can end a directive or add one.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use sha1::{Digest, Sha1};
use vko_render::{quote_arg, split_args};

use crate::error::{Result, SidecarError};
use crate::topology::Endpoint;
use vko_authority::HOLD_HOST;

/// Marks what the sidecar appended, for a human reading the file.
const ADDED_COMMENT: &str = "# Added by vko-sidecar (identity, credentials, role per ADR 0005).";

/// The role directive of the effective config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleLine {
    /// No `replicaof`: boots as master. Only when nothing else can hold data, or standalone.
    Master,
    /// `replicaof <host> <port>`.
    ReplicaOf(Endpoint),
    /// `replicaof vko-hold.invalid <port>`.
    Hold { port: u16 },
}

impl RoleLine {
    fn directive(&self) -> Option<String> {
        match self {
            RoleLine::Master => None,
            RoleLine::ReplicaOf(ep) => {
                Some(format!("replicaof {} {}", quote_arg(&ep.host), ep.port))
            }
            RoleLine::Hold { port } => Some(format!("replicaof {HOLD_HOST} {port}")),
        }
    }
}

/// First token of a config line, lower-cased (`None` for blank lines, comments and lines the
/// tokenizer refuses).
fn first_token(line: &str) -> Option<String> {
    let trimmed = line.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    let tokens = split_args(trimmed)?;
    tokens
        .first()
        .map(|t| String::from_utf8_lossy(t).to_ascii_lowercase())
}

fn tokens(line: &str) -> Option<Vec<String>> {
    let trimmed = line.trim_start();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return None;
    }
    Some(
        split_args(trimmed)?
            .into_iter()
            .map(|t| String::from_utf8_lossy(&t).into_owned())
            .collect(),
    )
}

fn is_role_directive(line: &str) -> bool {
    matches!(first_token(line).as_deref(), Some("replicaof" | "slaveof"))
}

/// Every line except those whose directive is in `drop` (lower-case names).
fn without_directives(text: &str, drop: &[&str]) -> Vec<String> {
    text.lines()
        .filter(|line| *line != ADDED_COMMENT)
        .filter(|line| match first_token(line) {
            Some(name) => !drop.contains(&name.as_str()),
            None => true,
        })
        .map(str::to_owned)
        .collect()
}

fn join(lines: Vec<String>) -> String {
    let mut text = lines.join("\n");
    text.push('\n');
    text
}

/// Where the server of this pod is reached by its peers, and the password (if auth is on).
#[derive(Debug, Clone)]
pub struct Identity<'a> {
    pub announce_host: &'a str,
    pub announce_port: u16,
    pub password: Option<&'a str>,
}

/// The effective `valkey.conf`: the template without any role/identity/credential directive,
/// then ours, the role line last.
pub fn active_config(template: &str, me: &Identity<'_>, role: &RoleLine) -> String {
    let mut lines = without_directives(
        template,
        &[
            "replicaof",
            "slaveof",
            "replica-announce-ip",
            "slave-announce-ip",
            "replica-announce-port",
            "slave-announce-port",
            "requirepass",
            "masterauth",
            "masteruser",
        ],
    );
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines.push(String::new());
    lines.push(ADDED_COMMENT.to_owned());
    lines.push(format!(
        "replica-announce-ip {}",
        quote_arg(me.announce_host)
    ));
    lines.push(format!("replica-announce-port {}", me.announce_port));
    if let Some(password) = me.password {
        lines.extend(password_lines(password));
    }
    lines.extend(role.directive());
    join(lines)
}

/// `text` with its role directive replaced by `role` (appended last; removed for `Master`).
pub fn with_role_line(text: &str, role: &RoleLine) -> String {
    let mut lines: Vec<String> = text
        .lines()
        .filter(|line| !is_role_directive(line))
        .map(str::to_owned)
        .collect();
    lines.extend(role.directive());
    join(lines)
}

/// `text` with its `requirepass` and `masterauth` set to `password` (a rotated password, ADR
/// 0035), placed before the role line, which stays last.
pub fn with_password(text: &str, password: &str) -> String {
    let mut lines = without_directives(text, &["requirepass", "masterauth", "masteruser"]);
    let role_at = lines
        .iter()
        .position(|line| is_role_directive(line))
        .unwrap_or(lines.len());
    lines.splice(role_at..role_at, password_lines(password));
    join(lines)
}

/// `requirepass`, `masterauth`, and `masteruser default`: a replica authenticates to its master
/// with `AUTH default <password>`, which a master without a password (`nopass`) accepts where it
/// refuses `AUTH <password>`, so a replica started with auth on syncs from a master started
/// before auth was turned on (ADR 0035).
fn password_lines(password: &str) -> [String; 3] {
    [
        format!("requirepass {}", quote_arg(password)),
        format!("masterauth {}", quote_arg(password)),
        format!("masteruser {}", vko_valkey::dial::DEFAULT_USER),
    ]
}

/// The `requirepass` `text` holds (the last one wins, as in Valkey): what the server started
/// from it accepts.
pub fn requirepass_of(text: &str) -> Option<String> {
    text.lines()
        .filter(|line| first_token(line).as_deref() == Some("requirepass"))
        .filter_map(tokens)
        .filter_map(|t| t.get(1).cloned())
        .next_back()
}

/// The role directive `text` holds (the last one wins, as in Valkey).
pub fn role_line_of(text: &str) -> RoleLine {
    let mut role = RoleLine::Master;
    for line in text.lines() {
        if !is_role_directive(line) {
            continue;
        }
        let Some(t) = tokens(line) else { continue };
        let [_, host, port, ..] = t.as_slice() else {
            continue;
        };
        if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case("one") {
            role = RoleLine::Master;
        } else if let Ok(port) = port.parse::<u16>() {
            role = if host == HOLD_HOST {
                RoleLine::Hold { port }
            } else {
                RoleLine::ReplicaOf(Endpoint::new(host.clone(), port))
            };
        }
    }
    role
}

/// The operator's recorded master (ADR 0005, no Sentinel): the `replicaof` of the replica config.
pub fn recorded_master(replica_template: &str) -> Option<Endpoint> {
    match role_line_of(replica_template) {
        RoleLine::ReplicaOf(ep) => Some(ep),
        RoleLine::Master | RoleLine::Hold { .. } => None,
    }
}

/// `sentinel myid`: stable per pod, so a restarted Sentinel keeps its identity and the other
/// Sentinels' peer tables do not grow (sha1 hex of `<pod>.<namespace>`, 40 chars).
pub fn sentinel_myid(pod: &str, namespace: &str) -> String {
    hex::encode(Sha1::digest(format!("{pod}.{namespace}").as_bytes()))
}

/// The `sentinel monitor <name> <host> <port> <quorum>` of a template.
pub fn seeded_monitor(template: &str, name: &str) -> Option<Endpoint> {
    template.lines().find_map(|line| {
        let t = tokens(line)?;
        match t.as_slice() {
            [s, m, n, host, port, _quorum]
                if s.eq_ignore_ascii_case("sentinel")
                    && m.eq_ignore_ascii_case("monitor")
                    && n == name =>
            {
                Some(Endpoint::new(host.clone(), port.parse().ok()?))
            }
            _ => None,
        }
    })
}

/// What `sentinel-init` adds to the template.
#[derive(Debug, Clone)]
pub struct SentinelIdentity<'a> {
    pub monitor_name: &'a str,
    pub announce_host: &'a str,
    pub announce_port: u16,
    /// The data tier's password (`sentinel auth-pass`), and Sentinel's own unless disabled.
    pub password: Option<&'a str>,
    pub sentinel_auth_disabled: bool,
    pub myid: &'a str,
}

/// The effective `sentinel.conf`: the template with its monitor pointed at `master` (when given),
/// plus announce, credentials and myid.
pub fn sentinel_config(
    template: &str,
    me: &SentinelIdentity<'_>,
    master: Option<&Endpoint>,
) -> Result<String> {
    let mut found_monitor = false;
    let mut lines = Vec::new();
    for line in template.lines().filter(|line| *line != ADDED_COMMENT) {
        let t = tokens(line);
        let directive = t.as_ref().map(|t| {
            let lower: Vec<String> = t.iter().take(2).map(|s| s.to_ascii_lowercase()).collect();
            lower.join(" ")
        });
        match (directive.as_deref(), t.as_deref()) {
            (Some("sentinel monitor"), Some([_, _, name, _, _, quorum]))
                if name == me.monitor_name =>
            {
                found_monitor = true;
                match master {
                    Some(ep) => lines.push(format!(
                        "sentinel monitor {} {} {} {}",
                        quote_arg(name),
                        quote_arg(&ep.host),
                        ep.port,
                        quote_arg(quorum)
                    )),
                    None => lines.push(line.to_owned()),
                }
            }
            (
                Some(
                    "sentinel announce-ip"
                    | "sentinel announce-port"
                    | "sentinel auth-pass"
                    | "sentinel auth-user"
                    | "sentinel myid",
                ),
                _,
            ) => {}
            (Some(d), _) if d == "requirepass" || d.starts_with("requirepass ") => {}
            _ => lines.push(line.to_owned()),
        }
    }
    if !found_monitor {
        return Err(SidecarError::Template {
            path: "sentinel.conf".into(),
            detail: format!("no `sentinel monitor {}` line", me.monitor_name),
        });
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    lines.push(String::new());
    lines.push(ADDED_COMMENT.to_owned());
    lines.push(format!(
        "sentinel announce-ip {}",
        quote_arg(me.announce_host)
    ));
    lines.push(format!("sentinel announce-port {}", me.announce_port));
    if let Some(password) = me.password {
        if !me.sentinel_auth_disabled {
            lines.push(format!("requirepass {}", quote_arg(password)));
        }
        lines.push(format!(
            "sentinel auth-pass {} {}",
            quote_arg(me.monitor_name),
            quote_arg(password)
        ));
        // `AUTH default <password>`: accepted by servers without a password too (ADR 0035).
        lines.push(format!(
            "sentinel auth-user {} {}",
            quote_arg(me.monitor_name),
            vko_valkey::dial::DEFAULT_USER
        ));
    }
    lines.push(format!("sentinel myid {}", quote_arg(me.myid)));
    Ok(join(lines))
}

/// The copy of the password the probes of the `valkey` container read, next to the effective
/// config (`vko_render::paths::ACTIVE_PASSWORD_FILE` for the rendered path).
pub fn probe_password_path(active_config: &Path) -> std::path::PathBuf {
    active_config.with_file_name("password")
}

/// Write `text` to `path` readable only by its owner (it holds the password), atomically: a
/// temporary file in the same directory, then a rename, so a reader never sees half a file.
pub fn write_private(path: &Path, text: &str) -> Result<()> {
    write_private_bytes(path, text.as_bytes())
}

/// [`write_private`] of any bytes (a certificate or key as the Secret holds it).
pub fn write_private_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "config".to_owned());
    let tmp = dir.join(format!(".{name}.vko-tmp"));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // An existing temp file keeps its old mode through `open`; force ours.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(SidecarError::file(path))
}

/// Read a file; `Ok(None)` when it does not exist (an optional ConfigMap mount).
pub fn read_optional(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SidecarError::file(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn the_probe_password_copy_is_where_the_rendered_probes_read_it() {
        use vko_render::paths;
        assert_eq!(
            probe_password_path(Path::new(paths::ACTIVE_CONFIG_FILE)),
            Path::new(paths::ACTIVE_PASSWORD_FILE)
        );
    }

    #[test]
    fn a_rotated_password_replaces_requirepass_and_masterauth_and_the_role_line_stays_last() {
        let me = Identity {
            announce_host: "v-0.h",
            announce_port: 6379,
            password: Some("old"),
        };
        let role = RoleLine::ReplicaOf(Endpoint::new("v-1.h", 6379));
        let before = active_config("port 6379\nrequirepass x\n", &me, &role);
        let after = with_password(&before, "n e\"w");
        assert_eq!(
            directives(&after, "requirepass"),
            vec![vec![b"requirepass".to_vec(), b"n e\"w".to_vec()]]
        );
        assert_eq!(
            directives(&after, "masterauth"),
            vec![vec![b"masterauth".to_vec(), b"n e\"w".to_vec()]]
        );
        assert_eq!(role_line_of(&after), role);
        assert!(
            after.trim_end().ends_with("replicaof v-1.h 6379"),
            "{after}"
        );
        assert_eq!(
            with_password(&after, "n e\"w"),
            after,
            "the same password changes nothing"
        );
        assert_eq!(requirepass_of(&before).as_deref(), Some("old"));
        assert_eq!(requirepass_of(&after).as_deref(), Some("n e\"w"));
        assert_eq!(requirepass_of("port 1\n"), None);
    }

    const TEMPLATE: &str = "# Rendered by the vko operator.\nport 6379\nreplicaof vk-0.vk-headless.ns.svc.cluster.local 6379\nsave \"\"\nappendonly no\n";

    fn me(password: Option<&str>) -> Identity<'_> {
        Identity {
            announce_host: "vk-1.vk-headless.ns.svc.cluster.local",
            announce_port: 6379,
            password,
        }
    }

    fn directives(text: &str, name: &str) -> Vec<Vec<Vec<u8>>> {
        text.lines()
            .filter(|l| first_token(l).as_deref() == Some(name))
            .map(|l| split_args(l).unwrap())
            .collect()
    }

    #[test]
    fn active_config_adds_identity_credentials_and_exactly_one_role_line() {
        let text = active_config(
            TEMPLATE,
            &me(Some("p w\"\n#x")),
            &RoleLine::Hold { port: 6379 },
        );
        assert!(text.starts_with("# Rendered by the vko operator.\nport 6379\n"));
        assert_eq!(
            directives(&text, "replicaof"),
            vec![vec![
                b"replicaof".to_vec(),
                HOLD_HOST.as_bytes().to_vec(),
                b"6379".to_vec()
            ]]
        );
        assert_eq!(
            directives(&text, "requirepass"),
            vec![vec![b"requirepass".to_vec(), b"p w\"\n#x".to_vec()]]
        );
        assert_eq!(
            directives(&text, "masterauth"),
            vec![vec![b"masterauth".to_vec(), b"p w\"\n#x".to_vec()]]
        );
        assert_eq!(
            directives(&text, "replica-announce-ip")[0][1],
            b"vk-1.vk-headless.ns.svc.cluster.local".to_vec()
        );
        assert_eq!(
            directives(&text, "replica-announce-port")[0][1],
            b"6379".to_vec()
        );
        // The quoted password cannot start a line of its own.
        assert!(!text.lines().any(|l| l.starts_with("#x")));
        assert_eq!(role_line_of(&text), RoleLine::Hold { port: 6379 });
    }

    #[test]
    fn active_config_without_password_has_no_credentials() {
        let text = active_config(TEMPLATE, &me(None), &RoleLine::Master);
        assert!(directives(&text, "requirepass").is_empty());
        assert!(directives(&text, "masterauth").is_empty());
        assert!(directives(&text, "replicaof").is_empty());
        assert_eq!(role_line_of(&text), RoleLine::Master);
    }

    #[test]
    fn role_line_is_replaced_in_place_and_round_trips() {
        let master = Endpoint::new("vk-2.vk-headless.ns.svc.cluster.local", 6379);
        let base = active_config(TEMPLATE, &me(Some("pw")), &RoleLine::Hold { port: 6379 });
        let replica = with_role_line(&base, &RoleLine::ReplicaOf(master.clone()));
        assert_eq!(role_line_of(&replica), RoleLine::ReplicaOf(master));
        assert_eq!(directives(&replica, "replicaof").len(), 1);
        // Everything but the role line is untouched.
        fn strip(t: &str) -> Vec<&str> {
            t.lines().filter(|l| !is_role_directive(l)).collect()
        }
        assert_eq!(strip(&base), strip(&replica));
        let back = with_role_line(&replica, &RoleLine::Hold { port: 6379 });
        assert_eq!(back, base);
        // Idempotent: the same role gives the same text (no rewrite on an unchanged role).
        assert_eq!(with_role_line(&back, &RoleLine::Hold { port: 6379 }), back);
        // A CONFIG REWRITE-style `slaveof` or `replicaof no one` is replaced too.
        let rewritten = format!("{base}slaveof other 1\n");
        assert_eq!(
            with_role_line(&rewritten, &RoleLine::Hold { port: 6379 }),
            base
        );
        assert_eq!(role_line_of("replicaof no one\n"), RoleLine::Master);
    }

    #[test]
    fn recorded_master_is_the_replica_configs_replicaof() {
        assert_eq!(
            recorded_master(TEMPLATE),
            Some(Endpoint::new("vk-0.vk-headless.ns.svc.cluster.local", 6379))
        );
        assert_eq!(recorded_master("port 6379\n"), None);
    }

    #[test]
    fn myid_is_sha1_hex_of_pod_and_namespace() {
        // printf 'vk-sentinel-0.demo' | sha1sum
        assert_eq!(
            sentinel_myid("vk-sentinel-0", "demo"),
            "f30d7dad7407eb976249ca45ed716d9f011617a5"
        );
        let id = sentinel_myid("vk-sentinel-0", "demo");
        assert_eq!(id.len(), 40);
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(id, sentinel_myid("vk-sentinel-1", "demo"));
        assert_eq!(id, sentinel_myid("vk-sentinel-0", "demo"));
    }

    const SENTINEL_TEMPLATE: &str = "# Rendered\nport 26379\nsentinel resolve-hostnames yes\nsentinel announce-hostnames yes\nsentinel monitor vk vk-0.vk-headless.ns.svc.cluster.local 6379 2\nsentinel down-after-milliseconds vk 5000\n";

    fn sentinel_me(password: Option<&str>, disabled: bool) -> SentinelIdentity<'_> {
        SentinelIdentity {
            monitor_name: "vk",
            announce_host: "vk-sentinel-1.vk-sentinel-headless.ns.svc.cluster.local",
            announce_port: 26379,
            password,
            sentinel_auth_disabled: disabled,
            myid: "0123456789abcdef0123456789abcdef01234567",
        }
    }

    #[test]
    fn sentinel_config_points_the_monitor_and_adds_identity() {
        let current = Endpoint::new("vk-2.vk-headless.ns.svc.cluster.local", 6379);
        let text = sentinel_config(
            SENTINEL_TEMPLATE,
            &sentinel_me(Some("s3 cret"), false),
            Some(&current),
        )
        .unwrap();
        assert_eq!(seeded_monitor(&text, "vk"), Some(current));
        assert!(
            text.contains("\nsentinel monitor vk vk-2.vk-headless.ns.svc.cluster.local 6379 2\n")
        );
        assert!(text.contains("\nsentinel down-after-milliseconds vk 5000\n"));
        assert!(text.contains("\nrequirepass \"s3 cret\"\n"));
        assert!(text.contains("\nsentinel auth-pass vk \"s3 cret\"\n"));
        assert!(text.contains(
            "\nsentinel announce-ip vk-sentinel-1.vk-sentinel-headless.ns.svc.cluster.local\n"
        ));
        assert!(text.contains("\nsentinel announce-port 26379\n"));
        assert!(text.contains("\nsentinel myid 0123456789abcdef0123456789abcdef01234567\n"));
        // Running it over its own output changes nothing (a restarted init container).
        let again = sentinel_config(&text, &sentinel_me(Some("s3 cret"), false), None).unwrap();
        assert_eq!(again, text);
    }

    #[test]
    fn sentinel_config_seed_fallback_and_auth_disabled() {
        let text =
            sentinel_config(SENTINEL_TEMPLATE, &sentinel_me(Some("pw"), true), None).unwrap();
        assert_eq!(
            seeded_monitor(&text, "vk"),
            Some(Endpoint::new("vk-0.vk-headless.ns.svc.cluster.local", 6379))
        );
        assert!(!text.contains("requirepass"));
        assert!(text.contains("\nsentinel auth-pass vk pw\n"));
        let none = sentinel_config(SENTINEL_TEMPLATE, &sentinel_me(None, false), None).unwrap();
        assert!(!none.contains("auth-pass") && !none.contains("requirepass"));
        assert!(sentinel_config("port 1\n", &sentinel_me(None, false), None).is_err());
    }

    #[test]
    fn write_private_is_owner_only_and_replaces() {
        let dir = std::env::temp_dir().join(format!("vko-sidecar-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("valkey.conf");
        write_private(&path, "a\n").unwrap();
        write_private(&path, "b\n").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!((mode, text.as_str()), (0o600, "b\n"));
        assert_eq!(read_optional(&dir.join("nope")).unwrap(), None);
    }
}
