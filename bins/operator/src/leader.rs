//! Leader election on a `coordination.k8s.io/v1` Lease with client-go's `leaderelection`
//! semantics (ADR 0017), and the gate every write and data-plane action asks first.
//!
//! - A leader may act only while its last successful renewal *started* less than the renew
//!   deadline ago ([`may_act`]); the renew deadline is shorter than the Lease duration, so a
//!   leader that cannot renew (paused, partitioned, API server slow) stops acting before any
//!   candidate may take the Lease over.
//! - A candidate judges a holder's Lease expired only from what it observed itself: the Lease
//!   (its `resourceVersion` and spec) unchanged for a Lease duration by the candidate's own
//!   monotonic clock ([`takeover`]). No other machine's `renewTime` is compared with our clock.
//! - The time a leader last renewed is kept in [`Leadership`], read with the monotonic clock at
//!   every check: a process resumed after SIGSTOP sees at once that its renewal is older than the
//!   deadline, whichever of its tasks runs first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use crate::error::Error;

/// Name of the leader Lease: the reference's, so a Go operator and vko electing in one namespace
/// exclude each other (the chart's leader-election Role grants get/update on the two names only).
pub const LEASE_NAME: &str = "valkey-operator.vko.gtrfc.com";
/// The Lease earlier vko releases elected on. It is held too, and taken first: an operator of an
/// earlier release (a standby during a rolling upgrade) elects on it alone and must never lead
/// beside this one.
pub const LEGACY_LEASE_NAME: &str = "vko-operator-leader";
/// Every Lease a leader holds, in the order a candidate takes them (one order for every
/// candidate, so two never each hold one of them for good).
pub const LEASE_NAMES: [&str; 2] = [LEGACY_LEASE_NAME, LEASE_NAME];
/// client-go's default: how long a candidate waits, after the Lease last changed, to take it.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default: how long a leader acts after the start of its last successful renewal.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default: how often a leader renews and a candidate looks again.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// The three durations of the election, checked against each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    lease_duration: Duration,
    renew_deadline: Duration,
    retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }
}

impl Timings {
    /// Refuses timings under which two operators could act at once or a leader could never
    /// renew: the renew deadline must be shorter than the Lease duration (the margin is what
    /// protects against a leader still acting while another takes over), and the retry period
    /// shorter than the renew deadline (else a single renewal could not fit).
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Timings, Error> {
        let refuse = |problem: String| Err(Error::LeaderElectionTimings(problem));
        if retry_period.is_zero() {
            return refuse("--leader-elect-retry-period must be above 0".into());
        }
        if renew_deadline >= lease_duration {
            return refuse(format!(
                "--leader-elect-renew-deadline ({}) must be shorter than --leader-elect-lease-duration ({}): \
                 a leader must stop acting before another operator may take the Lease",
                seconds(renew_deadline),
                seconds(lease_duration)
            ));
        }
        if retry_period >= renew_deadline {
            return refuse(format!(
                "--leader-elect-retry-period ({}) must be shorter than --leader-elect-renew-deadline ({}): \
                 a leader must be able to renew at least once within the deadline",
                seconds(retry_period),
                seconds(renew_deadline)
            ));
        }
        if lease_duration.subsec_nanos() != 0 || i32::try_from(lease_duration.as_secs()).is_err() {
            return refuse(format!(
                "--leader-elect-lease-duration ({}) must be whole seconds (the Lease stores seconds)",
                seconds(lease_duration)
            ));
        }
        Ok(Timings {
            lease_duration,
            renew_deadline,
            retry_period,
        })
    }

    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    pub fn renew_deadline(&self) -> Duration {
        self.renew_deadline
    }

    pub fn retry_period(&self) -> Duration {
        self.retry_period
    }

