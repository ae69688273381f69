//! `spec.networkPolicy` enforced by a real engine: the testbed's kube-router (firewall only,
//! `vko_testbed::kube_router`) filters pod-to-pod traffic by the policies the operator renders.
//!
//! A 3 + 3 with TLS on dual ports (Valkey 16379 TLS + 6379, Sentinel 36379 TLS + 26379), the
//! exporter (9121) and `networkPolicy: {enabled: true, metricsFrom: <the scrapers' namespace>}`
//! reaches PHASE OK with the policies enforced from its first pod on (replication and Sentinel
//! traffic flow between its pods). Then three probe pods, each a bare valkey-server in its
//! own namespace, open TCP connections to the master and a Sentinel on every port:
//! - from the Valkey's own namespace every Valkey and Sentinel port opens, also through the `-rw`
//!   ClusterIP, and the exporter's does not (`metricsFrom` replaces the namespace default);
//! - from an arbitrary namespace every port is refused;
//! - from the namespace `metricsFrom` names, only the exporter's port opens.
//!
//! kube-router rejects with an ICMP port-unreachable, so a refused connection looks like a closed
//! port: every port opens for one of the probes, which shows it listens. Finally the master's
//! pod is deleted: the sidecar hands over through Sentinel, the new master's writes reach every
//! replica (replication between pods through the policies).
//!
//! What this cannot show: the operator's own access. The operator under test runs on the host, and
//! kube-router admits every connection from the host (its kubelet-probe rule); the operator pod of
//! the chart, admitted by `--operator-pod-labels`, is shown by `helm_lifecycle` step 1b.

use vko_e2e::{fence_support, ha_support, operator_support, tls_support};

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use fence_support::pod_netns;
use ha_support::{
    Pods, SENTINEL_PORT, VALKEY_PORT, dump_container_logs, eventually, pod_is_ready,
    valkey_cli_reply, valkey_pod,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams};
use operator_support::{OperatorTest, ok_with, wait_for_valkey};
use rcgen::KeyPair;
use tls_support::{Ca, pod_certificate_params};
use vko_render::Names;
use vko_testbed::harness::{TestNamespace, apply_yaml};

const NAME: &str = "np";
const SECRET: &str = "np-certs";
const VALKEY_TLS_PORT: u16 = 16379;
const SENTINEL_TLS_PORT: u16 = 36379;
const METRICS_PORT: u16 = 9121;
const PROBE: &str = "probe";
/// How long one connection attempt may take before it counts as silently dropped.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// kube-router syncs its rules and ipsets after pod and policy events; a probe's expectation may
/// need a few of its syncs to come true.
const SETTLE: Duration = Duration::from_secs(60);

/// What a TCP connection attempt met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reach {
    /// The handshake completed.
    Open,
    /// Refused (a RST, or kube-router's ICMP port-unreachable).
    Refused,
    /// No answer within [`CONNECT_TIMEOUT`].
    Silent,
}

/// One TCP connection to `address` from inside the network namespace `netns` (its own OS thread,
/// moved there with setns).
async fn reach_from(netns: &str, address: SocketAddr) -> anyhow::Result<Reach> {
    let file = std::fs::File::open(format!("/run/netns/{netns}"))
        .with_context(|| format!("open /run/netns/{netns}"))?;
    let netns = netns.to_owned();
    tokio::task::spawn_blocking(move || {
        nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
        Ok(
            match TcpStream::connect_timeout(&address, CONNECT_TIMEOUT) {
                Ok(_) => Reach::Open,
                Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused => {
                    Reach::Refused
                }
                Err(error) if error.kind() == std::io::ErrorKind::TimedOut => Reach::Silent,
                Err(error) => bail!("connecting to {address} from {netns}: {error}"),
            },
        )
    })
    .await?
}

/// A probe pod's expectations: each (what, address) opens or not.
struct Expectations {
    netns: String,
    namespace: String,
    checks: Vec<(String, SocketAddr, bool)>,
}

