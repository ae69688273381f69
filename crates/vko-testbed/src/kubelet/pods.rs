//! The pod lifecycle, one task per pod UID, like the kubelet's pod workers.
//!
//! Start: network namespace → hosts file → volumes → init containers in order (each must exit 0) →
//! every app container. Each container runs in its own loop: build its config (image map, env,
//! mounts, user), spawn it, probe it, wait for it, and restart it per `restartPolicy` with the
//! kubelet's crash-loop back-off: the first restart is immediate, then 10 s doubling to 5 min
//! (reset after 10 min of running), `waiting.reason=CrashLoopBackOff` in between.
//!
//! Deletion (a `deletionTimestamp`): preStop hooks and SIGTERM, SIGKILL at the end of the grace
//! period, a terminal status, then the pod's network, hosts file and directory go, and the pod is
//! DELETEd with grace 0 and a UID precondition. A pod that vanishes from the API (force deletion) or
//! a kubelet shutdown stops its containers quickly and cleans up without further API calls.
//!
//! Choices where the testbed differs from a real kubelet, on purpose:
//! - An unmapped image keeps `waiting.reason=ErrImagePull` (no alternation with ImagePullBackOff);
//!   it is retried with the crash-loop back-off anyway.
//! - A `CreateContainerConfigError` (missing Secret/ConfigMap) is retried every 2 s.
//! - A changed container image does not restart the container in place (StatefulSets and the
//!   operator replace pods instead). Native sidecars (init containers with restartPolicy Always) run
//!   like regular init containers. Service links of other Services are not injected.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodStatus, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use nix::sys::signal::Signal;
use tokio::sync::{Notify, mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::KubeletConfig;
use super::dns::Dns;
use super::env::{self, ConfigError, EnvContext};
use super::events::{EventType, Recorder, container_field_path};
use super::images::{self, EXTRA_BIN_MOUNT};
use super::nodes::StoppedNodes;
use super::probes::{self, ProbeEvent, ProbeKind, ProbeTiming, Target};
use super::running::{RunningContainer, RunningContainers};
use super::status::{self, ContainerRecord, PodRecord, RunState, Termination};
use super::volumes;
use crate::net::{Network, PodNet};
use crate::runtime::{BindMount, Container as Process, ContainerSpec};
use crate::{Error, Result};

/// How long shutdown waits for pod workers before giving up on them.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(15);
/// Grace period of the kubelet's own shutdown and of force-deleted pods.
const QUICK_STOP: Duration = Duration::from_secs(3);
/// The kubelet's minimum time between SIGTERM and SIGKILL (also after a preStop hook used up the grace).
const MINIMUM_GRACE_AFTER_PRE_STOP: Duration = Duration::from_secs(2);
const CRASH_BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const CRASH_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A container that ran this long without crashing starts the back-off afresh.
const CRASH_BACKOFF_RESET_AFTER: Duration = Duration::from_secs(600);
const CONFIG_ERROR_RETRY: Duration = Duration::from_secs(2);
/// File-backed volumes (ConfigMap/Secret contents, tokens) are refreshed this often.
const VOLUME_REFRESH: Duration = Duration::from_secs(10);
/// Status changes within this window go out in one patch.
const STATUS_DEBOUNCE: Duration = Duration::from_millis(50);
/// How often the status writer checks the API server's copy of the pod status against its own even
/// when nothing woke it (the kubelet's status manager re-checks every 10 s, its syncFrequency).
const STATUS_RESYNC: Duration = Duration::from_secs(10);
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// What every pod worker shares.
pub(super) struct Kubelet {
    pub(super) client: kube::Client,
    pub(super) config: KubeletConfig,
    pub(super) network: Arc<Network>,
    pub(super) dns: Arc<Dns>,
    pub(super) running: RunningContainers,
    /// A stopped node's pods neither restart containers nor report status (its kubelet is "down").
    pub(super) stopped: StoppedNodes,
}

/// Runs every pod bound to one of our nodes until `shutdown`, then stops them all and returns.
pub(super) async fn run(kubelet: Kubelet, shutdown: CancellationToken) -> Result<()> {
    let our_nodes: HashSet<String> = kubelet
        .config
        .nodes
        .iter()
        .map(|node| node.name.clone())
        .collect();
    let client = kubelet.client.clone();
    let kubelet = Arc::new(kubelet);
    // Cancelled when we return, whatever the reason, so every worker stops with us.
    let workers_token = shutdown.child_token();
    // Bound pods only; the nodes are filtered here (a field selector takes one value).
    let watch_config = watcher::Config::default().fields("spec.nodeName!=");
    let mut events = watcher(Api::<Pod>::all(client), watch_config)
        .default_backoff()
        .boxed();

    let mut workers: HashMap<String, Worker> = HashMap::new();
    // UIDs whose worker finished (pod deleted): stale events for them are ignored.
    let mut finished: HashSet<String> = HashSet::new();
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            event = events.next() => event,
        };
        workers.retain(|uid, worker| {
            let done = worker.handle.is_finished();
            if done {
                finished.insert(uid.clone());
            }
            !done
        });
        let Some(event) = event else { break };
        match event {
            Ok(watcher::Event::Init) => listed = Some(HashSet::new()),
            Ok(watcher::Event::InitApply(pod)) | Ok(watcher::Event::Apply(pod)) => {
                let bound_here = pod
                    .spec
                    .as_ref()
                    .and_then(|spec| spec.node_name.as_ref())
                    .is_some_and(|node| our_nodes.contains(node));
                let Some(uid) = pod.metadata.uid.clone() else {
                    continue;
                };
                if !bound_here || finished.contains(&uid) {
                    continue;
                }
                if let Some(seen) = listed.as_mut() {
                    seen.insert(uid.clone());
                }
                match workers.get(&uid) {
                    Some(worker) => {
                        worker.pod.send_replace(Some(pod));
                    }
                    None => {
                        let worker = Worker::spawn(kubelet.clone(), pod, workers_token.clone());
                        workers.insert(uid, worker);
                    }
                }
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(worker) = pod.metadata.uid.as_ref().and_then(|uid| workers.get(uid)) {
                    worker.pod.send_replace(None);
                }
            }
            Ok(watcher::Event::InitDone) => {
                // Pods missing from a fresh list were deleted while we were not watching.
                if let Some(seen) = listed.take() {
                    for (uid, worker) in &workers {
                        if !seen.contains(uid) {
                            worker.pod.send_replace(None);
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "pod watch failed; retrying"),
        }
    }

    // Shutdown: every worker sees the cancelled token, stops its containers quickly and cleans up.
    workers_token.cancel();
    let handles: Vec<_> = workers.into_values().map(|worker| worker.handle).collect();
    let wait_all = futures::future::join_all(handles);
    if tokio::time::timeout(SHUTDOWN_WAIT, wait_all).await.is_err() {
        tracing::warn!("some pod workers did not finish within {SHUTDOWN_WAIT:?}");
    }
    Ok(())
}

struct Worker {
    /// The latest Pod from the API; `None` once it is gone.
    pod: watch::Sender<Option<Pod>>,
    handle: tokio::task::JoinHandle<()>,
}

impl Worker {
    fn spawn(kubelet: Arc<Kubelet>, pod: Pod, shutdown: CancellationToken) -> Worker {
        let (sender, receiver) = watch::channel(Some(pod.clone()));
        let handle = tokio::spawn(async move {
            let key = PodKey::of(&pod);
            tracing::info!(pod = %key, "pod worker started");
            let worker = PodWorker::new(kubelet, pod, receiver, shutdown);
            worker.run().await;
            tracing::info!(pod = %key, "pod worker finished");
        });
        Worker {
            pod: sender,
            handle,
        }
    }
}

/// Under the state directory: the container logs of deleted pods (see `PodWorker::keep_logs`).
pub const DELETED_POD_LOGS: &str = "deleted-pods";

/// namespace/name/uid, for logs and messages.
#[derive(Clone, Debug)]
struct PodKey {
    namespace: String,
    name: String,
    uid: String,
}

impl PodKey {
    fn of(pod: &Pod) -> PodKey {
        PodKey {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A request to stop every container of the pod.
#[derive(Clone, Copy, Debug)]
struct StopRequest {
    /// SIGKILL at this instant at the latest.
    deadline: Instant,
    /// Run preStop hooks (not on a quick stop).
    run_pre_stop: bool,
}

/// Why the pod's containers were stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    Deleted,
    Gone,
    Shutdown,
}

/// The kubelet's view of the pod plus the wake-up for the status writer.
struct Shared {
    record: Mutex<PodRecord>,
    changed: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, PodRecord> {
        // Every update is a small in-place change: the data stays consistent even after a panic.
        self.record
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn update(&self, change: impl FnOnce(&mut PodRecord)) {
        change(&mut self.lock());
        self.changed.notify_one();
    }

    fn update_container(&self, slot: Slot, change: impl FnOnce(&mut ContainerRecord)) {
        self.update(|record| {
            let list = if slot.init {
                &mut record.init_containers
            } else {
                &mut record.containers
            };
            if let Some(container) = list.get_mut(slot.index) {
                change(container);
            }
        });
    }
}

/// Which container of the pod.
#[derive(Clone, Copy, Debug)]
struct Slot {
    init: bool,
    index: usize,
}

/// The container an event is about: by slot, or (init?, name).
enum EventTarget {
    Slot(Slot),
    Named(bool, String),
}

impl From<Slot> for EventTarget {
    fn from(slot: Slot) -> EventTarget {
        EventTarget::Slot(slot)
    }
}

/// What a container needs from its pod once the sandbox exists.
struct Sandbox {
    net: PodNet,
    hosts_file: PathBuf,
    volumes: BTreeMap<String, PathBuf>,
}

struct PodWorker {
    kubelet: Arc<Kubelet>,
    key: PodKey,
    /// The pod as first seen: its spec does not change in ways we act on.
    pod: Pod,
    latest: watch::Receiver<Option<Pod>>,
    shutdown: CancellationToken,
    shared: Arc<Shared>,
    pod_dir: PathBuf,
    stop: watch::Sender<Option<StopRequest>>,
    env_objects: EnvObjects,
    events: Recorder,
}

impl PodWorker {
    fn new(
        kubelet: Arc<Kubelet>,
        pod: Pod,
        latest: watch::Receiver<Option<Pod>>,
        shutdown: CancellationToken,
    ) -> PodWorker {
        let key = PodKey::of(&pod);
        let spec = pod.spec.clone().unwrap_or_default();
        let has_init = spec
            .init_containers
            .as_ref()
            .is_some_and(|list| !list.is_empty());
        let record = PodRecord {
            host_ip: crate::net::gateway().to_string(),
            pod_ip: None,
            start_time: None,
            sandbox_ready: false,
            init_containers: spec
                .init_containers
                .iter()
                .flatten()
                .map(|c| waiting_record(c, "PodInitializing"))
                .collect(),
            containers: spec
                .containers
                .iter()
                .map(|c| {
                    waiting_record(
                        c,
                        if has_init {
                            "PodInitializing"
                        } else {
                            "ContainerCreating"
                        },
                    )
                })
                .collect(),
            terminal: false,
            observed_generation: pod.metadata.generation,
        };
        let pod_dir = kubelet.config.state_dir.join("pods").join(&key.uid);
        let events = Recorder::new(kubelet.client.clone(), &pod);
        let (stop, _) = watch::channel(None);
        PodWorker {
            kubelet,
            key,
            pod,
            latest,
            shutdown,
            shared: Arc::new(Shared {
                record: Mutex::new(record),
                changed: Notify::new(),
            }),
            pod_dir,
            stop,
            env_objects: EnvObjects::default(),
            events,
        }
    }

    fn spec(&self) -> k8s_openapi::api::core::v1::PodSpec {
        self.pod.spec.clone().unwrap_or_default()
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|spec| spec.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    async fn run(self) {
        let already_terminal = matches!(
            self.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded") | Some("Failed")
        );
        let status_writer = StatusWriter::new(
            self.kubelet.client.clone(),
            &self.pod,
            self.shared.clone(),
            self.latest.clone(),
            self.kubelet.stopped.clone(),
        );
        let writer_stop = CancellationToken::new();
        let writer_task = if already_terminal {
            None
        } else {
            Some(tokio::spawn(status_writer.clone().run(writer_stop.clone())))
        };

        let sandbox: Arc<Mutex<Option<Sandbox>>> = Arc::new(Mutex::new(None));
        let life = async {
            if !already_terminal && self.deletion().is_none() {
                self.life(&sandbox).await;
            }
        };
        tokio::pin!(life);
        let mut life_done = false;
        let mut latest = self.latest.clone();
        let ending = loop {
            if self.shutdown.is_cancelled() {
                break Ending::Shutdown;
            }
            let current = latest.borrow_and_update().clone();
            match current {
                None => break Ending::Gone,
                Some(pod) if pod.metadata.deletion_timestamp.is_some() => break Ending::Deleted,
                Some(pod) => {
                    let generation = pod.metadata.generation;
                    if self.shared.lock().observed_generation != generation {
                        self.shared
                            .update(|record| record.observed_generation = generation);
                    }
                }
            }
            tokio::select! {
                () = &mut life, if !life_done => life_done = true,
                () = self.shutdown.cancelled() => {}
                changed = latest.changed() => {
                    // The sender goes when the kubelet stops (or, never expected, drops the worker).
                    if changed.is_err() {
                        break if self.shutdown.is_cancelled() { Ending::Shutdown } else { Ending::Gone };
                    }
                }
            }
        };
        let request = match ending {
            Ending::Deleted => {
                let grace = self
                    .deletion()
                    .unwrap_or(Duration::from_secs(DEFAULT_GRACE_SECONDS.unsigned_abs()));
                // As the kubelet, never less than 2 s between SIGTERM and SIGKILL.
                let grace = grace.max(MINIMUM_GRACE_AFTER_PRE_STOP);
                tracing::info!(pod = %self.key, ?grace, "pod deleted: stopping its containers");
                StopRequest {
                    deadline: Instant::now() + grace,
                    run_pre_stop: true,
                }
            }
            Ending::Gone | Ending::Shutdown => {
                tracing::info!(pod = %self.key, ?ending, "stopping the pod's containers quickly");
                StopRequest {
                    deadline: Instant::now() + QUICK_STOP,
                    run_pre_stop: false,
                }
            }
        };
        self.stop.send_replace(Some(request));
        // Every container loop sees the request, stops its process and returns, and so does `life`.
        if !life_done {
            life.await;
        }

        if ending == Ending::Deleted && !already_terminal {
            self.shared.update(|record| {
                record.terminal = true;
                for container in record
                    .init_containers
                    .iter_mut()
                    .chain(record.containers.iter_mut())
                {
                    // A container waiting to restart shows how it last ended.
                    if matches!(container.state, RunState::Waiting { .. })
                        && let Some(last) = container.last_termination.clone()
                    {
                        container.state = RunState::Terminated(last);
                    }
                    container.ready = false;
                    container.started = false;
                }
            });
            status_writer.flush(Duration::from_secs(10)).await;
        }
        writer_stop.cancel();
        if let Some(task) = writer_task {
            let _ = task.await;
        }
        self.cleanup(&sandbox).await;
        if ending == Ending::Deleted {
            self.delete_from_api().await;
        }
    }

    /// The grace period of a pending deletion.
    fn deletion(&self) -> Option<Duration> {
        let latest = self.latest.borrow();
        let pod = latest.as_ref()?;
        pod.metadata.deletion_timestamp.as_ref()?;
        let seconds = pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                pod.spec
                    .as_ref()
                    .and_then(|spec| spec.termination_grace_period_seconds)
            })
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        Some(Duration::from_secs(seconds.max(0).unsigned_abs()))
    }

    /// Start the sandbox, run the init containers, then run the app containers until they end for
    /// good or a stop is requested.
    async fn life(&self, sandbox_slot: &Arc<Mutex<Option<Sandbox>>>) {
        self.shared
            .update(|record| record.start_time = Some(status::now()));
        let Some(sandbox) = self.start_sandbox(sandbox_slot).await else {
            return;
        };

        let spec = self.spec();
        let policy = self.restart_policy();
        for (index, container) in spec.init_containers.iter().flatten().enumerate() {
            let slot = Slot { init: true, index };
            // Init containers restart on failure unless the pod says Never.
            let init_policy = if policy == "Never" {
                "Never"
            } else {
                "OnFailure"
            };
            match self
                .run_container(container, slot, &sandbox, init_policy)
                .await
            {
                ContainerEnd::Succeeded => {}
                ContainerEnd::Failed | ContainerEnd::Stopped => return,
            }
        }
        let runs = spec
            .containers
            .iter()
            .enumerate()
            .map(|(index, container)| {
                let slot = Slot { init: false, index };
                self.run_container(container, slot, &sandbox, &policy)
            });
        futures::future::join_all(runs).await;
    }

    /// Network, hosts file, volumes; retried with back-off until they work or a stop is requested.
    async fn start_sandbox(
        &self,
        sandbox_slot: &Arc<Mutex<Option<Sandbox>>>,
    ) -> Option<Arc<Sandbox>> {
        let mut delay = Duration::from_millis(500);
        loop {
            match self.try_start_sandbox(sandbox_slot).await {
                Ok(sandbox) => return Some(sandbox),
                Err(error) => {
                    tracing::warn!(pod = %self.key, %error, "pod sandbox setup failed; retrying");
                    let message = error.to_string();
                    self.shared.update(|record| {
                        for container in record
                            .init_containers
                            .iter_mut()
                            .chain(record.containers.iter_mut())
                        {
                            if let RunState::Waiting { message: slot, .. } = &mut container.state {
                                *slot = Some(message.clone());
                            }
                        }
                    });
                }
            }
            if !self.sleep_unless_stopped(delay).await {
                return None;
            }
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }

    async fn try_start_sandbox(
        &self,
        sandbox_slot: &Arc<Mutex<Option<Sandbox>>>,
    ) -> Result<Arc<Sandbox>> {
        let existing = lock(sandbox_slot).as_ref().map(|s| s.net.clone());
        let net = match existing {
            Some(net) => net,
            None => {
                let network = self.kubelet.network.clone();
                let uid = self.key.uid.clone();
                let net = tokio::task::spawn_blocking(move || network.attach_pod(&uid))
                    .await
                    .map_err(|error| {
                        Error::Other(format!("attaching the pod network: {error}"))
                    })??;
                // Recorded at once so cleanup detaches it even if a later step fails.
                *lock(sandbox_slot) = Some(Sandbox {
                    net: net.clone(),
                    hosts_file: PathBuf::new(),
                    volumes: BTreeMap::new(),
                });
                let ip = net.ip.to_string();
                self.shared.update(|record| {
                    record.pod_ip = Some(ip);
                    record.sandbox_ready = true;
                });
                net
            }
        };
        std::fs::create_dir_all(&self.pod_dir)
            .map_err(Error::io(format!("creating {}", self.pod_dir.display())))?;
        let hosts_file = self.kubelet.dns.hosts_file(&self.pod, net.ip)?;
        let prepared = volumes::prepare(&self.kubelet.client, &self.pod, &self.pod_dir).await?;
        let sandbox = Sandbox {
            net: net.clone(),
            hosts_file: hosts_file.clone(),
            volumes: prepared.dirs.clone(),
        };
        *lock(sandbox_slot) = Some(Sandbox {
            net,
            hosts_file,
            volumes: prepared.dirs,
        });
        self.spawn_volume_refresh();
        Ok(Arc::new(sandbox))
    }

    /// Keeps ConfigMap/Secret/downward/token volumes current while the pod runs.
    fn spawn_volume_refresh(&self) {
        let client = self.kubelet.client.clone();
        let mut latest = self.latest.clone();
        let pod_dir = self.pod_dir.clone();
        let mut stop = self.stop.subscribe();
        let shutdown = self.shutdown.clone();
        let key = self.key.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(VOLUME_REFRESH) => {}
                    changed = latest.changed() => if changed.is_err() { return },
                    _ = stop.changed() => return,
                    () = shutdown.cancelled() => return,
                }
                if stop.borrow().is_some() {
                    return;
                }
                let Some(pod) = latest.borrow().clone() else {
                    return;
                };
                if let Err(error) = volumes::refresh(&client, &pod, &pod_dir).await {
                    tracing::warn!(pod = %key, %error, "refreshing volumes failed");
                }
            }
        });
    }

    /// The node this pod is bound to.
    fn node_name(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.clone())
            .unwrap_or_default()
    }

    /// Waits while the pod's node is stopped (a "down" kubelet restarts nothing). `None` when a stop
    /// of the pod is requested meanwhile, else whether the node was stopped.
    async fn wait_while_node_stopped(&self) -> Option<bool> {
        let node = self.node_name();
        let mut waited = false;
        while self.kubelet.stopped.is_stopped(&node) {
            waited = true;
            if !self.sleep_unless_stopped(Duration::from_millis(250)).await {
                return None;
            }
        }
        Some(waited)
    }

    /// Sleeps unless a stop is requested first; false when stopped.
    async fn sleep_unless_stopped(&self, duration: Duration) -> bool {
        let mut stop = self.stop.subscribe();
        if stop.borrow().is_some() {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(duration) => true,
            _ = stop.changed() => false,
        }
    }

    /// One container's life: attempts, probes, restarts and back-off, until it ends for good or a stop.
    async fn run_container(
        &self,
        container: &Container,
        slot: Slot,
        sandbox: &Sandbox,
        policy: &str,
    ) -> ContainerEnd {
        let mut backoff = CrashBackoff::default();
        let mut attempt: i32 = 0;
        let mut image_backoff = CrashBackoff::default();
        let mut last_failure: Option<String> = None;
        loop {
            if self.stop.borrow().is_some() {
                return ContainerEnd::Stopped;
            }
            let prepared = match self.prepare_container(container, sandbox, attempt).await {
                Ok(prepared) => prepared,
                Err(failure) => {
                    // Retries repeat the same failure: log it once per change.
                    if last_failure.as_deref() != Some(failure.message.as_str()) {
                        tracing::info!(pod = %self.key, container = %container.name, reason = failure.reason, "{}", failure.message);
                        self.container_event(
                            slot,
                            EventType::Warning,
                            "Failed",
                            &format!("Error: {}: {}", failure.reason, failure.message),
                        );
                        last_failure = Some(failure.message.clone());
                    }
                    let delay = if failure.reason == "ErrImagePull" {
                        image_backoff
                            .next_delay(Duration::ZERO)
                            .max(Duration::from_secs(1))
                    } else {
                        CONFIG_ERROR_RETRY
                    };
                    self.shared.update_container(slot, |record| {
                        record.state = RunState::Waiting {
                            reason: failure.reason.into(),
                            message: Some(failure.message.clone()),
                        };
                    });
                    if !self.sleep_unless_stopped(delay).await {
                        return ContainerEnd::Stopped;
                    }
                    continue;
                }
            };
            let started = Instant::now();
            let outcome = self.run_attempt(container, slot, &prepared, attempt).await;
            let termination = match outcome {
                AttemptEnd::Exited(termination) => termination,
                AttemptEnd::Stopped => return ContainerEnd::Stopped,
            };
            let exit_code = termination.exit_code;
            let restart = match policy {
                "Never" => false,
                "OnFailure" => exit_code != 0,
                _ => true,
            };
            if !restart || self.stop.borrow().is_some() {
                return if exit_code == 0 {
                    ContainerEnd::Succeeded
                } else {
                    ContainerEnd::Failed
                };
            }
            match self.wait_while_node_stopped().await {
                None => return ContainerEnd::Stopped,
                // A node that comes back starts its containers afresh, without back-off.
                Some(true) => backoff = CrashBackoff::default(),
                Some(false) => {}
            }
            let delay = backoff.next_delay(started.elapsed());
            attempt += 1;
            if !delay.is_zero() {
                let message = format!(
                    "back-off {}s restarting failed container={} pod={}_{}({})",
                    delay.as_secs(),
                    container.name,
                    self.key.name,
                    self.key.namespace,
                    self.key.uid
                );
                tracing::info!(pod = %self.key, container = %container.name, "{message}");
                self.container_event(
                    slot,
                    EventType::Warning,
                    "BackOff",
                    &format!(
                        "Back-off restarting failed container {} in pod {}",
                        container.name, self.key
                    ),
                );
                self.shared.update_container(slot, |record| {
                    record.last_termination = Some(termination.clone());
                    record.state = RunState::Waiting {
                        reason: "CrashLoopBackOff".into(),
                        message: Some(message),
                    };
                });
                if !self.sleep_unless_stopped(delay).await {
                    return ContainerEnd::Stopped;
                }
            } else {
                self.shared.update_container(slot, |record| {
                    record.last_termination = Some(termination.clone())
                });
            }
        }
    }

    /// Everything about a container that can fail before its process starts.
    async fn prepare_container(
        &self,
        container: &Container,
        sandbox: &Sandbox,
        attempt: i32,
    ) -> Result<Prepared, StartFailure> {
        let image = container.image.clone().unwrap_or_default();
        let mapping =
            images::resolve(&image, &self.kubelet.config.extra_images).map_err(|error| {
                StartFailure {
                    reason: "ErrImagePull",
                    message: error.to_string(),
                }
            })?;
        // A mapped image whose binaries were never built (`cargo xtask exporter build` for the
        // redis_exporter image, `cargo xtask valkey build` for a built Valkey release) cannot be
        // pulled, like an image missing from a registry.
        if let Some(dir) = mapping.bin_dir.as_ref().filter(|dir| !dir.is_dir()) {
            return Err(StartFailure {
                reason: "ErrImagePull",
                message: format!(
                    "image {image:?} maps to host binaries in {}, which does not exist{}",
                    dir.display(),
                    match &mapping.build_command {
                        Some(command) => format!(" (build them with `{command}`)"),
                        None => String::new(),
                    }
                ),
            });
        }
        let config_error = |message: String| StartFailure {
            reason: "CreateContainerConfigError",
            message,
        };

        // The Secrets and ConfigMaps the environment refers to.
        let references = env::references(container);
        let objects = &self.env_objects;
        let (client, namespace) = (&self.kubelet.client, self.key.namespace.as_str());
        let secrets = EnvObjects::read_all(&objects.secrets, client, namespace, references.secrets)
            .await
            .map_err(config_error)?;
        let config_maps = EnvObjects::read_all(
            &objects.config_maps,
            client,
            namespace,
            references.config_maps,
        )
        .await
        .map_err(config_error)?;
        let latest_pod = self
            .latest
            .borrow()
            .clone()
            .unwrap_or_else(|| self.pod.clone());
        let hostname = pod_hostname(&latest_pod);
        let pod_ip = sandbox.net.ip.to_string();
        let host_ip = crate::net::gateway().to_string();
        let ctx = EnvContext {
            pod: &latest_pod,
            pod_ip: &pod_ip,
            host_ip: &host_ip,
            hostname: &hostname,
            api_server: self.kubelet.config.api_server,
            secrets: &secrets,
            config_maps: &config_maps,
            image_env: &mapping.base_env(),
        };
        let resolved =
            env::resolve(container, &ctx).map_err(|ConfigError(message)| config_error(message))?;

        let expand_all = |parts: &Option<Vec<String>>| -> Vec<String> {
            parts
                .iter()
                .flatten()
                .map(|part| resolved.expand(part))
                .collect()
        };
        let (command, args) = (expand_all(&container.command), expand_all(&container.args));
        let argv = images::container_argv(&mapping, &command, &args);
        if argv.is_empty() {
            return Err(config_error("no command specified".into()));
        }

        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let Some(volume_dir) = sandbox.volumes.get(&mount.name) else {
                return Err(config_error(format!(
                    "cannot find volume {:?} to mount into container {:?}",
                    mount.name, container.name
                )));
            };
            let sub_path = match (&mount.sub_path, &mount.sub_path_expr) {
                (Some(sub_path), _) if !sub_path.is_empty() => Some(sub_path.clone()),
                (_, Some(expr)) if !expr.is_empty() => Some(resolved.expand(expr)),
                _ => None,
            };
            let source = match sub_path {
                None => volume_dir.clone(),
                Some(sub_path) => sub_path_source(volume_dir, &sub_path).map_err(config_error)?,
            };
            mounts.push(BindMount {
                source,
                target: mount.mount_path.clone(),
                read_only: mount.read_only == Some(true),
            });
        }
        if let Some(bin_dir) = &mapping.bin_dir {
            mounts.push(BindMount {
                source: bin_dir.clone(),
                target: EXTRA_BIN_MOUNT.into(),
                read_only: true,
            });
        }

        let Identity {
            user,
            supplementary_groups,
        } = user_and_groups(&latest_pod, container, mapping.user).map_err(config_error)?;
        let read_only_root = container
            .security_context
            .as_ref()
            .and_then(|sc| sc.read_only_root_filesystem)
            .unwrap_or(false);
        let container_dir = self.pod_dir.join("containers").join(&container.name);
        let spec = ContainerSpec {
            name: format!("{}/{}", self.key, container.name),
            argv,
            env: resolved.process.clone(),
            working_dir: container.working_dir.clone().filter(|dir| !dir.is_empty()),
            netns: sandbox.net.netns.clone(),
            hostname,
            hosts_file: sandbox.hosts_file.clone(),
            mounts,
            scratch_dir: container_dir.join(attempt.to_string()),
            log_path: self
                .pod_dir
                .join("logs")
                .join(&container.name)
                .join(format!("{attempt}.log")),
            user,
            supplementary_groups,
            read_only_root,
            rootfs: mapping.rootfs.clone(),
        };
        Ok(Prepared {
            spec,
            env: resolved.process,
            pod_ip: IpAddr::V4(sandbox.net.ip),
            net: sandbox.net.clone(),
        })
    }

    /// Runs one attempt of a container until it exits or a stop is requested.
    async fn run_attempt(
        &self,
        container: &Container,
        slot: Slot,
        prepared: &Prepared,
        attempt: i32,
    ) -> AttemptEnd {
        let container_id = format!("testbed://{}/{}/{attempt}", self.key.uid, container.name);
        let started_at = status::now();
        let mut process = match Process::spawn(&self.kubelet.config.shim_exe, &prepared.spec) {
            Ok(process) => process,
            Err(error) => {
                let termination = Termination {
                    exit_code: 128,
                    signal: None,
                    reason: "StartError".into(),
                    message: Some(error.to_string()),
                    started_at: None,
                    finished_at: status::now(),
                    container_id: container_id.clone(),
                };
                self.shared.update_container(slot, |record| {
                    record.state = RunState::Terminated(termination.clone());
                    record.restart_count = attempt;
                    record.container_id = Some(container_id.clone());
                });
                return AttemptEnd::Exited(termination);
            }
        };
        // Hooks and exec probes enter the container's namespaces: wait until the shim has built them.
        if !wait_until_set_up(&mut process).await {
            tracing::warn!(pod = %self.key, container = %container.name, "the container's root was not ready in {SET_UP_WAIT:?}");
        }
        tracing::info!(pod = %self.key, container = %container.name, attempt, pid = process.pid(), "container started");
        // For `kubectl exec` and the fault injection.
        self.kubelet.running.insert(
            &self.key.namespace,
            &self.key.name,
            &container.name,
            RunningContainer {
                pid: process.pid(),
                env: prepared.env.clone(),
                node: self.node_name(),
                pod_uid: self.key.uid.clone(),
                net: prepared.net.clone(),
            },
        );
        self.container_event(
            slot,
            EventType::Normal,
            "Started",
            &format!("Started container {}", container.name),
        );
        let has_startup = !slot.init && container.startup_probe.is_some();
        let has_readiness = !slot.init && container.readiness_probe.is_some();
        self.shared.update_container(slot, |record| {
            record.state = RunState::Running {
                started_at: started_at.clone(),
            };
            record.restart_count = attempt;
            record.container_id = Some(container_id.clone());
            record.started = !has_startup;
            record.ready = !has_startup && !has_readiness;
        });
        let target = Target {
            pid: process.pid(),
            env: prepared.env.clone(),
        };
        let grace = self.termination_grace();
        let mut stop = self.stop.subscribe();

        // postStart runs before the container counts as started; its failure kills the container.
        let mut kill_reason: Option<String> = None;
        if let Some(hook) = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.as_ref())
        {
            let result = match probes::hook_action(hook, container, prepared.pod_ip) {
                Ok(action) => {
                    tokio::select! {
                        result = probes::run_action(&action, &target, grace) => result,
                        _ = process.wait() => Ok(()),
                    }
                }
                Err(error) => Err(error.0),
            };
            if let Err(message) = result {
                tracing::warn!(pod = %self.key, container = %container.name, "PostStartHook failed: {message}");
                kill_reason = Some(format!("PostStartHook failed: {message}"));
                self.container_event(
                    slot,
                    EventType::Warning,
                    "FailedPostStartHook",
                    &format!("PostStartHook failed: {message}"),
                );
            }
        }

        let (started_tx, started_rx) = watch::channel(!has_startup);
        let (events_tx, mut events) = mpsc::channel::<ProbeEvent>(8);
        let mut probe_tasks = tokio::task::JoinSet::new();
        let probe_start = Instant::now();
        if !slot.init {
            let probes = [
                (ProbeKind::Startup, &container.startup_probe),
                (ProbeKind::Liveness, &container.liveness_probe),
                (ProbeKind::Readiness, &container.readiness_probe),
            ];
            for (kind, probe) in probes {
                let Some(probe) = probe else { continue };
                match probes::probe_action(probe, container, prepared.pod_ip) {
                    Ok(action) => {
                        probe_tasks.spawn(probes::probe_loop(
                            kind,
                            ProbeTiming::of(kind, probe),
                            action,
                            target.clone(),
                            probe_start,
                            started_rx.clone(),
                            events_tx.clone(),
                        ));
                    }
                    Err(error) => {
                        tracing::warn!(pod = %self.key, container = %container.name, "{} probe is invalid: {error}", kind.title());
                    }
                }
            }
        }
        drop(events_tx);

        let mut stopped_by_request = false;
        let mut probes_open = true;
        let mut kill_deadline: Option<Instant> = None;
        if kill_reason.is_some() {
            let _ = process.signal(Signal::SIGTERM);
            kill_deadline = Some(Instant::now() + grace);
        }
        let exit = loop {
            if stop.borrow_and_update().is_some() && !stopped_by_request {
                stopped_by_request = true;
                probe_tasks.abort_all();
                self.container_event(
                    slot,
                    EventType::Normal,
                    "Killing",
                    &format!("Stopping container {}", container.name),
                );
                let request = (*stop.borrow()).unwrap_or(StopRequest {
                    deadline: Instant::now(),
                    run_pre_stop: false,
                });
                let deadline = self
                    .pre_stop(container, &target, prepared.pod_ip, request, &mut process)
                    .await;
                let _ = process.signal(Signal::SIGTERM);
                kill_deadline =
                    Some(kill_deadline.map_or(deadline, |existing| existing.min(deadline)));
            }
            let deadline = kill_deadline;
            tokio::select! {
                exit = process.wait() => break exit,
                () = async { if let Some(deadline) = deadline { tokio::time::sleep_until(deadline).await } else { std::future::pending().await } } => {
                    tracing::info!(pod = %self.key, container = %container.name, "grace period over: SIGKILL");
                    let _ = process.signal(Signal::SIGKILL);
                    kill_deadline = None;
                }
                _ = stop.changed(), if !stopped_by_request => {}
                event = events.recv(), if probes_open && kill_deadline.is_none() => {
                    let Some(event) = event else {
                        // Every probe task ended; nothing more to hear.
                        probes_open = false;
                        continue;
                    };
                    match (event.kind, event.success) {
                        (ProbeKind::Startup, true) => {
                            let _ = started_tx.send(true);
                            self.shared.update_container(slot, |record| {
                                record.started = true;
                                record.ready = !has_readiness;
                            });
                        }
                        (ProbeKind::Readiness, ready) => {
                            if !ready {
                                self.container_event(slot, EventType::Warning, "Unhealthy", &format!("Readiness probe failed: {}", event.message));
                            }
                            self.shared.update_container(slot, |record| record.ready = ready && record.started);
                        }
                        (ProbeKind::Liveness | ProbeKind::Startup, false) => {
                            tracing::info!(pod = %self.key, container = %container.name, "{} probe failed: restarting the container", event.kind.title());
                            self.container_event(slot, EventType::Warning, "Unhealthy", &format!("{} probe failed: {}", event.kind.title(), event.message));
                            self.container_event(slot, EventType::Normal, "Killing", &format!("Container {} failed {} probe, will be restarted", container.name, event.kind.title().to_lowercase()));
                            probe_tasks.abort_all();
                            self.shared.update_container(slot, |record| record.ready = false);
                            let probe = if event.kind == ProbeKind::Liveness { &container.liveness_probe } else { &container.startup_probe };
                            let probe_grace = probe
                                .as_ref()
                                .and_then(|p| p.termination_grace_period_seconds)
                                .map(|s| Duration::from_secs(s.max(0).unsigned_abs()))
                                .unwrap_or(grace);
                            let request = StopRequest { deadline: Instant::now() + probe_grace, run_pre_stop: true };
                            let deadline = self.pre_stop(container, &target, prepared.pod_ip, request, &mut process).await;
                            let _ = process.signal(Signal::SIGTERM);
                            kill_deadline = Some(deadline);
                        }
                        (ProbeKind::Liveness, true) => {}
                    }
                }
            }
        };
        probe_tasks.abort_all();
        let info = match exit {
            Ok(info) => info,
            Err(error) => {
                tracing::warn!(pod = %self.key, container = %container.name, %error, "waiting for the container failed");
                let _ = process.signal(Signal::SIGKILL);
                crate::runtime::ExitStatusInfo {
                    exit_code: 137,
                    signal: Some(9),
                }
            }
        };
        self.kubelet.running.remove(
            &self.key.namespace,
            &self.key.name,
            &container.name,
            process.pid(),
        );
        kill_leftover_processes(process.pid());
        let (reason, message) = match shim_failure(&prepared.spec.log_path, info.exit_code) {
            Some(message) => ("StartError".to_string(), Some(message)),
            None => (
                Termination::reason_for(info.exit_code).to_string(),
                kill_reason,
            ),
        };
        let termination = Termination {
            exit_code: info.exit_code,
            signal: info.signal,
            reason,
            message,
            started_at: Some(started_at),
            finished_at: status::now(),
            container_id,
        };
        tracing::info!(pod = %self.key, container = %container.name, attempt, exit_code = info.exit_code, "container exited");
        self.shared.update_container(slot, |record| {
            record.state = RunState::Terminated(termination.clone());
            record.ready = false;
            record.started = false;
        });
        // The overlay's upper layer belongs to this attempt only.
        if let Err(error) = tokio::fs::remove_dir_all(&prepared.spec.scratch_dir).await
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(pod = %self.key, container = %container.name, %error, "removing the container's scratch dir failed");
        }
        if stopped_by_request {
            AttemptEnd::Stopped
        } else {
            AttemptEnd::Exited(termination)
        }
    }

    /// Runs the container's preStop hook (if asked and present) within the request's deadline and
    /// returns when SIGKILL is due.
    async fn pre_stop(
        &self,
        container: &Container,
        target: &Target,
        pod_ip: IpAddr,
        request: StopRequest,
        process: &mut Process,
    ) -> Instant {
        let hook = container
            .lifecycle
            .as_ref()
            .and_then(|l| l.pre_stop.as_ref());
        let Some(hook) = hook.filter(|_| request.run_pre_stop) else {
            return request.deadline;
        };
        let budget = request.deadline.saturating_duration_since(Instant::now());
        match probes::hook_action(hook, container, pod_ip) {
            Ok(action) => {
                tokio::select! {
                    result = probes::run_action(&action, target, budget.max(Duration::from_secs(1))) => {
                        if let Err(message) = result {
                            tracing::info!(pod = %self.key, container = %container.name, "PreStopHook failed: {message}");
                            self.container_event(EventTarget::Named(false, container.name.clone()), EventType::Warning, "FailedPreStopHook", &format!("PreStopHook failed: {message}"));
                        }
                    }
                    () = tokio::time::sleep_until(request.deadline) => {}
                    _ = process.wait() => {}
                }
            }
            Err(error) => {
                tracing::info!(pod = %self.key, container = %container.name, "PreStopHook is invalid: {error}")
            }
        }
        request
            .deadline
            .max(Instant::now() + MINIMUM_GRACE_AFTER_PRE_STOP)
    }

    /// An event about one container (`kubectl describe pod` shows it).
    fn container_event(
        &self,
        container: impl Into<EventTarget>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let target: EventTarget = container.into();
        let name = match target {
            EventTarget::Slot(slot) => {
                let spec = self.pod.spec.as_ref();
                let list = if slot.init {
                    spec.and_then(|s| s.init_containers.as_ref())
                } else {
                    spec.map(|s| &s.containers)
                };
                list.and_then(|list| list.get(slot.index))
                    .map(|c| (slot.init, c.name.clone()))
            }
            EventTarget::Named(init, name) => Some((init, name)),
        };
        let field_path = name.map(|(init, name)| container_field_path(init, &name));
        self.events.record(type_, field_path, reason, message);
    }

    fn termination_grace(&self) -> Duration {
        let seconds = self
            .pod
            .spec
            .as_ref()
            .and_then(|spec| spec.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE_SECONDS);
        Duration::from_secs(seconds.max(0).unsigned_abs())
    }

    /// The pod's container logs move to `state_dir/deleted-pods/<ns>_<name>_<uid>/` before its
    /// directory goes: a test can read what a pod the operator replaced logged (a real kubelet
    /// drops them; the testbed is torn down with its state directory).
    async fn keep_logs(&self) {
        let logs = self.pod_dir.join("logs");
        let kept = self
            .kubelet
            .config
            .state_dir
            .join(DELETED_POD_LOGS)
            .join(format!(
                "{}_{}_{}",
                self.key.namespace, self.key.name, self.key.uid
            ));
        let moved = async {
            tokio::fs::create_dir_all(kept.parent().unwrap_or(&kept)).await?;
            tokio::fs::rename(&logs, &kept).await
        };
        match moved.await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => tracing::warn!(pod = %self.key, %error, "keeping the pod's logs failed"),
        }
    }

    /// Hosts file, volumes, network, pod directory. Never PV data (it lives outside the pod dir).
    async fn cleanup(&self, sandbox_slot: &Arc<Mutex<Option<Sandbox>>>) {
        self.kubelet.dns.forget(&self.key.uid);
        let sandbox = lock(sandbox_slot).take();
        if let Some(sandbox) = sandbox {
            let network = self.kubelet.network.clone();
            let net = sandbox.net.clone();
            match tokio::task::spawn_blocking(move || network.detach_pod(&net)).await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    tracing::warn!(pod = %self.key, %error, "detaching the pod network failed")
                }
                Err(error) => {
                    tracing::warn!(pod = %self.key, %error, "detaching the pod network failed")
                }
            }
        }
        if let Err(error) = volumes::cleanup(&self.pod_dir).await {
            tracing::warn!(pod = %self.key, %error, "removing the pod's volumes failed");
        }
        self.keep_logs().await;
        match tokio::fs::remove_dir_all(&self.pod_dir).await {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => {
                tracing::warn!(pod = %self.key, %error, "removing the pod directory failed")
            }
        }
    }

    /// DELETE with grace 0 and a UID precondition, retried until it is gone (or replaced by another
    /// pod of the same name, which is not ours to delete).
    async fn delete_from_api(&self) {
        let api: Api<Pod> = Api::namespaced(self.kubelet.client.clone(), &self.key.namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.key.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let mut delay = Duration::from_millis(200);
        loop {
            match api.delete(&self.key.name, &params).await {
                Ok(_) => {
                    tracing::info!(pod = %self.key, "pod deleted from the API");
                    return;
                }
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => return,
                Err(error) => {
                    tracing::warn!(pod = %self.key, %error, "deleting the pod failed; retrying")
                }
            }
            if self.shutdown.is_cancelled() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.shutdown.cancelled() => return,
            }
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }
}

