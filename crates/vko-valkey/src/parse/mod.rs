//! Pure parsers for INFO, ROLE, SENTINEL and ACL GETUSER replies. No I/O: they take text or a [`Reply`] and return
//! typed values. Unknown fields are kept in an `other` map (servers add fields in minor releases); a
//! missing or malformed required field is an [`Error::Parse`].

mod acl;
mod info;
mod role;
mod sentinel;

pub use acl::{parse_acl_passwords, password_hash};
pub use info::{
    ConnectedReplica, DbStats, Info, KeyspaceInfo, LinkStatus, PersistenceInfo, ReplicaSyncState,
    ReplicationInfo, ReplicationRole, ServerInfo, UpstreamLink,
};
pub use role::{RoleReplica, RoleReply, UpstreamState};
pub use sentinel::{
    InstanceFlag, InstanceFlags, QuorumStatus, SentinelMaster, SentinelPeer, SentinelReplica,
    parse_ckquorum_text, parse_master_addr, parse_sentinel_master, parse_sentinel_masters,
    parse_sentinel_peers, parse_sentinel_replicas,
};

use std::collections::BTreeMap;
use std::str::FromStr;

use crate::error::{Error, Result};

/// `key -> value` fields of one record (an INFO section, a SENTINEL instance), consumed by the typed
/// parsers; whatever is left becomes the record's `other` map.
#[derive(Debug)]
pub(crate) struct Fields {
    what: &'static str,
    map: BTreeMap<String, String>,
}

impl Fields {
    pub(crate) fn new(what: &'static str, map: BTreeMap<String, String>) -> Fields {
        Fields { what, map }
    }

    pub(crate) fn required<T: FromStr>(&mut self, key: &str) -> Result<T> {
        let raw = self
            .map
            .remove(key)
            .ok_or_else(|| Error::parse(self.what, format!("missing field {key:?}")))?;
        parse_value(self.what, key, &raw)
    }

    pub(crate) fn optional<T: FromStr>(&mut self, key: &str) -> Result<Option<T>> {
        match self.map.remove(key) {
            None => Ok(None),
            Some(raw) => parse_value(self.what, key, &raw).map(Some),
        }
    }

    /// Like `optional`, but an empty value or Sentinel's `?` placeholder also means "absent".
    pub(crate) fn optional_nonblank(&mut self, key: &str) -> Option<String> {
        self.map
            .remove(key)
            .filter(|value| !value.is_empty() && value != "?")
    }

    /// `0`/`1` (INFO) or `no`/`yes`.
    pub(crate) fn optional_bool(&mut self, key: &str) -> Result<Option<bool>> {
        match self.map.remove(key) {
            None => Ok(None),
            Some(raw) => parse_bool(self.what, key, &raw).map(Some),
        }
    }

    pub(crate) fn required_bool(&mut self, key: &str) -> Result<bool> {
        self.optional_bool(key)?
            .ok_or_else(|| Error::parse(self.what, format!("missing field {key:?}")))
    }

    pub(crate) fn take_matching(
        &mut self,
        predicate: impl Fn(&str) -> bool,
    ) -> Vec<(String, String)> {
        let keys: Vec<String> = self.map.keys().filter(|k| predicate(k)).cloned().collect();
        keys.into_iter()
            .filter_map(|k| self.map.remove(&k).map(|v| (k, v)))
            .collect()
    }

    pub(crate) fn rest(self) -> BTreeMap<String, String> {
        self.map
    }
}

pub(crate) fn parse_value<T: FromStr>(what: &str, key: &str, raw: &str) -> Result<T> {
    raw.trim().parse().map_err(|_| {
        Error::parse(
            what.to_owned(),
            format!("field {key:?} has unparsable value {raw:?}"),
        )
    })
}

pub(crate) fn parse_bool(what: &str, key: &str, raw: &str) -> Result<bool> {
    match raw.trim() {
        "1" | "yes" => Ok(true),
        "0" | "no" => Ok(false),
        _ => Err(Error::parse(
            what.to_owned(),
            format!("field {key:?} is not a boolean: {raw:?}"),
        )),
    }
}

/// The fixtures under tests/fixtures, captured from real valkey-server / valkey-sentinel 8.0.1.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::reply::{Reply, decode_resp2};

    pub(crate) fn text(name: &str) -> String {
        let path = format!("{}/tests/fixtures/{name}.txt", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    pub(crate) fn raw(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/fixtures/{name}.resp", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    pub(crate) fn reply(name: &str) -> Reply {
        decode_resp2(&raw(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}