impl Expectations {
    /// Every check once; an error naming each one that did not meet its expectation.
    async fn verify(&self) -> anyhow::Result<Vec<String>> {
        let mut met = Vec::new();
        let mut unmet = Vec::new();
        for (what, address, open) in &self.checks {
            let reach = reach_from(&self.netns, *address).await?;
            let line = format!("{} → {what} ({address}): {reach:?}", self.namespace);
            if (reach == Reach::Open) == *open {
                met.push(line);
            } else {
                unmet.push(format!(
                    "{line}, expected {}",
                    if *open { "Open" } else { "refused" }
                ));
            }
        }
        if !unmet.is_empty() {
            bail!("{}", unmet.join("; "));
        }
        Ok(met)
    }
}

/// (ca.crt, tls.crt, tls.key): a fresh CA and one certificate for the data and Sentinel pods.
fn issue(ns: &str) -> anyhow::Result<(String, String, String)> {
    let names = Names::new(NAME, ns, "cluster.local")?;
    let ca = Ca::new("vko-e2e network policy CA")?;
    let key = KeyPair::generate()?;
    let cert = pod_certificate_params(&names, ns, true)?.signed_by(&key, &ca.issuer)?;
    Ok((ca.certificate.pem(), cert.pem(), key.serialize_pem()))
}

fn valkey_yaml(scrapers: &str) -> String {
    format!(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\n\
         spec: {{replicas: 3, image: valkey/valkey:8.0, \
         sentinel: {{enabled: true, replicas: 3, allowUnencrypted: true}}, \
         tls: {{enabled: true, secretName: {SECRET}, allowUnencrypted: true}}, \
         metrics: {{enabled: true}}, \
         networkPolicy: {{enabled: true, metricsFrom: [{{namespaceSelector: {{matchLabels: \
         {{kubernetes.io/metadata.name: {scrapers}}}}}}}]}}}}\n"
    )
}

