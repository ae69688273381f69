//! TLS from cert-manager (`spec.tls.certManager`), end to end: the testbed installs cert-manager
//! v1.11.5 from its own chart (controller, webhook and cainjector run as pods) with the CA
//! ClusterIssuer `vko-testbed-ca`, so the Certificates the operator writes are really issued.
//!
//! A 3 data + 3 Sentinel `Valkey` on Valkey 9.1 with `tls.certManager` naming that issuer reaches
//! PHASE OK from cert-manager's Secrets alone; then operator_tls's checks run against it: the plaintext ports
//! are closed, TLS serves and replicates, Sentinel answers over TLS with host names; a client of
//! `<name>-rw`'s ClusterIP verifies the certificate against the Service's DNS name; and the master
//! pod deleted under a TLS writer hands over with 0 acknowledged writes lost; cert-manager made to
//! re-issue both certificates (as `cmctl renew` does) under a TLS writer: the data pods reload
//! the new certificate in place and so do the 9.1 Sentinels (ADR 0053: UIDs and restart counts of
//! all six pods unchanged, the new fingerprint served), 0 acknowledged writes lost (a Sentinel
//! before 9.1 is replaced instead: operator_tls's CA rotation); `unifiedCertificate` turned on
//! under a TLS writer re-issues `<name>-tls` with the Sentinel names, no Sentinel pod mounts it
//! before it names them (sampled every 200 ms), the data pods reload it in place, the Sentinel
//! pods are replaced onto it, the Sentinel Certificate is deleted, 0 lost; then `certManager`
//! switched to `secretName` naming the issued Secret: the Certificate is deleted, the Secret
//! stays, the cluster settles at OK on it and serves TLS through `-rw`, 0 lost.
//!
//! cert-manager leaving and coming back, and a Certificate deleted when TLS is turned off, are in
//! operator_optional_objects (exclusive: they uninstall cert-manager under the operator).
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use crate::operator_tls::{
    DOMAIN, Dial, NAME, SentinelPods, TLS_PORT, TlsWriter,
    certificate_change_reloads_the_data_pods, master_deletion_under_a_tls_writer,
    no_acknowledged_write_lost, serves_tls_only,
};
use vko_e2e::{ha_support, operator_support};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use ha_support::eventually;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use operator_support::{OperatorTest, ok_with};
use vko_render::Names;
use vko_valkey::{Reply, ValkeyClient, certificate};

/// The testbed's CA ClusterIssuer (vko_testbed::cert_manager::CA_ISSUER).
const ISSUER: &str = vko_testbed::cert_manager::CA_ISSUER;

/// `ca.crt` of the Secret cert-manager issued for the data tier (the CA issuer puts its own
/// certificate there).
async fn issued_ca(client: &kube::Client, ns: &str, secret: &str) -> anyhow::Result<Vec<u8>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let issued = secrets.get(secret).await?;
    let ca = issued
        .data
        .as_ref()
        .and_then(|data| data.get("ca.crt"))
        .map(|ca| ca.0.clone())
        .with_context(|| format!("{secret} has no ca.crt"))?;
    ensure!(!ca.is_empty(), "{secret}: empty ca.crt");
    Ok(ca)
}

/// `tls.crt` of an issued Secret.
async fn issued_certificate(
    client: &kube::Client,
    ns: &str,
    secret: &str,
) -> anyhow::Result<Vec<u8>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .get(secret)
        .await?
        .data
        .and_then(|data| data.get("tls.crt").map(|crt| crt.0.clone()))
        .with_context(|| format!("{secret} has no tls.crt"))
}

/// cert-manager's Certificates in `ns`.
fn certificates(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "cert-manager.io".into(),
        version: "v1".into(),
        api_version: "cert-manager.io/v1".into(),
        kind: "Certificate".into(),
        plural: "certificates".into(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Makes cert-manager re-issue `certificate` now, as `cmctl renew` does: an `Issuing=True`
/// condition with reason `ManuallyTriggered` added to its status.
async fn renew(client: &kube::Client, ns: &str, certificate: &str) -> anyhow::Result<()> {
    let certificates = certificates(client, ns);
    let current = certificates.get_status(certificate).await?;
    let mut conditions = current.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|condition| condition["type"] != "Issuing");
    conditions.push(serde_json::json!({
        "type": "Issuing", "status": "True", "reason": "ManuallyTriggered",
        "message": "Certificate re-issuance manually triggered by the vko e2e test",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
    }));
    certificates
        .patch_status(
            certificate,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"conditions": conditions}})),
        )
        .await?;
    Ok(())
}

