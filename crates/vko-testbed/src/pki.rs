//! The testbed's own PKI, generated fresh for every testbed and written as PEM files: a CA, the API
//! server's serving certificate, client certificates for the admin and each control-plane component,
//! the API server's client certificate towards kubelets, and the service-account signing key pair.
//!
//! ECDSA P-256 everywhere: fast to generate (a testbed starts in seconds) and accepted by Go and rustls.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::{Error, Result};

/// The API server's address on the bridge: what every client and pod connects to.
pub const APISERVER_BRIDGE_IP: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The first address of the Service CIDR: the ClusterIP of `default/kubernetes`.
pub const KUBERNETES_SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 1);
/// DNS names the API server's certificate is valid for.
pub const APISERVER_DNS_NAMES: [&str; 5] = [
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
];

/// The user the operator under test authenticates as (no groups: it gets exactly what RBAC grants it,
/// which is how the end-to-end suite exercises the chart's ClusterRole).
pub const E2E_OPERATOR_USER: &str = "vko-e2e-operator";
/// File stem of that user's certificate and key (and of `operator.kubeconfig`).
pub const E2E_OPERATOR_STEM: &str = "operator";

/// Client identities of the testbed: (file stem, common name, organization).
const CLIENTS: [(&str, &str, Option<&str>); 6] = [
    ("admin", "admin", Some("system:masters")),
    (
        "kube-controller-manager",
        "system:kube-controller-manager",
        None,
    ),
    ("kube-scheduler", "system:kube-scheduler", None),
    // For `kubectl logs/exec`: the API server authenticates to the kubelet API with this one.
    (
        "apiserver-kubelet-client",
        "kube-apiserver-kubelet-client",
        Some("system:masters"),
    ),
    (E2E_OPERATOR_STEM, E2E_OPERATOR_USER, None),
    // Bootstrap RBAC binds this user to the ClusterRole system:node-proxier.
    (crate::kube_proxy::STEM, crate::kube_proxy::USER, None),
];

const CA_COMMON_NAME: &str = "vko-testbed-ca";
/// Certificates outlive any testbed by far; a day of backdating absorbs clock skew.
const VALIDITY_DAYS: i64 = 365;

/// The PEM files of one testbed, all in one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    dir: PathBuf,
}

