//! Password rotation without a restart (issue 16 item 2, ADR 0035), on a 3 data + 3 Sentinel
//! cluster with auth on Sentinel too, the metrics exporter and the observer, under two writers
//! that authenticate on every new connection: one with the old password (reconnecting every 100
//! writes) from before the change until the old one is near its retirement, one with the new
//! password from the moment both are accepted.
//!
//! The auth Secret's value changes; the operator reports `PasswordRotation=True/
//! OldPasswordGracePeriod` once every server and Sentinel accepts both, and `False/
//! PasswordRotated` after `spec.auth.oldPasswordGracePeriod` (20 s here). Then: the old password
//! is refused and the new one accepted everywhere with one ACL password left, `masterauth` is the
//! new one and the replicas reconnect with it, no pod restarted or was replaced, no writer was
//! refused, every exporter reports `redis_up 1`, the observer is ready, a Sentinel failover works
//! (Sentinel reaches the servers with the new `auth-pass`), every acknowledged write is on the
//! final master, and a replica's valkey-server killed afterwards restarts from the effective
//! config the sidecar rewrote (new password) and resyncs.

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use ha_support::{
    Conn, Pods, ROLE_LABEL, Reply, SENTINEL_PORT, VALKEY_PORT, eventually, kill_valkey_server,
};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use operator_support::{OperatorTest, condition, events_about, ok_with, wait_for_valkey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;
use vko_api::Valkey;

const OLD: &str = "old-pässword one";
const NEW: &str = "new pässword two";
const NAME: &str = "rot";
const METRICS_PORT: u16 = 9121;

/// What a writer saw.
#[derive(Debug, Default)]
struct Log {
    acked: Vec<String>,
    /// AUTH answered with an error (`WRONGPASS`): the password was refused.
    auth_refused: usize,
    errors: Vec<String>,
}

struct AuthWriter {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    task: tokio::task::JoinHandle<()>,
}

impl AuthWriter {
    /// Plain `SET`s to the pod labelled master, `AUTH password` on every new connection, a new
    /// connection every `reconnect_every` writes and after any error.
    fn start(
        client: kube::Client,
        ns: String,
        password: &'static str,
        prefix: &'static str,
    ) -> AuthWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let task = tokio::spawn(write_loop(
            client,
            ns,
            password,
            prefix,
            stop.clone(),
            log.clone(),
        ));
        AuthWriter { stop, log, task }
    }

    async fn acked(&self) -> usize {
        self.log.lock().await.acked.len()
    }

    async fn stop(self) -> Log {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        std::mem::take(&mut *self.log.lock().await)
    }
}

async fn labelled_master_ip(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    let pods = Pods::list(client, ns).await?;
    let master = pods
        .by_name
        .iter()
        .find(|(name, pod)| {
            name.starts_with(&format!("{NAME}-"))
                && pod
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ROLE_LABEL))
                    .map(String::as_str)
                    == Some("master")
        })
        .map(|(name, _)| name.clone())
        .context("no pod labelled master")?;
    pods.ip(&master).context("the master has no IP")
}