/// cert-manager re-issues both certificates under a TLS writer (same CA): the data pods and the
/// 9.1 Sentinels reload the new certificate in place (0 restarts, 0 replaced), 0 acknowledged
/// writes lost.
async fn renewal_rolls_without_loss(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
) -> anyhow::Result<()> {
    let data_secret = format!("{NAME}-tls");
    let sentinel_secret = format!("{NAME}-sentinel-tls");
    let old = issued_certificate(client, ns, &data_secret).await?;
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), dial.clone(), "renew");
    writer.wait_for(300).await?;
    let took = certificate_change_reloads_the_data_pods(
        client,
        ns,
        dial,
        async {
            renew(client, ns, &data_secret).await?;
            renew(client, ns, &sentinel_secret).await
        },
        "cert-manager re-issued both certificates",
        (&data_secret, &sentinel_secret),
        SentinelPods::ReloadInPlace,
    )
    .await?;
    let new = issued_certificate(client, ns, &data_secret).await?;
    ensure!(
        new != old,
        "{data_secret}: tls.crt unchanged after the renewal"
    );
    no_acknowledged_write_lost(
        writer,
        client,
        ns,
        dial,
        &format!("renewal roll ({took:?})"),
    )
    .await
}

/// The Secrets the Sentinel pods' volumes name, per pod.
async fn sentinel_pod_secrets(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let prefix = format!("{NAME}-sentinel-");
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|pod| pod.name_any().starts_with(&prefix))
        .map(|pod| {
            let name = pod.name_any();
            let secrets = pod
                .spec
                .and_then(|spec| spec.volumes)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|volume| volume.secret.and_then(|secret| secret.secret_name))
                .collect();
            (name, secrets)
        })
        .collect())
}

