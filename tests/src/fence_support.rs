//! Support of the fencing tests (ADR 0019): a writer inside a pod's network namespace (a client on
//! the master's side of a partition), a writer through a Service's ClusterIP, and a sampler of
//! how many pods carry the master label and how many endpoints `-rw` has.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;

use crate::ha_support::{Conn, Reply, VALKEY_PORT};

/// The testbed's network namespace of `pod` (`vkotb-<first 12 hex digits of its UID>`).
pub async fn pod_netns(client: &kube::Client, ns: &str, pod: &str) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = pods.get(pod).await?.metadata.uid.unwrap_or_default();
    let hex = uid.replace('-', "");
    Ok(format!(
        "vkotb-{}",
        hex.get(..12).context("pod UID too short")?
    ))
}

/// Every acknowledged `SET`: its key and when its `OK` arrived.
#[derive(Debug, Default, Clone)]
pub struct Acks {
    pub keys: Vec<String>,
    pub at: Vec<Instant>,
    pub errors: usize,
    pub first_errors: Vec<String>,
}

impl Acks {
    fn ok(&mut self, key: String) {
        self.keys.push(key);
        self.at.push(Instant::now());
    }

    fn error(&mut self, error: String) {
        self.errors += 1;
        if self.first_errors.len() < 10 {
            self.first_errors.push(error);
        }
    }
}

