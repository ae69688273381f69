//! The rendered `valkey.conf` and `sentinel.conf` are accepted by the real server binaries
//! installed on this machine (Valkey 8.0.1): every persistence mode, master and replica config,
//! and the directive sets of 7.2, 8.0 and 9.0 tags (a 8.0.1 server accepts the 7.2 and 8.0 sets;
//! the 9.0 set is the 8.0 set today). The listening ports are overridden at the end of the file
//! (the last occurrence wins) and `dir` points at a temp dir, so the servers run side by side.
//!
//! Skips, saying so, when `valkey-server` / `valkey-sentinel` / `valkey-cli` are not installed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use vko_api::Valkey;
use vko_render::{sentinel_conf, valkey_conf};

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "vko-render-{label}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("temp dir");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped on drop (also when the test fails).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn installed(binary: &str) -> bool {
    Command::new(binary)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts `binary` on `config` and waits until `ping_args` answers PONG; returns the log on
/// failure.
fn runs_and_answers(
    binary: &str,
    config: &Path,
    ping_args: &[String],
    log: &Path,
) -> Result<(), String> {
    let log_file = std::fs::File::create(log).map_err(|e| e.to_string())?;
    let child = Command::new(binary)
        .arg(config)
        .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
        .stderr(log_file)
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut guard = ChildGuard(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(status)) = guard.0.try_wait() {
            return Err(format!(
                "{binary} exited with {status}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            ));
        }
        let reply = Command::new("valkey-cli")
            .args(ping_args)
            .arg("ping")
            .output();
        if reply.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "{binary} did not answer PONG: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    ))
}

fn valkey_with(image: &str, persistence: serde_json::Value) -> Valkey {
    serde_json::from_value(json!({
        "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
        "metadata": {"name": "live"},
        "spec": {"replicas": 3, "image": image, "sentinel": {"enabled": true},
                 "persistence": persistence}
    }))
    .expect("valkey")
}

#[test]
fn rendered_configs_start_real_servers() {
    if !(installed("valkey-server") && installed("valkey-sentinel") && installed("valkey-cli")) {
        eprintln!("SKIPPED: valkey-server/valkey-sentinel/valkey-cli are not installed");
        return;
    }
    let mut cases = Vec::new();
    for image in [
        "valkey/valkey:7.2",
        "valkey/valkey:8.0",
        "valkey/valkey:9.0",
        "valkey/valkey:latest",
    ] {
        for persistence in [
            json!({"enabled": false}),
            json!({"enabled": true, "mode": "rdb"}),
            json!({"enabled": true, "mode": "aof"}),
            json!({"enabled": true, "mode": "both"}),
        ] {
            cases.push(valkey_with(image, persistence));
        }
    }
    for (index, valkey) in cases.iter().enumerate() {
        let inputs = common::inputs_for(valkey);
        let dir = TempDir::new(&format!("case{index}"));
        let socket = dir.0.join("valkey.sock");
        for (label, replica_of) in [("master", None), ("replica", Some(0))] {
            let text = valkey_conf(valkey, &inputs, replica_of).expect("renders");
            let config = dir.0.join(format!("{label}.conf"));
            // `dir` takes effect (chdir) where it stands, so it is replaced, not overridden.
            assert!(text.contains("\ndir /data\n"));
            let text = text.replace("\ndir /data\n", &format!("\ndir {}\n", dir.0.display()));
            std::fs::write(
                &config,
                format!(
                    "{text}\n# test overrides\nport 0\nunixsocket {}\n",
                    socket.display()
                ),
            )
            .expect("write config");
            let ping = vec!["-s".to_owned(), socket.display().to_string()];
            runs_and_answers(
                "valkey-server",
                &config,
                &ping,
                &dir.0.join(format!("{label}.log")),
            )
            .unwrap_or_else(|e| panic!("case {index} ({label}, {:?}): {e}", valkey.spec.image));
        }
        let port = free_port();
        let text = sentinel_conf(valkey, &inputs, 0).expect("renders");
        let config = dir.0.join("sentinel.conf");
        std::fs::write(
            &config,
            format!("{text}\n# test overrides\nbind 127.0.0.1\nport {port}\n"),
        )
        .expect("write config");
        let ping = vec!["-p".to_owned(), port.to_string()];
        runs_and_answers(
            "valkey-sentinel",
            &config,
            &ping,
            &dir.0.join("sentinel.log"),
        )
        .unwrap_or_else(|e| panic!("case {index} (sentinel): {e}"));
        // Sentinel could rewrite its config in place (it needs a writable directory).
        let rewritten = std::fs::read_to_string(&config).expect("config readable");
        assert!(
            rewritten.contains("sentinel myid"),
            "sentinel did not rewrite its config"
        );
    }
}
