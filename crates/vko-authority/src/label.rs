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

/// The label rule: the server's own role, except that a master which the Sentinel majority does
/// not name is labelled replica (never route writes to a stale master). Without a Sentinel
/// majority (or without Sentinel) the server's word stands.
pub fn instance_role<K: PartialEq>(
    answers_master: bool,
    me: &K,
    sentinel_master: Option<&K>,
) -> InstanceRole {
    match sentinel_master {
        _ if !answers_master => InstanceRole::Replica,
        Some(named) if named != me => InstanceRole::Replica,
        _ => InstanceRole::Master,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_master_is_labelled_master_unless_the_sentinel_majority_names_another_pod() {
        let rows: &[(bool, Option<u8>, InstanceRole)] = &[
            (true, None, InstanceRole::Master),
            (true, Some(0), InstanceRole::Master),
            // A stale master: the majority names another pod.
            (true, Some(1), InstanceRole::Replica),
            (false, None, InstanceRole::Replica),
            (false, Some(0), InstanceRole::Replica),
            (false, Some(1), InstanceRole::Replica),
        ];
        for (answers_master, named, expected) in rows {
            assert_eq!(
                instance_role(*answers_master, &0u8, named.as_ref()),
                *expected,
                "answers master {answers_master}, named {named:?}"
            );
        }
        assert_eq!(InstanceRole::Master.as_str(), "master");
        assert_eq!(InstanceRole::Replica.as_str(), "replica");
    }
}