async fn write_loop(
    client: kube::Client,
    ns: String,
    password: &'static str,
    prefix: &'static str,
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
) {
    const RECONNECT_EVERY: u64 = 100;
    let mut conn: Option<Conn> = None;
    let mut sequence = 0u64;
    while !stop.load(Ordering::SeqCst) {
        if conn.is_none() {
            let connected = async {
                let ip = labelled_master_ip(&client, &ns).await?;
                let mut c = Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(2)).await?;
                let reply = c.call(&["AUTH", password]).await?;
                Ok::<_, anyhow::Error>((c, reply))
            }
            .await;
            match connected {
                Ok((c, Reply::Simple(ok))) if ok == "OK" => conn = Some(c),
                Ok((_, refused)) => {
                    let mut log = log.lock().await;
                    log.auth_refused += 1;
                    log.errors.push(format!("AUTH: {refused:?}"));
                    drop(log);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(error) => {
                    log.lock().await.errors.push(format!("connect: {error:#}"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        sequence += 1;
        let key = format!("{prefix}:{sequence}");
        match c.call(&["SET", &key, "v"]).await {
            Ok(Reply::Simple(ok)) if ok == "OK" => log.lock().await.acked.push(key),
            other => {
                log.lock().await.errors.push(format!("SET: {other:?}"));
                conn = None;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        if sequence.is_multiple_of(RECONNECT_EVERY) {
            conn = None;
        }
    }
}

/// `AUTH password` on a fresh connection to `ip:port`: the reply.
async fn auth(ip: &str, port: u16, password: &str) -> anyhow::Result<Reply> {
    let mut conn = Conn::connect(ip, port, Duration::from_secs(5)).await?;
    conn.call(&["AUTH", password]).await
}

/// A fresh, authenticated connection.
async fn authed(ip: &str, port: u16, password: &str) -> anyhow::Result<Conn> {
    let mut conn = Conn::connect(ip, port, Duration::from_secs(5)).await?;
    let reply = conn.call(&["AUTH", password]).await?;
    anyhow::ensure!(
        reply == Reply::Simple("OK".into()),
        "AUTH on {ip}:{port}: {reply:?}"
    );
    Ok(conn)
}

/// Every pod's uid and its containers' restart counts.
async fn identities(
    client: &kube::Client,
    ns: &str,
) -> anyhow::Result<BTreeMap<String, (String, i32)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    Ok(pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|pod| {
            let restarts = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map(|statuses| statuses.iter().map(|c| c.restart_count).sum())
                .unwrap_or_default();
            (
                pod.metadata.name.clone().unwrap_or_default(),
                (pod.metadata.uid.clone().unwrap_or_default(), restarts),
            )
        })
        .collect())
}

/// `GET /metrics` on the pod's exporter: its `redis_up` sample.
async fn redis_up(ip: &str) -> anyhow::Result<f64> {
    let mut stream = tokio::time::timeout(
        Duration::from_secs(5),
        tokio::net::TcpStream::connect((ip, METRICS_PORT)),
    )
    .await
    .context("connect timed out")??;
    stream
        .write_all(format!("GET /metrics HTTP/1.0\r\nHost: {ip}\r\n\r\n").as_bytes())
        .await?;
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(10),
        stream.read_to_string(&mut response),
    )
    .await
    .context("GET /metrics timed out")??;
    response
        .lines()
        .find_map(|line| line.strip_prefix("redis_up ")?.trim().parse().ok())
        .context("no redis_up sample")
}

/// Which of `keys` the server behind `conn` does not hold (EXISTS in batches).
async fn missing(conn: &mut Conn, keys: &[String]) -> anyhow::Result<Vec<String>> {
    let mut missing = Vec::new();
    for batch in keys.chunks(500) {
        let mut args = vec!["EXISTS"];
        args.extend(batch.iter().map(String::as_str));
        if conn.call(&args).await? != Reply::Int(i64::try_from(batch.len())?) {
            for key in batch {
                if conn.call(&["EXISTS", key]).await? != Reply::Int(1) {
                    missing.push(key.clone());
                }
            }
        }
    }
    Ok(missing)
}

fn reason_is(
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
) -> impl Fn(&Valkey) -> bool {
    move |valkey| condition(valkey, type_).is_some_and(|(s, r, _)| s == status && r == reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_password_rotates_without_a_restart_or_a_refused_client() {
    let test = OperatorTest::start("op-pwrot").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    test.apply_until_ok(
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{OLD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\nspec:\n  replicas: 3\n  \
             image: valkey/valkey:8.0\n  auth: {{secretName: pw, oldPasswordGracePeriod: 20s}}\n  \
             sentinel: {{enabled: true, replicas: 3}}\n  metrics: {{enabled: true}}\n  observer: {{enabled: true}}\n"
        ),
        NAME,
        3,
        Duration::from_secs(300),
    )
    .await
    .unwrap();
    let before = identities(&client, &ns).await.unwrap();
    let old_writer = AuthWriter::start(client.clone(), ns.clone(), OLD, "old");
    eventually(
        Duration::from_secs(30),
        "the old-password writer writes",
        || async { Ok((old_writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let changed = Instant::now();
    secrets
        .patch(
            "pw",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": NEW}})),
        )
        .await
        .unwrap();
    let grace = wait_for_valkey(
        &valkeys,
        NAME,
        "PasswordRotation=True/OldPasswordGracePeriod",
        Duration::from_secs(90),
        reason_is("PasswordRotation", "True", "OldPasswordGracePeriod"),
    )
    .await
    .unwrap();
    let accepted_after = changed.elapsed();
    println!(
        "both passwords accepted {accepted_after:?} after the Secret changed: {:?}",
        condition(&grace, "PasswordRotation")
    );
    let pods = Pods::list(&client, &ns).await.unwrap();
    let data = pods.names_with_prefix(&format!("{NAME}-"));
    let sentinels = pods.names_with_prefix(&format!("{NAME}-sentinel-"));
    assert_eq!((data.len(), sentinels.len()), (3, 3));
    let every = || {
        data.iter()
            .map(|p| (p.clone(), VALKEY_PORT))
            .chain(sentinels.iter().map(|p| (p.clone(), SENTINEL_PORT)))
    };
    for (pod, port) in every() {
        let ip = pods.ip(&pod).unwrap();
        for password in [OLD, NEW] {
            assert_eq!(
                auth(&ip, port, password).await.unwrap(),
                Reply::Simple("OK".into()),
                "{pod} during the grace period, {password:?}"
            );
        }
    }

    let new_writer = AuthWriter::start(client.clone(), ns.clone(), NEW, "new");
    eventually(
        Duration::from_secs(30),
        "the new-password writer writes",
        || async { Ok((new_writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();
    // Both writers through most of the 20 s grace period, the old one reconnecting every 100
    // writes: neither password is refused anywhere meanwhile.
    tokio::time::sleep(Duration::from_secs(15).saturating_sub(changed.elapsed())).await;
    let old_log = old_writer.stop().await;
    println!(
        "old-password writer: {} acknowledged, {} AUTH refused, errors {:?}",
        old_log.acked.len(),
        old_log.auth_refused,
        old_log.errors
    );
    assert_eq!(old_log.auth_refused, 0, "{:?}", old_log.errors);
    assert!(old_log.errors.is_empty(), "{:?}", old_log.errors);

    let rotated = wait_for_valkey(
        &valkeys,
        NAME,
        "PasswordRotation=False/PasswordRotated",
        Duration::from_secs(90),
        reason_is("PasswordRotation", "False", "PasswordRotated"),
    )
    .await
    .unwrap();
    println!(
        "old password retired {:?} after the Secret changed",
        changed.elapsed()
    );
    assert!(rotated.status.as_ref().unwrap().password_rotation.is_none());
    for (pod, port) in every() {
        let ip = pods.ip(&pod).unwrap();
        let old = auth(&ip, port, OLD).await.unwrap();
        assert!(
            matches!(&old, Reply::Error(e) if e.starts_with("WRONGPASS")),
            "{pod} after the rotation, the old password: {old:?}"
        );
        let mut conn = authed(&ip, port, NEW).await.unwrap();
        let user = conn.call(&["ACL", "GETUSER", "default"]).await.unwrap();
        let passwords = user
            .items()
            .iter()
            .skip_while(|item| item.text() != Some("passwords"))
            .nth(1)
            .map(Reply::strings)
            .unwrap_or_default();
        assert_eq!(passwords.len(), 1, "{pod}: {user:?}");
        if port == VALKEY_PORT {
            let masterauth = conn.call(&["CONFIG", "GET", "masterauth"]).await.unwrap();
            assert_eq!(masterauth.strings(), ["masterauth", NEW], "{pod}");
        }
    }
    assert_eq!(
        identities(&client, &ns).await.unwrap(),
        before,
        "no pod was replaced or restarted a container"
    );

    // The replicas reconnect with the new masterauth.
    let master_ip = labelled_master_ip(&client, &ns).await.unwrap();
    let mut master = authed(&master_ip, VALKEY_PORT, NEW).await.unwrap();
    master
        .call(&["CLIENT", "KILL", "TYPE", "replica"])
        .await
        .unwrap();
    eventually(
        Duration::from_secs(30),
        "both replicas resync with the new masterauth",
        || {
            let master_ip = master_ip.clone();
            async move {
                let mut conn = authed(&master_ip, VALKEY_PORT, NEW).await?;
                conn.call(&["SET", "after-kill", "v"]).await?;
                Ok((conn.call(&["WAIT", "2", "2000"]).await? == Reply::Int(2)).then_some(()))
            }
        },
    )
    .await
    .unwrap();

    for pod in &data {
        let ip = pods.ip(pod).unwrap();
        eventually(
            Duration::from_secs(30),
            &format!("{pod}'s exporter: redis_up 1"),
            || {
                let ip = ip.clone();
                async move { Ok((redis_up(&ip).await? == 1.0).then_some(())) }
            },
        )
        .await
        .unwrap();
    }
    wait_for_valkey(
        &valkeys,
        NAME,
        "the observer ready",
        Duration::from_secs(90),
        |v| v.status.as_ref().and_then(|s| s.observer_ready) == Some(true),
    )
    .await
    .unwrap();

    // Sentinel promotes and reconfigures with the new auth-pass.
    let old_master = labelled_master_ip(&client, &ns).await.unwrap();
    let sentinel_ip = pods.ip(&sentinels[0]).unwrap();
    let mut sentinel = authed(&sentinel_ip, SENTINEL_PORT, NEW).await.unwrap();
    assert_eq!(
        sentinel
            .call(&["SENTINEL", "FAILOVER", NAME])
            .await
            .unwrap(),
        Reply::Simple("OK".into())
    );
    eventually(
        Duration::from_secs(60),
        "a new master after the Sentinel failover",
        || {
            let (client, ns, old_master) = (client.clone(), ns.clone(), old_master.clone());
            async move {
                let now = labelled_master_ip(&client, &ns).await?;
                Ok((now != old_master).then_some(()))
            }
        },
    )
    .await
    .unwrap();
    wait_for_valkey(
        &valkeys,
        NAME,
        "PHASE OK after the failover",
        Duration::from_secs(120),
        ok_with(3),
    )
    .await
    .unwrap();

    let new_log = new_writer.stop().await;
    println!(
        "new-password writer: {} acknowledged, {} AUTH refused, errors {:?}",
        new_log.acked.len(),
        new_log.auth_refused,
        new_log.errors
    );
    assert_eq!(new_log.auth_refused, 0, "{:?}", new_log.errors);
    let final_master = labelled_master_ip(&client, &ns).await.unwrap();
    let mut check = authed(&final_master, VALKEY_PORT, NEW).await.unwrap();
    let mut lost = missing(&mut check, &old_log.acked).await.unwrap();
    lost.extend(missing(&mut check, &new_log.acked).await.unwrap());
    println!(
        "acknowledged writes lost: {} of {}",
        lost.len(),
        old_log.acked.len() + new_log.acked.len()
    );
    assert!(lost.is_empty(), "lost {lost:?}");

    // A valkey-server that crashes after the rotation restarts from the effective config the
    // sidecar rewrote: it accepts the new password and replicates with it.
    let replica = data
        .iter()
        .find(|pod| pods.ip(pod) != Some(final_master.clone()))
        .unwrap()
        .clone();
    kill_valkey_server(&client, &ns, &replica).await.unwrap();
    let replica_ip = pods.ip(&replica).unwrap();
    eventually(
        Duration::from_secs(60),
        &format!("{replica} restarted, in sync, new password"),
        || {
            let replica_ip = replica_ip.clone();
            async move {
                let mut conn = authed(&replica_ip, VALKEY_PORT, NEW).await?;
                let info = conn.call(&["INFO", "replication"]).await?;
                let text = info.text().unwrap_or_default().to_owned();
                Ok(text.contains("master_link_status:up").then_some(()))
            }
        },
    )
    .await
    .unwrap();

    let events = events_about(&client, &ns, NAME, "Normal").await;
    for reason in ["OldPasswordGracePeriod", "PasswordRotated"] {
        assert!(
            events.iter().any(|e| e.reason.as_deref() == Some(reason)),
            "a {reason} Event: {:?}",
            events.iter().map(|e| e.reason.clone()).collect::<Vec<_>>()
        );
    }
    test.cleanup().await.unwrap();
}
