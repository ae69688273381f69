//! The Cluster Observer on the testbed: a 3 data + 3 Sentinel Valkey with `spec.observer.enabled`
//! reaches OK and its observer pod (the workspace's `vko-observer`, through the testbed's
//! `vko.local/vko` image mapping) becomes Ready; `/readyz` answers 200 with every check passing and
//! `/metrics` carries the observer's series, and the operator sets `status.observerReady`. A replica
//! cut off the network turns `/readyz` into 503 naming `replicaSyncFailure`, the pod NotReady and
//! `status.observerReady` false; healed, all recover. A second Valkey with
//! `unreadyWhen.sentinelUnreachable: false` stays ready while a paused Sentinel fails that check
//! (reported in the JSON and logged), and the check recovers when the Sentinel resumes.
//!
//! The observer has no API access: it finds every pod by its DNS name, as in a real cluster.

use vko_e2e::ha_support::pod_is_ready;
use vko_e2e::operator_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use operator_support::{OBSERVER_CHECKS, OperatorTest, ok_with, wait_for_valkey};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vko_api::Valkey;
use vko_testbed::control::Fault;
use vko_testbed::harness::{apply_yaml, kubectl, wait_until};

const OBSERVER_PORT: u16 = 8084;

/// The two tests each run a 3+3 (or 2+3) cluster; one at a time keeps a 2-core machine honest.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn other(e: impl std::fmt::Display) -> vko_testbed::Error {
    vko_testbed::Error::Other(e.to_string())
}

/// `GET path` on `ip:8084`: status code and body.
async fn http_get(ip: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let connect = tokio::net::TcpStream::connect((ip, OBSERVER_PORT));
    let mut stream = tokio::time::timeout(Duration::from_secs(3), connect).await??;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {ip}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response)).await??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP header end in {response:?}"))?;
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status in {head:?}"))?;
    Ok((code, body.to_owned()))
}

/// `/readyz` as (code, JSON body).
async fn readyz(ip: &str) -> anyhow::Result<(u16, Value)> {
    let (code, body) = http_get(ip, "/readyz").await?;
    let json =
        serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("/readyz body {body:?}: {e}"))?;
    Ok((code, json))
}

fn check<'a>(body: &'a Value, name: &str) -> (&'a str, &'a str) {
    let check = &body["checks"][name];
    (
        check["status"].as_str().unwrap_or("?"),
        check["detail"].as_str().unwrap_or(""),
    )
}

/// `vko_observer_check_failures_total{check="<check>"}` in a `/metrics` text.
fn counter(metrics: &str, check: &str) -> u64 {
    let prefix = format!("vko_observer_check_failures_total{{check=\"{check}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The observer pod of Valkey `name` (a Deployment pod `<name>-observer-<hash>-<id>`) with
/// readiness `ready`; returns (pod name, IP).
async fn observer_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    ready: bool,
    timeout: Duration,
) -> anyhow::Result<(String, String)> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let prefix = format!("{name}-observer-");
    let found = wait_until(
        &format!("the observer pod of {name} with Ready={ready}"),
        timeout,
        || {
            let pods = pods.clone();
            let prefix = prefix.clone();
            async move {
                let list = pods.list(&ListParams::default()).await?;
                Ok(list.items.into_iter().find_map(|pod| {
                    let ip = pod.status.as_ref()?.pod_ip.clone()?;
                    (pod.name_any().starts_with(&prefix)
                        && pod.metadata.deletion_timestamp.is_none()
                        && pod_is_ready(&pod) == ready)
                        .then(|| (pod.name_any(), ip))
                }))
            }
        },
    )
    .await?;
    Ok(found)
}

/// Waits until `/readyz` satisfies `want`; returns that (code, body). An answer that does not
/// satisfy it counts as an error of `wait_until`, so the timeout message shows the last one.
async fn readyz_until(
    ip: &str,
    what: &str,
    timeout: Duration,
    want: impl Fn(u16, &Value) -> bool,
) -> anyhow::Result<(u16, Value)> {
    let want = &want;
    let found = wait_until(what, timeout, || async move {
        let (code, body) = readyz(ip).await.map_err(|e| other(format!("{e:#}")))?;
        if want(code, &body) {
            Ok(Some((code, body)))
        } else {
            Err(other(format!("/readyz answered {code} {body}")))
        }
    })
    .await?;
    Ok(found)
}

fn all_pass(code: u16, body: &Value) -> bool {
    code == 200
        && body["ready"] == true
        && OBSERVER_CHECKS.iter().all(|c| check(body, c).0 == "pass")
}

