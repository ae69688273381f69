//! `PasswordRotation` and `status.passwordRotation` from the rotation's step (ADR 0035).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use vko_api::{ConditionReason, PasswordRotationStatus};
use vko_roll::Millis;
use vko_roll::password::PasswordStep;

/// The rotation as this pass left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordRotation {
    /// The step after this pass's action (a retire that succeeded is [`PasswordStep::Settled`]).
    pub step: PasswordStep,
    /// Why this pass's retire failed, naming the pod and the command.
    pub failure: Option<String>,
}

fn at(ms: Millis) -> String {
    i64::try_from(ms.0)
        .ok()
        .and_then(|ms| Timestamp::from_millisecond(ms).ok())
        .map_or_else(|| format!("{} ms after the epoch", ms.0), |t| t.to_string())
}

/// `PasswordRotation` for this pass: (status, reason, message), or `None` to leave it as it is
/// (absent on a cluster that never rotated).
pub fn password_rotation_condition(
    rotation: &PasswordRotation,
    present: Option<&Condition>,
) -> Option<(bool, ConditionReason, String)> {
    if let Some(failure) = &rotation.failure {
        return Some((
            true,
            ConditionReason::OldPasswordRetireFailed,
            format!(
                "retiring the old password failed, retried: {failure}; both passwords stay accepted"
            ),
        ));
    }
    match &rotation.step {
        PasswordStep::Settled => present.filter(|c| c.status == "True").map(|_| {
            (
                false,
                ConditionReason::PasswordRotated,
                "every server and Sentinel accepts the auth Secret's password only".to_owned(),
            )
        }),
        PasswordStep::WaitForPods { pods } => Some((
            true,
            ConditionReason::NewPasswordPending,
            format!(
                "the auth Secret's password changed; waiting for these pods to accept the new \
                 one (the kubelet updates their Secret volume, then their sidecar or the operator \
                 adds it): {}; the old password is still accepted",
                pods.join(", ")
            ),
        )),
        // Pods not answering while nothing rotates: no rotation to report.
        PasswordStep::Unanswered { .. } => None,
        PasswordStep::WaitForSidecars { pods, .. } => Some((
            true,
            ConditionReason::SidecarsOnOldPassword,
            format!(
                "the grace period is over, but the sidecars of these pods still use the old \
                 password (the kubelet has not updated their password file yet): {}; the old \
                 password stays accepted until they move",
                pods.join(", ")
            ),
        )),
        PasswordStep::Grace { retire_at, .. } | PasswordStep::Retire { retire_at, .. } => Some((
            true,
            ConditionReason::OldPasswordGracePeriod,
            format!(
                "every server and Sentinel accepts the new and the old password; move clients \
                 to the new one: the old one is retired at {} (spec.auth.oldPasswordGracePeriod)",
                at(*retire_at)
            ),
        )),
    }
}

/// `status.passwordRotation` after this pass.
pub fn password_rotation_record(
    rotation: Option<&PasswordRotation>,
    current: Option<&PasswordRotationStatus>,
) -> Option<PasswordRotationStatus> {
    let Some(rotation) = rotation else {
        return current.cloned();
    };
    match &rotation.step {
        PasswordStep::Grace { since, .. }
        | PasswordStep::WaitForSidecars { since, .. }
        | PasswordStep::Retire { since, .. } => Some(PasswordRotationStatus {
            accepted_since: i64::try_from(since.0).unwrap_or(i64::MAX),
        }),
        PasswordStep::Settled | PasswordStep::WaitForPods { .. } => None,
        PasswordStep::Unanswered { .. } => current.cloned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use vko_api::ConditionType;

    fn rotation(step: PasswordStep) -> PasswordRotation {
        PasswordRotation {
            step,
            failure: None,
        }
    }

    fn standing(status: &str) -> Condition {
        Condition {
            type_: ConditionType::PasswordRotation.as_str().to_owned(),
            status: status.to_owned(),
            reason: String::new(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::UNIX_EPOCH,
            ),
        }
    }

    #[test]
    fn a_cluster_that_never_rotated_gets_no_condition_and_a_finished_rotation_clears_it() {
        let settled = rotation(PasswordStep::Settled);
        assert_eq!(password_rotation_condition(&settled, None), None);
        assert_eq!(
            password_rotation_condition(&settled, Some(&standing("False"))),
            None
        );
        let (status, reason, _) =
            password_rotation_condition(&settled, Some(&standing("True"))).unwrap();
        assert!(!status);
        assert_eq!(reason, ConditionReason::PasswordRotated);
        assert_eq!(password_rotation_record(Some(&settled), None), None);
    }

    #[test]
    fn each_step_is_named_with_the_pods_or_the_retire_time() {
        let waiting = rotation(PasswordStep::WaitForPods {
            pods: vec!["v-1".into(), "v-sentinel-0".into()],
        });
        let (status, reason, message) = password_rotation_condition(&waiting, None).unwrap();
        assert!(status);
        assert_eq!(reason, ConditionReason::NewPasswordPending);
        assert!(message.contains("v-1, v-sentinel-0"), "{message}");

        let unanswered = rotation(PasswordStep::Unanswered {
            pods: vec!["v-0".into()],
        });
        assert_eq!(password_rotation_condition(&unanswered, None), None);
        assert_eq!(password_rotation_record(Some(&unanswered), None), None);
        let grace = rotation(PasswordStep::Grace {
            since: Millis(1_000),
            retire_at: Millis(301_000),
        });
        let (_, reason, message) = password_rotation_condition(&grace, None).unwrap();
        assert_eq!(reason, ConditionReason::OldPasswordGracePeriod);
        assert!(message.contains("1970-01-01T00:05:01Z"), "{message}");
        assert_eq!(
            password_rotation_record(Some(&grace), None),
            Some(PasswordRotationStatus {
                accepted_since: 1_000
            })
        );
        let recorded = PasswordRotationStatus { accepted_since: 5 };
        assert_eq!(
            password_rotation_record(None, Some(&recorded)),
            Some(recorded.clone()),
            "not evaluated: kept"
        );
        assert_eq!(
            password_rotation_record(Some(&waiting), Some(&recorded)),
            None
        );

        let failed = PasswordRotation {
            step: PasswordStep::Retire {
                since: Millis(1_000),
                retire_at: Millis(301_000),
                data: vec!["v-0".into()],
                sentinels: vec![],
            },
            failure: Some("v-0: CONFIG SET masterauth: timed out".into()),
        };
        let (status, reason, message) = password_rotation_condition(&failed, None).unwrap();
        assert!(status);
        assert_eq!(reason, ConditionReason::OldPasswordRetireFailed);
        assert!(message.contains("v-0: CONFIG SET masterauth"), "{message}");
    }
}
