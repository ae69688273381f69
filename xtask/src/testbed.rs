//! `cargo xtask testbed build | up | down | status | check-clean | fault …`: the local testbed
//! Kubernetes (`fault` injects a fault through the supervisor's control socket).
//!
//! `up` starts `vko-testbed serve` (the supervisor) detached; `down` stops it and then sweeps
//! whatever a crashed or killed supervisor may have left: processes, `vkotb-*` network namespaces,
//! the bridge and pod veths, the bridge's policy routing, kube-proxy's `KUBE-*` iptables chains,
//! mounts, the state directory.
//! `check-clean` lists such leftovers.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use vko_testbed::controlplane::{self, BuildOutcome, format_duration, process_is_alive};
use vko_testbed::paths::{self, Paths};

/// A warm start takes well under a minute; a fresh machine gets generous slack.
const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// The supervisor stops every pod (each with its grace period) before the control plane.
const STOP_TIMEOUT: Duration = Duration::from_secs(120);
/// Where the network namespaces of `ip netns` live.
const NETNS_DIR: &str = "/run/netns";
/// Host-side pod veths are `vk` + 12 hex digits of the pod UID (see `vko_testbed::net`).
const HOST_VETH_PREFIX: &str = "vk";
const HOST_VETH_HEX_DIGITS: usize = 12;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: TestbedCommand,
}

#[derive(clap::Subcommand)]
enum TestbedCommand {
    /// Build the Kubernetes/etcd binaries (cached) and the vko-testbed binary.
    Build,
    /// Build what is missing, start a testbed in the background, print `export KUBECONFIG=...`.
    Up,
    /// Stop the testbed and remove every process, namespace, link, mount and file it made.
    Down,
    /// Say whether a testbed runs, and show its nodes.
    Status,
    /// Exit non-zero, listing them, if any testbed leftovers exist.
    CheckClean,
    /// Inject a fault into the running testbed: crash <ns>/<pod> <container> | delete-pod <ns>/<pod> |
    /// stop-node <node> | start-node <node> | pause-heartbeats <node> | resume-heartbeats <node> |
    /// partition <ns>/<pod> | heal <ns>/<pod> | pause <ns>/<pod> <container> |
    /// resume <ns>/<pod> <container> | restart-apiserver
    Fault {
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
    },
}

pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        TestbedCommand::Build => build(),
        TestbedCommand::Up => up().map(|_| ()),
        TestbedCommand::Down => down(),
        TestbedCommand::Status => status(),
        TestbedCommand::CheckClean => check_clean(),
        TestbedCommand::Fault { words } => fault(&words),
    }
}

/// Asks the running supervisor to inject a fault; returns once it took effect.
pub fn fault(words: &[String]) -> anyhow::Result<()> {
    let fault = vko_testbed::control::Fault::parse(words)?;
    let paths = Paths::from_env();
    let socket = vko_testbed::control::socket_path(paths.state_dir());
    vko_testbed::control::send_blocking(&socket, &fault)?;
    println!("injected {fault:?}");
    Ok(())
}

/// The repository root (xtask lives one level below it).
pub fn repo_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// The cargo target directory (`CARGO_TARGET_DIR`, else `<repo>/target`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                repo_root().join(dir)
            }
        }
        _ => repo_root().join("target"),
    }
}

fn supervisor_binary() -> PathBuf {
    target_dir().join("debug").join("vko-testbed")
}

/// Builds the Go binaries into the cache (when missing) and prints what happened.
pub fn build_go_binaries() -> anyhow::Result<BuildOutcome> {
    let dest = paths::bin_dir();
    let outcome = controlplane::build_binaries(&repo_root().join("xtask").join("k8s"), &dest, &[])?;
    match outcome {
        BuildOutcome::AlreadyBuilt => println!("Kubernetes binaries: cached in {}", dest.display()),
        BuildOutcome::Built { elapsed } => {
            println!(
                "Kubernetes binaries: built into {} in {}",
                dest.display(),
                format_duration(elapsed)
            )
        }
    }
    Ok(outcome)
}

/// `cargo xtask testbed build`: the Go binaries, the supervisor and the binaries of the operator
/// image (every testbed start builds the image from them).
pub fn build() -> anyhow::Result<()> {
    build_go_binaries()?;
    // Each binary is its package's one bin target, named like the package.
    let mut args = vec!["build", "--package", "vko-testbed", "--bin", "vko-testbed"];
    for binary in crate::image::BINARIES {
        args.extend(["--package", binary, "--bin", binary]);
    }
    cargo(&args)
}

