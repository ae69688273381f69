//! Command line: exactly the arguments vko-render puts on the `init`, `init-sentinel` and
//! `sidecar` containers (crates/vko-render/src/{pod,data,sentinel}.rs), plus the pod's identity
//! from the downward API. The password comes only from its file (`VKO_PASSWORD_FILE`, a Secret
//! volume), never from argv.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use vko_render::{VALKEY_CONF_KEY, paths};

use crate::conf;
use crate::error::{Result, SidecarError};
use crate::handover::HandoverSettings;
use crate::init::InitSettings;
use crate::lease_api::{KubeLeaseApi, LeaseApi};
use crate::node::Node;
use crate::pod_api::{KubePodApi, PodApi};
use crate::sentinel_init::SentinelInit;
use crate::topology::{Discovery, DnsNames, Endpoint, Topology, sentinels_of};
use vko_valkey::{Dialer, TlsFiles, TlsMaterial};

#[derive(Debug, Parser)]
#[command(
    name = "vko-sidecar",
    version,
    about = "vko's per-pod helper for Valkey data and Sentinel pods"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Init container of a data pod: decide the boot role, write the effective config.
    Init(InitArgs),
    /// Init container of a Sentinel pod: write sentinel.conf into the writable directory.
    SentinelInit(SentinelInitArgs),
    /// The long-running sidecar of a data pod.
    Run(RunArgs),
    /// A Sentinel pod's container that hands a checked new certificate to a Sentinel that
    /// re-reads its TLS files (ADR 0053).
    SentinelTlsReload(SentinelTlsReloadArgs),
}

/// Where the cluster is (`vko_render::pod::cluster_args`).
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    #[arg(long)]
    pub cluster: String,
    #[arg(long)]
    pub headless_service: String,
    #[arg(long)]
    pub cluster_domain: String,
    #[arg(long)]
    pub valkey_port: u16,
    #[arg(long, requires_all = ["sentinel_port", "sentinel_monitor"])]
    pub sentinel_service: Option<String>,
    #[arg(long)]
    pub sentinel_port: Option<u16>,
    #[arg(long)]
    pub sentinel_monitor: Option<String>,
    /// Sentinel accepts clients without a password (the data tier still requires one).
    #[arg(long)]
    pub sentinel_auth_disabled: bool,
    #[arg(long, env = "POD_NAME")]
    pub pod_name: String,
    #[arg(long, env = "POD_NAMESPACE")]
    pub pod_namespace: String,
}

/// With TLS: the CA fingerprint the pod's template carries (`VKO_TLS_MATERIAL_HASH`); a
/// certificate under that CA is reloaded in place (ADR 0038 on the data tier, ADR 0053 on 9.1+
/// Sentinels).
#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    #[arg(long, env = vko_render::TLS_HASH_ENV)]
    pub tls_trust: Option<String>,
}

