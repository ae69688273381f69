//! Rolling updates (vko-roll driven by the operator) under a writer that counts every OK reply as
//! acknowledged (plain `SET`, no `WAIT`): a pod-template change (resources) replaces every pod,
//! one at a time per tier (watched), the data tier before the Sentinel tier, the master by a
//! lossless switchover; afterwards exactly one master holds every acknowledged write and the
//! `Valkey` got no Warning Event. Turning metrics on for a running 3 + 3 cluster rolls the data
//! tier the same way (the exporter container arrives; the Sentinel pods stay).
//!
//! `bench_roll` (ignored; `cargo xtask bench roll` runs it) repeats rolls and prints the total
//! roll time and the writer's gap at each master switchover.
//!
//! The tests run concurrently with the rest of the suite (`--test-threads` at once), so their
//! MEASURED lines are taken under that load; `cargo xtask bench roll` measures alone. The two that
//! need their own operator to lead are `exclusive_` (`cargo xtask test` runs them alone).
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ha_support::{
    Concurrency, Follow, Pods, ROLE_LABEL, Reply, VALKEY_PORT, WriteLog, Writer, call,
    endpoint_pods, eventually, info, info_field, missing_keys, pod_is_ready, role_master_pod,
    sentinel_master_host, watch_terminations,
};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_support::{
    OperatorTest, cleanup_namespace, condition, http_status, install_crd, operator, spawn_operator,
    wait_for_valkey,
};
use vko_api::{Phase, Valkey};
use vko_testbed::control::Fault;
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, kubectl};

/// The shape of one cluster under test.
#[derive(Clone, Copy, Debug)]
struct Shape {
    replicas: u32,
    sentinel: bool,
    persistence: bool,
}

impl Shape {
    fn yaml(&self, name: &str) -> String {
        self.yaml_with_image(name, "valkey/valkey:8.0")
    }

    fn yaml_with_image(&self, name: &str, image: &str) -> String {
        let mut spec = format!("replicas: {}, image: {image}", self.replicas);
        if self.sentinel {
            spec.push_str(", sentinel: {enabled: true, replicas: 3}");
        }
        if self.persistence {
            spec.push_str(", persistence: {enabled: true, mode: aof}");
        }
        format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{{spec}}}\n"
        )
    }

    fn follow(&self) -> Follow {
        if self.sentinel {
            Follow::Sentinel
        } else {
            Follow::RoleMaster
        }
    }
}

fn data_pods(pods: &Pods, name: &str) -> Vec<String> {
    pods.names_with_prefix(&format!("{name}-"))
}

fn sentinel_pods(pods: &Pods, name: &str) -> Vec<String> {
    pods.names_with_prefix(&format!("{name}-sentinel-"))
}

/// The pod the writer would write to now.
async fn master_pod(pods: &Pods, name: &str, shape: Shape) -> anyhow::Result<String> {
    match shape.follow() {
        Follow::Sentinel => Ok(sentinel_master_host(pods, name)
            .await?
            .split('.')
            .next()
            .unwrap_or_default()
            .to_owned()),
        Follow::RoleMaster | Follow::RwService => role_master_pod(pods, name).await,
    }
}

/// Data pods answering `ROLE` with `master`.
async fn masters(pods: &Pods, name: &str) -> Vec<String> {
    let mut found = Vec::new();
    for pod in data_pods(pods, name) {
        let Some(ip) = pods.ip(&pod) else { continue };
        if let Ok(reply) = call(&ip, VALKEY_PORT, &["ROLE"]).await
            && reply.items().first().and_then(Reply::text) == Some("master")
        {
            found.push(pod);
        }
    }
    found
}

fn is_settled(valkey: &Valkey, replicas: u32) -> bool {
    valkey.status.as_ref().is_some_and(|s| {
        s.phase == Some(Phase::Ok)
            && s.ready_replicas == Some(i32::try_from(replicas).unwrap_or(0))
            && s.rolling_update.is_none()
    })
}

/// Waits until the cluster is OK and the master has every replica online.
async fn settled(client: &kube::Client, ns: &str, name: &str, shape: Shape) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        name,
        "OK with every pod ready and no roll in flight",
        Duration::from_secs(300),
        |v| is_settled(v, shape.replicas),
    )
    .await?;
    eventually(
        Duration::from_secs(120),
        "the master with every replica online",
        || async {
            let pods = Pods::list(client, ns).await?;
            let master = master_pod(&pods, name, shape).await?;
            let ip = pods.ip(&master).unwrap_or_default();
            let replication = info(&ip, "replication").await?;
            let want = (shape.replicas - 1).to_string();
            anyhow::ensure!(
                info_field(&replication, "role") == Some("master")
                    && info_field(&replication, "connected_slaves") == Some(want.as_str()),
                "{master}: {replication}"
            );
            Ok(())
        },
    )
    .await
}

/// What one roll measured.
#[derive(Debug)]
struct RollResult {
    total: Duration,
    log: WriteLog,
    lost: usize,
    concurrency: Concurrency,
    masters_after: Vec<String>,
}

/// Pod name → (uid, creation time).
type PodIdentity = BTreeMap<String, (String, i64)>;

fn identities(pods: &Pods, names: &[String]) -> PodIdentity {
    names
        .iter()
        .filter_map(|n| {
            let pod = pods.by_name.get(n)?;
            Some((
                n.clone(),
                (
                    pod.metadata.uid.clone().unwrap_or_default(),
                    pod.metadata
                        .creation_timestamp
                        .as_ref()
                        .map(|t| t.0.as_millisecond())
                        .unwrap_or(0),
                ),
            ))
        })
        .collect()
}

