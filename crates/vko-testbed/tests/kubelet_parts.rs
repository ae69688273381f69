//! The kubelet's Node, volume, hosts-file and PV-provisioner parts against a real API server and
//! kube-controller-manager (the node lifecycle controller, the PV controller, the ServiceAccount and
//! root-CA publishers must be running).
//!
//! Ignored by default because they need a cluster: run them with
//! `KUBECONFIG=/run/vko-testbed/admin.kubeconfig cargo test -p vko-testbed --test kubelet_parts -- --ignored`
//! (or any bare apiserver + controller-manager). Every object they create carries a unique name and is
//! deleted at the end, also when a test fails; they never touch the testbed's own nodes.

// A test file: its helpers fail loudly, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use vko_testbed::kubelet::{NodeSpec, dns, nodes, provisioner, volumes};
use vko_testbed::{controlplane, harness};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A name unique to this process and call.
fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Deletes what a test created (namespaces, nodes, PVs, a temp dir) when dropped, also on failure.
#[derive(Default)]
struct Cleanup {
    namespaces: Vec<String>,
    nodes: Vec<String>,
    volumes: Vec<String>,
    dirs: Vec<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let (namespaces, nodes, volumes) = (
            self.namespaces.clone(),
            self.nodes.clone(),
            self.volumes.clone(),
        );
        // Drop runs inside the test's runtime; a separate thread may block on its own runtime.
        harness::block_on_own_thread(async move {
            let Ok(client) = Client::try_default().await else {
                return;
            };
            let background = DeleteParams::background();
            for name in namespaces {
                let _ = Api::<Namespace>::all(client.clone())
                    .delete(&name, &background)
                    .await;
            }
            for name in nodes {
                let _ = Api::<Node>::all(client.clone())
                    .delete(&name, &background)
                    .await;
                let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
                let _ = leases.delete(&name, &background).await;
            }
            for name in volumes {
                let _ = Api::<PersistentVolume>::all(client.clone())
                    .delete(&name, &background)
                    .await;
            }
        });
        for dir in &self.dirs {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A client, the test's cleanup and a fresh namespace it deletes.
async fn client_and_namespace() -> (Client, Cleanup, String) {
    let client = client().await;
    let mut cleanup = Cleanup::default();
    let ns = namespace(&client, &mut cleanup).await;
    (client, cleanup, ns)
}

fn temp_dir(cleanup: &mut Cleanup, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("vko-kubelet-parts-{name}")));
    std::fs::create_dir_all(&dir).unwrap();
    cleanup.dirs.push(dir.clone());
    dir
}

async fn client() -> Client {
    Client::try_default()
        .await
        .expect("KUBECONFIG must point at a running API server")
}

async fn namespace(client: &Client, cleanup: &mut Cleanup) -> String {
    let name = unique("kparts");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    cleanup.namespaces.push(name.clone());
    name
}

/// Polls `check` every 250 ms until it returns `Some`, failing after `seconds`.
async fn eventually<T, F, Fut>(what: &str, seconds: u64, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {seconds}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn create<K>(client: &Client, namespace: &str, object: serde_json::Value) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let object: K = serde_json::from_value(object).unwrap();
    Api::<K>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap()
}

