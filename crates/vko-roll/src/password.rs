//! Password rotation without a restart (ADR 0035): which step a cluster is at and what the
//! operator does next. Pure; the operator asks every server and Sentinel which passwords its
//! `default` user accepts and carries out the step.
//!
//! The steps, all read back from the servers (a restarted operator resumes where they are):
//!
//! 1. The auth Secret changes. The kubelet updates the Secret volume of every pod; each data
//!    pod's sidecar, on seeing the new password there, adds it next to the old one on its own
//!    server and on every Sentinel (`ACL SETUSER default >new`), then dials with it. The operator
//!    waits until every server and Sentinel accepts it ([`PasswordStep::WaitForPods`]).
//! 2. Every one accepts both: clients move to the new password. The old one is kept for
//!    `spec.auth.oldPasswordGracePeriod` from the moment this was first seen (recorded on the
//!    status) ([`PasswordStep::Grace`]).
//! 3. Each data pod's sidecar, once it uses the new password, moves its server's `masterauth` to
//!    it; until every one has, the old password stays ([`PasswordStep::WaitForSidecars`]).
//! 4. Then [`PasswordStep::Retire`]: Sentinel's `auth-pass` moves to the new password, each
//!    Sentinel puts the new one first (a Sentinel authenticates to its peers with its first
//!    password), then every server and Sentinel accepts the new one only.

use std::time::Duration;

use crate::Millis;

/// What one server or Sentinel said about its `default` user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepts {
    /// The pod.
    pub pod: String,
    /// The hashes of the passwords it accepts, in its order; `None` when it could not be asked.
    pub passwords: Option<Vec<String>>,
    /// A data pod: whether its `masterauth` is the current password, which its sidecar sets once
    /// it uses that password itself (and so do the pod's probes). `None` for a Sentinel.
    pub moved: Option<bool>,
}

impl Accepts {
    fn accepts(&self, hash: &str) -> Option<bool> {
        self.passwords
            .as_ref()
            .map(|list| list.iter().any(|h| h == hash))
    }

    /// Accepts `hash` and nothing else.
    fn only(&self, hash: &str) -> bool {
        self.passwords
            .as_ref()
            .is_some_and(|list| !list.is_empty() && list.iter().all(|h| h == hash))
    }
}

/// What the operator saw this pass.
#[derive(Clone, Debug)]
pub struct PasswordWorld<'a> {
    /// The hash of the auth Secret's password now.
    pub current: &'a str,
    /// Every data pod that should run.
    pub data: Vec<Accepts>,
    /// Every Sentinel pod that should run, when Sentinels require a password; empty otherwise.
    pub sentinels: Vec<Accepts>,
    /// When every server and Sentinel was first seen accepting `current` next to an older
    /// password (the status record); `None` when not recorded yet.
    pub accepted_since: Option<Millis>,
    pub now: Millis,
    pub grace: Duration,
}

/// The step the cluster is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PasswordStep {
    /// Every server and Sentinel accepts the current password only: nothing to do.
    Settled,
    /// These pods do not accept the current password yet (their Secret volume or sidecar has
    /// not caught up), or could not be asked. The old password stays everywhere.
    WaitForPods { pods: Vec<String> },
    /// These pods could not be asked, and every pod that answered accepts the current password
    /// only, with no rotation recorded: nothing is rotating (a new cluster's pods starting, a
    /// pod replaced during a roll). Nothing to report; looked at again soon.
    Unanswered { pods: Vec<String> },
    /// Every one accepts the current password and an older one: clients may use either until
    /// `retire_at`. `since` is to be recorded when it was not.
    Grace { since: Millis, retire_at: Millis },
    /// The grace period is over, but the sidecars of these data pods have not moved to the
    /// current password yet (their Secret volume is not updated yet): retiring the old one now
    /// would fail their probes.
    WaitForSidecars {
        since: Millis,
        retire_at: Millis,
        pods: Vec<String>,
    },
    /// The grace period is over and every sidecar moved: move `auth-pass` to the current
    /// password, then retire the older ones on these pods (those still accepting more than the
    /// current one).
    Retire {
        since: Millis,
        retire_at: Millis,
        data: Vec<String>,
        sentinels: Vec<String>,
    },
}

