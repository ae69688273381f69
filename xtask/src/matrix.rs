//! `cargo xtask matrix`: the disruption matrix (issue 15, ADR 0042). Runs the end-to-end tests
//! `disruption_matrix::*` on the testbed (the topologies at once, then the rows whose fault hits
//! the whole testbed alone; each row `--runs` times), reads
//! their `MATRIX` lines and writes `docs/disruption-matrix.md` from them — also when a run broke
//! its bound (the page says so, and the command fails after writing it).

use std::path::PathBuf;

use anyhow::Context;
use vko_e2e::matrix::{EXCLUSIVE_TEST, Measurement, Row, Topology, render};

use crate::bench::run_e2e_passes;

#[derive(clap::Args)]
pub struct Args {
    /// Runs of every row.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Only the rows whose id contains one of these comma-separated parts (e.g. `pause,kill`).
    #[arg(long, default_value = "")]
    rows: String,
    /// Only these topologies (comma-separated: `3+3`, `3-no-sentinel`, `3+3-persistent`,
    /// `1+3-persistent`, `1-persistent`).
    #[arg(
        long,
        default_value = "3+3,3-no-sentinel,3+3-persistent,1+3-persistent,1-persistent"
    )]
    topologies: String,
    /// Where the page goes (relative to the repository root).
    #[arg(long, default_value = "docs/disruption-matrix.md")]
    out: PathBuf,
    /// Render the page from the `MATRIX` lines of an earlier run's output (e.g. its saved log)
    /// instead of running; `--runs` then names what that run was asked for.
    #[arg(long, requires = "measured_at")]
    from_log: Option<PathBuf>,
    /// With `--from-log`: the commit (and date, `<commit>@<YYYY-MM-DD>`) that run measured.
    #[arg(long)]
    measured_at: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let topologies: Vec<Topology> = args
        .topologies
        .split(',')
        .map(|label| {
            Topology::ALL
                .into_iter()
                .find(|t| t.label() == label)
                .with_context(|| {
                    let known: Vec<&str> = Topology::ALL.iter().map(|t| t.label()).collect();
                    format!("unknown topology {label:?} ({})", known.join(", "))
                })
        })
        .collect::<anyhow::Result<_>>()?;
    anyhow::ensure!(args.runs > 0, "--runs must be at least 1");
    if let Some(log) = &args.from_log {
        let text =
            std::fs::read_to_string(log).with_context(|| format!("reading {}", log.display()))?;
        // Anywhere in a line: a log may hold the tests' stderr interleaved with their stdout.
        let measurements: Vec<Measurement> = text
            .lines()
            .filter_map(matrix_line)
            .filter(|m| topologies.contains(&m.topology))
            .collect();
        return write_page(&args, measurements, Ok(()));
    }
    // From a fresh clone, as `cargo xtask test`: the testbed's commands first.
    crate::test::install_prerequisites()?;
    let rows = Row::selected(&args.rows);
    let labels: Vec<&str> = topologies.iter().map(|t| t.label()).collect();
    let env = [
        ("VKO_MATRIX_RUNS", args.runs.to_string()),
        ("VKO_MATRIX_ROWS", args.rows.clone()),
        ("VKO_MATRIX_TOPOLOGIES", labels.join(",")),
    ];
    // The topologies' own tests side by side, then the exclusive rows' test alone (as `cargo
    // xtask test` runs them).
    let mut passes: Vec<Vec<String>> = Vec::new();
    if rows.iter().any(|row| !row.exclusive()) {
        let mut libtest: Vec<String> = topologies
            .iter()
            .map(|t| t.test_name().to_owned())
            .collect();
        // The single-pod shapes share a test.
        libtest.sort();
        libtest.dedup();
        libtest.extend(["--exact", "--nocapture", "--test-threads=4"].map(str::to_owned));
        passes.push(libtest);
    }
    if rows.iter().any(|row| row.exclusive()) {
        passes.push(
            [EXCLUSIVE_TEST, "--exact", "--nocapture", "--test-threads=1"]
                .map(str::to_owned)
                .to_vec(),
        );
    }
    let mut measurements = Vec::new();
    let outcome = run_e2e_passes(&passes, &env, |line| {
        if let Some(m) = matrix_line(line) {
            measurements.push(m);
        }
    });
    write_page(&args, measurements, outcome)
}

