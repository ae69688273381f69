//! `helm uninstall` of a release that installed the CRD (`crds.install=true`, the default) removes
//! the CRD, and with it every Valkey; garbage collection then removes the Valkeys' children
//! (StatefulSet, Services, ConfigMaps, ServiceAccount, ...) — but not their PersistentVolumeClaims:
//! the data outlives the resource, as documented.
//!
//! DESTRUCTIVE on a shared testbed: deleting the CRD deletes every Valkey of every test running at
//! the same time. It is therefore `#[ignore]`d in the suite's parallel run; `cargo xtask test` runs
//! it on its own after every other test, and by hand it is run only on a testbed nobody else uses:
//! `cargo test -p vko-e2e --features e2e --test e2e -- --ignored helm_uninstall_crd::`. At the end
//! it installs the CRD again (as the other tests do), so the testbed is usable afterwards.
//!
//! The CRD the other tests installed exists already; helm adopts it into the release through the
//! ownership label and annotations it checks (`app.kubernetes.io/managed-by: Helm`,
//! `meta.helm.sh/release-name/-namespace`), which is also how an operator installed without helm
//! is moved under a release.

use vko_e2e::{helm_support, operator_support};

use std::time::Duration;

use helm_support::{Helm, ReleaseGuard, chart, set_args, wait_for_ready_operator};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use operator_support::{cleanup_namespace, install_crd, ok_with, wait_for_valkey};
use vko_api::Valkey;
use vko_testbed::harness::{TestNamespace, Testbed, apply_yaml, kubectl, wait_until};

const RELEASE: &str = "vko-crd";
/// Only an operator of an earlier test could still hold the Lease; this test runs alone.
const LEADERSHIP_TIMEOUT: Duration = Duration::from_secs(300);

/// Names of the objects in `namespace` controlled by the Valkey with `uid`.
async fn children(
    client: &kube::Client,
    namespace: &str,
    uid: &str,
) -> anyhow::Result<Vec<String>> {
    let owned = |meta: &kube::api::ObjectMeta| {
        meta.owner_references
            .as_ref()
            .is_some_and(|refs| refs.iter().any(|r| r.uid == uid))
    };
    let mut names = Vec::new();
    let list = ListParams::default();
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    for object in statefulsets.list(&list).await? {
        if owned(&object.metadata) {
            names.push(format!("StatefulSet/{}", object.name_any()));
        }
    }
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    for object in services.list(&list).await? {
        if owned(&object.metadata) {
            names.push(format!("Service/{}", object.name_any()));
        }
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    for object in config_maps.list(&list).await? {
        if owned(&object.metadata) {
            names.push(format!("ConfigMap/{}", object.name_any()));
        }
    }
    Ok(names)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "deletes the cluster-wide Valkey CRD (every Valkey of every running test): run alone, last"]
async fn uninstall_removes_the_crd_and_the_valkeys_children_but_keeps_pvcs() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    install_crd(&client).await.unwrap();
    let helm = Helm::new(testbed.kubeconfig()).unwrap();
    let release_ns = TestNamespace::create(&client, "helm-crd-rel")
        .await
        .unwrap();
    let data_ns = TestNamespace::create(&client, "helm-crd-vk").await.unwrap();
    let rel = release_ns.name().to_owned();
    let ns = data_ns.name().to_owned();

    // Adopt the existing CRD into the release.
    let crd = format!("crd/{}", vko_api::CRD_NAME);
    kubectl(&[
        "label",
        "--overwrite",
        &crd,
        "app.kubernetes.io/managed-by=Helm",
    ])
    .await
    .unwrap();
    kubectl(&[
        "annotate",
        "--overwrite",
        &crd,
        &format!("meta.helm.sh/release-name={RELEASE}"),
        &format!("meta.helm.sh/release-namespace={rel}"),
    ])
    .await
    .unwrap();
    let chart = chart();
    let mut install = vec![
        "install",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        &rel,
    ];
    let values = set_args(&["image.tag=dev", "leaderElection.namespace=default"]);
    install.extend(values.iter().map(String::as_str));
    let _uninstall_on_failure = ReleaseGuard::new(&helm, RELEASE, &rel);
    println!("{}", helm.run(&install).await.unwrap());
    let manifest = helm
        .run(&["get", "manifest", RELEASE, "--namespace", &rel])
        .await
        .unwrap();
    assert!(
        manifest.contains("kind: CustomResourceDefinition"),
        "the release does not hold the CRD"
    );
    wait_for_ready_operator(
        &client,
        &rel,
        RELEASE,
        ("default", "valkey-operator.vko.gtrfc.com"),
        LEADERSHIP_TIMEOUT,
    )
    .await
    .unwrap();

    apply_yaml(
        &client,
        &ns,
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: kept}\nspec: {replicas: 1, image: valkey/valkey:8.0, persistence: {enabled: true, size: 1Gi}}\n",
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey = wait_for_valkey(
        &valkeys,
        "kept",
        "phase OK with 1 ready replica",
        Duration::from_secs(180),
        ok_with(1),
    )
    .await
    .unwrap();
    let uid = valkey.uid().unwrap();
    let before = children(&client, &ns, &uid).await.unwrap();
    assert!(
        before.iter().any(|name| name.starts_with("StatefulSet/")),
        "{before:?}"
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
    let claims: Vec<String> = pvcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(!claims.is_empty(), "the persistent Valkey has no PVC");
    println!("before uninstall: {before:?}, PVCs {claims:?}");

    println!(
        "{}",
        helm.run(&["uninstall", RELEASE, "--namespace", &rel, "--wait"])
            .await
            .unwrap()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait_until("the CRD to be deleted", Duration::from_secs(120), || {
        let crds = crds.clone();
        async move {
            Ok(crds
                .get_opt(vko_api::CRD_NAME)
                .await?
                .is_none()
                .then_some(()))
        }
    })
    .await
    .unwrap();
    wait_until(
        "the Valkey's children to be garbage collected",
        Duration::from_secs(120),
        || {
            let (client, ns, uid) = (client.clone(), ns.clone(), uid.clone());
            async move {
                let left = children(&client, &ns, &uid)
                    .await
                    .map_err(|error| vko_testbed::Error::Other(error.to_string()))?;
                Ok(left.is_empty().then_some(()))
            }
        },
    )
    .await
    .unwrap();
    for claim in &claims {
        let pvc = pvcs.get_opt(claim).await.unwrap();
        assert!(
            pvc.is_some_and(|pvc| pvc.metadata.deletion_timestamp.is_none()),
            "PVC {claim} was deleted with the CRD"
        );
    }
    println!("after uninstall: CRD and children gone, PVCs {claims:?} kept");

    // Leave the testbed as the other tests expect it.
    install_crd(&client).await.unwrap();
    cleanup_namespace(&client, data_ns).await.unwrap();
    release_ns.cleanup().await.unwrap();
}
