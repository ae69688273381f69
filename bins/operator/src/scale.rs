//! Scaling, wired (ADR 0024): the data StatefulSet's count for this pass
//! ([`vko_roll::scale::data_replicas`]) and the one `SENTINEL RESET` that makes the Sentinels
//! forget what a scale-down removed ([`vko_roll::scale::sentinel_to_reset`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use vko_authority::ordinal_of;
use vko_render::Names;
use vko_roll::scale::{ResetCause, ResetPlan, SentinelAnswerView, SentinelMemory, SentinelReset};
use vko_valkey::Dialer;
use vko_valkey::switchover::Address;

use crate::dataplane::{self, SentinelPodAnswer};
use crate::error::Error;
use crate::leader::Leadership;

/// The Sentinel to reset this pass, from the pass's probe round.
pub fn sentinel_to_reset(
    names: &Names,
    sentinels: u32,
    data_replicas: u32,
    answers: &[SentinelPodAnswer],
    sentinel_pods: &[Arc<Pod>],
    data_pods: &BTreeMap<u32, Arc<Pod>>,
) -> ResetPlan {
    let name = names.name();
    let sentinel_sts = names.sentinel_statefulset();
    let views: Vec<SentinelAnswerView> = sentinel_pods
        .iter()
        .filter_map(|pod| {
            let pod_name = pod.metadata.name.as_deref()?;
            let ordinal = ordinal_of(&sentinel_sts, pod_name)?;
            let answer = answers
                .iter()
                .find(|a| a.pod == pod_name)
                .and_then(|a| a.answer.as_ref())
                .map(|a| SentinelMemory {
                    master: ordinal_of(name, &a.master).filter(|_| !a.master_down),
                    other_sentinels: a.other_sentinels,
                    replicas: a
                        .listed_replicas
                        .iter()
                        .filter_map(|host| ordinal_of(name, host))
                        .collect(),
                });
            Some(SentinelAnswerView {
                ordinal,
                ready: dataplane::pod_is_ready(pod),
                answer,
            })
        })
        .collect();
    let data: Vec<u32> = data_pods.keys().copied().collect();
    vko_roll::scale::sentinel_to_reset(sentinels, &views, &data, data_replicas)
}

/// What the Event says about a reset.
pub fn describe(names: &Names, reset: &SentinelReset) -> String {
    let pod = format!("{}-{}", names.sentinel_statefulset(), reset.ordinal);
    match &reset.cause {
        ResetCause::StalePeers { knows, expected } => format!(
            "SENTINEL RESET on {pod}: it knew {knows} other Sentinels, the cluster has {expected} \
             (a Sentinel scale-down); it rediscovers the live ones"
        ),
        ResetCause::RemovedReplicas(ordinals) => {
            let removed: Vec<String> = ordinals.iter().map(|o| names.data_pod(*o)).collect();
            format!(
                "SENTINEL RESET on {pod}: it still listed the removed replicas {} (a data \
                 scale-down); it rediscovers the live ones",
                removed.join(", ")
            )
        }
    }
}

/// Sends `SENTINEL RESET <name>` to the one Sentinel.
pub async fn reset(
    dialer: &Dialer,
    names: &Names,
    sentinel_port: u16,
    reset: &SentinelReset,
    leadership: &Leadership,
) -> Result<(), Error> {
    let pod = format!("{}-{}", names.sentinel_statefulset(), reset.ordinal);
    let at = Address::new(names.sentinel_pod_fqdn(reset.ordinal), sentinel_port);
    let data_plane = |action, source| Error::DataPlane {
        action,
        pod: pod.clone(),
        source,
    };
    let client = dialer
        .sentinel(&at)
        .await
        .map_err(|e| data_plane("connect", e))?;
    if let Err(refused) = leadership.check("SENTINEL RESET") {
        client.close().await;
        return Err(refused);
    }
    let result = client.reset(names.name()).await;
    client.close().await;
    result.map_err(|e| data_plane("SENTINEL RESET", e))?;
    Ok(())
}