async fn wait_ok(client: &kube::Client, ns: &str, name: &str, replicas: i32) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        name,
        &format!("{name} to reach OK"),
        Duration::from_secs(300),
        ok_with(replicas),
    )
    .await?;
    Ok(())
}

async fn wait_observer_ready_status(
    client: &kube::Client,
    ns: &str,
    name: &str,
    ready: bool,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    wait_for_valkey(
        &valkeys,
        name,
        &format!("{name} status.observerReady = {ready}"),
        Duration::from_secs(60),
        |v| v.status.as_ref().and_then(|s| s.observer_ready) == Some(ready),
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_is_ready_on_a_healthy_cluster_and_reports_a_partitioned_replica() {
    let _one = ONE_AT_A_TIME.lock().await;
    let test = OperatorTest::start("op-observer").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let name = "obs";

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: obs}\n\
         spec: {replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3},\n\
         \x20 observer: {enabled: true, logLevel: debug}}\n",
    )
    .await
    .unwrap();
    wait_ok(&client, &ns, name, 3).await.unwrap();
    let (pod, ip) = observer_pod(&client, &ns, name, true, Duration::from_secs(240))
        .await
        .unwrap();
    eprintln!("observer pod {pod} at {ip} is Ready");
    wait_observer_ready_status(&client, &ns, name, true)
        .await
        .unwrap();

    // Every check passes and the body says so, check by check.
    let (_, body) = readyz_until(
        &ip,
        "every check passing",
        Duration::from_secs(60),
        all_pass,
    )
    .await
    .unwrap();
    eprintln!("/readyz: {body:#}");
    for name in OBSERVER_CHECKS {
        assert_eq!(body["checks"][name]["unreadyOnFailure"], true, "{name}");
    }
    let master = body["master"].as_str().unwrap().to_owned();
    let master_pod = master.split('.').next().unwrap().to_owned();
    assert!(
        master.ends_with(&format!(".obs-headless.{ns}.svc.cluster.local:6379")),
        "{master}"
    );
    assert!(
        check(&body, "masterUnreachable")
            .1
            .contains("named by 3 of 3 answering Sentinels"),
        "{body:#}"
    );
    assert!(body["round"].as_u64().unwrap() >= 1);
    let (code, healthz) = http_get(&ip, "/healthz").await.unwrap();
    assert_eq!((code, healthz.as_str()), (200, "ok"));

    let (code, metrics) = http_get(&ip, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    assert!(metrics.contains("vko_observer_ready 1"), "{metrics}");
    for name in OBSERVER_CHECKS {
        assert!(
            metrics.contains(&format!("vko_observer_check_ok{{check=\"{name}\"}} 1")),
            "{name} in {metrics}"
        );
    }
    for series in [
        "vko_observer_rounds_total",
        "vko_observer_round_duration_seconds_count",
        "vko_observer_build_info",
    ] {
        assert!(metrics.contains(series), "{series} in {metrics}");
    }

    // (Rounds before the data pods were resolvable failed and were counted.)
    let sync_failures_before = counter(&metrics, "replicaSyncFailure");

    // A replica cut off the network: unreachable for the observer and for the Sentinels.
    let replica = ["obs-0", "obs-1", "obs-2"]
        .into_iter()
        .find(|p| *p != master_pod)
        .unwrap()
        .to_owned();
    eprintln!("master {master_pod}; partitioning replica {replica}");
    test.testbed
        .fault(Fault::Partition {
            namespace: ns.clone(),
            pod: replica.clone(),
        })
        .await
        .unwrap();
    let (_, body) = readyz_until(
        &ip,
        "503 naming the partitioned replica",
        Duration::from_secs(60),
        |code, body| {
            code == 503
                && body["ready"] == false
                && check(body, "replicaSyncFailure").0 == "fail"
                && check(body, "replicaSyncFailure").1.contains(&replica)
        },
    )
    .await
    .unwrap();
    eprintln!("/readyz with {replica} partitioned: {body:#}");
    // The master's own checks are unaffected.
    for name in ["masterUnreachable", "writeTestFailure", "readTestFailure"] {
        assert_eq!(check(&body, name).0, "pass", "{name}: {body:#}");
    }
    let (_, metrics) = http_get(&ip, "/metrics").await.unwrap();
    assert!(
        metrics.contains("vko_observer_check_ok{check=\"replicaSyncFailure\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("vko_observer_ready 0"), "{metrics}");
    // The readiness probe (every 10 s, 3 failures) takes the pod out.
    observer_pod(&client, &ns, name, false, Duration::from_secs(90))
        .await
        .unwrap();
    // The operator reports it on the Valkey.
    wait_observer_ready_status(&client, &ns, name, false)
        .await
        .unwrap();

    test.testbed
        .fault(Fault::Heal {
            namespace: ns.clone(),
            pod: replica.clone(),
        })
        .await
        .unwrap();
    readyz_until(
        &ip,
        "every check passing after the heal",
        Duration::from_secs(120),
        all_pass,
    )
    .await
    .unwrap();
    observer_pod(&client, &ns, name, true, Duration::from_secs(90))
        .await
        .unwrap();
    wait_observer_ready_status(&client, &ns, name, true)
        .await
        .unwrap();
    let (_, metrics) = http_get(&ip, "/metrics").await.unwrap();
    assert!(
        counter(&metrics, "replicaSyncFailure") > sync_failures_before,
        "the failures were counted: {metrics}"
    );

    test.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_turned_off_in_unready_when_is_reported_but_keeps_the_observer_ready() {
    let _one = ONE_AT_A_TIME.lock().await;
    let test = OperatorTest::start("op-observer-off").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let name = "obs2";

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: obs2}\n\
         spec: {replicas: 2, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3},\n\
         \x20 observer: {enabled: true, unreadyWhen: {sentinelUnreachable: false}}}\n",
    )
    .await
    .unwrap();
    wait_ok(&client, &ns, name, 2).await.unwrap();
    let (pod, ip) = observer_pod(&client, &ns, name, true, Duration::from_secs(240))
        .await
        .unwrap();
    let (_, body) = readyz_until(
        &ip,
        "every check passing",
        Duration::from_secs(60),
        all_pass,
    )
    .await
    .unwrap();
    assert_eq!(
        body["checks"]["sentinelUnreachable"]["unreadyOnFailure"],
        false
    );
    assert_eq!(
        body["checks"]["masterUnreachable"]["unreadyOnFailure"],
        true
    );

    let sentinel = "obs2-sentinel-0".to_owned();
    let pause = |pause: bool| {
        let (namespace, pod, container) = (ns.clone(), sentinel.clone(), "sentinel".to_owned());
        if pause {
            Fault::Pause {
                namespace,
                pod,
                container,
            }
        } else {
            Fault::Resume {
                namespace,
                pod,
                container,
            }
        }
    };
    test.testbed.fault(pause(true)).await.unwrap();
    let (code, body) = readyz_until(
        &ip,
        "sentinelUnreachable failing",
        Duration::from_secs(60),
        |_, body| check(body, "sentinelUnreachable").0 == "fail",
    )
    .await
    .unwrap();
    eprintln!("/readyz with {sentinel} paused: {code} {body:#}");
    assert_eq!(code, 200, "{body:#}");
    assert_eq!(body["ready"], true);
    assert!(check(&body, "sentinelUnreachable").1.contains(&sentinel));
    // Still ready over the following rounds while the Sentinel stays paused.
    let round = body["round"].as_u64().unwrap();
    let (code, body) = readyz_until(
        &ip,
        "two more rounds",
        Duration::from_secs(30),
        |_, body| body["round"].as_u64().unwrap_or(0) >= round + 2,
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{body:#}");
    assert_eq!(check(&body, "sentinelUnreachable").0, "fail", "{body:#}");
    let (_, metrics) = http_get(&ip, "/metrics").await.unwrap();
    assert!(metrics.contains("vko_observer_ready 1"), "{metrics}");
    assert!(
        metrics.contains("vko_observer_check_ok{check=\"sentinelUnreachable\"} 0"),
        "{metrics}"
    );
    // The failure is logged although it does not count for readiness.
    let logs = kubectl(&["logs", "--namespace", &ns, &pod]).await.unwrap();
    let logged = logs.lines().find(|line| {
        line.contains("check failed")
            && line.contains("\"check\":\"sentinelUnreachable\"")
            && line.contains("\"unready_on_failure\":false")
    });
    assert!(
        logged.is_some(),
        "no failure line in the observer's log:\n{logs}"
    );
    // The pod stays Ready (readiness probe every 10 s, 3 failures needed).
    tokio::time::sleep(Duration::from_secs(35)).await;
    observer_pod(&client, &ns, name, true, Duration::from_secs(5))
        .await
        .unwrap();

    test.testbed.fault(pause(false)).await.unwrap();
    readyz_until(
        &ip,
        "every check passing after the resume",
        Duration::from_secs(120),
        all_pass,
    )
    .await
    .unwrap();

    test.cleanup().await.unwrap();
}
