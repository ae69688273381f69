//! The disruption matrix (issue 15, ADR 0042) on the suite's testbed: every row of
//! `vko_e2e::matrix` that applies to a topology, on one cluster of that topology, one run each
//! (`VKO_MATRIX_RUNS`, `VKO_MATRIX_ROWS`, `VKO_MATRIX_TOPOLOGIES` for more or fewer); each run
//! prints its `MATRIX` line and the test fails when any run breaks its row's bound (lost writes,
//! two masters or two `-rw` endpoints, unwritable longer than allowed). `cargo xtask matrix` runs
//! these tests and writes `docs/disruption-matrix.md` from their lines.
//!
//! The rows of one topology run one after the other on its cluster (each starts from a healthy
//! cluster with its data flushed); the two topologies run alongside each other and the suite's
//! other tests. The exclusive rows (a node, the operator, the API server: faults every cluster on
//! the testbed shares) run in `exclusive_control_plane_and_node_faults`, alone on the testbed,
//! on one cluster of each topology. Needs the testbed's `vko.local/vko` image (see
//! operator_standalone).

use vko_e2e::{ha_support, matrix, matrix_run, operator_support};

use matrix::{Row, Topology};
use operator_support::OperatorTest;

/// A cluster of `topology` in a namespace of its own, healthy.
async fn cluster(topology: Topology, namespace_prefix: &str) -> anyhow::Result<OperatorTest> {
    let test = OperatorTest::start(namespace_prefix).await?;
    if let Err(error) = matrix_run::create(&test, topology).await {
        ha_support::dump_container_logs(&test.client(), test.ns(), 60).await;
        return Err(error);
    }
    Ok(test)
}

/// Measures run `run` of `row` on `test`'s cluster; a run that breaks its bound adds to `broken`,
/// one that cannot be measured fails.
async fn measure(
    test: &OperatorTest,
    topology: Topology,
    row: Row,
    run: usize,
    broken: &mut Vec<String>,
) -> anyhow::Result<()> {
    match matrix_run::measure(test, topology, row, run).await {
        Ok(measurement) => {
            println!("{}", measurement.line());
            if let Ok(path) = std::env::var(matrix::LOG_ENV) {
                use std::io::Write;
                let mut log = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)?;
                writeln!(log, "{}", measurement.line())?;
            }
            let violations = measurement.violations();
            eprintln!(
                "matrix {} {} run {run}: {measurement:?} {violations:?}",
                topology.label(),
                row.id()
            );
            broken.extend(
                violations
                    .into_iter()
                    .map(|v| format!("{} {} run {run}: {v}", topology.label(), row.id())),
            );
            Ok(())
        }
        Err(error) => {
            ha_support::dump_container_logs(&test.client(), test.ns(), 80).await;
            Err(error.context(format!("{} {} run {run}", topology.label(), row.id())))
        }
    }
}

/// Every planned run of every row of `topology` but the exclusive ones on one cluster; fails on
/// the first run that could not be measured, or at the end when any run broke its bound.
async fn run_matrix(topology: Topology, namespace_prefix: &str) -> anyhow::Result<()> {
    let (runs, rows) = matrix_run::plan(topology, false)?;
    if rows.is_empty() || !matrix_run::topologies()?.contains(&topology) {
        return Ok(());
    }
    let test = cluster(topology, namespace_prefix).await?;
    let mut broken = Vec::new();
    for run in 1..=runs {
        for &row in &rows {
            measure(&test, topology, row, run, &mut broken).await?;
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

/// The rows where the disks change what happens (every pod deleted at once, a crashed master
/// restarting with its files), on 3 + 3 with AOF and RDB on each data pod's PVC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_data_pods_and_three_sentinels_with_persistence() {
    run_matrix(Topology::Sentinel3x3Persistent, "mx-persist")
        .await
        .unwrap();
}

/// The rows a single copy meets, on 1 data pod + 3 Sentinels and then on a single pod without
/// Sentinel, both with persistence (without it a single pod's every restart starts empty, by
/// definition): one test, the two shapes one after the other — each is small and its rows few.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_data_pod_with_persistence() {
    run_matrix(Topology::Sentinel1x3Persistent, "mx-one-sentinel")
        .await
        .unwrap();
    run_matrix(Topology::SinglePersistent, "mx-one")
        .await
        .unwrap();
}

/// The exclusive rows (a node stopped, the operator killed or down, the API server restarted) on
/// a cluster of each topology, both created at once; the rows one at a time, each topology in
/// turn. Exclusive: these faults hit every cluster on the testbed and the shared operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_control_plane_and_node_faults() {
    let mut planned = Vec::new();
    for topology in matrix_run::topologies().unwrap() {
        let (runs, rows) = matrix_run::plan(topology, true).unwrap();
        if !rows.is_empty() {
            planned.push((topology, runs, rows));
        }
    }
    let clusters = futures::future::try_join_all(planned.iter().map(|(topology, _, _)| {
        let prefix = match topology {
            Topology::Sentinel3x3 => "mx-x-sentinel",
            Topology::Lease3 => "mx-x-lease",
            Topology::Sentinel3x3Persistent => "mx-x-persist",
            Topology::Sentinel1x3Persistent => "mx-x-one-sentinel",
            Topology::SinglePersistent => "mx-x-one",
        };
        cluster(*topology, prefix)
    }))
    .await
    .unwrap();
    let most_runs = planned.iter().map(|(_, runs, _)| *runs).max().unwrap_or(0);
    let mut broken = Vec::new();
    for run in 1..=most_runs {
        for row in Row::ALL {
            for ((topology, runs, rows), test) in planned.iter().zip(&clusters) {
                if run <= *runs && rows.contains(&row) {
                    measure(test, *topology, row, run, &mut broken)
                        .await
                        .unwrap();
                }
            }
        }
    }
    if !broken.is_empty() {
        for test in &clusters {
            ha_support::dump_container_logs(&test.client(), test.ns(), 80).await;
        }
        panic!("bounds broken: {broken:#?}");
    }
    for test in clusters {
        test.cleanup().await.unwrap();
    }
}
