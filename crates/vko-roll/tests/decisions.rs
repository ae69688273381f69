//! One test per branch of `vko_roll::next`: build a world, call `next`, assert the decision.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use vko_api::{ConditionReason, ConditionType, Phase};
use vko_roll::{
    Action, Decision, DeletedPod, EventReason, Millis, PauseReason, RollState, Server,
    SwitchoverKind, SwitchoverRecord, Tier, WaitReason, World, WriteWhen, next,
};

fn condition(
    decision: &Decision,
    type_: ConditionType,
) -> Option<(bool, ConditionReason, WriteWhen)> {
    decision
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason, c.when))
}

fn events(decision: &Decision) -> Vec<EventReason> {
    decision.events.iter().map(|e| e.reason).collect()
}

fn deleted(decision: &Decision) -> Option<(Tier, String)> {
    match &decision.action {
        Action::DeletePod { tier, pod, .. } => Some((*tier, pod.clone())),
        _ => None,
    }
}

fn wait(decision: &Decision) -> Option<(WaitReason, Option<String>, Millis)> {
    match &decision.action {
        Action::Wait {
            reason,
            pod,
            deadline,
        } => Some((*reason, pod.clone(), *deadline)),
        _ => None,
    }
}

fn pause(decision: &Decision) -> Option<(PauseReason, Option<String>)> {
    match &decision.action {
        Action::Pause { reason, pod, .. } => Some((*reason, pod.clone())),
        _ => None,
    }
}

fn rolling(current: i32, total: i32) -> Option<Phase> {
    Some(Phase::RollingUpdate { current, total })
}

/// State of a data roll to `NEW` that already replaced `vk-<ordinal>` at `at`.
fn data_roll_after_delete(ordinal: u32, at: Millis) -> RollState {
    RollState {
        tier: Some(Tier::Data),
        data_target: Some(NEW.into()),
        data_rolled: true,
        last_deleted: Some(DeletedPod {
            tier: Tier::Data,
            ordinal,
            at,
        }),
        ..RollState::default()
    }
}

#[test]
fn nothing_to_roll_is_idle_and_clears_only_conditions_that_are_true() {
    for (replicas, sentinels) in [(1, 0), (3, 0), (3, 3), (1, 3)] {
        let world = cluster(replicas, sentinels);
        let decision = next(&world, &RollState::default(), T0);
        assert_eq!(decision.action, Action::Idle, "{replicas}+{sentinels}");
        assert_eq!(decision.phase, None);
        assert_eq!(decision.state, RollState::default());
        assert!(decision.events.is_empty());
        assert_eq!(
            condition(&decision, ConditionType::RollingUpdatePaused),
            Some((false, ConditionReason::Converged, WriteWhen::IfTrue))
        );
        assert!(
            decision
                .conditions
                .iter()
                .all(|c| !c.status && c.when == WriteWhen::IfTrue)
        );
    }
}

#[test]
fn replicas_roll_first_highest_ordinal_first() {
    for sentinels in [0, 3] {
        let mut world = cluster(3, sentinels);
        outdate(&mut world, &[0, 1, 2]);
        let decision = next(&world, &RollState::default(), T0);
        assert_eq!(deleted(&decision), Some((Tier::Data, "vk-2".into())));
        assert_eq!(decision.phase, rolling(1, 3));
        assert_eq!(decision.state.tier, Some(Tier::Data));
        assert_eq!(decision.state.data_target.as_deref(), Some(NEW));
        assert_eq!(
            decision.state.last_deleted,
            Some(DeletedPod {
                tier: Tier::Data,
                ordinal: 2,
                at: T0
            })
        );
        assert!(decision.events.is_empty());
    }
}

#[test]
fn an_outdated_replica_that_is_not_in_sync_is_replaced_before_healthy_ones() {
    let mut world = cluster(4, 0);
    outdate(&mut world, &[0, 1, 2, 3]);
    replica_info(&mut world, 1).link_up = false;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-1".into())));
}

#[test]
fn a_pod_of_the_tier_terminating_blocks_every_delete_then_stalls_without_event() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    data_pod(&mut world, 1).terminating = terminating(T0);
    let grace = T0.plus(30_000);
    let decision = next(&world, &RollState::default(), T0.plus(1_000));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::PodTerminating,
            Some("vk-1".into()),
            grace.plus(120_000)
        ))
    );
    // One ms before the stall bound: still a wait; at it: the named hold.
    let state = decision.state.clone();
    let decision = next(&world, &state, grace.plus(119_999));
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::PodTerminating)
    );
    let decision = next(&world, &state, grace.plus(120_000));
    assert_eq!(
        pause(&decision),
        Some((PauseReason::PodTerminationStalled, Some("vk-1".into())))
    );
    assert_eq!(
        condition(&decision, ConditionType::PodTerminationStalled),
        Some((
            true,
            ConditionReason::PodStuckTerminating,
            WriteWhen::Always
        ))
    );
    assert!(decision.events.is_empty());
    // A hold, not an end: the roll state survives and the phase stays the roll's.
    assert_eq!(decision.state.tier, Some(Tier::Data));
    assert_eq!(decision.phase, rolling(2, 3));
    // Once the pod is gone the condition clears and the roll goes on (with the missing pod).
    remove_data_pod(&mut world, 1);
    let decision = next(&world, &decision.state, grace.plus(200_000));
    assert_eq!(
        condition(&decision, ConditionType::PodTerminationStalled),
        Some((
            false,
            ConditionReason::PodTerminationCleared,
            WriteWhen::IfTrue
        ))
    );
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::PodRecreation)
    );
}

