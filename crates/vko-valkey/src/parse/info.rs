//! INFO: `# Section` headers and `key:value` lines.

use std::collections::BTreeMap;

use super::{Fields, parse_value};
use crate::error::{Error, Result};

/// Any INFO reply split into its sections (names lower-cased: `replication`, `server`, ...). Keeps
/// every field as text; the typed views below pick what the operator needs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Info {
    pub sections: BTreeMap<String, BTreeMap<String, String>>,
}

impl Info {
    /// Never fails: lines that are not `key:value` are ignored. Fields before any header go to the
    /// section named `""`.
    pub fn parse(text: &str) -> Info {
        let mut sections: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut current = String::new();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            if let Some(header) = line.strip_prefix('#') {
                current = header.trim().to_ascii_lowercase();
                sections.entry(current.clone()).or_default();
            } else if let Some((key, value)) = line.split_once(':') {
                sections
                    .entry(current.clone())
                    .or_default()
                    .insert(key.to_owned(), value.to_owned());
            }
        }
        Info { sections }
    }

    pub fn section(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.sections.get(&name.to_ascii_lowercase())
    }

    pub fn get(&self, section: &str, key: &str) -> Option<&str> {
        self.section(section)?.get(key).map(String::as_str)
    }

    /// The fields of one section; a reply without any headers counts as that section.
    fn fields(&self, name: &'static str) -> Result<Fields> {
        let map = match self.section(name) {
            Some(map) => map.clone(),
            None if self.sections.keys().all(String::is_empty) => {
                self.sections.get("").cloned().unwrap_or_default()
            }
            None => return Err(Error::parse(name, "INFO reply has no such section")),
        };
        Ok(Fields::new(name, map))
    }
}

/// `role:` of INFO replication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationRole {
    Master,
    Replica,
}

/// `master_link_status:` of a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkStatus {
    Up,
    Down,
    Other(String),
}

impl From<&str> for LinkStatus {
    fn from(value: &str) -> Self {
        match value {
            "up" => LinkStatus::Up,
            "down" => LinkStatus::Down,
            other => LinkStatus::Other(other.to_owned()),
        }
    }
}

/// `state=` of a `slaveN:` line on a master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaSyncState {
    /// Streaming the replication feed: the only state in which `offset` is meaningful.
    Online,
    WaitBgsave,
    SendBulk,
    Other(String),
}

impl From<&str> for ReplicaSyncState {
    fn from(value: &str) -> Self {
        match value {
            "online" => ReplicaSyncState::Online,
            "wait_bgsave" => ReplicaSyncState::WaitBgsave,
            "send_bulk" => ReplicaSyncState::SendBulk,
            other => ReplicaSyncState::Other(other.to_owned()),
        }
    }
}

/// One `slaveN:ip=...,port=...,state=...,offset=...,lag=...` line.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectedReplica {
    /// The `ip=` field: the replica's announced address (a hostname with `replica-announce-ip`).
    pub host: String,
    pub port: u16,
    pub state: ReplicaSyncState,
    /// The last offset the replica acknowledged (REPLCONF ACK, about once a second).
    pub offset: i64,
    /// Seconds since the last acknowledgement.
    pub lag: i64,
    pub other: BTreeMap<String, String>,
}

/// The replica side of INFO replication (present when `role:slave`).
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamLink {
    pub master_host: String,
    pub master_port: u16,
    pub link_status: LinkStatus,
    /// `-1` while the link is down.
    pub last_io_seconds_ago: Option<i64>,
    /// A full sync (RDB transfer or load) is running.
    pub sync_in_progress: bool,
    /// `slave_repl_offset`: what the replica has applied.
    pub repl_offset: i64,
    /// `slave_read_repl_offset`: what the replica has read (>= applied).
    pub read_repl_offset: Option<i64>,
    /// Seconds the link has been down; absent while it is up, `-1` during the first sync.
    pub link_down_since_seconds: Option<i64>,
    pub priority: Option<i64>,
    pub read_only: Option<bool>,
    pub announced: Option<bool>,
}

