//! Every generated object name and DNS name, from validated parts only.
//!
//! The resource name, the namespace and the cluster domain are the only user-controlled strings
//! that reach `valkey.conf`, `sentinel.conf` and command-line arguments (as host names). They are
//! validated here, once, against a character set that cannot carry a space, a quote, a newline
//! or a shell metacharacter, so nothing built from them can add a directive or an argument.

use crate::RenderError;

/// The longest resource name that keeps every generated name valid. The binding limit is the
/// Sentinel StatefulSet `<name>-sentinel`: the StatefulSet controller labels its pods with
/// `controller-revision-hash: <statefulset>-<10 characters>`, and a label value has at most 63
/// characters, so `<name>` + 9 + 11 <= 63.
pub const MAX_NAME_LENGTH: usize = 43;

/// Name and DNS-name factory for one `Valkey`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    name: String,
    namespace: String,
    cluster_domain: String,
}

impl Names {
    /// Validates the three parts. `name` must be a DNS-1035 label (Service names are) of at
    /// most [`MAX_NAME_LENGTH`] characters, `namespace` a DNS-1123 label, `cluster_domain` a
    /// DNS-1123 subdomain without a trailing dot.
    pub fn new(name: &str, namespace: &str, cluster_domain: &str) -> Result<Self, RenderError> {
        check_dns1035_label("metadata.name", name, MAX_NAME_LENGTH)?;
        check_dns1123_label("namespace", namespace)?;
        check_subdomain("cluster_domain", cluster_domain)?;
        Ok(Names {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            cluster_domain: cluster_domain.to_owned(),
        })
    }

    /// The resource name; also the Sentinel monitor name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The namespace of every object.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
    /// The cluster DNS domain (e.g. `cluster.local`).
    pub fn cluster_domain(&self) -> &str {
        &self.cluster_domain
    }

    fn suffixed(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.name)
    }

    /// Data StatefulSet (and the data PodDisruptionBudget): `<name>`.
    pub fn data_statefulset(&self) -> String {
        self.name.clone()
    }
    /// Sentinel StatefulSet (and its PodDisruptionBudget): `<name>-sentinel`.
    pub fn sentinel_statefulset(&self) -> String {
        self.suffixed("sentinel")
    }
    /// Headless Service of the data pods: `<name>-headless`.
    pub fn headless_service(&self) -> String {
        self.suffixed("headless")
    }
    /// Service selecting the master: `<name>-rw`.
    pub fn rw_service(&self) -> String {
        self.suffixed("rw")
    }
    /// Service selecting the replicas: `<name>-r`.
    pub fn r_service(&self) -> String {
        self.suffixed("r")
    }
    /// Service selecting every data pod: `<name>-all`.
    pub fn all_service(&self) -> String {
        self.suffixed("all")
    }
    /// Headless Service of the Sentinel pods: `<name>-sentinel-headless`.
    pub fn sentinel_headless_service(&self) -> String {
        self.suffixed("sentinel-headless")
    }
    /// Metrics Service and ServiceMonitor: `<name>-metrics`.
    pub fn metrics_service(&self) -> String {
        self.suffixed("metrics")
    }
    /// ConfigMap with the master `valkey.conf`: `<name>-config`.
    pub fn config_map(&self) -> String {
        self.suffixed("config")
    }
    /// ConfigMap with the replica `valkey.conf`: `<name>-replica-config`.
    pub fn replica_config_map(&self) -> String {
        self.suffixed("replica-config")
    }
    /// ConfigMap with `sentinel.conf`: `<name>-sentinel-config`.
    pub fn sentinel_config_map(&self) -> String {
        self.suffixed("sentinel-config")
    }
    /// ServiceAccount, Role and RoleBinding of the sidecar: `<name>-sidecar`.
    pub fn sidecar(&self) -> String {
        self.suffixed("sidecar")
    }
    /// Observer Deployment and ServiceAccount, and with a ServiceMonitor its Service and
    /// ServiceMonitor: `<name>-observer`.
    pub fn observer(&self) -> String {
        self.suffixed("observer")
    }
    /// cert-manager Certificate and Secret of the data tier (or both tiers when unified):
    /// `<name>-tls`.
    pub fn tls_certificate(&self) -> String {
        self.suffixed("tls")
    }
    /// cert-manager Certificate and Secret of the Sentinel tier: `<name>-sentinel-tls`.
    pub fn sentinel_tls_certificate(&self) -> String {
        self.suffixed("sentinel-tls")
    }
    /// NetworkPolicy name: `[<prefix>-]<name>[-<suffix>]`.
    pub fn network_policy(&self, prefix: Option<&str>, suffix: Option<&str>) -> String {
        let base = match suffix {
            Some(suffix) => self.suffixed(suffix),
            None => self.name.clone(),
        };
        match prefix {
            Some(prefix) if !prefix.is_empty() => format!("{prefix}-{base}"),
            _ => base,
        }
    }

    /// Data pod name: `<name>-<ordinal>`.
    pub fn data_pod(&self, ordinal: u32) -> String {
        format!("{}-{ordinal}", self.name)
    }
    /// `<service>.<namespace>.svc.<domain>`.
    pub fn service_fqdn(&self, service: &str) -> String {
        format!("{service}.{}.svc.{}", self.namespace, self.cluster_domain)
    }
    /// A data pod's stable DNS name through the headless Service.
    pub fn data_pod_fqdn(&self, ordinal: u32) -> String {
        format!(
            "{}.{}",
            self.data_pod(ordinal),
            self.service_fqdn(&self.headless_service())
        )
    }
    /// A Sentinel pod's stable DNS name through the Sentinel headless Service.
    pub fn sentinel_pod_fqdn(&self, ordinal: u32) -> String {
        format!(
            "{}-{ordinal}.{}",
            self.sentinel_statefulset(),
            self.service_fqdn(&self.sentinel_headless_service())
        )
    }
}

