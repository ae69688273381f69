//! Probes and lifecycle hooks with the kubelet's semantics.
//!
//! - Timing: the first probe runs `initialDelaySeconds` after the container started, then every
//!   `periodSeconds`; each attempt is bounded by `timeoutSeconds` (a timeout is a failure).
//! - Thresholds: the published result flips only after `successThreshold` consecutive successes or
//!   `failureThreshold` consecutive failures (the kubelet's `resultRun`). Liveness and startup always
//!   use a success threshold of 1.
//! - Initial results: readiness starts as failure, liveness as success, startup as unknown.
//! - Liveness and readiness only probe once the startup probe (if any) has succeeded; a startup
//!   probe stops after its first success.
//! - Handlers: exec runs in the container (`runtime::exec`); tcpSocket connects from the host to
//!   podIP:port; httpGet requests from the host, 200–399 is success. Named ports resolve via the
//!   container's ports; HTTPS skips certificate verification, as the kubelet does.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, ExecAction, HTTPGetAction, LifecycleHandler, Probe, TCPSocketAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, watch};

/// Which probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    /// As the kubelet words it in messages ("Liveness probe failed: …").
    pub fn title(self) -> &'static str {
        match self {
            ProbeKind::Startup => "Startup",
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
        }
    }
}

/// A probe's timing and thresholds, with Kubernetes' defaults filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeTiming {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl ProbeTiming {
    pub fn of(kind: ProbeKind, probe: &Probe) -> ProbeTiming {
        let seconds = |value: Option<i32>, default: i32, min: i32| {
            Duration::from_secs(u64::try_from(value.unwrap_or(default).max(min)).unwrap_or(0))
        };
        let count = |value: Option<i32>, default: i32| {
            u32::try_from(value.unwrap_or(default).max(1)).unwrap_or(1)
        };
        ProbeTiming {
            initial_delay: seconds(probe.initial_delay_seconds, 0, 0),
            period: seconds(probe.period_seconds, 10, 1),
            timeout: seconds(probe.timeout_seconds, 1, 1),
            success_threshold: match kind {
                ProbeKind::Readiness => count(probe.success_threshold, 1),
                ProbeKind::Liveness | ProbeKind::Startup => 1,
            },
            failure_threshold: count(probe.failure_threshold, 3),
        }
    }
}

/// The kubelet's per-probe result bookkeeping: a run of equal raw results flips the published result
/// once it reaches the threshold.
#[derive(Clone, Debug)]
pub struct ProbeTracker {
    timing: ProbeTiming,
    published: Option<bool>,
    last_raw: Option<bool>,
    run: u32,
}

impl ProbeTracker {
    pub fn new(kind: ProbeKind, timing: ProbeTiming) -> ProbeTracker {
        let published = match kind {
            ProbeKind::Readiness => Some(false),
            ProbeKind::Liveness => Some(true),
            ProbeKind::Startup => None,
        };
        ProbeTracker {
            timing,
            published,
            last_raw: None,
            run: 0,
        }
    }

    /// The result currently in force (`None`: unknown yet).
    pub fn published(&self) -> Option<bool> {
        self.published
    }

    /// Records one probe outcome; returns the new published result when it changed.
    pub fn record(&mut self, success: bool) -> Option<bool> {
        if self.last_raw == Some(success) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last_raw = Some(success);
            self.run = 1;
        }
        let threshold = if success {
            self.timing.success_threshold
        } else {
            self.timing.failure_threshold
        };
        if self.run < threshold || self.published == Some(success) {
            return None;
        }
        self.published = Some(success);
        Some(success)
    }
}

/// What a probe or hook does, with names and defaults resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Exec {
        argv: Vec<String>,
    },
    Tcp {
        addr: SocketAddr,
    },
    Http {
        https: bool,
        addr: SocketAddr,
        host_header: String,
        path: String,
        headers: Vec<(String, String)>,
    },
    Sleep {
        duration: Duration,
    },
}