/// Changes the pod templates (`cpu` request) of both tiers and waits until every pod is replaced
/// and the cluster is settled again, under a writer.
/// The spec change a roll is made of.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// A new CPU request on both tiers: every pod is replaced.
    CpuRequest(u32),
    /// `spec.metrics.enabled: true`: every data pod gets the exporter; the Sentinel tier stays.
    EnableMetrics,
    /// A new `spec.image` (another Valkey release): every pod of both tiers is replaced.
    Image(&'static str),
}

async fn roll_once(
    client: &kube::Client,
    ns: &str,
    name: &str,
    shape: Shape,
    change: Change,
    prefix: &str,
) -> anyhow::Result<(RollResult, PodIdentity, PodIdentity)> {
    let before = Pods::list(client, ns).await?;
    let data_before = identities(&before, &data_pods(&before, name));
    let sentinel_before = identities(&before, &sentinel_pods(&before, name));
    let (concurrency, watch) = watch_terminations(client.clone(), ns.to_owned(), name.to_owned());
    let writer = Writer::start_following(
        client.clone(),
        ns.to_owned(),
        name.to_owned(),
        prefix.to_owned(),
        None,
        shape.follow(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while writer.acked().await < 300 {
        anyhow::ensure!(Instant::now() < deadline, "the writer made no progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let (spec, sentinel_tier_rolls) = match change {
        Change::CpuRequest(cpu_millis) => {
            let resources = serde_json::json!({"requests": {"cpu": format!("{cpu_millis}m")}});
            let mut spec = serde_json::json!({"resources": resources});
            if shape.sentinel {
                spec["sentinel"] = serde_json::json!({"resources": resources});
            }
            (spec, shape.sentinel)
        }
        Change::EnableMetrics => (serde_json::json!({"metrics": {"enabled": true}}), false),
        Change::Image(image) => (serde_json::json!({ "image": image }), shape.sentinel),
    };
    let started = Instant::now();
    valkeys
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await?;
    let expected: Vec<String> = data_before
        .keys()
        .chain(sentinel_before.keys().filter(|_| sentinel_tier_rolls))
        .cloned()
        .collect();
    // The reference's contract: while a roll is in flight `Ready` keeps its pre-roll value (True,
    // the cluster was settled); every poll of the status below is a sample of it.
    let ready_during_roll: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let replaced = eventually(
        Duration::from_secs(900),
        "every pod replaced and the cluster settled",
        || async {
            let pods = Pods::list(client, ns).await?;
            for pod in &expected {
                let now = pods.by_name.get(pod).and_then(|p| p.metadata.uid.clone());
                let old = data_before
                    .get(pod)
                    .or_else(|| sentinel_before.get(pod))
                    .map(|(uid, _)| uid.clone());
                anyhow::ensure!(now.is_some() && now != old, "{pod} not replaced yet");
            }
            let valkey = valkeys.get(name).await?;
            let rolling = valkey
                .status
                .as_ref()
                .is_some_and(|s| s.rolling_update.is_some());
            if rolling
                && let Some((status, reason, _)) = condition(&valkey, "Ready")
                && status != "True"
                && let Ok(mut samples) = ready_during_roll.lock()
            {
                // The phase and message say which pass wrote it (a roll step or not).
                let (phase, message) = valkey
                    .status
                    .as_ref()
                    .map(|s| (s.phase.as_ref().map(|p| p.to_string()), s.message.clone()))
                    .unwrap_or_default();
                samples.push(format!("{status}/{reason} ({phase:?}: {message:?})"));
            }
            anyhow::ensure!(
                is_settled(&valkey, shape.replicas),
                "status {:?}",
                valkey.status.as_ref().map(|s| (&s.phase, &s.message))
            );
            Ok(pods)
        },
    )
    .await;
    let total = started.elapsed();
    if let Err(error) = &replaced {
        let log = writer.stop().await;
        watch.abort();
        anyhow::bail!("{error:#}; writer acked {}", log.acked.len());
    }
    let not_ready = ready_during_roll
        .lock()
        .map(|samples| samples.clone())
        .unwrap_or_default();
    anyhow::ensure!(
        not_ready.is_empty(),
        "Ready left its pre-roll True while the roll was in flight: {not_ready:?}"
    );
    settled(client, ns, name, shape).await?;
    // A little more writing on the settled cluster, then the check.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = writer.stop().await;
    watch.abort();
    let concurrency = concurrency.lock().map(|c| c.clone()).unwrap_or_default();
    let pods = Pods::list(client, ns).await?;
    let masters_after = masters(&pods, name).await;
    let master = master_pod(&pods, name, shape).await?;
    let ip = pods.ip(&master).unwrap_or_default();
    let missing = missing_keys(&ip, &log.acked).await?;
    if !missing.is_empty() {
        for line in log.describe_lost(&missing) {
            eprintln!("lost writes of {ns}/{name}: {line}");
        }
    }
    let lost = missing.len();
    let data_after = identities(&pods, &data_pods(&pods, name));
    let sentinel_after = identities(&pods, &sentinel_pods(&pods, name));
    Ok((
        RollResult {
            total,
            log,
            lost,
            concurrency,
            masters_after,
        },
        data_after,
        sentinel_after,
    ))
}

/// Warning Events about the `Valkey` itself, except its configuration warnings (no auth, metrics
/// on: they describe the spec, not the roll; ADR 0015).
async fn valkey_warnings(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let advisory = |reason: Option<&str>| {
        vko_status::advisory::ADVISORY_REASONS
            .iter()
            .any(|known| reason == Some(known.as_str()))
    };
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| e.involved_object.kind.as_deref() == Some("Valkey"))
        .filter(|e| !advisory(e.reason.as_deref()))
        .map(|e| {
            format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            )
        })
        .collect())
}