/// INFO replication, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicationInfo {
    pub role: ReplicationRole,
    /// Present iff `role` is `Replica`.
    pub upstream: Option<UpstreamLink>,
    pub connected_replicas: u32,
    /// The `slaveN:` lines, in N order.
    pub replicas: Vec<ConnectedReplica>,
    pub master_repl_offset: i64,
    pub master_replid: String,
    pub master_replid2: Option<String>,
    pub second_repl_offset: Option<i64>,
    /// `no-failover`, `waiting-for-sync`, `failover-in-progress` (Valkey/Redis >= 6.2).
    pub master_failover_state: Option<String>,
    pub other: BTreeMap<String, String>,
}

impl ReplicationInfo {
    pub fn parse(text: &str) -> Result<ReplicationInfo> {
        Self::from_info(&Info::parse(text))
    }

    /// The offset this server applied from the master at `host`:`port`, when it is that
    /// master's replica with its link up; `None` otherwise. A master's own `slaveN:` line names
    /// a replica by its announced host, which a process that replaced it (a new pod under the
    /// same name) also answers to while the old connection is not yet closed: only the replica's
    /// own word says whom it follows (host names compared as DNS does, case-insensitively).
    pub fn applied_from(&self, host: &str, port: u16) -> Option<i64> {
        let link = self.upstream.as_ref()?;
        let same_host = link
            .master_host
            .trim_end_matches('.')
            .eq_ignore_ascii_case(host.trim_end_matches('.'));
        (self.role == ReplicationRole::Replica
            && same_host
            && link.master_port == port
            && link.link_status == LinkStatus::Up)
            .then_some(link.repl_offset)
    }

    pub fn from_info(info: &Info) -> Result<ReplicationInfo> {
        let mut fields = info.fields("replication")?;
        let role = match fields.required::<String>("role")?.as_str() {
            "master" => ReplicationRole::Master,
            "slave" | "replica" => ReplicationRole::Replica,
            other => {
                return Err(Error::parse(
                    "replication",
                    format!("unknown role {other:?}"),
                ));
            }
        };
        let upstream = match role {
            ReplicationRole::Master => None,
            ReplicationRole::Replica => Some(UpstreamLink {
                master_host: fields.required("master_host")?,
                master_port: fields.required("master_port")?,
                link_status: LinkStatus::from(
                    fields.required::<String>("master_link_status")?.as_str(),
                ),
                last_io_seconds_ago: fields.optional("master_last_io_seconds_ago")?,
                sync_in_progress: fields.required_bool("master_sync_in_progress")?,
                repl_offset: fields.required("slave_repl_offset")?,
                read_repl_offset: fields.optional("slave_read_repl_offset")?,
                link_down_since_seconds: fields.optional("master_link_down_since_seconds")?,
                priority: fields.optional("slave_priority")?,
                read_only: fields.optional_bool("slave_read_only")?,
                announced: fields.optional_bool("replica_announced")?,
            }),
        };
        let mut replicas = Vec::new();
        for (key, value) in fields.take_matching(is_replica_line_key) {
            let index: usize = parse_value("replication", &key, &key["slave".len()..])?;
            replicas.push((index, parse_replica_line(&key, &value)?));
        }
        replicas.sort_by_key(|(index, _)| *index);
        Ok(ReplicationInfo {
            role,
            upstream,
            connected_replicas: fields.required("connected_slaves")?,
            replicas: replicas.into_iter().map(|(_, replica)| replica).collect(),
            master_repl_offset: fields.required("master_repl_offset")?,
            master_replid: fields.required("master_replid")?,
            master_replid2: fields.optional("master_replid2")?,
            second_repl_offset: fields.optional("second_repl_offset")?,
            master_failover_state: fields.optional("master_failover_state")?,
            other: fields.rest(),
        })
    }
}

