//! Which certificate does a TLS port serve right now? One handshake, verified against the CA the
//! caller trusts and the host name the server must present, and the leaf's fingerprint
//! ([`crate::certificate::der_fingerprint`]). The sidecar uses it to prove an in-place reload took
//! (ADR 0038); the tests use it to see every port's certificate.

use std::sync::Arc;
use std::time::Duration;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};

use crate::certificate::der_fingerprint;
use crate::client::crypto_provider;
use crate::error::{Error, Result};

/// The fingerprint of the leaf certificate `addr` (`host:port`) serves, after a handshake that
/// verifies it against `ca_pem` for `server_name`; no client certificate is presented (the
/// servers run `tls-auth-clients optional`). Bounded by `timeout` (connect and handshake).
pub async fn served_certificate(
    addr: &str,
    server_name: &str,
    ca_pem: &[u8],
    timeout: Duration,
) -> Result<String> {
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        let ca = ca.map_err(|e| Error::InvalidOptions(format!("ca.crt is not valid PEM: {e}")))?;
        roots
            .add(ca)
            .map_err(|e| Error::InvalidOptions(format!("ca.crt: {e}")))?;
    }
    let config = rustls::ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::InvalidOptions(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| Error::InvalidOptions(format!("server name {server_name:?}: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let handshake = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused {
                    addr: addr.to_owned(),
                },
                _ => Error::Connection {
                    addr: addr.to_owned(),
                    detail: e.to_string(),
                },
            })?;
        let stream = connector
            .connect(name, tcp)
            .await
            .map_err(|e| Error::Tls(format!("handshake with {addr}: {e}")))?;
        let (_, session) = stream.get_ref();
        session
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| der_fingerprint(leaf))
            .ok_or_else(|| Error::Tls(format!("{addr} presented no certificate")))
    };
    tokio::time::timeout(timeout, handshake)
        .await
        .map_err(|_| Error::Timeout {
            what: format!("TLS handshake with {addr}"),
            after: timeout,
        })?
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls_pki_types::PrivateKeyDer;

    const HOST: &str = "v-0.v-headless.ns.svc.cluster.local";

    fn material() -> (String, Vec<u8>, String, Vec<u8>) {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::default();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec![HOST.to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (ca_pem, leaf.der().to_vec(), leaf.pem(), key.serialize_der())
    }

    /// A TLS server on a free port serving `cert_der`; its address.
    async fn serve(cert_der: Vec<u8>, key_der: Vec<u8>) -> String {
        let config = rustls::ServerConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert_der)],
                PrivateKeyDer::try_from(key_der).unwrap(),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(tcp).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn the_served_leaf_is_fingerprinted_after_verification() {
        let (ca_pem, leaf_der, leaf_pem, key_der) = material();
        let addr = serve(leaf_der.clone(), key_der).await;
        let served = served_certificate(&addr, HOST, ca_pem.as_bytes(), Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(served, der_fingerprint(&leaf_der));
        // The same fingerprint the operator takes from the Secret's tls.crt.
        assert_eq!(
            served,
            crate::certificate::leaf_fingerprint(leaf_pem.as_bytes()).unwrap()
        );
    }

    #[tokio::test]
    async fn a_certificate_from_another_ca_or_for_another_name_is_refused() {
        let (_, leaf_der, _, key_der) = material();
        let (other_ca, ..) = material();
        let addr = serve(leaf_der, key_der).await;
        let timeout = Duration::from_secs(5);
        let error = served_certificate(&addr, HOST, other_ca.as_bytes(), timeout)
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "Tls", "{error}");

        let (ca_pem, leaf_der, _, key_der) = material();
        let addr = serve(leaf_der, key_der).await;
        let error = served_certificate(&addr, "v-1.elsewhere", ca_pem.as_bytes(), timeout)
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "Tls", "{error}");
    }

    #[tokio::test]
    async fn nothing_listening_is_a_refused_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let (ca_pem, ..) = material();
        let error = served_certificate(&addr, HOST, ca_pem.as_bytes(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert_eq!(error.reason(), "ConnectionRefused", "{error}");
    }
}
