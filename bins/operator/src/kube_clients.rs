//! The operator's API clients: every call has a deadline (`vko_api::consts::kube_api`), except
//! the watches, which must stay open while nothing changes; every write but the Lease's passes
//! the leader gate ([`Leadership`]) right before it leaves the process.

use std::time::Duration;

use anyhow::Context;
use kube::client::ClientBuilder;
use vko_api::consts::kube_api::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

use crate::error::Error;
use crate::leader::Leadership;

/// One client for the watches, one with a response deadline for everything else.
#[derive(Clone)]
pub struct KubeClients {
    /// Reflectors and the Controller's Valkey watch: no response timeout (an idle watch is bounded
    /// by kube-runtime's watcher, which reconnects after the server's watch timeout).
    pub watch: kube::Client,
    /// GET, server-side apply, status, Events, deletions: each response within
    /// [`RESPONSE_TIMEOUT`], so a hung API server fails the call instead of stalling it; a
    /// request that is not a read is refused in the process while the gate is closed.
    pub request: kube::Client,
    /// The Lease's own reads and writes (the elector opens the gate with them): deadlines, no gate.
    pub lease: kube::Client,
}

/// Whether an HTTP method only reads (get, list, watch, discovery).
fn is_read(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl KubeClients {
    /// The clients from the inferred configuration (in-cluster token or KUBECONFIG).
    pub async fn infer(leadership: Leadership) -> anyhow::Result<KubeClients> {
        let config = kube::Config::infer()
            .await
            .context("reading the Kubernetes client configuration")?;
        KubeClients::with_deadlines(config, CONNECT_TIMEOUT, RESPONSE_TIMEOUT, leadership)
    }

    fn with_deadlines(
        mut config: kube::Config,
        connect: Duration,
        response: Duration,
        leadership: Leadership,
    ) -> anyhow::Result<KubeClients> {
        config.connect_timeout = Some(connect);
        // kube's default retry layer sits inside the leader gate and repeats a 429/503/504 up to
        // 15 times with backoff (minutes in all): a write let through while leading could reach
        // the API server after the Lease has passed to another operator, and every deadline
        // would be per attempt. Failed calls fail the pass, which requeues with its own backoff.
        config.default_retry = false;
        let watch = kube::Client::try_from(config.clone()).context("building the watch client")?;
        config.read_timeout = Some(response);
        // The deadline counts from the request, not from when its pooled connection went idle.
        config.reset_reader_on_write = true;
        let lease = kube::Client::try_from(config.clone()).context("building the Lease client")?;
        let gate =
            tower::filter::FilterLayer::new(move |request: http::Request<kube::client::Body>| {
                if is_read(request.method()) || leadership.may_act() {
                    Ok(request)
                } else {
                    Err(Error::NotLeader {
                        action: "API write",
                    })
                }
            });
        let request = ClientBuilder::try_from(config)
            .context("building the request client")?
            .with_layer(&gate)
            .build();
        Ok(KubeClients {
            watch,
            request,
            lease,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};

    use super::*;

    /// Clients (1 s to connect, `response` for a request) of a local "API server" that accepts
    /// connections, holds them open and never answers; the count is of the connections it
    /// accepted.
    async fn clients_of_a_silent_api_server(
        response: Duration,
        leadership: Leadership,
    ) -> (KubeClients, Arc<AtomicUsize>) {
        let (listener, url) = local_server().await;
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        let clients = KubeClients::with_deadlines(
            kube::Config::new(url),
            Duration::from_secs(1),
            response,
            leadership,
        )
        .unwrap();
        (clients, connections)
    }

    /// With the gate closed (an elected operator that never renewed, or one past its renew
    /// deadline), a write fails in the process: the API server never sees a connection for it.
    /// Reads still go out; the Lease client is not gated.
    #[tokio::test]
    async fn a_closed_gate_refuses_writes_before_they_leave_the_process() {
        let (clients, connections) = clients_of_a_silent_api_server(
            Duration::from_millis(200),
            Leadership::elected(Duration::from_secs(10)),
        )
        .await;
        let config_maps: Api<ConfigMap> = Api::namespaced(clients.request.clone(), "ns");
        let written = config_maps
            .create(&PostParams::default(), &ConfigMap::default())
            .await
            .unwrap_err();
        assert!(
            format!("{written:?}").contains("NotLeader"),
            "refused by the gate: {written:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            connections.load(Ordering::SeqCst),
            0,
            "the write never left"
        );

        assert!(
            config_maps.get("a").await.is_err(),
            "the hung server answers nothing"
        );
        assert_eq!(connections.load(Ordering::SeqCst), 1, "the read went out");
        let leases: Api<ConfigMap> = Api::namespaced(clients.lease.clone(), "ns");
        assert!(
            leases
                .create(&PostParams::default(), &ConfigMap::default())
                .await
                .is_err()
        );
        assert_eq!(
            connections.load(Ordering::SeqCst),
            2,
            "the Lease client writes regardless of the gate"
        );
    }

    /// A listener on a free local port, and the URL that reaches it.
    async fn local_server() -> (tokio::net::TcpListener, http::Uri) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        (listener, url)
    }

    /// An API server that answers every request `503 Service Unavailable`; the count is of the
    /// requests it answered.
    async fn clients_of_an_unavailable_api_server() -> (KubeClients, Arc<AtomicUsize>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (listener, url) = local_server().await;
        let requests = Arc::new(AtomicUsize::new(0));
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    counted.fetch_add(1, Ordering::SeqCst);
                    let body =
                        r#"{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}"#;
                    let answer = format!(
                        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        let clients = KubeClients::with_deadlines(
            kube::Config::new(url),
            Duration::from_secs(1),
            Duration::from_secs(1),
            Leadership::unconditional(),
        )
        .unwrap();
        (clients, requests)
    }

    /// A 503 (likewise 429, 504) fails the call at once: nothing in the client repeats a write
    /// that passed the leader gate, perhaps after the Lease has moved on.
    #[tokio::test]
    async fn an_unavailable_api_server_is_asked_once_per_call() {
        let (clients, requests) = clients_of_an_unavailable_api_server().await;
        for client in [&clients.request, &clients.lease, &clients.watch] {
            let before = requests.load(Ordering::SeqCst);
            let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "ns");
            let written = config_maps
                .create(&PostParams::default(), &ConfigMap::default())
                .await;
            assert!(
                matches!(written, Err(kube::Error::Api(ref status)) if status.code == 503),
                "{written:?}"
            );
            // Time for any retry to go out (kube's first backoff step is 5 ms).
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert_eq!(requests.load(Ordering::SeqCst), before + 1, "asked once");
        }
    }

    /// An API server that accepts connections and never answers: the request client gives up
    /// after its response deadline; the watch client (no deadline) is still waiting.
    #[tokio::test]
    async fn a_hung_api_server_fails_a_request_within_the_deadline() {
        let (clients, _connections) =
            clients_of_a_silent_api_server(Duration::from_millis(300), Leadership::unconditional())
                .await;

        let started = Instant::now();
        let answer =
            tokio::time::timeout(Duration::from_secs(5), clients.request.apiserver_version())
                .await
                .expect("the request client gives up by itself");
        assert!(answer.is_err(), "a hung server cannot answer");
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");

        let watch =
            tokio::time::timeout(Duration::from_secs(1), clients.watch.apiserver_version()).await;
        assert!(watch.is_err(), "the watch client has no response deadline");
    }
}
