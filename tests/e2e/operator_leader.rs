//! Operator leader fencing (issue 14 item 4, ADR 0017): two operator processes with leader
//! election, each under its own identity (a ServiceAccount token bound to the chart's ClusterRole
//! and leader-election Role, nothing else). Operator A leads and brings a 3 + 3 cluster up; A is
//! stopped with SIGSTOP past its Lease; B takes the Lease over and rolls the cluster (a pod
//! template change), which switches the master over; then A is resumed (SIGCONT). The API server's
//! audit log must show no write by A's identity from its resume on (A sees its renewal is older
//! than the renew deadline, refuses everything and campaigns again as a standby, without
//! releasing; it stays up), A's own log no data-plane action after the resume, B's identity the
//! roll's pod deletions and status writes, and the cluster must end OK with exactly one master.
//!
//! Needs the testbed's `vko.local/vko` image (see operator_standalone).
//! Exclusive (`cargo xtask test` runs it alone): its two operators contend for the shared e2e
//! Lease, which the shared operator of the other tests holds.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::Context;
use ha_support::{Pods, Reply, VALKEY_PORT, call};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use operator_support::{
    chart_dir, cleanup_namespace, http_get, install_crd, spawn_operator, wait_for_valkey,
};
use vko_api::Valkey;
use vko_e2e::{ha_support, operator_support};
use vko_testbed::harness::{
    E2E_LEASE_NAMESPACE, TestNamespace, Testbed, apply_yaml, chart_operator_rbac,
    install_operator_rbac, wait_until,
};
use vko_testbed::paths::Paths;
use vko_testbed::rbac_audit::{OperatorIdentities, Request, Target, is_write_verb, read_audit_log};

const NAME: &str = "fence";
const LEASE: &str = "valkey-operator.vko.gtrfc.com";
/// The operators' identities: ServiceAccount names, also their Lease holder identities.
const FIRST: &str = "vko-leader-a";
const SECOND: &str = "vko-leader-b";

fn user_of(service_account: &str) -> String {
    format!("system:serviceaccount:{E2E_LEASE_NAMESPACE}:{service_account}")
}

/// A kubeconfig for `service_account`: the testbed's cluster entry with a fresh token.
async fn service_account_kubeconfig(
    admin: &kube::Client,
    service_account: &str,
) -> anyhow::Result<PathBuf> {
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), E2E_LEASE_NAMESPACE);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await?
        .status
        .context("the TokenRequest has no status")?
        .token;
    let template = vko_testbed::controlplane::operator_kubeconfig(&Paths::from_env());
    let mut kubeconfig: serde_json::Value =
        serde_norway::from_str(&std::fs::read_to_string(&template)?)?;
    kubeconfig["users"] = serde_json::json!([{"name": service_account, "user": {"token": token}}]);
    kubeconfig["contexts"][0]["context"]["user"] = service_account.into();
    let path = std::env::temp_dir().join(format!(
        "vko-e2e-{service_account}-{}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(&path, serde_norway::to_string(&kubeconfig)?)?;
    Ok(path)
}

/// The chart's operator roles (installed as for every operator test) bound, under bindings of
/// their own, to both ServiceAccounts; waits until the authorizer grants them.
async fn bind_chart_roles(admin: &kube::Client) -> anyhow::Result<()> {
    install_operator_rbac(admin, &chart_dir()).await?;
    let mut yaml = String::new();
    for account in [FIRST, SECOND] {
        yaml.push_str(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {account}}}\n---\n"
        ));
    }
    for mut object in chart_operator_rbac(&chart_dir()).await? {
        if object["kind"] != "ClusterRoleBinding" && object["kind"] != "RoleBinding" {
            continue;
        }
        let name = format!(
            "{}-fencing",
            object["metadata"]["name"].as_str().unwrap_or("x")
        );
        object["metadata"]["name"] = name.into();
        object["subjects"] = [FIRST, SECOND]
            .iter()
            .map(|account| {
                serde_json::json!({
                    "kind": "ServiceAccount", "name": account, "namespace": E2E_LEASE_NAMESPACE,
                })
            })
            .collect();
        yaml.push_str(&serde_json::to_string(&object)?);
        yaml.push_str("\n---\n");
    }
    apply_yaml(admin, E2E_LEASE_NAMESPACE, &yaml).await?;
    let reviews: Api<SubjectAccessReview> = Api::all(admin.clone());
    for account in [FIRST, SECOND] {
        for (group, resource, verb, namespace) in [
            ("vko.gtrfc.com", "valkeys", "list", None),
            (
                "coordination.k8s.io",
                "leases",
                "create",
                Some(E2E_LEASE_NAMESPACE),
            ),
        ] {
            let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user_of(account), "resourceAttributes": {
                    "group": group, "resource": resource, "verb": verb, "namespace": namespace,
                }},
            }))?;
            wait_until(
                &format!("{account} may {verb} {resource}"),
                Duration::from_secs(30),
                || {
                    let reviews = reviews.clone();
                    let review = review.clone();
                    async move {
                        let answer = reviews.create(&PostParams::default(), &review).await?;
                        Ok(answer.status.is_some_and(|s| s.allowed).then_some(()))
                    }
                },
            )
            .await?;
        }
    }
    Ok(())
}

