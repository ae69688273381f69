//! The Services a client really uses, through the testbed's kube-proxy, on a Sentinel HA cluster
//! (3 data pods + 3 Sentinels):
//! - from the host and from a pod, the ClusterIP of `<name>-rw` answers PING and SET and is the
//!   master (`INFO replication` and `run_id` through the Service); `<name>-r` reaches both replicas
//!   and nothing else; the master pod reaches its own `-rw` Service (hairpin);
//! - while the master pod is deleted (graceful: the sidecar's preStop hands the role over), three
//!   writers write: a POD that knows only the name `<name>-rw` (one `valkey-cli` connection per
//!   write, as a short-lived client), a host client on the same Service's ClusterIP that keeps its
//!   connection and reconnects on an error (as a pooled client), and a host client that follows
//!   Sentinel to pod IPs (what the other HA tests measure). Every write any of them had
//!   acknowledged is on the new master; the longest gap between two acknowledged writes of each is
//!   printed side by side.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ha_support::{
    Conn, Pods, Reply, VALKEY_PORT, WriteLog, Writer, dump_container_logs, endpoint_pods,
    eventually, info, info_field, missing_keys, sentinel_master_host,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams};
use operator_support::{OperatorTest, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{apply_yaml, kubectl_output};

const NAME: &str = "svc";
const WRITER_POD: &str = "rw-writer";
/// Fresh connections through `-r`: both replicas answer at least once unless kube-proxy's random
/// choice skipped one 24 times in a row (chance 2 × 0.5^24).
const REPLICA_PROBES: usize = 24;

/// The writer pod: `<name>-rw` by name (the pod's hosts file resolves it to the ClusterIP), one
/// `valkey-cli` per write; prints `<n> <unix time> <reply>` per attempt.
fn writer_pod_yaml() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {WRITER_POD}}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: writer
    image: vko-testbed/shell:latest
    command: ["bash", "-c"]
    args:
    - |
      i=0
      while :; do
        i=$((i+1))
        r=$(valkey-cli -h {NAME}-rw -p 6379 -t 1 SET "pod:$i" v 2>&1)
        echo "$i $EPOCHREALTIME $r"
        [ "$r" = OK ] || sleep 0.02
      done
"#
    )
}

async fn cluster_ip(client: &kube::Client, ns: &str, service: &str) -> anyhow::Result<String> {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    services
        .get(service)
        .await?
        .spec
        .and_then(|spec| spec.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .ok_or_else(|| anyhow::anyhow!("{service} has no ClusterIP"))
}

/// `INFO server`'s `run_id` and `INFO replication`'s `role` of whoever answers at `ip` (a fresh
/// connection: through a ClusterIP, each one is routed anew).
async fn run_id_and_role(ip: &str) -> anyhow::Result<(String, String)> {
    let server = info(ip, "server").await?;
    let replication = info(ip, "replication").await?;
    Ok((
        info_field(&server, "run_id").unwrap_or_default().to_owned(),
        info_field(&replication, "role")
            .unwrap_or_default()
            .to_owned(),
    ))
}

/// The data pods' `run_id`s, by pod.
async fn run_ids(pods: &Pods) -> anyhow::Result<Vec<(String, String)>> {
    let mut ids = Vec::new();
    for pod in pods.names_with_prefix(&format!("{NAME}-")) {
        let ip = pods.ip(&pod).unwrap_or_default();
        ids.push((pod, run_id_and_role(&ip).await?.0));
    }
    Ok(ids)
}

fn pod_of(run_ids: &[(String, String)], run_id: &str) -> Option<String> {
    run_ids
        .iter()
        .find(|(_, id)| id == run_id)
        .map(|(pod, _)| pod.clone())
}

/// Waits for the cluster: Valkey OK with 3 ready, Sentinel names a master with 2 replicas, `-rw`
/// has it as its endpoint and `-r` both replicas (a replica's readiness can trail the Phase);
/// returns the master pod.
async fn cluster_ready(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        NAME,
        "3 data pods ready and OK",
        Duration::from_secs(240),
        ok_with(3),
    )
    .await?;
    eventually(
        Duration::from_secs(120),
        "Sentinel names a master with 2 replicas, and -rw has it",
        || async {
            let pods = Pods::list(client, ns).await?;
            let host = sentinel_master_host(&pods, NAME).await?;
            let master = host.split('.').next().unwrap_or_default().to_owned();
            let replication = info(&pods.ip(&master).unwrap_or_default(), "replication").await?;
            anyhow::ensure!(
                info_field(&replication, "connected_slaves") == Some("2"),
                "{master}: {replication}"
            );
            let rw = endpoint_pods(client, ns, &format!("{NAME}-rw")).await?;
            anyhow::ensure!(rw == [master.clone()], "-rw {rw:?}");
            let r = endpoint_pods(client, ns, &format!("{NAME}-r")).await?;
            let replicas: Vec<String> = pods
                .names_with_prefix(&format!("{NAME}-"))
                .into_iter()
                .filter(|pod| *pod != master)
                .collect();
            anyhow::ensure!(r == replicas, "-r {r:?}, the replicas {replicas:?}");
            Ok(master)
        },
    )
    .await
}

