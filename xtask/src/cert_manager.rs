//! `cargo xtask cert-manager build | path`: cert-manager, built from its Go module
//! (`xtask/cert-manager`, which pins github.com/cert-manager/cert-manager and every dependency in
//! go.sum) into `~/.cache/vko/cert-manager-<version>/`: `bin/` holds the controller, webhook and
//! cainjector, `chart/` its Helm chart assembled from the module the way its release does
//! (`make/manifests.mk`). The testbed installs that chart with helm, and its kubelet runs the
//! `quay.io/jetstack/cert-manager-*` images from `bin/`. `cargo xtask test` builds it when missing.

use std::path::{Path, PathBuf};

use anyhow::Context;
use vko_testbed::kubelet::images::{CERT_MANAGER_VERSION, cert_manager_dir};

use crate::go_cache::{GoModule, ToolArgs};

pub type Args = ToolArgs;

pub fn run(args: Args) -> anyhow::Result<()> {
    args.run(build, GO_MODULE.binary_path())
}

/// Builds cert-manager into the cache when missing; returns the cache directory.
pub fn build() -> anyhow::Result<PathBuf> {
    GO_MODULE.build_cached()?;
    Ok(cert_manager_dir())
}

/// Its Go module, `xtask/cert-manager`.
pub const GO_MODULE: GoModule = GoModule {
    name: "cert-manager",
    dir: "cert-manager",
    module: "github.com/cert-manager/cert-manager",
    version: CERT_MANAGER_VERSION,
    binary: "bin/controller",
    build_note: " (three binaries: 2 min 47 s on 2 cores from empty Go caches)",
    cache_dir: cert_manager_dir,
    ldflags,
    packages: &[
        "github.com/cert-manager/cert-manager/cmd/controller",
        "github.com/cert-manager/cert-manager/cmd/webhook",
        "github.com/cert-manager/cert-manager/cmd/cainjector",
    ],
    bin_subdir: "bin",
    after_build: Some(assemble_chart),
};

/// The `-X` stamps of its release build (`pkg/util/version.go`; the controller logs them and
/// sets them in its User-Agent).
fn ldflags() -> String {
    format!(
        "-s -w -X github.com/cert-manager/cert-manager/pkg/util.AppVersion={CERT_MANAGER_VERSION} \
         -X github.com/cert-manager/cert-manager/pkg/util.AppGitState=clean"
    )
}

/// The chart's source in the module, and the CRDs its release concatenates into it.
const CHART_SOURCE: &str = "deploy/charts/cert-manager";
const CRDS_SOURCE: &str = "deploy/crds";

/// `chart/` in the cache: the module's chart with the files its release generates — `Chart.yaml`
/// from `Chart.template.yaml` with the version set, and `templates/crds.yaml`, every CRD of
/// `deploy/crds` between `{{- if .Values.installCRDs }}` and `{{- end }}`.
fn assemble_chart(module_source: &Path, staging: &Path) -> anyhow::Result<()> {
    let source = module_source.join(CHART_SOURCE);
    let chart = staging.join("chart");
    let templates = chart.join("templates");
    std::fs::create_dir_all(&templates)
        .with_context(|| format!("creating {}", templates.display()))?;
    let read = |path: &Path| {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
    };
    let write = |path: &Path, text: &str| {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(
        &chart.join("Chart.yaml"),
        &chart_yaml(&read(&source.join("Chart.template.yaml"))?),
    )?;
    write(
        &chart.join("values.yaml"),
        &read(&source.join("values.yaml"))?,
    )?;
    for entry in std::fs::read_dir(source.join("templates"))
        .with_context(|| format!("listing {}", source.join("templates").display()))?
    {
        let path = entry?.path();
        if let Some(name) = path.file_name() {
            write(&templates.join(name), &read(&path)?)?;
        }
    }
    let crds_dir = module_source.join(CRDS_SOURCE);
    let mut crd_files: Vec<PathBuf> = std::fs::read_dir(&crds_dir)
        .with_context(|| format!("listing {}", crds_dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    crd_files.sort();
    let crds = crd_files
        .iter()
        .map(|path| read(path))
        .collect::<anyhow::Result<Vec<String>>>()?;
    anyhow::ensure!(!crds.is_empty(), "no CRDs in {}", crds_dir.display());
    write(&templates.join("crds.yaml"), &crds_template(&crds))?;
    Ok(())
}

/// `Chart.template.yaml` with `version` and `appVersion` set to the release and the prerelease
/// annotation resolved (its release tool sets the same three with yq).
fn chart_yaml(template: &str) -> String {
    template
        .lines()
        .map(|line| {
            if line.starts_with("version:") {
                format!("version: {CERT_MANAGER_VERSION}")
            } else if line.starts_with("appVersion:") {
                format!("appVersion: {CERT_MANAGER_VERSION}")
            } else {
                line.replace("\"{{IS_PRERELEASE}}\"", "\"false\"")
            }
        })
        .map(|line| line + "\n")
        .collect()
}

/// The CRDs as one template, shown only with `installCRDs=true` (`hack/concat-yaml.sh`: documents
/// joined by `---`).
fn crds_template(crds: &[String]) -> String {
    let mut out = String::from("{{- if .Values.installCRDs }}\n");
    for crd in crds {
        out.push_str("---\n");
        out.push_str(crd.trim_end());
        out.push('\n');
    }
    out.push_str("{{- end }}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_gets_the_release_version_and_no_template_placeholder() {
        let template = "apiVersion: v1\nname: cert-manager\nversion: v0.1.0\nappVersion: v0.1.0\n\
                        annotations:\n  artifacthub.io/prerelease: \"{{IS_PRERELEASE}}\"\n";
        let chart = chart_yaml(template);
        assert!(chart.contains("\nversion: v1.11.5\n"), "{chart}");
        assert!(chart.contains("\nappVersion: v1.11.5\n"), "{chart}");
        assert!(
            chart.contains("artifacthub.io/prerelease: \"false\""),
            "{chart}"
        );
        assert!(!chart.contains("{{"), "{chart}");
    }

    #[test]
    fn the_crds_are_one_document_each_inside_the_install_crds_guard() {
        let crds = ["kind: A\n".to_owned(), "kind: B\n\n".to_owned()];
        assert_eq!(
            crds_template(&crds),
            "{{- if .Values.installCRDs }}\n---\nkind: A\n---\nkind: B\n{{- end }}\n"
        );
    }
}
