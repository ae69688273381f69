//! A real Valkey 9.1.2 Sentinel reloading its certificate in place (ADR 0053): it reads its TLS
//! files from the copy `vko-sidecar sentinel-tls-reload` keeps, with `tls-auto-reload-interval
//! 1`, while the test rewrites the "Secret volume" as the kubelet would. A certificate under the
//! same CA naming the pod is served within seconds; one that does not name the pod, and one from
//! another CA, never reach the Sentinel. Needs the 9.1.2 build `cargo xtask test` makes first
//! (`cargo xtask valkey build --version 9.1.2`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::{HOST, Proc, eventually, free_port, temp_dir};
use vko_sidecar::sentinel_tls::{MaterialPaths, SentinelTlsWatch, copy_initial_material};
use vko_testkit::make_cert;

const FQDN: &str = "vk-sentinel-0.vk-sentinel-headless.ns.svc.cluster.local";
const RELEASE: &str = "9.1.2";

const CA_EXT: &str = "[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";

fn leaf_ext(host: &str) -> String {
    format!(
        "[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
         extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=DNS:{host}\n"
    )
}

/// `secret/` gets `ca.crt` from `ca` and `tls.crt`/`tls.key` from `leaf`, as the kubelet would
/// rewrite a Secret volume.
fn put_secret(dir: &Path, ca: &str, leaf: &str) {
    let secret = dir.join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    for (from, to) in [
        (format!("{ca}.crt"), "ca.crt"),
        (format!("{leaf}.key"), "tls.key"),
        (format!("{leaf}.crt"), "tls.crt"),
    ] {
        std::fs::copy(dir.join(from), secret.join(to)).unwrap();
    }
}

fn fingerprint(dir: &Path, leaf: &str) -> String {
    let pem = std::fs::read(dir.join(format!("{leaf}.crt"))).unwrap();
    vko_valkey::certificate::leaf_fingerprint(&pem).unwrap()
}

async fn served(port: u16, ca: &[u8]) -> Option<String> {
    vko_valkey::served::served_certificate(
        &format!("{HOST}:{port}"),
        FQDN,
        ca,
        Duration::from_secs(3),
    )
    .await
    .ok()
}

#[tokio::test]
async fn a_9_1_sentinel_serves_a_checked_new_certificate_and_nothing_else() {
    let bin = vko_testbed::kubelet::images::valkey_bin_dir(RELEASE).join("valkey-sentinel");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo xtask valkey build --version {RELEASE}`",
        bin.display()
    );
    let tmp = temp_dir("sentinel-tls");
    let dir = tmp.path();
    make_cert(dir, "ca", None, "/CN=vko test CA", CA_EXT);
    make_cert(
        dir,
        "first",
        Some("ca"),
        "/CN=vk-sentinel-0",
        &leaf_ext(FQDN),
    );
    make_cert(
        dir,
        "second",
        Some("ca"),
        "/CN=vk-sentinel-0",
        &leaf_ext(FQDN),
    );
    make_cert(
        dir,
        "elsewhere",
        Some("ca"),
        "/CN=other",
        &leaf_ext("other.example"),
    );
    make_cert(dir, "ca2", None, "/CN=vko test CA 2", CA_EXT);
    make_cert(
        dir,
        "next",
        Some("ca2"),
        "/CN=vk-sentinel-0",
        &leaf_ext(FQDN),
    );
    put_secret(dir, "ca", "first");
    let paths = MaterialPaths {
        ca: dir.join("secret/ca.crt"),
        cert: dir.join("secret/tls.crt"),
        key: dir.join("secret/tls.key"),
        active_dir: dir.join("active"),
    };
    std::fs::create_dir_all(&paths.active_dir).unwrap();
    copy_initial_material(&paths).unwrap();

    let port = free_port();
    let active = |file: &str| paths.active_dir.join(file).display().to_string();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {port}\nbind {HOST}\nprotected-mode no\ndir {}\n\
             tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients optional\n\
             tls-auto-reload-interval 1\nsentinel monitor m {HOST} {} 2\n",
            dir.display(),
            active("tls.crt"),
            active("tls.key"),
            active("ca.crt"),
            free_port(),
        ),
    )
    .unwrap();
    let sentinel = Proc::spawn(bin.to_str().unwrap(), &[&conf], dir, "sentinel");
    sentinel.wait_listening(port, "valkey-sentinel 9.1.2");
    let ca = std::fs::read(dir.join("ca.crt")).unwrap();
    assert_eq!(served(port, &ca).await, Some(fingerprint(dir, "first")));

    let watch = SentinelTlsWatch {
        paths: paths.clone(),
        trust: Some(vko_render::tls_trust_fingerprint(&ca)),
        host: FQDN.to_owned(),
        local: format!("{HOST}:{port}"),
    };
    let reloader = tokio::spawn(vko_sidecar::sentinel_tls::reload_loop(watch));

    // A new certificate under the same CA naming the pod: served, by the same process.
    put_secret(dir, "ca", "second");
    let wanted = fingerprint(dir, "second");
    eventually(
        "the new certificate served",
        Duration::from_secs(15),
        || {
            let (ca, wanted) = (ca.clone(), wanted.clone());
            async move { (served(port, &ca).await? == wanted).then_some(()) }
        },
    )
    .await;

    // Not naming the pod, or from another CA: refused, the Sentinel keeps serving `second`.
    for (ca_name, leaf) in [("ca", "elsewhere"), ("ca2", "next")] {
        put_secret(dir, ca_name, leaf);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            served(port, &ca).await,
            Some(wanted.clone()),
            "after {leaf} from {ca_name}"
        );
        let copied = std::fs::read(paths.active_dir.join("tls.crt")).unwrap();
        let second = std::fs::read(dir.join("second.crt")).unwrap();
        assert_eq!(copied, second, "{leaf} from {ca_name} was copied");
    }
    let copied_ca = std::fs::read(paths.active_dir.join("ca.crt")).unwrap();
    assert_eq!(copied_ca, ca, "the CA copy is never replaced");
    assert!(
        sentinel
            .log_text()
            .contains("TLS materials reloaded successfully"),
        "{}",
        sentinel.log_text()
    );
    reloader.abort();
}
