//! The master Lease without Sentinel (ADR 0022): a `coordination.k8s.io/v1` Lease
//! `<name>-master` that the operator grants to one data pod and that pod's sidecar renews.
//!
//! - The holder's sidecar renews it every [`LEASE_RENEW_INTERVAL`]; a master whose last
//!   successful renew *started* F ago, or that finds the Lease held by another pod, is fenced
//!   ([`lease_fence_action`], the same pause as ADR 0019).
//! - The operator never reads the Lease's timestamps against its own clock: it keeps, per
//!   Lease, when it first saw the current `resourceVersion` and the current holder
//!   ([`LeaseSighting`], its monotonic clock), and takes the authority away from an unreachable
//!   holder only once the Lease has not changed for [`MASTER_LEASE_DURATION`] +
//!   [`LEASE_EXPIRY_MARGIN`] ([`decide_master_by_lease`]). The holder's last successful renew
//!   started before the operator first saw that `resourceVersion`, so by then it fenced itself
//!   F (+ one poll and the pause call) after it, well before the expiry.
//!
//! Times are durations on one monotonic clock the caller reads: this crate reads no clock.

use std::time::Duration;

use crate::data::{PodProbe, ProbeState};
use crate::fence::{DEFAULT_FENCE_AFTER, FenceAction, FenceInput, FenceReason, fence_action};

/// D: how long the operator waits, after the Lease last changed, before it may take it away
/// from a holder it cannot reach (written to `spec.leaseDurationSeconds`).
pub const MASTER_LEASE_DURATION: Duration = Duration::from_secs(5);
/// Added to D by the operator: its first sighting of a `resourceVersion` may lag the write by a
/// watch or a pass, never lead it, so the margin only covers clock-rate differences and the
/// holder's last fence round.
pub const LEASE_EXPIRY_MARGIN: Duration = Duration::from_secs(1);
/// How often the holder's sidecar renews.
pub const LEASE_RENEW_INTERVAL: Duration = Duration::from_millis(500);
/// How often the operator looks at a steady master's Lease (ADR 0043). Nothing in the API changes
/// when a holder stops renewing — a hung valkey-server's pod stays Ready until its readiness probe
/// fails three times — so only a look finds the Lease unchanged: the expiry is seen within
/// D + margin + this after the last renew (one Lease read and one `INFO` per pod each time).
pub const LEASE_STEADY_RECHECK: Duration = Duration::from_secs(2);
/// How much before F the holder's sidecar gives up on a renew and fences. The renew that cannot
/// land times out at the deadline and the fence is a local call after it: without a lead the
/// writes stopped up to 170 ms past F in `cargo xtask bench fence` on 2 loaded cores (2.17 s).
pub const LEASE_FENCE_LEAD: Duration = Duration::from_millis(250);

/// The holder's own fence deadline: F less the lead, never less than two renew intervals (a
/// holder fences only after at least one renew could have landed in between).
pub fn lease_fence_after(fence_after: Duration) -> Duration {
    fence_after
        .saturating_sub(LEASE_FENCE_LEAD)
        .max(LEASE_RENEW_INTERVAL * 2)
}
/// How long a new holder that is a replica must have been seen holding the Lease before the
/// operator promotes it (or moves the Lease on): every pod that held it before has by then gone
/// F without a successful renew, so it is fenced (or about to stop anyway).
pub const HOLDER_SETTLE: Duration = Duration::from_millis(
    DEFAULT_FENCE_AFTER.as_millis() as u64 + LEASE_EXPIRY_MARGIN.as_millis() as u64,
);

// The holder fences F after its last renew started, plus one fence poll (250 ms) and its
// `CLIENT PAUSE` call (500 ms): that must come before the operator may see the Lease expired.
const _: () = assert!(
    DEFAULT_FENCE_AFTER.as_millis() + 750
        < MASTER_LEASE_DURATION.as_millis() + LEASE_EXPIRY_MARGIN.as_millis()
);

/// The Lease's name for a cluster.
pub fn master_lease_name(cluster: &str) -> String {
    format!("{cluster}-master")
}

/// What the operator saw of one Lease, stamped with its own monotonic clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSighting {
    pub resource_version: String,
    pub holder: Option<String>,
    /// When the current `resource_version` was first seen.
    pub version_since: Duration,
    /// When the current holder was first seen.
    pub holder_since: Duration,
}

