//! The sidecar reaches its own server over TLS the way it does in a pod: dial 127.0.0.1, verify
//! the certificate against the pod's FQDN, present the pod's certificate (the mounted
//! `tls.crt`/`tls.key`) as client certificate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{FakePods, HOST, Proc, eventually, free_port, temp_dir};
use vko_authority::InstanceRole;
use vko_sidecar::decide::LiveRole;
use vko_sidecar::node::Node;
use vko_sidecar::run::Keeper;
use vko_sidecar::topology::{Discovery, Endpoint, Topology};
use vko_testkit::make_cert;
use vko_valkey::{Dialer, TlsFiles, TlsMaterial};

const FQDN: &str = "vk-0.vk-headless.ns.svc.cluster.local";

/// A CA and a pod certificate for `FQDN` with the given extended key usages.
fn pki(dir: &Path, eku: &str) {
    let ca_ext = "[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";
    make_cert(dir, "ca", None, "/CN=vko test CA", ca_ext);
    let tls_ext = format!(
        "[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={eku}\nsubjectAltName=DNS:{FQDN}\n"
    );
    make_cert(dir, "tls", Some("ca"), "/CN=vk-0", &tls_ext);
}

async fn keeper_over_tls(eku: &str) -> Result<(LiveRole, InstanceRole), String> {
    let dir = temp_dir("tls");
    pki(dir.path(), eku);
    let port = free_port();
    let p = |f: &str| dir.path().join(f).to_str().unwrap().to_owned();
    let conf = dir.path().join("valkey.conf");
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {port}\nbind {HOST}\nprotected-mode no\nsave \"\"\nappendonly no\ndir {}\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-replication yes\ntls-auth-clients optional\n",
            dir.path().display(),
            p("tls.crt"),
            p("tls.key"),
            p("ca.crt")
        ),
    )
    .unwrap();
    let _server = Proc::spawn("valkey-server", &[&conf], dir.path(), "valkey-server");
    eventually("TLS server listens", Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect((HOST, port)).await.ok()
    })
    .await;
    let pods = Arc::new(FakePods::default());
    let node = Node {
        topology: Topology {
            me: Endpoint::new(FQDN, port),
            local: Endpoint::new(HOST, port),
            monitor: None,
            discovery: Discovery::Static {
                peers: vec![],
                sentinels: vec![],
            },
            replica_config: dir.path().join("none"),
            sentinel_cache: Default::default(),
            seen_replicas: Default::default(),
        },
        dialer: Dialer::new(None).with_tls(Some(TlsMaterial::Files(TlsFiles {
            ca: p("ca.crt").into(),
            cert: Some(p("tls.crt").into()),
            key: Some(p("tls.key").into()),
        }))),
        pods: pods.clone(),
        lease: None,
        my_pod: "vk-0".into(),
        active_config: conf.clone(),
    };
    let mut keeper = Keeper::new(Arc::new(node));
    let tick = keeper.tick().await.map_err(|e| e.to_string())?;
    assert_eq!(pods.last_label("vk-0"), Some(tick.label));
    Ok((tick.live, tick.label))
}

#[tokio::test]
async fn local_server_over_tls_with_the_pod_certificate() {
    assert_eq!(
        keeper_over_tls("serverAuth,clientAuth").await.unwrap(),
        (LiveRole::Master, InstanceRole::Master)
    );
}

/// Valkey verifies a presented client certificate even with `tls-auth-clients optional`, so a
/// pod certificate without `clientAuth` (a user-provided Secret) would make every connection
/// fail; the sidecar then connects without presenting it.
#[tokio::test]
async fn a_pod_certificate_without_client_auth_still_reaches_the_server() {
    assert_eq!(
        keeper_over_tls("serverAuth").await.unwrap(),
        (LiveRole::Master, InstanceRole::Master)
    );
}