/// The Secrets and ConfigMaps env refers to, as last read. Like the kubelet's object caches, a
/// container can (re)start from the last known content while the API server is unreachable; a
/// `NotFound` answer is believed at once.
#[derive(Default)]
struct EnvObjects {
    secrets: Mutex<BTreeMap<String, Option<Secret>>>,
    config_maps: Mutex<BTreeMap<String, Option<ConfigMap>>>,
}

impl EnvObjects {
    /// Each of `names` (a Secret or a ConfigMap, by the cache's type) read now, or as last read
    /// when the API server does not answer; fails on the first that was never read.
    async fn read_all<K>(
        cache: &Mutex<BTreeMap<String, Option<K>>>,
        client: &kube::Client,
        namespace: &str,
        names: impl IntoIterator<Item = String>,
    ) -> Result<BTreeMap<String, Option<K>>, String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
    {
        let api: Api<K> = Api::namespaced(client.clone(), namespace);
        let kind = K::kind(&()).to_lowercase();
        let mut found = BTreeMap::new();
        for name in names {
            let object = Self::read(cache, api.get_opt(&name).await, &name, &kind)?;
            found.insert(name, object);
        }
        Ok(found)
    }

    fn read<T: Clone>(
        cache: &Mutex<BTreeMap<String, Option<T>>>,
        answer: kube::Result<Option<T>>,
        name: &str,
        kind: &str,
    ) -> Result<Option<T>, String> {
        let mut cache = lock(cache);
        match answer {
            Ok(found) => {
                cache.insert(name.to_string(), found.clone());
                Ok(found)
            }
            Err(error) => cache
                .get(name)
                .cloned()
                .ok_or_else(|| format!("getting {kind} {name:?}: {error}")),
        }
    }
}