    fn lease_duration_seconds(&self) -> i32 {
        // Checked in `new`.
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

fn seconds(duration: Duration) -> String {
    format!("{}s", duration.as_secs_f64())
}

/// Whether a leader whose last successful renewal started `since_renewal` ago may act now
/// (`None`: it never renewed, or it lost the Lease).
pub fn may_act(since_renewal: Option<Duration>, renew_deadline: Duration) -> bool {
    since_renewal.is_some_and(|since| since < renew_deadline)
}

/// What a candidate last saw of the Lease: any write changes the `resourceVersion`, and a
/// renewal changes `renewTime`.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseRecord {
    pub resource_version: Option<String>,
    pub spec: LeaseSpec,
}

impl LeaseRecord {
    pub fn of(lease: &Lease) -> LeaseRecord {
        LeaseRecord {
            resource_version: lease.metadata.resource_version.clone(),
            spec: lease.spec.clone().unwrap_or_default(),
        }
    }

    /// The holder, if any (client-go writes an empty one on release).
    pub fn holder(&self) -> Option<&str> {
        self.spec
            .holder_identity
            .as_deref()
            .filter(|holder| !holder.is_empty())
    }
}

/// A record and when (by the candidate's own clock) it was first seen as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub record: LeaseRecord,
    pub since: Instant,
}

/// A candidate's verdict on the Lease it just read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Takeover {
    /// Free, released, already ours, or unchanged for a full Lease duration: write it.
    Take,
    /// Held by someone who renewed (or may still renew) within the Lease duration.
    Wait,
}

/// Whether `identity` may take the Lease it read as `current` at `now`, given what it observed
/// before; returns the observation to keep. Expiry counts from the moment this candidate first
/// saw the record as it is, for the longer of our own Lease duration and the one the holder
/// wrote (a holder configured with a longer one also keeps acting longer).
pub fn takeover(
    previous: Option<&Observation>,
    current: LeaseRecord,
    identity: &str,
    now: Instant,
    lease_duration: Duration,
) -> (Takeover, Observation) {
    let since = match previous {
        Some(seen) if seen.record == current => seen.since,
        _ => now,
    };
    let verdict = match current.holder() {
        None => Takeover::Take,
        Some(holder) if holder == identity => Takeover::Take,
        Some(_) => {
            let written = current
                .spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or_default();
            if now.saturating_duration_since(since) >= lease_duration.max(written) {
                Takeover::Take
            } else {
                Takeover::Wait
            }
        }
    };
    (
        verdict,
        Observation {
            record: current,
            since,
        },
    )
}

/// The spec that makes `identity` the holder, renewed `now`.
fn holder_spec(
    identity: &str,
    lease_duration_seconds: i32,
    previous: Option<&LeaseSpec>,
    now: Timestamp,
) -> LeaseSpec {
    let ours = previous.and_then(|spec| spec.holder_identity.as_deref()) == Some(identity);
    let transitions = previous.and_then(|spec| spec.lease_transitions);
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(lease_duration_seconds),
        acquire_time: if ours {
            previous.and_then(|spec| spec.acquire_time.clone())
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(match (ours, transitions) {
            (true, transitions) => transitions.unwrap_or(0),
            (false, None) if previous.is_none() => 0,
            (false, transitions) => transitions.unwrap_or(0).saturating_add(1),
        }),
        ..LeaseSpec::default()
    }
}

/// "May this operator act now?", shared by the elector (which records renewals) and everything
/// that writes or commands a server.
#[derive(Clone, Debug)]
pub struct Leadership {
    inner: Arc<LeadershipState>,
}

#[derive(Debug)]
struct LeadershipState {
    /// Without `--leader-elect` the operator always acts.
    elected: bool,
    renew_deadline: Duration,
    /// Start of the last successful acquire or renewal.
    renewed: Mutex<Option<Instant>>,
    /// Set when the Lease is lost: a late renewal cannot reopen the gate, only a new acquire
    /// (the Lease written again by this candidate) does.
    lost: AtomicBool,
}

impl Leadership {
    /// No election: every action is allowed (a single operator, or `migrate`).
    pub fn unconditional() -> Leadership {
        Leadership::with(false, Duration::ZERO)
    }

    /// Closed until the elector's first successful acquire.
    pub fn elected(renew_deadline: Duration) -> Leadership {
        Leadership::with(true, renew_deadline)
    }

    fn with(elected: bool, renew_deadline: Duration) -> Leadership {
        Leadership {
            inner: Arc::new(LeadershipState {
                elected,
                renew_deadline,
                renewed: Mutex::new(None),
                lost: AtomicBool::new(false),
            }),
        }
    }

