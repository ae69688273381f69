//! Throwaway valkey-server / valkey-sentinel processes on 127.0.0.1 ports 36500..36599, each in
//! its own temp dir, killed and removed on drop (also when a test panics), plus a fake Pod API
//! and a writer that counts OK replies.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use vko_authority::InstanceRole;
use vko_sidecar::conf::{self, Identity, RoleLine};
use vko_sidecar::error::Result as SidecarResult;
use vko_sidecar::node::Node;
use vko_sidecar::pod_api::{PodApi, PodPresence};
use vko_sidecar::topology::{Discovery, Endpoint, Topology};
use vko_testkit::{Ports, SentinelSetup, spawn_sentinel};
use vko_valkey::Dialer;
use vko_valkey::{ConnectOptions, SentinelClient, ValkeyClient};

pub use vko_testkit::{Proc, TempDir, eventually};

pub const HOST: &str = "127.0.0.1";
pub const MONITOR: &str = "vkt";

/// Ports 24500..24599: below 32768 (`ip_local_port_range`), apart from the other suites' ranges.
static PORTS: Ports = Ports::new(24500, 100);

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    PORTS.free()
}

/// A temp dir of this suite, removed on drop.
pub fn temp_dir(label: &str) -> TempDir {
    TempDir::new("vko-sidecar", label)
}

/// A valkey-server run from an effective config the sidecar code wrote (persistence off).
/// Field order: the process dies before its dir is removed.
pub struct Server {
    pub proc: Proc,
    pub port: u16,
    pub dir: TempDir,
}

impl Server {
    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(HOST, self.port)
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("valkey.conf")
    }

    /// Start with `role` as the role line of a config built by `conf::active_config`.
    pub fn start(role: &RoleLine) -> Server {
        let dir = temp_dir("server");
        let port = free_port();
        let template = format!(
            "port {port}\nbind {HOST}\nprotected-mode no\nsave \"\"\nappendonly no\ndir {}\nrepl-diskless-sync no\n",
            dir.path().display()
        );
        let me = Identity {
            announce_host: HOST,
            announce_port: port,
            password: None,
        };
        let path = dir.path().join("valkey.conf");
        conf::write_private(&path, &conf::active_config(&template, &me, role)).unwrap();
        let proc = Proc::spawn("valkey-server", &[path], dir.path(), "valkey");
        proc.wait_listening(port, "valkey-server");
        Server { proc, port, dir }
    }

    /// kill -9 and start again from the same (sidecar-kept) config file, on the same port.
    pub fn crash_and_restart(&mut self) {
        self.proc.kill();
        let path = self.config_path();
        self.proc = Proc::spawn("valkey-server", &[path], self.dir.path(), "valkey");
        self.proc.wait_listening(self.port, "valkey-server");
    }

    pub fn opts(&self) -> ConnectOptions {
        let mut opts = ConnectOptions::new(HOST, self.port);
        opts.connect_timeout = Duration::from_secs(2);
        opts.command_timeout = Duration::from_secs(5);
        opts
    }

    pub async fn client(&self) -> ValkeyClient {
        ValkeyClient::connect(&self.opts()).await.unwrap()
    }
}

pub struct Sentinel {
    pub proc: Proc,
    pub port: u16,
    pub dir: TempDir,
}

impl Sentinel {
    pub fn start(master_port: u16) -> Sentinel {
        let dir = temp_dir("sentinel");
        let port = free_port();
        let setup = SentinelSetup {
            host: HOST,
            monitor: MONITOR,
            master_port,
            quorum: 2,
            options: &[
                ("down-after-milliseconds", "5000".into()),
                ("failover-timeout", "10000".into()),
                ("parallel-syncs", "1".into()),
            ],
        };
        let proc = spawn_sentinel(dir.path(), port, &setup);
        Sentinel { proc, port, dir }
    }

    pub fn endpoint(&self) -> Endpoint {
        Endpoint::new(HOST, self.port)
    }

    pub async fn client(&self) -> SentinelClient {
        let mut opts = ConnectOptions::new(HOST, self.port);
        opts.connect_timeout = Duration::from_secs(2);
        opts.command_timeout = Duration::from_secs(2);
        SentinelClient::connect(&opts).await.unwrap()
    }
}

/// Records label patches; answers `presence` from a flag and sets of leaving and gone pods.
#[derive(Default)]
pub struct FakePods {
    pub patches: Mutex<Vec<(String, InstanceRole)>>,
    pub terminating: AtomicBool,
    /// Pods that are leaving on their own, besides every pod when `terminating` is set.
    pub leaving: Mutex<BTreeSet<String>>,
    /// Pods that do not exist.
    pub gone: Mutex<BTreeSet<String>>,
    /// The API refuses every read (the sidecar's Role is gone).
    pub refused: AtomicBool,
    /// Every `vko.gtrfc.com/fenced` patch: pod, value (`None`: removed).
    pub fenced: Mutex<Vec<(String, Option<String>)>>,
    /// Every `vko.gtrfc.com/tls-certificate` patch: pod, fingerprint.
    pub tls_certificates: Mutex<Vec<(String, String)>>,
}

