//! Scaling decisions (ADR 0024): the data StatefulSet never shrinks past the master, the machine
//! switches a master on a removed ordinal over into the tier that stays, and Sentinels are reset
//! one at a time, only on a calm cluster, to forget what a scale-down removed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use vko_roll::scale::{
    DataReplicas, ResetCause, ResetPlan, ScaleHold, SentinelAnswerView, SentinelMemory,
    SentinelReset, data_replicas, never_promote, sentinel_to_reset,
};
use vko_roll::{Action, RollState, Server, SwitchoverKind, Tier, WaitReason, next};

#[rustfmt::skip]
#[test]
fn the_data_statefulset_shrinks_only_once_the_master_is_below_the_new_count() {
    let apply = |apply, hold| DataReplicas { apply, hold };
    let on = |master| Some(ScaleHold::MasterOnRemovedOrdinal { master });
    // (desired, live, master) -> what is applied
    let table = [
        ((3, None,    None),    apply(3, None)),              // first apply
        ((5, Some(3), Some(0)), apply(5, None)),              // scale-up
        ((5, Some(3), None),    apply(5, None)),              // scale-up needs no master
        ((3, Some(3), Some(2)), apply(3, None)),              // no change
        ((2, Some(5), Some(0)), apply(2, None)),              // master stays: shrink at once
        ((2, Some(5), Some(1)), apply(2, None)),
        ((2, Some(5), Some(4)), apply(5, on(4))),             // master is the highest ordinal
        ((2, Some(5), Some(2)), apply(3, on(2))),             // the replicas above it may go
        ((1, Some(3), Some(2)), apply(3, on(2))),
        ((2, Some(5), None),    apply(5, Some(ScaleHold::MasterUnknown))),
        ((2, Some(4), Some(7)), apply(4, on(7))),             // a master above live: nothing goes
    ];
    for ((desired, live, master), want) in table {
        let got = data_replicas(desired, live, master, &master.into_iter().collect::<Vec<_>>());
        assert_eq!(got, want, "{desired} {live:?} {master:?}");
    }
    // The master was just switched over to 1; pod 4, the old master, still carries the label.
    let label = |ordinal| Some(ScaleHold::MasterLabelOnRemovedOrdinal { ordinal });
    assert_eq!(data_replicas(2, Some(5), Some(1), &[1, 4]), apply(5, label(4)));
    assert_eq!(data_replicas(2, Some(5), Some(1), &[1, 3]), apply(4, label(3)));
    // Relabelled: shrink. A label below the new count is no reason to wait.
    assert_eq!(data_replicas(2, Some(5), Some(1), &[1]), apply(2, None));
    assert_eq!(data_replicas(2, Some(5), Some(1), &[0, 1]), apply(2, None));
    // A scale-up never waits for labels.
    assert_eq!(data_replicas(5, Some(3), Some(1), &[1, 2]), apply(5, None));
}

/// 5 data pods, the master on ordinal 4, `spec.replicas` now 2.
fn scaling_down(sentinels: u32) -> vko_roll::World {
    let mut world = cluster(5, sentinels);
    make_master(&mut world, 4, 10_000, 100);
    world.data.replicas = 2;
    if sentinels == 0 {
        world.data.recorded_master = Some(4);
    }
    world
}

#[test]
fn a_master_on_a_removed_ordinal_is_switched_over_into_the_tier_that_stays() {
    for (sentinels, kind) in [
        (0, SwitchoverKind::Promote),
        (3, SwitchoverKind::SentinelFailover),
    ] {
        let mut world = scaling_down(sentinels);
        // The most caught-up replica overall is 3, but it is removed too: 1 is chosen.
        replica_info(&mut world, 3).offset = 10_000;
        replica_info(&mut world, 1).offset = 9_999;
        replica_info(&mut world, 0).offset = 9_990;
        let decision = next(&world, &RollState::default(), T0);
        assert_eq!(
            decision.action,
            Action::Switchover {
                from: 4,
                from_pod: "vk-4".into(),
                to: 1,
                to_pod: "vk-1".into(),
                kind,
            },
            "sentinels {sentinels}: {}",
            decision.summary
        );
        // Once the master is on 1 and the old one follows it, the scale-down is done: nothing
        // is deleted by the machine (the StatefulSet removes 2..4).
        let mut after = world.clone();
        make_master(&mut after, 1, 10_100, 100);
        let settled = next(&after, &decision.state, T0.plus(2_000));
        assert!(
            matches!(settled.action, Action::Done | Action::Idle),
            "sentinels {sentinels}: {:?} {}",
            settled.action,
            settled.summary
        );
    }
}

