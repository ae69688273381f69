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
//! refused, every exporter reports `redis_up 1`, the observer is ready, every acknowledged write
//! is on the master, a Sentinel failover (the writers stopped) works (Sentinel reaches the
//! servers with the new `auth-pass`), and a replica's valkey-server killed afterwards restarts
//! from the effective config the sidecar rewrote (new password) and resyncs.
//!
//! Also: auth turned on, then off, on a running 3 + 3 under a writer (each a lossless roll), and
//! turned off while the operator is down.

use vko_e2e::{ha_support, operator_support};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use ha_support::{
    Conn, Pods, ROLE_LABEL, Reply, SENTINEL_PORT, VALKEY_PORT, delete_and_wait_gone,
    dump_container_logs, kill_valkey_server,
};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams};
use operator_support::{OperatorTest, condition, events_about, ok_with, wait_for_valkey};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;
use vko_api::Valkey;

const OLD: &str = "old-pässword one";
const NEW: &str = "new pässword two";
const NAME: &str = "rot";
const METRICS_PORT: u16 = 9121;

/// Retries `check` every 200 ms until it answers `Some`, for at most `timeout` (`eventually`
/// takes any `Ok` as done, `None` included).
async fn until<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => "not yet".to_owned(),
            Err(error) => format!("{error:#}"),
        };
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what}: not within {timeout:?}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What a writer saw.
#[derive(Debug, Default)]
struct Log {
    acked: Vec<String>,
    /// When each OK arrived.
    ok_times: Vec<Instant>,
    /// AUTH answered with an error (`WRONGPASS`): the password was refused.
    auth_refused: usize,
    /// Each error with its UTC time, to be set against the Secret change and the pods' logs.
    errors: Vec<String>,
}

/// `what`, prefixed by the UTC time now.
fn stamped(what: String) -> String {
    format!("{} {what}", k8s_openapi::jiff::Timestamp::now())
}

struct AuthWriter {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Log>>,
    task: tokio::task::JoinHandle<()>,
}

impl Log {
    /// The longest time between two consecutive OKs.
    fn longest_gap(&self) -> Duration {
        self.longest_gap_since(None)
    }

    /// The longest time between two consecutive OKs, counting from the last OK before `since`.
    fn longest_gap_since(&self, since: Option<Instant>) -> Duration {
        let first = since.map_or(0, |since| {
            self.ok_times
                .partition_point(|t| *t < since)
                .saturating_sub(1)
        });
        self.ok_times[first..]
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or_default()
    }
}

impl AuthWriter {
    /// Plain `SET`s through the `-rw` Service, `AUTH default <password>` on every new connection,
    /// a new connection every 100 writes and after any error.
    fn start(
        client: kube::Client,
        ns: String,
        password: &'static str,
        prefix: &'static str,
    ) -> AuthWriter {
        AuthWriter::start_on(client, ns, NAME, password, prefix)
    }