/// Samples, until `stop`, whether a Sentinel pod mounts `<name>-tls` while that Secret's
/// certificate does not name the Sentinel pods yet; returns what it saw (empty: never).
async fn sample_unified_ordering(
    client: kube::Client,
    ns: String,
    sentinel_hosts: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (usize, Vec<String>) {
    let data_secret = format!("{NAME}-tls");
    let (mut samples, mut violations) = (0, Vec::new());
    while !stop.load(Ordering::SeqCst) {
        let sample = async {
            let mounts = sentinel_pod_secrets(&client, &ns).await?;
            let certificate = issued_certificate(&client, &ns, &data_secret).await?;
            let uncovered = certificate::host_names_not_covered(&certificate, &sentinel_hosts)
                .map_err(anyhow::Error::msg)?;
            anyhow::Ok(
                mounts
                    .into_iter()
                    .filter(|(_, secrets)| secrets.contains(&data_secret) && !uncovered.is_empty())
                    .map(|(pod, _)| {
                        format!("{pod} mounts {data_secret}, which leaves out {uncovered:?}")
                    })
                    .collect::<Vec<_>>(),
            )
        }
        .await;
        if let Ok(found) = sample {
            samples += 1;
            violations.extend(found);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (samples, violations)
}

/// `unifiedCertificate` turned on under a TLS writer: `<name>-tls` is re-issued with the Sentinel
/// names and no Sentinel pod mounts it before it names them; the data pods reload it in place,
/// the Sentinel pods are replaced onto it, the `<name>-sentinel-tls` Certificate is deleted, 0
/// acknowledged writes lost.
async fn unified_certificate_migration(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
) -> anyhow::Result<()> {
    let sentinel_hosts: Vec<String> = (0..3)
        .map(|ordinal| dial.names.sentinel_pod_fqdn(ordinal))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_unified_ordering(
        client.clone(),
        ns.to_owned(),
        sentinel_hosts,
        stop.clone(),
    ));
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), dial.clone(), "unify");
    writer.wait_for(300).await?;
    let valkeys: Api<vko_api::Valkey> = Api::namespaced(client.clone(), ns);
    let data_secret = format!("{NAME}-tls");
    let took = certificate_change_reloads_the_data_pods(
        client,
        ns,
        dial,
        async {
            valkeys
                .patch(
                    NAME,
                    &PatchParams::default(),
                    &Patch::Merge(
                        serde_json::json!({"spec": {"tls": {"unifiedCertificate": true}}}),
                    ),
                )
                .await?;
            Ok(())
        },
        "unifiedCertificate turned on",
        (&data_secret, &data_secret),
        // The Secret the Sentinel pods mount changes: a template change, rolled.
        SentinelPods::Replaced,
    )
    .await?;
    stop.store(true, Ordering::SeqCst);
    let (samples, violations) = sampler.await?;
    ensure!(
        violations.is_empty(),
        "a Sentinel pod mounted the unified Secret before it named the Sentinels: {violations:?}"
    );
    ensure!(samples > 10, "only {samples} samples of the ordering");
    let mounts = sentinel_pod_secrets(client, ns).await?;
    ensure!(
        mounts
            .iter()
            .all(|(_, secrets)| secrets.contains(&format!("{NAME}-tls"))
                && !secrets.contains(&format!("{NAME}-sentinel-tls"))),
        "Sentinel mounts after the migration: {mounts:?}"
    );
    certificates_become(
        client,
        ns,
        &[format!("{NAME}-tls")],
        "the Sentinel Certificate deleted",
    )
    .await?;
    eprintln!(
        "unified: Sentinel pods moved to {NAME}-tls only once it named them ({samples} samples), {NAME}-sentinel-tls Certificate deleted"
    );
    no_acknowledged_write_lost(
        writer,
        client,
        ns,
        dial,
        &format!("unified-certificate migration ({took:?})"),
    )
    .await
}

/// `tls.certManager` switched to `tls.secretName` naming the Secret cert-manager issued (cert-manager
/// leaves a Secret in place when its Certificate goes): the operator deletes its Certificate, the
/// Secret stays, the cluster settles at OK on that Secret and serves TLS through `-rw`, and a TLS
/// writer across the switch loses no acknowledged write.
async fn switched_to_secret_name_deletes_the_certificate(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
) -> anyhow::Result<()> {
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), dial.clone(), "switch");
    writer.wait_for(300).await?;
    let secret = format!("{NAME}-tls");
    let valkeys: Api<vko_api::Valkey> = Api::namespaced(client.clone(), ns);
    let switched = Instant::now();
    let patch = serde_json::json!({"spec": {"tls": {"certManager": null, "secretName": secret}}});
    let generation = valkeys
        .patch(NAME, &PatchParams::default(), &Patch::Merge(patch))
        .await?
        .metadata
        .generation;
    certificates_become(client, ns, &[], "the Certificate deleted").await?;
    let deleted = switched.elapsed();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    ensure!(
        secrets.get_opt(&secret).await?.is_some(),
        "{secret} went with its Certificate"
    );
    eventually(
        Duration::from_secs(300),
        "OK with 3 ready on the switched spec",
        || async {
            let valkey = valkeys.get(NAME).await?;
            let observed = valkey.status.as_ref().and_then(|s| s.observed_generation);
            ensure!(observed >= generation, "observedGeneration {observed:?}");
            ensure!(
                valkey
                    .status
                    .as_ref()
                    .is_some_and(|s| s.rolling_update.is_none()),
                "a roll is in flight"
            );
            ensure!(ok_with(3)(&valkey), "{:?}", valkey.status);
            Ok(())
        },
    )
    .await?;
    eprintln!(
        "certManager switched to secretName {secret}: Certificate deleted after {deleted:?}, \
         the Secret kept, OK again after {:?}",
        switched.elapsed()
    );
    tls_through_rw(client, ns, dial).await?;
    no_acknowledged_write_lost(writer, client, ns, dial, "switch to secretName").await
}

