//! The testbed's `valkey/valkey` tag table: a pod of each mapped release line runs that release
//! (`valkey_version` in `INFO server`, and `valkey-server`, `valkey-sentinel`, `valkey-cli` inside
//! the container are all of it), a tag outside the table stays `ErrImagePull` naming the table, and
//! the operator runs a 3-pod replicated Valkey on 9.1 to PHASE OK.
//!
//! Needs `cargo xtask valkey build` (8.1.1 and 9.1.2 in `~/.cache/vko`) and, for the operator test,
//! the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::ha_support::{pod_is_ready, valkey_cli_reply, valkey_pod};
use vko_e2e::operator_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use operator_support::OperatorTest;
use vko_testbed::harness::{
    TestNamespace, Testbed, apply_yaml, kubectl, pod_ip, valkey_cli, wait_until,
};
use vko_testbed::kubelet::images::VALKEY_TAG_MAP;

/// The `valkey_version:` line of `INFO server`.
fn info_version(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.trim().strip_prefix("valkey_version:"))
}

/// The first `v=<version>` / `valkey-cli <version>` word of a `--version` line.
fn reported_version(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    match words.next()? {
        "valkey-cli" => words.next(),
        _ => words.find_map(|word| word.strip_prefix("v=")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_mapped_tag_runs_its_release_and_an_unmapped_one_is_err_image_pull() {
    let testbed = Testbed::from_env().await.unwrap();
    let client = testbed.client();
    let namespace = TestNamespace::create(&client, "vk-versions").await.unwrap();
    let ns = namespace.name().to_owned();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let cases = [
        ("v80", "valkey/valkey:8.0", "8.0.1"),
        ("v811", "valkey/valkey:8.1.1", "8.1.1"),
        ("v912", "docker.io/valkey/valkey:9.1.2", "9.1.2"),
    ];
    let applied = std::time::Instant::now();
    for (name, image, _) in cases {
        apply_yaml(&client, &ns, &valkey_pod(name, image, None))
            .await
            .unwrap();
    }
    apply_yaml(&client, &ns, &valkey_pod("v72", "valkey/valkey:7.2", None))
        .await
        .unwrap();

    for (name, image, version) in cases {
        wait_until(
            &format!("{name} ({image}) Ready"),
            Duration::from_secs(90),
            || {
                let pods = pods.clone();
                async move { Ok(pod_is_ready(&pods.get(name).await?).then_some(())) }
            },
        )
        .await
        .unwrap();
        let ip = pod_ip(&client, &ns, name).await.unwrap();
        let info = valkey_cli(&ip, &["INFO", "server"]).await.unwrap();
        assert_eq!(info_version(&info), Some(version), "{image}: {info}");
        // Every binary the operator's pods call by name resolves to the same release inside the
        // container (the sidecar-less probes use valkey-cli, Sentinel pods valkey-sentinel).
        for binary in ["valkey-server", "valkey-sentinel", "valkey-cli"] {
            let line = kubectl(&[
                "exec",
                "-n",
                &ns,
                name,
                "-c",
                "valkey",
                "--",
                binary,
                "--version",
            ])
            .await
            .unwrap();
            assert_eq!(
                reported_version(&line),
                Some(version),
                "{image}: {binary} --version printed {line:?}"
            );
        }
        println!(
            "{image}: valkey_version:{version}, checked {:.1} s after the pods were applied",
            applied.elapsed().as_secs_f64()
        );
    }

    let refused = wait_until(
        "the 7.2 pod's container waiting in ErrImagePull",
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("v72").await?;
                let waiting = pod
                    .status
                    .and_then(|status| status.container_statuses)
                    .and_then(|statuses| statuses.into_iter().next())
                    .and_then(|status| status.state)
                    .and_then(|state| state.waiting);
                Ok(waiting.filter(|w| w.reason.as_deref() == Some("ErrImagePull")))
            }
        },
    )
    .await
    .unwrap();
    let message = refused.message.unwrap_or_default();
    assert!(
        message.contains("\"valkey/valkey:7.2\"") && message.contains(VALKEY_TAG_MAP),
        "{message}"
    );

    namespace.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicated_pods_on_valkey_9_1_reach_ok() {
    let test = OperatorTest::start("vk-nine").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    let started = std::time::Instant::now();
    let (_, valkey) = test
        .apply_until_ok(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: nine}\nspec: {replicas: 3, image: valkey/valkey:9.1}\n",
            "nine",
            3,
            Duration::from_secs(180),
        )
        .await
        .unwrap();
    println!(
        "valkey/valkey:9.1, 3 pods: PHASE OK in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let master = valkey.status.unwrap().master_pod.unwrap();
    let ip = pod_ip(&client, &ns, &master).await.unwrap();
    let info = valkey_cli(&ip, &["INFO", "server"]).await.unwrap();
    assert_eq!(info_version(&info), Some("9.1.2"), "{info}");
    assert_eq!(
        valkey_cli_reply(&ip, &["SET", "on-nine", "yes"])
            .await
            .unwrap(),
        "OK"
    );
    // Both replicas (9.1.2 too) acknowledge the write.
    assert_eq!(
        valkey_cli_reply(&ip, &["WAIT", "2", "5000"]).await.unwrap(),
        "2"
    );
    for pod in ["nine-0", "nine-1", "nine-2"] {
        let ip = pod_ip(&client, &ns, pod).await.unwrap();
        let info = valkey_cli(&ip, &["INFO", "server"]).await.unwrap();
        assert_eq!(info_version(&info), Some("9.1.2"), "{pod}: {info}");
    }

    test.cleanup().await.unwrap();
}

#[test]
fn versions_are_read_from_info_and_version_lines() {
    assert_eq!(
        info_version("# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\n"),
        Some("9.1.2")
    );
    assert_eq!(info_version("# Server\r\n"), None);
    assert_eq!(
        reported_version("Valkey server v=8.1.1 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64"),
        Some("8.1.1")
    );
    assert_eq!(reported_version("valkey-cli 9.1.2"), Some("9.1.2"));
    assert_eq!(reported_version(""), None);
}
