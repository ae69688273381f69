//! The loop and the HTTP endpoints: a round every `interval`, its report published for
//! `/readyz`, recorded in `/metrics` and logged; SIGTERM / SIGINT stop both.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cli::Config;
use crate::error::{ObserverError, Result};
use crate::evaluate::{Report, evaluate};
use crate::metrics::Metrics;
use crate::probe::observe;

/// The last completed round, as `/readyz` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Published {
    pub round: u64,
    pub completed_at_unix_ms: u64,
    pub duration_ms: u64,
    #[serde(flatten)]
    pub report: Report,
    #[serde(skip)]
    pub completed: Option<Instant>,
}

/// The `/readyz` answer: status code and JSON body. 503 before the first round, when the last
/// round is older than `stale_after` (the loop is stuck), or when it was not ready.
pub fn readyz(
    latest: Option<&Published>,
    now: Instant,
    stale_after: Duration,
) -> (u16, serde_json::Value) {
    let Some(published) = latest else {
        return (
            503,
            serde_json::json!({"ready": false, "detail": "no round has completed yet"}),
        );
    };
    let mut body = serde_json::to_value(published)
        .unwrap_or_else(|e| serde_json::json!({"ready": false, "detail": e.to_string()}));
    let age = published
        .completed
        .map(|at| now.saturating_duration_since(at))
        .unwrap_or_default();
    if age > stale_after {
        body["ready"] = serde_json::Value::Bool(false);
        body["detail"] = serde_json::Value::String(format!(
            "the last round completed {} s ago (stale after {} s)",
            age.as_secs(),
            stale_after.as_secs()
        ));
        return (503, body);
    }
    (if published.report.ready { 200 } else { 503 }, body)
}

/// State shared by the loop and the HTTP handlers.
#[derive(Debug)]
pub struct Shared {
    latest: RwLock<Option<Published>>,
    metrics: Metrics,
    stale_after: Duration,
}

impl Shared {
    pub fn new(version: &str, interval: Duration) -> Shared {
        Shared {
            latest: RwLock::new(None),
            metrics: Metrics::new(version),
            stale_after: Duration::from_secs(60).max(interval * 3),
        }
    }

    fn publish(&self, published: Published) {
        if let Ok(mut latest) = self.latest.write() {
            *latest = Some(published);
        }
    }

    fn latest(&self) -> Option<Published> {
        self.latest.read().ok().and_then(|latest| latest.clone())
    }
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz_handler))
        .route("/metrics", get(metrics_handler))
        .with_state(shared)
}

async fn readyz_handler(State(shared): State<Arc<Shared>>) -> Response {
    let latest = shared.latest();
    let (code, body) = readyz(latest.as_ref(), Instant::now(), shared.stale_after);
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    (code, axum::Json(body)).into_response()
}