    fn since_renewal(&self) -> Option<Duration> {
        if self.inner.lost.load(Ordering::SeqCst) {
            return None;
        }
        let renewed = *self.inner.renewed.lock().ok()?;
        renewed.map(|at| Instant::now().saturating_duration_since(at))
    }

    /// Whether the operator may write or command a server now.
    pub fn may_act(&self) -> bool {
        !self.inner.elected || may_act(self.since_renewal(), self.inner.renew_deadline)
    }

    /// [`Leadership::may_act`] as a `Result`, for the `?` right before an action.
    pub fn check(&self, action: &'static str) -> Result<(), Error> {
        if self.may_act() {
            Ok(())
        } else {
            Err(Error::NotLeader { action })
        }
    }

    /// What is left of the renew deadline (zero once it passed).
    fn remaining(&self) -> Duration {
        self.since_renewal().map_or(Duration::ZERO, |since| {
            self.inner.renew_deadline.saturating_sub(since)
        })
    }

    fn renewed(&self, started: Instant) {
        if self.inner.lost.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(mut renewed) = self.inner.renewed.lock() {
            *renewed = Some(renewed.map_or(started, |previous| previous.max(started)));
        }
    }

    /// A new term: the Lease was acquired (created, taken over, or found still ours after an
    /// outage and written again) by a request sent at `started`.
    fn acquired(&self, started: Instant) {
        if let Ok(mut renewed) = self.inner.renewed.lock() {
            *renewed = Some(started);
        }
        self.inner.lost.store(false, Ordering::SeqCst);
    }

    fn lose(&self) {
        self.inner.lost.store(true, Ordering::SeqCst);
    }

    /// Whether the Lease was lost (the renew deadline passed or another holder took it).
    pub fn lost(&self) -> bool {
        self.inner.lost.load(Ordering::SeqCst)
    }
}

/// Why [`Elector::hold`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Another holder took the Lease (or it vanished).
    TakenOver,
    /// No renewal succeeded within the renew deadline (also right after a resume from SIGSTOP).
    RenewDeadlinePassed,
}

/// One candidate.
#[derive(Clone)]
pub struct Elector {
    api: Api<Lease>,
    identity: String,
    timings: Timings,
    leadership: Leadership,
}

