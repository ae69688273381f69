//! Prometheus on the testbed: Debian's `prometheus` server (2.42, installed with promtool by
//! `cargo xtask test`) run as a host process, its scrape configuration generated from the
//! `ServiceMonitor` objects in the cluster the way the Prometheus-Operator (v0.85,
//! `serviceDiscoveryRole: EndpointSlice`) generates it: one job per endpoint, the monitor's
//! namespaces, the Service selected by its labels and the port by name, and the same target labels
//! (`namespace`, `service`, `pod`, `container`, `job` = the Service, `endpoint` = the port name).
//!
//! Debian builds its Prometheus without Kubernetes service discovery (`kubernetes_sd_configs` is
//! not a field of its configuration), so the discovery is done here: [`endpointslice_targets`]
//! turns the EndpointSlices, Services and Pods into the target groups, with the `__meta_kubernetes_*`
//! labels Prometheus' `endpointslice` role gives them, in a file Prometheus reads
//! (`file_sd_configs`); the relabelling that selects and labels the targets runs in Prometheus. The Prometheus-Operator itself does not run
//! here (it would run Prometheus as a StatefulSet of its own images); its CRDs do
//! ([`install_crds`]), so the API server validates our ServiceMonitors and PrometheusRule against
//! the real schema.
//!
//! A ServiceMonitor using a field this translation does not know is refused, never half-read.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{Error, Result};
use crate::harness::{install_crd, wait_until};

/// The Prometheus-Operator release whose CRDs the testbed installs.
pub const PROMETHEUS_OPERATOR_VERSION: &str = "v0.85.0";
/// The CRDs taken from its module's `example/prometheus-operator-crd/`.
pub const CRD_FILES: [&str; 2] = [
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
];
/// The Prometheus server of Debian's `prometheus` package.
pub const PROMETHEUS_BINARY: &str = "/usr/bin/prometheus";
/// How often the generated configuration evaluates rules.
const EVALUATION_INTERVAL: &str = "5s";

/// `~/.cache/vko/prometheus-operator-<version>/`: the CRDs (`cargo xtask prometheus-operator
/// build`).
pub fn prometheus_operator_dir() -> PathBuf {
    crate::paths::cache_root().join(format!("prometheus-operator-{PROMETHEUS_OPERATOR_VERSION}"))
}

/// Installs (server-side applies) the ServiceMonitor and PrometheusRule CRDs from the cache.
pub async fn install_crds(client: &kube::Client) -> Result<()> {
    for file in CRD_FILES {
        let path = prometheus_operator_dir().join(file);
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
            what: format!(
                "reading {} (run `cargo xtask prometheus-operator build`)",
                path.display()
            ),
            source,
        })?;
        let crd: CustomResourceDefinition =
            serde_norway::from_str(&text).map_err(|e| Error::Invalid {
                what: path.display().to_string(),
                detail: e.to_string(),
            })?;
        install_crd(client, &crd).await?;
    }
    Ok(())
}

