//! The operator keeps reconciling promptly after the API server restarts: every watch gets a
//! stale-version error then, and with kube-runtime's default trigger backoff each of those paused
//! all watches (growing to 30 s), so a Valkey created after the restart waited minutes. Here one
//! created right after the restart must reach OK as fast as on a fresh operator.
//!
//! What is compared is the operator's own share: from the Valkey's creation to its StatefulSet, and
//! from its pod turning Ready to PHASE OK. The time in between is kube-controller-manager creating
//! the pod and the testbed starting it; after a restart the controller manager's own watches back
//! off (it was seen to take over 100 s), which says nothing about the operator. It is printed.
//!
//! Restarts the testbed's API server (the fault API); needs the `vko.local/vko` image mapping.

use vko_e2e::ha_support::pod_is_ready;
use vko_e2e::operator_support;

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use operator_support::{OperatorTest, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::control::Fault;
use vko_testbed::harness::{apply_yaml, wait_until};

fn standalone(name: &str) -> String {
    format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{replicas: 1, image: valkey/valkey:8.0}}\n"
    )
}

/// Where the time from a Valkey's creation to PHASE OK went.
struct Timeline {
    /// Creation → the operator's StatefulSet exists (the operator).
    statefulset: Duration,
    /// StatefulSet → the pod is Ready (controller manager, scheduler, kubelet, valkey-server).
    pod_ready: Duration,
    /// Pod Ready → PHASE OK (the operator).
    phase_ok: Duration,
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "StatefulSet after {:.1?}, pod Ready {:.1?} later, PHASE OK {:.1?} after that \
             (the operator's share {:.1?})",
            self.statefulset,
            self.pod_ready,
            self.phase_ok,
            self.operator_share()
        )
    }
}

impl Timeline {
    fn operator_share(&self) -> Duration {
        self.statefulset + self.phase_ok
    }
}

/// Follows the Valkey `name`, created at `created`, to PHASE OK.
async fn timeline(
    client: &kube::Client,
    ns: &str,
    name: &str,
    created: Instant,
) -> anyhow::Result<Timeline> {
    let statefulsets: kube::Api<StatefulSet> = kube::Api::namespaced(client.clone(), ns);
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
    let valkeys: kube::Api<Valkey> = kube::Api::namespaced(client.clone(), ns);
    let timeout = Duration::from_secs(180);
    let statefulset_at = wait_until("the operator's StatefulSet", timeout, || {
        let statefulsets = statefulsets.clone();
        async move { Ok(statefulsets.get_opt(name).await?.map(|_| Instant::now())) }
    })
    .await?;
    let pod = format!("{name}-0");
    let ready_at = wait_until(&format!("pod {pod} to be Ready"), timeout, || {
        let pods = pods.clone();
        let pod = pod.clone();
        async move {
            let ready = pods
                .get_opt(&pod)
                .await?
                .is_some_and(|pod| pod_is_ready(&pod));
            Ok(ready.then(Instant::now))
        }
    })
    .await?;
    wait_for_valkey(&valkeys, name, "PHASE OK", timeout, ok_with(1)).await?;
    Ok(Timeline {
        statefulset: statefulset_at.duration_since(created),
        pod_ready: ready_at.duration_since(statefulset_at),
        phase_ok: ready_at.elapsed(),
    })
}

/// Exclusive (`cargo xtask test` runs it alone): while the API server restarts, every other test's
/// requests fail, and the operator's share is compared with a fresh one's on an otherwise idle
/// operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_valkey_created_after_an_api_server_restart_is_reconciled_promptly() {
    let test = OperatorTest::start("op-apirestart").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(&client, &ns, &standalone("before"))
        .await
        .unwrap();
    let fresh = timeline(&client, &ns, "before", Instant::now())
        .await
        .unwrap();

    test.testbed.fault(Fault::RestartApiserver).await.unwrap();
    let created = wait_until(
        "the API server to accept the new Valkey",
        Duration::from_secs(60),
        || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                Ok(apply_yaml(&client, &ns, &standalone("after"))
                    .await
                    .ok()
                    .map(|_| Instant::now()))
            }
        },
    )
    .await
    .unwrap();
    let after_restart = timeline(&client, &ns, "after", created).await.unwrap();
    eprintln!("a fresh operator: {fresh}");
    eprintln!("right after an API server restart: {after_restart}");
    assert!(
        after_restart.operator_share() < fresh.operator_share() + Duration::from_secs(30),
        "after the restart the operator took {:?} of its own (fresh: {:?})",
        after_restart.operator_share(),
        fresh.operator_share()
    );

    test.cleanup().await.unwrap();
}
