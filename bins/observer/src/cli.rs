//! Command line: exactly the arguments vko-render puts on the observer container
//! (`crates/vko-render/src/objects.rs` fn `observer` + `pod.rs` fn `cluster_args`), the namespace
//! from the downward API and the password from the environment, never from argv.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use vko_render::{Names, PASSWORD_FILE_ENV};
use vko_valkey::{Dialer, TlsFiles, TlsMaterial};

use crate::check::Check;
use crate::error::{ObserverError, Result};
use crate::evaluate::Endpoint;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    name = "vko-observer",
    version,
    about = "vko's Cluster Observer: continuous health checks of one Valkey, on /readyz and /metrics"
)]
pub struct Cli {
    /// Port of /readyz, /healthz and /metrics (all addresses).
    #[arg(long)]
    pub listen_port: u16,
    /// Data pods `<cluster>-0` .. `<cluster>-<replicas - 1>`.
    #[arg(long)]
    pub replicas: u32,
    /// Database of the health key.
    #[arg(long, default_value_t = 15)]
    pub db: u32,
    #[arg(long, value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,
    /// Comma-separated checks whose failure makes /readyz answer 503 (kebab case, e.g.
    /// `master-unreachable`); every check runs and is logged regardless.
    #[arg(long, default_value = "")]
    pub unready_on: String,
    #[arg(long)]
    pub cluster: String,
    #[arg(long)]
    pub headless_service: String,
    #[arg(long)]
    pub cluster_domain: String,
    #[arg(long)]
    pub valkey_port: u16,
    #[arg(long, requires_all = ["sentinel_port", "sentinel_monitor", "sentinel_replicas"])]
    pub sentinel_service: Option<String>,
    #[arg(long)]
    pub sentinel_port: Option<u16>,
    #[arg(long)]
    pub sentinel_monitor: Option<String>,
    #[arg(long)]
    pub sentinel_replicas: Option<u32>,
    /// Sentinel accepts clients without a password (the data tier still requires one).
    #[arg(long)]
    pub sentinel_auth_disabled: bool,
    /// CA that signed the servers' certificates; turns TLS on for every connection.
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
    #[arg(long, requires_all = ["tls_ca_file", "valkey_client_key_file"])]
    pub valkey_client_cert_file: Option<PathBuf>,
    #[arg(long, requires = "valkey_client_cert_file")]
    pub valkey_client_key_file: Option<PathBuf>,
    #[arg(long, requires_all = ["tls_ca_file", "sentinel_client_key_file"])]
    pub sentinel_client_cert_file: Option<PathBuf>,
    #[arg(long, requires = "sentinel_client_cert_file")]
    pub sentinel_client_key_file: Option<PathBuf>,
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: String,
    /// Seconds from the start of one round to the start of the next.
    #[arg(long, default_value_t = 5)]
    pub interval_seconds: u64,
}

/// The Sentinel tier to watch.
#[derive(Debug, Clone)]
pub struct SentinelTarget {
    pub monitor: String,
    pub configured: u32,
    /// `(pod name, endpoint)` of every Sentinel pod.
    pub pods: Vec<(String, Endpoint)>,
}

/// Everything a round needs, resolved from the command line and the environment.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen_port: u16,
    pub replicas: u32,
    pub db: u32,
    pub unready_on: BTreeSet<Check>,
    /// `(pod name, endpoint)` of every data pod.
    pub data_pods: Vec<(String, Endpoint)>,
    pub sentinel: Option<SentinelTarget>,
    pub dialer: Dialer,
    pub interval: Duration,
    /// How long replicas get to return the value just written.
    pub catch_up: Duration,
    /// The health key (in `db`), unique to this process.
    pub health_key: String,
    /// Expiry of the health key: it never outlives the observer by more than this.
    pub health_key_ttl: Duration,
    /// The password file (auth on), read before every round: a rotated password is followed
    /// without a restart, the previous one kept as the dialer's fallback.
    pub password_file: Option<PathBuf>,
}

/// The key prefix; the rest is this observer's host name and a per-process random suffix, so
/// two observers (e.g. during a Deployment rollout) never read each other's values.
pub const HEALTH_KEY_PREFIX: &str = "vko:observer:health:";

