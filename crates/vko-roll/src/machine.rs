//! [`next`]: one pass of the rolling-update state machine.

use vko_api::{ConditionReason, ConditionType, Phase};

use crate::decision::{
    Action, ConditionChange, Decision, DeletedPod, EventNote, EventReason, PauseReason, Progress,
    RollState, SwitchoverKind, SwitchoverRecord, WaitReason, WaitRecord, WriteWhen,
};
use crate::world::{DataPod, MasterInfo, Millis, ReplicaInfo, Server, Terminating, Tier, World};
use crate::{
    CATCH_UP_LAG_BYTES, DELETE_OBSERVED_MS, MAX_SWITCHOVER_ATTEMPTS, MULTIPLE_MASTERS_BOUND_MS,
    RECREATION_STALL_MS, SWITCHOVER_SETTLE_MS, TERMINATION_STALL_MS,
};

/// Decides the next single step of the rolling update from what was observed (`observed`), what
/// was recorded after the previous pass (`recorded`) and the time (`now`, ms since the epoch).
///
/// Total: never fails, and every outcome is an action, a bounded [`Action::Wait`], a named
/// [`Action::Pause`], [`Action::Done`] or [`Action::Idle`].
pub fn next(observed: &World, recorded: &RollState, now: Millis) -> Decision {
    Pass {
        world: observed,
        now,
        state: recorded.clone(),
        conditions: Vec::new(),
        events: Vec::new(),
    }
    .run()
}

/// One pass: the state being built and the condition/Event changes collected on the way.
struct Pass<'a> {
    world: &'a World,
    now: Millis,
    state: RollState,
    conditions: Vec<ConditionChange>,
    events: Vec<EventNote>,
}

/// The authority's master, reachable and answering `role:master`.
struct Master<'a> {
    pod: &'a DataPod,
    info: &'a MasterInfo,
}

impl<'a> Pass<'a> {
    fn run(&mut self) -> Decision {
        let world = self.world;
        if world.sentinel.is_none() {
            self.condition(
                ConditionType::SentinelUpdatePending,
                false,
                ConditionReason::SentinelDisabled,
                "Sentinel was disabled while its tier was rolling".into(),
                WriteWhen::IfTrue,
            );
        }
        let sidecar_deferred = self.sidecar_deferred();
        let data_outdated = self.data_outdated() && sidecar_deferred.is_none();
        let sentinel_outdated = self.sentinel_outdated();
        if let Some(message) = &sidecar_deferred {
            self.condition(
                ConditionType::SidecarUpdatePending,
                true,
                ConditionReason::SidecarImageOutdated,
                message.clone(),
                WriteWhen::Always,
            );
        }

        // Which tier rolls; a changed target (spec change mid-roll) restarts from the beginning.
        let data_target = &world.data.target_hash;
        let sentinel_target = world.sentinel.as_ref().map(|s| s.target_hash.clone());
        let restart = match self.state.tier {
            None => true,
            Some(Tier::Data) => self.state.data_target.as_ref() != Some(data_target),
            Some(Tier::Sentinel) => {
                data_outdated
                    || sentinel_target.is_none()
                    || self.state.sentinel_target != sentinel_target
            }
        };
        if restart {
            let rolled_sentinel = self.state.tier == Some(Tier::Sentinel);
            // A roll in flight whose pods are still coming back keeps going on the new target
            // (it finishes with its Done once they are), rather than going idle with a pod
            // missing.
            let was_rolling = self.state.tier.is_some();
            let data_outdated = data_outdated
                || (was_rolling && !rolled_sentinel && self.tier_incomplete(Tier::Data));
            let sentinel_outdated = sentinel_outdated
                || (rolled_sentinel
                    && sentinel_target.is_some()
                    && self.tier_incomplete(Tier::Sentinel));
            self.state = RollState {
                data_rolled: self.state.data_rolled && self.state.tier.is_some(),
                last_deleted: self.state.last_deleted.take(),
                switchover: self.state.switchover.take(),
                multiple_masters_since: self.state.multiple_masters_since,
                split_brain_reported: self.state.split_brain_reported,
                ..RollState::default()
            };
            if data_outdated {
                self.state.tier = Some(Tier::Data);
                self.state.data_target = Some(data_target.clone());
            } else if sentinel_outdated {
                self.state.tier = Some(Tier::Sentinel);
                self.state.data_completed = true;
                self.state.data_target = Some(data_target.clone());
                self.state.sentinel_target = sentinel_target;
            } else {
                return self.idle(sidecar_deferred, rolled_sentinel);
            }
        }
        match self.state.tier {
            Some(Tier::Sentinel) => self.sentinel_pass(),
            _ => self.data_pass(),
        }
    }

    // ----- the data tier -------------------------------------------------------------------

