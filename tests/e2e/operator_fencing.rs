//! Master self-fencing with Sentinel (ADR 0019, issue 14), under two writers, every `OK` counted:
//! one inside the master pod's network namespace (a client on the master's side, writing to
//! 127.0.0.1) and one through `<name>-rw`'s ClusterIP. Faults of the master of a 3 + 3 cluster:
//!
//! - `partition` 40 s (cut off the network);
//! - `sentinels-cut-off` 20 s (a one-way cut, ADR 0041: the master drops what its Sentinels send to
//!   its Valkey port, while it still reaches them — they fail it over, it must be fenced first);
//! - `pause` (SIGSTOP of its valkey container; the sidecar keeps running), in `bench_fence` only:
//!   the suite's pause runs are the disruption matrix's `master-pause-15s` / `-60s` rows (a
//!   client in the master's network namespace, its window from the resume, the same bound).
//!
//! Asserted for each: acknowledged writes are lost only among those acknowledged within F (+ the
//! fencer's poll and the fault's own latency) of the window start — the cut of a partition, the
//! resume (SIGCONT) of a pause; at every sample at most one pod is labelled master and `-rw` has
//! at most one ready endpoint, the samples (every watch event of the pods and `-rw`'s
//! EndpointSlices, and at least every 100 ms) at most 250 ms apart; after the heal Phase OK, one
//! master, both replicas linked to it.
//!
//! `bench_fence` (ignored; `cargo xtask bench fence` runs it) repeats pause and partition runs
//! per topology (3 + 3, and 3 data pods without Sentinel) and prints one `BENCH` line a run.
//!
//! `exclusive_`: the bound is a timing bound, measured on a 2-core machine; it runs alone.
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{fence_measure, fence_support, ha_support, operator_support};

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use fence_measure::{LostSplit, acks_stopped, split_lost};
use fence_support::{AckWriter, Sampler, Samples, pod_netns, sidecar_log_lines};
use ha_support::{
    Pods, dump_container_logs, endpoint_pods, eventually, info, info_field, missing_keys,
    sentinel_master_host,
};
use kube::api::Api;
use operator_support::{OperatorTest, ok_with};
use vko_api::Valkey;
use vko_testbed::control::Fault;
use vko_testbed::harness::Testbed;

const NAME: &str = "fence";
/// The sidecar's default F (`vko_authority::DEFAULT_FENCE_AFTER`).
const F: Duration = Duration::from_secs(2);
/// The fencer asks every 250 ms; the last proof can be that much older than the cut.
const POLL: Duration = Duration::from_millis(250);
/// The fault's own latency (the control socket, `ip link set`) and scheduling on 2 cores.
const SLACK: Duration = Duration::from_millis(500);
/// Lost writes are allowed only among those acknowledged this long after the window start.
const BOUND: Duration = Duration::from_millis(2_750);
const _: () = assert!(BOUND.as_millis() == F.as_millis() + POLL.as_millis() + SLACK.as_millis());
/// Sentinel PINGs the master every second: after a one-way cut its first unanswered PING, from
/// which the fence's F runs (ADR 0041), is sent up to this long after the cut.
const SENTINEL_PING_PERIOD: Duration = Duration::from_secs(1);
/// The master's Valkey port, which a one-way cut closes to its Sentinels.
const VALKEY_PORT: u16 = 6379;
/// A write acknowledged this long after the fault's request returned still counts as
/// acknowledged at the fault (its OK was in flight); no failover is that fast.
const FAULT_LANDED_SLACK: Duration = Duration::from_millis(100);
/// Issue 14: labels and endpoints sampled at most this far apart. The sampler samples every watch
/// event, so the bound applies to the time a watch was blind (an error until its relist).
const MAX_SAMPLE_GAP: Duration = Duration::from_millis(250);
/// The in-netns writer's `OK`s paused longer than this: its server stopped acknowledging.
const BLOCKED_GAP: Duration = Duration::from_secs(1);

/// The shape of the cluster under a fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Topology {
    /// 3 data pods + 3 Sentinels.
    ThreePlusThree,
    /// 3 data pods, no Sentinel (the operator is the authority).
    ThreeNoSentinel,
}

