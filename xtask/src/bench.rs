//! `cargo xtask bench`: benchmarks that print a small report.

use std::time::{Duration, Instant};

use anyhow::Context;
use vko_testbed::controlplane::{self, BuildOutcome, format_duration};
use vko_testbed::paths::{self, Paths};

use crate::{bench_fence, bench_fleet, bench_min_replicas, bench_switchover, testbed};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(clap::Subcommand)]
enum Bench {
    /// Go-build time of the control-plane binaries and warm start-to-ready time of the testbed.
    Testbed {
        /// Time a cold build (empty GOCACHE, into a temp dir); takes many minutes on 2 cores.
        #[arg(long)]
        cold: bool,
        /// How many up/down cycles to time (the median is reported).
        #[arg(long, default_value_t = 3)]
        cycles: usize,
    },
    /// Rolling updates under two writers (one following the master by pod IP, one through
    /// `<name>-rw`'s ClusterIP), for 3 data + 3 Sentinel and 3 without Sentinel, per Valkey
    /// release: total roll time and each writer's gap at each master switchover. Uses the running
    /// testbed (starts one, and stops it afterwards, only when none runs).
    Roll {
        /// Rolls per topology and release.
        #[arg(long, default_value_t = 5)]
        rolls: u32,
        /// `valkey/valkey` tags to roll, side by side (the testbed runs 8.0, 8.1 and 9.x).
        #[arg(long, value_delimiter = ',', default_value = "8.0")]
        versions: Vec<String>,
    },
    /// Master fencing under two writers (one inside the master's network namespace, one through
    /// `-rw`): per topology (3 data + 3 Sentinel, 3 without Sentinel) and fault (SIGSTOP of the
    /// master's valkey, partition of its pod), the fence time, the lost-write window and the time
    /// to Phase OK after the fault. One cluster per topology; uses the running testbed like `roll`.
    Fence(bench_fence::Args),
    /// What Valkey's own `min-replicas-to-write` would add to the self-fence and what it costs:
    /// real `valkey-server` master + replica on 127.0.0.1 (no testbed), per `min-replicas-max-lag`
    /// how long a master cut off from its replica keeps acknowledging, and how long a replica
    /// restart makes the master refuse every write.
    MinReplicas(bench_min_replicas::Args),
    /// A planned switchover with Sentinel as a Sentinel-aware client sees it, per Valkey release,
    /// on real processes on 127.0.0.1 (no testbed): vko's switchover, and on Valkey 9 also
    /// `SENTINEL FAILOVER ... COORDINATED`; write gap, promotion and naming times, lost writes.
    Switchover(bench_switchover::Args),
    /// Fleet scale (issue 20): the chart's in-cluster operator, release binaries in every pod, N
    /// Valkeys applied at once for each N; time to all OK, then a steady state: the operator's
    /// and the sidecars' API requests and writes per minute (from the audit log), RSS and CPU.
    /// Starts a testbed of its own (its pods run target/release) and stops it afterwards.
    Fleet(bench_fleet::Args),
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.bench {
        Bench::Testbed { cold, cycles } => bench_testbed(cold, cycles.max(1)),
        Bench::Roll { rolls, versions } => bench_roll(rolls.max(1), &versions),
        Bench::Fence(args) => bench_fence::run(args),
        Bench::MinReplicas(args) => bench_min_replicas::run(args),
        Bench::Switchover(args) => bench_switchover::run(args),
        Bench::Fleet(args) => bench_fleet::run(args),
    }
}