#[test]
fn a_deleted_pod_not_recreated_within_two_minutes_stalls_the_roll() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    remove_data_pod(&mut world, 2);
    let state = data_roll_after_delete(2, T0);
    let decision = next(&world, &state, T0.plus(5_000));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::PodRecreation,
            Some("vk-2".into()),
            T0.plus(120_000)
        ))
    );
    let decision = next(&world, &decision.state, T0.plus(120_000));
    assert_eq!(
        pause(&decision),
        Some((PauseReason::PodRecreationStalled, Some("vk-2".into())))
    );
    assert_eq!(
        condition(&decision, ConditionType::PodRecreationStalled),
        Some((true, ConditionReason::PodNotRecreated, WriteWhen::Always))
    );
    assert!(decision.events.is_empty());
    assert_eq!(decision.state.tier, Some(Tier::Data));
}

#[test]
fn a_replaced_replica_gates_the_next_step_until_it_is_in_sync() {
    type Fault = fn(&mut World);
    let faults: [(&str, Fault); 7] = [
        ("not ready", |w| data_pod(w, 2).ready = false),
        ("unreachable", |w| {
            data_pod(w, 2).server = Server::Unreachable
        }),
        ("link down", |w| replica_info(w, 2).link_up = false),
        ("syncing", |w| replica_info(w, 2).syncing = true),
        ("loading", |w| replica_info(w, 2).loading = true),
        ("follows another pod", |w| {
            replica_info(w, 2).following = Some(1)
        }),
        ("behind", |w| {
            make_master(w, 0, 5_000_000, 100);
            replica_info(w, 2).offset = 5_000_000 - vko_roll::CATCH_UP_LAG_BYTES - 1;
        }),
    ];
    for (what, fault) in faults {
        let mut world = cluster(3, 0);
        outdate(&mut world, &[0, 1]);
        fault(&mut world);
        let decision = next(&world, &data_roll_after_delete(2, T0), T0.plus(10_000));
        assert_eq!(
            wait(&decision),
            Some((
                WaitReason::PodSync,
                Some("vk-2".into()),
                T0.plus(10_000 + SYNC_TIMEOUT_MS)
            )),
            "{what}"
        );
        assert_eq!(decision.phase, rolling(1, 3), "{what}");
    }
    // Lagging by less than the bound is caught up.
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    make_master(&mut world, 0, 5_000_000, 100);
    replica_info(&mut world, 2).offset = 5_000_000 - vko_roll::CATCH_UP_LAG_BYTES;
    let decision = next(&world, &data_roll_after_delete(2, T0), T0.plus(10_000));
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-1".into())));
    assert_eq!(decision.phase, rolling(2, 3));
}

#[test]
fn sync_timeout_pauses_reports_error_and_starts_over_on_a_fresh_budget() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    replica_info(&mut world, 2).syncing = true;
    let first = next(&world, &data_roll_after_delete(2, T0), T0.plus(1_000));
    let deadline = wait(&first).expect("waits").2;
    let decision = next(&world, &first.state, deadline);
    assert_eq!(
        pause(&decision),
        Some((PauseReason::SyncTimeoutExpired, Some("vk-2".into())))
    );
    assert_eq!(decision.phase, Some(Phase::Error));
    assert_eq!(
        condition(&decision, ConditionType::RollingUpdatePaused),
        Some((true, ConditionReason::SyncTimeoutExpired, WriteWhen::Always))
    );
    assert_eq!(decision.state, RollState::default());
    // The next pass waits again, on a fresh budget, and never deletes the next pod meanwhile.
    let later = deadline.plus(5_000);
    let decision = next(&world, &decision.state, later);
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::PodSync,
            Some("vk-2".into()),
            later.plus(SYNC_TIMEOUT_MS)
        ))
    );
    // The condition is not touched while the new attempt runs; completion clears it.
    assert_eq!(
        condition(&decision, ConditionType::RollingUpdatePaused),
        None
    );
}

#[test]
fn a_replacement_that_never_becomes_ready_holds_the_roll_and_a_spec_fix_replaces_it_first() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    data_pod(&mut world, 2).ready = false;
    data_pod(&mut world, 2).server = Server::Unreachable;
    let mut state = data_roll_after_delete(2, T0);
    let mut now = T0;
    for _ in 0..10 {
        now = now.plus(60_000);
        let decision = next(&world, &state, now);
        assert!(
            deleted(&decision).is_none() && !matches!(decision.action, Action::Switchover { .. }),
            "{:?}",
            decision.action
        );
        state = decision.state;
    }
    // The spec is fixed: the target moves on; the broken pod is now outdated and goes first.
    world.data.target_hash = "fixed".into();
    let decision = next(&world, &state, now.plus(1_000));
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-2".into())));
    assert_eq!(decision.state.data_target.as_deref(), Some("fixed"));
}

