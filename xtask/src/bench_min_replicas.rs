//! `cargo xtask bench min-replicas`: what Valkey's own `min-replicas-to-write` would add to the
//! self-fence (ADR 0019, "a second line") and what it costs, measured on real `valkey-server`
//! processes on 127.0.0.1 (no testbed: the behaviour measured is the server's own).
//!
//! A master with `min-replicas-to-write 1` and one replica, a writer sending `SET` in a loop:
//! - **cut**: the replica stopped (SIGSTOP: its link stays open and sends nothing, as in a
//!   partition) — how long the master keeps acknowledging (every `OK` in that window is a write a
//!   cut-off master could lose), then SIGCONT and how long until it acknowledges again;
//! - **restart**: the replica killed and started again at once (a pod restart, full resync of the
//!   dataset) — how long the master refuses every write: the availability it costs.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::bench::{cpu_count, quantile};

#[derive(clap::Args)]
pub struct Args {
    /// The `min-replicas-max-lag` values to measure, in seconds (comma-separated).
    #[arg(long, default_value = "1,2,10")]
    lags: String,
    /// Runs per lag.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Keys in the dataset (`DEBUG POPULATE`, 64-byte values): the restart's full resync moves it.
    #[arg(long, default_value_t = 500_000)]
    keys: u64,
    /// The server binary (its version is printed).
    #[arg(long, default_value = "valkey-server")]
    server: String,
}

/// Every request to a server: connect, write and read are bounded by this.
const IO_TIMEOUT: Duration = Duration::from_millis(500);
/// The writer's pause between two `SET`s.
const WRITE_INTERVAL: Duration = Duration::from_millis(5);
/// How long a fault may take to show before the run is given up.
const PATIENCE: Duration = Duration::from_secs(40);

/// One reply the writer got, at `at` since the run's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reply {
    at: Duration,
    kind: ReplyKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReplyKind {
    Ok,
    /// `-NOREPLICAS`: the master refused the write.
    NoReplicas,
    /// Anything else (another error, a timeout, no connection).
    Failed,
}

/// What one fault did to the writer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    /// From the fault to the first refused write (`None`: never refused).
    refused_after: Option<Duration>,
    /// `OK`s between the fault and the first refusal (all of them, when never refused).
    acked_meanwhile: usize,
    /// From `recovered_from` (SIGCONT, or the fault for a restart) to the first `OK` after the
    /// last refusal (`None`: no `OK` after it).
    writable_after: Option<Duration>,
    /// How long writes were refused: the first refusal to the first `OK` after the last one.
    refused_for: Option<Duration>,
}

/// Reads the writer's replies around a fault at `fault`, recovered at `recovered`.
fn window(replies: &[Reply], fault: Duration, recovered: Duration) -> Window {
    let after_fault: Vec<&Reply> = replies.iter().filter(|r| r.at >= fault).collect();
    let first_refusal = after_fault.iter().find(|r| r.kind == ReplyKind::NoReplicas);
    let last_refusal = after_fault
        .iter()
        .rev()
        .find(|r| r.kind == ReplyKind::NoReplicas);
    let acked_meanwhile = after_fault
        .iter()
        .take_while(|r| r.kind != ReplyKind::NoReplicas)
        .filter(|r| r.kind == ReplyKind::Ok)
        .count();
    let ok_after_last_refusal = last_refusal.and_then(|last| {
        after_fault
            .iter()
            .find(|r| r.at > last.at && r.kind == ReplyKind::Ok)
    });
    Window {
        refused_after: first_refusal.map(|r| r.at - fault),
        acked_meanwhile,
        writable_after: ok_after_last_refusal.map(|r| r.at.saturating_sub(recovered)),
        refused_for: first_refusal
            .zip(ok_after_last_refusal)
            .map(|(first, ok)| ok.at - first.at),
    }
}

