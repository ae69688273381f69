//! vko-render is embedded by other tools: it must not pull in an async runtime, a Kubernetes
//! client or any network crate. Checked on the real dependency graph (`cargo tree`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

/// Crates that mean "this library does I/O".
const FORBIDDEN: &[&str] = &[
    "tokio",
    "mio",
    "hyper",
    "hyper-util",
    "hyper-rustls",
    "h2",
    "reqwest",
    "tower",
    "kube-client",
    "kube-runtime",
    "rustls",
    "tokio-rustls",
    "native-tls",
    "openssl",
    "socket2",
    "fred",
    "axum",
    "async-std",
    "futures-io",
];

#[test]
fn no_runtime_client_or_network_crate_in_the_normal_dependency_graph() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let args = [
        "tree",
        "-p",
        "vko-render",
        "-e",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p}",
        "--offline",
    ];
    let tree = || {
        Command::new(&cargo)
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo tree runs")
    };
    // Other work in the same checkout can hold a cargo lock or be mid-edit of a manifest for a
    // moment; a second look after a pause tells that apart from a real failure.
    let mut output = tree();
    for _ in 0..3 {
        if output.status.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_secs(3));
        output = tree();
    }
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).expect("utf-8");
    let crates: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        crates.contains(&"vko-api"),
        "unexpected tree output:\n{tree}"
    );
    assert!(
        crates.contains(&"k8s-openapi"),
        "unexpected tree output:\n{tree}"
    );
    let found: Vec<&&str> = crates.iter().filter(|c| FORBIDDEN.contains(c)).collect();
    assert!(
        found.is_empty(),
        "forbidden dependencies: {found:?}\n{tree}"
    );
}
