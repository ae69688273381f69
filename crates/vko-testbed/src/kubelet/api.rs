//! The kubelet API, so `kubectl logs` and `kubectl exec` work as on a real cluster: the API server
//! proxies them to the Node's daemon endpoint (`10.244.0.1:<kubelet_port>`, HTTPS with a serving
//! certificate from the testbed CA; only client certificates signed by that CA get in, like the
//! API server's `--kubelet-client-certificate`).
//!
//! - `GET /containerLogs/{ns}/{pod}/{container}` with `previous`, `follow`, `tailLines`, `limitBytes`
//!   (`timestamps`, `sinceSeconds` are ignored): the per-attempt log files the pod lifecycle writes
//!   (`pods/<uid>/logs/<container>/<attempt>.log`); `previous` is the attempt before the current one.
//! - `/exec/{ns}/{pod}/{container}?command=…&input=1&output=1&error=1`: the WebSocket channel
//!   protocol (`v5.channel.k8s.io`, `v4.channel.k8s.io`): binary messages whose first byte is the
//!   channel (0 stdin, 1 stdout, 2 stderr, 3 the final `metav1.Status` with the exit code, 4 resize;
//!   v5: 255 closes a channel, how the client ends stdin). The API server passes the WebSocket
//!   through because the testbed turns `TranslateStreamCloseWebsocketRequests` off (otherwise it
//!   would translate to SPDY, which this kubelet does not speak). No TTY: `-t` runs without one.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, frame::coding::CloseCode};
use tokio_util::sync::CancellationToken;

use super::nodes::StoppedNodes;
use super::running::{RunningContainer, RunningContainers};
use crate::pki::{APISERVER_BRIDGE_IP, Pki};
use crate::{Error, Result};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// Channel protocols we speak, preferred first.
const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5: "this channel is closed" (the client closes stdin with `[255, 0]`).
const CLOSE: u8 = 255;
/// How often `follow` looks for new log lines.
const FOLLOW_POLL: Duration = Duration::from_millis(200);
/// After an exec'd command exited, how long its output may still drain (a background child could
/// hold the pipes open forever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// What every request handler needs.
struct ApiContext {
    client: kube::Client,
    state_dir: PathBuf,
    running: RunningContainers,
}

/// Serves the kubelet API of every node (one port each) until `shutdown`. A stopped node's port
/// drops every connection, as a node that is down would.
pub async fn serve(
    client: kube::Client,
    state_dir: PathBuf,
    nodes: Vec<super::NodeSpec>,
    running: RunningContainers,
    stopped: StoppedNodes,
    shutdown: CancellationToken,
) -> Result<()> {
    let node_names: Vec<&str> = nodes.iter().map(|node| node.name.as_str()).collect();
    let tls = Arc::new(tls_config(
        &Pki::open(&crate::paths::Paths::new(state_dir.clone()).pki_dir()),
        &node_names,
    )?);
    let context = Arc::new(ApiContext {
        client,
        state_dir,
        running,
    });
    let mut listeners = Vec::new();
    for node in &nodes {
        let address = SocketAddr::new(IpAddr::V4(APISERVER_BRIDGE_IP), node.kubelet_port);
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .map_err(Error::io(format!(
                "binding the kubelet API of {} on {address}",
                node.name
            )))?;
        tracing::info!(node = %node.name, %address, "kubelet API listening");
        listeners.push((node.name.clone(), listener));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (node, listener) in listeners {
        tasks.spawn(accept_loop(
            listener,
            NodeGate {
                node,
                stopped: stopped.clone(),
            },
            tls.clone(),
            context.clone(),
            shutdown.clone(),
        ));
    }
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Which node a port belongs to, and whether that node is up.
struct NodeGate {
    node: String,
    stopped: StoppedNodes,
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    gate: NodeGate,
    tls: Arc<rustls::ServerConfig>,
    context: Arc<ApiContext>,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "kubelet API accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        if gate.stopped.is_stopped(&gate.node) {
            tracing::debug!(node = %gate.node, %peer, "the node is stopped: dropping the connection");
            continue;
        }
        let acceptor = acceptor.clone();
        let context = context.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(stream).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::warn!(%peer, %error, "kubelet API TLS handshake failed");
                    return;
                }
            };
            let service = hyper::service::service_fn(move |request| {
                let context = context.clone();
                async move { Ok::<_, Infallible>(handle(context, request).await) }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::select! {
                () = shutdown.cancelled() => {}
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%peer, %error, "kubelet API connection ended");
                    }
                }
            }
        });
    }
}

