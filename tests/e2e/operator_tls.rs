//! TLS end to end with a user-provided Secret (`spec.tls.secretName`), on the testbed.
//!
//! The test issues its own CA and one server/client certificate (rcgen) whose SANs cover the data
//! and Sentinel pod host names (`*.<headless>.<ns>.svc.cluster.local`), the Service names and
//! localhost, and then:
//! - creates a 3 data + 3 Sentinel `Valkey` with `tls: {enabled: true, secretName}` BEFORE the
//!   Secret exists: `ReconcileBlocked=True/SecretMissing` and a Warning Event name the Secret, no
//!   StatefulSet is made; a Secret without `ca.crt` still holds it back (valkey-server would not
//!   start without its CA file); with `ca.crt` but a serverAuth-only certificate it stays held
//!   back with `ReconcileBlocked=True/TLSCertificateUnusable` naming clientAuth and a Warning
//!   Event; the right certificate brings the cluster to PHASE OK;
//! - asserts the documented port behaviour (reference "TLS Details" / "Port Summary": the plaintext
//!   ports 6379 and 26379 are disabled, port 0, without `allowUnencrypted`): a plain connection to
//!   6379 / 26379 is refused and plain RESP on 16379 gets no reply; a TLS client verifying the CA
//!   (vko-valkey with `TlsOptions`, the pod's DNS name as server name) writes to the master and
//!   reads on both replicas; a client trusting another CA is refused; every data pod runs
//!   `tls-replication yes`; the master lists both replicas by host name; each Sentinel answers on
//!   36379 over TLS and names master, replicas and peers by host name only;
//! - deletes the master pod gracefully under a TLS writer doing plain `SET` (re-resolving the
//!   master through Sentinel over TLS on any error): a new master, 0 OK'd writes lost, and the
//!   cluster whole again (the old pod rejoins as a replica over TLS);
//! - rotates the CA under a TLS writer, in two certificate changes: `ca.crt` gains the next CA
//!   (`TLSMaterialStale` True naming the pods, every pod of both tiers rolled, cleared with
//!   `TLSMaterialCurrent`), then certificate and key come from it: the data pods' sidecars reload
//!   it in place — every data pod serves the new certificate (handshake fingerprint) with its UID
//!   and restart count unchanged at every sample — and the Sentinel pods, which cannot reload,
//!   are replaced; 0 OK'd writes lost; afterwards every pod serves the next CA's certificate and
//!   the old CA alone is refused.
//!
//! A second test runs dual-port mode (`allowUnencrypted` on both tiers) on Valkey 9.1, whose
//! Sentinels reload certificates in place (ADR 0053), and gives the Secret a certificate that
//! names the data pods but not the Sentinels: the data pods reload it, the operator refuses it,
//! no Sentinel ever serves it, the writer never stalls; the old one back, all current again.
//!
//! `spec.tls.certManager` (the testbed's cert-manager issuing) is tested in operator_cert_manager,
//! with this file's checks.
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).

