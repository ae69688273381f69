//! Labels and annotations: the reference's common label set, selector labels, and the rule that
//! user-supplied labels and annotations never overwrite the operator's own keys.

use std::collections::BTreeMap;

use vko_api::consts::labels as keys;

use crate::RenderError;

/// Annotation with the operator version, on every rendered object.
pub const OPERATOR_VERSION_ANNOTATION: &str = "vko.gtrfc.com/operator-version";
/// Pod-template annotation: hash of the tier's generated config files.
pub const CONFIG_HASH_ANNOTATION: &str = "vko.gtrfc.com/config-hash";
/// Pod-template annotation: hash of the rendered pod template itself.
pub const POD_SPEC_HASH_ANNOTATION: &str = "vko.gtrfc.com/pod-spec-hash";
/// Annotation on every object the operator applies: the hash of the object as applied
/// ([`crate::live_holds`]); an object whose live copy holds it is not written again.
pub const APPLIED_HASH_ANNOTATION: &str = "vko.gtrfc.com/applied-hash";
/// Label on the metrics Service that the ServiceMonitor selects.
pub const METRICS_LABEL: &str = "vko.gtrfc.com/metrics";
/// `app.kubernetes.io/component` of the observer's objects.
pub const COMPONENT_OBSERVER: &str = "observer";

/// Everything under this prefix belongs to the operator.
const OPERATOR_PREFIX: &str = "vko.gtrfc.com/";

/// A label map.
pub type Labels = BTreeMap<String, String>;

/// The component of a rendered object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// Data pods and their objects.
    Valkey,
    /// Sentinel pods and their objects.
    Sentinel,
    /// The cluster observer.
    Observer,
}

impl Component {
    /// Value of `app.kubernetes.io/component`.
    pub fn label_value(self) -> &'static str {
        match self {
            Component::Valkey => keys::COMPONENT_VALKEY,
            Component::Sentinel => keys::COMPONENT_SENTINEL,
            Component::Observer => COMPONENT_OBSERVER,
        }
    }
}

