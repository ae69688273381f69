//! The data StatefulSet `<name>`: init container `init`, containers `valkey`, `sidecar` and the
//! optional `exporter`. See docs/adr/0004-data-pod-anatomy.md for why it looks like this.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    Affinity, ConfigMapProjection, ConfigMapVolumeSource, Container, DownwardAPIProjection,
    DownwardAPIVolumeFile, EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath, Lifecycle,
    LifecycleHandler, ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PodAffinityTerm, PodAntiAffinity, PodSpec, ProjectedVolumeSource, SecretVolumeSource,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
    VolumeResourceRequirements, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vko_api::AntiAffinityMode;

use crate::conf::{DATA_DIR, TLS_CA_FILE, TLS_CERT_FILE, TLS_DIR, TLS_KEY_FILE, VALKEY_CONF_KEY};
use crate::labels::Component;
use crate::pod::{
    ALIVE_SCRIPT, EXPORTER_ADDR_ENV, PASSWORD_FILE_ENV, READY_SCRIPT, TLS_HASH_ENV, Timing,
    auth_volume, cli_args, cluster_args, container_port, container_security_context, env_field,
    env_value, http_probe, mount, operator_container_resources, password_file, paths,
    pod_identity_env, script_probe, sidecar_binary_container, tls_args,
};
use crate::pod::{secret_scratch_volume, tls_mount};
use crate::ports::{SIDECAR_HEALTH, names as port_names};
use crate::tier::{self, PodMetadata, Tier};
use crate::{Ctx, RenderError, TierHashes, TlsSecrets};

/// uid/gid of the `valkey` user in the official images.
pub const VALKEY_UID: i64 = 999;
/// Long enough for the sidecar to hand the master role over (failover timeout 60 s) before the
/// kubelet kills the pod.
pub const DATA_TERMINATION_GRACE_SECONDS: i64 = 75;

mod volume {
    pub const CONFIG: &str = "config";
    pub const REPLICA_CONFIG: &str = "replica-config";
    pub const ACTIVE_CONFIG: &str = "active-config";
    pub const DATA: &str = "data";
    pub const TLS: &str = "tls";
    pub const TOKEN: &str = "sidecar-token";
    pub const EXPORTER_AUTH: &str = "exporter-auth";
}

/// The exporter gets the password (only through its password map) when metrics and auth are on.
fn exporter_auth(ctx: &Ctx<'_>) -> bool {
    ctx.spec.metrics_enabled() && ctx.spec.auth_enabled()
}

/// The address the exporter dials (`REDIS_ADDR`). With auth it is also the key of the exporter's
/// password map, so it must stay in the form redis_exporter looks it up by (`url.Parse` +
/// `String()`, no user part: `REDIS_USER` is never set), which these addresses already are.
fn exporter_address(ctx: &Ctx<'_>, tls: bool) -> String {
    if tls {
        // Through the pod's own DNS name, so the exporter verifies the server certificate
        // (localhost is not in it) instead of skipping verification. `$(POD_NAME)` is expanded
        // by the kubelet from the container's env.
        format!(
            "rediss://$(POD_NAME).{}:{}",
            ctx.names.service_fqdn(&ctx.names.headless_service()),
            ctx.ports.valkey
        )
    } else {
        format!("redis://127.0.0.1:{}", ctx.ports.valkey)
    }
}

/// The data StatefulSet and the hashes written into its pod template.
pub fn statefulset(
    ctx: &Ctx<'_>,
    tls: Option<&TlsSecrets>,
    tls_material_hash: Option<&str>,
    config_hash: &str,
) -> Result<(StatefulSet, TierHashes), RenderError> {
    let spec = ctx.spec;
    let names = &ctx.names;
    let metadata = PodMetadata::merge(
        ctx,
        Component::Valkey,
        "spec",
        spec.pod_labels.as_ref(),
        spec.pod_annotations.as_ref(),
        config_hash,
    )?;

    let mut containers = vec![
        valkey_container(ctx, tls.is_some()),
        sidecar_container(ctx, tls.is_some(), tls_material_hash),
    ];
    if spec.metrics_enabled() {
        containers.push(exporter_container(ctx, tls.is_some())?);
    }

    let tier = Tier {
        component: Component::Valkey,
        statefulset_name: names.data_statefulset(),
        replicas: ctx.inputs.data_replicas.map_or(spec.replicas(), |held| {
            i32::try_from(held).unwrap_or(i32::MAX)
        }),
        headless_service: names.headless_service(),
        metadata,
        // Only the sidecar gets a token (projected in `volumes`).
        service_account: Some(names.sidecar()),
        termination_grace_seconds: DATA_TERMINATION_GRACE_SECONDS,
        anti_affinity: spec.needs_data_anti_affinity(),
        init_container: init_container(ctx, tls.is_some()),
        containers,
        volumes: volumes(ctx, tls),
        volume_claim_templates: spec
            .persistence_enabled()
            .then(|| vec![claim_template(ctx)]),
    };
    tier::statefulset(ctx, tier, config_hash)
}