impl Topology {
    fn label(self) -> &'static str {
        match self {
            Topology::ThreePlusThree => "3+3",
            Topology::ThreeNoSentinel => "3-no-sentinel",
        }
    }

    fn sentinel(self) -> bool {
        self == Topology::ThreePlusThree
    }

    fn yaml(self) -> String {
        let sentinel = if self.sentinel() {
            ", sentinel: {enabled: true, replicas: 3}"
        } else {
            ""
        };
        format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0{sentinel}}}\n"
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FaultKind {
    /// The master pod cut off the network, then healed.
    Partition,
    /// The master's valkey container SIGSTOPped, then SIGCONTed.
    Pause,
    /// A one-way cut: the master drops what its Sentinels send to its Valkey port (they cannot
    /// PING it and fail it over), while it still asks them and hears their answers.
    SentinelsCutOff,
}

impl FaultKind {
    fn label(self) -> &'static str {
        match self {
            FaultKind::Partition => "partition",
            FaultKind::Pause => "pause",
            FaultKind::SentinelsCutOff => "sentinels-cut-off",
        }
    }

    /// Lost writes are allowed only among those acknowledged this long after the window start,
    /// and the in-netns writer's OKs must have stopped by then.
    fn bound(self) -> Duration {
        match self {
            FaultKind::Partition | FaultKind::Pause => BOUND,
            FaultKind::SentinelsCutOff => BOUND + SENTINEL_PING_PERIOD,
        }
    }

    fn start(self, ns: &str, pod: &str, sentinels: &[Ipv4Addr]) -> Fault {
        let (namespace, pod) = (ns.to_owned(), pod.to_owned());
        match self {
            FaultKind::Partition => Fault::Partition { namespace, pod },
            FaultKind::SentinelsCutOff => Fault::BlockInbound {
                namespace,
                pod,
                port: VALKEY_PORT,
                from: sentinels.to_vec(),
            },
            FaultKind::Pause => Fault::Pause {
                namespace,
                pod,
                container: "valkey".into(),
            },
        }
    }

    fn end(self, ns: &str, pod: &str, sentinels: &[Ipv4Addr]) -> Fault {
        let (namespace, pod) = (ns.to_owned(), pod.to_owned());
        match self {
            FaultKind::Partition => Fault::Heal { namespace, pod },
            FaultKind::SentinelsCutOff => Fault::UnblockInbound {
                namespace,
                pod,
                port: VALKEY_PORT,
                from: sentinels.to_vec(),
            },
            FaultKind::Pause => Fault::Resume {
                namespace,
                pod,
                container: "valkey".into(),
            },
        }
    }
}

async fn sentinel_master(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    let pods = Pods::list(client, ns).await?;
    let host = sentinel_master_host(&pods, NAME).await?;
    Ok(host.split('.').next().unwrap_or_default().to_owned())
}

/// Phase OK with 3 ready, the master recorded (and named by Sentinel, with Sentinel), labelled,
/// alone behind `-rw`, with both replicas online; returns it.
async fn whole(
    client: &kube::Client,
    ns: &str,
    topology: Topology,
    timeout: Duration,
) -> anyhow::Result<String> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    eventually(timeout, "the cluster whole", || async {
        let valkey = valkeys.get(NAME).await?;
        anyhow::ensure!(ok_with(3)(&valkey), "status {:?}", valkey.status);
        let recorded = valkey.status.as_ref().and_then(|s| s.master_pod.clone());
        let master = if topology.sentinel() {
            sentinel_master(client, ns).await?
        } else {
            recorded.clone().unwrap_or_default()
        };
        anyhow::ensure!(
            recorded.as_deref() == Some(master.as_str()),
            "masterPod {recorded:?}"
        );
        let rw = endpoint_pods(client, ns, &format!("{NAME}-rw")).await?;
        anyhow::ensure!(rw == [master.clone()], "-rw {rw:?}");
        let ip = Pods::list(client, ns)
            .await?
            .ip(&master)
            .unwrap_or_default();
        let replication = info(&ip, "replication").await?;
        anyhow::ensure!(
            info_field(&replication, "role") == Some("master")
                && info_field(&replication, "connected_slaves") == Some("2"),
            "{master}: {replication}"
        );
        for i in 0..2 {
            let line = info_field(&replication, &format!("slave{i}")).unwrap_or_default();
            anyhow::ensure!(line.contains("state=online"), "{master} slave{i}: {line}");
        }
        Ok(master)
    })
    .await
}

