//! Every fault the testbed injects shows its effect: a crashed container restarts in place, a
//! partitioned pod is unreachable from a peer until healed, a stopped node's pods go NotReady through
//! the node lifecycle controller with their processes gone, a paused server stops answering until
//! resumed, a node whose heartbeats paused gets its pods Ready again from its kubelet once they
//! resume, and a watch survives an API-server restart.
//!
//! The stopped-node, paused-heartbeat and API-server tests are `exclusive_` (they would disturb every other test on
//! the testbed, so `cargo xtask test` runs them alone); the tests of this file run one at a time
//! among themselves, and pin their pods to nodes so the stopped node carries only its own test's
//! pod.

use std::time::{Duration, Instant};
use vko_e2e::ha_support::{pod_is_ready, valkey_pod};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use vko_testbed::control::Fault;
use vko_testbed::harness::{
    TestNamespace, Testbed, apply_yaml, kubectl_output, pod_ip, valkey_cli, wait_until,
};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Valkey 8.0 pod on `node` (the shell pod below reaches it from another node).
fn valkey_pod_on(name: &str, node: &str) -> String {
    valkey_pod(name, "valkey/valkey:8.0", Some(node))
}

fn shell_pod(name: &str, node: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  nodeName: {node}
  terminationGracePeriodSeconds: 1
  containers:
  - name: shell
    image: vko-testbed/shell:latest
    command: ["sleep", "100000"]
"#
    )
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|status| status.container_statuses.as_ref())
        .and_then(|statuses| statuses.first())
        .map_or(0, |status| status.restart_count)
}

/// Waits until the pod is Ready (or not, per `want`) and returns it.
async fn wait_ready(
    pods: &Api<Pod>,
    name: &str,
    want: bool,
    timeout: Duration,
) -> vko_testbed::Result<Pod> {
    let what = format!("{name} to be {}", if want { "Ready" } else { "NotReady" });
    wait_until(&what, timeout, || {
        let pods = pods.clone();
        let name = name.to_string();
        async move {
            let pod = pods.get(&name).await?;
            Ok((pod_is_ready(&pod) == want).then_some(pod))
        }
    })
    .await
}

/// `PING` from the host, bounded by `timeout`: `Some(answer)` or `None` when there is none in time.
async fn ping(ip: &str, timeout: Duration) -> Option<String> {
    match tokio::time::timeout(timeout, valkey_cli(ip, &["ping"])).await {
        Ok(Ok(answer)) => Some(answer.trim().to_string()),
        _ => None,
    }
}

#[tokio::test]
async fn a_crashed_container_restarts_in_place_with_restart_count_plus_one() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-crash").await.unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, &valkey_pod_on("vk", "node-1"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let before = wait_ready(&pods, "vk", true, Duration::from_secs(60))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "vk").await.unwrap();
    assert_eq!(restart_count(&before), 0);

    testbed
        .fault(Fault::Crash {
            namespace: ns.clone(),
            pod: "vk".into(),
            container: "valkey".into(),
        })
        .await
        .unwrap();
    let after = wait_until("vk to restart", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("vk").await?;
            Ok((restart_count(&pod) == 1 && pod_is_ready(&pod)).then_some(pod))
        }
    })
    .await
    .unwrap();
    assert_eq!(after.metadata.uid, before.metadata.uid, "the same pod");
    assert_eq!(pod_ip(&client, &ns, "vk").await.unwrap(), ip, "in place");
    let terminated = after
        .status
        .and_then(|status| status.container_statuses)
        .and_then(|statuses| statuses.into_iter().next())
        .and_then(|status| status.last_state)
        .and_then(|state| state.terminated)
        .unwrap();
    assert_eq!(terminated.exit_code, 137, "SIGKILLed");
    assert_eq!(
        ping(&ip, Duration::from_secs(5)).await.as_deref(),
        Some("PONG")
    );
    namespace.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_partitioned_pod_is_unreachable_from_its_peer_until_healed() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-partition")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, &valkey_pod_on("vk", "node-1"))
        .await
        .unwrap();
    apply_yaml(&client, &ns, &shell_pod("peer", "node-2"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_ready(&pods, "vk", true, Duration::from_secs(60))
        .await
        .unwrap();
    wait_ready(&pods, "peer", true, Duration::from_secs(60))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "vk").await.unwrap();
    let from_peer = |ns: String, ip: String| async move {
        let output = kubectl_output(
            &[
                "exec",
                "-n",
                &ns,
                "peer",
                "--",
                "timeout",
                "3",
                "valkey-cli",
                "-h",
                &ip,
                "ping",
            ],
            b"",
        )
        .await
        .unwrap();
        output
            .status
            .success()
            .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
    };
    assert_eq!(
        from_peer(ns.clone(), ip.clone()).await.as_deref(),
        Some("PONG")
    );

    let target = |fault: fn(String, String) -> Fault| fault(ns.clone(), "vk".into());
    testbed
        .fault(target(|namespace, pod| Fault::Partition { namespace, pod }))
        .await
        .unwrap();
    assert_eq!(from_peer(ns.clone(), ip.clone()).await, None, "partitioned");
    assert_eq!(
        ping(&ip, Duration::from_secs(3)).await,
        None,
        "from the host too"
    );

    testbed
        .fault(target(|namespace, pod| Fault::Heal { namespace, pod }))
        .await
        .unwrap();
    let healed = wait_until(
        "vk to answer the peer again",
        Duration::from_secs(30),
        || {
            let (ns, ip) = (ns.clone(), ip.clone());
            async move { Ok(from_peer(ns, ip).await) }
        },
    )
    .await
    .unwrap();
    assert_eq!(healed, "PONG");
    namespace.cleanup().await.unwrap();
}