/// From the host: `-rw` answers PING and SET and is the master on every connection; `-r` is a
/// replica on every connection and reaches both.
async fn host_reaches_the_right_pods(
    client: &kube::Client,
    ns: &str,
    master: &str,
) -> anyhow::Result<()> {
    let pods = Pods::list(client, ns).await?;
    let ids = run_ids(&pods).await?;
    let rw = cluster_ip(client, ns, &format!("{NAME}-rw")).await?;
    let r = cluster_ip(client, ns, &format!("{NAME}-r")).await?;
    eprintln!("{NAME}-rw is {rw}, {NAME}-r is {r}");

    let mut conn = Conn::connect(&rw, VALKEY_PORT, Duration::from_secs(5)).await?;
    let pong = conn.call(&["PING"]).await?;
    anyhow::ensure!(
        pong == Reply::Simple("PONG".into()),
        "PING via -rw: {pong:?}"
    );
    let set = conn.call(&["SET", "via-service", "host"]).await?;
    anyhow::ensure!(set == Reply::Simple("OK".into()), "SET via -rw: {set:?}");
    for _ in 0..5 {
        let (run_id, role) = run_id_and_role(&rw).await?;
        anyhow::ensure!(role == "master", "-rw answered as {role}");
        anyhow::ensure!(
            pod_of(&ids, &run_id).as_deref() == Some(master),
            "-rw reached {:?}, the master is {master}",
            pod_of(&ids, &run_id)
        );
    }

    let mut reached = BTreeSet::new();
    for _ in 0..REPLICA_PROBES {
        let (run_id, role) = run_id_and_role(&r).await?;
        anyhow::ensure!(role == "slave", "-r answered as {role}");
        let pod = pod_of(&ids, &run_id)
            .ok_or_else(|| anyhow::anyhow!("-r reached an unknown run_id {run_id}"))?;
        anyhow::ensure!(pod != master, "-r reached the master");
        reached.insert(pod);
    }
    anyhow::ensure!(
        reached.len() == 2,
        "-r reached only {reached:?} in {REPLICA_PROBES} connections"
    );
    eprintln!("from the host: -rw is {master} on every connection, -r reached {reached:?}");
    Ok(())
}