/// Why a master fenced where no test expects it: what the data pods' fencers saw, from the
/// rolled pods' kept logs and the live pods' (printed; the test fails on the Events next).
async fn explain_fences(ns: &str, name: &str) {
    let needles = ["FENCED", "do not prove", "promoted", "demoted", "drain"];
    print_log_lines(ns, &format!("{name}-"), "sidecar", &needles).await;
}

/// Prints the lines holding any of `needles` of `container`'s logs in the pods `<prefix><n>`:
/// the deleted ones' (kept by the testbed) and the live ones' (`kubectl logs`).
async fn print_log_lines(ns: &str, prefix: &str, container: &str, needles: &[&str]) {
    let mut lines = vko_e2e::fence_support::deleted_pod_log_lines(ns, prefix, container, needles);
    for ordinal in 0..5 {
        let pod = format!("{prefix}{ordinal}");
        let Ok(log) = kubectl(&["logs", "-n", ns, &pod, "-c", container]).await else {
            continue;
        };
        lines.extend(
            log.lines()
                .filter(|line| needles.iter().any(|n| line.contains(n)))
                .map(|line| format!("{pod} (live): {line}")),
        );
    }
    for line in lines {
        eprintln!("{line}");
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// One roll of `shape` in its own namespace, with every assertion of the issue.
async fn roll_case(prefix: &str, shape: Shape) -> anyhow::Result<()> {
    let testbed = Testbed::from_env().await?;
    let client = testbed.client();
    install_crd(&client).await?;
    let _operator = operator().await?;
    let namespace = TestNamespace::create(&client, prefix).await?;
    let ns = namespace.name().to_owned();
    let name = "roll";
    apply_yaml(&client, &ns, &shape.yaml(name)).await?;
    settled(&client, &ns, name, shape).await?;

    let (result, data_after, sentinel_after) =
        roll_once(&client, &ns, name, shape, Change::CpuRequest(17), prefix).await?;
    let warnings = valkey_warnings(&client, &ns).await?;
    let gaps: Vec<u128> = result.log.switchover_gaps().into_iter().map(ms).collect();
    println!(
        "MEASURED {prefix}: roll_ms={} acked={} lost={} errors={} switchover_gaps_ms={gaps:?} longest_gap_ms={} max_terminating data={} sentinel={} masters_after={:?}",
        ms(result.total),
        result.log.acked.len(),
        result.lost,
        result.log.error_count,
        ms(result.log.longest_gap()),
        result.concurrency.data,
        result.concurrency.sentinel,
        result.masters_after,
    );
    anyhow::ensure!(result.lost == 0, "{} acknowledged writes lost", result.lost);
    anyhow::ensure!(
        result.masters_after.len() == 1,
        "masters after the roll: {:?}",
        result.masters_after
    );
    if !warnings.is_empty() {
        explain_fences(&ns, name).await;
    }
    anyhow::ensure!(warnings.is_empty(), "Warning Events: {warnings:#?}");
    anyhow::ensure!(
        result.concurrency.data <= 1 && result.concurrency.sentinel <= 1,
        "two pods of a tier terminating at once: {:?}",
        result.concurrency
    );
    // The completion the reference names: `RollingUpdateComplete` once the data tier is done,
    // and with Sentinel `SentinelUpdateComplete` as `SentinelUpdatePending` goes False/Completed.
    let completions = operator_support::events_about(&client, &ns, name, "Normal").await;
    let completed = |reason: &str| {
        completions
            .iter()
            .any(|e| e.reason.as_deref() == Some(reason))
    };
    anyhow::ensure!(
        completed("RollingUpdateComplete"),
        "no RollingUpdateComplete Event"
    );
    if shape.sentinel {
        let last_data = data_after.values().map(|(_, t)| *t).max().unwrap_or(0);
        let first_sentinel = sentinel_after.values().map(|(_, t)| *t).min().unwrap_or(0);
        anyhow::ensure!(
            first_sentinel >= last_data,
            "a Sentinel pod was replaced before the last data pod ({first_sentinel} < {last_data})"
        );
        anyhow::ensure!(
            completed("SentinelUpdateComplete"),
            "no SentinelUpdateComplete Event"
        );
        let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
        let pending = condition(&valkeys.get(name).await?, "SentinelUpdatePending");
        anyhow::ensure!(
            pending
                .as_ref()
                .is_some_and(|(status, reason, _)| status == "False" && reason == "Completed"),
            "SentinelUpdatePending after the roll: {pending:?}"
        );
    }
    cleanup_namespace(&client, namespace).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_data_three_sentinels_roll_without_losing_a_write() {
    roll_case(
        "roll-ha",
        Shape {
            replicas: 3,
            sentinel: true,
            persistence: false,
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_without_sentinel_roll_without_losing_a_write() {
    roll_case(
        "roll-r3",
        Shape {
            replicas: 3,
            sentinel: false,
            persistence: false,
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_without_sentinel_roll_without_losing_a_write() {
    roll_case(
        "roll-r2",
        Shape {
            replicas: 2,
            sentinel: false,
            persistence: false,
        },
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_data_three_sentinels_roll_without_losing_a_write() {
    roll_case(
        "roll-s1",
        Shape {
            replicas: 1,
            sentinel: true,
            persistence: true,
        },
    )
    .await
    .unwrap();
}

/// Metrics turned on for a running 3 + 3 cluster (issue 16, item 7): the exporter arrives through
/// the lossless roll of the data tier (the Sentinel tier keeps its pods), under the writer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabling_metrics_on_a_running_ha_cluster_rolls_without_losing_a_write() {
    let test = OperatorTest::start("roll-metrics").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let name = "metrics";
    let shape = Shape {
        replicas: 3,
        sentinel: true,
        persistence: false,
    };
    apply_yaml(&client, &ns, &shape.yaml(name)).await.unwrap();
    settled(&client, &ns, name, shape).await.unwrap();
    let sentinels_before = {
        let pods = Pods::list(&client, &ns).await.unwrap();
        identities(&pods, &sentinel_pods(&pods, name))
    };

    let (result, data_after, sentinels_after) =
        roll_once(&client, &ns, name, shape, Change::EnableMetrics, "metrics")
            .await
            .unwrap();
    let warnings = valkey_warnings(&client, &ns).await.unwrap();
    let gaps: Vec<u128> = result.log.switchover_gaps().into_iter().map(ms).collect();
    println!(
        "MEASURED roll-metrics: roll_ms={} acked={} lost={} switchover_gaps_ms={gaps:?} longest_gap_ms={} max_terminating data={} masters_after={:?}",
        ms(result.total),
        result.log.acked.len(),
        result.lost,
        ms(result.log.longest_gap()),
        result.concurrency.data,
        result.masters_after,
    );
    assert_eq!(result.lost, 0, "acknowledged writes lost");
    assert_eq!(result.masters_after.len(), 1, "{:?}", result.masters_after);
    if !warnings.is_empty() {
        explain_fences(&ns, name).await;
    }
    assert!(warnings.is_empty(), "Warning Events: {warnings:#?}");
    assert!(result.concurrency.data <= 1, "{:?}", result.concurrency);
    assert_eq!(
        sentinels_after, sentinels_before,
        "the Sentinel tier keeps its pods"
    );
    let pods = Pods::list(&client, &ns).await.unwrap();
    for pod in data_after.keys() {
        let exporter_ready = pods.by_name.get(pod).is_some_and(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.name == "exporter" && c.ready)
        });
        assert!(exporter_ready, "{pod} runs a ready exporter container");
    }
    test.cleanup().await.unwrap();
}

/// `valkey_version` of every data pod and every Sentinel of `name`.
async fn versions_running(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let pods = Pods::list(client, ns).await?;
    let mut versions = BTreeMap::new();
    for (pod, port) in data_pods(&pods, name)
        .into_iter()
        .map(|pod| (pod, VALKEY_PORT))
        .chain(
            sentinel_pods(&pods, name)
                .into_iter()
                .map(|pod| (pod, 26379)),
        )
    {
        let ip = pods.ip(&pod).unwrap_or_default();
        let Reply::Bulk(Some(server)) = call(&ip, port, &["INFO", "server"]).await? else {
            anyhow::bail!("{pod}: INFO server gave no text");
        };
        let version = info_field(&server, "valkey_version")
            .unwrap_or("?")
            .to_owned();
        versions.insert(pod, version);
    }
    Ok(versions)
}

/// Issue 16 item 5: a 3 + 3 cluster without persistence rolled through three Valkey releases
/// under the writer, 8.0 → 8.1 → 9.1 and back down to 8.1 (a 9.x master serves an 8.x replica's
/// full sync), each roll lossless with one master and every pod on the new release; meanwhile a
/// standalone with persistence on 9.1 asked for 8.1 keeps 9.1 (no 8.x loads the RDB 9 saves:
/// `ReconcileBlocked/DowngradeUnsupported`, a Warning Event, its pod untouched) until the image
/// is set back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_roll_8_0_to_8_1_to_9_1_and_down_to_8_1_and_a_persistent_9_keeps_its_image() {
    let test = OperatorTest::start("roll-up").await.unwrap();
    let kept = OperatorTest::start("roll-keep").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let name = "up";
    let shape = Shape {
        replicas: 3,
        sentinel: true,
        persistence: false,
    };
    apply_yaml(&client, &ns, &shape.yaml(name)).await.unwrap();
    apply_yaml(
        &client,
        kept.ns(),
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: kept}\nspec: {replicas: 1, image: valkey/valkey:9.1, persistence: {enabled: true}}\n",
    )
    .await
    .unwrap();
    settled(&client, &ns, name, shape).await.unwrap();
    let versions = versions_running(&client, &ns, name).await.unwrap();
    assert!(versions.values().all(|v| v == "8.0.1"), "{versions:?}");

    for (step, (image, release)) in [
        ("valkey/valkey:8.1", "8.1.1"),
        ("valkey/valkey:9.1", "9.1.2"),
        ("valkey/valkey:8.1", "8.1.1"),
    ]
    .into_iter()
    .enumerate()
    {
        let (result, _, _) = roll_once(
            &client,
            &ns,
            name,
            shape,
            Change::Image(image),
            &format!("up{step}"),
        )
        .await
        .unwrap();
        let gaps: Vec<u128> = result.log.switchover_gaps().into_iter().map(ms).collect();
        println!(
            "MEASURED roll-release {image} ({release}): roll_ms={} acked={} lost={} switchover_gaps_ms={gaps:?} longest_gap_ms={} max_terminating data={} sentinel={} masters_after={:?}",
            ms(result.total),
            result.log.acked.len(),
            result.lost,
            ms(result.log.longest_gap()),
            result.concurrency.data,
            result.concurrency.sentinel,
            result.masters_after,
        );
        assert_eq!(result.lost, 0, "{image}: acknowledged writes lost");
        assert_eq!(result.masters_after.len(), 1, "{:?}", result.masters_after);
        assert!(result.concurrency.data <= 1, "{:?}", result.concurrency);
        assert!(result.concurrency.sentinel <= 1, "{:?}", result.concurrency);
        let versions = versions_running(&client, &ns, name).await.unwrap();
        assert!(
            versions.len() == 6 && versions.values().all(|v| v == release),
            "after the roll to {image}: {versions:?}"
        );
    }
    let warnings = valkey_warnings(&client, &ns).await.unwrap();
    if !warnings.is_empty() {
        explain_fences(&ns, name).await;
    }
    assert!(warnings.is_empty(), "Warning Events: {warnings:#?}");

    // The persistent standalone: 9.1 → 8.1 is refused, its pod keeps running 9.1.2.
    let kept_ns = kept.ns().to_owned();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &kept_ns);
    let kept_ok = wait_for_valkey(
        &valkeys,
        "kept",
        "OK",
        Duration::from_secs(120),
        operator_support::ok_with(1),
    )
    .await;
    if let Err(error) = kept_ok {
        // Once seen in a full suite: the 9.1 standalone still 0/1 ready minutes after its pod
        // started. Its containers' logs say why.
        ha_support::dump_container_logs(&client, &kept_ns, 60).await;
        panic!("the persistent 9.1 standalone never reached OK: {error:#}");
    }
    let pods = Pods::list(&client, &kept_ns).await.unwrap();
    let uid = pods
        .by_name
        .get("kept-0")
        .and_then(|p| p.metadata.uid.clone());
    valkeys
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"image": "valkey/valkey:8.1"}})),
        )
        .await
        .unwrap();
    let refused = wait_for_valkey(
        &valkeys,
        "kept",
        "ReconcileBlocked=True/DowngradeUnsupported",
        Duration::from_secs(60),
        |v| {
            condition(v, "ReconcileBlocked").is_some_and(|(status, reason, _)| {
                status == "True" && reason == "DowngradeUnsupported"
            })
        },
    )
    .await
    .unwrap();
    let (_, _, message) = condition(&refused, "ReconcileBlocked").unwrap_or_default();
    println!("kept: ReconcileBlocked: {message}");
    assert!(
        message.contains("valkey/valkey:8.1") && message.contains("valkey/valkey:9.1"),
        "{message}"
    );
    let warned = operator_support::events_about(&client, &kept_ns, "kept", "Warning")
        .await
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("DowngradeUnsupported"));
    assert!(warned, "a DowngradeUnsupported Warning Event");
    // Given time to roll, nothing is: the pod, its image and its release stay.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let pods = Pods::list(&client, &kept_ns).await.unwrap();
    let pod = pods.by_name.get("kept-0");
    assert_eq!(
        pod.and_then(|p| p.metadata.uid.clone()),
        uid,
        "kept-0 replaced"
    );
    let image = pod
        .and_then(|p| p.spec.as_ref())
        .and_then(|s| s.containers.iter().find(|c| c.name == "valkey"))
        .and_then(|c| c.image.clone());
    assert_eq!(image.as_deref(), Some("valkey/valkey:9.1"));
    let ip = pods.ip("kept-0").unwrap_or_default();
    let server = info(&ip, "server").await.unwrap();
    assert_eq!(info_field(&server, "valkey_version"), Some("9.1.2"));
    // Set back: the block clears.
    valkeys
        .patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"image": "valkey/valkey:9.1"}})),
        )
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        "kept",
        "ReconcileBlocked cleared and OK",
        Duration::from_secs(60),
        |v| {
            operator_support::ok_with(1)(v)
                && condition(v, "ReconcileBlocked").is_none_or(|(status, _, _)| status == "False")
        },
    )
    .await
    .unwrap();
    kept.cleanup().await.unwrap();
    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_with_persistence_rolls_without_losing_a_write() {
    roll_case(
        "roll-one",
        Shape {
            replicas: 1,
            sentinel: false,
            persistence: true,
        },
    )
    .await
    .unwrap();
}

