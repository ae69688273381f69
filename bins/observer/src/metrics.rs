//! `/metrics`: the observer's series (Prometheus / OpenMetrics text). Names are documented in
//! the README; renaming one breaks dashboards and alerts.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::check::Check;
use crate::evaluate::Report;

type Labels = Vec<(&'static str, String)>;

/// The registry and the handles a round updates.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    ready: Gauge,
    check_ok: Family<Labels, Gauge>,
    check_failures: Family<Labels, Counter>,
    rounds: Counter,
    round_duration: Histogram,
    last_round: Gauge,
}

fn check_label(check: Check) -> Labels {
    vec![("check", check.name().to_owned())]
}

impl Metrics {
    pub fn new(version: &str) -> Metrics {
        let mut registry = Registry::default();
        let ready = Gauge::default();
        registry.register(
            "vko_observer_ready",
            "1 when the last round found no failure of a check that makes the observer unready",
            ready.clone(),
        );
        let check_ok = Family::<Labels, Gauge>::default();
        registry.register(
            "vko_observer_check_ok",
            "Per check, 0 when it failed in the last round, else 1 (also when it does not apply)",
            check_ok.clone(),
        );
        let check_failures = Family::<Labels, Counter>::default();
        registry.register(
            "vko_observer_check_failures",
            "Rounds in which the check failed",
            check_failures.clone(),
        );
        let rounds = Counter::default();
        registry.register("vko_observer_rounds", "Completed rounds", rounds.clone());
        let round_duration = Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0]);
        registry.register(
            "vko_observer_round_duration_seconds",
            "Time one round of checks took",
            round_duration.clone(),
        );
        let last_round = Gauge::default();
        registry.register(
            "vko_observer_last_round_timestamp_seconds",
            "Unix time the last round completed",
            last_round.clone(),
        );
        let build_info = Family::<Labels, Gauge>::default();
        build_info
            .get_or_create(&vec![("version", version.to_owned())])
            .set(1);
        registry.register(
            "vko_observer_build_info",
            "The running observer",
            build_info,
        );
        // Every check has its series from the start, failure counters at 0.
        for check in Check::ALL {
            let _ = check_failures.get_or_create(&check_label(check));
        }
        Metrics {
            registry,
            ready,
            check_ok,
            check_failures,
            rounds,
            round_duration,
            last_round,
        }
    }

    /// Records a completed round.
    pub fn record(&self, report: &Report, seconds: f64, completed_unix: i64) {
        self.ready.set(i64::from(report.ready));
        for (check, result) in &report.checks {
            let labels = check_label(*check);
            self.check_ok
                .get_or_create(&labels)
                .set(i64::from(!result.failed()));
            if result.failed() {
                self.check_failures.get_or_create(&labels).inc();
            }
        }
        self.rounds.inc();
        self.round_duration.observe(seconds);
        self.last_round.set(completed_unix);
    }

    /// The text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::collections::BTreeMap;

    use super::*;
    use crate::check::{CheckResult, Status};

    fn report(failing: &[Check]) -> Report {
        let checks: BTreeMap<Check, CheckResult> = Check::ALL
            .into_iter()
            .map(|check| {
                let status = if failing.contains(&check) {
                    Status::Fail
                } else {
                    Status::Pass
                };
                (
                    check,
                    CheckResult {
                        status,
                        detail: String::new(),
                        unready_on_failure: true,
                    },
                )
            })
            .collect();
        Report {
            ready: failing.is_empty(),
            master: None,
            checks,
        }
    }

    #[test]
    fn exposes_every_series() {
        let metrics = Metrics::new("0.1.0");
        let before = metrics.encode().unwrap();
        assert!(before.contains("vko_observer_ready 0"), "{before}");
        assert!(
            before.contains("vko_observer_check_failures_total{check=\"masterUnreachable\"} 0")
        );
        metrics.record(&report(&[]), 0.2, 1_700_000_000);
        metrics.record(&report(&[Check::SentinelUnreachable]), 0.3, 1_700_000_005);
        let text = metrics.encode().unwrap();
        for line in [
            "vko_observer_ready 0",
            "vko_observer_check_ok{check=\"sentinelUnreachable\"} 0",
            "vko_observer_check_ok{check=\"masterUnreachable\"} 1",
            "vko_observer_check_failures_total{check=\"sentinelUnreachable\"} 1",
            "vko_observer_check_failures_total{check=\"masterUnreachable\"} 0",
            "vko_observer_rounds_total 2",
            "vko_observer_round_duration_seconds_count 2",
            "vko_observer_last_round_timestamp_seconds 1700000005",
            "vko_observer_build_info{version=\"0.1.0\"} 1",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
        metrics.record(&report(&[]), 0.1, 1_700_000_010);
        assert!(metrics.encode().unwrap().contains("vko_observer_ready 1"));
    }
}