use vko_e2e::{ha_support, operator_support, tls_support};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use ha_support::{
    Pods, ROLE_LABEL, WriteLog, contains_ipv4, dump_container_logs, endpoint_pods, eventually,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use operator_support::{OperatorTest, condition, ok_with, wait_for_valkey};
use rcgen::{ExtendedKeyUsagePurpose, KeyPair};
use tls_support::{Ca, pod_certificate_params};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use vko_api::Valkey;
use vko_render::Names;
use vko_testbed::harness::{apply_yaml, wait_until};
use vko_valkey::parse::ReplicationRole;
use vko_valkey::{ConnectOptions, Reply, SentinelClient, TlsOptions, ValkeyClient};

pub(crate) const NAME: &str = "vt";
const SECRET: &str = "vt-user-certs";
pub(crate) const DOMAIN: &str = "cluster.local";
pub(crate) const TLS_PORT: u16 = 16379;
const PLAIN_PORT: u16 = 6379;
const SENTINEL_TLS_PORT: u16 = 36379;
const SENTINEL_PLAIN_PORT: u16 = 26379;

/// PEM material of the Secret.
struct Material {
    ca: String,
    cert: String,
    key: String,
    /// The same names and key, issued by the same CA, with only the serverAuth usage: the pods
    /// could not replicate with it.
    server_auth_only_cert: String,
    /// The same key, issued by the same CA, naming the data pods and Services but not the
    /// Sentinel pods.
    data_only_cert: String,
    /// A second CA, and a certificate for the same names with a new key issued by it: the
    /// material of a CA rotation.
    next_ca: String,
    next_cert: String,
    next_key: String,
}

/// A fresh CA and one certificate for every data and Sentinel host name of `NAME` in `ns`, with
/// both the serverAuth and clientAuth usages (the servers verify a presented client certificate).
fn issue(ns: &str) -> anyhow::Result<Material> {
    let names = Names::new(NAME, ns, DOMAIN)?;
    let ca = Ca::new("vko-e2e user CA")?;
    let issuer = &ca.issuer;
    let key = KeyPair::generate()?;
    let params = pod_certificate_params(&names, ns, true)?;
    let cert = params.signed_by(&key, issuer)?;
    let mut server_auth_only = params.clone();
    server_auth_only.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_auth_only_cert = server_auth_only.signed_by(&key, issuer)?;
    let data_only_cert = pod_certificate_params(&names, ns, false)?.signed_by(&key, issuer)?;
    let next_ca = Ca::new("vko-e2e user CA, next")?;
    let next_key = KeyPair::generate()?;
    let next_cert = params.signed_by(&next_key, &next_ca.issuer)?;
    Ok(Material {
        ca: ca.certificate.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
        server_auth_only_cert: server_auth_only_cert.pem(),
        data_only_cert: data_only_cert.pem(),
        next_ca: next_ca.certificate.pem(),
        next_cert: next_cert.pem(),
        next_key: next_key.serialize_pem(),
    })
}

/// How the test dials: pod IP, certificate verified against the pod's DNS name.
#[derive(Clone)]
pub(crate) struct Dial {
    pub(crate) ca: Vec<u8>,
    pub(crate) names: Names,
}

impl Dial {
    pub(crate) fn options(&self, ip: &str, port: u16, server_name: String) -> ConnectOptions {
        let mut options = ConnectOptions::new(ip, port);
        options.connect_timeout = Duration::from_secs(3);
        options.command_timeout = Duration::from_secs(3);
        options.tls = Some(TlsOptions {
            ca_pem: self.ca.clone(),
            client_cert_pem: None,
            client_key_pem: None,
            server_name: Some(server_name),
        });
        options
    }

    fn fqdn(&self, pod: &str) -> String {
        let service = if pod.starts_with(&format!("{NAME}-sentinel-")) {
            self.names.sentinel_headless_service()
        } else {
            self.names.headless_service()
        };
        format!("{pod}.{}", self.names.service_fqdn(&service))
    }

    async fn valkey(&self, pods: &Pods, pod: &str) -> anyhow::Result<ValkeyClient> {
        let ip = pods.ip(pod).with_context(|| format!("{pod} has no IP"))?;
        ValkeyClient::connect(&self.options(&ip, TLS_PORT, self.fqdn(pod)))
            .await
            .with_context(|| format!("TLS connect to {pod}"))
    }

    async fn sentinel(&self, pods: &Pods, pod: &str) -> anyhow::Result<SentinelClient> {
        let ip = pods.ip(pod).with_context(|| format!("{pod} has no IP"))?;
        SentinelClient::connect(&self.options(&ip, SENTINEL_TLS_PORT, self.fqdn(pod)))
            .await
            .with_context(|| format!("TLS connect to sentinel {pod}"))
    }

    /// The fingerprint of the certificate `pod` serves on its TLS port (a Sentinel on 36379, a
    /// data pod on 16379), after a handshake verified against the CA and the pod's DNS name.
    pub(crate) async fn served(&self, pods: &Pods, pod: &str) -> anyhow::Result<String> {
        let ip = pods.ip(pod).with_context(|| format!("{pod} has no IP"))?;
        let port = if pod.starts_with(&format!("{NAME}-sentinel-")) {
            SENTINEL_TLS_PORT
        } else {
            TLS_PORT
        };
        vko_valkey::served::served_certificate(
            &format!("{ip}:{port}"),
            &self.fqdn(pod),
            &self.ca,
            Duration::from_secs(3),
        )
        .await
        .with_context(|| format!("the certificate {pod} serves"))
    }

    /// A verified TLS connection to `pod` (a Sentinel on its TLS port, a data pod on 16379).
    async fn handshake(&self, pods: &Pods, pod: &str) -> anyhow::Result<()> {
        if pod.starts_with(&format!("{NAME}-sentinel-")) {
            self.sentinel(pods, pod).await.map(|_| ())
        } else {
            self.valkey(pods, pod).await.map(|_| ())
        }
    }

    /// The master pod as the first Sentinel that answers (over TLS) names it; the port must be
    /// the TLS port.
    async fn sentinel_master(&self, pods: &Pods) -> anyhow::Result<String> {
        let mut last = None;
        for sentinel in pods.names_with_prefix(&format!("{NAME}-sentinel-")) {
            let answer = async {
                let client = self.sentinel(pods, &sentinel).await?;
                client
                    .get_master_addr_by_name(NAME)
                    .await?
                    .context("no master known")
            }
            .await;
            match answer {
                Ok((host, port)) => {
                    ensure!(port == TLS_PORT, "{sentinel} names port {port}");
                    return Ok(host.split('.').next().unwrap_or_default().to_owned());
                }
                Err(error) => last = Some(format!("{sentinel}: {error:#}")),
            }
        }
        bail!("no Sentinel named the master over TLS (last: {last:?})")
    }
}

/// A plain TCP connection to `ip:port` is refused (nothing listens there).
async fn plain_refused(ip: &str, port: u16) -> anyhow::Result<()> {
    match tokio::time::timeout(Duration::from_secs(3), TcpStream::connect((ip, port))).await {
        Ok(Err(error)) if error.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
        Ok(Err(error)) => bail!("{ip}:{port}: expected a refusal, got {error}"),
        Ok(Ok(_)) => bail!("{ip}:{port} accepted a plain-text connection"),
        Err(_) => bail!("{ip}:{port}: connect timed out instead of being refused"),
    }
}

/// Plain-text RESP on the TLS port gets no RESP reply (the server waits for a TLS handshake and
/// drops the connection).
async fn plain_resp_gets_no_reply(ip: &str, port: u16) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect((ip, port)).await?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n").await?;
    let mut buffer = vec![0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut buffer)).await;
    if let Ok(Ok(n)) = read {
        let text = String::from_utf8_lossy(&buffer[..n]);
        ensure!(
            !text.starts_with('+') && !text.starts_with('-'),
            "{ip}:{port} answered plain RESP: {text:?}"
        );
    }
    Ok(())
}

