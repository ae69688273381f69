//! `kubectl logs` and `kubectl exec` reach the process kubelet's API through the real API server:
//! logs of the running container and (`--previous`) of the one before a crash, exec with output,
//! stdin and the command's exit code.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use vko_testbed::control::Fault;
use vko_testbed::harness::{
    TestNamespace, Testbed, apply_yaml, kubectl, kubectl_output, wait_until,
};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: vk}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: valkey
    image: valkey/valkey:8.0
    args: ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
"#;

/// The container's restartCount once the pod is Running with its container ready.
async fn ready_restart_count(pods: &Api<Pod>, name: &str) -> vko_testbed::Result<Option<i32>> {
    let pod = pods.get(name).await?;
    let status = pod.status.unwrap_or_default();
    let container = status
        .container_statuses
        .unwrap_or_default()
        .into_iter()
        .next();
    Ok(container
        .filter(|container| container.ready && status.phase.as_deref() == Some("Running"))
        .map(|container| container.restart_count))
}

/// Waits until `vk` runs with its container ready after `restarts` restarts.
async fn wait_running_with_restarts(
    pods: &Api<Pod>,
    what: &str,
    restarts: i32,
) -> vko_testbed::Result<()> {
    wait_until(what, Duration::from_secs(60), || async move {
        Ok(ready_restart_count(pods, "vk")
            .await?
            .filter(|count| *count == restarts)
            .map(|_| ()))
    })
    .await
}

/// The `run_id` of `vk`'s server (`INFO server` through `kubectl exec`): a new one after a restart.
async fn run_id(ns: &str) -> anyhow::Result<String> {
    let info = kubectl(&["exec", "-n", ns, "vk", "--", "valkey-cli", "info", "server"]).await?;
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .ok_or_else(|| anyhow::anyhow!("no run_id in {info}"))
}

#[tokio::test]
async fn kubectl_logs_and_exec_work_through_the_kubelet_api() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "testbed-kubectl")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, POD).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    wait_running_with_restarts(&pods, "vk to run", 0)
        .await
        .unwrap();

    // The server's own log, through containerLogs.
    let logs = wait_until(
        "vk's log to say it accepts connections",
        Duration::from_secs(30),
        || {
            let ns = ns.clone();
            async move {
                let logs = kubectl(&["logs", "-n", &ns, "vk", "-c", "valkey"]).await?;
                Ok(logs.contains("Ready to accept connections").then_some(logs))
            }
        },
    )
    .await
    .unwrap();
    assert!(logs.contains("Server initialized"), "{logs}");
    let tail = kubectl(&["logs", "-n", &ns, "vk", "-c", "valkey", "--tail=1"])
        .await
        .unwrap();
    assert_eq!(tail.lines().count(), 1, "{tail}");

    // exec: output, stdin, exit code.
    let pong = kubectl(&[
        "exec",
        "-n",
        &ns,
        "vk",
        "-c",
        "valkey",
        "--",
        "valkey-cli",
        "ping",
    ])
    .await
    .unwrap();
    assert_eq!(pong.trim(), "PONG");
    let echoed = kubectl_output(
        &["exec", "-i", "-n", &ns, "vk", "--", "sh", "-c", "cat"],
        b"first line\nsecond line\n",
    )
    .await
    .unwrap();
    assert!(echoed.status.success(), "{echoed:?}");
    assert_eq!(
        String::from_utf8_lossy(&echoed.stdout),
        "first line\nsecond line\n"
    );
    let failed = kubectl_output(
        &[
            "exec",
            "-n",
            &ns,
            "vk",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        b"",
    )
    .await
    .unwrap();
    assert_eq!(failed.status.code(), Some(3), "{failed:?}");
    assert_eq!(String::from_utf8_lossy(&failed.stdout), "out\n");
    assert!(
        String::from_utf8_lossy(&failed.stderr).contains("err"),
        "{failed:?}"
    );

    // No previous container yet; after a crash the previous log is the first attempt's.
    let none = kubectl_output(&["logs", "-n", &ns, "vk", "--previous"], b"")
        .await
        .unwrap();
    assert!(!none.status.success(), "{none:?}");
    let first_run_id = run_id(&ns).await.unwrap();
    testbed
        .fault(Fault::Crash {
            namespace: ns.clone(),
            pod: "vk".into(),
            container: "valkey".into(),
        })
        .await
        .unwrap();
    wait_running_with_restarts(&pods, "vk to run again", 1)
        .await
        .unwrap();
    let previous = kubectl(&["logs", "-n", &ns, "vk", "-c", "valkey", "--previous"])
        .await
        .unwrap();
    assert!(
        previous.starts_with(&logs),
        "the previous log is the first attempt's:\n{logs}\n---\n{previous}"
    );
    assert!(
        previous.contains("Ready to accept connections"),
        "{previous}"
    );
    let second_run_id = run_id(&ns).await.unwrap();
    assert_ne!(first_run_id, second_run_id, "the server was restarted");

    namespace.cleanup().await.unwrap();
}
