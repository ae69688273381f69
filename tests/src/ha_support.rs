//! Shared by the Sentinel HA end-to-end tests: a minimal RESP client (the tests need exact replies
//! and thousands of commands, so no `valkey-cli` process per command), pod-name/FQDN → pod-IP
//! resolution, the master as Sentinel names it, writers that record every acknowledged key, the
//! valkey-server SIGKILL of a pod, `valkey-cli`'s trimmed answer, a bare Valkey pod, whether a pod
//! is Ready, and the retry loop the HA tests wait with (`eventually`).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

pub const VALKEY_PORT: u16 = 6379;
pub const SENTINEL_PORT: u16 = 26379;
pub const ROLE_LABEL: &str = "vko.gtrfc.com/instanceRole";

/// A bare Valkey pod of `image` (no persistence, protected mode off), Ready when its own
/// `valkey-cli` gets `PONG`; with `node`, pinned to that node.
pub fn valkey_pod(name: &str, image: &str, node: Option<&str>) -> String {
    let node_name = node
        .map(|node| format!("\n  nodeName: {node}"))
        .unwrap_or_default();
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:{node_name}
  terminationGracePeriodSeconds: 2
  containers:
  - name: valkey
    image: {image}
    args: ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
    readinessProbe:
      exec: {{command: ["valkey-cli", "ping"]}}
      periodSeconds: 1
"#
    )
}

/// What `valkey-cli -h <ip> <args>` answers, without its trailing newline (what the tests compare
/// with `OK`, a count or a value).
pub async fn valkey_cli_reply(ip: &str, args: &[&str]) -> anyhow::Result<String> {
    let answer = vko_testbed::harness::valkey_cli(ip, args).await?;
    Ok(answer.trim().to_owned())
}

/// Whether the pod's `Ready` condition is `True`.
pub fn pod_is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Retries `check` every 200 ms until it succeeds, for at most `timeout`; the error names `what`
/// and the last failure.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match check().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() >= deadline => {
                bail!("{what}: not within {timeout:?}; last: {error:#}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<String>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    pub fn items(&self) -> &[Reply] {
        match self {
            Reply::Array(Some(items)) => items,
            _ => &[],
        }
    }

    /// A flat `[key, value, key, value…]` array (SENTINEL MASTER and each entry of REPLICAS /
    /// SENTINELS) as a map.
    pub fn as_map(&self) -> BTreeMap<String, String> {
        self.items()
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((k.text()?.to_owned(), v.text()?.to_owned())),
                _ => None,
            })
            .collect()
    }

    /// Every string inside the reply, recursively (for the "no IP address" check).
    pub fn strings(&self) -> Vec<String> {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Bulk(Some(s)) => vec![s.clone()],
            Reply::Int(i) => vec![i.to_string()],
            Reply::Bulk(None) | Reply::Array(None) => vec![],
            Reply::Array(Some(items)) => items.iter().flat_map(Reply::strings).collect(),
        }
    }
}

/// One connection to a Valkey or Sentinel.
pub struct Conn {
    reader: BufReader<TcpStream>,
    timeout: Duration,
}

impl Conn {
    pub async fn connect(ip: &str, port: u16, timeout: Duration) -> anyhow::Result<Conn> {
        let stream = tokio::time::timeout(timeout, TcpStream::connect((ip, port)))
            .await
            .with_context(|| format!("connecting to {ip}:{port} timed out"))??;
        stream.set_nodelay(true)?;
        Ok(Conn {
            reader: BufReader::new(stream),
            timeout,
        })
    }

    /// Sends one command and reads its reply (an `Error` reply is `Ok(Reply::Error)`).
    pub async fn call(&mut self, args: &[&str]) -> anyhow::Result<Reply> {
        let mut request = format!("*{}\r\n", args.len()).into_bytes();
        for arg in args {
            request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            request.extend_from_slice(arg.as_bytes());
            request.extend_from_slice(b"\r\n");
        }
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            self.reader.get_mut().write_all(&request).await?;
            read_reply(&mut self.reader).await
        })
        .await
        .with_context(|| format!("{} timed out", args.join(" ")))?
    }
}