/// The step for `world`.
pub fn step(world: &PasswordWorld<'_>) -> PasswordStep {
    let all = || world.data.iter().chain(&world.sentinels);
    let waiting: Vec<String> = all()
        .filter(|a| a.accepts(world.current) != Some(true))
        .map(|a| a.pod.clone())
        .collect();
    if !waiting.is_empty() {
        let rotating = world.accepted_since.is_some()
            || all().any(|a| a.passwords.is_some() && !a.only(world.current));
        if !rotating {
            return PasswordStep::Unanswered { pods: waiting };
        }
        return PasswordStep::WaitForPods { pods: waiting };
    }
    let extra = |tier: &[Accepts]| -> Vec<String> {
        tier.iter()
            .filter(|a| !a.only(world.current))
            .map(|a| a.pod.clone())
            .collect()
    };
    let (data, sentinels) = (extra(&world.data), extra(&world.sentinels));
    if data.is_empty() && sentinels.is_empty() {
        return PasswordStep::Settled;
    }
    let since = world.accepted_since.unwrap_or(world.now);
    let grace_ms = u64::try_from(world.grace.as_millis()).unwrap_or(u64::MAX);
    let retire_at = since.plus(grace_ms);
    if world.now < retire_at {
        return PasswordStep::Grace { since, retire_at };
    }
    let not_moved: Vec<String> = world
        .data
        .iter()
        .filter(|a| a.moved != Some(true))
        .map(|a| a.pod.clone())
        .collect();
    if !not_moved.is_empty() {
        return PasswordStep::WaitForSidecars {
            since,
            retire_at,
            pods: not_moved,
        };
    }
    PasswordStep::Retire {
        since,
        retire_at,
        data,
        sentinels,
    }
}

/// While a pod has to catch up, how soon the operator looks again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(2);

