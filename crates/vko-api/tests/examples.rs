//! Every example CR in `examples/` (the reference README's examples) parses into the typed
//! `Valkey` and serializes back to exactly what the file says.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use pretty_assertions::assert_eq;
use vko_api::{PersistenceMode, Valkey};

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    files
}

fn load(name: &str) -> Valkey {
    let text = std::fs::read_to_string(examples_dir().join(name)).unwrap();
    serde_norway::from_str(&text).unwrap()
}

#[test]
fn every_example_round_trips_exactly() {
    let files = example_files();
    assert!(
        files.len() >= 13,
        "expected the reference examples, found {files:?}"
    );
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let as_written: serde_json::Value = serde_norway::from_str(&text).unwrap();
        let typed: Valkey = serde_norway::from_str(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        // Serialize -> deserialize gives the same typed value ...
        let yaml = serde_norway::to_string(&typed).unwrap();
        let again: Valkey = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(again, typed, "{}", path.display());
        // ... and nothing was dropped or added on the way.
        assert_eq!(
            serde_json::to_value(&typed).unwrap(),
            as_written,
            "{}",
            path.display()
        );
    }
}

#[test]
fn examples_mean_what_they_say() {
    let minimal = load("standalone-minimal.yaml");
    assert_eq!(minimal.spec.replicas(), 1);
    assert!(!minimal.spec.sentinel_enabled());
    assert!(!minimal.spec.tls_enabled());

    let persistent = load("standalone-persistence.yaml");
    assert!(persistent.spec.persistence_enabled());
    assert_eq!(persistent.spec.persistence_size().0, "5Gi");
    assert_eq!(persistent.spec.storage_class(), None);

    let production = load("ha-full-production.yaml");
    assert!(production.spec.sentinel_enabled());
    assert!(production.spec.tls_enabled());
    assert_eq!(production.spec.persistence_mode(), PersistenceMode::Both);
    assert_eq!(
        production.spec.cert_manager().unwrap().extra_dns_names,
        Some(vec!["valkey.example.com".to_owned()])
    );

    let tls_secret = load("standalone-tls-secret.yaml");
    assert_eq!(
        tls_secret.spec.tls_secret_name(),
        Some("my-valkey-tls-secret")
    );

    let monitored = load("ha-metrics.yaml");
    assert!(monitored.spec.service_monitor_enabled());
    assert!(monitored.spec.metrics_service_enabled());

    let no_sentinel_auth = load("ha-auth-sentinel-unauthenticated.yaml");
    assert!(no_sentinel_auth.spec.sentinel_auth_disabled());
}