/// `kubectl exec` of a shell script; its stdout (the exit code must be 0).
async fn exec(ns: &str, pod: &str, container: &str, script: &str) -> anyhow::Result<String> {
    let output = kubectl_output(
        &[
            "exec", "-n", ns, pod, "-c", container, "--", "sh", "-c", script,
        ],
        b"",
    )
    .await?;
    anyhow::ensure!(
        output.status.success(),
        "exec in {pod}: {} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// From pods, by name: the writer pod reaches the master through `-rw` and a replica through `-r`;
/// the master pod reaches itself through `-rw` (hairpin).
async fn pods_reach_the_right_pods(
    client: &kube::Client,
    ns: &str,
    master: &str,
) -> anyhow::Result<()> {
    let pods = Pods::list(client, ns).await?;
    let script = format!(
        "valkey-cli -h {NAME}-rw -p 6379 PING; \
         valkey-cli -h {NAME}-rw -p 6379 SET via-service pod; \
         valkey-cli -h {NAME}-rw -p 6379 INFO replication | grep '^role:'; \
         valkey-cli -h {NAME}-r -p 6379 INFO replication | grep '^role:'"
    );
    let out = exec(ns, WRITER_POD, "writer", &script).await?;
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    anyhow::ensure!(
        lines == ["PONG", "OK", "role:master", "role:slave"],
        "from {WRITER_POD}: {out:?}"
    );
    let hairpin = exec(
        ns,
        master,
        "valkey",
        &format!("valkey-cli -h {NAME}-rw -p 6379 INFO server | grep '^run_id:'"),
    )
    .await?;
    let own = run_id_and_role(&pods.ip(master).unwrap_or_default())
        .await?
        .0;
    anyhow::ensure!(
        hairpin.trim().strip_prefix("run_id:") == Some(own.as_str()) && !own.is_empty(),
        "{master} through {NAME}-rw reached {hairpin:?}, its own run_id is {own:?}"
    );
    eprintln!(
        "from pods: {WRITER_POD} by name -> PONG, OK, master, replica; {master} reaches itself"
    );
    Ok(())
}

/// One attempt of the writer pod, from its log line `<n> <unix time> <reply>`.
struct PodAttempt {
    key: String,
    at: f64,
    ok: bool,
}

fn parse_writer_log(text: &str) -> Vec<PodAttempt> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let n: u64 = fields.next()?.parse().ok()?;
            let at: f64 = fields.next()?.replace(',', ".").parse().ok()?;
            let reply = fields.next().unwrap_or_default();
            Some(PodAttempt {
                key: format!("pod:{n}"),
                at,
                ok: reply == "OK",
            })
        })
        .collect()
}

/// Every attempt the writer pod has logged so far (all its container's log files).
async fn writer_attempts(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<PodAttempt>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let uid = pods.get(WRITER_POD).await?.metadata.uid.unwrap_or_default();
    let state = std::env::var("VKO_TESTBED_DIR").unwrap_or_else(|_| "/run/vko-testbed".into());
    let dir = std::path::Path::new(&state)
        .join("pods")
        .join(uid)
        .join("logs")
        .join("writer");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .flatten()
        .map(|entry| entry.path())
        .collect();
    files.sort();
    let mut attempts = Vec::new();
    for file in files {
        attempts.extend(parse_writer_log(&std::fs::read_to_string(file)?));
    }
    Ok(attempts)
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs_f64())
        .unwrap_or_default()
}

/// The longest time between two consecutive acknowledged attempts where the later one came after
/// `since` (unix seconds).
fn longest_pod_gap(attempts: &[PodAttempt], since: f64) -> Duration {
    let oks: Vec<f64> = attempts.iter().filter(|a| a.ok).map(|a| a.at).collect();
    oks.windows(2)
        .filter(|pair| pair[1] >= since)
        .map(|pair| Duration::from_secs_f64((pair[1] - pair[0]).max(0.0)))
        .max()
        .unwrap_or_default()
}

/// Waits until the writer pod has `at_least` acknowledged writes after `since` (unix seconds).
async fn wait_for_pod_writes(
    client: &kube::Client,
    ns: &str,
    since: f64,
    at_least: usize,
) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(60),
        "the writer pod's acknowledged writes",
        || async {
            let oks = writer_attempts(client, ns)
                .await?
                .iter()
                .filter(|a| a.ok && a.at >= since)
                .count();
            anyhow::ensure!(oks >= at_least, "{oks} so far");
            Ok(())
        },
    )
    .await
}

/// A host client on a fixed address (the `-rw` ClusterIP) that keeps its connection and opens a new
/// one after an error, as a pooled client does.
struct ServiceWriter {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<WriteLog>,
}

