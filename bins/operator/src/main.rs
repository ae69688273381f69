//! vko operator: a kube-runtime Controller over `Valkey` resources. The command line, logging,
//! the HTTP endpoints and the leader election; the pass itself is the library's ([`vko_operator`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use clap::{Parser, ValueEnum};
use tokio_util::sync::CancellationToken;

use vko_operator::controller::{OPERATOR_VERSION, OperatorConfig, RunOptions};
use vko_operator::discovery::{self, OptionalApis};
use vko_operator::leader::Leadership;
use vko_operator::metrics::Metrics;
use vko_operator::readiness::{Phase, Readiness};
use vko_operator::{cache_sync, controller, kube_clients, leader, migrate};
use vko_render::OperatorPeer;

/// How long the controller may take to stop after shutdown. kube-runtime's Controller holds its
/// reconcile runner until the `Valkey` store has listed, so a controller whose list never
/// succeeds never returns from a graceful shutdown; past this the operator stops without it (and
/// still releases the Lease) inside the chart's 30 s termination grace period.
const CONTROLLER_STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Json,
    Text,
}

/// Command line; every flag can also be set through its environment variable.
#[derive(Debug, Parser)]
#[command(
    name = "vko-operator",
    version,
    about = "Kubernetes operator for Valkey"
)]
struct Args {
    /// Image of the sidecar and init containers the operator puts into data pods.
    #[arg(long, env = "OPERATOR_IMAGE", default_value = "vko.local/vko:dev")]
    operator_image: String,
    /// Cluster DNS domain of pod and Service host names.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = vko_render::DEFAULT_CLUSTER_DOMAIN)]
    cluster_domain: String,
    /// Reconcile passes that may run at once (never two for the same resource); `0`: no limit.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 4)]
    max_concurrent_reconciles: u16,
    /// Address of /metrics; `0` disables it.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080")]
    metrics_bind_address: String,
    /// Address of /healthz and /readyz (`--health-probe-bind-address`, the reference's name, is
    /// accepted too).
    #[arg(
        long,
        alias = "health-probe-bind-address",
        env = "HEALTH_BIND_ADDRESS",
        default_value = ":8081"
    )]
    health_bind_address: String,
    /// Run only while holding the leader Leases `valkey-operator.vko.gtrfc.com` (the reference's
    /// name) and `vko-operator-leader` (earlier vko releases').
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,
    /// Namespace of the leader Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// How long a standby waits, after it last saw the Lease change, before taking it over.
    #[arg(long, env = "LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = cache_sync::parse_duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leader acts after the start of its last successful renewal; must be shorter
    /// than the Lease duration (the operator refuses to start otherwise).
    #[arg(long, env = "LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = cache_sync::parse_duration)]
    leader_elect_renew_deadline: std::time::Duration,
    /// How often the leader renews and a standby looks at the Lease; shorter than the renew deadline.
    #[arg(long, env = "LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = cache_sync::parse_duration)]
    leader_elect_retry_period: std::time::Duration,
    /// How long the watches may take to list after leadership is taken (default as
    /// controller-runtime's CacheSyncTimeout) (`120s`, `2m`, `1h`);
    /// then the operator names the pending ones, releases the Lease and exits non-zero.
    #[arg(long, env = "CACHE_SYNC_TIMEOUT", default_value = "120s", value_parser = cache_sync::parse_duration)]
    cache_sync_timeout: std::time::Duration,
    /// Labels that select this operator's pods, `key=value,key=value` (the chart sets its
    /// selector labels). With the pod's namespace (`POD_NAMESPACE`) they go into the
    /// NetworkPolicies the operator renders, so they admit it from its own namespace.
    #[arg(long, env = "OPERATOR_POD_LABELS", value_parser = parse_pod_labels)]
    operator_pod_labels: Option<BTreeMap<String, String>>,
    /// Namespace this operator runs in (the chart sets it from the downward API).
    #[arg(long, env = "POD_NAMESPACE")]
    pod_namespace: Option<String>,
    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    log_format: LogFormat,
    /// Without a command the operator runs.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Store the CRD's defaults in every Valkey resource (the chart's pre-upgrade hook), then exit.
    Migrate,
}

