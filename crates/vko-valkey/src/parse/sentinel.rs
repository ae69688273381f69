//! SENTINEL MASTER / MASTERS / REPLICAS / SENTINELS (flat `key value` arrays, or RESP3 maps),
//! GET-MASTER-ADDR-BY-NAME and CKQUORUM.

use std::collections::{BTreeMap, BTreeSet};

use super::{Fields, parse_value};
use crate::error::{Error, Result};
use crate::reply::Reply;

/// One flag of Sentinel's `flags` field.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum InstanceFlag {
    Master,
    Slave,
    Sentinel,
    /// Subjectively down (this Sentinel's own view).
    SDown,
    /// Objectively down (quorum agrees).
    ODown,
    Disconnected,
    MasterDown,
    FailoverInProgress,
    Promoted,
    ReconfSent,
    ReconfInprog,
    ReconfDone,
    ForceFailover,
    ScriptKillSent,
    MasterReboot,
    Other(String),
}

impl From<&str> for InstanceFlag {
    fn from(value: &str) -> Self {
        match value {
            "master" => InstanceFlag::Master,
            "slave" => InstanceFlag::Slave,
            "sentinel" => InstanceFlag::Sentinel,
            "s_down" => InstanceFlag::SDown,
            "o_down" => InstanceFlag::ODown,
            "disconnected" => InstanceFlag::Disconnected,
            "master_down" => InstanceFlag::MasterDown,
            "failover_in_progress" => InstanceFlag::FailoverInProgress,
            "promoted" => InstanceFlag::Promoted,
            "reconf_sent" => InstanceFlag::ReconfSent,
            "reconf_inprog" => InstanceFlag::ReconfInprog,
            "reconf_done" => InstanceFlag::ReconfDone,
            "force_failover" => InstanceFlag::ForceFailover,
            "script_kill_sent" => InstanceFlag::ScriptKillSent,
            "master_reboot" => InstanceFlag::MasterReboot,
            other => InstanceFlag::Other(other.to_owned()),
        }
    }
}

/// The comma-separated `flags` field as a set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstanceFlags(pub BTreeSet<InstanceFlag>);

impl InstanceFlags {
    pub fn parse(text: &str) -> InstanceFlags {
        InstanceFlags(
            text.split(',')
                .filter(|flag| !flag.is_empty())
                .map(InstanceFlag::from)
                .collect(),
        )
    }

    pub fn contains(&self, flag: &InstanceFlag) -> bool {
        self.0.contains(flag)
    }

    /// Subjectively or objectively down, or not connected: not a usable instance right now.
    pub fn is_down(&self) -> bool {
        [
            InstanceFlag::SDown,
            InstanceFlag::ODown,
            InstanceFlag::Disconnected,
        ]
        .iter()
        .any(|flag| self.contains(flag))
    }
}

/// SENTINEL MASTER `<name>`, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelMaster {
    pub name: String,
    /// The `ip` field: the announced hostname with `announce-hostnames yes`.
    pub host: String,
    pub port: u16,
    /// Empty until Sentinel has seen the master's INFO.
    pub runid: Option<String>,
    pub flags: InstanceFlags,
    pub num_replicas: u32,
    pub num_other_sentinels: u32,
    pub quorum: u32,
    /// `last-ping-sent`: how long (ms) this Sentinel's oldest unanswered PING to the master has
    /// been waiting; 0 when every PING was answered.
    pub last_ping_sent_ms: Option<u64>,
    /// `last-ok-ping-reply`: ms since the master last gave a valid reply to a PING.
    pub last_ok_ping_reply_ms: Option<u64>,
    pub failover_timeout_ms: Option<u64>,
    pub down_after_ms: Option<u64>,
    pub parallel_syncs: Option<u32>,
    pub config_epoch: Option<u64>,
    /// `role-reported`: what the instance itself last said in INFO (`master` or `slave`).
    pub role_reported: Option<String>,
    pub other: BTreeMap<String, String>,
}

/// One entry of SENTINEL REPLICAS `<name>`, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelReplica {
    /// `host:port`.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub runid: Option<String>,
    pub flags: InstanceFlags,
    /// `ok` or `err`.
    pub master_link_status: Option<String>,
    /// The master the replica reports; `None` when Sentinel does not know (`?`).
    pub master_host: Option<String>,
    pub master_port: Option<u16>,
    pub priority: Option<i64>,
    pub repl_offset: Option<i64>,
    pub announced: Option<bool>,
    pub role_reported: Option<String>,
    pub other: BTreeMap<String, String>,
}

