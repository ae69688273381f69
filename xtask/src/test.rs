//! `cargo xtask test`: the README's test command. On a fresh machine (root, Rust, Go, Debian apt) it
//! installs the prerequisites, builds everything, checks the chart's alert rules with promtool, runs
//! the unit tests, starts a testbed, runs the end-to-end tests against it (those that can share the
//! testbed concurrently, then the `exclusive_` ones alone), then the RBAC least-privilege check over
//! the whole suite's audit log, and ALWAYS takes the testbed down and checks nothing was left
//! behind; then builds the image (`cargo xtask image`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vko_testbed::controlplane::format_duration;
/// One search of `PATH` for every command a step needs (the testbed checks its own the same way).
pub use vko_testbed::kube_proxy::find_command;
use vko_testbed::paths::{self, Paths};

use crate::testbed;

#[derive(clap::Args)]
pub struct Args {
    /// Skip `cargo test --workspace` (the unit tests).
    #[arg(long)]
    skip_unit: bool,
    /// Skip `cargo xtask image` (the release build and the image, run after the testbed is down).
    #[arg(long)]
    skip_image: bool,
    /// How many end-to-end tests run at once in the concurrent pass (libtest's `--test-threads`);
    /// the `exclusive_` tests run one at a time after it.
    #[arg(long, default_value_t = DEFAULT_E2E_THREADS)]
    e2e_threads: usize,
    /// Extra arguments for the end-to-end `cargo test`, for cargo and after a `--` for the test
    /// binary (for example a test name filter: `-- operator_roll::`, or `-- -- a:: b::`).
    #[arg(last = true)]
    e2e_args: Vec<String>,
}

/// The concurrent pass's `--test-threads`. The tests' pods are real processes on the 2 cores, and
/// several tests assert timing (a new master within 15 s). Measured on the 2-core machine
/// (2026-12-06): 25 min 46 s three at once, all green, against 37 min 59 s two at once (the CPU was
/// half idle with two); README, the paragraph after `cargo xtask test`.
pub const DEFAULT_E2E_THREADS: usize = 3;
/// A test whose name contains this needs the testbed to itself (`tests/e2e/main.rs`: by convention
/// the test's name starts with it). libtest's `--skip` matches substrings, and the exclusive pass
/// selects by the same match, so every test runs in exactly one of the two passes.
const EXCLUSIVE_MARKER: &str = "exclusive_";
/// The one end-to-end test binary (`tests/Cargo.toml`).
const E2E_TEST_BINARY: &str = "e2e";

/// promtool (`cargo xtask alerts`) and the Debian package that ships it: bookworm's `prometheus`
/// (2.42). The package also installs the Prometheus server as a service, which the install must not
/// leave running (see [`NoServiceStarts`]).
pub const PROMTOOL: (&str, &str) = ("promtool", "prometheus");
/// Commands the testbed and its tests need on the host (also `cargo xtask demo`), with the Debian
/// package that provides each.
const TESTBED_COMMANDS: [(&str, &str); 11] = [
    ("valkey-server", "valkey-server"),
    ("valkey-sentinel", "valkey-sentinel"),
    ("valkey-cli", "valkey-tools"),
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("setsid", "util-linux"),
    ("unshare", "util-linux"),
    // kube-proxy's iptables mode (vko_testbed::kube_proxy::REQUIRED_COMMANDS).
    ("iptables", "iptables"),
    ("iptables-save", "iptables"),
    ("iptables-restore", "iptables"),
    // kube-router's network policy controller (vko_testbed::kube_router::REQUIRED_COMMANDS).
    ("ipset", "ipset"),
];
/// The Prometheus server of the `prometheus` package.
const PROMETHEUS_SERVER: &str = "/usr/bin/prometheus";
/// Asked by invoke-rc.d and deb-systemd-invoke before a package script starts a service.
pub const POLICY_RC_D: &str = "/usr/sbin/policy-rc.d";
/// Exit status 101: "action forbidden" — the package scripts then start nothing.
const DENY_SERVICE_STARTS: &str = "#!/bin/sh\n\
# Written by `cargo xtask test` for the length of an apt-get install: start no service.\n\
exit 101\n";
/// Debian 12 ships no valkey; bookworm-backports has 8.0.
const VALKEY_PACKAGES: [&str; 3] = ["valkey-server", "valkey-sentinel", "valkey-tools"];
const BACKPORTS_SUITE: &str = "bookworm-backports";
const BACKPORTS_SOURCE_FILE: &str = "/etc/apt/sources.list.d/vko-backports.sources";
const BACKPORTS_SOURCE: &str = "Types: deb\n\
URIs: http://deb.debian.org/debian\n\
Suites: bookworm-backports\n\
Components: main\n\
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n";