/// One operator process under one identity.
struct Operator {
    identity: &'static str,
    child: Child,
    port: u16,
    log_path: PathBuf,
}

impl Operator {
    fn start(identity: &'static str, kubeconfig: &Path) -> anyhow::Result<Operator> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log_path = std::env::temp_dir().join(format!(
            "vko-operator-{identity}-{}.log",
            std::process::id()
        ));
        // The Lease holder identity (in a pod: the pod's name).
        let child = spawn_operator(kubeconfig, port, &log_path, &[], &[("POD_NAME", identity)])?;
        eprintln!(
            "operator {identity} pid {} log {}",
            child.id(),
            log_path.display()
        );
        Ok(Operator {
            identity,
            child,
            port,
            log_path,
        })
    }

    fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()?;
        anyhow::ensure!(status.success(), "kill {signal} {}", self.child.id());
        Ok(())
    }

    /// `/readyz`: Ready (200) as a standby and as a leader whose watches listed; the body says
    /// which.
    async fn readyz(&self) -> Option<(u16, String)> {
        http_get(self.port, "/readyz").await.ok()
    }

    async fn wait_leading(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_until(
            &format!("operator {} ready and leading", self.identity),
            timeout,
            || async {
                let leading = self.readyz().await == Some((200, "leading".to_owned()));
                Ok(leading.then_some(()))
            },
        )
        .await?;
        Ok(())
    }

    fn log_len(&self) -> u64 {
        std::fs::metadata(&self.log_path).map_or(0, |m| m.len())
    }

    fn log_since(&self, offset: u64) -> String {
        let mut text = String::new();
        if let Ok(mut file) = std::fs::File::open(&self.log_path)
            && file.seek(SeekFrom::Start(offset)).is_ok()
        {
            let _ = file.read_to_string(&mut text);
        }
        text
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        // Signals only while the child is not reaped (its pid may be reused afterwards).
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.signal("-CONT");
            let _ = self.signal("-TERM");
            for _ in 0..100 {
                if matches!(self.child.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // The log stays only when the test failed (it is named on stderr at start).
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log_path);
        }
    }
}

async fn lease_holder(admin: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), E2E_LEASE_NAMESPACE);
    leases
        .get_opt(LEASE)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

fn settled(valkey: &Valkey) -> bool {
    valkey.status.as_ref().is_some_and(|s| {
        s.phase == Some(vko_api::Phase::Ok)
            && s.ready_replicas == Some(3)
            && s.rolling_update.is_none()
    })
}

/// Data pods answering `ROLE` with `master`.
async fn masters(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    let pods = Pods::list(client, ns).await?;
    let mut found = Vec::new();
    for pod in pods.names_with_prefix(&format!("{NAME}-")) {
        let Some(ip) = pods.ip(&pod) else { continue };
        if let Ok(reply) = call(&ip, VALKEY_PORT, &["ROLE"]).await
            && reply.items().first().and_then(Reply::text) == Some("master")
        {
            found.push(pod);
        }
    }
    Ok(found)
}

fn received(request: &Request) -> Option<Timestamp> {
    request.received.parse().ok()
}

