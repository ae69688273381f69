//! The fake Nodes: registration, status heartbeats and Leases, and "stopping" a node.
//!
//! Each Node looks like one a kubelet registered: hostname/os/arch/zone labels, capacity,
//! addresses, the daemon endpoint, node info and the four standard conditions. The heartbeat
//! renews each node's Lease in `kube-node-lease` and the Ready condition's `lastHeartbeatTime`
//! every 10 s; the node lifecycle controller in kube-controller-manager keys its not-ready and
//! unreachable taints off both. A node in [`StoppedNodes`] gets no heartbeat, which is how a node
//! failure is simulated; a node whose heartbeats are paused keeps running its pods but writes nothing
//! to the API (a kubelet cut off from the API server).
//!
//! The heartbeat runs on its own thread with its own runtime and API client ([`spawn_heartbeat`]), and
//! every renewal has a timeout: pod work (hundreds of tasks, status patches, watches) cannot delay a
//! Lease renewal by queueing in front of it, as it could when both shared one runtime and client.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::NodeSpec;
use crate::Result;

/// Every node's InternalIP: the bridge gateway, where the node's kubelet API listens (on its own port).
pub const NODE_IP: &str = "10.244.0.1";
/// The first node's kubelet API port; the others count up from it.
pub const KUBELET_PORT: u16 = 10250;
/// Reported as the container runtime in `nodeInfo`.
pub const CONTAINER_RUNTIME_VERSION: &str = "testbed://0.1";
/// Where node Leases live.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// How often Leases and the Ready heartbeat are renewed (the kubelet's default lease renew interval).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(10);
/// One node's renewal (its GET, status patch and Lease apply) gives up after this long, so a hung
/// request does not hold up the next beat (the kubelet bounds its lease client the same way).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(8);
/// The Lease duration the kubelet uses by default.
pub const LEASE_DURATION_SECONDS: i32 = 40;
const FIELD_MANAGER: &str = "vko-testbed";

/// The names of nodes whose "kubelet" is stopped (no Lease renewals, no heartbeats, no containers)
/// and of nodes whose heartbeats are paused (their pods run, but nothing of the node reaches the API).
#[derive(Clone, Default)]
pub struct StoppedNodes(Arc<StoppedInner>);

#[derive(Default)]
struct StoppedInner {
    names: Mutex<BTreeSet<String>>,
    paused: Mutex<BTreeSet<String>>,
    /// Counts changes: wakes the heartbeat (a restarted node reports Ready at once instead of within
    /// 10 s) and the pods' status writers (they publish again at once).
    changes: watch::Sender<u64>,
}

impl std::fmt::Debug for StoppedNodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoppedNodes")
            .field("stopped", &*lock(&self.0.names))
            .field("paused", &*lock(&self.0.paused))
            .finish()
    }
}

impl StoppedNodes {
    pub fn stop(&self, node: &str) {
        lock(&self.0.names).insert(node.to_string());
    }
    pub fn start(&self, node: &str) {
        if lock(&self.0.names).remove(node) {
            self.0.changes.send_modify(|count| *count += 1);
        }
    }
    /// The node's kubelet stays up but is cut off from the API server: no Lease renewal, no node or
    /// pod status.
    pub fn pause_heartbeats(&self, node: &str) {
        lock(&self.0.paused).insert(node.to_string());
    }
    pub fn resume_heartbeats(&self, node: &str) {
        if lock(&self.0.paused).remove(node) {
            self.0.changes.send_modify(|count| *count += 1);
        }
    }
    pub fn is_stopped(&self, node: &str) -> bool {
        lock(&self.0.names).contains(node)
    }
    /// Stopped or paused: nothing of the node is written to the API.
    pub fn is_silent(&self, node: &str) -> bool {
        self.is_stopped(node) || lock(&self.0.paused).contains(node)
    }
    /// Changes whenever a node starts again or its heartbeats resume.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.changes.subscribe()
    }
}

fn lock(names: &Mutex<BTreeSet<String>>) -> MutexGuard<'_, BTreeSet<String>> {
    // The set stays consistent even if a holder panicked (every change is one insert/remove).
    names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Creates or updates every Node and reports its status as Ready.