fn read_reply(
    reader: &mut BufReader<TcpStream>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<Reply>> + Send + '_>> {
    Box::pin(async move {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            bail!("connection closed");
        }
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1.min(line.len()));
        Ok(match kind {
            "+" => Reply::Simple(rest.to_owned()),
            "-" => Reply::Error(rest.to_owned()),
            ":" => Reply::Int(rest.parse()?),
            "$" => {
                let len: i64 = rest.parse()?;
                if len < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut data = vec![0; usize::try_from(len)? + 2];
                    reader.read_exact(&mut data).await?;
                    data.truncate(data.len() - 2);
                    Reply::Bulk(Some(String::from_utf8_lossy(&data).into_owned()))
                }
            }
            "*" => {
                let len: i64 = rest.parse()?;
                if len < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::new();
                    for _ in 0..len {
                        items.push(read_reply(reader).await?);
                    }
                    Reply::Array(Some(items))
                }
            }
            other => bail!("unexpected RESP type {other:?} in {line:?}"),
        })
    })
}

/// One command on a fresh connection.
pub async fn call(ip: &str, port: u16, args: &[&str]) -> anyhow::Result<Reply> {
    Conn::connect(ip, port, Duration::from_secs(5))
        .await?
        .call(args)
        .await
}

/// `INFO <section>` as a text.
pub async fn info(ip: &str, section: &str) -> anyhow::Result<String> {
    let reply = call(ip, VALKEY_PORT, &["INFO", section]).await?;
    reply
        .text()
        .map(str::to_owned)
        .with_context(|| format!("INFO {section}: {reply:?}"))
}

/// The value of `field:` in an INFO text.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether `text` contains a dotted-quad IPv4 address.
pub fn contains_ipv4(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut start = 0;
    while start < bytes.len() {
        if bytes[start].is_ascii_digit() && (start == 0 || !bytes[start - 1].is_ascii_digit()) {
            let mut i = start;
            let mut groups = 0;
            loop {
                let group_start = i;
                while i < bytes.len() && bytes[i].is_ascii_digit() && i - group_start < 3 {
                    i += 1;
                }
                if i == group_start {
                    break;
                }
                groups += 1;
                if groups == 4 {
                    return true;
                }
                if i < bytes.len() && bytes[i] == b'.' {
                    i += 1;
                } else {
                    break;
                }
            }
        }
        start += 1;
    }
    false
}

/// The pods of the namespace: name → (IP, uid, labels); FQDNs resolve through [`Pods::ip_of_host`].
#[derive(Clone, Debug, Default)]
pub struct Pods {
    pub by_name: BTreeMap<String, Pod>,
}

impl Pods {
    pub async fn list(client: &kube::Client, ns: &str) -> anyhow::Result<Pods> {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let by_name = api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|p| (p.name_any(), p))
            .collect();
        Ok(Pods { by_name })
    }

    pub fn ip(&self, pod: &str) -> Option<String> {
        self.by_name.get(pod)?.status.as_ref()?.pod_ip.clone()
    }

    /// `<pod>.<service>.<ns>.svc.cluster.local` (or a bare pod name) → pod IP.
    pub fn ip_of_host(&self, host: &str) -> Option<String> {
        let pod = host.split('.').next()?;
        self.ip(pod)
    }

    /// The pod carrying the master label (the first by name, should several).
    pub fn labelled_master(&self) -> anyhow::Result<String> {
        self.by_name
            .iter()
            .find(|(_, pod)| {
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|labels| labels.get(ROLE_LABEL))
                    .is_some_and(|role| role == "master")
            })
            .map(|(name, _)| name.clone())
            .ok_or_else(|| anyhow::anyhow!("no pod is labelled master"))
    }

    pub fn names_with_prefix(&self, prefix: &str) -> Vec<String> {
        self.by_name
            .keys()
            .filter(|n| {
                n.strip_prefix(prefix)
                    .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
            })
            .cloned()
            .collect()
    }
}

/// The master host name as the first Sentinel that answers names it.
pub async fn sentinel_master_host(pods: &Pods, valkey: &str) -> anyhow::Result<String> {
    let mut last = None;
    for sentinel in pods.names_with_prefix(&format!("{valkey}-sentinel-")) {
        let Some(ip) = pods.ip(&sentinel) else {
            continue;
        };
        match call(
            &ip,
            SENTINEL_PORT,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", valkey],
        )
        .await
        {
            Ok(reply) => {
                if let Some(host) = reply.items().first().and_then(Reply::text) {
                    return Ok(host.to_owned());
                }
                last = Some(format!("{sentinel}: {reply:?}"));
            }
            Err(error) => last = Some(format!("{sentinel}: {error}")),
        }
    }
    bail!("no Sentinel named the master (last: {last:?})")
}