/// Outcome of one step of the run.
struct StepResult {
    name: String,
    elapsed: Duration,
    outcome: Result<(), String>,
}

struct Steps {
    started: Instant,
    results: Vec<StepResult>,
}

impl Steps {
    /// Runs one step, printing its start and result with timing; returns whether it succeeded.
    fn run(&mut self, name: &str, step: impl FnOnce() -> anyhow::Result<()>) -> bool {
        println!();
        println!("==> [{}] {name}", format_duration(self.started.elapsed()));
        let started = Instant::now();
        let outcome = step().map_err(|error| format!("{error:#}"));
        let elapsed = started.elapsed();
        match &outcome {
            Ok(()) => println!("==> {name}: ok ({})", format_duration(elapsed)),
            Err(error) => println!("==> {name}: FAILED ({}): {error}", format_duration(elapsed)),
        }
        let ok = outcome.is_ok();
        self.results.push(StepResult {
            name: name.to_string(),
            elapsed,
            outcome,
        });
        ok
    }

    fn skip(&mut self, name: &str, why: &str) {
        println!();
        println!("==> {name}: skipped ({why})");
        self.results.push(StepResult {
            name: name.to_string(),
            elapsed: Duration::ZERO,
            outcome: Err(format!("skipped: {why}")),
        });
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    // Never take down a testbed someone is using: the run ends with `testbed down`.
    testbed::refuse_if_running(&Paths::from_env())?;
    let mut foreign_testbed = false;
    let mut steps = Steps {
        started: Instant::now(),
        results: Vec::new(),
    };
    let root = testbed::repo_root();
    // This run's matrix lines only.
    match std::fs::remove_file(matrix_log()) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            bail!("removing {}: {e}", matrix_log().display())
        }
        _ => {}
    }
    // Every end-to-end test's own time, for the summary: what to trim when the suite nears its budget.
    let mut test_times = TestTimes::default();

    let prepared = steps.run("install prerequisites", install_prerequisites)
        && steps.run("build the Kubernetes binaries", || {
            testbed::build_go_binaries().map(|_| ())
        })
        && steps.run("build helm", || crate::helm::build().map(|_| ()))
        && steps.run("build redis_exporter", || {
            crate::exporter::build().map(|_| ())
        })
        && steps.run("build kube-router", || {
            crate::kube_router::build().map(|_| ())
        })
        && steps.run("build cert-manager", || {
            crate::cert_manager::build().map(|_| ())
        })
        && steps.run("fetch the Prometheus-Operator CRDs", || {
            crate::prometheus_operator::build().map(|_| ())
        })
        && steps.run("build valkey 8.1.1 and 9.1.2", || {
            crate::valkey::build_all().map(|_| ())
        })
        && steps.run("cargo build --workspace --bins", || {
            testbed::cargo(&["build", "--workspace", "--bins"])
        });
    if prepared {
        // Before the unit tests and the testbed: a few seconds, and a failure hides nothing.
        steps.run(
            "alerts: promtool check + test rules (chart PrometheusRule)",
            || crate::alerts::check(&crate::helm::helm_binary()),
        );
        if args.skip_unit {
            println!("\n==> unit tests: skipped (--skip-unit)");
        } else {
            steps.run("unit tests: cargo test --workspace", || {
                testbed::cargo(&["test", "--workspace", "--no-fail-fast"])
            });
        }
        // The style gate of the project: a lint failure fails the run but does not hide the tests.
        steps.run("lint: cargo fmt --check, cargo clippy -D warnings", || {
            testbed::cargo(&["fmt", "--all", "--", "--check"])?;
            testbed::cargo(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--features",
                "vko-e2e/e2e",
                "--",
                "-D",
                "warnings",
            ])
        });
        let testbed_up = steps.run("testbed up", || {
            // Someone started a testbed while we were building: leave it alone (no `down` below).
            if let Err(error) = testbed::refuse_if_running(&Paths::from_env()) {
                foreign_testbed = true;
                return Err(error);
            }
            let elapsed = testbed::start_built(&Paths::from_env())?;
            println!("testbed ready in {}", format_duration(elapsed));
            Ok(())
        });
        if testbed_up {
            let threads = args.e2e_threads;
            let e2e_args = E2eArgs::parse(&args.e2e_args);
            steps.run(
                &format!("end-to-end tests, {threads} at once (all but {EXCLUSIVE_MARKER})"),
                || run_concurrent_pass(&root, &e2e_args?, threads, &mut test_times),
            );
            let e2e_args = E2eArgs::parse(&args.e2e_args);
            steps.run(
                &format!("end-to-end tests, the {EXCLUSIVE_MARKER} ones alone"),
                || run_exclusive_pass(&root, &e2e_args?, &mut test_times),
            );
            // After every other test: the audit log now holds the whole suite's requests.
            if args.e2e_args.is_empty() {
                steps.run(
                    "RBAC least privilege: the suite's audit log vs the chart's ClusterRole",
                    || run_rbac_check(&root, &mut test_times),
                );
                // Deletes the cluster-wide CRD (every Valkey): only once nothing else runs.
                steps.run(
                    "helm uninstall removes the CRD, not the PVCs (alone, last)",
                    || {
                        let args = ignored_e2e_args("helm_uninstall_crd::");
                        cargo_e2e(&root, &args, &[], &mut test_times)
                            .context("helm_uninstall_crd failed")
                    },
                );
            } else {
                println!(
                    "\n==> RBAC least-privilege check: not run (a filtered end-to-end run does not \
                     exercise every permission)"
                );
            }
        } else {
            steps.skip("end-to-end tests", "the testbed did not start");
        }
    } else {
        steps.skip("tests", "the build did not complete");
    }
    // Always, whatever happened above: a leftover from any run fails it.
    if foreign_testbed {
        steps.skip("testbed down", "the running testbed is not ours");
    } else {
        steps.run("testbed down", testbed::down);
        steps.run("check that nothing was left behind", testbed::check_clean);
    }
    // After the testbed is down (it needs none): the image assembled from this run's debug binaries
    // (as the testbed's pods ran it) and run with podman as the chart runs it — the same base,
    // layout, user and entrypoint as `cargo xtask image`, in seconds instead of a release build
    // (which would add a cold release build to every fresh-clone run).
    if !prepared {
        steps.skip("image", "the build did not complete");
    } else if args.skip_image {
        println!("\n==> image: skipped (--skip-image)");
    } else {
        let bin_dir = testbed::target_dir().join("debug");
        steps.run(
            "image: cargo xtask image --bin-dir <target>/debug (buildah, podman run)",
            || {
                crate::image::run(crate::image::Args {
                    bin_dir: Some(bin_dir),
                })
            },
        );
    }

    println!();
    println!(
        "summary ({} in total):",
        format_duration(steps.started.elapsed())
    );
    for result in &steps.results {
        let verdict = match &result.outcome {
            Ok(()) => "ok".to_string(),
            Err(error) => format!("FAILED: {}", error.lines().next().unwrap_or_default()),
        };
        println!(
            "  {:<60} {:>8}  {verdict}",
            result.name,
            format_duration(result.elapsed)
        );
    }
    test_times.print_slowest(SLOWEST_SHOWN);
    let failed = steps
        .results
        .iter()
        .filter(|result| result.outcome.is_err())
        .count();
    if failed > 0 {
        bail!("{failed} step(s) failed or were skipped");
    }
    Ok(())
}

