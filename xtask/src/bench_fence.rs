//! `cargo xtask bench fence`: master fencing (ADR 0019) per topology and fault, from the `BENCH`
//! lines of the ignored e2e test `operator_fencing::bench_fence` (one line a run).
//!
//! Per row: the fence time (for a partition from the cut, for a pause from the resume, to the
//! last `OK` the writer inside the master's network namespace got before its `OK`s stopped for
//! over 1 s; "not fenced" when they never stopped), the lost-write window (from the same start to
//! the last lost acknowledged write), the lost writes (and how many the bound does not allow),
//! and the time from the end of the fault to Phase OK with one linked master.

use crate::bench::{cpu_count, quantile, run_ignored_e2e};

#[derive(clap::Args)]
pub struct Args {
    /// Runs per row (topology × fault).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// How long each fault lasts; the default is long enough for Sentinel (down-after 5 s) to fail
    /// over.
    #[arg(long, default_value_t = 12)]
    fault_secs: u64,
    /// Only these topologies (comma-separated: `3+3`, `3-no-sentinel`).
    #[arg(long, default_value = "3+3,3-no-sentinel")]
    topologies: String,
}

/// One `BENCH` line: a run, or the error that ended its topology.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FenceSample {
    topology: String,
    fault: String,
    outcome: Outcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Measured(Measured),
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Measured {
    /// `None`: the master never stopped acknowledging.
    fenced_ms: Option<u64>,
    lost: u64,
    /// Lost writes the bound does not allow (acknowledged before the fault, while it lasted, or
    /// later than F + poll + slack after the window start).
    lost_outside: u64,
    /// `None`: nothing lost.
    last_lost_ms: Option<u64>,
    acked: u64,
    whole_ms: u64,
    max_masters: u64,
    max_rw: u64,
    sample_gap_ms: u64,
}

fn parse_line(line: &str) -> Option<FenceSample> {
    let fields = crate::bench::bench_fields(line)?;
    let number = |key: &str| -> Option<u64> { fields.get(key)?.parse().ok() };
    // `-` stands for "none".
    let optional = |key: &str| -> Option<Option<u64>> {
        match *fields.get(key)? {
            "-" => Some(None),
            value => value.parse().ok().map(Some),
        }
    };
    let outcome = match fields.get("error") {
        Some(error) => Outcome::Error((*error).to_owned()),
        None => Outcome::Measured(Measured {
            fenced_ms: optional("fenced_ms")?,
            lost: number("lost")?,
            lost_outside: number("lost_outside")?,
            last_lost_ms: optional("last_lost_ms")?,
            acked: number("acked")?,
            whole_ms: number("whole_ms")?,
            max_masters: number("max_masters")?,
            max_rw: number("max_rw")?,
            sample_gap_ms: number("sample_gap_ms")?,
        }),
    };
    Some(FenceSample {
        topology: fields.get("topology")?.to_string(),
        fault: fields.get("fault")?.to_string(),
        outcome,
    })
}

fn seconds(ms: u64) -> String {
    format!("{:.2} s", ms as f64 / 1000.0)
}

/// `p50 <a> max <b>` over `values` (sorted here), `-` when empty.
fn p50_max(mut values: Vec<u64>) -> String {
    values.sort_unstable();
    match values.last() {
        Some(&max) => format!(
            "p50 {} max {}",
            seconds(quantile(&values, 0.5)),
            seconds(max)
        ),
        None => "-".into(),
    }
}

