//! Which containers run right now, and where: what the kubelet API (`exec`) and the fault injection
//! (crash, pause, partition, stop a node) look up by namespace/pod/container. The pod lifecycle
//! registers a container once it has started and removes it when it ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::net::PodNet;

/// One running container.
#[derive(Clone, Debug)]
pub struct RunningContainer {
    /// Pid of the container's main process (also its process group).
    pub pid: u32,
    /// The container's environment (what `kubectl exec` runs with).
    pub env: Vec<(String, String)>,
    pub node: String,
    pub pod_uid: String,
    pub net: PodNet,
}

/// namespace, pod name, container name.
type Key = (String, String, String);

/// The shared registry; clones share it.
#[derive(Clone, Debug, Default)]
pub struct RunningContainers(Arc<Mutex<HashMap<Key, RunningContainer>>>);

impl RunningContainers {
    pub fn insert(&self, namespace: &str, pod: &str, container: &str, running: RunningContainer) {
        self.map()
            .insert((namespace.into(), pod.into(), container.into()), running);
    }

    /// Removes the entry only while it still names `pid` (a newer attempt may have replaced it).
    pub fn remove(&self, namespace: &str, pod: &str, container: &str, pid: u32) {
        let key = (
            namespace.to_string(),
            pod.to_string(),
            container.to_string(),
        );
        let mut map = self.map();
        if map.get(&key).is_some_and(|running| running.pid == pid) {
            map.remove(&key);
        }
    }

    pub fn get(&self, namespace: &str, pod: &str, container: &str) -> Option<RunningContainer> {
        self.map()
            .get(&(
                namespace.to_string(),
                pod.to_string(),
                container.to_string(),
            ))
            .cloned()
    }

    /// Every running container of one pod: (container name, entry).
    pub fn of_pod(&self, namespace: &str, pod: &str) -> Vec<(String, RunningContainer)> {
        self.map()
            .iter()
            .filter(|((ns, name, _), _)| ns == namespace && name == pod)
            .map(|((_, _, container), running)| (container.clone(), running.clone()))
            .collect()
    }

    /// Every running container on one node.
    pub fn on_node(&self, node: &str) -> Vec<RunningContainer> {
        self.map()
            .values()
            .filter(|running| running.node == node)
            .cloned()
            .collect()
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Key, RunningContainer>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
