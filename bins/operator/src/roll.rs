//! The rolling update, driven: builds `vko-roll`'s [`World`] from the stores (pods, the
//! StatefulSets' template hashes) and from the pass's one probe round of every data pod and
//! Sentinel ([`crate::dataplane::PlaneAnswers`]), runs
//! [`vko_roll::next`], executes its one action (delete a pod with a UID precondition, or the
//! lossless [`vko_valkey::switchover`]) and hands back what the status step records.
//!
//! Pods are dialled by IP (the operator needs no cluster DNS) and named by their FQDNs, which
//! is what `REPLICAOF` and Sentinel see (no IP ever enters a server's configuration).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use vko_api::{ConditionType, Valkey};
use vko_authority::{Electorate, SentinelReport, ordinal_of};
use vko_render::{Names, POD_SPEC_HASH_ANNOTATION};
use vko_roll::{
    Action, DataPod, DataTier, Decision, Millis, RollState, SentinelPod, SentinelTier,
    SentinelView, SwitchoverKind, Terminating, Tier, World,
};
use vko_valkey::switchover::{self, Address, Dial, Outcome, Promoter};
use vko_valkey::{Dialer, SentinelClient, ValkeyClient};

use crate::dataplane::{self, PlaneAnswers};
use crate::error::Error;
use crate::leader::Leadership;
use crate::stores::Stores;

/// Requeue while a roll is in flight: the machine moves one step per pass.
pub const ROLL_REQUEUE: Duration = Duration::from_millis(1500);
/// How long a pass waits for its own pod deletion to show in the pod store, so that the next
/// pass never sees the deleted pod as still running (and deletes a second one).
const STORE_CATCH_UP: Duration = Duration::from_secs(10);

/// What one roll step produced, for the status step.
#[derive(Debug)]
pub struct RollStep {
    pub decision: Decision,
    /// The master recorded without Sentinel after a promotion in this pass.
    pub promoted: Option<u32>,
    /// When to look again.
    pub requeue: Option<Duration>,
    /// The action failed (the recorded state still counts the attempt; the machine retries or
    /// pauses by its own bounds).
    pub failure: Option<Error>,
}

/// Everything one step needs from the pass.
pub struct RollInputs<'a> {
    pub client: &'a kube::Client,
    pub stores: &'a Stores,
    pub valkey: &'a Valkey,
    pub namespace: &'a str,
    pub names: &'a Names,
    /// Reaches the pods by IP (`dataplane::by_pod_ip`).
    pub dialer: &'a Dialer,
    pub valkey_port: u16,
    pub sentinel_port: u16,
    /// This pass's probe round.
    pub answers: &'a PlaneAnswers,
    pub data_pods: &'a BTreeMap<u32, Arc<Pod>>,
    pub sentinel_pods: &'a [Arc<Pod>],
    /// Without Sentinel: `status.masterPod` as an ordinal (ADR 0005).
    pub recorded_master: Option<u32>,
    /// The data pod template this pass rendered (what the StatefulSet carries once applied), and
    /// the operator image in it: to tell a sidecar-image-only change on a single pod.
    pub rendered_data_template: Option<&'a PodTemplateSpec>,
    pub operator_image: &'a str,
    /// Asked right before every deletion and command (a leader past its renew deadline stops).
    pub leadership: &'a Leadership,
}

pub fn now() -> Millis {
    Millis(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    )
}

/// The recorded state from the status (`None`/unreadable = not rolling).
pub fn recorded_state(valkey: &Valkey) -> RollState {
    valkey
        .status
        .as_ref()
        .and_then(|status| status.rolling_update.as_ref())
        .and_then(|recorded| serde_json::to_value(recorded).ok())
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_default()
}

fn template_hash_of_statefulset(statefulset: Option<&StatefulSet>) -> Option<String> {
    statefulset?
        .spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(POD_SPEC_HASH_ANNOTATION)
        .cloned()
}