#[test]
fn the_master_is_switched_over_to_the_most_caught_up_updated_replica() {
    for (sentinels, kind) in [
        (0, SwitchoverKind::Promote),
        (3, SwitchoverKind::SentinelFailover),
    ] {
        let mut world = cluster(4, sentinels);
        outdate(&mut world, &[0]);
        replica_info(&mut world, 1).offset = 9_990;
        replica_info(&mut world, 3).offset = 9_995;
        let decision = next(&world, &RollState::default(), T0);
        assert_eq!(
            decision.action,
            Action::Switchover {
                from: 0,
                from_pod: "vk-0".into(),
                to: 2,
                to_pod: "vk-2".into(),
                kind,
            }
        );
        assert_eq!(decision.phase, Some(Phase::FailoverInProgress));
        assert_eq!(
            decision.state.switchover,
            Some(SwitchoverRecord {
                from: 0,
                to: 2,
                started: T0,
                attempts: 1
            })
        );
    }
}

#[test]
fn an_empty_replica_is_never_promoted_over_a_master_holding_keys() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0]);
    replica_info(&mut world, 1).keys = 0;
    replica_info(&mut world, 2).keys = 0;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::SwitchoverCandidate,
            Some("vk-0".into()),
            T0.plus(SYNC_TIMEOUT_MS)
        ))
    );
    // With one non-empty replica, that one is chosen even though the empty one is ahead.
    replica_info(&mut world, 1).keys = 100;
    replica_info(&mut world, 1).offset = 9_000;
    let decision = next(&world, &decision.state, T0.plus(1_000));
    assert!(
        matches!(decision.action, Action::Switchover { to: 1, .. }),
        "{:?}",
        decision.action
    );
    // An empty master may hand over to an empty replica.
    let mut world = cluster(2, 0);
    outdate(&mut world, &[0]);
    master_info(&mut world, 0).keys = 0;
    replica_info(&mut world, 1).keys = 0;
    let decision = next(&world, &RollState::default(), T0);
    assert!(matches!(decision.action, Action::Switchover { to: 1, .. }));
}

#[test]
fn with_sentinel_the_candidate_must_be_known_and_sentinels_must_agree() {
    let mut world = cluster(3, 3);
    outdate(&mut world, &[0]);
    world.sentinel.as_mut().unwrap().view.known_replicas = vec![1];
    replica_info(&mut world, 2).offset = 10_000;
    replica_info(&mut world, 1).offset = 9_999;
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(decision.action, Action::Switchover { to: 1, .. }),
        "{:?}",
        decision.action
    );

    world.sentinel.as_mut().unwrap().view.agreeing = 1;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::SentinelQuorum)
    );

    // Sentinel naming another master than the one answering: nobody is touched.
    let mut world = cluster(3, 3);
    outdate(&mut world, &[0, 1, 2]);
    world.sentinel.as_mut().unwrap().view.master = Some(1);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::MasterUnknown)
    );
    let decision = next(&world, &decision.state, T0.plus(SYNC_TIMEOUT_MS));
    assert_eq!(
        pause(&decision).map(|p| p.0),
        Some(PauseReason::SyncTimeoutExpired)
    );
}

#[test]
fn no_master_means_no_delete() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1, 2]);
    data_pod(&mut world, 0).server = Server::Unreachable;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision),
        Some((WaitReason::MasterUnknown, None, T0.plus(SYNC_TIMEOUT_MS)))
    );
}

#[test]
fn a_switchover_that_does_not_take_effect_is_retried_then_paused() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0]);
    let first = next(&world, &RollState::default(), T0);
    assert!(matches!(first.action, Action::Switchover { .. }));
    // Unchanged world: wait for it to settle, up to the settle bound.
    let decision = next(&world, &first.state, T0.plus(1_000));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::SwitchoverSettling,
            Some("vk-0".into()),
            T0.plus(vko_roll::SWITCHOVER_SETTLE_MS)
        ))
    );
    assert_eq!(decision.phase, Some(Phase::FailoverInProgress));
    let mut state = decision.state;
    let mut now = T0;
    for attempt in 2..=vko_roll::MAX_SWITCHOVER_ATTEMPTS {
        now = now.plus(vko_roll::SWITCHOVER_SETTLE_MS);
        let decision = next(&world, &state, now);
        assert!(
            matches!(decision.action, Action::Switchover { .. }),
            "{:?}",
            decision.action
        );
        assert_eq!(
            decision.state.switchover.as_ref().map(|s| s.attempts),
            Some(attempt)
        );
        state = decision.state;
    }
    now = now.plus(vko_roll::SWITCHOVER_SETTLE_MS);
    let decision = next(&world, &state, now);
    assert_eq!(
        pause(&decision),
        Some((PauseReason::SwitchoverFailed, Some("vk-0".into())))
    );
    assert_eq!(
        condition(&decision, ConditionType::RollingUpdatePaused),
        Some((true, ConditionReason::SwitchoverFailed, WriteWhen::Always))
    );
    assert_eq!(decision.phase, Some(Phase::Error));
    assert_eq!(decision.state, RollState::default());
}

