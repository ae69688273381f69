//! The disruption matrix's runner (issue 15, ADR 0042): one `Valkey` per topology in a test
//! namespace, and per run of a row: the cluster healthy, its data flushed, a plain writer and a
//! confirming writer through `<name>-rw`'s ClusterIP (as clients connect; the testbed's
//! kube-proxy routes it) and the master-label / `-rw` sampler started, the fault injected as
//! [`Row::definition`] says, the cluster healthy again, writes flowing after it, then every
//! acknowledged key looked up on the final master. The rows, bounds and page are in
//! [`crate::matrix`].

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::{Api, Patch, PatchParams};
use vko_api::{Phase, Valkey};
use vko_testbed::control::Fault;

use crate::fence_measure::split_lost;
use crate::fence_support::{AckWriter, Sampler, pod_netns};
use crate::ha_support::{
    Follow, Pods, Reply, SENTINEL_PORT, VALKEY_PORT, Writer, call, delete_and_wait_gone,
    endpoint_pods, eventually, info, info_field, kill_valkey_server, missing_keys,
    watch_terminations,
};
use crate::matrix::{
    AOF_FSYNC_TAIL, LossRule, MASTER_SIDE_BOUND, MasterSide, Measurement, Row, Topology, unwritable,
};
use crate::operator_support::{
    OperatorTest, kill_operator, ok_with, restart_operator, wait_for_valkey,
};

/// The measured `Valkey`'s name in its namespace.
pub const NAME: &str = "mx";
/// The annotation a rolling-update run changes.
const ROLL_ANNOTATION: &str = "matrix.vko.test/roll";
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(300);
/// A write acknowledged this close to the fault's request was acknowledged in the instant the
/// fault hit, possibly not yet replicated (as in a crash): the fault's own latency (the control
/// socket, then `ip link` or a signal), the client's read of an `OK` sent just before, and the
/// replication stream still in the master's buffers.
const FAULT_LANDED_SLACK: Duration = Duration::from_millis(200);
/// Writes acknowledged before the fault, and again after the cluster is healthy.
const WRITES_AROUND: usize = 300;

/// The runs `VKO_MATRIX_RUNS` asks for (default 1) and the rows `VKO_MATRIX_ROWS` selects
/// (comma-separated parts of their ids; default all) that apply to `topology`: its
/// [`Row::exclusive`] ones, or the others.
pub fn plan(topology: Topology, exclusive: bool) -> anyhow::Result<(usize, Vec<Row>)> {
    let runs = match std::env::var("VKO_MATRIX_RUNS") {
        Ok(runs) => runs
            .parse()
            .with_context(|| format!("VKO_MATRIX_RUNS={runs:?} is not a count"))?,
        Err(_) => 1,
    };
    let filter = std::env::var("VKO_MATRIX_ROWS").unwrap_or_default();
    let rows = Row::selected(&filter)
        .into_iter()
        .filter(|row| row.applies_to(topology) && row.exclusive() == exclusive)
        .collect();
    Ok((runs, rows))
}

/// The topologies `VKO_MATRIX_TOPOLOGIES` names (comma-separated labels; default all).
pub fn topologies() -> anyhow::Result<Vec<Topology>> {
    let Ok(labels) = std::env::var("VKO_MATRIX_TOPOLOGIES") else {
        return Ok(Topology::ALL.to_vec());
    };
    labels
        .split(',')
        .filter(|label| !label.is_empty())
        .map(|label| {
            Topology::ALL
                .into_iter()
                .find(|t| t.label() == label)
                .with_context(|| format!("VKO_MATRIX_TOPOLOGIES: unknown topology {label:?}"))
        })
        .collect()
}

/// Creates the topology's `Valkey` and waits for it to be healthy.
pub async fn create(test: &OperatorTest, topology: Topology) -> anyhow::Result<()> {
    test.apply_until_ok(
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {}\n",
            topology.spec()
        ),
        NAME,
        topology.data_pods(),
        Duration::from_secs(300),
    )
    .await?;
    healthy(test, topology, &Expect::default()).await?;
    Ok(())
}

