//! The sidecar reaches its own server over TLS the way it does in a pod: dial 127.0.0.1, verify
//! the certificate against the pod's FQDN, present the pod's certificate (the mounted
//! `tls.crt`/`tls.key`) as client certificate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::{FakePods, HOST, Proc, TempDir, eventually, free_port};
use vko_authority::InstanceRole;
use vko_sidecar::decide::LiveRole;
use vko_sidecar::node::Node;
use vko_sidecar::run::Keeper;
use vko_sidecar::topology::{Discovery, Endpoint, Topology};
use vko_valkey::{Dialer, TlsFiles, TlsMaterial};

const FQDN: &str = "vk-0.vk-headless.ns.svc.cluster.local";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn key(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "genpkey",
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-out",
            &format!("{name}.key"),
        ],
    );
}

/// A CA and a pod certificate for `FQDN` with the given extended key usages.
fn pki(dir: &Path, eku: &str) {
    key(dir, "ca");
    std::fs::write(
        dir.join("ca.ext"),
        "[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-new",
            "-key",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=vko test CA",
            "-extensions",
            "v3",
            "-config",
            "ca.ext",
        ],
    );
    key(dir, "tls");
    std::fs::write(
        dir.join("tls.ext"),
        format!("[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage={eku}\nsubjectAltName=DNS:{FQDN}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req", "-new", "-key", "tls.key", "-out", "tls.csr", "-subj", "/CN=vk-0",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "2",
            "-extfile",
            "tls.ext",
            "-extensions",
            "v3",
        ],
    );
}

async fn keeper_over_tls(eku: &str) -> Result<(LiveRole, InstanceRole), String> {
    let dir = TempDir::new("tls");
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
    let _server = Proc::spawn_for_test("valkey-server", &[conf.to_str().unwrap()], dir.path());
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
        },
        dialer: Dialer::new(None).with_tls(Some(TlsMaterial::Files(TlsFiles {
            ca: p("ca.crt").into(),
            cert: Some(p("tls.crt").into()),
            key: Some(p("tls.key").into()),
        }))),
        pods: pods.clone(),
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