impl Cli {
    /// Resolves the host names (through vko-render's `Names`, the same names the operator
    /// renders) and the dial options. `password` is read from [`PASSWORD_FILE_ENV`]'s file.
    pub fn config(&self, password: Option<String>, instance: &str) -> Result<Config> {
        let names = Names::new(&self.cluster, &self.pod_namespace, &self.cluster_domain)
            .map_err(|e| ObserverError::Config(e.to_string()))?;
        if self.headless_service != names.headless_service() {
            return Err(ObserverError::Config(format!(
                "--headless-service={} is not the headless Service of {} ({})",
                self.headless_service,
                self.cluster,
                names.headless_service()
            )));
        }
        if self.replicas == 0 {
            return Err(ObserverError::Config(
                "--replicas must be at least 1".into(),
            ));
        }
        let data_pods = (0..self.replicas)
            .map(|i| {
                (
                    names.data_pod(i),
                    Endpoint::new(names.data_pod_fqdn(i), self.valkey_port),
                )
            })
            .collect();
        let sentinel = match (
            &self.sentinel_service,
            self.sentinel_port,
            &self.sentinel_monitor,
            self.sentinel_replicas,
        ) {
            (None, ..) => None,
            (Some(service), Some(port), Some(monitor), Some(configured)) => {
                if *service != names.sentinel_headless_service() {
                    return Err(ObserverError::Config(format!(
                        "--sentinel-service={service} is not the Sentinel headless Service of {} ({})",
                        self.cluster,
                        names.sentinel_headless_service()
                    )));
                }
                if configured == 0 {
                    return Err(ObserverError::Config(
                        "--sentinel-replicas must be at least 1".into(),
                    ));
                }
                Some(SentinelTarget {
                    monitor: monitor.clone(),
                    configured,
                    pods: (0..configured)
                        .map(|i| {
                            (
                                format!("{}-{i}", names.sentinel_statefulset()),
                                Endpoint::new(names.sentinel_pod_fqdn(i), port),
                            )
                        })
                        .collect(),
                })
            }
            (Some(_), ..) => {
                return Err(ObserverError::Config(
                    "--sentinel-service needs --sentinel-port, --sentinel-monitor and --sentinel-replicas"
                        .into(),
                ));
            }
        };
        let tls = |cert: &Option<PathBuf>, key: &Option<PathBuf>| {
            self.tls_ca_file.as_ref().map(|ca| {
                TlsMaterial::Files(TlsFiles {
                    ca: ca.clone(),
                    cert: cert.clone(),
                    key: key.clone(),
                })
            })
        };
        let interval = Duration::from_secs(self.interval_seconds.max(1));
        let dialer = Dialer {
            tls: tls(&self.valkey_client_cert_file, &self.valkey_client_key_file),
            sentinel_tls: tls(
                &self.sentinel_client_cert_file,
                &self.sentinel_client_key_file,
            ),
            ..Dialer::new(password).with_sentinel_auth(!self.sentinel_auth_disabled)
        };
        Ok(Config {
            listen_port: self.listen_port,
            replicas: self.replicas,
            db: self.db,
            unready_on: Check::parse_list(&self.unready_on)?,
            data_pods,
            sentinel,
            dialer,
            interval,
            catch_up: Duration::from_secs(2),
            health_key: format!("{HEALTH_KEY_PREFIX}{instance}"),
            health_key_ttl: Duration::from_secs(60).max(interval * 4),
            password_file: password_file_from_env(),
        })
    }
}

/// The password file [`PASSWORD_FILE_ENV`] names (`None` when unset: auth off).
pub fn password_file_from_env() -> Option<PathBuf> {
    std::env::var_os(PASSWORD_FILE_ENV).map(PathBuf::from)
}

