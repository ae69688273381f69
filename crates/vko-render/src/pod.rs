//! Pieces shared by every generated pod: security contexts, env vars, probes, mounts, and the
//! argument lists of the operator binaries (`vko-sidecar`, `vko-observer`).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction,
    HTTPGetAction, KeyToPath, ObjectFieldSelector, PodSecurityContext, Probe, ResourceRequirements,
    SeccompProfile, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::Ctx;
use crate::conf::{TLS_CA_FILE, TLS_CERT_FILE, TLS_DIR, TLS_KEY_FILE};

/// Mount paths inside the generated pods (the contract with `vko-sidecar`).
pub mod paths {
    /// ConfigMap `<name>-config` (master `valkey.conf`), read-only.
    pub const MASTER_CONFIG_DIR: &str = "/etc/valkey";
    /// ConfigMap `<name>-replica-config` (replica `valkey.conf`), read-only, optional.
    pub const REPLICA_CONFIG_DIR: &str = "/etc/valkey-replica";
    /// In-memory emptyDir holding the effective `valkey.conf` the init container writes.
    pub const ACTIVE_CONFIG_DIR: &str = "/etc/valkey-active";
    /// The effective config file `valkey-server` runs with.
    pub const ACTIVE_CONFIG_FILE: &str = "/etc/valkey-active/valkey.conf";
    /// The password the data pod's own clients use (the init writes it, the sidecar rewrites
    /// it once its server accepts a rotated one): what the `valkey` container's probes send. Not
    /// the Secret volume's file, so an emptied or mistyped Secret never fails a probe.
    pub const ACTIVE_PASSWORD_FILE: &str = "/etc/valkey-active/password";
    /// ConfigMap `<name>-sentinel-config`, read-only, in the Sentinel init container.
    pub const SENTINEL_TEMPLATE_DIR: &str = "/etc/sentinel-template";
    /// Writable in-memory directory Sentinel runs from (it rewrites its config).
    pub const SENTINEL_CONFIG_DIR: &str = "/etc/sentinel";
    /// The config file `valkey-sentinel` runs with.
    pub const SENTINEL_CONFIG_FILE: &str = "/etc/sentinel/sentinel.conf";
    /// Where the sidecar's projected ServiceAccount token is mounted (the in-cluster default).
    pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
    /// The Sentinel tier's TLS Secret in the observer, when it differs from the data tier's.
    pub const SENTINEL_TLS_DIR: &str = "/tls-sentinel";
    /// In-memory emptyDir (auth and metrics on) the data init writes the exporter's password
    /// map into; read-only in the exporter.
    pub const EXPORTER_AUTH_DIR: &str = "/etc/vko-exporter";
    /// redis_exporter's password map (`--redis.password-file`): `{"<REDIS_ADDR>": "<password>"}`.
    pub const EXPORTER_PASSWORD_FILE: &str = "/etc/vko-exporter/passwords.json";
    /// The auth Secret's password key as a file (a Secret volume, read-only). The kubelet
    /// rewrites it in place when the Secret changes, which is how a running pod learns a
    /// rotated password (ADR 0035).
    pub const AUTH_DIR: &str = "/etc/vko-auth";
    /// The password file in [`AUTH_DIR`].
    pub const PASSWORD_FILE: &str = "/etc/vko-auth/password";
}

/// The auth Secret's volume in every generated pod that needs the password.
pub const AUTH_VOLUME: &str = "auth";

/// Binary of the sidecar, init and Sentinel init containers.
pub const SIDECAR_BINARY: &str = "vko-sidecar";
/// Binary of the observer.
pub const OBSERVER_BINARY: &str = "vko-observer";