/// A writer over TLS: plain `SET` to whoever Sentinel (over TLS) names master, re-resolving on
/// any error.
pub(crate) struct TlsWriter {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsWriter {
    pub(crate) fn start(client: kube::Client, ns: String, dial: Dial, prefix: &str) -> TlsWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(WriteLog::default()));
        let task = tokio::spawn(tls_write_loop(
            client,
            ns,
            dial,
            prefix.to_owned(),
            stop.clone(),
            log.clone(),
        ));
        TlsWriter { stop, log, task }
    }

    async fn acked(&self) -> usize {
        self.log.lock().await.acked.len()
    }

    /// The longest interval between two OKs so far.
    async fn longest_gap(&self) -> Duration {
        self.log.lock().await.longest_gap()
    }

    pub(crate) async fn wait_for(&self, at_least: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.acked().await < at_least {
            ensure!(
                Instant::now() < deadline,
                "the TLS writer made no progress (errors: {:?})",
                self.log.lock().await.errors
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn stop(self) -> WriteLog {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        std::mem::take(&mut *self.log.lock().await)
    }
}

async fn note_error(log: &Mutex<WriteLog>, error: String) {
    let mut log = log.lock().await;
    log.error_count += 1;
    if log.errors.len() < 20 {
        log.errors.push(error);
    }
}

async fn tls_write_loop(
    client: kube::Client,
    ns: String,
    dial: Dial,
    prefix: String,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<WriteLog>>,
) {
    let mut sequence = 0u64;
    let mut conn: Option<(ValkeyClient, String)> = None;
    while !stop.load(Ordering::SeqCst) {
        if conn.is_none() {
            let resolved = async {
                let pods = Pods::list(&client, &ns).await?;
                let master = dial.sentinel_master(&pods).await?;
                Ok::<_, anyhow::Error>((dial.valkey(&pods, &master).await?, master))
            }
            .await;
            match resolved {
                Ok(found) => conn = Some(found),
                Err(error) => {
                    note_error(&log, format!("resolve: {error:#}")).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some((valkey, master)) = conn.as_ref() else {
            continue;
        };
        sequence += 1;
        let key = format!("{prefix}:{sequence}");
        match valkey.set(&key, b"v").await {
            Ok(()) => {
                let mut log = log.lock().await;
                if log.masters.last().is_none_or(|(_, m)| m != master) {
                    let index = log.ok_times.len();
                    log.masters.push((index, master.clone()));
                }
                log.acked.push(key);
                log.ok_times.push(Instant::now());
            }
            Err(error) => {
                note_error(&log, format!("SET: {error}")).await;
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Which of `keys` the server does not hold (EXISTS in batches, over TLS).
async fn missing_keys(valkey: &ValkeyClient, keys: &[String]) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    for batch in keys.chunks(500) {
        let mut args = vec!["EXISTS".to_owned()];
        args.extend(batch.iter().cloned());
        let count = valkey.command(args).await?;
        if count != Reply::Int(i64::try_from(batch.len())?) {
            for key in batch {
                if valkey.command(["EXISTS", key.as_str()]).await? != Reply::Int(1) {
                    missing.push(key.clone());
                }
            }
        }
    }
    Ok(missing)
}

async fn warning_events(client: &kube::Client, ns: &str) -> Vec<Event> {
    operator_support::events_about(client, ns, NAME, "Warning").await
}

const TIMEOUT: Duration = Duration::from_secs(120);

/// Without its Secret the cluster is held back and says so; the Secret's creation alone
/// brings it to OK. Returns how long that took.
async fn secret_missing_then_created(
    client: &kube::Client,
    ns: &str,
    material: &Material,
) -> anyhow::Result<Duration> {
    apply_yaml(
        client,
        ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {{replicas: 3, image: valkey/valkey:8.0, sentinel: {{enabled: true, replicas: 3}}, tls: {{enabled: true, secretName: {SECRET}}}}}\n"
        ),
    )
    .await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let valkey = wait_for_valkey(
        &valkeys,
        NAME,
        "ReconcileBlocked=True/SecretMissing",
        TIMEOUT,
        |v| {
            condition(v, "ReconcileBlocked")
                .is_some_and(|(status, reason, _)| status == "True" && reason == "SecretMissing")
        },
    )
    .await?;
    let (_, _, message) =
        condition(&valkey, "ReconcileBlocked").context("ReconcileBlocked vanished")?;
    ensure!(message.contains(SECRET), "{message}");
    eprintln!("without the Secret: ReconcileBlocked/SecretMissing: {message}");
    let sts: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    ensure!(
        sts.get_opt(NAME).await?.is_none(),
        "a data StatefulSet exists before its TLS Secret"
    );
    wait_until(
        "a SecretMissing Warning Event naming the TLS Secret",
        TIMEOUT,
        || async move {
            Ok(warning_events(client, ns)
                .await
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("SecretMissing")
                        && e.note.as_deref().is_some_and(|n| n.contains(SECRET))
                })
                .then_some(()))
        },
    )
    .await?;

    // First without ca.crt (a valid kubernetes.io/tls Secret): the pods' config names
    // /tls/ca.crt and valkey-server would not start, so the StatefulSets stay held back.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": SECRET},
        "type": "kubernetes.io/tls",
        "stringData": {
            "tls.crt": material.cert,
            "tls.key": material.key,
        }
    }))?;
    secrets.create(&PostParams::default(), &secret).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    ensure!(
        sts.get_opt(NAME).await?.is_none(),
        "a data StatefulSet was created from a TLS Secret without ca.crt"
    );
    let valkey = valkeys.get(NAME).await?;
    let blocked = condition(&valkey, "ReconcileBlocked");
    ensure!(
        blocked
            .as_ref()
            .is_some_and(|(status, reason, message)| status == "True"
                && reason == "SecretMissing"
                && message.contains("ca.crt")),
        "without ca.crt: {blocked:?}"
    );

    // Then with ca.crt but a certificate the pods could not replicate with (serverAuth only):
    // refused before any pod starts, naming the missing usage.
    secrets
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {
                "ca.crt": material.ca,
                "tls.crt": material.server_auth_only_cert,
            }})),
        )
        .await?;
    let valkey = certificate_refused(&valkeys).await?;
    let (_, _, message) =
        condition(&valkey, "ReconcileBlocked").context("ReconcileBlocked vanished")?;
    ensure!(
        message.contains(SECRET) && message.contains("clientAuth"),
        "{message}"
    );
    eprintln!("serverAuth-only certificate: ReconcileBlocked/TLSCertificateUnusable: {message}");
    wait_until(
        "a TLSCertificateUnusable Warning Event naming the TLS Secret",
        TIMEOUT,
        || async move {
            Ok(warning_events(client, ns)
                .await
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("TLSCertificateUnusable")
                        && e.note.as_deref().is_some_and(|n| n.contains(SECRET))
                })
                .then_some(()))
        },
    )
    .await?;
    ensure!(
        sts.get_opt(NAME).await?.is_none(),
        "a data StatefulSet was created from a serverAuth-only certificate"
    );

    secrets
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"tls.crt": material.cert}})),
        )
        .await?;
    let created = Instant::now();
    wait_for_valkey(
        &valkeys,
        NAME,
        "3 data pods ready and OK after the TLS Secret got a usable certificate",
        Duration::from_secs(300),
        ok_with(3),
    )
    .await?;
    let took = created.elapsed();
    let valkey = valkeys.get(NAME).await?;
    ensure!(
        condition(&valkey, "ReconcileBlocked").is_some_and(|(status, _, _)| status == "False"),
        "ReconcileBlocked still {:?}",
        condition(&valkey, "ReconcileBlocked")
    );
    Ok(took)
}

