//! Read your own status writes (ADR 0027). A pass is handed the `Valkey` from the watch's store,
//! which learns of this operator's own status write only when the watch event arrives. A pass
//! triggered in between — most often by the pod event of the pass's own delete, on a loaded
//! machine — read the status from before that write: the roll state it had just recorded was gone,
//! so the pass restarted the roll and a single-pod roll finished without `RollingUpdateComplete`
//! (the full suite's 1 + 3 roll, twice). The last object each status write returned is kept per
//! `Valkey` and used while the store still shows exactly the version that write started from.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use vko_api::Valkey;

/// Per `Valkey` UID: the resourceVersion a status write started from, and what it returned.
#[derive(Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, Written>>,
}

struct Written {
    from_version: String,
    returned: Arc<Valkey>,
}

impl OwnWrites {
    /// Records that a status write of `before` (the pass's object) returned `after`.
    pub fn record(&self, before: &Valkey, after: Valkey) {
        let (Some(uid), Some(from_version)) = (before.uid(), before.resource_version()) else {
            return;
        };
        if let Ok(mut written) = self.written.lock() {
            written.insert(
                uid,
                Written {
                    from_version,
                    returned: Arc::new(after),
                },
            );
        }
    }

    /// The object a pass should read: what this operator's last status write returned while the
    /// store still holds the version that write replaced, else the store's (which then holds that
    /// write or something newer: the store only moves forward).
    pub fn freshest(&self, from_store: Arc<Valkey>) -> Arc<Valkey> {
        let (Some(uid), Some(version)) = (from_store.uid(), from_store.resource_version()) else {
            return from_store;
        };
        let Ok(mut written) = self.written.lock() else {
            return from_store;
        };
        match written.get(&uid) {
            Some(write) if write.from_version == version => {
                tracing::info!(
                    name = %from_store.name_any(),
                    stale = %version,
                    "the store has not seen this operator's status write yet: using what it returned"
                );
                write.returned.clone()
            }
            Some(_) => {
                written.remove(&uid);
                from_store
            }
            None => from_store,
        }
    }

    /// Forgets a deleted `Valkey`.
    pub fn forget(&self, uid: &str) {
        if let Ok(mut written) = self.written.lock() {
            written.remove(uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vko_api::{ValkeySpec, ValkeyStatus};

    fn valkey(version: &str, message: &str) -> Valkey {
        let mut valkey = Valkey::new("a", ValkeySpec::default());
        valkey.metadata.uid = Some("uid-a".into());
        valkey.metadata.resource_version = Some(version.into());
        valkey.status = Some(ValkeyStatus {
            message: Some(message.into()),
            ..ValkeyStatus::default()
        });
        valkey
    }

    fn message(valkey: &Valkey) -> Option<&str> {
        valkey.status.as_ref()?.message.as_deref()
    }

    #[test]
    fn a_store_still_at_the_version_the_write_replaced_reads_the_write() {
        let writes = OwnWrites::default();
        writes.record(&valkey("10", "before"), valkey("12", "written"));
        let read = writes.freshest(Arc::new(valkey("10", "before")));
        assert_eq!(message(&read), Some("written"));
        // Still stale on the next pass: still the write.
        let again = writes.freshest(Arc::new(valkey("10", "before")));
        assert_eq!(message(&again), Some("written"));
    }

    #[test]
    fn a_store_that_moved_on_is_read_as_it_is_and_the_write_forgotten() {
        let writes = OwnWrites::default();
        writes.record(&valkey("10", "before"), valkey("12", "written"));
        let caught_up = writes.freshest(Arc::new(valkey("12", "written")));
        assert_eq!(message(&caught_up), Some("written"));
        // Someone else wrote after: theirs is read, and the recorded write no longer applies.
        let newer = writes.freshest(Arc::new(valkey("15", "newer")));
        assert_eq!(message(&newer), Some("newer"));
        let back_at_ten = writes.freshest(Arc::new(valkey("10", "before")));
        assert_eq!(
            message(&back_at_ten),
            Some("before"),
            "forgotten once passed"
        );
    }

    #[test]
    fn another_valkey_or_none_recorded_reads_the_store() {
        let writes = OwnWrites::default();
        let read = writes.freshest(Arc::new(valkey("10", "before")));
        assert_eq!(message(&read), Some("before"));
        writes.record(&valkey("10", "before"), valkey("12", "written"));
        writes.forget("uid-a");
        let read = writes.freshest(Arc::new(valkey("10", "before")));
        assert_eq!(message(&read), Some("before"));
    }
}