/// Env var with the path of the password file ([`paths::PASSWORD_FILE`]) in the containers that
/// send the password: set only when they must (auth on; for Sentinel's own probes, Sentinel's
/// auth not disabled). The sidecar, the observer and the probe scripts read the file on every
/// use, never an env var holding the password, so a rotated password reaches them without a
/// restart.
pub const PASSWORD_FILE_ENV: &str = "VKO_PASSWORD_FILE";
/// Env var of the data init with the exact address the exporter dials (its `REDIS_ADDR`), the key
/// of the exporter's password map.
pub const EXPORTER_ADDR_ENV: &str = "VKO_EXPORTER_REDIS_ADDR";
/// Env var carrying the TLS-material fingerprint.
pub const TLS_HASH_ENV: &str = "VKO_TLS_MATERIAL_HASH";

/// Pod-level security context: non-root `uid`, seccomp RuntimeDefault.
pub fn pod_security_context(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        // Only chown a volume whose root does not already belong to the group: a large data
        // volume is not walked on every start.
        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// Container security context: no privilege, no escalation, read-only root, no capabilities.
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        ..SecurityContext::default()
    }
}

/// Resources of the operator-image containers (sidecar, data init), so a namespace with a
/// ResourceQuota admits the pod.
pub fn operator_container_resources() -> ResourceRequirements {
    vko_api::resource_requirements(
        &[("cpu", "10m"), ("memory", "32Mi")],
        &[("memory", "128Mi")],
    )
}

/// A literal env var.
pub fn env_value(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// An env var from the pod's own metadata (downward API).
pub fn env_field(name: &str, field_path: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: field_path.to_owned(),
                api_version: None,
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// `POD_NAME` and `POD_NAMESPACE` from the downward API.
pub fn pod_identity_env() -> Vec<EnvVar> {
    vec![
        env_field("POD_NAME", "metadata.name"),
        env_field("POD_NAMESPACE", "metadata.namespace"),
    ]
}

/// [`PASSWORD_FILE_ENV`] and the auth volume's mount, when auth is on.
pub fn password_file(ctx: &Ctx<'_>) -> Option<(EnvVar, VolumeMount)> {
    ctx.spec.auth_secret_name()?;
    Some((
        env_value(PASSWORD_FILE_ENV, paths::PASSWORD_FILE),
        mount(AUTH_VOLUME, paths::AUTH_DIR, true),
    ))
}

/// Whether a pod spec mounts the auth Secret's password file, i.e. was rendered with auth on
/// (a pod from before auth was turned on, or from before ADR 0035, does not).
pub fn pod_has_password_file(pod: &k8s_openapi::api::core::v1::PodSpec) -> bool {
    pod.volumes
        .iter()
        .flatten()
        .any(|volume| volume.name == AUTH_VOLUME)
}

/// The auth Secret and key a pod spec mounts as its password file: what a pod rendered with
/// auth on still requires after auth was turned off, until the roll replaces it (a restarted
/// operator reads the password from there, ADR 0035).
pub fn mounted_auth_secret(pod: &k8s_openapi::api::core::v1::PodSpec) -> Option<(&str, &str)> {
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == AUTH_VOLUME)?;
    let secret = volume.secret.as_ref()?;
    let key = secret
        .items
        .iter()
        .flatten()
        .find(|item| item.path == PASSWORD_ITEM)?;
    Some((secret.secret_name.as_deref()?, key.key.as_str()))
}

/// The auth volume's one file.
const PASSWORD_ITEM: &str = "password";

/// The auth Secret's password key as [`paths::PASSWORD_FILE`] (mode 0440: the pod's group, which
/// every container runs as), when auth is on. Not optional: a missing Secret or key keeps the
/// pod from starting, as the env var it replaces did.
pub fn auth_volume(ctx: &Ctx<'_>) -> Option<Volume> {
    let secret = ctx.spec.auth_secret_name()?;
    Some(Volume {
        name: AUTH_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items: Some(vec![KeyToPath {
                key: ctx.spec.auth_password_key().to_owned(),
                path: PASSWORD_ITEM.to_owned(),
                mode: None,
            }]),
            default_mode: Some(0o440),
            optional: Some(false),
        }),
        ..Volume::default()
    })
}

/// A volume mount.
pub fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

