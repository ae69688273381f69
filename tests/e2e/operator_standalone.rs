//! Standalone acceptance: the operator (host process) brings a one-pod `Valkey` to life.
//! `kubectl get valkey` shows REPLICAS 1, READY 1, PHASE OK, MASTER `<name>-0`; only the `-rw`
//! and `-headless` Services exist; SET/GET work through the `-rw` Service's endpoint. With the
//! sidecar paused (SIGSTOP) and the master label taken off the pod, the `-rw` Service is empty and
//! the operator says so (`RWServiceEmpty=True/NoPodLabeledMaster`); the resumed sidecar puts the
//! label back and the condition clears (`MasterLabeled`).
//!
//! Needs the testbed to run the operator image `vko.local/vko:dev` from the image built of the
//! workspace's binaries (`cargo xtask testbed up` builds and unpacks it: docs/testbed.md).

use vko_e2e::ha_support::valkey_cli_reply;
use vko_e2e::operator_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, SOLO_VALKEY, condition, wait_for_valkey};
use vko_api::{Phase, Valkey};
use vko_testbed::control::Fault;
use vko_testbed::harness::{apply_yaml, kubectl, kubectl_output, wait_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_valkey_reaches_ok_and_serves_through_its_rw_service() {
    let test = OperatorTest::start("op-solo").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(&client, &ns, SOLO_VALKEY).await.unwrap();
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

    // The sidecar runs on the image's own root filesystem (ADR 0036): its binary where the image
    // puts it, as the image's user, and none of the host's commands (the image has no shell).
    let in_sidecar = |command: &'static [&'static str]| {
        let ns = ns.clone();
        async move {
            let mut args = vec!["exec", "-n", &ns, "solo-0", "-c", "sidecar", "--"];
            args.extend_from_slice(command);
            kubectl_output(&args, b"").await.unwrap()
        }
    };
    let help = in_sidecar(&["/usr/local/bin/vko-sidecar", "--help"]).await;
    assert!(help.status.success(), "{help:?}");
    let shell = in_sidecar(&["sh", "-c", "true"]).await;
    // 127: the command was not found (kubectl exits with the command's code).
    assert_eq!(
        shell.status.code(),
        Some(127),
        "a shell in the sidecar: {shell:?}"
    );

    let table = kubectl(&["get", "valkey", "solo", "-n", &ns, "--no-headers"])
        .await
        .unwrap();
    let columns: Vec<&str> = table.split_whitespace().collect();
    assert_eq!(&columns[..5], ["solo", "1", "1", "OK", "solo-0"], "{table}");
    // `-o wide` adds the priority-1 columns in the reference's order and names, Age last.
    let wide = kubectl(&["get", "valkey", "solo", "-n", &ns, "-o", "wide"])
        .await
        .unwrap();
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "REPLICAS",
            "READY",
            "PHASE",
            "MASTER",
            "IMAGE",
            "OPERATORVERSION",
            "AGE"
        ],
        "{wide}"
    );
    let row: Vec<&str> = wide
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(row.get(5).copied(), Some("valkey/valkey:8.0"), "{wide}");
    assert_eq!(
        row.get(6).copied(),
        Some(env!("CARGO_PKG_VERSION")),
        "OPERATORVERSION is the version of the operator that reconciled: {wide}"
    );
    let message = valkeys
        .get("solo")
        .await
        .unwrap()
        .status
        .and_then(|s| s.message);
    assert_eq!(message.as_deref(), Some("Cluster is healthy"));

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
        valkey_cli_reply(&address, &["SET", "greeting", "hello"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        valkey_cli_reply(&address, &["GET", "greeting"])
            .await
            .unwrap(),
        "hello"
    );

    // The -rw Service selects instanceRole=master, which only the sidecar writes.
    let pause = Fault::Pause {
        namespace: ns.clone(),
        pod: "solo-0".into(),
        container: "sidecar".into(),
    };
    test.testbed.fault(pause).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    pods.patch(
        "solo-0",
        &PatchParams::default(),
        &Patch::Merge(
            serde_json::json!({"metadata": {"labels": {"vko.gtrfc.com/instanceRole": null}}}),
        ),
    )
    .await
    .unwrap();
    let valkey = wait_for_valkey(
        &valkeys,
        "solo",
        "RWServiceEmpty=True/NoPodLabeledMaster",
        Duration::from_secs(60),
        |v| {
            condition(v, "RWServiceEmpty").is_some_and(|(status, reason, _)| {
                status == "True" && reason == "NoPodLabeledMaster"
            })
        },
    )
    .await
    .unwrap();
    eprintln!(
        "label removed, sidecar paused: {:?}",
        condition(&valkey, "RWServiceEmpty")
    );
    let resume = Fault::Resume {
        namespace: ns.clone(),
        pod: "solo-0".into(),
        container: "sidecar".into(),
    };
    test.testbed.fault(resume).await.unwrap();
    let started = std::time::Instant::now();
    wait_for_valkey(
        &valkeys,
        "solo",
        "RWServiceEmpty=False/MasterLabeled after the sidecar resumed",
        Duration::from_secs(60),
        |v| {
            condition(v, "RWServiceEmpty")
                .is_some_and(|(status, reason, _)| status == "False" && reason == "MasterLabeled")
        },
    )
    .await
    .unwrap();
    eprintln!(
        "the resumed sidecar relabelled solo-0; cleared after {:?}",
        started.elapsed()
    );
    let labels = pods.get("solo-0").await.unwrap().labels().clone();
    assert_eq!(
        labels.get("vko.gtrfc.com/instanceRole").map(String::as_str),
        Some("master")
    );

    test.cleanup().await.unwrap();
}
