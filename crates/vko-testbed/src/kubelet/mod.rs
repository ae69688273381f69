//! The process kubelet: fake Nodes that run the Pods the real scheduler binds to them, as processes.
//!
//! [`run`] registers the Nodes and keeps their Leases fresh ([`nodes`]), runs the PV provisioner
//! ([`provisioner`]) and the per-pod hosts files ([`dns`]), and runs every Pod bound to one of its
//! Nodes ([`pods`]: network, volumes, init containers, containers, probes, restarts, status, deletion).

pub mod api;
pub mod dns;
pub mod faults;
pub mod nodes;
pub mod provisioner;
pub mod running;
pub mod volumes;

pub mod env;
pub mod events;
pub mod images;
pub mod pods;
pub mod probes;
pub mod status;

use std::net::SocketAddrV4;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// One fake Node.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub name: String,
    /// Its `topology.kubernetes.io/zone`.
    pub zone: String,
    /// Its kubelet API port on the bridge address (every node shares 10.244.0.1, so each has its own
    /// port), reported in the Node's `daemonEndpoints`.
    pub kubelet_port: u16,
}

/// node-1/zone-a, node-2/zone-b, node-3/zone-c (like a kind cluster with three workers).
pub fn default_nodes() -> Vec<NodeSpec> {
    [
        ("node-1", "zone-a"),
        ("node-2", "zone-b"),
        ("node-3", "zone-c"),
    ]
    .into_iter()
    .zip(nodes::KUBELET_PORT..)
    .map(|((name, zone), kubelet_port)| NodeSpec {
        name: name.into(),
        zone: zone.into(),
        kubelet_port,
    })
    .collect()
}

/// How the kubelet runs.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    pub nodes: Vec<NodeSpec>,
    /// Pods live under `state_dir/pods/<uid>/`, PV data under `state_dir/pv/`.
    pub state_dir: PathBuf,
    /// The vko-testbed binary (its `shim` subcommand runs each container).
    pub shim_exe: PathBuf,
    /// `cluster.local`.
    pub cluster_domain: String,
    /// The API server as pods reach it: `KUBERNETES_SERVICE_HOST/PORT` in every container.
    pub api_server: SocketAddrV4,
    /// Our own images, run from their unpacked root filesystems.
    pub extra_images: Vec<images::UnpackedImage>,
    /// How the node heartbeat reaches the API server: it builds its own client from this, on its own
    /// thread, so pod work cannot queue in front of a Lease renewal.
    pub heartbeat_api: kube::Config,
}

/// What the supervisor keeps to reach into a running kubelet (fault injection): which containers run
/// where, and which nodes are stopped. Clones share them.
#[derive(Clone, Debug, Default)]
pub struct KubeletHandles {
    pub running: running::RunningContainers,
    pub stopped: nodes::StoppedNodes,
}

/// Registers the nodes and keeps them alive, runs the provisioner and the hosts files, and runs pods
/// until `shutdown` is cancelled; then stops every pod quickly (SIGTERM, SIGKILL after ~3 s), detaches
/// every network namespace, removes the pod directories (never PV data) and returns.
pub async fn run(
    client: kube::Client,
    config: KubeletConfig,
    network: Arc<crate::net::Network>,
    handles: KubeletHandles,
    shutdown: CancellationToken,
) -> crate::Result<()> {
    nodes::register(&client, &config.nodes).await?;
    // The helpers stop with the kubelet, also when the pods loop ends on its own.
    let helpers = shutdown.child_token();
    let KubeletHandles { running, stopped } = handles;
    let heartbeat = nodes::spawn_heartbeat(
        config.heartbeat_api.clone(),
        config.nodes.clone(),
        stopped.clone(),
        helpers.clone(),
    )?;
    let kubelet_api = {
        let serve = api::serve(
            client.clone(),
            config.state_dir.clone(),
            config.nodes.clone(),
            running.clone(),
            stopped.clone(),
            helpers.clone(),
        );
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                tracing::error!(%error, "the kubelet API stopped");
            }
        })
    };
    let provisioner = {
        let client = client.clone();
        let pv_root = config.state_dir.join("pv");
        let shutdown = helpers.clone();
        tokio::spawn(async move {
            if let Err(error) = provisioner::run(client, pv_root, shutdown).await {
                tracing::error!(%error, "the PV provisioner stopped");
            }
        })
    };
    let dns = dns::Dns::start(
        client.clone(),
        config.state_dir.clone(),
        config.cluster_domain.clone(),
        helpers.clone(),
    );
    let kubelet = pods::Kubelet {
        client,
        config,
        network,
        dns,
        running,
        stopped,
    };
    let result = pods::run(kubelet, shutdown.clone()).await;
    helpers.cancel();
    // The thread ends right after `helpers` is cancelled; join it off the runtime's threads.
    let _ = tokio::task::spawn_blocking(move || heartbeat.join()).await;
    let _ = kubelet_api.await;
    let _ = provisioner.await;
    result
}
