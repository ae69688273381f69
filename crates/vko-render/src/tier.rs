//! What the data and the Sentinel StatefulSets share: the pod metadata (the user's labels and
//! annotations merged under the operator's, the config hash), the pod-spec settings both tiers
//! take, the pod-spec hash annotation and the StatefulSet around the template (parallel pod
//! management, `OnDelete`: the operator replaces pods itself, one at a time, failover-aware).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec, StatefulSetUpdateStrategy};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::data::{VALKEY_UID, anti_affinity};
use crate::hash::pod_spec_hash;
use crate::labels::{
    CONFIG_HASH_ANNOTATION, Component, Labels, POD_SPEC_HASH_ANNOTATION, merge_user_annotations,
    merge_user_labels,
};
use crate::pod::pod_security_context;
use crate::{Ctx, RenderError, TierHashes};

/// The labels and annotations of one tier's pods: the user's (`<field>.podLabels`,
/// `<field>.podAnnotations`) merged under the operator's, and the tier's config hash.
pub(crate) struct PodMetadata {
    labels: Labels,
    annotations: Labels,
}

impl PodMetadata {
    /// `field` is where the user's maps stand in the spec (`spec`, `spec.sentinel`).
    pub(crate) fn merge(
        ctx: &Ctx<'_>,
        component: Component,
        field: &str,
        user_labels: Option<&Labels>,
        user_annotations: Option<&Labels>,
        config_hash: &str,
    ) -> Result<PodMetadata, RenderError> {
        Ok(PodMetadata {
            labels: merge_user_labels(
                &format!("{field}.podLabels"),
                user_labels,
                ctx.labels(component),
            )?,
            annotations: merge_user_annotations(
                &format!("{field}.podAnnotations"),
                user_annotations,
                BTreeMap::from([(CONFIG_HASH_ANNOTATION.to_owned(), config_hash.to_owned())]),
            )?,
        })
    }
}

/// What differs between the two tiers' StatefulSets.
pub(crate) struct Tier {
    /// Its labels, selector and anti-affinity.
    pub(crate) component: Component,
    pub(crate) statefulset_name: String,
    pub(crate) replicas: i32,
    /// The governing headless Service.
    pub(crate) headless_service: String,
    pub(crate) metadata: PodMetadata,
    /// `None`: the namespace's default ServiceAccount (its token is not mounted either way).
    pub(crate) service_account: Option<String>,
    pub(crate) termination_grace_seconds: i64,
    /// Spread the tier's pods ([`anti_affinity`]).
    pub(crate) anti_affinity: bool,
    /// The one init container.
    pub(crate) init_container: Container,
    pub(crate) containers: Vec<Container>,
    pub(crate) volumes: Vec<Volume>,
    /// The data tier's claims with persistence; `None` otherwise.
    pub(crate) volume_claim_templates: Option<Vec<PersistentVolumeClaim>>,
}

/// One tier's StatefulSet and the hashes written into its pod template.
pub(crate) fn statefulset(
    ctx: &Ctx<'_>,
    tier: Tier,
    config_hash: &str,
) -> Result<(StatefulSet, TierHashes), RenderError> {
    let mut template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(tier.metadata.labels),
            annotations: Some(tier.metadata.annotations),
            ..ObjectMeta::default()
        }),
        spec: Some(PodSpec {
            service_account_name: tier.service_account,
            // A token is only ever projected where a container needs one (the data pods'
            // sidecar); valkey, sentinel, exporter and the inits hold none.
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(tier.termination_grace_seconds),
            security_context: Some(pod_security_context(VALKEY_UID)),
            affinity: tier
                .anti_affinity
                .then(|| anti_affinity(ctx, tier.component)),
            init_containers: Some(vec![tier.init_container]),
            containers: tier.containers,
            volumes: Some(tier.volumes),
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
        metadata: ctx.meta(tier.statefulset_name, ctx.labels(tier.component)),
        spec: Some(StatefulSetSpec {
            replicas: Some(tier.replicas),
            service_name: Some(tier.headless_service),
            pod_management_policy: Some("Parallel".to_owned()),
            // The operator replaces pods itself, one at a time, failover-aware.
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some("OnDelete".to_owned()),
                rolling_update: None,
            }),
            selector: LabelSelector {
                match_labels: Some(ctx.selector(tier.component)),
                match_expressions: None,
            },
            template,
            volume_claim_templates: tier.volume_claim_templates,
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
