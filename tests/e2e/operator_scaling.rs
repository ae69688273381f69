//! Scaling a running cluster (ADR 0024) under a writer that counts every OK reply as acknowledged
//! (plain `SET`, no `WAIT`), one cluster per topology doing the whole sequence:
//!
//! - without Sentinel, with AOF persistence: a standalone 1 → 3 (it becomes a replicated cluster)
//!   → 5 → the master moved to ordinal ≥ 2 (its pod deleted: the sidecar's handover) → 2 (the
//!   scale-down removes the master's ordinal: the operator switches over first, then shrinks)
//!   → 3 (pod 2 comes back on its kept PVC and starts as a replica);
//! - 3 data + 3 Sentinels: data 3 → 5 → master moved → 2 → 3, then Sentinels 3 → 5 → 3;
//! - 3 data without Sentinel: Sentinel turned on (3), then off again.
//!
//! After every step: PHASE OK with every pod ready, no pod above the count, the master with every
//! replica online, and with Sentinel every Sentinel knowing exactly the others and listing exactly
//! the live replicas (what a scale-down removed is reset away) and `SentinelPeersStale` not True.
//! The writer connects through `<name>-rw`'s ClusterIP as clients do. Throughout: at most one data
//! pod labelled master and at most one ready `-rw` endpoint in every state the watches of the pods
//! and of `-rw`'s EndpointSlices delivered (`fence_support::Sampler`). At the end:
//! every acknowledged write on the master and on every replica, and the PVCs of removed pods kept.
//! Each step prints its duration, the longest write gap inside it and how many pods it replaced.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{fence_support, ha_support, operator_support};

use std::time::{Duration, Instant};

use fence_support::{Sampler, Samples};
use ha_support::{
    Follow, Pods, SENTINEL_PORT, WriteLog, Writer, call, delete_and_wait_gone, eventually, info,
    info_field, missing_keys, role_master_pod, sentinel_master_host,
};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, condition};
use vko_api::{Phase, Valkey};

const NAME: &str = "scale";

/// Data pods `scale-<n>` (not the Sentinels).
fn data_pods(pods: &Pods) -> Vec<String> {
    pods.names_with_prefix(&format!("{NAME}-"))
        .into_iter()
        .filter(|p| {
            p.strip_prefix(&format!("{NAME}-"))
                .is_some_and(|rest| rest.chars().all(|c| c.is_ascii_digit()))
        })
        .collect()
}

fn sentinel_pods(pods: &Pods) -> Vec<String> {
    pods.names_with_prefix(&format!("{NAME}-sentinel-"))
}

fn ordinal(pod: &str) -> u32 {
    pod.rsplit('-')
        .next()
        .and_then(|o| o.parse().ok())
        .unwrap_or(u32::MAX)
}

/// The pod the writer writes to now.
async fn master_pod(pods: &Pods, sentinel: bool) -> anyhow::Result<String> {
    if sentinel {
        Ok(sentinel_master_host(pods, NAME)
            .await?
            .split('.')
            .next()
            .unwrap_or_default()
            .to_owned())
    } else {
        role_master_pod(pods, NAME).await
    }
}

/// One cluster under test.
struct Cluster<'a> {
    test: &'a OperatorTest,
    valkeys: Api<Valkey>,
    sentinel: bool,
    /// Each step's name and its (start, end), to read the writer's gaps per step.
    steps: std::sync::Mutex<Vec<(String, Instant, Instant)>>,
}