impl ServiceWriter {
    fn start(ip: String, prefix: &'static str) -> ServiceWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let task = tokio::spawn(async move {
            let mut log = WriteLog::default();
            let mut conn: Option<Conn> = None;
            let mut sequence = 0u64;
            while !stopping.load(Ordering::SeqCst) {
                if conn.is_none() {
                    match Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(1)).await {
                        Ok(c) => conn = Some(c),
                        Err(error) => {
                            note(&mut log, format!("connect: {error:#}"));
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            continue;
                        }
                    }
                }
                let Some(c) = conn.as_mut() else { continue };
                sequence += 1;
                let key = format!("{prefix}:{sequence}");
                match c.call(&["SET", &key, "v"]).await {
                    Ok(Reply::Simple(ok)) if ok == "OK" => {
                        log.acked.push(key);
                        log.ok_times.push(Instant::now());
                    }
                    Ok(other) => {
                        note(&mut log, format!("SET: {other:?}"));
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    Err(error) => {
                        note(&mut log, format!("SET: {error:#}"));
                        conn = None;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            log
        });
        ServiceWriter { stop, task }
    }

    async fn stop(self) -> anyhow::Result<WriteLog> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(self.task.await?)
    }
}

fn note(log: &mut WriteLog, error: String) {
    log.error_count += 1;
    if log.errors.len() < 10 {
        log.errors.push(error);
    }
}

async fn wait_for_writes(writer: &Writer, at_least: usize) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(60),
        "the pod-IP writer's writes",
        || async {
            let acked = writer.acked().await;
            anyhow::ensure!(acked >= at_least, "{acked} so far");
            Ok(())
        },
    )
    .await
}

