//! Snapshot of the generated CRD, so every change to the schema shows up in review.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kube::CustomResourceExt;
use vko_api::Valkey;

#[test]
fn crd_yaml_snapshot() {
    let yaml = serde_norway::to_string(&Valkey::crd()).unwrap();
    insta::assert_snapshot!("valkey_crd", yaml);
}

#[test]
fn crd_identity() {
    let crd = Valkey::crd();
    assert_eq!(crd.metadata.name.as_deref(), Some(vko_api::CRD_NAME));
    assert_eq!(crd.spec.group, "vko.gtrfc.com");
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["vk".to_owned()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1");
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<(&str, Option<i32>)> = version
        .additional_printer_columns
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| (c.name.as_str(), c.priority))
        .collect();
    assert_eq!(
        columns,
        [
            ("Replicas", None),
            ("Ready", None),
            ("Phase", None),
            ("Master", None),
            ("Image", Some(1)),
            ("OperatorVersion", Some(1)),
            ("Age", None),
        ]
    );
}

#[test]
fn schema_has_no_preserve_unknown_fields() {
    let json = serde_json::to_string(&Valkey::crd()).unwrap();
    assert!(!json.contains("x-kubernetes-preserve-unknown-fields"));
    assert!(
        !json.contains("uint"),
        "schemars' unsigned formats are not Kubernetes formats"
    );
}