impl Cluster<'_> {
    /// Everything a finished step promises, for `replicas` data pods and `sentinels`.
    async fn settled(&self, replicas: u32, sentinels: u32) -> anyhow::Result<()> {
        let client = self.test.client();
        let ns = self.test.ns();
        eventually(
            Duration::from_secs(420),
            &format!("settled at {replicas} data pods and {sentinels} Sentinels"),
            || async {
                let valkey = self.valkeys.get(NAME).await?;
                let status = valkey.status.as_ref();
                // The operator has seen the current spec (not a status from before the patch).
                anyhow::ensure!(
                    status.and_then(|s| s.observed_generation) >= valkey.metadata.generation,
                    "status of generation {:?}, spec {:?}",
                    status.and_then(|s| s.observed_generation),
                    valkey.metadata.generation
                );
                anyhow::ensure!(
                    status.is_some_and(|s| s.phase == Some(Phase::Ok)
                        && s.ready_replicas == Some(i32::try_from(replicas).unwrap_or(0))
                        && s.rolling_update.is_none()),
                    "status {:?}",
                    status.map(|s| (&s.phase, &s.ready_replicas, &s.message))
                );
                if let Some((state, reason, message)) = condition(&valkey, "SentinelPeersStale") {
                    anyhow::ensure!(state != "True", "SentinelPeersStale {reason}: {message}");
                }
                let pods = Pods::list(&client, ns).await?;
                let data = data_pods(&pods);
                anyhow::ensure!(
                    data.len() == replicas as usize,
                    "data pods {data:?} (want {replicas})"
                );
                let master = master_pod(&pods, self.sentinel).await?;
                let ip = pods.ip(&master).unwrap_or_default();
                let replication = info(&ip, "replication").await?;
                let want = (replicas - 1).to_string();
                anyhow::ensure!(
                    info_field(&replication, "role") == Some("master")
                        && info_field(&replication, "connected_slaves") == Some(want.as_str())
                        && !replication.contains("state=wait_bgsave")
                        && !replication.contains("state=send_bulk"),
                    "{master}: {replication}"
                );
                for pod in data.iter().filter(|p| **p != master) {
                    let ip = pods.ip(pod).unwrap_or_default();
                    let replica = info(&ip, "replication").await?;
                    anyhow::ensure!(
                        info_field(&replica, "master_link_status") == Some("up")
                            && info_field(&replica, "master_host")
                                .is_some_and(|h| h.starts_with(&format!("{master}."))),
                        "{pod} not linked to {master}: {replica}"
                    );
                }
                let sentinel_names = sentinel_pods(&pods);
                if !self.sentinel {
                    anyhow::ensure!(
                        sentinel_names.is_empty(),
                        "Sentinel pods {sentinel_names:?}"
                    );
                }
                if self.sentinel {
                    anyhow::ensure!(
                        sentinel_names.len() == sentinels as usize,
                        "Sentinel pods {sentinel_names:?}"
                    );
                    for pod in &sentinel_names {
                        let ip = pods.ip(pod).unwrap_or_default();
                        let master = call(&ip, SENTINEL_PORT, &["SENTINEL", "MASTER", NAME])
                            .await?
                            .as_map();
                        let others = master
                            .get("num-other-sentinels")
                            .cloned()
                            .unwrap_or_default();
                        let listed = master.get("num-slaves").cloned().unwrap_or_default();
                        anyhow::ensure!(
                            others == (sentinels - 1).to_string()
                                && listed == (replicas - 1).to_string(),
                            "{pod} knows {others} other Sentinels and lists {listed} replicas"
                        );
                    }
                }
                Ok(())
            },
        )
        .await
    }

    /// Patches the counts and waits until settled; returns how long it took.
    async fn scale(&self, replicas: u32, sentinels: u32) -> anyhow::Result<Duration> {
        let mut spec = serde_json::json!({"replicas": replicas});
        if self.sentinel {
            spec["sentinel"] = serde_json::json!({"replicas": sentinels});
        }
        let what = format!("{replicas} data / {sentinels} Sentinels");
        self.step(&what, spec, replicas, sentinels).await
    }

    /// Merges `spec`, waits until settled at the counts, records the step's window.
    async fn step(
        &self,
        what: &str,
        spec: serde_json::Value,
        replicas: u32,
        sentinels: u32,
    ) -> anyhow::Result<Duration> {
        let before = Pods::list(&self.test.client(), self.test.ns()).await?;
        let started = Instant::now();
        self.valkeys
            .patch(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({ "spec": spec })),
            )
            .await?;
        self.settled(replicas, sentinels).await?;
        let ended = Instant::now();
        let took = ended - started;
        let after = Pods::list(&self.test.client(), self.test.ns()).await?;
        let replaced = |names: Vec<String>| {
            names
                .iter()
                .filter(|pod| {
                    let uid =
                        |pods: &Pods| pods.by_name.get(*pod).and_then(|p| p.metadata.uid.clone());
                    uid(&after).is_some_and(|now| uid(&before).is_some_and(|old| old != now))
                })
                .count()
        };
        println!(
            "MEASURED {}: {what} in {} ms; pods replaced in place: data {} Sentinel {}",
            self.test.ns(),
            took.as_millis(),
            replaced(data_pods(&before)),
            replaced(sentinel_pods(&before)),
        );
        if let Ok(mut steps) = self.steps.lock() {
            steps.push((what.to_owned(), started, ended));
        }
        Ok(took)
    }

    /// Moves the master to an ordinal of at least `min`, so the next scale-down removes the
    /// master's ordinal: the other pods below `min` deleted, then at once the master's, so its
    /// sidecar hands over to a replica at `min` or above (with equally caught-up replicas the
    /// handover picks the lowest ordinal, so deleting the master alone ping-pongs it between
    /// the two lowest).
    async fn move_master_to_at_least(
        &self,
        min: u32,
        replicas: u32,
        sentinels: u32,
    ) -> anyhow::Result<String> {
        let client = self.test.client();
        for _ in 0..3 {
            let pods = Pods::list(&client, self.test.ns()).await?;
            let master = master_pod(&pods, self.sentinel).await?;
            if ordinal(&master) >= min {
                return Ok(master);
            }
            let below: Vec<String> = data_pods(&pods)
                .into_iter()
                .filter(|pod| *pod != master && ordinal(pod) < min)
                .collect();
            println!("deleting {below:?}, then the master pod {master}, to move the master");
            for pod in &below {
                delete_and_wait_gone(&client, self.test.ns(), pod).await?;
            }
            delete_and_wait_gone(&client, self.test.ns(), &master).await?;
            eventually(Duration::from_secs(120), "a new master", || async {
                let pods = Pods::list(&client, self.test.ns()).await?;
                let now = master_pod(&pods, self.sentinel).await?;
                anyhow::ensure!(now != master, "still {now}");
                Ok(())
            })
            .await?;
            self.settled(replicas, sentinels).await?;
        }
        anyhow::bail!("the master never moved to an ordinal >= {min}")
    }

    /// Stops the writer and the sampler, prints the figures, and checks that every acknowledged
    /// write is on every data pod and that one pod was master throughout.
    async fn writes_and_masters_checked(
        &self,
        writer: Writer,
        sampler: Sampler,
    ) -> anyhow::Result<()> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let log = writer.stop().await;
        let samples = sampler.stop().await;
        report(self.test.ns(), &log, &samples, self);
        self.every_write_everywhere(&log).await?;
        println!(
            "MEASURED {}: 0 of {} acknowledged writes lost",
            self.test.ns(),
            log.acked.len()
        );
        one_master_throughout(&samples)
    }

    /// Every acknowledged write on every data pod (the replicas given time to catch up).
    async fn every_write_everywhere(&self, log: &WriteLog) -> anyhow::Result<()> {
        let client = self.test.client();
        let pods = Pods::list(&client, self.test.ns()).await?;
        let master = master_pod(&pods, self.sentinel).await?;
        let ip = pods.ip(&master).unwrap_or_default();
        let lost = missing_keys(&ip, &log.acked).await?;
        anyhow::ensure!(
            lost.is_empty(),
            "{} of {} acknowledged writes lost on the master {master} (first {:?})",
            lost.len(),
            log.acked.len(),
            lost.first()
        );
        for pod in data_pods(&pods) {
            let ip = pods.ip(&pod).unwrap_or_default();
            eventually(
                Duration::from_secs(30),
                &format!("every acknowledged write on {pod}"),
                || async {
                    let missing = missing_keys(&ip, &log.acked).await?;
                    anyhow::ensure!(missing.is_empty(), "{} missing", missing.len());
                    Ok(())
                },
            )
            .await?;
        }
        Ok(())
    }
}