/// Why a probe's handler could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ActionError(pub String);

/// The handler of a probe.
pub fn probe_action(
    probe: &Probe,
    container: &Container,
    pod_ip: IpAddr,
) -> Result<Action, ActionError> {
    if let Some(exec) = &probe.exec {
        return exec_action(exec);
    }
    if let Some(tcp) = &probe.tcp_socket {
        return tcp_action(tcp, container, pod_ip);
    }
    if let Some(http) = &probe.http_get {
        return http_action(http, container, pod_ip);
    }
    if probe.grpc.is_some() {
        return Err(ActionError(
            "grpc probes are not supported by the testbed kubelet".into(),
        ));
    }
    Err(ActionError(
        "probe has no handler (exec, tcpSocket or httpGet)".into(),
    ))
}

/// The handler of a lifecycle hook.
pub fn hook_action(
    hook: &LifecycleHandler,
    container: &Container,
    pod_ip: IpAddr,
) -> Result<Action, ActionError> {
    if let Some(exec) = &hook.exec {
        return exec_action(exec);
    }
    if let Some(http) = &hook.http_get {
        return http_action(http, container, pod_ip);
    }
    if let Some(tcp) = &hook.tcp_socket {
        return tcp_action(tcp, container, pod_ip);
    }
    if let Some(sleep) = &hook.sleep {
        return Ok(Action::Sleep {
            duration: Duration::from_secs(u64::try_from(sleep.seconds).unwrap_or(0)),
        });
    }
    Err(ActionError("lifecycle hook has no handler".into()))
}

fn exec_action(exec: &ExecAction) -> Result<Action, ActionError> {
    let argv = exec.command.clone().unwrap_or_default();
    if argv.is_empty() {
        return Err(ActionError("exec handler has an empty command".into()));
    }
    Ok(Action::Exec { argv })
}

fn tcp_action(
    tcp: &TCPSocketAction,
    container: &Container,
    pod_ip: IpAddr,
) -> Result<Action, ActionError> {
    let port = resolve_port(&tcp.port, container)?;
    let ip = host_ip(tcp.host.as_deref(), pod_ip)?;
    Ok(Action::Tcp {
        addr: SocketAddr::new(ip, port),
    })
}

fn http_action(
    http: &HTTPGetAction,
    container: &Container,
    pod_ip: IpAddr,
) -> Result<Action, ActionError> {
    let port = resolve_port(&http.port, container)?;
    let ip = host_ip(http.host.as_deref(), pod_ip)?;
    let https = match http.scheme.as_deref().unwrap_or("HTTP") {
        "HTTP" | "http" => false,
        "HTTPS" | "https" => true,
        other => return Err(ActionError(format!("unsupported httpGet scheme {other:?}"))),
    };
    let mut path = http.path.clone().unwrap_or_else(|| "/".into());
    if !path.starts_with('/') {
        path.insert(0, '/');
    }
    let headers: Vec<(String, String)> = http
        .http_headers
        .iter()
        .flatten()
        .map(|header| (header.name.clone(), header.value.clone()))
        .collect();
    // An explicit Host header wins, as in the kubelet.
    let host_header = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map(|(_, value)| value.clone())
        .unwrap_or_else(|| SocketAddr::new(ip, port).to_string());
    let headers = headers
        .into_iter()
        .filter(|(name, _)| !name.eq_ignore_ascii_case("host"))
        .collect();
    Ok(Action::Http {
        https,
        addr: SocketAddr::new(ip, port),
        host_header,
        path,
        headers,
    })
}

fn host_ip(host: Option<&str>, pod_ip: IpAddr) -> Result<IpAddr, ActionError> {
    match host {
        None | Some("") => Ok(pod_ip),
        Some(host) => host.parse().map_err(|_| {
            ActionError(format!(
                "probe host {host:?} is not an IP address (the testbed does not resolve names here)"
            ))
        }),
    }
}