async fn metrics_handler(State(shared): State<Arc<Shared>>) -> Response {
    match shared.metrics.encode() {
        Ok(text) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn unix_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Logs one round: every failing check (always, whether or not it affects readiness), checks
/// that recovered, and readiness changes.
fn log_round(previous: Option<&Report>, report: &Report, round: u64, duration: Duration) {
    for (check, result) in report.failures() {
        tracing::warn!(
            check = check.name(),
            detail = %result.detail,
            unready_on_failure = result.unready_on_failure,
            round,
            "check failed"
        );
    }
    if let Some(previous) = previous {
        for (check, result) in &previous.checks {
            let now_ok = report.checks.get(check).is_some_and(|r| !r.failed());
            if result.failed() && now_ok {
                tracing::info!(check = check.name(), round, "check recovered");
            }
        }
    }
    if previous.map(|p| p.ready) != Some(report.ready) {
        if report.ready {
            tracing::info!(round, master = ?report.master, "ready");
        } else {
            tracing::warn!(round, master = ?report.master, "not ready");
        }
    }
    tracing::debug!(
        round,
        ready = report.ready,
        master = ?report.master,
        duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        "round completed"
    );
}

/// Rounds until `stop` is cancelled. A round in flight is abandoned on stop.
pub async fn rounds(cfg: &Config, shared: &Shared, stop: &CancellationToken) {
    let mut ticker = tokio::time::interval(cfg.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut previous: Option<Report> = None;
    let mut round: u64 = 0;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        round += 1;
        if let Some(path) = &cfg.password_file {
            match crate::cli::read_password_file(path) {
                Ok(password) => {
                    if cfg.dialer.password.rotate_to(password) {
                        tracing::info!("the password file changed; dialling with the new password");
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "password file unusable; keeping the password in use")
                }
            }
        }
        let started = Instant::now();
        let observation = tokio::select! {
            _ = stop.cancelled() => return,
            observation = observe(cfg, round) => observation,
        };
        let report = evaluate(&observation, &cfg.unready_on);
        let duration = started.elapsed();
        log_round(previous.as_ref(), &report, round, duration);
        let completed_ms = unix_millis();
        shared.metrics.record(
            &report,
            duration.as_secs_f64(),
            i64::try_from(completed_ms / 1000).unwrap_or(i64::MAX),
        );
        shared.publish(Published {
            round,
            completed_at_unix_ms: completed_ms,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            report: report.clone(),
            completed: Some(Instant::now()),
        });
        previous = Some(report);
    }
}

async fn shutdown_signal(token: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = terminate => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = token.cancelled() => {}
    }
    token.cancel();
}

/// Serves the endpoints and runs the rounds until SIGTERM / SIGINT.
pub async fn run(cfg: Config, version: &str) -> Result<()> {
    let shared = Arc::new(Shared::new(version, cfg.interval));
    let addr = format!("0.0.0.0:{}", cfg.listen_port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|source| ObserverError::Http {
            addr: addr.clone(),
            source,
        })?;
    tracing::info!(
        %addr,
        replicas = cfg.replicas,
        sentinel = cfg.sentinel.is_some(),
        db = cfg.db,
        health_key = %cfg.health_key,
        unready_on = ?cfg.unready_on.iter().map(|c| c.name()).collect::<Vec<_>>(),
        interval_s = cfg.interval.as_secs(),
        "observer started"
    );
    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    let server = {
        let stop = stop.clone();
        tokio::spawn(
            axum::serve(listener, router(shared.clone()))
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .into_future(),
        )
    };
    rounds(&cfg, &shared, &stop).await;
    let served = server.await;
    tracing::info!("stopped");
    match served {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) => Err(ObserverError::Http { addr, source }),
        Err(join) => Err(ObserverError::Http {
            addr,
            source: std::io::Error::other(join.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::BTreeMap;

    use super::*;
    use crate::check::{Check, CheckResult, Status};

    fn published(ready: bool, completed: Instant) -> Published {
        let checks: BTreeMap<Check, CheckResult> = Check::ALL
            .into_iter()
            .map(|check| {
                let failed = !ready && check == Check::SentinelMasterDown;
                (
                    check,
                    CheckResult {
                        status: if failed { Status::Fail } else { Status::Pass },
                        detail: "seen".into(),
                        unready_on_failure: true,
                    },
                )
            })
            .collect();
        Published {
            round: 4,
            completed_at_unix_ms: 1_700_000_000_000,
            duration_ms: 120,
            report: Report {
                ready,
                master: Some("c-0.c-headless.ns.svc.cluster.local:6379".into()),
                checks,
            },
            completed: Some(completed),
        }
    }

    #[test]
    fn readyz_answers() {
        let now = Instant::now();
        let stale = Duration::from_secs(60);
        let (code, body) = readyz(None, now, stale);
        assert_eq!(code, 503);
        assert_eq!(body["ready"], false);

        let (code, body) = readyz(Some(&published(true, now)), now, stale);
        assert_eq!(code, 200);
        assert_eq!(body["ready"], true);
        assert_eq!(body["round"], 4);
        assert_eq!(body["durationMs"], 120);
        assert_eq!(body["master"], "c-0.c-headless.ns.svc.cluster.local:6379");
        assert_eq!(body["checks"]["masterUnreachable"]["status"], "pass");
        assert_eq!(body["checks"].as_object().unwrap().len(), 10);

        let (code, body) = readyz(Some(&published(false, now)), now, stale);
        assert_eq!(code, 503);
        assert_eq!(body["checks"]["sentinelMasterDown"]["status"], "fail");

        // A ready report that is too old: the loop is stuck.
        let (code, body) = readyz(
            Some(&published(true, now)),
            now + Duration::from_secs(61),
            stale,
        );
        assert_eq!(code, 503);
        assert_eq!(body["ready"], false);
        assert!(body["detail"].as_str().unwrap().contains("61 s ago"));
    }
}