async fn pvc_names(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let mut names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// Starts the writer through `-rw` and waits for its first OKs.
async fn writing(test: &OperatorTest) -> anyhow::Result<Writer> {
    let writer = Writer::start_following(
        test.client(),
        test.ns().to_owned(),
        NAME.to_owned(),
        "scale".to_owned(),
        None,
        Follow::RwService,
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while writer.acked().await < 300 {
        anyhow::ensure!(Instant::now() < deadline, "the writer made no progress");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(writer)
}

fn report(ns: &str, log: &WriteLog, samples: &Samples, cluster: &Cluster<'_>) {
    let gaps: Vec<u128> = log
        .switchover_gaps()
        .into_iter()
        .map(|d| d.as_millis())
        .collect();
    let masters: Vec<&str> = log.masters.iter().map(|(_, pod)| pod.as_str()).collect();
    let windows = cluster.steps.lock().map(|s| s.clone()).unwrap_or_default();
    // The longest time between two OKs inside each step's window.
    let steps: Vec<String> = windows
        .iter()
        .map(|(what, start, end)| {
            let inside: Vec<&Instant> = log
                .ok_times
                .iter()
                .filter(|t| *t >= start && *t <= end)
                .collect();
            let longest = inside
                .windows(2)
                .map(|w| *w[1] - *w[0])
                .max()
                .unwrap_or_default();
            format!(
                "[{what}: {} ms, longest write gap {} ms]",
                (*end - *start).as_millis(),
                longest.as_millis()
            )
        })
        .collect();
    println!(
        "MEASURED {ns}: acked={} errors={} switchover_gaps_ms={gaps:?} longest_gap_ms={} masters_written_to={masters:?} most_labelled_masters={} ({:?}) most_rw_endpoints={} ({:?}) samples={} longest_interval_ms={} blind_ms={} watch_errors={} steps={}",
        log.acked.len(),
        log.error_count,
        log.longest_gap().as_millis(),
        samples.max_master_labels,
        samples.max_master_labels_pods,
        samples.max_rw_endpoints,
        samples.max_rw_endpoints_pods,
        samples.samples,
        samples.longest_interval.as_millis(),
        samples.longest_blind.as_millis(),
        samples.watch_errors,
        steps.join(" ")
    );
}

/// Applies the Valkey `scale` with `spec` (YAML flow) and waits for PHASE OK with `pods` ready.
async fn start_cluster<'a>(
    test: &'a OperatorTest,
    spec: &str,
    pods: i32,
    sentinel: bool,
) -> anyhow::Result<Cluster<'a>> {
    let yaml = format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {spec}\n"
    );
    let (valkeys, _) = test
        .apply_until_ok(&yaml, NAME, pods, Duration::from_secs(240))
        .await?;
    Ok(Cluster {
        test,
        valkeys,
        sentinel,
        steps: std::sync::Mutex::default(),
    })
}

