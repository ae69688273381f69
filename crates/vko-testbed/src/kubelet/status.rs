//! Pod status from what the kubelet knows about its containers: phase (the kubelet's `getPhase`),
//! conditions, container statuses. Pure, so every rule is unit-tested.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Now, at the API's one-second precision (so a round trip does not look like a change).
pub fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// How a container attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Termination {
    pub exit_code: i32,
    pub signal: Option<i32>,
    /// `Completed`, `Error`, `ContainerCannotRun`, …
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Time>,
    pub finished_at: Time,
    pub container_id: String,
}

impl Termination {
    /// The kubelet's reason for an exit: `Completed` for 0, `Error` otherwise.
    pub fn reason_for(exit_code: i32) -> &'static str {
        if exit_code == 0 { "Completed" } else { "Error" }
    }
}

/// A container's current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_at: Time,
    },
    Terminated(Termination),
}

/// What the kubelet tracks per container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRecord {
    pub name: String,
    pub image: String,
    pub state: RunState,
    pub last_termination: Option<Termination>,
    pub restart_count: i32,
    /// Startup probe passed (or there is none) while running.
    pub started: bool,
    /// Readiness probe passes (or there is none) while running and started.
    pub ready: bool,
    /// Id of the current (or last) attempt; `None` before the first start.
    pub container_id: Option<String>,
}

impl ContainerRecord {
    pub fn new(name: &str, image: &str) -> ContainerRecord {
        ContainerRecord {
            name: name.to_string(),
            image: image.to_string(),
            state: RunState::Waiting {
                reason: "PodInitializing".into(),
                message: None,
            },
            last_termination: None,
            restart_count: 0,
            started: false,
            ready: false,
            container_id: None,
        }
    }

    fn is_running(&self) -> bool {
        matches!(self.state, RunState::Running { .. })
    }

    fn succeeded(&self) -> bool {
        matches!(&self.state, RunState::Terminated(t) if t.exit_code == 0)
    }

    /// Has it ever run (running now, or terminated now or before)?
    fn has_run(&self) -> bool {
        !matches!(self.state, RunState::Waiting { .. }) || self.last_termination.is_some()
    }
}

/// What the kubelet knows about a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    pub host_ip: String,
    pub pod_ip: Option<String>,
    pub start_time: Option<Time>,
    /// The network namespace (sandbox) exists.
    pub sandbox_ready: bool,
    pub init_containers: Vec<ContainerRecord>,
    pub containers: Vec<ContainerRecord>,
    /// The pod is being or has been shut down for good (deletion): its containers will not restart.
    pub terminal: bool,
    /// The pod's `metadata.generation` as last seen (reported as `observedGeneration`).
    pub observed_generation: Option<i64>,
}

const PENDING: &str = "Pending";
const RUNNING: &str = "Running";
const SUCCEEDED: &str = "Succeeded";
const FAILED: &str = "Failed";

/// The kubelet's `getPhase` (without sidecar init containers).
pub fn phase(restart_policy: &str, record: &PodRecord) -> &'static str {
    let mut pending_init = 0;
    let mut failed_init = 0;
    for init in &record.init_containers {
        match &init.state {
            RunState::Running { .. } => pending_init += 1,
            RunState::Terminated(t) => {
                if t.exit_code != 0 {
                    failed_init += 1;
                }
            }
            RunState::Waiting { .. } => match &init.last_termination {
                Some(last) if last.exit_code != 0 => failed_init += 1,
                Some(_) => {}
                None => pending_init += 1,
            },
        }
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for container in &record.containers {
        match &container.state {
            RunState::Running { .. } => running += 1,
            RunState::Terminated(t) => {
                stopped += 1;
                if t.exit_code == 0 {
                    succeeded += 1;
                }
            }
            RunState::Waiting { .. } => {
                if container.last_termination.is_some() {
                    stopped += 1;
                } else {
                    waiting += 1;
                }
            }
        }
    }
    if failed_init > 0 && restart_policy == "Never" {
        return FAILED;
    }
    let any_regular_started = record.containers.iter().any(ContainerRecord::has_run);
    if (pending_init > 0 && !any_regular_started) || waiting > 0 {
        return PENDING;
    }
    if running > 0 {
        return RUNNING;
    }
    if stopped > 0 {
        if record.terminal {
            return if stopped == succeeded {
                SUCCEEDED
            } else {
                FAILED
            };
        }
        if restart_policy == "Always" {
            return RUNNING;
        }
        if stopped == succeeded {
            return SUCCEEDED;
        }
        if restart_policy == "Never" {
            return FAILED;
        }
        return RUNNING;
    }
    PENDING
}