impl LeaseSighting {
    /// The sighting after seeing (`resource_version`, `holder`) at `now`: the times of what did
    /// not change are kept, those of what changed restart at `now`.
    pub fn seen(
        previous: Option<&LeaseSighting>,
        resource_version: &str,
        holder: Option<&str>,
        now: Duration,
    ) -> LeaseSighting {
        let version_since = previous
            .filter(|p| p.resource_version == resource_version)
            .map_or(now, |p| p.version_since.min(now));
        let holder_since = previous
            .filter(|p| p.holder.as_deref() == holder)
            .map_or(now, |p| p.holder_since.min(now));
        LeaseSighting {
            resource_version: resource_version.to_owned(),
            holder: holder.map(str::to_owned),
            version_since,
            holder_since,
        }
    }

    /// The Lease's state for [`decide_master_by_lease`] at `now`, the holder as an ordinal.
    pub fn view(&self, name: &str, now: Duration) -> LeaseView {
        LeaseView {
            holder: self
                .holder
                .as_deref()
                .and_then(|h| crate::ordinal::ordinal_of(name, h)),
            unchanged_for: now.saturating_sub(self.version_since),
            held_for: now.saturating_sub(self.holder_since),
        }
    }
}

/// The Lease as the master decision reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The holder's ordinal (`None`: no holder, or not one of this cluster's pods).
    pub holder: Option<u32>,
    /// How long the operator has seen this exact `resourceVersion`.
    pub unchanged_for: Duration,
    /// How long the operator has seen this holder.
    pub held_for: Duration,
}

impl LeaseView {
    /// Expired: unchanged for D + margin on the operator's own clock.
    pub fn expired(&self) -> bool {
        self.unchanged_for >= MASTER_LEASE_DURATION + LEASE_EXPIRY_MARGIN
    }
}

/// What the operator does without Sentinel, with the master Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseDecision {
    /// No Lease yet (a new cluster, or one created before the Lease existed), or one that
    /// proves nothing about the only master (its sidecar does not fence on it): write it naming
    /// the one pod that answers master.
    Grant(u32),
    /// The holder answers master. `demote`: other pods answering master (stale masters, fenced
    /// since they lost the Lease) to be made its replicas.
    Steady { master: u32, demote: Vec<u32> },
    /// Move the Lease to `candidate` first when `move_lease` (a conditional update on the
    /// `resourceVersion` seen), then promote it and point `redirect` at it.
    Promote {
        candidate: u32,
        move_lease: bool,
        redirect: Vec<u32>,
    },
    /// Nothing safe to do now; look again after `recheck` when given.
    Wait {
        why: String,
        recheck: Option<Duration>,
    },
}

/// The most caught-up replica holding data among `probes` other than `except`; ties go to
/// `prefer`, then to the lower ordinal.
fn best_replica(probes: &[PodProbe], except: Option<u32>, prefer: Option<u32>) -> Option<u32> {
    probes
        .iter()
        .filter(|p| Some(p.ordinal) != except)
        .filter(|p| matches!(p.state, ProbeState::Replica { .. }) && p.holds_data())
        .max_by(|a, b| {
            a.progress()
                .cmp(&b.progress())
                .then((Some(a.ordinal) == prefer).cmp(&(Some(b.ordinal) == prefer)))
                .then(b.ordinal.cmp(&a.ordinal))
        })
        .map(|p| p.ordinal)
}

/// Every pod that answers (replica or master) other than `candidate`: pointed at the new master.
fn others_answering(probes: &[PodProbe], candidate: u32) -> Vec<u32> {
    probes
        .iter()
        .filter(|p| p.ordinal != candidate)
        .filter(|p| {
            matches!(
                p.state,
                ProbeState::Replica { .. } | ProbeState::Master { .. }
            )
        })
        .map(|p| p.ordinal)
        .collect()
}