/// `key=value,key=value`: at least one pair, no empty key, no key twice.
fn parse_pod_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
    {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("{pair:?} is not key=value"));
        };
        let (key, value) = (key.trim(), value.trim());
        if key.is_empty() {
            return Err(format!("{pair:?} has no key"));
        }
        if labels.insert(key.to_owned(), value.to_owned()).is_some() {
            return Err(format!("the key {key:?} is given twice"));
        }
    }
    if labels.is_empty() {
        return Err("no key=value pair: a selector without labels would admit every pod".into());
    }
    Ok(labels)
}

/// The operator as a NetworkPolicy peer, when it knows both its namespace and its labels.
fn operator_peer(
    namespace: Option<String>,
    labels: Option<BTreeMap<String, String>>,
) -> anyhow::Result<Option<OperatorPeer>> {
    match (namespace, labels) {
        (Some(namespace), Some(pod_labels)) => Ok(Some(OperatorPeer {
            namespace,
            pod_labels,
        })),
        (None, Some(_)) => anyhow::bail!(
            "--operator-pod-labels needs the operator's namespace: set --pod-namespace or POD_NAMESPACE"
        ),
        (_, None) => Ok(None),
    }
}

/// `:8080` means every interface; `0` means disabled.
fn parse_bind(address: &str) -> anyhow::Result<Option<SocketAddr>> {
    if address == "0" || address.is_empty() {
        return Ok(None);
    }
    let full = if address.starts_with(':') {
        format!("0.0.0.0{address}")
    } else {
        address.to_owned()
    };
    full.parse()
        .map(Some)
        .with_context(|| format!("bind address {address:?} is not host:port or :port"))
}

#[derive(Clone)]
struct HttpState {
    readiness: Arc<Readiness>,
    metrics: Arc<OnceLock<Arc<Metrics>>>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    match state.readiness.get().answer() {
        (true, body) => (StatusCode::OK, body),
        (false, body) => (StatusCode::SERVICE_UNAVAILABLE, body),
    }
}