/// The labels a selector of one component of one `Valkey` matches on: instance, managed-by and
/// component (the reference's selector set). Never includes the version, so an image change
/// does not orphan pods.
pub fn selector_labels(name: &str, component: Component) -> Labels {
    [
        (keys::INSTANCE, name),
        (keys::MANAGED_BY, keys::MANAGED_BY_VALUE),
        (keys::COMPONENT, component.label_value()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

/// The common labels of the reference. The observer carries no version label: it runs the
/// operator image, not the Valkey image the version names.
pub fn common_labels(name: &str, component: Component, image: &str) -> Labels {
    let mut labels = selector_labels(name, component);
    labels.insert(keys::NAME.to_owned(), keys::NAME_VALUE.to_owned());
    labels.insert(keys::CLUSTER.to_owned(), name.to_owned());
    if component != Component::Observer {
        labels.insert(
            keys::VERSION.to_owned(),
            version_label_value(vko_api::image_version(image)),
        );
    }
    labels
}

/// Turns an image tag into a valid label value: at most 63 characters of `[A-Za-z0-9_.-]`,
/// starting and ending with a letter or digit (or empty). Characters outside the set become
/// `-`; a tag is otherwise kept as it is, so `8.0.1-alpine` stays readable.
pub fn version_label_value(tag: &str) -> String {
    let mapped: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned()
}

/// Whether a label key belongs to the operator: the common label keys and everything under
/// `vko.gtrfc.com/` (which includes `instanceRole`, the key the `-rw`/`-r` Services select on).
pub fn is_reserved_label_key(key: &str) -> bool {
    key.starts_with(OPERATOR_PREFIX)
        || [
            keys::COMPONENT,
            keys::INSTANCE,
            keys::MANAGED_BY,
            keys::NAME,
            keys::VERSION,
        ]
        .contains(&key)
}

/// Whether an annotation key belongs to the operator (hashes, operator version, roll state).
pub fn is_reserved_annotation_key(key: &str) -> bool {
    key.starts_with(OPERATOR_PREFIX)
}

/// `user` ∪ `operator`, refusing any user key the operator reserves. Refusing (rather than
/// silently letting the operator's value win) makes the conflict visible in the CR's status
/// instead of leaving the user wondering why their label never appears.
pub fn merge_user_labels(
    field: &str,
    user: Option<&Labels>,
    operator: Labels,
) -> Result<Labels, RenderError> {
    merge(field, user, operator, is_reserved_label_key)
}

/// Like [`merge_user_labels`] for annotations.
pub fn merge_user_annotations(
    field: &str,
    user: Option<&Labels>,
    operator: Labels,
) -> Result<Labels, RenderError> {
    merge(field, user, operator, is_reserved_annotation_key)
}

fn merge(
    field: &str,
    user: Option<&Labels>,
    operator: Labels,
    reserved: fn(&str) -> bool,
) -> Result<Labels, RenderError> {
    let mut merged = Labels::new();
    for (key, value) in user.into_iter().flatten() {
        if reserved(key) || operator.contains_key(key) {
            return Err(RenderError::ReservedKey {
                field: field.to_owned(),
                key: key.clone(),
            });
        }
        merged.insert(key.clone(), value.clone());
    }
    merged.extend(operator);
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_label_is_the_tag() {
        assert_eq!(version_label_value("8.0"), "8.0");
        assert_eq!(version_label_value("8.0.1-alpine"), "8.0.1-alpine");
        assert_eq!(version_label_value(""), "");
        assert_eq!(version_label_value("latest"), "latest");
    }

    #[test]
    fn version_label_is_sanitized_and_truncated() {
        assert_eq!(version_label_value("_8.0_"), "8.0");
        assert_eq!(version_label_value("8.0\nevil"), "8.0-evil");
        assert_eq!(version_label_value("--"), "");
        let long = format!("{}-x", "9".repeat(70));
        let value = version_label_value(&long);
        assert_eq!(value.len(), 63);
        assert!(value.chars().all(|c| c == '9'));
        // Truncation can expose a separator at the end; it is trimmed.
        let long = format!("{}.{}", "1".repeat(62), "2".repeat(10));
        assert_eq!(version_label_value(&long), "1".repeat(62));
    }

    #[test]
    fn common_labels_of_the_reference() {
        let labels = common_labels("ha", Component::Sentinel, "valkey/valkey:8.0@sha256:abc");
        assert_eq!(
            labels
                .get("app.kubernetes.io/component")
                .map(String::as_str),
            Some("sentinel")
        );
        assert_eq!(
            labels.get("app.kubernetes.io/instance").map(String::as_str),
            Some("ha")
        );
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("vko.gtrfc.com")
        );
        assert_eq!(
            labels.get("app.kubernetes.io/name").map(String::as_str),
            Some("valkey")
        );
        assert_eq!(
            labels.get("app.kubernetes.io/version").map(String::as_str),
            Some("8.0")
        );
        assert_eq!(
            labels.get("vko.gtrfc.com/cluster").map(String::as_str),
            Some("ha")
        );
        assert_eq!(labels.len(), 6);
        let observer = common_labels("ha", Component::Observer, "valkey/valkey:8.0");
        assert!(!observer.contains_key("app.kubernetes.io/version"));
    }

    #[test]
    fn user_labels_cannot_overwrite_operator_labels() {
        let operator = common_labels("ha", Component::Valkey, "valkey/valkey:8.0");
        for key in [
            "vko.gtrfc.com/instanceRole",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/version",
            "vko.gtrfc.com/anything",
        ] {
            let user: Labels = [(key.to_owned(), "x".to_owned())].into();
            let err =
                merge_user_labels("spec.podLabels", Some(&user), operator.clone()).expect_err(key);
            assert_eq!(err.reason().as_str(), "ReservedKey");
        }
        let user: Labels = [("team".to_owned(), "platform".to_owned())].into();
        let merged =
            merge_user_labels("spec.podLabels", Some(&user), operator.clone()).expect("merged");
        assert_eq!(merged.get("team").map(String::as_str), Some("platform"));
        assert_eq!(merged.len(), operator.len() + 1);
    }
}
