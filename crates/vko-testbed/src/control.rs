//! The supervisor's control channel: tests and `cargo xtask testbed fault …` run in other processes,
//! so they ask the supervisor to inject a [`Fault`] through a Unix socket in the state directory
//! (`control.sock`, root only). One JSON object per line each way: the fault, then
//! `{"ok":true}` or `{"ok":false,"error":"…"}` once it took effect.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// A fault the testbed can inject.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the container's main process; the kubelet restarts it in place (restartCount + 1).
    Crash {
        namespace: String,
        pod: String,
        container: String,
    },
    /// Delete the pod through the API (graceful, as `kubectl delete pod`).
    DeletePod { namespace: String, pod: String },
    /// The node's heartbeats stop, its containers are SIGKILLed and its pods neither restart nor
    /// report status until [`Fault::StartNode`]; the node lifecycle controller marks them NotReady.
    StopNode { node: String },
    /// The node's kubelet comes back: heartbeats resume and its pods' containers restart.
    StartNode { node: String },
    /// The node's kubelet is cut off from the API server: no Lease renewal, no node status, no pod
    /// status, while its containers and probes keep running; the node lifecycle controller marks
    /// the node NotReady and its pods `Ready=False`.
    PauseHeartbeats { node: String },
    /// Undo [`Fault::PauseHeartbeats`]: the node reports Ready at once and its pods' status is
    /// written back over what the node lifecycle controller set.
    ResumeHeartbeats { node: String },
    /// Cut the pod off the network (connections hang, as on a real partition).
    Partition { namespace: String, pod: String },
    /// Undo [`Fault::Partition`].
    Heal { namespace: String, pod: String },
    /// A one-way cut: the pod drops every TCP packet to its `port` from the addresses `from`,
    /// while it still reaches them (its own connections to them, and their replies, pass).
    BlockInbound {
        namespace: String,
        pod: String,
        port: u16,
        from: Vec<std::net::Ipv4Addr>,
    },
    /// Undo [`Fault::BlockInbound`] (the same fields).
    UnblockInbound {
        namespace: String,
        pod: String,
        port: u16,
        from: Vec<std::net::Ipv4Addr>,
    },
    /// SIGSTOP the container's process group.
    Pause {
        namespace: String,
        pod: String,
        container: String,
    },
    /// SIGCONT the container's process group.
    Resume {
        namespace: String,
        pod: String,
        container: String,
    },
    /// Stop kube-apiserver and start it again with the same flags; done when it is ready again.
    RestartApiserver,
}

impl Fault {
    /// Parses the command line of `cargo xtask testbed fault …`.
    pub fn parse(args: &[String]) -> Result<Fault> {
        let usage = || Error::Invalid {
            what: "fault".into(),
            detail: format!("{args:?}; {USAGE}"),
        };
        let pod_ref = |text: &String| -> Result<(String, String)> {
            text.split_once('/')
                .filter(|(namespace, pod)| !namespace.is_empty() && !pod.is_empty())
                .map(|(namespace, pod)| (namespace.to_string(), pod.to_string()))
                .ok_or_else(usage)
        };
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let fault = match (words.as_slice(), args) {
            (["crash", _, container], [_, pod, _]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::Crash {
                    namespace,
                    pod,
                    container: container.to_string(),
                }
            }
            (["pause", _, container], [_, pod, _]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::Pause {
                    namespace,
                    pod,
                    container: container.to_string(),
                }
            }
            (["resume", _, container], [_, pod, _]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::Resume {
                    namespace,
                    pod,
                    container: container.to_string(),
                }
            }
            (["delete-pod", _], [_, pod]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::DeletePod { namespace, pod }
            }
            (["partition", _], [_, pod]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::Partition { namespace, pod }
            }
            (["heal", _], [_, pod]) => {
                let (namespace, pod) = pod_ref(pod)?;
                Fault::Heal { namespace, pod }
            }
            ([verb @ ("block-inbound" | "unblock-inbound"), _, port, from], [_, pod, _, _]) => {
                let (namespace, pod) = pod_ref(pod)?;
                let port = port.parse().map_err(|_| usage())?;
                let from = from
                    .split(',')
                    .map(str::parse)
                    .collect::<std::result::Result<Vec<std::net::Ipv4Addr>, _>>()
                    .map_err(|_| usage())?;
                if *verb == "block-inbound" {
                    Fault::BlockInbound {
                        namespace,
                        pod,
                        port,
                        from,
                    }
                } else {
                    Fault::UnblockInbound {
                        namespace,
                        pod,
                        port,
                        from,
                    }
                }
            }
            (["stop-node", node], _) => Fault::StopNode {
                node: node.to_string(),
            },
            (["start-node", node], _) => Fault::StartNode {
                node: node.to_string(),
            },
            (["pause-heartbeats", node], _) => Fault::PauseHeartbeats {
                node: node.to_string(),
            },
            (["resume-heartbeats", node], _) => Fault::ResumeHeartbeats {
                node: node.to_string(),
            },
            (["restart-apiserver"], _) => Fault::RestartApiserver,
            _ => return Err(usage()),
        };
        Ok(fault)
    }
}