/// A container of the operator image that runs the sidecar binary (`init`, `sidecar`,
/// `init-sentinel`): `args` picks the subcommand.
pub fn sidecar_binary_container(
    ctx: &Ctx<'_>,
    name: &str,
    args: Vec<String>,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
    resources: Option<ResourceRequirements>,
) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(ctx.inputs.operator_image.clone()),
        command: Some(vec![SIDECAR_BINARY.to_owned()]),
        args: Some(args),
        env: Some(env),
        resources,
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

/// A small in-memory `emptyDir` (1 MiB): for files that hold a password, which must never
/// reach a node's disk.
pub fn secret_scratch_volume(name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".to_owned()),
            size_limit: Some(Quantity("1Mi".to_owned())),
        }),
        ..Volume::default()
    }
}

/// The TLS Secret's mount (read-only at `TLS_DIR`) when `tls`; both tiers' volume is `tls`.
pub fn tls_mount(tls: bool) -> Option<VolumeMount> {
    tls.then(|| mount("tls", TLS_DIR, true))
}

/// A TCP container port.
pub fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }
}

/// The probe scripts' first part: with [`PASSWORD_FILE_ENV`] set, the password file's exact
/// bytes (a trailing newline kept, which `$(...)` alone would strip) go to `valkey-cli` as
/// `REDISCLI_AUTH`, read on every run so a rotated password is used as soon as the kubelet has
/// written it, as the `default` user (`AUTH default <password>`, which a server without a
/// password accepts too, ADR 0035). A macro, so the scripts stay `&'static str` constants.
macro_rules! read_password_file {
    () => {
        r#"if [ -n "$VKO_PASSWORD_FILE" ]; then REDISCLI_AUTH=$(cat "$VKO_PASSWORD_FILE" && echo x) || exit 1; REDISCLI_AUTH=${REDISCLI_AUTH%x}; export REDISCLI_AUTH; set -- "$@" --user default; fi; "#
    };
}

/// Probe script: ready only on `PONG`. `valkey-cli` exits 0 on error replies (`NOAUTH`,
/// `LOADING`), so the reply text is what counts. The script is a constant: ports and TLS flags
/// arrive as positional arguments and the password from its file, so no rendered value is ever
/// parsed by the shell.
pub const READY_SCRIPT: &str = concat!(
    read_password_file!(),
    r#"reply=$(valkey-cli "$@" ping 2>&1) || exit 1; [ "$reply" = PONG ]"#
);

/// Probe script: alive on `PONG`, and also while the server is `LOADING` a dataset or `BUSY`
/// with a script, so a long load is never killed by the liveness probe; and on an
/// authentication refusal (`NOAUTH`, `WRONGPASS`): the server answered, and a probe must never
/// restart a pod because the kubelet has not yet written a rotated password into it.
pub const ALIVE_SCRIPT: &str = concat!(
    read_password_file!(),
    r#"reply=$(valkey-cli "$@" ping 2>&1) || exit 1; case "$reply" in PONG|LOADING*|BUSY*|*NOAUTH*|*WRONGPASS*) exit 0;; *) exit 1;; esac"#
);

/// The Sentinel container's preStop: while this Sentinel leads a failover of the monitored
/// master (`failover_in_progress` in `SENTINEL MASTER`), it is not stopped, for at most 20 s. A
/// drain evicts the master and the Sentinels on its node at once; the master's handover asks one
/// Sentinel for `SENTINEL FAILOVER`, and if that Sentinel exits meanwhile the failover dies with
/// it: the others then fail over only once the paused master is down for them (7.6-12.5 s without
/// writes measured, against ~1.5 s). The first second lets a request already sent land. `$1` is
/// the master's name, the rest `valkey-cli` arguments; the password comes from its file.
pub const SENTINEL_PRE_STOP_SCRIPT: &str = concat!(
    read_password_file!(),
    r#"name=$1; shift; sleep 1; n=0; while [ $n -lt 40 ]; do out=$(valkey-cli "$@" sentinel master "$name" 2>&1) || exit 0; case "$out" in *failover_in_progress*) ;; *) exit 0;; esac; sleep 0.5; n=$((n+1)); done"#
);

