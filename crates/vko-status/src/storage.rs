//! `spec.persistence` against the live data StatefulSet's `volumeClaimTemplates`, which the API
//! server never lets change. Pure: the controller feeds in the live and the rendered templates.
//!
//! Two shapes (reference ADR 0023): the set of claims differs (persistence turned on or off), and
//! then nothing may be written to the StatefulSet, since turning persistence off is accepted by the
//! API server for the pod template while the claims stay, and turning it on is refused; or only a
//! claim's size, class or access modes differ, and then every other change still applies with the
//! live claims kept as they are.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// What differs between the storage the spec asks for and the storage the cluster runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StorageConflict {
    /// Claims added or removed: the StatefulSet has to be recreated.
    RecreateRequired { difference: String },
    /// Same claims, other size / class / access modes: only the storage stays as it is.
    Immutable { difference: String },
}

impl StorageConflict {
    pub fn difference(&self) -> &str {
        match self {
            StorageConflict::RecreateRequired { difference }
            | StorageConflict::Immutable { difference } => difference,
        }
    }
}

fn claim_names(templates: &[PersistentVolumeClaim]) -> BTreeSet<String> {
    templates
        .iter()
        .filter_map(|claim| claim.metadata.name.clone())
        .collect()
}

fn storage_request(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")
        .map(|quantity| quantity.0.as_str())
}

fn storage_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    claim
        .spec
        .as_ref()?
        .storage_class_name
        .as_deref()
        .filter(|class| !class.is_empty())
}

fn access_modes(claim: &PersistentVolumeClaim) -> BTreeSet<String> {
    claim
        .spec
        .as_ref()
        .and_then(|spec| spec.access_modes.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// A Kubernetes quantity in base units (`1Gi` = 1073741824, `500M` = 5e8, `1e3` = 1000).
pub fn quantity_value(text: &str) -> Option<f64> {
    let text = text.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (suffix, factor) in suffixes {
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|value| value * factor);
        }
    }
    for (suffix, factor) in [("P", 1e15), ("E", 1e18)] {
        // `E` is also the exponent marker (`1E3`): a trailing one is the suffix.
        if let Some(number) = text.strip_suffix(suffix) {
            return number.parse::<f64>().ok().map(|value| value * factor);
        }
    }
    text.parse::<f64>().ok()
}

fn same_quantity(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => match (quantity_value(a), quantity_value(b)) {
            (Some(x), Some(y)) => (x - y).abs() <= f64::EPSILON * x.abs().max(y.abs()),
            _ => a == b,
        },
        (a, b) => a == b,
    }
}