/// A `valkey-server` child, killed (and its stop lifted) on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(binary: &str, dir: &Path, port: u16, extra: &[String]) -> anyhow::Result<Server> {
        // A directory per server and run: no run loads another's dump.
        let dir = dir.join(format!("{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::File::create(dir.join("server.log"))?;
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "local",
            "--dir",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(dir.display().to_string());
        args.extend(extra.iter().cloned());
        let child = Command::new(binary)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {binary}"))?;
        let server = Server { child, port };
        let started = Instant::now();
        while command(port, &["PING"]).is_err() {
            if started.elapsed() > Duration::from_secs(10) {
                bail!("{binary} on port {port} did not answer within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let pid = i32::try_from(self.child.id()).context("pid")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("{signal} to {pid}"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.signal(Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// One command on a fresh connection: the reply's first line, or the bulk string it announces.
fn command(port: u16, args: &[&str]) -> anyhow::Result<String> {
    command_within(port, args, IO_TIMEOUT)
}

fn command_within(port: u16, args: &[&str], timeout: Duration) -> anyhow::Result<String> {
    let mut stream = connect(port, timeout)?;
    send(&mut stream, args)?;
    read_reply(&mut BufReader::new(stream))
}

fn connect(port: u16, timeout: Duration) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

fn send(stream: &mut TcpStream, args: &[&str]) -> anyhow::Result<()> {
    let mut out = format!("*{}\r\n", args.len());
    for arg in args {
        out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(out.as_bytes())?;
    Ok(())
}

fn read_reply(reader: &mut impl BufRead) -> anyhow::Result<String> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let line = line.trim_end().to_string();
    if let Some(len) = line.strip_prefix('$') {
        let len: usize = len.parse().context("bulk length")?;
        let mut body = vec![0; len + 2];
        reader.read_exact(&mut body)?;
        body.truncate(len);
        return Ok(String::from_utf8_lossy(&body).into_owned());
    }
    Ok(line)
}

fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let info = command(port, &["INFO", section]).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_string())
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let started = Instant::now();
    while !ready() {
        if started.elapsed() > PATIENCE {
            bail!("{what}: not within {} s", PATIENCE.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The writer: `SET`s on one connection (re-made after a failure) until `stop`, every reply timed.
fn writer(port: u16, base: Instant, stop: Arc<AtomicBool>) -> Vec<Reply> {
    let mut replies = Vec::new();
    let mut stream: Option<BufReader<TcpStream>> = None;
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = format!("w:{n}");
        let kind = (|| -> anyhow::Result<ReplyKind> {
            if stream.is_none() {
                stream = Some(BufReader::new(connect(port, IO_TIMEOUT)?));
            }
            let Some(reader) = stream.as_mut() else {
                bail!("no connection");
            };
            send(reader.get_mut(), &["SET", &key, "v"])?;
            let reply = read_reply(reader)?;
            Ok(if reply == "+OK" {
                ReplyKind::Ok
            } else if reply.starts_with("-NOREPLICAS") {
                ReplyKind::NoReplicas
            } else {
                ReplyKind::Failed
            })
        })()
        .unwrap_or_else(|_| {
            stream = None;
            ReplyKind::Failed
        });
        replies.push(Reply {
            at: base.elapsed(),
            kind,
        });
        std::thread::sleep(WRITE_INTERVAL);
    }
    replies
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    Cut,
    Restart,
}

/// One run: a fresh master and replica, the dataset, the fault, the writer's window.
fn run_once(args: &Args, dir: &Path, lag: u64, fault: Fault) -> anyhow::Result<Window> {
    let master_port = free_port()?;
    let replica_port = free_port()?;
    let master = Server::start(
        &args.server,
        dir,
        master_port,
        &[
            "--min-replicas-to-write".into(),
            "1".into(),
            "--min-replicas-max-lag".into(),
            lag.to_string(),
        ],
    )?;
    let populated = command_within(
        master.port,
        &["DEBUG", "POPULATE", &args.keys.to_string(), "k", "64"],
        PATIENCE,
    )?;
    if populated != "+OK" {
        bail!("DEBUG POPULATE answered {populated}");
    }
    let replica_args = [
        "--replicaof".to_string(),
        "127.0.0.1".to_string(),
        master_port.to_string(),
    ];
    let mut replica = Server::start(&args.server, dir, replica_port, &replica_args)?;
    wait_for("the replica in sync", || {
        info_field(replica_port, "replication", "master_link_status").as_deref() == Some("up")
            && info_field(master_port, "replication", "min_slaves_good_slaves").as_deref()
                == Some("1")
    })?;
    let base = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || writer(master_port, base, stop))
    };
    std::thread::sleep(Duration::from_secs(1));
    let fault_at = base.elapsed();
    let recovered_at = match fault {
        Fault::Cut => {
            replica.signal(Signal::SIGSTOP)?;
            let refused = wait_for("a refused write", || {
                command(master_port, &["SET", "probe", "v"])
                    .is_ok_and(|reply| reply.starts_with("-NOREPLICAS"))
            });
            let resumed_at = base.elapsed();
            replica.signal(Signal::SIGCONT)?;
            refused?;
            resumed_at
        }
        Fault::Restart => {
            drop(replica);
            replica = Server::start(&args.server, dir, replica_port, &replica_args)?;
            fault_at
        }
    };
    let writable = wait_for("the master writable again", || {
        info_field(master_port, "replication", "min_slaves_good_slaves").as_deref() == Some("1")
    });
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let replies = writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writer thread panicked"))?;
    writable?;
    drop(replica);
    drop(master);
    Ok(window(&replies, fault_at, recovered_at))
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn p50_max(values: &[Option<Duration>]) -> String {
    let mut ms: Vec<u64> = values
        .iter()
        .flatten()
        .map(|d| d.as_millis() as u64)
        .collect();
    let missing = values.len() - ms.len();
    if ms.is_empty() {
        return format!("- (none in {})", values.len());
    }
    ms.sort_unstable();
    let mut out = format!(
        "p50 {} max {}",
        seconds(Duration::from_millis(quantile(&ms, 0.5))),
        seconds(Duration::from_millis(quantile(&ms, 1.0)))
    );
    if missing > 0 {
        out.push_str(&format!(" ({missing} of {} none)", values.len()));
    }
    out
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let version = Command::new(&args.server)
        .arg("--version")
        .output()
        .with_context(|| format!("{} --version", args.server))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_string();
    let lags: Vec<u64> = args
        .lags
        .split(',')
        .map(|lag| lag.trim().parse().with_context(|| format!("lag {lag:?}")))
        .collect::<anyhow::Result<_>>()?;
    let dir = TempDir::new()?;
    let runs = args.runs.max(1);
    let mut rows = Vec::new();
    for &lag in &lags {
        let mut cut = Vec::new();
        let mut restart = Vec::new();
        for run in 0..runs {
            let measured = run_once(&args, dir.path(), lag, Fault::Cut)?;
            println!("BENCH lag={lag} fault=cut run={run} {measured:?}");
            cut.push(measured);
            let measured = run_once(&args, dir.path(), lag, Fault::Restart)?;
            println!("BENCH lag={lag} fault=restart run={run} {measured:?}");
            restart.push(measured);
        }
        rows.push((lag, cut, restart));
    }
    println!();
    println!(
        "min-replicas-to-write 1 ({version}; master + 1 replica on 127.0.0.1, {} keys of 64 bytes, \
         {runs} runs per row, {} CPUs)",
        args.keys,
        cpu_count()
    );
    for (lag, cut, restart) in rows {
        let acked: Vec<usize> = cut.iter().map(|w| w.acked_meanwhile).collect();
        println!(
            "  max-lag {lag:>2} s  replica cut: writes refused after {}, acknowledged meanwhile \
             {acked:?}, writable {} after the link is back  |  replica restart: writes refused \
             for {}",
            p50_max(&cut.iter().map(|w| w.refused_after).collect::<Vec<_>>()),
            p50_max(&cut.iter().map(|w| w.writable_after).collect::<Vec<_>>()),
            p50_max(&restart.iter().map(|w| w.refused_for).collect::<Vec<_>>()),
        );
    }
    Ok(())
}

/// A scratch directory for the servers' logs, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> anyhow::Result<TempDir> {
        let path =
            std::env::temp_dir().join(format!("vko-bench-min-replicas-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(TempDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(ms: u64, kind: ReplyKind) -> Reply {
        Reply {
            at: Duration::from_millis(ms),
            kind,
        }
    }

    #[test]
    fn a_window_counts_the_oks_before_the_first_refusal_and_the_first_ok_after_the_last() {
        use ReplyKind::*;
        let replies = [
            reply(900, Ok),
            reply(1000, Ok),
            reply(1500, Ok),
            reply(2100, NoReplicas),
            reply(2200, Failed),
            reply(2600, NoReplicas),
            reply(3100, Ok),
            reply(3200, Ok),
        ];
        let window = window(
            &replies,
            Duration::from_millis(1000),
            Duration::from_millis(2800),
        );
        assert_eq!(
            window,
            Window {
                refused_after: Some(Duration::from_millis(1100)),
                acked_meanwhile: 2,
                writable_after: Some(Duration::from_millis(300)),
                refused_for: Some(Duration::from_millis(1000)),
            }
        );
    }

    #[test]
    fn a_window_without_a_refusal_counts_every_ok() {
        let replies = [reply(1000, ReplyKind::Ok), reply(1200, ReplyKind::Ok)];
        let window = window(
            &replies,
            Duration::from_millis(500),
            Duration::from_millis(500),
        );
        assert_eq!(window.refused_after, None);
        assert_eq!(window.acked_meanwhile, 2);
        assert_eq!(window.writable_after, None);
        assert_eq!(window.refused_for, None);
    }

    #[test]
    fn replies_parse_status_lines_and_bulk_strings() {
        let mut simple = "+OK\r\n".as_bytes();
        assert_eq!(read_reply(&mut simple).unwrap(), "+OK");
        let mut bulk = "$11\r\nrole:master\r\n".as_bytes();
        assert_eq!(read_reply(&mut bulk).unwrap(), "role:master");
    }
}
