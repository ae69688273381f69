//! Certificates for the TLS end-to-end tests (`operator_tls`, `operator_metrics`): a CA and pod
//! certificates for every host name and Service a Valkey's clients may dial, made with rcgen.

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use vko_render::Names;

/// A self-signed CA: its certificate and what signs with it.
pub struct Ca {
    pub certificate: Certificate,
    pub issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    pub fn new(common_name: &str) -> anyhow::Result<Ca> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let certificate = params.self_signed(&key)?;
        Ok(Ca {
            certificate,
            issuer: Issuer::new(params, key),
        })
    }
}

/// The parameters of a pod certificate for the Valkey `names` (data pods, and the Sentinel pods
/// too when `sentinel`): 127.0.0.1, localhost, every pod by its wildcard host name and every
/// Service by its full, namespace and short name; serverAuth and clientAuth (the servers and the
/// exporter present it as a client certificate too).
pub fn pod_certificate_params(
    names: &Names,
    ns: &str,
    sentinel: bool,
) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, format!("{}.{ns}", names.name()));
    let mut headless = vec![names.headless_service()];
    if sentinel {
        headless.push(names.sentinel_headless_service());
    }
    let mut dns = vec!["localhost".to_owned()];
    for service in &headless {
        dns.push(format!("*.{}", names.service_fqdn(service)));
    }
    let mut services = headless;
    services.extend([names.rw_service(), names.r_service(), names.all_service()]);
    for service in services {
        dns.push(names.service_fqdn(&service));
        dns.push(format!("{service}.{ns}.svc"));
        dns.push(service);
    }
    let mut sans = vec![SanType::IpAddress(std::net::IpAddr::V4(
        std::net::Ipv4Addr::LOCALHOST,
    ))];
    for name in dns {
        sans.push(SanType::DnsName(name.try_into()?));
    }
    params.subject_alt_names = sans;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}
