//! The sidecar's Kubernetes calls on pods, behind a trait so the logic is tested without an API
//! server. Its Role allows exactly these, on this cluster's data pods only: `get` and `patch`
//! (the `instanceRole` label, the `vko.gtrfc.com/fenced` and `vko.gtrfc.com/tls-certificate`
//! annotations), and `list`/`watch` of its
//! own pod by name (`metadata.name=<pod>`, which RBAC checks against the Role's `resourceNames`).
//!
//! The own pod's label is read back from that watch, not by a GET every 10 s: at steady state a
//! sidecar sends no request (one watch, re-opened every few minutes), where the GETs cost one
//! request per pod per 10 s (100 req/s at 1,000 pods).
//!
//! Every call reads and returns metadata only (`PartialObjectMeta`): the sidecar needs labels,
//! annotations and the deletion timestamp, and a whole Pod's decoder is the largest part of a
//! binary that every data pod runs (`cargo xtask bench fleet`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};

use vko_api::consts::kube_api;
use vko_authority::InstanceRole;

use crate::error::{Result, SidecarError};

/// A pod as the API answers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPresence {
    /// It exists and is not being deleted; `ready`: its `Ready` condition is `True`.
    Running { ready: bool },
    /// It has a deletion timestamp.
    Terminating,
    /// No pod of that name (deleted, its StatefulSet's replacement not created yet or never).
    Gone,
    /// The API refused this sidecar's own credentials (401/403): its Role or ServiceAccount is
    /// gone, which happens when the Valkey or its namespace is being deleted.
    Refused,
}

pub trait PodApi: Send + Sync {
    /// Merge-patch `vko.gtrfc.com/instanceRole` on `pod`, with `vko.gtrfc.com/instanceName: <pod>`
    /// (the reference's pod labels; a template cannot carry the pod's own name).
    fn set_role_label<'a>(&'a self, pod: &'a str, role: InstanceRole) -> BoxFuture<'a, Result<()>>;
    /// Whether `pod` exists, and whether it is being deleted (deletionTimestamp set).
    fn presence<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<PodPresence>>;
    /// The `vko.gtrfc.com/instanceRole` label `pod` carries now.
    fn role_label<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<Option<String>>>;
    /// Merge-patch `vko.gtrfc.com/fenced` on `pod` (`None` removes it).
    fn set_fenced_annotation<'a>(
        &'a self,
        pod: &'a str,
        value: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;
    /// Merge-patch `vko.gtrfc.com/tls-certificate: <fingerprint>` on `pod` (ADR 0038).
    fn set_tls_certificate_annotation<'a>(
        &'a self,
        pod: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<()>>;
}

/// The watch's server-side timeout: the server ends the watch after this, the watcher re-opens
/// it (from its last resourceVersion: no list).
const OWN_POD_WATCH_TIMEOUT_SECS: u32 = 290;
/// The watch client's read deadline: past the server's watch timeout, so an idle watch is never
/// cut by it, yet a watch whose connection silently died is re-opened within minutes.
const OWN_POD_WATCH_READ_TIMEOUT: Duration = Duration::from_secs(300);

/// The real API, in-cluster credentials (the projected token).
pub struct KubePodApi {
    pods: Api<PartialObjectMeta<Pod>>,
    /// For the one read of a whole pod ([`PodApi::presence`]).
    client: kube::Client,
    namespace: String,
    own_pod: String,
    /// The own pod's `instanceRole` label as the watch last saw it: `None` while not known (no
    /// event yet, or the watch failed since), when reads fall back to a GET.
    own_label: Arc<Mutex<Option<Option<String>>>>,
}

/// The pod's own ServiceAccount credentials (`KUBERNETES_SERVICE_HOST`, the mounted token and CA),
/// never a kubeconfig: a sidecar runs only in its pod. Connects within the shared deadline, and
/// asks once per call: kube's default retry layer repeats a 429/503/504 up to 15 times (minutes in
/// all), so a label or Lease write could land long after the sidecar decided it, and a deadline
/// would hold per attempt only. The sidecar's loops retry on their own schedule.
pub(crate) fn in_cluster_config() -> Result<kube::Config> {
    let mut config = kube::Config::incluster()
        .map_err(|e| SidecarError::Kube(format!("in-cluster client configuration: {e}")))?;
    config.connect_timeout = Some(kube_api::CONNECT_TIMEOUT);
    config.default_retry = false;
    Ok(config)
}

impl KubePodApi {
    /// The API client, and the watch of `own_pod` (a task that lives as long as the process).
    pub async fn in_cluster(namespace: &str, own_pod: &str) -> Result<KubePodApi> {
        let mut config = in_cluster_config()?;
        let mut watch_config = config.clone();
        watch_config.read_timeout = Some(OWN_POD_WATCH_READ_TIMEOUT);
        let watch_client = kube::Client::try_from(watch_config)
            .map_err(|e| SidecarError::Kube(format!("watch client: {e}")))?;
        // Every other call has a deadline: a hung API server must not stall the sidecar's loop.
        config.read_timeout = Some(kube_api::RESPONSE_TIMEOUT);
        config.reset_reader_on_write = true;
        let client = kube::Client::try_from(config)
            .map_err(|e| SidecarError::Kube(format!("client: {e}")))?;
        let own_label = Arc::new(Mutex::new(None));
        tokio::spawn(watch_own_pod(
            Api::namespaced(watch_client, namespace),
            own_pod.to_owned(),
            own_label.clone(),
        ));
        Ok(KubePodApi {
            pods: Api::namespaced(client.clone(), namespace),
            client,
            namespace: namespace.to_owned(),
            own_pod: own_pod.to_owned(),
            own_label,
        })
    }