/// Ready endpoint pod names of Service `service`.
pub async fn endpoint_pods(
    client: &kube::Client,
    ns: &str,
    service: &str,
) -> anyhow::Result<Vec<String>> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
        .await?;
    let mut names: Vec<String> = list
        .items
        .iter()
        .flat_map(|slice| slice.endpoints.iter())
        .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// SIGKILLs the valkey-server running in `pod`'s network namespace.
pub async fn kill_valkey_server(
    client: &kube::Client,
    namespace: &str,
    pod: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let uid = pods.get(pod).await?.metadata.uid.unwrap_or_default();
    let netns = format!(
        "vkotb-{}",
        uid.replace('-', "").get(..12).unwrap_or_default()
    );
    let pids = Command::new("ip")
        .args(["netns", "pids", &netns])
        .output()?;
    let mut killed = 0;
    for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim() == "valkey-server" {
            Command::new("kill").args(["-KILL", pid]).status()?;
            killed += 1;
        }
    }
    anyhow::ensure!(
        killed == 1,
        "expected exactly one valkey-server in {netns}, killed {killed}"
    );
    Ok(())
}

/// What a writer recorded.
#[derive(Debug, Default)]
pub struct WriteLog {
    /// Keys the server answered OK to.
    pub acked: Vec<String>,
    /// Keys whose `WAIT` reached the wanted number of replicas (confirming writers only).
    pub confirmed: Vec<String>,
    /// When each OK arrived.
    pub ok_times: Vec<Instant>,
    /// Errors seen (first few), for the report.
    pub errors: Vec<String>,
    pub error_count: usize,
    /// Every master the writer wrote to, in order: (index into `ok_times` of its first OK, pod).
    pub masters: Vec<(usize, String)>,
}

impl WriteLog {
    /// Per change of master: the gap between the last OK from the old master and the first OK
    /// from the new one (the write gap the switchover cost this client).
    pub fn switchover_gaps(&self) -> Vec<Duration> {
        self.masters
            .windows(2)
            .filter(|w| w[0].1 != w[1].1)
            .filter_map(|w| {
                let first_new = w[1].0;
                Some(
                    *self.ok_times.get(first_new)?
                        - *self.ok_times.get(first_new.checked_sub(1)?)?,
                )
            })
            .collect()
    }

    /// Where the `missing` acknowledged keys were acknowledged: per master the writer wrote to (in
    /// order, each time it changed), how many of its OKs are missing and the wall-clock window of those OKs (UTC, to be read next to
    /// the operator's and sidecars' logs).
    pub fn describe_lost(&self, missing: &[String]) -> Vec<String> {
        let missing: std::collections::HashSet<&str> = missing.iter().map(String::as_str).collect();
        let (now_instant, now_wall) = (Instant::now(), std::time::SystemTime::now());
        let wall = |at: Instant| {
            let since_epoch = (now_wall - now_instant.duration_since(at))
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            let secs_of_day = since_epoch.as_secs() % 86_400;
            format!(
                "{:02}:{:02}:{:02}.{:03}Z",
                secs_of_day / 3600,
                secs_of_day / 60 % 60,
                secs_of_day % 60,
                since_epoch.subsec_millis()
            )
        };
        let mut lines = Vec::new();
        for (run, (start, master)) in self.masters.iter().enumerate() {
            let end = self
                .masters
                .get(run + 1)
                .map_or(self.acked.len(), |(i, _)| *i);
            let lost: Vec<usize> = (*start..end)
                .filter(|&i| {
                    self.acked
                        .get(i)
                        .is_some_and(|k| missing.contains(k.as_str()))
                })
                .collect();
            let at = |i: Option<&usize>| {
                i.and_then(|i| self.ok_times.get(*i))
                    .map(|&t| wall(t))
                    .unwrap_or_default()
            };
            lines.push(format!(
                "{master}: {} of its {} OKs lost, acknowledged {} .. {} (its OKs {} .. {})",
                lost.len(),
                end - start,
                at(lost.first()),
                at(lost.last()),
                at(Some(start)),
                at(end.checked_sub(1).as_ref()),
            ));
        }
        lines
    }