/// How `desired` (rendered from the spec) differs from `live` (the StatefulSet's), or `None`.
/// Labels and annotations of the claims are not compared (the reference does not either).
pub fn conflict(
    live: &[PersistentVolumeClaim],
    desired: &[PersistentVolumeClaim],
) -> Option<StorageConflict> {
    let (live_names, desired_names) = (claim_names(live), claim_names(desired));
    if live_names != desired_names {
        let list = |names: &BTreeSet<String>| {
            if names.is_empty() {
                "none (data in memory only)".to_owned()
            } else {
                names.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        };
        return Some(StorageConflict::RecreateRequired {
            difference: format!(
                "the StatefulSet's volume claims are {} but the spec asks for {}: \
                 spec.persistence.enabled cannot change on an existing StatefulSet (volumeClaimTemplates are \
                 immutable), so nothing is written to it until it is recreated or the spec is changed back",
                list(&live_names),
                list(&desired_names)
            ),
        });
    }
    let mut differences = Vec::new();
    for wanted in desired {
        let Some(running) = live
            .iter()
            .find(|claim| claim.metadata.name == wanted.metadata.name)
        else {
            continue;
        };
        let claim = wanted.metadata.name.as_deref().unwrap_or_default();
        if !same_quantity(storage_request(running), storage_request(wanted)) {
            differences.push(format!(
                "claim {claim}: size {} in the StatefulSet, {} in the spec",
                storage_request(running).unwrap_or("unset"),
                storage_request(wanted).unwrap_or("unset")
            ));
        }
        if storage_class(running) != storage_class(wanted) {
            differences.push(format!(
                "claim {claim}: storageClass {} in the StatefulSet, {} in the spec",
                storage_class(running).unwrap_or("(default)"),
                storage_class(wanted).unwrap_or("(default)")
            ));
        }
        if access_modes(running) != access_modes(wanted) {
            differences.push(format!(
                "claim {claim}: access modes {:?} in the StatefulSet, {:?} in the spec",
                access_modes(running),
                access_modes(wanted)
            ));
        }
    }
    (!differences.is_empty()).then(|| StorageConflict::Immutable {
        difference: format!(
            "{}; volumeClaimTemplates are immutable, so the storage stays as it is while every other \
             change applies (the existing claims are not resized by the operator)",
            differences.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, size: &str, class: Option<&str>, modes: &[&str]) -> PersistentVolumeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "accessModes": modes,
                "storageClassName": class,
                "resources": {"requests": {"storage": size}},
            },
            // What the API server adds to a live template.
            "status": {"phase": "Pending"},
        }))
        .unwrap()
    }

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(quantity_value("1Gi"), Some(1073741824.0));
        assert_eq!(quantity_value("1024Mi"), quantity_value("1Gi"));
        assert_eq!(quantity_value("500M"), Some(5e8));
        assert_eq!(quantity_value("1e3"), Some(1000.0));
        assert_eq!(quantity_value("2E"), Some(2e18));
        assert_eq!(quantity_value("1.5Gi"), Some(1.5 * 1073741824.0));
        assert_eq!(quantity_value("lots"), None);
        assert!(same_quantity(Some("1Gi"), Some("1024Mi")));
        assert!(!same_quantity(Some("1Gi"), Some("1G")));
    }

    #[test]
    fn table() {
        let data = |size: &str| claim("data", size, None, &["ReadWriteOnce"]);
        // (name, live, desired, expected: None, "recreate", or a part of the difference).
        type Case = (
            &'static str,
            Vec<PersistentVolumeClaim>,
            Vec<PersistentVolumeClaim>,
            Option<&'static str>,
        );
        let cases: Vec<Case> = vec![
            ("equal", vec![data("1Gi")], vec![data("1Gi")], None),
            (
                "equal by value",
                vec![data("1Gi")],
                vec![data("1024Mi")],
                None,
            ),
            ("no persistence on either side", vec![], vec![], None),
            (
                "persistence turned off",
                vec![data("1Gi")],
                vec![],
                Some("recreate"),
            ),
            (
                "persistence turned on",
                vec![],
                vec![data("1Gi")],
                Some("recreate"),
            ),
            (
                "bigger",
                vec![data("1Gi")],
                vec![data("2Gi")],
                Some("size 1Gi in the StatefulSet, 2Gi in the spec"),
            ),
            (
                "another class",
                vec![claim("data", "1Gi", Some("fast"), &["ReadWriteOnce"])],
                vec![claim("data", "1Gi", None, &["ReadWriteOnce"])],
                Some("storageClass fast in the StatefulSet, (default) in the spec"),
            ),
            (
                "other access modes",
                vec![data("1Gi")],
                vec![claim("data", "1Gi", None, &["ReadWriteOncePod"])],
                Some("access modes"),
            ),
        ];
        for (name, live, desired, want) in cases {
            let got = conflict(&live, &desired);
            match (want, &got) {
                (None, None) => {}
                (Some("recreate"), Some(StorageConflict::RecreateRequired { .. })) => {}
                (Some(text), Some(StorageConflict::Immutable { difference })) => {
                    assert!(difference.contains(text), "{name}: {difference}");
                }
                _ => panic!("{name}: want {want:?}, got {got:?}"),
            }
        }
    }
}
