//! A fail-closed admission webhook that refuses a cluster's pods (the reference's 2026-08-19
//! incident: a drain took the webhook's only pod, `failurePolicy: Fail` refused every pod create
//! for ~90 s, and the StatefulSet controller's own backoff kept the pods away for minutes after).
//! While the gate refuses them the `Valkey` says so (`ReconcileBlocked` / `AdmissionWebhookDenied`
//! naming the webhook); once it is removed the operator's nudge (ADR 0020) brings every pod back
//! within 60 s.

use vko_e2e::operator_support;

use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use operator_support::{OperatorTest, condition, ok_with, wait_for_valkey};
use vko_api::Valkey;

/// A webhook on pod creation in `namespace` whose Service does not exist: every call fails, and
/// `failurePolicy: Fail` turns that into a refusal.
fn refusing_webhook(namespace: &str) -> anyhow::Result<ValidatingWebhookConfiguration> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("vko-e2e-refuse-pods-{namespace}")},
        "webhooks": [{
            "name": "refuse-pods.vko-e2e.example.com",
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
            "clientConfig": {"service": {"namespace": namespace, "name": "no-such-webhook", "path": "/validate"}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }],
    }))?)
}

fn blocked_by_admission(valkey: &Valkey) -> bool {
    condition(valkey, "ReconcileBlocked").is_some_and(|(status, reason, message)| {
        status == "True"
            && reason == "AdmissionWebhookDenied"
            && message.contains("refuse-pods.vko-e2e.example.com")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_refused_by_a_webhook_are_reported_and_back_within_a_minute_of_its_removal() {
    let test = OperatorTest::start("op-gate").await.unwrap();
    let client = test.client();
    let ns = test.ns().to_owned();

    let (valkeys, valkey) = test
        .apply_until_ok(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: gate}\nspec: {replicas: 3, image: valkey/valkey:8.0}\n",
            "gate",
            3,
            Duration::from_secs(180),
        )
        .await
        .unwrap();
    let master = valkey.status.unwrap().master_pod.unwrap();

    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let webhook = refusing_webhook(&ns).unwrap();
    let webhook_name = webhook.metadata.name.clone().unwrap();
    webhooks
        .create(&PostParams::default(), &webhook)
        .await
        .unwrap();
    // The webhook is cluster-scoped: whatever happens below, it is removed before any assertion.
    let outcome = async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let replicas: Vec<String> = (0..3)
            .map(|ordinal| format!("gate-{ordinal}"))
            .filter(|pod| *pod != master)
            .collect();
        let gated_at = Instant::now();
        for pod in &replicas {
            pods.delete(pod, &DeleteParams::default()).await?;
        }
        // The refusal is named while it lasts.
        let blocked = wait_for_valkey(
            &valkeys,
            "gate",
            "ReconcileBlocked / AdmissionWebhookDenied naming the webhook",
            Duration::from_secs(60),
            blocked_by_admission,
        )
        .await?;
        let reported_after = gated_at.elapsed();
        let message = condition(&blocked, "ReconcileBlocked").map(|(_, _, m)| m);
        // The gate stays shut for at least 90 s, long enough for the StatefulSet controller's
        // backoff to grow past a minute.
        while gated_at.elapsed() < Duration::from_secs(90) {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let still_blocked = blocked_by_admission(&valkeys.get("gate").await?);
        let present = pods.list(&ListParams::default()).await?.items.len();
        webhooks
            .delete(&webhook_name, &DeleteParams::default())
            .await?;
        let opened_at = Instant::now();
        wait_for_valkey(
            &valkeys,
            "gate",
            "3 ready and OK again",
            Duration::from_secs(120),
            |v| {
                ok_with(3)(v)
                    && condition(v, "ReconcileBlocked")
                        .is_some_and(|(status, _, _)| status == "False")
            },
        )
        .await?;
        anyhow::Ok((
            reported_after,
            message,
            still_blocked,
            present,
            opened_at.elapsed(),
        ))
    }
    .await;
    // Idempotent: the happy path removed it already.
    let _ = webhooks
        .delete(&webhook_name, &DeleteParams::default())
        .await;
    let (reported_after, message, still_blocked, present, recovered) = outcome.unwrap();
    eprintln!(
        "pods refused: reported after {reported_after:?} ({message:?}); {present} pods while gated; \
         every pod back and OK {recovered:?} after the webhook's removal"
    );
    assert!(
        still_blocked,
        "ReconcileBlocked cleared while the webhook still refused the pods"
    );
    assert_eq!(
        present, 1,
        "only the master pod exists while the webhook refuses pods"
    );
    assert!(
        recovered <= Duration::from_secs(60),
        "the pods came back {recovered:?} after the webhook's removal (bound: 60 s)"
    );

    test.cleanup().await.unwrap();
}