/// Waits up to 60 s until the Certificates in `ns` are exactly `expected` (by name).
async fn certificates_become(
    client: &kube::Client,
    ns: &str,
    expected: &[String],
    what: &str,
) -> anyhow::Result<()> {
    let certificates = certificates(client, ns);
    eventually(Duration::from_secs(60), what, || async {
        let names: Vec<String> = certificates
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        ensure!(names == expected, "Certificates {names:?}");
        Ok(())
    })
    .await
}

/// A TLS `SET` and `GET` through `<name>-rw`'s ClusterIP, the certificate verified against the
/// Service's DNS name (the name clients use).
async fn tls_through_rw(client: &kube::Client, ns: &str, dial: &Dial) -> anyhow::Result<()> {
    let service = dial.names.rw_service();
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let ip = services
        .get(&service)
        .await?
        .spec
        .and_then(|spec| spec.cluster_ip)
        .with_context(|| format!("{service} has no ClusterIP"))?;
    let server_name = dial.names.service_fqdn(&service);
    // Eventually: kube-proxy programs the Service's rules on its own schedule after the
    // EndpointSlice changes (the full suite once saw `connection refused` right after PHASE OK,
    // kube-proxy's REJECT for a Service it still knew without endpoints).
    let valkey = eventually(
        Duration::from_secs(30),
        &format!("TLS to {service} ({ip}) as {server_name}"),
        || async {
            Ok(ValkeyClient::connect(&dial.options(&ip, TLS_PORT, server_name.clone())).await?)
        },
    )
    .await?;
    valkey.set("through-rw", b"issued by cert-manager").await?;
    let value = valkey.command(["GET", "through-rw"]).await?;
    ensure!(
        value == Reply::Text("issued by cert-manager".into()),
        "{value:?}"
    );
    eprintln!("TLS SET/GET through {service} ({ip}), verified as {server_name}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cert_manager_cluster_serves_only_tls_through_rw_and_hands_over_without_loss() {
    vko_valkey::install_default_crypto_provider();
    let test = OperatorTest::start("op-certmgr").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let outcome = async {
        let started = Instant::now();
        let yaml = format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\n\
             spec: {{replicas: 3, image: valkey/valkey:9.1, sentinel: {{enabled: true, replicas: 3}},\n\
             \x20 tls: {{enabled: true, certManager: {{issuer: {{kind: ClusterIssuer, name: {ISSUER}}}}}}}}}\n"
        );
        test.apply_until_ok(&yaml, NAME, 3, Duration::from_secs(300))
            .await?;
        eprintln!(
            "PHASE OK {:?} after the Valkey was created (cert-manager issued both Secrets)",
            started.elapsed()
        );
        let names = Names::new(NAME, &ns, DOMAIN)?;
        let dial = Dial {
            ca: issued_ca(&client, &ns, &format!("{NAME}-tls")).await?,
            names,
        };
        let sentinel_ca = issued_ca(&client, &ns, &format!("{NAME}-sentinel-tls")).await?;
        ensure!(sentinel_ca == dial.ca, "both tiers' certificates come from one CA");
        let master = serves_tls_only(&client, &ns, &dial).await?;
        eprintln!("TLS only, from cert-manager's certificates; master {master}");
        tls_through_rw(&client, &ns, &dial).await?;
        master_deletion_under_a_tls_writer(&client, &ns, &dial, &master).await?;
        renewal_rolls_without_loss(&client, &ns, &dial).await?;
        unified_certificate_migration(&client, &ns, &dial).await?;
        switched_to_secret_name_deletes_the_certificate(&client, &ns, &dial).await
    }
    .await;
    if let Err(error) = outcome {
        ha_support::dump_container_logs(&client, &ns, 60).await;
        panic!("{error:#}");
    }
    let valkeys: Api<vko_api::Valkey> = Api::namespaced(client.clone(), &ns);
    let valkey = valkeys.get(NAME).await.unwrap();
    assert!(ok_with(3)(&valkey), "{:?}", valkey.status);
    test.cleanup().await.unwrap();
}