/// `vko_render::pod::tls_args`.
#[derive(Debug, Clone, Args)]
pub struct TlsArgs {
    #[arg(long, requires = "tls_cert_file")]
    pub tls_ca_file: Option<PathBuf>,
    #[arg(long, requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[arg(long)]
    pub master_config: PathBuf,
    #[arg(long)]
    pub replica_config: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Where to write redis_exporter's password map (auth and metrics on).
    #[arg(long, requires = "exporter_redis_addr")]
    pub exporter_password_file: Option<PathBuf>,
    /// The exporter's `REDIS_ADDR`, the password map's only key.
    #[arg(long, env = vko_render::EXPORTER_ADDR_ENV)]
    pub exporter_redis_addr: Option<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct SentinelInitArgs {
    #[arg(long)]
    pub template: PathBuf,
    #[arg(long)]
    pub output: PathBuf,
    /// With a Sentinel that reloads its certificate in place: where to copy the TLS files it
    /// serves (ADR 0053).
    #[arg(long, requires = "tls_ca_file")]
    pub tls_active_dir: Option<PathBuf>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[arg(long)]
    pub health_port: u16,
    #[arg(long)]
    pub active_config: PathBuf,
    /// The replica config template (the operator's recorded master without Sentinel).
    #[arg(long, default_value_t = format!("{}/{VALKEY_CONF_KEY}", paths::REPLICA_CONFIG_DIR))]
    pub replica_config: String,
    /// Upper bound of the write pause during a handover, in milliseconds.
    #[arg(long, default_value_t = 20_000)]
    pub handover_pause_ms: u64,
    /// F (ADR 0019): with Sentinel, a master the Sentinel majority has not named for this long
    /// pauses its writes. Must stay below Sentinel's down-after.
    #[arg(long, default_value_t = vko_authority::DEFAULT_FENCE_AFTER.as_millis() as u64)]
    pub fence_after_ms: u64,
    /// redis_exporter's password map, rewritten when the password rotates (auth and metrics on).
    #[arg(long, requires_all = ["exporter_redis_addr", "exporter_port"])]
    pub exporter_password_file: Option<PathBuf>,
    /// The exporter's `REDIS_ADDR`, the password map's only key.
    #[arg(long, env = vko_render::EXPORTER_ADDR_ENV)]
    pub exporter_redis_addr: Option<String>,
    /// The exporter's port, asked to reload its password map.
    #[arg(long)]
    pub exporter_port: Option<u16>,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

#[derive(Debug, Args)]
pub struct SentinelTlsReloadArgs {
    /// The directory of the TLS files the Sentinel serves.
    #[arg(long)]
    pub tls_active_dir: PathBuf,
    #[command(flatten)]
    pub trust: TrustArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// The env var with the password file's path, as vko-render puts it on the containers.
pub use vko_render::PASSWORD_FILE_ENV;

/// The password in the file `VKO_PASSWORD_FILE` names: `None` when the variable is unset (auth
/// off); an unreadable file or an empty, blank or non-UTF-8 password is refused, so no server is
/// ever started without the password the spec asks for.
pub fn password_from_file_env() -> Result<Option<String>> {
    std::env::var_os(PASSWORD_FILE_ENV)
        .map(|path| crate::password::read_password_file(std::path::Path::new(&path)))
        .transpose()
}

impl TlsArgs {
    /// The Secret volume's files and the Sentinel's copy in `active_dir`.
    fn material_paths(&self, active_dir: PathBuf) -> Result<crate::sentinel_tls::MaterialPaths> {
        match (&self.tls_ca_file, &self.tls_cert_file, &self.tls_key_file) {
            (Some(ca), Some(cert), Some(key)) => Ok(crate::sentinel_tls::MaterialPaths {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
                active_dir,
            }),
            _ => Err(SidecarError::Config(
                "--tls-active-dir needs --tls-ca-file, --tls-cert-file and --tls-key-file".into(),
            )),
        }
    }

    /// One dialer for both tiers: the same password (Sentinel without it when it refuses) and
    /// the same TLS files.
    fn dialer(&self, password: Option<String>) -> Dialer {
        let files = self.tls_ca_file.as_ref().map(|ca| TlsFiles {
            ca: ca.clone(),
            cert: self.tls_cert_file.clone(),
            key: self.tls_key_file.clone(),
        });
        Dialer::new(password).with_tls(files.map(TlsMaterial::Files))
    }
}

impl ClusterArgs {
    fn names(&self) -> Result<DnsNames> {
        let sentinel_port = match (&self.sentinel_service, self.sentinel_port) {
            (Some(_), Some(port)) => port,
            (None, _) => 0,
            (Some(_), None) => {
                return Err(SidecarError::Config(
                    "--sentinel-port is required with --sentinel-service".into(),
                ));
            }
        };
        Ok(DnsNames {
            cluster: self.cluster.clone(),
            headless_service: self.headless_service.clone(),
            sentinel_service: self.sentinel_service.clone(),
            namespace: self.pod_namespace.clone(),
            cluster_domain: self.cluster_domain.clone(),
            valkey_port: self.valkey_port,
            sentinel_port,
        })
    }

    fn topology(&self, replica_config: PathBuf) -> Result<Topology> {
        let names = self.names()?;
        let me = Endpoint::new(names.data_pod_fqdn(&self.pod_name), self.valkey_port);
        Ok(Topology {
            me,
            local: Endpoint::new("127.0.0.1", self.valkey_port),
            monitor: self.sentinel_monitor.clone(),
            discovery: Discovery::Dns(names),
            replica_config,
            sentinel_cache: Default::default(),
            seen_replicas: Default::default(),
        })
    }
}

/// The init container needs no API: a `PodApi` that refuses every call.
struct NoPodApi;

impl PodApi for NoPodApi {
    fn set_role_label<'a>(
        &'a self,
        _: &'a str,
        _: vko_authority::InstanceRole,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(async { Err(SidecarError::Kube("no API access in this container".into())) })
    }
    fn presence<'a>(
        &'a self,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<crate::pod_api::PodPresence>> {
        Box::pin(async { Err(SidecarError::Kube("no API access in this container".into())) })
    }
    fn role_label<'a>(
        &'a self,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Option<String>>> {
        Box::pin(async { Err(SidecarError::Kube("no API access in this container".into())) })
    }
    fn set_fenced_annotation<'a>(
        &'a self,
        _: &'a str,
        _: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(async { Err(SidecarError::Kube("no API access in this container".into())) })
    }
    fn set_tls_certificate_annotation<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(async { Err(SidecarError::Kube("no API access in this container".into())) })
    }
}

