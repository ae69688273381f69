//! The chart's operator RBAC is no broader than the operator needs.
//!
//! Every `operator_*` test runs the operator as user `vko-e2e-operator` with the chart's ClusterRole
//! and leader-election Role bound to it (`operator_support`), and a helm test runs it in-cluster as
//! the chart's ServiceAccount. The testbed's API server audits every request (level Metadata), so
//! after the whole suite the audit log lists each (verb, resource) the operator used. This test
//! compares that with the chart's rules (`vko_testbed::rbac_audit::check`) and fails on a granted
//! write verb nobody used, a wildcard, a refused (403) operator request, or a log too thin to prove
//! anything. A refusal of what the rules grant while the API server was (re)starting (the testbed
//! records each start until `/readyz`; `operator_apiserver_restart` restarts it under a running
//! operator) is the authorizer's empty cache, not a missing rule: it is counted, not failed.
//!
//! It must run AFTER the rest of the suite, so it is `#[ignore]`d in the suite's own run;
//! `cargo xtask test` runs it last. By hand, against the running testbed after some operator tests:
//! `cargo test -p vko-e2e --features e2e --test e2e -- --ignored --nocapture rbac_least_privilege::`;
//! `VKO_RBAC_AUDIT_SINCE=2026-11-30T17:12:00Z` limits it to the requests received since then (a
//! long-lived testbed's log may hold requests made under an older ClusterRole).

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::rbac::v1::PolicyRule;
use vko_api::Valkey;
use vko_render::{RenderInputs, render};
use vko_testbed::harness::{chart_operator_rbac, rendered_rules};
use vko_testbed::paths::Paths;
use vko_testbed::pki::E2E_OPERATOR_USER;
use vko_testbed::rbac_audit::{
    Minimums, OperatorIdentities, check, mark_requests_during_apiserver_starts,
    read_apiserver_starts, read_audit_log,
};

/// Below these the log proves nothing: one operator test alone makes several hundred requests
/// (watches, applies, status writes, Lease renewals) and many writes.
const MINIMUMS: Minimums = Minimums {
    requests: 200,
    successful_writes: 20,
};

/// Where to write the failed reasons, one per line (set by `cargo xtask test`).
const VERDICT_FILE_ENV: &str = "VKO_RBAC_VERDICT_FILE";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The rules of every Role the operator renders for the examples (the sidecar's): the operator must
/// hold what they grant, or the API server refuses to let it write them (RBAC escalation check).
fn rendered_role_rules() -> anyhow::Result<Vec<PolicyRule>> {
    let mut rules = Vec::new();
    let examples = repo_root().join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
        .with_context(|| format!("reading {}", examples.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let valkey: Valkey =
            serde_norway::from_str(&text).with_context(|| format!("parsing {}", file.display()))?;
        let inputs = RenderInputs::new("rbac-check", "vko.local/vko:0.1.0", "0.1.0");
        let rendered =
            render(&valkey, &inputs).with_context(|| format!("rendering {}", file.display()))?;
        for object in rendered.objects()? {
            if object["kind"] == "Role" {
                rules.extend(serde_json::from_value::<Vec<PolicyRule>>(
                    object["rules"].clone(),
                )?);
            }
        }
    }
    anyhow::ensure!(
        !rules.is_empty(),
        "no example under {} renders a Role",
        examples.display()
    );
    Ok(rules)
}

#[tokio::test]
#[ignore = "reads the whole suite's audit log: `cargo xtask test` runs it after every other end-to-end test"]
async fn the_chart_grants_the_operator_no_write_it_did_not_use() -> anyhow::Result<()> {
    let objects = chart_operator_rbac(&repo_root().join("charts/valkey-operator")).await?;
    let mut rules = rendered_rules(&objects, "ClusterRole")?;
    rules.extend(rendered_rules(&objects, "Role")?);
    let delegated = rendered_role_rules()?;

    let log_path = vko_testbed::controlplane::audit_log(&Paths::from_env());
    let text = std::fs::read_to_string(&log_path).with_context(|| {
        format!(
            "reading the API server's audit log {} (a testbed started before the audit log existed has none: restart it)",
            log_path.display()
        )
    })?;
    let identities = OperatorIdentities {
        users: vec![E2E_OPERATOR_USER.to_string()],
        service_account_suffixes: vec!["valkey-operator".to_string()],
    };
    // A rotated-away part would leave this check seeing only the tail.
    let rotated = vko_testbed::controlplane::rotated_audit_logs(&Paths::from_env())?;
    anyhow::ensure!(
        rotated.is_empty(),
        "the API server rotated its audit log ({rotated:?}): raise --audit-log-maxsize"
    );
    let mut log = read_audit_log(&text, &identities);
    // A testbed without the record (started by an older vko-testbed) excuses nothing.
    let starts_path = vko_testbed::controlplane::apiserver_starts(&Paths::from_env());
    let starts = read_apiserver_starts(&std::fs::read_to_string(&starts_path).unwrap_or_default());
    println!(
        "{}: {} API server start(s) recorded",
        starts_path.display(),
        starts.len()
    );
    mark_requests_during_apiserver_starts(&mut log.requests, &starts);
    if let Some(since) = std::env::var("VKO_RBAC_AUDIT_SINCE")
        .ok()
        .filter(|since| !since.is_empty())
    {
        // Audit timestamps are UTC RFC 3339 with microseconds: text order is time order once `since`
        // has the same shape (`...:00Z` sorts after `...:00.5Z`).
        let since = match since.strip_suffix('Z') {
            Some(seconds) if !seconds.contains('.') => format!("{seconds}.000000Z"),
            _ => since,
        };
        let before = log.requests.len();
        log.requests
            .retain(|request| request.received.as_str() >= since.as_str());
        println!(
            "VKO_RBAC_AUDIT_SINCE={since}: {} of {before} operator requests",
            log.requests.len()
        );
    }
    let users: std::collections::BTreeSet<&str> = log
        .requests
        .iter()
        .map(|request| request.user.as_str())
        .collect();
    println!(
        "audit log {}: {} events ({} unparsable lines); operator identities seen: {users:?}",
        log_path.display(),
        log.events,
        log.unparsable_lines
    );
    let verdict = check(&rules, &log.requests, &delegated, MINIMUMS);
    println!("{verdict}");
    let failures = verdict.failures();
    // `cargo xtask test` repeats these in its summary: a CI log's tail then says why.
    if let Some(path) = std::env::var_os(VERDICT_FILE_ENV).filter(|path| !path.is_empty()) {
        std::fs::write(&path, failures.join("\n"))
            .with_context(|| format!("writing {}", PathBuf::from(&path).display()))?;
    }
    anyhow::ensure!(
        failures.is_empty(),
        "the chart's operator RBAC is not least-privilege: {}",
        failures.join("; ")
    );
    Ok(())
}