/// A numeric port, or a named one looked up in the container's ports.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, ActionError> {
    match port {
        IntOrString::Int(number) => u16::try_from(*number)
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| ActionError(format!("invalid port {number}"))),
        IntOrString::String(name) => {
            if let Ok(number) = name.parse::<u16>() {
                return Ok(number);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|port| port.name.as_deref() == Some(name.as_str()))
                .and_then(|port| u16::try_from(port.container_port).ok())
                .ok_or_else(|| {
                    ActionError(format!(
                        "port {name:?} is not a named port of container {:?}",
                        container.name
                    ))
                })
        }
    }
}

/// Where an action runs: the container's process and environment.
#[derive(Clone, Debug)]
pub struct Target {
    pub pid: u32,
    pub env: Vec<(String, String)>,
}

/// Runs an action once, bounded by `timeout`. `Ok(())` is success; `Err` carries the failure message.
pub async fn run_action(action: &Action, target: &Target, timeout: Duration) -> Result<(), String> {
    match action {
        Action::Exec { argv } => {
            match crate::runtime::exec(target.pid, argv, &target.env, timeout).await {
                Ok(output) if output.exit_code == 0 => Ok(()),
                Ok(output) => {
                    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
                    text.push_str(&String::from_utf8_lossy(&output.stderr));
                    Err(format!(
                        "command {argv:?} exited with {}: {}",
                        output.exit_code,
                        text.trim()
                    ))
                }
                Err(crate::Error::Timeout { .. }) => Err(format!(
                    "command {argv:?} timed out after {}s",
                    timeout.as_secs()
                )),
                Err(error) => Err(format!("command {argv:?} could not run: {error}")),
            }
        }
        Action::Tcp { addr } => {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
                Ok(Ok(_stream)) => Ok(()),
                Ok(Err(error)) => Err(format!("dial tcp {addr}: {error}")),
                Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
            }
        }
        Action::Http {
            https,
            addr,
            host_header,
            path,
            headers,
        } => {
            let scheme = if *https { "https" } else { "http" };
            let request = http_get(*https, *addr, host_header, path, headers);
            match tokio::time::timeout(timeout, request).await {
                Ok(Ok(code)) if (200..400).contains(&code) => Ok(()),
                Ok(Ok(code)) => Err(format!("HTTP probe failed with statuscode: {code}")),
                Ok(Err(error)) => Err(format!("Get \"{scheme}://{addr}{path}\": {error}")),
                Err(_) => Err(format!(
                    "Get \"{scheme}://{addr}{path}\": context deadline exceeded"
                )),
            }
        }
        Action::Sleep { duration } => {
            tokio::time::sleep(*duration).await;
            Ok(())
        }
    }
}