    /// The longest time between two consecutive OKs.
    pub fn longest_gap(&self) -> Duration {
        self.ok_times
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }
}

/// How a writer finds the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`.
    Sentinel,
    /// The data pod (`<valkey>-<n>`) that answers `role:master` (clusters without Sentinel); with
    /// several, the one labelled master, else the first.
    RoleMaster,
    /// The ClusterIP of `<valkey>-rw`, as clients connect (the testbed's kube-proxy routes it);
    /// the log names the Service's ready endpoints at the time the writer connected.
    RwService,
}

/// The data pod that answers `role:master`.
pub async fn role_master_pod(pods: &Pods, valkey: &str) -> anyhow::Result<String> {
    let mut masters = Vec::new();
    for pod in pods.names_with_prefix(&format!("{valkey}-")) {
        let Some(ip) = pods.ip(&pod) else { continue };
        let answered = async {
            let mut conn = Conn::connect(&ip, VALKEY_PORT, Duration::from_millis(500)).await?;
            conn.call(&["ROLE"]).await
        }
        .await;
        if let Ok(reply) = answered
            && reply.items().first().and_then(Reply::text) == Some("master")
        {
            masters.push(pod);
        }
    }
    let labelled = masters.iter().find(|pod| {
        pods.by_name
            .get(*pod)
            .and_then(|p| p.metadata.labels.as_ref())
            .and_then(|l| l.get(ROLE_LABEL))
            .map(String::as_str)
            == Some("master")
    });
    labelled
        .or(masters.first())
        .cloned()
        .with_context(|| format!("no pod of {valkey} answers role:master"))
}

/// A writer task: plain `SET` to whoever Sentinel names master, re-resolving on any error; with
/// `wait_replicas`, every OK is followed by `WAIT <n> 1000` and counted as confirmed when it
/// reaches `n`.
pub struct Writer {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
    task: tokio::task::JoinHandle<()>,
}

impl Writer {
    pub fn start(
        client: kube::Client,
        ns: String,
        valkey: String,
        prefix: String,
        wait_replicas: Option<u32>,
    ) -> Writer {
        Writer::start_following(client, ns, valkey, prefix, wait_replicas, Follow::Sentinel)
    }

    /// As [`Writer::start`], finding the master as `follow` says.
    pub fn start_following(
        client: kube::Client,
        ns: String,
        valkey: String,
        prefix: String,
        wait_replicas: Option<u32>,
        follow: Follow,
    ) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(WriteLog::default()));
        let task = tokio::spawn(write_loop(
            WriteTarget {
                client,
                ns,
                valkey,
                follow,
            },
            prefix,
            wait_replicas,
            stop.clone(),
            log.clone(),
        ));
        Writer { stop, log, task }
    }

    pub async fn acked(&self) -> usize {
        self.log.lock().await.acked.len()
    }

    pub async fn confirmed(&self) -> usize {
        self.log.lock().await.confirmed.len()
    }

    pub async fn stop(self) -> WriteLog {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        match Arc::try_unwrap(self.log) {
            Ok(log) => log.into_inner(),
            Err(log) => std::mem::take(&mut *log.lock().await),
        }
    }
}

/// Which cluster a writer writes to, and how it finds the master.
struct WriteTarget {
    client: kube::Client,
    ns: String,
    valkey: String,
    follow: Follow,
}