    /// The own pod's label from the watch, when the watch knows it.
    fn watched_label(&self, pod: &str) -> Option<Option<String>> {
        if pod != self.own_pod {
            return None;
        }
        self.own_label.lock().ok().and_then(|label| label.clone())
    }
}

fn role_label_of(pod: &PartialObjectMeta<Pod>) -> Option<String> {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(vko_api::consts::labels::INSTANCE_ROLE).cloned())
}

/// Keeps `own_label` current from a watch of `pod` alone; forgets it while the watch fails (the
/// watcher retries with backoff).
async fn watch_own_pod(
    pods: Api<PartialObjectMeta<Pod>>,
    pod: String,
    own_label: Arc<Mutex<Option<Option<String>>>>,
) {
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={pod}"))
        .timeout(OWN_POD_WATCH_TIMEOUT_SECS);
    let mut events = watcher(pods, config).default_backoff().boxed();
    // Said once per outage, not at every retry.
    let mut failing = false;
    while let Some(event) = events.next().await {
        let seen = match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                Some(role_label_of(&object))
            }
            Ok(watcher::Event::Delete(_)) => Some(None),
            Ok(watcher::Event::Init | watcher::Event::InitDone) => continue,
            Err(e) => {
                if !failing {
                    tracing::warn!(
                        error = %e,
                        "the watch of the own pod failed; its label is read by GET until it works"
                    );
                }
                failing = true;
                None
            }
        };
        if seen.is_some() && failing {
            tracing::info!("the watch of the own pod works again");
            failing = false;
        }
        if let Ok(mut label) = own_label.lock() {
            *label = seen;
        }
    }
}

/// A pod's presence from its JSON: a deletion timestamp, else its `Ready` condition.
fn presence_of(pod: &serde_json::Value) -> PodPresence {
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        return PodPresence::Terminating;
    }
    let ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    PodPresence::Running { ready }
}

impl KubePodApi {
    async fn get(&self, pod: &str) -> Result<PartialObjectMeta<Pod>> {
        self.pods
            .get(pod)
            .await
            .map_err(|e| SidecarError::Kube(format!("get pod {pod}: {e}")))
    }
}

impl PodApi for KubePodApi {
    fn set_role_label<'a>(&'a self, pod: &'a str, role: InstanceRole) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let patch = serde_json::json!({
                "metadata": { "labels": {
                    vko_api::consts::labels::INSTANCE_ROLE: role.as_str(),
                    vko_api::consts::labels::INSTANCE_NAME: pod,
                } }
            });
            self.pods
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| SidecarError::Kube(format!("patch pod {pod}: {e}")))
        })
    }

    fn presence<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<PodPresence>> {
        Box::pin(async move {
            // The Ready condition is in the status, which a metadata read leaves out; it is
            // read as JSON, not through k8s-openapi's Pod decoder (see the module's note).
            let failed =
                |e: &dyn std::fmt::Display| SidecarError::Kube(format!("get pod {pod}: {e}"));
            let request =
                kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.namespace))
                    .get(pod, &kube::api::GetParams::default())
                    .map_err(|e| failed(&e))?;
            match self.client.request::<serde_json::Value>(request).await {
                Ok(found) => Ok(presence_of(&found)),
                Err(kube::Error::Api(status)) if status.is_not_found() => Ok(PodPresence::Gone),
                Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
                    Ok(PodPresence::Refused)
                }
                Err(e) => Err(failed(&e)),
            }
        })
    }

    fn set_fenced_annotation<'a>(
        &'a self,
        pod: &'a str,
        value: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let patch = serde_json::json!({
                "metadata": { "annotations": { vko_api::consts::annotations::FENCED: value } }
            });
            self.pods
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| SidecarError::Kube(format!("patch pod {pod}: {e}")))
        })
    }

    fn set_tls_certificate_annotation<'a>(
        &'a self,
        pod: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let patch = serde_json::json!({
                "metadata": {
                    "annotations": { vko_api::consts::annotations::TLS_CERTIFICATE: fingerprint }
                }
            });
            self.pods
                .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| SidecarError::Kube(format!("patch pod {pod}: {e}")))
        })
    }

    fn role_label<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            match self.watched_label(pod) {
                Some(label) => Ok(label),
                None => Ok(role_label_of(&self.get(pod).await?)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use serde_json::json;

    #[test]
    fn presence_reads_the_deletion_timestamp_and_the_ready_condition() {
        let pod = |meta: serde_json::Value, conditions: serde_json::Value| json!({ "metadata": meta, "status": { "conditions": conditions } });
        let ready = json!([{ "type": "PodScheduled", "status": "True" },
                           { "type": "Ready", "status": "True" }]);
        let not_ready = json!([{ "type": "Ready", "status": "False" }]);
        assert_eq!(
            presence_of(&pod(json!({ "name": "vk-1" }), ready.clone())),
            PodPresence::Running { ready: true }
        );
        assert_eq!(
            presence_of(&pod(json!({ "name": "vk-1" }), not_ready)),
            PodPresence::Running { ready: false }
        );
        // A pod without a status yet (just created) is not ready.
        assert_eq!(
            presence_of(&json!({ "metadata": { "name": "vk-1" } })),
            PodPresence::Running { ready: false }
        );
        assert_eq!(
            presence_of(&pod(
                json!({ "name": "vk-1", "deletionTimestamp": "2026-12-06T23:00:00Z" }),
                ready
            )),
            PodPresence::Terminating
        );
    }
}
