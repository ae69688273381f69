//! Test support for the integration suites that run real valkey-server / valkey-sentinel
//! processes on 127.0.0.1 (vko-valkey, vko-sidecar, vko-observer): ports below the kernel's
//! ephemeral range, temp dirs removed and child processes killed on drop (also when a test
//! panics), a test Sentinel, throwaway certificates made with the `openssl` CLI, and a
//! poll-until helper. A dev-dependency only: it unwraps and panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::ffi::OsStr;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The ports one suite uses: below 32768 (`ip_local_port_range`), so no client socket can hold
/// one, and apart from the other suites' ranges.
pub struct Ports {
    base: u16,
    span: u16,
    next: AtomicU16,
}

impl Ports {
    pub const fn new(base: u16, span: u16) -> Ports {
        Ports {
            base,
            span,
            next: AtomicU16::new(0),
        }
    }

    /// A port nothing listens on right now. Starts at a pid-dependent offset so that test
    /// binaries running at the same time rarely probe the same ports.
    pub fn free(&self) -> u16 {
        self.try_free()
            .unwrap_or_else(|| panic!("no free port in {}..{}", self.base, self.base + self.span))
    }

    /// [`Ports::free`], or `None` when every port of the range is taken.
    pub fn try_free(&self) -> Option<u16> {
        let start = (std::process::id() % u32::from(self.span)) as u16;
        (0..self.span).find_map(|_| {
            let n = self.next.fetch_add(1, Ordering::SeqCst);
            let port = self.base + (start + n % self.span) % self.span;
            TcpListener::bind(("127.0.0.1", port))
                .is_ok()
                .then_some(port)
        })
    }
}

/// A temp dir `<suite>-test-<label>-<pid>-<n>`, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(suite: &str, label: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "{suite}-test-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed (SIGKILL, which works on a SIGSTOPped one too) and reaped on drop.
pub struct Proc {
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// `program` run in `dir`, stdout and stderr appended to `<dir>/<name>.log` (a restart in
    /// the same dir keeps what the previous run logged).
    pub fn spawn<S: AsRef<OsStr>>(program: &str, args: &[S], dir: &Path, name: &str) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        Proc { child, log }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// `kill -<signal>` (e.g. `STOP`, `CONT`).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} failed");
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Blocks until something accepts TCP on 127.0.0.1:`port`; panics with this process's log
    /// after 10 s.
    pub fn wait_listening(&self, port: u16, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{what} on {port} did not start: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a test Sentinel monitors and how it announces itself.
pub struct SentinelSetup<'a> {
    /// Announced host of this Sentinel and of the master (Sentinel resolves and announces
    /// host names).
    pub host: &'a str,
    pub monitor: &'a str,
    pub master_port: u16,
    pub quorum: u32,
    /// `sentinel <option> <monitor> <value>` lines after the monitor (down-after-milliseconds,
    /// auth-pass, ...).
    pub options: &'a [(&'a str, String)],
}

/// valkey-sentinel on 127.0.0.1:`port`, its config in `dir`, accepting TCP on return.
pub fn spawn_sentinel(dir: &Path, port: u16, setup: &SentinelSetup<'_>) -> Proc {
    let SentinelSetup {
        host,
        monitor,
        master_port,
        quorum,
        ..
    } = setup;
    let mut text = format!(
        "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
         sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n\
         sentinel announce-ip {host}\nsentinel announce-port {port}\n\
         sentinel monitor {monitor} {host} {master_port} {quorum}\n",
        dir = dir.display()
    );
    for (option, value) in setup.options {
        text.push_str(&format!("sentinel {option} {monitor} {value}\n"));
    }
    let conf = dir.join("sentinel.conf");
    std::fs::write(&conf, text).unwrap();
    let proc = Proc::spawn("valkey-sentinel", &[conf], dir, "sentinel");
    proc.wait_listening(port, "valkey-sentinel");
    proc
}

/// `openssl <args>` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `<name>.key` (EC P-256) + `<name>.crt` signed by `<ca>` (a self-signed CA when `ca` is
/// `None`), valid 2 days, with the `[v3]` section of `extensions` (for a CA also the `[req]`
/// config).
pub fn make_cert(dir: &Path, name: &str, ca: Option<&str>, subject: &str, extensions: &str) {
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &format!("{name}.key"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), extensions).unwrap();
    match ca {
        None => openssl(
            dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.crt"),
                "-days",
                "2",
                "-subj",
                subject,
                "-extensions",
                "v3",
                "-config",
                &format!("{name}.ext"),
            ],
        ),
        Some(ca) => {
            openssl(
                dir,
                &[
                    "req",
                    "-new",
                    "-key",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    subject,
                ],
            );
            openssl(
                dir,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    &format!("{ca}.crt"),
                    "-CAkey",
                    &format!("{ca}.key"),
                    "-CAcreateserial",
                    "-out",
                    &format!("{name}.crt"),
                    "-days",
                    "2",
                    "-extfile",
                    &format!("{name}.ext"),
                    "-extensions",
                    "v3",
                ],
            );
        }
    }
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `within`.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_is_the_one_port_of_the_range_nothing_listens_on() {
        // Every port of the range held but one, so the answer does not race other processes
        // (re-binding the port the probe had just found free failed once in a full local run,
        // 2026-12-06).
        static PORTS: Ports = Ports::new(23500, 50);
        let mut held: Vec<TcpListener> = (23500..23550)
            .filter_map(|port| TcpListener::bind(("127.0.0.1", port)).ok())
            .collect();
        let released = held.pop().expect("a port of 23500..23550 to bind");
        let left = released.local_addr().unwrap().port();
        drop(released);
        // A test running in parallel that starts a process forks this one: until the child's
        // exec closes them, it holds copies of every socket, the released one too (CI,
        // 2026-12-07: "no free port"). So the range may be full for a moment; never another port.
        let deadline = Instant::now() + Duration::from_secs(2);
        let found = loop {
            match PORTS.try_free() {
                Some(port) => break port,
                None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
                None => panic!("{left} was released, yet no port of the range became free"),
            }
        };
        assert_eq!(found, left);
    }

    #[test]
    fn a_temp_dir_is_removed_on_drop_and_a_proc_logs_into_it() {
        let dir = TempDir::new("vko-testkit", "unit");
        let path = dir.path().to_owned();
        let mut proc = Proc::spawn("sh", &["-c", "echo hello"], &path, "sh");
        std::thread::sleep(Duration::from_millis(200));
        proc.kill();
        assert_eq!(proc.log_text(), "hello\n");
        drop(dir);
        assert!(!path.exists());
    }
}