/// Runs `cargo <args>` in the repository root.
pub fn cargo(args: &[&str]) -> anyhow::Result<()> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(args)
        .current_dir(repo_root())
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    if !status.success() {
        bail!("`cargo {}` failed ({status})", args.join(" "));
    }
    Ok(())
}

/// `cargo xtask testbed up`: returns the time from starting the supervisor to `ready`.
pub fn up() -> anyhow::Result<Duration> {
    paths::require_root()?;
    let paths = Paths::from_env();
    refuse_if_running(&paths)?;
    // Unlike valkey (a pod fails without it), a missing iptables fails the whole start: say so now.
    vko_testbed::kube_proxy::check_prerequisites()?;
    vko_testbed::kube_router::check_prerequisites()?;
    build()?;
    let elapsed = start_built(&paths)?;
    println!("testbed ready in {}", format_duration(elapsed));
    println!();
    println!("export KUBECONFIG={}", paths.admin_kubeconfig().display());
    println!(
        "export PATH={}:$PATH   # for kubectl {}",
        paths::bin_dir().display(),
        paths::KUBERNETES_VERSION
    );
    Ok(elapsed)
}

/// Fails when a testbed already runs with this state directory.
pub fn refuse_if_running(paths: &Paths) -> anyhow::Result<()> {
    if let Some(pid) = running_supervisor(paths) {
        bail!(
            "a testbed is already running (supervisor pid {pid}, state in {}): `cargo xtask testbed down` first",
            paths.state_dir().display()
        );
    }
    Ok(())
}

/// Starts a testbed from already built binaries (sweeping leftovers of an earlier one first) and
/// returns the time from starting the supervisor to `ready`.
pub fn start_built(paths: &Paths) -> anyhow::Result<Duration> {
    start_built_with_images(paths, &target_dir().join("debug"))
}

/// [`start_built`] with the operator image (sidecar, init, observer, the chart's operator) built
/// from the binaries in `bin_dir` (e.g. `target/release`): its pods run on the image's own root
/// filesystem, unpacked into the state directory, as in a user's cluster.
pub fn start_built_with_images(paths: &Paths, bin_dir: &Path) -> anyhow::Result<Duration> {
    refuse_if_running(paths)?;
    if !find_leftovers(paths)?.is_empty() {
        println!("removing leftovers of an earlier testbed first");
        sweep(paths)?;
    }
    // cert-manager's chart is installed with helm by the supervisor (both cached; built once).
    crate::helm::build()?;
    crate::cert_manager::build()?;
    // The NetworkPolicy engine the supervisor runs.
    let kube_router = crate::kube_router::build()?;
    let started = Instant::now();
    let image = crate::image::build(Some(bin_dir))?;
    let unpacked = paths.state_dir().join(UNPACKED_IMAGE_DIR);
    crate::image::unpack(&image.reference, &unpacked)?;
    println!(
        "image {} from {} unpacked into {} in {}",
        image.reference,
        bin_dir.display(),
        unpacked.display(),
        format_duration(started.elapsed())
    );
    start_supervisor(paths, &unpacked, &kube_router)
}

/// Where in the state directory the operator image is unpacked for the testbed's pods.
const UNPACKED_IMAGE_DIR: &str = "images/vko";