async fn write_loop(
    target: WriteTarget,
    prefix: String,
    wait_replicas: Option<u32>,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
) {
    let WriteTarget {
        client,
        ns,
        valkey,
        follow,
    } = target;
    let mut sequence = 0u64;
    let mut conn: Option<Conn> = None;
    let mut master = String::new();
    let mut rw_ip = None;
    let wait_arg = wait_replicas.map(|n| n.to_string());
    while !stop.load(Ordering::SeqCst) {
        if conn.is_none() {
            let resolved = async {
                let pods = match follow {
                    Follow::RwService => {
                        return connect_rw(&client, &ns, &valkey, &mut rw_ip).await;
                    }
                    Follow::Sentinel | Follow::RoleMaster => Pods::list(&client, &ns).await?,
                };
                let host = if follow == Follow::Sentinel {
                    sentinel_master_host(&pods, &valkey).await?
                } else {
                    role_master_pod(&pods, &valkey).await?
                };
                let ip = pods
                    .ip_of_host(&host)
                    .with_context(|| format!("no pod IP for {host}"))?;
                let pod = host.split('.').next().unwrap_or_default().to_owned();
                Ok::<_, anyhow::Error>((
                    Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(10)).await?,
                    pod,
                ))
            }
            .await;
            match resolved {
                Ok((c, pod)) => {
                    conn = Some(c);
                    master = pod;
                }
                Err(error) => {
                    note_error(&log, format!("resolve: {error:#}")).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        sequence += 1;
        let key = format!("{prefix}:{sequence}");
        match c.call(&["SET", &key, "v"]).await {
            Ok(Reply::Simple(ok)) if ok == "OK" => {
                {
                    let mut log = log.lock().await;
                    if log.masters.last().is_none_or(|(_, m)| *m != master) {
                        let index = log.ok_times.len();
                        log.masters.push((index, master.clone()));
                    }
                    log.acked.push(key.clone());
                    log.ok_times.push(Instant::now());
                }
                if let Some(wait_arg) = &wait_arg {
                    match c.call(&["WAIT", wait_arg, "1000"]).await {
                        Ok(Reply::Int(n)) if n >= i64::from(wait_replicas.unwrap_or(0)) => {
                            log.lock().await.confirmed.push(key);
                        }
                        Ok(_) => {}
                        Err(error) => {
                            note_error(&log, format!("WAIT: {error:#}")).await;
                            conn = None;
                        }
                    }
                }
            }
            Ok(other) => {
                note_error(&log, format!("SET: {other:?}")).await;
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => {
                note_error(&log, format!("SET: {error:#}")).await;
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How long a writer's reconnect waits for the API to name `-rw`'s endpoints (only a label for
/// its log).
const ENDPOINTS_LOOKUP_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection to `<valkey>-rw`'s ClusterIP, and the Service's ready endpoints as it connected.
/// Connects to `<valkey>-rw`'s ClusterIP, looked up once and kept in `cluster_ip` (as a client's
/// resolver would: a client needs no API server to reconnect); the endpoints' pods, when the API
/// answers, name the connection in the writer's log.
async fn connect_rw(
    client: &kube::Client,
    ns: &str,
    valkey: &str,
    cluster_ip: &mut Option<String>,
) -> anyhow::Result<(Conn, String)> {
    let service = format!("{valkey}-rw");
    let ip = match cluster_ip {
        Some(ip) => ip.clone(),
        None => {
            let services: Api<Service> = Api::namespaced(client.clone(), ns);
            let ip = services
                .get(&service)
                .await?
                .spec
                .and_then(|s| s.cluster_ip)
                .with_context(|| format!("{service} has no ClusterIP"))?;
            cluster_ip.insert(ip).clone()
        }
    };
    // Bounded: the writer measures the data path and must never wait on the API server (the
    // admin client's read timeout is kube's 295 s, and rows restart the API server).
    let endpoints = tokio::time::timeout(
        ENDPOINTS_LOOKUP_TIMEOUT,
        endpoint_pods(client, ns, &service),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_else(|| vec!["(API unreachable)".into()]);
    // A client's connect timeout, not a test's: while `-rw` has no ready endpoint kube-proxy
    // routes to the terminating old master, and once its pod is gone a SYN to it is dropped, so
    // the timeout, not the cluster, would set the write gap (10 s measured with a 10 s timeout).
    let conn = Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(1)).await?;
    Ok((conn, endpoints.join("+")))
}

async fn note_error(log: &Mutex<WriteLog>, error: String) {
    let mut log = log.lock().await;
    log.error_count += 1;
    if log.errors.len() < 20 {
        log.errors.push(error);
    }
}

/// Deletes `pod` (graceful) and waits until that pod object is gone (its name may be back, with
/// another UID).
pub async fn delete_and_wait_gone(
    client: &kube::Client,
    ns: &str,
    pod: &str,
) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = pods.get(pod).await?.metadata.uid;
    pods.delete(pod, &DeleteParams::default()).await?;
    eventually(Duration::from_secs(120), "the deleted pod gone", || async {
        let now = pods.get_opt(pod).await?.and_then(|p| p.metadata.uid);
        anyhow::ensure!(now != uid, "{pod} still there");
        Ok(())
    })
    .await
}

/// Which of `keys` do not exist on the server at `ip` (EXISTS in batches).
pub async fn missing_keys(ip: &str, keys: &[String]) -> anyhow::Result<Vec<String>> {
    let mut conn = Conn::connect(ip, VALKEY_PORT, Duration::from_secs(10)).await?;
    let mut missing = Vec::new();
    for batch in keys.chunks(500) {
        let mut args = vec!["EXISTS"];
        args.extend(batch.iter().map(String::as_str));
        let reply = conn.call(&args).await?;
        let Reply::Int(count) = reply else {
            bail!("EXISTS: {reply:?}");
        };
        if usize::try_from(count)? != batch.len() {
            for key in batch {
                if conn.call(&["EXISTS", key]).await? != Reply::Int(1) {
                    missing.push(key.clone());
                }
            }
        }
    }
    Ok(missing)
}

/// Prints the tail of every container log of every pod in `namespace` (from the testbed's state
/// directory): what a failed test needs to be understood after its namespace is gone.
pub async fn dump_container_logs(client: &kube::Client, namespace: &str, tail_lines: usize) {
    let state = std::env::var("VKO_TESTBED_DIR").unwrap_or_else(|_| "/run/vko-testbed".into());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Ok(list) = pods.list(&ListParams::default()).await else {
        eprintln!("(could not list pods of {namespace} for the log dump)");
        return;
    };
    for pod in list {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = std::path::Path::new(&state)
            .join("pods")
            .join(&uid)
            .join("logs");
        let Ok(containers) = std::fs::read_dir(&dir) else {
            continue;
        };
        for container in containers.flatten() {
            let Ok(attempts) = std::fs::read_dir(container.path()) else {
                continue;
            };
            let mut files: Vec<_> = attempts.flatten().map(|e| e.path()).collect();
            files.sort();
            for file in files {
                let text = std::fs::read_to_string(&file).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                let start = lines.len().saturating_sub(tail_lines);
                eprintln!(
                    "===== {}/{} {} =====",
                    pod.name_any(),
                    container.file_name().to_string_lossy(),
                    file.file_name().unwrap_or_default().to_string_lossy()
                );
                for line in &lines[start..] {
                    eprintln!("{line}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn finds_ipv4_addresses_only() {
        assert!(super::contains_ipv4("ip=10.244.0.7,port=6379"));
        assert!(super::contains_ipv4("1.2.3.4"));
        assert!(!super::contains_ipv4(
            "ha-1.ha-headless.ns.svc.cluster.local"
        ));
        assert!(!super::contains_ipv4("8.0.1"));
        assert!(!super::contains_ipv4("version 12.34.56"));
    }
}

/// The most pods of one tier that were terminating at the same time, per tier, while watched.
#[derive(Debug, Default, Clone)]
pub struct Concurrency {
    pub data: usize,
    pub sentinel: usize,
}

/// Watches the namespace's pods and records how many of each tier terminate at once.
pub fn watch_terminations(
    client: kube::Client,
    ns: String,
    name: String,
) -> (
    Arc<std::sync::Mutex<Concurrency>>,
    tokio::task::JoinHandle<()>,
) {
    let seen = Arc::new(std::sync::Mutex::new(Concurrency::default()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let api: Api<Pod> = Api::namespaced(client, &ns);
        let mut terminating: BTreeMap<String, bool> = BTreeMap::new();
        let sentinel_prefix = format!("{name}-sentinel-");
        let data_prefix = format!("{name}-");
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    terminating.insert(pod.name_any(), pod.metadata.deletion_timestamp.is_some());
                }
                watcher::Event::Delete(pod) => {
                    terminating.remove(&pod.name_any());
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
            let count = |sentinel: bool| {
                terminating
                    .iter()
                    .filter(|(pod, t)| {
                        **t && if sentinel {
                            pod.starts_with(&sentinel_prefix)
                        } else {
                            pod.strip_prefix(&data_prefix)
                                .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
                        }
                    })
                    .count()
            };
            let (data, sentinel) = (count(false), count(true));
            if let Ok(mut seen) = record.lock() {
                seen.data = seen.data.max(data);
                seen.sentinel = seen.sentinel.max(sentinel);
            }
        }
    });
    (seen, task)
}