/// The end-to-end arguments of `cargo xtask test -- <args>`: cargo's (before a `--`) and the test
/// binary's (after it).
#[derive(Debug, Clone, PartialEq)]
struct E2eArgs {
    cargo: Vec<String>,
    libtest: Vec<String>,
}

impl E2eArgs {
    fn parse(args: &[String]) -> anyhow::Result<E2eArgs> {
        let (cargo, libtest) = match args.iter().position(|arg| arg == "--") {
            Some(separator) => (&args[..separator], &args[separator + 1..]),
            None => (args, &[][..]),
        };
        if let Some(threads) = libtest.iter().find(|arg| arg.starts_with("--test-threads")) {
            bail!(
                "{threads}: the concurrent pass takes `cargo xtask test --e2e-threads <n>`, the \
                 {EXCLUSIVE_MARKER} pass always runs one test at a time"
            );
        }
        Ok(E2eArgs {
            cargo: cargo.to_vec(),
            libtest: libtest.to_vec(),
        })
    }

    /// Every target of vko-e2e (the support's own unit tests too), all but the exclusive tests,
    /// `threads` at once.
    fn concurrent_pass(&self, threads: usize) -> Vec<String> {
        let mut args = self.cargo.clone();
        args.extend([
            // Not the doc-tests (vko-e2e has none): rustdoc runs them, not the timing runner.
            "--tests".to_owned(),
            "--".to_owned(),
            "--skip".to_owned(),
            EXCLUSIVE_MARKER.to_owned(),
        ]);
        args.push(format!("--test-threads={threads}"));
        args.extend(self.libtest.iter().cloned());
        args
    }