/// When the operator should look again at a rotation at `step` (`None`: nothing pending). A
/// grace period is looked at when it ends, at least once a minute.
pub fn recheck(step: &PasswordStep, now: Millis) -> Option<Duration> {
    match step {
        PasswordStep::Settled => None,
        PasswordStep::WaitForPods { .. }
        | PasswordStep::Unanswered { .. }
        | PasswordStep::WaitForSidecars { .. }
        | PasswordStep::Retire { .. } => Some(WAIT_RECHECK),
        PasswordStep::Grace { retire_at, .. } => Some(
            Duration::from_millis(retire_at.since(now))
                .clamp(Duration::from_secs(1), Duration::from_secs(60)),
        ),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const GRACE: Duration = Duration::from_secs(300);

    /// A data pod whose sidecar moved, or a Sentinel (`s-…`).
    fn accepts(pod: &str, passwords: &[&str]) -> Accepts {
        Accepts {
            pod: pod.to_owned(),
            passwords: Some(passwords.iter().map(|p| (*p).to_owned()).collect()),
            moved: (!pod.starts_with("s-")).then_some(true),
        }
    }

    fn world<'a>(data: Vec<Accepts>, sentinels: Vec<Accepts>) -> PasswordWorld<'a> {
        PasswordWorld {
            current: "new",
            data,
            sentinels,
            accepted_since: None,
            now: Millis(1_000_000),
            grace: GRACE,
        }
    }

    #[test]
    fn a_cluster_on_one_password_is_settled() {
        let w = world(
            vec![accepts("v-0", &["new"]), accepts("v-1", &["new"])],
            vec![accepts("s-0", &["new"])],
        );
        assert_eq!(step(&w), PasswordStep::Settled);
    }

    #[test]
    fn a_pod_that_does_not_accept_the_new_password_or_cannot_be_asked_holds_the_old_one() {
        let mut unasked = accepts("s-0", &[]);
        unasked.passwords = None;
        let w = world(
            vec![accepts("v-0", &["old", "new"]), accepts("v-1", &["old"])],
            vec![unasked],
        );
        assert_eq!(
            step(&w),
            PasswordStep::WaitForPods {
                pods: vec!["v-1".into(), "s-0".into()]
            }
        );
    }

    #[test]
    fn pods_that_cannot_be_asked_while_nothing_rotates_are_no_rotation() {
        let unasked = |pod: &str| {
            let mut a = accepts(pod, &[]);
            a.passwords = None;
            a
        };
        // A new cluster whose pods are not running yet.
        let w = world(vec![unasked("v-0"), unasked("v-1")], vec![unasked("s-0")]);
        assert_eq!(
            step(&w),
            PasswordStep::Unanswered {
                pods: vec!["v-0".into(), "v-1".into(), "s-0".into()]
            }
        );
        // A pod replaced during a roll, every other one on the current password only.
        let w = world(
            vec![accepts("v-0", &["new"]), unasked("v-1")],
            vec![accepts("s-0", &["new"])],
        );
        assert_eq!(
            step(&w),
            PasswordStep::Unanswered {
                pods: vec!["v-1".into()]
            }
        );
        assert_eq!(recheck(&step(&w), Millis(0)), Some(WAIT_RECHECK));
        // The same with a grace period recorded: a rotation is under way.
        let mut w = w;
        w.accepted_since = Some(Millis(900_000));
        assert_eq!(
            step(&w),
            PasswordStep::WaitForPods {
                pods: vec!["v-1".into()]
            }
        );
    }

    #[test]
    fn once_every_pod_accepts_both_the_old_password_is_kept_for_the_grace_period() {
        let mut w = world(
            vec![accepts("v-0", &["old", "new"]), accepts("v-1", &["new"])],
            vec![accepts("s-0", &["old", "new"])],
        );
        assert_eq!(
            step(&w),
            PasswordStep::Grace {
                since: Millis(1_000_000),
                retire_at: Millis(1_300_000)
            },
            "first seen now: recorded now"
        );
        w.accepted_since = Some(Millis(900_000));
        w.now = Millis(1_199_999);
        assert_eq!(
            step(&w),
            PasswordStep::Grace {
                since: Millis(900_000),
                retire_at: Millis(1_200_000)
            }
        );
        w.now = Millis(1_200_000);
        assert_eq!(
            step(&w),
            PasswordStep::Retire {
                since: Millis(900_000),
                retire_at: Millis(1_200_000),
                data: vec!["v-0".into()],
                sentinels: vec!["s-0".into()]
            }
        );
    }

    #[test]
    fn after_the_grace_period_the_old_password_stays_until_every_sidecar_moved() {
        let mut lagging = accepts("v-1", &["old", "new"]);
        lagging.moved = Some(false);
        let mut unknown = accepts("v-2", &["old", "new"]);
        unknown.moved = None;
        let mut w = world(
            vec![accepts("v-0", &["old", "new"]), lagging, unknown],
            vec![accepts("s-0", &["old", "new"])],
        );
        w.accepted_since = Some(Millis(0));
        w.now = Millis(300_000);
        assert_eq!(
            step(&w),
            PasswordStep::WaitForSidecars {
                since: Millis(0),
                retire_at: Millis(300_000),
                pods: vec!["v-1".into(), "v-2".into()]
            }
        );
        w.now = Millis(299_999);
        assert!(
            matches!(step(&w), PasswordStep::Grace { .. }),
            "the grace period first"
        );
    }

    #[test]
    fn a_zero_grace_period_retires_at_once_and_a_server_without_passwords_is_waited_for() {
        let mut w = world(vec![accepts("v-0", &["old", "new"])], vec![]);
        w.grace = Duration::ZERO;
        assert_eq!(
            step(&w),
            PasswordStep::Retire {
                since: Millis(1_000_000),
                retire_at: Millis(1_000_000),
                data: vec!["v-0".into()],
                sentinels: vec![]
            }
        );
        // An empty list means "no password": never taken as accepting the current one.
        let w = world(vec![accepts("v-0", &[])], vec![]);
        assert_eq!(
            step(&w),
            PasswordStep::WaitForPods {
                pods: vec!["v-0".into()]
            }
        );
    }

    #[test]
    fn a_second_change_before_the_first_retired_waits_for_the_newest() {
        // old -> mid (both accepted), then the Secret changes again to new.
        let w = world(
            vec![
                accepts("v-0", &["old", "mid", "new"]),
                accepts("v-1", &["old", "mid"]),
            ],
            vec![],
        );
        assert_eq!(
            step(&w),
            PasswordStep::WaitForPods {
                pods: vec!["v-1".into()]
            }
        );
    }

    #[test]
    fn the_operator_looks_again_when_the_grace_period_ends_or_soon_while_pods_catch_up() {
        let grace = |retire_at| PasswordStep::Grace {
            since: Millis(0),
            retire_at: Millis(retire_at),
        };
        assert_eq!(recheck(&PasswordStep::Settled, Millis(0)), None);
        assert_eq!(
            recheck(&PasswordStep::WaitForPods { pods: vec![] }, Millis(0)),
            Some(WAIT_RECHECK)
        );
        assert_eq!(
            recheck(&grace(20_000), Millis(5_000)),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            recheck(&grace(20_000), Millis(19_900)),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            recheck(&grace(900_000), Millis(0)),
            Some(Duration::from_secs(60))
        );
    }
}
