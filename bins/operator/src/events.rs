//! Kubernetes Events about Valkeys (`events.k8s.io/v1`).
//!
//! A repeat of the same Event within [`REPEAT_WINDOW`] is folded into the first one's `series` (one
//! PATCH) instead of a new object, as kube-runtime's `Recorder` does. Unlike the Recorder, the note
//! is part of what "the same" means: the Recorder keys on type, reason and action only, so a second
//! `SecretMissing` naming another Secret would only bump the count of an Event that still names the
//! first one, and `kubectl describe` would show the wrong Secret.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;

/// How long after its last occurrence an Event is still repeated rather than created anew.
pub const REPEAT_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// The API server caps a note at 1 KiB.
const NOTE_LIMIT: usize = 1000;

/// What makes two Events the same occurrence.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct EventKey {
    namespace: String,
    name: String,
    uid: String,
    warning: bool,
    reason: String,
    note: String,
}

/// An Event object this process wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    object_name: String,
    count: i32,
    last: Timestamp,
}

/// What to send for one Event.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Publication {
    Create { object_name: String },
    Repeat { object_name: String, count: i32 },
}

/// Remembers the Events written in the last [`REPEAT_WINDOW`] and decides create or repeat.
#[derive(Debug, Default)]
struct Recent {
    written: HashMap<EventKey, Written>,
}

impl Recent {
    fn plan(&mut self, key: &EventKey, now: Timestamp) -> Publication {
        self.written
            .retain(|_, written| written.last + REPEAT_WINDOW > now);
        match self.written.get(key) {
            Some(written) => Publication::Repeat {
                object_name: written.object_name.clone(),
                count: written.count.saturating_add(1),
            },
            None => Publication::Create {
                // The name the Recorder uses too: the object's name and the time in nanoseconds.
                object_name: format!("{}.{:x}", key.name, now.as_nanosecond()),
            },
        }
    }

    fn record(&mut self, key: EventKey, object_name: String, count: i32, now: Timestamp) {
        self.written.insert(
            key,
            Written {
                object_name,
                count,
                last: now,
            },
        );
    }
}

/// Publishes Events as `controller` (the `reportingController`) from `instance`.
pub struct EventPublisher {
    client: kube::Client,
    controller: String,
    instance: String,
    recent: Mutex<Recent>,
}

impl EventPublisher {
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Self {
        Self {
            client,
            controller: controller.to_owned(),
            instance: instance.unwrap_or_else(|| controller.to_owned()),
            recent: Mutex::new(Recent::default()),
        }
    }