/// The data plane speaks TLS only, replicates over TLS, and Sentinel answers over TLS naming
/// host names only. Returns the master pod.
pub(crate) async fn serves_tls_only(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
) -> anyhow::Result<String> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let master = valkeys
        .get(NAME)
        .await?
        .status
        .and_then(|s| s.master_pod)
        .context("no status.masterPod")?;
    // Sentinel (over TLS) agrees, the master has both replicas online, and every Sentinel lists
    // both replicas (what OK already requires; re-checked here over TLS).
    let pods = eventually(
        Duration::from_secs(120),
        "Sentinel names the recorded master, which has 2 replicas",
        || async {
            let pods = Pods::list(client, ns).await?;
            let named = dial.sentinel_master(&pods).await?;
            ensure!(named == master, "Sentinel names {named}, status {master}");
            let replication = dial
                .valkey(&pods, &master)
                .await?
                .info_replication()
                .await?;
            ensure!(
                replication.connected_replicas == 2,
                "{master}: {} replicas",
                replication.connected_replicas
            );
            Ok(pods)
        },
    )
    .await?;

    // Exactly one master label, on the master.
    let data_pods = pods.names_with_prefix(&format!("{NAME}-"));
    ensure!(data_pods.len() == 3, "data pods {data_pods:?}");
    let labelled: Vec<&String> = data_pods
        .iter()
        .filter(|pod| {
            pods.by_name
                .get(*pod)
                .and_then(|p: &Pod| p.metadata.labels.as_ref())
                .and_then(|l| l.get(ROLE_LABEL))
                .map(String::as_str)
                == Some("master")
        })
        .collect();
    ensure!(labelled == [&master], "master labels on {labelled:?}");
    let rw = endpoint_pods(client, ns, &dial.names.rw_service()).await?;
    ensure!(rw == [master.clone()], "-rw endpoints {rw:?}");

    // The documented ports: the plain ones are closed, the TLS ones speak only TLS.
    for pod in &data_pods {
        let ip = pods.ip(pod).context("no IP")?;
        plain_refused(&ip, PLAIN_PORT).await?;
        plain_resp_gets_no_reply(&ip, TLS_PORT).await?;
        let valkey = dial.valkey(&pods, pod).await?;
        let config = valkey.config_get("*port").await?;
        ensure!(
            config.get("port").map(String::as_str) == Some("0")
                && config.get("tls-port").map(String::as_str) == Some("16379"),
            "{pod}: {config:?}"
        );
        let replication = valkey.config_get("tls-replication").await?;
        ensure!(
            replication.get("tls-replication").map(String::as_str) == Some("yes"),
            "{pod}: {replication:?}"
        );
    }
    let sentinels = pods.names_with_prefix(&format!("{NAME}-sentinel-"));
    ensure!(sentinels.len() == 3, "sentinel pods {sentinels:?}");
    for pod in &sentinels {
        let ip = pods.ip(pod).context("no IP")?;
        plain_refused(&ip, SENTINEL_PLAIN_PORT).await?;
        plain_resp_gets_no_reply(&ip, SENTINEL_TLS_PORT).await?;
    }

    // A client that does not trust the Secret's CA is refused: verification is real.
    let stranger_ca = Ca::new("someone else's CA")?;
    let stranger = Dial {
        ca: stranger_ca.certificate.pem().into_bytes(),
        names: dial.names.clone(),
    };
    match stranger.valkey(&pods, &master).await {
        Ok(_) => bail!("a client trusting another CA connected to {master}"),
        Err(error) => {
            let reason = error
                .downcast_ref::<vko_valkey::Error>()
                .map(vko_valkey::Error::reason);
            ensure!(reason == Some("Tls"), "expected a TLS refusal: {error:#}");
        }
    }

    // Write on the master over TLS, read it back there and on both replicas.
    let value = format!("written-at-{:?}", Instant::now());
    let on_master = dial.valkey(&pods, &master).await?;
    on_master.set("tls:probe", value.as_bytes()).await?;
    ensure!(
        on_master.get("tls:probe").await? == Some(value.clone().into_bytes()),
        "GET on the master"
    );
    let replication = on_master.info_replication().await?;
    ensure!(replication.role == ReplicationRole::Master);
    for replica in &replication.replicas {
        ensure!(
            !contains_ipv4(&replica.host),
            "the master lists a replica by IP: {}",
            replica.host
        );
    }
    for pod in data_pods.iter().filter(|p| **p != master) {
        let replica = dial.valkey(&pods, pod).await?;
        let info = replica.info_replication().await?;
        ensure!(info.role == ReplicationRole::Replica, "{pod}: {info:?}");
        let upstream = info.upstream.context("no upstream")?;
        ensure!(
            upstream.master_host == dial.fqdn(&master) && upstream.master_port == TLS_PORT,
            "{pod} replicates from {}:{}",
            upstream.master_host,
            upstream.master_port
        );
        eventually(
            Duration::from_secs(10),
            "the replica reads the value",
            || async {
                let got = replica.get("tls:probe").await?;
                ensure!(got == Some(value.clone().into_bytes()), "{pod}: {got:?}");
                Ok(())
            },
        )
        .await?;
    }

    // Every Sentinel answers over TLS, naming only host names.
    for pod in &sentinels {
        let sentinel = dial.sentinel(&pods, pod).await?;
        sentinel.ping().await?;
        let monitored = sentinel.master(NAME).await?;
        ensure!(
            monitored.host == dial.fqdn(&master) && monitored.port == TLS_PORT,
            "{pod} monitors {}:{}",
            monitored.host,
            monitored.port
        );
        let replicas = sentinel.replicas(NAME).await?;
        ensure!(replicas.len() == 2, "{pod}: replicas {replicas:?}");
        let peers = sentinel.sentinels(NAME).await?;
        ensure!(peers.len() == 2, "{pod}: sentinels {peers:?}");
        let hosts: Vec<&str> = std::iter::once(monitored.host.as_str())
            .chain(replicas.iter().map(|r| r.host.as_str()))
            .chain(peers.iter().map(|p| p.host.as_str()))
            .collect();
        ensure!(
            hosts.iter().all(|h| !contains_ipv4(h)),
            "{pod} names an IP: {hosts:?}"
        );
        ensure!(
            replicas.iter().all(|r| r.port == TLS_PORT)
                && peers.iter().all(|p| p.port == SENTINEL_TLS_PORT),
            "{pod}: ports {replicas:?} {peers:?}"
        );
    }
    Ok(master)
}