/// The serving certificate (IP SAN 10.244.0.1, the node names) and the client-certificate check.
fn tls_config(pki: &Pki, node_names: &[&str]) -> Result<rustls::ServerConfig> {
    let bad = |what: &str| {
        let what = what.to_string();
        move |error: rustls::pki_types::pem::Error| Error::Pki(format!("{what}: {error}"))
    };
    let (cert_path, key_path) =
        pki.issue_serving_cert("kubelet", &[IpAddr::V4(APISERVER_BRIDGE_IP)], node_names)?;
    let chain =
        vec![CertificateDer::from_pem_file(&cert_path).map_err(bad("kubelet certificate"))?];
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(bad("kubelet key"))?;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.ca_cert()).map_err(bad("CA certificate"))?)
        .map_err(|error| Error::Pki(format!("CA certificate: {error}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .map_err(|error| Error::Pki(format!("client verifier: {error}")))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| Error::Pki(format!("TLS versions: {error}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|error| Error::Pki(format!("kubelet certificate: {error}")))?;
    // Upgrades (exec) are HTTP/1.1 only.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

async fn handle(context: Arc<ApiContext>, mut request: Request<Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    let query = parse_query(request.uri().query().unwrap_or(""));
    let segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let result = match segments.as_slice() {
        ["healthz"] => Ok(text(StatusCode::OK, "ok")),
        ["containerLogs", namespace, pod, container] => {
            container_logs(&context, namespace, pod, container, &query).await
        }
        // The API server sends `/exec/{ns}/{pod}/{container}`; the uid form exists too.
        ["exec", namespace, pod, container] | ["exec", namespace, pod, _, container] => {
            exec(&context, &mut request, namespace, pod, container, &query)
        }
        _ => Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("no handler for {path}"),
        )),
    };
    result.unwrap_or_else(|failure| text(failure.status, &failure.message))
}

/// An error answer.
struct Failure {
    status: StatusCode,
    message: String,
}

impl Failure {
    fn new(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes).boxed_unsync()
}

/// `a=1&b=x&b=y` → {a: [1], b: [x, y]}, percent- and `+`-decoded.
fn parse_query(query: &str) -> HashMap<String, Vec<String>> {
    let mut map: HashMap<String, Vec<String>> = HashMap::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        map.entry(percent_decode(&key.replace('+', " ")))
            .or_default()
            .push(percent_decode(&value.replace('+', " ")));
    }
    map
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && let Some(hex) = text.get(index + 1..index + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn flag(query: &HashMap<String, Vec<String>>, name: &str) -> bool {
    query
        .get(name)
        .and_then(|values| values.first())
        .is_some_and(|value| value == "1" || value.eq_ignore_ascii_case("true"))
}

fn number(query: &HashMap<String, Vec<String>>, name: &str) -> Result<Option<u64>, Failure> {
    match query.get(name).and_then(|values| values.first()) {
        None => Ok(None),
        Some(value) => value.parse().map(Some).map_err(|_| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                format!("{name} must be a non-negative integer, not {value:?}"),
            )
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// containerLogs
// ---------------------------------------------------------------------------------------------

async fn container_logs(
    context: &ApiContext,
    namespace: &str,
    pod_name: &str,
    container: &str,
    query: &HashMap<String, Vec<String>>,
) -> Result<Response<Body>, Failure> {
    let previous = flag(query, "previous");
    let follow = flag(query, "follow");
    let tail_lines = number(query, "tailLines")?;
    let limit_bytes = number(query, "limitBytes")?;
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), namespace);
    let pod = pods
        .get_opt(pod_name)
        .await
        .map_err(|error| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod_name} not found"),
            )
        })?;
    let uid = pod.metadata.uid.unwrap_or_default();
    let dir = context
        .state_dir
        .join("pods")
        .join(&uid)
        .join("logs")
        .join(container);
    let attempts = log_attempts(&dir);
    let chosen = if previous {
        attempts.iter().rev().nth(1).copied().ok_or_else(|| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "previous terminated container \"{container}\" in pod \"{pod_name}\" not found"
                ),
            )
        })?
    } else {
        attempts.last().copied().ok_or_else(|| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                format!(
                    "container \"{container}\" in pod \"{pod_name}\" is waiting to start: no log yet"
                ),
            )
        })?
    };
    let path = dir.join(format!("{chosen}.log"));
    let contents = tokio::fs::read(&path).await.map_err(|error| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading {}: {error}", path.display()),
        )
    })?;
    let offset = contents.len() as u64;
    let mut first = select_lines(&contents, tail_lines);
    if let Some(limit) = limit_bytes {
        first.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    let body = if follow && !previous && limit_bytes.is_none() {
        follow_body(
            first,
            path,
            offset,
            FollowEnd {
                dir,
                attempt: chosen,
                running: context.running.clone(),
                namespace: namespace.to_string(),
                pod: pod_name.to_string(),
                container: container.to_string(),
            },
        )
    } else {
        full(Bytes::from(first))
    };
    let mut response = Response::new(body);
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    Ok(response)
}

