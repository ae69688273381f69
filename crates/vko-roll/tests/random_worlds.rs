//! Property test: arbitrary (also nonsensical) worlds, recorded states and clocks. Whatever
//! `next` is shown, its single decision must be safe on that world.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use proptest::prelude::*;
use vko_roll::{
    Action, DataPod, DataTier, DeletedPod, MasterInfo, Millis, ReplicaInfo, RollState, SentinelPod,
    SentinelTier, SentinelView, Server, SwitchoverRecord, Terminating, Tier, WaitReason,
    WaitRecord, World, next,
};

const T0: u64 = 1_800_000_000_000;

fn millis() -> impl Strategy<Value = Millis> {
    (0u64..2_000_000).prop_map(|d| Millis(T0 + d))
}

fn hash() -> impl Strategy<Value = String> {
    prop_oneof![Just("a".to_owned()), Just("b".to_owned())]
}

fn terminating() -> impl Strategy<Value = Option<Terminating>> {
    prop::option::weighted(
        0.15,
        millis().prop_map(|since| Terminating {
            since,
            grace_deadline: since.plus(30_000),
        }),
    )
}

fn server() -> impl Strategy<Value = Server> {
    let replid = || {
        prop_oneof![
            Just("x".to_owned()),
            Just("y".to_owned()),
            Just("z".to_owned())
        ]
    };
    prop_oneof![
        1 => Just(Server::Unreachable),
        2 => (
            0u64..4,
            0u64..4,
            replid(),
            prop::option::of(replid()),
            prop::option::of(0u64..5),
        )
            .prop_map(|(offset, keys, replid, replid2, second)| {
                Server::Master(MasterInfo {
                    offset: offset * 1_000_000,
                    keys,
                    replicas: vec![],
                    replid,
                    replid2,
                    second_offset: second.map(|s| s * 1_000_000),
                })
            }),
        5 => (
            prop::option::of(0u32..6),
            prop::bool::weighted(0.8),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.1),
            0u64..4,
            0u64..4,
        )
            .prop_map(|(following, link_up, syncing, loading, offset, keys)| {
                Server::Replica(ReplicaInfo {
                    following,
                    link_up,
                    syncing,
                    loading,
                    offset: offset * 1_000_000,
                    keys,
                })
            }),
    ]
}

fn data_pod(ordinal: u32) -> impl Strategy<Value = DataPod> {
    (
        hash(),
        prop::bool::weighted(0.8),
        terminating().boxed(),
        server().boxed(),
        millis(),
    )
        .prop_map(
            move |(template_hash, ready, terminating, server, created_at)| DataPod {
                ordinal,
                name: format!("vk-{ordinal}"),
                created_at,
                template_hash,
                ready,
                terminating,
                server,
            },
        )
}

fn sentinel_tier() -> impl Strategy<Value = SentinelTier> {
    (
        1u32..=5,
        1u32..=3,
        hash(),
        prop::collection::vec(
            (
                prop::bool::weighted(0.9),
                hash(),
                prop::bool::weighted(0.8),
                terminating(),
            ),
            5,
        ),
        0u32..=5,
        prop::option::of(0u32..6),
        0u32..=5,
        prop::collection::vec(0u32..6, 0..4),
    )
        .prop_map(
            |(replicas, quorum, target_hash, pods, answered, master, agreeing, known)| {
                SentinelTier {
                    statefulset: "vk-sentinel".into(),
                    replicas,
                    quorum: quorum.min(replicas),
                    target_hash,
                    pods: pods
                        .into_iter()
                        .enumerate()
                        .filter(|(_, (exists, ..))| *exists)
                        .map(|(o, (_, template_hash, ready, terminating))| SentinelPod {
                            ordinal: o as u32,
                            name: format!("vk-sentinel-{o}"),
                            created_at: Millis(T0),
                            template_hash,
                            ready,
                            terminating,
                        })
                        .collect(),
                    view: SentinelView {
                        answered,
                        master,
                        agreeing: agreeing.min(answered),
                        known_replicas: known,
                        stale_peers: false,
                    },
                }
            },
        )
}

/// Either anything at all, or a consistent cluster with a few perturbations (so that the
/// consequential branches — switchover, deletes — are reached often).
fn world() -> impl Strategy<Value = World> {
    prop_oneof![any_world().boxed(), near_healthy_world().boxed()]
}