/// Starts the probe pod in `ns` and returns its network namespace once it is Ready.
async fn probe_netns(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    apply_yaml(client, ns, &valkey_pod(PROBE, "valkey/valkey:8.0", None)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    eventually(Duration::from_secs(60), "the probe pod is Ready", || {
        let pods = pods.clone();
        async move {
            let pod = pods.get(PROBE).await?;
            ensure!(pod_is_ready(&pod), "not Ready yet");
            Ok(())
        }
    })
    .await?;
    pod_netns(client, ns, PROBE).await
}

fn address(ip: &str, port: u16) -> anyhow::Result<SocketAddr> {
    Ok(SocketAddr::new(ip.parse()?, port))
}

async fn run(test: &OperatorTest, other: &str, scrapers: &str) -> anyhow::Result<()> {
    let (client, ns) = (test.client(), test.ns());
    let (ca, cert, key) = issue(ns)?;
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET},
        "type": "kubernetes.io/tls",
        "stringData": {"ca.crt": ca, "tls.crt": cert, "tls.key": key},
    });
    let started = Instant::now();
    let (valkeys, _) = test
        .apply_until_ok(
            &format!(
                "{}\n---\n{}",
                serde_json::to_string(&secret)?,
                valkey_yaml(scrapers)
            ),
            NAME,
            3,
            Duration::from_secs(180),
        )
        .await?;
    eprintln!(
        "3 + 3 with TLS, the exporter and enforced NetworkPolicies OK after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let pods = Pods::list(&client, ns).await?;
    let master = pods.labelled_master()?;
    let master_ip = pods.ip(&master).context("the master has no IP")?;
    let sentinel = pods
        .names_with_prefix(&format!("{NAME}-sentinel-"))
        .into_iter()
        .next()
        .context("no Sentinel pod")?;
    let sentinel_ip = pods.ip(&sentinel).context("the Sentinel has no IP")?;
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let rw_ip = services
        .get(&format!("{NAME}-rw"))
        .await?
        .spec
        .and_then(|spec| spec.cluster_ip)
        .context("-rw has no ClusterIP")?;
    let targets = [
        (
            format!("{master}:{VALKEY_PORT}"),
            address(&master_ip, VALKEY_PORT)?,
        ),
        (
            format!("{master}:{VALKEY_TLS_PORT}"),
            address(&master_ip, VALKEY_TLS_PORT)?,
        ),
        (
            format!("{master}:{METRICS_PORT}"),
            address(&master_ip, METRICS_PORT)?,
        ),
        (
            format!("{sentinel}:{SENTINEL_PORT}"),
            address(&sentinel_ip, SENTINEL_PORT)?,
        ),
        (
            format!("{sentinel}:{SENTINEL_TLS_PORT}"),
            address(&sentinel_ip, SENTINEL_TLS_PORT)?,
        ),
        (
            format!("{NAME}-rw:{VALKEY_PORT}"),
            address(&rw_ip, VALKEY_PORT)?,
        ),
    ];
    let expect = |netns: String, namespace: &str, open: &dyn Fn(&str) -> bool| Expectations {
        netns,
        namespace: namespace.to_owned(),
        checks: targets
            .iter()
            .map(|(what, address)| (what.clone(), *address, open(what)))
            .collect(),
    };
    let metrics = |what: &str| what.ends_with(&format!(":{METRICS_PORT}"));
    let probes = [
        expect(probe_netns(&client, ns).await?, ns, &|what| !metrics(what)),
        expect(probe_netns(&client, other).await?, other, &|_| false),
        expect(probe_netns(&client, scrapers).await?, scrapers, &metrics),
    ];
    for probe in &probes {
        let met = eventually(SETTLE, &format!("the probe in {}", probe.namespace), || {
            probe.verify()
        })
        .await?;
        for line in met {
            eprintln!("{line}");
        }
    }
    // All at once, after every probe settled: no expectation was met only for a moment.
    for probe in &probes {
        probe.verify().await?;
    }

    // Sentinel and replication through the policies: a handover, then a write on the new master
    // reaches every replica.
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    pod_api.delete(&master, &DeleteParams::default()).await?;
    let new_master = eventually(Duration::from_secs(90), "a new master", || {
        let client = client.clone();
        let master = master.clone();
        async move {
            let pods = Pods::list(&client, ns).await?;
            let new = pods.labelled_master()?;
            ensure!(new != master, "{master} is still labelled master");
            Ok(new)
        }
    })
    .await?;
    wait_for_valkey(
        &valkeys,
        NAME,
        "3 ready and OK again",
        Duration::from_secs(120),
        ok_with(3),
    )
    .await?;
    let pods = Pods::list(&client, ns).await?;
    let new_ip = pods.ip(&new_master).context("the new master has no IP")?;
    let reply = valkey_cli_reply(&new_ip, &["SET", "np:after-handover", "1"]).await?;
    ensure!(reply == "OK", "SET on the new master {new_master}: {reply}");
    for replica in pods.names_with_prefix(&format!("{NAME}-")) {
        if replica == new_master {
            continue;
        }
        let ip = pods.ip(&replica).context("a replica has no IP")?;
        eventually(
            Duration::from_secs(20),
            &format!("{replica} has the write"),
            || {
                let ip = ip.clone();
                async move {
                    let value = valkey_cli_reply(&ip, &["GET", "np:after-handover"]).await?;
                    ensure!(value == "1", "GET answered {value:?}");
                    Ok(())
                }
            },
        )
        .await?;
    }
    eprintln!("{master} handed over to {new_master}; its write reached every replica");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enforced_policies_admit_the_namespace_and_the_named_scrapers_and_refuse_the_rest() {
    let test = OperatorTest::start("op-np").await.unwrap();
    let client = test.client();
    let other = TestNamespace::create(&client, "np-other").await.unwrap();
    let scrapers = TestNamespace::create(&client, "np-prom").await.unwrap();
    if let Err(error) = run(&test, other.name(), scrapers.name()).await {
        dump_container_logs(&client, test.ns(), 30).await;
        panic!("{error:#}");
    }
    other.cleanup().await.unwrap();
    scrapers.cleanup().await.unwrap();
    test.cleanup().await.unwrap();
}