/// What "healthy again" must also show after a row's fault.
#[derive(Debug, Default)]
struct Expect {
    /// Another pod than this one is master.
    master_moved_from: Option<String>,
    /// Every data pod carries this value of [`ROLL_ANNOTATION`].
    rolled_to: Option<String>,
    /// Every Sentinel pod carries `rolled_to` too.
    sentinels_rolled: bool,
    /// Where the fence bound's window starts when not at the fault: a paused server's resume.
    window_start: Option<Instant>,
    /// The data pods then (default: the topology's).
    replicas: Option<i32>,
}

/// Phase OK with every data pod ready (the topology's unless `expect` says otherwise), the recorded master
/// (with Sentinel: named by every Sentinel) answering master with every replica online, alone
/// behind `-rw`; returns it.
async fn healthy(
    test: &OperatorTest,
    topology: Topology,
    expect: &Expect,
) -> anyhow::Result<String> {
    let (client, ns) = (test.client(), test.ns());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let replicas = expect.replicas.unwrap_or(topology.data_pods());
    let online = (replicas - 1).to_string();
    eventually(HEALTHY_TIMEOUT, "the cluster healthy", || async {
        let valkey = valkeys.get(NAME).await?;
        anyhow::ensure!(ok_with(replicas)(&valkey), "status {:?}", valkey.status);
        let master = valkey
            .status
            .as_ref()
            .and_then(|s| s.master_pod.clone())
            .context("no masterPod")?;
        if let Some(old) = &expect.master_moved_from {
            anyhow::ensure!(master != *old, "{old} still master");
        }
        let pods = Pods::list(&client, ns).await?;
        if let Some(value) = &expect.rolled_to {
            let mut rolled = pods.names_with_prefix(&format!("{NAME}-"));
            if expect.sentinels_rolled {
                rolled.extend(pods.names_with_prefix(&format!("{NAME}-sentinel-")));
            }
            for pod in rolled {
                let annotation = pods.by_name.get(&pod).and_then(|p| {
                    p.metadata
                        .annotations
                        .as_ref()?
                        .get(ROLL_ANNOTATION)
                        .cloned()
                });
                anyhow::ensure!(annotation.as_ref() == Some(value), "{pod} not rolled yet");
            }
        }
        if topology.has_sentinel() {
            for sentinel in pods.names_with_prefix(&format!("{NAME}-sentinel-")) {
                let ip = pods.ip(&sentinel).unwrap_or_default();
                let reply = call(
                    &ip,
                    SENTINEL_PORT,
                    &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", NAME],
                )
                .await?;
                let host = reply
                    .items()
                    .first()
                    .and_then(Reply::text)
                    .unwrap_or_default();
                anyhow::ensure!(
                    host.split('.').next() == Some(master.as_str()),
                    "{sentinel} names {host:?}, not {master}"
                );
            }
        }
        let rw = endpoint_pods(&client, ns, &format!("{NAME}-rw")).await?;
        anyhow::ensure!(rw == [master.clone()], "-rw {rw:?}");
        let replication = info(&pods.ip(&master).unwrap_or_default(), "replication").await?;
        anyhow::ensure!(
            info_field(&replication, "role") == Some("master")
                && info_field(&replication, "connected_slaves") == Some(online.as_str()),
            "{master}: {replication}"
        );
        for i in 0..replicas - 1 {
            let line = info_field(&replication, &format!("slave{i}")).unwrap_or_default();
            anyhow::ensure!(line.contains("state=online"), "{master} slave{i}: {line}");
        }
        Ok(master)
    })
    .await
}

