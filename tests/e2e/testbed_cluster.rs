//! The testbed itself: three Ready Nodes with hostname and zone labels, and `kubectl` works with the
//! admin kubeconfig `cargo xtask testbed up` prints.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use vko_testbed::harness::{Testbed, kubectl, wait_until};

const NODES: [(&str, &str); 3] = [
    ("node-1", "zone-a"),
    ("node-2", "zone-b"),
    ("node-3", "zone-c"),
];

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|condition| condition.type_ == "Ready" && condition.status == "True")
        })
}

#[tokio::test]
async fn three_nodes_are_ready_with_hostname_and_zone_labels() {
    let testbed = Testbed::from_env().await.unwrap();
    let nodes: Api<Node> = Api::all(testbed.client());
    let ready = wait_until("3 Ready nodes", Duration::from_secs(60), || {
        let nodes = nodes.clone();
        async move {
            let list = nodes.list(&ListParams::default()).await?;
            let ready: Vec<Node> = list.items.into_iter().filter(is_ready).collect();
            Ok((ready.len() == NODES.len()).then_some(ready))
        }
    })
    .await
    .unwrap();

    let labels: BTreeMap<String, BTreeMap<String, String>> = ready
        .iter()
        .map(|node| {
            (
                node.metadata.name.clone().unwrap_or_default(),
                node.metadata.labels.clone().unwrap_or_default(),
            )
        })
        .collect();
    for (name, zone) in NODES {
        let node_labels = labels
            .get(name)
            .unwrap_or_else(|| panic!("node {name} in {labels:?}"));
        assert_eq!(
            node_labels
                .get("kubernetes.io/hostname")
                .map(String::as_str),
            Some(name)
        );
        assert_eq!(
            node_labels
                .get("topology.kubernetes.io/zone")
                .map(String::as_str),
            Some(zone)
        );
    }
}

#[tokio::test]
async fn kubectl_lists_nodes_and_pods_with_the_admin_kubeconfig() {
    let output = kubectl(&["get", "nodes,pods", "--all-namespaces", "-o", "name"])
        .await
        .unwrap();
    for (name, _) in NODES {
        assert!(
            output.lines().any(|line| line == format!("node/{name}")),
            "{name} in:\n{output}"
        );
    }
    let version = kubectl(&["version", "-o", "json"]).await.unwrap();
    let version: serde_json::Value = serde_json::from_str(&version).unwrap();
    assert_eq!(
        version["serverVersion"]["gitVersion"], "v1.34.4",
        "{version}"
    );
}
