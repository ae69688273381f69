//! Waiting for the reflector stores' initial lists, bounded like controller-runtime's
//! `CacheSyncTimeout`: a leader whose stores never list must not hold the Lease forever (every
//! standby waits for it), so after the timeout it names the stores still pending and gives up.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::join_all;

/// How often the names of the stores still listing are logged while waiting.
pub const PENDING_LOG_INTERVAL: Duration = Duration::from_secs(15);

/// One store's initial list: resolves to `true` once listed, `false` if its writer is gone (the
/// watch stopped before listing; it never becomes ready then).
pub type StoreWait = Pin<Box<dyn Future<Output = bool> + Send>>;

/// How the wait ended.
#[derive(Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// Every store has listed.
    Ready,
    /// The timeout passed; these stores (sorted) had not listed.
    TimedOut { pending: Vec<&'static str> },
    /// These stores' watches stopped before listing (only on shutdown).
    Stopped { stores: Vec<&'static str> },
}

/// The names of the stores that have not listed yet.
#[derive(Clone, Debug, Default)]
pub struct PendingStores(Arc<Mutex<BTreeSet<&'static str>>>);

impl PendingStores {
    pub fn new(names: impl IntoIterator<Item = &'static str>) -> PendingStores {
        PendingStores(Arc::new(Mutex::new(names.into_iter().collect())))
    }

    pub fn listed(&self, name: &'static str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// Sorted, so log lines are stable.
    pub fn names(&self) -> Vec<&'static str> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }
}

/// Waits for every store at once; logs the pending ones every `log_every` and gives up after
/// `timeout`.
pub async fn wait_for_stores(
    waits: Vec<(&'static str, StoreWait)>,
    timeout: Duration,
    log_every: Duration,
) -> SyncOutcome {
    let pending = PendingStores::new(waits.iter().map(|(name, _)| *name));
    let all = join_all(waits.into_iter().map(|(name, wait)| {
        let pending = pending.clone();
        async move {
            let listed = wait.await;
            if listed {
                pending.listed(name);
            }
            (name, listed)
        }
    }));
    tokio::pin!(all);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut log_tick = tokio::time::interval_at(tokio::time::Instant::now() + log_every, log_every);
    loop {
        tokio::select! {
            results = &mut all => {
                let stopped: Vec<&'static str> = results
                    .into_iter()
                    .filter(|(_, listed)| !listed)
                    .map(|(name, _)| name)
                    .collect();
                return if stopped.is_empty() {
                    SyncOutcome::Ready
                } else {
                    SyncOutcome::Stopped { stores: stopped }
                };
            }
            _ = &mut deadline => {
                return SyncOutcome::TimedOut { pending: pending.names() };
            }
            _ = log_tick.tick() => {
                tracing::info!(pending = ?pending.names(), "waiting for the initial list of these stores");
            }
        }
    }
}

/// `--cache-sync-timeout`: `120`, `120s`, `2m` or `1h`; more than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 120s, 2m or 1h"))?;
    let seconds = match unit {
        "" | "s" => Some(number),
        "m" => number.checked_mul(60),
        "h" => number.checked_mul(3600),
        _ => None,
    }
    .ok_or_else(|| format!("{text:?} is not a duration like 120s, 2m or 1h"))?;
    if seconds == 0 {
        return Err("a duration must be more than zero".to_owned());
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed() -> StoreWait {
        Box::pin(async { true })
    }

    fn never() -> StoreWait {
        Box::pin(std::future::pending())
    }

    #[test]
    fn pending_stores_forget_the_listed_ones_and_stay_sorted() {
        let pending = PendingStores::new(["Secret", "Pod", "Valkey", "ConfigMap"]);
        pending.listed("Pod");
        pending.listed("Pod");
        pending.listed("Unknown");
        assert_eq!(pending.names(), vec!["ConfigMap", "Secret", "Valkey"]);
    }

    #[tokio::test]
    async fn every_store_listed_is_ready() {
        let outcome = wait_for_stores(
            vec![("Pod", listed()), ("Valkey", listed())],
            Duration::from_secs(3600),
            Duration::from_secs(3600),
        )
        .await;
        assert_eq!(outcome, SyncOutcome::Ready);
    }

    #[tokio::test]
    async fn a_timeout_names_every_store_that_has_not_listed() {
        let outcome = wait_for_stores(
            vec![
                ("Valkey", never()),
                ("Pod", listed()),
                ("Secret", never()),
                ("Service", listed()),
            ],
            Duration::from_millis(50),
            Duration::from_millis(10),
        )
        .await;
        assert_eq!(
            outcome,
            SyncOutcome::TimedOut {
                pending: vec!["Secret", "Valkey"]
            }
        );
    }

    #[tokio::test]
    async fn a_store_whose_watch_stopped_is_reported_as_stopped() {
        let outcome = wait_for_stores(
            vec![("Pod", listed()), ("Role", Box::pin(async { false }))],
            Duration::from_secs(3600),
            Duration::from_secs(3600),
        )
        .await;
        assert_eq!(
            outcome,
            SyncOutcome::Stopped {
                stores: vec!["Role"]
            }
        );
    }

    #[test]
    fn durations_accept_seconds_minutes_and_hours() {
        assert_eq!(parse_duration("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("120s"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("2 minutes").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-5s").is_err());
    }
}