fn template_hash_of_pod(pod: &Pod) -> String {
    pod.annotations()
        .get(POD_SPEC_HASH_ANNOTATION)
        .cloned()
        .unwrap_or_default()
}

fn millis(time: Option<&Time>) -> Millis {
    time.map(|t| Millis(u64::try_from(t.0.as_millisecond()).unwrap_or(0)))
        .unwrap_or_default()
}

fn terminating(pod: &Pod) -> Option<Terminating> {
    let deadline = millis(pod.metadata.deletion_timestamp.as_ref());
    pod.metadata.deletion_timestamp.as_ref()?;
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    let grace_ms = u64::try_from(grace).unwrap_or(0).saturating_mul(1000);
    Some(Terminating {
        since: Millis(deadline.0.saturating_sub(grace_ms)),
        grace_deadline: deadline,
    })
}

/// A single data pod whose template differs from the target only in the operator (sidecar)
/// image: the reference defers that change (SidecarUpdatePending) rather than restart the only
/// pod. Decided on the rendered template, since the hashes are computed on it.
fn sidecar_only_change(inputs: &RollInputs<'_>, target_hash: &str) -> bool {
    let pods: Vec<&Arc<Pod>> = inputs.data_pods.values().collect();
    let (Some(template), [pod]) = (inputs.rendered_data_template, pods.as_slice()) else {
        return false;
    };
    let pod_hash = template_hash_of_pod(pod);
    if pod_hash == target_hash {
        return false;
    }
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let init = spec.init_containers.iter().flatten();
    let running: BTreeMap<String, String> = spec
        .containers
        .iter()
        .chain(init)
        .filter_map(|c| Some((c.name.clone(), c.image.clone()?)))
        .collect();
    vko_render::differs_only_in_operator_image(template, inputs.operator_image, &running, &pod_hash)
}

/// Whether a roll could be in flight or due: something recorded, or a pod that does not carry
/// its StatefulSet's template. Cheap (stores only), so the pass skips the probes otherwise.
pub fn wanted(inputs: &RollInputs<'_>) -> bool {
    if recorded_state(inputs.valkey) != RollState::default() {
        return true;
    }
    // A condition the roll set stays until a pass of the machine clears it (e.g.
    // SidecarUpdatePending once the pod was restarted by someone else).
    let roll_conditions = [
        ConditionType::RollingUpdatePaused,
        ConditionType::SidecarUpdatePending,
        ConditionType::SentinelUpdatePending,
        ConditionType::PodTerminationStalled,
        ConditionType::PodRecreationStalled,
        ConditionType::MultipleMasters,
    ];
    let standing = inputs
        .valkey
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.status == "True"
                    && roll_conditions
                        .iter()
                        .any(|t| t.as_str() == c.type_.as_str())
            })
        });
    if standing {
        return true;
    }
    // A scale-down in progress: pods above spec.replicas still exist, one may be the master
    // (switched over first, ADR 0024).
    let replicas = inputs.valkey.spec.replicas_u32();
    if inputs.data_pods.keys().any(|ordinal| *ordinal >= replicas) {
        return true;
    }
    let data_target = template_hash_of_statefulset(
        inputs
            .stores
            .statefulset(inputs.namespace, &inputs.names.data_statefulset())
            .as_deref(),
    );
    let sentinel_target = template_hash_of_statefulset(
        inputs
            .stores
            .statefulset(inputs.namespace, &inputs.names.sentinel_statefulset())
            .as_deref(),
    );
    let outdated = |pods: Vec<&Arc<Pod>>, target: &Option<String>| {
        target
            .as_ref()
            .is_some_and(|target| pods.iter().any(|pod| template_hash_of_pod(pod) != *target))
    };
    outdated(inputs.data_pods.values().collect(), &data_target)
        || (inputs.valkey.spec.sentinel_enabled()
            && outdated(inputs.sentinel_pods.iter().collect(), &sentinel_target))
}

