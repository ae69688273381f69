//! `/metrics`: the reference's `vko_valkey_*` series, computed at scrape time from the `Valkey`
//! reflector store (nothing is written from inside a reconcile except the error counter).
//! `vko_valkey_collector_success` says whether that store could be read: `0` before the store has
//! listed (a standby that does not lead, a leader still listing), so the chart's alerts read
//! "unknown" instead of "healthy" for an empty store.

use std::sync::Arc;

use futures::FutureExt;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use vko_api::{ConditionType, Valkey};

type Labels = Vec<(&'static str, String)>;

/// The registry and the metrics written outside scrapes.
#[derive(Debug)]
pub struct Metrics {
    pub registry: Registry,
    pub reconcile_errors: Family<Labels, Counter>,
    pub reconciles: Counter,
    /// Data pods newly seen fenced (ADR 0019), by cluster and reason: one per `MasterFenced`
    /// Warning Event.
    pub master_fences: Family<Labels, Counter>,
}

impl Metrics {
    /// Registers every series. `valkeys` is read at scrape time; `None` until the controller
    /// exists (then only the operator's own series and a collector success of `0` are emitted).
    pub fn new(valkeys: Option<Store<Valkey>>, version: &str) -> Metrics {
        let mut registry = Registry::default();
        let reconcile_errors = Family::<Labels, Counter>::default();
        registry.register(
            "vko_reconcile_errors",
            "Failed reconcile passes by stable reason",
            reconcile_errors.clone(),
        );
        let reconciles = Counter::default();
        registry.register("vko_reconciles", "Reconcile passes run", reconciles.clone());
        let master_fences = Family::<Labels, Counter>::default();
        registry.register(
            "vko_master_fences",
            "Masters newly seen fenced (writes paused: no Sentinel majority names them), by reason",
            master_fences.clone(),
        );
        let build_info = Family::<Labels, Gauge>::default();
        build_info
            .get_or_create(&vec![
                ("version", version.to_owned()),
                ("commit", BUILD_COMMIT.to_owned()),
            ])
            .set(1);
        registry.register(
            "vko_operator_build_info",
            "The running operator",
            build_info,
        );
        registry.register_collector(Box::new(ValkeyCollector { valkeys }));
        Metrics {
            registry,
            reconcile_errors,
            reconciles,
            master_fences,
        }
    }

    /// The text exposition.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

/// The commit the binary was built from, when the build set `VKO_GIT_COMMIT`.
const BUILD_COMMIT: &str = match option_env!("VKO_GIT_COMMIT") {
    Some(commit) => commit,
    None => "unknown",
};

#[derive(Debug)]
struct ValkeyCollector {
    valkeys: Option<Store<Valkey>>,
}

impl ValkeyCollector {
    /// The resources, or `None` when the store has not listed yet (or its watch stopped before).
    fn read(&self) -> Option<Vec<Arc<Valkey>>> {
        let store = self.valkeys.as_ref()?;
        // Resolves on the first poll once the store has listed; pending (None) before.
        match store.wait_until_ready().now_or_never() {
            Some(Ok(())) => Some(store.state()),
            Some(Err(_)) | None => None,
        }
    }
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    family: &Family<Labels, Gauge>,
) -> Result<(), std::fmt::Error> {
    let metric = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(metric)
}

/// The per-resource gauge families for a set of `Valkey`s.
fn families(valkeys: &[Arc<Valkey>]) -> Vec<(&'static str, &'static str, Family<Labels, Gauge>)> {
    let phase = Family::<Labels, Gauge>::default();
    let condition = Family::<Labels, Gauge>::default();
    let ready = Family::<Labels, Gauge>::default();
    let spec_replicas = Family::<Labels, Gauge>::default();
    let generation = Family::<Labels, Gauge>::default();
    let observed = Family::<Labels, Gauge>::default();
    let version = Family::<Labels, Gauge>::default();
    let fenced_since = Family::<Labels, Gauge>::default();
    for valkey in valkeys {
        let id = vec![
            ("namespace", valkey.namespace().unwrap_or_default()),
            ("name", valkey.name_any()),
        ];
        let with = |key: &'static str, value: String| {
            let mut labels = id.clone();
            labels.push((key, value));
            labels
        };
        let status = valkey.status.as_ref();
        if let Some(value) = status.and_then(|s| s.phase.as_ref()) {
            phase
                .get_or_create(&with("phase", value.to_string()))
                .set(1);
        }
        let mut max_observed = 0;
        for c in status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
        {
            let mut labels = with("condition", c.type_.clone());
            labels.push(("status", c.status.clone()));
            labels.push(("reason", c.reason.clone()));
            condition.get_or_create(&labels).set(1);
            if c.type_ == ConditionType::MasterFenced.as_str() && c.status == "True" {
                fenced_since
                    .get_or_create(&with("reason", c.reason.clone()))
                    .set(c.last_transition_time.0.as_second());
            }
            max_observed = max_observed.max(c.observed_generation.unwrap_or(0));
        }
        ready
            .get_or_create(&id)
            .set(status.and_then(|s| s.ready_replicas).unwrap_or(0).into());
        spec_replicas
            .get_or_create(&id)
            .set(valkey.spec.replicas().into());
        generation
            .get_or_create(&id)
            .set(valkey.metadata.generation.unwrap_or(0));
        observed.get_or_create(&id).set(max_observed);
        if let Some(v) = status.and_then(|s| s.operator_version.clone()) {
            version.get_or_create(&with("version", v)).set(1);
        }
    }
    vec![
        (
            "vko_valkey_status_phase",
            "Current phase (1 for the current one)",
            phase,
        ),
        (
            "vko_valkey_status_condition",
            "Conditions (1 per condition type)",
            condition,
        ),
        (
            "vko_valkey_status_ready_replicas",
            "status.readyReplicas",
            ready,
        ),
        ("vko_valkey_spec_replicas", "spec.replicas", spec_replicas),
        (
            "vko_valkey_metadata_generation",
            "metadata.generation",
            generation,
        ),
        (
            "vko_valkey_status_observed_generation",
            "Highest observedGeneration over the conditions",
            observed,
        ),
        (
            "vko_valkey_operator_version_info",
            "status.operatorVersion",
            version,
        ),
        (
            "vko_valkey_master_fenced_since_seconds",
            "While MasterFenced=True: when it turned True (Unix seconds); time() minus it is how long a master has been fenced",
            fenced_since,
        ),
    ]
}

impl prometheus_client::collector::Collector for ValkeyCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let valkeys = self.read();
        let success = Gauge::<i64>::default();
        success.set(i64::from(valkeys.is_some()));
        let metric = encoder.encode_descriptor(
            "vko_valkey_collector_success",
            "1 when this scrape could read the Valkey resources (the watch has listed), 0 when not",
            None,
            success.metric_type(),
        )?;
        success.encode(metric)?;
        for (name, help, family) in families(&valkeys.unwrap_or_default()) {
            gauge(&mut encoder, name, help, &family)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store;
    use kube::runtime::watcher;

    #[test]
    fn series_follow_the_store() {
        let (reader, mut writer) = store::<Valkey>();
        let valkey: Valkey = serde_json::from_value(serde_json::json!({
            "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": "a", "namespace": "ns", "generation": 2},
            "spec": {"replicas": 3, "image": "valkey/valkey:8.0"},
            "status": {"phase": "OK", "readyReplicas": 3, "operatorVersion": "0.1.0",
                "conditions": [{"type": "Ready", "status": "True", "reason": "ClusterReady",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 2}]}
        }))
        .unwrap();
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.apply_watcher_event(&watcher::Event::Apply(valkey));
        let metrics = Metrics::new(Some(reader), "9.9.9");
        metrics
            .reconcile_errors
            .get_or_create(&vec![("reason", "ForeignObject".to_owned())])
            .inc();
        let text = metrics.encode().unwrap();
        for line in [
            r#"vko_valkey_status_phase{namespace="ns",name="a",phase="OK"} 1"#,
            r#"vko_valkey_status_condition{namespace="ns",name="a",condition="Ready",status="True",reason="ClusterReady"} 1"#,
            r#"vko_valkey_status_ready_replicas{namespace="ns",name="a"} 3"#,
            r#"vko_valkey_spec_replicas{namespace="ns",name="a"} 3"#,
            r#"vko_valkey_metadata_generation{namespace="ns",name="a"} 2"#,
            r#"vko_valkey_status_observed_generation{namespace="ns",name="a"} 2"#,
            r#"vko_valkey_operator_version_info{namespace="ns",name="a",version="0.1.0"} 1"#,
            r#"vko_operator_build_info{version="9.9.9",commit="unknown"} 1"#,
            "vko_valkey_collector_success 1",
            r#"vko_reconcile_errors_total{reason="ForeignObject"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }

    #[test]
    fn a_fenced_master_shows_since_when_and_counts() {
        let (reader, mut writer) = store::<Valkey>();
        let fenced = |status: &str| -> Valkey {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                "metadata": {"name": "a", "namespace": "ns", "generation": 1},
                "spec": {"replicas": 3, "image": "valkey/valkey:8.0"},
                "status": {"phase": "OK", "conditions": [{"type": "MasterFenced",
                    "status": status, "reason": "AuthorityNotProven",
                    "message": "a-0: AuthorityNotProven: since 2026-12-01T20:30:00Z",
                    "lastTransitionTime": "2026-12-01T20:30:01Z", "observedGeneration": 1}]}
            }))
            .unwrap()
        };
        writer.apply_watcher_event(&watcher::Event::InitDone);
        writer.apply_watcher_event(&watcher::Event::Apply(fenced("True")));
        let metrics = Metrics::new(Some(reader), "1.0.0");
        metrics
            .master_fences
            .get_or_create(&vec![
                ("namespace", "ns".to_owned()),
                ("name", "a".to_owned()),
                ("reason", "AuthorityNotProven".to_owned()),
            ])
            .inc();
        let text = metrics.encode().unwrap();
        for line in [
            // 2026-12-01T20:30:01Z
            r#"vko_valkey_master_fenced_since_seconds{namespace="ns",name="a",reason="AuthorityNotProven"} 1796157001"#,
            r#"vko_master_fences_total{namespace="ns",name="a",reason="AuthorityNotProven"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        writer.apply_watcher_event(&watcher::Event::Apply(fenced("False")));
        let text = metrics.encode().unwrap();
        assert!(
            !text.contains("vko_valkey_master_fenced_since_seconds{"),
            "no series once unfenced:\n{text}"
        );
    }

    fn valkey(namespace: &str, name: &str, phase: &str, ready: u32) -> Valkey {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": name, "namespace": namespace, "generation": 1},
            "spec": {"replicas": 3, "image": "valkey/valkey:8.0"},
            "status": {"phase": phase, "readyReplicas": ready}
        }))
        .unwrap()
    }

    #[test]
    fn every_valkey_gets_its_own_series() {
        let (reader, mut writer) = store::<Valkey>();
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(valkey("a", "one", "OK", 3)));
        writer.apply_watcher_event(&watcher::Event::InitApply(valkey("b", "two", "Pending", 1)));
        writer.apply_watcher_event(&watcher::Event::InitDone);
        let text = Metrics::new(Some(reader), "1.0.0").encode().unwrap();
        for line in [
            "vko_valkey_collector_success 1",
            r#"vko_valkey_status_phase{namespace="a",name="one",phase="OK"} 1"#,
            r#"vko_valkey_status_phase{namespace="b",name="two",phase="Pending"} 1"#,
            r#"vko_valkey_status_ready_replicas{namespace="a",name="one"} 3"#,
            r#"vko_valkey_status_ready_replicas{namespace="b",name="two"} 1"#,
            r#"vko_valkey_spec_replicas{namespace="b",name="two"} 3"#,
            r#"vko_valkey_status_observed_generation{namespace="b",name="two"} 0"#,
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
        // One phase series per resource: its current phase only.
        assert_eq!(text.matches("vko_valkey_status_phase{").count(), 2);
    }

    #[test]
    fn the_collector_fails_until_the_store_has_listed() {
        let without_store = Metrics::new(None, "1.0.0").encode().unwrap();
        assert!(without_store.contains("vko_valkey_collector_success 0\n"));
        assert!(
            without_store
                .contains(r#"vko_operator_build_info{version="1.0.0",commit="unknown"} 1"#)
        );

        let (reader, mut writer) = store::<Valkey>();
        let metrics = Metrics::new(Some(reader), "1.0.0");
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitApply(valkey("a", "one", "OK", 3)));
        let listing = metrics.encode().unwrap();
        assert!(
            listing.contains("vko_valkey_collector_success 0\n"),
            "{listing}"
        );
        assert!(!listing.contains("vko_valkey_status_phase{"), "{listing}");

        writer.apply_watcher_event(&watcher::Event::InitDone);
        let listed = metrics.encode().unwrap();
        assert!(
            listed.contains("vko_valkey_collector_success 1\n"),
            "{listed}"
        );
        assert!(
            listed.contains(r#"vko_valkey_status_phase{namespace="a",name="one",phase="OK"} 1"#)
        );
    }
}