/// One entry of SENTINEL SENTINELS `<name>` (the other Sentinels), typed.
#[derive(Debug, Clone, PartialEq)]
pub struct SentinelPeer {
    /// The peer's run id.
    pub name: String,
    pub host: String,
    pub port: u16,
    pub runid: Option<String>,
    pub flags: InstanceFlags,
    /// `None` when the peer has not voted (`?`).
    pub voted_leader: Option<String>,
    pub voted_leader_epoch: Option<u64>,
    pub last_hello_message_ms: Option<i64>,
    pub other: BTreeMap<String, String>,
}

/// The key/value pairs of one instance: RESP2 flat array or RESP3 map.
fn instance_fields(what: &'static str, reply: Reply) -> Result<Fields> {
    let pairs: Vec<(Reply, Reply)> = match reply {
        Reply::Map(pairs) => pairs,
        Reply::Array(items) => {
            if items.len() % 2 != 0 {
                return Err(Error::parse(
                    what,
                    format!("odd number of elements ({})", items.len()),
                ));
            }
            let mut items = items.into_iter();
            let mut pairs = Vec::new();
            while let (Some(key), Some(value)) = (items.next(), items.next()) {
                pairs.push((key, value));
            }
            pairs
        }
        other => {
            return Err(Error::parse(
                what,
                format!("expected key/value pairs, got {}", other.kind()),
            ));
        }
    };
    let mut map = BTreeMap::new();
    for (key, value) in pairs {
        map.insert(key.expect_text(what)?, value.expect_text(what)?);
    }
    Ok(Fields::new(what, map))
}

fn instance_list(what: &'static str, reply: Reply) -> Result<Vec<Fields>> {
    reply
        .expect_array(what)?
        .into_iter()
        .map(|item| instance_fields(what, item))
        .collect()
}

fn master_from_fields(mut fields: Fields) -> Result<SentinelMaster> {
    Ok(SentinelMaster {
        name: fields.required("name")?,
        host: fields.required("ip")?,
        port: fields.required("port")?,
        runid: fields.optional_nonblank("runid"),
        flags: InstanceFlags::parse(&fields.required::<String>("flags")?),
        num_replicas: fields.required("num-slaves")?,
        num_other_sentinels: fields.required("num-other-sentinels")?,
        quorum: fields.required("quorum")?,
        last_ping_sent_ms: fields.optional("last-ping-sent")?,
        last_ok_ping_reply_ms: fields.optional("last-ok-ping-reply")?,
        failover_timeout_ms: fields.optional("failover-timeout")?,
        down_after_ms: fields.optional("down-after-milliseconds")?,
        parallel_syncs: fields.optional("parallel-syncs")?,
        config_epoch: fields.optional("config-epoch")?,
        role_reported: fields.optional("role-reported")?,
        other: fields.rest(),
    })
}

impl SentinelMaster {
    /// How long (ms) this Sentinel has counted the master as not answering: what it flags the
    /// master `s_down` on once above `down-after-milliseconds` (Valkey's
    /// `sentinelCheckSubjectivelyDown`) — the age of its oldest unanswered PING, or, with none
    /// pending on a disconnected link, the time since the last valid reply. `None` when the reply
    /// lacks a field it needs.
    pub fn unanswered_for_ms(&self) -> Option<u64> {
        match self.last_ping_sent_ms? {
            0 if self.flags.contains(&InstanceFlag::Disconnected) => self.last_ok_ping_reply_ms,
            pending => Some(pending),
        }
    }
}

/// SENTINEL MASTER `<name>`.
pub fn parse_sentinel_master(reply: Reply) -> Result<SentinelMaster> {
    master_from_fields(instance_fields("SENTINEL MASTER", reply)?)
}

/// SENTINEL MASTERS.
pub fn parse_sentinel_masters(reply: Reply) -> Result<Vec<SentinelMaster>> {
    instance_list("SENTINEL MASTERS", reply)?
        .into_iter()
        .map(master_from_fields)
        .collect()
}

