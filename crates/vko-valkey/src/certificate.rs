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
    let uncovered = names_not_covered(&leaf, host_names);
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

/// The entries of `host_names` the leaf certificate is not valid for.
fn names_not_covered<'a>(leaf: &EndEntityCert<'_>, host_names: &'a [String]) -> Vec<&'a str> {
    host_names
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
        .collect()
}

/// The entries of `host_names` the first certificate of `cert_pem` does not name, or why it could
/// not be read. For material an issuer wrote (cert-manager): chain and usages are the issuer's
/// business, but a certificate re-issued for new names (the unified certificate) must not be
/// mounted by the pods it does not name yet.
pub fn host_names_not_covered(
    cert_pem: &[u8],
    host_names: &[String],
) -> Result<Vec<String>, String> {
    let leaf = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .ok_or_else(|| "tls.crt holds no PEM certificate".to_owned())?
        .map_err(|error| format!("tls.crt is not valid PEM: {error}"))?;
    let leaf = EndEntityCert::try_from(&leaf)
        .map_err(|error| format!("tls.crt cannot be parsed: {error}"))?;
    Ok(names_not_covered(&leaf, host_names)
        .into_iter()
        .map(str::to_owned)
        .collect())
}

/// The SHA-256 (lower-case hex) of a certificate's DER: how a served certificate is compared
/// with a Secret's (`vko.gtrfc.com/tls-certificate`, ADR 0038).
pub fn der_fingerprint(der: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(der))
}

/// [`der_fingerprint`] of the first certificate in `cert_pem` (the leaf of `tls.crt`), or why it
/// could not be read.
pub fn leaf_fingerprint(cert_pem: &[u8]) -> Result<String, String> {
    let leaf = CertificateDer::pem_slice_iter(cert_pem)
        .next()
        .ok_or_else(|| "tls.crt holds no PEM certificate".to_owned())?
        .map_err(|error| format!("tls.crt is not valid PEM: {error}"))?;
    Ok(der_fingerprint(&leaf))
}

/// What a data pod's sidecar does about the certificate its server serves (ADR 0038).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadPlan {
    /// What the server serves is not known yet: a handshake first.
    Measure,
    /// The server serves the certificate in the files.
    Current,
    /// The files carry another `ca.crt` than the pod was created for. A server reloads its CA
    /// with its certificate, and mid-roll its peers still present certificates of the old
    /// chain: the operator rolls the pods instead (the data template carries the CA's
    /// fingerprint).
    AwaitRoll,
    /// The files' certificate cannot serve this pod (the reasons); the server keeps serving
    /// the one it has.
    Refuse(String),
    /// Same CA, another usable certificate: the server re-reads its files in place.
    Reload,
}

