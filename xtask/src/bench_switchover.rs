//! `cargo xtask bench switchover`: a planned switchover with Sentinel as a Sentinel-aware client
//! sees it, per Valkey release, on real processes on 127.0.0.1 (no testbed): the ignored test
//! `bench_switchover` of `crates/vko-valkey/tests/switchover_bench.rs`, run once per release with
//! that release's binaries first on `PATH`. On Valkey 9 it measures both vko's switchover (ADR
//! 0006) and Sentinel's `FAILOVER ... COORDINATED`, alternated on the same processes.

use std::process::Command;

use anyhow::Context;
use vko_testbed::kubelet::images::{VALKEY_TAG_MAP, ValkeyRelease, valkey_bin_dir, valkey_release};

use crate::bench::{bench_fields, cpu_count, quantile, run_echoing};

#[derive(clap::Args)]
pub struct Args {
    /// Switchovers per path and release.
    #[arg(long, default_value_t = 5)]
    runs: u32,
    /// Releases to measure, by `valkey/valkey` tag (the testbed's: 8.0, 8.1, 9.1).
    #[arg(long, value_delimiter = ',', default_value = "8.0,9.1")]
    versions: Vec<String>,
}

/// One `BENCH` line of the test.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    version: String,
    path: String,
    gap_ms: u64,
    role_ms: u64,
    named_ms: u64,
    acked: u64,
    lost: u64,
    crashed: bool,
}

fn parse_line(line: &str) -> Option<Sample> {
    let fields = bench_fields(line)?;
    let number = |name: &str| -> Option<u64> { fields.get(name)?.parse().ok() };
    Some(Sample {
        version: fields.get("version")?.to_string(),
        path: fields.get("path")?.to_string(),
        gap_ms: number("gap_ms")?,
        role_ms: number("role_ms")?,
        named_ms: number("named_ms")?,
        acked: number("acked")?,
        lost: number("lost")?,
        crashed: fields.get("crashed")? == &"true",
    })
}

/// Whether the release has `SENTINEL FAILOVER ... COORDINATED` (Valkey 9).
fn has_coordinated_failover(release: ValkeyRelease) -> bool {
    release
        .version()
        .split('.')
        .next()
        .and_then(|major| major.parse::<u32>().ok())
        .is_some_and(|major| major >= 9)
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let mut samples = Vec::new();
    for tag in &args.versions {
        let release = valkey_release(tag).with_context(|| {
            format!("valkey/valkey:{tag} is not a release the testbed has ({VALKEY_TAG_MAP})")
        })?;
        let mut path = std::env::var_os("PATH").unwrap_or_default();
        if let ValkeyRelease::Built(version) = release {
            let bin = valkey_bin_dir(version);
            anyhow::ensure!(
                bin.join("valkey-sentinel").exists(),
                "{} has no valkey-sentinel: run `cargo xtask valkey build --version {version}`",
                bin.display()
            );
            let mut dirs = vec![bin];
            dirs.extend(std::env::split_paths(&path));
            path = std::env::join_paths(dirs)?;
        }
        let coordinated = if has_coordinated_failover(release) {
            "1"
        } else {
            "0"
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args([
                "test",
                "--package",
                "vko-valkey",
                "--test",
                "switchover_bench",
                "--",
                "--ignored",
                "--exact",
                "bench_switchover",
                "--nocapture",
            ])
            .current_dir(crate::testbed::repo_root())
            .env("PATH", &path)
            .env("VKO_BENCH_RUNS", args.runs.to_string())
            .env("VKO_BENCH_COORDINATED", coordinated);
        run_echoing(
            &mut command,
            &format!("the switchover benchmark on {tag}"),
            |line| {
                samples.extend(parse_line(line));
            },
        )?;
    }
    println!();
    println!(
        "switchover benchmark ({} runs per path and release, {} CPUs, 1 master + 2 replicas + 3 \
         Sentinels on 127.0.0.1; from the command: gap = a Sentinel-following writer's longest \
         interval between two OKs, role = the new master answers role:master, named = a Sentinel \
         majority names it)",
        args.runs,
        cpu_count()
    );
    for line in report(&samples) {
        println!("{line}");
    }
    Ok(())
}

/// One line per release and path, in the order measured.
fn report(samples: &[Sample]) -> Vec<String> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for sample in samples {
        let key = (sample.version.as_str(), sample.path.as_str());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys.into_iter()
        .map(|(version, path)| {
            let of: Vec<&Sample> = samples
                .iter()
                .filter(|s| s.version == version && s.path == path)
                .collect();
            let sorted = |pick: fn(&Sample) -> u64| {
                let mut values: Vec<u64> = of.iter().map(|s| pick(s)).collect();
                values.sort_unstable();
                values
            };
            let gaps = sorted(|s| s.gap_ms);
            let roles = sorted(|s| s.role_ms);
            let named = sorted(|s| s.named_ms);
            format!(
                "  {version:<7} {path:<12} runs {:>2}  gap p50 {} ms max {} ms  role p50 {} ms  \
                 named p50 {} ms max {} ms  lost {} of {} acknowledged  crashed {}",
                of.len(),
                quantile(&gaps, 0.5),
                gaps.last().copied().unwrap_or(0),
                quantile(&roles, 0.5),
                quantile(&named, 0.5),
                named.last().copied().unwrap_or(0),
                of.iter().map(|s| s.lost).sum::<u64>(),
                of.iter().map(|s| s.acked).sum::<u64>(),
                of.iter().filter(|s| s.crashed).count(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_lines_parse_and_the_report_keeps_each_release_and_path_apart() {
        let line = |version: &str, path: &str, gap: u64| {
            parse_line(&format!(
                "BENCH version={version} path={path} run=0 gap_ms={gap} role_ms=100 named_ms=1200 \
                 acked=500 errors=1 lost=0 crashed=false"
            ))
            .unwrap()
        };
        let samples = vec![
            line("8.0.1", "vko", 1300),
            line("9.1.2", "vko", 1250),
            line("9.1.2", "coordinated", 400),
            line("9.1.2", "coordinated", 600),
        ];
        assert_eq!(samples[2].path, "coordinated");
        assert!(!samples[2].crashed);
        assert_eq!(parse_line("BENCH version=9.1.2 path=vko"), None);
        let report = report(&samples);
        assert_eq!(report.len(), 3, "{report:#?}");
        assert!(report[0].contains("8.0.1") && report[0].contains("gap p50 1300 ms"));
        assert!(report[2].contains("coordinated") && report[2].contains("runs  2"));
        assert!(
            report[2].contains("gap p50 400 ms max 600 ms"),
            "{}",
            report[2]
        );
        assert!(report[2].contains("lost 0 of 1000"), "{}", report[2]);
    }

    #[test]
    fn only_valkey_9_has_the_coordinated_failover() {
        assert!(!has_coordinated_failover(ValkeyRelease::Host));
        assert!(!has_coordinated_failover(ValkeyRelease::Built("8.1.1")));
        assert!(has_coordinated_failover(ValkeyRelease::Built("9.1.2")));
    }
}