#[test]
fn the_old_master_is_deleted_only_once_it_follows_the_new_master() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0]);
    let first = next(&world, &RollState::default(), T0);
    let Action::Switchover { to, .. } = first.action else {
        panic!("{:?}", first.action)
    };
    // The new master answers; the old one answers as a replica of nobody yet.
    make_master(&mut world, to, 10_000, 100);
    world.data.recorded_master = Some(to);
    replica_info(&mut world, 0).following = None;
    replica_info(&mut world, 0).link_up = false;
    let decision = next(&world, &first.state, T0.plus(2_000));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::SwitchoverSettling,
            Some("vk-0".into()),
            T0.plus(vko_roll::SWITCHOVER_SETTLE_MS)
        ))
    );
    // It follows: now it is an outdated replica like any other.
    let info = replica_info(&mut world, 0);
    info.following = Some(to);
    info.link_up = true;
    let decision = next(&world, &decision.state, T0.plus(3_000));
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-0".into())));
    assert_eq!(decision.state.switchover, None);
    assert_eq!(decision.phase, rolling(3, 3));
}

#[test]
fn an_old_master_that_never_follows_is_replaced_only_if_the_new_master_has_all_its_data() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0]);
    let first = next(&world, &RollState::default(), T0);
    let Action::Switchover { to, .. } = first.action else {
        panic!("{:?}", first.action)
    };
    make_master(&mut world, to, 10_000, 100);
    let info = replica_info(&mut world, 0);
    info.following = None;
    info.link_up = false;
    let past = T0.plus(vko_roll::SWITCHOVER_SETTLE_MS);
    let decision = next(&world, &first.state, past);
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-0".into())));
    // Ahead of the new master: that would lose writes.
    replica_info(&mut world, 0).offset = 20_000;
    let decision = next(&world, &first.state, past);
    assert_eq!(
        pause(&decision),
        Some((PauseReason::SwitchoverFailed, Some("vk-0".into())))
    );
}

#[test]
fn the_roll_completes_with_one_event_and_clears_its_conditions() {
    let world = cluster(3, 0);
    let state = data_roll_after_delete(0, T0);
    let decision = next(&world, &state, T0.plus(30_000));
    assert_eq!(decision.action, Action::Done);
    assert_eq!(events(&decision), vec![EventReason::RollingUpdateComplete]);
    assert_eq!(decision.phase, None);
    assert_eq!(decision.state, RollState::default());
    assert_eq!(
        condition(&decision, ConditionType::RollingUpdatePaused),
        Some((false, ConditionReason::Completed, WriteWhen::IfPresent))
    );
    assert_eq!(
        condition(&decision, ConditionType::SidecarUpdatePending),
        Some((
            false,
            ConditionReason::SidecarImageCurrent,
            WriteWhen::IfTrue
        ))
    );
    // TopologyRestored is never written: the master is not handed back to pod 0.
    assert_eq!(condition(&decision, ConditionType::TopologyRestored), None);
    // The pass after: idle, no second event.
    let decision = next(&world, &decision.state, T0.plus(31_000));
    assert_eq!(decision.action, Action::Idle);
    assert!(decision.events.is_empty());
}

#[test]
fn with_sentinel_the_data_tier_is_done_only_once_the_sentinels_list_every_replica() {
    let mut world = cluster(3, 3);
    // Every data pod updated and in sync, but the Sentinels list only vk-1 (they learn a
    // replica from the master's INFO, up to 10 s after it linked).
    world.sentinel.as_mut().unwrap().view.known_replicas = vec![1];
    let state = data_roll_after_delete(0, T0);
    let decision = next(&world, &state, T0.plus(30_000));
    assert_eq!(
        wait(&decision).map(|(reason, pod, _)| (reason, pod)),
        Some((WaitReason::PodSync, Some("vk-2".into())))
    );
    assert!(events(&decision).is_empty(), "no completion Event yet");
    assert!(!decision.state.data_completed);
    // Once they list it, the data tier completes.
    world.sentinel.as_mut().unwrap().view.known_replicas = vec![1, 2];
    let decision = next(&world, &decision.state, T0.plus(31_000));
    assert_eq!(events(&decision), vec![EventReason::RollingUpdateComplete]);
}