impl FakePods {
    pub fn last_label(&self, pod: &str) -> Option<InstanceRole> {
        self.patches
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(p, _)| p == pod)
            .map(|(_, r)| *r)
    }
}

impl PodApi for FakePods {
    fn set_role_label<'a>(
        &'a self,
        pod: &'a str,
        role: InstanceRole,
    ) -> BoxFuture<'a, SidecarResult<()>> {
        Box::pin(async move {
            self.patches.lock().unwrap().push((pod.to_owned(), role));
            Ok(())
        })
    }
    fn presence<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, SidecarResult<PodPresence>> {
        Box::pin(async move {
            Ok(if self.refused.load(Ordering::SeqCst) {
                PodPresence::Refused
            } else if self.terminating.load(Ordering::SeqCst)
                || self.leaving.lock().unwrap().contains(pod)
            {
                PodPresence::Terminating
            } else if self.gone.lock().unwrap().contains(pod) {
                PodPresence::Gone
            } else {
                PodPresence::Running { ready: true }
            })
        })
    }
    fn role_label<'a>(&'a self, pod: &'a str) -> BoxFuture<'a, SidecarResult<Option<String>>> {
        Box::pin(async move { Ok(self.last_label(pod).map(|role| role.as_str().to_owned())) })
    }
    fn set_fenced_annotation<'a>(
        &'a self,
        pod: &'a str,
        value: Option<&'a str>,
    ) -> BoxFuture<'a, SidecarResult<()>> {
        Box::pin(async move {
            self.fenced
                .lock()
                .unwrap()
                .push((pod.to_owned(), value.map(str::to_owned)));
            Ok(())
        })
    }
    fn set_tls_certificate_annotation<'a>(
        &'a self,
        pod: &'a str,
        fingerprint: &'a str,
    ) -> BoxFuture<'a, SidecarResult<()>> {
        Box::pin(async move {
            self.tls_certificates
                .lock()
                .unwrap()
                .push((pod.to_owned(), fingerprint.to_owned()));
            Ok(())
        })
    }
}

/// The sidecar's view of `server`, its peers and Sentinels.
pub fn node_for(
    server: &Server,
    peers: &[&Server],
    sentinels: &[&Sentinel],
    pods: Arc<FakePods>,
) -> Node {
    Node {
        topology: Topology {
            me: server.endpoint(),
            local: server.endpoint(),
            monitor: (!sentinels.is_empty()).then(|| MONITOR.to_owned()),
            discovery: Discovery::Static {
                peers: peers.iter().map(|p| p.endpoint()).collect(),
                sentinels: sentinels.iter().map(|s| s.endpoint()).collect(),
            },
            replica_config: server.dir.path().join("no-replica-config"),
            sentinel_cache: Default::default(),
            seen_replicas: Default::default(),
        },
        dialer: Dialer::new(None),
        pods,
        lease: None,
        my_pod: format!("pod-{}", server.port),
        active_config: server.config_path(),
    }
}

/// What a writer saw.
#[derive(Debug, Default)]
pub struct WriterLog {
    /// Keys whose SET was answered OK.
    pub acked: Vec<String>,
    pub errors: u64,
    /// Longest time between two consecutive OKs.
    pub max_gap: Duration,
}

/// Writes `SET k:<i> <i>` as fast as one connection allows until `stop`, re-finding the master
/// with `find_master` after any error. Counts only OK replies.
pub async fn writer<F, Fut>(stop: Arc<AtomicBool>, prefix: String, find_master: F) -> WriterLog
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<Endpoint>>,
{
    let mut log = WriterLog::default();
    let mut client: Option<ValkeyClient> = None;
    let mut last_ok: Option<Instant> = None;
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if client.is_none() {
            if let Some(master) = find_master().await {
                let mut opts = ConnectOptions::new(master.host.clone(), master.port);
                opts.connect_timeout = Duration::from_secs(1);
                opts.command_timeout = Duration::from_secs(5);
                client = ValkeyClient::connect(&opts).await.ok();
            }
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        }
        let Some(c) = client.as_ref() else { continue };
        let key = format!("{prefix}:{i}");
        match c.set(&key, i.to_string().as_bytes()).await {
            Ok(()) => {
                let now = Instant::now();
                if let Some(prev) = last_ok {
                    log.max_gap = log.max_gap.max(now - prev);
                }
                last_ok = Some(now);
                log.acked.push(key);
            }
            Err(_) => {
                log.errors += 1;
                client = None;
            }
        }
        i += 1;
    }
    log
}

/// How many of `keys` are missing on `server`.
pub async fn missing(server: &ValkeyClient, keys: &[String]) -> usize {
    let mut lost = 0;
    for chunk in keys.chunks(500) {
        let mut cmd = vec!["EXISTS".to_owned()];
        cmd.extend(chunk.iter().cloned());
        let n = server.command(cmd).await.unwrap().as_int().unwrap();
        lost += chunk.len() - usize::try_from(n).unwrap();
    }
    lost
}