fn near_healthy_world() -> impl Strategy<Value = World> {
    (
        2u32..=5,
        0u32..5,
        prop::collection::vec(
            (
                any::<bool>(),
                0u64..3,
                prop::bool::weighted(0.1),
                prop::bool::weighted(0.95),
            ),
            5,
        ),
        prop::option::of((
            3u32..=5,
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.2),
        )),
        any::<bool>(),
    )
        .prop_map(|(replicas, master, pods, sentinel, master_updated)| {
            let master = master % replicas;
            let offset = 10 * 1024 * 1024;
            let pods: Vec<DataPod> = pods
                .into_iter()
                .take(replicas as usize)
                .enumerate()
                .map(|(o, (updated, lag, empty, ready))| {
                    let ordinal = o as u32;
                    let current = if ordinal == master {
                        master_updated
                    } else {
                        updated
                    };
                    let server = if ordinal == master {
                        Server::Master(MasterInfo {
                            offset,
                            keys: 100,
                            replicas: vec![],
                            replid: "x".into(),
                            replid2: None,
                            second_offset: None,
                        })
                    } else {
                        Server::Replica(ReplicaInfo {
                            following: Some(master),
                            link_up: true,
                            syncing: false,
                            loading: false,
                            offset: offset - lag * 700 * 1024,
                            keys: if empty { 0 } else { 100 },
                        })
                    };
                    DataPod {
                        ordinal,
                        name: format!("vk-{ordinal}"),
                        created_at: Millis(T0),
                        template_hash: if current { "a".into() } else { "b".into() },
                        ready,
                        terminating: None,
                        server,
                    }
                })
                .collect();
            let sentinel = sentinel.map(|(count, all_known, outdated)| SentinelTier {
                statefulset: "vk-sentinel".into(),
                replicas: count,
                quorum: count / 2 + 1,
                target_hash: "a".into(),
                pods: (0..count)
                    .map(|o| SentinelPod {
                        ordinal: o,
                        name: format!("vk-sentinel-{o}"),
                        created_at: Millis(T0),
                        template_hash: if outdated && o == 0 {
                            "b".into()
                        } else {
                            "a".into()
                        },
                        ready: true,
                        terminating: None,
                    })
                    .collect(),
                view: SentinelView {
                    answered: count,
                    master: Some(master),
                    agreeing: count,
                    known_replicas: (0..replicas)
                        .filter(|o| *o != master && (all_known || o % 2 == 0))
                        .collect(),
                    stale_peers: false,
                },
            });
            World {
                data: DataTier {
                    statefulset: "vk".into(),
                    replicas,
                    target_hash: "a".into(),
                    sidecar_only_change: false,
                    recorded_master: Some(master),
                    pods,
                },
                sentinel,
                sync_timeout_ms: 300_000,
                persistence: false,
            }
        })
}

fn any_world() -> impl Strategy<Value = World> {
    (
        1u32..=5,
        hash(),
        prop::bool::weighted(0.2),
        prop::option::of(0u32..6),
        prop::collection::vec(prop::bool::weighted(0.9), 6),
        (
            data_pod(0).boxed(),
            data_pod(1).boxed(),
            data_pod(2).boxed(),
            data_pod(3).boxed(),
            data_pod(4).boxed(),
            data_pod(5).boxed(),
        ),
        prop::option::of(sentinel_tier().boxed()),
        prop_oneof![Just(30_000u64), Just(300_000)],
        any::<bool>(),
    )
        .prop_map(
            |(
                replicas,
                target_hash,
                sidecar_only_change,
                recorded,
                exists,
                pods,
                sentinel,
                sync,
                persistence,
            )| {
                let all = [pods.0, pods.1, pods.2, pods.3, pods.4, pods.5];
                World {
                    data: DataTier {
                        statefulset: "vk".into(),
                        replicas,
                        target_hash,
                        sidecar_only_change,
                        recorded_master: recorded,
                        pods: all
                            .into_iter()
                            .zip(exists)
                            .filter(|(_, e)| *e)
                            .map(|(p, _)| p)
                            .collect(),
                    },
                    sentinel,
                    sync_timeout_ms: sync,
                    persistence,
                }
            },
        )
}