#[test]
fn the_sentinel_tier_rolls_after_the_data_tier_in_the_same_pass_it_completes() {
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1, 2]);
    let state = data_roll_after_delete(0, T0);
    let decision = next(&world, &state, T0.plus(30_000));
    assert_eq!(events(&decision), vec![EventReason::RollingUpdateComplete]);
    assert_eq!(
        deleted(&decision),
        Some((Tier::Sentinel, "vk-sentinel-2".into()))
    );
    assert_eq!(
        decision.phase,
        Some(Phase::SentinelRollingUpdate {
            current: 1,
            total: 3
        })
    );
    assert_eq!(
        condition(&decision, ConditionType::SentinelUpdatePending),
        Some((
            true,
            ConditionReason::SentinelPodsOutdated,
            WriteWhen::Always
        ))
    );
    assert_eq!(decision.state.tier, Some(Tier::Sentinel));
    assert!(decision.state.data_completed);

    // The replaced Sentinel is back and ready: next one; the data event is not repeated.
    sentinel_pod(&mut world, 2).template_hash = NEW.into();
    let decision = next(&world, &decision.state, T0.plus(40_000));
    assert_eq!(
        deleted(&decision),
        Some((Tier::Sentinel, "vk-sentinel-1".into()))
    );
    assert!(decision.events.is_empty());
    assert_eq!(
        decision.phase,
        Some(Phase::SentinelRollingUpdate {
            current: 2,
            total: 3
        })
    );

    // All current: Done with the Sentinel completion.
    sentinel_pod(&mut world, 1).template_hash = NEW.into();
    sentinel_pod(&mut world, 0).template_hash = NEW.into();
    let decision = next(&world, &decision.state, T0.plus(50_000));
    assert_eq!(decision.action, Action::Done);
    assert_eq!(events(&decision), vec![EventReason::SentinelUpdateComplete]);
    assert_eq!(
        condition(&decision, ConditionType::SentinelUpdatePending),
        Some((false, ConditionReason::Completed, WriteWhen::Always))
    );
}

#[test]
fn a_sentinel_only_change_rolls_the_sentinel_tier_alone() {
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1, 2]);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        deleted(&decision),
        Some((Tier::Sentinel, "vk-sentinel-2".into()))
    );
    assert!(decision.events.is_empty());
    assert!(decision.state.data_completed);
    assert!(!decision.state.data_rolled);
}

#[test]
fn the_sentinel_tier_never_goes_below_quorum() {
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1]);
    // vk-sentinel-2 (current) is not ready: deleting a ready one would leave 1 < quorum 2.
    sentinel_pod(&mut world, 2).ready = false;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| (w.0, w.1)),
        Some((WaitReason::PodSync, Some("vk-sentinel-2".into())))
    );
    // An outdated unready Sentinel costs no quorum: it goes first.
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1, 2]);
    sentinel_pod(&mut world, 0).ready = false;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        deleted(&decision),
        Some((Tier::Sentinel, "vk-sentinel-0".into()))
    );
    // Two of three ready, both outdated: replacing one would leave 1 ready.
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[1, 2]);
    world
        .sentinel
        .as_mut()
        .unwrap()
        .pods
        .retain(|p| p.ordinal != 0);
    let state = RollState {
        tier: Some(Tier::Sentinel),
        data_target: Some(NEW.into()),
        sentinel_target: Some(NEW.into()),
        data_completed: true,
        ..RollState::default()
    };
    let decision = next(&world, &state, T0);
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::PodRecreation)
    );
    // A Sentinel being deleted blocks the next one.
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1]);
    sentinel_pod(&mut world, 2).terminating = terminating(T0);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| (w.0, w.1)),
        Some((WaitReason::PodTerminating, Some("vk-sentinel-2".into())))
    );
}

#[test]
fn sentinels_that_do_not_agree_on_a_master_hold_the_sentinel_tier() {
    let mut world = cluster(3, 5);
    outdate_sentinels(&mut world, &[0]);
    world.sentinel.as_mut().unwrap().view.agreeing = 2;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::SentinelQuorum)
    );
    let decision = next(&world, &decision.state, T0.plus(SYNC_TIMEOUT_MS));
    assert_eq!(
        pause(&decision).map(|p| p.0),
        Some(PauseReason::SyncTimeoutExpired)
    );
}

#[test]
fn sentinel_disabled_mid_roll_ends_the_sentinel_roll_without_completion_event() {
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1]);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(decision.state.tier, Some(Tier::Sentinel));
    world.sentinel = None;
    let decision = next(&world, &decision.state, T0.plus(1_000));
    assert_eq!(decision.action, Action::Idle);
    assert!(decision.events.is_empty());
    assert_eq!(
        condition(&decision, ConditionType::SentinelUpdatePending),
        Some((false, ConditionReason::SentinelDisabled, WriteWhen::IfTrue))
    );
}