    /// The names of the tests the user's arguments select (`--list`), to pick the exclusive ones.
    fn listing(&self) -> Vec<String> {
        let mut args = self.cargo.clone();
        args.extend(
            ["--test", E2E_TEST_BINARY, "--", "--list", "--format=terse"].map(String::from),
        );
        args.extend(self.libtest.iter().cloned());
        args
    }

    /// Exactly `tests`, one at a time. The user's filters selected them already (the listing);
    /// with `--exact` they match no other test.
    fn exclusive_pass(&self, tests: &[String]) -> Vec<String> {
        let mut args = self.cargo.clone();
        args.extend(["--test", E2E_TEST_BINARY, "--", "--test-threads=1"].map(String::from));
        args.extend(self.libtest.iter().cloned());
        if !self.libtest.iter().any(|arg| arg == "--exact") {
            args.push("--exact".to_owned());
        }
        args.extend(tests.iter().cloned());
        args
    }
}

/// The exclusive tests in a `--list --format=terse` output (`<name>: test` lines).
fn exclusive_tests(listing: &str) -> Vec<String> {
    listing
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter(|name| name.contains(EXCLUSIVE_MARKER))
        .map(str::to_owned)
        .collect()
}

fn run_concurrent_pass(
    root: &Path,
    args: &E2eArgs,
    threads: usize,
    times: &mut TestTimes,
) -> anyhow::Result<()> {
    anyhow::ensure!(threads > 0, "--e2e-threads must be at least 1");
    cargo_e2e(root, &args.concurrent_pass(threads), &[], times).context("end-to-end tests failed")
}

fn run_exclusive_pass(root: &Path, args: &E2eArgs, times: &mut TestTimes) -> anyhow::Result<()> {
    let listing = cargo_e2e_output(root, &args.listing())?;
    let tests = exclusive_tests(&listing);
    if tests.is_empty() {
        println!("no {EXCLUSIVE_MARKER} test selected");
        return Ok(());
    }
    println!("one at a time: {}", tests.join(", "));
    cargo_e2e(root, &args.exclusive_pass(&tests), &[], times)
        .context("exclusive end-to-end tests failed")
}

/// The arguments that run the `#[ignore]`d tests of one e2e module (`filter`) on their own: the
/// suite's last steps, which must not share the testbed with anything else.
fn ignored_e2e_args(filter: &str) -> [String; 6] {
    ["--test", "e2e", "--", "--ignored", "--nocapture", filter].map(String::from)
}

/// `rbac_least_privilege` is `#[ignore]`d in the suite's own run (it must see the whole suite's audit
/// log); this runs it on its own.
fn run_rbac_check(root: &Path, times: &mut TestTimes) -> anyhow::Result<()> {
    let args = ignored_e2e_args("rbac_least_privilege::");
    let verdict_file =
        std::env::temp_dir().join(format!("vko-rbac-verdict-{}", std::process::id()));
    let _ = std::fs::remove_file(&verdict_file);
    let result = cargo_e2e(
        root,
        &args,
        &[("VKO_RBAC_VERDICT_FILE", verdict_file.as_path())],
        times,
    );
    // The test writes its failed reasons here: they go into the summary, the tail of a CI log.
    let reasons = std::fs::read_to_string(&verdict_file).unwrap_or_default();
    let _ = std::fs::remove_file(&verdict_file);
    match result {
        Ok(()) => Ok(()),
        Err(error) if reasons.trim().is_empty() => {
            Err(error.context("the chart's operator RBAC is not least-privilege"))
        }
        Err(error) => {
            let reasons: Vec<&str> = reasons.lines().collect();
            let mut shown = reasons
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join("; ");
            if reasons.len() > 5 {
                shown.push_str(&format!("; and {} more", reasons.len() - 5));
            }
            Err(error.context(format!(
                "the chart's operator RBAC is not least-privilege: {shown}"
            )))
        }
    }
}

