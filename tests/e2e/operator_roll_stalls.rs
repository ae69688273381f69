//! A roll whose deleted pod stays `Terminating` (a finalizer nobody removes, as a stuck volume
//! detach or a broken controller leaves it): the roll holds, names the pod with
//! `PodTerminationStalled` two minutes past its grace deadline, deletes no second pod of the tier
//! meanwhile, and resumes once the pod is gone.

use vko_e2e::operator_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, condition, ok_with, wait_for_valkey};

const FINALIZER: &str = "vko-e2e.example.com/hold";

async fn data_pods(pods: &Api<Pod>) -> anyhow::Result<Vec<Pod>> {
    let params = ListParams::default().labels("app.kubernetes.io/component=valkey");
    Ok(pods.list(&params).await?.items)
}

/// Sets (or clears) the test's finalizer on every data pod.
async fn hold_pods(pods: &Api<Pod>, hold: bool) -> anyhow::Result<()> {
    let finalizers = if hold {
        serde_json::json!([FINALIZER])
    } else {
        serde_json::Value::Null
    };
    for pod in data_pods(pods).await? {
        let Some(name) = pod.metadata.name else {
            continue;
        };
        pods.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": finalizers}})),
        )
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_stuck_terminating_holds_the_roll_with_pod_termination_stalled_until_it_is_gone() {
    let test = OperatorTest::start("op-stall").await.unwrap();
    let client = test.client();
    let ns = test.ns().to_owned();
    let (valkeys, _) = test
        .apply_until_ok(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: stall}\nspec: {replicas: 3, image: valkey/valkey:8.0}\n",
            "stall",
            3,
            Duration::from_secs(180),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let before: BTreeMap<String, String> = data_pods(&pods)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|pod| Some((pod.metadata.name?, pod.metadata.uid?)))
        .collect();

    hold_pods(&pods, true).await.unwrap();
    // Whatever happens below, the finalizers go before any assertion (else the namespace could
    // never be deleted).
    let outcome = async {
        let started = Instant::now();
        valkeys
            .patch(
                "stall",
                &PatchParams::default(),
                &Patch::Merge(
                    serde_json::json!({"spec": {"resources": {"requests": {"cpu": "17m"}}}}),
                ),
            )
            .await?;
        let mut most_terminating = 0;
        let stalled = loop {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(360),
                "no PodTerminationStalled 6 min after the roll began"
            );
            let terminating = data_pods(&pods)
                .await?
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_some())
                .count();
            most_terminating = most_terminating.max(terminating);
            let valkey = valkeys.get("stall").await?;
            if let Some((status, reason, message)) = condition(&valkey, "PodTerminationStalled")
                && status == "True"
            {
                break (reason, message, started.elapsed());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        };
        hold_pods(&pods, false).await?;
        let released = Instant::now();
        let finished = wait_for_valkey(
            &valkeys,
            "stall",
            "the roll finished and PodTerminationStalled cleared",
            Duration::from_secs(420),
            |v| {
                ok_with(3)(v)
                    && condition(v, "PodTerminationStalled")
                        .is_some_and(|(status, _, _)| status == "False")
            },
        )
        .await?;
        let cleared = condition(&finished, "PodTerminationStalled");
        anyhow::Ok((stalled, most_terminating, released.elapsed(), cleared))
    }
    .await;
    let _ = hold_pods(&pods, false).await;
    let ((reason, message, stalled_after), most_terminating, finished_after, cleared) =
        outcome.unwrap();
    let after = data_pods(&pods).await.unwrap();
    eprintln!(
        "stuck pod: PodTerminationStalled/{reason} after {stalled_after:?} ({message}); at most \
         {most_terminating} data pod terminating while held; roll done {finished_after:?} after the \
         finalizers went; then {cleared:?}"
    );
    assert!(
        message.contains("stall-"),
        "the stuck pod is named: {message}"
    );
    assert_eq!(
        most_terminating, 1,
        "exactly one data pod was deleted while the first one was stuck"
    );
    for pod in &after {
        let name = pod.metadata.name.clone().unwrap_or_default();
        assert_ne!(
            before.get(&name),
            pod.metadata.uid.as_ref(),
            "{name} was not replaced by the roll"
        );
    }

    test.cleanup().await.unwrap();
}