    fn data_pass(&mut self) -> Decision {
        let world = self.world;
        let replicas = world.data.replicas;
        if let Some(decision) = self.multiple_masters() {
            return decision;
        }
        if let Some(decision) = self.tier_terminating(Tier::Data) {
            return decision;
        }
        if let Some(decision) = self.tier_missing(Tier::Data) {
            return decision;
        }
        if let Some(pod) = self
            .updated_data_pods()
            .find(|pod| !pod.ready || pod.server == Server::Unreachable)
        {
            return self.wait_for(
                WaitReason::PodSync,
                Some(pod.name.clone()),
                format!("waiting for {} to become ready", pod.name),
            );
        }
        // A scale-down whose removed ordinals hold the master goes through the switchover below
        // even to a single replica: the StatefulSet may only shrink once the master is in the
        // tier that stays (ADR 0024).
        if replicas <= 1 && !self.master_outside_tier() {
            return self.single_replica_pass();
        }
        let Some(master) = self.master() else {
            return self.wait_for(
                WaitReason::MasterUnknown,
                None,
                self.master_unknown_message(),
            );
        };
        if let Some(decision) = self.switchover_in_flight(&master) {
            return decision;
        }
        if let Some(pod) = self
            .updated_data_pods()
            .filter(|pod| pod.ordinal != master.pod.ordinal)
            .find(|pod| !settled_replica(pod, &master))
        {
            return self.wait_for(
                WaitReason::PodSync,
                Some(pod.name.clone()),
                format!(
                    "waiting for {} to be an in-sync replica of {}",
                    pod.name, master.pod.name
                ),
            );
        }
        // Replicas first: the ones not serving as a replica anyway, then the highest ordinal.
        let mut outdated: Vec<&DataPod> = self
            .tier_data_pods()
            .filter(|pod| pod.template_hash != world.data.target_hash)
            .filter(|pod| pod.ordinal != master.pod.ordinal && !pod.server.is_master())
            .collect();
        outdated.sort_by_key(|pod| {
            (
                settled_replica(pod, &master),
                std::cmp::Reverse(pod.ordinal),
            )
        });
        if let Some(pod) = outdated.first() {
            return self.delete(Tier::Data, pod.ordinal, pod.name.clone());
        }
        if master.pod.template_hash != world.data.target_hash
            || master.pod.ordinal >= world.data.replicas
        {
            return self.switchover(&master);
        }
        // Done only once the Sentinels list every replica: one they do not know is neither a
        // failover candidate nor reconfigured after a failover, and the status calls the cluster
        // not ready until they do (a roll that ended earlier left a ClusterNotReady Warning).
        if let Some(tier) = world.sentinel.as_ref()
            && let Some(pod) = self
                .updated_data_pods()
                .filter(|pod| {
                    pod.ordinal != master.pod.ordinal && pod.ordinal < world.data.replicas
                })
                .find(|pod| !tier.view.known_replicas.contains(&pod.ordinal))
        {
            return self.wait_for(
                WaitReason::PodSync,
                Some(pod.name.clone()),
                format!(
                    "waiting for the Sentinels to list {} as a replica of {}",
                    pod.name, master.pod.name
                ),
            );
        }
        self.data_complete()
    }

    /// Single-replica cluster: no failover target, so the only pod is restarted in place.
    fn single_replica_pass(&mut self) -> Decision {
        let world = self.world;
        let Some(pod) = self.world.data_pod(0) else {
            return self.data_complete();
        };
        if pod.template_hash != world.data.target_hash {
            let loses_data = !world.persistence && pod.server.holds_data();
            self.state.last_deleted = Some(DeletedPod {
                tier: Tier::Data,
                ordinal: pod.ordinal,
                at: self.now,
            });
            self.state.data_rolled = true;
            self.state.wait = None;
            let summary = if loses_data {
                format!(
                    "restarting {} in place (single replica, no persistence: it restarts empty)",
                    pod.name
                )
            } else {
                format!("restarting {} in place (single replica)", pod.name)
            };
            return self.decide(
                Action::RestartInPlace {
                    ordinal: pod.ordinal,
                    pod: pod.name.clone(),
                    loses_data,
                },
                self.rolling_phase(Tier::Data),
                summary,
            );
        }
        if !pod.server.is_master() {
            return self.wait_for(
                WaitReason::PodSync,
                Some(pod.name.clone()),
                format!("waiting for {} to serve as master", pod.name),
            );
        }
        self.data_complete()
    }

    /// The data tier runs the target template everywhere and is in sync: record it, then roll
    /// the Sentinel tier or finish.
    fn data_complete(&mut self) -> Decision {
        if !self.state.data_completed {
            self.state.data_completed = true;
            if self.state.data_rolled {
                self.events.push(EventNote {
                    reason: EventReason::RollingUpdateComplete,
                    message: format!(
                        "all {} data pods run the current template",
                        self.world.data.replicas
                    ),
                });
            }
        }
        if self.sentinel_outdated() {
            self.state.tier = Some(Tier::Sentinel);
            self.state.sentinel_target =
                self.world.sentinel.as_ref().map(|s| s.target_hash.clone());
            self.state.wait = None;
            return self.sentinel_pass();
        }
        // Done means every pod of both tiers exists and stays: wait for a Sentinel pod that is
        // on its way out or back (bounded like in a Sentinel roll).
        if let Some(decision) = self.tier_terminating(Tier::Sentinel) {
            return decision;
        }
        if let Some(decision) = self.tier_missing(Tier::Sentinel) {
            return decision;
        }
        self.done(false)
    }