pub async fn register(client: &kube::Client, nodes: &[NodeSpec]) -> Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    for node in nodes {
        let registered = api
            .patch(
                &node.name,
                &apply_params(),
                &Patch::Apply(node_object(node)),
            )
            .await?;
        report_status(&api, node, registered.status.as_ref()).await?;
        tracing::info!(node = %node.name, zone = %node.zone, "node registered");
    }
    Ok(())
}

/// Runs [`heartbeat`] on a thread of its own (its own runtime, its own client from `api`) until
/// `shutdown`.
pub fn spawn_heartbeat(
    api: kube::Config,
    nodes: Vec<NodeSpec>,
    stopped: StoppedNodes,
    shutdown: CancellationToken,
) -> Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("node-heartbeat".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "no runtime for the node heartbeat");
                    return;
                }
            };
            runtime.block_on(async move {
                // Built here: the client's connection tasks live on this thread's runtime.
                let client = match kube::Client::try_from(api) {
                    Ok(client) => client,
                    Err(error) => {
                        tracing::error!(%error, "no API client for the node heartbeat");
                        return;
                    }
                };
                heartbeat(client, nodes, stopped, shutdown).await;
            });
        })
        .map_err(crate::Error::io("starting the node heartbeat thread"))
}

/// Renews every running node's Lease and Ready heartbeat every [`HEARTBEAT_INTERVAL`] until
/// `shutdown`, all nodes at once, each renewal bounded by [`HEARTBEAT_TIMEOUT`]. Failures are logged
/// and retried on the next beat (the API server may be restarting); a renewal later than twice the
/// interval is logged with its gap.
pub async fn heartbeat(
    client: kube::Client,
    nodes: Vec<NodeSpec>,
    stopped: StoppedNodes,
    shutdown: CancellationToken,
) {
    let node_api: Api<Node> = Api::all(client.clone());
    let lease_api: Api<Lease> = Api::namespaced(client, LEASE_NAMESPACE);
    let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut changes = stopped.subscribe();
    let mut renewed: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
            _ = changes.changed() => {}
        }
        let beats = nodes
            .iter()
            .filter(|node| !stopped.is_silent(&node.name))
            .map(|node| {
                let (node_api, lease_api) = (&node_api, &lease_api);
                async move {
                    let outcome =
                        tokio::time::timeout(HEARTBEAT_TIMEOUT, beat(node_api, lease_api, node))
                            .await;
                    (node, outcome)
                }
            });
        for (node, outcome) in futures::future::join_all(beats).await {
            match outcome {
                Ok(Ok(())) => {
                    let now = Instant::now();
                    if let Some(before) = renewed.insert(node.name.clone(), now) {
                        let gap = now.duration_since(before);
                        if gap > 2 * HEARTBEAT_INTERVAL {
                            tracing::warn!(node = %node.name, ?gap, "late Lease renewal");
                        }
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(node = %node.name, %error, "node heartbeat failed")
                }
                Err(_) => tracing::warn!(
                    node = %node.name,
                    timeout = ?HEARTBEAT_TIMEOUT,
                    "node heartbeat timed out"
                ),
            }
        }
        // A paused or stopped node's gap is the fault's, not lateness.
        renewed.retain(|name, _| !stopped.is_silent(name));
    }
}