/// Graceful deletion of the master pod under a TLS writer: a new master, no OK'd write lost.
pub(crate) async fn master_deletion_under_a_tls_writer(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
    old_master: &str,
) -> anyhow::Result<()> {
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), dial.clone(), "drain");
    writer.wait_for(300).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let deleted_at = Instant::now();
    pods.delete(old_master, &DeleteParams::default()).await?;
    let (master, took) = eventually(Duration::from_secs(60), "a new master", || async {
        let pods = Pods::list(client, ns).await?;
        let master = dial.sentinel_master(&pods).await?;
        ensure!(master != old_master, "still {master}");
        let replication = dial
            .valkey(&pods, &master)
            .await?
            .info_replication()
            .await?;
        ensure!(replication.role == ReplicationRole::Master, "{master}");
        Ok((master, deleted_at.elapsed()))
    })
    .await?;
    eprintln!("TLS graceful handover: {old_master} -> {master} in {took:?}");

    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(180),
        "the cluster whole again",
        || async {
            let valkey = valkeys.get(NAME).await?;
            ensure!(ok_with(3)(&valkey), "status {:?}", valkey.status);
            let recorded = valkey.status.as_ref().and_then(|s| s.master_pod.clone());
            ensure!(
                recorded.as_deref() == Some(master.as_str()),
                "masterPod {recorded:?}"
            );
            let rw = endpoint_pods(client, ns, &dial.names.rw_service()).await?;
            ensure!(rw == [master.clone()], "-rw {rw:?}");
            let pods = Pods::list(client, ns).await?;
            let replication = dial
                .valkey(&pods, &master)
                .await?
                .info_replication()
                .await?;
            ensure!(
                replication.connected_replicas == 2,
                "{} replicas",
                replication.connected_replicas
            );
            // The re-created pod is back as a replica, over TLS.
            let back = dial
                .valkey(&pods, old_master)
                .await?
                .info_replication()
                .await?;
            ensure!(back.role == ReplicationRole::Replica, "{old_master}");
            Ok(())
        },
    )
    .await?;
    ensure!(
        took < Duration::from_secs(15),
        "new master only after {took:?}"
    );
    no_acknowledged_write_lost(writer, client, ns, dial, "TLS graceful handover").await
}

/// Lets `writer` make 300 more writes, stops it, and fails unless every write it saw OK'd is on
/// the master Sentinel names now.
pub(crate) async fn no_acknowledged_write_lost(
    writer: TlsWriter,
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
    what: &str,
) -> anyhow::Result<()> {
    let after = writer.acked().await;
    writer.wait_for(after + 300).await?;
    let log = writer.stop().await;
    let pods = Pods::list(client, ns).await?;
    let master = dial.sentinel_master(&pods).await?;
    let missing = missing_keys(&dial.valkey(&pods, &master).await?, &log.acked).await?;
    eprintln!(
        "{what}: {} writes OK'd, {} lost, longest gap between OKs {:?}, switchover gaps {:?}, {} errors (first: {:?})",
        log.acked.len(),
        missing.len(),
        log.longest_gap(),
        log.switchover_gaps(),
        log.error_count,
        log.errors.iter().take(5).collect::<Vec<_>>()
    );
    ensure!(
        missing.is_empty(),
        "{} OK'd writes lost: {:?}",
        missing.len(),
        missing.iter().take(20).collect::<Vec<_>>()
    );
    Ok(())
}

/// The cluster is done with a certificate change: `TLSMaterialStale=False/TLSMaterialCurrent`,
/// OK with 3 data pods, no rolling update.
fn settled_on_current_material(valkey: &Valkey) -> anyhow::Result<()> {
    let stale = tls_material_stale(valkey);
    ensure!(
        stale
            .as_ref()
            .is_some_and(|(status, reason, _)| status == "False" && reason == "TLSMaterialCurrent"),
        "{stale:?}"
    );
    ensure!(ok_with(3)(valkey), "status {:?}", valkey.status);
    ensure!(
        valkey
            .status
            .as_ref()
            .is_some_and(|status| status.rolling_update.is_none()),
        "still rolling"
    );
    Ok(())
}

/// `TLSMaterialStale` as (status, reason, message).
fn tls_material_stale(valkey: &Valkey) -> Option<(String, String, String)> {
    condition(valkey, "TLSMaterialStale")
}

/// Every pod of both tiers, by name, with its UID.
async fn pod_uids(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<(String, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut uids: Vec<(String, String)> = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|pod| Some((pod.metadata.name?, pod.metadata.uid?)))
        .filter(|(name, _)| name.starts_with(&format!("{NAME}-")))
        .collect();
    uids.sort();
    Ok(uids)
}

/// The user Secret's data merged with `data`.
async fn patch_secret(
    client: &kube::Client,
    ns: &str,
    data: serde_json::Value,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    secrets
        .patch(
            SECRET,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "stringData": data })),
        )
        .await?;
    Ok(())
}

/// One certificate change (`change`: the user Secret patched, or cert-manager made to re-issue);
/// `TLSMaterialStale` turns True naming pods of both tiers, the rolling update replaces every pod,
/// the condition clears with `TLSMaterialCurrent`, and the cluster is OK again. Returns how long
/// the roll took.
pub(crate) async fn certificate_change_rolls_every_pod(
    client: &kube::Client,
    ns: &str,
    change: impl std::future::Future<Output = anyhow::Result<()>>,
    what: &str,
) -> anyhow::Result<Duration> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let before = pod_uids(client, ns).await?;
    ensure!(before.len() == 6, "pods before the change: {before:?}");
    change.await?;
    let changed = Instant::now();
    let (_, _, message) = eventually(
        Duration::from_secs(60),
        &format!("TLSMaterialStale=True after {what}"),
        || async {
            let valkey = valkeys.get(NAME).await?;
            match tls_material_stale(&valkey) {
                Some(stale) if stale.0 == "True" => Ok(stale),
                other => bail!("{other:?}"),
            }
        },
    )
    .await?;
    eprintln!(
        "{what}: TLSMaterialStale=True after {:?}: {message}",
        changed.elapsed()
    );
    ensure!(message.contains("data tier: "), "{message}");
    ensure!(message.contains(&format!("{NAME}-")), "{message}");

    let after = eventually(
        Duration::from_secs(400),
        &format!("every pod replaced and TLSMaterialStale=False/TLSMaterialCurrent after {what}"),
        || async {
            let valkey = valkeys.get(NAME).await?;
            settled_on_current_material(&valkey)?;
            let after = pod_uids(client, ns).await?;
            ensure!(after.len() == 6, "{after:?}");
            let kept: Vec<&(String, String)> =
                after.iter().filter(|pod| before.contains(pod)).collect();
            ensure!(kept.is_empty(), "not replaced yet: {kept:?}");
            Ok(after)
        },
    )
    .await?;
    let took = changed.elapsed();
    eprintln!(
        "{what}: every pod replaced ({} pods) in {took:?}",
        after.len()
    );
    Ok(took)
}