/// The attempt numbers that have a log file, ascending.
fn log_attempts(dir: &Path) -> Vec<u64> {
    let mut attempts: Vec<u64> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            entry
                .file_name()
                .to_str()?
                .strip_suffix(".log")?
                .parse()
                .ok()
        })
        .collect();
    attempts.sort_unstable();
    attempts
}

/// The last `tail` lines of `contents` (all of it without a tail).
fn select_lines(contents: &[u8], tail: Option<u64>) -> Vec<u8> {
    let Some(tail) = tail else {
        return contents.to_vec();
    };
    if tail == 0 {
        return Vec::new();
    }
    // Line starts, ignoring the final newline.
    let body = contents.strip_suffix(b"\n").unwrap_or(contents);
    let mut remaining = tail;
    let mut start = 0;
    for (index, byte) in body.iter().enumerate().rev() {
        if *byte == b'\n' {
            remaining -= 1;
            if remaining == 0 {
                start = index + 1;
                break;
            }
        }
    }
    contents[start..].to_vec()
}

/// When a followed log ends: the container attempt is over.
struct FollowEnd {
    dir: PathBuf,
    attempt: u64,
    running: RunningContainers,
    namespace: String,
    pod: String,
    container: String,
}

impl FollowEnd {
    fn reached(&self) -> bool {
        let newer = log_attempts(&self.dir)
            .last()
            .is_some_and(|latest| *latest > self.attempt);
        newer
            || self
                .running
                .get(&self.namespace, &self.pod, &self.container)
                .is_none()
    }
}

/// The first chunk, then whatever gets appended to `path`, until the attempt ends (or the client
/// goes away: hyper drops the body then).
fn follow_body(first: Vec<u8>, path: PathBuf, offset: u64, end: FollowEnd) -> Body {
    struct State {
        first: Option<Vec<u8>>,
        path: PathBuf,
        offset: u64,
        end: FollowEnd,
        done: bool,
    }
    let state = State {
        first: Some(first),
        path,
        offset,
        end,
        done: false,
    };
    let stream = futures::stream::unfold(state, |mut state| async move {
        if let Some(first) = state.first.take() {
            return Some((Ok::<_, Infallible>(Frame::data(Bytes::from(first))), state));
        }
        loop {
            if state.done {
                return None;
            }
            // Decide before reading, so the last lines written before the end are still sent.
            let ended = state.end.reached();
            let chunk = read_from(&state.path, state.offset).await;
            if !chunk.is_empty() {
                state.offset += chunk.len() as u64;
                state.done = ended;
                return Some((Ok(Frame::data(Bytes::from(chunk))), state));
            }
            if ended {
                return None;
            }
            tokio::time::sleep(FOLLOW_POLL).await;
        }
    });
    StreamBody::new(stream).boxed_unsync()
}