fn bench_testbed(cold: bool, cycles: usize) -> anyhow::Result<()> {
    paths::require_root()?;
    let paths = Paths::from_env();
    testbed::refuse_if_running(&paths)?;
    let go_module = testbed::repo_root().join("xtask").join("k8s");

    let build_line = if cold {
        let scratch = paths::cache_root().join(format!("bench-cold-{}", std::process::id()));
        let result = cold_build(&go_module, &scratch);
        // The scratch GOCACHE and binaries are large; never leave them behind.
        let _ = std::fs::remove_dir_all(&scratch);
        format!(
            "cold build (empty GOCACHE, 5 binaries): {}",
            format_duration(result?)
        )
    } else {
        let started = Instant::now();
        let outcome = controlplane::build_binaries(&go_module, &paths::bin_dir(), &[])?;
        let elapsed = started.elapsed();
        match outcome {
            BuildOutcome::AlreadyBuilt => {
                format!(
                    "warm check (cache complete, nothing built): {}",
                    format_duration(elapsed)
                )
            }
            BuildOutcome::Built { .. } => {
                format!(
                    "build (cache was incomplete, warm GOCACHE): {}",
                    format_duration(elapsed)
                )
            }
        }
    };
    testbed::build()?;

    let mut starts: Vec<Duration> = Vec::new();
    for cycle in 1..=cycles {
        println!("\n--- cycle {cycle}/{cycles}: up");
        // A failed start cleans up after itself; a testbed someone else started is left alone.
        let elapsed = testbed::start_built(&paths)?;
        println!("--- cycle {cycle}/{cycles}: down");
        let stopped = Instant::now();
        testbed::down()?;
        println!(
            "--- start-to-ready {}, down {}",
            format_duration(elapsed),
            format_duration(stopped.elapsed())
        );
        starts.push(elapsed);
    }
    starts.sort();
    let median = starts[starts.len() / 2];

    println!();
    println!(
        "testbed benchmark (Kubernetes {}, {} CPUs)",
        paths::KUBERNETES_VERSION,
        cpu_count()
    );
    println!("  Go binaries: {build_line}");
    println!(
        "  warm start-to-ready: median {} of {} cycles ({})",
        format_duration(median),
        starts.len(),
        starts
            .iter()
            .map(|start| format_duration(*start))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}

fn cold_build(go_module: &std::path::Path, scratch: &std::path::Path) -> anyhow::Result<Duration> {
    let gocache = scratch.join("gocache");
    std::fs::create_dir_all(&gocache).with_context(|| format!("creating {}", gocache.display()))?;
    let env = [("GOCACHE".to_string(), gocache.display().to_string())];
    match controlplane::build_binaries(go_module, &scratch.join("bin"), &env)? {
        BuildOutcome::Built { elapsed } => Ok(elapsed),
        BuildOutcome::AlreadyBuilt => anyhow::bail!("the scratch directory already held binaries"),
    }
}

pub(crate) fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
}

/// One `BENCH` line of the `bench_roll` e2e test.
#[derive(Debug, Clone, PartialEq)]
struct RollSample {
    version: String,
    topology: String,
    roll_ms: u64,
    /// The writer that follows the master by pod IP.
    by_pod: WriterSample,
    /// The writer through `<name>-rw`'s ClusterIP.
    through_rw: WriterSample,
}

/// One writer's figures for one roll.
#[derive(Debug, Clone, Default, PartialEq)]
struct WriterSample {
    lost: u64,
    acked: u64,
    gaps_ms: Vec<u64>,
}

/// The `key=value` fields of a `BENCH ...` line a benchmark test prints; `None` for other lines.
pub(crate) fn bench_fields(line: &str) -> Option<std::collections::BTreeMap<&str, &str>> {
    let rest = line.strip_prefix("BENCH ")?;
    Some(
        rest.split_whitespace()
            .filter_map(|field| field.split_once('='))
            .collect(),
    )
}

/// Runs `command` (its stdout piped), echoing every line of it and handing it to `on_line`;
/// fails when it exits unsuccessfully. `what` names it in errors.
pub(crate) fn run_echoing(
    command: &mut std::process::Command,
    what: &str,
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {what}"))?;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            println!("{line}");
            on_line(&line);
        }
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "{what} failed ({status})");
    Ok(())
}

fn parse_bench_line(line: &str) -> Option<RollSample> {
    let fields = bench_fields(line)?;
    let writer = |prefix: &str| -> Option<WriterSample> {
        Some(WriterSample {
            lost: fields.get(format!("{prefix}lost").as_str())?.parse().ok()?,
            acked: fields
                .get(format!("{prefix}acked").as_str())?
                .parse()
                .ok()?,
            gaps_ms: fields
                .get(format!("{prefix}gaps_ms").as_str())
                .map(|g| g.split(',').filter_map(|v| v.parse().ok()).collect())
                .unwrap_or_default(),
        })
    };
    Some(RollSample {
        version: fields.get("version")?.to_string(),
        topology: fields.get("topology")?.to_string(),
        roll_ms: fields.get("roll_ms")?.parse().ok()?,
        by_pod: writer("")?,
        through_rw: writer("rw_")?,
    })
}