fn wait_reason() -> impl Strategy<Value = WaitReason> {
    prop_oneof![
        Just(WaitReason::PodTerminating),
        Just(WaitReason::PodRecreation),
        Just(WaitReason::PodSync),
        Just(WaitReason::MasterUnknown),
        Just(WaitReason::SwitchoverCandidate),
        Just(WaitReason::SwitchoverSettling),
        Just(WaitReason::MultipleMasters),
        Just(WaitReason::SentinelQuorum),
    ]
}

fn tier() -> impl Strategy<Value = Tier> {
    prop_oneof![Just(Tier::Data), Just(Tier::Sentinel)]
}

fn roll_state() -> impl Strategy<Value = RollState> {
    (
        prop::option::of(tier()),
        prop::option::of(hash()),
        prop::option::of(hash()),
        any::<(bool, bool, bool)>(),
        prop::option::of((wait_reason(), millis())),
        prop::option::of((tier(), 0u32..6, millis())),
        prop::option::of((0u32..6, 0u32..6, millis(), 1u32..4)),
        prop::option::of(millis()),
    )
        .prop_map(
            |(tier, data_target, sentinel_target, flags, wait, deleted, switchover, mm)| {
                RollState {
                    tier,
                    data_target,
                    sentinel_target,
                    progress: None,
                    data_rolled: flags.0,
                    data_completed: flags.1,
                    wait: wait.map(|(reason, since)| WaitRecord { reason, since }),
                    last_deleted: deleted.map(|(tier, ordinal, at)| DeletedPod {
                        tier,
                        ordinal,
                        at,
                    }),
                    switchover: switchover.map(|(from, to, started, attempts)| SwitchoverRecord {
                        from,
                        to,
                        started,
                        attempts,
                    }),
                    multiple_masters_since: mm,
                    split_brain_reported: flags.2,
                }
            },
        )
}

