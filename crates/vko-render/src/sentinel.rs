//! The Sentinel StatefulSet `<name>-sentinel`: init container `init-sentinel`, container
//! `sentinel`.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    ConfigMapVolumeSource, Container, EmptyDirVolumeSource, PodSpec, PodTemplateSpec,
    SecretVolumeSource, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::conf::{SENTINEL_CONF_KEY, TLS_DIR};
use crate::data::{VALKEY_UID, anti_affinity};
use crate::hash::pod_spec_hash;
use crate::labels::{
    CONFIG_HASH_ANNOTATION, Component, POD_SPEC_HASH_ANNOTATION, merge_user_annotations,
    merge_user_labels,
};
use crate::pod::{
    CLI_AUTH_ENV, PASSWORD_ENV, READY_SCRIPT, SIDECAR_BINARY, TLS_HASH_ENV, Timing, cli_args,
    cluster_args, container_port, container_security_context, env_value, mount, password_env,
    paths, pod_identity_env, pod_security_context, script_probe, tls_args,
};
use crate::{Ctx, RenderError, TierHashes, TlsSecrets};

/// Sentinel keeps no state worth a handover; the Kubernetes default.
pub const SENTINEL_TERMINATION_GRACE_SECONDS: i64 = 30;

mod volume {
    pub const TEMPLATE: &str = "sentinel-template";
    pub const CONFIG: &str = "sentinel-config";
    pub const TLS: &str = "tls";
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
    let pod_labels = merge_user_labels(
        "spec.sentinel.podLabels",
        sentinel_spec.and_then(|s| s.pod_labels.as_ref()),
        ctx.labels(Component::Sentinel),
    )?;
    let pod_annotations = merge_user_annotations(
        "spec.sentinel.podAnnotations",
        sentinel_spec.and_then(|s| s.pod_annotations.as_ref()),
        BTreeMap::from([(CONFIG_HASH_ANNOTATION.to_owned(), config_hash.to_owned())]),
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
        Volume {
            // A directory, not a single-file mount: Sentinel rewrites its config by renaming
            // a temporary file next to it. In memory, because it holds auth-pass.
            name: volume::CONFIG.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource {
                medium: Some("Memory".to_owned()),
                size_limit: Some(Quantity("1Mi".to_owned())),
            }),
            ..Volume::default()
        },
    ];
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

    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(pod_labels),
            annotations: Some(pod_annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            // The namespace's default ServiceAccount without a token: Sentinel pods never talk
            // to the API server.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(SENTINEL_TERMINATION_GRACE_SECONDS),
            security_context: Some(pod_security_context(VALKEY_UID)),
            affinity: spec
                .needs_sentinel_anti_affinity()
                .then(|| anti_affinity(ctx, Component::Sentinel)),
            init_containers: Some(vec![init_container(ctx, tls.is_some())]),
            containers: vec![sentinel_container(ctx, tls.is_some(), tls_material_hash)],
            volumes: Some(volumes),
            ..PodSpec::default()
        }),
    };
    let pod_spec = pod_spec_hash(&template)?;
    if let Some(annotations) = template
        .metadata
        .as_mut()
        .and_then(|m| m.annotations.as_mut())
    {
        annotations.insert(POD_SPEC_HASH_ANNOTATION.to_owned(), pod_spec.clone());
    }

    let statefulset = StatefulSet {
        metadata: ctx.meta(
            names.sentinel_statefulset(),
            ctx.labels(Component::Sentinel),
        ),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.sentinel_replicas()),
            service_name: Some(names.sentinel_headless_service()),
            pod_management_policy: Some("Parallel".to_owned()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(ctx.selector(Component::Sentinel)),
                match_expressions: None,
            },
            template,
            ..StatefulSetSpec::default()
        }),
        status: None,
    };
    Ok((
        statefulset,
        TierHashes {
            config: config_hash.to_owned(),
            pod_spec,
        },
    ))
}

fn init_container(ctx: &Ctx<'_>, tls: bool) -> Container {
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
    if ctx.spec.sentinel_auth_disabled() {
        // Sentinel itself accepts clients without a password; auth-pass is still written.
        args.push("--sentinel-auth-disabled".to_owned());
    }
    let mut env = pod_identity_env();
    env.extend(password_env(ctx, PASSWORD_ENV));
    let mut mounts = vec![
        mount(volume::TEMPLATE, paths::SENTINEL_TEMPLATE_DIR, true),
        mount(volume::CONFIG, paths::SENTINEL_CONFIG_DIR, false),
    ];
    if tls {
        mounts.push(mount(volume::TLS, TLS_DIR, true));
    }
    Container {
        name: "init-sentinel".to_owned(),
        image: Some(ctx.inputs.operator_image.clone()),
        command: Some(vec![SIDECAR_BINARY.to_owned()]),
        args: Some(args),
        env: Some(env),
        resources: ctx.spec.sentinel_resources().cloned(),
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}

fn sentinel_container(ctx: &Ctx<'_>, tls: bool, tls_material_hash: Option<&str>) -> Container {
    let ports = ctx.ports;
    let probe_args = cli_args(ports.sentinel, tls);
    let mut env = Vec::new();
    if !ctx.spec.sentinel_auth_disabled() {
        env.extend(password_env(ctx, CLI_AUTH_ENV));
    }
    if tls && let Some(hash) = tls_material_hash {
        env.push(env_value(TLS_HASH_ENV, hash));
    }
    let mut mounts = vec![mount(volume::CONFIG, paths::SENTINEL_CONFIG_DIR, false)];
    if tls {
        mounts.push(mount(volume::TLS, TLS_DIR, true));
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
        readiness_probe: Some(script_probe(
            READY_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 5,
                period: 5,
                timeout: 3,
                failure_threshold: 3,
            },
        )),
        liveness_probe: Some(script_probe(
            READY_SCRIPT,
            &probe_args,
            Timing {
                initial_delay: 15,
                period: 10,
                timeout: 5,
                failure_threshold: 5,
            },
        )),
        volume_mounts: Some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    }
}
