//! The process kubelet runs real pods: a hand-written Valkey StatefulSet replicates by pod FQDN,
//! is served by its headless Service's EndpointSlice and keeps its data through a PVC across a pod
//! deletion; a pod's projected ServiceAccount token authenticates it with real RBAC.

use std::collections::BTreeSet;
use std::time::Duration;
use vko_e2e::ha_support::{pod_is_ready, valkey_cli_reply};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams};
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, pod_ip, valkey_cli, wait_until};
use vko_testbed::paths::Paths;

const STATEFULSET: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: vk}
spec:
  clusterIP: None
  publishNotReadyAddresses: true
  selector: {app: vk}
  ports: [{name: valkey, port: 6379}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: vk-config}
data:
  valkey.conf: |
    bind 0.0.0.0
    protected-mode no
    port 6379
    dir /data
    appendonly yes
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: vk}
spec:
  serviceName: vk
  replicas: 3
  selector: {matchLabels: {app: vk}}
  template:
    metadata: {labels: {app: vk}}
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: valkey
        image: valkey/valkey:8.0
        ports: [{name: valkey, containerPort: 6379}]
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
        - {name: FQDN, value: "$(POD_NAME).vk.$(POD_NAMESPACE).svc.cluster.local"}
        - {name: PRIMARY, value: "vk-0.vk.$(POD_NAMESPACE).svc.cluster.local"}
        command: ["sh", "-c"]
        args:
        - |
          if [ "${POD_NAME##*-}" = 0 ]; then
            exec valkey-server /etc/valkey/valkey.conf --replica-announce-ip "$FQDN"
          fi
          exec valkey-server /etc/valkey/valkey.conf --replicaof "$PRIMARY" 6379 --replica-announce-ip "$FQDN"
        readinessProbe:
          exec: {command: ["valkey-cli", "ping"]}
          periodSeconds: 2
        volumeMounts:
        - {name: config, mountPath: /etc/valkey}
        - {name: data, mountPath: /data}
      volumes:
      - {name: config, configMap: {name: vk-config}}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
"#;

/// Running, and its `Ready` condition `True`.
fn is_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && pod_is_ready(pod)
}

/// The three pods, once all of them are Running and Ready (and not being deleted).
async fn ready_pods(pods: &Api<Pod>, names: &[&str]) -> vko_testbed::Result<Option<Vec<Pod>>> {
    let mut ready = Vec::new();
    for name in names {
        match pods.get_opt(name).await? {
            Some(pod) if is_ready(&pod) && pod.metadata.deletion_timestamp.is_none() => {
                ready.push(pod)
            }
            _ => return Ok(None),
        }
    }
    Ok(Some(ready))
}