/// Everything needed to start one attempt.
struct Prepared {
    spec: ContainerSpec,
    env: Vec<(String, String)>,
    pod_ip: IpAddr,
    net: PodNet,
}

/// Why a container could not be started (shown as `waiting`).
#[derive(Debug)]
struct StartFailure {
    reason: &'static str,
    message: String,
}

enum AttemptEnd {
    Exited(Termination),
    Stopped,
}

enum ContainerEnd {
    Succeeded,
    Failed,
    Stopped,
}

fn waiting_record(container: &Container, reason: &str) -> ContainerRecord {
    let mut record = ContainerRecord::new(
        &container.name,
        container.image.as_deref().unwrap_or_default(),
    );
    record.state = RunState::Waiting {
        reason: reason.into(),
        message: None,
    };
    record
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The kubelet's crash-loop back-off: the first restart is immediate, later ones wait 10 s, 20 s,
/// … up to 5 min; a container that ran 10 min before exiting starts over.
#[derive(Clone, Debug, Default)]
pub(crate) struct CrashBackoff {
    next: Option<Duration>,
}

impl CrashBackoff {
    /// The delay before the next restart of a container that ran for `ran`.
    pub(crate) fn next_delay(&mut self, ran: Duration) -> Duration {
        if ran >= CRASH_BACKOFF_RESET_AFTER {
            self.next = None;
        }
        match self.next {
            None => {
                self.next = Some(CRASH_BACKOFF_INITIAL);
                Duration::ZERO
            }
            Some(delay) => {
                self.next = Some((delay * 2).min(CRASH_BACKOFF_MAX));
                delay
            }
        }
    }
}

/// A container's processes end with its main process, as they would in a pid namespace: whatever
/// is left in its process group (the runtime starts each container as a group leader) is killed.
fn kill_leftover_processes(pid: u32) {
    let Ok(raw) = i32::try_from(pid) else { return };
    // ESRCH (nothing left) is the usual answer. The group id cannot have been reused while any
    // member lives, and an empty group cannot be signalled.
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(raw), Signal::SIGKILL);
}