/// The operator's decision without Sentinel (more than one replica), from the Lease (`None`:
/// it does not exist) and the probes. An unreachable master is never replaced while its Lease
/// may still be renewed: only once it has been unchanged for D + margin.
///
/// `lease_blind`: the pods whose sidecar does not fence on the Lease (they still run the Sentinel
/// template of a cluster whose Sentinel was just turned off). The Lease proves nothing about
/// them: a Lease left from an earlier time without Sentinel can name a replica while one of them
/// is the master every client writes to. A master among them that the Lease does not name is
/// never demoted and no other pod is promoted past it; when it is the only master, the Lease is
/// granted to it (rewritten), as for a cluster that has none.
pub fn decide_master_by_lease(
    name: &str,
    lease: Option<LeaseView>,
    probes: &[PodProbe],
    lease_blind: &[u32],
) -> LeaseDecision {
    let masters: Vec<u32> = probes
        .iter()
        .filter(|p| p.is_master())
        .map(|p| p.ordinal)
        .collect();
    let wait = |why: String, recheck: Option<Duration>| LeaseDecision::Wait { why, recheck };
    let unfenced_master = masters
        .iter()
        .any(|m| lease_blind.contains(m) && lease.is_none_or(|l| l.holder != Some(*m)));
    if unfenced_master && let Some(lease) = lease {
        return match masters.as_slice() {
            [only] => LeaseDecision::Grant(*only),
            several => wait(
                format!(
                    "several pods answer master ({several:?}), one of them still on the Sentinel template, whose sidecar does not fence on the master Lease (it names {}); none is demoted or promoted",
                    lease
                        .holder
                        .map_or("nobody".to_owned(), |h| format!("{name}-{h}"))
                ),
                None,
            ),
        };
    }
    let Some(lease) = lease else {
        return match masters.as_slice() {
            [only] => LeaseDecision::Grant(*only),
            [] => wait(
                format!("no pod answers master yet; {name}-0 starts as master of a new cluster"),
                None,
            ),
            several => wait(
                format!(
                    "several pods answer master ({several:?}) and no master Lease names one; none is chosen by guessing"
                ),
                None,
            ),
        };
    };
    let holder_probe = lease
        .holder
        .and_then(|h| probes.iter().find(|p| p.ordinal == h));
    let holder_pod = |h: Option<u32>| h.map_or("nobody".to_owned(), |h| format!("{name}-{h}"));
    match holder_probe.map(|p| &p.state) {
        Some(ProbeState::Master { .. }) => {
            let master = holder_probe.map_or(0, |p| p.ordinal);
            LeaseDecision::Steady {
                master,
                demote: masters.into_iter().filter(|m| *m != master).collect(),
            }
        }
        Some(ProbeState::Replica { .. }) => {
            // The holder acknowledges nothing as a replica. Before it is promoted (or the Lease
            // moves on), every earlier holder must have gone F without a renew.
            if lease.held_for < HOLDER_SETTLE {
                return wait(
                    format!(
                        "the master Lease names {} (a replica) since {} ms; waiting {} ms for any earlier holder to fence",
                        holder_pod(lease.holder),
                        lease.held_for.as_millis(),
                        HOLDER_SETTLE.as_millis()
                    ),
                    Some(HOLDER_SETTLE - lease.held_for),
                );
            }
            match best_replica(probes, None, lease.holder) {
                Some(candidate) => LeaseDecision::Promote {
                    candidate,
                    move_lease: Some(candidate) != lease.holder,
                    redirect: others_answering(probes, candidate),
                },
                None => wait(
                    format!(
                        "the master Lease names {}, a replica, and no replica holds data; it leaves the hold by itself when no pod holds data",
                        holder_pod(lease.holder)
                    ),
                    None,
                ),
            }
        }
        // Unreachable, not running, gone, or no holder: only an expired Lease may be moved.
        _ => {
            if !lease.expired() {
                let left = (MASTER_LEASE_DURATION + LEASE_EXPIRY_MARGIN) - lease.unchanged_for;
                return wait(
                    format!(
                        "the master Lease holder {} does not answer as master; its Lease changed {} ms ago and is taken away only {} ms after its last change",
                        holder_pod(lease.holder),
                        lease.unchanged_for.as_millis(),
                        (MASTER_LEASE_DURATION + LEASE_EXPIRY_MARGIN).as_millis()
                    ),
                    Some(left),
                );
            }
            match best_replica(probes, lease.holder, None) {
                Some(candidate) => LeaseDecision::Promote {
                    candidate,
                    move_lease: true,
                    redirect: others_answering(probes, candidate),
                },
                None => wait(
                    format!(
                        "the master Lease of {} expired and no replica holds data; it leaves the hold by itself when no pod holds data",
                        holder_pod(lease.holder)
                    ),
                    None,
                ),
            }
        }
    }
}