/// An operator process of this test's own (rendering another sidecar image than the shared
/// one's): the same binary, arguments and identity. SIGKILLed when dropped.
struct OwnOperator {
    child: std::process::Child,
    port: u16,
    /// Removed on drop unless a test failed.
    log_path: std::path::PathBuf,
}

impl OwnOperator {
    /// Renders `image` as the sidecar's (the chart's image value).
    fn start_with_image(image: &str) -> anyhow::Result<OwnOperator> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let kubeconfig =
            vko_testbed::controlplane::operator_kubeconfig(&vko_testbed::paths::Paths::from_env());
        let log_path = std::env::temp_dir().join(format!(
            "vko-operator-roll-kill-{}-{port}.log",
            std::process::id()
        ));
        let child = spawn_operator(
            &kubeconfig,
            port,
            &log_path,
            &["--operator-image", image],
            &[],
        )?;
        eprintln!("own operator pid {} log {}", child.id(), log_path.display());
        Ok(OwnOperator {
            child,
            port,
            log_path,
        })
    }

    /// Waits until this operator leads (an earlier operator may hold the lease until it expires,
    /// another process's for minutes on a shared testbed; the roll goes on under whichever
    /// operator leads).
    async fn leading(&self) -> anyhow::Result<()> {
        let port = self.port;
        eventually(
            Duration::from_secs(900),
            "the operator leads (/readyz)",
            || async move {
                anyhow::ensure!(http_status(port, "/readyz").await? == 200, "not ready");
                Ok(())
            },
        )
        .await
    }
}

