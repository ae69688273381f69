//! Shared by the `helm_*` end-to-end tests: real helm against the testbed (its own config and cache
//! directories, removed afterwards), the in-cluster operator's pod, and raw access to what etcd
//! stores for a `Valkey` (the API server fills CRD defaults into everything it returns, so only etcd
//! shows whether a default is stored).

use crate::ha_support::pod_is_ready;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;
use vko_testbed::harness::{HELM_BIN_ENV, helm_binary};

/// The testbed's etcd (plain HTTP on loopback; its JSON gateway speaks base64 keys and values).
const ETCD: &str = "http://127.0.0.1:12379";
/// Where the API server keeps `Valkey` objects in etcd (`--etcd-prefix` is the default /registry).
const VALKEY_KEY_PREFIX: &str = "/registry/vko.gtrfc.com/valkeys";

/// A private HELM_* home under the temp directory, unique within this process: tests that run at
/// the same time must not share one (each removes its own when it is done).
fn private_home(what: &str) -> PathBuf {
    static HOMES: AtomicUsize = AtomicUsize::new(0);
    let n = HOMES.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("vko-helm-e2e-{what}{}-{n}", std::process::id()))
}

/// helm with the testbed's kubeconfig and a private HELM_* home (removed on drop).
pub struct Helm {
    binary: PathBuf,
    kubeconfig: PathBuf,
    home: PathBuf,
}

impl Helm {
    pub fn new(kubeconfig: &Path) -> anyhow::Result<Helm> {
        let binary = helm_binary();
        if !binary.is_file() {
            bail!(
                "helm is missing at {}: run `cargo xtask helm build` (or set {HELM_BIN_ENV})",
                binary.display()
            );
        }
        let home = private_home("");
        std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
        Ok(Helm {
            binary,
            kubeconfig: kubeconfig.to_path_buf(),
            home,
        })
    }

    /// Runs helm; fails with its output unless it succeeds.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<String> {
        let output = tokio::process::Command::new(&self.binary)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("running helm {}", args.join(" ")))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "helm {} failed ({}):\n{stdout}\n{}",
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(stdout)
    }
}

