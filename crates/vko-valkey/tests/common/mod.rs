//! Throwaway valkey-server / valkey-sentinel processes for the integration tests: each in its own temp
//! dir, on a 127.0.0.1 port below the kernel's ephemeral range (so no client socket can hold it),
//! killed and removed on drop, also when the test panics.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use vko_valkey::{ConnectOptions, SentinelClient, ValkeyClient};

/// Ports 21500..21999: below 32768 (ip_local_port_range), away from other test suites.
const PORT_BASE: u16 = 21500;
const PORT_SPAN: u16 = 500;
static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    // Start at a pid-dependent offset so concurrently running test binaries rarely probe the same ports.
    let start = (std::process::id() % u32::from(PORT_SPAN)) as u16;
    for _ in 0..PORT_SPAN {
        let n = NEXT_PORT.fetch_add(1, Ordering::SeqCst);
        let port = PORT_BASE + (start + n) % PORT_SPAN;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {PORT_BASE}..{}", PORT_BASE + PORT_SPAN);
}

/// A temp dir removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "vko-valkey-test-{label}-{}-{}",
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

/// A child process killed (SIGKILL, works on a SIGSTOPped one too) and reaped on drop.
pub struct Proc {
    child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

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
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(program: &str, args: &[String], dir: &Path, name: &str) -> Proc {
    let log = dir.join(format!("{name}.log"));
    let out = std::fs::File::create(&log).unwrap();
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

/// One valkey-server. Field order matters: the process dies before its dir is removed.
pub struct Server {
    pub proc: Proc,
    pub port: u16,
    pub dir: TempDir,
}

impl Server {
    /// Start with `extra` arguments (`--name value` pairs) and wait until it accepts TCP.
    pub fn start(extra: &[&str]) -> Server {
        Self::start_in(TempDir::new("server"), extra)
    }

    pub fn start_in(dir: TempDir, extra: &[&str]) -> Server {
        Self::start_on(dir, free_port(), extra)
    }

    /// Start on a given port (e.g. to bring a server back where a client expects it).
    pub fn start_on(dir: TempDir, port: u16, extra: &[&str]) -> Server {
        let mut args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            dir.path().to_str().unwrap(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = spawn("valkey-server", &args, dir.path(), "valkey");
        let server = Server { proc, port, dir };
        server.wait_listening(port);
        server
    }

    /// Like `start` for a server that listens only on a TLS port (`--port 0 --tls-port P`).
    pub fn start_tls(dir: TempDir, extra: &[&str]) -> Server {
        let port = free_port();
        let mut args: Vec<String> = [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
            dir.path().to_str().unwrap(),
            "--save",
            "",
            "--protected-mode",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        let proc = spawn("valkey-server", &args, dir.path(), "valkey");
        let server = Server { proc, port, dir };
        server.wait_listening(port);
        server
    }

    fn wait_listening(&self, port: u16) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "valkey-server on {port} did not start: {}",
                self.proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn opts(&self) -> ConnectOptions {
        let mut opts = ConnectOptions::new("127.0.0.1", self.port);
        opts.connect_timeout = Duration::from_secs(2);
        opts.command_timeout = Duration::from_secs(2);
        opts
    }

    pub async fn client(&self) -> ValkeyClient {
        ValkeyClient::connect(&self.opts()).await.unwrap()
    }
}

/// One valkey-sentinel with announce-hostnames, monitoring `master_name` at `localhost:master_port`.
pub struct Sentinel {
    pub proc: Proc,
    pub port: u16,
    pub dir: TempDir,
}

impl Sentinel {
    pub fn start(master_name: &str, master_port: u16, quorum: u32) -> Sentinel {
        let dir = TempDir::new("sentinel");
        let port = free_port();
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
                 sentinel resolve-hostnames yes\nsentinel announce-hostnames yes\n\
                 sentinel announce-ip localhost\nsentinel announce-port {port}\n\
                 sentinel monitor {master_name} localhost {master_port} {quorum}\n\
                 sentinel down-after-milliseconds {master_name} 2000\n\
                 sentinel failover-timeout {master_name} 10000\n",
                dir = dir.path().display()
            ),
        )
        .unwrap();
        let proc = spawn(
            "valkey-sentinel",
            &[conf.to_str().unwrap().to_owned()],
            dir.path(),
            "sentinel",
        );
        let sentinel = Sentinel { proc, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sentinel did not start: {}",
                sentinel.proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        sentinel
    }

    pub fn opts(&self) -> ConnectOptions {
        let mut opts = ConnectOptions::new("127.0.0.1", self.port);
        opts.connect_timeout = Duration::from_secs(2);
        opts.command_timeout = Duration::from_secs(2);
        opts
    }

    pub async fn client(&self) -> SentinelClient {
        SentinelClient::connect(&self.opts()).await.unwrap()
    }
}

/// Poll `check` every 50 ms until it returns `Some`, or panic after `timeout`.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