#[tokio::test]
async fn a_paused_server_stops_answering_and_answers_again_when_resumed() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-pause").await.unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, &valkey_pod_on("vk", "node-2"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_ready(&pods, "vk", true, Duration::from_secs(60))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "vk").await.unwrap();
    let target = |fault: fn(String, String, String) -> Fault| {
        fault(ns.clone(), "vk".into(), "valkey".into())
    };

    testbed
        .fault(target(|namespace, pod, container| Fault::Pause {
            namespace,
            pod,
            container,
        }))
        .await
        .unwrap();
    assert_eq!(ping(&ip, Duration::from_secs(3)).await, None, "paused");
    testbed
        .fault(target(|namespace, pod, container| Fault::Resume {
            namespace,
            pod,
            container,
        }))
        .await
        .unwrap();
    assert_eq!(
        ping(&ip, Duration::from_secs(5)).await.as_deref(),
        Some("PONG")
    );
    // Not restarted: the same process answered.
    let pod = pods.get("vk").await.unwrap();
    assert_eq!(restart_count(&pod), 0);
    namespace.cleanup().await.unwrap();
}

/// Injects its fault when dropped, also when the test fails halfway (starts a node again, resumes its
/// heartbeats).
struct FaultOnDrop(Fault);

impl Drop for FaultOnDrop {
    fn drop(&mut self) {
        let socket =
            vko_testbed::control::socket_path(vko_testbed::paths::Paths::from_env().state_dir());
        let fault = self.0.clone();
        // Its own thread: the test's runtime may not block here.
        let _ =
            std::thread::spawn(move || vko_testbed::control::send_blocking(&socket, &fault)).join();
    }
}

fn pod_condition(pod: &Pod, type_: &str) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    let condition = conditions.iter().find(|c| c.type_ == type_)?;
    Some(condition.status.clone())
}

/// The node's Ready condition status once it is `want` (`True`, or anything else for `!want`).
async fn wait_node_ready(
    nodes: &Api<Node>,
    name: &str,
    want: bool,
    timeout: Duration,
) -> vko_testbed::Result<String> {
    let what = format!("{name} to be {}", if want { "Ready" } else { "NotReady" });
    wait_until(&what, timeout, || {
        let nodes = nodes.clone();
        let name = name.to_string();
        async move {
            let node = nodes.get(&name).await?;
            let status = node
                .status
                .and_then(|status| status.conditions)
                .and_then(|conditions| conditions.into_iter().find(|c| c.type_ == "Ready"))
                .map(|condition| condition.status)
                .unwrap_or_default();
            Ok(((status == "True") == want).then_some(status))
        }
    })
    .await
}