impl Drop for Helm {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Uninstalls a release when dropped (also when the test fails or panics), so an in-cluster operator
/// never outlives its test: it would keep the shared leader Lease and stall every other operator.
pub struct ReleaseGuard {
    binary: PathBuf,
    kubeconfig: PathBuf,
    release: String,
    namespace: String,
}

impl ReleaseGuard {
    pub fn new(helm: &Helm, release: &str, namespace: &str) -> ReleaseGuard {
        ReleaseGuard {
            binary: helm.binary.clone(),
            kubeconfig: helm.kubeconfig.clone(),
            release: release.to_owned(),
            namespace: namespace.to_owned(),
        }
    }
}

impl Drop for ReleaseGuard {
    fn drop(&mut self) {
        // Blocking on purpose: Drop cannot await, and the uninstall must finish before the
        // namespaces go. `--ignore-not-found`: a passing test uninstalled it already.
        let home = private_home("guard-");
        let _ = std::process::Command::new(&self.binary)
            .args(["uninstall", &self.release, "--namespace", &self.namespace])
            .args(["--ignore-not-found", "--wait", "--timeout", "60s"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .status();
        let _ = std::fs::remove_dir_all(&home);
    }
}

/// The chart in this repository.
pub fn chart() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/valkey-operator")
}

/// `--set` arguments for a list of `key=value`.
pub fn set_args(values: &[&str]) -> Vec<String> {
    values
        .iter()
        .flat_map(|value| ["--set".to_owned(), (*value).to_owned()])
        .collect()
}

/// How long a pod that holds the leader Lease may stay not Ready before the wait gives up: its
/// watches list within seconds, and while it leads without reconciling it stalls every other
/// operator on the testbed.
const LEADING_BUT_NOT_READY: Duration = Duration::from_secs(90);

/// Waits for the leading operator pod of `release` (Ready and the holder of the leader Lease
/// `lease`: a leader is Ready once its watches have listed; a standby is Ready too) and returns
/// its name. Fails early when one of its pods holds the Lease but does not become Ready (the
/// failure names the pod's state).
pub async fn wait_for_ready_operator(
    client: &kube::Client,
    namespace: &str,
    release: &str,
    lease: (&str, &str),
    timeout: Duration,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let leases: Api<Lease> = Api::namespaced(client.clone(), lease.0);
    let selector =
        format!("app.kubernetes.io/name=valkey-operator,app.kubernetes.io/instance={release}");
    let started = std::time::Instant::now();
    let mut leading_since: Option<(String, std::time::Instant)> = None;
    loop {
        let list = pods.list(&ListParams::default().labels(&selector)).await?;
        let holder = leases
            .get_opt(lease.1)
            .await?
            .and_then(|lease| lease.spec)
            .and_then(|spec| spec.holder_identity);
        if let Some(pod) = list.items.iter().find(|pod| {
            pod_is_ready(pod)
                && pod.metadata.deletion_timestamp.is_none()
                && holder.as_deref() == Some(pod.name_any().as_str())
        }) {
            return Ok(pod.name_any());
        }
        let ours = holder.filter(|holder| list.items.iter().any(|pod| &pod.name_any() == holder));
        match (&ours, &leading_since) {
            (Some(pod), Some((since_pod, since))) if pod == since_pod => {
                if since.elapsed() > LEADING_BUT_NOT_READY {
                    let state = list
                        .items
                        .iter()
                        .find(|candidate| &candidate.name_any() == pod)
                        .and_then(|candidate| candidate.status.clone());
                    bail!(
                        "operator pod {pod} holds the Lease but is not Ready after {} s: {state:#?}",
                        LEADING_BUT_NOT_READY.as_secs()
                    );
                }
            }
            (Some(pod), _) => leading_since = Some((pod.clone(), std::time::Instant::now())),
            (None, _) => leading_since = None,
        }
        if started.elapsed() > timeout {
            bail!(
                "no Ready operator pod of release {release} within {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// etcd
// ---------------------------------------------------------------------------------------------

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn base64_decode(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut buffer = 0u32;
    let mut bits = 0;
    for c in text.bytes().filter(|c| *c != b'=') {
        let value = BASE64
            .iter()
            .position(|b| *b == c)
            .with_context(|| format!("{:?} is not base64", c as char))? as u32;
        buffer = (buffer << 6) | value;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

async fn etcd_call(path: &str, body: &Value) -> anyhow::Result<Value> {
    let output = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--fail",
            "-X",
            "POST",
            &format!("{ETCD}{path}"),
            "-d",
        ])
        .arg(body.to_string())
        .output()
        .await
        .context("running curl against etcd")?;
    if !output.status.success() {
        bail!(
            "etcd {path} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("reading etcd's reply")
}

fn valkey_key(namespace: &str, name: &str) -> String {
    format!("{VALKEY_KEY_PREFIX}/{namespace}/{name}")
}

/// The `Valkey` exactly as etcd stores it (no defaults filled in by a read).
pub async fn stored_valkey(namespace: &str, name: &str) -> anyhow::Result<Value> {
    let key = valkey_key(namespace, name);
    let reply = etcd_call(
        "/v3/kv/range",
        &serde_json::json!({"key": base64_encode(key.as_bytes())}),
    )
    .await?;
    let value = reply["kvs"][0]["value"]
        .as_str()
        .with_context(|| format!("etcd holds no {key}"))?;
    serde_json::from_slice(&base64_decode(value)?).context("the stored Valkey is not JSON")
}

/// Overwrites what etcd stores for a `Valkey`, bypassing the API server (as if it had been written
/// under an older CRD). The API server's watch sees the change like any other.
pub async fn store_valkey_raw(namespace: &str, name: &str, object: &Value) -> anyhow::Result<()> {
    let key = valkey_key(namespace, name);
    etcd_call(
        "/v3/kv/put",
        &serde_json::json!({
            "key": base64_encode(key.as_bytes()),
            "value": base64_encode(object.to_string().as_bytes()),
        }),
    )
    .await?;
    Ok(())
}

/// The `spec` fields that carry a structural default in vko-api's CRD (top level of spec).
pub fn defaulted_spec_fields() -> Vec<String> {
    let crd = serde_json::to_value(vko_api::crd()).unwrap_or_default();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        .as_object()
        .map(|properties| {
            properties
                .iter()
                .filter(|(_, schema)| schema.get("default").is_some())
                .map(|(name, _)| name.clone())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_and_matches_known_values() {
        assert_eq!(base64_encode(b"/registry"), "L3JlZ2lzdHJ5");
        assert_eq!(base64_encode(b"ab"), "YWI=");
        assert_eq!(base64_encode(b"a"), "YQ==");
        for text in ["", "a", "ab", "abc", "abcd", "{\"spec\":{}}"] {
            assert_eq!(
                base64_decode(&base64_encode(text.as_bytes())).unwrap(),
                text.as_bytes()
            );
        }
    }
}
