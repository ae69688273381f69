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
//! here its data pods run valkey-server alone (pod 0 master, the others its replicas) and, for the
//! 3 + 3 layout, its Sentinel pods valkey-sentinel monitoring pod 0 by host name, which is what vko
//! meets on the data plane.

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
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

/// The Go operator's Sentinel tier for `NAME`: 3 Sentinels monitoring pod 0 by host name (quorum
/// 2), their headless Service and ConfigMap (with a key vko does not render).
fn go_sentinel_objects(ns: &str) -> String {
    let labels = "{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: sentinel, app.kubernetes.io/name: valkey, vko.gtrfc.com/cluster: mig}";
    let selector = "{app.kubernetes.io/instance: mig, app.kubernetes.io/managed-by: vko.gtrfc.com, app.kubernetes.io/component: sentinel}";
    format!(
        r#"---
apiVersion: v1
kind: ConfigMap
metadata: {{name: mig-sentinel-config, labels: {labels}}}
data:
  sentinel.conf: |
    port 26379
  legacy.conf: |
    # written by the Go operator only
---
apiVersion: v1
kind: Service
metadata: {{name: mig-sentinel-headless, labels: {labels}}}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {selector}
  ports: [{{name: sentinel, port: 26379, targetPort: 26379}}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: mig-sentinel, labels: {labels}}}
spec:
  replicas: 3
  serviceName: mig-sentinel-headless
  podManagementPolicy: Parallel
  updateStrategy: {{type: OnDelete}}
  selector: {{matchLabels: {selector}}}
  template:
    metadata: {{labels: {labels}}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: sentinel
        image: valkey/valkey:8.0
        ports: [{{name: sentinel, containerPort: 26379}}]
        env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: FQDN, value: "$(POD_NAME).mig-sentinel-headless.{ns}.svc.cluster.local"}}
        - {{name: PRIMARY, value: "mig-0.mig-headless.{ns}.svc.cluster.local"}}
        command: ["sh", "-c"]
        args:
        - |
          cat > /data/sentinel.conf <<EOF
          port 26379
          sentinel resolve-hostnames yes
          sentinel announce-hostnames yes
          sentinel announce-ip $FQDN
          sentinel monitor mig $PRIMARY 6379 2
          sentinel down-after-milliseconds mig 5000
          sentinel failover-timeout mig 60000
          sentinel parallel-syncs mig 1
          EOF
          exec valkey-sentinel /data/sentinel.conf
        readinessProbe:
          exec: {{command: ["valkey-cli", "-p", "26379", "ping"]}}
          periodSeconds: 2
        volumeMounts:
        - {{name: data, mountPath: /data}}
      volumes:
      - {{name: data, emptyDir: {{}}}}
"#
    )
}