/// The measurement a `MATRIX` line carries, wherever it starts in `line`: with `--nocapture`
/// libtest's `test … ... ` and other tests' output can precede it on the same line (a run of
/// 2026-12-06 lost a row from the page that way).
fn matrix_line(line: &str) -> Option<Measurement> {
    Measurement::parse_line(&line[line.find("MATRIX ")?..])
}

/// Writes the page from `measurements`; fails when there are none, when a run broke its bound,
/// or with `outcome` (the tests' own result).
fn write_page(
    args: &Args,
    mut measurements: Vec<Measurement>,
    outcome: anyhow::Result<()>,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !measurements.is_empty(),
        "no run was measured ({})",
        outcome
            .err()
            .map_or("the tests printed nothing".into(), |e| format!("{e:#}"))
    );
    measurements.sort_by_key(|m| (m.topology, m.row, m.run));
    let mut command = format!("cargo xtask matrix --runs {}", args.runs);
    if !args.rows.is_empty() {
        command.push_str(&format!(" --rows {}", args.rows));
    }
    let (commit, date) = match &args.measured_at {
        Some(at) => {
            let (commit, date) = at
                .split_once('@')
                .context("--measured-at is <commit>@<YYYY-MM-DD>")?;
            (commit.to_owned(), date.to_owned())
        }
        None => (git_commit()?, today()?),
    };
    let mut page = render(&measurements, &commit, &date, &command);
    if args.from_log.is_some() {
        page.push_str(
            "\nThis page was rendered again from that run's saved output with \
             `cargo xtask matrix --from-log <log> --measured-at <commit>@<date>`.\n",
        );
    }
    let out = crate::testbed::repo_root().join(&args.out);
    std::fs::write(&out, &page).with_context(|| format!("writing {}", out.display()))?;
    println!("\n{page}");
    println!("wrote {}", out.display());
    let broken: Vec<String> = measurements
        .iter()
        .flat_map(|m| {
            m.violations()
                .into_iter()
                .map(move |v| format!("{} {} run {}: {v}", m.topology.label(), m.row.id(), m.run))
        })
        .collect();
    anyhow::ensure!(broken.is_empty(), "bounds broken:\n{}", broken.join("\n"));
    outcome
}

/// The commit measured, marked when the tree had changes not in it (outside the documentation).
fn git_commit() -> anyhow::Result<String> {
    let git = |args: &[&str]| -> anyhow::Result<String> {
        let output = std::process::Command::new("git")
            .args(args)
            .current_dir(crate::testbed::repo_root())
            .output()
            .with_context(|| format!("running git {}", args.join(" ")))?;
        anyhow::ensure!(output.status.success(), "git {} failed", args.join(" "));
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short", "HEAD"])?;
    // Documentation cannot change a figure (and the page is what this run rewrites).
    let changed = git(&["status", "--porcelain", "--", ".", ":!docs", ":!*.md"])?;
    Ok(if changed.is_empty() {
        commit
    } else {
        format!("{commit} + uncommitted changes")
    })
}

fn today() -> anyhow::Result<String> {
    let output = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .context("running date")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"MATRIX {"topology":"3+3","row":"master-node-stopped","run":1,"acked":484522,"lost":0,"confirmed":173927,"confirmed_lost":0,"lost_after_healthy":0,"lost_outside_bound":0,"master_side":null,"unwritable_ms":8052,"healthy_ms":55639,"max_master_labels":1,"max_rw_endpoints":1,"samples":583,"master_before":"mx-0","master_after":"mx-2"}"#;

    #[test]
    fn a_matrix_line_is_found_after_other_output_on_its_line() {
        let alone = matrix_line(LINE).unwrap();
        assert_eq!(alone.row, Row::MasterNodeStopped);
        // As the run of 2026-12-06 printed it: libtest's test line, then the MATRIX line.
        let interleaved =
            format!("test disruption_matrix::exclusive_control_plane_and_node_faults ... {LINE}");
        assert_eq!(matrix_line(&interleaved), Some(alone));
        assert_eq!(
            matrix_line("matrix 3+3 master-node-stopped run 1: master mx-0"),
            None
        );
    }
}