/// How `cargo xtask testbed fault` is called.
pub const USAGE: &str = "usage: fault crash <ns>/<pod> <container> | delete-pod <ns>/<pod> | \
stop-node <node> | start-node <node> | pause-heartbeats <node> | resume-heartbeats <node> | \
partition <ns>/<pod> | heal <ns>/<pod> | block-inbound <ns>/<pod> <port> <ip>[,<ip>…] | \
unblock-inbound <ns>/<pod> <port> <ip>[,<ip>…] | pause <ns>/<pod> <container> | resume <ns>/<pod> <container> | restart-apiserver";

/// The control socket of the testbed whose state lives in `state_dir`.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    state_dir.join("control.sock")
}

/// How long a client waits for a fault to take effect (an API-server restart takes the longest).
const REPLY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Reply {
    ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Asks the supervisor behind `socket` to inject `fault`; returns once it took effect.
pub async fn send(socket: &Path, fault: &Fault) -> Result<()> {
    let exchange = async {
        let mut stream = UnixStream::connect(socket)
            .await
            .map_err(Error::io(format!(
                "connecting to the testbed's control socket {} (is the testbed up?)",
                socket.display()
            )))?;
        let mut line = serde_json::to_vec(fault)
            .map_err(|error| Error::Other(format!("encoding the fault: {error}")))?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .await
            .map_err(Error::io("sending the fault"))?;
        let mut reply = String::new();
        BufReader::new(stream)
            .read_line(&mut reply)
            .await
            .map_err(Error::io("reading the supervisor's reply"))?;
        let reply: Reply = serde_json::from_str(&reply).map_err(|error| {
            Error::Other(format!("bad reply from the supervisor {reply:?}: {error}"))
        })?;
        match reply {
            Reply { ok: true, .. } => Ok(()),
            Reply { error, .. } => Err(Error::Other(format!(
                "fault {fault:?} failed: {}",
                error.unwrap_or_else(|| "no reason given".into())
            ))),
        }
    };
    tokio::time::timeout(REPLY_TIMEOUT, exchange)
        .await
        .map_err(|_| Error::Timeout {
            what: format!("the supervisor to inject {fault:?}"),
            seconds: REPLY_TIMEOUT.as_secs(),
        })?
}

/// [`send`] for callers without a tokio runtime (`cargo xtask testbed fault`).
pub fn send_blocking(socket: &Path, fault: &Fault) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(Error::io("starting a tokio runtime"))?
        .block_on(send(socket, fault))
}

/// A fault to inject and where its outcome goes.
pub type FaultRequest = (Fault, oneshot::Sender<std::result::Result<(), String>>);

/// Binds the control socket (replacing a stale one), readable and writable by root only.
pub fn bind(socket: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(Error::io(format!("removing {}", socket.display()))(error));
        }
    }
    let listener =
        UnixListener::bind(socket).map_err(Error::io(format!("binding {}", socket.display())))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(Error::io(format!("restricting {}", socket.display())))?;
    Ok(listener)
}

