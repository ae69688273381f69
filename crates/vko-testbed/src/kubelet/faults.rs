//! The faults a kubelet can inject into its own pods and nodes (see [`crate::control::Fault`]);
//! restarting the API server is the supervisor's.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use super::KubeletHandles;
use super::running::RunningContainer;
use crate::control::Fault;
use crate::net::Network;
use crate::{Error, Result};

/// Injects `fault`; returns once it took effect (the signal was sent, the link is down, …).
pub async fn apply(
    client: &kube::Client,
    network: &Network,
    handles: &KubeletHandles,
    fault: &Fault,
) -> Result<()> {
    match fault {
        Fault::Crash {
            namespace,
            pod,
            container,
        } => {
            let running = find(handles, namespace, pod, container)?;
            signal(Target::Process, running.pid, Signal::SIGKILL)
        }
        Fault::Pause {
            namespace,
            pod,
            container,
        } => {
            let running = find(handles, namespace, pod, container)?;
            // The whole group: what the container started stops with it.
            signal(Target::Group, running.pid, Signal::SIGSTOP)
        }
        Fault::Resume {
            namespace,
            pod,
            container,
        } => {
            let running = find(handles, namespace, pod, container)?;
            signal(Target::Group, running.pid, Signal::SIGCONT)
        }
        Fault::DeletePod { namespace, pod } => {
            Api::<Pod>::namespaced(client.clone(), namespace)
                .delete(pod, &DeleteParams::default())
                .await?;
            Ok(())
        }
        Fault::StopNode { node } => {
            // Stopped first, so no container of the node restarts after the kill.
            handles.stopped.stop(node);
            for running in handles.running.on_node(node) {
                // A paused container must die too: SIGKILL works on stopped processes.
                signal(Target::Group, running.pid, Signal::SIGKILL)?;
            }
            Ok(())
        }
        Fault::StartNode { node } => {
            handles.stopped.start(node);
            Ok(())
        }
        Fault::PauseHeartbeats { node } => {
            handles.stopped.pause_heartbeats(node);
            Ok(())
        }
        Fault::ResumeHeartbeats { node } => {
            handles.stopped.resume_heartbeats(node);
            Ok(())
        }
        Fault::Partition { namespace, pod } => {
            network.partition(&pod_net(handles, namespace, pod)?)
        }
        Fault::Heal { namespace, pod } => network.heal(&pod_net(handles, namespace, pod)?),
        Fault::BlockInbound {
            namespace,
            pod,
            port,
            from,
        } => network.block_inbound(&pod_net(handles, namespace, pod)?, *port, from),
        Fault::UnblockInbound {
            namespace,
            pod,
            port,
            from,
        } => network.unblock_inbound(&pod_net(handles, namespace, pod)?, *port, from),
        Fault::RestartApiserver => Err(Error::Invalid {
            what: "fault".into(),
            detail: "restarting the API server is the supervisor's, not the kubelet's".into(),
        }),
    }
}

fn find(
    handles: &KubeletHandles,
    namespace: &str,
    pod: &str,
    container: &str,
) -> Result<RunningContainer> {
    handles
        .running
        .get(namespace, pod, container)
        .ok_or_else(|| Error::Invalid {
            what: "fault target".into(),
            detail: format!("container {container} of pod {namespace}/{pod} is not running here"),
        })
}

fn pod_net(handles: &KubeletHandles, namespace: &str, pod: &str) -> Result<crate::net::PodNet> {
    handles
        .running
        .of_pod(namespace, pod)
        .into_iter()
        .next()
        .map(|(_, running)| running.net)
        .ok_or_else(|| Error::Invalid {
            what: "fault target".into(),
            detail: format!("pod {namespace}/{pod} has no running container here"),
        })
}

/// Whom a signal goes to.
#[derive(Clone, Copy)]
enum Target {
    /// The container's main process.
    Process,
    /// Its process group (the container's main process leads it).
    Group,
}

fn signal(target: Target, pid: u32, signal: Signal) -> Result<()> {
    let pid = i32::try_from(pid).map_err(|_| Error::Invalid {
        what: "pid".into(),
        detail: pid.to_string(),
    })?;
    let sent = match target {
        Target::Process => kill(Pid::from_raw(pid), signal),
        Target::Group => killpg(Pid::from_raw(pid), signal),
    };
    match sent {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(errno) => Err(Error::Io {
            what: format!("sending {signal} to {pid}"),
            source: errno.into(),
        }),
    }
}