#[tokio::test]
#[ignore = "needs a running API server and controller-manager (KUBECONFIG)"]
async fn nodes_become_ready_lose_the_not_ready_taint_and_stopped_nodes_stop_renewing() {
    let client = client().await;
    let mut cleanup = Cleanup::default();
    let specs = vec![
        NodeSpec {
            name: unique("kparts-node-a"),
            zone: "zone-a".into(),
            kubelet_port: 10250,
        },
        NodeSpec {
            name: unique("kparts-node-b"),
            zone: "zone-b".into(),
            kubelet_port: 10251,
        },
    ];
    cleanup.nodes = specs.iter().map(|spec| spec.name.clone()).collect();

    nodes::register(&client, &specs).await.unwrap();
    let stopped = nodes::StoppedNodes::default();
    let shutdown = CancellationToken::new();
    let heartbeat = tokio::spawn(nodes::heartbeat(
        client.clone(),
        specs.clone(),
        stopped.clone(),
        shutdown.clone(),
    ));

    let node_api: Api<Node> = Api::all(client.clone());
    let lease_api: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    for spec in &specs {
        let node = eventually("the node Ready without a not-ready taint", 60, || async {
            let node = node_api.get(&spec.name).await.ok()?;
            // The node lifecycle controller taints a node not-ready until it sees Ready=True.
            controlplane::node_is_usable(&node).then_some(node)
        })
        .await;
        let labels = node.metadata.labels.unwrap();
        assert_eq!(labels["topology.kubernetes.io/zone"], spec.zone);
        assert_eq!(labels["kubernetes.io/hostname"], spec.name);
        let lease = eventually("the node's lease", 30, || async {
            lease_api.get(&spec.name).await.ok()
        })
        .await;
        let lease_spec = lease.spec.unwrap();
        assert_eq!(
            lease_spec.holder_identity.as_deref(),
            Some(spec.name.as_str())
        );
        assert_eq!(lease_spec.lease_duration_seconds, Some(40));
        assert_eq!(lease.metadata.owner_references.unwrap()[0].kind, "Node");
    }

    // Stop node b: its lease must not be renewed on the next beat, node a's must.
    let renew_time = |name: String| {
        let lease_api = lease_api.clone();
        async move { lease_api.get(&name).await.ok()?.spec?.renew_time }
    };
    stopped.stop(&specs[1].name);
    let a_before = renew_time(specs[0].name.clone()).await.unwrap();
    let b_before = renew_time(specs[1].name.clone()).await.unwrap();
    eventually("node a's lease renewed", 25, || async {
        (renew_time(specs[0].name.clone()).await? > a_before).then_some(())
    })
    .await;
    assert_eq!(
        renew_time(specs[1].name.clone()).await.unwrap(),
        b_before,
        "a stopped node renews nothing"
    );

    // The node lifecycle controller notices the silence: Ready turns Unknown, the node is tainted.
    let taints = |name: String| {
        let node_api = node_api.clone();
        async move {
            let node = node_api.get(&name).await.ok()?;
            let ready = node
                .status?
                .conditions?
                .into_iter()
                .find(|condition| condition.type_ == "Ready")?;
            let keys: Vec<String> = node
                .spec?
                .taints
                .unwrap_or_default()
                .into_iter()
                .map(|taint| taint.key)
                .collect();
            Some((ready.status, keys))
        }
    };
    eventually(
        "the stopped node Unknown and tainted unreachable",
        120,
        || async {
            let (ready, keys) = taints(specs[1].name.clone()).await?;
            (ready == "Unknown"
                && keys
                    .iter()
                    .any(|key| key == "node.kubernetes.io/unreachable"))
            .then_some(())
        },
    )
    .await;

    // Starting it again renews at once (not only on the next 10 s tick) and clears the taints.
    stopped.start(&specs[1].name);
    eventually("node b's lease renewed after start", 5, || async {
        (renew_time(specs[1].name.clone()).await? > b_before).then_some(())
    })
    .await;
    eventually("the restarted node Ready and untainted", 60, || async {
        let (ready, keys) = taints(specs[1].name.clone()).await?;
        (ready == "True" && keys.is_empty()).then_some(())
    })
    .await;

    shutdown.cancel();
    heartbeat.await.unwrap();
}

