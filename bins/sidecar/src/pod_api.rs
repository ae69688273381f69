//! The sidecar's two Kubernetes calls, behind a trait so the logic is tested without an API
//! server. Its Role allows exactly these: `get` and `patch` on this cluster's data pods (the
//! `instanceRole` label, the `vko.gtrfc.com/fenced` annotation).

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};

use vko_api::consts::kube_api;
use vko_authority::InstanceRole;

use crate::error::{Result, SidecarError};

pub trait PodApi: Send + Sync {
    /// Merge-patch `vko.gtrfc.com/instanceRole` on `pod`, with `vko.gtrfc.com/instanceName: <pod>`
    /// (the reference's pod labels; a template cannot carry the pod's own name).
    fn set_role_label<'a>(&'a self, pod: &'a str, role: InstanceRole) -> BoxFuture<'a, Result<()>>;
    /// Is `pod` being deleted (deletionTimestamp set)?
    fn is_terminating<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<bool>>;
    /// The `vko.gtrfc.com/instanceRole` label `pod` carries now.
    fn role_label<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<Option<String>>>;
    /// Merge-patch `vko.gtrfc.com/fenced` on `pod` (`None` removes it).
    fn set_fenced_annotation<'a>(
        &'a self,
        pod: &'a str,
        value: Option<&'a str>,
    ) -> BoxFuture<'a, Result<()>>;
}

/// The real API, in-cluster credentials (the projected token).
pub struct KubePodApi {
    pods: Api<Pod>,
}

impl KubePodApi {
    pub async fn in_cluster(namespace: &str) -> Result<KubePodApi> {
        let mut config = kube::Config::infer()
            .await
            .map_err(|e| SidecarError::Kube(format!("client configuration: {e}")))?;
        // Every call has a deadline: a hung API server must not stall the sidecar's loop.
        config.connect_timeout = Some(kube_api::CONNECT_TIMEOUT);
        config.read_timeout = Some(kube_api::RESPONSE_TIMEOUT);
        config.reset_reader_on_write = true;
        let client = kube::Client::try_from(config)
            .map_err(|e| SidecarError::Kube(format!("client: {e}")))?;
        Ok(KubePodApi {
            pods: Api::namespaced(client, namespace),
        })
    }
}

impl KubePodApi {
    async fn get(&self, pod: &str) -> Result<Pod> {
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

    fn is_terminating<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move { Ok(self.get(pod).await?.metadata.deletion_timestamp.is_some()) })
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

    fn role_label<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async move {
            Ok(self
                .get(pod)
                .await?
                .metadata
                .labels
                .and_then(|labels| labels.get(vko_api::consts::labels::INSTANCE_ROLE).cloned()))
        })
    }
}