#[test]
fn a_single_replica_is_restarted_in_place_and_loses_data_only_without_persistence() {
    for (persistence, sentinels) in [(false, 0), (true, 0), (true, 3)] {
        let mut world = cluster(1, sentinels);
        world.persistence = persistence;
        outdate(&mut world, &[0]);
        let decision = next(&world, &RollState::default(), T0);
        assert_eq!(
            decision.action,
            Action::RestartInPlace {
                ordinal: 0,
                pod: "vk-0".into(),
                loses_data: !persistence,
            }
        );
        assert_eq!(decision.phase, rolling(1, 1));
        // Back, ready, master: done.
        data_pod(&mut world, 0).template_hash = NEW.into();
        data_pod(&mut world, 0).ready = false;
        let waiting = next(&world, &decision.state, T0.plus(5_000));
        assert_eq!(wait(&waiting).map(|w| w.0), Some(WaitReason::PodSync));
        data_pod(&mut world, 0).ready = true;
        let decision = next(&world, &waiting.state, T0.plus(9_000));
        assert_eq!(decision.action, Action::Done);
        assert_eq!(events(&decision), vec![EventReason::RollingUpdateComplete]);
    }
}

#[test]
fn a_sidecar_only_change_on_a_single_replica_is_deferred() {
    let mut world = cluster(1, 0);
    world.data.sidecar_only_change = true;
    outdate(&mut world, &[0]);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        pause(&decision),
        Some((PauseReason::SidecarUpdateDeferred, Some("vk-0".into())))
    );
    assert_eq!(decision.phase, None);
    assert_eq!(decision.state, RollState::default());
    let (status, reason, when) =
        condition(&decision, ConditionType::SidecarUpdatePending).expect("condition");
    assert!(status);
    assert_eq!(
        (reason, when),
        (ConditionReason::SidecarImageOutdated, WriteWhen::Always)
    );
    let message = &decision
        .conditions
        .iter()
        .find(|c| c.type_ == ConditionType::SidecarUpdatePending)
        .unwrap()
        .message;
    assert!(
        message.contains("vk-0") && message.contains("spec.replicas 1"),
        "{message}"
    );
    // With three replicas the same flag rides the ordinary roll.
    let mut world = cluster(3, 0);
    world.data.sidecar_only_change = true;
    outdate(&mut world, &[0, 1, 2]);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-2".into())));
    // Sidecar deferred on the data pod, but the Sentinel tier still rolls.
    let mut world = cluster(1, 3);
    world.data.sidecar_only_change = true;
    outdate(&mut world, &[0]);
    outdate_sentinels(&mut world, &[0]);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        deleted(&decision),
        Some((Tier::Sentinel, "vk-sentinel-0".into()))
    );
    assert_eq!(
        condition(&decision, ConditionType::SidecarUpdatePending).map(|c| c.0),
        Some(true)
    );
}

#[test]
fn a_spec_change_mid_roll_restarts_from_the_beginning() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    let state = RollState {
        progress: Some(vko_roll::Progress {
            current: 2,
            total: 3,
        }),
        ..data_roll_after_delete(2, T0)
    };
    world.data.target_hash = "newer".into();
    let decision = next(&world, &state, T0.plus(60_000));
    assert_eq!(decision.state.data_target.as_deref(), Some("newer"));
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-2".into())));
    assert_eq!(decision.phase, rolling(1, 3));
    // A spec put back to what the pods run: nothing left to roll.
    let world = cluster(3, 0);
    let decision = next(&world, &state, T0);
    // data_target "new" == world target: same roll, completes.
    assert_eq!(decision.action, Action::Done);
    let mut reverted = state.clone();
    reverted.data_target = Some("something-else".into());
    let decision = next(&world, &reverted, T0);
    assert_eq!(decision.action, Action::Idle);
    assert_eq!(
        condition(&decision, ConditionType::RollingUpdatePaused),
        Some((false, ConditionReason::Converged, WriteWhen::IfTrue))
    );
}

/// Two masters: `vk-1` promoted out of `vk-0`'s history at offset 10_001.
fn two_masters(sentinels: u32, old_master_offset: u64) -> World {
    let mut world = cluster(3, sentinels);
    outdate(&mut world, &[0]);
    make_master(&mut world, 1, 12_000, 120);
    let new = master_info(&mut world, 1);
    new.replid2 = Some("replid-0".into());
    new.second_offset = Some(10_001);
    data_pod(&mut world, 0).server = Server::Master(vko_roll::MasterInfo {
        offset: old_master_offset,
        keys: 100,
        replicas: vec![],
        replid: "replid-0".into(),
        replid2: None,
        second_offset: None,
    });
    world
}

#[test]
fn a_rogue_master_whose_writes_the_authority_holds_is_demoted_at_once() {
    for sentinels in [0, 3] {
        let world = two_masters(sentinels, 10_000);
        let state = RollState {
            tier: Some(Tier::Data),
            data_target: Some(NEW.into()),
            switchover: Some(SwitchoverRecord {
                from: 0,
                to: 1,
                started: T0,
                attempts: 1,
            }),
            ..RollState::default()
        };
        let decision = next(&world, &state, T0.plus(1_000));
        assert_eq!(
            decision.action,
            Action::Demote {
                ordinal: 0,
                pod: "vk-0".into(),
                replica_of: 1,
                replica_of_pod: "vk-1".into(),
            },
            "{sentinels}"
        );
        assert_eq!(
            condition(&decision, ConditionType::MultipleMasters),
            Some((
                true,
                ConditionReason::MultipleMastersTransitional,
                WriteWhen::Always
            ))
        );
        assert!(decision.events.is_empty());
        assert_eq!(decision.state.multiple_masters_since, Some(T0.plus(1_000)));
    }
}

