//! Why a pod of the cluster does not start, in the pod's own words: the scheduler's `Unschedulable`
//! (hard anti-affinity, an unbound claim of a StorageClass that does not exist, no node with the
//! resources), the kubelet's image pull failure, a crash loop, a container config error. Without
//! this a cluster sat in `Provisioning` ("2/3 ready") with nothing naming the cause.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vko_api::ConditionReason;

/// How long a pod may be in one of these states before it is reported: the scheduler reports an
/// unbound claim for a moment while the provisioner binds it, and a kubelet may fail one pull.
pub const GRACE_SECONDS: i64 = 30;

/// One pod that does not start, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodProblem {
    pub pod: String,
    /// `PodUnschedulable`, `ImagePullFailed`, `ContainerCrashLooping` or `ContainerConfigInvalid`.
    pub reason: ConditionReason,
    /// The scheduler's or kubelet's message (or the waiting reason when it gave none).
    pub detail: String,
}

impl PodProblem {
    /// `<pod>: <reason>: <detail>` — the condition's line and the Event's note.
    pub fn line(&self) -> String {
        format!("{}: {}: {}", self.pod, self.reason, self.detail)
    }
}

/// A data pod whose master fenced itself (ADR 0019), from its `vko.gtrfc.com/fenced` annotation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencedPod {
    pub pod: String,
    /// `AuthorityNotProven` or `AuthorityNeverProven`.
    pub reason: ConditionReason,
    /// When it fenced (RFC 3339, as the sidecar wrote it).
    pub since: String,
}

impl FencedPod {
    /// The condition's line and the Event's note.
    pub fn line(&self) -> String {
        format!(
            "{}: {}: writes paused since {}: the master cannot prove that a majority of the \
             Sentinels names it (a partition, or a Sentinel majority down)",
            self.pod, self.reason, self.since
        )
    }
}

/// The fenced pods among `pods` (in the order given): `<reason> since <time>` annotations. An
/// unknown reason is read as `AuthorityNotProven` (a newer sidecar's reason is still a fence).
pub fn fenced_pods<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> Vec<FencedPod> {
    pods.into_iter()
        .filter_map(|pod| {
            let value = pod
                .metadata
                .annotations
                .as_ref()?
                .get(vko_api::consts::annotations::FENCED)?;
            let (reason, since) = value.split_once(" since ").unwrap_or((value.as_str(), "?"));
            let reason = match reason {
                r if r == ConditionReason::AuthorityNeverProven.as_str() => {
                    ConditionReason::AuthorityNeverProven
                }
                _ => ConditionReason::AuthorityNotProven,
            };
            Some(FencedPod {
                pod: pod.metadata.name.clone()?,
                reason,
                since: since.to_owned(),
            })
        })
        .collect()
}

/// The problems of `pods`, in the order given (the caller sorts by name), judged at `now`.
pub fn pod_problems<'a>(pods: impl IntoIterator<Item = &'a Pod>, now: &Time) -> Vec<PodProblem> {
    pods.into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| {
            pod.metadata
                .creation_timestamp
                .as_ref()
                .is_some_and(|created| now.0.as_second() - created.0.as_second() >= GRACE_SECONDS)
        })
        .filter_map(problem_of)
        .collect()
}

fn problem_of(pod: &Pod) -> Option<PodProblem> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let status = pod.status.as_ref()?;
    let unschedulable = status.conditions.iter().flatten().find(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    if let Some(condition) = unschedulable {
        return Some(PodProblem {
            pod: name,
            reason: ConditionReason::PodUnschedulable,
            detail: condition
                .message
                .clone()
                .unwrap_or_else(|| "Unschedulable".to_owned()),
        });
    }
    let containers = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten());
    containers
        .filter_map(container_problem)
        .next()
        .map(|(reason, detail)| PodProblem {
            pod: name,
            reason,
            detail,
        })
}

fn container_problem(container: &ContainerStatus) -> Option<(ConditionReason, String)> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let waiting_reason = waiting.reason.as_deref()?;
    let reason = match waiting_reason {
        "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
            ConditionReason::ImagePullFailed
        }
        "CrashLoopBackOff" => ConditionReason::ContainerCrashLooping,
        "CreateContainerConfigError" | "CreateContainerError" | "RunContainerError" => {
            ConditionReason::ContainerConfigInvalid
        }
        _ => return None,
    };
    // The back-off message grows with every restart ("back-off 40s"): name how the container last
    // ended instead, so the line stays the same while the loop does.
    let message = if reason == ConditionReason::ContainerCrashLooping {
        container
            .last_state
            .as_ref()
            .and_then(|state| state.terminated.as_ref())
            .map(|ended| {
                format!(
                    "last exit code {}{}",
                    ended.exit_code,
                    ended
                        .reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                )
            })
    } else {
        waiting.message.clone().filter(|m| !m.is_empty())
    };
    Some((
        reason,
        format!(
            "container {} {waiting_reason}{}",
            container.name,
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn pod(name: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "creationTimestamp": "1970-01-01T00:01:40Z"},
            "status": status,
        }))
        .unwrap()
    }

    fn unschedulable(name: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
            }]}),
        )
    }

    fn waiting(name: &str, reason: &str, message: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"phase": "Pending", "containerStatuses": [{
                "name": "valkey", "image": "valkey/valkey:7.0", "imageID": "", "ready": false,
                "restartCount": 0, "state": {"waiting": {"reason": reason, "message": message}}
            }]}),
        )
    }

    fn crash_looping(name: &str) -> Pod {
        pod(
            name,
            serde_json::json!({"phase": "Running", "containerStatuses": [{
                "name": "valkey", "image": "valkey/valkey:8.0", "imageID": "", "ready": false,
                "restartCount": 4,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                                      "message": "back-off 40s restarting failed container"}},
                "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}
            }]}),
        )
    }

    #[test]
    fn each_cause_in_the_pods_words() {
        let pods = [
            unschedulable("a-3"),
            waiting("a-0", "ErrImagePull", "no binaries for valkey/valkey:7.0"),
            crash_looping("a-1"),
            waiting(
                "a-2",
                "CreateContainerConfigError",
                "secret \"pw\" not found",
            ),
            waiting("a-4", "ContainerCreating", ""),
            pod("a-5", serde_json::json!({"phase": "Running"})),
        ];
        let found = pod_problems(&pods, &at(200));
        let lines: Vec<String> = found.iter().map(PodProblem::line).collect();
        assert_eq!(
            lines,
            [
                "a-3: PodUnschedulable: 0/3 nodes are available: 3 node(s) didn't match pod \
                 anti-affinity rules.",
                "a-0: ImagePullFailed: container valkey ErrImagePull: no binaries for \
                 valkey/valkey:7.0",
                "a-1: ContainerCrashLooping: container valkey CrashLoopBackOff: last exit code 1 \
                 (Error)",
                "a-2: ContainerConfigInvalid: container valkey CreateContainerConfigError: secret \
                 \"pw\" not found",
            ]
        );
    }

    #[test]
    fn a_young_or_terminating_pod_is_not_reported_yet() {
        // Created at 100 s: at 129 s it is within the grace, at 130 s it is reported.
        assert_eq!(pod_problems(&[unschedulable("a-3")], &at(129)), vec![]);
        assert_eq!(pod_problems(&[unschedulable("a-3")], &at(130)).len(), 1);
        let mut leaving = unschedulable("a-3");
        leaving.metadata.deletion_timestamp = Some(at(150));
        assert_eq!(pod_problems(&[leaving], &at(200)), vec![]);
    }
}