/// The pass's [`Dialer`] with the leader gate: the switchover asks it before each step it cannot
/// take back (ADR 0017).
struct FencedDial<'a> {
    dialer: &'a Dialer,
    leadership: &'a Leadership,
    /// Without Sentinel: (client, namespace, Lease name) of the master Lease, moved to the
    /// target right before its promotion (ADR 0022).
    master_lease: Option<(&'a kube::Client, &'a str, String)>,
}

impl Dial for FencedDial<'_> {
    async fn valkey(&self, at: &Address) -> vko_valkey::Result<ValkeyClient> {
        self.dialer.valkey(at).await
    }

    async fn sentinel(&self, at: &Address) -> vko_valkey::Result<SentinelClient> {
        self.dialer.sentinel(at).await
    }

    fn may_proceed(&self, step: &'static str) -> Result<(), String> {
        self.leadership
            .check(step)
            .map_err(|refused| refused.to_string())
    }

    async fn before_promote(&self, target: &Address) -> Result<(), String> {
        let Some((client, namespace, lease)) = &self.master_lease else {
            return Ok(());
        };
        let pod = target.host.split('.').next().unwrap_or_default();
        crate::master_lease::move_to(client, namespace, lease, pod, self.leadership)
            .await
            .map_err(|e| e.to_string())
    }
}

/// The machine's [`SentinelView`]: the master authority's verdict over every Sentinel of the
/// tier (ADR 0014), counted in `u32`.
/// `sentinels` is `spec.sentinel.replicas`: an answer that knows more Sentinels than that
/// remembers removed peers (`stale_peers`).
fn sentinel_view(
    electorate: Electorate,
    sentinels: usize,
    answers: &[Option<SentinelReport>],
) -> SentinelView {
    let verdict = vko_authority::sentinel_view(electorate, answers);
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    SentinelView {
        answered: count(verdict.answered),
        master: verdict.master,
        agreeing: count(verdict.agreeing),
        known_replicas: verdict.known_replicas,
        stale_peers: answers
            .iter()
            .flatten()
            .any(|report| report.known_sentinels > sentinels),
    }
}

/// The world of one `Valkey` as the stores and the probe round show it.
pub fn world(inputs: &RollInputs<'_>) -> Option<World> {
    let spec = &inputs.valkey.spec;
    let names = inputs.names;
    let name = names.name();
    let data_sts = names.data_statefulset();
    let target_hash = template_hash_of_statefulset(
        inputs
            .stores
            .statefulset(inputs.namespace, &data_sts)
            .as_deref(),
    )?;
    let pods = inputs
        .data_pods
        .iter()
        .map(|(ordinal, pod)| DataPod {
            ordinal: *ordinal,
            name: pod.name_any(),
            created_at: millis(pod.metadata.creation_timestamp.as_ref()),
            template_hash: template_hash_of_pod(pod),
            ready: dataplane::pod_is_ready(pod),
            terminating: terminating(pod),
            server: inputs
                .answers
                .data
                .get(ordinal)
                .map_or(vko_roll::Server::Unreachable, |answer| {
                    dataplane::server(name, answer)
                }),
        })
        .collect();
    let sentinel = if spec.sentinel_enabled() {
        let sentinel_sts = names.sentinel_statefulset();
        let target_hash = template_hash_of_statefulset(
            inputs
                .stores
                .statefulset(inputs.namespace, &sentinel_sts)
                .as_deref(),
        )?;
        let answered: BTreeMap<&str, Option<SentinelReport>> = inputs
            .answers
            .sentinels
            .iter()
            .map(|s| (s.pod.as_str(), s.answer.as_ref().map(|a| a.report(name))))
            .collect();
        let pods: Vec<(u32, &Arc<Pod>)> = inputs
            .sentinel_pods
            .iter()
            .filter_map(|pod| Some((ordinal_of(&sentinel_sts, &pod.name_any())?, pod)))
            .collect();
        let answers: Vec<Option<SentinelReport>> = pods
            .iter()
            .map(|(_, pod)| answered.get(pod.name_any().as_str()).cloned().flatten())
            .collect();
        Some(SentinelTier {
            statefulset: sentinel_sts,
            replicas: spec.sentinel_replicas_u32(),
            quorum: spec.sentinel_quorum_u32(),
            target_hash,
            pods: pods
                .iter()
                .map(|(ordinal, pod)| SentinelPod {
                    ordinal: *ordinal,
                    name: pod.name_any(),
                    created_at: millis(pod.metadata.creation_timestamp.as_ref()),
                    template_hash: template_hash_of_pod(pod),
                    ready: dataplane::pod_is_ready(pod),
                    terminating: terminating(pod),
                })
                .collect(),
            view: sentinel_view(
                Electorate::new(spec.sentinel_replicas_u32() as usize, pods.len()),
                spec.sentinel_replicas_u32() as usize,
                &answers,
            ),
        })
    } else {
        None
    };
    let sidecar_only_change = sidecar_only_change(inputs, &target_hash);
    Some(World {
        data: DataTier {
            statefulset: data_sts,
            replicas: spec.replicas_u32(),
            target_hash,
            sidecar_only_change,
            recorded_master: if spec.sentinel_enabled() {
                None
            } else {
                inputs.recorded_master
            },
            pods,
        },
        sentinel,
        sync_timeout_ms: spec
            .sync_timeout()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(5 * 60 * 1000),
        persistence: spec.persistence_enabled(),
    })
}