impl Elector {
    /// `client` must not be gated by `leadership` (the Lease writes are how it is opened).
    pub fn new(
        client: kube::Client,
        namespace: &str,
        identity: String,
        timings: Timings,
        leadership: Leadership,
    ) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            identity,
            timings,
            leadership,
        }
    }

    /// One look at every Lease, in [`LEASE_NAMES`] order: true once all of them name us. A Lease
    /// is written only once every Lease before it is ours; the later ones are still observed,
    /// so their expiry is counted from the same first look.
    async fn try_acquire(
        &self,
        observed: &mut [Option<Observation>; LEASE_NAMES.len()],
    ) -> Result<bool, kube::Error> {
        let mut ours = true;
        for (name, observed) in LEASE_NAMES.iter().zip(observed.iter_mut()) {
            ours = self.try_acquire_one(name, observed, ours).await? && ours;
        }
        Ok(ours)
    }

    /// One look at the Lease `name`: create it when missing, take it when [`takeover`] allows —
    /// both only when `may_write`; else only the observation is updated.
    async fn try_acquire_one(
        &self,
        name: &str,
        observed: &mut Option<Observation>,
        may_write: bool,
    ) -> Result<bool, kube::Error> {
        let lease = self.api.get_opt(name).await?;
        if !may_write {
            if let Some(lease) = lease {
                let (_, seen) = takeover(
                    observed.as_ref(),
                    LeaseRecord::of(&lease),
                    &self.identity,
                    Instant::now(),
                    self.timings.lease_duration,
                );
                *observed = Some(seen);
            }
            return Ok(false);
        }
        let Some(lease) = lease else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    ..ObjectMeta::default()
                },
                spec: Some(holder_spec(
                    &self.identity,
                    self.timings.lease_duration_seconds(),
                    None,
                    Timestamp::now(),
                )),
            };
            return won(self.api.create(&PostParams::default(), &lease).await);
        };
        let (verdict, seen) = takeover(
            observed.as_ref(),
            LeaseRecord::of(&lease),
            &self.identity,
            Instant::now(),
            self.timings.lease_duration,
        );
        let previous = seen.record.spec.clone();
        *observed = Some(seen);
        if verdict == Takeover::Wait {
            return Ok(false);
        }
        self.write_as_holder(name, lease, &previous).await
    }

    /// Writes `lease` back naming this candidate as holder after `previous`. Its resourceVersion
    /// stays set: a concurrent writer makes this a 409 (`Ok(false)`), not a double lead.
    async fn write_as_holder(
        &self,
        name: &str,
        mut lease: Lease,
        previous: &LeaseSpec,
    ) -> Result<bool, kube::Error> {
        lease.spec = Some(holder_spec(
            &self.identity,
            self.timings.lease_duration_seconds(),
            Some(previous),
            Timestamp::now(),
        ));
        won(self.api.replace(name, &PostParams::default(), &lease).await)
    }

    /// Waits until this candidate holds the Lease; the gate is open from then on (until
    /// [`Elector::hold`] returns). Also the way back after a loss: a Lease nobody took over in
    /// the meantime still names us and is written again at once.
    pub async fn acquire(&self) {
        let mut observed = [None, None];
        loop {
            let started = Instant::now();
            let attempt =
                tokio::time::timeout(self.timings.renew_deadline, self.try_acquire(&mut observed));
            match attempt.await {
                Ok(Ok(true)) => {
                    self.leadership.acquired(started);
                    tracing::info!(identity = %self.identity, leases = ?LEASE_NAMES, "acquired the leader Lease");
                    return;
                }
                Ok(Ok(false)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "leader election: Lease not reachable"),
                Err(_) => tracing::warn!("leader election: no answer within the renew deadline"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// One renewal of every Lease; `Ok(false)` when one of them is no longer ours.
    async fn renew(&self) -> Result<bool, kube::Error> {
        for name in LEASE_NAMES {
            let Some(mut lease) = self.api.get_opt(name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.take().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            if !self.write_as_holder(name, lease, &spec).await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Renews every retry period until the Lease is lost; the gate is closed when it returns.
    /// Each attempt is bounded by what is left of the renew deadline, so a hung request cannot
    /// keep the gate open; a renewal counts from before its request was sent (a candidate may
    /// see the write before we see the answer).
    pub async fn hold(&self) -> Lost {
        let mut ticks = tokio::time::interval(self.timings.retry_period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        let lost = loop {
            ticks.tick().await;
            let remaining = self.leadership.remaining();
            if remaining.is_zero() {
                break Lost::RenewDeadlinePassed;
            }
            let started = Instant::now();
            match tokio::time::timeout(remaining, self.renew()).await {
                Ok(Ok(true)) => self.leadership.renewed(started),
                Ok(Ok(false)) => break Lost::TakenOver,
                Ok(Err(error)) => tracing::warn!(%error, "leader election: renewal failed"),
                Err(_) => break Lost::RenewDeadlinePassed,
            }
            if !self.leadership.may_act() {
                break Lost::RenewDeadlinePassed;
            }
        };
        self.leadership.lose();
        lost
    }

    /// Gives the Lease up so a standby need not wait for it to expire — only while the gate is
    /// still open (a leader past its deadline may already have a successor), and bounded by it.
    pub async fn release(&self) {
        let remaining = self.leadership.remaining();
        if !self.leadership.may_act() || remaining.is_zero() {
            tracing::info!("not releasing the Lease: it is no longer ours to write");
            return;
        }
        // The gate closes before the first write (nothing acts once a successor may exist); the
        // new name is written first, so a candidate of this release takes over as soon as both
        // are free.
        let release = async {
            let mut ours = Vec::new();
            for name in LEASE_NAMES.iter().rev() {
                let Some(mut lease) = self.api.get_opt(name).await? else {
                    continue;
                };
                let Some(spec) = lease.spec.as_mut() else {
                    continue;
                };
                if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                    continue;
                }
                spec.holder_identity = None;
                ours.push((*name, lease));
            }
            if !self.leadership.may_act() {
                return Ok(false);
            }
            self.leadership.lose();
            for (name, lease) in &ours {
                self.api
                    .replace(name, &PostParams::default(), lease)
                    .await?;
            }
            Ok::<bool, kube::Error>(!ours.is_empty())
        };
        match tokio::time::timeout(remaining, release).await {
            Ok(Ok(true)) => tracing::info!("released the leader Lease"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "releasing the leader Lease failed"),
            Err(_) => tracing::warn!("releasing the leader Lease took past the renew deadline"),
        }
        self.leadership.lose();
    }
}

/// A Lease write's outcome: `true` when it went through, `false` when another writer got there
/// first (409 Conflict: someone else's create or a newer resourceVersion).
fn won(written: Result<Lease, kube::Error>) -> Result<bool, kube::Error> {
    match written {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_leader_acts_only_while_its_last_renewal_is_younger_than_the_deadline() {
        let deadline = 10 * SECOND;
        let cases = [
            (None, false),
            (Some(Duration::ZERO), true),
            (Some(9 * SECOND), true),
            (Some(9_999 * Duration::from_millis(1)), true),
            (Some(10 * SECOND), false),
            (Some(11 * SECOND), false),
            (Some(3600 * SECOND), false),
        ];
        for (since, expected) in cases {
            assert_eq!(may_act(since, deadline), expected, "{since:?}");
        }
    }

    #[test]
    fn timings_refuse_a_renew_deadline_not_shorter_than_the_lease() {
        assert!(Timings::new(15 * SECOND, 10 * SECOND, 2 * SECOND).is_ok());
        assert_eq!(
            Timings::default(),
            Timings::new(15 * SECOND, 10 * SECOND, 2 * SECOND).unwrap()
        );
        let refused = [
            (
                15 * SECOND,
                15 * SECOND,
                2 * SECOND,
                "must be shorter than --leader-elect-lease-duration",
            ),
            (
                10 * SECOND,
                15 * SECOND,
                2 * SECOND,
                "must be shorter than --leader-elect-lease-duration",
            ),
            (
                15 * SECOND,
                10 * SECOND,
                10 * SECOND,
                "must be shorter than --leader-elect-renew-deadline",
            ),
            (15 * SECOND, 10 * SECOND, Duration::ZERO, "above 0"),
            (
                Duration::from_millis(15_500),
                10 * SECOND,
                2 * SECOND,
                "whole seconds",
            ),
        ];
        for (lease, renew, retry, message) in refused {
            let error = Timings::new(lease, renew, retry).unwrap_err();
            assert!(
                error.to_string().contains(message),
                "{lease:?} {renew:?} {retry:?}: {error}"
            );
        }
    }

    fn record(version: &str, holder: Option<&str>) -> LeaseRecord {
        LeaseRecord {
            resource_version: Some(version.into()),
            spec: LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(15),
                ..LeaseSpec::default()
            },
        }
    }

    /// Expiry counts from when the candidate itself saw the record last change; the holder's
    /// `renewTime` is never compared with the candidate's clock (it is a different machine's).
    #[test]
    fn a_holder_expires_only_after_the_record_stayed_unchanged_for_a_lease_duration() {
        let lease = 15 * SECOND;
        let t0 = Instant::now();
        // Seconds after t0.
        let at = |s: u64| t0 + Duration::from_secs(s);
        let by_other = |version: &str| record(version, Some("other"));
        let seen = |version: &str, since: u64| Observation {
            record: by_other(version),
            since: at(since),
        };
        // (previous observation, current record, now, verdict, observation kept since)
        let cases = [
            (None, record("1", None), 0, Takeover::Take, 0),
            (None, record("1", Some("")), 0, Takeover::Take, 0),
            (None, record("1", Some("me")), 0, Takeover::Take, 0),
            (None, by_other("1"), 0, Takeover::Wait, 0),
            (Some(seen("1", 0)), by_other("1"), 14, Takeover::Wait, 0),
            (Some(seen("1", 0)), by_other("1"), 15, Takeover::Take, 0),
            // A renewal (new resourceVersion) restarts the candidate's clock.
            (Some(seen("1", 0)), by_other("2"), 20, Takeover::Wait, 20),
            (Some(seen("2", 20)), by_other("2"), 34, Takeover::Wait, 20),
            (Some(seen("2", 20)), by_other("2"), 35, Takeover::Take, 20),
        ];
        for (index, (previous, current, now, verdict, since)) in cases.into_iter().enumerate() {
            let (got, observation) = takeover(previous.as_ref(), current, "me", at(now), lease);
            assert_eq!(got, verdict, "case {index}");
            assert_eq!(observation.since, at(since), "case {index}");
        }
    }

    #[test]
    fn a_holder_that_wrote_a_longer_lease_duration_is_waited_for_that_long() {
        let t0 = Instant::now();
        let mut current = record("1", Some("other"));
        current.spec.lease_duration_seconds = Some(60);
        let previous = Observation {
            record: current.clone(),
            since: t0,
        };
        let lease = 15 * SECOND;
        let (at_59, _) = takeover(
            Some(&previous),
            current.clone(),
            "me",
            t0 + 59 * SECOND,
            lease,
        );
        let (at_60, _) = takeover(Some(&previous), current, "me", t0 + 60 * SECOND, lease);
        assert_eq!((at_59, at_60), (Takeover::Wait, Takeover::Take));
    }

    #[test]
    fn the_holder_spec_counts_transitions_and_keeps_the_acquire_time_on_renewal() {
        let t = |s: i64| Timestamp::from_second(s).unwrap();
        let created = holder_spec("me", 15, None, t(100));
        assert_eq!(created.lease_transitions, Some(0));
        assert_eq!(created.acquire_time, Some(MicroTime(t(100))));
        let renewed = holder_spec("me", 15, Some(&created), t(102));
        assert_eq!(renewed.acquire_time, Some(MicroTime(t(100))));
        assert_eq!(renewed.renew_time, Some(MicroTime(t(102))));
        assert_eq!(renewed.lease_transitions, Some(0));
        let taken = holder_spec("other", 15, Some(&renewed), t(130));
        assert_eq!(taken.holder_identity.as_deref(), Some("other"));
        assert_eq!(taken.acquire_time, Some(MicroTime(t(130))));
        assert_eq!(taken.lease_transitions, Some(1));
    }

    /// The gate with tokio's paused clock: open right after a renewal, closed once the renew
    /// deadline passed without one (what a process resumed from SIGSTOP sees first), and never
    /// reopened after the loss.
    #[tokio::test(start_paused = true)]
    async fn the_gate_closes_at_the_renew_deadline_and_stays_closed_after_a_loss() {
        let unconditional = Leadership::unconditional();
        assert!(unconditional.may_act());

        let gate = Leadership::elected(10 * SECOND);
        assert!(!gate.may_act(), "closed before the first acquire");
        assert!(matches!(
            gate.check("test"),
            Err(Error::NotLeader { action: "test" })
        ));
        gate.renewed(Instant::now());
        assert!(gate.may_act());
        tokio::time::advance(9 * SECOND).await;
        assert!(gate.may_act());
        assert_eq!(gate.remaining(), SECOND);
        gate.renewed(Instant::now());
        tokio::time::advance(9 * SECOND).await;
        assert!(gate.may_act(), "the renewal moved the deadline");
        // A pause (SIGSTOP) longer than the rest of the deadline.
        tokio::time::advance(30 * SECOND).await;
        assert!(!gate.may_act());
        assert_eq!(gate.remaining(), Duration::ZERO);
        gate.lose();
        gate.renewed(Instant::now());
        assert!(!gate.may_act(), "a lost Lease never reopens the gate");
        assert!(gate.lost());
    }

    mod elector {
        use http::{Request, Response};
        use kube::client::Body;

        use super::*;

        /// An API server holding Leases by name: GET answers one (404 when missing; the
        /// holder's renewals bump `resourceVersion` when its entry says so), POST creates, PUT
        /// stores. Returns the writes as (Lease name, holder).
        fn leases_server(
            leases: &[(&str, &str, bool)],
        ) -> (kube::Client, tokio::task::JoinHandle<Vec<(String, String)>>) {
            let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let mut stored: std::collections::BTreeMap<String, (Lease, bool)> = leases
                .iter()
                .map(|(name, holder, renews)| {
                    let lease = Lease {
                        metadata: ObjectMeta {
                            name: Some((*name).into()),
                            resource_version: Some("1".into()),
                            ..ObjectMeta::default()
                        },
                        spec: Some(LeaseSpec {
                            holder_identity: Some((*holder).into()),
                            lease_duration_seconds: Some(15),
                            ..LeaseSpec::default()
                        }),
                    };
                    ((*name).to_owned(), (lease, *renews))
                })
                .collect();
            let server = tokio::spawn(async move {
                let mut writes = Vec::new();
                let mut version = 1u64;
                while let Some((request, respond)) = handle.next_request().await {
                    let method = request.method().clone();
                    let path = request.uri().path().to_owned();
                    let bytes = request.into_body().collect_bytes().await.unwrap();
                    version += 1;
                    let name = if method == http::Method::POST {
                        let lease: Lease = serde_json::from_slice(&bytes).unwrap();
                        let name = lease.metadata.name.clone().unwrap();
                        stored.insert(name.clone(), (lease, false));
                        name
                    } else {
                        path.rsplit('/').next().unwrap().to_owned()
                    };
                    let Some((lease, renews)) = stored.get_mut(&name) else {
                        let status = serde_json::json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found"
                        });
                        let body = serde_json::to_vec(&status).unwrap();
                        let response = Response::builder().status(404).body(Body::from(body));
                        respond.send_response(response.unwrap());
                        continue;
                    };
                    let write = method != http::Method::GET;
                    if method == http::Method::PUT {
                        *lease = serde_json::from_slice(&bytes).unwrap();
                    }
                    if write {
                        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
                        writes.push((name.clone(), holder.unwrap_or_default()));
                    }
                    if write || *renews {
                        lease.metadata.resource_version = Some(version.to_string());
                    }
                    let body = serde_json::to_vec(&*lease).unwrap();
                    respond.send_response(Response::builder().body(Body::from(body)).unwrap());
                }
                writes
            });
            (kube::Client::new(service, "default"), server)
        }

        /// Both Leases held by `holder` (renewing them when `other_renews`).
        fn lease_server(
            holder: &str,
            other_renews: bool,
        ) -> (kube::Client, tokio::task::JoinHandle<Vec<(String, String)>>) {
            leases_server(&[
                (LEGACY_LEASE_NAME, holder, other_renews),
                (LEASE_NAME, holder, other_renews),
            ])
        }

        fn elector(client: kube::Client, leadership: &Leadership) -> Elector {
            Elector::new(
                client,
                "default",
                "me".into(),
                Timings::default(),
                leadership.clone(),
            )
        }

        /// A holder that stopped renewing (its Lease unchanged) is taken over one Lease duration
        /// after the candidate first saw it so, by the candidate's clock.
        #[tokio::test(start_paused = true)]
        async fn a_candidate_takes_a_lease_unchanged_for_a_lease_duration() {
            let (client, _server) = lease_server("other", false);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            let started = Instant::now();
            elector(client, &leadership).acquire().await;
            let waited = started.elapsed();
            assert!(
                waited >= DEFAULT_LEASE_DURATION && waited < DEFAULT_LEASE_DURATION + 4 * SECOND,
                "{waited:?}"
            );
            assert!(leadership.may_act());
        }

        /// A holder whose Lease keeps changing is never taken over, whatever its `renewTime`.
        #[tokio::test(start_paused = true)]
        async fn a_candidate_never_takes_a_lease_its_holder_keeps_renewing() {
            let (client, server) = lease_server("other", true);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            let candidate = elector(client, &leadership);
            let attempt = tokio::time::timeout(120 * SECOND, candidate.acquire()).await;
            assert!(attempt.is_err(), "took a renewed Lease");
            assert!(!leadership.may_act());
            drop(candidate);
            assert!(server.await.unwrap().is_empty(), "no write to a held Lease");
        }

        /// A leader renews every retry period and keeps acting; another holder's name in the
        /// Lease closes the gate at once, without a write.
        #[tokio::test(start_paused = true)]
        async fn a_leader_renews_while_it_holds_and_stops_when_taken_over() {
            let (client, server) = lease_server("me", false);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            leadership.renewed(Instant::now());
            let holder = elector(client, &leadership);
            let held = tokio::time::timeout(30 * SECOND, holder.hold()).await;
            assert!(held.is_err(), "the renewals kept the Lease");
            assert!(leadership.may_act());
            drop(holder);
            let writes = server.await.unwrap();
            for name in LEASE_NAMES {
                let renewals = writes.iter().filter(|(lease, _)| lease == name).count();
                assert!(renewals >= 14, "{name} renewed every 2 s: {writes:?}");
            }
            assert!(writes.iter().all(|(_, holder)| holder == "me"));

            let (client, server) = lease_server("other", false);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            leadership.renewed(Instant::now());
            let holder = elector(client, &leadership);
            assert_eq!(holder.hold().await, Lost::TakenOver);
            assert!(!leadership.may_act());
            holder.release().await;
            drop(holder);
            assert!(
                server.await.unwrap().is_empty(),
                "neither renewed nor released"
            );
        }

        /// An operator of an earlier release elects on the legacy Lease alone: while it renews
        /// it, this candidate never leads and writes nothing, not even the new Lease.
        #[tokio::test(start_paused = true)]
        async fn a_candidate_never_leads_while_an_earlier_release_renews_the_legacy_lease() {
            let (client, server) = leases_server(&[(LEGACY_LEASE_NAME, "old", true)]);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            let candidate = elector(client, &leadership);
            let attempt = tokio::time::timeout(120 * SECOND, candidate.acquire()).await;
            assert!(attempt.is_err(), "led beside an earlier release");
            assert!(!leadership.may_act());
            drop(candidate);
            assert_eq!(server.await.unwrap(), Vec::<(String, String)>::new());
        }

        /// No Lease yet: both are created, legacy first; a release frees both, the new first;
        /// a leader that finds either Lease held by another stops.
        #[tokio::test(start_paused = true)]
        async fn a_leader_holds_both_leases_and_gives_both_back() {
            let (client, server) = leases_server(&[]);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            let candidate = elector(client, &leadership);
            tokio::time::timeout(SECOND, candidate.acquire())
                .await
                .expect("free Leases are taken at once");
            assert!(leadership.may_act());
            candidate.release().await;
            assert!(!leadership.may_act());
            drop(candidate);
            let written = |name: &str, holder: &str| (name.to_owned(), holder.to_owned());
            assert_eq!(
                server.await.unwrap(),
                vec![
                    written(LEGACY_LEASE_NAME, "me"),
                    written(LEASE_NAME, "me"),
                    written(LEASE_NAME, ""),
                    written(LEGACY_LEASE_NAME, ""),
                ]
            );

            let (client, _server) =
                leases_server(&[(LEGACY_LEASE_NAME, "old", false), (LEASE_NAME, "me", false)]);
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            leadership.renewed(Instant::now());
            let holder = elector(client, &leadership);
            assert_eq!(holder.hold().await, Lost::TakenOver);
            assert!(!leadership.may_act());
        }

        /// Renewals that never get an answer (a hung API server, or this process stopped):
        /// the gate closes at the renew deadline, before any candidate may take over, and
        /// the shutdown's release writes nothing.
        #[tokio::test(start_paused = true)]
        async fn a_leader_whose_renewals_hang_stops_at_the_renew_deadline() {
            let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let leadership = Leadership::elected(DEFAULT_RENEW_DEADLINE);
            let started = Instant::now();
            leadership.renewed(started);
            let holder = elector(kube::Client::new(service, "default"), &leadership);
            assert_eq!(holder.hold().await, Lost::RenewDeadlinePassed);
            let waited = started.elapsed();
            assert!(
                waited >= DEFAULT_RENEW_DEADLINE && waited < DEFAULT_LEASE_DURATION,
                "{waited:?}"
            );
            assert!(!leadership.may_act());
            holder.release().await;
            drop(handle);
        }
    }

    /// A renewal that started before an older one finished cannot move the deadline back.
    #[tokio::test(start_paused = true)]
    async fn a_late_answer_never_moves_the_renewal_back() {
        let gate = Leadership::elected(10 * SECOND);
        let first = Instant::now();
        tokio::time::advance(5 * SECOND).await;
        gate.renewed(Instant::now());
        gate.renewed(first);
        tokio::time::advance(9 * SECOND).await;
        assert!(gate.may_act());
    }
}
