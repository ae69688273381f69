//! Can this certificate serve a Valkey cluster? A pure check of user-provided TLS material, done
//! before any pod is started with it.
//!
//! Every data and Sentinel pod presents the same certificate both as a server and, when it
//! replicates or talks to a peer, as a client; valkey-server verifies a presented client
//! certificate against `ca.crt`. So a certificate that lacks the clientAuth usage, is not issued
//! by `ca.crt`, is expired, or does not name the pods' host names gives a cluster that starts and
//! then never replicates (measured with valkey 8.0.1: `master_link_status:down`, "unsupported
//! certificate"). The check uses webpki, the verifier rustls (and so the operator, sidecar and
//! observer) uses when they dial the pods.

pub use rustls_pki_types::UnixTime;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use webpki::{EndEntityCert, KeyUsage};

/// What is wrong with the material, one sentence per problem; empty when it can serve every
/// `host_names` entry as server and client.
pub fn serving_certificate_problems(
    cert_pem: &[u8],
    ca_pem: &[u8],
    host_names: &[String],
    now: UnixTime,
) -> Vec<String> {
    let mut problems = Vec::new();
    let cas: Vec<CertificateDer<'static>> =
        match CertificateDer::pem_slice_iter(ca_pem).collect::<Result<Vec<_>, _>>() {
            Ok(cas) if !cas.is_empty() => cas,
            Ok(_) => return vec!["ca.crt holds no PEM certificate".to_owned()],
            Err(error) => return vec![format!("ca.crt is not valid PEM: {error}")],
        };
    let mut anchors = Vec::new();
    for (index, ca) in cas.iter().enumerate() {
        match webpki::anchor_from_trusted_cert(ca) {
            Ok(anchor) => anchors.push(anchor),
            Err(error) => problems.push(format!(
                "certificate {} of ca.crt cannot be parsed: {error}",
                index + 1
            )),
        }
    }
    let chain: Vec<CertificateDer<'static>> =
        match CertificateDer::pem_slice_iter(cert_pem).collect::<Result<Vec<_>, _>>() {
            Ok(chain) if !chain.is_empty() => chain,
            Ok(_) => {
                problems.push("tls.crt holds no PEM certificate".to_owned());
                return problems;
            }
            Err(error) => {
                problems.push(format!("tls.crt is not valid PEM: {error}"));
                return problems;
            }
        };
    let Some((leaf, intermediates)) = chain.split_first() else {
        return problems;
    };
    let leaf = match EndEntityCert::try_from(leaf) {
        Ok(leaf) => leaf,
        Err(error) => {
            problems.push(format!("tls.crt cannot be parsed: {error}"));
            return problems;
        }
    };
    let verify = |usage: KeyUsage| {
        leaf.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            intermediates,
            now,
            usage,
            None,
            None,
        )
        .map(|_| ())
    };
    match verify(KeyUsage::server_auth()) {
        Err(error) => problems.push(format!(
            "tls.crt does not verify against ca.crt as a server certificate: {}",
            describe(&error)
        )),
        // Only worth saying when the chain itself is fine.
        Ok(()) => {
            if let Err(error) = verify(KeyUsage::client_auth()) {
                problems.push(format!(
                    "tls.crt cannot be used as a client certificate ({}): the pods present it to \
                     each other when they replicate and valkey-server verifies it, so add the \
                     clientAuth extended key usage",
                    describe(&error)
                ));
            }
        }
    }
    let uncovered: Vec<&str> = host_names
        .iter()
        .filter(|name| {
            ServerName::try_from(name.as_str())
                .map_err(|_| ())
                .and_then(|server_name| {
                    leaf.verify_is_valid_for_subject_name(&server_name)
                        .map_err(|_| ())
                })
                .is_err()
        })
        .map(String::as_str)
        .collect();
    if let Some(first) = uncovered.first() {
        problems.push(format!(
            "tls.crt does not name {} of the {} pod host names (first: {first}); add them, e.g. as \
             wildcard DNS names of the headless Services",
            uncovered.len(),
            host_names.len()
        ));
    }
    problems
}