impl Pki {
    /// Generates every key and certificate into `dir` (created if missing; existing files replaced).
    pub fn generate(dir: &Path) -> Result<Pki> {
        std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let pki = Pki {
            dir: dir.to_path_buf(),
        };

        let ca_key = KeyPair::generate().map_err(pki_error("CA key"))?;
        let ca_params = ca_params();
        let ca_cert = ca_params
            .self_signed(&ca_key)
            .map_err(pki_error("CA certificate"))?;
        write_file(&pki.ca_cert(), ca_cert.pem().as_bytes(), false)?;
        write_file(&pki.ca_key(), ca_key.serialize_pem().as_bytes(), true)?;
        let issuer = Issuer::new(ca_params, ca_key);

        let mut sans: Vec<SanType> = [
            APISERVER_BRIDGE_IP,
            KUBERNETES_SERVICE_IP,
            Ipv4Addr::LOCALHOST,
        ]
        .into_iter()
        .map(|ip| SanType::IpAddress(IpAddr::V4(ip)))
        .collect();
        for name in APISERVER_DNS_NAMES {
            sans.push(dns_san(name)?);
        }
        pki.issue(
            &issuer,
            "apiserver",
            "kube-apiserver",
            None,
            sans,
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;

        for (stem, common_name, organization) in CLIENTS {
            pki.issue(
                &issuer,
                stem,
                common_name,
                organization,
                Vec::new(),
                ExtendedKeyUsagePurpose::ClientAuth,
            )?;
        }

        let service_account_key = KeyPair::generate().map_err(pki_error("service-account key"))?;
        write_file(
            &pki.service_account_key(),
            service_account_key.serialize_pem().as_bytes(),
            true,
        )?;
        write_file(
            &pki.service_account_public_key(),
            service_account_key.public_key_pem().as_bytes(),
            false,
        )?;
        Ok(pki)
    }

    /// The PKI already generated in `dir`.
    pub fn open(dir: &Path) -> Pki {
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn ca_cert(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn ca_key(&self) -> PathBuf {
        self.dir.join("ca.key")
    }
    pub fn apiserver_cert(&self) -> PathBuf {
        self.cert("apiserver")
    }
    pub fn apiserver_key(&self) -> PathBuf {
        self.key("apiserver")
    }
    /// Certificate of a client identity: `admin`, `kube-controller-manager`, `kube-scheduler`,
    /// `apiserver-kubelet-client`, `operator` ([`E2E_OPERATOR_USER`]), `kube-proxy`.
    pub fn cert(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.crt"))
    }
    pub fn key(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.key"))
    }
    /// Private key that signs service-account tokens (PKCS#8 PEM).
    pub fn service_account_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    /// Public key that verifies service-account tokens.
    pub fn service_account_public_key(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }

    /// Issues a serving certificate signed by this PKI's CA (for example a kubelet API endpoint) and
    /// returns the paths of its certificate and key, `<stem>.crt` / `<stem>.key`.
    pub fn issue_serving_cert(
        &self,
        stem: &str,
        ips: &[IpAddr],
        dns_names: &[&str],
    ) -> Result<(PathBuf, PathBuf)> {
        let ca_pem = std::fs::read_to_string(self.ca_key())
            .map_err(Error::io(format!("reading {}", self.ca_key().display())))?;
        let ca_key = KeyPair::from_pem(&ca_pem).map_err(pki_error("CA key"))?;
        let issuer = Issuer::new(ca_params(), ca_key);
        let mut sans: Vec<SanType> = ips.iter().map(|ip| SanType::IpAddress(*ip)).collect();
        for name in dns_names {
            sans.push(dns_san(name)?);
        }
        self.issue(
            &issuer,
            stem,
            stem,
            None,
            sans,
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        Ok((self.cert(stem), self.key(stem)))
    }

    fn issue(
        &self,
        issuer: &Issuer<'_, KeyPair>,
        stem: &str,
        common_name: &str,
        organization: Option<&str>,
        subject_alt_names: Vec<SanType>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<()> {
        let key = KeyPair::generate().map_err(pki_error(stem))?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        if let Some(organization) = organization {
            params
                .distinguished_name
                .push(DnType::OrganizationName, organization);
        }
        params.subject_alt_names = subject_alt_names;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        set_validity(&mut params);
        let cert = params.signed_by(&key, issuer).map_err(pki_error(stem))?;
        write_file(&self.cert(stem), cert.pem().as_bytes(), false)?;
        write_file(&self.key(stem), key.serialize_pem().as_bytes(), true)
    }
}

/// The CA's parameters; rebuilt identically when the CA key is loaded again to sign more certificates.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, CA_COMMON_NAME);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params);
    params
}

fn set_validity(params: &mut CertificateParams) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(VALIDITY_DAYS);
}

fn dns_san(name: &str) -> Result<SanType> {
    let name = name.to_string().try_into().map_err(pki_error(name))?;
    Ok(SanType::DnsName(name))
}

fn pki_error(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |error| Error::Pki(format!("{what}: {error}"))
}

fn write_file(path: &Path, contents: &[u8], private: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .create(true)
        .truncate(true)
        .mode(if private { 0o600 } else { 0o644 });
    let mut file = options
        .open(path)
        .map_err(Error::io(format!("writing {}", path.display())))?;
    file.write_all(contents)
        .map_err(Error::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("vko-pki-test-{name}-{}", std::process::id()))
    }

    fn pem_der(path: &Path) -> Vec<u8> {
        use rustls_pki_types::CertificateDer;
        use rustls_pki_types::pem::PemObject;
        CertificateDer::from_pem_file(path).unwrap().to_vec()
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack
            .windows(needle.len())
            .any(|window| window == needle)
    }

    #[test]
    fn generates_every_file_with_private_keys_unreadable_by_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("files");
        let pki = Pki::generate(&dir).unwrap();
        let mut files = vec![
            pki.ca_cert(),
            pki.ca_key(),
            pki.service_account_key(),
            pki.service_account_public_key(),
        ];
        for stem in [
            "apiserver",
            "admin",
            "kube-controller-manager",
            "kube-scheduler",
            "apiserver-kubelet-client",
            E2E_OPERATOR_STEM,
            crate::kube_proxy::STEM,
        ] {
            files.push(pki.cert(stem));
            files.push(pki.key(stem));
        }
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{} is PEM", file.display());
        }
        let mode = std::fs::metadata(pki.key("admin"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "private keys are 0600");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn apiserver_cert_names_the_bridge_and_service_ips_and_the_kubernetes_names() {
        let dir = temp_dir("sans");
        let pki = Pki::generate(&dir).unwrap();
        let der = pem_der(&pki.apiserver_cert());
        for ip in [[10u8, 244, 0, 1], [10, 96, 0, 1], [127, 0, 0, 1]] {
            assert!(contains(&der, &ip), "IP SAN {ip:?}");
        }
        for name in APISERVER_DNS_NAMES {
            assert!(contains(&der, name.as_bytes()), "DNS SAN {name}");
        }
        let admin = pem_der(&pki.cert("admin"));
        assert!(contains(&admin, b"system:masters"));
        // The operator under test gets only what RBAC grants: no group, least of all system:masters.
        let operator = pem_der(&pki.cert(E2E_OPERATOR_STEM));
        assert!(contains(&operator, E2E_OPERATOR_USER.as_bytes()));
        assert!(!contains(&operator, b"system:masters"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn issues_more_serving_certs_from_the_stored_ca_key() {
        let dir = temp_dir("serving");
        let pki = Pki::generate(&dir).unwrap();
        let (cert, key) = pki
            .issue_serving_cert(
                "kubelet-node-1",
                &[IpAddr::V4(Ipv4Addr::new(10, 244, 0, 1))],
                &["node-1"],
            )
            .unwrap();
        assert!(contains(&pem_der(&cert), b"node-1"));
        assert!(key.is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
