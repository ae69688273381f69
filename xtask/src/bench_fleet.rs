//! `cargo xtask bench fleet`: builds the release binaries, starts a testbed whose `vko.local/vko`
//! pods run them, and runs the ignored end-to-end test `operator_fleet::bench_fleet` (the chart's
//! in-cluster operator, N Valkeys applied at once for each N); its `FLEET` lines become one table.

use std::collections::BTreeMap;

use vko_testbed::controlplane::format_duration;
use vko_testbed::paths::{self, Paths};

use crate::{bench, image, testbed};

#[derive(clap::Args)]
pub struct Args {
    /// How many Valkeys, one run each, comma-separated.
    #[arg(long, default_value = "10,50,100")]
    valkeys: String,
    /// Seconds of steady state counted after every Valkey is OK.
    #[arg(long, default_value_t = 120)]
    steady_secs: u64,
    /// `standalone` (1 data pod each) or `three` (3 data pods without Sentinel each).
    #[arg(long, default_value = "standalone")]
    topology: String,
}

/// One `FLEET key=value …` line.
fn parse_line(line: &str) -> Option<BTreeMap<String, String>> {
    let rest = line.strip_prefix("FLEET ")?;
    Some(
        rest.split_whitespace()
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// The report's columns: (key in the `FLEET` line, heading).
const COLUMNS: [(&str, &str); 16] = [
    ("valkeys", "Valkeys"),
    ("all_ok_s", "all OK (s)"),
    ("ok_p50_s", "OK p50 (s)"),
    ("pod_ready_p50_s", "pod Ready p50 (s)"),
    ("op_req_min", "operator req/min"),
    ("op_lease_min", "of which Lease"),
    ("op_watch_min", "of which watch"),
    (
        "op_writes_beyond_lease_min",
        "operator writes/min beyond its Lease",
    ),
    ("op_rss_mib", "operator RSS (MiB)"),
    ("op_anon_mib", "of which anon"),
    ("op_cpu_pct", "operator CPU (%)"),
    ("sidecar_rss_p50_mib", "sidecar RSS p50 (MiB)"),
    ("sidecar_anon_p50_mib", "of which anon"),
    ("sidecar_rss_max_mib", "sidecar RSS max (MiB)"),
    ("sidecar_req_min", "sidecars req/min"),
    ("sidecar_writes_min", "sidecars writes/min"),
];

fn table(rows: &[BTreeMap<String, String>]) -> String {
    let mut out = String::new();
    let headings: Vec<&str> = COLUMNS.iter().map(|(_, h)| *h).collect();
    out.push_str(&format!("| {} |\n", headings.join(" | ")));
    out.push_str(&format!("|{}\n", "---|".repeat(COLUMNS.len())));
    for row in rows {
        if let Some(error) = row.get("error") {
            out.push_str(&format!(
                "| {} | error: {error} |\n",
                row.get("valkeys").map_or("?", String::as_str)
            ));
            continue;
        }
        let cells: Vec<&str> = COLUMNS
            .iter()
            .map(|(key, _)| row.get(*key).map_or("-", String::as_str))
            .collect();
        out.push_str(&format!("| {} |\n", cells.join(" | ")));
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    paths::require_root()?;
    let paths = Paths::from_env();
    // The pods must run the release binaries: a testbed of its own, never someone else's.
    testbed::refuse_if_running(&paths)?;
    image::build_binaries(&image::git_head()?)?;
    testbed::build()?;
    testbed::cargo(&["build", "-p", "vko-e2e", "--features", "e2e", "--tests"])?;
    let helm = crate::helm::build()?;
    let release_dir = testbed::target_dir().join("release");
    let elapsed = testbed::start_built_with_images(&paths, &release_dir)?;
    println!(
        "testbed ready in {} (vko.local/vko built from {})",
        format_duration(elapsed),
        release_dir.display()
    );
    let mut rows = Vec::new();
    let result = bench::cargo_test_ignored(
        "operator_fleet::bench_fleet",
        &[
            ("VKO_BENCH_VALKEYS", args.valkeys.clone()),
            ("VKO_BENCH_STEADY_SECS", args.steady_secs.to_string()),
            ("VKO_BENCH_TOPOLOGY", args.topology.clone()),
        ],
        &paths,
        &helm,
        |line| rows.extend(parse_line(line)),
    );
    let down = testbed::down();
    result?;
    down?;
    println!();
    println!(
        "fleet benchmark ({} Valkeys, {} data pod(s) each; release binaries; {} CPUs; rates per \
         minute of {} s of steady state, counted once the passes after the last OK settled):",
        args.valkeys,
        if args.topology == "three" { 3 } else { 1 },
        bench::cpu_count(),
        args.steady_secs,
    );
    print!("{}", table(&rows));
    for row in &rows {
        for key in [
            "op_other",
            "sidecar_other",
            "sidecar_threads_p50",
            "sidecar_cpu_pct_total",
            "pods_not_ready",
            "valkeys_not_ok",
        ] {
            if let Some(value) = row.get(key) {
                println!(
                    "  N={}: {key} = {value}",
                    row.get("valkeys").map_or("?", String::as_str)
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_lines_become_rows_and_errors_keep_their_n() {
        let ok = parse_line(
            "FLEET valkeys=10 replicas=1 all_ok_s=12.5 op_writes_min=0.0 op_other=none \
             op_writes_beyond_lease_min=1.5",
        )
        .unwrap();
        assert_eq!(ok["valkeys"], "10");
        assert_eq!(ok["all_ok_s"], "12.5");
        assert_eq!(ok["op_writes_beyond_lease_min"], "1.5");
        let failed = parse_line("FLEET valkeys=50 replicas=1 error=timed_out").unwrap();
        assert_eq!(parse_line("BENCH valkeys=1"), None);
        let text = table(&[ok, failed]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(lines[2].starts_with("| 10 | 12.5 | - |"), "{text}");
        assert!(
            !lines[2].contains("| 0.0 |"),
            "op_writes_min is not a column: {text}"
        );
        assert_eq!(lines[3], "| 50 | error: timed_out |");
    }
}
