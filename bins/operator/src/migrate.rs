//! `vko-operator migrate`: stores the defaults the installed CRD declares in every `Valkey`.
//!
//! The API server fills a CRD's structural defaults into an object whenever it decodes one — on
//! every read as well as on every write. An object written before its CRD gained a default therefore
//! *reads* with the default but is *stored* without it, and keeps relying on read-time defaulting
//! until something writes it again. `migrate` is that write, for every resource, before an upgrade
//! (the chart's pre-upgrade hook): a JSON merge patch of `{}` per object. The API server decodes the
//! stored object (defaults filled in), applies the empty patch and writes the result only when its
//! encoding differs from the stored bytes — so a resource that already holds every default is not
//! written at all (same resourceVersion: idempotent), and one that lacked some gets them stored
//! (new resourceVersion). Nothing else changes: no spec value, no label, no field owner.
//!
//! Objects are listed untyped so one that no longer matches the Rust types is still migrated; a
//! failure on one object is reported and the rest continue; the exit status is non-zero when any
//! failed. One line per resource goes to stdout.

use anyhow::Context as _;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use vko_api::Valkey;

/// Field manager of the migration write (it owns no fields: the patch sets none).
pub const FIELD_MANAGER: &str = "vko-operator-migrate";
/// Objects per list page.
const PAGE_SIZE: u32 = 200;

/// What happened to one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The API server stored a new version: defaults were missing from storage.
    Stored { before: String, after: String },
    /// Nothing was written: the stored object already held every default.
    AlreadyCurrent,
    /// Deleted between the list and the write: nothing to migrate.
    Gone,
    /// The write was refused or did not reach the API server.
    Failed(String),
}

/// The outcome of a write from the resourceVersions before and after it.
pub fn outcome_of_write(before: Option<&str>, after: Option<&str>) -> Outcome {
    match (before, after) {
        (Some(before), Some(after)) if before == after => Outcome::AlreadyCurrent,
        (before, Some(after)) => Outcome::Stored {
            before: before.unwrap_or("?").to_owned(),
            after: after.to_owned(),
        },
        (_, None) => Outcome::Failed("the API server returned no resourceVersion".to_owned()),
    }
}

/// The line printed for one resource.
pub fn report_line(namespace: &str, name: &str, outcome: &Outcome) -> String {
    match outcome {
        Outcome::Stored { before, after } => format!(
            "stored     {namespace}/{name}: defaults written (resourceVersion {before} -> {after})"
        ),
        Outcome::AlreadyCurrent => {
            format!("unchanged  {namespace}/{name}: already stored with every default")
        }
        Outcome::Gone => format!("gone       {namespace}/{name}: deleted meanwhile"),
        Outcome::Failed(message) => format!("FAILED     {namespace}/{name}: {message}"),
    }
}

/// Counts of a whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub stored: usize,
    pub unchanged: usize,
    pub failed: usize,
}

impl Summary {
    pub fn add(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Stored { .. } => self.stored += 1,
            Outcome::AlreadyCurrent | Outcome::Gone => self.unchanged += 1,
            Outcome::Failed(_) => self.failed += 1,
        }
    }

    pub fn line(&self) -> String {
        format!(
            "migrate: {} Valkey resource(s): {} stored defaults, {} already current, {} failed",
            self.stored + self.unchanged + self.failed,
            self.stored,
            self.unchanged,
            self.failed
        )
    }

    /// Whether the run succeeded (every resource migrated or already current).
    pub fn succeeded(&self) -> bool {
        self.failed == 0
    }
}

/// Lists every `Valkey`, one page at a time. `None` when the CRD is not installed.
async fn list_all(api: &Api<DynamicObject>) -> anyhow::Result<Option<Vec<DynamicObject>>> {
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(None),
            Err(error) => return Err(error).context("listing Valkey resources"),
        };
        objects.extend(page.items);
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(Some(objects)),
        }
    }
}

