//! TLS against a real valkey-server with a throwaway CA made by the `openssl` CLI.

// Test helpers outside #[test] fns unwrap too: a failed setup should fail the test loudly.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::{Server, TempDir, temp_dir};
use vko_testkit::make_cert;
use vko_valkey::{ConnectOptions, TlsOptions, ValkeyClient};

struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = temp_dir("pki");
        let ca_ext = "[req]\ndistinguished_name=dn\n[dn]\n[v3]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n";
        make_cert(dir.path(), "ca", None, "/CN=vko test CA", ca_ext);
        make_cert(dir.path(), "other-ca", None, "/CN=untrusted CA", ca_ext);
        make_cert(
            dir.path(),
            "server",
            Some("ca"),
            "/CN=valkey.test",
            "[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n\
             subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:valkey.test\n",
        );
        make_cert(
            dir.path(),
            "client",
            Some("ca"),
            "/CN=operator",
            "[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        );
        make_cert(
            dir.path(),
            "rogue-client",
            Some("other-ca"),
            "/CN=rogue",
            "[v3]\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
        );
        Pki { dir }
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).to_str().unwrap().to_owned()
    }

    fn read(&self, file: &str) -> Vec<u8> {
        std::fs::read(self.dir.path().join(file)).unwrap()
    }

    fn server(&self, auth_clients: &str) -> Server {
        Server::start_tls(
            temp_dir("tls-server"),
            &[
                "--tls-cert-file",
                &self.path("server.crt"),
                "--tls-key-file",
                &self.path("server.key"),
                "--tls-ca-cert-file",
                &self.path("ca.crt"),
                "--tls-auth-clients",
                auth_clients,
            ],
        )
    }

    fn opts(&self, server: &Server, tls: TlsOptions) -> ConnectOptions {
        let mut opts = ConnectOptions::new("127.0.0.1", server.port);
        opts.connect_timeout = Duration::from_secs(3);
        opts.command_timeout = Duration::from_secs(3);
        opts.tls = Some(tls);
        opts
    }

    fn ca_only(&self) -> TlsOptions {
        TlsOptions {
            ca_pem: self.read("ca.crt"),
            ..TlsOptions::default()
        }
    }

    fn with_client_cert(&self, name: &str) -> TlsOptions {
        TlsOptions {
            client_cert_pem: Some(self.read(&format!("{name}.crt"))),
            client_key_pem: Some(self.read(&format!("{name}.key"))),
            ..self.ca_only()
        }
    }
}

#[tokio::test]
async fn tls_without_client_certificates() {
    let pki = Pki::new();
    let server = pki.server("no");

    // Verified against the IP SAN.
    let client = ValkeyClient::connect(&pki.opts(&server, pki.ca_only()))
        .await
        .unwrap();
    client.ping().await.unwrap();
    client.set("k", b"v").await.unwrap();
    assert_eq!(client.get("k").await.unwrap(), Some(b"v".to_vec()));

    // Dial the IP, verify a DNS name (how the operator dials pods).
    let by_name = TlsOptions {
        server_name: Some("valkey.test".into()),
        ..pki.ca_only()
    };
    ValkeyClient::connect(&pki.opts(&server, by_name))
        .await
        .unwrap()
        .ping()
        .await
        .unwrap();

    let wrong_name = TlsOptions {
        server_name: Some("other.test".into()),
        ..pki.ca_only()
    };
    let err = ValkeyClient::connect(&pki.opts(&server, wrong_name))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "Tls", "{err}");

    let untrusted = TlsOptions {
        ca_pem: pki.read("other-ca.crt"),
        ..TlsOptions::default()
    };
    let err = ValkeyClient::connect(&pki.opts(&server, untrusted))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "Tls", "{err}");

    // Plain TCP to a TLS port does not get through the handshake.
    let mut plain = pki.opts(&server, pki.ca_only());
    plain.tls = None;
    plain.connect_timeout = Duration::from_secs(1);
    let err = ValkeyClient::connect(&plain).await.unwrap_err();
    assert_eq!(err.reason(), "ConnectionFailed", "{err}");
}

#[tokio::test]
async fn tls_with_required_client_certificates() {
    let pki = Pki::new();
    let server = pki.server("yes");

    let client = ValkeyClient::connect(&pki.opts(&server, pki.with_client_cert("client")))
        .await
        .unwrap();
    client.ping().await.unwrap();
    assert_eq!(client.info_server().await.unwrap().version(), "8.0.1");

    let err = ValkeyClient::connect(&pki.opts(&server, pki.ca_only()))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "Tls", "no client certificate: {err}");

    let err = ValkeyClient::connect(&pki.opts(&server, pki.with_client_cert("rogue-client")))
        .await
        .unwrap_err();
    assert_eq!(
        err.reason(),
        "Tls",
        "client certificate from another CA: {err}"
    );
}

#[tokio::test]
async fn bad_tls_options_are_rejected_before_dialing() {
    let pki = Pki::new();
    let opts = |tls: TlsOptions| {
        let mut opts = ConnectOptions::new("127.0.0.1", 1);
        opts.tls = Some(tls);
        opts
    };
    let cert_without_key = TlsOptions {
        client_cert_pem: Some(pki.read("client.crt")),
        ..pki.ca_only()
    };
    let no_ca = TlsOptions::default();
    let bad_name = TlsOptions {
        server_name: Some("not a name!".into()),
        ..pki.ca_only()
    };
    let key_is_not_a_key = TlsOptions {
        client_cert_pem: Some(pki.read("client.crt")),
        client_key_pem: Some(pki.read("client.crt")),
        ..pki.ca_only()
    };
    for tls in [cert_without_key, no_ca, bad_name, key_is_not_a_key] {
        let err = ValkeyClient::connect(&opts(tls)).await.unwrap_err();
        assert_eq!(err.reason(), "InvalidOptions", "{err}");
    }
}

#[tokio::test]
async fn crypto_provider_install_is_idempotent() {
    // The binary may have installed a provider already; the library must not panic either way.
    let _ = rustls::crypto::ring::default_provider().install_default();
    vko_valkey::install_default_crypto_provider();
    vko_valkey::install_default_crypto_provider();
    assert!(rustls::crypto::CryptoProvider::get_default().is_some());
}