/// Deletes `pod` only if it is still the object with `uid`, then waits until the pod store
/// shows it terminating or gone.
async fn delete_pod(inputs: &RollInputs<'_>, pod: &Pod) -> Result<(), Error> {
    let pod_name = pod.name_any();
    let uid = pod.uid().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(inputs.client.clone(), inputs.namespace);
    inputs.leadership.check("pod deletion")?;
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&pod_name, &params).await {
        Ok(_) => {}
        // Gone already, or replaced (UID precondition failed): nothing of ours to delete.
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
            tracing::info!(pod = %pod_name, code = status.code, "roll: pod already gone or replaced");
        }
        Err(error) => {
            return Err(Error::WriteFailed {
                kind: "Pod".into(),
                name: pod_name,
                message: error.to_string(),
            });
        }
    }
    let deadline = tokio::time::Instant::now() + STORE_CATCH_UP;
    while tokio::time::Instant::now() < deadline {
        let seen = inputs
            .stores
            .cluster_pods(inputs.namespace, inputs.names.name())
            .into_iter()
            .find(|p| p.name_any() == pod_name);
        let caught_up = seen.is_none_or(|p| {
            p.metadata.deletion_timestamp.is_some() || p.uid().as_deref() != Some(uid.as_str())
        });
        if caught_up {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::warn!(pod = %pod_name, "roll: the pod store has not shown the deletion yet");
    Ok(())
}

fn pod_in<'p>(pods: impl Iterator<Item = &'p Arc<Pod>>, name: &str) -> Option<&'p Arc<Pod>> {
    pods.into_iter().find(|p| p.name_any() == name)
}

