//! `cargo xtask bench fleet` (issue 20): the chart's in-cluster operator and N Valkeys applied at
//! once, for each N of `VKO_BENCH_VALKEYS`: time until every Valkey is OK, then a steady state of
//! `VKO_BENCH_STEADY_SECS` in which the API server's audit log counts the operator's and the
//! sidecars' requests, and `/proc` gives the operator's and the sidecars' RSS and CPU. One
//! `FLEET` line per N, which xtask turns into the report.
//!
//! `VKO_BENCH_TOPOLOGY` is `standalone` (1 data pod each, the default) or `three` (3 data pods
//! without Sentinel each). Each N runs in a namespace of its own, on a freshly restarted operator
//! pod (so its RSS is that of N Valkeys, not of every N before), and the namespace is deleted before
//! the next N. The pods run whatever the testbed maps `vko.local/vko` to: xtask starts a testbed
//! that maps it to the release binaries.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use vko_api::{Phase, Valkey};
use vko_e2e::ha_support::pod_is_ready;
use vko_e2e::helm_support::{Helm, ReleaseGuard, chart, set_args, wait_for_ready_operator};
use vko_e2e::operator_support::install_crd;
use vko_testbed::harness::Testbed;
use vko_testbed::paths::Paths;

const RELEASE: &str = "vko-fleet";
const OPERATOR_NAMESPACE: &str = "vko-fleet-system";
/// The chart's ServiceAccount for RELEASE, as the audit log names its requests.
const OPERATOR_USER: &str = "system:serviceaccount:vko-fleet-system:vko-fleet-valkey-operator";
const LEASE_NAME: &str = "valkey-operator.vko.gtrfc.com";
/// How long N Valkeys may take to be OK before the run gives up.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(1200);
/// After all are OK: the passes the last transitions trigger settle before counting starts.
const SETTLE: Duration = Duration::from_secs(30);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The requests one identity made in a window, from the audit log.
#[derive(Debug, Default)]
struct Requests {
    total: usize,
    writes: usize,
    /// Writes to anything but a Lease: the noise issue 20 wants at 0.
    writes_beyond_leases: usize,
    /// On coordination.k8s.io leases (the leader Lease's renewals).
    leases: usize,
    /// `watch` requests (a reconnect per watch every few minutes).
    watches: usize,
    /// What the rest were: `verb resource` → count.
    other: BTreeMap<String, usize>,
}

/// Every request received in `[from, to)` by identities `user` accepts, counted once (the audit
/// log records a request at several stages; its auditID is one).
fn requests(
    from: Timestamp,
    to: Timestamp,
    user: impl Fn(&str) -> bool,
) -> anyhow::Result<Requests> {
    let path = vko_testbed::controlplane::audit_log(&Paths::from_env());
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading the audit log {}", path.display()))?;
    let mut seen = BTreeSet::new();
    let mut counted = Requests::default();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let field = |pointer: &str| event.pointer(pointer).and_then(|v| v.as_str());
        if !field("/user/username").is_some_and(&user) {
            continue;
        }
        let Some(received) =
            field("/requestReceivedTimestamp").and_then(|at| at.parse::<Timestamp>().ok())
        else {
            continue;
        };
        if received < from || received >= to {
            continue;
        }
        if !seen.insert(field("/auditID").unwrap_or_default().to_owned()) {
            continue;
        }
        let verb = field("/verb").unwrap_or_default();
        let resource = field("/objectRef/resource").unwrap_or_default();
        counted.total += 1;
        if !["get", "list", "watch"].contains(&verb) {
            counted.writes += 1;
            if resource != "leases" {
                counted.writes_beyond_leases += 1;
            }
        }
        if resource == "leases" {
            counted.leases += 1;
        } else if verb == "watch" {
            counted.watches += 1;
        } else {
            *counted
                .other
                .entry(format!("{verb} {resource}"))
                .or_insert(0) += 1;
        }
    }
    Ok(counted)
}

