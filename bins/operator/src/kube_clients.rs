//! The operator's two API clients: every call has a deadline (`vko_api::consts::kube_api`),
//! except the watches, which must stay open while nothing changes.

use std::time::Duration;

use anyhow::Context;
use vko_api::consts::kube_api::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};

/// One client for the watches, one with a response deadline for everything else.
#[derive(Clone)]
pub struct KubeClients {
    /// Reflectors and the Controller's Valkey watch: no response timeout (an idle watch is bounded
    /// by kube-runtime's watcher, which reconnects after the server's watch timeout).
    pub watch: kube::Client,
    /// GET, server-side apply, status, Events, the Lease: each response within
    /// [`RESPONSE_TIMEOUT`], so a hung API server fails the call instead of stalling it.
    pub request: kube::Client,
}

impl KubeClients {
    /// Both clients from the inferred configuration (in-cluster token or KUBECONFIG).
    pub async fn infer() -> anyhow::Result<KubeClients> {
        let config = kube::Config::infer()
            .await
            .context("reading the Kubernetes client configuration")?;
        KubeClients::with_deadlines(config, CONNECT_TIMEOUT, RESPONSE_TIMEOUT)
    }

    fn with_deadlines(
        mut config: kube::Config,
        connect: Duration,
        response: Duration,
    ) -> anyhow::Result<KubeClients> {
        config.connect_timeout = Some(connect);
        let watch = kube::Client::try_from(config.clone()).context("building the watch client")?;
        config.read_timeout = Some(response);
        // The deadline counts from the request, not from when its pooled connection went idle.
        config.reset_reader_on_write = true;
        let request = kube::Client::try_from(config).context("building the request client")?;
        Ok(KubeClients { watch, request })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// An API server that accepts connections and never answers: the request client gives up
    /// after its response deadline; the watch client (no deadline) is still waiting.
    #[tokio::test]
    async fn a_hung_api_server_fails_a_request_within_the_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let clients = KubeClients::with_deadlines(
            kube::Config::new(url),
            Duration::from_secs(1),
            Duration::from_millis(300),
        )
        .unwrap();

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