#[tokio::test]
#[ignore = "needs a running API server and controller-manager (KUBECONFIG)"]
async fn the_provisioner_binds_claims_and_deletes_released_volumes() {
    let client = client().await;
    let mut cleanup = Cleanup::default();
    let pv_root = temp_dir(&mut cleanup, "pv");
    let ns = namespace(&client, &mut cleanup).await;
    let shutdown = CancellationToken::new();
    let provisioner = tokio::spawn(provisioner::run(
        client.clone(),
        pv_root.clone(),
        shutdown.clone(),
    ));

    // Created after the StorageClass exists, without a class: the admission plugin fills in "standard".
    let class = eventually("the default StorageClass", 30, || async {
        Api::<k8s_openapi::api::storage::v1::StorageClass>::all(client.clone())
            .get("standard")
            .await
            .ok()
    })
    .await;
    assert_eq!(class.provisioner, provisioner::PROVISIONER);
    let claim: PersistentVolumeClaim = create(
        &client,
        &ns,
        json!({"metadata": {"name": "data"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let uid = claim.metadata.uid.clone().unwrap();
    let pv_name = format!("pvc-{uid}");
    cleanup.volumes.push(pv_name.clone());

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let bound = eventually("the claim Bound by the PV controller", 60, || async {
        let claim = claims.get("data").await.ok()?;
        (claim.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(claim)
    })
    .await;
    assert_eq!(
        bound.spec.unwrap().volume_name.as_deref(),
        Some(pv_name.as_str())
    );
    let dir = pv_root.join(&uid);
    assert!(dir.is_dir());

    // A pod's claim volume resolves to that directory; data written there survives the pod.
    let pod: Pod = create(
        &client,
        &ns,
        json!({"metadata": {"name": "user"},
               "spec": {"containers": [{"name": "c", "image": "vko-testbed/shell:1"}],
                        "securityContext": {"fsGroup": 2000},
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    )
    .await;
    let pod_dir = temp_dir(&mut cleanup, "pod");
    let prepared = volumes::prepare(&client, &pod, &pod_dir).await.unwrap();
    assert_eq!(prepared.dirs["data"], dir);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().gid(),
        2000,
        "fsGroup applied to the claim's directory"
    );
    std::fs::write(dir.join("dump.rdb"), b"persisted").unwrap();
    volumes::cleanup(&pod_dir).await.unwrap();
    assert_eq!(std::fs::read(dir.join("dump.rdb")).unwrap(), b"persisted");

    claims
        .delete("data", &DeleteParams::default())
        .await
        .unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    eventually("the released PV and its directory deleted", 60, || async {
        let gone = volumes.get_opt(&pv_name).await.ok()?.is_none();
        (gone && !dir.exists()).then_some(())
    })
    .await;

    shutdown.cancel();
    provisioner.await.unwrap().unwrap();
}

#[tokio::test]
#[ignore = "needs a running API server and controller-manager (KUBECONFIG)"]
async fn volumes_project_config_secrets_downward_api_and_a_working_token() {
    let (client, mut cleanup, ns) = client_and_namespace().await;
    let _: ConfigMap = create(
        &client,
        &ns,
        json!({"metadata": {"name": "cfg"}, "data": {"valkey.conf": "port 6379\n"}}),
    )
    .await;
    let _: Secret = create(
        &client,
        &ns,
        json!({"metadata": {"name": "creds"}, "stringData": {"password": "s3cret"}}),
    )
    .await;
    // The ServiceAccount and root-CA publishers fill every new namespace.
    let service_accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), &ns);
    eventually("the default ServiceAccount", 30, || async {
        service_accounts.get("default").await.ok()
    })
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eventually("kube-root-ca.crt", 30, || async {
        config_maps.get("kube-root-ca.crt").await.ok()
    })
    .await;

    let pod: Pod = create(
        &client,
        &ns,
        json!({"metadata": {"name": "db-0", "labels": {"app": "db"}},
               "spec": {"containers": [{"name": "c", "image": "vko-testbed/shell:1"}],
                        "volumes": [
                          {"name": "scratch", "emptyDir": {}},
                          {"name": "config", "configMap": {"name": "cfg"}},
                          {"name": "secret", "secret": {"secretName": "creds", "defaultMode": 0o400,
                                                         "items": [{"key": "password", "path": "auth/password"}]}},
                          {"name": "info", "downwardAPI": {"items": [
                              {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                          {"name": "api", "projected": {"sources": [
                              {"serviceAccountToken": {"path": "token"}},
                              {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                              {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}
                        ]}}),
    )
    .await;
    let pod_dir = temp_dir(&mut cleanup, "pod");
    let prepared = volumes::prepare(&client, &pod, &pod_dir).await.unwrap();
    let dir = |name: &str| prepared.dirs[name].clone();

    assert_eq!(
        std::fs::metadata(dir("scratch")).unwrap().mode() & 0o7777,
        0o777
    );
    assert_eq!(
        std::fs::read_to_string(dir("config").join("valkey.conf")).unwrap(),
        "port 6379\n"
    );
    let password = dir("secret").join("auth/password");
    assert_eq!(std::fs::read_to_string(&password).unwrap(), "s3cret");
    assert_eq!(std::fs::metadata(&password).unwrap().mode() & 0o7777, 0o400);
    assert_eq!(
        std::fs::read_to_string(dir("info").join("labels")).unwrap(),
        "app=\"db\""
    );
    assert_eq!(
        std::fs::read_to_string(dir("api").join("namespace")).unwrap(),
        ns
    );
    assert!(
        std::fs::read_to_string(dir("api").join("ca.crt"))
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );

    // The token authenticates as the pod's ServiceAccount, bound to the pod.
    let token = std::fs::read_to_string(dir("api").join("token")).unwrap();
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.clone()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap();
    let status = reviewed.status.unwrap();
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("system:serviceaccount:{ns}:default").as_str())
    );
    let extra = user.extra.unwrap_or_default();
    assert_eq!(
        extra.get("authentication.kubernetes.io/pod-name"),
        Some(&vec!["db-0".to_string()])
    );

    // A ConfigMap update appears in place through the same volume directory; a fresh token is kept.
    let inode = std::fs::metadata(dir("config")).unwrap().ino();
    config_maps
        .patch(
            "cfg",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"valkey.conf": "port 7000\n"}})),
        )
        .await
        .unwrap();
    volumes::refresh(&client, &pod, &pod_dir).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir("config").join("valkey.conf")).unwrap(),
        "port 7000\n"
    );
    assert_eq!(std::fs::metadata(dir("config")).unwrap().ino(), inode);
    assert_eq!(
        std::fs::read_to_string(dir("api").join("token")).unwrap(),
        token,
        "not yet due for refresh"
    );

    // A missing ConfigMap names itself; an unbound claim says so.
    // Why a shell pod named `name` with one `volume` cannot be prepared.
    let mut unpreparable = async |name: &str, volume: serde_json::Value| -> String {
        let pod: Pod = create(
            &client,
            &ns,
            json!({"metadata": {"name": name},
                   "spec": {"containers": [{"name": "c", "image": "vko-testbed/shell:1"}],
                            "volumes": [volume]}}),
        )
        .await;
        volumes::prepare(&client, &pod, &temp_dir(&mut cleanup, name))
            .await
            .unwrap_err()
            .to_string()
    };
    let error = unpreparable(
        "broken",
        json!({"name": "config", "configMap": {"name": "nope"}}),
    )
    .await;
    assert!(
        error.contains("configmap \"nope\" not found") && error.contains("\"config\""),
        "{error}"
    );
    let _: PersistentVolumeClaim = create(
        &client,
        &ns,
        json!({"metadata": {"name": "unbound"},
               "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    )
    .await;
    let error = unpreparable(
        "waiting",
        json!({"name": "data", "persistentVolumeClaim": {"claimName": "unbound"}}),
    )
    .await;
    assert!(error.contains("\"unbound\" is not bound"), "{error}");

    volumes::cleanup(&pod_dir).await.unwrap();
    assert!(!pod_dir.join("volumes").exists());
}

async fn set_pod_status(client: &Client, ns: &str, name: &str, ip: &str, ready: bool) {
    let status = json!({"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                                   "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
    Api::<Pod>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs a running API server and controller-manager (KUBECONFIG)"]
async fn hosts_files_follow_pods_and_services_in_place() {
    let (client, mut cleanup, ns) = client_and_namespace().await;
    let state_dir = temp_dir(&mut cleanup, "dns");
    let shutdown = CancellationToken::new();
    let dns = dns::Dns::start(
        client.clone(),
        state_dir.clone(),
        "cluster.local".into(),
        shutdown.clone(),
    );

    let _: Service = create(
        &client,
        &ns,
        json!({"metadata": {"name": "db"}, "spec": {"clusterIP": "None", "selector": {"app": "db"},
                                                   "ports": [{"port": 6379}]}}),
    )
    .await;
    let pod_json = |name: &str| {
        json!({"metadata": {"name": name, "labels": {"app": "db"}},
               "spec": {"hostname": name, "subdomain": "db",
                        "containers": [{"name": "c", "image": "vko-testbed/shell:1"}]}})
    };
    let me: Pod = create(&client, &ns, pod_json("db-0")).await;
    let _: Pod = create(&client, &ns, pod_json("db-1")).await;
    set_pod_status(&client, &ns, "db-1", "10.244.7.11", false).await;

    let path = dns.hosts_file(&me, "10.244.7.10".parse().unwrap()).unwrap();
    assert_eq!(
        path,
        state_dir
            .join("pods")
            .join(me.metadata.uid.as_deref().unwrap())
            .join("hosts")
    );
    let inode = std::fs::metadata(&path).unwrap().ino();
    let own = format!("10.244.7.10\tdb-0.db.{ns}.svc.cluster.local");
    assert!(read(&path).contains(&own), "{}", read(&path));
    let peer = format!("10.244.7.11\tdb-1.db.{ns}.svc.cluster.local");

    // Not ready: not in DNS. Ready: appears within about a second of the status change.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!read(&path).contains(&peer), "{}", read(&path));
    set_pod_status(&client, &ns, "db-1", "10.244.7.11", true).await;
    eventually("the ready peer in the hosts file", 3, || async {
        read(&path).contains(&peer).then_some(())
    })
    .await;

    // A ClusterIP Service appears with its short forms.
    let api: Service = create(
        &client,
        &ns,
        json!({"metadata": {"name": "api"}, "spec": {"selector": {"app": "db"}, "ports": [{"port": 80}]}}),
    )
    .await;
    let cluster_ip = api.spec.unwrap().cluster_ip.unwrap();
    let service_line =
        format!("{cluster_ip}\tapi.{ns}.svc.cluster.local\tapi.{ns}.svc\tapi.{ns}\tapi\n");
    eventually("the ClusterIP service in the hosts file", 3, || async {
        read(&path).contains(&service_line).then_some(())
    })
    .await;

    // Deleting the headless Service removes the peer; the file is still the same inode.
    Api::<Service>::namespaced(client.clone(), &ns)
        .delete("db", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the peer gone with its Service", 3, || async {
        (!read(&path).contains(&peer)).then_some(())
    })
    .await;
    assert_eq!(
        std::fs::metadata(&path).unwrap().ino(),
        inode,
        "rewritten in place"
    );

    // A forgotten file is no longer maintained.
    dns.forget(me.metadata.uid.as_deref().unwrap());
    let frozen = read(&path);
    Api::<Service>::namespaced(client.clone(), &ns)
        .delete("api", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(read(&path), frozen);
    shutdown.cancel();
}
