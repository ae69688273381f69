//! Project automation: `cargo xtask gen-crd | testbed | helm | exporter | valkey | alerts | image |
//! test | demo | bench | matrix`.

mod alerts;
mod bench;
mod bench_fence;
mod bench_fleet;
mod bench_min_replicas;
mod bench_switchover;
mod cert_manager;
mod demo;
mod exporter;
mod gen_crd;
mod go_cache;
mod helm;
mod image;
mod kube_router;
mod matrix;
mod prometheus_operator;
mod test;
mod testbed;
mod valkey;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "vko project automation")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CRD into the Helm chart and the CRD reference into docs/ (or check them with --check).
    GenCrd(gen_crd::Args),
    /// Build, start, inspect and stop the local testbed Kubernetes.
    Testbed(testbed::Args),
    /// Build helm from its Go module into ~/.cache/vko (cached by version), or print its path.
    Helm(helm::Args),
    /// Build redis_exporter (the metrics sidecar the testbed runs) from its Go module into ~/.cache/vko.
    Exporter(exporter::Args),
    /// Build cert-manager (controller, webhook, cainjector) and assemble its Helm chart from its Go
    /// module into ~/.cache/vko; the testbed installs it.
    CertManager(cert_manager::Args),
    /// Build kube-router (the testbed's NetworkPolicy engine, firewall only) from its Go module into
    /// ~/.cache/vko; the testbed runs it.
    KubeRouter(kube_router::Args),
    /// Fetch the Prometheus-Operator's ServiceMonitor and PrometheusRule CRDs from its Go module into
    /// ~/.cache/vko; the tests install them.
    PrometheusOperator(prometheus_operator::Args),
    /// The chart's alert rules: `promtool check rules` and `promtool test rules` (xtask/alerts/).
    Alerts(alerts::Args),
    /// Build the Valkey releases the testbed maps besides the host's (8.1.1, 9.1.2) from Debian's
    /// source packages into ~/.cache/vko.
    Valkey(valkey::Args),
    /// The vko image, without a registry: release binaries on a base of pinned Debian packages,
    /// committed with buildah as vko.local/vko:<version>, then run with podman.
    Image(image::Args),
    /// The README's test command: install prerequisites, unit tests, then end-to-end tests on a testbed.
    Test(test::Args),
    /// The README's "run it" command: a local cluster, the operator, and an HA Valkey reaching OK.
    Demo(demo::Args),
    /// Benchmarks that print reports.
    Bench(bench::Args),
    /// The disruption matrix: every fault of docs/disruption-matrix.md measured on the testbed
    /// under writes through `<name>-rw`, and that page written from the runs.
    Matrix(matrix::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::GenCrd(args) => gen_crd::run(args),
        Command::Testbed(args) => testbed::run(args),
        Command::Helm(args) => helm::run(args),
        Command::Exporter(args) => exporter::run(args),
        Command::CertManager(args) => cert_manager::run(args),
        Command::KubeRouter(args) => kube_router::run(args),
        Command::PrometheusOperator(args) => prometheus_operator::run(args),
        Command::Alerts(args) => alerts::run(args),
        Command::Valkey(args) => valkey::run(args),
        Command::Image(args) => image::run(args),
        Command::Test(args) => test::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Matrix(args) => matrix::run(args),
    }
}