/// Sentinel picks the replica itself: every removed pod but the old master is excluded from its
/// choice (the switchover gives them `replica-priority 0` first).
#[test]
fn a_sentinel_switchover_of_a_scale_down_excludes_every_removed_replica() {
    let world = scaling_down(3);
    assert_eq!(never_promote(&world.data, 4), vec![2, 3]);
    // A pod the StatefulSet already removed is not excluded (there is nothing to set).
    let mut fewer = world.clone();
    remove_data_pod(&mut fewer, 3);
    assert_eq!(never_promote(&fewer.data, 4), vec![2]);
    // No scale-down: nothing excluded.
    let steady = cluster(3, 3);
    assert_eq!(never_promote(&steady.data, 0), Vec::<u32>::new());
}

#[test]
fn a_scale_down_to_one_replica_switches_a_master_on_a_removed_ordinal_over_to_pod_0() {
    let mut world = cluster(3, 0);
    make_master(&mut world, 2, 10_000, 100);
    world.data.recorded_master = Some(2);
    world.data.replicas = 1;
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(decision.action, Action::Switchover { from: 2, to: 0, .. }),
        "{:?} {}",
        decision.action,
        decision.summary
    );
}

#[test]
fn a_scale_down_whose_stayers_are_not_in_sync_waits_and_never_picks_a_removed_pod() {
    let mut world = scaling_down(0);
    replica_info(&mut world, 0).link_up = false;
    replica_info(&mut world, 1).syncing = true;
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        !matches!(
            decision.action,
            Action::Switchover { .. } | Action::DeletePod { .. }
        ),
        "{:?}",
        decision.action
    );
}

#[test]
fn a_scale_down_that_keeps_the_master_needs_no_roll() {
    let mut world = cluster(5, 3);
    world.data.replicas = 2;
    let decision = next(&world, &RollState::default(), T0);
    assert_eq!(decision.action, Action::Idle, "{}", decision.summary);
    // An empty pod answering master above the tier (e.g. a restarted removed pod) is still a
    // master outside the tier only when it is not terminating.
    let mut world = scaling_down(0);
    data_pod(&mut world, 4).terminating = terminating(T0);
    data_pod(&mut world, 4).server = Server::Unreachable;
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        !matches!(decision.action, Action::Switchover { .. }),
        "{:?}",
        decision.action
    );
}

fn calm(sentinels: u32, master: u32, others: u32, replicas: &[u32]) -> Vec<SentinelAnswerView> {
    (0..sentinels)
        .map(|ordinal| SentinelAnswerView {
            ordinal,
            ready: true,
            answer: Some(SentinelMemory {
                master: Some(master),
                other_sentinels: others,
                replicas: replicas.to_vec(),
            }),
        })
        .collect()
}

#[test]
fn sentinels_are_reset_one_at_a_time_only_on_a_calm_cluster() {
    let reset = |ordinal, cause| ResetPlan::Reset(SentinelReset { ordinal, cause });
    let pending = |plan: ResetPlan| matches!(plan, ResetPlan::Pending(_));
    // A data scale-down 5 -> 2 removed 2..4; every Sentinel still lists them.
    let data = [0, 1];
    let views = calm(3, 0, 2, &[1, 2, 3, 4]);
    assert_eq!(
        sentinel_to_reset(3, &views, &data, 2),
        reset(0, ResetCause::RemovedReplicas(vec![2, 3, 4]))
    );
    // Removed pods still terminating are not forgotten yet.
    assert_eq!(
        sentinel_to_reset(3, &views, &[0, 1, 2, 3, 4], 2),
        ResetPlan::Nothing
    );
    // Sentinel 0 was reset and has not rediscovered its peers or the replica 1: nobody else.
    let mut rediscovering = views.clone();
    rediscovering[0].answer = Some(SentinelMemory {
        master: Some(0),
        other_sentinels: 0,
        replicas: vec![],
    });
    assert!(pending(sentinel_to_reset(3, &rediscovering, &data, 2)));
    rediscovering[0].answer = Some(SentinelMemory {
        master: Some(0),
        other_sentinels: 2,
        replicas: vec![],
    });
    assert!(pending(sentinel_to_reset(3, &rediscovering, &data, 2)));
    // Rediscovered: the next one.
    let mut next_one = views.clone();
    next_one[0].answer = Some(SentinelMemory {
        master: Some(0),
        other_sentinels: 2,
        replicas: vec![1],
    });
    assert_eq!(
        sentinel_to_reset(3, &next_one, &data, 2),
        reset(1, ResetCause::RemovedReplicas(vec![2, 3, 4]))
    );
    // Nothing to forget.
    assert_eq!(
        sentinel_to_reset(3, &calm(3, 0, 2, &[1]), &data, 2),
        ResetPlan::Nothing
    );
}