/// [`ReloadPlan`] for a server that serves the certificate with fingerprint `served` (`None`: not
/// measured yet) and whose Secret volume now holds `ca_pem` and `cert_pem`; `same_trust`: that
/// `ca_pem` is the CA the pod was created for (its template's fingerprint), `host_name` the pod's
/// own name, which the certificate must carry.
pub fn reload_plan(
    same_trust: bool,
    ca_pem: &[u8],
    cert_pem: &[u8],
    host_name: &str,
    served: Option<&str>,
    now: UnixTime,
) -> ReloadPlan {
    let Some(served) = served else {
        return ReloadPlan::Measure;
    };
    match leaf_fingerprint(cert_pem) {
        Ok(on_disk) if on_disk == served => return ReloadPlan::Current,
        Ok(_) => {}
        Err(problem) => return ReloadPlan::Refuse(problem),
    }
    if !same_trust {
        return ReloadPlan::AwaitRoll;
    }
    let problems = serving_certificate_problems(cert_pem, ca_pem, &[host_name.to_owned()], now);
    if problems.is_empty() {
        ReloadPlan::Reload
    } else {
        ReloadPlan::Refuse(problems.join("; "))
    }
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
    fn issued_material_is_checked_for_its_names_only() {
        let ca = ca("ca");
        let data_only = leaf(&ca, &["*.v-headless.ns.svc.cluster.local"], Vec::new());
        assert_eq!(
            host_names_not_covered(data_only.as_bytes(), &hosts()),
            Ok(vec![HOSTS[1].to_owned()])
        );
        // Another issuer's certificate, server-only: not this check's business.
        let theirs = ca_other_leaf();
        assert_eq!(
            host_names_not_covered(theirs.as_bytes(), &hosts()),
            Ok(Vec::new())
        );
        let error = host_names_not_covered(b"garbage", &hosts()).unwrap_err();
        assert!(error.contains("no PEM certificate"), "{error}");
    }

    fn ca_other_leaf() -> String {
        leaf(
            &ca("theirs"),
            &WILDCARDS,
            vec![ExtendedKeyUsagePurpose::ServerAuth],
        )
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

    #[test]
    fn a_sidecar_reloads_only_a_usable_certificate_under_the_ca_it_started_with() {
        let ca_one = ca("one");
        let ca_two = ca("two");
        let host = HOSTS[0];
        let old = leaf(&ca_one, &WILDCARDS, Vec::new());
        let new = leaf(&ca_one, &WILDCARDS, Vec::new());
        let served = leaf_fingerprint(old.as_bytes()).unwrap();
        let plan = |ca: &str, cert: &str, served: Option<&str>| {
            reload_plan(
                ca == ca_one.pem,
                ca.as_bytes(),
                cert.as_bytes(),
                host,
                served,
                UnixTime::now(),
            )
        };
        assert_eq!(plan(&ca_one.pem, &new, None), ReloadPlan::Measure);
        assert_eq!(plan(&ca_one.pem, &old, Some(&served)), ReloadPlan::Current);
        assert_eq!(plan(&ca_one.pem, &new, Some(&served)), ReloadPlan::Reload);
        // A new CA in the files: the operator rolls the pod, even for a certificate it issued.
        let from_two = leaf(&ca_two, &WILDCARDS, Vec::new());
        assert_eq!(
            plan(&ca_two.pem, &from_two, Some(&served)),
            ReloadPlan::AwaitRoll
        );
        // Whatever ca.crt says, the served certificate is the measure: nothing to do.
        assert_eq!(plan(&ca_two.pem, &old, Some(&served)), ReloadPlan::Current);
        // Not from the CA the server trusts, not naming the pod, not for clients, not PEM.
        for (cert, says) in [
            (from_two.clone(), "not issued by ca.crt"),
            (
                leaf(&ca_one, &["other.example"], Vec::new()),
                "does not name 1 of the 1",
            ),
            (
                leaf(
                    &ca_one,
                    &WILDCARDS,
                    vec![ExtendedKeyUsagePurpose::ServerAuth],
                ),
                "clientAuth",
            ),
            ("garbage".to_owned(), "no PEM certificate"),
        ] {
            match plan(&ca_one.pem, &cert, Some(&served)) {
                ReloadPlan::Refuse(problem) => assert!(problem.contains(says), "{problem}"),
                other => panic!("{says}: {other:?}"),
            }
        }
    }

    #[test]
    fn the_fingerprint_is_the_leafs_der_digest() {
        let ca = ca("ca");
        let cert = leaf(&ca, &WILDCARDS, Vec::new());
        let der = CertificateDer::pem_slice_iter(cert.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let fingerprint = leaf_fingerprint(cert.as_bytes()).unwrap();
        assert_eq!(fingerprint, der_fingerprint(&der));
        assert_eq!(fingerprint.len(), 64);
        // The CA appended to tls.crt (a chain) does not change it.
        let chain = format!("{cert}{}", ca.pem);
        assert_eq!(leaf_fingerprint(chain.as_bytes()).unwrap(), fingerprint);
        assert!(leaf_fingerprint(b"").is_err());
    }
}