fn is_replica_line_key(key: &str) -> bool {
    key.strip_prefix("slave")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_replica_line(key: &str, value: &str) -> Result<ConnectedReplica> {
    let mut map = BTreeMap::new();
    for pair in value.split(',') {
        let (k, v) = pair.split_once('=').ok_or_else(|| {
            Error::parse("replication", format!("{key}: {pair:?} is not key=value"))
        })?;
        map.insert(k.to_owned(), v.to_owned());
    }
    let mut fields = Fields::new("replication replica line", map);
    Ok(ConnectedReplica {
        host: fields.required("ip")?,
        port: fields.required("port")?,
        state: ReplicaSyncState::from(fields.required::<String>("state")?.as_str()),
        offset: fields.required("offset")?,
        lag: fields.required("lag")?,
        other: fields.rest(),
    })
}

/// INFO server, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    pub run_id: String,
    /// `valkey_version` (absent on Redis).
    pub valkey_version: Option<String>,
    /// `redis_version`: the Redis compatibility version on Valkey (7.2.4 on Valkey 8).
    pub redis_version: String,
    /// `valkey` on Valkey (absent on Redis).
    pub server_name: Option<String>,
    /// `standalone`, `sentinel` or `cluster`.
    pub server_mode: Option<String>,
    pub uptime_in_seconds: u64,
    pub tcp_port: Option<u16>,
    pub other: BTreeMap<String, String>,
}

impl ServerInfo {
    pub fn parse(text: &str) -> Result<ServerInfo> {
        Self::from_info(&Info::parse(text))
    }

    pub fn from_info(info: &Info) -> Result<ServerInfo> {
        let mut fields = info.fields("server")?;
        Ok(ServerInfo {
            run_id: fields.required("run_id")?,
            valkey_version: fields.optional("valkey_version")?,
            redis_version: fields.required("redis_version")?,
            server_name: fields.optional("server_name")?,
            server_mode: fields.optional("server_mode")?,
            uptime_in_seconds: fields.required("uptime_in_seconds")?,
            tcp_port: fields.optional("tcp_port")?,
            other: fields.rest(),
        })
    }

    /// The product version: `valkey_version` on Valkey, `redis_version` on Redis.
    pub fn version(&self) -> &str {
        self.valkey_version
            .as_deref()
            .unwrap_or(&self.redis_version)
    }
}

/// INFO persistence, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct PersistenceInfo {
    /// Loading an RDB/AOF (at start or after a full sync): most commands answer `LOADING`.
    pub loading: bool,
    pub async_loading: Option<bool>,
    pub loading_loaded_perc: Option<f64>,
    pub loading_eta_seconds: Option<i64>,
    pub rdb_changes_since_last_save: i64,
    pub rdb_bgsave_in_progress: bool,
    pub rdb_last_save_time: i64,
    /// `ok` or `err`.
    pub rdb_last_bgsave_status: String,
    pub aof_enabled: bool,
    pub aof_rewrite_in_progress: bool,
    pub aof_last_bgrewrite_status: Option<String>,
    /// `ok` or `err`.
    pub aof_last_write_status: Option<String>,
    pub other: BTreeMap<String, String>,
}

impl PersistenceInfo {
    pub fn parse(text: &str) -> Result<PersistenceInfo> {
        Self::from_info(&Info::parse(text))
    }

    pub fn from_info(info: &Info) -> Result<PersistenceInfo> {
        let mut fields = info.fields("persistence")?;
        Ok(PersistenceInfo {
            loading: fields.required_bool("loading")?,
            async_loading: fields.optional_bool("async_loading")?,
            loading_loaded_perc: fields.optional("loading_loaded_perc")?,
            loading_eta_seconds: fields.optional("loading_eta_seconds")?,
            rdb_changes_since_last_save: fields.required("rdb_changes_since_last_save")?,
            rdb_bgsave_in_progress: fields.required_bool("rdb_bgsave_in_progress")?,
            rdb_last_save_time: fields.required("rdb_last_save_time")?,
            rdb_last_bgsave_status: fields.required("rdb_last_bgsave_status")?,
            aof_enabled: fields.required_bool("aof_enabled")?,
            aof_rewrite_in_progress: fields.required_bool("aof_rewrite_in_progress")?,
            aof_last_bgrewrite_status: fields.optional("aof_last_bgrewrite_status")?,
            aof_last_write_status: fields.optional("aof_last_write_status")?,
            other: fields.rest(),
        })
    }
}

/// One `dbN:keys=...,expires=...,avg_ttl=...` line.
#[derive(Debug, Clone, PartialEq)]
pub struct DbStats {
    pub keys: u64,
    pub expires: u64,
    pub avg_ttl: Option<u64>,
    pub other: BTreeMap<String, String>,
}

/// INFO keyspace: only databases that hold keys appear.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyspaceInfo {
    pub dbs: BTreeMap<u32, DbStats>,
    /// Lines that are not `dbN:` (none today).
    pub other: BTreeMap<String, String>,
}