async fn beat(node_api: &Api<Node>, lease_api: &Api<Lease>, node: &NodeSpec) -> Result<()> {
    let current = match node_api.get_opt(&node.name).await? {
        Some(current) => current,
        // Someone deleted the Node: register it again, as a restarted kubelet would.
        None => {
            node_api
                .patch(
                    &node.name,
                    &apply_params(),
                    &Patch::Apply(node_object(node)),
                )
                .await?
        }
    };
    let reported = report_status(node_api, node, current.status.as_ref()).await?;
    let lease = lease_object(
        &node.name,
        reported.metadata.uid.as_deref(),
        Timestamp::now(),
    );
    lease_api
        .patch(&node.name, &apply_params(), &Patch::Apply(lease))
        .await?;
    Ok(())
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Patches the node's status (a subresource; strategic merge like the kubelet, conditions merge by
/// type) with fresh conditions, keeping each `lastTransitionTime` while its status is unchanged.
async fn report_status(
    api: &Api<Node>,
    node: &NodeSpec,
    previous: Option<&NodeStatus>,
) -> Result<Node> {
    let status = node_status(node, previous, Timestamp::now());
    let patch = serde_json::json!({ "status": status });
    Ok(api
        .patch_status(
            &node.name,
            &PatchParams::default(),
            &Patch::Strategic(patch),
        )
        .await?)
}

/// The Node as registered (metadata only; status is reported separately).
pub fn node_object(node: &NodeSpec) -> Node {
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), node.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        ("topology.kubernetes.io/zone".to_string(), node.zone.clone()),
    ]);
    Node {
        metadata: ObjectMeta {
            name: Some(node.name.clone()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: None,
        status: None,
    }
}

fn resources() -> BTreeMap<String, Quantity> {
    [
        ("cpu", "8"),
        ("memory", "16Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "50Gi"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), Quantity(value.to_string())))
    .collect()
}

/// A healthy node's status at `now`. `previous` supplies the transition times of conditions whose
/// status does not change.
pub fn node_status(node: &NodeSpec, previous: Option<&NodeStatus>, now: Timestamp) -> NodeStatus {
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let before = previous
            .and_then(|previous| previous.conditions.as_ref())
            .and_then(|conditions| conditions.iter().find(|condition| condition.type_ == type_));
        let last_transition_time = match before {
            Some(before) if before.status == status && before.last_transition_time.is_some() => {
                before.last_transition_time.clone()
            }
            _ => Some(Time(now)),
        };
        NodeCondition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            last_heartbeat_time: Some(Time(now)),
            last_transition_time,
        }
    };
    NodeStatus {
        capacity: Some(resources()),
        allocatable: Some(resources()),
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: NODE_IP.into(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: node.name.clone(),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint {
                port: i32::from(node.kubelet_port),
            }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: "amd64".into(),
            operating_system: "linux".into(),
            kubelet_version: crate::paths::KUBERNETES_VERSION.into(),
            kube_proxy_version: String::new(),
            container_runtime_version: CONTAINER_RUNTIME_VERSION.into(),
            os_image: "vko-testbed".into(),
            kernel_version: kernel_version(),
            machine_id: node.name.clone(),
            system_uuid: node.name.clone(),
            boot_id: node.name.clone(),
            swap: None,
        }),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            ),
        ]),
        ..NodeStatus::default()
    }
}

fn kernel_version() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|release| release.trim().to_string())
        .unwrap_or_default()
}