fn container_state(state: &RunState) -> ContainerState {
    match state {
        RunState::Waiting { reason, message } => ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.clone()),
                message: message.clone(),
            }),
            ..ContainerState::default()
        },
        RunState::Running { started_at } => ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(started_at.clone()),
            }),
            ..ContainerState::default()
        },
        RunState::Terminated(t) => ContainerState {
            terminated: Some(terminated(t)),
            ..ContainerState::default()
        },
    }
}

fn terminated(t: &Termination) -> ContainerStateTerminated {
    ContainerStateTerminated {
        container_id: Some(t.container_id.clone()),
        exit_code: t.exit_code,
        finished_at: Some(t.finished_at.clone()),
        message: t.message.clone(),
        reason: Some(t.reason.clone()),
        signal: t.signal,
        started_at: t.started_at.clone(),
    }
}

fn container_status(record: &ContainerRecord, init: bool) -> ContainerStatus {
    let (ready, started) = if init {
        (record.succeeded(), record.is_running())
    } else {
        (
            record.is_running() && record.started && record.ready,
            record.is_running() && record.started,
        )
    };
    ContainerStatus {
        name: record.name.clone(),
        image: record.image.clone(),
        image_id: format!("testbed://{}", record.image),
        container_id: record.container_id.clone(),
        ready,
        started: Some(started),
        restart_count: record.restart_count,
        state: Some(container_state(&record.state)),
        last_state: Some(ContainerState {
            terminated: record.last_termination.as_ref().map(terminated),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The pod status to publish. `previous` is what is in the API now: its `PodScheduled` and foreign
/// conditions are kept, and a condition's `lastTransitionTime` only moves when its status changes.
pub fn pod_status(
    spec: &PodSpec,
    record: &PodRecord,
    previous: Option<&PodStatus>,
    now: &Time,
) -> PodStatus {
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let mut phase = phase(restart_policy, record);
    // A terminal phase is final.
    if let Some(previous_phase) = previous.and_then(|status| status.phase.as_deref())
        && (previous_phase == SUCCEEDED || previous_phase == FAILED)
    {
        phase = if previous_phase == SUCCEEDED {
            SUCCEEDED
        } else {
            FAILED
        };
    }
    let container_statuses: Vec<ContainerStatus> = record
        .containers
        .iter()
        .map(|c| container_status(c, false))
        .collect();
    let init_statuses: Vec<ContainerStatus> = record
        .init_containers
        .iter()
        .map(|c| container_status(c, true))
        .collect();

    let initialized_ok = record
        .init_containers
        .iter()
        .all(ContainerRecord::succeeded)
        || record.containers.iter().any(ContainerRecord::has_run);
    let incomplete: Vec<&str> = record
        .init_containers
        .iter()
        .filter(|c| !c.succeeded())
        .map(|c| c.name.as_str())
        .collect();
    let unready: Vec<&str> = container_statuses
        .iter()
        .filter(|status| !status.ready)
        .map(|status| status.name.as_str())
        .collect();
    let completed = phase == SUCCEEDED;

    let previous_conditions = previous
        .and_then(|status| status.conditions.clone())
        .unwrap_or_default();
    let condition = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        let status = if ok { "True" } else { "False" };
        let last_transition_time = previous_conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == status)
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| now.clone());
        PodCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            last_transition_time: Some(last_transition_time),
            reason: if ok { None } else { reason.map(str::to_string) },
            message: if ok { None } else { message },
            observed_generation: record.observed_generation,
            ..PodCondition::default()
        }
    };
    let (ready_reason, ready_message) = if completed {
        ("PodCompleted", None)
    } else {
        (
            "ContainersNotReady",
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let containers_ready = unready.is_empty() && !completed && !record.containers.is_empty();
    let ours = [
        condition(
            "PodReadyToStartContainers",
            record.sandbox_ready && !record.terminal,
            None,
            None,
        ),
        condition(
            "Initialized",
            initialized_ok,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: [{}]",
                incomplete.join(" ")
            )),
        ),
        condition(
            "Ready",
            containers_ready,
            Some(ready_reason),
            ready_message.clone(),
        ),
        condition(
            "ContainersReady",
            containers_ready,
            Some(ready_reason),
            ready_message,
        ),
    ];
    // PodScheduled (the scheduler's) and any other condition we do not own come first, unchanged.
    let mut conditions: Vec<PodCondition> = previous_conditions
        .iter()
        .filter(|c| !ours.iter().any(|mine| mine.type_ == c.type_))
        .cloned()
        .collect();
    if !conditions.iter().any(|c| c.type_ == "PodScheduled") {
        conditions.insert(0, condition("PodScheduled", true, None, None));
    }
    conditions.extend(ours);

    let ip = record.pod_ip.clone();
    PodStatus {
        phase: Some(phase.to_string()),
        host_ip: Some(record.host_ip.clone()),
        host_ips: Some(vec![HostIP {
            ip: record.host_ip.clone(),
        }]),
        pod_ip: ip.clone(),
        pod_ips: ip.map(|ip| vec![PodIP { ip }]),
        start_time: record.start_time.clone(),
        conditions: Some(conditions),
        container_statuses: Some(container_statuses),
        init_container_statuses: if init_statuses.is_empty() {
            None
        } else {
            Some(init_statuses)
        },
        qos_class: previous.and_then(|status| status.qos_class.clone()),
        observed_generation: record.observed_generation,
        ..PodStatus::default()
    }
}