    /// As [`AuthWriter::start`], to the cluster `valkey`.
    fn start_on(
        client: kube::Client,
        ns: String,
        valkey: &'static str,
        password: &'static str,
        prefix: &'static str,
    ) -> AuthWriter {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Log::default()));
        let target = (client, ns, valkey);
        let task = tokio::spawn(write_loop(
            target,
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

    /// The errors so far, taken out of the log.
    async fn take_errors(&self) -> Vec<String> {
        std::mem::take(&mut self.log.lock().await.errors)
    }

    async fn stop(self) -> Log {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        std::mem::take(&mut *self.log.lock().await)
    }
}

async fn labelled_master_ip(client: &kube::Client, ns: &str) -> anyhow::Result<String> {
    labelled_master_ip_of(client, ns, NAME).await
}

async fn labelled_master_ip_of(
    client: &kube::Client,
    ns: &str,
    valkey: &str,
) -> anyhow::Result<String> {
    let pods = Pods::list(client, ns).await?;
    let master = pods
        .by_name
        .iter()
        .find(|(name, pod)| {
            name.starts_with(&format!("{valkey}-"))
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
    (client, ns, valkey): (kube::Client, String, &'static str),
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
                // Through `<valkey>-rw`'s ClusterIP, as clients connect (the testbed's kube-proxy
                // routes it); a client's 1 s connect timeout (see ha_support's -rw writer).
                let services: Api<Service> = Api::namespaced(client.clone(), &ns);
                let ip = services
                    .get(&format!("{valkey}-rw"))
                    .await?
                    .spec
                    .and_then(|spec| spec.cluster_ip)
                    .context("the -rw Service has no ClusterIP")?;
                let mut c = Conn::connect(&ip, VALKEY_PORT, Duration::from_secs(1)).await?;
                // The two-argument form: a server without a password accepts it too.
                let reply = c.call(&["AUTH", "default", password]).await?;
                Ok::<_, anyhow::Error>((c, reply))
            }
            .await;
            match connected {
                Ok((c, Reply::Simple(ok))) if ok == "OK" => conn = Some(c),
                Ok((_, refused)) => {
                    let mut log = log.lock().await;
                    log.auth_refused += 1;
                    log.errors.push(stamped(format!("AUTH: {refused:?}")));
                    drop(log);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Err(error) => {
                    log.lock()
                        .await
                        .errors
                        .push(stamped(format!("connect: {error:#}")));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let Some(c) = conn.as_mut() else { continue };
        sequence += 1;
        let key = format!("{prefix}:{sequence}");
        match c.call(&["SET", &key, "v"]).await {
            Ok(Reply::Simple(ok)) if ok == "OK" => {
                let mut log = log.lock().await;
                log.acked.push(key);
                log.ok_times.push(Instant::now());
            }
            other => {
                log.lock()
                    .await
                    .errors
                    .push(stamped(format!("SET: {other:?}")));
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

/// Which keys the writers had acknowledged the server behind `conn` does not hold.
async fn missing_of(conn: &mut Conn, logs: &[&Log]) -> anyhow::Result<Vec<String>> {
    let mut lost = Vec::new();
    for log in logs {
        lost.extend(missing(conn, &log.acked).await?);
    }
    Ok(lost)
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

/// The auth Secret `pw` gets the new password; when.
async fn change_password(client: &kube::Client, ns: &str) -> anyhow::Result<Instant> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let changed = Instant::now();
    println!("{}", stamped("changing the Secret's password".into()));
    secrets
        .patch(
            "pw",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"stringData": {"password": NEW}})),
        )
        .await?;
    Ok(changed)
}

/// Waits (90 s at most) for `PasswordRotation=<status>/<reason>` on `valkey`.
async fn rotation_step(
    valkeys: &Api<Valkey>,
    valkey: &str,
    status: &'static str,
    reason: &'static str,
) -> anyhow::Result<Valkey> {
    wait_for_valkey(
        valkeys,
        valkey,
        &format!("PasswordRotation={status}/{reason}"),
        Duration::from_secs(90),
        move |v| {
            condition(v, "PasswordRotation").is_some_and(|(s, r, _)| s == status && r == reason)
        },
    )
    .await
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
    until(
        Duration::from_secs(30),
        "the old-password writer writes",
        || async { Ok((old_writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();
    // What the writer met while the new cluster settled is not the rotation's doing.
    println!(
        "old-password writer before the change: errors {:?}",
        old_writer.take_errors().await
    );

    let changed = change_password(&client, &ns).await.unwrap();
    let grace = rotation_step(&valkeys, NAME, "True", "OldPasswordGracePeriod")
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
    until(
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
        "old-password writer: {} acknowledged, {} AUTH refused, longest gap {:?}, errors {:?}",
        old_log.acked.len(),
        old_log.auth_refused,
        old_log.longest_gap_since(Some(changed)),
        old_log.errors
    );
    if old_log.auth_refused > 0 || !old_log.errors.is_empty() {
        for event in events_about(&client, &ns, NAME, "Warning").await {
            let time = event.event_time.as_ref().map(|t| t.0.to_string());
            println!("Warning {time:?} {:?}: {:?}", event.reason, event.note);
        }
        dump_container_logs(&client, &ns, 80).await;
    }
    assert_eq!(old_log.auth_refused, 0, "{:?}", old_log.errors);
    // Nothing in a rotation moves the master or its label; yet one CI run (2 tests at once on 2
    // cores) saw ~2 s of refused connects to -rw in this window, not reproduced since: the bound
    // keeps such a blip visible (errors, events and logs above) without hiding a lasting outage.
    assert!(
        old_log.longest_gap_since(Some(changed)) <= Duration::from_secs(3),
        "the old-password writer stalled {:?}: {:?}",
        old_log.longest_gap_since(Some(changed)),
        old_log.errors
    );

    let rotated = rotation_step(&valkeys, NAME, "False", "PasswordRotated")
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
    until(
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
        until(
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

    let new_log = new_writer.stop().await;
    println!(
        "new-password writer: {} acknowledged, {} AUTH refused, errors {:?}",
        new_log.acked.len(),
        new_log.auth_refused,
        new_log.errors
    );
    assert_eq!(new_log.auth_refused, 0, "{:?}", new_log.errors);
    let rotated_master = labelled_master_ip(&client, &ns).await.unwrap();
    let mut check = authed(&rotated_master, VALKEY_PORT, NEW).await.unwrap();
    let lost = missing_of(&mut check, &[&old_log, &new_log]).await.unwrap();
    println!(
        "acknowledged writes lost: {} of {}",
        lost.len(),
        old_log.acked.len() + new_log.acked.len()
    );
    assert!(
        lost.is_empty(),
        "lost {} (first {:?})",
        lost.len(),
        lost.first()
    );

    // Sentinel promotes and reconfigures with the new auth-pass. Without the writer: a forced
    // `SENTINEL FAILOVER` on Valkey 8 lets the old master acknowledge writes until Sentinel
    // converts it (the loss vko's own switchover exists to avoid), which is not what is tested.
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
    until(
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

    let final_master = labelled_master_ip(&client, &ns).await.unwrap();

    // A valkey-server that crashes after the rotation restarts from the effective config the
    // sidecar rewrote: it accepts the new password and replicates with it.
    let replica = data
        .iter()
        .find(|pod| pods.ip(pod) != Some(final_master.clone()))
        .unwrap()
        .clone();
    kill_valkey_server(&client, &ns, &replica).await.unwrap();
    let replica_ip = pods.ip(&replica).unwrap();
    until(
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

/// Whether every data and Sentinel pod of the cluster mounts the password file (`true`) or none
/// does (`false`), no pod terminating.
async fn every_pod_has_password_file(
    client: &kube::Client,
    ns: &str,
    valkey: &str,
    wanted: bool,
) -> anyhow::Result<bool> {
    let pods = Pods::list(client, ns).await?;
    let ours: Vec<&Pod> = pods
        .by_name
        .iter()
        .filter(|(name, _)| name.starts_with(&format!("{valkey}-")))
        .filter(|(name, _)| !name.contains("observer"))
        .map(|(_, pod)| pod)
        .collect();
    Ok(ours.len() == 6
        && ours.iter().all(|pod| {
            pod.metadata.deletion_timestamp.is_none()
                && pod
                    .spec
                    .as_ref()
                    .is_some_and(|spec| vko_render::pod_has_password_file(spec) == wanted)
        }))
}

/// The roll onto auth on (`auth`) or off is done: every pod of `valkey` has (has not) the
/// password file, PHASE OK with no roll recorded and no `RollingUpdatePaused`, and every server
/// and Sentinel refuses a client without the password (answers it).
async fn rolled_with_auth(
    client: &kube::Client,
    ns: &str,
    valkey: &'static str,
    auth: bool,
) -> anyhow::Result<()> {
    until(
        Duration::from_secs(300),
        &format!(
            "every pod of {valkey} rolled with auth {}",
            if auth { "on" } else { "off" }
        ),
        || {
            let (client, ns) = (client.clone(), ns.to_owned());
            async move {
                Ok(every_pod_has_password_file(&client, &ns, valkey, auth)
                    .await?
                    .then_some(()))
            }
        },
    )
    .await?;
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), ns);
    let done = wait_for_valkey(
        &valkeys,
        valkey,
        "PHASE OK, no roll recorded",
        Duration::from_secs(120),
        |v| {
            ok_with(3)(v)
                && v.status
                    .as_ref()
                    .is_some_and(|s| s.rolling_update.is_none())
        },
    )
    .await?;
    anyhow::ensure!(
        condition(&done, "RollingUpdatePaused").is_none_or(|(status, _, _)| status != "True"),
        "{:?}",
        condition(&done, "RollingUpdatePaused")
    );
    let pods = Pods::list(client, ns).await?;
    for (pod, port) in pods
        .names_with_prefix(&format!("{valkey}-"))
        .into_iter()
        .map(|p| (p, VALKEY_PORT))
        .chain(
            pods.names_with_prefix(&format!("{valkey}-sentinel-"))
                .into_iter()
                .map(|p| (p, SENTINEL_PORT)),
        )
    {
        let ip = pods.ip(&pod).context("a pod without an IP")?;
        let anonymous = ha_support::call(&ip, port, &["PING"]).await?;
        if auth {
            anyhow::ensure!(
                matches!(&anonymous, Reply::Error(e) if e.starts_with("NOAUTH")),
                "{pod} with auth on, no password: {anonymous:?}"
            );
            authed(&ip, port, OLD).await?;
        } else {
            anyhow::ensure!(
                anonymous == Reply::Simple("PONG".into()),
                "{pod} with auth off: {anonymous:?}"
            );
        }
    }
    Ok(())
}

const ONOFF: &str = "onoff";

/// Auth turned on, then off, on a running 3 + 3 under a writer that sends `AUTH default
/// <password>` on every connection (accepted with and without a password): each is a roll, and
/// the pods not rolled yet work with the rolled ones (ADR 0035: `masteruser default`, Sentinel
/// `auth-user`/`auth-pass` set live on the old Sentinels, `nopass` on the old pods when auth
/// goes). Measured on 8.0.1: a replica with `masterauth` alone never syncs from a master without
/// a password ("AUTH <password> called without any password configured").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_turned_on_and_off_on_a_running_cluster_rolls_without_losing_a_write() {
    let test = OperatorTest::start("op-authonoff").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let spec = "replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}";
    test.apply_until_ok(
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{OLD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {ONOFF}}}\nspec: {{{spec}}}\n"
        ),
        ONOFF,
        3,
        Duration::from_secs(300),
    )
    .await
    .unwrap();
    let writer = AuthWriter::start_on(client.clone(), ns.clone(), ONOFF, OLD, "w");
    until(Duration::from_secs(30), "the writer writes", || async {
        Ok((writer.acked().await > 300).then_some(()))
    })
    .await
    .unwrap();

    let mut durations = Vec::new();
    for (auth, patch) in [
        (
            true,
            serde_json::json!({"spec": {"auth": {"secretName": "pw"}}}),
        ),
        (false, serde_json::json!({"spec": {"auth": null}})),
    ] {
        let started = Instant::now();
        valkeys
            .patch(ONOFF, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .unwrap();
        rolled_with_auth(&client, &ns, ONOFF, auth).await.unwrap();
        durations.push(started.elapsed());
    }
    let log = writer.stop().await;
    let master = labelled_master_ip_of(&client, &ns, ONOFF).await.unwrap();
    let mut check = Conn::connect(&master, VALKEY_PORT, Duration::from_secs(5))
        .await
        .unwrap();
    let lost = missing(&mut check, &log.acked).await.unwrap();
    println!(
        "auth on: rolled in {:?}; auth off: rolled in {:?}; {} acknowledged, {} lost, longest write \
         gap {:?}, AUTH refused {}, errors {:?}",
        durations[0],
        durations[1],
        log.acked.len(),
        lost.len(),
        log.longest_gap(),
        log.auth_refused,
        log.errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(lost.is_empty(), "lost {lost:?}");
    assert_eq!(log.auth_refused, 0, "{:?}", log.errors);
    test.cleanup().await.unwrap();
}

const OFF_RESTARTED: &str = "offr";

/// The operator down (SIGKILLed) through two changes, each finished once it is back (kills the
/// shared operator: runs alone), a 3 + 3 with auth under a writer through `-rw` (`AUTH default
/// <password>` on every connection):
///
/// 1. The password changes while the operator is down: the sidecars alone make every server and
///    Sentinel accept both (the operator has no part in that step). The restarted operator, which
///    never saw the old password, finds both accepted and starts the grace period; a replica and
///    a Sentinel replaced during the grace come back with the new password and replicate; the old
///    password is retired everywhere. No write refused with either password.
/// 2. Auth turned off while the operator is down: the new process never saw the password, yet the
///    pods not rolled yet still require it. It reads the password from the Secret those pods
///    mount (ADR 0035) and rolls as one that remembered it would: every pod without the password
///    file, PHASE OK, no `RollingUpdatePaused`. Without that read the roll stalled (the old pods
///    answered the operator `NOAUTH`).
///
/// 0 acknowledged writes lost over both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_rotation_and_auth_off_while_the_operator_is_down_finish_once_it_is_back() {
    let test = OperatorTest::start("op-authoffr").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    let spec = "replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true, replicas: 3}, \
                auth: {secretName: pw, oldPasswordGracePeriod: 30s}";
    test.apply_until_ok(
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{OLD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {OFF_RESTARTED}}}\nspec: {{{spec}}}\n"
        ),
        OFF_RESTARTED,
        3,
        Duration::from_secs(300),
    )
    .await
    .unwrap();
    let old_writer = AuthWriter::start_on(client.clone(), ns.clone(), OFF_RESTARTED, OLD, "o");
    until(Duration::from_secs(30), "the writer writes", || async {
        Ok((old_writer.acked().await > 300).then_some(()))
    })
    .await
    .unwrap();
    println!(
        "old-password writer before the change: errors {:?}",
        old_writer.take_errors().await
    );

    // 1. The password changes while the operator is down.
    operator_support::kill_operator().unwrap();
    let changed = change_password(&client, &ns).await.unwrap();
    let pods = Pods::list(&client, &ns).await.unwrap();
    let every = servers_and_sentinels(&pods, OFF_RESTARTED);
    until(
        Duration::from_secs(90),
        "every server and Sentinel accepts both passwords, the operator down",
        || {
            let every = every.clone();
            async move {
                for (_, ip, port) in &every {
                    for password in [OLD, NEW] {
                        if auth(ip, *port, password).await? != Reply::Simple("OK".into()) {
                            return Ok(None);
                        }
                    }
                }
                Ok(Some(()))
            }
        },
    )
    .await
    .unwrap();
    println!(
        "{}",
        stamped(format!(
            "both passwords accepted on every server and Sentinel {:?} after the Secret \
             changed, by the sidecars alone",
            changed.elapsed()
        ))
    );
    let writer = AuthWriter::start_on(client.clone(), ns.clone(), OFF_RESTARTED, NEW, "n");
    until(
        Duration::from_secs(30),
        "the new-password writer writes",
        || async { Ok((writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();
    let old_log = old_writer.stop().await;
    println!(
        "old-password writer: {} acknowledged, {} AUTH refused, errors {:?}",
        old_log.acked.len(),
        old_log.auth_refused,
        old_log.errors
    );
    assert_eq!(old_log.auth_refused, 0, "{:?}", old_log.errors);

    operator_support::restart_operator().unwrap();
    let grace = rotation_step(&valkeys, OFF_RESTARTED, "True", "OldPasswordGracePeriod")
        .await
        .unwrap();
    println!(
        "{}",
        stamped(format!(
            "the restarted operator resumed: {:?}",
            condition(&grace, "PasswordRotation")
        ))
    );
    // A replica and a Sentinel replaced during the grace period.
    let master_ip = labelled_master_ip_of(&client, &ns, OFF_RESTARTED)
        .await
        .unwrap();
    let (replica, sentinel) = {
        let data = pods.names_with_prefix(&format!("{OFF_RESTARTED}-"));
        let replica = data
            .iter()
            .find(|pod| pods.ip(pod) != Some(master_ip.clone()))
            .unwrap()
            .clone();
        (replica, format!("{OFF_RESTARTED}-sentinel-0"))
    };
    println!("{}", stamped(format!("deleting {replica} and {sentinel}")));
    let (gone_replica, gone_sentinel) = tokio::join!(
        delete_and_wait_gone(&client, &ns, &replica),
        delete_and_wait_gone(&client, &ns, &sentinel)
    );
    gone_replica.unwrap();
    gone_sentinel.unwrap();
    let replaced = until(
        Duration::from_secs(90),
        "the replaced replica replicates and the replaced Sentinel sees the master",
        || {
            let (client, ns, replica, sentinel) = (
                client.clone(),
                ns.clone(),
                replica.clone(),
                sentinel.clone(),
            );
            async move {
                let pods = Pods::list(&client, &ns).await?;
                let (Some(replica_ip), Some(sentinel_ip)) = (pods.ip(&replica), pods.ip(&sentinel))
                else {
                    return Ok(None);
                };
                let Ok(mut conn) = authed(&replica_ip, VALKEY_PORT, NEW).await else {
                    return Ok(None);
                };
                let info = conn.call(&["INFO", "replication"]).await?;
                if !info
                    .text()
                    .unwrap_or_default()
                    .contains("master_link_status:up")
                {
                    return Ok(None);
                }
                let Ok(mut conn) = authed(&sentinel_ip, SENTINEL_PORT, NEW).await else {
                    return Ok(None);
                };
                let master = conn
                    .call(&["SENTINEL", "MASTER", OFF_RESTARTED])
                    .await?
                    .as_map();
                let flags = master.get("flags").cloned().unwrap_or_default();
                Ok((flags == "master").then_some((replica_ip, sentinel_ip)))
            }
        },
    )
    .await
    .unwrap();
    for (pod, ip, port) in [
        (&replica, &replaced.0, VALKEY_PORT),
        (&sentinel, &replaced.1, SENTINEL_PORT),
    ] {
        // ADR 0035's cost: a pod that starts during the grace period has the new password only.
        println!(
            "{pod} replaced during the grace period: the old password {:?}",
            auth(ip, port, OLD).await.unwrap()
        );
    }
    let rotated = rotation_step(&valkeys, OFF_RESTARTED, "False", "PasswordRotated")
        .await
        .unwrap();
    println!(
        "{}",
        stamped(format!(
            "old password retired {:?} after the Secret changed",
            changed.elapsed()
        ))
    );
    assert!(rotated.status.as_ref().unwrap().password_rotation.is_none());
    let pods = Pods::list(&client, &ns).await.unwrap();
    for (pod, ip, port) in servers_and_sentinels(&pods, OFF_RESTARTED) {
        let old = auth(&ip, port, OLD).await.unwrap();
        assert!(
            matches!(&old, Reply::Error(e) if e.starts_with("WRONGPASS")),
            "{pod} after the rotation, the old password: {old:?}"
        );
        assert_eq!(
            auth(&ip, port, NEW).await.unwrap(),
            Reply::Simple("OK".into()),
            "{pod} after the rotation, the new password"
        );
    }
    let master_ip = labelled_master_ip_of(&client, &ns, OFF_RESTARTED)
        .await
        .unwrap();
    until(
        Duration::from_secs(30),
        "both replicas acknowledge a write after the rotation",
        || {
            let master_ip = master_ip.clone();
            async move {
                let mut conn = authed(&master_ip, VALKEY_PORT, NEW).await?;
                conn.call(&["SET", "after-rotation", "v"]).await?;
                Ok((conn.call(&["WAIT", "2", "2000"]).await? == Reply::Int(2)).then_some(()))
            }
        },
    )
    .await
    .unwrap();

    // 2. Auth turned off while the operator is down.
    operator_support::kill_operator().unwrap();
    valkeys
        .patch(
            OFF_RESTARTED,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"auth": null}})),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let started = Instant::now();
    operator_support::restart_operator().unwrap();
    rolled_with_auth(&client, &ns, OFF_RESTARTED, false)
        .await
        .unwrap();
    let rolled = started.elapsed();
    let log = writer.stop().await;
    let master = labelled_master_ip_of(&client, &ns, OFF_RESTARTED)
        .await
        .unwrap();
    let mut check = Conn::connect(&master, VALKEY_PORT, Duration::from_secs(5))
        .await
        .unwrap();
    let lost = missing_of(&mut check, &[&old_log, &log]).await.unwrap();
    println!(
        "auth off while the operator was down: rolled {rolled:?} after the restart; {} \
         acknowledged with the new password, {} lost of {} in all, longest write gap {:?}, \
         AUTH refused {}, errors {:?}",
        log.acked.len(),
        lost.len(),
        old_log.acked.len() + log.acked.len(),
        log.longest_gap(),
        log.auth_refused,
        log.errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(lost.is_empty(), "lost {lost:?}");
    assert_eq!(log.auth_refused, 0, "{:?}", log.errors);
    test.cleanup().await.unwrap();
}

/// (pod, IP, port) of every data pod and Sentinel of `valkey`.
fn servers_and_sentinels(pods: &Pods, valkey: &str) -> Vec<(String, String, u16)> {
    let data = pods.names_with_prefix(&format!("{valkey}-"));
    let sentinels = pods.names_with_prefix(&format!("{valkey}-sentinel-"));
    data.into_iter()
        .map(|pod| (pod, VALKEY_PORT))
        .chain(sentinels.into_iter().map(|pod| (pod, SENTINEL_PORT)))
        .map(|(pod, port)| {
            let ip = pods.ip(&pod).unwrap_or_default();
            (pod, ip, port)
        })
        .collect()
}

const PLAIN: &str = "plain";

/// The rotation without Sentinel (the master holds the Lease, its sidecar renews it with the API,
/// not with Valkey): 3 data pods, `oldPasswordGracePeriod: 5s`, a writer with the old password
/// until both are accepted, then one with the new one through the retire. Both passwords
/// accepted, the old one retired, no pod restarted, 0 acknowledged writes lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_sentinel_a_changed_password_rotates_without_a_restart() {
    let test = OperatorTest::start("op-pwrot-plain").await.unwrap();
    let (client, ns) = (test.client(), test.ns().to_owned());
    let valkeys: Api<Valkey> = Api::namespaced(client.clone(), &ns);
    test.apply_until_ok(
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: pw}}\nstringData: {{password: \"{OLD}\"}}\n---\n\
             apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {PLAIN}}}\nspec: {{replicas: 3, \
             image: valkey/valkey:8.0, auth: {{secretName: pw, oldPasswordGracePeriod: 5s}}}}\n"
        ),
        PLAIN,
        3,
        Duration::from_secs(240),
    )
    .await
    .unwrap();
    let before = identities(&client, &ns).await.unwrap();
    let old_writer = AuthWriter::start_on(client.clone(), ns.clone(), PLAIN, OLD, "old");
    until(
        Duration::from_secs(30),
        "the old-password writer writes",
        || async { Ok((old_writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();
    let changed = change_password(&client, &ns).await.unwrap();
    rotation_step(&valkeys, PLAIN, "True", "OldPasswordGracePeriod")
        .await
        .unwrap();
    let accepted = changed.elapsed();
    let new_writer = AuthWriter::start_on(client.clone(), ns.clone(), PLAIN, NEW, "new");
    let old_log = old_writer.stop().await;
    rotation_step(&valkeys, PLAIN, "False", "PasswordRotated")
        .await
        .unwrap();
    let retired = changed.elapsed();
    until(
        Duration::from_secs(30),
        "the new-password writer writes",
        || async { Ok((new_writer.acked().await > 300).then_some(())) },
    )
    .await
    .unwrap();
    let new_log = new_writer.stop().await;
    let pods = Pods::list(&client, &ns).await.unwrap();
    for pod in pods.names_with_prefix(&format!("{PLAIN}-")) {
        let ip = pods.ip(&pod).unwrap();
        let old = auth(&ip, VALKEY_PORT, OLD).await.unwrap();
        assert!(
            matches!(&old, Reply::Error(e) if e.starts_with("WRONGPASS")),
            "{pod}: the old password after the rotation: {old:?}"
        );
        authed(&ip, VALKEY_PORT, NEW).await.unwrap();
    }
    assert_eq!(
        identities(&client, &ns).await.unwrap(),
        before,
        "no pod was replaced or restarted a container"
    );
    let master = labelled_master_ip_of(&client, &ns, PLAIN).await.unwrap();
    let mut check = authed(&master, VALKEY_PORT, NEW).await.unwrap();
    let lost = missing_of(&mut check, &[&old_log, &new_log]).await.unwrap();
    println!(
        "without Sentinel: both accepted {accepted:?}, old retired {retired:?} after the change; \
         {} lost of {}; AUTH refused {} / {}",
        lost.len(),
        old_log.acked.len() + new_log.acked.len(),
        old_log.auth_refused,
        new_log.auth_refused
    );
    assert!(
        lost.is_empty(),
        "lost {} (first {:?})",
        lost.len(),
        lost.first()
    );
    assert_eq!(old_log.auth_refused + new_log.auth_refused, 0);
    test.cleanup().await.unwrap();
}
