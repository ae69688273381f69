//! Standalone acceptance: the operator (host process) brings a one-pod `Valkey` to life.
//! `kubectl get valkey` shows REPLICAS 1, READY 1, PHASE OK, MASTER `<name>-0`; only the `-rw`
//! and `-headless` Services exist; SET/GET work through the `-rw` Service's endpoint.
//!
//! Needs the testbed to map the operator image `vko.local/vko:dev` to the workspace's built
//! binaries (`vko-testbed serve --image vko.local/vko=<target/debug>`), with `vko-sidecar` built.

#[path = "operator_support.rs"]
mod operator_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use operator_support::{install_crd, operator, wait_for_valkey};
use vko_api::{Phase, Valkey};
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, kubectl, valkey_cli, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_valkey_reaches_ok_and_serves_through_its_rw_service() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let _operator = operator().await.unwrap();
    let namespace = TestNamespace::create(&client, "op-solo").await.unwrap();
    let ns = namespace.name().to_owned();

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: solo}\nspec: {replicas: 1, image: valkey/valkey:8.0}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    wait_for_valkey(
        &valkeys,
        "solo",
        "phase OK with 1 ready replica and master solo-0",
        Duration::from_secs(180),
        |v| {
            v.status.as_ref().is_some_and(|s| {
                s.phase == Some(Phase::Ok)
                    && s.ready_replicas == Some(1)
                    && s.master_pod.as_deref() == Some("solo-0")
            })
        },
    )
    .await
    .unwrap();

    let table = kubectl(&["get", "valkey", "solo", "-n", &ns, "--no-headers"])
        .await
        .unwrap();
    let columns: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(&columns[..5], ["solo", "1", "1", "OK", "solo-0"], "{table}");

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let mut names: Vec<String> = services
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|s| s.name_any())
        .collect();
    names.sort();
    assert_eq!(names, ["solo-headless", "solo-rw"]);

    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    let address = wait_until(
        "a ready endpoint of solo-rw",
        Duration::from_secs(60),
        || {
            let slices = slices.clone();
            async move {
                let list = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=solo-rw"))
                    .await?;
                Ok(list
                    .items
                    .iter()
                    .flat_map(|slice| slice.endpoints.iter())
                    .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
                    .flat_map(|e| e.addresses.first().cloned())
                    .next())
            }
        },
    )
    .await
    .unwrap();
    assert_eq!(
        valkey_cli(&address, &["SET", "greeting", "hello"])
            .await
            .unwrap()
            .trim(),
        "OK"
    );
    assert_eq!(
        valkey_cli(&address, &["GET", "greeting"])
            .await
            .unwrap()
            .trim(),
        "hello"
    );

    namespace.cleanup().await.unwrap();
}