fn describe(error: &webpki::Error) -> String {
    match error {
        webpki::Error::UnknownIssuer => "not issued by ca.crt".to_owned(),
        webpki::Error::CertExpired { .. } => "expired".to_owned(),
        webpki::Error::CertNotValidYet { .. } => "not valid yet".to_owned(),
        webpki::Error::RequiredEkuNotFoundContext(_) => {
            "its extended key usages do not include this one".to_owned()
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    use std::time::Duration;

    const HOSTS: [&str; 2] = [
        "v-0.v-headless.ns.svc.cluster.local",
        "v-sentinel-0.v-sentinel-headless.ns.svc.cluster.local",
    ];

    struct Ca {
        pem: String,
        issuer: Issuer<'static, KeyPair>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            pem,
            issuer: Issuer::new(params, key),
        }
    }

    fn leaf(ca: &Ca, dns: &[&str], usages: Vec<ExtendedKeyUsagePurpose>) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.extended_key_usages = usages;
        params.signed_by(&key, &ca.issuer).unwrap().pem()
    }

    fn hosts() -> Vec<String> {
        HOSTS.iter().map(|h| (*h).to_owned()).collect()
    }

    fn problems(cert: &str, ca: &str) -> Vec<String> {
        serving_certificate_problems(cert.as_bytes(), ca.as_bytes(), &hosts(), UnixTime::now())
    }

    const WILDCARDS: [&str; 2] = [
        "*.v-headless.ns.svc.cluster.local",
        "*.v-sentinel-headless.ns.svc.cluster.local",
    ];

    #[test]
    fn a_certificate_for_both_usages_naming_every_host_passes() {
        let ca = ca("ca");
        let both = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        assert_eq!(
            problems(&leaf(&ca, &WILDCARDS, both), &ca.pem),
            Vec::<String>::new()
        );
        // No extended key usage at all allows every usage.
        assert_eq!(
            problems(&leaf(&ca, &WILDCARDS, Vec::new()), &ca.pem),
            Vec::<String>::new()
        );
    }

    #[test]
    fn server_auth_only_is_refused_naming_client_auth() {
        let ca = ca("ca");
        let found = problems(
            &leaf(&ca, &WILDCARDS, vec![ExtendedKeyUsagePurpose::ServerAuth]),
            &ca.pem,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("clientAuth") && found[0].contains("do not include this one"),
            "{found:?}"
        );
    }

    #[test]
    fn another_issuer_is_refused() {
        let ours = ca("ours");
        let theirs = ca("theirs");
        let found = problems(&leaf(&theirs, &WILDCARDS, Vec::new()), &ours.pem);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("not issued by ca.crt"), "{found:?}");
    }

    #[test]
    fn uncovered_host_names_are_counted_and_the_first_named() {
        let ca = ca("ca");
        let found = problems(
            &leaf(&ca, &["*.v-headless.ns.svc.cluster.local"], Vec::new()),
            &ca.pem,
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("1 of the 2 pod host names")
                && found[0].contains("v-sentinel-0.v-sentinel-headless"),
            "{found:?}"
        );
    }

    #[test]
    fn expiry_is_judged_at_the_given_time() {
        let ca = ca("ca");
        let cert = leaf(&ca, &WILDCARDS, Vec::new());
        // rcgen's default validity ends in 4096; a check far beyond it sees an expired chain.
        let far = UnixTime::since_unix_epoch(Duration::from_secs(2200 * 365 * 24 * 3600));
        let found = serving_certificate_problems(cert.as_bytes(), ca.pem.as_bytes(), &hosts(), far);
        assert!(found.iter().any(|p| p.contains("expired")), "{found:?}");
    }

    #[test]
    fn garbage_is_named_not_a_panic() {
        let ca = ca("ca");
        assert_eq!(
            problems("not a certificate", &ca.pem),
            ["tls.crt holds no PEM certificate"]
        );
        assert_eq!(problems("", ""), ["ca.crt holds no PEM certificate"]);
        let broken = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(problems(broken, &ca.pem).len(), 1);
    }
}