/// A process of the testbed's pods, found in `/proc` by its command line.
struct Process {
    pid: u32,
    rss_kib: u64,
    /// The private part of the RSS (heap, stacks); the rest is file pages (the binary, shared by
    /// every process running it) and shared memory.
    anon_kib: u64,
    threads: u64,
    /// utime + stime, in clock ticks.
    cpu_ticks: u64,
}

/// The live processes whose argv[0] ends in `/<binary>` and whose argv[1] is `arg` (when given).
fn processes(binary: &str, arg: Option<&str>) -> Vec<Process> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let name_matches = argv.first().is_some_and(|a| {
            a.ends_with(format!("/{binary}").as_bytes()) || *a == binary.as_bytes()
        });
        let arg_matches = arg.is_none_or(|arg| argv.get(1) == Some(&arg.as_bytes()));
        if !(name_matches && arg_matches) {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let status_field = |key: &str| -> Option<u64> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        };
        let rss_kib = status_field("VmRSS:");
        let cpu_ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                // Fields after the command name (which may hold spaces) in parentheses.
                let rest = stat.rsplit_once(')')?.1;
                let fields: Vec<&str> = rest.split_whitespace().collect();
                let utime: u64 = fields.get(11)?.parse().ok()?;
                let stime: u64 = fields.get(12)?.parse().ok()?;
                Some(utime + stime)
            });
        if let (Some(rss_kib), Some(cpu_ticks)) = (rss_kib, cpu_ticks) {
            found.push(Process {
                pid,
                rss_kib,
                anon_kib: status_field("RssAnon:").unwrap_or_default(),
                threads: status_field("Threads:").unwrap_or_default(),
                cpu_ticks,
            });
        }
    }
    found
}

fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// `verb-resource:count,…` (no spaces: the `FLEET` line is split on them), `none` if empty.
fn compact(counts: &BTreeMap<String, usize>) -> String {
    if counts.is_empty() {
        return "none".to_owned();
    }
    counts
        .iter()
        .map(|(what, n)| format!("{}:{n}", what.replace(' ', "-")))
        .collect::<Vec<_>>()
        .join(",")
}

fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[(values.len() - 1) / 2]
}

fn valkey(name: &str, replicas: u32) -> anyhow::Result<Valkey> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "image": "valkey/valkey:8.0"}
    }))?)
}