async fn wait_for_acks(writer: &AckWriter, at_least: usize, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while writer.acked() < at_least {
        anyhow::ensure!(Instant::now() < deadline, "{what}: no progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// What one fault of the master did.
#[derive(Debug)]
struct Run {
    kind: FaultKind,
    hold: Duration,
    old_master: String,
    new_master: String,
    /// Acknowledged by both writers.
    acked: usize,
    lost: LostSplit,
    /// The window start (cut, resume) to the in-netns writer's last `OK` before its `OK`s
    /// stopped; `None`: its server never stopped acknowledging.
    fenced_after: Option<Duration>,
    /// `OK`s of the in-netns writer later than [`BOUND`] after the window start, before the heal
    /// (partition) or before the cluster was whole again (pause).
    inside_acked_late: usize,
    /// The fault's end (heal, resume) to Phase OK with one linked master.
    whole_after: Duration,
    samples: Samples,
}

impl Run {
    /// What breaks the bound (empty: none).
    fn violations(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .lost
            .outside
            .iter()
            .take(5)
            .map(|l| format!("lost outside the window: {l}"))
            .collect();
        // Late OKs break the bound only when another pod became master: a master that was never
        // replaced (no failover within the fault) acknowledges legitimately after it, and what it
        // acknowledged is checked for loss like every write.
        if self.inside_acked_late > 0 && self.new_master != self.old_master {
            v.push(format!(
                "{} OKs of the in-netns writer later than {:?} after the window start",
                self.inside_acked_late,
                self.kind.bound()
            ));
        }
        if self.kind == FaultKind::SentinelsCutOff {
            // ADR 0041: fenced before any Sentinel may flag it down, so before the failover the
            // cut makes them start: nothing acknowledged is lost, not even within the bound.
            let lost = self.lost.in_window + self.lost.at_the_fault + self.lost.outside.len();
            if lost > 0 {
                v.push(format!("{lost} acknowledged writes lost to a one-way cut"));
            }
            if self.new_master == self.old_master {
                v.push("no failover during the one-way cut: the fault tested nothing".into());
            }
            if self.fenced_after.is_none() {
                v.push("the in-netns writer's OKs never stopped".into());
            }
        }
        if self.samples.samples < 100 {
            v.push(format!("too few samples: {}", self.samples.samples));
        }
        if self.samples.longest_blind > MAX_SAMPLE_GAP {
            v.push(format!(
                "a watch blind for {:?}",
                self.samples.longest_blind
            ));
        }
        if self.samples.max_master_labels > 1 {
            v.push(format!(
                "pods labelled master at once: {:?}",
                self.samples.max_master_labels_pods
            ));
        }
        if self.samples.max_rw_endpoints > 1 {
            v.push(format!(
                "-rw endpoints at once: {:?}",
                self.samples.max_rw_endpoints_pods
            ));
        }
        v
    }

    fn bench_line(&self, topology: Topology, run: usize) -> String {
        let ms = |d: Duration| d.as_millis().to_string();
        format!(
            "BENCH topology={} fault={} run={run} hold_ms={} fenced_ms={} lost={} lost_at_fault={} lost_outside={} last_lost_ms={} acked={} late_acks={} whole_ms={} max_masters={} max_rw={} sample_gap_ms={}",
            topology.label(),
            self.kind.label(),
            ms(self.hold),
            self.fenced_after.map_or("-".into(), ms),
            self.lost.in_window + self.lost.at_the_fault + self.lost.outside.len(),
            self.lost.at_the_fault,
            self.lost.outside.len(),
            self.lost.last_after_start.map_or("-".into(), ms),
            self.acked,
            self.inside_acked_late,
            ms(self.whole_after),
            self.samples.max_master_labels,
            self.samples.max_rw_endpoints,
            ms(self.samples.longest_interval),
        )
    }
}

/// Faults the master of the whole cluster in `ns` for `hold` under both writers and the sampler,
/// ends the fault, waits up to `settle` for the cluster to be whole again and measures.
async fn fault_once(
    testbed: &Testbed,
    client: &kube::Client,
    ns: &str,
    topology: Topology,
    kind: FaultKind,
    hold: Duration,
    settle: Duration,
) -> anyhow::Result<Run> {
    let old_master = whole(client, ns, topology, settle).await?;
    let netns = pod_netns(client, ns, &old_master).await?;
    let inside = AckWriter::in_netns(&netns, "inside")?;
    let rw = AckWriter::through_service(client, ns, &format!("{NAME}-rw"), "rw").await?;
    wait_for_acks(&inside, 300, "the writer inside the master's netns").await?;
    wait_for_acks(&rw, 300, "the writer through -rw").await?;
    let sampler = Sampler::start(
        client.clone(),
        ns.to_owned(),
        NAME.into(),
        Duration::from_millis(100),
    );
    tokio::time::sleep(Duration::from_secs(2)).await;

    let pods = Pods::list(client, ns).await?;
    let sentinels: Vec<Ipv4Addr> = pods
        .names_with_prefix(&format!("{NAME}-sentinel-"))
        .iter()
        .filter_map(|pod| pods.ip(pod)?.parse().ok())
        .collect();
    anyhow::ensure!(
        !topology.sentinel() || sentinels.len() == 3,
        "Sentinel pod IPs: {sentinels:?}"
    );
    eprintln!("{} of the master {old_master} for {hold:?}", kind.label());
    let fault_at = Instant::now();
    testbed
        .fault(kind.start(ns, &old_master, &sentinels))
        .await?;
    // The fault is in place when its request returns; an OK the server sent just before (a
    // write it had not yet replicated) may be read a little later.
    let fault_landed = Instant::now() + FAULT_LANDED_SLACK;
    tokio::time::sleep(hold).await;
    // Taken before the request: the server runs again somewhere between sending the SIGCONT
    // request and its answer, and a write it acknowledges then (one queued while it was stopped)
    // is acknowledged after the resume, not during the fault.
    let ending = Instant::now();
    testbed.fault(kind.end(ns, &old_master, &sentinels)).await?;
    let ended = Instant::now();
    let window_start = match kind {
        FaultKind::Partition | FaultKind::SentinelsCutOff => fault_at,
        FaultKind::Pause => ending,
    };
    let new_master = match whole(client, ns, topology, settle).await {
        Ok(m) => m,
        Err(e) => {
            dump_container_logs(client, ns, 80).await;
            return Err(e);
        }
    };
    let whole_at = Instant::now();
    let whole_after = ended.elapsed();
    eprintln!("whole again {whole_after:?} after the end of the fault, master {new_master}");
    // Writes flow again through -rw.
    let rw_after = rw.acked();
    wait_for_acks(
        &rw,
        rw_after + 300,
        "the writer through -rw after the fault",
    )
    .await?;
    let samples = sampler.stop().await;
    let inside = inside.stop().await;
    let rw = rw.stop().await;

    let ip = Pods::list(client, ns)
        .await?
        .ip(&new_master)
        .unwrap_or_default();
    let mut lost: Vec<(String, Instant)> = Vec::new();
    for (writer, acks) in [("inside", &inside), ("rw", &rw)] {
        let missing = missing_keys(&ip, &acks.keys).await?;
        let missing: std::collections::HashSet<&String> = missing.iter().collect();
        lost.extend(
            acks.keys
                .iter()
                .zip(&acks.at)
                .filter(|(key, _)| missing.contains(key))
                .map(|(key, at)| (format!("{writer} {key}"), *at)),
        );
        eprintln!(
            "{writer}: {} acknowledged, {} lost, {} errors (first: {:?})",
            acks.keys.len(),
            missing.len(),
            acks.errors,
            acks.first_errors.iter().take(4).collect::<Vec<_>>()
        );
    }
    let lost = split_lost(&lost, fault_at, fault_landed, window_start, kind.bound());
    // Until the heal a partitioned master's OKs count; a resumed one is watched until whole.
    let until = match kind {
        FaultKind::Partition | FaultKind::SentinelsCutOff => ended,
        FaultKind::Pause => whole_at,
    };
    let fenced_after = acks_stopped(&inside.at, window_start, until, BLOCKED_GAP);
    let inside_acked_late = inside
        .at
        .iter()
        .filter(|&&at| at > window_start + kind.bound() && at <= until)
        .count();
    let run = Run {
        kind,
        hold,
        old_master,
        new_master,
        acked: inside.keys.len() + rw.keys.len(),
        lost,
        fenced_after,
        inside_acked_late,
        whole_after,
        samples,
    };
    eprintln!(
        "MEASURED fencing {} {} {hold:?} (window from the {}): {} acknowledged writes lost inside the window, the last {:?} after its start (F {F:?}), {} acknowledged as the fault hit (not yet replicated), {} outside; the in-netns writer's OKs stopped {:?} after the window start, {} OKs later than {:?}; samples {} (longest interval {:?}, {} watch errors, blind at most {:?}): at most {} pods labelled master ({:?} at {:?}), at most {} -rw endpoints ({:?}); {} -> {}",
        topology.label(),
        kind.label(),
        match kind {
            FaultKind::Partition | FaultKind::SentinelsCutOff => "cut",
            FaultKind::Pause => "resume",
        },
        run.lost.in_window,
        run.lost.last_in_window,
        run.lost.at_the_fault,
        run.lost.outside.len(),
        run.fenced_after,
        run.inside_acked_late,
        kind.bound(),
        run.samples.samples,
        run.samples.longest_interval,
        run.samples.watch_errors,
        run.samples.longest_blind,
        run.samples.max_master_labels,
        run.samples.max_master_labels_pods,
        run.samples.max_master_labels_at,
        run.samples.max_rw_endpoints,
        run.samples.max_rw_endpoints_pods,
        run.old_master,
        run.new_master,
    );
    Ok(run)
}

/// What the old master's fencer logged (its fence, its demotion, its unfence), and the operator's
/// MasterFenced Events.
async fn print_fence_story(client: &kube::Client, ns: &str, old_master: &str) {
    for line in sidecar_log_lines(
        client,
        ns,
        old_master,
        &[
            "FENCED",
            "UNFENCED",
            "demoted itself",
            "fenced annotation",
            "instanceRole",
        ],
    )
    .await
    {
        eprintln!("{old_master} sidecar: {line}");
    }
    let fenced_events: Vec<String> = operator_support::events_about(client, ns, NAME, "Warning")
        .await
        .into_iter()
        .filter(|e| {
            e.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("Authority"))
        })
        .map(|e| e.note.unwrap_or_default())
        .collect();
    eprintln!("MasterFenced Warning Events: {fenced_events:?}");
}

/// Runs the fault on a 3 + 3 cluster and asserts the bound.
async fn assert_fenced(
    test: &OperatorTest,
    topology: Topology,
    kind: FaultKind,
    hold: Duration,
) -> anyhow::Result<()> {
    let (client, ns) = (test.client(), test.ns().to_owned());
    let run = fault_once(
        &test.testbed,
        &client,
        &ns,
        topology,
        kind,
        hold,
        Duration::from_secs(180),
    )
    .await?;
    print_fence_story(&client, &ns, &run.old_master).await;
    let violations = run.violations();
    if !violations.is_empty() {
        dump_container_logs(&client, &ns, 60).await;
    }
    anyhow::ensure!(
        violations.is_empty(),
        "{} {hold:?}: {violations:#?}",
        kind.label()
    );
    Ok(())
}

async fn cluster_of(topology: Topology, prefix: &str) -> anyhow::Result<OperatorTest> {
    let test = OperatorTest::start(prefix).await?;
    test.apply_until_ok(&topology.yaml(), NAME, 3, Duration::from_secs(240))
        .await?;
    Ok(test)
}

/// One 3 + 3, first with its Sentinels answering in turn (ADR 0040), then its master partitioned
/// for 40 s (ADR 0019): not fenced by the one, fenced within F by the other; then its new master
/// cut off one way for 20 s (ADR 0041: its Sentinels cannot PING it, it still hears them): fenced
/// before they fail it over, nothing lost.
///
/// The turns: one Sentinel stopped throughout (as one being replaced in a roll) and the other two
/// stopped in turn (SIGSTOP), 1.3 s each, the next stopped as the previous resumes. A round of the
/// round-based fencer heard both only when it began in the last second of a turn, and its rounds,
/// each waiting the full second for the stopped Sentinel (less near the deadline), missed that
/// often enough to fence (measured: twice in 8 turns); each Sentinel's latest answer counting for
/// F, the master never fences (no `FENCED` line of its sidecar) and its writer is never held
/// longer than [`BLOCKED_GAP`]. Then both stopped at once for 4 s: it fences (the test sees a
/// fence when there is one), and after the resume nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_master_is_not_fenced_by_sentinels_answering_in_turn_but_is_when_cut_off() {
    let test = cluster_of(Topology::ThreePlusThree, "op-fence")
        .await
        .unwrap();
    let outcome = sentinels_in_turn(&test).await;
    if outcome.is_err() {
        dump_container_logs(&test.client(), test.ns(), 60).await;
    }
    outcome.unwrap();
    for (kind, hold) in [
        (FaultKind::Partition, Duration::from_secs(40)),
        (FaultKind::SentinelsCutOff, Duration::from_secs(20)),
    ] {
        assert_fenced(&test, Topology::ThreePlusThree, kind, hold)
            .await
            .unwrap();
    }
    test.cleanup().await.unwrap();
}

async fn sentinels_in_turn(test: &OperatorTest) -> anyhow::Result<()> {
    const TURN: Duration = Duration::from_millis(1_300);
    const TURNS: u32 = 8;
    let (client, ns) = (test.client(), test.ns().to_owned());
    let testbed = &test.testbed;
    let master = whole(
        &client,
        &ns,
        Topology::ThreePlusThree,
        Duration::from_secs(180),
    )
    .await?;
    let netns = pod_netns(&client, &ns, &master).await?;
    let inside = AckWriter::in_netns(&netns, "inside")?;
    wait_for_acks(&inside, 300, "the writer inside the master's netns").await?;
    // And one as clients connect, through `-rw`.
    let rw = AckWriter::through_service(&client, &ns, &format!("{NAME}-rw"), "rw").await?;
    wait_for_acks(&rw, 300, "the writer through -rw").await?;
    let sentinel = |i: u32| format!("{NAME}-sentinel-{i}");
    let stop = |i: u32| Fault::Pause {
        namespace: ns.clone(),
        pod: sentinel(i),
        container: "sentinel".into(),
    };
    let resume = |i: u32| Fault::Resume {
        namespace: ns.clone(),
        pod: sentinel(i),
        container: "sentinel".into(),
    };
    let fences_before = fence_lines(&client, &ns, &master).await;
    testbed.fault(stop(2)).await?;
    eprintln!(
        "{}: stopped; {} and {} stopped in turn, {TURN:?} each",
        sentinel(2),
        sentinel(0),
        sentinel(1)
    );
    let turns_from = Instant::now();
    testbed.fault(stop(0)).await?;
    for turn in 0..TURNS {
        tokio::time::sleep(TURN).await;
        let (next, previous) = ((turn + 1) % 2, turn % 2);
        testbed.fault(stop(next)).await?;
        testbed.fault(resume(previous)).await?;
    }
    testbed.fault(resume(TURNS % 2)).await?;
    let turns_until = Instant::now();
    let fenced_in_turns = fence_lines(&client, &ns, &master).await - fences_before;
    let held_in_turns = acks_stopped(&inside.at_snapshot(), turns_from, turns_until, BLOCKED_GAP);
    let rw_held_in_turns = acks_stopped(&rw.at_snapshot(), turns_from, turns_until, BLOCKED_GAP);

    // Control: both stopped at once for 4 s, the third still stopped: nobody answers.
    let both_from = Instant::now();
    testbed.fault(stop(0)).await?;
    testbed.fault(stop(1)).await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let both_until = Instant::now();
    for i in 0..3 {
        testbed.fault(resume(i)).await?;
    }
    let held_when_both_stopped =
        acks_stopped(&inside.at_snapshot(), both_from, both_until, BLOCKED_GAP);
    let master_after = whole(
        &client,
        &ns,
        Topology::ThreePlusThree,
        Duration::from_secs(180),
    )
    .await?;
    let mut acks = inside.stop().await.keys;
    acks.extend(rw.stop().await.keys);
    let ip = Pods::list(&client, &ns)
        .await?
        .ip(&master_after)
        .unwrap_or_default();
    let lost = missing_keys(&ip, &acks).await?;
    print_fence_story(&client, &ns, &master).await;
    eprintln!(
        "MEASURED sentinels in turn: {TURNS} turns of {TURN:?}: writer held {held_in_turns:?} \
         (through -rw {rw_held_in_turns:?}), fences {fenced_in_turns}; both stopped 4 s: writer \
         stopped {held_when_both_stopped:?} after the stop; {} acknowledged, {} lost, master \
         {master} -> {master_after}",
        acks.len(),
        lost.len()
    );
    anyhow::ensure!(
        fenced_in_turns == 0 && held_in_turns.is_none() && rw_held_in_turns.is_none(),
        "the master fenced {fenced_in_turns} times (writer held {held_in_turns:?}, through -rw \
         {rw_held_in_turns:?}) while its Sentinels answered in turn"
    );
    anyhow::ensure!(
        held_when_both_stopped.is_some(),
        "no fence while no Sentinel could answer: the test would not see one"
    );
    anyhow::ensure!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    Ok(())
}

/// How many times `pod`'s fencer has fenced it so far (its `FENCED:` log lines).
async fn fence_lines(client: &kube::Client, ns: &str, pod: &str) -> usize {
    sidecar_log_lines(client, ns, pod, &["FENCED: this master"])
        .await
        .len()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `cargo xtask bench fence`: per topology one cluster, `VKO_BENCH_RUNS` pauses then as many
/// partitions of its master for `VKO_BENCH_FAULT_SECS` each, one `BENCH` line a run (a run that
/// cannot finish prints `BENCH ... error=` and ends that topology: its cluster is not whole).
/// `VKO_BENCH_TOPOLOGIES` (comma-separated labels) limits the topologies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: cargo xtask bench fence runs it"]
async fn bench_fence() {
    let runs: usize = env_or("VKO_BENCH_RUNS", 5);
    let hold = Duration::from_secs(env_or("VKO_BENCH_FAULT_SECS", 12));
    let only: String = env_or("VKO_BENCH_TOPOLOGIES", String::new());
    for topology in [Topology::ThreePlusThree, Topology::ThreeNoSentinel] {
        if !only.is_empty() && !only.split(',').any(|t| t == topology.label()) {
            continue;
        }
        let test = OperatorTest::start("fence-bench").await.unwrap();
        test.apply_until_ok(&topology.yaml(), NAME, 3, Duration::from_secs(240))
            .await
            .unwrap();
        let (client, ns) = (test.client(), test.ns().to_owned());
        'topology: for kind in [FaultKind::Pause, FaultKind::Partition] {
            for run in 0..runs {
                match fault_once(
                    &test.testbed,
                    &client,
                    &ns,
                    topology,
                    kind,
                    hold,
                    Duration::from_secs(120),
                )
                .await
                {
                    Ok(measured) => println!("{}", measured.bench_line(topology, run)),
                    Err(e) => {
                        let error = format!("{e:#}").replace(char::is_whitespace, "_");
                        println!(
                            "BENCH topology={} fault={} run={run} error={}",
                            topology.label(),
                            kind.label(),
                            error.chars().take(200).collect::<String>()
                        );
                        break 'topology;
                    }
                }
            }
        }
        test.cleanup().await.unwrap();
    }
}