#[test]
fn stale_sentinel_peers_are_reset_away_and_never_during_a_failover_or_with_a_sentinel_away() {
    // A Sentinel scale-down 5 -> 3: the survivors still know 4 others.
    let views = calm(3, 0, 4, &[1, 2]);
    let data = [0, 1, 2];
    assert_eq!(
        sentinel_to_reset(3, &views, &data, 3),
        ResetPlan::Reset(SentinelReset {
            ordinal: 0,
            cause: ResetCause::StalePeers {
                knows: 4,
                expected: 2
            }
        })
    );
    let pending = |plan: ResetPlan| matches!(plan, ResetPlan::Pending(_));
    // A failover runs (the Sentinels disagree, or one considers the master down): no reset.
    let mut failing = views.clone();
    if let Some(answer) = failing[2].answer.as_mut() {
        answer.master = Some(1);
    }
    assert!(pending(sentinel_to_reset(3, &failing, &data, 3)));
    let mut down = views.clone();
    if let Some(answer) = down[1].answer.as_mut() {
        answer.master = None;
    }
    assert!(pending(sentinel_to_reset(3, &down, &data, 3)));
    // A Sentinel does not answer, is not ready, or the tier still has a removed pod: no reset.
    let mut silent = views.clone();
    silent[1].answer = None;
    assert!(pending(sentinel_to_reset(3, &silent, &data, 3)));
    let mut unready = views.clone();
    unready[2].ready = false;
    assert!(pending(sentinel_to_reset(3, &unready, &data, 3)));
    // The removed Sentinel pods still exist (terminating): not yet.
    assert!(pending(sentinel_to_reset(
        3,
        &calm(5, 0, 4, &[1, 2]),
        &data,
        3
    )));
    // A Sentinel scale-up 3 -> 5 in progress: knowing fewer peers than 4 is nothing to forget.
    assert_eq!(
        sentinel_to_reset(5, &calm(5, 0, 2, &[1, 2]), &data, 3),
        ResetPlan::Nothing
    );
    // One stale, another still rediscovering after its own reset: not now.
    let mut one_at_a_time = calm(3, 0, 4, &[1, 2]);
    one_at_a_time[0].answer = Some(SentinelMemory {
        master: Some(0),
        other_sentinels: 1,
        replicas: vec![1, 2],
    });
    assert!(pending(sentinel_to_reset(3, &one_at_a_time, &data, 3)));
}

#[test]
fn a_sentinel_roll_replaces_no_ready_sentinel_while_sentinels_remember_removed_peers() {
    // A Sentinel scale-down 5 -> 3 changes the quorum, so the survivors roll; while they still
    // count the removed two, replacing one would leave two of an electorate of five.
    let mut world = cluster(3, 3);
    outdate_sentinels(&mut world, &[0, 1, 2]);
    if let Some(tier) = world.sentinel.as_mut() {
        tier.view.stale_peers = true;
    }
    let decision = next(&world, &RollState::default(), T0);
    assert!(
        matches!(
            decision.action,
            Action::Wait {
                reason: WaitReason::SentinelQuorum,
                ..
            }
        ),
        "{:?} {}",
        decision.action,
        decision.summary
    );
    if let Some(tier) = world.sentinel.as_mut() {
        tier.view.stale_peers = false;
    }
    let decision = next(&world, &decision.state, T0.plus(3_000));
    assert!(
        matches!(
            decision.action,
            Action::DeletePod {
                tier: Tier::Sentinel,
                ordinal: 2,
                ..
            }
        ),
        "{:?} {}",
        decision.action,
        decision.summary
    );
}
