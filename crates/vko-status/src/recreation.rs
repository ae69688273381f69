//! A StatefulSet short of pods (ADR 0020). The StatefulSet controller retries a pod creation that
//! an admission gate refused with its own exponential backoff: after a fail-closed webhook blocked
//! it for 90 s the pods came back minutes after the gate reopened. A change to the StatefulSet's
//! metadata wakes the controller at once, so the operator bumps an annotation there (never the pod
//! template, which would roll the pods) while the StatefulSet stays short, and names the refusal
//! the controller recorded in its `FailedCreate` Events.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// On the StatefulSet's own metadata; its value, the time of the last bump, is the rate limit.
pub const NUDGE_ANNOTATION: &str = "vko.gtrfc.com/nudge";

/// How long a StatefulSet may be short of pods before the first bump: a pod being recreated
/// after a deletion is normally back well within it.
pub const NUDGE_GRACE: Duration = Duration::from_secs(10);

/// The least time between two bumps of one StatefulSet.
pub const NUDGE_INTERVAL: Duration = Duration::from_secs(20);

/// How often a pass whose pods an admission gate refuses is retried at most: a gate that reopens
/// (a webhook removed or healthy again) triggers nothing the operator watches.
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(10);

// Once the gate reopens, the next bump comes within one interval and one recheck; that leaves
// half of the 60 s bound (the e2e test's) for the pods to be created and start.
const _: () = assert!(NUDGE_INTERVAL.as_secs() + BLOCKED_RECHECK.as_secs() <= 30);

/// Whether a StatefulSet short of pods for `short_for` (`None`: not short) is bumped now, given
/// the annotation's current value. An absent, unreadable or future value counts as due: a bad
/// clock or a hand-edited value must not stop the recovery.
pub fn nudge_due(short_for: Option<Duration>, last_nudge: Option<&str>, now: Timestamp) -> bool {
    let Some(short_for) = short_for else {
        return false;
    };
    if short_for < NUDGE_GRACE {
        return false;
    }
    let Some(last) = last_nudge.and_then(|value| value.parse::<Timestamp>().ok()) else {
        return true;
    };
    match Duration::try_from(now.duration_since(last)) {
        Ok(since) => since >= NUDGE_INTERVAL,
        // In the future.
        Err(_) => true,
    }
}

/// The annotation value of a bump at `now`.
pub fn nudge_value(now: Timestamp) -> String {
    now.round(k8s_openapi::jiff::Unit::Second)
        .unwrap_or(now)
        .to_string()
}

/// Whether an API error message says an admission webhook or a ValidatingAdmissionPolicy
/// refused the request (or a fail-closed webhook could not be called).
pub fn is_admission_denial(message: &str) -> bool {
    message.contains("admission webhook")
        || message.contains("ValidatingAdmissionPolicy")
        || message.contains("failed calling webhook")
}

/// One Event about the StatefulSet, as far as this module cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerEvent<'a> {
    pub reason: &'a str,
    pub message: &'a str,
    /// When it last happened.
    pub last_seen: Timestamp,
}

/// The message of the newest `FailedCreate` an admission gate caused since the StatefulSet became
/// short (`short_for` before `now`, with a few seconds' slack for the two clocks); older ones
/// belong to an earlier episode.
pub fn pod_creation_denial<'a>(
    events: &[ControllerEvent<'a>],
    short_for: Duration,
    now: Timestamp,
) -> Option<&'a str> {
    let slack = Duration::from_secs(10);
    let since = SignedDuration::try_from(short_for.saturating_add(slack))
        .ok()
        .and_then(|back| now.checked_sub(back).ok())
        .unwrap_or(Timestamp::MIN);
    events
        .iter()
        .filter(|e| e.reason == "FailedCreate" && is_admission_denial(e.message))
        .filter(|e| e.last_seen >= since)
        .max_by_key(|e| e.last_seen)
        .map(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn a_short_statefulset_is_bumped_after_the_grace_and_then_every_interval() {
        let now = at(100);
        let secs = Duration::from_secs;
        // Not short, or short for less than the grace: never.
        assert!(!nudge_due(None, None, now));
        assert!(!nudge_due(Some(secs(9)), None, now));
        // Past the grace, never bumped: now.
        assert!(nudge_due(Some(secs(10)), None, now));
        // Bumped 19 s ago: not yet; 20 s ago: again.
        assert!(!nudge_due(Some(secs(60)), Some(&nudge_value(at(81))), now));
        assert!(nudge_due(Some(secs(60)), Some(&nudge_value(at(80))), now));
        // A value that does not parse or lies in the future does not stop the recovery.
        assert!(nudge_due(Some(secs(60)), Some("yesterday"), now));
        assert!(nudge_due(Some(secs(60)), Some(&nudge_value(at(3600))), now));
    }

    #[test]
    fn the_bump_value_is_an_rfc3339_second() {
        assert_eq!(nudge_value(at(0)), "2027-01-15T08:00:00Z");
        assert_eq!(nudge_value(at(0)).parse::<Timestamp>().unwrap(), at(0));
    }

    #[test]
    fn admission_refusals_are_told_from_other_messages() {
        assert!(is_admission_denial(
            "admission webhook \"deny.example.com\" denied the request: no"
        ));
        assert!(is_admission_denial(
            "Internal error occurred: failed calling webhook \"w\": service \"x\" not found"
        ));
        assert!(is_admission_denial(
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request"
        ));
        assert!(!is_admission_denial("exceeded quota: compute-resources"));
    }

    #[test]
    fn the_newest_refusal_of_this_episode_is_named() {
        let refused = "create Pod a-2 in StatefulSet a failed error: Internal error occurred: failed calling webhook \"deny\": service \"gone\" not found";
        let events = [
            ControllerEvent {
                reason: "FailedCreate",
                message: "create Pod a-2 in StatefulSet a failed error: admission webhook \"old\" denied the request",
                last_seen: at(-600),
            },
            ControllerEvent {
                reason: "SuccessfulCreate",
                message: "create Pod a-2 in StatefulSet a successful",
                last_seen: at(95),
            },
            ControllerEvent {
                reason: "FailedCreate",
                message: "create Pod a-2 in StatefulSet a failed error: exceeded quota",
                last_seen: at(98),
            },
            ControllerEvent {
                reason: "FailedCreate",
                message: refused,
                last_seen: at(90),
            },
        ];
        let now = at(100);
        assert_eq!(
            pod_creation_denial(&events, Duration::from_secs(60), now),
            Some(refused)
        );
        // An episode that began after the refusal was recorded: not this one's cause.
        assert_eq!(
            pod_creation_denial(&events[..2], Duration::from_secs(60), now),
            None
        );
        assert_eq!(
            pod_creation_denial(&events[3..], Duration::from_secs(10), at(130)),
            None
        );
    }
}