async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    let encoded = match state.metrics.get() {
        Some(metrics) => metrics.encode(),
        None => Metrics::new(None, OPERATOR_VERSION).encode(),
    };
    match encoded {
        Ok(text) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn serve(
    address: SocketAddr,
    router: Router,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("binding {address}"))?;
    tracing::info!(%address, "serving HTTP");
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .context("HTTP server")
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal(token: CancellationToken) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = terminate => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    init_logging(args.log_format);
    vko_valkey::install_default_crypto_provider();
    let timings = leader::Timings::new(
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    )?;

    // `migrate` is a one-shot hook, never elected; the operator acts only while it leads.
    let leadership = if args.leader_elect && args.command.is_none() {
        Leadership::elected(timings.renew_deadline())
    } else {
        Leadership::unconditional()
    };
    let clients = kube_clients::KubeClients::infer(leadership.clone())
        .await
        .context("connecting to the Kubernetes API")?;
    let client = clients.request.clone();
    if let Some(Command::Migrate) = args.command {
        return migrate::run(client).await;
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));

    let readiness = Arc::new(Readiness::default());
    let metrics_slot: Arc<OnceLock<Arc<Metrics>>> = Arc::new(OnceLock::new());
    let state = HttpState {
        readiness: readiness.clone(),
        metrics: metrics_slot.clone(),
    };
    let mut servers = Vec::new();
    if let Some(address) = parse_bind(&args.health_bind_address)? {
        let router = Router::new()
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(state.clone());
        servers.push(tokio::spawn(serve(address, router, shutdown.clone())));
    }
    if let Some(address) = parse_bind(&args.metrics_bind_address)? {
        let router = Router::new()
            .route("/metrics", get(metrics))
            .with_state(state.clone());
        servers.push(tokio::spawn(serve(address, router, shutdown.clone())));
    }

    let pod_name = std::env::var("POD_NAME").ok();
    let identity = pod_name.clone().unwrap_or_else(|| {
        format!(
            "{}-{}",
            std::env::var("HOSTNAME").unwrap_or_else(|_| "vko-operator".into()),
            std::process::id()
        )
    });
    let stop_renewing = CancellationToken::new();
    // The watches have listed once (the leader's readiness, kept across a lost and regained Lease).
    let synced = Arc::new(AtomicBool::new(false));
    let elector = if args.leader_elect {
        let namespace = args
            .leader_election_namespace
            .clone()
            .or_else(|| args.pod_namespace.clone())
            .unwrap_or_else(|| "default".into());
        let elector = leader::Elector::new(
            clients.lease.clone(),
            &namespace,
            identity.clone(),
            timings,
            leadership.clone(),
        );
        tracing::info!(
            %namespace,
            %identity,
            lease_duration_seconds = timings.lease_duration().as_secs(),
            renew_deadline_seconds = timings.renew_deadline().as_secs(),
            retry_period_seconds = timings.retry_period().as_secs(),
            "waiting for leadership"
        );
        readiness.set(Phase::StandingBy);
        tokio::select! {
            _ = elector.acquire() => {}
            _ = shutdown.cancelled() => return Ok(()),
        }
        readiness.lead(false);
        tracing::info!(%identity, "leading");
        let holder = elector.clone();
        let stopped_renewing = stop_renewing.clone();
        let phase = readiness.clone();
        let synced_flag = synced.clone();
        let campaigner = identity.clone();
        tokio::spawn(async move {
            // Renew while the controller may still reconcile, but not after `release` (a renewal
            // then would take the Lease back).
            loop {
                let lost = tokio::select! {
                    lost = holder.hold() => lost,
                    _ = stopped_renewing.cancelled() => return,
                };
                // The gate is closed (`hold` closed it): nothing is written or commanded until
                // the Lease is ours again; the watches keep the caches current meanwhile, so a
                // Lease nobody took (an API server outage past the renew deadline) is written
                // again and acted on as soon as the API answers (ADR 0017).
                phase.set(Phase::StandingBy);
                tracing::error!(
                    ?lost,
                    "lost the leader Lease; acting no more, campaigning again"
                );
                tokio::select! {
                    _ = holder.acquire() => {}
                    _ = stopped_renewing.cancelled() => return,
                }
                tracing::info!(identity = %campaigner, "leading again");
                phase.lead(synced_flag.load(Ordering::SeqCst));
            }
        });
        Some(elector)
    } else {
        readiness.lead(false);
        None
    };

    let operator_peer = operator_peer(args.pod_namespace.clone(), args.operator_pod_labels)?;
    if operator_peer.is_none() {
        tracing::warn!(
            "no --operator-pod-labels: rendered NetworkPolicies admit the operator only from the \
             Valkey's own namespace, so an enforcing network plugin locks an operator elsewhere out"
        );
    }
    let config = OperatorConfig {
        operator_peer,
        operator_image: args.operator_image,
        cluster_domain: args.cluster_domain,
        optional_apis: Arc::new(OptionalApis::new({
            let (served, errors) = discovery::read(&client).await;
            for error in errors {
                tracing::warn!(%error, "optional API not served until its CRD's watch lists");
            }
            served
        })),
    };
    tracing::info!(
        version = OPERATOR_VERSION,
        ?config,
        "starting the controller"
    );
    let phase = readiness.clone();
    let synced_flag = synced.clone();
    let leading = leadership.clone();
    let sync_failure = Arc::new(OnceLock::new());
    let controller = controller::run(
        clients,
        metrics_slot,
        RunOptions {
            config,
            concurrency: args.max_concurrent_reconciles,
            reporter_instance: Some(identity),
            on_ready: Box::new(move || {
                synced_flag.store(true, Ordering::SeqCst);
                if leading.may_act() {
                    phase.lead(true);
                }
            }),
            cache_sync_timeout: args.cache_sync_timeout,
            sync_failure: sync_failure.clone(),
            shutdown: shutdown.clone(),
            leadership,
        },
    );
    tokio::pin!(controller);
    let stop_grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(CONTROLLER_STOP_GRACE).await;
    };
    tokio::select! {
        _ = &mut controller => {}
        _ = stop_grace => tracing::warn!(
            grace_seconds = CONTROLLER_STOP_GRACE.as_secs(),
            "the controller did not stop in time after shutdown; stopping without it"
        ),
    }
    readiness.set(Phase::Stopping);
    shutdown.cancel();
    stop_renewing.cancel();
    if let Some(elector) = elector {
        elector.release().await;
    }
    for server in servers {
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(%error, "HTTP server failed"),
            Err(error) => tracing::warn!(%error, "HTTP server task failed"),
        }
    }
    if let Some(pending) = sync_failure.get() {
        anyhow::bail!(
            "the watches of {} did not list within {}s",
            pending.join(", "),
            args.cache_sync_timeout.as_secs()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operator_pod_labels_are_key_value_pairs_and_never_empty() {
        assert_eq!(
            parse_pod_labels("app.kubernetes.io/name=vko, app.kubernetes.io/instance=vko").unwrap(),
            BTreeMap::from([
                ("app.kubernetes.io/instance".to_owned(), "vko".to_owned()),
                ("app.kubernetes.io/name".to_owned(), "vko".to_owned()),
            ])
        );
        assert_eq!(
            parse_pod_labels("tier=").unwrap(),
            BTreeMap::from([("tier".to_owned(), String::new())])
        );
        for bad in ["", " , ", "app", "=vko", "a=1,a=2"] {
            assert!(parse_pod_labels(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_operator_peer_needs_its_namespace_once_labels_are_given() {
        let labels = BTreeMap::from([("app".to_owned(), "vko".to_owned())]);
        let peer = operator_peer(Some("vko-system".into()), Some(labels.clone())).unwrap();
        assert_eq!(
            peer,
            Some(OperatorPeer {
                namespace: "vko-system".into(),
                pod_labels: labels.clone(),
            })
        );
        assert!(operator_peer(None, Some(labels)).is_err());
        assert_eq!(
            operator_peer(Some("vko-system".into()), None).unwrap(),
            None
        );
        assert_eq!(operator_peer(None, None).unwrap(), None);
    }

    #[test]
    fn bind_addresses_accept_port_only_and_zero_disables() {
        assert_eq!(
            parse_bind(":8080").unwrap(),
            Some("0.0.0.0:8080".parse().unwrap())
        );
        assert_eq!(
            parse_bind("127.0.0.1:9").unwrap(),
            Some("127.0.0.1:9".parse().unwrap())
        );
        assert_eq!(parse_bind("0").unwrap(), None);
        assert!(parse_bind("nope").is_err());
    }

    #[test]
    fn a_renew_deadline_not_shorter_than_the_lease_is_refused_with_the_flag_names() {
        let args = Args::parse_from([
            "vko-operator",
            "--leader-elect-lease-duration",
            "10s",
            "--leader-elect-renew-deadline",
            "10s",
        ]);
        let error = leader::Timings::new(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("--leader-elect-renew-deadline (10s) must be shorter than --leader-elect-lease-duration (10s)"),
            "{error}"
        );
        let args = Args::parse_from([
            "vko-operator",
            "--leader-elect-lease-duration",
            "1m",
            "--leader-elect-renew-deadline",
            "40s",
            "--leader-elect-retry-period",
            "5s",
        ]);
        assert!(
            leader::Timings::new(
                args.leader_elect_lease_duration,
                args.leader_elect_renew_deadline,
                args.leader_elect_retry_period,
            )
            .is_ok()
        );
    }

    #[test]
    fn flags_have_the_documented_defaults() {
        let args = Args::parse_from(["vko-operator"]);
        assert_eq!(args.operator_image, "vko.local/vko:dev");
        assert_eq!(args.cluster_domain, "cluster.local");
        assert_eq!(args.max_concurrent_reconciles, 4);
        assert_eq!(args.metrics_bind_address, ":8080");
        assert_eq!(args.health_bind_address, ":8081");
        assert!(!args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.cache_sync_timeout, std::time::Duration::from_secs(120));
        let timings = leader::Timings::new(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
        )
        .unwrap();
        assert_eq!(timings, leader::Timings::default());
        let args = Args::parse_from(["vko-operator", "--health-probe-bind-address", ":9440"]);
        assert_eq!(
            args.health_bind_address, ":9440",
            "the reference's flag name"
        );
        let args = Args::parse_from(["vko-operator", "--cache-sync-timeout", "5m"]);
        assert_eq!(args.cache_sync_timeout, std::time::Duration::from_secs(300));
        assert!(Args::try_parse_from(["vko-operator", "--cache-sync-timeout", "0"]).is_err());
        let args = Args::parse_from(["vko-operator", "--leader-elect", "--log-format", "text"]);
        assert!(args.leader_elect);
        assert_eq!(args.log_format, LogFormat::Text);
        assert!(args.command.is_none());
        let args = Args::parse_from(["vko-operator", "--log-format", "text", "migrate"]);
        assert!(matches!(args.command, Some(Command::Migrate)));
    }
}