/// What the master's sidecar last learnt from the Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseSeen {
    /// This pod holds it; its last successful renew started at this time (`None`: no renew
    /// succeeded since the sidecar started).
    Mine { renew_started: Option<Duration> },
    /// Another pod holds it.
    Other(String),
    /// Not read yet, or the API did not answer: only the last renew counts.
    Unknown { renew_started: Option<Duration> },
    /// No Lease, or no holder.
    Missing,
}

/// The fence decision of a pod without Sentinel: proven while its last successful renew of the
/// Lease it holds started less than F ago. A master that sees the Lease held by another pod
/// (or missing) is fenced at once: it knows it has no authority.
pub fn lease_fence_action(
    is_master: bool,
    seen: &LeaseSeen,
    now: Duration,
    fence_after: Duration,
    fenced: bool,
) -> FenceAction {
    let last_proven = match seen {
        LeaseSeen::Mine { renew_started } | LeaseSeen::Unknown { renew_started } => *renew_started,
        LeaseSeen::Other(_) | LeaseSeen::Missing => None,
    };
    let action = fence_action(FenceInput {
        is_master,
        last_proven,
        now,
        fence_after,
        fenced,
    });
    match (action, seen) {
        (FenceAction::Fence(_), LeaseSeen::Other(_)) => {
            FenceAction::Fence(FenceReason::HeldByOther)
        }
        (action, _) => action,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::UnfenceReason;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_holder_fences_a_lead_before_f_but_never_within_two_renews() {
        assert_eq!(lease_fence_after(DEFAULT_FENCE_AFTER), ms(1750));
        assert_eq!(lease_fence_after(ms(1100)), ms(1000));
        assert_eq!(lease_fence_after(ms(300)), ms(1000));
    }

    fn master(ordinal: u32, offset: i64) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::Master {
                repl_offset: offset,
                keys: 1,
                connected_replicas: 0,
            },
        }
    }

    fn replica(ordinal: u32, offset: i64) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::Replica {
                master_ordinal: Some(0),
                in_hold: false,
                link_up: true,
                syncing: false,
                repl_offset: offset,
                keys: u64::from(offset > 0),
            },
        }
    }

    fn unreachable(ordinal: u32) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::Unreachable("timed out".into()),
        }
    }

    fn gone(ordinal: u32) -> PodProbe {
        PodProbe {
            ordinal,
            pod: format!("a-{ordinal}"),
            state: ProbeState::NotRunning("pod does not exist".into()),
        }
    }

    fn lease(holder: Option<u32>, unchanged_ms: u64, held_ms: u64) -> Option<LeaseView> {
        Some(LeaseView {
            holder,
            unchanged_for: ms(unchanged_ms),
            held_for: ms(held_ms),
        })
    }

    fn promote(candidate: u32, move_lease: bool, redirect: &[u32]) -> LeaseDecision {
        LeaseDecision::Promote {
            candidate,
            move_lease,
            redirect: redirect.to_vec(),
        }
    }

    fn steady(master: u32, demote: &[u32]) -> LeaseDecision {
        LeaseDecision::Steady {
            master,
            demote: demote.to_vec(),
        }
    }

    #[test]
    fn table() {
        let waits = |d: &LeaseDecision| matches!(d, LeaseDecision::Wait { .. });
        let healthy = [master(0, 100), replica(1, 100), replica(2, 90)];
        let cut = [unreachable(0), replica(1, 100), replica(2, 120)];
        // One row a case: (Lease, probes) → decision (None: some Wait).
        type Row = (
            Option<LeaseView>,
            Vec<PodProbe>,
            Option<LeaseDecision>,
            &'static str,
        );
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            (None, healthy.to_vec(), Some(LeaseDecision::Grant(0)), "no Lease: grant the master"),
            (None, vec![replica(0, 0), replica(1, 0)], None, "no Lease, no master"),
            (None, vec![master(0, 5), master(1, 7)], None, "no Lease, two masters: no guess"),
            (lease(Some(0), 100, 60_000), healthy.to_vec(), Some(steady(0, &[])), "holder answers"),
            (lease(Some(0), 0, 0), cut.to_vec(), None, "row 1 of issue 14: one failed probe"),
            (lease(Some(0), 5_999, 60_000), cut.to_vec(), None, "unchanged below D + margin"),
            (lease(Some(0), 6_000, 60_000), cut.to_vec(), Some(promote(2, true, &[1])),
                "expired: the most caught-up replica"),
            (lease(Some(0), 6_000, 60_000), vec![gone(0), replica(1, 10), replica(2, 10)],
                Some(promote(1, true, &[2])), "pod gone: also only after expiry, ties to lower"),
            (lease(Some(0), 3_000, 60_000), vec![gone(0), replica(1, 10)], None,
                "pod gone, Lease fresh: wait"),
            (lease(Some(0), 60_000, 60_000), vec![unreachable(0), replica(1, 0)], None,
                "expired, no replica with data"),
            (lease(Some(1), 100, 60_000), vec![master(0, 150), master(1, 120), replica(2, 120)],
                Some(steady(1, &[0])), "after the heal: the stale master is demoted"),
            (lease(Some(1), 100, 1_000), vec![master(0, 150), replica(1, 150), replica(2, 150)],
                None, "Lease just moved to a replica (handover): wait for the old holder's fence"),
            (lease(Some(1), 100, 3_000), vec![master(0, 150), replica(1, 150), replica(2, 150)],
                Some(promote(1, false, &[0, 2])), "holder replica, settled: promote the holder"),
            (lease(Some(1), 100, 3_000), vec![unreachable(0), replica(1, 50), replica(2, 90)],
                Some(promote(2, true, &[1])), "holder replica behind another: move it on"),
            (lease(None, 6_000, 6_000), cut.to_vec(), Some(promote(2, true, &[1])),
                "no holder, expired"),
            (lease(None, 10, 10), cut.to_vec(), None, "no holder, fresh"),
            (lease(Some(7), 6_000, 6_000), cut.to_vec(), Some(promote(2, true, &[1])),
                "holder not one of the pods, expired"),
        ];
        for (lease, probes, want, why) in cases {
            let got = decide_master_by_lease("a", lease, &probes, &[]);
            match want {
                Some(want) => assert_eq!(got, want, "{why}"),
                None => assert!(waits(&got), "{why}: {got:?}"),
            }
        }
    }

    /// Sentinel turned off for a running cluster (testbed, 2026-12-03): the Lease left from before
    /// Sentinel was turned on named scale-0, by then a replica; scale-2, the master Sentinel had
    /// made, still ran the Sentinel template. Reading the Lease as proof promoted scale-0 next to
    /// scale-2 and then demoted scale-2: 41 of 367,020 acknowledged writes lost.
    #[test]
    fn a_master_whose_sidecar_ignores_the_lease_is_granted_it_never_replaced() {
        type Row = (
            Option<LeaseView>,
            Vec<PodProbe>,
            &'static [u32],
            Option<LeaseDecision>,
            &'static str,
        );
        let after_sentinel = vec![replica(0, 100), replica(1, 100), master(2, 100)];
        #[rustfmt::skip]
        let cases: Vec<Row> = vec![
            (lease(Some(0), 60_000, 60_000), after_sentinel.clone(), &[0, 1, 2],
                Some(LeaseDecision::Grant(2)), "stale Lease on a replica: the live master gets it"),
            (lease(Some(0), 60_000, 60_000), after_sentinel.clone(), &[2],
                Some(LeaseDecision::Grant(2)), "replicas already rolled: the same"),
            (lease(Some(0), 60_000, 60_000), after_sentinel.clone(), &[],
                Some(promote(0, false, &[1, 2])), "every sidecar fences on it: the Lease decides"),
            (lease(Some(0), 60_000, 60_000), vec![master(0, 100), replica(1, 100), master(2, 90)],
                &[2], None, "the holder and an unfenced master: nobody demoted"),
            (lease(Some(2), 60_000, 60_000), after_sentinel.clone(), &[0, 1, 2],
                Some(steady(2, &[])), "the Lease names the unfenced master: steady"),
            (None, after_sentinel.clone(), &[0, 1, 2], Some(LeaseDecision::Grant(2)),
                "no Lease: granted as before"),
            (lease(Some(0), 60_000, 60_000), vec![replica(0, 100), master(1, 100), master(2, 100)],
                &[1, 2], None, "two unfenced masters: no guess"),
            (lease(Some(0), 60_000, 60_000), vec![unreachable(0), replica(1, 100), master(2, 100)],
                &[2], Some(LeaseDecision::Grant(2)), "holder gone: nobody promoted past the master"),
        ];
        for (lease, probes, blind, want, why) in cases {
            let got = decide_master_by_lease("a", lease, &probes, blind);
            match want {
                Some(want) => assert_eq!(got, want, "{why}"),
                None => assert!(matches!(got, LeaseDecision::Wait { .. }), "{why}: {got:?}"),
            }
        }
    }

    #[test]
    fn an_unreachable_holder_is_never_replaced_before_d_plus_margin() {
        let probes = [unreachable(0), replica(1, 100), replica(2, 100)];
        for unchanged in (0..8_000u64).step_by(50) {
            let got = decide_master_by_lease("a", lease(Some(0), unchanged, 60_000), &probes, &[]);
            let promotes = matches!(got, LeaseDecision::Promote { .. });
            assert_eq!(
                promotes,
                ms(unchanged) >= ms(6_000),
                "{unchanged} ms: {got:?}"
            );
            if let LeaseDecision::Wait { recheck, .. } = got {
                assert_eq!(
                    recheck,
                    Some(ms(6_000 - unchanged)),
                    "looked at again on time"
                );
            }
        }
    }

    #[test]
    fn a_sighting_keeps_the_first_time_of_what_did_not_change() {
        let first = LeaseSighting::seen(None, "10", Some("a-0"), ms(1_000));
        assert_eq!(
            (first.version_since, first.holder_since),
            (ms(1_000), ms(1_000))
        );
        let same = LeaseSighting::seen(Some(&first), "10", Some("a-0"), ms(9_000));
        assert_eq!(
            (same.version_since, same.holder_since),
            (ms(1_000), ms(1_000))
        );
        let renewed = LeaseSighting::seen(Some(&same), "11", Some("a-0"), ms(9_500));
        assert_eq!(
            (renewed.version_since, renewed.holder_since),
            (ms(9_500), ms(1_000))
        );
        let moved = LeaseSighting::seen(Some(&renewed), "12", Some("a-1"), ms(9_600));
        assert_eq!(
            (moved.version_since, moved.holder_since),
            (ms(9_600), ms(9_600))
        );
        let view = moved.view("a", ms(12_600));
        assert_eq!(
            view,
            LeaseView {
                holder: Some(1),
                unchanged_for: ms(3_000),
                held_for: ms(3_000)
            }
        );
        assert!(!view.expired());
        assert!(moved.view("a", ms(15_600)).expired());
        // A renew seen 1 ms before the deadline restarts the wait in full.
        let late = LeaseSighting::seen(Some(&moved), "13", Some("a-1"), ms(15_599));
        assert!(!late.view("a", ms(15_600)).expired());
        assert_eq!(master_lease_name("a"), "a-master");
    }

    #[test]
    fn a_master_fences_f_after_its_last_renew_or_at_once_when_another_holds_the_lease() {
        use FenceAction::*;
        use FenceReason::*;
        let f = DEFAULT_FENCE_AFTER;
        let mine = |at: Option<u64>| LeaseSeen::Mine {
            renew_started: at.map(ms),
        };
        let unknown = |at: Option<u64>| LeaseSeen::Unknown {
            renew_started: at.map(ms),
        };
        let other = LeaseSeen::Other("a-1".into());
        // One row a case: (is master, seen, now ms, fenced) → action.
        #[rustfmt::skip]
        let cases: Vec<(bool, LeaseSeen, u64, bool, FenceAction, &str)> = vec![
            (true, mine(Some(10_000)), 10_400, false, Keep, "renewed 400 ms ago"),
            (true, unknown(Some(10_000)), 11_999, false, Keep, "API silent 1.999 s"),
            (true, unknown(Some(10_000)), 12_000, false, Fence(ProofExpired), "API silent F"),
            (true, mine(None), 5_000, false, Fence(NeverProven), "never renewed"),
            (true, other.clone(), 10_000, false, Fence(HeldByOther), "another holds it"),
            (true, other.clone(), 10_000, true, Fence(HeldByOther), "another holds it, renew"),
            (true, LeaseSeen::Missing, 10_000, false, Fence(NeverProven), "no Lease yet"),
            (true, mine(Some(20_000)), 20_100, true, Unfence(UnfenceReason::AuthorityProven),
                "granted again"),
            (false, other.clone(), 10_000, true, Unfence(UnfenceReason::NowReplica),
                "followed the holder"),
            (false, LeaseSeen::Missing, 10_000, false, Keep, "a replica is never fenced"),
        ];
        for (is_master, seen, now, fenced, want, why) in cases {
            assert_eq!(
                lease_fence_action(is_master, &seen, ms(now), f, fenced),
                want,
                "{why}"
            );
        }
    }
}
