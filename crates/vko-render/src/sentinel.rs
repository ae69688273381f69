//! The Sentinel StatefulSet `<name>-sentinel`: init container `init-sentinel`, container
//! `sentinel`, and with a Sentinel that reloads its certificate in place (ADR 0053) the
//! container `tls-reload`.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, ExecAction, Lifecycle, LifecycleHandler, SecretVolumeSource,
    Volume,
};

use crate::conf::{SENTINEL_CONF_KEY, TLS_ACTIVE_DIR};
use crate::labels::Component;
use crate::pod::{
    ALIVE_SCRIPT, SENTINEL_PRE_STOP_SCRIPT, TLS_HASH_ENV, Timing, auth_volume, cli_args,
    cluster_args, container_port, container_security_context, env_value, mount,
    operator_container_resources, password_file, paths, pod_identity_env, script_probe,
    sidecar_binary_container, tls_args,
};
use crate::pod::{secret_scratch_volume, tls_mount};
use crate::tier::{self, PodMetadata, Tier};
use crate::version::ValkeyVersion;
use crate::{Ctx, RenderError, TierHashes, TlsSecrets};

/// Sentinel keeps no state worth a handover; the Kubernetes default, above the preStop's 21 s.
pub const SENTINEL_TERMINATION_GRACE_SECONDS: i64 = 30;

/// The Sentinel pod's container that feeds a checked certificate to a Sentinel that reloads it
/// in place (ADR 0053).
pub const TLS_RELOAD_CONTAINER: &str = "tls-reload";

mod volume {
    pub const TEMPLATE: &str = "sentinel-template";
    pub const CONFIG: &str = "sentinel-config";
    pub const TLS: &str = "tls";
    pub const TLS_ACTIVE: &str = "tls-active";
}