/// Restarts the operator pod (a fresh process for each N) and waits for the new one to lead.
async fn restart_operator(client: &kube::Client) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let selector =
        format!("app.kubernetes.io/name=valkey-operator,app.kubernetes.io/instance={RELEASE}");
    for pod in pods.list(&ListParams::default().labels(&selector)).await? {
        pods.delete(&pod.name_any(), &DeleteParams::default())
            .await?;
    }
    let started = Instant::now();
    loop {
        let leader = wait_for_ready_operator(
            client,
            OPERATOR_NAMESPACE,
            RELEASE,
            (OPERATOR_NAMESPACE, LEASE_NAME),
            Duration::from_secs(300),
        )
        .await?;
        let fresh = pods
            .get_opt(&leader)
            .await?
            .is_some_and(|pod| pod.metadata.deletion_timestamp.is_none());
        if fresh && processes("vko-operator", None).len() == 1 {
            return Ok(leader);
        }
        if started.elapsed() > Duration::from_secs(300) {
            bail!("the restarted operator pod did not lead alone within 300 s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One N: applies `count` Valkeys at once in a new namespace, waits for all OK, measures the
/// steady state, prints the `FLEET` line and deletes the namespace.
async fn one_fleet(
    client: &kube::Client,
    count: usize,
    replicas: u32,
    steady: Duration,
) -> anyhow::Result<()> {
    let namespace = format!("vko-fleet-{count}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns_object: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": namespace}}))?;
    namespaces
        .create(&PostParams::default(), &ns_object)
        .await?;
    restart_operator(client).await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &namespace);
    let started = Instant::now();
    let mut creates = Vec::new();
    for i in 0..count {
        let valkeys = valkeys.clone();
        let valkey = valkey(&format!("f{i}"), replicas)?;
        creates.push(tokio::spawn(async move {
            valkeys.create(&PostParams::default(), &valkey).await
        }));
    }
    for create in creates {
        create.await??;
    }
    let created_in = started.elapsed();
    // Per Valkey: the first poll that saw it OK.
    let mut ok_after: BTreeMap<String, Duration> = BTreeMap::new();
    while ok_after.len() < count {
        if started.elapsed() > CONVERGE_TIMEOUT {
            bail!(
                "{} of {count} Valkeys OK after {} s",
                ok_after.len(),
                CONVERGE_TIMEOUT.as_secs()
            );
        }
        for valkey in valkeys.list(&ListParams::default()).await? {
            let ok = valkey.status.as_ref().and_then(|s| s.phase.clone()) == Some(Phase::Ok)
                && valkey.status.as_ref().and_then(|s| s.ready_replicas)
                    == Some(i32::try_from(replicas)?);
            if ok {
                ok_after
                    .entry(valkey.name_any())
                    .or_insert(started.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_ok = started.elapsed();
    let per_valkey: Vec<f64> = ok_after.values().map(Duration::as_secs_f64).collect();

    // How long the pods themselves took: created → Ready.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod_starts: Vec<f64> = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|pod| {
            let created = pod.metadata.creation_timestamp.as_ref()?.0;
            let ready = pod
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "Ready" && c.status == "True")?
                .last_transition_time
                .as_ref()?
                .0;
            Some(ready.duration_since(created).as_secs_f64())
        })
        .collect();

    tokio::time::sleep(SETTLE).await;
    let ticks = clock_ticks_per_second();
    let operator_before = processes("vko-operator", None);
    let sidecars_before: BTreeMap<u32, u64> = processes("vko-sidecar", Some("run"))
        .into_iter()
        .map(|p| (p.pid, p.cpu_ticks))
        .collect();
    let from = Timestamp::now();
    tokio::time::sleep(steady).await;
    let to = Timestamp::now();
    let operator_after = processes("vko-operator", None);
    let sidecars_after = processes("vko-sidecar", Some("run"));
    let minutes = steady.as_secs_f64() / 60.0;

    let operator = requests(from, to, |user| user == OPERATOR_USER)?;
    let sidecar_prefix = format!("system:serviceaccount:{namespace}:");
    let sidecars = requests(from, to, |user| {
        user.starts_with(&sidecar_prefix) && user.ends_with("-sidecar")
    })?;
    let (operator_rss, operator_anon, operator_cpu) =
        match (operator_before.as_slice(), operator_after.as_slice()) {
            ([before], [after]) if before.pid == after.pid => (
                after.rss_kib,
                after.anon_kib,
                (after.cpu_ticks - before.cpu_ticks) as f64 / ticks / steady.as_secs_f64(),
            ),
            _ => bail!(
                "expected one operator process throughout, found {} then {}",
                operator_before.len(),
                operator_after.len()
            ),
        };
    let sidecar_rss: Vec<f64> = sidecars_after.iter().map(|p| p.rss_kib as f64).collect();
    let sidecar_anon: Vec<f64> = sidecars_after.iter().map(|p| p.anon_kib as f64).collect();
    let sidecar_threads: Vec<f64> = sidecars_after.iter().map(|p| p.threads as f64).collect();
    let sidecar_cpu: f64 = sidecars_after
        .iter()
        .filter_map(|p| {
            sidecars_before
                .get(&p.pid)
                .map(|before| (p.cpu_ticks - before) as f64)
        })
        .sum::<f64>()
        / ticks
        / steady.as_secs_f64();
    let not_ready = pods
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|pod| !pod_is_ready(pod))
        .count();
    let not_ok = valkeys
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|v| v.status.as_ref().and_then(|s| s.phase.clone()) != Some(Phase::Ok))
        .count();
    println!(
        "FLEET valkeys={count} replicas={replicas} created_s={:.1} all_ok_s={:.1} \
         ok_p50_s={:.1} ok_max_s={:.1} pod_ready_p50_s={:.1} pod_ready_max_s={:.1} \
         steady_s={} op_req_min={:.1} op_writes_min={:.1} op_writes_beyond_lease_min={:.1} op_lease_min={:.1} op_watch_min={:.1} \
         op_other={} op_rss_mib={:.1} op_anon_mib={:.1} op_cpu_pct={:.2} sidecars={} \
         sidecar_rss_p50_mib={:.1} sidecar_rss_max_mib={:.1} sidecar_anon_p50_mib={:.1} \
         sidecar_threads_p50={} sidecar_cpu_pct_total={:.2} sidecar_req_min={:.1} \
         sidecar_writes_min={:.1} sidecar_other={} pods_not_ready={not_ready} \
         valkeys_not_ok={not_ok}",
        created_in.as_secs_f64(),
        all_ok.as_secs_f64(),
        median(per_valkey.clone()),
        per_valkey.iter().copied().fold(0.0, f64::max),
        median(pod_starts.clone()),
        pod_starts.iter().copied().fold(0.0, f64::max),
        steady.as_secs(),
        operator.total as f64 / minutes,
        operator.writes as f64 / minutes,
        operator.writes_beyond_leases as f64 / minutes,
        operator.leases as f64 / minutes,
        operator.watches as f64 / minutes,
        compact(&operator.other),
        operator_rss as f64 / 1024.0,
        operator_anon as f64 / 1024.0,
        operator_cpu * 100.0,
        sidecar_rss.len(),
        median(sidecar_rss.clone()) / 1024.0,
        sidecar_rss.iter().copied().fold(0.0, f64::max) / 1024.0,
        median(sidecar_anon) / 1024.0,
        median(sidecar_threads),
        sidecar_cpu * 100.0,
        sidecars.total as f64 / minutes,
        sidecars.writes as f64 / minutes,
        compact(&sidecars.other),
    );
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await?;
    let deleted = Instant::now();
    while namespaces.get_opt(&namespace).await?.is_some() {
        if deleted.elapsed() > Duration::from_secs(600) {
            bail!("namespace {namespace} still there 600 s after its deletion");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    Ok(())
}

/// See the module documentation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo xtask bench fleet runs it"]
async fn bench_fleet() {
    let counts: String = env_or("VKO_BENCH_VALKEYS", "10".to_owned());
    let steady = Duration::from_secs(env_or("VKO_BENCH_STEADY_SECS", 120));
    let replicas = match env_or("VKO_BENCH_TOPOLOGY", "standalone".to_owned()).as_str() {
        "three" => 3,
        _ => 1,
    };
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let helm = Helm::new(testbed.kubeconfig()).unwrap();
    let _release = ReleaseGuard::new(&helm, RELEASE, OPERATOR_NAMESPACE);
    let mut args = vec![
        "install",
        RELEASE,
        "--namespace",
        OPERATOR_NAMESPACE,
        "--create-namespace",
    ];
    let chart = chart();
    let chart = chart.to_string_lossy().into_owned();
    args.insert(2, &chart);
    let values = set_args(&[
        "image.repository=vko.local/vko",
        "image.tag=dev",
        "crds.install=false",
        "logFormat=text",
    ]);
    args.extend(values.iter().map(String::as_str));
    helm.run(&args).await.unwrap();
    for count in counts
        .split(',')
        .filter_map(|c| c.trim().parse::<usize>().ok())
    {
        if let Err(error) = one_fleet(&client, count, replicas, steady).await {
            let error = format!("{error:#}").replace(char::is_whitespace, "_");
            println!("FLEET valkeys={count} replicas={replicas} error={error}");
            break;
        }
    }
    helm.run(&[
        "uninstall",
        RELEASE,
        "--namespace",
        OPERATOR_NAMESPACE,
        "--wait",
    ])
    .await
    .unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .delete(OPERATOR_NAMESPACE, &DeleteParams::default())
        .await;
}