/// Every pod of both tiers: (name, UID, restarts summed over its containers).
async fn pod_lives(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<(String, String, i32)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut lives: Vec<(String, String, i32)> = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|pod| {
            let restarts = pod
                .status
                .as_ref()
                .and_then(|status| status.container_statuses.as_ref())
                .map_or(0, |containers| {
                    containers.iter().map(|c| c.restart_count).sum()
                });
            Some((pod.metadata.name?, pod.metadata.uid?, restarts))
        })
        .filter(|(name, ..)| name.starts_with(&format!("{NAME}-")))
        .collect();
    lives.sort();
    Ok(lives)
}

/// The fingerprint of the leaf certificate in `secret`'s `tls.crt`.
pub(crate) async fn secret_certificate(
    client: &kube::Client,
    ns: &str,
    secret: &str,
) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let cert = secrets
        .get(secret)
        .await?
        .data
        .and_then(|data| data.get("tls.crt").map(|crt| crt.0.clone()))
        .with_context(|| format!("{secret} has no tls.crt"))?;
    vko_valkey::certificate::leaf_fingerprint(&cert).map_err(anyhow::Error::msg)
}

/// How long a certificate change under the same CA took: until every data pod served the new
/// certificate, and until the whole cluster was current again.
#[derive(Debug)]
pub(crate) struct Reloaded {
    pub(crate) data_serving: Duration,
    pub(crate) all_current: Duration,
}

/// What a certificate change does to the Sentinel pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SentinelPods {
    /// Replaced (Sentinel before Valkey 9.1 cannot reload; or the Secret it mounts changed).
    Replaced,
    /// Kept, UID and restart count unchanged at every sample: the Sentinel re-read the
    /// certificate in place (Valkey 9.1, ADR 0053).
    ReloadInPlace,
}

/// One change of certificate and key under the same CA (`change`; `data_secret` and
/// `sentinel_secret` are the Secrets the tiers mount afterwards): every data pod serves the data
/// Secret's new certificate with its UID and restart count unchanged at every sample (the sidecar
/// reloaded the server in place, ADR 0038), every Sentinel pod is replaced or reloads in place as
/// `sentinels` says and serves its Secret's certificate, `TLSMaterialStale` ends `False` /
/// `TLSMaterialCurrent`, the cluster is OK and not rolling.
pub(crate) async fn certificate_change_reloads_the_data_pods(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
    change: impl std::future::Future<Output = anyhow::Result<()>>,
    what: &str,
    (data_secret, sentinel_secret): (&str, &str),
    sentinels: SentinelPods,
) -> anyhow::Result<Reloaded> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let sentinel_prefix = format!("{NAME}-sentinel-");
    let before = pod_lives(client, ns).await?;
    ensure!(before.len() == 6, "pods before the change: {before:?}");
    let (sentinels_before, data_before): (Vec<_>, Vec<_>) = before
        .into_iter()
        .partition(|(name, ..)| name.starts_with(&sentinel_prefix));
    let old_data = secret_certificate(client, ns, data_secret).await?;
    change.await?;
    let changed = Instant::now();
    let deadline = changed + Duration::from_secs(400);
    let mut data_serving = None;
    let mut last = String::new();
    loop {
        ensure!(
            Instant::now() < deadline,
            "{what}: not done after 400 s: {last}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let lives = pod_lives(client, ns).await?;
        let kept = match sentinels {
            SentinelPods::Replaced => data_before.iter().collect::<Vec<_>>(),
            SentinelPods::ReloadInPlace => data_before.iter().chain(&sentinels_before).collect(),
        };
        for (name, uid, restarts) in kept {
            let now = lives.iter().find(|(pod, ..)| pod == name);
            ensure!(
                now.is_some_and(
                    |(_, now_uid, now_restarts)| now_uid == uid && now_restarts == restarts
                ),
                "{what}: pod {name} was replaced or restarted (before: uid {uid}, \
                 {restarts} restarts; now: {now:?})"
            );
        }
        let sample = async {
            let data = secret_certificate(client, ns, data_secret).await?;
            ensure!(data != old_data, "{data_secret} not re-issued yet");
            let sentinel = secret_certificate(client, ns, sentinel_secret).await?;
            let pods = Pods::list(client, ns).await?;
            for (pod, ..) in &data_before {
                let served = dial.served(&pods, pod).await?;
                ensure!(served == data, "{pod} serves {served}, not {data}");
            }
            if data_serving.is_none() {
                data_serving = Some(changed.elapsed());
                eprintln!(
                    "{what}: every data pod serves the new certificate after {:?}, none restarted",
                    changed.elapsed()
                );
            }
            for (pod, uid, _) in &sentinels_before {
                ensure!(
                    sentinels == SentinelPods::ReloadInPlace
                        || lives
                            .iter()
                            .all(|(name, now_uid, _)| name != pod || now_uid != uid),
                    "Sentinel {pod} not replaced yet"
                );
                let served = dial.served(&pods, pod).await?;
                ensure!(served == sentinel, "{pod} serves {served}, not {sentinel}");
            }
            let valkey = valkeys.get(NAME).await?;
            settled_on_current_material(&valkey)?;
            anyhow::Ok(())
        }
        .await;
        match sample {
            Ok(()) => break,
            Err(error) => last = format!("{error:#}"),
        }
    }
    let reloaded = Reloaded {
        data_serving: data_serving.unwrap_or_default(),
        all_current: changed.elapsed(),
    };
    eprintln!(
        "{what}: data pods reloaded in place ({:?}), Sentinel pods {}, TLSMaterialCurrent \
         after {:?}",
        reloaded.data_serving,
        match sentinels {
            SentinelPods::Replaced => "replaced",
            SentinelPods::ReloadInPlace => "reloaded in place (none replaced or restarted)",
        },
        reloaded.all_current
    );
    Ok(reloaded)
}