    /// The master as the authority sees it: with Sentinel the majority's answer, which must also
    /// be the pod answering master; without, the single pod answering master.
    fn master(&self) -> Option<Master<'a>> {
        let world = self.world;
        let answering: Vec<&DataPod> = world
            .data
            .pods
            .iter()
            .filter(|pod| pod.terminating.is_none() && pod.server.is_master())
            .collect();
        let [pod] = answering.as_slice() else {
            return None;
        };
        if let Some(sentinel) = &world.sentinel
            && sentinel.view.master != Some(pod.ordinal)
        {
            return None;
        }
        match &pod.server {
            Server::Master(info) => Some(Master { pod, info }),
            _ => None,
        }
    }

    fn master_unknown_message(&self) -> String {
        let answering: Vec<&str> = self
            .world
            .data
            .pods
            .iter()
            .filter(|pod| pod.terminating.is_none() && pod.server.is_master())
            .map(|pod| pod.name.as_str())
            .collect();
        let sentinel = match &self.world.sentinel {
            Some(tier) => match tier.view.master {
                Some(ordinal) => format!("; the Sentinel majority names ordinal {ordinal}"),
                None => format!(
                    "; no Sentinel majority names a master ({} answered)",
                    tier.view.answered
                ),
            },
            None => String::new(),
        };
        if answering.is_empty() {
            format!("waiting for a master: no data pod answers master{sentinel}")
        } else {
            format!(
                "waiting for a master: {} answer master{sentinel}",
                answering.join(", ")
            )
        }
    }

    /// Follows up a switchover issued earlier: done once the old master follows the new one.
    fn switchover_in_flight(&mut self, master: &Master<'a>) -> Option<Decision> {
        let record = self.state.switchover.clone()?;
        let settle_deadline = record.started.plus(SWITCHOVER_SETTLE_MS);
        if master.pod.ordinal == record.from {
            // Not taken effect (the executor rolled back, or Sentinel has not switched yet).
            if self.now < settle_deadline {
                return Some(self.wait_until(
                    WaitReason::SwitchoverSettling,
                    Some(master.pod.name.clone()),
                    settle_deadline,
                    format!(
                        "waiting for the switchover from {} to take effect",
                        master.pod.name
                    ),
                ));
            }
            if record.attempts >= MAX_SWITCHOVER_ATTEMPTS {
                return Some(self.pause(
                    PauseReason::SwitchoverFailed,
                    Some(master.pod.name.clone()),
                    format!(
                        "the switchover away from {} did not take effect after {} attempts",
                        master.pod.name, record.attempts
                    ),
                ));
            }
            // Past the settle deadline: the switchover step below issues it again.
            return None;
        }
        let old = self.world.data_pod(record.from);
        let follows = old.is_none_or(|pod| match &pod.server {
            Server::Replica(info) => info.following == Some(master.pod.ordinal) && info.link_up,
            _ => false,
        });
        if follows {
            self.state.switchover = None;
            return None;
        }
        let old_offset = old.and_then(|pod| pod.server.progress()).map(|(o, _)| o);
        if self.now < settle_deadline {
            let name = old.map(|pod| pod.name.clone());
            return Some(self.wait_until(
                WaitReason::SwitchoverSettling,
                name.clone(),
                settle_deadline,
                format!(
                    "waiting for the former master {} to follow {}",
                    name.unwrap_or_default(),
                    master.pod.name
                ),
            ));
        }
        // The old master never followed. It is an outdated pod like any other once the new master
        // provably holds everything it had (unreachable: it was caught up when writes paused).
        if old_offset.is_none_or(|offset| offset <= master.info.offset) {
            self.state.switchover = None;
            return None;
        }
        let name = old.map(|pod| pod.name.clone());
        Some(self.pause(
            PauseReason::SwitchoverFailed,
            name.clone(),
            format!(
                "the former master {} did not follow {} and is ahead of it",
                name.unwrap_or_default(),
                master.pod.name
            ),
        ))
    }

    /// The master runs an outdated template (or sits on an ordinal a scale-down removes) and
    /// every replica is current: hand it over to the most caught-up updated replica of the tier
    /// that stays.
    fn switchover(&mut self, master: &Master<'a>) -> Decision {
        let world = self.world;
        let sentinel = world.sentinel.as_ref();
        if let Some(tier) = sentinel
            && tier.view.agreeing < tier.quorum.max(1)
        {
            return self.wait_for(
                WaitReason::SentinelQuorum,
                None,
                format!(
                    "waiting for {} Sentinels to agree on {} before the switchover ({} do)",
                    tier.quorum, master.pod.name, tier.view.agreeing
                ),
            );
        }
        let candidate = self
            .updated_data_pods()
            .filter(|pod| pod.ordinal != master.pod.ordinal && pod.ordinal < world.data.replicas)
            .filter(|pod| pod.ready && settled_replica(pod, master))
            .filter_map(|pod| match &pod.server {
                Server::Replica(info) => Some((pod, info)),
                _ => None,
            })
            // Never an empty replica over a master holding keys.
            .filter(|(_, info)| master.info.keys == 0 || info.keys > 0)
            .filter(|(pod, _)| {
                sentinel.is_none_or(|tier| tier.view.known_replicas.contains(&pod.ordinal))
            })
            .max_by_key(|(pod, info)| (info.offset, info.keys, std::cmp::Reverse(pod.ordinal)));
        let Some((to, _)) = candidate else {
            return self.wait_for(
                WaitReason::SwitchoverCandidate,
                Some(master.pod.name.clone()),
                format!(
                    "waiting for an updated, caught-up replica to take over from {}",
                    master.pod.name
                ),
            );
        };
        let attempts = match &self.state.switchover {
            Some(record) if record.from == master.pod.ordinal => record.attempts + 1,
            _ => 1,
        };
        self.state.switchover = Some(SwitchoverRecord {
            from: master.pod.ordinal,
            to: to.ordinal,
            started: self.now,
            attempts,
        });
        self.state.wait = None;
        let kind = if sentinel.is_some() {
            SwitchoverKind::SentinelFailover
        } else {
            SwitchoverKind::Promote
        };
        let summary = format!(
            "switching the master over from {} to {}",
            master.pod.name, to.name
        );
        self.decide(
            Action::Switchover {
                from: master.pod.ordinal,
                from_pod: master.pod.name.clone(),
                to: to.ordinal,
                to_pod: to.name.clone(),
                kind,
            },
            Some(Phase::FailoverInProgress),
            summary,
        )
    }

    /// Several data pods answer master. Resolved toward the authority only when the rogue's
    /// data is provably contained in the authority's; otherwise reported and held.
    fn multiple_masters(&mut self) -> Option<Decision> {
        let world = self.world;
        let masters: Vec<(&DataPod, &MasterInfo)> = world
            .data
            .pods
            .iter()
            .filter(|pod| pod.terminating.is_none())
            .filter_map(|pod| match &pod.server {
                Server::Master(info) => Some((pod, info)),
                _ => None,
            })
            .collect();
        if masters.len() < 2 {
            self.state.multiple_masters_since = None;
            self.state.split_brain_reported = false;
            self.condition(
                ConditionType::MultipleMasters,
                false,
                ConditionReason::SingleMaster,
                "at most one data pod answers master".into(),
                WriteWhen::IfTrue,
            );
            return None;
        }
        let since = *self.state.multiple_masters_since.get_or_insert(self.now);
        let persisted = self.now.since(since) >= MULTIPLE_MASTERS_BOUND_MS;
        let authority = match &world.sentinel {
            Some(tier) => tier.view.master,
            None => self
                .state
                .switchover
                .as_ref()
                .map(|record| record.to)
                .filter(|to| masters.iter().any(|(pod, _)| pod.ordinal == *to))
                .or(world.data.recorded_master),
        };
        let keeper = authority.and_then(|a| masters.iter().find(|(pod, _)| pod.ordinal == a));
        let names: Vec<&str> = masters.iter().map(|(pod, _)| pod.name.as_str()).collect();
        let authority_text = match keeper {
            Some((pod, _)) => format!("the authority names {}", pod.name),
            None => "no authority names one of them".to_owned(),
        };
        let message = format!("{} answer master; {authority_text}", names.join(", "));
        let reason = if persisted {
            ConditionReason::MultipleMastersPersisted
        } else {
            ConditionReason::MultipleMastersTransitional
        };
        self.condition(
            ConditionType::MultipleMasters,
            true,
            reason,
            message.clone(),
            WriteWhen::Always,
        );
        if persisted && !self.state.split_brain_reported {
            self.state.split_brain_reported = true;
            self.events.push(EventNote {
                reason: EventReason::SplitBrainDetected,
                message: message.clone(),
            });
        }
        // A master may be demoted only toward one whose history provably contains every write
        // it acknowledged. With Sentinel only toward the Sentinels' master (demoting theirs would
        // start a fight with them); without, toward any master, the authority's first.
        let mut pairs: Vec<(&DataPod, &DataPod)> = Vec::new();
        for (winner, winner_info) in &masters {
            if world.sentinel.is_some() && authority != Some(winner.ordinal) {
                continue;
            }
            for (loser, loser_info) in &masters {
                if loser.ordinal != winner.ordinal && winner_info.contains(loser_info) {
                    pairs.push((loser, winner));
                }
            }
        }
        pairs.sort_by_key(|(loser, winner)| (Some(winner.ordinal) != authority, loser.ordinal));
        let demotable = pairs.first().copied();
        if let Some((rogue, keeper)) = demotable {
            self.state.wait = None;
            let summary = format!(
                "demoting {} to a replica of {} ({message})",
                rogue.name, keeper.name
            );
            let phase = self.rolling_phase(self.state.tier.unwrap_or(Tier::Data));
            return Some(self.decide(
                Action::Demote {
                    ordinal: rogue.ordinal,
                    pod: rogue.name.clone(),
                    replica_of: keeper.ordinal,
                    replica_of_pod: keeper.name.clone(),
                },
                phase,
                summary,
            ));
        }
        let deadline = since.plus(MULTIPLE_MASTERS_BOUND_MS);
        Some(self.wait_until(
            WaitReason::MultipleMasters,
            None,
            deadline,
            format!("{message}; demoting either could discard data"),
        ))
    }

    // ----- the Sentinel tier ---------------------------------------------------------------

    fn sentinel_pass(&mut self) -> Decision {
        let world = self.world;
        let Some(tier) = world.sentinel.as_ref() else {
            return self.done(false);
        };
        self.condition(
            ConditionType::SentinelUpdatePending,
            true,
            ConditionReason::SentinelPodsOutdated,
            format!(
                "the Sentinel tier is rolling to template {}",
                tier.target_hash
            ),
            WriteWhen::Always,
        );
        if world.data.replicas > 1
            && let Some(decision) = self.multiple_masters()
        {
            return decision;
        }
        if let Some(decision) = self.tier_terminating(Tier::Sentinel) {
            return decision;
        }
        if let Some(decision) = self.tier_missing(Tier::Sentinel) {
            return decision;
        }
        let in_tier = |ordinal: u32| ordinal < tier.replicas;
        if let Some(pod) = tier
            .pods
            .iter()
            .filter(|pod| in_tier(pod.ordinal) && pod.template_hash == tier.target_hash)
            .find(|pod| !pod.ready)
        {
            return self.wait_for(
                WaitReason::PodSync,
                Some(pod.name.clone()),
                format!("waiting for {} to become ready", pod.name),
            );
        }
        let mut outdated: Vec<_> = tier
            .pods
            .iter()
            .filter(|pod| in_tier(pod.ordinal) && pod.template_hash != tier.target_hash)
            .collect();
        // Unready ones first (deleting them costs no quorum), then the highest ordinal.
        outdated.sort_by_key(|pod| (pod.ready, std::cmp::Reverse(pod.ordinal)));
        let Some(pod) = outdated.first() else {
            return self.done(true);
        };
        if pod.ready {
            let ready = tier
                .pods
                .iter()
                .filter(|p| in_tier(p.ordinal) && p.ready && p.terminating.is_none())
                .count();
            let ready = u32::try_from(ready).unwrap_or(u32::MAX);
            let quorum = tier.quorum.max(1);
            // A tier with no pod to spare above quorum (1 Sentinel, or quorum = replicas) can
            // only be rolled through a brief loss of quorum: then every pod must be ready first.
            let spare = if tier.replicas > quorum {
                ready > quorum
            } else {
                ready >= tier.replicas
            };
            if tier.view.stale_peers {
                return self.wait_for(
                    WaitReason::SentinelQuorum,
                    Some(pod.name.clone()),
                    format!(
                        "waiting before replacing {}: Sentinels still know removed peers (reset one at a time first)",
                        pod.name
                    ),
                );
            }
            if !spare || tier.view.master.is_none() || tier.view.agreeing < quorum.min(ready) {
                return self.wait_for(
                    WaitReason::SentinelQuorum,
                    Some(pod.name.clone()),
                    format!(
                        "waiting before replacing {}: {ready} Sentinels ready, {} agree on the master, quorum {quorum}",
                        pod.name, tier.view.agreeing
                    ),
                );
            }
        }
        self.delete(Tier::Sentinel, pod.ordinal, pod.name.clone())
    }

    // ----- gates shared by both tiers ------------------------------------------------------

    /// Never delete a pod of a tier while another is on its way out.
    fn tier_terminating(&mut self, tier: Tier) -> Option<Decision> {
        if let Some(decision) = self.deletion_unobserved(tier) {
            return Some(decision);
        }
        let terminating: Vec<(String, Terminating)> = match tier {
            Tier::Data => self
                .world
                .data
                .pods
                .iter()
                .filter_map(|pod| pod.terminating.map(|t| (pod.name.clone(), t)))
                .collect(),
            Tier::Sentinel => self
                .world
                .sentinel
                .iter()
                .flat_map(|s| s.pods.iter())
                .filter_map(|pod| pod.terminating.map(|t| (pod.name.clone(), t)))
                .collect(),
        };
        let Some((name, term)) = terminating
            .into_iter()
            .min_by_key(|(name, term)| (term.grace_deadline, name.clone()))
        else {
            self.condition(
                ConditionType::PodTerminationStalled,
                false,
                ConditionReason::PodTerminationCleared,
                "no pod of the rolling tier is stuck terminating".into(),
                WriteWhen::IfTrue,
            );
            return None;
        };
        let deadline = term.grace_deadline.plus(TERMINATION_STALL_MS);
        if self.now < deadline {
            return Some(self.wait_until(
                WaitReason::PodTerminating,
                Some(name.clone()),
                deadline,
                format!("waiting for {name} to terminate"),
            ));
        }
        let past = self.now.since(term.grace_deadline) / 1000;
        Some(self.pause(
            PauseReason::PodTerminationStalled,
            Some(name.clone()),
            format!(
                "{name} has been terminating for {past}s past its grace deadline; the roll holds (check its node, finalizers, and whether it ignores SIGTERM)"
            ),
        ))
    }

    /// The pod deleted last still shows its old template and no deletion: the operator's view
    /// lags behind its own delete (a stale cache), or the delete failed. Acting on that view could
    /// delete a second pod, so wait a little; then forget the delete, and the pod, still outdated,
    /// is deleted again (deleting is idempotent).
    fn deletion_unobserved(&mut self, tier: Tier) -> Option<Decision> {
        let world = self.world;
        let deleted = self.state.last_deleted.clone().filter(|d| d.tier == tier)?;
        let (name, still_old) = match tier {
            Tier::Data => {
                let pod = world.data_pod(deleted.ordinal)?;
                (
                    pod.name.clone(),
                    pod.terminating.is_none() && pod.template_hash != world.data.target_hash,
                )
            }
            Tier::Sentinel => {
                let sentinel = world.sentinel.as_ref()?;
                let pod = world.sentinel_pod(deleted.ordinal)?;
                (
                    pod.name.clone(),
                    pod.terminating.is_none() && pod.template_hash != sentinel.target_hash,
                )
            }
        };
        if !still_old {
            return None;
        }
        let deadline = deleted.at.plus(DELETE_OBSERVED_MS);
        if self.now >= deadline {
            self.state.last_deleted = None;
            return None;
        }
        Some(self.wait_until(
            WaitReason::PodTerminating,
            Some(name.clone()),
            deadline,
            format!("waiting to see the deletion of {name}"),
        ))
    }

    /// A pod of the tier that does not exist: the StatefulSet has not recreated it yet.
    fn tier_missing(&mut self, tier: Tier) -> Option<Decision> {
        let world = self.world;
        let missing = match tier {
            Tier::Data => (0..world.data.replicas).find(|o| world.data_pod(*o).is_none()),
            Tier::Sentinel => world
                .sentinel
                .as_ref()
                .and_then(|s| (0..s.replicas).find(|o| world.sentinel_pod(*o).is_none())),
        };
        let Some(ordinal) = missing else {
            self.condition(
                ConditionType::PodRecreationStalled,
                false,
                ConditionReason::PodRecreated,
                "every pod of the rolling tier exists".into(),
                WriteWhen::IfTrue,
            );
            return None;
        };
        let name = pod_name(world, tier, ordinal);
        let deleted_at = self
            .state
            .last_deleted
            .as_ref()
            .filter(|d| d.tier == tier && d.ordinal == ordinal)
            .map(|d| d.at);
        let started = match (deleted_at, self.state.wait) {
            (Some(at), _) => at,
            (
                None,
                Some(WaitRecord {
                    reason: WaitReason::PodRecreation,
                    since,
                }),
            ) => since,
            (None, _) => self.now,
        };
        let deadline = started.plus(RECREATION_STALL_MS);
        if self.now < deadline {
            self.state.wait = Some(WaitRecord {
                reason: WaitReason::PodRecreation,
                since: started,
            });
            return Some(self.wait_until(
                WaitReason::PodRecreation,
                Some(name.clone()),
                deadline,
                format!("waiting for the StatefulSet to recreate {name}"),
            ));
        }
        let missing_for = self.now.since(started) / 1000;
        Some(self.pause(
            PauseReason::PodRecreationStalled,
            Some(name.clone()),
            format!(
                "{name} has not been recreated for {missing_for}s; the roll holds (see the StatefulSet events FailedCreate/FailedUpdate)"
            ),
        ))
    }

    // ----- observations --------------------------------------------------------------------

    /// Data pods of the tier (ordinal below `replicas`).
    fn tier_data_pods(&self) -> impl Iterator<Item = &'a DataPod> + use<'a> {
        let replicas = self.world.data.replicas;
        self.world
            .data
            .pods
            .iter()
            .filter(move |pod| pod.ordinal < replicas)
    }

    /// Data pods of the tier already on the target template and not leaving.
    fn updated_data_pods(&self) -> impl Iterator<Item = &'a DataPod> + use<'a> {
        let target = &self.world.data.target_hash;
        self.tier_data_pods()
            .filter(move |pod| pod.template_hash == *target && pod.terminating.is_none())
    }

    /// Whether a pod of the tier is missing or terminating.
    fn tier_incomplete(&self, tier: Tier) -> bool {
        let world = self.world;
        match tier {
            Tier::Data => {
                world.data.pods.iter().any(|pod| pod.terminating.is_some())
                    || (0..world.data.replicas).any(|o| world.data_pod(o).is_none())
            }
            Tier::Sentinel => world.sentinel.as_ref().is_some_and(|s| {
                s.pods.iter().any(|pod| pod.terminating.is_some())
                    || (0..s.replicas).any(|o| world.sentinel_pod(o).is_none())
            }),
        }
    }

    fn data_outdated(&self) -> bool {
        self.tier_data_pods()
            .any(|pod| pod.template_hash != self.world.data.target_hash)
            || self.master_outside_tier()
    }

    /// A scale-down is pending whose removed ordinals (at or above `replicas`) hold the pod that
    /// answers master: it must be switched over into the tier that stays before the StatefulSet
    /// may shrink (ADR 0024).
    fn master_outside_tier(&self) -> bool {
        let replicas = self.world.data.replicas;
        self.world.data.pods.iter().any(|pod| {
            pod.ordinal >= replicas && pod.terminating.is_none() && pod.server.is_master()
        })
    }

    fn sentinel_outdated(&self) -> bool {
        self.world.sentinel.as_ref().is_some_and(|tier| {
            tier.pods
                .iter()
                .any(|pod| pod.ordinal < tier.replicas && pod.template_hash != tier.target_hash)
        })
    }

    /// `Some(message)` when the single data pod differs only in its sidecar image.
    fn sidecar_deferred(&self) -> Option<String> {
        let data = &self.world.data;
        if data.replicas != 1 || !data.sidecar_only_change {
            return None;
        }
        let pod = self.world.data_pod(0)?;
        (pod.template_hash != data.target_hash).then(|| {
            format!(
                "{} runs an outdated sidecar image; with spec.replicas {} it is not restarted for that (it updates on its next restart)",
                pod.name, data.replicas
            )
        })
    }

    fn rolling_phase(&self, tier: Tier) -> Option<Phase> {
        let (updated, total) = match tier {
            Tier::Data => {
                // Replaced = on the target template, ready and serving: the master, or an
                // in-sync replica of it.
                let master = self.master();
                let updated = self
                    .updated_data_pods()
                    .filter(|pod| pod.ready && pod.server != Server::Unreachable)
                    .filter(|pod| match &master {
                        Some(master) => {
                            pod.ordinal == master.pod.ordinal || settled_replica(pod, master)
                        }
                        None => true,
                    })
                    .count();
                (updated, self.world.data.replicas)
            }
            Tier::Sentinel => {
                let tier = self.world.sentinel.as_ref()?;
                let updated = tier
                    .pods
                    .iter()
                    .filter(|pod| {
                        pod.ordinal < tier.replicas
                            && pod.template_hash == tier.target_hash
                            && pod.ready
                            && pod.terminating.is_none()
                    })
                    .count();
                (updated, tier.replicas)
            }
        };
        let updated = u32::try_from(updated).unwrap_or(u32::MAX);
        let current = updated.saturating_add(1).min(total).max(1);
        let progress = Progress { current, total };
        let to_i32 = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
        Some(match tier {
            Tier::Data => Phase::RollingUpdate {
                current: to_i32(progress.current),
                total: to_i32(progress.total),
            },
            Tier::Sentinel => Phase::SentinelRollingUpdate {
                current: to_i32(progress.current),
                total: to_i32(progress.total),
            },
        })
    }

    // ----- building decisions --------------------------------------------------------------

    fn condition(
        &mut self,
        type_: ConditionType,
        status: bool,
        reason: ConditionReason,
        message: String,
        when: WriteWhen,
    ) {
        self.conditions.retain(|c| c.type_ != type_);
        self.conditions.push(ConditionChange {
            type_,
            status,
            reason,
            message,
            when,
        });
    }

    fn decide(&mut self, action: Action, phase: Option<Phase>, summary: String) -> Decision {
        self.state.progress = match &phase {
            Some(Phase::RollingUpdate { current, total })
            | Some(Phase::SentinelRollingUpdate { current, total }) => Some(Progress {
                current: u32::try_from(*current).unwrap_or(0),
                total: u32::try_from(*total).unwrap_or(0),
            }),
            _ => self.state.progress,
        };
        Decision {
            action,
            state: std::mem::take(&mut self.state),
            phase,
            summary,
            conditions: std::mem::take(&mut self.conditions),
            events: std::mem::take(&mut self.events),
        }
    }

    fn delete(&mut self, tier: Tier, ordinal: u32, pod: String) -> Decision {
        let phase = self.rolling_phase(tier);
        self.state.last_deleted = Some(DeletedPod {
            tier,
            ordinal,
            at: self.now,
        });
        if tier == Tier::Data {
            self.state.data_rolled = true;
        }
        self.state.wait = None;
        let summary = format!("replacing {pod}");
        self.decide(Action::DeletePod { tier, ordinal, pod }, phase, summary)
    }

    /// When the wait for `reason` began: the recorded one's start if it is the same wait, else now.
    fn wait_began(&self, reason: WaitReason) -> Millis {
        match self.state.wait {
            Some(record) if record.reason == reason => record.since,
            _ => self.now,
        }
    }

    /// A wait bounded by the sync timeout (`spec.rollingUpdate.syncTimeout`, the bound of every
    /// wait of a roll) from when this wait (same reason) began.
    fn wait_for(&mut self, reason: WaitReason, pod: Option<String>, message: String) -> Decision {
        let since = self.wait_began(reason);
        let bound_ms = self.world.sync_timeout_ms;
        self.wait_until(reason, pod, since.plus(bound_ms.max(1)), message)
    }

    /// Wait until `deadline`; at or past it, the wait's named exit instead.
    fn wait_until(
        &mut self,
        reason: WaitReason,
        pod: Option<String>,
        deadline: Millis,
        message: String,
    ) -> Decision {
        let since = self.wait_began(reason);
        if self.now >= deadline {
            let exit = reason.exit();
            let message = format!("gave up {message}");
            return self.pause(exit, pod, message);
        }
        self.state.wait = Some(WaitRecord { reason, since });
        let phase = match reason {
            WaitReason::SwitchoverSettling => Some(Phase::FailoverInProgress),
            _ => self.rolling_phase(self.state.tier.unwrap_or(Tier::Data)),
        };
        self.decide(
            Action::Wait {
                reason,
                pod,
                deadline,
            },
            phase,
            message,
        )
    }

    fn pause(&mut self, reason: PauseReason, pod: Option<String>, message: String) -> Decision {
        let (type_, condition_reason) = reason.condition();
        self.condition(
            type_,
            true,
            condition_reason,
            message.clone(),
            WriteWhen::Always,
        );
        let phase = if reason.clears_state() {
            // A report, not a halt: the next pass starts over on a fresh budget.
            self.state = RollState {
                multiple_masters_since: self.state.multiple_masters_since,
                split_brain_reported: self.state.split_brain_reported,
                ..RollState::default()
            };
            Some(Phase::Error)
        } else {
            self.state.wait = None;
            self.rolling_phase(self.state.tier.unwrap_or(Tier::Data))
        };
        self.decide(
            Action::Pause {
                reason,
                pod,
                message: message.clone(),
            },
            phase,
            message,
        )
    }

    /// The roll finished in this pass.
    fn done(&mut self, sentinel_rolled: bool) -> Decision {
        if sentinel_rolled {
            self.condition(
                ConditionType::SentinelUpdatePending,
                false,
                ConditionReason::Completed,
                "every Sentinel pod runs the current template".into(),
                WriteWhen::Always,
            );
            self.events.push(EventNote {
                reason: EventReason::SentinelUpdateComplete,
                message: "every Sentinel pod runs the current template".into(),
            });
        }
        self.condition(
            ConditionType::RollingUpdatePaused,
            false,
            ConditionReason::Completed,
            "the rolling update completed".into(),
            WriteWhen::IfPresent,
        );
        self.clear_sidecar_pending();
        self.state = RollState::default();
        self.decide(Action::Done, None, "the rolling update completed".into())
    }

    /// Nothing to roll (or only a deferred sidecar change).
    fn idle(&mut self, sidecar_deferred: Option<String>, sentinel_was_rolling: bool) -> Decision {
        self.state = RollState::default();
        if sentinel_was_rolling && self.world.sentinel.is_some() {
            // The Sentinel tier was rolling and its target went back to what the pods run.
            self.condition(
                ConditionType::SentinelUpdatePending,
                false,
                ConditionReason::Completed,
                "every Sentinel pod runs the current template".into(),
                WriteWhen::IfTrue,
            );
        }
        self.condition(
            ConditionType::RollingUpdatePaused,
            false,
            ConditionReason::Converged,
            "no rolling update left to run".into(),
            WriteWhen::IfTrue,
        );
        if let Some(message) = sidecar_deferred {
            let pod = self.world.data_pod(0).map(|pod| pod.name.clone());
            return self.decide(
                Action::Pause {
                    reason: PauseReason::SidecarUpdateDeferred,
                    pod,
                    message: message.clone(),
                },
                None,
                message,
            );
        }
        self.clear_sidecar_pending();
        self.decide(
            Action::Idle,
            None,
            "every pod runs the current template".into(),
        )
    }

    fn clear_sidecar_pending(&mut self) {
        if self
            .conditions
            .iter()
            .any(|c| c.type_ == ConditionType::SidecarUpdatePending && c.status)
        {
            return;
        }
        self.condition(
            ConditionType::SidecarUpdatePending,
            false,
            ConditionReason::SidecarImageCurrent,
            "every pod runs the current template".into(),
            WriteWhen::IfTrue,
        );
    }
}

/// Whether `pod` is a replica of `master` that is ready, linked, not syncing or loading, and
/// caught up to within [`CATCH_UP_LAG_BYTES`].
fn settled_replica(pod: &DataPod, master: &Master<'_>) -> bool {
    match &pod.server {
        Server::Replica(info) => pod.ready && replica_in_sync(info, master),
        _ => false,
    }
}

fn replica_in_sync(info: &ReplicaInfo, master: &Master<'_>) -> bool {
    info.following == Some(master.pod.ordinal)
        && info.link_up
        && !info.syncing
        && !info.loading
        && master.info.offset.saturating_sub(info.offset) <= CATCH_UP_LAG_BYTES
}

/// The name of a pod that may not exist.
fn pod_name(world: &World, tier: Tier, ordinal: u32) -> String {
    match tier {
        Tier::Data => format!("{}-{ordinal}", world.data.statefulset),
        Tier::Sentinel => match &world.sentinel {
            Some(sentinel) => format!("{}-{ordinal}", sentinel.statefulset),
            None => format!("sentinel-{ordinal}"),
        },
    }
}