/// Required or preferred anti-affinity against the pods of the same component of the same
/// `Valkey` (never against the other tier or another `Valkey`).
pub fn anti_affinity(ctx: &Ctx<'_>, component: Component) -> Affinity {
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(ctx.selector(component)),
            match_expressions: None,
        }),
        topology_key: ctx.spec.anti_affinity_topology_key().to_owned(),
        ..PodAffinityTerm::default()
    };
    let anti = match ctx.spec.anti_affinity_mode() {
        AntiAffinityMode::Hard => PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![term]),
            ..PodAntiAffinity::default()
        },
        AntiAffinityMode::Soft | AntiAffinityMode::Off => PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: term,
                },
            ]),
            ..PodAntiAffinity::default()
        },
    };
    Affinity {
        pod_anti_affinity: Some(anti),
        ..Affinity::default()
    }
}

fn init_container(ctx: &Ctx<'_>, tls: bool) -> Container {
    let mut args = vec![
        "init".to_owned(),
        format!(
            "--master-config={}/{VALKEY_CONF_KEY}",
            paths::MASTER_CONFIG_DIR
        ),
        format!(
            "--replica-config={}/{VALKEY_CONF_KEY}",
            paths::REPLICA_CONFIG_DIR
        ),
        format!("--output={}", paths::ACTIVE_CONFIG_FILE),
        format!("--data-dir={DATA_DIR}"),
    ];
    args.extend(cluster_args(ctx));
    args.extend(tls_args(tls));
    let mut env = pod_identity_env();
    let mut mounts = vec![
        mount(volume::CONFIG, paths::MASTER_CONFIG_DIR, true),
        mount(volume::REPLICA_CONFIG, paths::REPLICA_CONFIG_DIR, true),
        mount(volume::ACTIVE_CONFIG, paths::ACTIVE_CONFIG_DIR, false),
        // Writable: the init checks that the data directory is writable and whether it holds
        // a dataset before it lets this pod boot as master.
        mount(volume::DATA, DATA_DIR, false),
    ];
    mounts.extend(tls_mount(tls));
    with_password_file(ctx, &mut env, &mut mounts);
    with_exporter_map(ctx, tls, &mut args, &mut env, &mut mounts);
    let resources = Some(operator_container_resources());
    sidecar_binary_container(ctx, "init", args, env, mounts, resources)
}

/// The password file's env var and mount, when auth is on.
fn with_password_file(ctx: &Ctx<'_>, env: &mut Vec<EnvVar>, mounts: &mut Vec<VolumeMount>) {
    if let Some((var, auth_mount)) = password_file(ctx) {
        env.push(var);
        mounts.push(auth_mount);
    }
}

/// With auth and metrics: where the exporter's password map goes and the address it is keyed
/// by. The init writes it; the sidecar rewrites it when the password rotates and asks the
/// exporter to reload it.
fn with_exporter_map(
    ctx: &Ctx<'_>,
    tls: bool,
    args: &mut Vec<String>,
    env: &mut Vec<EnvVar>,
    mounts: &mut Vec<VolumeMount>,
) {
    if !exporter_auth(ctx) {
        return;
    }
    args.push(format!(
        "--exporter-password-file={}",
        paths::EXPORTER_PASSWORD_FILE
    ));
    // After POD_NAME, which it may reference.
    env.push(env_value(EXPORTER_ADDR_ENV, exporter_address(ctx, tls)));
    mounts.push(mount(
        volume::EXPORTER_AUTH,
        paths::EXPORTER_AUTH_DIR,
        false,
    ));
}

/// The data pod's server container (`spec.image`).
pub const VALKEY_CONTAINER: &str = "valkey";
/// The data pod's sidecar container (labels, fencing, handover).
pub const SIDECAR_CONTAINER: &str = "sidecar";

/// Whether a data pod's sidecar runs with Sentinel: it fences on the Sentinel majority and never
/// on the master Lease. Read from its arguments as [`crate::pod::cluster_args`] renders them, so
/// a pod started before Sentinel was turned off still answers `true` until it is replaced.
pub fn sidecar_runs_with_sentinel(pod: &PodSpec) -> bool {
    pod.containers
        .iter()
        .filter(|c| c.name == SIDECAR_CONTAINER)
        .flat_map(|c| c.args.iter().flatten())
        .any(|arg| arg.starts_with(crate::pod::SENTINEL_SERVICE_ARG))
}