/// One HTTP/1.1 GET (over TLS without certificate verification when `https`, as the kubelet's
/// probes do); returns the status code. The kubelet only looks at the code.
async fn http_get(
    https: bool,
    addr: SocketAddr,
    host: &str,
    path: &str,
    headers: &[(String, String)],
) -> std::io::Result<u16> {
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-probe/1.34\r\nAccept: */*\r\nConnection: close\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    if https {
        let server_name = rustls::pki_types::ServerName::from(addr.ip());
        let tls = insecure_tls_connector()?.connect(server_name, tcp).await?;
        exchange(tls, request.as_bytes()).await
    } else {
        exchange(tcp, request.as_bytes()).await
    }
}

/// Sends the request and reads the status line.
async fn exchange(
    mut stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    request: &[u8],
) -> std::io::Result<u16> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(2).any(|window| window == b"\r\n") && head.len() < 8192 {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..read]);
    }
    parse_status_code(&head).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "malformed HTTP response")
    })
}

/// A TLS client that accepts any server certificate (signatures are still checked), like the
/// kubelet's `InsecureSkipVerify` for HTTPS probes.
fn insecure_tls_connector() -> std::io::Result<tokio_rustls::TlsConnector> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AcceptAnyCertificate(provider)))
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(std::sync::Arc::new(
        config,
    )))
}

#[derive(Debug)]
struct AcceptAnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn parse_status_code(head: &[u8]) -> Option<u16> {
    let line = head.split(|&b| b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split_whitespace();
    parts
        .next()
        .filter(|version| version.starts_with("HTTP/"))?;
    parts.next()?.parse().ok()
}

/// A published probe result change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeEvent {
    pub kind: ProbeKind,
    pub success: bool,
    /// The last failure's message (empty on success).
    pub message: String,
}

/// Probes a container until `events` closes or the task is dropped. Liveness and readiness wait for
/// `started` to become true first. Sends one event per change of the published result.
pub async fn probe_loop(
    kind: ProbeKind,
    timing: ProbeTiming,
    action: Action,
    target: Target,
    container_started_at: tokio::time::Instant,
    mut started: watch::Receiver<bool>,
    events: mpsc::Sender<ProbeEvent>,
) {
    let mut tracker = ProbeTracker::new(kind, timing);
    let mut next = container_started_at + timing.initial_delay;
    loop {
        tokio::time::sleep_until(next).await;
        next += timing.period;
        if kind != ProbeKind::Startup && !*started.borrow() {
            // Not started yet: wait for it, then probe at the next period boundary at the earliest.
            if started.wait_for(|started| *started).await.is_err() {
                return;
            }
            let now = tokio::time::Instant::now();
            while next < now {
                next += timing.period;
            }
            continue;
        }
        let outcome = run_action(&action, &target, timing.timeout).await;
        let message = outcome.as_ref().err().cloned().unwrap_or_default();
        if let Some(success) = tracker.record(outcome.is_ok()) {
            if !success {
                tracing::info!(pid = target.pid, "{} probe failed: {message}", kind.title());
            }
            if events
                .send(ProbeEvent {
                    kind,
                    success,
                    message,
                })
                .await
                .is_err()
            {
                return;
            }
            // A startup probe stops after its first success; a failed liveness/startup probe is on
            // hold until the container is restarted (this task is dropped with it).
            if kind == ProbeKind::Startup && success {
                return;
            }
            if matches!(kind, ProbeKind::Startup | ProbeKind::Liveness) && !success {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing(success: u32, failure: u32) -> ProbeTiming {
        ProbeTiming {
            initial_delay: Duration::ZERO,
            period: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    #[test]
    fn defaults_match_kubernetes() {
        let probe = Probe::default();
        let readiness = ProbeTiming::of(ProbeKind::Readiness, &probe);
        assert_eq!(readiness.period, Duration::from_secs(10));
        assert_eq!(readiness.timeout, Duration::from_secs(1));
        assert_eq!(readiness.initial_delay, Duration::ZERO);
        assert_eq!(
            (readiness.success_threshold, readiness.failure_threshold),
            (1, 3)
        );
        let custom = Probe {
            success_threshold: Some(3),
            period_seconds: Some(2),
            initial_delay_seconds: Some(5),
            ..Probe::default()
        };
        assert_eq!(
            ProbeTiming::of(ProbeKind::Readiness, &custom).success_threshold,
            3
        );
        assert_eq!(
            ProbeTiming::of(ProbeKind::Liveness, &custom).success_threshold,
            1,
            "liveness is always 1"
        );
        assert_eq!(
            ProbeTiming::of(ProbeKind::Liveness, &custom).initial_delay,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn readiness_flips_only_at_thresholds() {
        let mut tracker = ProbeTracker::new(ProbeKind::Readiness, timing(2, 3));
        assert_eq!(tracker.published(), Some(false));
        assert_eq!(
            tracker.record(true),
            None,
            "one success is below the threshold of 2"
        );
        assert_eq!(tracker.record(false), None);
        assert_eq!(tracker.record(true), None, "the run restarted");
        assert_eq!(tracker.record(true), Some(true));
        assert_eq!(tracker.record(true), None, "no change, no event");
        assert_eq!(tracker.record(false), None);
        assert_eq!(tracker.record(false), None);
        assert_eq!(
            tracker.record(true),
            None,
            "a success breaks the failure run"
        );
        assert_eq!(tracker.record(false), None);
        assert_eq!(tracker.record(false), None);
        assert_eq!(tracker.record(false), Some(false));
        assert_eq!(tracker.published(), Some(false));
    }

    #[test]
    fn liveness_starts_successful_and_fails_after_threshold() {
        let mut tracker = ProbeTracker::new(ProbeKind::Liveness, timing(1, 2));
        assert_eq!(tracker.record(true), None);
        assert_eq!(tracker.record(false), None);
        assert_eq!(tracker.record(false), Some(false));
        let mut startup = ProbeTracker::new(ProbeKind::Startup, timing(1, 3));
        assert_eq!(startup.published(), None);
        assert_eq!(startup.record(false), None);
        assert_eq!(startup.record(true), Some(true));
    }

    fn container() -> Container {
        serde_json::from_value(
            serde_json::json!({"name": "c", "ports": [{"name": "valkey", "containerPort": 6379}]}),
        )
        .unwrap()
    }

    #[test]
    fn handlers_resolve_named_ports_and_defaults() {
        let pod_ip: IpAddr = "10.244.0.9".parse().unwrap();
        let tcp: Probe =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": "valkey"}})).unwrap();
        assert_eq!(
            probe_action(&tcp, &container(), pod_ip).unwrap(),
            Action::Tcp {
                addr: "10.244.0.9:6379".parse().unwrap()
            }
        );
        let unknown: Probe =
            serde_json::from_value(serde_json::json!({"tcpSocket": {"port": "nope"}})).unwrap();
        assert!(
            probe_action(&unknown, &container(), pod_ip)
                .unwrap_err()
                .0
                .contains("nope")
        );
        let http: Probe = serde_json::from_value(
            serde_json::json!({"httpGet": {"port": 8080, "path": "healthz",
            "httpHeaders": [{"name": "X-A", "value": "1"}, {"name": "Host", "value": "example"}]}}),
        )
        .unwrap();
        assert_eq!(
            probe_action(&http, &container(), pod_ip).unwrap(),
            Action::Http {
                https: false,
                addr: "10.244.0.9:8080".parse().unwrap(),
                host_header: "example".into(),
                path: "/healthz".into(),
                headers: vec![("X-A".into(), "1".into())],
            }
        );
        let exec: Probe = serde_json::from_value(
            serde_json::json!({"exec": {"command": ["valkey-cli", "ping"]}}),
        )
        .unwrap();
        assert_eq!(
            probe_action(&exec, &container(), pod_ip).unwrap(),
            Action::Exec {
                argv: vec!["valkey-cli".into(), "ping".into()]
            }
        );
        assert!(probe_action(&Probe::default(), &container(), pod_ip).is_err());
    }

    #[test]
    fn status_lines_parse() {
        assert_eq!(parse_status_code(b"HTTP/1.1 204 No Content\r\n"), Some(204));
        assert_eq!(parse_status_code(b"HTTP/1.0 503 x\r\n\r\n"), Some(503));
        assert_eq!(parse_status_code(b"garbage"), None);
    }

    /// A tiny local HTTP server answering every request with `code`; returns its address.
    async fn serve(code: u16) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn http_and_tcp_handlers_judge_real_sockets() {
        let target = Target {
            pid: 0,
            env: vec![],
        };
        let timeout = Duration::from_secs(2);
        let http = |addr| Action::Http {
            https: false,
            addr,
            host_header: "h".into(),
            path: "/".into(),
            headers: vec![],
        };
        let ok = serve(302).await;
        assert_eq!(run_action(&http(ok), &target, timeout).await, Ok(()));
        let bad = serve(500).await;
        assert!(
            run_action(&http(bad), &target, timeout)
                .await
                .unwrap_err()
                .contains("500")
        );
        assert_eq!(
            run_action(&Action::Tcp { addr: ok }, &target, timeout).await,
            Ok(())
        );
        // A port nobody listens on: bind and drop to find one.
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        assert!(
            run_action(&Action::Tcp { addr: closed }, &target, timeout)
                .await
                .is_err()
        );
    }

    /// A local HTTPS server with a self-signed certificate answering every request with `code`.
    async fn serve_tls(code: u16) -> SocketAddr {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    continue;
                };
                let mut buffer = [0u8; 1024];
                let _ = tls.read(&mut buffer).await;
                let _ = tls
                    .write_all(format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
                let _ = tls.shutdown().await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn https_probes_skip_certificate_verification() {
        let target = Target {
            pid: 0,
            env: vec![],
        };
        let https = |addr| Action::Http {
            https: true,
            addr,
            host_header: "h".into(),
            path: "/healthz".into(),
            headers: vec![],
        };
        let ok = serve_tls(200).await;
        assert_eq!(
            run_action(&https(ok), &target, Duration::from_secs(5)).await,
            Ok(())
        );
        let failing = serve_tls(503).await;
        let error = run_action(&https(failing), &target, Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(error.contains("503"), "{error}");
        // Plain HTTP against a TLS port is a failure, not a hang.
        let plain = Action::Http {
            https: false,
            addr: ok,
            host_header: "h".into(),
            path: "/".into(),
            headers: vec![],
        };
        assert!(
            run_action(&plain, &target, Duration::from_secs(2))
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn probe_loop_honours_delay_period_threshold_and_startup_gate() {
        // Real time at millisecond scale (a probe's timing is just Durations).
        let ms = Duration::from_millis;
        let (started_tx, started_rx) = watch::channel(false);
        let (events_tx, mut events_rx) = mpsc::channel(8);
        let timing = ProbeTiming {
            initial_delay: ms(250),
            period: ms(100),
            timeout: ms(100),
            success_threshold: 2,
            failure_threshold: 3,
        };
        let always_ok = Action::Sleep {
            duration: Duration::ZERO,
        };
        let begin = tokio::time::Instant::now();
        let task = tokio::spawn(probe_loop(
            ProbeKind::Readiness,
            timing,
            always_ok,
            Target {
                pid: 0,
                env: vec![],
            },
            begin,
            started_rx,
            events_tx,
        ));
        // Not started: nothing happens, however long we wait.
        assert!(
            tokio::time::timeout(ms(600), events_rx.recv())
                .await
                .is_err()
        );
        started_tx.send(true).unwrap();
        let event = events_rx.recv().await.unwrap();
        assert_eq!(
            event,
            ProbeEvent {
                kind: ProbeKind::Readiness,
                success: true,
                message: String::new()
            }
        );
        // Probes run on the 250 ms + n*100 ms grid after the start signal (t≈600 ms): the first at
        // ≈650, the second (threshold 2) at ≈750.
        let elapsed = begin.elapsed();
        assert!(elapsed >= ms(740) && elapsed < ms(900), "{elapsed:?}");
        task.abort();

        // A started liveness probe fails after its initial delay with failureThreshold 1.
        let (_started_tx, started_rx) = watch::channel(true);
        let (events_tx, mut events_rx) = mpsc::channel(8);
        let failing = Action::Exec {
            argv: vec!["/nonexistent".into()],
        };
        let begin = tokio::time::Instant::now();
        let timing = ProbeTiming {
            success_threshold: 1,
            failure_threshold: 1,
            ..timing
        };
        let task = tokio::spawn(probe_loop(
            ProbeKind::Liveness,
            timing,
            failing,
            Target {
                pid: u32::MAX,
                env: vec![],
            },
            begin,
            started_rx,
            events_tx,
        ));
        let event = events_rx.recv().await.unwrap();
        assert_eq!((event.kind, event.success), (ProbeKind::Liveness, false));
        assert!(!event.message.is_empty());
        let elapsed = begin.elapsed();
        assert!(elapsed >= ms(250) && elapsed < ms(400), "{elapsed:?}");
        task.abort();
    }
}