impl Drop for OwnOperator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

/// The reference's single-pod exception: a sidecar-image-only change (a new operator image) on a
/// one-pod cluster is not rolled — SidecarUpdatePending=True names the pod and the pod keeps
/// running; once something else restarts the pod it runs the new image and the condition clears.
///
/// Exclusive (`cargo xtask test` runs it alone): its own operator must lead the shared Lease, so
/// the shared one must be stopped (no other test using it), and while it leads it would render
/// every other test's Valkey with the `next` sidecar image, a roll of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_sidecar_only_change_on_a_single_pod_is_deferred_with_sidecar_update_pending() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let namespace = TestNamespace::create(&client, "roll-sidecar")
        .await
        .unwrap();
    let ns = namespace.name().to_owned();
    let name = "solo";
    {
        // The shared operator installs the chart's RBAC and brings the pod up, then stops.
        let _shared = operator().await.unwrap();
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{replicas: 1, image: valkey/valkey:8.0}}\n"
            ),
        )
        .await
        .unwrap();
        let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
        wait_for_valkey(&valkeys, name, "OK", Duration::from_secs(180), |v| {
            is_settled(v, 1)
        })
        .await
        .unwrap();
    }
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod_name = format!("{name}-0");
    let uid_before = pods_api.get(&pod_name).await.unwrap().metadata.uid;

    // An operator with another image: the StatefulSet's template changes only in the sidecar image.
    let next = OwnOperator::start_with_image("vko.local/vko:next").unwrap();
    next.leading().await.unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let pending = |v: &Valkey| {
        v.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "SidecarUpdatePending"))
            .cloned()
    };
    let valkey = wait_for_valkey(
        &valkeys,
        name,
        "SidecarUpdatePending=True",
        Duration::from_secs(120),
        |v| pending(v).is_some_and(|c| c.status == "True"),
    )
    .await
    .unwrap();
    let condition = pending(&valkey).unwrap();
    eprintln!("deferred: {} / {}", condition.reason, condition.message);
    assert!(
        condition.message.contains(&pod_name),
        "{}",
        condition.message
    );
    // The pod is left alone (give the operator several passes to prove it).
    tokio::time::sleep(Duration::from_secs(15)).await;
    let pod = pods_api.get(&pod_name).await.unwrap();
    assert_eq!(pod.metadata.uid, uid_before, "the only pod was restarted");
    assert!(
        pod.metadata.deletion_timestamp.is_none(),
        "the only pod is being deleted"
    );

    // Something else restarts it: it comes back with the new sidecar and the condition clears.
    pods_api
        .delete(&pod_name, &Default::default())
        .await
        .unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        name,
        "SidecarUpdatePending=False after the pod was restarted",
        Duration::from_secs(180),
        |v| is_settled(v, 1) && pending(v).is_some_and(|c| c.status == "False"),
    )
    .await
    .unwrap();
    eprintln!("cleared: {}", pending(&valkey).unwrap().reason);
    let pod = pods_api.get(&pod_name).await.unwrap();
    let images: Vec<String> = pod
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert!(
        images.iter().any(|i| i == "vko.local/vko:next"),
        "{images:?}"
    );
    drop(next);
    cleanup_namespace(&client, namespace).await.unwrap();
}

