//! Pure arithmetic over the fencing tests' acknowledgements (ADR 0019): when a master stopped
//! acknowledging, and which lost writes fall inside the window the bound allows. No testbed
//! needed; the unit tests run with plain `cargo test -p vko-e2e`.

use std::time::{Duration, Instant};

/// When a writer's `OK`s stopped coming after `from`: the time from `from` to its last `OK`
/// before the first silence longer than `gap` within `[from, until]` (zero when none came within
/// `gap` of `from`); `None` when they never paused that long (the server kept acknowledging).
/// `at` is in arrival order.
pub fn acks_stopped(
    at: &[Instant],
    from: Instant,
    until: Instant,
    gap: Duration,
) -> Option<Duration> {
    let mut last = from;
    for &ack in at.iter().filter(|&&a| a >= from && a <= until) {
        if ack - last > gap {
            return Some(last - from);
        }
        last = ack;
    }
    (until.saturating_duration_since(last) > gap).then(|| last - from)
}

/// Lost acknowledged writes, split by when their `OK` came.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LostSplit {
    /// Acknowledged within the allowed window (`[window_start, window_start + bound]`).
    pub in_window: usize,
    /// The latest of those, after `window_start`.
    pub last_in_window: Option<Duration>,
    /// The latest lost write acknowledged after `window_start`, inside the window or not: the
    /// lost-write window.
    pub last_after_start: Option<Duration>,
    /// Acknowledged between the fault's request and `fault_landed` (before the window start):
    /// what the master acknowledged in the instant the fault hit it, before replicating it
    /// (asynchronous replication: as for a crash, such a write can be lost).
    pub at_the_fault: usize,
    /// Every other lost write: `<key> <when>` (before the fault, while it lasted, or later than
    /// the bound), which the bound does not allow.
    pub outside: Vec<String>,
}

/// Splits lost writes (`(key, when its OK came)`): allowed are those acknowledged from
/// `window_start` (the cut of a partition, the resume of a pause) to `bound` after it, and those
/// acknowledged from `fault` (the fault's request sent) to `fault_landed` (its answer, plus the
/// client's read of an `OK` sent just before); a write acknowledged before `fault` or between
/// `fault_landed` and `window_start` (a paused server acknowledges nothing, so those came from
/// the new master) must survive.
pub fn split_lost(
    lost: &[(String, Instant)],
    fault: Instant,
    fault_landed: Instant,
    window_start: Instant,
    bound: Duration,
) -> LostSplit {
    let mut split = LostSplit::default();
    for (key, at) in lost {
        match at.checked_duration_since(window_start) {
            Some(after) if after <= bound => {
                split.in_window += 1;
                split.last_in_window = split.last_in_window.max(Some(after));
                split.last_after_start = split.last_after_start.max(Some(after));
            }
            Some(after) => {
                split.last_after_start = split.last_after_start.max(Some(after));
                split
                    .outside
                    .push(format!("{key} {after:?} after the window start"));
            }
            None if *at < fault => split
                .outside
                .push(format!("{key} {:?} before the fault", fault - *at)),
            None if *at <= fault_landed => split.at_the_fault += 1,
            None => split.outside.push(format!(
                "{key} during the fault, {:?} before the window start",
                window_start - *at
            )),
        }
    }
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn acks_stop_at_the_last_ok_before_the_first_long_silence() {
        let t0 = Instant::now();
        let at =
            |offsets: &[u64]| -> Vec<Instant> { offsets.iter().map(|&o| t0 + ms(o)).collect() };
        let from = t0 + ms(1_000);
        let until = t0 + ms(20_000);
        let gap = ms(1_000);
        // (OKs at ms, stopped after `from`)
        #[rustfmt::skip]
        let cases: &[(&[u64], Option<u64>, &str)] = &[
            (&[0, 500, 1_100, 1_900, 2_900, 9_000], Some(1_900), "fenced 1.9 s after, READONLY later ignored"),
            (&[0, 500, 9_000], Some(0), "nothing acknowledged after from: blocked at once"),
            (&[0, 500, 1_001, 1_500], Some(500), "silence until the end"),
            (&[0, 1_100, 2_000, 3_000, 4_000, 5_000, 6_000, 7_000, 8_000, 9_000, 10_000,
               11_000, 12_000, 13_000, 14_000, 15_000, 16_000, 17_000, 18_000, 19_000, 19_999],
             None, "never paused for more than the gap"),
            (&[], Some(0), "no OK at all"),
        ];
        for (offsets, want, why) in cases {
            assert_eq!(
                acks_stopped(&at(offsets), from, until, gap),
                want.map(ms),
                "{why}"
            );
        }
    }

    #[test]
    fn only_writes_acknowledged_inside_the_window_are_allowed_lost() {
        let t0 = Instant::now();
        let fault = t0 + ms(10_000);
        let resume = t0 + ms(25_000);
        let lost = |offsets: &[u64]| -> Vec<(String, Instant)> {
            offsets
                .iter()
                .map(|&o| (format!("k{o}"), t0 + ms(o)))
                .collect()
        };
        let landed = t0 + ms(10_200);
        let split = split_lost(
            &lost(&[25_000, 25_030, 27_000]),
            fault,
            landed,
            resume,
            ms(2_750),
        );
        assert_eq!(split.in_window, 3);
        assert_eq!(split.last_in_window, Some(ms(2_000)));
        assert_eq!(split.last_after_start, Some(ms(2_000)));
        assert!(split.outside.is_empty());

        let split = split_lost(
            &lost(&[9_999, 10_000, 10_200, 12_000, 25_010, 27_751]),
            fault,
            landed,
            resume,
            ms(2_750),
        );
        assert_eq!(split.in_window, 1);
        assert_eq!(
            split.at_the_fault, 2,
            "acknowledged while the stop was on its way"
        );
        assert_eq!(split.last_in_window, Some(ms(10)));
        assert_eq!(split.last_after_start, Some(ms(2_751)));
        assert_eq!(split.outside.len(), 3, "{:?}", split.outside);
        assert!(split.outside[0].contains("before the fault"));
        assert!(split.outside[1].contains("during the fault"));
        assert!(split.outside[2].contains("after the window start"));

        // A partition: the window starts at the fault.
        let split = split_lost(&lost(&[10_000, 12_700]), fault, landed, fault, ms(2_750));
        assert_eq!((split.in_window, split.outside.len()), (2, 0));
        assert_eq!(
            split.at_the_fault, 0,
            "a partition's window starts at the fault"
        );
        assert_eq!(split.last_in_window, Some(ms(2_700)));
        assert_eq!(
            split_lost(&[], fault, landed, fault, ms(1)),
            LostSplit::default()
        );
    }
}