/// How long a container may take to build its namespaces and root before we stop waiting for it.
const SET_UP_WAIT: Duration = Duration::from_secs(10);

/// Waits until the shim has pivoted into the container's root (its mounts are complete, the
/// command is being exec'd) or has exited. False on timeout.
async fn wait_until_set_up(process: &mut Process) -> bool {
    let host_root = match std::fs::metadata("/") {
        Ok(meta) => (meta.dev(), meta.ino()),
        Err(_) => return false,
    };
    let proc_root = format!("/proc/{}/root", process.pid());
    let deadline = Instant::now() + SET_UP_WAIT;
    while Instant::now() < deadline {
        if !matches!(process.try_exit(), Ok(None)) {
            return true;
        }
        if let Ok(meta) = std::fs::metadata(&proc_root)
            && (meta.dev(), meta.ino()) != host_root
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// The container's hostname: `spec.hostname`, else the pod name (at most 63 characters).
fn pod_hostname(pod: &Pod) -> String {
    let name = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.hostname.clone())
        .filter(|hostname| !hostname.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    let trimmed: String = name.chars().take(63).collect();
    trimmed.trim_end_matches(['-', '.']).to_string()
}

/// uid/gid (container securityContext over pod securityContext over the image's user, else root)
/// and supplementary groups (supplementalGroups + fsGroup). `runAsNonRoot` with a root user is
/// refused, as the kubelet does.
fn user_and_groups(
    pod: &Pod,
    container: &Container,
    image_user: Option<(u32, u32)>,
) -> Result<Identity, String> {
    let pod_sc = pod
        .spec
        .as_ref()
        .and_then(|spec| spec.security_context.as_ref());
    let container_sc = container.security_context.as_ref();
    let run_as_user = container_sc
        .and_then(|sc| sc.run_as_user)
        .or_else(|| pod_sc.and_then(|sc| sc.run_as_user));
    let run_as_group = container_sc
        .and_then(|sc| sc.run_as_group)
        .or_else(|| pod_sc.and_then(|sc| sc.run_as_group));
    let non_root = container_sc
        .and_then(|sc| sc.run_as_non_root)
        .or_else(|| pod_sc.and_then(|sc| sc.run_as_non_root));
    let id = |value: i64, what: &str| {
        u32::try_from(value).map_err(|_| format!("invalid {what} {value}"))
    };
    let (image_uid, image_gid) = image_user.unwrap_or((0, 0));
    let user = match (run_as_user, run_as_group) {
        (None, None) => image_user,
        (uid, gid) => Some((
            uid.map_or(Ok(image_uid), |uid| id(uid, "runAsUser"))?,
            gid.map_or(Ok(image_gid), |gid| id(gid, "runAsGroup"))?,
        )),
    };
    if non_root == Some(true) && user.is_none_or(|(uid, _)| uid == 0) {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    let mut groups = Vec::new();
    for group in pod_sc
        .and_then(|sc| sc.supplemental_groups.clone())
        .into_iter()
        .flatten()
        .chain(pod_sc.and_then(|sc| sc.fs_group))
    {
        let group = id(group, "supplemental group")?;
        if !groups.contains(&group) {
            groups.push(group);
        }
    }
    Ok(Identity {
        user,
        supplementary_groups: groups,
    })
}

/// Who a container's process runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Identity {
    /// uid and gid (`None`: root, the image default).
    user: Option<(u32, u32)>,
    supplementary_groups: Vec<u32>,
}

/// The host path a subPath mount binds: inside the volume, created as a directory when missing.
fn sub_path_source(volume_dir: &Path, sub_path: &str) -> Result<PathBuf, String> {
    let relative = Path::new(sub_path);
    if relative.is_absolute()
        || relative
            .components()
            .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!(
            "subPath {sub_path:?} must be a relative path without '..'"
        ));
    }
    let source = volume_dir.join(relative);
    if std::fs::symlink_metadata(&source).is_err() {
        std::fs::create_dir_all(&source)
            .map_err(|error| format!("creating subPath {}: {error}", source.display()))?;
    }
    // A configMap/secret key is a symlink through `..data`: it must resolve inside the volume.
    let resolved = source
        .canonicalize()
        .map_err(|error| format!("subPath {}: {error}", source.display()))?;
    let root = volume_dir
        .canonicalize()
        .map_err(|error| format!("volume {}: {error}", volume_dir.display()))?;
    if !resolved.starts_with(&root) {
        return Err(format!("subPath {sub_path:?} points outside its volume"));
    }
    Ok(resolved)
}