/// `valkey-cli` connection arguments for a local probe on `port`.
pub fn cli_args(port: i32, tls: bool) -> Vec<String> {
    let mut args = vec![
        "-h".to_owned(),
        "127.0.0.1".to_owned(),
        "-p".to_owned(),
        port.to_string(),
    ];
    if tls {
        // The server does not require a client certificate (tls-auth-clients optional); the
        // probe only verifies the server against the CA.
        args.extend([
            "--tls".to_owned(),
            "--cacert".to_owned(),
            TLS_CA_FILE.to_owned(),
        ]);
    }
    args
}

/// Timings of a probe.
#[derive(Clone, Copy)]
pub struct Timing {
    pub initial_delay: i32,
    pub period: i32,
    pub timeout: i32,
    pub failure_threshold: i32,
}

/// An exec probe running `script` with `args`.
pub fn script_probe(script: &str, args: &[String], timing: Timing) -> Probe {
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        "probe".to_owned(),
    ];
    command.extend(args.iter().cloned());
    with_timing(
        Probe {
            exec: Some(ExecAction {
                command: Some(command),
            }),
            ..Probe::default()
        },
        timing,
    )
}

/// An HTTP GET probe.
pub fn http_probe(path: &str, port: i32, timing: Timing) -> Probe {
    with_timing(
        Probe {
            http_get: Some(HTTPGetAction {
                path: Some(path.to_owned()),
                port: IntOrString::Int(port),
                scheme: Some("HTTP".to_owned()),
                ..HTTPGetAction::default()
            }),
            ..Probe::default()
        },
        timing,
    )
}

fn with_timing(probe: Probe, timing: Timing) -> Probe {
    Probe {
        initial_delay_seconds: (timing.initial_delay > 0).then_some(timing.initial_delay),
        period_seconds: Some(timing.period),
        timeout_seconds: Some(timing.timeout),
        success_threshold: Some(1),
        failure_threshold: Some(timing.failure_threshold),
        ..probe
    }
}

/// TLS arguments of the operator binaries.
pub fn tls_args(tls: bool) -> Vec<String> {
    if !tls {
        return Vec::new();
    }
    vec![
        format!("--tls-ca-file={TLS_CA_FILE}"),
        format!("--tls-cert-file={TLS_CERT_FILE}"),
        format!("--tls-key-file={TLS_KEY_FILE}"),
    ]
}

/// The argument that names the Sentinel Service (present only with Sentinel).
pub const SENTINEL_SERVICE_ARG: &str = "--sentinel-service=";

/// Arguments that tell an operator binary where the cluster is: its name, the Services and
/// ports. Every value is a validated name or a number; the binaries are started without a
/// shell, so each element reaches them as exactly one argument.
pub fn cluster_args(ctx: &Ctx<'_>) -> Vec<String> {
    let names = &ctx.names;
    let mut args = vec![
        format!("--cluster={}", names.name()),
        format!("--headless-service={}", names.headless_service()),
        format!("--cluster-domain={}", names.cluster_domain()),
        format!("--valkey-port={}", ctx.ports.valkey),
    ];
    if ctx.spec.sentinel_enabled() {
        args.push(format!(
            "{SENTINEL_SERVICE_ARG}{}",
            names.sentinel_headless_service()
        ));
        args.push(format!("--sentinel-port={}", ctx.ports.sentinel));
        args.push(format!("--sentinel-monitor={}", names.name()));
        // Every binary that talks to the Sentinels must know they take no password: a data
        // pod's sidecar once gave them the rotated one (`ACL SETUSER default >…` also ends
        // `nopass`), and from then on they refused clients without it.
        if ctx.spec.sentinel_auth_disabled() {
            args.push("--sentinel-auth-disabled".to_owned());
        }
    }
    args
}