/// A failed sequence shows the containers' last log lines and keeps its namespace; a passed one
/// deletes it.
async fn conclude(test: OperatorTest, result: anyhow::Result<()>) -> anyhow::Result<()> {
    if result.is_err() {
        ha_support::dump_container_logs(&test.client(), test.ns(), 40).await;
        return result;
    }
    test.cleanup().await
}

/// Watches the master labels and `-rw`'s endpoints (every state the watches deliver).
fn sampler(test: &OperatorTest) -> Sampler {
    Sampler::start(
        test.client(),
        test.ns().to_owned(),
        NAME.to_owned(),
        Duration::from_millis(200),
    )
}

/// At most one pod labelled master and one ready `-rw` endpoint in every sample, and no watch blind
/// long enough to miss a state.
fn one_master_throughout(samples: &Samples) -> anyhow::Result<()> {
    anyhow::ensure!(samples.samples > 100, "too few samples: {samples:?}");
    anyhow::ensure!(
        samples.longest_blind <= Duration::from_millis(250),
        "a watch blind for {:?}",
        samples.longest_blind
    );
    anyhow::ensure!(
        samples.max_master_labels <= 1,
        "pods labelled master at once: {:?} at {:?}",
        samples.max_master_labels_pods,
        samples.max_master_labels_at
    );
    anyhow::ensure!(
        samples.max_rw_endpoints <= 1,
        "-rw endpoints at once: {:?}",
        samples.max_rw_endpoints_pods
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sentinel_a_standalone_scales_1_3_5_2_3_without_losing_a_write() {
    let test = OperatorTest::start("scale-plain").await.unwrap();
    let result = async {
        let spec = concat!(
            "{replicas: 1, image: valkey/valkey:8.0,",
            " persistence: {enabled: true, mode: aof, size: 100Mi}}"
        );
        let cluster = start_cluster(&test, spec, 1, false).await?;
        let sampler = sampler(&test);
        let writer = writing(&test).await?;
        for replicas in [3, 5] {
            cluster.scale(replicas, 0).await?;
        }
        let moved = cluster.move_master_to_at_least(2, 5, 0).await?;
        println!("the master is {moved} before the scale-down to 2");
        cluster.scale(2, 0).await?;
        let client = test.client();
        let pvcs = pvc_names(&client, test.ns()).await?;
        anyhow::ensure!(
            pvcs.len() == 5,
            "PVCs after 5 -> 2: {pvcs:?} (the removed pods' are kept)"
        );
        cluster.scale(3, 0).await?;
        cluster.writes_and_masters_checked(writer, sampler).await?;
        // Pod 2 came back on its old PVC as a replica (it had been a replica or the master).
        let pods = Pods::list(&client, test.ns()).await?;
        let ip = pods.ip(&format!("{NAME}-2")).unwrap_or_default();
        let role = info_field(&info(&ip, "replication").await?, "role").map(str::to_owned);
        anyhow::ensure!(role.as_deref() == Some("slave"), "{NAME}-2 is {role:?}");
        anyhow::ensure!(
            pvc_names(&client, test.ns()).await? == pvcs,
            "the scale-up reused the kept PVCs"
        );
        Ok::<(), anyhow::Error>(())
    }
    .await;
    conclude(test, result).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_sentinel_data_3_5_2_3_and_sentinels_3_5_3_scale_without_losing_a_write() {
    let test = OperatorTest::start("scale-ha").await.unwrap();
    let result = async {
        let cluster = start_cluster(
            &test,
            "{replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}}",
            3,
            true,
        )
        .await?;
        cluster.settled(3, 3).await?;
        let sampler = sampler(&test);
        let writer = writing(&test).await?;
        cluster.scale(5, 3).await?;
        let moved = cluster.move_master_to_at_least(2, 5, 3).await?;
        println!("the master is {moved} before the scale-down to 2");
        cluster.scale(2, 3).await?;
        cluster.scale(3, 3).await?;
        cluster.scale(3, 5).await?;
        cluster.scale(3, 3).await?;
        cluster.writes_and_masters_checked(writer, sampler).await?;
        let events =
            operator_support::events_about(&test.client(), test.ns(), NAME, "Normal").await;
        let resets: Vec<String> = events
            .iter()
            .filter(|e| e.reason.as_deref() == Some("SentinelReset"))
            .filter_map(|e| e.note.clone())
            .collect();
        println!("SentinelReset events: {resets:#?}");
        Ok::<(), anyhow::Error>(())
    }
    .await;
    conclude(test, result).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_turned_on_for_a_running_cluster_and_off_again_loses_no_write() {
    let test = OperatorTest::start("scale-sentinel-onoff").await.unwrap();
    let result = async {
        let mut cluster =
            start_cluster(&test, "{replicas: 3, image: valkey/valkey:8.0}", 3, false).await?;
        cluster.settled(3, 0).await?;
        let sampler = sampler(&test);
        let writer = writing(&test).await?;
        cluster.sentinel = true;
        cluster
            .step(
                "Sentinel on",
                serde_json::json!({"sentinel": {"enabled": true, "replicas": 3}}),
                3,
                3,
            )
            .await?;
        cluster.sentinel = false;
        cluster
            .step(
                "Sentinel off",
                serde_json::json!({"sentinel": {"enabled": false}}),
                3,
                0,
            )
            .await?;
        cluster.writes_and_masters_checked(writer, sampler).await?;
        Ok::<(), anyhow::Error>(())
    }
    .await;
    conclude(test, result).await.unwrap();
}