/// Writes `{}` to one resource and says what the API server did with it.
async fn migrate_one(
    client: &kube::Client,
    resource: &ApiResource,
    object: &DynamicObject,
) -> Outcome {
    let (Some(namespace), Some(name)) = (&object.metadata.namespace, &object.metadata.name) else {
        return Outcome::Failed("listed without namespace or name".to_owned());
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let empty = serde_json::json!({});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    match api.patch(name, &params, &Patch::Merge(&empty)).await {
        Ok(written) => outcome_of_write(
            object.metadata.resource_version.as_deref(),
            written.metadata.resource_version.as_deref(),
        ),
        Err(kube::Error::Api(status)) if status.code == 404 => Outcome::Gone,
        Err(kube::Error::Api(status)) => Outcome::Failed(format!(
            "refused ({} {}): {}",
            status.code, status.reason, status.message
        )),
        Err(error) => Outcome::Failed(error.to_string()),
    }
}

/// `vko-operator migrate`: lines to stdout. Fails (non-zero exit) when any resource failed.
pub async fn run(client: kube::Client) -> anyhow::Result<()> {
    migrate(client, &mut std::io::stdout()).await
}

/// Migrates every `Valkey`, writing one line per resource and a summary to `out`.
pub async fn migrate(client: kube::Client, out: &mut impl std::io::Write) -> anyhow::Result<()> {
    let resource = ApiResource::erase::<Valkey>(&());
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let Some(objects) = list_all(&api).await? else {
        writeln!(
            out,
            "migrate: the Valkey CRD is not installed; nothing to migrate"
        )?;
        return Ok(());
    };
    let mut summary = Summary::default();
    for object in &objects {
        let outcome = migrate_one(&client, &resource, object).await;
        writeln!(
            out,
            "{}",
            report_line(
                object.metadata.namespace.as_deref().unwrap_or("?"),
                object.metadata.name.as_deref().unwrap_or("?"),
                &outcome
            )
        )?;
        summary.add(&outcome);
    }
    writeln!(out, "{}", summary.line())?;
    if !summary.succeeded() {
        anyhow::bail!(
            "{} of {} Valkey resource(s) could not be migrated (see the FAILED lines above)",
            summary.failed,
            objects.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_resource_version_means_defaults_were_stored() {
        assert_eq!(
            outcome_of_write(Some("10"), Some("12")),
            Outcome::Stored {
                before: "10".into(),
                after: "12".into()
            }
        );
        assert_eq!(
            outcome_of_write(Some("10"), Some("10")),
            Outcome::AlreadyCurrent
        );
        assert!(matches!(
            outcome_of_write(Some("10"), None),
            Outcome::Failed(_)
        ));
    }

    #[test]
    fn one_line_per_resource_names_it_and_what_happened() {
        assert_eq!(
            report_line(
                "ns",
                "a",
                &Outcome::Stored {
                    before: "1".into(),
                    after: "2".into()
                }
            ),
            "stored     ns/a: defaults written (resourceVersion 1 -> 2)"
        );
        assert_eq!(
            report_line("ns", "b", &Outcome::AlreadyCurrent),
            "unchanged  ns/b: already stored with every default"
        );
        assert_eq!(
            report_line("ns", "c", &Outcome::Failed("forbidden".into())),
            "FAILED     ns/c: forbidden"
        );
    }

    /// Against a mock API server: three resources, the second refused; the third is still
    /// migrated, each gets its line, and the run fails.
    #[tokio::test]
    async fn one_refused_resource_does_not_stop_the_rest_and_fails_the_run() {
        use http::{Request, Response};
        use kube::client::Body;
        use std::sync::{Arc, Mutex};

        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let patched = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let log = patched.clone();
        let valkey = |name: &str, rv: &str| {
            serde_json::json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}, "spec": {}})
        };
        let server = tokio::spawn(async move {
            while let Some((request, respond)) = handle.next_request().await {
                let method = request.method().to_string();
                let path = request.uri().path().to_owned();
                let content_type = request
                    .headers()
                    .get("content-type")
                    .map(|value| value.to_str().unwrap().to_owned())
                    .unwrap_or_default();
                let body = request.into_body().collect_bytes().await.unwrap();
                let (status, reply) = if method == "GET" && path == "/apis/vko.gtrfc.com/v1/valkeys"
                {
                    (
                        200,
                        serde_json::json!({"apiVersion": "vko.gtrfc.com/v1", "kind": "ValkeyList",
                        "metadata": {"resourceVersion": "9"},
                        "items": [valkey("a", "1"), valkey("b", "2"), valkey("c", "3")]}),
                    )
                } else if method == "PATCH" {
                    assert_eq!(content_type, "application/merge-patch+json");
                    assert_eq!(&body[..], b"{}");
                    let name = path.rsplit('/').next().unwrap().to_owned();
                    log.lock().unwrap().push((name.clone(), path.clone()));
                    match name.as_str() {
                        "a" => (200, valkey("a", "11")),
                        "b" => (
                            422,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "message": "b is invalid", "reason": "Invalid", "code": 422}),
                        ),
                        _ => (200, valkey("c", "3")),
                    }
                } else {
                    panic!("unexpected {method} {path}");
                };
                respond.send_response(
                    Response::builder()
                        .status(status)
                        .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                        .unwrap(),
                );
            }
        });
        let mut out = Vec::new();
        let result = migrate(client, &mut out).await;
        server.abort();
        let lines = String::from_utf8(out).unwrap();
        assert_eq!(
            lines.lines().collect::<Vec<_>>(),
            vec![
                "stored     ns/a: defaults written (resourceVersion 1 -> 11)",
                "FAILED     ns/b: refused (422 Invalid): b is invalid",
                "unchanged  ns/c: already stored with every default",
                "migrate: 3 Valkey resource(s): 1 stored defaults, 1 already current, 1 failed",
            ]
        );
        let error = result.unwrap_err().to_string();
        assert!(error.contains("1 of 3"), "{error}");
        let patched = patched.lock().unwrap().clone();
        assert_eq!(
            patched,
            vec![
                (
                    "a".into(),
                    "/apis/vko.gtrfc.com/v1/namespaces/ns/valkeys/a".into()
                ),
                (
                    "b".into(),
                    "/apis/vko.gtrfc.com/v1/namespaces/ns/valkeys/b".into()
                ),
                (
                    "c".into(),
                    "/apis/vko.gtrfc.com/v1/namespaces/ns/valkeys/c".into()
                ),
            ]
        );
    }

    #[test]
    fn any_failure_fails_the_run_but_is_counted_with_the_rest() {
        let mut summary = Summary::default();
        summary.add(&Outcome::AlreadyCurrent);
        summary.add(&Outcome::Failed("x".into()));
        summary.add(&Outcome::Stored {
            before: "1".into(),
            after: "2".into(),
        });
        assert!(!summary.succeeded());
        assert_eq!(
            summary.line(),
            "migrate: 3 Valkey resource(s): 1 stored defaults, 1 already current, 1 failed"
        );
        let mut clean = Summary::default();
        clean.add(&Outcome::AlreadyCurrent);
        assert!(clean.succeeded());
    }
}
