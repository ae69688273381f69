//! Switching from the Go operator (issue 21 item 4, `docs/migrate-from-go-operator.md`): a
//! cluster of 3 data pods whose StatefulSet, Services and ConfigMap were written the way the Go
//! operator writes them — its names, labels and selector, client-side creates and updates under
//! controller-runtime's field manager `manager`, a controller ownerReference to the `Valkey` —
//! plus fields vko never renders (an init container, a ConfigMap key). vko takes it over under a
//! plain-`SET` writer: one lossless roll (each data pod replaced once), 0 acknowledged writes
//! lost, no object deleted and recreated (same UIDs), the Go operator's fields gone once vko owns
//! them (`vko_render::adopt_managed_fields`), one master at the end.
//!
//! The Go operator's own pods run its `manager sidecar` image, which the testbed does not have;
//! here its data pods run valkey-server alone (pod 0 master, the others its replicas), which is
//! what vko meets on the data plane. Without Sentinel; the 3 + 3 layout is not covered here.

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeMap;
use std::time::Duration;

use ha_support::{
    Follow, Pods, Writer, eventually, info, info_field, missing_keys, role_master_pod,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::serde::Deserialize;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use vko_api::{Phase, Valkey};
use vko_testbed::harness::apply_yaml;

use operator_support::{OperatorTest, events_about, wait_for_valkey};

const NAME: &str = "mig";
/// controller-runtime's field manager when none is set: the binary's name.
const GO_FIELD_MANAGER: &str = "manager";

/// The objects the Go operator would have written for `NAME` (3 data pods, no Sentinel, no
/// auth), with two fields vko does not render: the `init-config-selector` init container and the
/// ConfigMap key `legacy.conf`.
fn go_objects(ns: &str) -> String {
    let selector = "app.kubernetes.io/instance: mig\n      app.kubernetes.io/managed-by: vko.gtrfc.com\n      app.kubernetes.io/component: valkey";
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: mig-config
  labels: {{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: valkey, app.kubernetes.io/name: valkey, vko.gtrfc.com/cluster: mig}}
data:
  valkey.conf: |
    port 6379
    protected-mode no
    save ""
    appendonly no
  legacy.conf: |
    # written by the Go operator only
---
apiVersion: v1
kind: Service
metadata:
  name: mig-headless
  labels: {{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: valkey, app.kubernetes.io/name: valkey, vko.gtrfc.com/cluster: mig}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector:
    {selector_svc}
  ports: [{{name: valkey, port: 6379, targetPort: 6379}}]
---
apiVersion: v1
kind: Service
metadata:
  name: mig-rw
  labels: {{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: valkey, app.kubernetes.io/name: valkey, vko.gtrfc.com/cluster: mig}}
spec:
  selector:
    {selector_svc}
    vko.gtrfc.com/instanceRole: master
  ports: [{{name: valkey, port: 6379, targetPort: 6379}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: mig
  labels: {{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: valkey, app.kubernetes.io/name: valkey, vko.gtrfc.com/cluster: mig}}
spec:
  replicas: 3
  serviceName: mig-headless
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector:
    matchLabels:
      {selector}
  template:
    metadata:
      labels:
        {selector_tpl}
        app.kubernetes.io/name: valkey
        vko.gtrfc.com/cluster: mig
      annotations: {{vko.gtrfc.com/config-hash: "1234abcd", vko.gtrfc.com/pod-spec-hash: "5678ef01"}}
    spec:
      terminationGracePeriodSeconds: 10
      initContainers:
      - name: init-config-selector
        image: valkey/valkey:8.0
        command: ["sh", "-c", "true"]
      containers:
      - name: valkey
        image: valkey/valkey:8.0
        ports: [{{name: valkey, containerPort: 6379}}]
        env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: FQDN, value: "$(POD_NAME).mig-headless.{ns}.svc.cluster.local"}}
        - {{name: PRIMARY, value: "mig-0.mig-headless.{ns}.svc.cluster.local"}}
        command: ["sh", "-c"]
        args:
        - |
          if [ "${{POD_NAME##*-}}" = 0 ]; then
            exec valkey-server /etc/valkey/valkey.conf --replica-announce-ip "$FQDN"
          fi
          exec valkey-server /etc/valkey/valkey.conf --replicaof "$PRIMARY" 6379 --replica-announce-ip "$FQDN"
        readinessProbe:
          exec: {{command: ["valkey-cli", "ping"]}}
          periodSeconds: 2
        volumeMounts:
        - {{name: config, mountPath: /etc/valkey}}
      volumes:
      - {{name: config, configMap: {{name: mig-config}}}}
"#,
        selector_svc = selector.replace("\n      ", "\n    "),
        selector_tpl = selector.replace("\n      ", "\n        "),
    )
}

/// Creates every object of `yaml` the way controller-runtime's client does: a POST under the
/// field manager `manager` (a client-side `Update` entry in managedFields).
async fn create_as_go_operator(
    client: &kube::Client,
    ns: &str,
    yaml: &str,
) -> anyhow::Result<Vec<(GroupVersionKind, String)>> {
    let mut created = Vec::new();
    for document in serde_norway::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document)?;
        let object: DynamicObject = serde_json::from_value(value)?;
        let types = object.types.clone().unwrap_or_default();
        let gvk = GroupVersionKind::try_from(&types)?;
        let (resource, _) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        let params = PostParams {
            field_manager: Some(GO_FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        let made = api.create(&params, &object).await?;
        created.push((gvk, made.name_any()));
    }
    Ok(created)
}

/// The Go operator's controller ownerReference to the Valkey, added by a merge patch under its
/// field manager (as `SetControllerReference` + `Update` does).
async fn own_as_go_operator(
    client: &kube::Client,
    ns: &str,
    objects: &[(GroupVersionKind, String)],
    valkey_uid: &str,
) -> anyhow::Result<()> {
    let patch = serde_json::json!({"metadata": {"ownerReferences": [{
        "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey", "name": NAME, "uid": valkey_uid,
        "controller": true, "blockOwnerDeletion": true
    }]}});
    let params = PatchParams {
        field_manager: Some(GO_FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    for (gvk, name) in objects {
        let (resource, _) = kube::discovery::pinned_kind(client, gvk).await?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource);
        api.patch(name, &params, &Patch::Merge(&patch)).await?;
    }
    Ok(())
}

/// Whether `managed` still lists a client-side entry of the Go operator's field manager.
fn go_operator_still_owns(meta: &kube::api::ObjectMeta) -> bool {
    meta.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(GO_FIELD_MANAGER)
            && entry.operation.as_deref() == Some("Update")
            && entry.subresource.is_none()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_the_go_operator_wrote_is_taken_over_with_one_lossless_roll() {
    let test = OperatorTest::start("migrate").await.unwrap();
    let client = test.client();
    let ns = test.ns().to_owned();

    // The Go operator's cluster, running: pod 0 master, two replicas, labelled as its sidecar does.
    let objects = create_as_go_operator(&client, &ns, &go_objects(&ns))
        .await
        .unwrap();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    eventually(
        Duration::from_secs(180),
        "the Go operator's master with 2 replicas",
        || async {
            let pods = Pods::list(&client, &ns).await?;
            let ip = pods.ip("mig-0").unwrap_or_default();
            let replication = info(&ip, "replication").await?;
            anyhow::ensure!(
                info_field(&replication, "connected_slaves") == Some("2"),
                "mig-0: {replication}"
            );
            Ok(())
        },
    )
    .await
    .unwrap();
    for (pod, role) in [
        ("mig-0", "master"),
        ("mig-1", "replica"),
        ("mig-2", "replica"),
    ] {
        let patch =
            serde_json::json!({"metadata": {"labels": {"vko.gtrfc.com/instanceRole": role}}});
        pods_api
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let uids_before: BTreeMap<String, String> =
        uids(&statefulsets, &services, &config_maps).await.unwrap();
    let go_pods: BTreeMap<String, String> = pods_api
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|pod| (pod.name_any(), pod.uid().unwrap_or_default()))
        .collect();

    let writer = Writer::start_following(
        client.clone(),
        ns.clone(),
        NAME.to_owned(),
        "migrate".into(),
        None,
        Follow::RoleMaster,
    );
    eventually(
        Duration::from_secs(60),
        "the writer's first 300 OKs",
        || async {
            anyhow::ensure!(
                writer.acked().await >= 300,
                "{} acked",
                writer.acked().await
            );
            Ok(())
        },
    )
    .await
    .unwrap();

    // vko starts on the same cluster: the Valkey the Go operator's objects are owned by.
    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: mig}\nspec: {replicas: 3, image: valkey/valkey:8.0}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey_uid = valkeys.get(NAME).await.unwrap().uid().unwrap();
    own_as_go_operator(&client, &ns, &objects, &valkey_uid)
        .await
        .unwrap();
    let started = std::time::Instant::now();

    // Taken over: every data pod replaced by vko's (it has the sidecar), OK, no roll in flight.
    wait_for_valkey(
        &valkeys,
        NAME,
        "OK, 3 ready, no roll in flight",
        Duration::from_secs(420),
        |v| {
            v.status.as_ref().is_some_and(|s| {
                s.phase == Some(Phase::Ok)
                    && s.ready_replicas == Some(3)
                    && s.rolling_update.is_none()
            })
        },
    )
    .await
    .unwrap();
    let vko_pods = eventually(
        Duration::from_secs(300),
        "every data pod is vko's",
        || async {
            let pods = pods_api.list(&Default::default()).await?;
            let data: Vec<Pod> = pods
                .items
                .into_iter()
                .filter(|pod| {
                    pod.name_any().starts_with("mig-") && pod.metadata.deletion_timestamp.is_none()
                })
                .collect();
            let ours = data.iter().filter(|pod| {
                let spec = pod.spec.as_ref();
                spec.is_some_and(|s| s.containers.iter().any(|c| c.name == "sidecar"))
            });
            anyhow::ensure!(
                data.len() == 3 && ours.count() == 3,
                "not yet: {} data pods",
                data.len()
            );
            Ok(data)
        },
    )
    .await
    .unwrap();
    let took_over = started.elapsed();
    let pods = Pods::list(&client, &ns).await.unwrap();
    let master = role_master_pod(&pods, NAME).await.unwrap();
    let log = writer.stop().await;
    let master_ip = pods.ip(&master).unwrap();
    let lost = missing_keys(&master_ip, &log.acked).await.unwrap().len();
    let replication = info(&master_ip, "replication").await.unwrap();
    println!(
        "MEASURED migrate: take_over_ms={} acked={} lost={lost} errors={} longest_gap_ms={} master={master}",
        took_over.as_millis(),
        log.acked.len(),
        log.error_count,
        log.longest_gap().as_millis(),
    );
    assert_eq!(lost, 0, "acknowledged writes lost in the take-over");
    assert_eq!(
        info_field(&replication, "connected_slaves"),
        Some("2"),
        "{replication}"
    );

    // Each Go pod replaced once (same names, new UIDs), none twice: one roll.
    for pod in &vko_pods {
        assert_ne!(
            go_pods.get(&pod.name_any()),
            pod.uid().as_ref(),
            "{} not replaced",
            pod.name_any()
        );
    }
    let rolls = events_about(&client, &ns, NAME, "Normal")
        .await
        .into_iter()
        .filter(|event| event.reason.as_deref() == Some("RollingUpdateComplete"))
        .map(|event| event.deprecated_count.unwrap_or(1).max(1))
        .sum::<i32>();
    assert_eq!(rolls, 1, "exactly one completed roll");

    // Nothing deleted and recreated; the Go operator's fields gone, vko the only writer.
    assert_eq!(
        uids(&statefulsets, &services, &config_maps).await.unwrap(),
        uids_before
    );
    let statefulset = statefulsets.get(NAME).await.unwrap();
    let template = statefulset
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let init_names: Vec<&str> = template
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert!(
        !init_names.contains(&"init-config-selector"),
        "init containers: {init_names:?}"
    );
    assert!(!go_operator_still_owns(&statefulset.metadata));
    let config = config_maps.get("mig-config").await.unwrap();
    assert!(
        !config.data.unwrap_or_default().contains_key("legacy.conf"),
        "the Go operator's ConfigMap key is still there"
    );
    assert!(!go_operator_still_owns(&config.metadata));
    for service in ["mig-headless", "mig-rw"] {
        let found = services.get(service).await.unwrap();
        assert!(!go_operator_still_owns(&found.metadata), "{service}");
    }
    test.cleanup().await.unwrap();
}

/// The UIDs of the objects the Go operator wrote, by kind/name.
async fn uids(
    statefulsets: &Api<StatefulSet>,
    services: &Api<Service>,
    config_maps: &Api<ConfigMap>,
) -> anyhow::Result<BTreeMap<String, String>> {
    let mut found = BTreeMap::new();
    let statefulset = statefulsets.get(NAME).await?;
    found.insert(
        "statefulset/mig".to_owned(),
        statefulset.uid().unwrap_or_default(),
    );
    for name in ["mig-headless", "mig-rw"] {
        let service = services.get(name).await?;
        found.insert(format!("service/{name}"), service.uid().unwrap_or_default());
    }
    let config = config_maps.get("mig-config").await?;
    found.insert(
        "configmap/mig-config".to_owned(),
        config.uid().unwrap_or_default(),
    );
    Ok(found)
}