fn invalid(field: &str, value: &str, why: &'static str) -> RenderError {
    RenderError::InvalidName {
        field: field.to_owned(),
        value: value.to_owned(),
        why,
    }
}

fn is_label_char(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'
}

/// A DNS-1123 label: lowercase letters, digits and `-`, starting and ending with a letter or
/// digit, at most 63 characters.
pub(crate) fn check_dns1123_label(field: &str, value: &str) -> Result<(), RenderError> {
    if value.is_empty() {
        return Err(invalid(field, value, "it is empty"));
    }
    if value.len() > 63 {
        return Err(invalid(field, value, "it is longer than 63 characters"));
    }
    if !value.chars().all(is_label_char) {
        return Err(invalid(
            field,
            value,
            "only lowercase letters, digits and '-' are allowed",
        ));
    }
    if value.starts_with('-') || value.ends_with('-') {
        return Err(invalid(
            field,
            value,
            "it must start and end with a letter or digit",
        ));
    }
    Ok(())
}

fn check_dns1035_label(field: &str, value: &str, max: usize) -> Result<(), RenderError> {
    check_dns1123_label(field, value)?;
    if value.len() > max {
        return Err(invalid(
            field,
            value,
            "it is too long: generated names (e.g. <name>-sentinel-headless) would exceed 63 characters; at most 43 characters",
        ));
    }
    if !value.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(invalid(
            field,
            value,
            "it must start with a lowercase letter",
        ));
    }
    Ok(())
}

fn check_subdomain(field: &str, value: &str) -> Result<(), RenderError> {
    if value.len() > 253 {
        return Err(invalid(field, value, "it is longer than 253 characters"));
    }
    for label in value.split('.') {
        check_dns1123_label(field, label).map_err(|_| {
            invalid(
                field,
                value,
                "every dot-separated part must be a DNS label (lowercase letters, digits, '-')",
            )
        })?;
    }
    Ok(())
}