#[test]
fn a_rogue_master_with_writes_of_its_own_is_reported_and_held_never_demoted() {
    // vk-0 acknowledged writes past the fork (offset 10_500 >= 10_001): they exist only there.
    let world = two_masters(3, 10_500);
    let state = RollState {
        tier: Some(Tier::Data),
        data_target: Some(NEW.into()),
        ..RollState::default()
    };
    let decision = next(&world, &state, T0);
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::MultipleMasters,
            None,
            T0.plus(vko_roll::MULTIPLE_MASTERS_BOUND_MS)
        ))
    );
    assert!(decision.events.is_empty());
    let decision = next(
        &world,
        &decision.state,
        T0.plus(vko_roll::MULTIPLE_MASTERS_BOUND_MS),
    );
    assert_eq!(
        pause(&decision).map(|p| p.0),
        Some(PauseReason::MultipleMastersUnresolved)
    );
    assert_eq!(
        condition(&decision, ConditionType::MultipleMasters),
        Some((
            true,
            ConditionReason::MultipleMastersPersisted,
            WriteWhen::Always
        ))
    );
    assert_eq!(events(&decision), vec![EventReason::SplitBrainDetected]);
    assert_eq!(
        decision.state.tier,
        Some(Tier::Data),
        "a hold keeps the roll"
    );
    // Held: the Warning is emitted once per episode; nothing is deleted.
    let decision = next(&world, &decision.state, T0.plus(200_000));
    assert_eq!(
        pause(&decision).map(|p| p.0),
        Some(PauseReason::MultipleMastersUnresolved)
    );
    assert!(decision.events.is_empty());
    // One master again: the condition clears and the roll goes on.
    let mut world = world;
    let info = vko_roll::ReplicaInfo {
        following: Some(1),
        ..replica_of(1, 12_000, 120)
    };
    data_pod(&mut world, 0).server = Server::Replica(info);
    let decision = next(&world, &decision.state, T0.plus(210_000));
    assert_eq!(
        condition(&decision, ConditionType::MultipleMasters),
        Some((false, ConditionReason::SingleMaster, WriteWhen::IfTrue))
    );
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-0".into())));
    assert_eq!(decision.state.multiple_masters_since, None);
}

#[test]
fn with_sentinel_the_sentinels_master_is_never_demoted_toward_a_rogue() {
    // The Sentinels still name vk-0; vk-1 contains all of vk-0's writes, but demoting the
    // Sentinels' master would fight Sentinel: hold instead.
    let mut world = two_masters(3, 10_000);
    world.sentinel.as_mut().unwrap().view.master = Some(0);
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(
        wait(&decision).map(|w| w.0),
        Some(WaitReason::MultipleMasters)
    );
    // Without Sentinel the operator may resolve toward the pod holding the data.
    let mut world = two_masters(0, 10_000);
    world.data.recorded_master = Some(0);
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(
            decision.action,
            Action::Demote {
                ordinal: 0,
                replica_of: 1,
                ..
            }
        ),
        "{:?}",
        decision.action
    );
}

#[test]
fn an_empty_master_is_demoted_but_a_master_holding_the_only_data_is_not() {
    // vk-2 came up empty as master (no history): contained in anything.
    let mut world = cluster(3, 0);
    outdate(&mut world, &[1]);
    data_pod(&mut world, 2).server = Server::Master(vko_roll::MasterInfo {
        offset: 0,
        keys: 0,
        replicas: vec![],
        replid: "fresh".into(),
        replid2: None,
        second_offset: None,
    });
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(
            decision.action,
            Action::Demote {
                ordinal: 2,
                replica_of: 0,
                ..
            }
        ),
        "{:?}",
        decision.action
    );
    // The recorded master is the empty one and the other holds keys: never demote the data.
    let mut world = cluster(3, 0);
    outdate(&mut world, &[1]);
    world.data.recorded_master = Some(2);
    data_pod(&mut world, 2).server = Server::Master(vko_roll::MasterInfo {
        offset: 0,
        keys: 0,
        replicas: vec![],
        replid: "fresh".into(),
        replid2: None,
        second_offset: None,
    });
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(
            decision.action,
            Action::Demote {
                ordinal: 2,
                replica_of: 0,
                ..
            }
        ),
        "{:?}",
        decision.action
    );
}

#[test]
fn waits_keep_their_deadline_when_the_clock_jumps_back_and_end_when_it_jumps_forward() {
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1]);
    replica_info(&mut world, 2).syncing = true;
    let first = next(&world, &data_roll_after_delete(2, T0), T0.plus(10_000));
    let deadline = wait(&first).expect("waits").2;
    let back = next(&world, &first.state, T0);
    assert_eq!(wait(&back).map(|w| w.2), Some(deadline));
    let forward = next(&world, &back.state, T0.plus(10 * 3_600_000));
    assert_eq!(
        pause(&forward).map(|p| p.0),
        Some(PauseReason::SyncTimeoutExpired)
    );
}

