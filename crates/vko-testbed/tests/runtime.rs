//! Containers as processes against the real kernel (needs root): real `valkey-server` and
//! `valkey-sentinel` in pod network namespaces with overlay roots, volumes and hosts files. A testbed
//! may be running on the same machine: these tests use the real bridge but only ever remove what
//! they created themselves.
// Test helpers outside #[test] functions: failing loudly is what a test should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use vko_testbed::net::{Network, PodNet};
use vko_testbed::runtime::{self, BindMount, Container, ContainerSpec, ExecOutput};

const SHIM: &str = env!("CARGO_BIN_EXE_vko-testbed");
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

mod common;
use common::{BridgeUse, unique_uid};

fn bridge() -> BridgeUse {
    common::bridge("network and mount namespaces")
}

// ---- a pod: netns + a temp dir (hosts file, volumes, container scratch dirs, logs) ----

struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "vko-runtime-test-{}-{}-{label}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fields drop in order: containers (killed), then the network attachment, then the files.
struct Pod {
    name: String,
    containers: Vec<Container>,
    attachment: Attachment,
    dir: TempDir,
}

struct Attachment {
    network: Arc<Network>,
    net: PodNet,
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let _ = self.network.detach_pod(&self.net);
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        for container in &mut self.containers {
            let _ = container.signal(Signal::SIGKILL);
        }
        // Wait (bounded) until they are gone, so their mount namespaces are gone too.
        let deadline = Instant::now() + Duration::from_secs(5);
        for container in &mut self.containers {
            while matches!(container.try_exit(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Pod {
    fn new(bridge: &BridgeUse, name: &str) -> Pod {
        let dir = TempDir::new(name);
        let net = bridge.network.attach_pod(&unique_uid("beef")).unwrap();
        let attachment = Attachment {
            network: bridge.network.clone(),
            net,
        };
        std::fs::write(
            dir.0.join("hosts"),
            format!("127.0.0.1 localhost\n{} {name}\n", attachment.net.ip),
        )
        .unwrap();
        Pod {
            name: name.to_string(),
            containers: Vec::new(),
            attachment,
            dir,
        }
    }

    fn ip(&self) -> Ipv4Addr {
        self.attachment.net.ip
    }

    fn hosts_file(&self) -> PathBuf {
        self.dir.0.join("hosts")
    }

    /// A host directory for a volume.
    fn volume(&self, name: &str) -> PathBuf {
        let path = self.dir.0.join("volumes").join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    }

    fn spec(&self, container: &str, argv: &[&str]) -> ContainerSpec {
        ContainerSpec {
            name: format!("{}/{container}", self.name),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            env: vec![
                ("PATH".into(), PATH.into()),
                ("HOME".into(), "/root".into()),
            ],
            working_dir: None,
            netns: self.attachment.net.netns.clone(),
            hostname: self.name.clone(),
            hosts_file: self.hosts_file(),
            mounts: Vec::new(),
            scratch_dir: self.dir.0.join("containers").join(container),
            log_path: self.dir.0.join("logs").join(format!("{container}.log")),
            user: None,
            supplementary_groups: Vec::new(),
            read_only_root: false,
            rootfs: None,
        }
    }

    /// Starts a container; returns its index in `containers`.
    fn start(&mut self, spec: &ContainerSpec) -> usize {
        let container = Container::spawn(Path::new(SHIM), spec)
            .unwrap_or_else(|error| panic!("spawn {}: {error}", spec.name));
        self.containers.push(container);
        self.containers.len() - 1
    }

    fn log(&self, container: &str) -> String {
        std::fs::read_to_string(self.dir.0.join("logs").join(format!("{container}.log")))
            .unwrap_or_default()
    }

    async fn exec(&self, container: usize, argv: &[&str]) -> ExecOutput {
        self.exec_with_timeout(container, argv, Duration::from_secs(10))
            .await
            .unwrap_or_else(|error| panic!("exec {argv:?} in {}: {error}", self.name))
    }

    async fn exec_with_timeout(
        &self,
        container: usize,
        argv: &[&str],
        timeout: Duration,
    ) -> vko_testbed::Result<ExecOutput> {
        let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
        let env = vec![("PATH".to_string(), PATH.to_string())];
        runtime::exec(self.containers[container].pid(), &argv, &env, timeout).await
    }
}

fn stdout(output: &ExecOutput) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn valkey_server_argv() -> Vec<&'static str> {
    vec![
        "valkey-server",
        "--port",
        "6379",
        "--bind",
        "* -::*",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `valkey-cli -h ip ping` from inside a container; false on any failure (including a hang).
async fn pings(pod: &Pod, container: usize, ip: Ipv4Addr, port: u16) -> bool {
    let ip = ip.to_string();
    let port = port.to_string();
    match pod
        .exec_with_timeout(
            container,
            &["valkey-cli", "-h", &ip, "-p", &port, "ping"],
            Duration::from_secs(3),
        )
        .await
    {
        Ok(output) => output.exit_code == 0 && stdout(&output) == "PONG",
        Err(_) => false,
    }
}

fn host_pings(ip: Ipv4Addr) -> bool {
    Command::new("timeout")
        .args(["3", "valkey-cli", "-h", &ip.to_string(), "ping"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
        .unwrap_or(false)
}

fn host_mounts() -> String {
    std::fs::read_to_string("/proc/self/mounts").unwrap()
}

fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

// ---- tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_pods_talk_by_ip_with_their_own_hostname_hosts_file_volumes_and_root() {
    let bridge = bridge();
    let mut a = Pod::new(&bridge, "pod-a");
    let mut b = Pod::new(&bridge, "pod-b");
    assert_ne!(a.ip(), b.ip());
    let (dir_a, dir_b) = (a.dir.0.clone(), b.dir.0.clone());
    let (netns_a, netns_b) = (
        a.attachment.net.netns.clone(),
        b.attachment.net.netns.clone(),
    );

    let data = a.volume("data");
    let mut server = a.spec("valkey", &valkey_server_argv());
    server.working_dir = Some("/data".into());
    server.mounts.push(BindMount {
        source: data.clone(),
        target: "/data".into(),
        read_only: false,
    });
    let server = a.start(&server);
    let shell = b.start(&b.spec("shell", &["sleep", "3600"]));

    // Pod B reaches pod A's valkey by IP, and so does the host.
    let a_ip = a.ip();
    eventually("pod B gets PONG from pod A", || {
        pings(&b, shell, a_ip, 6379)
    })
    .await;
    assert!(host_pings(a.ip()), "the host cannot reach pod A");
    // Valkey listens inside the pod only: not on the host's loopback.
    assert!(
        !a.log("valkey")
            .contains("Warning: Could not create server TCP listening socket"),
        "{}",
        a.log("valkey")
    );

    // UTS hostname is the pod name.
    assert_eq!(stdout(&a.exec(server, &["hostname"]).await), "pod-a");
    assert_eq!(stdout(&b.exec(shell, &["hostname"]).await), "pod-b");

    // The hosts file resolves inside, and an in-place edit is seen by the running container.
    let output = b.exec(shell, &["getent", "hosts", "pod-b"]).await;
    assert!(
        stdout(&output).starts_with(&b.ip().to_string()),
        "{output:?}"
    );
    let fqdn = "somename.svc.cluster.local";
    let missing = b.exec(shell, &["getent", "hosts", fqdn]).await;
    assert_ne!(missing.exit_code, 0, "{missing:?}");
    {
        let mut hosts = std::fs::OpenOptions::new()
            .append(true)
            .open(b.hosts_file())
            .unwrap();
        writeln!(hosts, "{} {fqdn}", a.ip()).unwrap();
    }
    let output = b.exec(shell, &["getent", "hosts", fqdn]).await;
    assert_eq!(output.exit_code, 0, "{output:?}");
    assert!(
        stdout(&output).starts_with(&a.ip().to_string()),
        "{output:?}"
    );
    assert!(
        pings_name(&b, shell, fqdn).await,
        "valkey-cli -h {fqdn} from pod B"
    );

    // The volume: valkey's SAVE writes dump.rdb into its cwd (/data), which is the host dir.
    let a_ip_text = a.ip().to_string();
    let output = b
        .exec(shell, &["valkey-cli", "-h", &a_ip_text, "set", "k", "v"])
        .await;
    assert_eq!(stdout(&output), "OK", "{output:?}");
    let output = b
        .exec(shell, &["valkey-cli", "-h", &a_ip_text, "save"])
        .await;
    assert_eq!(stdout(&output), "OK", "{output:?}");
    assert!(data.join("dump.rdb").exists(), "dump.rdb not in the volume");
    let output = a
        .exec(server, &["sh", "-c", "echo from-container > /data/written"])
        .await;
    assert_eq!(output.exit_code, 0, "{output:?}");
    assert_eq!(
        std::fs::read_to_string(data.join("written")).unwrap(),
        "from-container\n"
    );

    // Writes elsewhere land in the overlay, not on the host.
    let marker = "/etc/vko-test-marker";
    let output = a
        .exec(
            server,
            &["sh", "-c", &format!("echo x > {marker} && cat {marker}")],
        )
        .await;
    assert_eq!(stdout(&output), "x", "{output:?}");
    assert!(!Path::new(marker).exists(), "{marker} leaked onto the host");
    // The host's /tmp and /run are hidden; /proc is the container's own mount.
    let output = a
        .exec(server, &["sh", "-c", "find /tmp /run -mindepth 1 | wc -l"])
        .await;
    assert_eq!(stdout(&output), "0", "{output:?}");
    let output = a.exec(server, &["cat", "/proc/self/mounts"]).await;
    let mounts = stdout(&output);
    assert!(mounts.starts_with("overlay / overlay"), "{mounts}");
    assert!(mounts.contains(" /data "), "{mounts}");
    assert!(mounts.contains(" /etc/hosts "), "{mounts}");
    // ...and nothing of the container is mounted on the host.
    assert!(!host_mounts().contains(dir_a.to_str().unwrap()));

    // A partition cuts pod A off from pod B; heal restores it.
    bridge.network.partition(&a.attachment.net).unwrap();
    assert!(
        !pings(&b, shell, a_ip, 6379).await,
        "pod A still reachable while partitioned"
    );
    bridge.network.heal(&a.attachment.net).unwrap();
    eventually("pod B reaches pod A again after heal", || {
        pings(&b, shell, a_ip, 6379)
    })
    .await;

    // The exit of a killed container is reported with its signal.
    a.containers[server].signal(Signal::SIGKILL).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), a.containers[server].wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.signal, Some(9));
    assert_eq!(status.exit_code, 137);
    // wait() again returns the same status; signaling a dead container is a no-op.
    assert_eq!(a.containers[server].wait().await.unwrap(), status);
    a.containers[server].signal(Signal::SIGTERM).unwrap();

    drop(a);
    drop(b);
    drop(bridge);
    for (netns, dir) in [(&netns_a, &dir_a), (&netns_b, &dir_b)] {
        assert!(!netns_exists(netns), "{netns} left behind");
        assert!(!dir.exists(), "{} left behind", dir.display());
        assert!(
            !host_mounts().contains(dir.to_str().unwrap()),
            "mounts of {} left on the host",
            dir.display()
        );
    }
}

async fn pings_name(pod: &Pod, container: usize, name: &str) -> bool {
    match pod
        .exec_with_timeout(
            container,
            &["valkey-cli", "-h", name, "ping"],
            Duration::from_secs(3),
        )
        .await
    {
        Ok(output) => stdout(&output) == "PONG",
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_read_only_mounts_and_read_only_roots_are_enforced() {
    let bridge = bridge();
    let mut pod = Pod::new(&bridge, "pod-users");
    let writable = pod.volume("writable");
    let read_only = pod.volume("read-only");
    std::fs::write(read_only.join("config"), "x").unwrap();
    // The container user must be able to write its volume (as fsGroup would arrange).
    nix::unistd::chown(&writable, Some(1000.into()), Some(1000.into())).unwrap();
    let read_only_volume = BindMount {
        source: read_only.clone(),
        target: "/etc/app".into(),
        read_only: true,
    };

    let mut spec = pod.spec("app", &["sh", "-c", "id -u; id -G; exec sleep 3600"]);
    spec.user = Some((1000, 1000));
    spec.supplementary_groups = vec![2000];
    spec.working_dir = Some("/work/dir".into());
    spec.mounts = vec![
        BindMount {
            source: writable.clone(),
            target: "/var/lib/app".into(),
            read_only: false,
        },
        read_only_volume.clone(),
    ];
    let app = pod.start(&spec);
    eventually("the container printed its ids", || {
        let log = pod.log("app");
        async move { log.lines().count() >= 2 }
    })
    .await;
    let log = pod.log("app");
    let mut lines = log.lines();
    assert_eq!(lines.next(), Some("1000"), "{log}");
    assert_eq!(lines.next(), Some("1000 2000"), "{log}");

    // exec runs as the container's user, in its working dir.
    assert_eq!(stdout(&pod.exec(app, &["id", "-u"]).await), "1000");
    assert_eq!(stdout(&pod.exec(app, &["pwd"]).await), "/work/dir");
    // The writable volume takes writes, which land on the host.
    let output = pod
        .exec(app, &["sh", "-c", "echo ok > /var/lib/app/file"])
        .await;
    assert_eq!(output.exit_code, 0, "{output:?}");
    assert!(writable.join("file").exists());

    // A root container with a read-only root: the root, its /tmp and the read-only volume refuse
    // writes even from root; /etc/hosts and the writable volume stay writable, as in Kubernetes.
    let mut spec = pod.spec("locked", &["sleep", "3600"]);
    spec.read_only_root = true;
    spec.mounts = vec![
        read_only_volume,
        BindMount {
            source: writable.clone(),
            target: "/var/lib/app".into(),
            read_only: false,
        },
    ];
    let locked = pod.start(&spec);
    let pid = pod.containers[locked].pid();
    eventually("the shim exec'd sleep", || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        async move { comm.trim() == "sleep" }
    })
    .await;
    for target in [
        "/etc/app/config",
        "/etc/app/new",
        "/etc/new-file",
        "/tmp/new-file",
    ] {
        let output = pod
            .exec(locked, &["sh", "-c", &format!("echo no > {target}")])
            .await;
        assert_ne!(output.exit_code, 0, "{target}: {output:?}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("Read-only file system"),
            "{target}: {output:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(read_only.join("config")).unwrap(),
        "x"
    );
    assert!(!read_only.join("new").exists());
    for target in ["/etc/hosts", "/var/lib/app/by-root"] {
        let output = pod
            .exec(
                locked,
                &["sh", "-c", &format!("echo 127.0.0.2 extra >> {target}")],
            )
            .await;
        assert_eq!(output.exit_code, 0, "{target}: {output:?}");
    }
    assert!(
        std::fs::read_to_string(pod.hosts_file())
            .unwrap()
            .contains("extra")
    );
    assert!(writable.join("by-root").exists());
}

/// A root filesystem holding only the host's `sh` and the libraries `ldd` names for it, at their
/// host paths, and a marker file.
fn minimal_rootfs(dir: &Path) {
    let sh = std::fs::canonicalize("/bin/sh").unwrap();
    let ldd = Command::new("ldd").arg(&sh).output().unwrap();
    let libraries: Vec<PathBuf> = String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|word| word.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    assert!(!libraries.is_empty(), "ldd {}: no library", sh.display());
    let copy = |from: &Path, to: &Path| {
        let target = dir.join(to.strip_prefix("/").unwrap());
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::copy(from, &target).unwrap();
    };
    copy(&sh, Path::new("/bin/sh"));
    for library in &libraries {
        copy(library, library);
    }
    std::fs::write(dir.join("marker"), "the image's own root\n").unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_with_an_image_root_sees_that_filesystem_and_not_the_hosts() {
    let bridge = bridge();
    let mut pod = Pod::new(&bridge, "pod-rootfs");
    let rootfs = pod.dir.0.join("image-rootfs");
    minimal_rootfs(&rootfs);
    let script = "read line < /marker; echo \"$line\"; \
        if [ -e /usr/bin/valkey-server ]; then echo host; else echo no-host; fi; \
        echo written > /tmp/x && echo tmp-ok; exec sh -c 'while :; do read _ < /marker; done'";
    let mut spec = pod.spec("own-root", &["sh", "-c", script]);
    spec.env = vec![("PATH".into(), "/bin".into())];
    spec.rootfs = Some(rootfs.clone());
    let own = pod.start(&spec);
    eventually("the container printed what it sees", || {
        let log = pod.log("own-root");
        async move { log.lines().count() >= 3 }
    })
    .await;
    let log = pod.log("own-root");
    assert_eq!(
        log.lines().collect::<Vec<_>>(),
        ["the image's own root", "no-host", "tmp-ok"],
        "{log}"
    );
    // An exec'd command runs in the same root.
    let output = pod
        .exec(own, &["sh", "-c", "read line < /marker; echo \"$line\""])
        .await;
    assert_eq!(stdout(&output), "the image's own root");
    // The image's files are the lower layer: the container's writes never reach them.
    let output = pod.exec(own, &["sh", "-c", "echo changed > /marker"]).await;
    assert_eq!(output.exit_code, 0);
    assert_eq!(
        std::fs::read_to_string(rootfs.join("marker")).unwrap(),
        "the image's own root\n"
    );
    // A command only the host has is not found.
    let missing = pod.start(&{
        let mut spec = pod.spec("host-only", &["valkey-server", "--version"]);
        spec.rootfs = Some(rootfs.clone());
        spec
    });
    assert_eq!(pod.containers[missing].wait().await.unwrap().exit_code, 127);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_signals_and_start_failures_are_reported() {
    let bridge = bridge();
    let mut pod = Pod::new(&bridge, "pod-exits");

    let exits = pod.start(&pod.spec("exits", &["sh", "-c", "echo bye; exit 3"]));
    let status = pod.containers[exits].wait().await.unwrap();
    assert_eq!((status.exit_code, status.signal), (3, None));
    assert!(pod.log("exits").contains("bye"));

    let sleeper = pod.start(&pod.spec("sleeper", &["sleep", "3600"]));
    assert_eq!(pod.containers[sleeper].try_exit().unwrap(), None);
    // The pid is the container's main process itself (the shim exec'd it).
    let pid = pod.containers[sleeper].pid();
    eventually("the shim exec'd sleep", || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        async move { comm.trim() == "sleep" }
    })
    .await;
    pod.containers[sleeper].signal(Signal::SIGTERM).unwrap();
    let status = pod.containers[sleeper].wait().await.unwrap();
    assert_eq!((status.exit_code, status.signal), (143, Some(15)));
    assert_eq!(pod.containers[sleeper].try_exit().unwrap(), Some(status));

    let missing = pod.start(&pod.spec("missing", &["no-such-command-vko"]));
    let status = pod.containers[missing].wait().await.unwrap();
    assert_eq!(status.exit_code, 127);
    let log = pod.log("missing");
    assert!(log.contains("not found"), "{log}");

    let mut bad_netns = pod.spec("bad-netns", &["true"]);
    bad_netns.netns = "vkotb-doesnotexist".into();
    let bad = pod.start(&bad_netns);
    let status = pod.containers[bad].wait().await.unwrap();
    assert_eq!(status.exit_code, 1);
    let log = pod.log("bad-netns");
    assert!(log.contains("network namespace"), "{log}");

    // The environment is exactly the given one.
    let mut env_spec = pod.spec("env", &["sh", "-c", "env | sort"]);
    env_spec.env.push(("GREETING".into(), "hello world".into()));
    let env = pod.start(&env_spec);
    assert_eq!(pod.containers[env].wait().await.unwrap().exit_code, 0);
    let log = pod.log("env");
    let names: Vec<&str> = log
        .lines()
        .filter_map(|line| line.split('=').next())
        .filter(|name| *name != "PWD" && *name != "SHLVL" && *name != "_")
        .collect();
    assert_eq!(names, ["GREETING", "HOME", "PATH"], "{log}");
    assert!(log.contains("GREETING=hello world"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_is_bounded_by_its_timeout_and_has_exactly_its_env() {
    let bridge = bridge();
    let mut pod = Pod::new(&bridge, "pod-exec");
    let main = pod.start(&pod.spec("main", &["sleep", "3600"]));
    let pid = pod.containers[main].pid();
    eventually("the shim exec'd sleep", || {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        async move { comm.trim() == "sleep" }
    })
    .await;

    let started = Instant::now();
    let result = pod
        .exec_with_timeout(
            main,
            &["sh", "-c", "sleep 30 | cat"],
            Duration::from_secs(1),
        )
        .await;
    assert!(result.is_err(), "{result:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    let argv = vec!["env".to_string()];
    let env = vec![
        ("PATH".to_string(), PATH.to_string()),
        ("ONLY".to_string(), "this".to_string()),
    ];
    let output = runtime::exec(pid, &argv, &env, Duration::from_secs(10))
        .await
        .unwrap();
    let mut lines: Vec<String> = stdout(&output).lines().map(String::from).collect();
    lines.sort();
    assert_eq!(lines, ["ONLY=this".to_string(), format!("PATH={PATH}")]);

    // Interactive exec: stdin is piped through.
    let mut child = runtime::exec_interactive(pid, &["cat".to_string()], &env).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"through the pipe\n")
        .await
        .unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "through the pipe\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_sentinel_runs_and_rewrites_its_config_in_a_volume() {
    let bridge = bridge();
    let mut server_pod = Pod::new(&bridge, "sentinel-master");
    let mut sentinel_pod = Pod::new(&bridge, "sentinel-0");
    let master_fqdn = "sentinel-master.vk-headless.ns1.svc.cluster.local";
    // Both pods resolve the master's FQDN.
    for pod in [&server_pod, &sentinel_pod] {
        let mut hosts = std::fs::OpenOptions::new()
            .append(true)
            .open(pod.hosts_file())
            .unwrap();
        writeln!(hosts, "{} {master_fqdn}", server_pod.ip()).unwrap();
    }
    let server = server_pod.start(&server_pod.spec("valkey", &valkey_server_argv()));

    let config_dir = sentinel_pod.volume("sentinel-config");
    std::fs::write(
        config_dir.join("sentinel.conf"),
        format!(
            "port 26379\nprotected-mode no\nsentinel resolve-hostnames yes\n\
             sentinel announce-hostnames yes\n\
             sentinel monitor mymaster {master_fqdn} 6379 1\n\
             sentinel down-after-milliseconds mymaster 2000\n"
        ),
    )
    .unwrap();
    let mut spec = sentinel_pod.spec(
        "sentinel",
        &["valkey-sentinel", "/etc/valkey-sentinel/sentinel.conf"],
    );
    spec.mounts.push(BindMount {
        source: config_dir.clone(),
        target: "/etc/valkey-sentinel".into(),
        read_only: false,
    });
    let sentinel = sentinel_pod.start(&spec);

    let master_ip = server_pod.ip();
    eventually("the master answers", || {
        pings(&server_pod, server, master_ip, 6379)
    })
    .await;
    eventually("the sentinel reports the master by its FQDN", || {
        let pod = &sentinel_pod;
        async move {
            pod.exec_with_timeout(
                sentinel,
                &[
                    "valkey-cli",
                    "-p",
                    "26379",
                    "sentinel",
                    "get-master-addr-by-name",
                    "mymaster",
                ],
                Duration::from_secs(3),
            )
            .await
            .map(|output| stdout(&output).starts_with(master_fqdn))
            .unwrap_or(false)
        }
    })
    .await;
    // The host reaches the sentinel too, and Sentinel rewrote its config in the volume.
    let sentinel_ip = sentinel_pod.ip();
    let output = Command::new("timeout")
        .args([
            "3",
            "valkey-cli",
            "-h",
            &sentinel_ip.to_string(),
            "-p",
            "26379",
            "ping",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "PONG");
    let config = std::fs::read_to_string(config_dir.join("sentinel.conf")).unwrap();
    assert!(config.contains("sentinel myid"), "{config}");
    assert!(
        !sentinel_pod.log("sentinel").contains("Could not rename"),
        "{}",
        sentinel_pod.log("sentinel")
    );
}