/// The password in `path`: an unreadable file or an empty, blank or non-UTF-8 password is an
/// error (never taken to mean "no password").
pub fn read_password_file(path: &std::path::Path) -> Result<String> {
    let bytes = std::fs::read(path)
        .map_err(|e| ObserverError::Config(format!("{}: {e}", path.display())))?;
    vko_api::usable_password(&bytes)
        .map(str::to_owned)
        .map_err(|e| ObserverError::Config(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn files(tls: Option<TlsMaterial>) -> TlsFiles {
        match tls {
            Some(TlsMaterial::Files(files)) => files,
            other => panic!("not TLS files: {other:?}"),
        }
    }

    /// The argument list vko-render writes for an HA + TLS + mTLS Valkey `production` (from
    /// its snapshot), plus the namespace the downward API gives.
    fn rendered_ha_tls() -> Vec<&'static str> {
        vec![
            "vko-observer",
            "--listen-port=8084",
            "--replicas=3",
            "--db=15",
            "--log-level=info",
            "--unready-on=master-unreachable,write-test-failure,read-test-failure,replica-sync-failure,replica-read-test-failure,sentinel-unreachable,sentinel-quorum-failure,sentinel-master-down,sentinel-master-hostname-invalid,sentinel-replica-hostnames-invalid",
            "--cluster=production",
            "--headless-service=production-headless",
            "--cluster-domain=cluster.local",
            "--valkey-port=16379",
            "--sentinel-service=production-sentinel-headless",
            "--sentinel-port=36379",
            "--sentinel-monitor=production",
            "--sentinel-replicas=3",
            "--tls-ca-file=/tls/ca.crt",
            "--valkey-client-cert-file=/tls/tls.crt",
            "--valkey-client-key-file=/tls/tls.key",
            "--sentinel-client-cert-file=/tls-sentinel/tls.crt",
            "--sentinel-client-key-file=/tls-sentinel/tls.key",
            "--pod-namespace=demo",
        ]
    }

    #[test]
    fn accepts_the_rendered_ha_tls_arguments() {
        let cli = Cli::try_parse_from(rendered_ha_tls()).unwrap();
        let cfg = cli.config(Some("pw".into()), "obs-1-abc").unwrap();
        assert_eq!(cfg.listen_port, 8084);
        assert_eq!(cfg.unready_on.len(), 10);
        assert_eq!(
            cfg.data_pods[2],
            (
                "production-2".to_owned(),
                Endpoint::new(
                    "production-2.production-headless.demo.svc.cluster.local",
                    16379
                )
            )
        );
        let sentinel = cfg.sentinel.unwrap();
        assert_eq!(sentinel.monitor, "production");
        assert_eq!(sentinel.configured, 3);
        assert_eq!(
            sentinel.pods[1],
            (
                "production-sentinel-1".to_owned(),
                Endpoint::new(
                    "production-sentinel-1.production-sentinel-headless.demo.svc.cluster.local",
                    36379
                )
            )
        );
        assert!(cfg.dialer.sentinel_password.is_some());
        let valkey_tls = files(cfg.dialer.tls);
        assert_eq!(valkey_tls.cert, Some(PathBuf::from("/tls/tls.crt")));
        let sentinel_tls = files(cfg.dialer.sentinel_tls);
        assert_eq!(
            sentinel_tls.key,
            Some(PathBuf::from("/tls-sentinel/tls.key"))
        );
        assert_eq!(cfg.health_key, "vko:observer:health:obs-1-abc");
        assert!(cfg.health_key_ttl >= Duration::from_secs(60));
    }

    #[test]
    fn standalone_without_tls_and_checks_turned_off() {
        let cli = Cli::try_parse_from([
            "vko-observer",
            "--listen-port=8084",
            "--replicas=1",
            "--db=3",
            "--log-level=debug",
            "--unready-on=",
            "--cluster=solo",
            "--headless-service=solo-headless",
            "--cluster-domain=cluster.local",
            "--valkey-port=6379",
            "--pod-namespace=demo",
        ])
        .unwrap();
        assert_eq!(cli.log_level, LogLevel::Debug);
        let cfg = cli.config(None, "x").unwrap();
        assert!(cfg.unready_on.is_empty());
        assert!(cfg.sentinel.is_none());
        assert!(cfg.dialer.tls.is_none() && cfg.dialer.sentinel_tls.is_none());
        assert_eq!(cfg.db, 3);
        assert_eq!(cfg.data_pods.len(), 1);
    }

    #[test]
    fn server_only_tls_and_sentinel_without_auth() {
        let mut argv: Vec<&str> = rendered_ha_tls()
            .into_iter()
            .filter(|a| !a.contains("client-"))
            .collect();
        argv.push("--sentinel-auth-disabled");
        let cfg = Cli::try_parse_from(argv)
            .unwrap()
            .config(Some("pw".into()), "x")
            .unwrap();
        assert!(cfg.dialer.sentinel_password.is_none());
        assert_eq!(cfg.dialer.password.current().as_deref(), Some("pw"));
        let tls = files(cfg.dialer.tls);
        assert_eq!(tls.ca, PathBuf::from("/tls/ca.crt"));
        assert!(tls.cert.is_none() && tls.key.is_none());
    }

    #[test]
    fn refuses_inconsistent_arguments() {
        // A service name that is not the one vko-render derives from --cluster.
        let argv: Vec<String> = rendered_ha_tls()
            .into_iter()
            .map(|a| {
                a.replace(
                    "--headless-service=production-headless",
                    "--headless-service=other",
                )
            })
            .collect();
        let err = Cli::try_parse_from(argv)
            .unwrap()
            .config(None, "x")
            .unwrap_err();
        assert_eq!(err.reason(), "InvalidConfiguration");
        // An unknown check name.
        let argv: Vec<&str> = rendered_ha_tls()
            .into_iter()
            .map(|a| {
                if a.starts_with("--unready-on") {
                    "--unready-on=master-down"
                } else {
                    a
                }
            })
            .collect();
        assert!(
            Cli::try_parse_from(argv)
                .unwrap()
                .config(None, "x")
                .is_err()
        );
        // Sentinel without its port.
        let argv: Vec<&str> = rendered_ha_tls()
            .into_iter()
            .filter(|a| !a.starts_with("--sentinel-port"))
            .collect();
        assert!(Cli::try_parse_from(argv).is_err());
        // A client certificate without its key.
        let argv: Vec<&str> = rendered_ha_tls()
            .into_iter()
            .filter(|a| !a.starts_with("--valkey-client-key-file"))
            .collect();
        assert!(Cli::try_parse_from(argv).is_err());
        // No password argument exists.
        let mut argv = rendered_ha_tls();
        argv.push("--password=x");
        assert!(Cli::try_parse_from(argv).is_err());
    }
}