/// A DNS name for a certificate: a subdomain, optionally starting with one `*.` wildcard label.
/// Upper-case letters are accepted (DNS is case-insensitive; cert-manager lower-cases them).
pub(crate) fn is_certificate_dns_name(value: &str) -> bool {
    let rest = value.strip_prefix("*.").unwrap_or(value);
    !rest.is_empty()
        && rest.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_follow_the_reference() {
        let names = Names::new("ha", "prod", "cluster.local").expect("valid");
        assert_eq!(names.rw_service(), "ha-rw");
        assert_eq!(names.sentinel_headless_service(), "ha-sentinel-headless");
        assert_eq!(
            names.data_pod_fqdn(2),
            "ha-2.ha-headless.prod.svc.cluster.local"
        );
        assert_eq!(
            names.sentinel_pod_fqdn(0),
            "ha-sentinel-0.ha-sentinel-headless.prod.svc.cluster.local"
        );
        assert_eq!(
            names.network_policy(Some("np"), Some("observer")),
            "np-ha-observer"
        );
        assert_eq!(names.network_policy(None, None), "ha");
    }

    #[test]
    fn names_that_would_break_generated_names_are_refused() {
        for bad in ["", "Ha", "1ha", "ha-", "ha_x", "ha.x", "ha x", "ha\nport 1"] {
            assert!(Names::new(bad, "ns", "cluster.local").is_err(), "{bad:?}");
        }
        let longest = "a".repeat(MAX_NAME_LENGTH);
        assert!(Names::new(&longest, "ns", "cluster.local").is_ok());
        let too_long = "a".repeat(MAX_NAME_LENGTH + 1);
        assert!(Names::new(&too_long, "ns", "cluster.local").is_err());
        // The Sentinel headless Service of the longest name is still a valid label.
        let names = Names::new(&longest, "ns", "cluster.local").expect("valid");
        assert!(names.sentinel_headless_service().len() <= 63);
        assert!(names.sentinel_statefulset().len() + 11 <= 63);
    }

    /// The CRD refuses at admission what `Names::new` refuses here; the length limit is written
    /// into the CRD's root rule as a number, so it must follow `MAX_NAME_LENGTH`.
    #[test]
    fn the_crd_refuses_the_same_names_at_admission() {
        let crd = serde_json::to_value(vko_api::crd()).expect("serializes");
        let rules: Vec<&str> = crd
            .pointer("/spec/versions/0/schema/openAPIV3Schema/x-kubernetes-validations")
            .and_then(serde_json::Value::as_array)
            .expect("root rules")
            .iter()
            .filter_map(|rule| rule.get("rule").and_then(serde_json::Value::as_str))
            .collect();
        assert!(
            rules.contains(&format!("size(self.metadata.name) <= {MAX_NAME_LENGTH}").as_str()),
            "{rules:?}"
        );
        assert!(
            rules.contains(&"self.metadata.name.matches('^[a-z]')"),
            "{rules:?}"
        );
        assert!(
            rules.contains(&"!self.metadata.name.contains('.')"),
            "{rules:?}"
        );
    }

    #[test]
    fn cluster_domain_and_namespace_are_checked() {
        assert!(Names::new("a", "ns", "corp.example").is_ok());
        for bad in ["", "cluster.local.", ".local", "clus ter.local", "x\n"] {
            assert!(Names::new("a", "ns", bad).is_err(), "{bad:?}");
        }
        assert!(Names::new("a", "Ns", "cluster.local").is_err());
    }

    #[test]
    fn certificate_dns_names() {
        assert!(is_certificate_dns_name("valkey.example.com"));
        assert!(is_certificate_dns_name("*.example.com"));
        assert!(!is_certificate_dns_name("*"));
        assert!(!is_certificate_dns_name("a..b"));
        assert!(!is_certificate_dns_name("a b"));
        assert!(!is_certificate_dns_name("a\nb"));
        assert!(!is_certificate_dns_name("*.*.example.com"));
    }
}