/// Exclusive (`cargo xtask test` runs it alone): stopping node-3 SIGKILLs every container on it,
/// other tests' pods included.
#[tokio::test]
async fn exclusive_a_stopped_nodes_pods_go_not_ready_and_their_processes_are_gone() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-node").await.unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, &valkey_pod_on("vk", "node-3"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = wait_ready(&pods, "vk", true, Duration::from_secs(60))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "vk").await.unwrap();
    let uid = pod.metadata.uid.unwrap();
    let netns = format!("vkotb-{}", &uid.replace('-', "")[..12]);
    let processes = || {
        let output = std::process::Command::new("ip")
            .args(["netns", "pids", &netns])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    assert!(!processes().is_empty(), "valkey runs in {netns}");

    let node = FaultOnDrop(Fault::StartNode {
        node: "node-3".into(),
    });
    testbed
        .fault(Fault::StopNode {
            node: "node-3".into(),
        })
        .await
        .unwrap();
    // The fault returns once SIGKILL is sent; the kernel tears each process down (and the
    // runtime reaps it) a moment later, which a check right away can beat (seen once on
    // 2026-12-07: one pid left 1 s in).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !processes().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes(), "", "the node's processes are gone");
    assert_eq!(ping(&ip, Duration::from_secs(2)).await, None);
    // The node lifecycle controller (not the kubelet, which is "down") marks the pod NotReady.
    let not_ready = wait_ready(&pods, "vk", false, Duration::from_secs(90))
        .await
        .unwrap();
    let condition = not_ready
        .status
        .clone()
        .and_then(|status| status.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|condition| condition.type_ == "Ready")
        .unwrap();
    assert_eq!(condition.status, "False");
    assert_eq!(restart_count(&not_ready), 0, "nothing restarted meanwhile");
    assert_eq!(processes(), "", "still nothing runs on the stopped node");
    // Its kubelet API is down too.
    let logs = kubectl_output(&["logs", "-n", &ns, "vk"], b"")
        .await
        .unwrap();
    assert!(
        !logs.status.success(),
        "no logs from a stopped node: {logs:?}"
    );

    // Started again, the node runs its pod again.
    drop(node);
    wait_ready(&pods, "vk", true, Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(
        ping(&ip, Duration::from_secs(5)).await.as_deref(),
        Some("PONG")
    );
    namespace.cleanup().await.unwrap();
}

/// What a real kubelet's status manager does: the node lifecycle controller sets `Ready=False` on the
/// pods of a node that missed its heartbeats; when the node is back, its kubelet writes the status
/// it computed (Ready, the container never stopped) over the controller's. Exclusive (`cargo xtask
/// test` runs it alone): the node controller marks every pod on the node NotReady, other tests'
/// pods included.
#[tokio::test]
async fn exclusive_a_nodes_pods_are_ready_again_once_its_paused_heartbeats_resume() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-heartbeat")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, &valkey_pod_on("vk", "node-3"))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let nodes: Api<Node> = Api::all(client.clone());
    wait_ready(&pods, "vk", true, Duration::from_secs(60))
        .await
        .unwrap();
    let ip = pod_ip(&client, &ns, "vk").await.unwrap();

    let paused = Instant::now();
    let _resume = FaultOnDrop(Fault::ResumeHeartbeats {
        node: "node-3".into(),
    });
    testbed
        .fault(Fault::PauseHeartbeats {
            node: "node-3".into(),
        })
        .await
        .unwrap();
    // The node lifecycle controller (--node-monitor-grace-period=20s here) gives up on the node and
    // marks its pod not ready; the kubelet, cut off, does not answer back.
    let node_status = wait_node_ready(&nodes, "node-3", false, Duration::from_secs(60))
        .await
        .unwrap();
    let not_ready = wait_ready(&pods, "vk", false, Duration::from_secs(30))
        .await
        .unwrap();
    println!(
        "node-3 {node_status} and vk Ready={:?} {:?} after the pause",
        pod_condition(&not_ready, "Ready"),
        paused.elapsed()
    );
    assert_eq!(pod_condition(&not_ready, "Ready").as_deref(), Some("False"));
    // Its containers never stopped: the pod answers all along.
    assert_eq!(
        ping(&ip, Duration::from_secs(5)).await.as_deref(),
        Some("PONG")
    );

    let resumed = Instant::now();
    testbed
        .fault(Fault::ResumeHeartbeats {
            node: "node-3".into(),
        })
        .await
        .unwrap();
    wait_node_ready(&nodes, "node-3", true, Duration::from_secs(30))
        .await
        .unwrap();
    let node_ready_after = resumed.elapsed();
    let ready_again = wait_ready(&pods, "vk", true, Duration::from_secs(30))
        .await
        .unwrap();
    println!(
        "node-3 Ready {node_ready_after:?} and vk Ready {:?} after the resume",
        resumed.elapsed()
    );
    assert_eq!(
        pod_condition(&ready_again, "ContainersReady").as_deref(),
        Some("True")
    );
    assert_eq!(restart_count(&ready_again), 0, "nothing restarted");
    namespace.cleanup().await.unwrap();
}

/// Exclusive (`cargo xtask test` runs it alone): while the API server restarts, every other test's
/// requests fail.
#[tokio::test]
async fn exclusive_a_watch_survives_an_api_server_restart() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "fault-apiserver")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut names = watcher(config_maps.clone(), watcher::Config::default())
        .default_backoff()
        .applied_objects()
        .filter_map(|object| async move { object.ok().and_then(|cm| cm.metadata.name) })
        .boxed();
    let create = |name: &str| {
        let mut object = ConfigMap::default();
        object.metadata.name = Some(name.into());
        object
    };
    config_maps
        .create(&PostParams::default(), &create("before"))
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if names.next().await.as_deref() == Some("before") {
                return;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the watch sees objects before the restart");

    testbed.fault(Fault::RestartApiserver).await.unwrap();
    wait_until(
        "the API server to accept a create after its restart",
        Duration::from_secs(60),
        || {
            let config_maps = config_maps.clone();
            let object = create("after");
            async move {
                config_maps.create(&PostParams::default(), &object).await?;
                Ok(Some(()))
            }
        },
    )
    .await
    .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if names.next().await.as_deref() == Some("after") {
                return;
            }
        }
    })
    .await;
    assert!(
        seen.is_ok(),
        "the same watch sees an object created after the restart"
    );
    namespace.cleanup().await.unwrap();
}