fn valkey_container(ctx: &Ctx<'_>, tls: bool) -> Container {
    let ports = ctx.ports;
    let probe_args = cli_args(ports.valkey, tls);
    let mut mounts = vec![
        mount(volume::ACTIVE_CONFIG, paths::ACTIVE_CONFIG_DIR, true),
        mount(volume::DATA, DATA_DIR, false),
    ];
    mounts.extend(tls_mount(tls));
    // Only the probes (exec'd in this container) read it; valkey-server ignores it. The copy in
    // the effective config's directory: the password this pod's server was last given.
    let env: Vec<EnvVar> = ctx
        .spec
        .auth_enabled()
        .then(|| env_value(PASSWORD_FILE_ENV, paths::ACTIVE_PASSWORD_FILE))
        .into_iter()
        .collect();
    Container {
        name: VALKEY_CONTAINER.to_owned(),
        image: Some(ctx.spec.image.clone()),
        command: Some(vec!["valkey-server".to_owned()]),
        args: Some(vec![paths::ACTIVE_CONFIG_FILE.to_owned()]),
        working_dir: Some(DATA_DIR.to_owned()),
        ports: Some(
            ports
                .valkey_ports()
                .into_iter()
                .map(|(name, port)| container_port(name, port))
                .collect(),
        ),
        env: (!env.is_empty()).then_some(env),
        resources: ctx.spec.resources.clone(),
        // Listening can take a while on a slow volume (up to 10 min); a long dataset load
        // afterwards is covered by the liveness probe accepting LOADING. Every second: readiness
        // waits for it and then for its own next period, so a restarted server (a single pod's
        // only copy, a pod of a roll) is routed to again ~5 s sooner than with 5 s here.
        startup_probe: Some(script_probe(
            ALIVE_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 0,
                period: 1,
                timeout: 3,
                failure_threshold: 600,
            },
        )),
        readiness_probe: Some(script_probe(
            READY_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 0,
                period: 5,
                timeout: 3,
                failure_threshold: 3,
            },
        )),
        liveness_probe: Some(script_probe(
            ALIVE_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 0,
                period: 10,
                timeout: 5,
                failure_threshold: 5,
            },
        )),
        // Keeps valkey-server up until the sidecar has handed the master role over (the
        // sidecar answers at once when there is nothing to hand over). HTTP, not a shell loop.
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                http_get: Some(HTTPGetAction {
                    path: Some("/drain".to_owned()),
                    port: IntOrString::Int(SIDECAR_HEALTH),
                    scheme: Some("HTTP".to_owned()),
                    ..HTTPGetAction::default()
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        }),
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

fn sidecar_container(ctx: &Ctx<'_>, tls: bool, tls_material_hash: Option<&str>) -> Container {
    let mut args = vec![
        "run".to_owned(),
        format!("--health-port={SIDECAR_HEALTH}"),
        format!("--active-config={}", paths::ACTIVE_CONFIG_FILE),
    ];
    args.extend(cluster_args(ctx));
    args.extend(tls_args(tls));
    let mut env = pod_identity_env();
    if tls && let Some(hash) = tls_material_hash {
        env.push(env_value(TLS_HASH_ENV, hash));
    }
    let mut mounts = vec![
        mount(volume::TOKEN, paths::SERVICE_ACCOUNT_DIR, true),
        mount(volume::CONFIG, paths::MASTER_CONFIG_DIR, true),
        mount(volume::REPLICA_CONFIG, paths::REPLICA_CONFIG_DIR, true),
        // Writable: the sidecar keeps the effective config true to the live role, so a
        // restarted valkey container does not boot as a stale master.
        mount(volume::ACTIVE_CONFIG, paths::ACTIVE_CONFIG_DIR, false),
    ];
    mounts.extend(tls_mount(tls));
    with_password_file(ctx, &mut env, &mut mounts);
    with_exporter_map(ctx, tls, &mut args, &mut env, &mut mounts);
    if exporter_auth(ctx) {
        args.push(format!("--exporter-port={}", ctx.spec.metrics_port()));
    }
    let resources = Some(operator_container_resources());
    Container {
        ports: Some(vec![container_port(port_names::HEALTH, SIDECAR_HEALTH)]),
        readiness_probe: Some(http_probe(
            "/readyz",
            SIDECAR_HEALTH,
            Timing {
                initial_delay: 3,
                period: 3,
                timeout: 2,
                failure_threshold: 3,
            },
        )),
        liveness_probe: Some(http_probe(
            "/healthz",
            SIDECAR_HEALTH,
            Timing {
                initial_delay: 5,
                period: 10,
                timeout: 2,
                failure_threshold: 5,
            },
        )),
        ..sidecar_binary_container(ctx, SIDECAR_CONTAINER, args, env, mounts, resources)
    }
}