/// SENTINEL REPLICAS `<name>` (or its older spelling SLAVES).
pub fn parse_sentinel_replicas(reply: Reply) -> Result<Vec<SentinelReplica>> {
    instance_list("SENTINEL REPLICAS", reply)?
        .into_iter()
        .map(|mut fields| {
            Ok(SentinelReplica {
                name: fields.required("name")?,
                host: fields.required("ip")?,
                port: fields.required("port")?,
                runid: fields.optional_nonblank("runid"),
                flags: InstanceFlags::parse(&fields.required::<String>("flags")?),
                master_link_status: fields.optional("master-link-status")?,
                master_host: fields.optional_nonblank("master-host"),
                // Sentinel reports port 0 when it does not know the master.
                master_port: fields
                    .optional::<u16>("master-port")?
                    .filter(|port| *port != 0),
                priority: fields.optional("slave-priority")?,
                repl_offset: fields.optional("slave-repl-offset")?,
                announced: fields.optional_bool("replica-announced")?,
                role_reported: fields.optional("role-reported")?,
                other: fields.rest(),
            })
        })
        .collect()
}

/// SENTINEL SENTINELS `<name>`.
pub fn parse_sentinel_peers(reply: Reply) -> Result<Vec<SentinelPeer>> {
    instance_list("SENTINEL SENTINELS", reply)?
        .into_iter()
        .map(|mut fields| {
            Ok(SentinelPeer {
                name: fields.required("name")?,
                host: fields.required("ip")?,
                port: fields.required("port")?,
                runid: fields.optional_nonblank("runid"),
                flags: InstanceFlags::parse(&fields.required::<String>("flags")?),
                voted_leader: fields.optional_nonblank("voted-leader"),
                voted_leader_epoch: fields.optional("voted-leader-epoch")?,
                last_hello_message_ms: fields.optional("last-hello-message")?,
                other: fields.rest(),
            })
        })
        .collect()
}

/// SENTINEL GET-MASTER-ADDR-BY-NAME: `[host, port]`, or nil when the name is not monitored.
pub fn parse_master_addr(reply: Reply) -> Result<Option<(String, u16)>> {
    const WHAT: &str = "SENTINEL GET-MASTER-ADDR-BY-NAME";
    match reply {
        Reply::Nil => Ok(None),
        reply => {
            let items = reply.expect_array(WHAT)?;
            let [host, port]: [Reply; 2] = items.try_into().map_err(|items: Vec<Reply>| {
                Error::parse(WHAT, format!("{} elements, expected 2", items.len()))
            })?;
            let host = host.expect_text(WHAT)?;
            let port = parse_value(WHAT, "port", &port.expect_text(WHAT)?)?;
            Ok(Some((host, port)))
        }
    }
}

/// The result of SENTINEL CKQUORUM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumStatus {
    /// Both the configured quorum and a majority (to authorize a failover) are reachable.
    pub reachable: bool,
    /// Sentinels this one can use, itself included.
    pub usable_sentinels: u32,
    /// The server's text, for messages.
    pub message: String,
}