/// A data pod's name (`mig-<n>`), not a Sentinel's.
fn is_data_pod(name: &str) -> bool {
    name.strip_prefix("mig-")
        .is_some_and(|rest| !rest.is_empty() && rest.chars().all(|c| c.is_ascii_digit()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_the_go_operator_wrote_is_taken_over_with_one_lossless_roll() {
    take_over_case(false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_3_3_cluster_the_go_operator_wrote_is_taken_over_with_one_lossless_roll() {
    take_over_case(true).await.unwrap();
}

async fn take_over_case(sentinel: bool) -> anyhow::Result<()> {
    let test = OperatorTest::start(if sentinel { "migrate-ha" } else { "migrate" }).await?;
    let client = test.client();
    let ns = test.ns().to_owned();

    // The Go operator's cluster, running: pod 0 master, two replicas, labelled as its sidecar does.
    let mut yaml = go_objects(&ns);
    if sentinel {
        yaml.push_str(&go_sentinel_objects(&ns));
    }
    let objects = create_as_go_operator(&client, &ns, &yaml).await?;
    if sentinel {
        eventually(
            Duration::from_secs(180),
            "3 Sentinels naming mig-0",
            || async {
                let pods = Pods::list(&client, &ns).await?;
                let host = ha_support::sentinel_master_host(&pods, NAME).await?;
                anyhow::ensure!(host.starts_with("mig-0."), "Sentinel names {host}");
                Ok(())
            },
        )
        .await?;
    }
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
    .await?;
    for (pod, role) in [
        ("mig-0", "master"),
        ("mig-1", "replica"),
        ("mig-2", "replica"),
    ] {
        let patch =
            serde_json::json!({"metadata": {"labels": {"vko.gtrfc.com/instanceRole": role}}});
        pods_api
            .patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let uids_before: BTreeMap<String, String> =
        uids(&statefulsets, &services, &config_maps, sentinel).await?;
    let go_pods: BTreeMap<String, String> = pods_api
        .list(&Default::default())
        .await?
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
        if sentinel {
            Follow::Sentinel
        } else {
            Follow::RoleMaster
        },
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
    .await?;

    // vko starts on the same cluster: the Valkey the Go operator's objects are owned by.
    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: mig}}\nspec: {{replicas: 3, image: valkey/valkey:8.0{}}}\n",
            if sentinel { ", sentinel: {enabled: true, replicas: 3}" } else { "" }
        ),
    )
    .await
    ?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey_uid = valkeys
        .get(NAME)
        .await?
        .uid()
        .context("the Valkey has no UID")?;
    own_as_go_operator(&client, &ns, &objects, &valkey_uid).await?;
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
    .await?;
    let vko_pods = eventually(
        Duration::from_secs(300),
        "every data pod is vko's",
        || async {
            let pods = pods_api.list(&Default::default()).await?;
            let data: Vec<Pod> = pods
                .items
                .into_iter()
                .filter(|pod| {
                    is_data_pod(&pod.name_any()) && pod.metadata.deletion_timestamp.is_none()
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
    .await?;
    if sentinel {
        eventually(
            Duration::from_secs(300),
            "every Sentinel pod is vko's",
            || async {
                let pods = pods_api.list(&Default::default()).await?;
                let replaced = pods
                    .items
                    .iter()
                    .filter(|pod| pod.name_any().starts_with("mig-sentinel-"))
                    .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                    .filter(|pod| go_pods.get(&pod.name_any()) != pod.uid().as_ref())
                    .count();
                anyhow::ensure!(replaced == 3, "{replaced} of 3 Sentinel pods replaced");
                Ok(())
            },
        )
        .await?;
        wait_for_valkey(
            &valkeys,
            NAME,
            "OK, 3 ready, no roll in flight after the Sentinel roll",
            Duration::from_secs(300),
            |v| {
                v.status.as_ref().is_some_and(|s| {
                    s.phase == Some(Phase::Ok)
                        && s.ready_replicas == Some(3)
                        && s.rolling_update.is_none()
                })
            },
        )
        .await?;
    }
    let took_over = started.elapsed();
    let pods = Pods::list(&client, &ns).await?;
    let master = role_master_pod(&pods, NAME).await?;
    let log = writer.stop().await;
    let master_ip = pods.ip(&master).context("the master has no IP")?;
    let lost = missing_keys(&master_ip, &log.acked).await?.len();
    let replication = info(&master_ip, "replication").await?;
    println!(
        "MEASURED migrate sentinel={sentinel}: take_over_ms={} acked={} lost={lost} errors={} longest_gap_ms={} master={master}",
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
    if sentinel {
        let sentinel_rolls = events_about(&client, &ns, NAME, "Normal")
            .await
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some("SentinelUpdateComplete"))
            .count();
        assert_eq!(sentinel_rolls, 1, "exactly one completed Sentinel roll");
    }

    // Nothing deleted and recreated; the Go operator's fields gone, vko the only writer.
    assert_eq!(
        uids(&statefulsets, &services, &config_maps, sentinel).await?,
        uids_before
    );
    if sentinel {
        let config = config_maps.get("mig-sentinel-config").await?;
        assert!(!go_operator_still_owns(&config.metadata));
        assert!(
            !config.data.unwrap_or_default().contains_key("legacy.conf"),
            "the Go operator's Sentinel ConfigMap key is still there"
        );
        let statefulset = statefulsets.get("mig-sentinel").await?;
        assert!(!go_operator_still_owns(&statefulset.metadata));
    }
    let statefulset = statefulsets.get(NAME).await?;
    let template = statefulset
        .spec
        .as_ref()
        .and_then(|spec| spec.template.spec.as_ref())
        .context("the StatefulSet has no pod template")?;
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
    let config = config_maps.get("mig-config").await?;
    assert!(
        !config.data.unwrap_or_default().contains_key("legacy.conf"),
        "the Go operator's ConfigMap key is still there"
    );
    assert!(!go_operator_still_owns(&config.metadata));
    for service in ["mig-headless", "mig-rw"] {
        let found = services.get(service).await?;
        assert!(!go_operator_still_owns(&found.metadata), "{service}");
    }
    test.cleanup().await?;
    Ok(())
}

/// The UIDs of the objects the Go operator wrote, by kind/name.
async fn uids(
    statefulsets: &Api<StatefulSet>,
    services: &Api<Service>,
    config_maps: &Api<ConfigMap>,
    sentinel: bool,
) -> anyhow::Result<BTreeMap<String, String>> {
    let (statefulset_names, service_names, config_names): (&[&str], &[&str], &[&str]) = if sentinel
    {
        (
            &["mig", "mig-sentinel"],
            &["mig-headless", "mig-rw", "mig-sentinel-headless"],
            &["mig-config", "mig-sentinel-config"],
        )
    } else {
        (&["mig"], &["mig-headless", "mig-rw"], &["mig-config"])
    };
    let mut found = BTreeMap::new();
    for name in statefulset_names {
        let uid = statefulsets.get(name).await?.uid().unwrap_or_default();
        found.insert(format!("statefulset/{name}"), uid);
    }
    for name in service_names {
        let uid = services.get(name).await?.uid().unwrap_or_default();
        found.insert(format!("service/{name}"), uid);
    }
    for name in config_names {
        let uid = config_maps.get(name).await?.uid().unwrap_or_default();
        found.insert(format!("configmap/{name}"), uid);
    }
    Ok(found)
}