async fn read_from(path: &Path, offset: u64) -> Vec<u8> {
    use tokio::io::AsyncSeekExt;
    let mut bytes = Vec::new();
    if let Ok(mut file) = tokio::fs::File::open(path).await
        && file.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
    {
        let _ = file.read_to_end(&mut bytes).await;
    }
    bytes
}

// ---------------------------------------------------------------------------------------------
// exec
// ---------------------------------------------------------------------------------------------

fn exec(
    context: &ApiContext,
    request: &mut Request<Incoming>,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &HashMap<String, Vec<String>>,
) -> Result<Response<Body>, Failure> {
    let headers = request.headers();
    let is_websocket = headers
        .get(header::UPGRADE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.eq_ignore_ascii_case("websocket"));
    let key = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
    let (true, Some(key)) = (is_websocket, key) else {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "the testbed kubelet speaks only the WebSocket channel protocol (v4/v5.channel.k8s.io), not SPDY",
        ));
    };
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|protocol| protocol.trim().to_string())
        .collect();
    let protocol = PROTOCOLS
        .into_iter()
        .find(|protocol| offered.iter().any(|offer| offer == protocol))
        .ok_or_else(|| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                format!("none of the offered protocols {offered:?} is supported: {PROTOCOLS:?}"),
            )
        })?;
    let argv = query.get("command").cloned().unwrap_or_default();
    if argv.is_empty() {
        return Err(Failure::new(StatusCode::BAD_REQUEST, "no command given"));
    }
    let running = context
        .running
        .get(namespace, pod, container)
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                format!("container {container} of pod {namespace}/{pod} is not running"),
            )
        })?;
    let session = ExecSession {
        v5: protocol == PROTOCOLS[0],
        running,
        argv,
        // The API server names them input/output/error towards the kubelet.
        stdin: flag(query, "input") || flag(query, "stdin"),
        stdout: flag(query, "output") || flag(query, "stdout"),
        stderr: flag(query, "error") || flag(query, "stderr"),
    };
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                session.run(socket).await;
            }
            Err(error) => tracing::warn!(%error, "exec: the WebSocket upgrade failed"),
        }
    });
    let accept = derive_accept_key(key.as_bytes());
    let response = Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept)
        .header(header::SEC_WEBSOCKET_PROTOCOL, protocol)
        .body(full(Bytes::new()))
        .map_err(|error| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string()))?;
    Ok(response)
}

/// One `kubectl exec`.
struct ExecSession {
    v5: bool,
    running: RunningContainer,
    argv: Vec<String>,
    stdin: bool,
    stdout: bool,
    stderr: bool,
}

