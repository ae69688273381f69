//! The ten checks of the reference's `spec.observer.unreadyWhen`, their names, and the result of
//! one check in one round.

use std::collections::BTreeSet;
use std::fmt;

use serde::Serialize;

use crate::error::ObserverError;

/// One health check. The `--unready-on` argument names them in kebab case (as vko-render writes
/// them); the `/readyz` body, the logs and the metric labels use the camelCase names of the
/// `spec.observer.unreadyWhen` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Check {
    /// PING to the current master fails (or there is no single master to ping).
    MasterUnreachable,
    /// The health key cannot be written to the master.
    WriteTestFailure,
    /// The health key cannot be read back from the master.
    ReadTestFailure,
    /// A replica is unreachable, disconnected, in a bulk sync, or follows another master
    /// (replicas > 1 only).
    ReplicaSyncFailure,
    /// A replica returns a stale or missing health key (replicas > 1 only).
    ReplicaReadTestFailure,
    /// A Sentinel does not answer PING (Sentinel only).
    SentinelUnreachable,
    /// The Sentinels disagree on the master, or fewer than a majority name it (Sentinel only).
    SentinelQuorumFailure,
    /// A Sentinel flags the master `s_down` or `o_down` (Sentinel only).
    SentinelMasterDown,
    /// A Sentinel names the master by a bare IP address (Sentinel only).
    SentinelMasterHostnameInvalid,
    /// A Sentinel lists a replica by a bare IP address (Sentinel only).
    SentinelReplicaHostnamesInvalid,
}

impl Check {
    /// Every check, in the reference's order.
    pub const ALL: [Check; 10] = [
        Check::MasterUnreachable,
        Check::WriteTestFailure,
        Check::ReadTestFailure,
        Check::ReplicaSyncFailure,
        Check::ReplicaReadTestFailure,
        Check::SentinelUnreachable,
        Check::SentinelQuorumFailure,
        Check::SentinelMasterDown,
        Check::SentinelMasterHostnameInvalid,
        Check::SentinelReplicaHostnamesInvalid,
    ];

    /// The camelCase name (`unreadyWhen` field, JSON key, metric label).
    pub fn name(self) -> &'static str {
        match self {
            Check::MasterUnreachable => "masterUnreachable",
            Check::WriteTestFailure => "writeTestFailure",
            Check::ReadTestFailure => "readTestFailure",
            Check::ReplicaSyncFailure => "replicaSyncFailure",
            Check::ReplicaReadTestFailure => "replicaReadTestFailure",
            Check::SentinelUnreachable => "sentinelUnreachable",
            Check::SentinelQuorumFailure => "sentinelQuorumFailure",
            Check::SentinelMasterDown => "sentinelMasterDown",
            Check::SentinelMasterHostnameInvalid => "sentinelMasterHostnameInvalid",
            Check::SentinelReplicaHostnamesInvalid => "sentinelReplicaHostnamesInvalid",
        }
    }

    /// The kebab-case name `--unready-on` uses.
    pub fn arg_name(self) -> &'static str {
        match self {
            Check::MasterUnreachable => "master-unreachable",
            Check::WriteTestFailure => "write-test-failure",
            Check::ReadTestFailure => "read-test-failure",
            Check::ReplicaSyncFailure => "replica-sync-failure",
            Check::ReplicaReadTestFailure => "replica-read-test-failure",
            Check::SentinelUnreachable => "sentinel-unreachable",
            Check::SentinelQuorumFailure => "sentinel-quorum-failure",
            Check::SentinelMasterDown => "sentinel-master-down",
            Check::SentinelMasterHostnameInvalid => "sentinel-master-hostname-invalid",
            Check::SentinelReplicaHostnamesInvalid => "sentinel-replica-hostnames-invalid",
        }
    }

    /// Parses the `--unready-on` value: a comma-separated list of kebab-case names (empty: no
    /// check makes the observer unready). An unknown name is an error, not ignored: a typo
    /// must not silently turn a check off.
    pub fn parse_list(list: &str) -> Result<BTreeSet<Check>, ObserverError> {
        list.split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .map(|name| {
                Check::ALL
                    .into_iter()
                    .find(|check| check.arg_name() == name)
                    .ok_or_else(|| {
                        ObserverError::Config(format!(
                            "--unready-on: unknown check {name:?} (known: {})",
                            Check::ALL.map(Check::arg_name).join(", ")
                        ))
                    })
            })
            .collect()
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Outcome of one check in one round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Status {
    Pass,
    Fail,
    /// Does not apply (replica checks with one data pod, Sentinel checks without Sentinel), or
    /// had nothing to look at this round (the reason is in the detail). Never makes the
    /// observer unready.
    Skipped,
}

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    pub status: Status,
    /// What was seen, in words.
    pub detail: String,
    /// Whether a failure of this check makes the observer unready (`unreadyWhen`).
    pub unready_on_failure: bool,
}

impl CheckResult {
    pub fn failed(&self) -> bool {
        self.status == Status::Fail
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn parses_the_list_vko_render_writes() {
        // The exact value vko-render writes with every unreadyWhen field true.
        let all = "master-unreachable,write-test-failure,read-test-failure,replica-sync-failure,\
                   replica-read-test-failure,sentinel-unreachable,sentinel-quorum-failure,\
                   sentinel-master-down,sentinel-master-hostname-invalid,\
                   sentinel-replica-hostnames-invalid";
        assert_eq!(
            Check::parse_list(all).unwrap(),
            Check::ALL.into_iter().collect()
        );
        assert!(Check::parse_list("").unwrap().is_empty());
        assert_eq!(
            Check::parse_list("master-unreachable").unwrap(),
            BTreeSet::from([Check::MasterUnreachable])
        );
        let err = Check::parse_list("master-unreachable,master-unreachabel").unwrap_err();
        assert!(err.to_string().contains("master-unreachabel"), "{err}");
        // camelCase is the display name, not an argument.
        assert!(Check::parse_list("masterUnreachable").is_err());
    }

    #[test]
    fn names_match_serde() {
        for check in Check::ALL {
            assert_eq!(
                serde_json::to_value(check).unwrap(),
                serde_json::Value::String(check.name().to_owned())
            );
            assert_eq!(
                check.arg_name().replace('-', ""),
                check.name().to_lowercase()
            );
        }
    }
}