fn exporter_container(ctx: &Ctx<'_>, tls: bool) -> Result<Container, RenderError> {
    let spec = ctx.spec;
    let port = spec.metrics_port();
    let extra_args = spec
        .metrics
        .as_ref()
        .and_then(|m| m.extra_args.clone())
        .unwrap_or_default();
    for (index, arg) in extra_args.iter().enumerate() {
        if arg.contains('\0') {
            return Err(RenderError::InvalidArgument {
                field: format!("spec.metrics.extraArgs[{index}]"),
            });
        }
    }
    let mut env = vec![];
    if tls {
        env.push(env_field("POD_NAME", "metadata.name"));
    }
    env.push(env_value("REDIS_ADDR", exporter_address(ctx, tls)));
    env.push(env_value(
        "REDIS_EXPORTER_WEB_LISTEN_ADDRESS",
        format!(":{port}"),
    ));
    // Never export key values (honoured: e2e operator_metrics).
    // REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT asks to turn off the multi-target /scrape endpoint,
    // but redis_exporter has no such option (checked in v1.74.0, which ignores it): /scrape stays
    // served for any target.
    env.push(env_value(
        "REDIS_EXPORTER_DISABLE_EXPORTING_KEY_VALUES",
        "true",
    ));
    env.push(env_value("REDIS_EXPORTER_DISABLE_SCRAPE_ENDPOINT", "true"));
    let mut mounts = Vec::new();
    if exporter_auth(ctx) {
        // Never REDIS_PASSWORD: redis_exporter would send it to any /scrape?target=. The password
        // map (written by the init from the auth Secret) holds it only under this pod's own
        // REDIS_ADDR, so every other target is dialled without a password (e2e operator_metrics).
        env.push(env_value(
            "REDIS_PASSWORD_FILE",
            paths::EXPORTER_PASSWORD_FILE,
        ));
        mounts.push(mount(volume::EXPORTER_AUTH, paths::EXPORTER_AUTH_DIR, true));
    }
    if tls {
        env.push(env_value("REDIS_EXPORTER_TLS_CA_CERT_FILE", TLS_CA_FILE));
        env.push(env_value(
            "REDIS_EXPORTER_TLS_CLIENT_CERT_FILE",
            TLS_CERT_FILE,
        ));
        env.push(env_value(
            "REDIS_EXPORTER_TLS_CLIENT_KEY_FILE",
            TLS_KEY_FILE,
        ));
        mounts.push(mount(volume::TLS, TLS_DIR, true));
    }
    Ok(Container {
        name: "exporter".to_owned(),
        image: Some(spec.metrics_image().to_owned()),
        // The image's own entrypoint; extraArgs reach it as argv elements, never via a shell.
        args: (!extra_args.is_empty()).then_some(extra_args),
        ports: Some(vec![container_port(port_names::METRICS, port)]),
        env: Some(env),
        resources: spec.metrics.as_ref().and_then(|m| m.resources.clone()),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    })
}

fn volumes(ctx: &Ctx<'_>, tls: Option<&TlsSecrets>) -> Vec<Volume> {
    let names = &ctx.names;
    let config_map = |name: &str, cm: String, optional: bool| Volume {
        name: name.to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: cm,
            // The replica config exists only with Sentinel or more than one pod; mounting it
            // optionally keeps the pod template (and its hash) the same at every size.
            optional: optional.then_some(true),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    };
    let mut volumes = vec![
        config_map(volume::CONFIG, names.config_map(), false),
        config_map(volume::REPLICA_CONFIG, names.replica_config_map(), true),
        // In memory: the effective config holds the password.
        secret_scratch_volume(volume::ACTIVE_CONFIG),
    ];
    if exporter_auth(ctx) {
        // In memory: the exporter's password map holds the password.
        volumes.push(secret_scratch_volume(volume::EXPORTER_AUTH));
    }
    volumes.extend(auth_volume(ctx));
    if !ctx.spec.persistence_enabled() {
        volumes.push(Volume {
            name: volume::DATA.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
    }
    if let Some(secrets) = tls {
        volumes.push(Volume {
            name: volume::TLS.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secrets.data.clone()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    volumes.push(Volume {
        name: volume::TOKEN.to_owned(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(3607),
                        audience: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            mode: None,
                        }]),
                        optional: None,
                    }),
                    ..VolumeProjection::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                field_path: "metadata.namespace".to_owned(),
                                api_version: None,
                            }),
                            ..DownwardAPIVolumeFile::default()
                        }]),
                    }),
                    ..VolumeProjection::default()
                },
            ]),
            default_mode: None,
        }),
        ..Volume::default()
    });
    volumes
}

fn claim_template(ctx: &Ctx<'_>) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(volume::DATA.to_owned()),
            // Selector labels only: claim templates are immutable, so nothing that can change
            // (like the version label) may appear here.
            labels: Some(ctx.selector(Component::Valkey)),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: ctx.spec.storage_class().map(str::to_owned),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    ctx.spec.persistence_size(),
                )])),
                limits: None,
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}