/// The value at quantile `q` (nearest rank) of sorted `values`.
pub(crate) fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Runs the ignored end-to-end test `test` (`<area>::<name>`) on the testbed with `env`, echoing
/// its stdout and handing every line to `on_line`: [`run_e2e`] of that one test.
pub(crate) fn run_ignored_e2e(
    test: &str,
    env: &[(&str, String)],
    on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    run_e2e(&ignored_args(test), env, on_line)
}

/// Runs the end-to-end tests `libtest_args` select on the testbed with `env`, echoing their
/// stdout and handing every line to `on_line`. Builds the image's binaries first; someone else's
/// running testbed is used and left running, one started here is stopped again.
pub(crate) fn run_e2e(
    libtest_args: &[String],
    env: &[(&str, String)],
    on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    run_e2e_passes(&[libtest_args.to_vec()], env, on_line)
}

/// As [`run_e2e`], one `cargo test` per element of `passes` on the same testbed, in order; every
/// pass runs, the first failure is returned.
pub(crate) fn run_e2e_passes(
    passes: &[Vec<String>],
    env: &[(&str, String)],
    mut on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    paths::require_root()?;
    let paths = Paths::from_env();
    testbed::cargo(&[
        "build",
        "-p",
        "vko-operator",
        "-p",
        "vko-sidecar",
        "-p",
        "vko-observer",
    ])?;
    let helm = crate::helm::build()?;
    let started_here = testbed::refuse_if_running(&paths).is_ok();
    if started_here {
        testbed::build_go_binaries()?;
        let elapsed = testbed::start_built(&paths)?;
        println!("testbed ready in {}", format_duration(elapsed));
    }
    let mut result = Ok(());
    for libtest_args in passes {
        let pass = cargo_test_e2e(libtest_args, env, &paths, &helm, &mut on_line);
        if result.is_ok() {
            result = pass;
        }
    }
    if started_here {
        testbed::down()?;
    }
    result
}

/// libtest's arguments for the ignored test `test` alone, its output shown.
fn ignored_args(test: &str) -> Vec<String> {
    ["--ignored", "--exact", test, "--nocapture"]
        .map(str::to_owned)
        .to_vec()
}

/// `cargo test` of the ignored end-to-end test `test` against the running testbed at `paths`.
pub(crate) fn cargo_test_ignored(
    test: &str,
    env: &[(&str, String)],
    paths: &Paths,
    helm: &std::path::Path,
    on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    cargo_test_e2e(&ignored_args(test), env, paths, helm, on_line)
}

/// `cargo test` of the end-to-end tests `libtest_args` select against the running testbed at
/// `paths`.
fn cargo_test_e2e(
    libtest_args: &[String],
    env: &[(&str, String)],
    paths: &Paths,
    helm: &std::path::Path,
    on_line: impl FnMut(&str),
) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args([
            "test",
            "--package",
            "vko-e2e",
            "--features",
            "e2e",
            "--test",
            "e2e",
            "--",
        ])
        .args(libtest_args)
        .current_dir(testbed::repo_root())
        .env("KUBECONFIG", paths.admin_kubeconfig())
        .env(paths::BIN_DIR_ENV, paths::bin_dir())
        .env(paths::STATE_DIR_ENV, paths.state_dir())
        .env(vko_testbed::harness::HELM_BIN_ENV, helm)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    run_echoing(
        &mut command,
        &format!("the end-to-end tests {}", libtest_args.join(" ")),
        on_line,
    )
}

fn bench_roll(rolls: u32, versions: &[String]) -> anyhow::Result<()> {
    for version in versions {
        anyhow::ensure!(
            vko_testbed::kubelet::images::valkey_release(version).is_some(),
            "valkey/valkey:{version} is not a release the testbed runs ({})",
            vko_testbed::kubelet::images::VALKEY_TAG_MAP
        );
    }
    let mut samples = Vec::new();
    run_ignored_e2e(
        "operator_roll::bench_roll",
        &[
            ("VKO_BENCH_ROLLS", rolls.to_string()),
            ("VKO_BENCH_VERSIONS", versions.join(",")),
        ],
        |line| samples.extend(parse_bench_line(line)),
    )?;
    println!();
    println!(
        "rolling-update benchmark ({rolls} rolls per topology and release, {} CPUs; gap = a \
         writer's longest interval between consecutive OK replies across each master switchover; \
         \"pod\" follows the master by pod IP, \"-rw\" connects through the Service's ClusterIP)",
        cpu_count()
    );
    for line in roll_report(&samples, versions) {
        println!("{line}");
    }
    Ok(())
}