fn describe(request: &Request) -> String {
    let target = match &request.target {
        Target::Resource {
            resource,
            subresource,
            name,
            ..
        } => format!(
            "{resource}{}/{}",
            subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            name.as_deref().unwrap_or("")
        ),
        Target::NonResource { path } => path.clone(),
    };
    format!(
        "{} {} {target} -> {}",
        request.received, request.verb, request.code
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_a_leader_stopped_past_its_lease_writes_nothing_after_it_resumes() {
    let testbed = Testbed::from_env().await.unwrap();
    let admin = testbed.client();
    install_crd(&admin).await.unwrap();
    bind_chart_roles(&admin).await.unwrap();
    let first_config = service_account_kubeconfig(&admin, FIRST).await.unwrap();
    let second_config = service_account_kubeconfig(&admin, SECOND).await.unwrap();

    let first = Operator::start(FIRST, &first_config).unwrap();
    first.wait_leading(Duration::from_secs(300)).await.unwrap();
    assert_eq!(lease_holder(&admin).await.as_deref(), Some(FIRST));
    let second = Operator::start(SECOND, &second_config).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    // A standby is Ready (a Deployment rollout with two replicas completes) and says it stands by.
    assert_eq!(
        second.readyz().await,
        Some((200, "standing by".to_owned())),
        "the standby's /readyz"
    );

    let namespace = TestNamespace::create(&admin, "leader-fence").await.unwrap();
    let ns = namespace.name().to_owned();
    apply_yaml(
        &admin,
        &ns,
        &format!(
            "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {{name: {NAME}}}\n\
             spec: {{replicas: 3, image: valkey/valkey:8.0, sentinel: {{enabled: true, replicas: 3}}}}\n"
        ),
    )
    .await
    .unwrap();
    let valkeys: Api<Valkey> = Api::namespaced(admin.clone(), &ns);
    let up = wait_for_valkey(
        &valkeys,
        NAME,
        "OK under the first operator",
        Duration::from_secs(400),
        settled,
    )
    .await
    .unwrap();
    let initial_master = up.status.and_then(|s| s.master_pod).unwrap();

    // A stops where it stands (mid-pass or idle) and keeps its "I lead" state in memory.
    let stopped_at = Timestamp::now();
    let stopped = Instant::now();
    first.signal("-STOP").unwrap();
    wait_until(
        "the second operator holds the Lease",
        Duration::from_secs(120),
        || async { Ok((lease_holder(&admin).await.as_deref() == Some(SECOND)).then_some(())) },
    )
    .await
    .unwrap();
    let lease_taken = stopped.elapsed();
    second.wait_leading(Duration::from_secs(120)).await.unwrap();
    let second_ready = stopped.elapsed();
    println!(
        "MEASURED takeover: lease_taken_ms={} second_ready_ms={}",
        lease_taken.as_millis(),
        second_ready.as_millis()
    );
    assert!(
        lease_taken >= Duration::from_secs(10),
        "the Lease changed hands before A's Lease could have expired: {lease_taken:?}"
    );

    // A pod template change: B rolls the data tier, the master by a switchover.
    let resources = serde_json::json!({"requests": {"cpu": "23m"}});
    valkeys
        .patch(
            NAME,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {
                "resources": resources, "sentinel": {"resources": resources},
            }})),
        )
        .await
        .unwrap();
    let switched = wait_for_valkey(
        &valkeys,
        NAME,
        "the master switched over by the second operator",
        Duration::from_secs(600),
        |v| {
            v.status
                .as_ref()
                .and_then(|s| s.master_pod.as_deref())
                .is_some_and(|master| master != initial_master)
        },
    )
    .await
    .unwrap();
    let new_master = switched.status.and_then(|s| s.master_pod).unwrap();

    // A resumes in the middle of B's roll.
    let log_offset = first.log_len();
    let resumed_at = Timestamp::now();
    let resumed = Instant::now();
    first.signal("-CONT").unwrap();
    let mut first = first;
    // A notices (its renewal is older than the renew deadline), closes its gate and campaigns
    // again as a standby: B holds the Lease, so A never leads again in this test.
    wait_until(
        "the resumed operator to notice it lost the Lease",
        Duration::from_secs(60),
        || {
            let noticed = first
                .log_since(log_offset)
                .contains("lost the leader Lease");
            async move { Ok(noticed.then_some(())) }
        },
    )
    .await
    .unwrap();
    let noticed_after_resume = resumed.elapsed();
    assert_eq!(
        first.readyz().await,
        Some((200, "standing by".to_owned())),
        "the resumed operator's /readyz once it campaigns again"
    );

    wait_for_valkey(
        &valkeys,
        NAME,
        "OK with the roll done under the second operator",
        Duration::from_secs(600),
        settled,
    )
    .await
    .unwrap();
    let masters_after = wait_until(
        "exactly one data pod answers master",
        Duration::from_secs(120),
        || async {
            let found = masters(&admin, &ns)
                .await
                .map_err(|e| vko_testbed::Error::Other(format!("{e:#}")))?;
            Ok((found.len() == 1).then_some(found))
        },
    )
    .await
    .unwrap();
    // A stayed up as a standby the whole time (it does not exit on a lost Lease, ADR 0017).
    let first_exit = first.child.try_wait().ok().flatten();
    // Stopped before B, so a Lease B gives back is never A's within the audited window.
    first.signal("-KILL").unwrap();
    let first_log = first.log_since(log_offset);
    drop(second);
    // The audit backend writes each event as the request completes; a moment for the last ones.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let audit =
        std::fs::read_to_string(vko_testbed::controlplane::audit_log(&Paths::from_env())).unwrap();
    let identities = OperatorIdentities {
        users: vec![user_of(FIRST), user_of(SECOND)],
        service_account_suffixes: Vec::new(),
    };
    let log = read_audit_log(&audit, &identities);
    let of = |user: String| {
        log.requests
            .iter()
            .filter(move |r| r.user == user)
            .filter_map(|r| Some((received(r)?, r)))
    };
    let writes = |user: String| of(user).filter(|(_, r)| is_write_verb(&r.verb) && r.code < 400);
    let first_writes_before: usize = writes(user_of(FIRST))
        .filter(|(t, _)| *t < stopped_at)
        .count();
    let first_writes_while_stopped: Vec<String> = writes(user_of(FIRST))
        .filter(|(t, _)| *t >= stopped_at && *t < resumed_at)
        .map(|(_, r)| describe(r))
        .collect();
    let first_after: Vec<&Request> = of(user_of(FIRST))
        .filter(|(t, _)| *t >= resumed_at)
        .map(|(_, r)| r)
        .collect();
    let first_writes_after: Vec<String> = first_after
        .iter()
        .filter(|r| is_write_verb(&r.verb))
        .map(|r| describe(r))
        .collect();
    let second_writes: Vec<&Request> = writes(user_of(SECOND))
        .filter(|(t, _)| *t >= stopped_at)
        .map(|(_, r)| r)
        .collect();
    let second_of = |resource: &str, subresource: Option<&str>, verb: &str| {
        second_writes
            .iter()
            .filter(|r| r.verb == verb)
            .filter(|r| {
                matches!(&r.target, Target::Resource { resource: res, subresource: sub, .. }
                    if res == resource && sub.as_deref() == subresource)
            })
            .count()
    };
    let second_pod_deletes = second_of("pods", None, "delete");
    let second_status_writes = second_of("valkeys", Some("status"), "patch");
    let refused_in_process = first_log.matches("not the leader").count();
    // A roll step that decides to wait, pause or finish acts on nothing: a pass under way when
    // A was stopped may still decide one after the resume (its fenced dials refused, so it sees
    // no master and waits); every other step and action counts.
    let inert = ["action=Wait", "action=Pause", "action=Done"];
    let data_plane_after: Vec<&str> = first_log
        .lines()
        .filter(|line| {
            let plain = without_ansi_colours(line);
            [
                "roll step",
                "switched over",
                "Promoted",
                "adopting",
                "REPLICAOF",
            ]
            .iter()
            .any(|mark| plain.contains(mark))
                && !plain.contains("not the leader")
                && !inert.iter().any(|action| plain.contains(action))
        })
        .collect();
    println!(
        "MEASURED fencing: first_writes_before_stop={first_writes_before} \
         first_writes_while_stopped={} first_requests_after_resume={} \
         first_writes_after_resume={} first_refused_in_process={refused_in_process} \
         first_noticed_after_resume_ms={} first_exit={first_exit:?} second_writes={} \
         second_pod_deletes={second_pod_deletes} second_status_writes={second_status_writes} \
         master {initial_master} -> {new_master}, masters_after={masters_after:?}",
        first_writes_while_stopped.len(),
        first_after.len(),
        first_writes_after.len(),
        noticed_after_resume.as_millis(),
        second_writes.len(),
    );
    assert!(
        first_writes_before > 0,
        "A wrote nothing before the stop: wrong identity?"
    );
    assert!(
        first_writes_after.is_empty(),
        "A wrote after its resume: {first_writes_after:#?}"
    );
    assert!(
        data_plane_after.is_empty(),
        "A acted on the data plane after its resume: {data_plane_after:#?}"
    );
    assert!(
        first_log.contains("lost the leader Lease"),
        "A's log after the resume: {first_log}"
    );
    assert!(
        first_exit.is_none(),
        "A stays up as a standby after losing the Lease: {first_exit:?}"
    );
    assert!(
        second_pod_deletes >= 3 && second_status_writes > 0,
        "B did the roll: {second_pod_deletes} pod deletions, {second_status_writes} status writes"
    );
    assert_eq!(masters_after.len(), 1);
    cleanup_namespace(&admin, namespace).await.unwrap();
    for path in [first_config, second_config] {
        let _ = std::fs::remove_file(path);
    }
}

/// `line` without the ANSI colour sequences tracing writes to a log (`ESC [ … m`).
fn without_ansi_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for skipped in chars.by_ref() {
                if skipped == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