/// A CA rotation with a user Secret, in the two steps it takes: first `ca.crt` gains the next CA
/// (every pod replaced, so all trust both), then the certificate and key become the next CA's
/// (the data pods reload it in place with 0 restarts, the Sentinel pods are replaced). Under a
/// plain-`SET` TLS writer trusting both CAs: 0 OK'd writes lost. Afterwards every pod of both tiers serves the next CA's
/// certificate: a client trusting only the next CA reaches all six, one trusting only the old CA
/// is refused.
async fn ca_rotation_rolls_without_loss(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
    material: &Material,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let initial = eventually(
        Duration::from_secs(30),
        "TLSMaterialStale=False/TLSMaterialCurrent on the healthy TLS cluster",
        || async {
            let valkey = valkeys.get(NAME).await?;
            match tls_material_stale(&valkey) {
                Some(condition)
                    if condition.0 == "False" && condition.1 == "TLSMaterialCurrent" =>
                {
                    Ok(condition)
                }
                other => bail!("{other:?}"),
            }
        },
    )
    .await?;
    eprintln!("before the rotation: TLSMaterialStale {initial:?}");

    let bundle = format!("{}{}", material.ca, material.next_ca);
    let both = Dial {
        ca: bundle.clone().into_bytes(),
        names: dial.names.clone(),
    };
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), both.clone(), "rotate");
    writer.wait_for(300).await?;
    let trust = certificate_change_rolls_every_pod(
        client,
        ns,
        patch_secret(client, ns, serde_json::json!({ "ca.crt": bundle })),
        "ca.crt gained the next CA",
    )
    .await?;
    let next = serde_json::json!({ "tls.crt": material.next_cert, "tls.key": material.next_key });
    let leaf = certificate_change_reloads_the_data_pods(
        client,
        ns,
        &both,
        patch_secret(client, ns, next),
        "the certificate issued by the next CA",
        (SECRET, SECRET),
        SentinelPods::Replaced,
    )
    .await?;
    no_acknowledged_write_lost(
        writer,
        client,
        ns,
        &both,
        &format!("CA rotation (two rolls, {trust:?} and {leaf:?})"),
    )
    .await?;
    let pods = Pods::list(client, ns).await?;

    let next_only = Dial {
        ca: material.next_ca.clone().into_bytes(),
        names: dial.names.clone(),
    };
    for pod in pods.names_with_prefix(&format!("{NAME}-")) {
        next_only
            .handshake(&pods, &pod)
            .await
            .with_context(|| format!("{pod} does not serve the next CA's certificate"))?;
        ensure!(
            dial.handshake(&pods, &pod).await.is_err(),
            "{pod} still accepted a client trusting only the old CA"
        );
    }
    eprintln!(
        "after the rotation: all 6 pods serve the next CA's certificate, the old CA is refused"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_from_a_user_secret_serves_only_tls_and_hands_over_without_loss() {
    vko_valkey::install_default_crypto_provider();
    let test = OperatorTest::start("op-tls").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let material = issue(&ns).unwrap();
    let dial = Dial {
        ca: material.ca.clone().into_bytes(),
        names: Names::new(NAME, &ns, DOMAIN).unwrap(),
    };

    let outcome = async {
        let took = secret_missing_then_created(&client, &ns, &material).await?;
        eprintln!("PHASE OK {took:?} after the TLS Secret got its ca.crt");
        let master = serves_tls_only(&client, &ns, &dial).await?;
        eprintln!("TLS only: plain ports refused, TLS SET/GET, tls-replication yes, Sentinel over TLS with host names; master {master}");
        master_deletion_under_a_tls_writer(&client, &ns, &dial, &master).await?;
        ca_rotation_rolls_without_loss(&client, &ns, &dial, &material).await
    }
    .await;
    if let Err(error) = outcome {
        dump_container_logs(&client, &ns, 60).await;
        panic!("{error:#}");
    }

    test.cleanup().await.unwrap();
}

/// Waits until the operator refuses the Secret's certificate:
/// `ReconcileBlocked=True/TLSCertificateUnusable`.
async fn certificate_refused(valkeys: &Api<Valkey>) -> anyhow::Result<Valkey> {
    wait_for_valkey(
        valkeys,
        NAME,
        "ReconcileBlocked=True/TLSCertificateUnusable",
        TIMEOUT,
        |v| {
            condition(v, "ReconcileBlocked").is_some_and(|(status, reason, _)| {
                status == "True" && reason == "TLSCertificateUnusable"
            })
        },
    )
    .await
}

/// A 9.1 cluster's Secret gets a certificate under the same CA that names the data pods but not
/// the Sentinels (ADR 0053), under a TLS writer: the data pods reload it (it names them; this
/// also shows the kubelet delivered it), the operator refuses it
/// (`ReconcileBlocked=True/TLSCertificateUnusable`), and no Sentinel ever serves it — loaded,
/// the data pods' fencers could not verify any Sentinel and the master would fence itself. The
/// writer never stalls, no pod restarts; the old certificate put back, every pod serves it and
/// the cluster is current again, 0 acknowledged writes lost.
async fn sentinels_never_load_a_certificate_that_does_not_name_them(
    client: &kube::Client,
    ns: &str,
    dial: &Dial,
    material: &Material,
) -> anyhow::Result<()> {
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let before = pod_lives(client, ns).await?;
    let original = secret_certificate(client, ns, SECRET).await?;
    let data_only = vko_valkey::certificate::leaf_fingerprint(material.data_only_cert.as_bytes())
        .map_err(anyhow::Error::msg)?;
    let writer = TlsWriter::start(client.clone(), ns.to_owned(), dial.clone(), "refused");
    writer.wait_for(300).await?;
    patch_secret(
        client,
        ns,
        serde_json::json!({ "tls.crt": material.data_only_cert }),
    )
    .await?;
    let changed = Instant::now();
    let pods = Pods::list(client, ns).await?;
    let data: Vec<String> = pods.names_with_prefix(&format!("{NAME}-"));
    let sentinels: Vec<String> = pods.names_with_prefix(&format!("{NAME}-sentinel-"));
    eventually(
        Duration::from_secs(90),
        "every data pod serves the certificate that leaves out the Sentinels",
        || async {
            for pod in &data {
                let served = dial.served(&pods, pod).await?;
                ensure!(served == data_only, "{pod} serves {served}");
            }
            Ok(())
        },
    )
    .await?;
    certificate_refused(&valkeys).await?;
    // The Sentinels' tls-reload containers look every 2 s: give them several looks.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for pod in &sentinels {
        let served = dial.served(&pods, pod).await?;
        ensure!(
            served == original,
            "Sentinel {pod} serves {served}, not the certificate it had ({original})"
        );
    }
    eprintln!(
        "a certificate leaving out the Sentinels: the data pods serve it {:?} after the change, \
         the operator refuses it, every Sentinel still serves its own",
        changed.elapsed()
    );
    patch_secret(client, ns, serde_json::json!({ "tls.crt": material.cert })).await?;
    eventually(
        Duration::from_secs(90),
        "every pod serves the original certificate, TLSMaterialCurrent",
        || async {
            for pod in data.iter().chain(&sentinels) {
                let served = dial.served(&pods, pod).await?;
                ensure!(served == original, "{pod} serves {served}");
            }
            settled_on_current_material(&valkeys.get(NAME).await?)
        },
    )
    .await?;
    ensure!(
        pod_lives(client, ns).await? == before,
        "a pod was replaced or restarted"
    );
    let gap = writer.longest_gap().await;
    ensure!(
        gap <= Duration::from_secs(3),
        "the writer stalled {gap:?}: a fenced master?"
    );
    no_acknowledged_write_lost(
        writer,
        client,
        ns,
        dial,
        "a certificate that leaves out the Sentinels, then the old one back",
    )
    .await
}

