//! Which optional APIs the cluster serves (cert-manager's Certificate, the Prometheus-Operator's
//! ServiceMonitor), followed while the operator runs by a watch of each kind's
//! CustomResourceDefinition, named by a `metadata.name` field selector (ADR 0047): installing
//! cert-manager after vko is seen as soon as its CRD is established, without an operator
//! restart and without polling, and every `Valkey` is reconciled again when the answer changes
//! (its Certificates are then applied, or reported missing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use tokio_util::sync::CancellationToken;

use crate::stores::ManagedKind;

/// How long the first read of a CRD may take.
const GET_TIMEOUT: Duration = Duration::from_secs(10);

/// An optional API the operator writes objects of, when it is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionalApi {
    /// `certificates.cert-manager.io/v1`.
    CertManager,
    /// `servicemonitors.monitoring.coreos.com/v1`.
    PrometheusOperator,
}

impl OptionalApi {
    pub const ALL: [OptionalApi; 2] = [OptionalApi::CertManager, OptionalApi::PrometheusOperator];

    /// The name of the CRD that serves it (the chart grants reading these two names only).
    pub fn crd_name(self) -> &'static str {
        match self {
            OptionalApi::CertManager => "certificates.cert-manager.io",
            OptionalApi::PrometheusOperator => "servicemonitors.monitoring.coreos.com",
        }
    }

    /// The version vko writes.
    fn version(self) -> &'static str {
        "v1"
    }

    /// Whether `crd` serves this API: the version vko writes is served, the CRD is established
    /// (the API server serves its resources) and not being deleted (the API server refuses to
    /// create objects of a terminating CRD).
    pub fn served_by(self, crd: &CustomResourceDefinition) -> bool {
        let established = crd
            .status
            .as_ref()
            .and_then(|status| status.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|condition| condition.type_ == "Established" && condition.status == "True")
            });
        let version_served = crd
            .spec
            .versions
            .iter()
            .any(|version| version.name == self.version() && version.served);
        crd.metadata.name.as_deref() == Some(self.crd_name())
            && crd.metadata.deletion_timestamp.is_none()
            && established
            && version_served
    }
}

/// The optional APIs served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub cert_manager: bool,
    pub prometheus_operator: bool,
}

impl Served {
    /// Whether `kind`'s API is served (the core kinds always are).
    pub fn serves(self, kind: ManagedKind) -> bool {
        match kind {
            ManagedKind::Certificate => self.cert_manager,
            ManagedKind::ServiceMonitor => self.prometheus_operator,
            _ => true,
        }
    }

    fn set(&mut self, api: OptionalApi, served: bool) {
        match api {
            OptionalApi::CertManager => self.cert_manager = served,
            OptionalApi::PrometheusOperator => self.prometheus_operator = served,
        }
    }
}

/// The last answer, read by every pass.
#[derive(Debug, Default)]
pub struct OptionalApis {
    cert_manager: AtomicBool,
    prometheus_operator: AtomicBool,
}

impl OptionalApis {
    pub fn new(served: Served) -> OptionalApis {
        OptionalApis {
            cert_manager: AtomicBool::new(served.cert_manager),
            prometheus_operator: AtomicBool::new(served.prometheus_operator),
        }
    }

    pub fn served(&self) -> Served {
        Served {
            cert_manager: self.cert_manager.load(Ordering::Relaxed),
            prometheus_operator: self.prometheus_operator.load(Ordering::Relaxed),
        }
    }

    fn flag(&self, api: OptionalApi) -> &AtomicBool {
        match api {
            OptionalApi::CertManager => &self.cert_manager,
            OptionalApi::PrometheusOperator => &self.prometheus_operator,
        }
    }

    /// Records whether `api` is served; returns whether that differs from the last answer.
    pub fn update(&self, api: OptionalApi, served: bool) -> bool {
        self.flag(api).swap(served, Ordering::Relaxed) != served
    }
}

/// One GET of each optional API's CRD (10 s timeout each), before the controller starts, so its
/// first passes already know. An API whose CRD cannot be read counts as not served (its watch,
/// started with the controller, corrects that once it lists) and is named in the error.
pub async fn read(client: &kube::Client) -> (Served, Vec<String>) {
    let mut served = Served::default();
    let mut errors = Vec::new();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    for api in OptionalApi::ALL {
        match tokio::time::timeout(GET_TIMEOUT, crds.get_opt(api.crd_name())).await {
            Ok(Ok(crd)) => {
                served.set(api, crd.is_some_and(|crd| api.served_by(&crd)));
            }
            Ok(Err(error)) => errors.push(format!("reading CRD {}: {error}", api.crd_name())),
            Err(_) => errors.push(format!(
                "reading CRD {} took over {}s",
                api.crd_name(),
                GET_TIMEOUT.as_secs()
            )),
        }
    }
    (served, errors)
}