/// `cargo test -p vko-e2e --features e2e <extra_args>` against the running testbed, each test's
/// time printed after its result (`ok <12.345s>`) and kept in `times`.
fn cargo_e2e(
    root: &Path,
    extra_args: &[String],
    envs: &[(&str, &Path)],
    times: &mut TestTimes,
) -> anyhow::Result<()> {
    use std::io::BufRead;
    let args = with_report_time(extra_args);
    println!("cargo test -p vko-e2e --features e2e {}", args.join(" "));
    let mut child = e2e_command(root, &args)
        .envs(envs.iter().copied())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running cargo test -p vko-e2e")?;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line.context("reading the end-to-end tests' output")?;
            println!("{line}");
            times.record(&line);
        }
    }
    let status = child.wait().context("waiting for cargo test -p vko-e2e")?;
    if !status.success() {
        bail!("cargo test -p vko-e2e {} ({status})", args.join(" "));
    }
    Ok(())
}

/// Cargo's runner for every target: the test binary with `RUSTC_BOOTSTRAP=1`, so that its libtest
/// takes `-Z unstable-options --report-time`.
const REPORT_TIME_RUNNER: &str = "target.'cfg(all())'.runner=['env','RUSTC_BOOTSTRAP=1']";
/// How many of the slowest end-to-end tests the summary names.
const SLOWEST_SHOWN: usize = 12;

/// `args` with libtest's per-test timing after the first `--` (one is added if there is none).
fn with_report_time(args: &[String]) -> Vec<String> {
    let flags = ["-Z", "unstable-options", "--report-time"].map(String::from);
    let mut with = args.to_vec();
    match with.iter().position(|arg| arg == "--") {
        Some(separator) => {
            with.splice(separator + 1..separator + 1, flags);
        }
        None => {
            with.push("--".to_owned());
            with.extend(flags);
        }
    }
    with
}

/// The end-to-end tests' times as libtest reports them (`test <name> ... ok <1.234s>`).
#[derive(Debug, Default)]
struct TestTimes {
    times: Vec<(String, Duration)>,
    /// A test whose result line was split by its own output (`--nocapture`): the time ends a later
    /// line.
    pending: Option<String>,
}

impl TestTimes {
    /// Keeps the time of a result line; any other line (a test's own output) is ignored.
    fn record(&mut self, line: &str) {
        let (name, result) = match line
            .strip_prefix("test ")
            .and_then(|rest| rest.split_once(" ... "))
        {
            Some((name, result)) => (name.to_owned(), result),
            None => match self.pending.take() {
                Some(name) => (name, line),
                None => return,
            },
        };
        let seconds = result
            .strip_suffix("s>")
            .and_then(|result| result.rsplit_once('<'))
            .and_then(|(_, time)| time.parse::<f64>().ok());
        match seconds {
            Some(seconds) => self.times.push((name, Duration::from_secs_f64(seconds))),
            None => self.pending = Some(name),
        }
    }

    fn print_slowest(&self, count: usize) {
        if self.times.is_empty() {
            return;
        }
        let mut sorted: Vec<&(String, Duration)> = self.times.iter().collect();
        sorted.sort_by_key(|(_, time)| std::cmp::Reverse(*time));
        let total: Duration = self.times.iter().map(|(_, time)| *time).sum();
        println!(
            "the {} slowest of {} end-to-end tests ({} of test time in all):",
            count.min(sorted.len()),
            sorted.len(),
            format_duration(total)
        );
        for (name, time) in sorted.into_iter().take(count) {
            println!("  {:>8}  {name}", format_duration(*time));
        }
    }
}

