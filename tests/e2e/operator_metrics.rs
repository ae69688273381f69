//! The metrics exporter end to end: a 2-pod Valkey (master + replica, no Sentinel) with a password
//! Secret and `metrics.enabled: true`. Every data pod's `exporter` container (the real
//! redis_exporter the testbed maps `oliver006/redis_exporter:*` to, built by `cargo xtask exporter
//! build`) becomes Ready and serves `/metrics` on :9121: `redis_up 1`, the pod's role, a key count
//! that follows writes, a key `spec.metrics.extraArgs` asks about (sized, its value not exported),
//! never the password; the `<name>-metrics` Service has both data pods as endpoints. `/scrape`
//! stays served (redis_exporter cannot turn it off) but no longer lends the password: the exporter
//! has it only in a password map keyed by its own address, so a scrape of the other data pod
//! through it is refused by that pod (NOAUTH, `redis_up 0`) while its own `/metrics` stays up (see
//! docs/status.md, "Metrics exporter").
//!
//! With `tls.enabled` (a user Secret issued by the test's own CA) the exporter reaches its Valkey
//! over `rediss://` by the pod's DNS name, verifying the certificate, and still reports `redis_up 1`
//! and the role.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support, tls_support};

use std::time::Duration;

use anyhow::Context;
use ha_support::{Conn, Pods, Reply, VALKEY_PORT, endpoint_pods};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use operator_support::{OperatorTest, ok_with, wait_for_valkey};
use rcgen::KeyPair;
use tls_support::{Ca, pod_certificate_params};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use vko_api::Valkey;
use vko_render::Names;
use vko_testbed::harness::apply_yaml;

const PASSWORD: &str = "exp0rter-pässword";
const METRICS_PORT: u16 = 9121;
/// A string value the exporter must never put into a label.
const VALUE: &str = "value-that-must-not-leak";

/// `GET path` on `ip:port` over HTTP/1.0 (no chunked encoding): (status, body).
async fn http_get(ip: &str, port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect((ip, port)),
    )
    .await
    .with_context(|| format!("connecting to {ip}:{port} timed out"))??;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .with_context(|| format!("GET {path} on {ip}:{port} timed out"))??;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("no end of HTTP headers")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .context("no HTTP status line")?;
    Ok((status, body.to_owned()))
}

/// The value of the sample whose line starts with `series` (name and labels as exported).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            line.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
}

