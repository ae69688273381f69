//! ROLE: `[master, offset, [[host, port, offset]...]]`, `[slave, host, port, state, offset]`,
//! `[sentinel, [master names]]`.

use crate::error::{Error, Result};
use crate::reply::Reply;

/// One replica in a master's ROLE reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleReplica {
    /// Announced address (a hostname with `replica-announce-ip`).
    pub host: String,
    pub port: u16,
    /// Last acknowledged offset.
    pub offset: i64,
}

/// A replica's link state in its ROLE reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamState {
    /// `connect`: must connect to its master.
    Connect,
    /// `connecting`: connecting.
    Connecting,
    /// `handshake` (and its sub-states on some versions).
    Handshake,
    /// `sync`: full sync in progress.
    Sync,
    /// `connected`: streaming, up to date modulo lag.
    Connected,
    /// Anything else (`none`, future states).
    Other(String),
}

impl From<&str> for UpstreamState {
    fn from(value: &str) -> Self {
        match value {
            "connect" => UpstreamState::Connect,
            "connecting" => UpstreamState::Connecting,
            "handshake" => UpstreamState::Handshake,
            "sync" => UpstreamState::Sync,
            "connected" => UpstreamState::Connected,
            other => UpstreamState::Other(other.to_owned()),
        }
    }
}

/// The ROLE reply, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoleReply {
    Master {
        repl_offset: i64,
        replicas: Vec<RoleReplica>,
    },
    Replica {
        master_host: String,
        master_port: u16,
        state: UpstreamState,
        /// Offset processed so far; `-1` before the first sync.
        offset: i64,
    },
    Sentinel {
        /// Names of the monitored masters.
        masters: Vec<String>,
    },
}

impl RoleReply {
    pub fn parse(reply: Reply) -> Result<RoleReply> {
        let mut items = reply.expect_array("ROLE")?.into_iter();
        let role = items
            .next()
            .ok_or_else(|| Error::parse("ROLE", "empty reply"))?
            .expect_text("ROLE role")?;
        let mut next = |field: &str| {
            items
                .next()
                .ok_or_else(|| Error::parse("ROLE", format!("{role} reply lacks {field}")))
        };
        match role.as_str() {
            "master" => {
                let repl_offset = next("offset")?.expect_int("ROLE master offset")?;
                let mut replicas = Vec::new();
                for entry in next("replicas")?.expect_array("ROLE master replicas")? {
                    let mut parts = entry.expect_array("ROLE master replica")?.into_iter();
                    let mut part = |name: &str| {
                        parts.next().ok_or_else(|| {
                            Error::parse("ROLE master replica", format!("lacks {name}"))
                        })
                    };
                    let host = part("host")?.expect_text("ROLE replica host")?;
                    let port = to_port(part("port")?.expect_int("ROLE replica port")?)?;
                    let offset = part("offset")?.expect_int("ROLE replica offset")?;
                    replicas.push(RoleReplica { host, port, offset });
                }
                Ok(RoleReply::Master {
                    repl_offset,
                    replicas,
                })
            }
            "slave" | "replica" => {
                let master_host = next("master host")?.expect_text("ROLE master host")?;
                let master_port = to_port(next("master port")?.expect_int("ROLE master port")?)?;
                let state = UpstreamState::from(next("state")?.expect_text("ROLE state")?.as_str());
                let offset = next("offset")?.expect_int("ROLE offset")?;
                Ok(RoleReply::Replica {
                    master_host,
                    master_port,
                    state,
                    offset,
                })
            }
            "sentinel" => {
                let masters = next("masters")?
                    .expect_array("ROLE sentinel masters")?
                    .into_iter()
                    .map(|name| name.expect_text("ROLE sentinel master name"))
                    .collect::<Result<_>>()?;
                Ok(RoleReply::Sentinel { masters })
            }
            other => Err(Error::parse("ROLE", format!("unknown role {other:?}"))),
        }
    }
}

fn to_port(value: i64) -> Result<u16> {
    u16::try_from(value).map_err(|_| Error::parse("ROLE", format!("port {value} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::fixtures::reply;

    #[test]
    fn master_with_one_replica() {
        assert_eq!(
            RoleReply::parse(reply("role_master")).unwrap(),
            RoleReply::Master {
                repl_offset: 425,
                replicas: vec![RoleReplica {
                    host: "localhost".into(),
                    port: 21401,
                    offset: 0
                }]
            }
        );
    }

    #[test]
    fn promoted_master_without_replicas() {
        assert_eq!(
            RoleReply::parse(reply("role_promoted")).unwrap(),
            RoleReply::Master {
                repl_offset: 7347,
                replicas: vec![]
            }
        );
    }

    #[test]
    fn replica() {
        assert_eq!(
            RoleReply::parse(reply("role_replica")).unwrap(),
            RoleReply::Replica {
                master_host: "localhost".into(),
                master_port: 21400,
                state: UpstreamState::Connected,
                offset: 425
            }
        );
    }

    #[test]
    fn sentinel() {
        assert_eq!(
            RoleReply::parse(reply("role_sentinel")).unwrap(),
            RoleReply::Sentinel {
                masters: vec!["mymaster".into()]
            }
        );
    }

    #[test]
    fn malformed_replies_are_parse_errors() {
        let cases = [
            Reply::Text("master".into()),
            Reply::Array(vec![]),
            Reply::Array(vec![Reply::Text("leader".into())]),
            Reply::Array(vec![Reply::Text("master".into()), Reply::Int(1)]),
            Reply::Array(vec![
                Reply::Text("slave".into()),
                Reply::Text("h".into()),
                Reply::Int(70000),
                Reply::Text("connected".into()),
                Reply::Int(1),
            ]),
            Reply::Array(vec![
                Reply::Text("master".into()),
                Reply::Int(1),
                Reply::Array(vec![Reply::Array(vec![Reply::Text("h".into())])]),
            ]),
        ];
        for case in cases {
            assert_eq!(
                RoleReply::parse(case.clone()).map_err(|e| e.reason()),
                Err("ParseError"),
                "{case:?}"
            );
        }
    }
}