#[tokio::test]
async fn a_valkey_statefulset_replicates_by_fqdn_and_keeps_data_through_its_pvc() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "testbed-pods-sts")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    apply_yaml(&client, &ns, STATEFULSET).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let names = ["vk-0", "vk-1", "vk-2"];

    let ready = wait_until(
        "3 Running and Ready valkey pods",
        Duration::from_secs(180),
        || {
            let pods = pods.clone();
            async move { ready_pods(&pods, &names).await }
        },
    )
    .await
    .unwrap();
    let ips: BTreeSet<String> = ready
        .iter()
        .filter_map(|pod| pod.status.as_ref().and_then(|s| s.pod_ip.clone()))
        .collect();
    assert_eq!(ips.len(), 3, "distinct pod IPs: {ips:?}");
    for ip in &ips {
        assert!(
            ip.starts_with("10.244."),
            "pod IP {ip} is on the bridge network"
        );
    }

    // Replicas follow vk-0 by its FQDN.
    for replica in ["vk-1", "vk-2"] {
        let ip = pod_ip(&client, &ns, replica).await.unwrap();
        let info = wait_until(
            &format!("{replica} linked to its primary"),
            Duration::from_secs(60),
            || {
                let ip = ip.clone();
                async move {
                    let info = valkey_cli(&ip, &["INFO", "replication"]).await?;
                    Ok(info.contains("master_link_status:up").then_some(info))
                }
            },
        )
        .await
        .unwrap();
        assert!(
            info.contains(&format!("master_host:vk-0.vk.{ns}.svc.cluster.local")),
            "{info}"
        );
    }
    let primary_ip = pod_ip(&client, &ns, "vk-0").await.unwrap();
    let primary_info = valkey_cli(&primary_ip, &["INFO", "replication"])
        .await
        .unwrap();
    assert!(
        primary_info.contains("connected_slaves:2"),
        "{primary_info}"
    );
    assert!(
        primary_info.contains(&format!("ip=vk-1.vk.{ns}.svc.cluster.local")),
        "{primary_info}"
    );

    // The headless Service's EndpointSlice lists the three ready pods.
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    wait_until(
        "the EndpointSlice of vk to list the 3 ready pods",
        Duration::from_secs(60),
        || {
            let slices = slices.clone();
            let ips = ips.clone();
            async move {
                let list = slices
                    .list(&ListParams::default().labels("kubernetes.io/service-name=vk"))
                    .await?;
                let listed: BTreeSet<String> = list
                    .items
                    .iter()
                    .flat_map(|slice| slice.endpoints.iter())
                    .filter(|endpoint| {
                        endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true)
                    })
                    .flat_map(|endpoint| endpoint.addresses.iter().cloned())
                    .collect();
                Ok((listed == ips).then_some(()))
            }
        },
    )
    .await
    .unwrap();

    // Data written to vk-0 survives the pod's deletion through its PVC.
    assert_eq!(
        valkey_cli_reply(&primary_ip, &["SET", "survivor", "still-here"])
            .await
            .unwrap(),
        "OK"
    );
    assert_eq!(
        valkey_cli_reply(&primary_ip, &["SAVE"]).await.unwrap(),
        "OK"
    );
    let old_uid = pods.get("vk-0").await.unwrap().metadata.uid.unwrap();
    pods.delete("vk-0", &DeleteParams::default()).await.unwrap();
    let new_primary = wait_until("a new vk-0 to be Ready", Duration::from_secs(120), || {
        let pods = pods.clone();
        let old_uid = old_uid.clone();
        async move {
            Ok(pods.get_opt("vk-0").await?.filter(|pod| {
                pod.metadata.uid.as_deref() != Some(old_uid.as_str()) && is_ready(pod)
            }))
        }
    })
    .await
    .unwrap();
    let new_ip = new_primary.status.and_then(|s| s.pod_ip).unwrap();
    let value = valkey_cli(&new_ip, &["GET", "survivor"]).await.unwrap();
    assert_eq!(value.trim(), "still-here");

    namespace.cleanup().await.unwrap();
}

const TOKEN_CHECK: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: reader}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: granted}
data: {key: value}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-granted}
data: {key: value}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-granted}
rules:
- {apiGroups: [""], resources: [configmaps], resourceNames: [granted], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader-reads-granted}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-granted}
subjects:
- {kind: ServiceAccount, name: reader}
---
apiVersion: v1
kind: Pod
metadata: {name: token-check}
spec:
  serviceAccountName: reader
  restartPolicy: Never
  containers:
  - name: check
    image: vko-testbed/shell:1
    command: ["sh", "-c"]
    args:
    - |
      SA=/var/run/secrets/kubernetes.io/serviceaccount
      NS=$(cat $SA/namespace)
      API="https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"
      code() {
        curl -s -o /dev/null -w '%{http_code}' --cacert $SA/ca.crt \
          -H "Authorization: Bearer $(cat $SA/token)" "$API/api/v1/namespaces/$NS/configmaps/$1"
      }
      echo "api=$API granted=$(code granted) not-granted=$(code not-granted)"
"#;

#[tokio::test]
async fn a_projected_service_account_token_authenticates_with_real_rbac() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "testbed-pods-token")
        .await
        .unwrap();
    let ns = namespace.name().to_string();
    // The RoleBinding's subject needs the namespace.
    let manifest = TOKEN_CHECK.replace(
        "{kind: ServiceAccount, name: reader}",
        &format!("{{kind: ServiceAccount, name: reader, namespace: {ns}}}"),
    );
    apply_yaml(&client, &ns, &manifest).await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    let pod = wait_until(
        "the token-check pod to succeed",
        Duration::from_secs(120),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get_opt("token-check").await?;
                Ok(pod.filter(|pod| {
                    matches!(
                        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded") | Some("Failed")
                    )
                }))
            }
        },
    )
    .await
    .unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    let log_path = Paths::from_env()
        .pods_dir()
        .join(&uid)
        .join("logs")
        .join("check")
        .join("0.log");
    let log = std::fs::read_to_string(&log_path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", log_path.display()));
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded"),
        "{log}"
    );
    assert!(
        log.contains("granted=200 "),
        "the RoleBinding grants the get: {log}"
    );
    assert!(
        log.contains("not-granted=403"),
        "RBAC refuses the ungranted get: {log}"
    );
    assert!(
        log.contains("api=https://10.244.0.1:"),
        "in-pod API address: {log}"
    );

    namespace.cleanup().await.unwrap();
}