/// The Sentinel StatefulSet and the hashes written into its pod template.
pub fn statefulset(
    ctx: &Ctx<'_>,
    tls: Option<&TlsSecrets>,
    tls_material_hash: Option<&str>,
    config_hash: &str,
) -> Result<(StatefulSet, TierHashes), RenderError> {
    let spec = ctx.spec;
    let names = &ctx.names;
    let sentinel_spec = spec.sentinel.as_ref();
    let metadata = PodMetadata::merge(
        ctx,
        Component::Sentinel,
        "spec.sentinel",
        sentinel_spec.and_then(|s| s.pod_labels.as_ref()),
        sentinel_spec.and_then(|s| s.pod_annotations.as_ref()),
        config_hash,
    )?;

    let mut volumes = vec![
        Volume {
            name: volume::TEMPLATE.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: names.sentinel_config_map(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        },
        // A directory, not a single-file mount: Sentinel rewrites its config by renaming
        // a temporary file next to it. In memory, because it holds auth-pass.
        secret_scratch_volume(volume::CONFIG),
    ];
    volumes.extend(auth_volume(ctx));
    if let Some(secrets) = tls {
        volumes.push(Volume {
            name: volume::TLS.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(
                    secrets
                        .sentinel
                        .clone()
                        .unwrap_or_else(|| secrets.data.clone()),
                ),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    // The TLS files this Sentinel serves, copied from the Secret volume by the init container
    // and afterwards only by `tls-reload`; in memory, as they hold the private key.
    let reloads = tls.is_some() && ValkeyVersion::sentinel_reloads_tls(spec);
    if reloads {
        volumes.push(secret_scratch_volume(volume::TLS_ACTIVE));
    }
    let mut containers = vec![sentinel_container(
        ctx,
        tls.is_some(),
        reloads,
        tls_material_hash,
    )];
    if reloads {
        containers.push(tls_reload_container(ctx, tls_material_hash));
    }

    let tier = Tier {
        component: Component::Sentinel,
        statefulset_name: names.sentinel_statefulset(),
        replicas: spec.sentinel_replicas(),
        headless_service: names.sentinel_headless_service(),
        metadata,
        // Sentinel pods never talk to the API server.
        service_account: None,
        termination_grace_seconds: SENTINEL_TERMINATION_GRACE_SECONDS,
        anti_affinity: spec.needs_sentinel_anti_affinity(),
        init_container: init_container(ctx, tls.is_some(), reloads),
        containers,
        volumes,
        volume_claim_templates: None,
    };
    tier::statefulset(ctx, tier, config_hash)
}

fn init_container(ctx: &Ctx<'_>, tls: bool, reloads: bool) -> Container {
    let mut args = vec![
        "sentinel-init".to_owned(),
        format!(
            "--template={}/{SENTINEL_CONF_KEY}",
            paths::SENTINEL_TEMPLATE_DIR
        ),
        format!("--output={}", paths::SENTINEL_CONFIG_FILE),
    ];
    args.extend(cluster_args(ctx));
    args.extend(tls_args(tls));
    let mut env = pod_identity_env();
    let mut mounts = vec![
        mount(volume::TEMPLATE, paths::SENTINEL_TEMPLATE_DIR, true),
        mount(volume::CONFIG, paths::SENTINEL_CONFIG_DIR, false),
    ];
    mounts.extend(tls_mount(tls));
    if reloads {
        args.push(format!("--tls-active-dir={TLS_ACTIVE_DIR}"));
        mounts.push(mount(volume::TLS_ACTIVE, TLS_ACTIVE_DIR, false));
    }
    if let Some((var, auth_mount)) = password_file(ctx) {
        env.push(var);
        mounts.push(auth_mount);
    }
    let resources = ctx.spec.sentinel_resources().cloned();
    sidecar_binary_container(ctx, "init-sentinel", args, env, mounts, resources)
}

/// `vko-sidecar sentinel-tls-reload`: copies a new certificate and key from the Secret volume
/// into the Sentinel's files once they pass the same checks a data pod's sidecar makes before
/// its server reloads (same CA as the template, issued by it, valid, naming this pod), then
/// proves with a handshake that the Sentinel serves them. It reads files and dials the own
/// Sentinel only: no API access, no password.
fn tls_reload_container(ctx: &Ctx<'_>, tls_material_hash: Option<&str>) -> Container {
    let mut args = vec![
        "sentinel-tls-reload".to_owned(),
        format!("--tls-active-dir={TLS_ACTIVE_DIR}"),
    ];
    args.extend(cluster_args(ctx));
    args.extend(tls_args(true));
    let mut env = pod_identity_env();
    if let Some(hash) = tls_material_hash {
        env.push(env_value(TLS_HASH_ENV, hash));
    }
    let mut mounts = vec![mount(volume::TLS_ACTIVE, TLS_ACTIVE_DIR, false)];
    mounts.extend(tls_mount(true));
    let resources = Some(operator_container_resources());
    sidecar_binary_container(ctx, TLS_RELOAD_CONTAINER, args, env, mounts, resources)
}

fn sentinel_container(
    ctx: &Ctx<'_>,
    tls: bool,
    reloads: bool,
    tls_material_hash: Option<&str>,
) -> Container {
    let ports = ctx.ports;
    let probe_args = cli_args(ports.sentinel, tls);
    let mut env = Vec::new();
    let mut mounts = vec![mount(volume::CONFIG, paths::SENTINEL_CONFIG_DIR, false)];
    // The probes and the preStop still present the Secret volume's files (as clients).
    mounts.extend(tls_mount(tls));
    if reloads {
        mounts.push(mount(volume::TLS_ACTIVE, TLS_ACTIVE_DIR, true));
    }
    // The probes and the preStop send the password only to a Sentinel that requires one.
    if !ctx.spec.sentinel_auth_disabled()
        && let Some((var, auth_mount)) = password_file(ctx)
    {
        env.push(var);
        mounts.push(auth_mount);
    }
    if tls && let Some(hash) = tls_material_hash {
        env.push(env_value(TLS_HASH_ENV, hash));
    }
    Container {
        name: "sentinel".to_owned(),
        image: Some(ctx.spec.image.clone()),
        command: Some(vec!["valkey-sentinel".to_owned()]),
        args: Some(vec![paths::SENTINEL_CONFIG_FILE.to_owned()]),
        working_dir: Some(paths::SENTINEL_CONFIG_DIR.to_owned()),
        ports: Some(
            ports
                .sentinel_ports()
                .into_iter()
                .map(|(name, port)| container_port(name, port))
                .collect(),
        ),
        env: (!env.is_empty()).then_some(env),
        resources: ctx.spec.sentinel_resources().cloned(),
        // An authentication refusal counts as ready too: Sentinel has no dataset to load, and
        // its probes read the Secret volume, which an emptied Secret or a rotation the kubelet
        // has not delivered yet would otherwise turn into an empty Sentinel Service.
        readiness_probe: Some(script_probe(
            ALIVE_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 5,
                period: 5,
                timeout: 3,
                failure_threshold: 3,
            },
        )),
        liveness_probe: Some(script_probe(
            ALIVE_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 15,
                period: 10,
                timeout: 5,
                failure_threshold: 5,
            },
        )),
        lifecycle: Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                exec: Some(ExecAction {
                    command: Some(sentinel_pre_stop_command(ctx.names.name(), &probe_args)),
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

/// `sh -c SENTINEL_PRE_STOP_SCRIPT pre-stop <master name> <valkey-cli args...>`: every value a
/// positional argument, none parsed by the shell.
fn sentinel_pre_stop_command(master_name: &str, cli_args: &[String]) -> Vec<String> {
    let mut command = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        SENTINEL_PRE_STOP_SCRIPT.to_owned(),
        "pre-stop".to_owned(),
        master_name.to_owned(),
    ];
    command.extend(cli_args.iter().cloned());
    command
}