/// The shim's own failure line (command not found, mount failed, …) when a container "exited" before
/// its command ran: 127/126/1 with the shim's message as the last log line.
fn shim_failure(log_path: &Path, exit_code: i32) -> Option<String> {
    if !matches!(exit_code, 1 | 126 | 127) {
        return None;
    }
    let log = std::fs::read_to_string(log_path).ok()?;
    let last = log.lines().rev().find(|line| !line.trim().is_empty())?;
    last.strip_prefix("vko-testbed shim: ").map(str::to_string)
}

/// Patches the pod's status subresource whenever the computed status changes, and reconciles it with
/// the API server's copy like the kubelet's status manager: when that copy (from the pod watch, so
/// checking costs no request) no longer says what the kubelet computed, e.g. the node lifecycle
/// controller set `Ready=False` while the node missed its heartbeats, the kubelet's status is written
/// back. Checked on every change of the copy and every [`STATUS_RESYNC`]; written only on a difference.
#[derive(Clone)]
struct StatusWriter {
    client: kube::Client,
    key: PodKey,
    spec: k8s_openapi::api::core::v1::PodSpec,
    shared: Arc<Shared>,
    published: Arc<tokio::sync::Mutex<Published>>,
    /// The pod as the API server has it (the pod watch); `None` once it is gone.
    server: watch::Receiver<Option<Pod>>,
    /// Nothing is published while the pod's node is stopped or its heartbeats are paused.
    stopped: StoppedNodes,
    node: String,
}