/// Runs one roll step: observe, decide, execute. `None` when nothing is (or may be) rolling.
pub async fn step(inputs: &RollInputs<'_>) -> Option<RollStep> {
    if !wanted(inputs) {
        return None;
    }
    let dial = &FencedDial {
        dialer: inputs.dialer,
        leadership: inputs.leadership,
        master_lease: (!inputs.valkey.spec.sentinel_enabled()).then(|| {
            (
                inputs.client,
                inputs.namespace,
                vko_authority::master_lease_name(inputs.names.name()),
            )
        }),
    };
    let recorded = recorded_state(inputs.valkey);
    let Some(world) = world(inputs) else {
        if recorded != RollState::default() {
            tracing::info!(
                namespace = inputs.namespace,
                name = inputs.names.name(),
                "roll: a StatefulSet's template hash is not in the store; the recorded roll stands"
            );
        }
        return None;
    };
    let now = now();
    let decision = vko_roll::next(&world, &recorded, now);
    let name = inputs.names.name();
    if !matches!(decision.action, Action::Idle) {
        tracing::info!(namespace = inputs.namespace, %name, action = ?decision.action, summary = %decision.summary, "roll step");
    }
    let mut promoted = None;
    let executed: Result<Option<Duration>, Error> = async {
    Ok(match &decision.action {
        Action::Idle => None,
        Action::Done => Some(ROLL_REQUEUE),
        Action::Wait { deadline, .. } => Some(
            Duration::from_millis(deadline.since(now).max(200)).min(ROLL_REQUEUE),
        ),
        Action::Pause { .. } => Some(Duration::from_secs(10)),
        Action::DeletePod { tier, pod, .. } => {
            let pods: Box<dyn Iterator<Item = &Arc<Pod>>> = match tier {
                Tier::Data => Box::new(inputs.data_pods.values()),
                Tier::Sentinel => Box::new(inputs.sentinel_pods.iter()),
            };
            if let Some(object) = pod_in(pods, pod) {
                delete_pod(inputs, object).await?;
            }
            Some(ROLL_REQUEUE)
        }
        Action::RestartInPlace { pod, loses_data, .. } => {
            if *loses_data {
                tracing::warn!(namespace = inputs.namespace, %name, %pod, "roll: restarting the only pod in place; without persistence its data is lost");
            }
            if let Some(object) = pod_in(inputs.data_pods.values(), pod) {
                delete_pod(inputs, object).await?;
            }
            Some(ROLL_REQUEUE)
        }
        Action::Switchover {
            from,
            from_pod,
            to,
            kind,
            ..
        } => {
            let port = inputs.valkey_port;
            let old_address = Address::new(inputs.names.data_pod_fqdn(*from), port);
            let promoter = match kind {
                SwitchoverKind::SentinelFailover => Promoter::Sentinel {
                    name: name.to_owned(),
                    sentinels: world
                        .sentinel
                        .as_ref()
                        .map(|tier| {
                            tier.pods
                                .iter()
                                .filter(|p| p.ready)
                                .map(|p| {
                                    Address::new(
                                        inputs.names.sentinel_pod_fqdn(p.ordinal),
                                        inputs.sentinel_port,
                                    )
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    configured: world
                        .sentinel
                        .as_ref()
                        .map_or(0, |tier| tier.replicas as usize),
                    // A scale-down's switchover must land below spec.replicas (ADR 0024).
                    never_promote: vko_roll::scale::never_promote(&world.data, *from)
                        .into_iter()
                        .map(|ordinal| Address::new(inputs.names.data_pod_fqdn(ordinal), port))
                        .collect(),
                },
                SwitchoverKind::Promote => Promoter::Direct {
                    target: Some(Address::new(inputs.names.data_pod_fqdn(*to), port)),
                },
            };
            let data_plane = |action, source| Error::DataPlane {
                action,
                pod: from_pod.clone(),
                source,
            };
            inputs.leadership.check("switchover")?;
            let old = dial
                .valkey(&old_address)
                .await
                .map_err(|e| data_plane("connect", e))?;
            let outcome = switchover::switchover(
                dial,
                &old,
                &old_address,
                &promoter,
                &switchover::Settings::default(),
            )
            .await;
            old.close().await;
            match outcome.map_err(|e| data_plane("switchover", e))? {
                Outcome::HandedOver(report) => {
                    tracing::info!(
                        namespace = inputs.namespace,
                        %name,
                        from = %from_pod,
                        new_master = %report.new_master,
                        write_pause_ms = u64::try_from(report.write_pause.as_millis()).unwrap_or(u64::MAX),
                        catch_up_ms = u64::try_from(report.catch_up.as_millis()).unwrap_or(u64::MAX),
                        "roll: master switched over"
                    );
                    if *kind == SwitchoverKind::Promote {
                        promoted = ordinal_of(name, &report.new_master.host);
                    }
                }
                other => {
                    tracing::info!(namespace = inputs.namespace, %name, from = %from_pod, outcome = ?other, "roll: no switchover needed");
                }
            }
            Some(Duration::from_millis(300))
        }
        Action::Demote {
            ordinal,
            replica_of,
            pod,
            ..
        } => {
            let port = inputs.valkey_port;
            let at = Address::new(inputs.names.data_pod_fqdn(*ordinal), port);
            let client = dial.valkey(&at).await.map_err(|source| Error::DataPlane {
                action: "connect",
                pod: pod.clone(),
                source,
            })?;
            if let Err(refused) = inputs.leadership.check("REPLICAOF") {
                client.close().await;
                return Err(refused);
            }
            let result = client
                .replicaof(&inputs.names.data_pod_fqdn(*replica_of), port)
                .await;
            client.close().await;
            result.map_err(|source| Error::DataPlane {
                action: "REPLICAOF",
                pod: pod.clone(),
                source,
            })?;
            Some(ROLL_REQUEUE)
        }
    })
    }
    .await;
    let (requeue, failure) = match executed {
        Ok(requeue) => (requeue, None),
        Err(error) => {
            tracing::warn!(namespace = inputs.namespace, %name, %error, "roll step failed");
            (Some(ROLL_REQUEUE), Some(error))
        }
    };
    Some(RollStep {
        decision,
        promoted,
        requeue,
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vko_roll::{DeletedPod, Progress, SwitchoverRecord, WaitReason, WaitRecord};

    #[test]
    fn the_recorded_status_holds_every_field_of_the_roll_state() {
        let state = RollState {
            tier: Some(Tier::Sentinel),
            data_target: Some("abc".into()),
            sentinel_target: Some("def".into()),
            progress: Some(Progress {
                current: 2,
                total: 3,
            }),
            data_rolled: true,
            data_completed: true,
            wait: Some(WaitRecord {
                reason: WaitReason::PodRecreation,
                since: Millis(1_700_000_000_000),
            }),
            last_deleted: Some(DeletedPod {
                tier: Tier::Data,
                ordinal: 1,
                at: Millis(1_700_000_000_001),
            }),
            switchover: Some(SwitchoverRecord {
                from: 0,
                to: 2,
                started: Millis(1_700_000_000_002),
                attempts: 2,
            }),
            multiple_masters_since: Some(Millis(1_700_000_000_003)),
            split_brain_reported: true,
        };
        let status = vko_status::rolling_update_status(&state).unwrap();
        assert_eq!(status.tier.as_deref(), Some("sentinel"));
        let valkey: Valkey = serde_json::from_value(serde_json::json!({
            "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
            "metadata": {"name": "a", "namespace": "ns"},
            "spec": {"image": "valkey/valkey:8.0"},
            "status": {"rollingUpdate": status},
        }))
        .unwrap();
        assert_eq!(recorded_state(&valkey), state);
        assert_eq!(
            vko_status::rolling_update_status(&RollState::default()),
            None
        );
    }

    #[test]
    fn the_sentinel_view_needs_a_majority_of_every_sentinel() {
        let report = |master: u32, replicas: Vec<u32>| {
            Some(SentinelReport {
                master: Some(master),
                replicas,
                known_sentinels: 3,
            })
        };
        let three = Electorate::new(3, 3);
        let view = sentinel_view(three, 3, &[report(1, vec![0, 2]), report(1, vec![2]), None]);
        assert_eq!(view.answered, 2);
        assert_eq!(view.master, Some(1));
        assert_eq!(view.agreeing, 2);
        assert_eq!(view.known_replicas, vec![2]);
        let split = sentinel_view(three, 3, &[report(1, vec![]), report(0, vec![])]);
        assert_eq!(split.master, None);
        assert_eq!(split.agreeing, 0);
        // 1 of 3 answering is a minority: no master (the old rule counted only the answers).
        let one = sentinel_view(three, 3, &[report(1, vec![0, 2]), None, None]);
        assert_eq!(one.answered, 1);
        assert_eq!(one.master, None);
        assert_eq!(one.agreeing, 0);
    }
}