/// Starts the (already built) supervisor detached and waits for its ready marker. On failure the
/// supervisor's log tail is printed and everything it may have left is swept away.
fn start_supervisor(
    paths: &Paths,
    unpacked_image: &Path,
    kube_router: &Path,
) -> anyhow::Result<Duration> {
    std::fs::create_dir_all(paths.state_dir())
        .with_context(|| format!("creating {}", paths.state_dir().display()))?;
    let log_path = paths.supervisor_log();
    let log =
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    // Kept open: the supervisor deletes the state directory (log included) when it gives up, and the
    // log is exactly what we then need to show.
    let mut log_reader =
        File::open(&log_path).with_context(|| format!("opening {}", log_path.display()))?;
    let stderr = log.try_clone()?;
    let started = Instant::now();
    // setsid: a session of its own, so neither a closing terminal nor a Ctrl-C meant for this
    // command reaches the supervisor.
    let mut child = Command::new("setsid")
        .arg(supervisor_binary())
        .arg("serve")
        .arg("--state-dir")
        .arg(paths.state_dir())
        .arg("--bin-dir")
        .arg(paths::bin_dir())
        // The operator image of the rendered pods (sidecar, init, observer) and of the chart's
        // operator: this workspace's freshly built binaries, on the image's root filesystem.
        .arg("--image")
        .arg(format!(
            "{}={}",
            crate::image::IMAGE_REPOSITORY,
            unpacked_image.display()
        ))
        // cert-manager from its chart, and the CA ClusterIssuer the tests name.
        .arg("--cert-manager")
        // NetworkPolicies enforced, as on a cluster whose network plugin enforces them.
        .arg("--kube-router")
        .arg(kube_router)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(stderr)
        .spawn()
        .context("starting `setsid vko-testbed serve` (setsid is part of util-linux)")?;
    println!(
        "testbed supervisor started (pid {}), log {}",
        child.id(),
        log_path.display()
    );

    let failure = loop {
        if paths.ready_marker().is_file() {
            return Ok(started.elapsed());
        }
        if let Some(status) = child.try_wait()? {
            break format!("the supervisor exited ({status}) before the testbed was ready");
        }
        if started.elapsed() > READY_TIMEOUT {
            break format!(
                "the testbed was not ready within {}s",
                READY_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!(
        "{failure}; the supervisor's log ends with:\n{}",
        controlplane::file_tail(&mut log_reader, 40)
    );
    if let Err(error) = down() {
        eprintln!("cleaning up after the failed start: {error:#}");
    }
    let _ = child.try_wait();
    bail!("{failure}")
}

/// The pid of a live supervisor for this state directory, if any.
fn running_supervisor(paths: &Paths) -> Option<u32> {
    controlplane::read_supervisor_pid(paths).filter(|pid| is_supervisor(*pid, paths))
}

/// Whether `pid` is a live `vko-testbed serve` for this state directory (guards against pid reuse).
fn is_supervisor(pid: u32, paths: &Paths) -> bool {
    process_is_alive(pid)
        && cmdline(pid).is_some_and(|args| {
            args.iter().any(|arg| arg.ends_with("vko-testbed"))
                && args.iter().any(|arg| arg == "serve")
                && mentions_dir(&args, paths.state_dir())
        })
}

/// `cargo xtask testbed down`.
pub fn down() -> anyhow::Result<()> {
    paths::require_root()?;
    let paths = Paths::from_env();
    stop_demo_operator(&paths);
    if let Some(pid) = running_supervisor(&paths) {
        println!("stopping the testbed supervisor (pid {pid})");
        let _ = signal(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while process_is_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        if process_is_alive(pid) {
            eprintln!(
                "the supervisor did not stop within {}s; killing it",
                STOP_TIMEOUT.as_secs()
            );
            let _ = signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    let swept = sweep(&paths)?;
    if swept.is_empty() {
        println!("testbed down; nothing left behind");
    } else {
        println!("testbed down; swept what the supervisor left behind:");
        for leftover in swept {
            println!("  {leftover}");
        }
    }
    Ok(())
}

/// Stops the operator `cargo xtask demo` started (first, so it does not react to its pods dying).
/// The pid is only trusted while it still names a `vko-operator` process.
fn stop_demo_operator(paths: &Paths) {
    let pid_file = crate::demo::operator_pid_file(paths);
    let Some(pid) = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
    else {
        return;
    };
    let is_operator = cmdline(pid)
        .and_then(|args| args.first().cloned())
        .is_some_and(|program| program.ends_with("vko-operator"));
    if is_operator {
        println!("stopping the demo operator (pid {pid})");
        let _ = signal(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_is_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        if process_is_alive(pid) {
            let _ = signal(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
    let _ = std::fs::remove_file(&pid_file);
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) -> nix::Result<()> {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal)
}

/// `cargo xtask testbed status`.
pub fn status() -> anyhow::Result<()> {
    let paths = Paths::from_env();
    match running_supervisor(&paths) {
        Some(pid) => {
            let ready = paths.ready_marker().is_file();
            println!(
                "testbed {} (supervisor pid {pid}, state in {})",
                if ready {
                    "running and ready"
                } else {
                    "starting"
                },
                paths.state_dir().display()
            );
            println!("export KUBECONFIG={}", paths.admin_kubeconfig().display());
            if ready {
                let kubectl = paths::bin_dir().join("kubectl");
                let _ = Command::new(kubectl)
                    .args(["get", "nodes", "-o", "wide"])
                    .env("KUBECONFIG", paths.admin_kubeconfig())
                    .status();
            }
        }
        None => {
            println!("no testbed is running");
            let leftovers = find_leftovers(&paths)?;
            if !leftovers.is_empty() {
                println!("leftovers (`cargo xtask testbed down` removes them):");
                for leftover in leftovers {
                    println!("  {leftover}");
                }
            }
        }
    }
    Ok(())
}

/// `cargo xtask testbed check-clean`.
pub fn check_clean() -> anyhow::Result<()> {
    let leftovers = find_leftovers(&Paths::from_env())?;
    if leftovers.is_empty() {
        println!(
            "clean: no testbed process, network namespace, link, policy route, KUBE-* iptables \
             chain or ipset, mount or state directory"
        );
        return Ok(());
    }
    for leftover in &leftovers {
        println!("leftover: {leftover}");
    }
    bail!("{} testbed leftover(s) found", leftovers.len())
}

/// Kills, deletes and unmounts every leftover; returns what it found.
fn sweep(paths: &Paths) -> anyhow::Result<Vec<String>> {
    let found = find_leftovers(paths)?;
    // Processes first: they hold namespaces and mounts. Repeat, since a dying supervisor or shim
    // may still spawn for a moment.
    for _ in 0..10 {
        let processes = leftover_processes(paths)?;
        if processes.is_empty() {
            break;
        }
        for (pid, _) in &processes {
            let _ = signal(*pid, nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    for netns in leftover_netns()? {
        run_quietly("ip", &["netns", "delete", &netns]);
        // `ip netns delete` fails on a half-made namespace; the mount and the file are what matter.
        let path = Path::new(NETNS_DIR).join(&netns);
        let _ = nix::mount::umount2(&path, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_file(&path);
    }
    for link in leftover_links()? {
        run_quietly("ip", &["link", "delete", &link]);
    }
    if let Err(error) = vko_testbed::net::remove_policy_routing() {
        eprintln!("removing the testbed's policy routing: {error}");
    }
    // Before the state directory goes: `kube-proxy --cleanup` takes its configuration from there.
    let kube_proxy_config = vko_testbed::kube_proxy::config_file(paths);
    if let Err(error) = vko_testbed::kube_proxy::cleanup(
        &paths::bin_dir().join("kube-proxy"),
        Some(&kube_proxy_config),
    ) {
        eprintln!("removing kube-proxy's iptables chains: {error}");
    }
    // After the chains that name them.
    if let Err(error) = vko_testbed::kube_router::remove_sets() {
        eprintln!("removing kube-router's ipsets: {error}");
    }
    paths::remove_state_dir(paths.state_dir())?;
    let remaining = find_leftovers(paths)?;
    if !remaining.is_empty() {
        bail!(
            "could not remove every testbed leftover:\n  {}",
            remaining.join("\n  ")
        );
    }
    Ok(found)
}

fn run_quietly(program: &str, args: &[&str]) {
    let _ = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Everything a testbed leaves behind when it is not cleanly stopped, described for a human.
pub fn find_leftovers(paths: &Paths) -> anyhow::Result<Vec<String>> {
    let mut leftovers = Vec::new();
    for (pid, args) in leftover_processes(paths)? {
        leftovers.push(format!("process {pid}: {}", args.join(" ")));
    }
    for netns in leftover_netns()? {
        leftovers.push(format!("network namespace {netns}"));
    }
    for link in leftover_links()? {
        leftovers.push(format!("network link {link}"));
    }
    for routing in vko_testbed::net::leftover_policy_routing()? {
        leftovers.push(format!("policy routing: {routing}"));
    }
    for chain in vko_testbed::kube_proxy::leftover_chains()? {
        leftovers.push(format!("kube-proxy or kube-router chain ({chain})"));
    }
    for set in vko_testbed::kube_router::leftover_sets()? {
        leftovers.push(format!("kube-router ipset {set}"));
    }
    for mount in paths::mounts_under(paths.state_dir())? {
        leftovers.push(format!("mount {}", mount.display()));
    }
    if paths.state_dir().exists() {
        leftovers.push(format!("state directory {}", paths.state_dir().display()));
    }
    Ok(leftovers)
}

/// Processes that belong to a testbed: anything naming the state directory on its command line or
/// working in it (supervisor, control plane, shims), and anything inside a `vkotb-*` network
/// namespace (containers). Never this process or its ancestors.
fn leftover_processes(paths: &Paths) -> anyhow::Result<Vec<(u32, Vec<String>)>> {
    let netns_inodes: Vec<u64> = leftover_netns()?
        .iter()
        .filter_map(|name| std::fs::metadata(Path::new(NETNS_DIR).join(name)).ok())
        .map(|metadata| metadata.ino())
        .collect();
    let ancestors = ancestors_of_self();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<u32>().ok())
        else {
            continue;
        };
        if ancestors.contains(&pid) || !process_is_alive(pid) {
            continue;
        }
        // Kernel threads have an empty command line.
        let Some(args) = cmdline(pid).filter(|args| !args.is_empty()) else {
            continue;
        };
        let in_state_dir = mentions_dir(&args, paths.state_dir())
            || std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|cwd| cwd.starts_with(paths.state_dir()));
        let in_pod_netns = std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .is_ok_and(|metadata| netns_inodes.contains(&metadata.ino()));
        if in_state_dir || in_pod_netns {
            found.push((pid, args));
        }
    }
    Ok(found)
}

fn ancestors_of_self() -> Vec<u32> {
    let mut ancestors = vec![std::process::id()];
    let mut pid = std::process::id();
    while let Some(parent) = parent_pid(pid).filter(|parent| *parent > 1) {
        ancestors.push(parent);
        pid = parent;
    }
    ancestors
}

fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split(' ').nth(1)?.parse().ok()
}

fn cmdline(pid: u32) -> Option<Vec<String>> {
    let bytes = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        bytes
            .split(|byte| *byte == 0)
            .filter(|arg| !arg.is_empty())
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect(),
    )
}

/// Whether any argument names `dir` or a path inside it (also as `--flag=<path>`).
fn mentions_dir(args: &[String], dir: &Path) -> bool {
    let dir = dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    args.iter().any(|arg| {
        arg.match_indices(dir).any(|(index, _)| {
            let before_ok = index == 0 || arg[..index].ends_with('=');
            let after = &arg[index + dir.len()..];
            before_ok && (after.is_empty() || after.starts_with('/'))
        })
    })
}

fn leftover_netns() -> anyhow::Result<Vec<String>> {
    let entries = match std::fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error).context("listing /run/netns"),
    };
    let mut names: Vec<String> = entries
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str().map(str::to_string))
        .filter(|name| name.starts_with(paths::NETNS_PREFIX))
        .collect();
    names.sort();
    Ok(names)
}

/// The bridge and every host-side pod veth.
fn leftover_links() -> anyhow::Result<Vec<String>> {
    let output = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .context("running `ip -o link show`")?;
    if !output.status.success() {
        bail!(
            "`ip -o link show` failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(testbed_links(&String::from_utf8_lossy(&output.stdout)))
}

/// Testbed link names in `ip -o link show` output (`3: vk0123456789ab@if2: <...`).
fn testbed_links(ip_output: &str) -> Vec<String> {
    ip_output
        .lines()
        .filter_map(|line| line.split(": ").nth(1))
        .map(|name| name.split('@').next().unwrap_or(name).to_string())
        .filter(|name| name == paths::BRIDGE_NAME || is_host_veth(name))
        .collect()
}

fn is_host_veth(name: &str) -> bool {
    name.strip_prefix(HOST_VETH_PREFIX).is_some_and(|hex| {
        hex.len() == HOST_VETH_HEX_DIGITS && hex.chars().all(|c| c.is_ascii_hexdigit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_dir_matches_paths_inside_the_dir_only() {
        let dir = Path::new("/run/vko-testbed");
        let args = |list: &[&str]| list.iter().map(|arg| arg.to_string()).collect::<Vec<_>>();
        assert!(mentions_dir(
            &args(&["etcd", "--data-dir=/run/vko-testbed/etcd"]),
            dir
        ));
        assert!(mentions_dir(
            &args(&["vko-testbed", "serve", "--state-dir", "/run/vko-testbed"]),
            dir
        ));
        assert!(mentions_dir(
            &args(&["shim", "--spec", "/run/vko-testbed/pods/x/spec.json"]),
            dir
        ));
        assert!(!mentions_dir(
            &args(&["x", "/run/vko-testbed-other/a"]),
            dir
        ));
        assert!(!mentions_dir(&args(&["x", "/tmp/run/vko-testbed"]), dir));
        assert!(!mentions_dir(&args(&["bash"]), dir));
    }

    #[test]
    fn finds_the_bridge_and_pod_veths_in_ip_output() {
        let output = "1: lo: <LOOPBACK,UP> mtu 65536\n\
                      2: eth0: <BROADCAST> mtu 1500\n\
                      3: vkotb0: <BROADCAST,UP> mtu 1500\n\
                      4: vk0123456789ab@if2: <BROADCAST> mtu 1500 master vkotb0\n\
                      5: vkother@if3: <BROADCAST> mtu 1500\n";
        assert_eq!(
            testbed_links(output),
            vec!["vkotb0".to_string(), "vk0123456789ab".to_string()]
        );
    }

    #[test]
    fn this_process_and_its_parent_are_ancestors() {
        let ancestors = ancestors_of_self();
        assert_eq!(ancestors[0], std::process::id());
    }
}