#[test]
fn roll_state_round_trips_through_json_in_camel_case() {
    let state = RollState {
        tier: Some(Tier::Sentinel),
        data_target: Some("a".into()),
        sentinel_target: Some("b".into()),
        progress: Some(vko_roll::Progress {
            current: 2,
            total: 3,
        }),
        data_rolled: true,
        data_completed: true,
        wait: Some(vko_roll::WaitRecord {
            reason: WaitReason::PodSync,
            since: T0,
        }),
        last_deleted: Some(DeletedPod {
            tier: Tier::Data,
            ordinal: 1,
            at: T0,
        }),
        switchover: Some(SwitchoverRecord {
            from: 0,
            to: 2,
            started: T0,
            attempts: 1,
        }),
        multiple_masters_since: Some(T0),
        split_brain_reported: true,
    };
    let json = serde_json::to_value(&state).unwrap();
    assert_eq!(json["tier"], "sentinel");
    assert_eq!(json["dataTarget"], "a");
    assert_eq!(json["lastDeleted"]["at"], T0.0);
    assert_eq!(json["wait"]["reason"], "podSync");
    assert_eq!(json["multipleMastersSince"], T0.0);
    let back: RollState = serde_json::from_value(json).unwrap();
    assert_eq!(back, state);
    // Not rolling serializes to an empty object, and an empty object reads back as not rolling.
    assert_eq!(
        serde_json::to_value(RollState::default()).unwrap(),
        serde_json::json!({})
    );
    let empty: RollState = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, RollState::default());
}

#[test]
fn every_wait_reason_ends_in_a_named_condition() {
    use ConditionReason as R;
    use ConditionType as C;
    let table = [
        (
            WaitReason::PodTerminating,
            C::PodTerminationStalled,
            R::PodStuckTerminating,
            false,
        ),
        (
            WaitReason::PodRecreation,
            C::PodRecreationStalled,
            R::PodNotRecreated,
            false,
        ),
        (
            WaitReason::PodSync,
            C::RollingUpdatePaused,
            R::SyncTimeoutExpired,
            true,
        ),
        (
            WaitReason::MasterUnknown,
            C::RollingUpdatePaused,
            R::SyncTimeoutExpired,
            true,
        ),
        (
            WaitReason::SwitchoverCandidate,
            C::RollingUpdatePaused,
            R::SyncTimeoutExpired,
            true,
        ),
        (
            WaitReason::SentinelQuorum,
            C::RollingUpdatePaused,
            R::SyncTimeoutExpired,
            true,
        ),
        (
            WaitReason::SwitchoverSettling,
            C::RollingUpdatePaused,
            R::SwitchoverFailed,
            true,
        ),
        (
            WaitReason::MultipleMasters,
            C::MultipleMasters,
            R::MultipleMastersPersisted,
            false,
        ),
    ];
    for (wait, type_, reason, clears) in table {
        let exit = wait.exit();
        assert_eq!(exit.condition(), (type_, reason), "{wait:?}");
        assert_eq!(exit.clears_state(), clears, "{wait:?}");
    }
}

#[test]
fn a_delete_the_observed_world_does_not_show_yet_is_waited_for_then_issued_again() {
    // A stale view right after deleting vk-2: it still shows the old pod, not terminating.
    let mut world = cluster(3, 0);
    outdate(&mut world, &[0, 1, 2]);
    let state = data_roll_after_delete(2, T0);
    let decision = next(&world, &state, T0.plus(500));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::PodTerminating,
            Some("vk-2".into()),
            T0.plus(vko_roll::DELETE_OBSERVED_MS)
        ))
    );
    // Never seen: the delete did not happen; it is issued again for the same pod.
    let decision = next(
        &world,
        &decision.state,
        T0.plus(vko_roll::DELETE_OBSERVED_MS),
    );
    assert_eq!(deleted(&decision), Some((Tier::Data, "vk-2".into())));
    // Seen terminating: the ordinary terminating wait.
    data_pod(&mut world, 2).terminating = terminating(T0);
    let decision = next(&world, &state, T0.plus(500));
    assert_eq!(
        wait(&decision),
        Some((
            WaitReason::PodTerminating,
            Some("vk-2".into()),
            T0.plus(30_000 + vko_roll::TERMINATION_STALL_MS)
        ))
    );
    // The same for a Sentinel pod.
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1, 2]);
    let state = RollState {
        tier: Some(Tier::Sentinel),
        data_target: Some(NEW.into()),
        sentinel_target: Some(NEW.into()),
        data_completed: true,
        last_deleted: Some(DeletedPod {
            tier: Tier::Sentinel,
            ordinal: 2,
            at: T0,
        }),
        ..RollState::default()
    };
    let decision = next(&world, &state, T0.plus(500));
    assert_eq!(
        wait(&decision).map(|w| (w.0, w.1)),
        Some((WaitReason::PodTerminating, Some("vk-sentinel-2".into())))
    );
}