    /// Writes the Event, or counts a repeat of an identical one.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
        action: &str,
    ) -> Result<(), kube::Error> {
        let namespace = regarding.namespace.clone().unwrap_or_default();
        let key = EventKey {
            namespace: namespace.clone(),
            name: regarding.name.clone().unwrap_or_default(),
            uid: regarding.uid.clone().unwrap_or_default(),
            warning: matches!(type_, EventType::Warning),
            reason: reason.to_owned(),
            note: note.chars().take(NOTE_LIMIT).collect(),
        };
        let now = Timestamp::now();
        let plan = self.lock_recent().plan(&key, now);
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        let (object_name, count) = match plan {
            Publication::Repeat { object_name, count } => {
                let series = serde_json::json!({
                    "series": {"count": count, "lastObservedTime": MicroTime(now)},
                });
                match events
                    .patch(
                        &object_name,
                        &PatchParams::default(),
                        &Patch::Merge(&series),
                    )
                    .await
                {
                    Ok(_) => (object_name, count),
                    // Expired (the API server keeps Events for an hour) or deleted: start anew.
                    Err(kube::Error::Api(status)) if status.code == 404 => {
                        let object_name = format!("{}.{:x}", key.name, now.as_nanosecond());
                        let event = self.new_event(regarding, &key, action, &object_name, now);
                        events.create(&PostParams::default(), &event).await?;
                        (object_name, 1)
                    }
                    Err(error) => return Err(error),
                }
            }
            Publication::Create { object_name } => {
                let event = self.new_event(regarding, &key, action, &object_name, now);
                events.create(&PostParams::default(), &event).await?;
                (object_name, 1)
            }
        };
        self.lock_recent().record(key, object_name, count, now);
        Ok(())
    }

    fn lock_recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        // A panic while holding the lock cannot leave the map half-written: take it as it is.
        self.recent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn new_event(
        &self,
        regarding: &ObjectReference,
        key: &EventKey,
        action: &str,
        object_name: &str,
        now: Timestamp,
    ) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(object_name.to_owned()),
                namespace: Some(key.namespace.clone()),
                ..ObjectMeta::default()
            },
            action: Some(action.to_owned()),
            reason: Some(key.reason.clone()),
            note: Some(key.note.clone()),
            type_: Some(if key.warning { "Warning" } else { "Normal" }.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Event::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(reason: &str, note: &str) -> EventKey {
        EventKey {
            namespace: "ns".into(),
            name: "a".into(),
            uid: "uid-a".into(),
            warning: true,
            reason: reason.into(),
            note: note.into(),
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    #[test]
    fn an_identical_event_within_the_window_is_a_repeat_of_the_first() {
        let mut recent = Recent::default();
        let missing = key("SecretMissing", "Secret a-password does not exist");
        let Publication::Create { object_name } = recent.plan(&missing, at(0)) else {
            panic!("the first occurrence creates");
        };
        recent.record(missing.clone(), object_name.clone(), 1, at(0));
        assert_eq!(
            recent.plan(&missing, at(60)),
            Publication::Repeat {
                object_name: object_name.clone(),
                count: 2
            }
        );
        recent.record(missing.clone(), object_name.clone(), 2, at(60));
        // The window runs from the last occurrence.
        assert_eq!(
            recent.plan(&missing, at(60 + 359)),
            Publication::Repeat {
                object_name,
                count: 3
            }
        );
    }

    #[test]
    fn another_note_or_reason_or_object_is_a_new_event() {
        let mut recent = Recent::default();
        let first = key("SecretMissing", "Secret a-password does not exist");
        recent.record(first.clone(), "a.1".into(), 1, at(0));
        let other_note = key("SecretMissing", "Secret a-tls does not exist");
        let other_reason = key("ForeignObject", "Secret a-password does not exist");
        let mut other_object = first.clone();
        other_object.uid = "uid-of-a-recreated-a".into();
        let mut normal = first.clone();
        normal.warning = false;
        for different in [other_note, other_reason, other_object, normal] {
            assert!(
                matches!(recent.plan(&different, at(1)), Publication::Create { .. }),
                "{different:?}"
            );
        }
    }

    #[test]
    fn after_the_window_the_same_event_is_created_anew() {
        let mut recent = Recent::default();
        let missing = key("SecretMissing", "Secret a-password does not exist");
        recent.record(missing.clone(), "a.1".into(), 1, at(0));
        assert!(matches!(
            recent.plan(&missing, at(360)),
            Publication::Create { .. }
        ));
        assert!(recent.written.is_empty(), "expired entries are dropped");
    }

    /// Against a mock API server: a repeat PATCHes the series of the Event it repeats, a changed
    /// note POSTs a new Event, and a repeat of an Event the server no longer has creates it anew.
    #[tokio::test]
    async fn repeats_patch_the_series_and_new_notes_create_events() {
        use http::{Request, Response};
        use kube::client::Body;

        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut served = 0;
            while let Some((request, respond)) = handle.next_request().await {
                served += 1;
                let method = request.method().to_string();
                let path = request.uri().path().to_owned();
                let bytes = request.into_body().collect_bytes().await.unwrap();
                let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
                // The 4th request (the second repeat) finds the Event gone.
                let response = if served == 4 {
                    Response::builder().status(404).body(Body::from(
                        serde_json::to_vec(&serde_json::json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found"
                        }))
                        .unwrap(),
                    ))
                } else {
                    let mut echoed = body.clone();
                    echoed["metadata"]["name"] = path.rsplit('/').next().unwrap().into();
                    Response::builder().body(Body::from(serde_json::to_vec(&echoed).unwrap()))
                };
                seen.push((method, path, body));
                respond.send_response(response.unwrap());
            }
            seen
        });

        let publisher = EventPublisher::new(client, "vko-operator", None);
        let regarding = ObjectReference {
            api_version: Some("vko.gtrfc.com/v1".into()),
            kind: Some("Valkey".into()),
            name: Some("a".into()),
            namespace: Some("ns".into()),
            uid: Some("uid-a".into()),
            ..ObjectReference::default()
        };
        let missing = "Secret a-password does not exist";
        for note in [
            missing,
            missing,
            "Secret a-tls does not exist",
            missing,
            missing,
        ] {
            publisher
                .publish(
                    &regarding,
                    EventType::Warning,
                    "SecretMissing",
                    note,
                    "Reconcile",
                )
                .await
                .unwrap();
        }
        drop(publisher);
        let seen = server.await.unwrap();
        let calls: Vec<(&str, i64, &str)> = seen
            .iter()
            .map(|(method, _, body)| {
                (
                    method.as_str(),
                    body["series"]["count"].as_i64().unwrap_or(1),
                    body["note"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                ("POST", 1, missing),
                ("PATCH", 2, ""),
                ("POST", 1, "Secret a-tls does not exist"),
                ("PATCH", 3, ""),
                // The 404 of that PATCH: created anew.
                ("POST", 1, missing),
                ("PATCH", 2, ""),
            ]
        );
        let first_name = seen[0].2["metadata"]["name"].as_str().unwrap();
        assert!(
            seen[1].1.ends_with(&format!("/events/{first_name}")),
            "{}",
            seen[1].1
        );
        assert!(
            seen[0]
                .1
                .ends_with("/apis/events.k8s.io/v1/namespaces/ns/events")
        );
        assert_eq!(seen[0].2["regarding"]["uid"], "uid-a");
        assert_eq!(seen[0].2["type"], "Warning");
        assert_eq!(seen[0].2["reportingController"], "vko-operator");
        assert_eq!(seen[0].2["action"], "Reconcile");
    }
}
