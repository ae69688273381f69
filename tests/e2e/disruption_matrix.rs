//! The disruption matrix (issue 15, ADR 0042) on the suite's testbed: every row of
//! `vko_e2e::matrix` that applies to a topology, on one cluster of that topology, one run each
//! (`VKO_MATRIX_RUNS`, `VKO_MATRIX_ROWS` for more or fewer); each run prints its `MATRIX` line
//! and the test fails when any run breaks its row's bound (lost writes, two masters or two `-rw`
//! endpoints, unwritable longer than allowed). `cargo xtask matrix` runs these tests and writes
//! `docs/disruption-matrix.md` from their lines.
//!
//! The rows of one topology run one after the other on its cluster (each starts from a healthy
//! cluster with its data flushed); the two topologies run alongside each other and the suite's
//! other tests. Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, matrix, matrix_run, operator_support};

use matrix::Topology;
use operator_support::OperatorTest;

/// Every planned run of every row of `topology` on one cluster; fails on the first run that could
/// not be measured, or at the end when any run broke its bound.
async fn run_matrix(topology: Topology, namespace_prefix: &str) -> anyhow::Result<()> {
    let (runs, rows) = matrix_run::plan(topology)?;
    let test = OperatorTest::start(namespace_prefix).await?;
    if let Err(error) = matrix_run::create(&test, topology).await {
        ha_support::dump_container_logs(&test.client(), test.ns(), 60).await;
        return Err(error);
    }
    let mut broken = Vec::new();
    for run in 1..=runs {
        for &row in &rows {
            match matrix_run::measure(&test, topology, row, run).await {
                Ok(measurement) => {
                    println!("{}", measurement.line());
                    let violations = measurement.violations();
                    eprintln!(
                        "matrix {} {} run {run}: {measurement:?} {violations:?}",
                        topology.label(),
                        row.id()
                    );
                    broken.extend(
                        violations
                            .into_iter()
                            .map(|v| format!("{} run {run}: {v}", row.id())),
                    );
                }
                Err(error) => {
                    ha_support::dump_container_logs(&test.client(), test.ns(), 80).await;
                    return Err(error.context(format!(
                        "{} {} run {run}",
                        topology.label(),
                        row.id()
                    )));
                }
            }
        }
    }
    if !broken.is_empty() {
        ha_support::dump_container_logs(&test.client(), test.ns(), 80).await;
        anyhow::bail!("bounds broken on {}: {broken:#?}", topology.label());
    }
    test.cleanup().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_data_pods_and_three_sentinels() {
    run_matrix(Topology::Sentinel3x3, "mx-sentinel")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_data_pods_without_sentinel() {
    run_matrix(Topology::Lease3, "mx-lease").await.unwrap();
}
