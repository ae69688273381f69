//! The Sentinel container's preStop script, as rendered, run by `sh` against a stand-in
//! `valkey-cli` that reports a failover in progress for a number of calls: the script waits while
//! the flag is set, and stops waiting when it clears or the Sentinel does not answer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::{inputs_for, valkey_from_yaml};
use vko_render::render;

/// The rendered preStop command of the Sentinel container.
fn pre_stop_command() -> Vec<String> {
    let valkey = valkey_from_yaml(
        "apiVersion: vko.gtrfc.com/v1\nkind: Valkey\nmetadata: {name: fo}\n\
         spec: {replicas: 3, image: valkey/valkey:8.0, sentinel: {enabled: true}}\n",
    );
    let rendered = render(&valkey, &inputs_for(&valkey)).unwrap();
    let sentinels = rendered
        .statefulsets
        .iter()
        .find(|sts| sts.metadata.name.as_deref() == Some("fo-sentinel"))
        .unwrap();
    let pod = sentinels
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let container = pod
        .containers
        .iter()
        .find(|c| c.name == "sentinel")
        .unwrap();
    container
        .lifecycle
        .as_ref()
        .and_then(|l| l.pre_stop.as_ref())
        .and_then(|h| h.exec.as_ref())
        .and_then(|e| e.command.clone())
        .expect("the sentinel container has an exec preStop")
}

/// Runs the preStop with a `valkey-cli` that answers `failover_in_progress` for its first
/// `in_progress` calls (then a plain master), or fails every call when `in_progress` is `None`;
/// returns the exit status and the calls it saw (one line of arguments each).
fn run_with(in_progress: Option<u32>) -> (bool, Vec<String>) {
    let dir = std::env::temp_dir().join(format!(
        "vko-sentinel-pre-stop-{}-{}",
        std::process::id(),
        in_progress.map_or(-1, i64::from)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let calls = dir.join("calls");
    let cli = dir.join("valkey-cli");
    let answer = match in_progress {
        Some(limit) => format!(
            "n=$(wc -l < {calls}); if [ \"$n\" -le {limit} ]; then \
             printf 'name\\nfo\\nflags\\nmaster,failover_in_progress\\n'; \
             else printf 'name\\nfo\\nflags\\nmaster\\n'; fi",
            calls = calls.display()
        ),
        None => "echo 'Could not connect to Valkey at 127.0.0.1:26379' >&2; exit 1".to_owned(),
    };
    std::fs::write(
        &cli,
        format!("#!/bin/sh\necho \"$*\" >> {}\n{answer}\n", calls.display()),
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(&calls, "").unwrap();

    let command = pre_stop_command();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new(&command[0])
        .args(&command[1..])
        .env("PATH", path)
        .status()
        .unwrap();
    let seen = std::fs::read_to_string(&calls)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let _ = std::fs::remove_dir_all(Path::new(&dir));
    (status.success(), seen)
}

#[test]
fn the_sentinel_waits_while_it_leads_a_failover() {
    let (ok, calls) = run_with(Some(3));
    assert!(ok);
    assert_eq!(
        calls.len(),
        4,
        "three calls saw the failover, the fourth none: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|call| call == "-h 127.0.0.1 -p 26379 sentinel master fo"),
        "{calls:?}"
    );
}

#[test]
fn the_sentinel_stops_at_once_without_a_failover() {
    let (ok, calls) = run_with(Some(0));
    assert!(ok);
    assert_eq!(calls.len(), 1, "{calls:?}");
}

#[test]
fn a_sentinel_that_does_not_answer_is_not_waited_for() {
    let (ok, calls) = run_with(None);
    assert!(ok, "the hook does not fail the stop");
    assert_eq!(calls.len(), 1, "{calls:?}");
}
