//! A StatefulSet short of pods (ADR 0020; the rules are `vko_status::recreation`'s): the pass
//! bumps `vko.gtrfc.com/nudge` on the StatefulSet's metadata, which wakes the StatefulSet
//! controller out of its own backoff, and names an admission gate that refuses the pods from the
//! controller's `FailedCreate` Events.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use vko_status::recreation::{self, ControllerEvent};

use crate::error::Error;

/// When each StatefulSet (`namespace/name`) was first seen short of pods by this process; an
/// entry goes as soon as its StatefulSet is whole again.
#[derive(Default)]
pub struct ShortSince(Mutex<HashMap<String, Instant>>);

impl ShortSince {
    /// How long `key` has been short (`None`: not short, and forgotten).
    fn observe(&self, key: &str, short: bool) -> Option<Duration> {
        let Ok(mut map) = self.0.lock() else {
            return None;
        };
        if !short {
            map.remove(key);
            return None;
        }
        Some(
            map.entry(key.to_owned())
                .or_insert_with(Instant::now)
                .elapsed(),
        )
    }
}

/// Fewer pods created than wanted (`status.replicas`, which counts pods that exist, ready or
/// not: a pod that cannot start is the pod reasons' business, not this one's).
fn is_short(statefulset: &StatefulSet) -> bool {
    let wanted = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.replicas)
        .unwrap_or(1);
    let created = statefulset
        .status
        .as_ref()
        .map_or(0, |status| status.replicas);
    created < wanted
}

/// For each of the `Valkey`'s live StatefulSets: track shortness, bump when due, and report an
/// admission refusal of its pods as a problem. Returns whether any is short (the pass then
/// looks again within [`recreation::NUDGE_INTERVAL`]). Failed bumps and Event lists are logged:
/// the next pass tries again.
pub async fn recover_short_statefulsets(
    client: &kube::Client,
    clock: &ShortSince,
    namespace: &str,
    statefulsets: &[&StatefulSet],
    problems: &mut Vec<Error>,
) -> bool {
    let mut any_short = false;
    for statefulset in statefulsets {
        let Some(name) = statefulset.metadata.name.as_deref() else {
            continue;
        };
        let Some(short_for) = clock.observe(&format!("{namespace}/{name}"), is_short(statefulset))
        else {
            continue;
        };
        any_short = true;
        let now = Timestamp::now();
        let last = statefulset
            .metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(recreation::NUDGE_ANNOTATION))
            .map(String::as_str);
        if recreation::nudge_due(Some(short_for), last, now) {
            bump(client, namespace, name, now, problems).await;
        }
        if short_for >= recreation::NUDGE_GRACE
            && let Some(message) = refusal(client, namespace, name, short_for, now).await
        {
            problems.push(Error::PodCreationDenied {
                statefulset: name.to_owned(),
                message,
            });
        }
    }
    any_short
}

async fn bump(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    now: Timestamp,
    problems: &mut Vec<Error>,
) {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    // A merge patch of one annotation on the object's metadata: not the pod template (that would
    // roll the pods) and not a server-side apply (an apply of this field alone would drop every
    // field the operator's apply owns).
    let patch = serde_json::json!({
        "metadata": {"annotations": {recreation::NUDGE_ANNOTATION: recreation::nudge_value(now)}}
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::info!(%namespace, statefulset = name, "short of pods: nudged the StatefulSet controller")
        }
        Err(error) => {
            let error = Error::from_write("StatefulSet", name, &error);
            tracing::warn!(%namespace, statefulset = name, %error, "could not nudge the StatefulSet");
            if matches!(error, Error::AdmissionWebhookDenied { .. }) {
                problems.push(error);
            }
        }
    }
}

/// The newest admission refusal of this episode among the StatefulSet controller's `FailedCreate`
/// Events about `name`.
async fn refusal(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    short_for: Duration,
    now: Timestamp,
) -> Option<String> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let params = ListParams::default().fields(&format!(
        "involvedObject.kind=StatefulSet,involvedObject.name={name},reason=FailedCreate"
    ));
    let events = match api.list(&params).await {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(%namespace, statefulset = name, %error, "could not list the StatefulSet's Events");
            return None;
        }
    };
    let seen: Vec<ControllerEvent<'_>> = events
        .iter()
        .filter_map(|event| {
            let last_seen = event
                .series
                .as_ref()
                .and_then(|series| series.last_observed_time.as_ref().map(|t| t.0))
                .or(event.last_timestamp.as_ref().map(|t| t.0))
                .or(event.event_time.as_ref().map(|t| t.0))?;
            Some(ControllerEvent {
                reason: event.reason.as_deref()?,
                message: event.message.as_deref()?,
                last_seen,
            })
        })
        .collect();
    recreation::pod_creation_denial(&seen, short_for, now).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortness_counts_created_pods_and_is_forgotten_once_whole() {
        let statefulset = |wanted: i32, created: i32| -> StatefulSet {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "a"},
                "spec": {"replicas": wanted, "selector": {}, "template": {}, "serviceName": "a"},
                "status": {"replicas": created}
            }))
            .unwrap()
        };
        assert!(is_short(&statefulset(3, 2)));
        assert!(!is_short(&statefulset(3, 3)));
        let clock = ShortSince::default();
        assert_eq!(clock.observe("ns/a", false), None);
        let first = clock.observe("ns/a", true).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(clock.observe("ns/a", true).unwrap() > first);
        assert_eq!(clock.observe("ns/a", false), None);
        // Short again later: a new episode, counted from now.
        assert!(clock.observe("ns/a", true).unwrap() < Duration::from_millis(20));
    }
}