pub async fn run_init(args: InitArgs) -> Result<()> {
    let password = password_from_file_env()?;
    let node = Node {
        topology: args.cluster.topology(args.replica_config.clone())?,
        dialer: args.tls.dialer(password.clone()),
        pods: Arc::new(NoPodApi),
        lease: None,
        my_pod: args.cluster.pod_name.clone(),
        active_config: args.output.clone(),
    };
    let settings = InitSettings {
        master_template: args.master_config,
        data_dir: args.data_dir,
        attempts: 10,
        retry_delay: Duration::from_secs(2),
    };
    if let (Some(path), Some(address)) = (&args.exporter_password_file, &args.exporter_redis_addr) {
        crate::init::write_exporter_passwords(path, address, password.as_deref())?;
    }
    crate::init::init(&node, &settings, password.as_deref()).await?;
    Ok(())
}

pub async fn run_sentinel_init(args: SentinelInitArgs) -> Result<()> {
    let names = args.cluster.names()?;
    let monitor_name = args
        .cluster
        .sentinel_monitor
        .clone()
        .ok_or_else(|| SidecarError::Config("--sentinel-monitor is required".into()))?;
    let fqdn = names
        .sentinel_pod_fqdn(&args.cluster.pod_name)
        .ok_or_else(|| SidecarError::Config("--sentinel-service is required".into()))?;
    let me = Endpoint::new(fqdn, names.sentinel_port);
    let discovery = Discovery::Dns(names);
    let others: Vec<Endpoint> = sentinels_of(&discovery)
        .await
        .into_iter()
        .filter(|s| *s != me)
        .collect();
    if let Some(dir) = &args.tls_active_dir {
        crate::sentinel_tls::copy_initial_material(&args.tls.material_paths(dir.clone())?)?;
    }
    let password = password_from_file_env()?;
    let dialer = args.tls.dialer(password.clone());
    let init = SentinelInit {
        template: args.template,
        output: args.output,
        monitor_name,
        me,
        others,
        password,
        sentinel_auth_disabled: args.cluster.sentinel_auth_disabled,
        myid: conf::sentinel_myid(&args.cluster.pod_name, &args.cluster.pod_namespace),
        attempts: 3,
        retry_delay: Duration::from_secs(1),
    };
    crate::sentinel_init::sentinel_init(&dialer, &init).await?;
    Ok(())
}

/// `sentinel-tls-reload`: runs until the pod stops.
pub async fn run_sentinel_tls_reload(args: SentinelTlsReloadArgs) -> Result<()> {
    let names = args.cluster.names()?;
    let host = names
        .sentinel_pod_fqdn(&args.cluster.pod_name)
        .ok_or_else(|| SidecarError::Config("--sentinel-service is required".into()))?;
    let watch = crate::sentinel_tls::SentinelTlsWatch {
        paths: args.tls.material_paths(args.tls_active_dir)?,
        trust: args.trust.tls_trust,
        host,
        local: format!("127.0.0.1:{}", names.sentinel_port),
    };
    tracing::info!(host = %watch.host, "Sentinel TLS reload running");
    crate::sentinel_tls::reload_loop(watch).await;
    Ok(())
}