/// The node's Lease renewed at `now`, owned by the Node (as the kubelet does, so it goes with it).
pub fn lease_object(node_name: &str, node_uid: Option<&str>, now: Timestamp) -> Lease {
    let owner_references = node_uid.map(|uid| {
        vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: node_name.to_string(),
            uid: uid.to_string(),
            ..OwnerReference::default()
        }]
    });
    Lease {
        metadata: ObjectMeta {
            name: Some(node_name.to_string()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references,
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.to_string()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> NodeSpec {
        NodeSpec {
            name: "node-2".into(),
            zone: "zone-b".into(),
            kubelet_port: 10251,
        }
    }

    #[test]
    fn the_node_carries_hostname_os_arch_and_zone_labels() {
        let node = node_object(&spec());
        assert_eq!(node.metadata.name.as_deref(), Some("node-2"));
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "node-2");
        assert_eq!(labels["kubernetes.io/os"], "linux");
        assert_eq!(labels["kubernetes.io/arch"], "amd64");
        assert_eq!(labels["topology.kubernetes.io/zone"], "zone-b");
        assert!(
            node.status.is_none(),
            "status is a subresource, reported separately"
        );
    }

    #[test]
    fn a_fresh_status_is_ready_with_resources_addresses_and_node_info() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let status = node_status(&spec(), None, now);
        let capacity = status.capacity.clone().unwrap();
        assert_eq!(capacity["cpu"], Quantity("8".into()));
        assert_eq!(capacity["memory"], Quantity("16Gi".into()));
        assert_eq!(capacity["pods"], Quantity("110".into()));
        assert_eq!(capacity["ephemeral-storage"], Quantity("50Gi".into()));
        assert_eq!(status.allocatable, status.capacity);
        let addresses = status.addresses.unwrap();
        assert_eq!(
            addresses[0],
            NodeAddress {
                type_: "InternalIP".into(),
                address: "10.244.0.1".into()
            }
        );
        assert_eq!(
            addresses[1],
            NodeAddress {
                type_: "Hostname".into(),
                address: "node-2".into()
            }
        );
        assert_eq!(
            status
                .daemon_endpoints
                .unwrap()
                .kubelet_endpoint
                .unwrap()
                .port,
            10251
        );
        let info = status.node_info.unwrap();
        assert_eq!(info.kubelet_version, "v1.34.4");
        assert_eq!(info.container_runtime_version, "testbed://0.1");
        assert_eq!(
            (info.operating_system.as_str(), info.architecture.as_str()),
            ("linux", "amd64")
        );

        let conditions = status.conditions.unwrap();
        let find = |type_: &str| {
            conditions
                .iter()
                .find(|condition| condition.type_ == type_)
                .unwrap()
        };
        assert_eq!(find("Ready").status, "True");
        assert_eq!(find("Ready").reason.as_deref(), Some("KubeletReady"));
        for pressure in ["MemoryPressure", "DiskPressure", "PIDPressure"] {
            assert_eq!(find(pressure).status, "False", "{pressure}");
        }
        assert!(
            conditions
                .iter()
                .all(|condition| condition.last_heartbeat_time == Some(Time(now)))
        );
        assert!(
            conditions
                .iter()
                .all(|condition| condition.last_transition_time == Some(Time(now)))
        );
    }

    #[test]
    fn heartbeats_move_the_heartbeat_time_but_keep_unchanged_transition_times() {
        let first = Timestamp::from_second(1_700_000_000).unwrap();
        let later = Timestamp::from_second(1_700_000_010).unwrap();
        let mut previous = node_status(&spec(), None, first);
        // The node lifecycle controller marked the node Unknown meanwhile.
        for condition in previous.conditions.as_mut().unwrap() {
            if condition.type_ == "Ready" {
                condition.status = "Unknown".into();
            }
        }
        let status = node_status(&spec(), Some(&previous), later);
        for condition in status.conditions.unwrap() {
            assert_eq!(condition.last_heartbeat_time, Some(Time(later)));
            let expected_transition = if condition.type_ == "Ready" {
                later
            } else {
                first
            };
            assert_eq!(
                condition.last_transition_time,
                Some(Time(expected_transition)),
                "{}",
                condition.type_
            );
        }
    }

    #[test]
    fn the_lease_is_held_by_the_node_and_owned_by_it() {
        let now = Timestamp::from_second(1_700_000_000).unwrap();
        let lease = lease_object("node-1", Some("uid-1"), now);
        assert_eq!(lease.metadata.namespace.as_deref(), Some("kube-node-lease"));
        assert_eq!(lease.metadata.name.as_deref(), Some("node-1"));
        let owner = &lease.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "node-1", "uid-1")
        );
        let spec = lease.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("node-1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        assert!(
            lease_object("node-1", None, now)
                .metadata
                .owner_references
                .is_none()
        );
    }

    #[test]
    fn stopped_nodes_are_shared_between_clones() {
        let stopped = StoppedNodes::default();
        let other = stopped.clone();
        assert!(!stopped.is_stopped("node-1"));
        other.stop("node-1");
        assert!(stopped.is_stopped("node-1"));
        assert!(!stopped.is_stopped("node-2"));
        stopped.start("node-1");
        assert!(!other.is_stopped("node-1"));
    }

    #[tokio::test]
    async fn starting_a_stopped_node_wakes_the_heartbeat() {
        let stopped = StoppedNodes::default();
        stopped.stop("node-1");
        let mut changes = stopped.subscribe();
        let waiter = tokio::spawn(async move { changes.changed().await });
        stopped.start("node-1");
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn paused_heartbeats_silence_the_node_until_resumed() {
        let stopped = StoppedNodes::default();
        let mut changes = stopped.subscribe();
        stopped.pause_heartbeats("node-2");
        assert!(stopped.is_silent("node-2"));
        assert!(!stopped.is_stopped("node-2"), "its pods keep running");
        assert!(!stopped.is_silent("node-1"));
        stopped.resume_heartbeats("node-2");
        assert!(!stopped.is_silent("node-2"));
        tokio::time::timeout(Duration::from_secs(5), changes.changed())
            .await
            .unwrap()
            .unwrap();
        stopped.stop("node-3");
        assert!(stopped.is_silent("node-3"), "a stopped node is silent too");
    }
}