/// Follows each optional API's CRD with a watch of that one name (on `client`, the watch
/// client) until `shutdown`; sends on `changed` when an answer differs. A failed watch keeps
/// the last answer and lists again after the watcher's back-off.
pub fn spawn_watches(
    client: &kube::Client,
    apis: Arc<OptionalApis>,
    changed: tokio::sync::mpsc::Sender<()>,
    shutdown: &CancellationToken,
) {
    for api in OptionalApi::ALL {
        tokio::spawn(follow(
            client.clone(),
            api,
            apis.clone(),
            changed.clone(),
            shutdown.clone(),
        ));
    }
}

async fn follow(
    client: kube::Client,
    api: OptionalApi,
    apis: Arc<OptionalApis>,
    changed: tokio::sync::mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    let crds = Api::<CustomResourceDefinition>::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", api.crd_name()));
    let mut events = std::pin::pin!(watcher(crds, config).default_backoff());
    let mut answer = Answer::default();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        let served = match event {
            Some(Ok(event)) => answer.apply(api, &event),
            Some(Err(error)) => {
                tracing::warn!(crd = api.crd_name(), %error, "optional API's CRD watch failed");
                None
            }
            None => return,
        };
        if let Some(served) = served
            && apis.update(api, served)
        {
            tracing::info!(
                crd = api.crd_name(),
                served,
                "optional API changed; reconciling every Valkey"
            );
            if changed.send(()).await.is_err() {
                return;
            }
        }
    }
}

/// What one CRD's watch says, folded over its events.
#[derive(Debug, Default)]
struct Answer {
    /// During a (re)list: whether the listed CRD serves the API.
    listing: bool,
}

impl Answer {
    /// The answer an event settles, if it settles one (a list settles at its end).
    fn apply(
        &mut self,
        api: OptionalApi,
        event: &watcher::Event<CustomResourceDefinition>,
    ) -> Option<bool> {
        match event {
            watcher::Event::Init => {
                self.listing = false;
                None
            }
            watcher::Event::InitApply(crd) => {
                self.listing = api.served_by(crd);
                None
            }
            watcher::Event::InitDone => Some(self.listing),
            watcher::Event::Apply(crd) => Some(api.served_by(crd)),
            watcher::Event::Delete(_) => Some(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(name: &str, version: &str, served: bool, established: &str) -> CustomResourceDefinition {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": name.split_once('.').map(|(_, group)| group).unwrap_or_default(),
                "names": {"kind": "K", "plural": "ks"},
                "scope": "Namespaced",
                "versions": [{"name": version, "served": served, "storage": true}]
            },
            "status": {"conditions": [{"type": "Established", "status": established}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_crd_serves_when_established_with_v1_served_and_not_deleted() {
        let api = OptionalApi::CertManager;
        assert!(api.served_by(&crd("certificates.cert-manager.io", "v1", true, "True")));
        assert!(!api.served_by(&crd("certificates.cert-manager.io", "v1", true, "False")));
        assert!(!api.served_by(&crd("certificates.cert-manager.io", "v1", false, "True")));
        assert!(!api.served_by(&crd(
            "certificates.cert-manager.io",
            "v1beta1",
            true,
            "True"
        )));
        assert!(!api.served_by(&crd("issuers.cert-manager.io", "v1", true, "True")));
        let mut terminating = crd("certificates.cert-manager.io", "v1", true, "True");
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert!(!api.served_by(&terminating));
        let monitors = OptionalApi::PrometheusOperator;
        assert!(monitors.served_by(&crd(
            "servicemonitors.monitoring.coreos.com",
            "v1",
            true,
            "True"
        )));
    }

    #[test]
    fn a_list_settles_at_its_end_and_an_empty_one_means_not_served() {
        let api = OptionalApi::CertManager;
        let installed = crd("certificates.cert-manager.io", "v1", true, "True");
        let mut answer = Answer::default();
        assert_eq!(answer.apply(api, &watcher::Event::Init), None);
        assert_eq!(
            answer.apply(api, &watcher::Event::InitApply(installed.clone())),
            None
        );
        assert_eq!(answer.apply(api, &watcher::Event::InitDone), Some(true));
        // A relist after the CRD was deleted while the watch was down finds nothing.
        assert_eq!(answer.apply(api, &watcher::Event::Init), None);
        assert_eq!(answer.apply(api, &watcher::Event::InitDone), Some(false));
        let pending = crd("certificates.cert-manager.io", "v1", true, "False");
        assert_eq!(
            answer.apply(api, &watcher::Event::Apply(pending)),
            Some(false)
        );
        assert_eq!(
            answer.apply(api, &watcher::Event::Apply(installed.clone())),
            Some(true)
        );
        assert_eq!(
            answer.apply(api, &watcher::Event::Delete(installed)),
            Some(false)
        );
    }

    #[test]
    fn an_update_reports_a_change_once() {
        let apis = OptionalApis::new(Served::default());
        assert!(apis.update(OptionalApi::CertManager, true));
        assert!(!apis.update(OptionalApi::CertManager, true));
        assert_eq!(
            apis.served(),
            Served {
                cert_manager: true,
                prometheus_operator: false
            }
        );
        assert!(apis.update(OptionalApi::PrometheusOperator, true));
        assert!(apis.update(OptionalApi::CertManager, false));
    }
}