pub async fn run_sidecar(args: RunArgs) -> Result<()> {
    let password = password_from_file_env()?;
    let pods = KubePodApi::in_cluster(&args.cluster.pod_namespace, &args.cluster.pod_name).await?;
    // Without Sentinel the master Lease is the authority (ADR 0022).
    let lease: Option<Arc<dyn LeaseApi>> = match args.cluster.sentinel_monitor {
        Some(_) => None,
        None => Some(Arc::new(
            KubeLeaseApi::in_cluster(
                &args.cluster.pod_namespace,
                &vko_authority::master_lease_name(&args.cluster.cluster),
            )
            .await?,
        )),
    };
    // The server accepts what its effective config said when it started: dial with that, so a
    // sidecar restarted after the Secret changed still reaches it and hands it the new password.
    let started_with = conf::read_optional(&args.active_config)?
        .as_deref()
        .and_then(conf::requirepass_of);
    let watch = password.is_some().then(|| crate::password::PasswordWatch {
        file: std::env::var_os(PASSWORD_FILE_ENV)
            .map(PathBuf::from)
            .unwrap_or_default(),
        sentinel_auth: !args.cluster.sentinel_auth_disabled,
        exporter: match (
            &args.exporter_password_file,
            &args.exporter_redis_addr,
            args.exporter_port,
        ) {
            (Some(path), Some(address), Some(port)) => Some(crate::password::ExporterMap {
                path: path.clone(),
                address: address.clone(),
                port,
            }),
            _ => None,
        },
    });
    let tls_watch = match (&args.tls.tls_ca_file, &args.tls.tls_cert_file) {
        (Some(ca), Some(cert)) => Some(crate::tls_reload::TlsWatch {
            ca: ca.clone(),
            cert: cert.clone(),
            trust: args.trust.tls_trust.clone(),
        }),
        _ => None,
    };
    let node = Node {
        topology: args.cluster.topology(PathBuf::from(&args.replica_config))?,
        dialer: args.tls.dialer(started_with.or(password)),
        pods: Arc::new(pods),
        lease,
        my_pod: args.cluster.pod_name.clone(),
        active_config: args.active_config,
    };
    let settings = HandoverSettings {
        pause: Duration::from_millis(args.handover_pause_ms),
        ..HandoverSettings::default()
    };
    let fence_settings = crate::fence::FenceSettings {
        fence_after: crate::fence::check_fence_after(Duration::from_millis(args.fence_after_ms))?,
        ..crate::fence::FenceSettings::default()
    };
    let shared = crate::run::Shared::with_fence_settings(Arc::new(node), settings, fence_settings);
    crate::run::run(shared, args.health_port, watch, tls_watch).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    /// The exact argument lists vko-render renders (from its HA + TLS snapshot).
    #[test]
    fn accepts_the_rendered_arguments() {
        let common = [
            "--cluster=production",
            "--headless-service=production-headless",
            "--cluster-domain=cluster.local",
            "--valkey-port=16379",
            "--sentinel-service=production-sentinel-headless",
            "--sentinel-port=36379",
            "--sentinel-monitor=production",
            "--tls-ca-file=/tls/ca.crt",
            "--tls-cert-file=/tls/tls.crt",
            "--tls-key-file=/tls/tls.key",
            "--pod-name=production-0",
            "--pod-namespace=demo",
        ];
        let with = |head: &[&str]| {
            let mut argv = vec!["vko-sidecar"];
            argv.extend_from_slice(head);
            argv.extend_from_slice(&common);
            Cli::try_parse_from(argv).unwrap()
        };
        let init = with(&[
            "init",
            "--master-config=/etc/valkey/valkey.conf",
            "--replica-config=/etc/valkey-replica/valkey.conf",
            "--output=/etc/valkey-active/valkey.conf",
            "--data-dir=/data",
        ]);
        let Command::Init(init) = init.command else {
            panic!("init")
        };
        let topo = init.cluster.topology(init.replica_config.clone()).unwrap();
        assert_eq!(
            topo.me,
            Endpoint::new(
                "production-0.production-headless.demo.svc.cluster.local",
                16379
            )
        );
        assert_eq!(topo.monitor.as_deref(), Some("production"));
        assert!(init.tls.dialer(None).tls.is_some());

        let run = with(&[
            "run",
            "--health-port=8082",
            "--active-config=/etc/valkey-active/valkey.conf",
        ]);
        let Command::Run(run) = run.command else {
            panic!("run")
        };
        assert_eq!(run.replica_config, "/etc/valkey-replica/valkey.conf");

        let mut sentinel = vec![
            "vko-sidecar",
            "sentinel-init",
            "--template=/etc/sentinel-template/sentinel.conf",
            "--output=/etc/sentinel/sentinel.conf",
        ];
        sentinel.extend_from_slice(&common);
        sentinel.push("--sentinel-auth-disabled");
        let Command::SentinelInit(s) = Cli::try_parse_from(sentinel).unwrap().command else {
            panic!("sentinel-init")
        };
        assert!(s.cluster.sentinel_auth_disabled);
        assert_eq!(
            s.cluster
                .names()
                .unwrap()
                .sentinel_pod_fqdn("production-sentinel-1")
                .as_deref(),
            Some("production-sentinel-1.production-sentinel-headless.demo.svc.cluster.local")
        );
    }

    /// The init's extra argument with auth and metrics (vko-render's exporter snapshot); the
    /// address comes from `VKO_EXPORTER_REDIS_ADDR` in the pod, given as a flag here.
    #[test]
    fn init_takes_the_exporter_password_file_only_with_an_address() {
        let argv = |extra: &[&'static str]| -> Vec<&'static str> {
            let mut argv = vec![
                "vko-sidecar",
                "init",
                "--master-config=/etc/valkey/valkey.conf",
                "--replica-config=/etc/valkey-replica/valkey.conf",
                "--output=/etc/valkey-active/valkey.conf",
                "--data-dir=/data",
                "--cluster=mx",
                "--headless-service=mx-headless",
                "--cluster-domain=cluster.local",
                "--valkey-port=6379",
                "--pod-name=mx-0",
                "--pod-namespace=demo",
                "--exporter-password-file=/etc/vko-exporter/passwords.json",
            ];
            argv.extend_from_slice(extra);
            argv
        };
        let Command::Init(init) =
            Cli::try_parse_from(argv(&["--exporter-redis-addr=redis://127.0.0.1:6379"]))
                .unwrap()
                .command
        else {
            panic!("init")
        };
        assert_eq!(
            init.exporter_password_file.as_deref(),
            Some(std::path::Path::new(paths::EXPORTER_PASSWORD_FILE))
        );
        assert_eq!(
            init.exporter_redis_addr.as_deref(),
            Some("redis://127.0.0.1:6379")
        );
        if std::env::var_os(vko_render::EXPORTER_ADDR_ENV).is_none() {
            assert!(Cli::try_parse_from(argv(&[])).is_err());
        }
    }

    #[test]
    fn standalone_arguments_have_no_sentinel() {
        let cli = Cli::try_parse_from([
            "vko-sidecar",
            "run",
            "--health-port=8082",
            "--active-config=/etc/valkey-active/valkey.conf",
            "--cluster=solo",
            "--headless-service=solo-headless",
            "--cluster-domain=cluster.local",
            "--valkey-port=6379",
            "--pod-name=solo-0",
            "--pod-namespace=demo",
        ])
        .unwrap();
        let Command::Run(run) = cli.command else {
            panic!("run")
        };
        assert!(
            run.cluster
                .topology(PathBuf::from("/x"))
                .unwrap()
                .monitor
                .is_none()
        );
        assert!(run.tls.dialer(None).tls.is_none());
        // No way to pass the password as an argument.
        assert!(Cli::try_parse_from(["vko-sidecar", "run", "--password=x"]).is_err());
    }
}
