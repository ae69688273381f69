//! Shared by the integration tests: fixed render inputs and the reference examples.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use vko_api::Valkey;
use vko_render::RenderInputs;

/// The namespace every test renders into.
pub const NAMESPACE: &str = "demo";

/// Inputs as the operator would pass them for a fully observed, fully equipped cluster.
pub fn inputs_for(valkey: &Valkey) -> RenderInputs {
    let mut inputs = RenderInputs::new(NAMESPACE, "ghcr.io/example/vko:0.1.0", "0.1.0");
    inputs.owner = Some(OwnerReference {
        api_version: "vko.gtrfc.com/v1".into(),
        kind: "Valkey".into(),
        name: valkey.metadata.name.clone().unwrap_or_default(),
        uid: "00000000-0000-4000-8000-000000000001".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    });
    inputs.tls_material_hash = Some("fingerprint-of-the-data-tls-secret".into());
    inputs.sentinel_tls_material_hash = Some("fingerprint-of-the-sentinel-tls-secret".into());
    inputs.prometheus_operator_present = true;
    inputs.cert_manager_present = true;
    inputs
}

/// Parses one Valkey from YAML.
pub fn valkey_from_yaml(yaml: &str) -> Valkey {
    serde_norway::from_str(yaml).expect("example parses as a Valkey")
}

/// The repository's `examples/` directory (the reference README's examples).
pub fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Every example as (file stem, Valkey), sorted by name.
pub fn examples() -> Vec<(String, Valkey)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .expect("utf-8 name")
                .to_owned();
            let text = std::fs::read_to_string(&path).expect("readable example");
            (stem, valkey_from_yaml(&text))
        })
        .collect()
}