/// Does the API server's copy `server` already say everything `ours` says (would our merge patch
/// change nothing)? Fields we do not write (set by others, or defaulted by the API server) are
/// ignored, also inside list items; lists must have the same length, item by item.
pub fn is_reflected_in(ours: &PodStatus, server: &PodStatus) -> bool {
    match (serde_json::to_value(ours), serde_json::to_value(server)) {
        (Ok(ours), Ok(server)) => json_contains(&server, &ours),
        // Unserializable cannot happen for these types; writing is the safe answer.
        _ => false,
    }
}

fn json_contains(whole: &serde_json::Value, part: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (whole, part) {
        (Value::Object(whole), Value::Object(part)) => part.iter().all(|(key, value)| {
            whole
                .get(key)
                .is_some_and(|present| json_contains(present, value))
        }),
        (Value::Array(whole), Value::Array(part)) => {
            whole.len() == part.len()
                && whole
                    .iter()
                    .zip(part)
                    .all(|(present, value)| json_contains(present, value))
        }
        (whole, part) => whole == part,
    }
}

/// Is a copy at `resource_version` newer than our last write at `written`? The API server's
/// resourceVersions are etcd revisions (integers that only grow); anything unreadable counts as
/// newer, so a difference is never ignored for it.
pub fn is_newer(resource_version: Option<&str>, written: Option<u64>) -> bool {
    match (
        resource_version.and_then(|version| version.parse::<u64>().ok()),
        written,
    ) {
        (Some(version), Some(written)) => version > written,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(second: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + second).unwrap())
    }

    fn termination(exit_code: i32) -> Termination {
        Termination {
            exit_code,
            signal: None,
            reason: Termination::reason_for(exit_code).into(),
            message: None,
            started_at: Some(time(0)),
            finished_at: time(1),
            container_id: "testbed://u/c/0".into(),
        }
    }

    fn running(name: &str, ready: bool) -> ContainerRecord {
        ContainerRecord {
            state: RunState::Running {
                started_at: time(0),
            },
            started: true,
            ready,
            container_id: Some(format!("testbed://u/{name}/0")),
            ..ContainerRecord::new(name, "valkey/valkey:8.0")
        }
    }

    fn terminated_record(name: &str, exit_code: i32) -> ContainerRecord {
        ContainerRecord {
            state: RunState::Terminated(termination(exit_code)),
            ..ContainerRecord::new(name, "img")
        }
    }

    fn crashlooping(name: &str, exit_code: i32) -> ContainerRecord {
        ContainerRecord {
            state: RunState::Waiting {
                reason: "CrashLoopBackOff".into(),
                message: None,
            },
            last_termination: Some(termination(exit_code)),
            restart_count: 2,
            ..ContainerRecord::new(name, "img")
        }
    }

    fn record(init: Vec<ContainerRecord>, containers: Vec<ContainerRecord>) -> PodRecord {
        PodRecord {
            host_ip: "10.244.0.1".into(),
            pod_ip: Some("10.244.0.5".into()),
            start_time: Some(time(0)),
            sandbox_ready: true,
            init_containers: init,
            containers,
            terminal: false,
            observed_generation: Some(1),
        }
    }

    #[test]
    fn phase_follows_the_kubelet() {
        let waiting = ContainerRecord::new("a", "img");
        assert_eq!(
            phase("Always", &record(vec![], vec![waiting.clone()])),
            PENDING
        );
        assert_eq!(
            phase(
                "Always",
                &record(vec![running("i", true)], vec![waiting.clone()])
            ),
            PENDING
        );
        assert_eq!(
            phase(
                "Always",
                &record(vec![terminated_record("i", 0)], vec![running("a", false)])
            ),
            RUNNING
        );
        assert_eq!(
            phase(
                "Always",
                &record(vec![], vec![running("a", true), waiting.clone()])
            ),
            PENDING
        );
        // Restarting containers keep an Always pod Running, never Failed.
        assert_eq!(
            phase("Always", &record(vec![], vec![crashlooping("a", 1)])),
            RUNNING
        );
        assert_eq!(
            phase("Always", &record(vec![], vec![terminated_record("a", 1)])),
            RUNNING
        );
        assert_eq!(
            phase(
                "OnFailure",
                &record(vec![], vec![terminated_record("a", 0)])
            ),
            SUCCEEDED
        );
        assert_eq!(
            phase("OnFailure", &record(vec![], vec![crashlooping("a", 1)])),
            RUNNING
        );
        assert_eq!(
            phase(
                "Never",
                &record(
                    vec![],
                    vec![terminated_record("a", 0), terminated_record("b", 0)]
                )
            ),
            SUCCEEDED
        );
        assert_eq!(
            phase(
                "Never",
                &record(
                    vec![],
                    vec![terminated_record("a", 0), terminated_record("b", 2)]
                )
            ),
            FAILED
        );
        assert_eq!(
            phase(
                "Never",
                &record(vec![], vec![terminated_record("a", 1), running("b", true)])
            ),
            RUNNING
        );
        // A failed init container fails a Never pod; others retry it.
        assert_eq!(
            phase(
                "Never",
                &record(vec![terminated_record("i", 1)], vec![waiting.clone()])
            ),
            FAILED
        );
        assert_eq!(
            phase(
                "Always",
                &record(vec![crashlooping("i", 1)], vec![waiting.clone()])
            ),
            PENDING
        );
        // After deletion, the phase is terminal whatever the restart policy.
        let mut deleted = record(vec![], vec![terminated_record("a", 143)]);
        deleted.terminal = true;
        assert_eq!(phase("Always", &deleted), FAILED);
        deleted.containers = vec![terminated_record("a", 0)];
        assert_eq!(phase("Always", &deleted), SUCCEEDED);
    }

    fn spec() -> PodSpec {
        PodSpec {
            restart_policy: Some("Always".into()),
            ..PodSpec::default()
        }
    }

    fn condition<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
        status
            .conditions
            .as_ref()
            .unwrap()
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap()
    }

    #[test]
    fn conditions_reflect_init_and_readiness_and_keep_transition_times() {
        let pending = record(
            vec![ContainerRecord::new("init", "img")],
            vec![ContainerRecord::new("app", "img")],
        );
        let first = pod_status(&spec(), &pending, None, &time(10));
        assert_eq!(first.phase.as_deref(), Some(PENDING));
        assert_eq!(condition(&first, "Initialized").status, "False");
        assert_eq!(
            condition(&first, "Initialized").message.as_deref(),
            Some("containers with incomplete status: [init]")
        );
        assert_eq!(
            condition(&first, "Ready").reason.as_deref(),
            Some("ContainersNotReady")
        );
        assert_eq!(
            condition(&first, "Ready").message.as_deref(),
            Some("containers with unready status: [app]")
        );
        assert_eq!(condition(&first, "PodScheduled").status, "True");
        assert_eq!(
            condition(&first, "PodReadyToStartContainers").status,
            "True"
        );

        let up = record(
            vec![terminated_record("init", 0)],
            vec![running("app", true)],
        );
        let second = pod_status(&spec(), &up, Some(&first), &time(20));
        assert_eq!(second.phase.as_deref(), Some(RUNNING));
        assert_eq!(condition(&second, "Initialized").status, "True");
        assert_eq!(condition(&second, "Ready").status, "True");
        assert_eq!(
            condition(&second, "ContainersReady").last_transition_time,
            Some(time(20))
        );
        // Unchanged condition: the transition time stays.
        assert_eq!(
            condition(&second, "PodReadyToStartContainers").last_transition_time,
            Some(time(10))
        );
        let third = pod_status(&spec(), &up, Some(&second), &time(30));
        assert_eq!(third, second, "nothing changed, nothing to patch");

        let statuses = second.container_statuses.unwrap();
        assert_eq!(statuses[0].image_id, "testbed://valkey/valkey:8.0");
        assert_eq!(
            statuses[0].container_id.as_deref(),
            Some("testbed://u/app/0")
        );
        assert_eq!((statuses[0].ready, statuses[0].started), (true, Some(true)));
        let init = second.init_container_statuses.unwrap();
        assert!(init[0].ready);
        assert_eq!(
            second.pod_ips,
            Some(vec![PodIP {
                ip: "10.244.0.5".into()
            }])
        );
    }

    #[test]
    fn a_ready_condition_someone_else_flipped_is_a_difference_and_is_restored() {
        let up = record(vec![], vec![running("app", true)]);
        let ours = pod_status(&spec(), &up, None, &time(10));
        // The API server's copy as we wrote it, plus what others add: the scheduler's condition
        // reason, a defaulted field inside a container status, the QoS class.
        let mut server = ours.clone();
        server.qos_class = Some("BestEffort".into());
        server.container_statuses.as_mut().unwrap()[0].user = Some(Default::default());
        assert!(is_reflected_in(&ours, &server), "nothing of ours changed");

        // The node lifecycle controller marks the pod not ready while its node misses heartbeats.
        let mut marked = server.clone();
        for condition in marked.conditions.as_mut().unwrap() {
            if condition.type_ == "Ready" {
                condition.status = "False".into();
                condition.reason = Some("NodeNotReady".into());
                condition.last_transition_time = Some(time(40));
            }
        }
        assert!(!is_reflected_in(&ours, &marked));
        let restored = pod_status(&spec(), &up, Some(&marked), &time(50));
        assert_eq!(condition(&restored, "Ready").status, "True");
        assert_eq!(condition(&restored, "Ready").reason, None);
        assert_eq!(
            condition(&restored, "Ready").last_transition_time,
            Some(time(50)),
            "it transitioned back"
        );
        assert_eq!(
            condition(&restored, "ContainersReady").last_transition_time,
            Some(time(10)),
            "untouched conditions keep their time"
        );
        assert_eq!(restored.qos_class.as_deref(), Some("BestEffort"));
        assert!(is_reflected_in(
            &restored,
            &marked_after_write(&marked, &restored)
        ));

        // Container statuses someone else changed are a difference too, and so is a missing one.
        let mut foreign = server.clone();
        foreign.container_statuses.as_mut().unwrap()[0].ready = false;
        assert!(!is_reflected_in(&ours, &foreign));
        let mut missing = server;
        missing.container_statuses = Some(vec![]);
        assert!(!is_reflected_in(&ours, &missing));
    }

    /// The server's copy after our merge patch of `written` over `before` (lists replaced).
    fn marked_after_write(before: &PodStatus, written: &PodStatus) -> PodStatus {
        PodStatus {
            qos_class: before.qos_class.clone(),
            ..written.clone()
        }
    }

    #[test]
    fn only_copies_newer_than_our_last_write_are_compared() {
        assert!(is_newer(Some("120"), Some(100)));
        assert!(!is_newer(Some("100"), Some(100)), "our own write echoed");
        assert!(
            !is_newer(Some("98"), Some(100)),
            "a watch event catching up"
        );
        assert!(is_newer(Some("98"), None), "nothing written yet");
        assert!(is_newer(Some("opaque"), Some(100)));
        assert!(is_newer(None, Some(100)));
    }

    #[test]
    fn unready_or_unstarted_containers_are_not_ready() {
        let mut not_started = running("app", true);
        not_started.started = false;
        let status = pod_status(
            &spec(),
            &record(vec![], vec![not_started, running("side", false)]),
            None,
            &time(0),
        );
        let statuses = status.container_statuses.as_ref().unwrap();
        assert_eq!(
            (statuses[0].ready, statuses[0].started),
            (false, Some(false))
        );
        assert!(!statuses[1].ready);
        assert_eq!(
            condition(&status, "Ready").message.as_deref(),
            Some("containers with unready status: [app side]")
        );
    }

    #[test]
    fn restarts_show_last_state_and_terminal_phase_sticks() {
        let status = pod_status(
            &spec(),
            &record(vec![], vec![crashlooping("app", 137)]),
            None,
            &time(0),
        );
        let app = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(app.restart_count, 2);
        assert_eq!(
            app.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            app.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            137
        );
        assert_eq!(status.phase.as_deref(), Some(RUNNING));

        let never = PodSpec {
            restart_policy: Some("Never".into()),
            ..PodSpec::default()
        };
        let done = pod_status(
            &never,
            &record(vec![], vec![terminated_record("app", 0)]),
            None,
            &time(0),
        );
        assert_eq!(done.phase.as_deref(), Some(SUCCEEDED));
        assert_eq!(
            condition(&done, "Ready").reason.as_deref(),
            Some("PodCompleted")
        );
        // Whatever comes after, a terminal phase does not go back.
        let later = pod_status(
            &never,
            &record(vec![], vec![ContainerRecord::new("app", "img")]),
            Some(&done),
            &time(5),
        );
        assert_eq!(later.phase.as_deref(), Some(SUCCEEDED));
    }
}
