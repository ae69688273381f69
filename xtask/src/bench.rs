//! `cargo xtask bench`: benchmarks that print a small report.

use std::time::{Duration, Instant};

use anyhow::Context;
use vko_testbed::controlplane::{self, BuildOutcome, format_duration};
use vko_testbed::paths::{self, Paths};

use crate::testbed;

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
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.bench {
        Bench::Testbed { cold, cycles } => bench_testbed(cold, cycles.max(1)),
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

fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
}