impl KeyspaceInfo {
    pub fn parse(text: &str) -> Result<KeyspaceInfo> {
        Self::from_info(&Info::parse(text))
    }

    pub fn from_info(info: &Info) -> Result<KeyspaceInfo> {
        let mut fields = info.fields("keyspace")?;
        let mut dbs = BTreeMap::new();
        let is_db = |k: &str| {
            k.strip_prefix("db")
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        };
        for (key, value) in fields.take_matching(is_db) {
            let index: u32 = parse_value("keyspace", &key, &key[2..])?;
            let mut map = BTreeMap::new();
            for pair in value.split(',') {
                let (k, v) = pair.split_once('=').ok_or_else(|| {
                    Error::parse("keyspace", format!("{key}: {pair:?} is not key=value"))
                })?;
                map.insert(k.to_owned(), v.to_owned());
            }
            let mut db = Fields::new("keyspace db line", map);
            dbs.insert(
                index,
                DbStats {
                    keys: db.required("keys")?,
                    expires: db.required("expires")?,
                    avg_ttl: db.optional("avg_ttl")?,
                    other: db.rest(),
                },
            );
        }
        Ok(KeyspaceInfo {
            dbs,
            other: fields.rest(),
        })
    }

    /// Keys over all databases.
    pub fn total_keys(&self) -> u64 {
        self.dbs.values().map(|db| db.keys).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::fixtures::text;

    #[test]
    fn master_with_hostname_replica() {
        let info = ReplicationInfo::parse(&text("info_replication_master")).unwrap();
        assert_eq!(info.role, ReplicationRole::Master);
        assert_eq!(info.upstream, None);
        assert_eq!(info.connected_replicas, 1);
        assert_eq!(info.master_repl_offset, 425);
        assert_eq!(
            info.master_replid,
            "6a6baf49c258d215d4a574359b99650377fc6b5d"
        );
        assert_eq!(info.second_repl_offset, Some(-1));
        assert_eq!(info.master_failover_state.as_deref(), Some("no-failover"));
        assert_eq!(
            info.replicas,
            vec![ConnectedReplica {
                host: "localhost".into(),
                port: 21401,
                state: ReplicaSyncState::Online,
                offset: 0,
                lag: 0,
                other: [("type".to_owned(), "replica".to_owned())].into(),
            }]
        );
        // Unknown fields are kept, known ones are not duplicated there.
        assert_eq!(
            info.other.get("repl_backlog_size").map(String::as_str),
            Some("10485760")
        );
        assert!(!info.other.contains_key("role"));
        assert!(!info.other.contains_key("slave0"));
    }

    #[test]
    fn master_during_a_full_sync_lists_both_replica_states() {
        let info = ReplicationInfo::parse(&text("info_replication_master_during_sync")).unwrap();
        let states: Vec<_> = info
            .replicas
            .iter()
            .map(|r| (r.port, r.state.clone()))
            .collect();
        assert_eq!(
            states,
            vec![
                (21401, ReplicaSyncState::Online),
                (21402, ReplicaSyncState::WaitBgsave)
            ]
        );
        assert_eq!(info.connected_replicas, 2);
    }

    #[test]
    fn replica_link_up() {
        let info = ReplicationInfo::parse(&text("info_replication_replica")).unwrap();
        assert_eq!(info.role, ReplicationRole::Replica);
        let up = info.upstream.unwrap();
        assert_eq!(up.master_host, "localhost");
        assert_eq!(up.master_port, 21400);
        assert_eq!(up.link_status, LinkStatus::Up);
        assert!(!up.sync_in_progress);
        assert_eq!(up.repl_offset, 425);
        assert_eq!(up.read_repl_offset, Some(425));
        assert_eq!(up.link_down_since_seconds, None);
        assert_eq!(up.last_io_seconds_ago, Some(0));
        assert_eq!(up.priority, Some(100));
        assert_eq!(up.read_only, Some(true));
        assert_eq!(up.announced, Some(true));
        assert_eq!(info.master_repl_offset, 425);
    }

    #[test]
    fn only_a_linked_replica_of_the_named_master_says_what_it_applied_from_it() {
        let up = ReplicationInfo::parse(&text("info_replication_replica")).unwrap();
        assert_eq!(up.applied_from("localhost", 21400), Some(425));
        assert_eq!(up.applied_from("LOCALHOST.", 21400), Some(425));
        assert_eq!(up.applied_from("localhost", 21401), None);
        assert_eq!(up.applied_from("otherhost", 21400), None);
        for name in [
            "info_replication_replica_link_down",
            "info_replication_replica_syncing",
            "info_replication_replica_loading",
            "info_replication_master",
        ] {
            let info = ReplicationInfo::parse(&text(name)).unwrap();
            let host = info
                .upstream
                .as_ref()
                .map(|u| (u.master_host.clone(), u.master_port));
            let (host, port) = host.unwrap_or(("localhost".into(), 21400));
            assert_eq!(info.applied_from(&host, port), None, "{name}");
        }
    }

    #[test]
    fn replica_link_down_after_master_died() {
        let up = ReplicationInfo::parse(&text("info_replication_replica_link_down"))
            .unwrap()
            .upstream
            .unwrap();
        assert_eq!(up.link_status, LinkStatus::Down);
        assert_eq!(up.link_down_since_seconds, Some(1));
        assert_eq!(up.last_io_seconds_ago, Some(-1));
        assert_eq!(up.repl_offset, 6922);
    }

    #[test]
    fn replica_during_full_sync_and_loading() {
        for name in [
            "info_replication_replica_syncing",
            "info_replication_replica_loading",
        ] {
            let info = ReplicationInfo::parse(&text(name)).unwrap();
            let up = info.upstream.unwrap();
            assert!(up.sync_in_progress, "{name}");
            assert_eq!(up.link_status, LinkStatus::Down, "{name}");
            assert_eq!(up.link_down_since_seconds, Some(-1), "{name}");
            assert!(info.other.contains_key("master_sync_total_bytes"), "{name}");
        }
        let loading = ReplicationInfo::parse(&text("info_replication_replica_loading")).unwrap();
        assert_eq!(
            loading.other.get("master_sync_perc").map(String::as_str),
            Some("100.00")
        );
    }

    #[test]
    fn promoted_replica_remembers_its_old_replication_id() {
        let info = ReplicationInfo::parse(&text("info_replication_promoted")).unwrap();
        assert_eq!(info.role, ReplicationRole::Master);
        assert!(info.replicas.is_empty());
        assert_eq!(info.connected_replicas, 0);
        // The old master's replication id and the offset it last reached (+1) are kept for PSYNC.
        let old = ReplicationInfo::parse(&text("info_replication_replica_link_down")).unwrap();
        assert_eq!(info.master_replid2.as_ref(), Some(&old.master_replid));
        assert_eq!(
            info.second_repl_offset,
            Some(old.upstream.unwrap().repl_offset + 1)
        );
        assert_eq!(info.master_repl_offset, 7347);
    }

    #[test]
    fn sections_are_found_inside_a_full_info() {
        let master = Info::parse(&text("info_default_master"));
        assert!(ReplicationInfo::from_info(&master).is_ok());
        assert_eq!(
            ServerInfo::from_info(&master).unwrap().tcp_port,
            Some(21400)
        );
        assert!(!PersistenceInfo::from_info(&master).unwrap().loading);
        assert_eq!(KeyspaceInfo::from_info(&master).unwrap().total_keys(), 13);
        let replica = Info::parse(&text("info_all_replica"));
        assert_eq!(
            ReplicationInfo::from_info(&replica).unwrap().role,
            ReplicationRole::Replica
        );
        assert_eq!(replica.get("Server", "server_name"), Some("valkey"));
    }

    #[test]
    fn server_section() {
        let server = ServerInfo::parse(&text("info_server")).unwrap();
        assert_eq!(server.run_id, "e83c13db3abb02c89e56e643896be95757938c81");
        assert_eq!(server.version(), "8.0.1");
        assert_eq!(server.redis_version, "7.2.4");
        assert_eq!(server.server_mode.as_deref(), Some("standalone"));
        assert_eq!(server.uptime_in_seconds, 2);
        assert!(server.other.contains_key("executable"));
        let sentinel = ServerInfo::parse(&text("info_sentinel_server")).unwrap();
        assert_eq!(sentinel.server_mode.as_deref(), Some("sentinel"));
        assert_eq!(sentinel.tcp_port, Some(21410));
    }

    #[test]
    fn redis_server_section_without_valkey_fields() {
        let text = "# Server\r\nredis_version:7.2.5\r\nrun_id:abc\r\nuptime_in_seconds:9\r\n";
        let server = ServerInfo::parse(text).unwrap();
        assert_eq!(server.version(), "7.2.5");
        assert_eq!(server.server_name, None);
    }

    #[test]
    fn persistence_off_aof_and_loading() {
        let off = PersistenceInfo::parse(&text("info_persistence_rdb_off")).unwrap();
        assert!(!off.loading && !off.aof_enabled && !off.rdb_bgsave_in_progress);
        let aof = PersistenceInfo::parse(&text("info_persistence_aof_rdb")).unwrap();
        assert!(aof.aof_enabled);
        assert_eq!(aof.rdb_last_bgsave_status, "ok");
        assert_eq!(aof.aof_last_write_status.as_deref(), Some("ok"));
        assert!(aof.other.contains_key("aof_current_size"));
        let loading = PersistenceInfo::parse(&text("info_persistence_loading")).unwrap();
        assert!(loading.loading);
        assert_eq!(loading.async_loading, Some(false));
        assert_eq!(loading.loading_loaded_perc, Some(1.01));
        assert_eq!(loading.loading_eta_seconds, Some(1));
    }

    #[test]
    fn keyspace_per_db() {
        let keyspace = KeyspaceInfo::parse(&text("info_keyspace")).unwrap();
        assert_eq!(keyspace.dbs.len(), 2);
        assert_eq!(keyspace.dbs[&0].keys, 11);
        assert_eq!(keyspace.dbs[&0].expires, 1);
        assert_eq!(keyspace.dbs[&3].keys, 2);
        assert_eq!(keyspace.dbs[&3].avg_ttl, Some(599676));
        assert_eq!(keyspace.total_keys(), 13);
    }

    #[test]
    fn empty_keyspace_section() {
        assert_eq!(
            KeyspaceInfo::parse("# Keyspace\r\n").unwrap(),
            KeyspaceInfo::default()
        );
    }

    #[test]
    fn missing_required_field_is_a_parse_error() {
        let without_offset: String = text("info_replication_replica")
            .lines()
            .filter(|l| !l.starts_with("slave_repl_offset"))
            .map(|l| format!("{l}\n"))
            .collect();
        let err = ReplicationInfo::parse(&without_offset).unwrap_err();
        assert_eq!(err.reason(), "ParseError");
        assert!(err.to_string().contains("slave_repl_offset"), "{err}");
    }

    #[test]
    fn malformed_values_are_parse_errors() {
        let cases = [
            "# Replication\r\nrole:leader\r\n",
            "# Replication\r\nrole:master\r\nconnected_slaves:x\r\nmaster_repl_offset:1\r\nmaster_replid:a\r\n",
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=h,port=99999,state=online,offset=1,lag=0\r\nmaster_repl_offset:1\r\nmaster_replid:a\r\n",
            "# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:garbage\r\nmaster_repl_offset:1\r\nmaster_replid:a\r\n",
        ];
        for case in cases {
            assert_eq!(
                ReplicationInfo::parse(case).map_err(|e| e.reason()),
                Err("ParseError"),
                "{case}"
            );
        }
    }

    #[test]
    fn wrong_section_is_a_parse_error() {
        let err = ReplicationInfo::parse(&text("info_server")).unwrap_err();
        assert_eq!(err.reason(), "ParseError");
    }

    #[test]
    fn replica_lines_sorted_numerically() {
        let mut text = String::from("# Replication\r\nrole:master\r\nconnected_slaves:11\r\n");
        for i in (0..11).rev() {
            text.push_str(&format!(
                "slave{i}:ip=r{i},port=6379,state=online,offset={i},lag=0\r\n"
            ));
        }
        text.push_str("slave_foo:bar\r\nmaster_repl_offset:1\r\nmaster_replid:a\r\n");
        let info = ReplicationInfo::parse(&text).unwrap();
        let hosts: Vec<_> = info.replicas.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts[..3], ["r0", "r1", "r2"]);
        assert_eq!(hosts[10], "r10");
        assert_eq!(info.other.get("slave_foo").map(String::as_str), Some("bar"));
    }
}
