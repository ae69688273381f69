//! The probe scripts, as rendered, run by `sh` against a stand-in `valkey-cli` that answers
//! `PONG` only when `REDISCLI_AUTH` is the password it expects: the scripts read the password
//! file on every run (a rotated password is used at once, its exact bytes, a trailing newline
//! kept), and the liveness script counts an authentication refusal as alive (the server
//! answered), while the readiness script does not.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use vko_render::{ALIVE_SCRIPT, READY_SCRIPT};

/// Runs `script` with the password file holding `in_file` against a server expecting
/// `expected`; whether the probe passed.
fn probe(script: &str, in_file: Option<&[u8]>, expected: &str, case: &str) -> bool {
    let dir = std::env::temp_dir().join(format!("vko-probe-{}-{case}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cli = dir.join("valkey-cli");
    std::fs::write(dir.join("expected"), expected).unwrap();
    std::fs::write(
        &cli,
        format!(
            "#!/bin/sh\nexpected=$(cat {dir}/expected && echo x); expected=${{expected%x}}\n\
             if [ \"$REDISCLI_AUTH\" = \"$expected\" ]; then echo PONG; \
             else echo 'AUTH failed: WRONGPASS invalid username-password pair' >&2; \
             echo 'NOAUTH Authentication required.'; fi\n",
            dir = dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new("sh");
    command
        .args(["-c", script, "probe", "-h", "127.0.0.1", "-p", "6379"])
        .env("PATH", path)
        .env_remove("REDISCLI_AUTH");
    if let Some(bytes) = in_file {
        let file = dir.join("password");
        std::fs::write(&file, bytes).unwrap();
        command.env("VKO_PASSWORD_FILE", &file);
    }
    let passed = command.status().unwrap().success();
    std::fs::remove_dir_all(&dir).unwrap();
    passed
}

#[test]
fn the_probes_send_the_password_files_exact_bytes() {
    assert!(probe(READY_SCRIPT, Some(b"s3 cret"), "s3 cret", "plain"));
    assert!(probe(READY_SCRIPT, Some(b"pw\n"), "pw\n", "newline"));
    assert!(
        !probe(READY_SCRIPT, Some(b"pw\n"), "pw", "stripped"),
        "a trailing newline is part of the password"
    );
}

#[test]
fn a_refused_password_is_alive_but_not_ready_and_a_missing_file_fails_both() {
    assert!(!probe(READY_SCRIPT, Some(b"old"), "new", "ready-refused"));
    assert!(probe(ALIVE_SCRIPT, Some(b"old"), "new", "alive-refused"));
    assert!(probe(ALIVE_SCRIPT, Some(b"new"), "new", "alive"));
    let dir = std::env::temp_dir().join(format!("vko-probe-missing-{}", std::process::id()));
    let status = Command::new("sh")
        .args(["-c", ALIVE_SCRIPT, "probe"])
        .env("VKO_PASSWORD_FILE", dir.join("absent"))
        .status()
        .unwrap();
    assert!(
        !status.success(),
        "an unreadable password file fails the probe"
    );
}