/// A writer that stops when dropped or stopped.
pub struct AckWriter {
    stop: Arc<AtomicBool>,
    acks: Arc<Mutex<Acks>>,
    thread: Option<std::thread::JoinHandle<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl AckWriter {
    pub fn acked(&self) -> usize {
        self.acks.lock().map(|a| a.keys.len()).unwrap_or(0)
    }

    /// When each `OK` so far arrived (the writer keeps going).
    pub fn at_snapshot(&self) -> Vec<Instant> {
        self.acks.lock().map(|a| a.at.clone()).unwrap_or_default()
    }

    pub async fn stop(mut self) -> Acks {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        if let Some(thread) = self.thread.take() {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.acks.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// Plain `SET <prefix>:<n> v` to `127.0.0.1:6379` from inside the network namespace
    /// `netns` (its own OS thread, moved there with setns), one at a time, reconnecting on any
    /// error. A SET a fenced server holds is waited for up to 2 s, then the connection is
    /// dropped (never counted).
    pub fn in_netns(netns: &str, prefix: &str) -> anyhow::Result<AckWriter> {
        let file = std::fs::File::open(format!("/run/netns/{netns}"))
            .with_context(|| format!("open /run/netns/{netns}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Acks::default()));
        let (stop2, acks2, prefix) = (stop.clone(), acks.clone(), prefix.to_owned());
        let thread = std::thread::spawn(move || {
            if let Err(e) = nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET) {
                if let Ok(mut a) = acks2.lock() {
                    a.error(format!("setns: {e}"));
                }
                return;
            }
            blocking_write_loop(&stop2, &acks2, &prefix);
        });
        Ok(AckWriter {
            stop,
            acks,
            thread: Some(thread),
            task: None,
        })
    }

    /// Plain `SET` through the ClusterIP of `service` (the testbed's kube-proxy routes it), as a
    /// client of `-rw` would, reconnecting on any error.
    pub async fn through_service(
        client: &kube::Client,
        ns: &str,
        service: &str,
        prefix: &str,
    ) -> anyhow::Result<AckWriter> {
        let services: Api<Service> = Api::namespaced(client.clone(), ns);
        let ip = services
            .get(service)
            .await?
            .spec
            .and_then(|s| s.cluster_ip)
            .with_context(|| format!("{service} has no ClusterIP"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let acks = Arc::new(Mutex::new(Acks::default()));
        let (stop2, acks2, prefix) = (stop.clone(), acks.clone(), prefix.to_owned());
        let task = tokio::spawn(async move {
            let mut conn: Option<Conn> = None;
            let mut n = 0u64;
            while !stop2.load(Ordering::SeqCst) {
                if conn.is_none() {
                    match Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(2)).await {
                        Ok(c) => conn = Some(c),
                        Err(e) => {
                            if let Ok(mut a) = acks2.lock() {
                                a.error(format!("connect: {e:#}"));
                            }
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                n += 1;
                let key = format!("{prefix}:{n}");
                match c.call(&["SET", &key, "v"]).await {
                    Ok(Reply::Simple(ok)) if ok == "OK" => {
                        if let Ok(mut a) = acks2.lock() {
                            a.ok(key);
                        }
                    }
                    other => {
                        let error = match other {
                            Ok(reply) => format!("SET: {reply:?}"),
                            Err(e) => format!("SET: {e:#}"),
                        };
                        if let Ok(mut a) = acks2.lock() {
                            a.error(error);
                        }
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
        Ok(AckWriter {
            stop,
            acks,
            thread: None,
            task: Some(task),
        })
    }
}

impl Drop for AckWriter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn blocking_write_loop(stop: &AtomicBool, acks: &Mutex<Acks>, prefix: &str) {
    let addr = SocketAddr::from(([127, 0, 0, 1], 6379));
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        let stream = match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => s,
            Err(e) => {
                if let Ok(mut a) = acks.lock() {
                    a.error(format!("connect: {e}"));
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = stream.set_nodelay(true);
        let Ok(mut writer) = stream.try_clone() else {
            continue;
        };
        let mut reader = BufReader::new(stream);
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            let key = format!("{prefix}:{n}");
            let request = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
            let mut line = String::new();
            let answered = writer
                .write_all(request.as_bytes())
                .and_then(|()| reader.read_line(&mut line));
            match answered {
                Ok(_) if line == "+OK\r\n" => {
                    if let Ok(mut a) = acks.lock() {
                        a.ok(key);
                    }
                }
                Ok(_) => {
                    if let Ok(mut a) = acks.lock() {
                        a.error(line.trim().to_owned());
                    }
                    std::thread::sleep(Duration::from_millis(50));
                    break;
                }
                Err(e) => {
                    if let Ok(mut a) = acks.lock() {
                        a.error(format!("SET: {e}"));
                    }
                    break;
                }
            }
        }
    }
}

/// What the sampler saw.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    pub samples: usize,
    /// The most pods labelled `instanceRole=master` at one sample, and when first.
    pub max_master_labels: usize,
    pub max_master_labels_at: Option<Duration>,
    pub max_master_labels_pods: Vec<String>,
    /// The most ready `-rw` endpoints at one sample.
    pub max_rw_endpoints: usize,
    pub max_rw_endpoints_pods: Vec<String>,
    /// The longest time between two samples. Every watch event is sampled, so this is the
    /// sampler task's scheduling on a loaded machine, not a blind spot: reported, not bounded.
    pub longest_interval: Duration,
    /// The longest time a watch was blind: from its error to the end of its relist. A state that
    /// lasted only that long could have been missed; this is what the tests bound.
    pub longest_blind: Duration,
    /// Watch errors (each one restarts that watch with a new list).
    pub watch_errors: usize,
}

/// One watched collection: the state as the watch reported it, by object name.
struct Watched<T> {
    current: std::collections::BTreeMap<String, T>,
    /// Objects of a (re)list in progress; they replace `current` at `InitDone`.
    listing: Option<std::collections::BTreeMap<String, T>>,
    /// Listed at least once and no error since the last (re)list began.
    fresh: bool,
}

impl<T> Watched<T> {
    fn new() -> Self {
        Watched {
            current: Default::default(),
            listing: None,
            fresh: false,
        }
    }

    fn apply<K: kube::Resource>(
        &mut self,
        event: kube::runtime::watcher::Event<K>,
        value: impl Fn(&K) -> T,
    ) {
        use kube::runtime::watcher::Event;
        let name = |k: &K| k.meta().name.clone().unwrap_or_default();
        match event {
            Event::Init => self.listing = Some(Default::default()),
            Event::InitApply(k) => {
                if let Some(listing) = self.listing.as_mut() {
                    listing.insert(name(&k), value(&k));
                }
            }
            Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.current = listing;
                }
                self.fresh = true;
            }
            Event::Apply(k) => {
                self.current.insert(name(&k), value(&k));
            }
            Event::Delete(k) => {
                self.current.remove(&name(&k));
            }
        }
    }
}

/// Watches the master-labelled pods of the namespace and the EndpointSlices of `<valkey>-rw`, and
/// samples what the watches say after every event and at least every `every`, until stopped. A
/// watch delivers every state the API server went through, so a label that two pods carry at once
/// for less than `every` is seen too.
pub struct Sampler {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<Samples>,
}

impl Sampler {
    pub fn start(client: kube::Client, ns: String, valkey: String, every: Duration) -> Sampler {
        use futures::StreamExt;
        use k8s_openapi::api::discovery::v1::EndpointSlice;
        use kube::runtime::{WatchStreamExt, watcher};
        let stop = Arc::new(tokio::sync::Notify::new());
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let mut samples = Samples::default();
            let mut last: Option<Instant> = None;
            let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
            let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
            // One Valkey per test namespace; Sentinel pods carry no instanceRole.
            let mut pod_events = watcher(
                pods,
                watcher::Config::default().labels("vko.gtrfc.com/instanceRole=master"),
            )
            .default_backoff()
            .boxed();
            let mut slice_events = watcher(
                slices,
                watcher::Config::default()
                    .labels(&format!("kubernetes.io/service-name={valkey}-rw")),
            )
            .default_backoff()
            .boxed();
            let mut labelled: Watched<()> = Watched::new();
            let mut rw: Watched<Vec<String>> = Watched::new();
            let ready_endpoints = |slice: &EndpointSlice| -> Vec<String> {
                slice
                    .endpoints
                    .iter()
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .filter_map(|e| e.target_ref.as_ref()?.name.clone())
                    .collect()
            };
            // When a watch failed (None while both are fresh or before the first listing).
            let mut blind_since: Option<Instant> = None;
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stop2.notified() => break,
                    event = pod_events.next() => match event {
                        Some(Ok(event)) => labelled.apply(event, |_| ()),
                        Some(Err(_)) => {
                            samples.watch_errors += 1;
                            labelled.fresh = false;
                            blind_since.get_or_insert_with(Instant::now);
                        }
                        None => break,
                    },
                    event = slice_events.next() => match event {
                        Some(Ok(event)) => rw.apply(event, ready_endpoints),
                        Some(Err(_)) => {
                            samples.watch_errors += 1;
                            rw.fresh = false;
                            blind_since.get_or_insert_with(Instant::now);
                        }
                        None => break,
                    },
                    _ = tick.tick() => {}
                }
                if !(labelled.fresh && rw.fresh) {
                    continue;
                }
                let now = Instant::now();
                if let Some(since) = blind_since.take() {
                    samples.longest_blind = samples.longest_blind.max(now - since);
                }
                if let Some(prev) = last {
                    samples.longest_interval = samples.longest_interval.max(now - prev);
                }
                last = Some(now);
                samples.samples += 1;
                if labelled.current.len() > samples.max_master_labels {
                    samples.max_master_labels = labelled.current.len();
                    samples.max_master_labels_at = Some(started.elapsed());
                    samples.max_master_labels_pods = labelled.current.keys().cloned().collect();
                }
                let mut endpoints: Vec<String> = rw.current.values().flatten().cloned().collect();
                endpoints.sort();
                endpoints.dedup();
                if endpoints.len() > samples.max_rw_endpoints {
                    samples.max_rw_endpoints = endpoints.len();
                    samples.max_rw_endpoints_pods = endpoints;
                }
            }
            samples
        });
        Sampler { stop, task }
    }

    pub async fn stop(self) -> Samples {
        self.stop.notify_one();
        self.task.await.unwrap_or_default()
    }
}

/// The lines of `pod`'s `sidecar` container logs (from the testbed's state directory) that contain
/// any of `needles`: what the fencer itself logged.
pub async fn sidecar_log_lines(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    needles: &[&str],
) -> Vec<String> {
    let state = std::env::var("VKO_TESTBED_DIR").unwrap_or_else(|_| "/run/vko-testbed".into());
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let Ok(found) = pods.get(pod).await else {
        return Vec::new();
    };
    let uid = found.metadata.uid.unwrap_or_default();
    let dir = std::path::Path::new(&state)
        .join("pods")
        .join(uid)
        .join("logs")
        .join("sidecar");
    let Ok(attempts) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<_> = attempts.flatten().map(|e| e.path()).collect();
    files.sort();
    files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap_or_default()
                .lines()
                .filter(|line| needles.iter().any(|n| line.contains(n)))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Lines of `container`'s logs, in every attempt, of the deleted pods of `ns` whose name starts
/// with `prefix` (the testbed keeps them under `deleted-pods/`), with the pod directory's name.
pub fn deleted_pod_log_lines(
    ns: &str,
    prefix: &str,
    container: &str,
    needles: &[&str],
) -> Vec<String> {
    let state = std::env::var("VKO_TESTBED_DIR").unwrap_or_else(|_| "/run/vko-testbed".into());
    let root = std::path::Path::new(&state).join("deleted-pods");
    let Ok(entries) = std::fs::read_dir(&root) else {
        return Vec::new();
    };
    let mut pods: Vec<_> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|dir| dir.starts_with(&format!("{ns}_{prefix}")))
        .collect();
    pods.sort();
    let mut lines = Vec::new();
    for pod in pods {
        let Ok(attempts) = std::fs::read_dir(root.join(&pod).join(container)) else {
            continue;
        };
        let mut files: Vec<_> = attempts.flatten().map(|e| e.path()).collect();
        files.sort();
        for file in files {
            lines.extend(
                std::fs::read_to_string(&file)
                    .unwrap_or_default()
                    .lines()
                    .filter(|line| needles.iter().any(|n| line.contains(n)))
                    .map(|line| format!("{pod}: {line}")),
            );
        }
    }
    lines
}