/// Deletes those CRDs (and with them every ServiceMonitor and PrometheusRule), so later tests
/// find the API groups as a cluster without the Prometheus-Operator has them.
pub async fn uninstall_crds(client: &kube::Client) -> Result<()> {
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for plural in ["servicemonitors", "prometheusrules"] {
        match crds
            .delete(
                &format!("{plural}.monitoring.coreos.com"),
                &kube::api::DeleteParams::background(),
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    Ok(())
}

/// A label name as Prometheus' Kubernetes discovery writes it into a meta label.
fn sanitized(label: &str) -> String {
    label
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// `text` as a literal inside a (RE2) regular expression.
fn regex_literal(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn invalid(monitor: &str, detail: impl Into<String>) -> Error {
    Error::Invalid {
        what: format!("ServiceMonitor {monitor}"),
        detail: detail.into(),
    }
}

/// The endpoint fields translated below; any other is refused.
const ENDPOINT_FIELDS: [&str; 6] = [
    "port",
    "path",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "scheme",
];

/// The scrape jobs of one ServiceMonitor (as the API server returns it), its targets discovered
/// in `targets_file` ([`endpointslice_targets`]).
pub fn scrape_configs(monitor: &Value, targets_file: &Path) -> Result<Vec<Value>> {
    let namespace = monitor["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let name = monitor["metadata"]["name"].as_str().unwrap_or_default();
    let id = format!("{namespace}/{name}");
    let spec = &monitor["spec"];
    if let Some(field) = spec.as_object().and_then(|spec| {
        spec.keys()
            .find(|key| !["selector", "namespaceSelector", "endpoints"].contains(&key.as_str()))
    }) {
        return Err(invalid(&id, format!("spec.{field} is not translated")));
    }
    let selector = &spec["selector"];
    if selector.get("matchExpressions").is_some() {
        return Err(invalid(&id, "selector.matchExpressions is not translated"));
    }
    let namespaces: Vec<String> = match &spec["namespaceSelector"] {
        Value::Null => vec![namespace.to_owned()],
        selector if selector["any"] == json!(true) => Vec::new(),
        selector => selector["matchNames"]
            .as_array()
            .map(|names| {
                names
                    .iter()
                    .filter_map(|n| n.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_else(|| vec![namespace.to_owned()]),
    };
    let discovery = json!({ "files": [targets_file.display().to_string()] });
    // What the Kubernetes discovery's `namespaces` would restrict to.
    let mut service_selection = Vec::new();
    if !namespaces.is_empty() {
        let names: Vec<String> = namespaces.iter().map(|n| regex_literal(n)).collect();
        service_selection.push(json!({
            "action": "keep",
            "source_labels": ["__meta_kubernetes_namespace"],
            "regex": format!("({})", names.join("|")),
        }));
    }
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            service_selection.push(json!({
                "action": "keep",
                "source_labels": [
                    format!("__meta_kubernetes_service_label_{}", sanitized(key)),
                    format!("__meta_kubernetes_service_labelpresent_{}", sanitized(key)),
                ],
                "regex": format!("({});true", regex_literal(value)),
            }));
        }
    }
    let endpoints = spec["endpoints"]
        .as_array()
        .filter(|e| !e.is_empty())
        .ok_or_else(|| invalid(&id, "no endpoints"))?;
    let mut jobs = Vec::new();
    for (index, endpoint) in endpoints.iter().enumerate() {
        if let Some(field) = endpoint.as_object().and_then(|e| {
            e.keys()
                .find(|key| !ENDPOINT_FIELDS.contains(&key.as_str()))
        }) {
            return Err(invalid(
                &id,
                format!("endpoints[{index}].{field} is not translated"),
            ));
        }
        let port = endpoint["port"]
            .as_str()
            .ok_or_else(|| invalid(&id, format!("endpoints[{index}] names no port")))?;
        let mut relabel = vec![json!({
            "source_labels": ["job"],
            "target_label": "__tmp_prometheus_job_name",
        })];
        relabel.extend(service_selection.iter().cloned());
        relabel.push(json!({
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
            "regex": regex_literal(port),
        }));
        for (kind, label) in [("Node", "node"), ("Pod", "pod")] {
            relabel.push(json!({
                "source_labels": [
                    "__meta_kubernetes_endpointslice_address_target_kind",
                    "__meta_kubernetes_endpointslice_address_target_name",
                ],
                "separator": ";",
                "regex": format!("{kind};(.*)"),
                "replacement": "${1}",
                "target_label": label,
            }));
        }
        for (source, target) in [
            ("__meta_kubernetes_namespace", "namespace"),
            ("__meta_kubernetes_service_name", "service"),
            ("__meta_kubernetes_pod_name", "pod"),
            ("__meta_kubernetes_pod_container_name", "container"),
        ] {
            relabel.push(json!({ "source_labels": [source], "target_label": target }));
        }
        relabel.push(json!({
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "(Failed|Succeeded)",
        }));
        relabel.push(json!({
            "source_labels": ["__meta_kubernetes_service_name"],
            "replacement": "${1}",
            "target_label": "job",
        }));
        relabel.push(json!({ "target_label": "endpoint", "replacement": port }));
        let mut job = json!({
            "job_name": format!("serviceMonitor/{id}/{index}"),
            "honor_labels": endpoint["honorLabels"].as_bool().unwrap_or(false),
            "file_sd_configs": [discovery.clone()],
            "metrics_path": endpoint["path"].as_str().unwrap_or("/metrics"),
            "scheme": endpoint["scheme"].as_str().unwrap_or("http"),
            "relabel_configs": relabel,
        });
        if let Some(interval) = endpoint["interval"].as_str() {
            job["scrape_interval"] = json!(interval);
        }
        if let Some(timeout) = endpoint["scrapeTimeout"].as_str() {
            job["scrape_timeout"] = json!(timeout);
        }
        jobs.push(job);
    }
    Ok(jobs)
}

/// The target groups Prometheus' Kubernetes `endpointslice` role would discover from these
/// objects: one per EndpointSlice port and endpoint address, with its `__meta_kubernetes_*`
/// labels (namespace, slice, port, address target, readiness; the Service's name and labels; the
/// Pod's name, IP, phase, node and the container whose port it is).
pub fn endpointslice_targets(
    slices: &[EndpointSlice],
    services: &[Service],
    pods: &[Pod],
) -> Vec<Value> {
    let mut groups = Vec::new();
    for slice in slices {
        let namespace = slice.metadata.namespace.clone().unwrap_or_default();
        let labels = slice.metadata.labels.clone().unwrap_or_default();
        let Some(service_name) = labels.get("kubernetes.io/service-name") else {
            continue;
        };
        let service = services.iter().find(|s| {
            s.metadata.name.as_deref() == Some(service_name.as_str())
                && s.metadata.namespace.as_deref() == Some(namespace.as_str())
        });
        for port in slice.ports.iter().flatten() {
            let number = port.port.unwrap_or_default();
            for endpoint in &slice.endpoints {
                let target = endpoint.target_ref.as_ref();
                let pod = target
                    .filter(|t| t.kind.as_deref() == Some("Pod"))
                    .and_then(|t| {
                        pods.iter().find(|p| {
                            p.metadata.name == t.name
                                && p.metadata.namespace.as_deref() == Some(namespace.as_str())
                        })
                    });
                for address in &endpoint.addresses {
                    let mut meta = serde_json::Map::new();
                    let mut set = |key: &str, value: String| {
                        meta.insert(format!("__meta_kubernetes_{key}"), json!(value));
                    };
                    set("namespace", namespace.clone());
                    set(
                        "endpointslice_name",
                        slice.metadata.name.clone().unwrap_or_default(),
                    );
                    set("endpointslice_address_type", slice.address_type.clone());
                    set("endpointslice_port", number.to_string());
                    set(
                        "endpointslice_port_name",
                        port.name.clone().unwrap_or_default(),
                    );
                    set(
                        "endpointslice_port_protocol",
                        port.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    );
                    let ready = endpoint
                        .conditions
                        .as_ref()
                        .and_then(|c| c.ready)
                        .unwrap_or(true);
                    set("endpointslice_endpoint_conditions_ready", ready.to_string());
                    if let Some(target) = target {
                        set(
                            "endpointslice_address_target_kind",
                            target.kind.clone().unwrap_or_default(),
                        );
                        set(
                            "endpointslice_address_target_name",
                            target.name.clone().unwrap_or_default(),
                        );
                    }
                    set("service_name", service_name.clone());
                    for (key, value) in service
                        .and_then(|s| s.metadata.labels.clone())
                        .unwrap_or_default()
                    {
                        set(&format!("service_label_{}", sanitized(&key)), value);
                        set(
                            &format!("service_labelpresent_{}", sanitized(&key)),
                            "true".into(),
                        );
                    }
                    if let Some(pod) = pod {
                        set("pod_name", pod.metadata.name.clone().unwrap_or_default());
                        let status = pod.status.as_ref();
                        set(
                            "pod_ip",
                            status.and_then(|s| s.pod_ip.clone()).unwrap_or_default(),
                        );
                        set(
                            "pod_phase",
                            status.and_then(|s| s.phase.clone()).unwrap_or_default(),
                        );
                        let spec = pod.spec.as_ref();
                        set(
                            "pod_node_name",
                            spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
                        );
                        let container = spec.and_then(|s| {
                            s.containers.iter().find(|c| {
                                c.ports.iter().flatten().any(|p| p.container_port == number)
                            })
                        });
                        if let Some(container) = container {
                            set("pod_container_name", container.name.clone());
                        }
                    }
                    groups.push(json!({
                        "targets": [format!("{address}:{number}")],
                        "labels": meta,
                    }));
                }
            }
        }
    }
    groups
}

/// [`endpointslice_targets`] of what the API server holds in `namespaces` now.
pub async fn discover(client: &kube::Client, namespaces: &[&str]) -> Result<Vec<Value>> {
    let (mut slices, mut services, mut pods) = (Vec::new(), Vec::new(), Vec::new());
    let params = kube::api::ListParams::default();
    for namespace in namespaces {
        slices.extend(
            kube::Api::<EndpointSlice>::namespaced(client.clone(), namespace)
                .list(&params)
                .await?
                .items,
        );
        services.extend(
            kube::Api::<Service>::namespaced(client.clone(), namespace)
                .list(&params)
                .await?
                .items,
        );
        pods.extend(
            kube::Api::<Pod>::namespaced(client.clone(), namespace)
                .list(&params)
                .await?
                .items,
        );
    }
    Ok(endpointslice_targets(&slices, &services, &pods))
}

/// The whole configuration: the jobs of every monitor ([`Prometheus::start`] adds the rule
/// files).
pub fn config(monitors: &[Value], targets_file: &Path) -> Result<Value> {
    let mut jobs = Vec::new();
    for monitor in monitors {
        jobs.extend(scrape_configs(monitor, targets_file)?);
    }
    Ok(json!({
        "global": { "evaluation_interval": EVALUATION_INTERVAL },
        "scrape_configs": jobs,
    }))
}

/// A running Prometheus on 127.0.0.1, its configuration and storage in a directory of its own;
/// killed and removed on drop.
pub struct Prometheus {
    child: tokio::process::Child,
    dir: PathBuf,
    port: u16,
}

impl Prometheus {
    /// Writes the configuration of `monitors` (their targets `targets`, from [`discover`]; `rules`,
    /// each a rule file's content) into a fresh directory and starts Prometheus on it; returns
    /// once it answers `/-/ready`.
    pub async fn start(
        monitors: &[Value],
        targets: &[Value],
        rules: &[Value],
    ) -> Result<Prometheus> {
        let dir = std::env::temp_dir().join(format!(
            "vko-prometheus-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let io = |what: String| move |source| Error::Io { what, source };
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        let targets_file = dir.join("targets.json");
        std::fs::write(&targets_file, Value::from(targets.to_vec()).to_string())
            .map_err(io(format!("writing {}", targets_file.display())))?;
        let mut config = config(monitors, &targets_file)?;
        let mut files = Vec::new();
        for (index, rule_file) in rules.iter().enumerate() {
            let path = dir.join(format!("rules-{index}.yaml"));
            // JSON is YAML.
            std::fs::write(&path, rule_file.to_string())
                .map_err(io(format!("writing {}", path.display())))?;
            files.push(json!(path.display().to_string()));
        }
        config["rule_files"] = json!(files);
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config.to_string())
            .map_err(io(format!("writing {}", config_path.display())))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(io("picking a free port".into()))?
            .port();
        let log = std::fs::File::create(dir.join("prometheus.log"))
            .map_err(io(format!("creating the log in {}", dir.display())))?;
        let log_err = log
            .try_clone()
            .map_err(io("duplicating the log file".into()))?;
        let child = tokio::process::Command::new(PROMETHEUS_BINARY)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .map_err(io(format!("starting {PROMETHEUS_BINARY}")))?;
        let mut prometheus = Prometheus { child, dir, port };
        let ready = wait_until(
            "Prometheus to be ready",
            Duration::from_secs(60),
            || async move { Ok(get(port, "/-/ready").await.ok().map(|_| ())) },
        )
        .await;
        if let Err(error) = ready {
            let exited = prometheus.child.try_wait().ok().flatten();
            return Err(Error::Other(format!(
                "{error} (exited: {exited:?}); its log:\n{}",
                prometheus.log()
            )));
        }
        Ok(prometheus)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/targets`: the active targets.
    pub async fn active_targets(&self) -> Result<Vec<Value>> {
        let body = api(self.port, "/api/v1/targets?state=active").await?;
        Ok(body["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// An instant query: the result vector.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let body = api(
            self.port,
            &format!("/api/v1/query?query={}", url_encoded(expr)),
        )
        .await?;
        Ok(body["result"].as_array().cloned().unwrap_or_default())
    }

    /// `GET /api/v1/rules`: the rule groups.
    pub async fn rule_groups(&self) -> Result<Vec<Value>> {
        let body = api(self.port, "/api/v1/rules").await?;
        Ok(body["groups"].as_array().cloned().unwrap_or_default())
    }

    /// Kills it and removes its directory.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // `stop` was not called (a failed test): kill_on_drop ends the process.
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Percent-encodes a query parameter's value.
fn url_encoded(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A Prometheus API call: its `data` (fails unless `status` is `success`).
async fn api(port: u16, path: &str) -> Result<Value> {
    let body = get(port, path).await?;
    let reply: Value = serde_json::from_str(&body).map_err(|e| Error::Invalid {
        what: format!("Prometheus' answer to {path}"),
        detail: format!("{e}: {body}"),
    })?;
    if reply["status"] != "success" {
        return Err(Error::Other(format!("Prometheus {path}: {reply}")));
    }
    Ok(reply["data"].clone())
}

/// `GET path` over HTTP/1.0 (no chunked encoding) with a timeout: the body of a 200.
async fn get(port: u16, path: &str) -> Result<String> {
    let what = format!("GET {path} on Prometheus (127.0.0.1:{port})");
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| Error::Timeout {
            what: what.clone(),
            seconds: 10,
        })?
        .map_err(|source| Error::Io {
            what: what.clone(),
            source,
        })?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(Error::Other(format!("{what}: {head}\n{body}")));
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monitor(endpoint: Value) -> Value {
        json!({
            "metadata": { "namespace": "ns", "name": "a-metrics" },
            "spec": {
                "selector": { "matchLabels": {
                    "app.kubernetes.io/instance": "a",
                    "vko.gtrfc.com/metrics": "true",
                } },
                "namespaceSelector": { "matchNames": ["ns"] },
                "endpoints": [endpoint],
            },
        })
    }

    #[test]
    fn a_monitor_becomes_an_endpointslice_job_keeping_its_services_port() {
        let jobs = scrape_configs(
            &monitor(json!({
                "port": "metrics", "path": "/metrics", "interval": "5s",
                "scrapeTimeout": "4s", "honorLabels": true,
            })),
            Path::new("/k"),
        )
        .unwrap();
        assert_eq!(jobs.len(), 1);
        let job = &jobs[0];
        assert_eq!(job["job_name"], "serviceMonitor/ns/a-metrics/0");
        assert_eq!(job["honor_labels"], true);
        assert_eq!(job["scrape_interval"], "5s");
        assert_eq!(job["scrape_timeout"], "4s");
        assert_eq!(job["file_sd_configs"], json!([{ "files": ["/k"] }]));
        let relabel = job["relabel_configs"].as_array().unwrap();
        let keeps: Vec<&Value> = relabel.iter().filter(|r| r["action"] == "keep").collect();
        assert_eq!(
            keeps
                .iter()
                .map(|r| (
                    r["source_labels"][0].as_str().unwrap(),
                    r["regex"].as_str().unwrap()
                ))
                .collect::<Vec<_>>(),
            [
                ("__meta_kubernetes_namespace", "(ns)"),
                (
                    "__meta_kubernetes_service_label_app_kubernetes_io_instance",
                    "(a);true"
                ),
                (
                    "__meta_kubernetes_service_label_vko_gtrfc_com_metrics",
                    "(true);true"
                ),
                ("__meta_kubernetes_endpointslice_port_name", "metrics"),
            ]
        );
        let targets: Vec<&str> = relabel
            .iter()
            .filter_map(|r| r["target_label"].as_str())
            .collect();
        for label in [
            "namespace",
            "service",
            "pod",
            "container",
            "job",
            "endpoint",
        ] {
            assert!(targets.contains(&label), "{label} missing: {targets:?}");
        }
    }

    #[test]
    fn defaults_and_namespaces_follow_the_prometheus_operator() {
        let mut any = monitor(json!({ "port": "http" }));
        any["spec"]["namespaceSelector"] = json!({ "any": true });
        let namespace_kept = |job: &Value| {
            job["relabel_configs"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| {
                    r["action"] == "keep" && r["source_labels"][0] == "__meta_kubernetes_namespace"
                })
                .map(|r| r["regex"].clone())
        };
        let job = &scrape_configs(&any, Path::new("/k")).unwrap()[0];
        assert_eq!(namespace_kept(job), None);
        assert_eq!(job["honor_labels"], false);
        assert_eq!(job["metrics_path"], "/metrics");
        assert!(job.get("scrape_interval").is_none());
        let mut own = monitor(json!({ "port": "http" }));
        own["spec"]
            .as_object_mut()
            .unwrap()
            .remove("namespaceSelector");
        let job = &scrape_configs(&own, Path::new("/k")).unwrap()[0];
        assert_eq!(namespace_kept(job), Some(json!("(ns)")));
    }

    #[test]
    fn endpointslices_become_the_target_groups_of_the_endpointslice_role() {
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": { "name": "a-metrics-x", "namespace": "ns",
                          "labels": { "kubernetes.io/service-name": "a-metrics" } },
            "addressType": "IPv4",
            "ports": [{ "name": "metrics", "port": 9121, "protocol": "TCP" }],
            "endpoints": [
                { "addresses": ["10.244.0.7"], "conditions": { "ready": true },
                  "targetRef": { "kind": "Pod", "name": "a-0", "namespace": "ns" } },
                { "addresses": ["10.244.0.8"], "conditions": { "ready": false },
                  "targetRef": { "kind": "Pod", "name": "a-1", "namespace": "ns" } },
            ],
        }))
        .unwrap();
        let service: Service = serde_json::from_value(json!({
            "metadata": { "name": "a-metrics", "namespace": "ns",
                          "labels": { "vko.gtrfc.com/metrics": "true" } },
        }))
        .unwrap();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": "a-0", "namespace": "ns" },
            "spec": { "nodeName": "node-1", "containers": [
                { "name": "valkey", "ports": [{ "containerPort": 6379 }] },
                { "name": "exporter", "ports": [{ "containerPort": 9121 }] },
            ] },
            "status": { "podIP": "10.244.0.7", "phase": "Running" },
        }))
        .unwrap();
        let groups = endpointslice_targets(&[slice], &[service], &[pod]);
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0]["targets"], json!(["10.244.0.7:9121"]));
        let labels = &groups[0]["labels"];
        for (key, value) in [
            ("namespace", "ns"),
            ("service_name", "a-metrics"),
            ("service_label_vko_gtrfc_com_metrics", "true"),
            ("service_labelpresent_vko_gtrfc_com_metrics", "true"),
            ("endpointslice_port_name", "metrics"),
            ("endpointslice_address_target_kind", "Pod"),
            ("endpointslice_address_target_name", "a-0"),
            ("endpointslice_endpoint_conditions_ready", "true"),
            ("pod_name", "a-0"),
            ("pod_phase", "Running"),
            ("pod_container_name", "exporter"),
        ] {
            assert_eq!(labels[format!("__meta_kubernetes_{key}")], value, "{key}");
        }
        // A pod not listed: no pod labels, but its slice's.
        assert_eq!(
            groups[1]["labels"]["__meta_kubernetes_endpointslice_endpoint_conditions_ready"],
            "false"
        );
        assert!(
            groups[1]["labels"]
                .get("__meta_kubernetes_pod_name")
                .is_none()
        );
    }

    #[test]
    fn a_field_it_does_not_translate_is_refused() {
        let tls = monitor(json!({ "port": "metrics", "tlsConfig": {} }));
        let error = scrape_configs(&tls, Path::new("/k"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("endpoints[0].tlsConfig"), "{error}");
        let mut expressions = monitor(json!({ "port": "metrics" }));
        expressions["spec"]["selector"]["matchExpressions"] = json!([]);
        assert!(scrape_configs(&expressions, Path::new("/k")).is_err());
        let mut job_label = monitor(json!({ "port": "metrics" }));
        job_label["spec"]["jobLabel"] = json!("x");
        assert!(scrape_configs(&job_label, Path::new("/k")).is_err());
    }

    #[test]
    fn label_values_are_matched_literally_and_queries_encoded() {
        assert_eq!(regex_literal("a.b*(c)"), r"a\.b\*\(c\)");
        assert_eq!(url_encoded(r#"up{job="a b"}"#), "up%7Bjob%3D%22a%20b%22%7D");
    }
}