/// One line per release, topology and writer, in the order the releases were asked for.
fn roll_report(samples: &[RollSample], versions: &[String]) -> Vec<String> {
    let mut lines = Vec::new();
    for version in versions {
        for topology in ["3+3", "3-no-sentinel"] {
            let of: Vec<&RollSample> = samples
                .iter()
                .filter(|s| &s.version == version && s.topology == topology)
                .collect();
            let mut totals: Vec<u64> = of.iter().map(|s| s.roll_ms).collect();
            totals.sort_unstable();
            for (writer, through_rw) in [("pod", false), ("-rw", true)] {
                let pick = |s: &RollSample| -> WriterSample {
                    if through_rw {
                        s.through_rw.clone()
                    } else {
                        s.by_pod.clone()
                    }
                };
                let mut gaps: Vec<u64> = of.iter().flat_map(|s| pick(s).gaps_ms).collect();
                gaps.sort_unstable();
                let lost: u64 = of.iter().map(|s| pick(s).lost).sum();
                let acked: u64 = of.iter().map(|s| pick(s).acked).sum();
                lines.push(format!(
                    "  {version:<5} {topology:<14} {writer:<4} rolls {:>2}  total roll p50 {:.1} s max {:.1} s  switchover gap ({} switchovers) p50 {} ms p99 {} ms max {} ms  lost {lost} of {acked} acknowledged",
                    of.len(),
                    quantile(&totals, 0.5) as f64 / 1000.0,
                    totals.last().copied().unwrap_or(0) as f64 / 1000.0,
                    gaps.len(),
                    quantile(&gaps, 0.5),
                    quantile(&gaps, 0.99),
                    gaps.last().copied().unwrap_or(0),
                ));
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_lines_parse_and_quantiles_use_nearest_rank() {
        let sample = parse_bench_line(concat!(
            "BENCH version=9.1 topology=3+3 roll=0 roll_ms=51234 acked=1000 lost=0 ",
            "gaps_ms=1307,20 rw_acked=900 rw_lost=0 rw_gaps_ms=1450 rw_longest_ms=1450"
        ))
        .unwrap();
        assert_eq!(sample.version, "9.1");
        assert_eq!(sample.topology, "3+3");
        assert_eq!(sample.roll_ms, 51234);
        assert_eq!(sample.by_pod.gaps_ms, vec![1307, 20]);
        assert_eq!(sample.by_pod.acked, 1000);
        assert_eq!(sample.through_rw.gaps_ms, vec![1450]);
        assert_eq!(sample.through_rw.acked, 900);
        assert_eq!(parse_bench_line("MEASURED x"), None);
        // A line without the -rw writer's figures is not a sample of this report.
        assert_eq!(
            parse_bench_line("BENCH version=8.0 topology=3+3 roll_ms=1 acked=1 lost=0 gaps_ms="),
            None
        );
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&values, 0.5), 50);
        assert_eq!(quantile(&values, 0.99), 99);
        assert_eq!(quantile(&[7], 0.99), 7);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn the_roll_report_puts_releases_side_by_side_in_the_order_asked() {
        let line = |version: &str, topology: &str, gap: u64, rw_gap: u64| {
            parse_bench_line(&format!(
                "BENCH version={version} topology={topology} roll_ms=50000 acked=100 lost=0 \
                 gaps_ms={gap} rw_acked=90 rw_lost=0 rw_gaps_ms={rw_gap}"
            ))
            .unwrap()
        };
        let samples = vec![
            line("8.0", "3+3", 1200, 1400),
            line("9.1", "3+3", 1100, 1300),
            line("9.1", "3-no-sentinel", 150, 400),
        ];
        let report = roll_report(&samples, &["9.1".to_owned(), "8.0".to_owned()]);
        assert_eq!(report.len(), 8, "{report:#?}");
        assert!(
            report[0].contains("9.1") && report[0].contains("3+3") && report[0].contains("pod")
        );
        assert!(report[0].contains("p50 1100 ms"), "{}", report[0]);
        assert!(
            report[1].contains("-rw") && report[1].contains("p50 1300 ms"),
            "{}",
            report[1]
        );
        assert!(report[3].contains("3-no-sentinel") && report[3].contains("p50 400 ms"));
        assert!(report[4].starts_with("  8.0") && report[4].contains("p50 1200 ms"));
        // No rolls of 8.0 without Sentinel: a row of zeros, not a missing row.
        assert!(report[6].contains("rolls  0"), "{}", report[6]);
    }
}