/// Dual-port mode (reference "Dual-Port Mode") on Valkey 9.1: with `tls.allowUnencrypted` and
/// `sentinel.allowUnencrypted` the plaintext ports 6379 and 26379 stay open next to 16379 and
/// 36379; replication still runs over TLS (the replicas follow the master's TLS port), and
/// Sentinel still names the TLS port. Then a certificate that leaves out the Sentinels never
/// reaches them ([`sentinels_never_load_a_certificate_that_does_not_name_them`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_ports_on_9_1_and_its_sentinels_never_load_a_certificate_not_naming_them() {
    vko_valkey::install_default_crypto_provider();
    let test = OperatorTest::start("op-tls-dual").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let material = issue(&ns).unwrap();
    let dial = Dial {
        ca: material.ca.clone().into_bytes(),
        names: Names::new(NAME, &ns, DOMAIN).unwrap(),
    };
    let outcome = async {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": SECRET},
            "type": "kubernetes.io/tls",
            "stringData": {"tls.crt": material.cert, "tls.key": material.key, "ca.crt": material.ca},
        }))?;
        secrets.create(&PostParams::default(), &secret).await?;
        apply_yaml(
            &client,
            &ns,
            &format!(
                "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec: {{replicas: 3, image: valkey/valkey:9.1, sentinel: {{enabled: true, replicas: 3, allowUnencrypted: true}}, tls: {{enabled: true, secretName: {SECRET}, allowUnencrypted: true}}}}\n"
            ),
        )
        .await?;
        let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
        wait_for_valkey(&valkeys, NAME, "PHASE OK in dual-port mode", TIMEOUT, ok_with(3)).await?;
        let pods = Pods::list(&client, &ns).await?;
        let master = dial.sentinel_master(&pods).await?;
        let master_ip = pods.ip(&master).context("master IP")?;
        // Plain text on 6379: a write on the master, read back on every replica over plain text.
        let reply = ha_support::call(&master_ip, PLAIN_PORT, &["SET", "dual", "both ports"]).await?;
        ensure!(reply == ha_support::Reply::Simple("OK".into()), "{reply:?}");
        for pod in pods.names_with_prefix(&format!("{NAME}-")) {
            let ip = pods.ip(&pod).context("pod IP")?;
            if pod.starts_with(&format!("{NAME}-sentinel-")) {
                let plain = ha_support::call(&ip, SENTINEL_PLAIN_PORT, &["PING"]).await?;
                ensure!(plain == ha_support::Reply::Simple("PONG".into()), "{pod}: {plain:?}");
                let named = dial
                    .sentinel(&pods, &pod)
                    .await?
                    .get_master_addr_by_name(NAME)
                    .await?
                    .context("no master")?;
                ensure!(named.1 == TLS_PORT, "{pod} names port {}", named.1);
                continue;
            }
            let over_tls = dial.valkey(&pods, &pod).await?;
            let replication = over_tls.info_replication().await?;
            if pod != master {
                ensure!(
                    replication.role == ReplicationRole::Replica,
                    "{pod}: {replication:?}"
                );
                let info = ha_support::call(&ip, PLAIN_PORT, &["INFO", "replication"]).await?;
                let text = info.text().unwrap_or_default().to_owned();
                ensure!(
                    text.contains(&format!("master_port:{TLS_PORT}")),
                    "{pod} does not replicate over the TLS port: {text}"
                );
                eventually(Duration::from_secs(30), "the write on the replica", || {
                    let ip = ip.clone();
                    async move {
                        let value = ha_support::call(&ip, PLAIN_PORT, &["GET", "dual"]).await?;
                        ensure!(value.text() == Some("both ports"), "{value:?}");
                        Ok(())
                    }
                })
                .await?;
            }
            let tls_replication = over_tls.config_get("tls-replication").await?;
            ensure!(
                tls_replication.iter().any(|(_, value)| value == "yes"),
                "{pod}: tls-replication {tls_replication:?}"
            );
        }
        eprintln!(
            "dual-port: plain 6379 and 26379 answer, TLS 16379 and 36379 answer, replicas follow the master on {TLS_PORT}, Sentinel names {TLS_PORT}"
        );
        sentinels_never_load_a_certificate_that_does_not_name_them(&client, &ns, &dial, &material)
            .await
    }
    .await;
    if let Err(error) = outcome {
        dump_container_logs(&client, &ns, 60).await;
        panic!("{error:#}");
    }
    test.cleanup().await.unwrap();
}
