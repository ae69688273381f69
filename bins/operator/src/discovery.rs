//! Which optional API groups the cluster serves (cert-manager, the Prometheus-Operator), looked up
//! while the operator runs: installing cert-manager after vko is picked up within
//! [`REFRESH_INTERVAL`], without an operator restart, and every `Valkey` is reconciled again when
//! the answer changes (its Certificates are then applied, or reported missing).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::stores::ManagedKind;

/// How often the API groups are listed again (one `GET /apis`).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(20);
/// How long one listing may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(10);

const CERT_MANAGER_GROUP: &str = "cert-manager.io";
const PROMETHEUS_OPERATOR_GROUP: &str = "monitoring.coreos.com";

/// The optional groups a listing found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Served {
    pub cert_manager: bool,
    pub prometheus_operator: bool,
}

impl Served {
    /// Whether `kind`'s API group is served (the core kinds always are).
    pub fn serves(self, kind: ManagedKind) -> bool {
        match kind {
            ManagedKind::Certificate => self.cert_manager,
            ManagedKind::ServiceMonitor => self.prometheus_operator,
            _ => true,
        }
    }

    /// From the names of the groups the API server serves.
    pub fn from_group_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Served {
        let mut served = Served::default();
        for name in names {
            match name {
                CERT_MANAGER_GROUP => served.cert_manager = true,
                PROMETHEUS_OPERATOR_GROUP => served.prometheus_operator = true,
                _ => {}
            }
        }
        served
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

    /// Records a new answer; returns whether it differs from the last one.
    pub fn update(&self, served: Served) -> bool {
        let before = self.served();
        self.cert_manager
            .store(served.cert_manager, Ordering::Relaxed);
        self.prometheus_operator
            .store(served.prometheus_operator, Ordering::Relaxed);
        before != served
    }
}

/// One `GET /apis`, with a timeout.
pub async fn list(client: &kube::Client) -> Result<Served, String> {
    let groups = tokio::time::timeout(LIST_TIMEOUT, client.list_api_groups())
        .await
        .map_err(|_| {
            format!(
                "listing the API groups took over {}s",
                LIST_TIMEOUT.as_secs()
            )
        })?
        .map_err(|error| format!("listing the API groups: {error}"))?;
    Ok(Served::from_group_names(
        groups.groups.iter().map(|group| group.name.as_str()),
    ))
}

/// Lists the groups every [`REFRESH_INTERVAL`] until `shutdown`; sends on `changed` when the
/// answer differs (a failed listing keeps the last answer).
pub fn spawn_refresher(
    client: kube::Client,
    apis: Arc<OptionalApis>,
    changed: tokio::sync::mpsc::Sender<()>,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(REFRESH_INTERVAL) => {}
            }
            match list(&client).await {
                Ok(served) => {
                    if apis.update(served) {
                        tracing::info!(
                            ?served,
                            "optional API groups changed; reconciling every Valkey"
                        );
                        if changed.send(()).await.is_err() {
                            return;
                        }
                    }
                }
                Err(error) => tracing::warn!(%error, "optional API groups not refreshed"),
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_optional_groups_count() {
        assert_eq!(
            Served::from_group_names(["apps", "cert-manager.io", "acme.cert-manager.io"]),
            Served {
                cert_manager: true,
                prometheus_operator: false
            }
        );
        assert_eq!(
            Served::from_group_names(["monitoring.coreos.com"]),
            Served {
                cert_manager: false,
                prometheus_operator: true
            }
        );
        assert_eq!(Served::from_group_names([]), Served::default());
    }

    #[test]
    fn an_update_reports_a_change_once() {
        let apis = OptionalApis::new(Served::default());
        let installed = Served {
            cert_manager: true,
            prometheus_operator: false,
        };
        assert!(apis.update(installed));
        assert!(!apis.update(installed));
        assert_eq!(apis.served(), installed);
        assert!(apis.update(Served::default()));
    }
}