/// Accepts connections until `shutdown`, hands each fault to `requests` and writes back the outcome.
pub async fn serve(
    listener: UnixListener,
    requests: mpsc::Sender<FaultRequest>,
    shutdown: CancellationToken,
) {
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::warn!(%error, "control socket accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let requests = requests.clone();
        tokio::spawn(async move {
            let (read, mut write) = stream.into_split();
            let mut line = String::new();
            if BufReader::new(read).read_line(&mut line).await.is_err() {
                return;
            }
            let outcome = match serde_json::from_str::<Fault>(&line) {
                Err(error) => Err(format!("not a fault: {error}")),
                Ok(fault) => {
                    tracing::info!(?fault, "injecting a fault");
                    let (done, result) = oneshot::channel();
                    if requests.send((fault, done)).await.is_err() {
                        Err("the testbed is stopping".to_string())
                    } else {
                        result
                            .await
                            .unwrap_or_else(|_| Err("the testbed is stopping".to_string()))
                    }
                }
            };
            let reply = match outcome {
                Ok(()) => Reply {
                    ok: true,
                    error: None,
                },
                Err(error) => {
                    tracing::warn!(%error, "the fault failed");
                    Reply {
                        ok: false,
                        error: Some(error),
                    }
                }
            };
            if let Ok(mut bytes) = serde_json::to_vec(&reply) {
                bytes.push(b'\n');
                let _ = write.write_all(&bytes).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn the_command_line_names_each_fault() {
        assert_eq!(
            Fault::parse(&args("crash ns1/pod-0 valkey")).unwrap(),
            Fault::Crash {
                namespace: "ns1".into(),
                pod: "pod-0".into(),
                container: "valkey".into()
            }
        );
        assert_eq!(
            Fault::parse(&args("partition ns1/pod-0")).unwrap(),
            Fault::Partition {
                namespace: "ns1".into(),
                pod: "pod-0".into()
            }
        );
        assert_eq!(
            Fault::parse(&args("block-inbound ns1/pod-0 6379 10.0.0.7,10.0.0.9")).unwrap(),
            Fault::BlockInbound {
                namespace: "ns1".into(),
                pod: "pod-0".into(),
                port: 6379,
                from: vec![[10, 0, 0, 7].into(), [10, 0, 0, 9].into()],
            }
        );
        assert_eq!(
            Fault::parse(&args("unblock-inbound ns1/pod-0 6379 10.0.0.7")).unwrap(),
            Fault::UnblockInbound {
                namespace: "ns1".into(),
                pod: "pod-0".into(),
                port: 6379,
                from: vec![[10, 0, 0, 7].into()],
            }
        );
        assert_eq!(
            Fault::parse(&args("stop-node node-2")).unwrap(),
            Fault::StopNode {
                node: "node-2".into()
            }
        );
        assert_eq!(
            Fault::parse(&args("pause-heartbeats node-3")).unwrap(),
            Fault::PauseHeartbeats {
                node: "node-3".into()
            }
        );
        assert_eq!(
            Fault::parse(&args("resume-heartbeats node-3")).unwrap(),
            Fault::ResumeHeartbeats {
                node: "node-3".into()
            }
        );
        assert_eq!(
            Fault::parse(&args("restart-apiserver")).unwrap(),
            Fault::RestartApiserver
        );
        for bad in [
            "block-inbound ns/pod 6379",
            "block-inbound ns/pod port 10.0.0.7",
            "block-inbound ns/pod 6379 10.0.0",
            "crash pod-0 valkey",
            "crash ns/pod",
            "pause /pod c",
            "pause-heartbeats",
            "explode",
            "",
        ] {
            assert!(Fault::parse(&args(bad)).is_err(), "{bad:?} is refused");
        }
    }

    #[test]
    fn faults_travel_as_tagged_json() {
        let fault = Fault::Pause {
            namespace: "a".into(),
            pod: "b".into(),
            container: "c".into(),
        };
        let json = serde_json::to_value(&fault).unwrap();
        assert_eq!(json["fault"], "pause");
        assert_eq!(serde_json::from_value::<Fault>(json).unwrap(), fault);
    }

    #[tokio::test]
    async fn a_fault_goes_through_the_socket_and_its_outcome_comes_back() {
        let dir = std::env::temp_dir().join(format!("vko-control-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let socket = socket_path(&dir);
        let listener = bind(&socket).unwrap();
        let (sender, mut receiver) = mpsc::channel(1);
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, sender, shutdown.clone()));
        let handler = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some((fault, done)) = receiver.recv().await {
                let outcome = match fault {
                    Fault::RestartApiserver => Err("refused".to_string()),
                    _ => Ok(()),
                };
                seen.push(fault);
                let _ = done.send(outcome);
            }
            seen
        });
        let heal = Fault::Heal {
            namespace: "n".into(),
            pod: "p".into(),
        };
        send(&socket, &heal).await.unwrap();
        let refused = send(&socket, &Fault::RestartApiserver).await.unwrap_err();
        assert!(refused.to_string().contains("refused"), "{refused}");
        shutdown.cancel();
        server.await.unwrap();
        let seen = handler.await.unwrap();
        assert_eq!(seen, vec![heal, Fault::RestartApiserver]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