fn master_info(pod: &DataPod) -> Option<&MasterInfo> {
    match &pod.server {
        Server::Master(info) => Some(info),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_decision_is_safe_on_the_world_it_was_made_on(
        world in world(),
        recorded in roll_state(),
        now in millis(),
    ) {
        let decision = next(&world, &recorded, now);
        // Pure: the same inputs give the same decision.
        prop_assert_eq!(&next(&world, &recorded, now), &decision);
        // The state survives the CR status.
        let json = serde_json::to_string(&decision.state).unwrap();
        prop_assert_eq!(serde_json::from_str::<RollState>(&json).unwrap(), decision.state.clone());

        let masters: Vec<&DataPod> = world
            .data
            .pods
            .iter()
            .filter(|p| p.terminating.is_none() && p.server.is_master())
            .collect();
        match &decision.action {
            Action::Wait { deadline, .. } => prop_assert!(*deadline > now),
            Action::Pause { reason, .. } => {
                let (type_, condition_reason) = reason.condition();
                prop_assert!(decision
                    .conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.reason == condition_reason && c.status));
            }
            Action::DeletePod { tier: Tier::Data, ordinal, .. } => {
                let pod = world.data_pod(*ordinal);
                prop_assert!(pod.is_some());
                let pod = pod.unwrap();
                prop_assert!(!pod.server.is_master(), "deleted a master");
                prop_assert!(pod.template_hash != world.data.target_hash, "deleted a current pod");
                prop_assert!(world.data.pods.iter().all(|p| p.terminating.is_none()));
                prop_assert_eq!(masters.len(), 1, "deleted with {} masters", masters.len());
                // One replica: only while a scale-down's master still sits above it (ADR 0024).
                prop_assert!(world.data.replicas > 1 || masters[0].ordinal >= world.data.replicas);
            }
            Action::DeletePod { tier: Tier::Sentinel, ordinal, .. } => {
                let tier = world.sentinel.as_ref().expect("Sentinel tier");
                let pod = world.sentinel_pod(*ordinal).expect("exists");
                prop_assert!(pod.template_hash != tier.target_hash);
                prop_assert!(tier.pods.iter().all(|p| p.terminating.is_none()));
                if pod.ready {
                    let ready_others = tier
                        .pods
                        .iter()
                        .filter(|p| p.ordinal != *ordinal && p.ready && p.ordinal < tier.replicas)
                        .count() as u32;
                    let floor = if tier.replicas > tier.quorum { tier.quorum } else { tier.replicas - 1 };
                    prop_assert!(ready_others >= floor, "{ready_others} ready left, quorum {}", tier.quorum);
                }
            }
            Action::RestartInPlace { ordinal, .. } => {
                prop_assert_eq!(world.data.replicas, 1);
                prop_assert_eq!(*ordinal, 0);
                prop_assert!(world.data.pods.iter().all(|p| p.terminating.is_none()));
            }
            Action::Switchover { from, to, .. } => {
                prop_assert_eq!(masters.len(), 1);
                prop_assert_eq!(masters[0].ordinal, *from);
                let master = master_info(masters[0]).unwrap();
                let candidate = world.data_pod(*to).expect("exists");
                prop_assert_eq!(&candidate.template_hash, &world.data.target_hash);
                prop_assert!(candidate.ready && candidate.terminating.is_none());
                let Server::Replica(info) = &candidate.server else {
                    panic!("promoting a non-replica");
                };
                prop_assert_eq!(info.following, Some(*from));
                prop_assert!(info.link_up && !info.syncing && !info.loading);
                prop_assert!(master.offset.saturating_sub(info.offset) <= vko_roll::CATCH_UP_LAG_BYTES);
                prop_assert!(master.keys == 0 || info.keys > 0, "empty replica over a master with keys");
                // No better in-sync updated replica was passed over.
                for other in &world.data.pods {
                    if let Server::Replica(o) = &other.server
                        && other.ordinal != *to
                        && other.ordinal < world.data.replicas
                        && other.template_hash == world.data.target_hash
                        && other.ready
                        && other.terminating.is_none()
                        && o.following == Some(*from)
                        && o.link_up && !o.syncing && !o.loading
                        && (master.keys == 0 || o.keys > 0)
                        && world.sentinel.as_ref().is_none_or(|s| s.view.known_replicas.contains(&other.ordinal))
                    {
                        prop_assert!(o.offset <= info.offset, "passed over vk-{} at a higher offset", other.ordinal);
                    }
                }
            }
            Action::Demote { ordinal, replica_of, .. } => {
                let loser = world.data_pod(*ordinal).and_then(master_info).expect("loser is master");
                let winner = world.data_pod(*replica_of).and_then(master_info).expect("winner is master");
                prop_assert!(winner.contains(loser), "demoting a master whose writes the winner lacks");
                if let Some(sentinel) = &world.sentinel {
                    prop_assert_eq!(sentinel.view.master, Some(*replica_of));
                }
            }
            Action::Done | Action::Idle => {
                prop_assert_eq!(&decision.state, &RollState::default());
                prop_assert_eq!(&decision.phase, &None);
            }
        }
    }
}

/// Guards against a vacuous generator: the random worlds reach the consequential actions.
#[test]
fn random_worlds_reach_every_action() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::BTreeMap;
    let mut runner = TestRunner::deterministic();
    let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
    let inputs = (world().boxed(), roll_state().boxed(), millis());
    for _ in 0..6_000 {
        let (world, recorded, now) = inputs.new_tree(&mut runner).unwrap().current();
        let label = match next(&world, &recorded, now).action {
            Action::DeletePod {
                tier: Tier::Data, ..
            } => "delete data",
            Action::DeletePod {
                tier: Tier::Sentinel,
                ..
            } => "delete sentinel",
            Action::Switchover { .. } => "switchover",
            Action::Demote { .. } => "demote",
            Action::RestartInPlace { .. } => "restart in place",
            Action::Wait { .. } => "wait",
            Action::Pause { .. } => "pause",
            Action::Done => "done",
            Action::Idle => "idle",
        };
        *counts.entry(label).or_default() += 1;
    }
    println!("{counts:?}");
    for label in [
        "delete data",
        "delete sentinel",
        "switchover",
        "demote",
        "restart in place",
        "wait",
        "pause",
        "done",
        "idle",
    ] {
        assert!(
            counts.get(label).copied().unwrap_or(0) > 0,
            "never reached {label}: {counts:?}"
        );
    }
}