/// A replacement that can never become ready (unmapped image): the roll holds with a condition
/// naming the pod and never touches the master; fixing the spec lets it finish by itself.
/// A merge patch of `spec` on the Valkey `name`.
async fn patch_spec(
    valkeys: &Api<Valkey>,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({ "spec": spec });
    valkeys
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(())
}

/// Starts a roll that cannot finish (an image no node has) and waits until the roll reports the
/// replacement it is waiting for by name (`RollingUpdatePaused`, after the spec's `syncTimeout`).
async fn hold_a_roll(valkeys: &Api<Valkey>, name: &str) -> anyhow::Result<Valkey> {
    patch_spec(
        valkeys,
        name,
        serde_json::json!({"image": "unmapped.invalid/valkey:8.0.1"}),
    )
    .await?;
    wait_for_valkey(
        valkeys,
        name,
        "RollingUpdatePaused naming the stuck pod",
        Duration::from_secs(300),
        |v| {
            condition(v, "RollingUpdatePaused").is_some_and(|(status, _, message)| {
                status == "True" && message.contains(&format!("{name}-"))
            })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_that_never_gets_ready_holds_the_roll_until_the_spec_is_fixed() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let _operator = operator().await.unwrap();
    let shape = Shape {
        replicas: 3,
        sentinel: false,
        persistence: false,
    };
    let namespace = TestNamespace::create(&client, "roll-stuck").await.unwrap();
    let ns = namespace.name().to_owned();
    let name = "roll";
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0, rollingUpdate: {{syncTimeout: 20s}}}}\n"
        ),
    )
    .await
    .unwrap();
    settled(&client, &ns, name, shape).await.unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    let master = master_pod(&pods, name, shape).await.unwrap();
    let master_uid = pods.by_name[&master].metadata.uid.clone().unwrap();
    let writer = Writer::start_following(
        client.clone(),
        ns.clone(),
        name.to_owned(),
        "stuck".into(),
        None,
        shape.follow(),
    );
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    // The roll deletes one replica; its replacement cannot start; the roll reports it by name.
    let paused = hold_a_roll(&valkeys, name).await.unwrap();
    let (_, reason, message) = operator_support::condition(&paused, "RollingUpdatePaused").unwrap();
    println!("MEASURED roll-stuck: RollingUpdatePaused {reason}: {message}");
    // Held: for a while nothing else is deleted and the master stays the same pod, master.
    for _ in 0..20 {
        let pods = Pods::list(&client, &ns).await.unwrap();
        assert_eq!(
            pods.by_name
                .get(&master)
                .and_then(|p| p.metadata.uid.clone()),
            Some(master_uid.clone()),
            "the master pod was replaced while the roll was held"
        );
        assert_eq!(masters(&pods, name).await, vec![master.clone()]);
        let not_ready = pods.by_name.values().filter(|p| !pod_is_ready(p)).count();
        assert!(not_ready <= 1, "{not_ready} pods not ready while held");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The fix: the image back; the roll replaces every pod and finishes by itself.
    let fixed = serde_json::json!({"image": "valkey/valkey:8.0", "resources": {"requests": {"cpu": "23m"}}});
    patch_spec(&valkeys, name, fixed).await.unwrap();
    let finished = Instant::now();
    settled(&client, &ns, name, shape).await.unwrap();
    eventually(
        Duration::from_secs(300),
        "every pod on the fixed template",
        || async {
            let pods = Pods::list(&client, &ns).await?;
            for pod in data_pods(&pods, name) {
                let uid = pods.by_name[&pod].metadata.uid.clone();
                anyhow::ensure!(
                    pod != master || uid != Some(master_uid.clone()),
                    "{pod} not replaced"
                );
            }
            let valkey = valkeys.get(name).await?;
            anyhow::ensure!(is_settled(&valkey, shape.replicas), "not settled");
            Ok(())
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = writer.stop().await;
    let pods = Pods::list(&client, &ns).await.unwrap();
    let master_now = master_pod(&pods, name, shape).await.unwrap();
    let lost = missing_keys(&pods.ip(&master_now).unwrap(), &log.acked)
        .await
        .unwrap()
        .len();
    println!(
        "MEASURED roll-stuck: finished {} ms after the fix, acked={} lost={lost}",
        finished.elapsed().as_millis(),
        log.acked.len()
    );
    assert_eq!(lost, 0, "acknowledged writes lost");
    assert_eq!(masters(&pods, name).await.len(), 1);
    cleanup_namespace(&client, namespace).await.unwrap();
}

/// `cargo xtask bench roll`: `VKO_BENCH_ROLLS` rolls (default 5) of 3+3 and of 3 without
/// Sentinel for each Valkey release of `VKO_BENCH_VERSIONS` (`valkey/valkey` tags, comma-separated,
/// default `8.0`), each roll printing a `BENCH` line the xtask aggregates. Two writers run through
/// every roll: one following the master itself (Sentinel's answer, or the pod answering
/// `role:master`) by pod IP, and one through `<name>-rw`'s ClusterIP as clients connect, so one
/// switchover's gap is measured both ways in the same run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by `cargo xtask bench roll`"]
async fn bench_roll() {
    let rolls: u32 = std::env::var("VKO_BENCH_ROLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let versions: Vec<String> = std::env::var("VKO_BENCH_VERSIONS")
        .unwrap_or_else(|_| "8.0".to_owned())
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let _operator = operator().await.unwrap();
    let topologies = [
        (
            "3+3",
            Shape {
                replicas: 3,
                sentinel: true,
                persistence: false,
            },
        ),
        (
            "3-no-sentinel",
            Shape {
                replicas: 3,
                sentinel: false,
                persistence: false,
            },
        ),
    ];
    for version in &versions {
        for (label, shape) in topologies {
            bench_rolls(&client, version, label, shape, rolls)
                .await
                .unwrap();
        }
    }
}

/// `rolls` rolls of one cluster of `shape` on `valkey/valkey:<version>`, a `BENCH` line each.
async fn bench_rolls(
    client: &kube::Client,
    version: &str,
    label: &str,
    shape: Shape,
    rolls: u32,
) -> anyhow::Result<()> {
    let namespace = TestNamespace::create(client, "roll-bench").await?;
    let ns = namespace.name().to_owned();
    let name = "bench";
    let image = format!("valkey/valkey:{version}");
    apply_yaml(client, &ns, &shape.yaml_with_image(name, &image)).await?;
    settled(client, &ns, name, shape).await?;
    for roll in 0..rolls {
        // Started before the roll's own writer and stopped after it: it spans the same roll.
        let through_rw = Writer::start_following(
            client.clone(),
            ns.clone(),
            name.to_owned(),
            format!("bench{roll}rw"),
            None,
            Follow::RwService,
        );
        let (result, _, _) = roll_once(
            client,
            &ns,
            name,
            shape,
            Change::CpuRequest(20 + roll),
            &format!("bench{roll}"),
        )
        .await?;
        let rw_log = through_rw.stop().await;
        let pods = Pods::list(client, &ns).await?;
        let master = master_pod(&pods, name, shape).await?;
        let ip = pods.ip(&master).unwrap_or_default();
        let rw_lost = missing_keys(&ip, &rw_log.acked).await?.len();
        let gaps = |log: &WriteLog| -> String {
            log.switchover_gaps()
                .into_iter()
                .map(|g| ms(g).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        println!(
            "BENCH version={version} topology={label} roll={roll} roll_ms={} acked={} lost={} \
             gaps_ms={} rw_acked={} rw_lost={rw_lost} rw_gaps_ms={} rw_longest_ms={}",
            ms(result.total),
            result.log.acked.len(),
            result.lost,
            gaps(&result.log),
            rw_log.acked.len(),
            gaps(&rw_log),
            ms(rw_log.longest_gap()),
        );
        assert_eq!(result.lost, 0, "acknowledged writes lost (pod-IP writer)");
        assert_eq!(rw_lost, 0, "acknowledged writes lost (-rw writer)");
    }
    cleanup_namespace(client, namespace).await
}

/// `MultipleMasters` end to end (issue 21 item 2). A 3 + 3 roll is held by a replacement that
/// cannot start; meanwhile the replica the roll has not reached is made a master with a write of
/// its own (a history the Sentinels' master does not contain). Two faults keep it one: its sidecar
/// is paused (a running sidecar fences such a master and makes it follow the Sentinels' master
/// within F, which a first run of this test showed), and it refuses Sentinel's `SLAVEOF` (an ACL).
/// The operator must not demote it (that would discard its write):
/// `MultipleMasters=True/MultipleMastersTransitional`, past 90 s `MultipleMastersPersisted` with
/// one `SplitBrainDetected` Warning naming both; throughout only the Sentinels' master is labelled
/// and behind `-rw`. Once the faults end, the condition goes `False/SingleMaster` and the fixed spec
/// rolls to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_masters_during_a_roll_are_reported_and_not_resolved_by_discarding_a_write() {
    let test = OperatorTest::start("roll-split").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let shape = Shape {
        replicas: 3,
        sentinel: true,
        persistence: false,
    };
    let name = "split";
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0, sentinel: {{enabled: true, replicas: 3}}, rollingUpdate: {{syncTimeout: 20s}}}}\n"
        ),
    )
    .await
    .unwrap();
    settled(&client, &ns, name, shape).await.unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    hold_a_roll(&valkeys, name).await.unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    let master = master_pod(&pods, name, shape).await.unwrap();
    let mut rogue = None;
    for pod in data_pods(&pods, name) {
        let running = pods.by_name[&pod].metadata.deletion_timestamp.is_none()
            && pod_is_ready(&pods.by_name[&pod]);
        let ip = pods.ip(&pod).unwrap_or_default();
        let role = info(&ip, "replication").await.unwrap_or_default();
        if pod != master && running && info_field(&role, "role") == Some("slave") {
            rogue = Some((pod, ip));
        }
    }
    let (rogue, rogue_ip) = rogue.expect("a running replica the roll has not replaced");
    let sidecar = |pod: &str| (ns.clone(), pod.to_owned(), "sidecar".to_owned());
    let (namespace, pod, container) = sidecar(&rogue);
    test.testbed
        .fault(Fault::Pause {
            namespace,
            pod,
            container,
        })
        .await
        .unwrap();
    for command in [
        &["ACL", "SETUSER", "default", "-slaveof"][..],
        &["REPLICAOF", "NO", "ONE"],
        &["SET", "written-on-the-rogue", "1"],
    ] {
        let reply = call(&rogue_ip, VALKEY_PORT, command).await.unwrap();
        assert_eq!(
            reply.text(),
            Some("OK"),
            "{command:?} on {rogue}: {reply:?}"
        );
    }
    let split_at = Instant::now();
    let multiple = |v: &Valkey, reason: &str| {
        condition(v, "MultipleMasters")
            .is_some_and(|(status, why, _)| status == "True" && why == reason)
    };
    // Sampled until the bound has passed: one labelled master and one -rw endpoint, the real one.
    let mut transitional = None;
    let persisted = loop {
        let valkey = valkeys.get(name).await.unwrap();
        if transitional.is_none() && multiple(&valkey, "MultipleMastersTransitional") {
            transitional = Some(split_at.elapsed());
        }
        if multiple(&valkey, "MultipleMastersPersisted") {
            break valkey;
        }
        assert!(
            split_at.elapsed() < Duration::from_secs(180),
            "no MultipleMastersPersisted after 180 s: {:?}",
            condition(&valkey, "MultipleMasters")
        );
        let pods = Pods::list(&client, &ns).await.unwrap();
        let labelled: Vec<&String> = pods
            .by_name
            .iter()
            .filter(|(_, pod)| pod.labels().get(ROLE_LABEL).map(String::as_str) == Some("master"))
            .map(|(pod, _)| pod)
            .collect();
        assert_eq!(labelled, [&master], "pods labelled master");
        let rw = endpoint_pods(&client, &ns, &format!("{name}-rw"))
            .await
            .unwrap();
        assert!(
            rw.is_empty() || rw == [master.clone()],
            "-rw endpoints {rw:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let transitional = transitional.expect("MultipleMastersTransitional before Persisted");
    let (_, _, message) = condition(&persisted, "MultipleMasters").unwrap();
    println!(
        "MEASURED roll-split: Transitional after {} ms, Persisted after {} ms: {message}",
        transitional.as_millis(),
        split_at.elapsed().as_millis()
    );
    assert!(
        message.contains(&master) && message.contains(&rogue),
        "{message}"
    );
    let warnings = operator_support::events_about(&client, &ns, name, "Warning").await;
    let split_brain: Vec<_> = warnings
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SplitBrainDetected"))
        .collect();
    assert_eq!(
        split_brain.len(),
        1,
        "SplitBrainDetected Events: {split_brain:#?}"
    );
    // Not demoted toward the Sentinels' master: its own write is still there.
    let kept = call(&rogue_ip, VALKEY_PORT, &["GET", "written-on-the-rogue"])
        .await
        .unwrap();
    assert_eq!(kept.text(), Some("1"), "the rogue's write");

    // The faults end: Sentinel may reconfigure the rogue again, and its sidecar runs.
    let reply = call(
        &rogue_ip,
        VALKEY_PORT,
        &["ACL", "SETUSER", "default", "+slaveof"],
    )
    .await
    .unwrap();
    assert_eq!(reply.text(), Some("OK"));
    let (namespace, pod, container) = sidecar(&rogue);
    test.testbed
        .fault(Fault::Resume {
            namespace,
            pod,
            container,
        })
        .await
        .unwrap();
    wait_for_valkey(
        &valkeys,
        name,
        "MultipleMasters False/SingleMaster",
        Duration::from_secs(120),
        |v| {
            condition(v, "MultipleMasters")
                .is_some_and(|(status, why, _)| status == "False" && why == "SingleMaster")
        },
    )
    .await
    .unwrap();
    patch_spec(
        &valkeys,
        name,
        serde_json::json!({"image": "valkey/valkey:8.0"}),
    )
    .await
    .unwrap();
    settled(&client, &ns, name, shape).await.unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    assert_eq!(masters(&pods, name).await.len(), 1);
    test.cleanup().await.unwrap();
}