/// Measures one run of `row` on the healthy cluster of `test`.
pub async fn measure(
    test: &OperatorTest,
    topology: Topology,
    row: Row,
    run: usize,
) -> anyhow::Result<Measurement> {
    let (client, ns) = (test.client(), test.ns().to_owned());
    if row == Row::ScaleDownMasterOrdinal {
        master_to_the_highest_ordinal(test, topology).await?;
    }
    let master = healthy(test, topology, &Expect::default()).await?;
    let pods = Pods::list(&client, &ns).await?;
    // Each run counts its own keys; a flushed dataset keeps a long matrix's memory flat.
    let flushed = call(
        &pods.ip(&master).unwrap_or_default(),
        VALKEY_PORT,
        &["FLUSHALL"],
    )
    .await?;
    anyhow::ensure!(
        flushed == Reply::Simple("OK".into()),
        "FLUSHALL: {flushed:?}"
    );

    let sampler = Sampler::start(
        client.clone(),
        ns.clone(),
        NAME.into(),
        Duration::from_millis(100),
    );
    let prefix = format!("{}-{run}", row.id());
    let writer = |prefix: String, wait| {
        Writer::start_following(
            client.clone(),
            ns.clone(),
            NAME.into(),
            prefix,
            wait,
            Follow::RwService,
        )
    };
    let plain = writer(prefix.clone(), None);
    // `WAIT 1` needs a replica.
    let confirming = topology
        .has_replicas()
        .then(|| writer(format!("{prefix}-c"), Some(1)));
    let side = if row.has_master_side_client() {
        let netns = pod_netns(&client, &ns, &master).await?;
        Some(AckWriter::in_netns(&netns, &format!("{prefix}-side"))?)
    } else {
        None
    };
    until_acked(&plain, WRITES_AROUND, "the plain writer before the fault").await?;
    if let Some(confirming) = &confirming {
        until_acked(confirming, WRITES_AROUND / 10, "the confirming writer").await?;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    eprintln!(
        "matrix {} {} run {run}: master {master}",
        topology.label(),
        row.id()
    );
    let terminations = row
        .rolls()
        .then(|| watch_terminations(client.clone(), ns.clone(), NAME.into()));
    let fault = Instant::now();
    let expect = inject(test, topology, row, run, &master, &pods).await?;
    let master_after = healthy(test, topology, &expect).await?;
    let max_terminating = terminations.map(|(seen, task)| {
        task.abort();
        let seen = seen.lock().map(|c| c.clone()).unwrap_or_default();
        seen.data.max(seen.sentinel) as u64
    });
    let healthy_at = Instant::now();
    until_acked(
        &plain,
        plain.acked().await + WRITES_AROUND,
        "the plain writer after the fault",
    )
    .await?;

    let side = match side {
        Some(side) => Some(side.stop().await),
        None => None,
    };
    // Writes can resume after the cluster looks healthy (a fenced master is unfenced by the
    // Sentinels' next answers): the gap counts until the writer stopped.
    let stopped = Instant::now();
    let plain = plain.stop().await;
    let confirmed = match confirming {
        Some(confirming) => confirming.stop().await.confirmed,
        None => Vec::new(),
    };
    let samples = sampler.stop().await;

    let ip = Pods::list(&client, &ns)
        .await?
        .ip(&master_after)
        .with_context(|| format!("no IP for {master_after}"))?;
    let lost = missing_keys(&ip, &plain.acked).await?;
    let confirmed_lost = missing_keys(&ip, &confirmed).await?;
    if !lost.is_empty() {
        eprintln!("lost: {:?}", plain.describe_lost(&lost));
    }
    let lost_set: HashSet<&String> = lost.iter().collect();
    let lost_at: Vec<(String, Instant)> = plain
        .acked
        .iter()
        .zip(&plain.ok_times)
        .filter(|(key, _)| lost_set.contains(key))
        .map(|(key, at)| (key.clone(), *at))
        .collect();
    let window_start = expect.window_start.unwrap_or(fault);
    let outside = match row.loss_rule(topology) {
        // The AOF's unsynced tail: the writes acknowledged up to its fsync interval before the
        // crash count as acknowledged at the fault.
        LossRule::UnsyncedTail => split_lost(
            &lost_at,
            fault - AOF_FSYNC_TAIL - FAULT_LANDED_SLACK,
            fault + FAULT_LANDED_SLACK,
            fault + FAULT_LANDED_SLACK,
            Duration::ZERO,
        ),
        LossRule::None | LossRule::WithinFenceBound => split_lost(
            &lost_at,
            fault - FAULT_LANDED_SLACK,
            fault + FAULT_LANDED_SLACK,
            window_start,
            MASTER_SIDE_BOUND,
        ),
    }
    .outside;
    if !outside.is_empty() {
        eprintln!(
            "lost outside the bound: {:?}",
            outside.iter().take(5).collect::<Vec<_>>()
        );
    }
    let master_side = match side {
        Some(acks) => {
            let missing = missing_keys(&ip, &acks.keys).await?;
            let missing: HashSet<&String> = missing.iter().collect();
            let lost: Vec<(String, Instant)> = acks
                .keys
                .iter()
                .zip(&acks.at)
                .filter(|(key, _)| missing.contains(key))
                .map(|(key, at)| (key.clone(), *at))
                .collect();
            let split = split_lost(
                &lost,
                fault - FAULT_LANDED_SLACK,
                fault + FAULT_LANDED_SLACK,
                window_start,
                MASTER_SIDE_BOUND,
            );
            Some(MasterSide {
                acked: acks.keys.len() as u64,
                lost: lost.len() as u64,
                last_lost_ms: split.last_after_start.map(|d| d.as_millis() as u64),
                lost_outside_bound: split.outside.len() as u64,
            })
        }
        None => None,
    };
    let measurement = Measurement {
        topology,
        row,
        run,
        acked: plain.acked.len() as u64,
        lost: lost.len() as u64,
        confirmed: confirmed.len() as u64,
        confirmed_lost: confirmed_lost.len() as u64,
        lost_outside_bound: outside.len() as u64,
        master_side,
        unwritable_ms: unwritable(&plain.ok_times, fault, stopped).map(|d| d.as_millis() as u64),
        healthy_ms: (healthy_at - fault).as_millis() as u64,
        max_master_labels: samples.max_master_labels as u64,
        max_rw_endpoints: samples.max_rw_endpoints as u64,
        samples: samples.samples as u64,
        max_terminating,
        master_before: master,
        master_after,
    };
    if row == Row::ScaleDownMasterOrdinal {
        patch_spec(&client, &ns, serde_json::json!({"replicas": 3})).await?;
        healthy(test, topology, &Expect::default()).await?;
    }
    Ok(measurement)
}

/// Moves the master to the highest ordinal, so that scaling down removes the master's ordinal:
/// the other replica's pod deleted, then at once the master's (its sidecar hands over to the one
/// replica online; with equally caught-up replicas the handover without Sentinel would always
/// pick the lowest ordinal).
async fn master_to_the_highest_ordinal(
    test: &OperatorTest,
    topology: Topology,
) -> anyhow::Result<()> {
    let highest = format!("{NAME}-2");
    for _ in 0..4 {
        let master = healthy(test, topology, &Expect::default()).await?;
        if master == highest {
            return Ok(());
        }
        let other = (0..2)
            .map(|i| format!("{NAME}-{i}"))
            .find(|pod| *pod != master)
            .context("no other replica")?;
        eprintln!("deleting {other}, then the master {master}, to move the master to {highest}");
        delete_and_wait_gone(&test.client(), test.ns(), &other).await?;
        delete_and_wait_gone(&test.client(), test.ns(), &master).await?;
    }
    anyhow::bail!("the master never moved to {highest}")
}

/// A merge patch of the measured `Valkey`'s `spec`.
async fn patch_spec(
    client: &kube::Client,
    ns: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    Api::<Valkey>::namespaced(client.clone(), ns)
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await?;
    Ok(())
}

/// Starts a roll: every data pod (and with `sentinels` every Sentinel pod) gets
/// [`ROLL_ANNOTATION`] = `value`.
async fn start_roll(
    client: &kube::Client,
    ns: &str,
    value: &str,
    sentinels: bool,
) -> anyhow::Result<()> {
    let annotations = serde_json::json!({ ROLL_ANNOTATION: value });
    let mut spec = serde_json::json!({ "podAnnotations": annotations });
    if sentinels {
        spec["sentinel"] = serde_json::json!({ "podAnnotations": annotations });
    }
    patch_spec(client, ns, spec).await
}

/// Waits until the measured `Valkey`'s status shows `what`.
async fn status_shows(
    client: &kube::Client,
    ns: &str,
    what: &str,
    check: impl Fn(&Valkey) -> bool,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(&valkeys, NAME, what, HEALTHY_TIMEOUT, check).await?;
    Ok(())
}

/// Where in a roll the operator is killed: the status shows it.
type KillPoint<'a> = Box<dyn Fn(&Valkey) -> bool + Send + Sync + 'a>;

/// The roll deleted its first data pod.
fn first_pod_deleted(valkey: &Valkey) -> bool {
    valkey
        .status
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .is_some_and(|r| r.last_deleted.is_some())
}

async fn until_acked(writer: &Writer, at_least: usize, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while writer.acked().await < at_least {
        anyhow::ensure!(Instant::now() < deadline, "{what}: no progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Injects `row`'s fault (and ends it, for the faults that last); returns what healthy-again
/// must show besides.
async fn inject(
    test: &OperatorTest,
    topology: Topology,
    row: Row,
    run: usize,
    master: &str,
    pods: &Pods,
) -> anyhow::Result<Expect> {
    let (client, ns) = (test.client(), test.ns().to_owned());
    // A single data pod stays master through every fault.
    let moved = || Expect {
        master_moved_from: topology.has_replicas().then(|| master.to_owned()),
        ..Expect::default()
    };
    let replica = || {
        pods.names_with_prefix(&format!("{NAME}-"))
            .into_iter()
            .find(|pod| pod != master)
            .context("no replica pod")
    };
    let valkey_of = |pod: &str| (ns.clone(), pod.to_owned(), "valkey".to_owned());
    let pause = |(namespace, pod, container)| Fault::Pause {
        namespace,
        pod,
        container,
    };
    let resume = |(namespace, pod, container)| Fault::Resume {
        namespace,
        pod,
        container,
    };
    Ok(match row {
        Row::ReplicaDelete => {
            delete_and_wait_gone(&client, &ns, &replica()?).await?;
            Expect::default()
        }
        Row::MasterDelete => {
            delete_and_wait_gone(&client, &ns, master).await?;
            moved()
        }
        Row::MasterKill => {
            kill_valkey_server(&client, &ns, master).await?;
            moved()
        }
        Row::MasterKillThrice => {
            for kill in 0..3 {
                if kill > 0 {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                // The restart in place may not have come up yet: the next kill waits for it.
                eventually(Duration::from_secs(30), "a valkey-server to kill", || {
                    kill_valkey_server(&client, &ns, master)
                })
                .await?;
            }
            moved()
        }
        Row::MasterPause15s | Row::MasterPause60s => {
            let hold = if row == Row::MasterPause15s { 15 } else { 60 };
            test.testbed.fault(pause(valkey_of(master))).await?;
            tokio::time::sleep(Duration::from_secs(hold)).await;
            // Before the request: the server runs again somewhere inside it.
            let resumed = Instant::now();
            test.testbed.fault(resume(valkey_of(master))).await?;
            Expect {
                window_start: Some(resumed),
                ..moved()
            }
        }
        Row::MasterPartition40s | Row::ReplicaPartition40s => {
            let pod = if row == Row::MasterPartition40s {
                master.to_owned()
            } else {
                replica()?
            };
            let (namespace, pod) = (ns.clone(), pod);
            test.testbed
                .fault(Fault::Partition {
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                })
                .await?;
            tokio::time::sleep(Duration::from_secs(40)).await;
            test.testbed.fault(Fault::Heal { namespace, pod }).await?;
            if row == Row::MasterPartition40s {
                moved()
            } else {
                Expect::default()
            }
        }
        Row::SentinelDelete => {
            delete_and_wait_gone(&client, &ns, &format!("{NAME}-sentinel-0")).await?;
            Expect::default()
        }
        Row::SentinelMajorityStopped => {
            let sentinel = |i: u32| {
                (
                    ns.clone(),
                    format!("{NAME}-sentinel-{i}"),
                    "sentinel".into(),
                )
            };
            for i in 0..2 {
                test.testbed.fault(pause(sentinel(i))).await?;
            }
            tokio::time::sleep(Duration::from_secs(20)).await;
            for i in 0..2 {
                test.testbed.fault(resume(sentinel(i))).await?;
            }
            Expect::default()
        }
        Row::EveryPodDeleted => {
            let every: Vec<String> = pods.by_name.keys().cloned().collect();
            let deleting = every
                .iter()
                .map(|pod| delete_and_wait_gone(&client, &ns, pod));
            futures::future::try_join_all(deleting).await?;
            Expect::default()
        }
        Row::RollingUpdate => {
            let value = format!("run-{run}");
            start_roll(&client, &ns, &value, false).await?;
            Expect {
                rolled_to: Some(value),
                ..moved()
            }
        }
        Row::ScaleDownMasterOrdinal => {
            patch_spec(&client, &ns, serde_json::json!({"replicas": 2})).await?;
            Expect {
                replicas: Some(2),
                ..moved()
            }
        }
        Row::MasterNodeStopped => {
            let node = pods
                .by_name
                .get(master)
                .and_then(|pod| pod.spec.as_ref()?.node_name.clone())
                .with_context(|| format!("{master} has no node"))?;
            eprintln!("stopping {node}, the node of {master}");
            test.testbed
                .fault(Fault::StopNode { node: node.clone() })
                .await?;
            tokio::time::sleep(Duration::from_secs(45)).await;
            test.testbed.fault(Fault::StartNode { node }).await?;
            moved()
        }
        Row::OperatorKilledMidRoll => {
            let value = format!("kill-{run}");
            let sentinels = topology.has_sentinel();
            start_roll(&client, &ns, &value, sentinels).await?;
            let mut points: Vec<(&str, KillPoint)> = vec![
                (
                    "after the first data pod was deleted",
                    Box::new(first_pod_deleted),
                ),
                (
                    "after the master switchover",
                    Box::new(|v: &Valkey| {
                        v.status
                            .as_ref()
                            .and_then(|s| s.master_pod.as_deref())
                            .is_some_and(|m| m != master)
                    }),
                ),
            ];
            if sentinels {
                points.push((
                    "during the Sentinel tier",
                    Box::new(|v: &Valkey| {
                        v.status.as_ref().is_some_and(|s| {
                            matches!(s.phase, Some(Phase::SentinelRollingUpdate { .. }))
                        })
                    }),
                ));
            }
            for (what, point) in points {
                status_shows(&client, &ns, what, point).await?;
                kill_operator()?;
                eprintln!("operator SIGKILLed {what}");
                tokio::time::sleep(Duration::from_secs(1)).await;
                restart_operator()?;
            }
            Expect {
                rolled_to: Some(value),
                sentinels_rolled: sentinels,
                ..moved()
            }
        }
        Row::OperatorDownMasterKill => {
            kill_operator()?;
            let killed = kill_valkey_server(&client, &ns, master).await;
            tokio::time::sleep(Duration::from_secs(20)).await;
            restart_operator()?;
            killed?;
            moved()
        }
        Row::ApiserverRestartMidRoll => {
            let value = format!("apiserver-{run}");
            start_roll(&client, &ns, &value, false).await?;
            status_shows(
                &client,
                &ns,
                "the roll's first data pod deleted",
                first_pod_deleted,
            )
            .await?;
            test.testbed.fault(Fault::RestartApiserver).await?;
            eprintln!("kube-apiserver restarted");
            Expect {
                rolled_to: Some(value),
                ..moved()
            }
        }
    })
}
