//! Which pod is labelled `vko.gtrfc.com/instanceRole=master` (what the `-rw` Service selects).

/// The `vko.gtrfc.com/instanceRole` label value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceRole {
    Master,
    Replica,
}

impl InstanceRole {
    /// The label value: `vko_api::consts::labels::ROLE_MASTER` / `ROLE_REPLICA` (this crate
    /// depends on nothing; the sidecar's tests pin the two equal).
    pub const fn as_str(self) -> &'static str {
        match self {
            InstanceRole::Master => "master",
            InstanceRole::Replica => "replica",
        }
    }
}

/// What the Sentinels say about the master, as the label rule reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentinelWord<K> {
    /// The topology has no Sentinel: the server's word stands.
    NoSentinel,
    /// No strict majority of the Sentinels answered naming one master this round.
    NoMajority,
    /// The Sentinel majority names this master.
    Names(K),
    /// A Sentinel failover in progress promotes this pod: for the pod itself, ADR 0030's proof
    /// (the failover's Sentinel promotes it, no answer names or promotes a third pod, a strict
    /// majority answered); for any other pod, one Sentinel's word suffices — the label of a
    /// master being failed over from only ever goes to replica on it.
    Promotes(K),
}

impl<K> SentinelWord<K> {
    pub fn as_ref(&self) -> SentinelWord<&K> {
        match self {
            SentinelWord::NoSentinel => SentinelWord::NoSentinel,
            SentinelWord::NoMajority => SentinelWord::NoMajority,
            SentinelWord::Names(k) => SentinelWord::Names(k),
            SentinelWord::Promotes(k) => SentinelWord::Promotes(k),
        }
    }
}

/// The label rule: a server that does not answer master is labelled replica; with Sentinel a
/// master is labelled master only once its authority is proven — the Sentinel majority names
/// it, or the failover in progress promotes it (ADR 0030, ADR 0049) —, and replica when the
/// majority names another pod or a failover promotes another (never route writes to a stale
/// master, nor to one being failed over from). Without a majority answer the label does not
/// change (`current`, replica when unknown): a master just promoted waits for its proof — a
/// master whose node died still carries the label then, and only a proven master may clear it
/// (two labelled masters would give `-rw` two endpoints) —, and a labelled master keeps its
/// label through a round a Sentinel missed (the fencer relabels one that stays unproven, ADR
/// 0019).
pub fn instance_role<K: PartialEq>(
    answers_master: bool,
    me: &K,
    sentinel: SentinelWord<&K>,
    current: Option<InstanceRole>,
) -> InstanceRole {
    match sentinel {
        _ if !answers_master => InstanceRole::Replica,
        SentinelWord::NoSentinel => InstanceRole::Master,
        SentinelWord::Names(named) | SentinelWord::Promotes(named) if named == me => {
            InstanceRole::Master
        }
        SentinelWord::Names(_) | SentinelWord::Promotes(_) => InstanceRole::Replica,
        SentinelWord::NoMajority => current.unwrap_or(InstanceRole::Replica),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_is_labelled_master_once_the_sentinel_majority_names_it() {
        use InstanceRole::{Master, Replica};
        use SentinelWord::{Names, NoMajority, NoSentinel, Promotes};
        type Row = (
            bool,
            SentinelWord<u8>,
            Option<InstanceRole>,
            InstanceRole,
            &'static str,
        );
        #[rustfmt::skip]
        let rows: &[Row] = &[
            (true, NoSentinel, None, Master, "without Sentinel the server's word stands"),
            (true, Names(0), None, Master, "the majority names it"),
            (true, Names(0), Some(Replica), Master, "promoted and named"),
            (true, Names(1), Some(Master), Replica, "a stale master: the majority names another"),
            (true, NoMajority, None, Replica, "unknown label, no majority: not yet"),
            (true, NoMajority, Some(Replica), Replica, "just promoted: waits to be named"),
            (true, NoMajority, Some(Master), Master, "a round a Sentinel missed: unchanged"),
            (true, Promotes(0), Some(Replica), Master, "promoted by the failover in progress"),
            (true, Promotes(1), Some(Master), Replica, "being failed over from, still master"),
            (false, Promotes(0), Some(Replica), Replica, "promotion chosen, server not master yet"),
            (false, NoSentinel, Some(Master), Replica, "not master"),
            (false, Names(0), Some(Master), Replica, "not master, though named"),
            (false, NoMajority, Some(Master), Replica, "not master, no majority"),
        ];
        for (answers_master, word, current, expected, why) in rows {
            assert_eq!(
                instance_role(*answers_master, &0u8, word.as_ref(), *current),
                *expected,
                "{why}"
            );
        }
        assert_eq!(Master.as_str(), "master");
        assert_eq!(Replica.as_str(), "replica");
    }
}
