//! Throwaway valkey-server / valkey-sentinel processes for the integration tests: each in its own temp
//! dir, on a 127.0.0.1 port below the kernel's ephemeral range (so no client socket can hold it),
//! killed and removed on drop, also when the test panics.
#![allow(dead_code, unused_imports)]

use std::future::Future;
use std::time::Duration;

use vko_testkit::{Ports, SentinelSetup, spawn_sentinel};
use vko_valkey::switchover::{Address, Dial};
use vko_valkey::{ConnectOptions, SentinelClient, ValkeyClient};

pub use vko_testkit::{Proc, TempDir, eventually};

/// Ports 21500..21999, apart from the other suites' ranges.
static PORTS: Ports = Ports::new(21500, 500);

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    PORTS.free()
}

/// A temp dir of this suite, removed on drop.
pub fn temp_dir(label: &str) -> TempDir {
    TempDir::new("vko-valkey", label)
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
        Self::start_in(temp_dir("server"), extra)
    }

    pub fn start_in(dir: TempDir, extra: &[&str]) -> Server {
        Self::start_on(dir, free_port(), extra)
    }

    /// Start on a given port (e.g. to bring a server back where a client expects it).
    pub fn start_on(dir: TempDir, port: u16, extra: &[&str]) -> Server {
        let port_arg = port.to_string();
        Self::launch(
            dir,
            port,
            &["--port", &port_arg, "--appendonly", "no"],
            extra,
        )
    }

    /// Like `start` for a server that listens only on a TLS port (`--port 0 --tls-port P`).
    pub fn start_tls(dir: TempDir, extra: &[&str]) -> Server {
        let port = free_port();
        let port_arg = port.to_string();
        Self::launch(dir, port, &["--port", "0", "--tls-port", &port_arg], extra)
    }

    /// valkey-server with `listen` (its ports), no persistence, then `extra`.
    fn launch(dir: TempDir, port: u16, listen: &[&str], extra: &[&str]) -> Server {
        let dir_arg = dir.path().to_str().unwrap().to_owned();
        let local = ["--bind", "127.0.0.1", "--dir", &dir_arg, "--save", ""];
        let args: Vec<String> = listen
            .iter()
            .chain(&local)
            .chain(&["--protected-mode", "no"])
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
        let proc = Proc::spawn("valkey-server", &args, dir.path(), "valkey");
        proc.wait_listening(port, "valkey-server");
        Server { proc, port, dir }
    }

    pub fn opts(&self) -> ConnectOptions {
        local_opts(self.port)
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
        let dir = temp_dir("sentinel");
        let port = free_port();
        let setup = SentinelSetup {
            host: "localhost",
            monitor: master_name,
            master_port,
            quorum,
            options: &[
                ("down-after-milliseconds", "2000".into()),
                ("failover-timeout", "10000".into()),
            ],
        };
        let proc = spawn_sentinel(dir.path(), port, &setup);
        Sentinel { proc, port, dir }
    }

    pub fn opts(&self) -> ConnectOptions {
        local_opts(self.port)
    }

    pub async fn client(&self) -> SentinelClient {
        SentinelClient::connect(&self.opts()).await.unwrap()
    }
}

/// How the tests reach a local server: 127.0.0.1, two seconds to connect and per command.
pub fn local_opts(port: u16) -> ConnectOptions {
    let mut opts = ConnectOptions::new("127.0.0.1", port);
    opts.connect_timeout = Duration::from_secs(2);
    opts.command_timeout = Duration::from_secs(2);
    opts
}

/// Reaches the test's local instances by their announced `localhost:<port>`.
pub struct LocalDial;

impl Dial for LocalDial {
    fn valkey(
        &self,
        at: &Address,
    ) -> impl Future<Output = vko_valkey::Result<ValkeyClient>> + Send {
        let opts = local_opts(at.port);
        async move { ValkeyClient::connect(&opts).await }
    }

    fn sentinel(
        &self,
        at: &Address,
    ) -> impl Future<Output = vko_valkey::Result<SentinelClient>> + Send {
        let opts = local_opts(at.port);
        async move { SentinelClient::connect(&opts).await }
    }
}