/// Polls `check` every 500 ms until it yields a value; fails with the last error after `timeout`.
async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => "not yet".to_owned(),
            Err(error) => format!("{error:#}"),
        };
        if std::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what} (last: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn instance_role(body: &str) -> Option<String> {
    let line = body
        .lines()
        .find(|line| line.starts_with("redis_instance_info{"))?;
    let rest = &line[line.find("role=\"")? + "role=\"".len()..];
    Some(rest[..rest.find('"')?].to_owned())
}

/// Waits until the Valkey `name` is OK with its 2 data pods ready (and says how long that took);
/// returns the master its status names and the namespace's pods.
async fn two_pods_ok(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
) -> anyhow::Result<(String, Pods)> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let started = std::time::Instant::now();
    let valkey =
        wait_for_valkey(&valkeys, name, what, Duration::from_secs(240), ok_with(2)).await?;
    println!("{what}: PHASE OK after {:?}", started.elapsed());
    let master = valkey
        .status
        .and_then(|status| status.master_pod)
        .context("OK without a masterPod")?;
    Ok((master, Pods::list(client, ns).await?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_pod_exports_its_metrics_without_key_values_or_the_password() {
    let test = OperatorTest::start("op-metrics").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());

    apply_yaml(
        &client,
        &ns,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{PASSWORD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: mx}}\n\
             spec: {{replicas: 2, image: valkey/valkey:8.0, auth: {{secretName: pw}}, \
             metrics: {{enabled: true, extraArgs: [\"--check-single-keys=db0=probe\"]}}}}\n"
        ),
    )
    .await
    .unwrap();
    let (master, pods) = two_pods_ok(&client, &ns, "mx", "2 ready and OK with the exporter")
        .await
        .unwrap();
    let data_pods = pods.names_with_prefix("mx-");
    assert_eq!(data_pods, ["mx-0", "mx-1"]);

    // Every data pod's exporter container runs and is Ready.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for pod in &data_pods {
        let pod = pods_api.get(pod).await.unwrap();
        let exporter = pod
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|statuses| statuses.iter().find(|c| c.name == "exporter"))
            .cloned()
            .unwrap_or_else(|| panic!("no exporter container status: {:?}", pod.status));
        assert!(exporter.ready, "exporter not Ready: {exporter:?}");
        assert_eq!(exporter.image, "oliver006/redis_exporter:v1.66.0");
        assert_eq!(exporter.restart_count, 0, "{exporter:?}");
    }

    // Scrapes: up, role, no password.
    for pod in &data_pods {
        let ip = pods.ip(pod).unwrap();
        let (status, body) = http_get(&ip, METRICS_PORT, "/metrics").await.unwrap();
        assert_eq!(status, 200, "{pod}: {body}");
        assert_eq!(sample(&body, "redis_up"), Some(1.0), "{pod}: {body}");
        let expected_role = if pod == &master { "master" } else { "slave" };
        assert_eq!(
            instance_role(&body).as_deref(),
            Some(expected_role),
            "{pod}"
        );
        assert!(!body.contains(PASSWORD), "{pod} exports the password");
        println!(
            "{pod}: /metrics {} bytes, redis_up 1, role {expected_role}",
            body.len()
        );
    }

    // Writes on the master: the key count on both pods follows them.
    let master_ip = pods.ip(&master).unwrap();
    let mut conn = Conn::connect(&master_ip, VALKEY_PORT, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        conn.call(&["AUTH", PASSWORD]).await.unwrap(),
        Reply::Simple("OK".into())
    );
    for (round, keys) in [(1, 5), (2, 12)] {
        let mut args = vec!["MSET".to_owned(), "probe".to_owned(), VALUE.to_owned()];
        for i in 0..keys - 1 {
            args.push(format!("k{i}"));
            args.push(format!("{round}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(conn.call(&args).await.unwrap(), Reply::Simple("OK".into()));
        assert_eq!(
            conn.call(&["WAIT", "1", "5000"]).await.unwrap(),
            Reply::Int(1)
        );
        for pod in &data_pods {
            let ip = pods.ip(pod).unwrap();
            let body = poll(
                &format!("{pod} exports {keys} keys in db0"),
                Duration::from_secs(20),
                || {
                    let ip = ip.clone();
                    async move {
                        let (_, body) = http_get(&ip, METRICS_PORT, "/metrics").await?;
                        Ok(
                            (sample(&body, "redis_db_keys{db=\"db0\"}") == Some(keys as f64))
                                .then_some(body),
                        )
                    }
                },
            )
            .await
            .unwrap();
            // extraArgs reached the exporter: the key it names is sized, its value not exported.
            assert_eq!(
                sample(&body, "redis_key_size{db=\"db0\",key=\"probe\"}"),
                Some(VALUE.len() as f64),
                "{pod}: {body}"
            );
            assert!(!body.contains(VALUE), "{pod} exports a key value: {body}");
            assert!(!body.contains("redis_key_value"), "{pod}: {body}");
            println!("{pod}: redis_db_keys db0 = {keys}");
        }
    }

    // The metrics Service selects both data pods on the metrics port.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let service = services.get("mx-metrics").await.unwrap();
    let ports = service.spec.and_then(|s| s.ports).unwrap_or_default();
    assert!(
        ports
            .iter()
            .any(|p| p.port == i32::from(METRICS_PORT) && p.name.as_deref() == Some("metrics")),
        "{ports:?}"
    );
    let endpoints = poll(
        "mx-metrics has both data pods as endpoints",
        Duration::from_secs(30),
        || {
            let client = client.clone();
            let ns = ns.clone();
            async move {
                let found = endpoint_pods(&client, &ns, "mx-metrics").await?;
                Ok((found == ["mx-0", "mx-1"]).then_some(found))
            }
        },
    )
    .await
    .unwrap();
    println!("mx-metrics endpoints: {endpoints:?}");

    // What /scrape really does: REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT, which the renderer sets, is
    // not a redis_exporter option, so the multi-target endpoint is served. The exporter has no
    // REDIS_PASSWORD, only a password map (REDIS_PASSWORD_FILE, written by the init) keyed by its
    // own REDIS_ADDR: any other target is dialled without a password, so the other data pod
    // answers NOAUTH and the exporter reports redis_up 0.
    let master_pod_ip = pods.ip(&master).unwrap();
    let replica = data_pods.iter().find(|p| **p != master).unwrap();
    let replica_ip = pods.ip(replica).unwrap();
    let (status, body) = http_get(&master_pod_ip, METRICS_PORT, "/scrape")
        .await
        .unwrap();
    assert_eq!(status, 400, "/scrape without a target: {body}");
    let (status, body) = http_get(
        &master_pod_ip,
        METRICS_PORT,
        &format!("/scrape?target=redis://{replica_ip}:{VALKEY_PORT}"),
    )
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(sample(&body, "redis_up"), Some(0.0), "{body}");
    assert_eq!(instance_role(&body), None, "{body}");
    let scrape_error = body
        .lines()
        .find(|l| l.starts_with("redis_exporter_last_scrape_error{") && l.ends_with(" 1"))
        .unwrap_or_else(|| panic!("no scrape error: {body}"));
    assert!(scrape_error.contains("NOAUTH"), "{scrape_error}");
    assert!(!body.contains(PASSWORD), "/scrape exports the password");
    println!("/scrape of {replica} through {master}: redis_up 0, {scrape_error}");
    // The pod's own Valkey still gets the password from the map.
    let (status, body) = http_get(&master_pod_ip, METRICS_PORT, "/metrics")
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(sample(&body, "redis_up"), Some(1.0), "{body}");
    println!("{master}: /metrics still redis_up 1");

    test.cleanup().await.unwrap();
}

/// (ca.crt, tls.crt, tls.key): a fresh CA and one certificate for the data pods of `name` in `ns`
/// (their host names and the Services), with both serverAuth and clientAuth (the exporter
/// presents it as its client certificate).
fn issue(name: &str, ns: &str) -> anyhow::Result<(String, String, String)> {
    let names = Names::new(name, ns, "cluster.local")?;
    let ca = Ca::new("vko-e2e metrics CA")?;
    let key = KeyPair::generate()?;
    let cert = pod_certificate_params(&names, ns, false)?.signed_by(&key, &ca.issuer)?;
    Ok((ca.certificate.pem(), cert.pem(), key.serialize_pem()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exporter_reaches_a_tls_valkey_by_its_dns_name_with_the_pod_certificates() {
    let test = OperatorTest::start("op-metrics-tls").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let (ca, cert, key) = issue("mt", &ns).unwrap();
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "mt-certs"},
        "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": ca, "tls.crt": cert, "tls.key": key},
    });
    apply_yaml(
        &client,
        &ns,
        &format!(
            "{}\n---\napiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{PASSWORD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: mt}}\n\
             spec: {{replicas: 2, image: valkey/valkey:8.0, auth: {{secretName: pw}}, \
             tls: {{enabled: true, secretName: mt-certs}}, metrics: {{enabled: true}}}}\n",
            serde_json::to_string(&secret).unwrap()
        ),
    )
    .await
    .unwrap();
    let (master, pods) = two_pods_ok(
        &client,
        &ns,
        "mt",
        "2 ready and OK with TLS and the exporter",
    )
    .await
    .unwrap();
    let data_pods = pods.names_with_prefix("mt-");
    assert_eq!(data_pods, ["mt-0", "mt-1"]);
    for pod in &data_pods {
        let ip = pods.ip(pod).unwrap();
        // The plaintext port is closed: what the exporter reports comes over TLS.
        assert!(
            tokio::net::TcpStream::connect((ip.as_str(), VALKEY_PORT))
                .await
                .is_err(),
            "{pod} listens on {VALKEY_PORT}"
        );
        let expected_role = if pod == &master { "master" } else { "slave" };
        let body = poll(
            &format!("{pod}'s exporter reports redis_up 1 over TLS"),
            Duration::from_secs(30),
            || {
                let ip = ip.clone();
                async move {
                    let (status, body) = http_get(&ip, METRICS_PORT, "/metrics").await?;
                    Ok((status == 200 && sample(&body, "redis_up") == Some(1.0)).then_some(body))
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(
            instance_role(&body).as_deref(),
            Some(expected_role),
            "{pod}"
        );
        assert!(!body.contains(PASSWORD), "{pod} exports the password");
        println!("TLS {pod}: redis_up 1, role {expected_role}");
    }
    test.cleanup().await.unwrap();
}