/// What the status writer last published.
struct Published {
    /// Our last status (before the first write: what the API had).
    status: Option<PodStatus>,
    written: bool,
    /// The pod's resourceVersion our last write produced: older copies from the watch predate it.
    resource_version: Option<u64>,
    /// The status as the API server returned it from our last write (what it keeps of ours: a field
    /// it drops or normalises must not look like someone else's change, or we would write forever).
    echo: Option<PodStatus>,
}

impl StatusWriter {
    fn new(
        client: kube::Client,
        pod: &Pod,
        shared: Arc<Shared>,
        server: watch::Receiver<Option<Pod>>,
        stopped: StoppedNodes,
    ) -> StatusWriter {
        StatusWriter {
            client,
            key: PodKey::of(pod),
            spec: pod.spec.clone().unwrap_or_default(),
            shared,
            published: Arc::new(tokio::sync::Mutex::new(Published {
                status: pod.status.clone(),
                written: false,
                resource_version: None,
                echo: None,
            })),
            server,
            stopped,
            node: pod
                .spec
                .as_ref()
                .and_then(|spec| spec.node_name.clone())
                .unwrap_or_default(),
        }
    }

    async fn run(self, stop: CancellationToken) {
        let mut delay = Duration::from_millis(200);
        let mut server = self.server.clone();
        let mut node_changes = self.stopped.subscribe();
        // A closed channel is not waited on again (it would be ready at once, forever).
        let (mut server_open, mut nodes_open) = (true, true);
        loop {
            match self.sync().await {
                Ok(()) => {
                    delay = Duration::from_millis(200);
                    tokio::select! {
                        () = self.shared.changed.notified() => {}
                        changed = server.changed(), if server_open => server_open = changed.is_ok(),
                        changed = node_changes.changed(), if nodes_open => {
                            nodes_open = changed.is_ok();
                        }
                        () = tokio::time::sleep(STATUS_RESYNC) => {}
                        () = stop.cancelled() => return,
                    }
                    tokio::time::sleep(STATUS_DEBOUNCE).await;
                }
                Err(StatusError::Gone) => return,
                Err(StatusError::Api(error)) => {
                    tracing::warn!(pod = %self.key, %error, "patching the pod status failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = stop.cancelled() => return,
                    }
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Publishes the current status now, retrying for at most `limit`.
    async fn flush(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            match self.sync().await {
                Ok(()) | Err(StatusError::Gone) => return,
                Err(StatusError::Api(error)) => {
                    tracing::warn!(pod = %self.key, %error, "patching the final pod status failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }

    /// The API server's copy of the status, if it is newer than our last write (an older one is a
    /// watch event still catching up, not someone else's change).
    fn server_status(&self, published: &Published) -> Option<PodStatus> {
        let server = self.server.borrow();
        let pod = server.as_ref()?;
        if pod.metadata.uid.as_deref() != Some(self.key.uid.as_str()) {
            return None;
        }
        let newer = status::is_newer(
            pod.metadata.resource_version.as_deref(),
            published.resource_version,
        );
        newer.then(|| pod.status.clone().unwrap_or_default())
    }

    async fn sync(&self) -> Result<(), StatusError> {
        // A stopped (or cut-off) node's kubelet reports nothing; the node lifecycle controller owns
        // the pod's Ready condition meanwhile. Once the node is back, the reconciliation below
        // writes the kubelet's status over the controller's.
        if self.stopped.is_silent(&self.node) {
            return Ok(());
        }
        let mut published = self.published.lock().await;
        let record = self.shared.lock().clone();
        let now = status::now();
        let own = status::pod_status(&self.spec, &record, published.status.as_ref(), &now);
        let status = if !published.written || published.status.as_ref() != Some(&own) {
            own
        } else {
            match self.server_status(&published) {
                Some(server)
                    if !status::is_reflected_in(
                        published.echo.as_ref().unwrap_or(&own),
                        &server,
                    ) =>
                {
                    tracing::info!(
                        pod = %self.key,
                        "the API server's pod status differs from the kubelet's; writing it back"
                    );
                    // Against the server's copy, so conditions it flipped get a new transition time.
                    status::pod_status(&self.spec, &record, Some(&server), &now)
                }
                _ => return Ok(()),
            }
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.key.namespace);
        // The UID in the patch is a precondition: a new pod with the same name is left alone.
        let patch = serde_json::json!({ "metadata": { "uid": self.key.uid }, "status": status });
        match api
            .patch_status(
                &self.key.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(written) => {
                *published = Published {
                    status: Some(status),
                    written: true,
                    resource_version: written
                        .metadata
                        .resource_version
                        .as_deref()
                        .and_then(|version| version.parse().ok()),
                    echo: written.status,
                };
                Ok(())
            }
            Err(kube::Error::Api(response)) if response.code == 404 || response.code == 409 => {
                Err(StatusError::Gone)
            }
            Err(error) => Err(StatusError::Api(error)),
        }
    }
}

enum StatusError {
    Gone,
    Api(kube::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_backoff_is_immediate_then_doubles_to_five_minutes() {
        let mut backoff = CrashBackoff::default();
        let quick = Duration::from_secs(1);
        let delays: Vec<u64> = (0..9)
            .map(|_| backoff.next_delay(quick).as_secs())
            .collect();
        assert_eq!(delays, vec![0, 10, 20, 40, 80, 160, 300, 300, 300]);
        // Ten minutes of running forgives the past.
        assert_eq!(backoff.next_delay(Duration::from_secs(600)), Duration::ZERO);
        assert_eq!(backoff.next_delay(quick), Duration::from_secs(10));
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn security_context_container_overrides_pod() {
        let p = pod(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": [],
            "securityContext": {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "supplementalGroups": [3000, 2000]}}}),
        );
        let plain = container(serde_json::json!({"name": "c"}));
        assert_eq!(
            user_and_groups(&p, &plain, None).unwrap(),
            Identity {
                user: Some((1000, 1000)),
                supplementary_groups: vec![3000, 2000]
            }
        );
        let own =
            container(serde_json::json!({"name": "c", "securityContext": {"runAsUser": 999}}));
        assert_eq!(
            user_and_groups(&p, &own, None).unwrap().user,
            Some((999, 1000))
        );
        let bare = pod(serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}}));
        assert_eq!(
            user_and_groups(&bare, &plain, None).unwrap(),
            Identity {
                user: None,
                supplementary_groups: vec![]
            }
        );
        let group_only =
            container(serde_json::json!({"name": "c", "securityContext": {"runAsGroup": 5}}));
        assert_eq!(
            user_and_groups(&bare, &group_only, None).unwrap().user,
            Some((0, 5))
        );
        let non_root =
            container(serde_json::json!({"name": "c", "securityContext": {"runAsNonRoot": true}}));
        assert!(
            user_and_groups(&bare, &non_root, None)
                .unwrap_err()
                .contains("runAsNonRoot")
        );
        assert!(user_and_groups(&p, &non_root, None).is_ok());
        // The image's user when neither names one; a pod's runAsUser keeps the image's group.
        let image = Some((65532, 65532));
        assert_eq!(user_and_groups(&bare, &plain, image).unwrap().user, image);
        assert!(user_and_groups(&bare, &non_root, image).is_ok());
        assert_eq!(
            user_and_groups(&bare, &own, image).unwrap().user,
            Some((999, 65532))
        );
        assert_eq!(
            user_and_groups(&p, &plain, image).unwrap().user,
            Some((1000, 1000))
        );
    }

    #[test]
    fn env_objects_fall_back_to_the_last_answer_while_the_api_fails() {
        let cache: Mutex<BTreeMap<String, Option<u32>>> = Mutex::new(BTreeMap::new());
        let down = || Err(kube::Error::TlsRequired);
        let error = EnvObjects::read(&cache, down(), "s", "secret").unwrap_err();
        assert!(error.starts_with("getting secret \"s\""), "{error}");
        assert_eq!(
            EnvObjects::read(&cache, Ok(Some(7)), "s", "secret"),
            Ok(Some(7))
        );
        assert_eq!(EnvObjects::read(&cache, down(), "s", "secret"), Ok(Some(7)));
        // NotFound is an answer, remembered too.
        assert_eq!(EnvObjects::read(&cache, Ok(None), "s", "secret"), Ok(None));
        assert_eq!(EnvObjects::read(&cache, down(), "s", "secret"), Ok(None));
    }

    #[test]
    fn leftover_processes_of_a_container_die_with_it() {
        use std::os::unix::process::CommandExt;
        // A "container" whose main process leaves a background child behind.
        let output = std::process::Command::new("sh")
            .args(["-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
            .process_group(0)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let main_pid = output.id();
        let result = output.wait_with_output().unwrap();
        let child: u32 = String::from_utf8_lossy(&result.stdout)
            .trim()
            .parse()
            .unwrap();
        let alive = |pid: u32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit(')')
                        .next()
                        .map(|rest| rest.trim_start().to_string())
                })
                .is_some_and(|rest| !rest.starts_with('Z') && !rest.starts_with('X'))
        };
        assert!(alive(child), "the background child outlives its parent");
        kill_leftover_processes(main_pid);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while alive(child) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!alive(child), "the group was killed");
        // Nothing left: a second call finds no group and does nothing.
        kill_leftover_processes(main_pid);
    }

    #[test]
    fn hostname_is_spec_hostname_or_pod_name() {
        let named = pod(
            serde_json::json!({"metadata": {"name": "web-0"}, "spec": {"containers": [], "hostname": "h"}}),
        );
        assert_eq!(pod_hostname(&named), "h");
        let plain =
            pod(serde_json::json!({"metadata": {"name": "web-0"}, "spec": {"containers": []}}));
        assert_eq!(pod_hostname(&plain), "web-0");
        let long = pod(
            serde_json::json!({"metadata": {"name": "a".repeat(70)}, "spec": {"containers": []}}),
        );
        assert_eq!(pod_hostname(&long).len(), 63);
    }

    #[test]
    fn sub_paths_stay_inside_their_volume() {
        let root = std::env::temp_dir().join(format!("vko-subpath-test-{}", std::process::id()));
        let _guard = RemoveDir(root.clone());
        let volume = root.join("vol");
        std::fs::create_dir_all(volume.join("..2024")).unwrap();
        std::fs::write(volume.join("..2024/valkey.conf"), "port 6379\n").unwrap();
        std::os::unix::fs::symlink("..2024", volume.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/valkey.conf", volume.join("valkey.conf")).unwrap();
        std::os::unix::fs::symlink("/etc", volume.join("escape")).unwrap();
        let canonical = volume.canonicalize().unwrap();
        assert_eq!(
            sub_path_source(&volume, "valkey.conf").unwrap(),
            canonical.join("..2024/valkey.conf")
        );
        assert_eq!(
            sub_path_source(&volume, "data/new").unwrap(),
            canonical.join("data/new")
        );
        assert!(
            volume.join("data/new").is_dir(),
            "a missing subPath is created as a directory"
        );
        assert!(sub_path_source(&volume, "../x").is_err());
        assert!(sub_path_source(&volume, "/etc").is_err());
        assert!(
            sub_path_source(&volume, "escape")
                .unwrap_err()
                .contains("outside")
        );
    }

    #[test]
    fn shim_failures_are_read_from_the_log() {
        let root = std::env::temp_dir().join(format!("vko-shimlog-test-{}", std::process::id()));
        let _guard = RemoveDir(root.clone());
        std::fs::create_dir_all(&root).unwrap();
        let log = root.join("0.log");
        std::fs::write(
            &log,
            "vko-testbed shim: container ns/p/c: nope: command not found\n",
        )
        .unwrap();
        assert_eq!(
            shim_failure(&log, 127).as_deref(),
            Some("container ns/p/c: nope: command not found")
        );
        assert_eq!(shim_failure(&log, 0), None);
        std::fs::write(&log, "some app output\n").unwrap();
        assert_eq!(shim_failure(&log, 1), None);
    }

    struct RemoveDir(PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