/// The report's line for one topology × fault.
fn row(topology: &str, fault: &str, samples: &[FenceSample]) -> String {
    let of: Vec<&FenceSample> = samples
        .iter()
        .filter(|s| s.topology == topology && s.fault == fault)
        .collect();
    let runs: Vec<&Measured> = of
        .iter()
        .filter_map(|s| match &s.outcome {
            Outcome::Measured(m) => Some(m),
            Outcome::Error(_) => None,
        })
        .collect();
    let errors: Vec<&str> = of
        .iter()
        .filter_map(|s| match &s.outcome {
            Outcome::Error(e) => Some(e.as_str()),
            Outcome::Measured(_) => None,
        })
        .collect();
    let fence_from = if fault == "pause" { "resume" } else { "cut" };
    let fenced: Vec<u64> = runs.iter().filter_map(|m| m.fenced_ms).collect();
    let not_fenced = runs.len() - fenced.len();
    let windows: Vec<u64> = runs.iter().map(|m| m.last_lost_ms.unwrap_or(0)).collect();
    let lost: u64 = runs.iter().map(|m| m.lost).sum();
    let outside: u64 = runs.iter().map(|m| m.lost_outside).sum();
    let acked: u64 = runs.iter().map(|m| m.acked).sum();
    let whole: Vec<u64> = runs.iter().map(|m| m.whole_ms).collect();
    let max = |f: fn(&Measured) -> u64| runs.iter().map(|m| f(m)).max().unwrap_or(0);
    let mut line = format!(
        "  {topology:<14} {fault:<9} runs {:>2}  fence ({fence_from} -> writes blocked) {}{}  \
         lost-write window {}  lost {lost} of {acked} ({outside} outside the bound)  \
         Phase OK after the fault {}  max masters {} / -rw {}  longest sample gap {} ms",
        runs.len(),
        p50_max(fenced),
        if not_fenced > 0 {
            format!(" (not fenced in {not_fenced})")
        } else {
            String::new()
        },
        p50_max(windows),
        p50_max(whole),
        max(|m| m.max_masters),
        max(|m| m.max_rw),
        max(|m| m.sample_gap_ms),
    );
    if let Some(error) = errors.first() {
        line.push_str(&format!("  STOPPED: {error}"));
    }
    line
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let runs = args.runs.max(1);
    let mut samples = Vec::new();
    run_ignored_e2e(
        "operator_fencing::bench_fence",
        &[
            ("VKO_BENCH_RUNS", runs.to_string()),
            ("VKO_BENCH_FAULT_SECS", args.fault_secs.to_string()),
            ("VKO_BENCH_TOPOLOGIES", args.topologies.clone()),
        ],
        |line| samples.extend(parse_line(line)),
    )?;
    println!();
    println!(
        "fencing benchmark ({runs} runs per row, faults of {} s, {} CPUs; fence = the window start \
         to the last OK of the writer inside the master's netns before its OKs stopped; lost-write \
         window = the window start to the last lost acknowledged write, 0 when none)",
        args.fault_secs,
        cpu_count()
    );
    for topology in args.topologies.split(',') {
        for fault in ["partition", "pause"] {
            println!("{}", row(topology, fault, &samples));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "BENCH topology=3+3 fault=partition run=0 hold_ms=12000 fenced_ms=2010 \
                       lost=4 lost_outside=0 last_lost_ms=1950 acked=9000 late_acks=0 \
                       whole_ms=7100 max_masters=1 max_rw=1 sample_gap_ms=130";

    #[test]
    fn bench_lines_parse_with_none_and_errors() {
        let sample = parse_line(RUN).unwrap();
        assert_eq!(sample.topology, "3+3");
        assert_eq!(sample.fault, "partition");
        let Outcome::Measured(m) = sample.outcome else {
            panic!("{sample:?}")
        };
        assert_eq!(m.fenced_ms, Some(2010));
        assert_eq!(m.last_lost_ms, Some(1950));
        assert_eq!((m.lost, m.acked, m.whole_ms), (4, 9000, 7100));

        let unfenced = RUN
            .replace("fenced_ms=2010", "fenced_ms=-")
            .replace("last_lost_ms=1950", "last_lost_ms=-");
        let Outcome::Measured(m) = parse_line(&unfenced).unwrap().outcome else {
            panic!()
        };
        assert_eq!((m.fenced_ms, m.last_lost_ms), (None, None));

        let error =
            parse_line("BENCH topology=3-no-sentinel fault=partition run=1 error=not_whole")
                .unwrap();
        assert_eq!(error.outcome, Outcome::Error("not_whole".into()));
        assert_eq!(parse_line("MEASURED fencing"), None);
        assert_eq!(
            parse_line("BENCH topology=3+3 fault=pause run=0"),
            None,
            "incomplete"
        );
    }

    #[test]
    fn a_row_reports_quantiles_unfenced_runs_and_the_first_error() {
        let line = |fenced: &str, last: &str, lost: u64| {
            parse_line(
                &RUN.replace("fenced_ms=2010", &format!("fenced_ms={fenced}"))
                    .replace("last_lost_ms=1950", &format!("last_lost_ms={last}"))
                    .replace("lost=4", &format!("lost={lost}")),
            )
            .unwrap()
        };
        let mut samples = vec![
            line("1900", "1800", 2),
            line("2100", "-", 0),
            line("2000", "1950", 3),
            line("-", "12000", 40),
        ];
        let row_text = row("3+3", "partition", &samples);
        assert!(row_text.contains("runs  4"), "{row_text}");
        // Fenced runs only: 1.9, 2.0, 2.1.
        assert!(
            row_text.contains("p50 2.00 s max 2.10 s (not fenced in 1)"),
            "{row_text}"
        );
        // No lost write counts as a window of 0: 0, 1.8, 1.95, 12.
        assert!(
            row_text.contains("lost-write window p50 1.80 s max 12.00 s"),
            "{row_text}"
        );
        assert!(row_text.contains("lost 45 of 36000"), "{row_text}");
        assert!(!row_text.contains("STOPPED"), "{row_text}");
        samples.push(
            parse_line("BENCH topology=3+3 fault=partition run=4 error=not_whole_within_120s")
                .unwrap(),
        );
        assert!(row("3+3", "partition", &samples).contains("STOPPED: not_whole_within_120s"));
        let empty = row("3-no-sentinel", "pause", &samples);
        assert!(empty.contains("runs  0"), "{empty}");
        assert!(
            empty.contains("fence (resume -> writes blocked) -"),
            "{empty}"
        );
    }
}