/// As [`cargo_e2e`], returning what the test binary printed (cargo's own output still shows).
fn cargo_e2e_output(root: &Path, extra_args: &[String]) -> anyhow::Result<String> {
    let output = e2e_command(root, extra_args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("running cargo test -p vko-e2e")?;
    if !output.status.success() {
        bail!(
            "cargo test -p vko-e2e {} ({})",
            extra_args.join(" "),
            output.status
        );
    }
    String::from_utf8(output.stdout).context("cargo test -p vko-e2e printed no UTF-8")
}

/// Where the disruption matrix's tests append their `MATRIX` lines during a run (emptied when
/// the run starts): `cargo xtask matrix --from-log` renders the page from them.
fn matrix_log() -> std::path::PathBuf {
    testbed::target_dir().join("matrix-lines.log")
}

fn e2e_command(root: &Path, extra_args: &[String]) -> Command {
    let paths = Paths::from_env();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        // libtest's --report-time is unstable: the test binary (not cargo, whose builds would
        // change with it) runs with RUSTC_BOOTSTRAP=1, through cargo's target runner.
        .args(["--config", REPORT_TIME_RUNNER])
        // --no-fail-fast: one failing test target must not hide the results of the others.
        .args([
            "test",
            "--no-fail-fast",
            "--package",
            "vko-e2e",
            "--features",
            "e2e",
        ])
        .args(extra_args)
        .current_dir(root)
        .env(vko_e2e::matrix::LOG_ENV, matrix_log())
        .env("KUBECONFIG", paths.admin_kubeconfig())
        .env(paths::BIN_DIR_ENV, paths::bin_dir())
        .env(paths::STATE_DIR_ENV, paths.state_dir())
        .env(
            vko_testbed::harness::HELM_BIN_ENV,
            crate::helm::helm_binary(),
        );
    command
}

/// Installs what `cargo xtask test` needs (the testbed's commands and promtool), only when
/// something is missing.
pub fn install_prerequisites() -> anyhow::Result<()> {
    let required: Vec<(&str, &str)> = TESTBED_COMMANDS.into_iter().chain([PROMTOOL]).collect();
    install_commands(&required)?;
    println!("valkey: {}", describe_valkey_version());
    Ok(())
}

/// Installs what the testbed needs (`cargo xtask demo`), only when something is missing.
pub fn install_testbed_prerequisites() -> anyhow::Result<()> {
    install_commands(&TESTBED_COMMANDS)?;
    println!("valkey: {}", describe_valkey_version());
    Ok(())
}

/// Installs the Debian packages of the `(command, package)` pairs whose command is missing.
pub fn install_commands(required: &[(&str, &str)]) -> anyhow::Result<()> {
    let missing: Vec<(&str, &str)> = required
        .iter()
        .copied()
        .filter(|(command, _)| find_command(command).is_none())
        .collect();
    if missing.is_empty() {
        println!(
            "every prerequisite is installed ({})",
            required
                .iter()
                .map(|(command, _)| *command)
                .collect::<Vec<_>>()
                .join(", ")
        );
        return Ok(());
    }
    println!(
        "missing: {}",
        missing
            .iter()
            .map(|(command, package)| format!("{command} ({package})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    paths::require_root()?;
    let mut packages: Vec<&str> = Vec::new();
    let needs_valkey = missing
        .iter()
        .any(|(_, package)| VALKEY_PACKAGES.contains(package));
    for (_, package) in &missing {
        if !VALKEY_PACKAGES.contains(package) && !packages.contains(package) {
            packages.push(package);
        }
    }
    let use_backports = needs_valkey && os_codename().as_deref() == Some("bookworm");
    if use_backports && !apt_sources_mention(BACKPORTS_SUITE) {
        println!("adding the {BACKPORTS_SUITE} apt source ({BACKPORTS_SOURCE_FILE})");
        std::fs::write(BACKPORTS_SOURCE_FILE, BACKPORTS_SOURCE)
            .with_context(|| format!("writing {BACKPORTS_SOURCE_FILE}"))?;
    }
    apt(&["update"])?;
    let servers_before = pids_running(Path::new(PROMETHEUS_SERVER));
    {
        // The tests need commands, not the services some of these packages start on install.
        let _no_service_starts = NoServiceStarts::install(Path::new(POLICY_RC_D))?;
        if !packages.is_empty() {
            let mut args = vec!["install", "--yes", "--no-install-recommends"];
            args.extend(&packages);
            apt(&args)?;
        }
        if needs_valkey {
            let mut args = vec!["install", "--yes", "--no-install-recommends"];
            if use_backports {
                args.extend(["--target-release", BACKPORTS_SUITE]);
            }
            args.extend(VALKEY_PACKAGES);
            apt(&args)?;
        }
    }
    // A policy-rc.d of the machine's own may allow starts: stop the server the install started.
    for pid in pids_running(Path::new(PROMETHEUS_SERVER)) {
        if !servers_before.contains(&pid) {
            println!(
                "stopping {PROMETHEUS_SERVER} (pid {pid}), which installing `prometheus` started"
            );
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            )
            .with_context(|| format!("stopping {PROMETHEUS_SERVER} (pid {pid})"))?;
        }
    }
    let still_missing: Vec<&str> = required
        .iter()
        .map(|(command, _)| *command)
        .filter(|command| find_command(command).is_none())
        .collect();
    if !still_missing.is_empty() {
        bail!(
            "still missing after apt-get install: {}",
            still_missing.join(", ")
        );
    }
    println!("prerequisites installed");
    Ok(())
}

/// A [`POLICY_RC_D`] that forbids every service start, written when the machine has none and
/// removed again on drop. A machine's own policy-rc.d (Debian container images often ship one that
/// forbids everything) is left as it is.
pub struct NoServiceStarts {
    written: Option<PathBuf>,
}

impl NoServiceStarts {
    pub fn install(path: &Path) -> anyhow::Result<NoServiceStarts> {
        if path.exists() {
            return Ok(NoServiceStarts { written: None });
        }
        std::fs::write(path, DENY_SERVICE_STARTS)
            .with_context(|| format!("writing {}", path.display()))?;
        let made_executable =
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                .with_context(|| format!("making {} executable", path.display()));
        let guard = NoServiceStarts {
            written: Some(path.to_path_buf()),
        };
        made_executable?;
        Ok(guard)
    }
}

impl Drop for NoServiceStarts {
    fn drop(&mut self) {
        if let Some(path) = &self.written
            && let Err(error) = std::fs::remove_file(path)
        {
            eprintln!("could not remove {}: {error}", path.display());
        }
    }
}

/// The pids of the running processes whose executable is `executable`.
fn pids_running(executable: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == executable)
        })
        .collect()
}

