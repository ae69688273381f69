//! Pod events as the kubelet reports them (`kubectl describe pod` shows them): Created, Started,
//! Killing, Unhealthy, BackOff, Failed. Best effort: an event that cannot be written is only logged.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};

/// `Normal` or `Warning`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Writes events about one pod.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    pod: ObjectReference,
    node: String,
}

impl Recorder {
    pub fn new(client: kube::Client, pod: &Pod) -> Recorder {
        Recorder {
            client,
            pod: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
                ..ObjectReference::default()
            },
            node: pod
                .spec
                .as_ref()
                .and_then(|spec| spec.node_name.clone())
                .unwrap_or_default(),
        }
    }

    /// Records an event about the pod or one of its containers (`field_path` like
    /// `spec.containers{valkey}`), in the background.
    pub fn record(
        &self,
        type_: EventType,
        field_path: Option<String>,
        reason: &str,
        message: &str,
    ) {
        let event = event_object(&self.pod, &self.node, type_, field_path, reason, message);
        let api: Api<Event> = Api::namespaced(
            self.client.clone(),
            self.pod.namespace.as_deref().unwrap_or("default"),
        );
        tokio::spawn(async move {
            if let Err(error) = api.create(&PostParams::default(), &event).await {
                tracing::debug!(%error, "writing a pod event failed");
            }
        });
    }
}

/// The `spec.containers{name}` / `spec.initContainers{name}` field path of a container.
pub fn container_field_path(init: bool, name: &str) -> String {
    if init {
        format!("spec.initContainers{{{name}}}")
    } else {
        format!("spec.containers{{{name}}}")
    }
}

/// A core/v1 Event as the kubelet writes it.
pub fn event_object(
    pod: &ObjectReference,
    node: &str,
    type_: EventType,
    field_path: Option<String>,
    reason: &str,
    message: &str,
) -> Event {
    let now = super::status::now();
    Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", pod.name.as_deref().unwrap_or("pod"))),
            namespace: pod.namespace.clone(),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            field_path,
            ..pod.clone()
        },
        reason: Some(reason.to_string()),
        // The API refuses event messages over 1 KiB.
        message: Some(message.chars().take(1000).collect()),
        type_: Some(match type_ {
            EventType::Normal => "Normal".into(),
            EventType::Warning => "Warning".into(),
        }),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some(node.to_string()),
        }),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now.clone()),
        event_time: Some(MicroTime(now.0)),
        count: Some(1),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some(node.to_string()),
        action: Some(reason.to_string()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_name_the_pod_container_node_and_reason() {
        let pod = ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web-0".into()),
            namespace: Some("ns".into()),
            uid: Some("u".into()),
            ..ObjectReference::default()
        };
        let long = "x".repeat(5000);
        let event = event_object(
            &pod,
            "node-2",
            EventType::Warning,
            Some(container_field_path(false, "valkey")),
            "Unhealthy",
            &long,
        );
        assert_eq!(event.metadata.generate_name.as_deref(), Some("web-0."));
        assert_eq!(
            event.involved_object.field_path.as_deref(),
            Some("spec.containers{valkey}")
        );
        assert_eq!(event.involved_object.uid.as_deref(), Some("u"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.source.and_then(|s| s.host).as_deref(), Some("node-2"));
        assert_eq!(event.message.map(|m| m.len()), Some(1000));
        assert_eq!(
            container_field_path(true, "init"),
            "spec.initContainers{init}"
        );
    }
}
