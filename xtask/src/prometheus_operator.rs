//! `cargo xtask prometheus-operator build | path`: the Prometheus-Operator's ServiceMonitor and
//! PrometheusRule CRDs, taken from its Go module (`example/prometheus-operator-crd/`) into
//! `~/.cache/vko/prometheus-operator-<version>/`. `go mod download` checks the module against the
//! Go checksum database, and the hash is pinned here too (go.sum's `h1:` line), so a changed
//! module is refused. The testbed installs the CRDs for the tests that render ServiceMonitors and
//! the chart's PrometheusRule (`vko_testbed::prometheus::install_crds`). Only the CRDs: the
//! operator itself does not run (see `vko_testbed::prometheus`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, bail};
use vko_testbed::prometheus::{CRD_FILES, PROMETHEUS_OPERATOR_VERSION, prometheus_operator_dir};

use crate::go_cache::{CachedTool, ToolArgs};

pub type Args = ToolArgs;

const MODULE: &str = "github.com/prometheus-operator/prometheus-operator";
/// The module zip's hash as go.sum records it.
const MODULE_SUM: &str = "h1:M5xLCLEoaW2IJfnuCwFzzpL+jSVQu3KGT84Pye+fW8s=";
/// Where the module keeps the CRDs (without the `-full` variants' extra descriptions).
const CRD_DIR: &str = "example/prometheus-operator-crd";

fn cached() -> CachedTool<'static> {
    CachedTool {
        name: "prometheus-operator CRDs",
        version: PROMETHEUS_OPERATOR_VERSION,
        dir: prometheus_operator_dir(),
        binary: CRD_FILES[0],
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    args.run(build, cached().binary_path())
}

/// Fetches the CRDs into the cache when missing; returns the cache directory.
pub fn build() -> anyhow::Result<PathBuf> {
    cached().build_with(|staging| {
        let started = Instant::now();
        let source = download(staging)?;
        for file in CRD_FILES {
            let from = source.join(CRD_DIR).join(file);
            std::fs::copy(&from, staging.join(file))
                .with_context(|| format!("copying {}", from.display()))?;
        }
        Ok(started.elapsed())
    })?;
    Ok(prometheus_operator_dir())
}

/// `go mod download` of the pinned module (run in the empty `staging` directory, outside any Go
/// module); returns its directory in Go's module cache.
fn download(staging: &Path) -> anyhow::Result<PathBuf> {
    let output = Command::new("go")
        .current_dir(staging)
        .args(["mod", "download", "-json"])
        .arg(format!("{MODULE}@{PROMETHEUS_OPERATOR_VERSION}"))
        .stdin(Stdio::null())
        .output()
        .context("could not start `go` (is Go installed and on PATH?)")?;
    let reply: serde_json::Value = serde_json::from_slice(&output.stdout).with_context(|| {
        format!(
            "go mod download {MODULE}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })?;
    if !output.status.success() || reply.get("Error").is_some() {
        bail!("go mod download {MODULE}@{PROMETHEUS_OPERATOR_VERSION} failed: {reply}");
    }
    if reply["Sum"] != MODULE_SUM {
        bail!(
            "{MODULE}@{PROMETHEUS_OPERATOR_VERSION} has hash {}, not the pinned {MODULE_SUM}",
            reply["Sum"]
        );
    }
    reply["Dir"]
        .as_str()
        .map(PathBuf::from)
        .context("go mod download named no directory")
}