pub fn apt(args: &[&str]) -> anyhow::Result<()> {
    let shown = format!("apt-get {}", args.join(" "));
    println!("{shown}");
    let mut command = Command::new("apt-get");
    command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    run_to_success(command, &shown)
}

/// Runs `command` (its output goes to ours) and fails, naming it as `shown`, unless it exits 0.
pub fn run_to_success(mut command: Command, shown: &str) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("`{shown}` failed ({status})");
    }
    Ok(())
}

fn describe_valkey_version() -> String {
    Command::new("valkey-server")
        .arg("--version")
        .output()
        .ok()
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string())
        .unwrap_or_else(|| "valkey-server version unknown".into())
}

fn os_codename() -> Option<String> {
    let os_release = std::fs::read_to_string("/etc/os-release").ok()?;
    os_release
        .lines()
        .find_map(|line| line.strip_prefix("VERSION_CODENAME="))
        .map(|value| value.trim_matches('"').to_string())
}

fn apt_sources_mention(suite: &str) -> bool {
    let mut files = vec![std::path::PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.path()),
        );
    }
    files.iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines()
                .any(|line| !line.trim_start().starts_with('#') && line.contains(suite))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_on_path_and_not_a_made_up_command() {
        assert!(find_command("sh").is_some());
        assert!(find_command("vko-no-such-command").is_none());
    }

    #[test]
    fn finds_its_own_process_by_executable() {
        let me = std::env::current_exe().unwrap();
        let own = i32::try_from(std::process::id()).unwrap();
        assert!(pids_running(&me).contains(&own));
        assert!(pids_running(Path::new("/vko/no-such-binary")).is_empty());
    }

    #[test]
    fn the_service_policy_is_written_only_where_none_exists_and_removed_after() {
        let dir = std::env::temp_dir().join(format!("vko-policy-rc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("policy-rc.d");
        {
            let _guard = NoServiceStarts::install(&path).unwrap();
            // Run through sh: exec'ing a file just written can fail with ETXTBSY in a test binary.
            let status = Command::new("sh").arg(&path).status().unwrap();
            assert_eq!(
                status.code(),
                Some(101),
                "the policy must forbid every start"
            );
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o755);
        }
        assert!(!path.exists(), "the written policy must be removed");

        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        drop(NoServiceStarts::install(&path).unwrap());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "#!/bin/sh\nexit 0\n",
            "a machine's own policy must be left alone"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_command_kube_proxy_needs_is_installed_by_the_prerequisites() {
        for command in vko_testbed::kube_proxy::REQUIRED_COMMANDS {
            assert!(
                TESTBED_COMMANDS.contains(&(command, vko_testbed::kube_proxy::PACKAGE)),
                "{command}"
            );
        }
    }

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|arg| (*arg).to_owned()).collect()
    }

    #[test]
    fn the_concurrent_pass_skips_the_exclusive_tests_and_keeps_the_users_arguments() {
        let args = E2eArgs::parse(&[]).unwrap();
        assert_eq!(
            args.concurrent_pass(3),
            strings(&["--tests", "--", "--skip", "exclusive_", "--test-threads=3"])
        );
        let args = E2eArgs::parse(&strings(&["operator_roll::", "--", "--nocapture"])).unwrap();
        assert_eq!(
            args.concurrent_pass(2),
            strings(&[
                "operator_roll::",
                "--tests",
                "--",
                "--skip",
                "exclusive_",
                "--test-threads=2",
                "--nocapture"
            ])
        );
    }

    #[test]
    fn the_exclusive_pass_runs_exactly_the_listed_exclusive_tests_one_at_a_time() {
        let listing = "crd_admission::crd_admission: test\n\
            operator_roll::exclusive_a_roll_survives_the_operator_being_killed_three_times: test\n\
            testbed_faults::exclusive_a_watch_survives_an_api_server_restart: test\n\
            operator_roll::bench_roll: bench\n";
        let tests = exclusive_tests(listing);
        assert_eq!(
            tests,
            strings(&[
                "operator_roll::exclusive_a_roll_survives_the_operator_being_killed_three_times",
                "testbed_faults::exclusive_a_watch_survives_an_api_server_restart",
            ])
        );
        let args = E2eArgs::parse(&strings(&["--", "testbed_", "--nocapture"])).unwrap();
        assert_eq!(
            args.listing(),
            strings(&[
                "--test",
                "e2e",
                "--",
                "--list",
                "--format=terse",
                "testbed_",
                "--nocapture"
            ])
        );
        let mut expected = strings(&[
            "--test",
            "e2e",
            "--",
            "--test-threads=1",
            "testbed_",
            "--nocapture",
            "--exact",
        ]);
        expected.extend(tests.iter().cloned());
        assert_eq!(args.exclusive_pass(&tests), expected);
        // A user's --exact is not repeated (libtest refuses a flag given twice).
        let args = E2eArgs::parse(&strings(&["--", "--exact", "a::b"])).unwrap();
        let pass = args.exclusive_pass(&tests);
        assert_eq!(pass.iter().filter(|arg| *arg == "--exact").count(), 1);
    }

    #[test]
    fn report_time_goes_to_libtest_after_the_first_separator() {
        assert_eq!(
            with_report_time(&strings(&["--tests", "--", "--skip", "x", "--", "y"])),
            strings(&[
                "--tests",
                "--",
                "-Z",
                "unstable-options",
                "--report-time",
                "--skip",
                "x",
                "--",
                "y"
            ])
        );
        assert_eq!(
            with_report_time(&strings(&["--test", "e2e"])),
            strings(&[
                "--test",
                "e2e",
                "--",
                "-Z",
                "unstable-options",
                "--report-time"
            ])
        );
    }

    #[test]
    fn test_times_are_read_from_result_lines_only() {
        let mut times = TestTimes::default();
        for line in [
            "test a::slow ... ok <312.250s>",
            "test b::fast ... FAILED <1.500s>",
            "test d::printed ... release \"vko-helm\" uninstalled",
            "ok <4.000s>",
            "test e::long has been running for over 60 seconds",
            "test result: ok. 2 passed; 0 failed; finished in 3.00s",
        ] {
            times.record(line);
        }
        assert_eq!(
            times.times,
            vec![
                ("a::slow".to_owned(), Duration::from_millis(312_250)),
                ("b::fast".to_owned(), Duration::from_millis(1_500)),
                ("d::printed".to_owned(), Duration::from_millis(4_000)),
            ]
        );
    }

    #[test]
    fn test_threads_are_refused_in_the_users_arguments() {
        let error = E2eArgs::parse(&strings(&["--", "--test-threads=4"])).unwrap_err();
        assert!(error.to_string().contains("--e2e-threads"), "{error}");
        // Before the separator it is cargo's business (and cargo has no such flag).
        assert!(E2eArgs::parse(&strings(&["crd_admission"])).is_ok());
    }

    #[test]
    fn the_backports_source_names_the_suite() {
        assert!(BACKPORTS_SOURCE.contains("Suites: bookworm-backports"));
    }
}