impl ExecSession {
    async fn run<S>(self, socket: WebSocketStream<S>)
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut incoming) = socket.split();
        let (out, mut outgoing) = mpsc::channel::<Message>(32);
        let writer = tokio::spawn(async move {
            while let Some(message) = outgoing.recv().await {
                let closing = matches!(message, Message::Close(_));
                if sink.send(message).await.is_err() || closing {
                    break;
                }
            }
            let _ = sink.close().await;
        });

        let status =
            match crate::runtime::exec_interactive(self.running.pid, &self.argv, &self.running.env)
            {
                Err(error) => failure_status(&format!("starting {:?}: {error}", self.argv)),
                Ok(mut child) => {
                    let mut stdin = child.stdin.take().filter(|_| self.stdin);
                    let stdout = child.stdout.take();
                    let stderr = child.stderr.take();
                    let mut pumps = tokio::task::JoinSet::new();
                    if let Some(pipe) = stdout {
                        pumps.spawn(pump(pipe, STDOUT, self.stdout.then(|| out.clone())));
                    }
                    if let Some(pipe) = stderr {
                        pumps.spawn(pump(pipe, STDERR, self.stderr.then(|| out.clone())));
                    }
                    // Client → command, until the command exits or the client goes away.
                    let exit = loop {
                        tokio::select! {
                            exit = child.wait() => break exit.ok(),
                            message = incoming.next() => match message {
                                Some(Ok(Message::Binary(data))) => match data.first() {
                                    Some(&STDIN) => {
                                        if let Some(pipe) = stdin.as_mut()
                                            && pipe.write_all(&data[1..]).await.is_err()
                                        {
                                            stdin = None;
                                        }
                                    }
                                    Some(&CLOSE) if self.v5 && data.get(1) == Some(&STDIN) => {
                                        // Dropping the pipe is the command's end of input.
                                        stdin = None;
                                    }
                                    _ => {}
                                },
                                Some(Ok(_)) => {}
                                // The client is gone: the command dies with the session.
                                Some(Err(_)) | None => break None,
                            },
                        }
                    };
                    drop(stdin);
                    match exit {
                        None => {
                            let _ = child.kill().await;
                            pumps.abort_all();
                            writer.abort();
                            return;
                        }
                        Some(exit) => {
                            let drained = async { while pumps.join_next().await.is_some() {} };
                            if tokio::time::timeout(OUTPUT_DRAIN, drained).await.is_err() {
                                pumps.abort_all();
                            }
                            let code = crate::runtime::ExitStatusInfo::from(exit).exit_code;
                            exit_status(&self.argv, code)
                        }
                    }
                }
            };
        let mut message = vec![ERROR];
        message.extend_from_slice(status.to_string().as_bytes());
        let _ = out.send(Message::Binary(message.into())).await;
        let _ = out
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
        drop(out);
        let _ = writer.await;
    }
}

/// Copies a pipe to the socket as messages of `channel` (or discards it when the client did not ask
/// for that stream).
async fn pump<R: AsyncRead + Unpin>(mut pipe: R, channel: u8, out: Option<mpsc::Sender<Message>>) {
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                if let Some(out) = &out {
                    let mut message = Vec::with_capacity(read + 1);
                    message.push(channel);
                    message.extend_from_slice(&buffer[..read]);
                    if out.send(Message::Binary(message.into())).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// The `metav1.Status` the client turns into its exit code (what the kubelet sends).
fn exit_status(argv: &[String], code: i32) -> serde_json::Value {
    if code == 0 {
        return serde_json::json!({"metadata": {}, "status": "Success"});
    }
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
}

fn failure_status(message: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_repeat_and_decode() {
        let query = parse_query("command=valkey-cli&command=ping&command=a%20b+c&stdin=1&tty=");
        assert_eq!(
            query["command"],
            vec!["valkey-cli".to_string(), "ping".into(), "a b c".into()]
        );
        assert!(flag(&query, "stdin"));
        assert!(!flag(&query, "tty"));
        assert!(!flag(&query, "stdout"));
    }

    #[test]
    fn tail_lines_keep_the_last_lines() {
        let log = b"one\ntwo\nthree\n";
        assert_eq!(select_lines(log, None), log.to_vec());
        assert_eq!(select_lines(log, Some(2)), b"two\nthree\n".to_vec());
        assert_eq!(select_lines(log, Some(5)), log.to_vec());
        assert_eq!(select_lines(log, Some(0)), Vec::<u8>::new());
        assert_eq!(select_lines(b"a\nb", Some(1)), b"b".to_vec());
    }

    #[test]
    fn exit_codes_become_the_status_kubectl_reads() {
        assert_eq!(exit_status(&[], 0)["status"], "Success");
        let failed = exit_status(&["false".into()], 3);
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(failed["details"]["causes"][0]["message"], "3");
    }

    #[test]
    fn log_attempts_are_numeric_and_sorted() {
        let dir = std::env::temp_dir().join(format!("vko-logs-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for name in ["10.log", "2.log", "0.log", "x.log", "3.txt"] {
            std::fs::write(dir.join(name), b"").unwrap();
        }
        assert_eq!(log_attempts(&dir), vec![0, 2, 10]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
