//! The operator keeps reconciling promptly after the API server restarts: every watch gets a
//! stale-version error then, and with kube-runtime's default trigger backoff each of those paused
//! all watches (growing to 30 s), so a Valkey created after the restart waited minutes. Here one
//! created right after the restart must reach OK as fast as on a fresh operator.
//!
//! Restarts the testbed's API server (the fault API); needs the `vko.local/vko` image mapping.

#[path = "operator_support.rs"]
mod operator_support;

use std::time::{Duration, Instant};

use operator_support::{install_crd, operator, wait_for_valkey};
use vko_api::{Phase, Valkey};
use vko_testbed::control::Fault;
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, wait_until};

fn standalone(name: &str) -> String {
    format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {name}}}\nspec: {{replicas: 1, image: valkey/valkey:8.0}}\n"
    )
}

fn ok(v: &Valkey) -> bool {
    v.status
        .as_ref()
        .is_some_and(|s| s.phase == Some(Phase::Ok) && s.ready_replicas == Some(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valkey_created_after_an_api_server_restart_is_reconciled_promptly() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let _operator = operator().await.unwrap();
    let namespace = TestNamespace::create(&client, "op-apirestart")
        .await
        .unwrap();
    let ns = namespace.name().to_owned();
    let valkeys: kube::Api<Valkey> = kube::Api::namespaced(client.clone(), &ns);

    apply_yaml(&client, &ns, &standalone("before"))
        .await
        .unwrap();
    let started = Instant::now();
    wait_for_valkey(&valkeys, "before", "OK", Duration::from_secs(180), ok)
        .await
        .unwrap();
    let fresh = started.elapsed();

    testbed.fault(Fault::RestartApiserver).await.unwrap();
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
    wait_for_valkey(
        &valkeys,
        "after",
        "OK after the API server restart",
        Duration::from_secs(180),
        ok,
    )
    .await
    .unwrap();
    let after_restart = created.elapsed();
    eprintln!(
        "to OK: {fresh:?} on a fresh operator, {after_restart:?} right after an API server restart"
    );
    assert!(
        after_restart < fresh + Duration::from_secs(30),
        "after the restart it took {after_restart:?} (fresh: {fresh:?})"
    );

    namespace.cleanup().await.unwrap();
}