/// CKQUORUM answers `+OK N usable Sentinels. ...` or `-NOQUORUM N usable Sentinels. ...`; both are
/// results, not failures. Pass the status or error text without the leading `+`/`-`.
pub fn parse_ckquorum_text(text: &str) -> Result<QuorumStatus> {
    const WHAT: &str = "SENTINEL CKQUORUM";
    let mut words = text.split_whitespace();
    let reachable = match words.next() {
        Some("OK") => true,
        Some("NOQUORUM") => false,
        _ => return Err(Error::parse(WHAT, format!("unexpected reply {text:?}"))),
    };
    let usable = words
        .next()
        .ok_or_else(|| Error::parse(WHAT, format!("no sentinel count in {text:?}")))?;
    Ok(QuorumStatus {
        reachable,
        usable_sentinels: parse_value(WHAT, "usable", usable)?,
        message: text.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::fixtures::reply;

    fn flags(list: &[&str]) -> InstanceFlags {
        InstanceFlags(list.iter().map(|f| InstanceFlag::from(*f)).collect())
    }

    #[test]
    fn master_by_hostname() {
        let master = parse_sentinel_master(reply("sentinel_master")).unwrap();
        assert_eq!(master.name, "mymaster");
        assert_eq!(master.host, "localhost");
        assert_eq!(master.port, 21400);
        // Sentinel's runid for the master is the master's own INFO server run_id.
        let server =
            crate::parse::ServerInfo::parse(&crate::parse::fixtures::text("info_server")).unwrap();
        assert_eq!(master.runid.as_ref(), Some(&server.run_id));
        assert_eq!(master.flags, flags(&["master"]));
        assert_eq!(master.num_replicas, 1);
        assert_eq!(master.num_other_sentinels, 2);
        assert_eq!(master.quorum, 2);
        assert_eq!(master.last_ping_sent_ms, Some(0));
        assert_eq!(master.last_ok_ping_reply_ms, Some(137));
        assert_eq!(master.unanswered_for_ms(), Some(0), "every PING answered");
        assert_eq!(master.failover_timeout_ms, Some(10000));
        assert_eq!(master.down_after_ms, Some(2000));
        assert_eq!(master.parallel_syncs, Some(1));
        assert_eq!(master.config_epoch, Some(0));
        assert_eq!(master.role_reported.as_deref(), Some("master"));
        assert!(master.other.contains_key("link-refcount"));
        assert!(!master.other.contains_key("quorum"));
    }

    #[test]
    fn master_subjectively_down() {
        let master = parse_sentinel_master(reply("sentinel_master_sdown")).unwrap();
        assert_eq!(master.flags, flags(&["s_down", "master", "disconnected"]));
        assert!(master.flags.is_down());
        // Down because its PING waited longer than down-after (2000 ms).
        assert_eq!(master.unanswered_for_ms(), Some(2086));
        // Disconnected with no PING pending: Sentinel counts from the last valid reply.
        let idle = SentinelMaster {
            last_ping_sent_ms: Some(0),
            ..master.clone()
        };
        assert_eq!(idle.unanswered_for_ms(), Some(2626));
        let connected = SentinelMaster {
            flags: flags(&["master"]),
            ..idle
        };
        assert_eq!(connected.unanswered_for_ms(), Some(0));
        assert!(master.other.contains_key("s-down-time"));
    }

    #[test]
    fn master_after_failover_moved_and_counts_both_replicas() {
        let master = parse_sentinel_master(reply("sentinel_master_after_failover")).unwrap();
        assert_eq!(master.port, 21401);
        assert_eq!(master.num_replicas, 2);
        assert_eq!(master.config_epoch, Some(1));
        assert!(!master.flags.is_down());
    }

    #[test]
    fn masters_list() {
        let masters = parse_sentinel_masters(reply("sentinel_masters")).unwrap();
        assert_eq!(masters.len(), 1);
        assert_eq!(masters[0].name, "mymaster");
    }

    #[test]
    fn replicas_and_the_older_slaves_spelling() {
        for name in ["sentinel_replicas", "sentinel_slaves"] {
            let replicas = parse_sentinel_replicas(reply(name)).unwrap();
            assert_eq!(replicas.len(), 1, "{name}");
            let replica = &replicas[0];
            assert_eq!(replica.name, "localhost:21401");
            assert_eq!(replica.host, "localhost");
            assert_eq!(replica.port, 21401);
            assert_eq!(replica.flags, flags(&["slave"]));
            assert_eq!(replica.master_link_status.as_deref(), Some("ok"));
            assert_eq!(replica.master_host.as_deref(), Some("localhost"));
            assert_eq!(replica.master_port, Some(21400));
            assert_eq!(replica.priority, Some(100));
            assert_eq!(replica.repl_offset, Some(0));
            assert_eq!(replica.announced, Some(true));
            assert_eq!(replica.role_reported.as_deref(), Some("slave"));
        }
    }

    #[test]
    fn replicas_after_failover_include_the_dead_old_master() {
        let replicas = parse_sentinel_replicas(reply("sentinel_replicas_after_failover")).unwrap();
        assert_eq!(replicas.len(), 2);
        let old = &replicas[0];
        assert_eq!(old.port, 21400);
        assert_eq!(old.runid, None, "empty runid means unknown");
        assert_eq!(old.flags, flags(&["slave", "disconnected"]));
        assert!(old.flags.is_down());
        assert_eq!(old.master_host, None, "`?` means unknown");
        assert_eq!(old.master_port, None, "port 0 means unknown");
        assert_eq!(old.master_link_status.as_deref(), Some("err"));
        let other = &replicas[1];
        assert_eq!(other.port, 21402);
        assert!(other.runid.is_some());
    }

    #[test]
    fn peers() {
        let peers = parse_sentinel_peers(reply("sentinel_sentinels")).unwrap();
        let ports: Vec<_> = peers.iter().map(|p| p.port).collect();
        assert_eq!(ports, [21412, 21411]);
        assert!(peers.iter().all(|p| p.host == "localhost"));
        assert_eq!(peers[0].name, peers[0].runid.clone().unwrap());
        assert_eq!(peers[0].voted_leader, None);
        assert_eq!(peers[0].voted_leader_epoch, Some(0));
        assert!(peers[0].flags.contains(&InstanceFlag::Sentinel));
        let down = parse_sentinel_peers(reply("sentinel_sentinels_down")).unwrap();
        assert_eq!(down.len(), 2);
        assert!(down.iter().all(|p| p.flags.is_down()), "{down:?}");
    }

    #[test]
    fn get_master_addr() {
        assert_eq!(
            parse_master_addr(reply("sentinel_get_master_addr")).unwrap(),
            Some(("localhost".to_owned(), 21400))
        );
        assert_eq!(
            parse_master_addr(reply("sentinel_get_master_addr_unknown")).unwrap(),
            None
        );
        assert_eq!(
            parse_master_addr(Reply::Array(vec![Reply::Text("h".into())])).map_err(|e| e.reason()),
            Err("ParseError")
        );
    }

    #[test]
    fn ckquorum_ok_and_noquorum() {
        let Reply::Text(ok) = reply("sentinel_ckquorum") else {
            panic!("status reply expected")
        };
        assert_eq!(
            parse_ckquorum_text(&ok).unwrap(),
            QuorumStatus {
                reachable: true,
                usable_sentinels: 3,
                message: ok.clone()
            }
        );
        let err =
            crate::reply::decode_resp2(&crate::parse::fixtures::raw("sentinel_ckquorum_noquorum"))
                .unwrap_err();
        let Error::NoQuorum(text) = err else {
            panic!("NOQUORUM expected, got {err:?}")
        };
        let status = parse_ckquorum_text(&text).unwrap();
        assert!(!status.reachable);
        assert_eq!(status.usable_sentinels, 1);
        assert_eq!(
            parse_ckquorum_text("what").map_err(|e| e.reason()),
            Err("ParseError")
        );
    }

    #[test]
    fn resp3_map_form_is_accepted() {
        let map = Reply::Map(vec![
            (Reply::Text("name".into()), Reply::Text("m".into())),
            (Reply::Text("ip".into()), Reply::Text("h".into())),
            (Reply::Text("port".into()), Reply::Text("6379".into())),
            (Reply::Text("flags".into()), Reply::Text("master".into())),
            (Reply::Text("num-slaves".into()), Reply::Text("0".into())),
            (
                Reply::Text("num-other-sentinels".into()),
                Reply::Text("0".into()),
            ),
            (Reply::Text("quorum".into()), Reply::Text("1".into())),
        ]);
        assert_eq!(parse_sentinel_master(map).unwrap().host, "h");
    }

    #[test]
    fn missing_required_field_and_odd_arrays() {
        let mut items = reply("sentinel_master").expect_array("t").unwrap();
        let quorum_at = items
            .iter()
            .position(|r| r == &Reply::Text("quorum".into()))
            .unwrap();
        items.drain(quorum_at..quorum_at + 2);
        let err = parse_sentinel_master(Reply::Array(items.clone())).unwrap_err();
        assert!(err.to_string().contains("quorum"), "{err}");
        items.pop();
        assert_eq!(
            parse_sentinel_master(Reply::Array(items)).map_err(|e| e.reason()),
            Err("ParseError")
        );
        assert_eq!(
            parse_sentinel_replicas(Reply::Int(1)).map_err(|e| e.reason()),
            Err("ParseError")
        );
    }

    #[test]
    fn unknown_flags_are_kept() {
        let parsed = InstanceFlags::parse("master,new_flag");
        assert!(parsed.contains(&InstanceFlag::Other("new_flag".into())));
        assert!(!parsed.is_down());
        assert_eq!(InstanceFlags::parse(""), InstanceFlags::default());
    }
}
