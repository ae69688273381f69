//! TLS from cert-manager (`spec.tls.certManager`), end to end: the testbed installs cert-manager
//! v1.11.5 from its own chart (controller, webhook and cainjector run as pods) with the CA
//! ClusterIssuer `vko-testbed-ca`, so the Certificates the operator writes are really issued.
//!
//! A 3 data + 3 Sentinel `Valkey` with `tls.certManager` naming that issuer reaches PHASE OK from
//! cert-manager's Secrets alone; then operator_tls's checks run against it: the plaintext ports
//! are closed, TLS serves and replicates, Sentinel answers over TLS with host names; a client of
//! `<name>-rw`'s ClusterIP verifies the certificate against the Service's DNS name; and the master
//! pod deleted under a TLS writer hands over with 0 acknowledged writes lost.
//!
//! cert-manager leaving and coming back, and a Certificate deleted when TLS is turned off, are in
//! operator_optional_objects (exclusive: they uninstall cert-manager under the operator).
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use crate::operator_tls::{
    DOMAIN, Dial, NAME, TLS_PORT, master_deletion_under_a_tls_writer, serves_tls_only,
};
use vko_e2e::{ha_support, operator_support};

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::Api;
use operator_support::{OperatorTest, ok_with};
use vko_render::Names;
use vko_valkey::{Reply, ValkeyClient};

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
    let valkey = ValkeyClient::connect(&dial.options(&ip, TLS_PORT, server_name.clone()))
        .await
        .with_context(|| format!("TLS to {service} ({ip}) as {server_name}"))?;
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
             spec: {{replicas: 3, image: valkey/valkey:8.0, sentinel: {{enabled: true, replicas: 3}},\n\
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
        master_deletion_under_a_tls_writer(&client, &ns, &dial, &master).await
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