/// Deletes the master pod while the three writers write; checks every acknowledged write is on the
/// new master and prints the gaps.
async fn handover_through_the_service(
    client: &kube::Client,
    ns: &str,
    old_master: &str,
) -> anyhow::Result<()> {
    let rw = cluster_ip(client, ns, &format!("{NAME}-rw")).await?;
    let pooled = ServiceWriter::start(rw.clone(), "pooled");
    let by_pod_ip = Writer::start(
        client.clone(),
        ns.to_owned(),
        NAME.into(),
        "podip".into(),
        None,
    );
    wait_for_writes(&by_pod_ip, 200).await?;
    wait_for_pod_writes(client, ns, unix_now() - 1.0, 50).await?;

    let deleted_unix = unix_now();
    let deleted_at = Instant::now();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    pods.delete(old_master, &DeleteParams::default()).await?;
    let new_master = eventually(Duration::from_secs(60), "a new master", || async {
        let pods = Pods::list(client, ns).await?;
        let host = sentinel_master_host(&pods, NAME).await?;
        let pod = host.split('.').next().unwrap_or_default().to_owned();
        anyhow::ensure!(pod != old_master, "still {pod}");
        let replication = info(&pods.ip(&pod).unwrap_or_default(), "replication").await?;
        anyhow::ensure!(info_field(&replication, "role") == Some("master"), "{pod}");
        Ok(pod)
    })
    .await?;
    let handover = deleted_at.elapsed();
    // The Service follows: its one endpoint is the new master, and a connection through it says so.
    let switched = eventually(
        Duration::from_secs(60),
        "-rw to reach the new master",
        || {
            let rw = rw.clone();
            let new_master = new_master.clone();
            async move {
                let endpoints = endpoint_pods(client, ns, &format!("{NAME}-rw")).await?;
                anyhow::ensure!(endpoints == [new_master.clone()], "-rw {endpoints:?}");
                let pods = Pods::list(client, ns).await?;
                let ids = run_ids(&pods).await?;
                let (run_id, role) = run_id_and_role(&rw).await?;
                anyhow::ensure!(
                    role == "master"
                        && pod_of(&ids, &run_id).as_deref() == Some(new_master.as_str()),
                    "-rw reaches {:?} as {role}",
                    pod_of(&ids, &run_id)
                );
                Ok(deleted_at.elapsed())
            }
        },
    )
    .await?;
    eprintln!(
        "handover {old_master} -> {new_master}: Sentinel after {handover:?}, -rw reaches it after {switched:?}"
    );

    // Writes go on after the switch, then every writer stops.
    let switched_unix = unix_now();
    let after = by_pod_ip.acked().await;
    wait_for_writes(&by_pod_ip, after + 200).await?;
    wait_for_pod_writes(client, ns, switched_unix, 50).await?;
    let pooled_log = pooled.stop().await?;
    let pod_ip_log = by_pod_ip.stop().await;
    let attempts = writer_attempts(client, ns).await?;
    let pod_acked: Vec<String> = attempts
        .iter()
        .filter(|a| a.ok)
        .map(|a| a.key.clone())
        .collect();

    let ip = Pods::list(client, ns)
        .await?
        .ip(&new_master)
        .ok_or_else(|| anyhow::anyhow!("{new_master} has no IP"))?;
    let pod_missing = missing_keys(&ip, &pod_acked).await?;
    let pooled_missing = missing_keys(&ip, &pooled_log.acked).await?;
    let pod_ip_missing = missing_keys(&ip, &pod_ip_log.acked).await?;
    let pod_errors: Vec<&PodAttempt> = attempts
        .iter()
        .filter(|a| !a.ok && a.at >= deleted_unix)
        .collect();
    eprintln!("write gap during the graceful handover, side by side:");
    eprintln!(
        "  Service by name, pod, one connection per write: {} acked, {} lost, longest gap {:?}, {} failed attempts",
        pod_acked.len(),
        pod_missing.len(),
        longest_pod_gap(&attempts, deleted_unix),
        pod_errors.len()
    );
    eprintln!(
        "  Service ClusterIP, host, pooled connection:      {} acked, {} lost, longest gap {:?}, {} errors (first: {:?})",
        pooled_log.acked.len(),
        pooled_missing.len(),
        pooled_log.longest_gap(),
        pooled_log.error_count,
        pooled_log.errors.iter().take(3).collect::<Vec<_>>()
    );
    eprintln!(
        "  pod IP via Sentinel, host:                        {} acked, {} lost, longest gap {:?}, {} errors (first: {:?})",
        pod_ip_log.acked.len(),
        pod_ip_missing.len(),
        pod_ip_log.longest_gap(),
        pod_ip_log.error_count,
        pod_ip_log.errors.iter().take(3).collect::<Vec<_>>()
    );
    for (what, missing) in [
        ("the writer pod", &pod_missing),
        ("the pooled Service writer", &pooled_missing),
        ("the pod-IP writer", &pod_ip_missing),
    ] {
        anyhow::ensure!(
            missing.is_empty(),
            "{} writes {what} had acknowledged are lost: {:?}",
            missing.len(),
            missing.iter().take(10).collect::<Vec<_>>()
        );
    }
    anyhow::ensure!(
        !pod_acked.is_empty() && !pooled_log.acked.is_empty(),
        "the Service writers acknowledged nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ip_services_route_to_the_master_and_replicas_and_follow_a_handover() {
    let test = OperatorTest::start("op-svc").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let started = Instant::now();

    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0, sentinel: {{enabled: true, replicas: 3}}}}\n"
        ),
    )
    .await
    .unwrap();
    apply_yaml(&client, &ns, &writer_pod_yaml()).await.unwrap();
    let result = async {
        let master = cluster_ready(&client, &ns).await?;
        eprintln!(
            "cluster ready after {:?}, master {master}",
            started.elapsed()
        );
        // kube-proxy programs its rules some time after the EndpointSlices change.
        eventually(
            Duration::from_secs(20),
            "the host reaches the right pods through the ClusterIPs",
            || host_reaches_the_right_pods(&client, &ns, &master),
        )
        .await?;
        pods_reach_the_right_pods(&client, &ns, &master).await?;
        handover_through_the_service(&client, &ns, &master).await
    }
    .await;
    if let Err(error) = &result {
        dump_container_logs(&client, &ns, 30).await;
        panic!("{error:#}");
    }
    eprintln!(
        "cluster, checks and handover took {:?} (without the operator start and the cleanup)",
        started.elapsed()
    );
    test.cleanup().await.unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_log_gives_keys_times_and_outcomes() {
        let attempts = parse_writer_log(
            "1 1764590000.100000 OK\n\
             2 1764590000.200000 READONLY You can't write against a read only replica.\n\
             3 1764590001.700000 OK\n\
             garbage\n\
             4 1764590001.710000 OK\n",
        );
        assert_eq!(attempts.len(), 4);
        assert_eq!(attempts[0].key, "pod:1");
        assert!(attempts[0].ok && !attempts[1].ok);
        let gap = longest_pod_gap(&attempts, 1_764_590_000.0);
        assert!((gap.as_secs_f64() - 1.6).abs() < 1e-6, "{gap:?}");
        assert_eq!(longest_pod_gap(&attempts, 1_764_590_002.0), Duration::ZERO);
    }
}
