//! Every decision the sidecar takes, as pure functions of what it observed (ADR 0005). The I/O
//! around them lives in `init`, `run` and `handover`.

use std::time::Duration;

use vko_authority::{Electorate, FenceAnswer, HeldAnswer, InstanceRole, Proof, SentinelWord, Vote};

use vko_valkey::parse::SentinelReplica;

use crate::conf::RoleLine;
use crate::topology::{Endpoint, PeerEvidence, PeerReport, SentinelAnswer};
use vko_authority::HOLD_HOST;

/// Who says which pod is master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authority {
    /// A single pod without Sentinel: no replication, nothing to guard.
    Standalone,
    /// The Sentinel majority (or, without Sentinel, the operator's record) names this master.
    Names(Endpoint),
    /// No authority answered: no Sentinel majority reachable / no record.
    NoAnswer,
}

/// The answering Sentinels as votes for `vko-authority`'s one majority rule (ADR 0014).
fn votes(answers: &[Option<SentinelAnswer>]) -> impl Iterator<Item = Vote<Endpoint>> + '_ {
    answers.iter().flatten().map(vote)
}

fn vote(answer: &SentinelAnswer) -> Vote<Endpoint> {
    Vote::new(
        Some(answer.master.clone()),
        usize::try_from(answer.known_sentinels).unwrap_or(usize::MAX),
    )
}

/// The master a strict majority of every Sentinel the cluster has names. A data pod is not told
/// `spec.sentinel.replicas`, so the electorate is the Sentinels discovered (answering or not)
/// and the largest peer count any of them reports: two answering Sentinels out of five known
/// are not a majority, and neither is one of three.
/// Whether the Sentinels found by DNS are fewer than one of them knows (`known_sentinels`: it
/// and its peers): the discovered list is stale — Sentinels that came up after it was read (a
/// new cluster, a Sentinel roll) — and counting against it leaves this master short of the
/// majority it has (measured: a new cluster's master fenced 7.9 s asking 1 of 3 Sentinels, and
/// its Sentinels failed it over).
pub fn sentinel_discovery_behind(known_sentinels: &[u32], discovered: usize) -> bool {
    known_sentinels
        .iter()
        .any(|known| usize::try_from(*known).is_ok_and(|known| known > discovered))
}

pub fn sentinel_master(answers: &[Option<SentinelAnswer>], discovered: usize) -> Option<Endpoint> {
    vko_authority::sentinel_majority(Electorate::new(0, discovered), votes(answers))
}

/// ADR 0019 / 0030: how this round of answers proves `me`'s authority (a strict majority of
/// every Sentinel the cluster has names `me`, or the failover in progress promotes `me`), if it
/// does. Same electorate as [`sentinel_master`].
pub fn authority_proof(
    me: &Endpoint,
    answers: &[Option<SentinelAnswer>],
    discovered: usize,
) -> Option<Proof> {
    let answers: Vec<FenceAnswer<Endpoint>> = answers
        .iter()
        .flatten()
        .zip(votes(answers))
        .map(|(answer, vote)| FenceAnswer {
            vote,
            promoting: answer.promoting.clone(),
        })
        .collect();
    vko_authority::authority_proof(me, Electorate::new(0, discovered), &answers)
}

/// What this round of answers says about the master, for the label rule (ADR 0044, ADR 0049):
/// a failover promoting another pod (any Sentinel's word, even while the majority still names
/// `me`: it only ever takes a master's label away), else `me`'s authority proven by the majority
/// or by the failover promoting it (ADR 0030's rule, the fencer's own), else the master the
/// majority names, if any.
pub fn sentinel_word(
    me: &Endpoint,
    answers: &[Option<SentinelAnswer>],
    discovered: usize,
) -> SentinelWord<Endpoint> {
    let promoted_elsewhere = answers
        .iter()
        .flatten()
        .find_map(|a| a.promoting.as_ref().filter(|p| *p != me));
    if let Some(promoted) = promoted_elsewhere {
        return SentinelWord::Promotes(promoted.clone());
    }
    match authority_proof(me, answers, discovered) {
        Some(Proof::Majority) => return SentinelWord::Names(me.clone()),
        Some(Proof::Promotion) => return SentinelWord::Promotes(me.clone()),
        None => {}
    }
    sentinel_master(answers, discovered).map_or(SentinelWord::NoMajority, SentinelWord::Names)
}

/// One answer as the fencer holds it (ADR 0040): its vote and promotion, from the ask that began
/// at `asked_at`, vouching from its oldest unanswered PING (ADR 0041,
/// [`MasterReach::vouch_wait`](crate::topology::MasterReach::vouch_wait)).
pub fn held_answer(answer: &SentinelAnswer, asked_at: Duration) -> HeldAnswer<Endpoint> {
    HeldAnswer {
        answer: FenceAnswer {
            vote: vote(answer),
            promoting: answer.promoting.clone(),
        },
        asked_at,
        unanswered_ping: answer.reach.vouch_wait(),
        lists_replicas: answer.lists_replicas,
    }
}

/// ADR 0040: when the answers held across rounds prove `me`'s authority from, if they do. Same
/// electorate as [`sentinel_master`].
pub fn held_proof(
    me: &Endpoint,
    held: &[HeldAnswer<Endpoint>],
    discovered: usize,
    local_replicas: usize,
    now: Duration,
    fence_after: Duration,
) -> Option<Duration> {
    let electorate = Electorate::new(0, discovered);
    vko_authority::held_majority_proof(me, electorate, held, local_replicas, now, fence_after)
}

/// `sentinel-init`: where a (re)starting Sentinel points its monitor. The master a majority of
/// the Sentinels names (`discovered` counts this one too); without one, the answer with the
/// newest config epoch (the latest failover wins); `None` when nobody answered (then the
/// rendered seed stays).
pub fn monitor_target(answers: &[Option<SentinelAnswer>], discovered: usize) -> Option<Endpoint> {
    if let Some(majority) = sentinel_master(answers, discovered) {
        return Some(majority);
    }
    answers
        .iter()
        .flatten()
        .max_by_key(|a| a.config_epoch)
        .map(|a| a.master.clone())
}

/// Could no peer hold data? Only when every peer that exists answered and holds none.
fn peers_provably_empty(peers: &[PeerEvidence]) -> bool {
    peers.iter().all(|p| match p {
        PeerEvidence::Answered(r) => !r.holds_data(),
        PeerEvidence::Unreachable(_) => false,
    })
}

fn any_peer_holds_data(peers: &[PeerEvidence]) -> bool {
    peers
        .iter()
        .any(|p| matches!(p, PeerEvidence::Answered(r) if r.holds_data()))
}

/// The init container's choice of the first role line (ADR 0005 "leaving the hold", at pod
/// start): a replica of the named master; master only when the authority names this pod and no
/// peer can hold data; otherwise the hold.
pub fn boot_role(me: &Endpoint, authority: &Authority, peers: &[PeerEvidence]) -> RoleLine {
    match authority {
        Authority::Standalone => RoleLine::Master,
        Authority::NoAnswer => RoleLine::Hold { port: me.port },
        // Safe even if M is not up yet: a replica of M only ever copies what M serves as master.
        Authority::Names(master) if master != me => RoleLine::ReplicaOf(master.clone()),
        Authority::Names(_) => {
            if peers_provably_empty(peers) {
                RoleLine::Master
            } else {
                RoleLine::Hold { port: me.port }
            }
        }
    }
}

/// What a server found in the hold should do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldExit {
    /// The authority names another pod that answers as master: replicate from it.
    ReplicaOf(Endpoint),
    /// The authority names this pod, but peers hold data: ask Sentinel to promote one of them.
    RequestFailover,
    /// Nothing else can hold data (or standalone): become master with what persistence restored.
    PromoteSelf,
    /// Keep waiting; the reason is logged.
    Wait(&'static str),
}

pub fn leave_hold(
    me: &Endpoint,
    authority: &Authority,
    peers: &[PeerEvidence],
    sentinel: bool,
) -> HoldExit {
    match authority {
        Authority::Standalone => HoldExit::PromoteSelf,
        Authority::NoAnswer => HoldExit::Wait("no authority answers"),
        Authority::Names(master) if master != me => {
            let answers_as_master = peers.iter().any(
                |p| matches!(p, PeerEvidence::Answered(r) if r.endpoint == *master && r.is_master()),
            );
            if answers_as_master {
                HoldExit::ReplicaOf(master.clone())
            } else {
                HoldExit::Wait("the named master does not answer as master")
            }
        }
        Authority::Names(_) => {
            if any_peer_holds_data(peers) {
                if sentinel {
                    HoldExit::RequestFailover
                } else {
                    HoldExit::Wait("peers hold data; the operator promotes the most caught-up")
                }
            } else if peers_provably_empty(peers) {
                HoldExit::PromoteSelf
            } else {
                HoldExit::Wait("a peer does not answer, so it may hold data")
            }
        }
    }
}

/// ADR 0050: the data a held master that Sentinel cannot fail over copies back — the most
/// caught-up peer, ranked as Sentinel ranks replicas (replication offset, then keys; ties to the
/// first) — when every peer answered, none serves as master and one holds data. `None`: no
/// relay (a silent peer may hold more; a master elsewhere is a failover's or the operator's).
pub fn relay_source(peers: &[PeerEvidence]) -> Option<Endpoint> {
    let mut best: Option<&PeerReport> = None;
    for peer in peers {
        let PeerEvidence::Answered(report) = peer else {
            return None;
        };
        if report.is_master() {
            return None;
        }
        let ahead = |b: &PeerReport| {
            (report.master_repl_offset, report.keys) > (b.master_repl_offset, b.keys)
        };
        if report.holds_data() && best.is_none_or(ahead) {
            best = Some(report);
        }
    }
    best.map(|report| report.endpoint.clone())
}

/// ADR 0050: Sentinel cannot end the hold — a strict majority of every Sentinel the cluster has
/// (ADR 0014's rule) refused the failover for want of a replica it could promote. Sentinel
/// answers a failover already running differently, so this also proves none runs.
pub fn sentinel_cannot_promote(refused_for_no_replica: usize, discovered: usize) -> bool {
    let votes = (0..refused_for_no_replica).map(|_| Vote::new(Some(()), 0));
    vko_authority::sentinel_majority(Electorate::new(0, discovered), votes).is_some()
}

/// ADR 0050: the held master has everything its relay source acknowledged once it follows the
/// source with its link up (`applied`: [`ReplicationInfo::applied_from`]) at least at the offset
/// the source reported before (the source is paused, so that offset only grows by Valkey's own
/// pings).
///
/// [`ReplicationInfo::applied_from`]: vko_valkey::parse::ReplicationInfo::applied_from
pub fn relay_copied(applied: Option<i64>, source_offset: i64) -> bool {
    applied.is_some_and(|offset| offset >= source_offset)
}

/// A replica whose upstream is not the master the authority names (the Sentinel majority, or
/// without Sentinel the master Lease's holder), and that master answers as master: where this
/// replica should point instead. Sentinel reconfigures only the replicas it has discovered (from
/// the master's INFO, every 10 s), and a switchover without Sentinel only the replicas linked
/// to the old master then, so a replica that joined just before keeps following the old
/// master, chained behind it; this puts it where the authority says. `None`: nothing to change.
pub fn repoint_replica(
    me: &Endpoint,
    upstream: &Endpoint,
    authority_master: Option<&Endpoint>,
    named_answers_master: bool,
) -> Option<Endpoint> {
    let named = authority_master?;
    (named != upstream && named != me && named_answers_master).then(|| named.clone())
}

/// The local server's live role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveRole {
    Master,
    ReplicaOf(Endpoint),
    /// Restarted from the hold: a replica of `vko-hold.invalid`.
    Hold,
}

pub fn live_role(report: &PeerReport) -> LiveRole {
    match &report.upstream {
        _ if report.is_master() => LiveRole::Master,
        Some(up) if up.host == HOLD_HOST => LiveRole::Hold,
        Some(up) => LiveRole::ReplicaOf(up.clone()),
        // A replica without a master line does not exist; treat it as the hold (serves nothing).
        None => LiveRole::Hold,
    }
}

/// ADR 0005: the file always describes a safe restart. A master's file says hold (a standalone
/// has nothing to guard); a replica's names its master. `None`: leave the file as it is (a
/// replica of an IP address, which must never be written).
pub fn file_role(live: &LiveRole, standalone: bool, port: u16) -> Option<RoleLine> {
    match live {
        LiveRole::Master if standalone => Some(RoleLine::Master),
        LiveRole::Master | LiveRole::Hold => Some(RoleLine::Hold { port }),
        LiveRole::ReplicaOf(master) if master.host.parse::<std::net::IpAddr>().is_ok() => None,
        LiveRole::ReplicaOf(master) => Some(RoleLine::ReplicaOf(master.clone())),
    }
}

/// The `vko.gtrfc.com/instanceRole` label: `vko-authority`'s rule over the live role (with
/// Sentinel a master is labelled master once the majority names it or the failover in progress
/// promotes it; without either the label stays `current`).
pub fn label_for(
    live: &LiveRole,
    me: &Endpoint,
    sentinel: SentinelWord<&Endpoint>,
    current: Option<InstanceRole>,
) -> InstanceRole {
    vko_authority::instance_role(*live == LiveRole::Master, me, sentinel, current)
}

/// How one of the other data pods stands, as the API answers for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerPod {
    /// The pod exists and is not being deleted; `ready`: its `Ready` condition is true (it
    /// is in its Services' endpoints: `-rw` can route to it once it is labelled master).
    Staying { ready: bool },
    /// The pod has a deletion timestamp.
    Leaving,
    /// No pod of that name.
    Gone,
    /// The API did not answer.
    Unknown,
    /// The API refused this sidecar's own credentials: its Role or ServiceAccount is gone.
    Refused,
}

impl PeerPod {
    fn leaves(self) -> bool {
        matches!(self, PeerPod::Leaving | PeerPod::Gone)
    }
}

/// Whether a master that is stopping first waits, serving writes, for a successor: only when
/// every other data pod is leaving too (every pod of the cluster deleted at once). Then any
/// replica it hands over to goes with it, and the StatefulSet brings each back under its name
/// only once the old pod is gone; a replacement that has copied this master is the one that
/// keeps the data. A single pod, a peer staying or a peer the API did not answer about: no
/// wait, the handover runs at once.
pub fn awaits_successor(peers: &[PeerPod]) -> bool {
    !peers.is_empty() && peers.iter().all(|p| p.leaves())
}

/// How long a peer pod may be missing before a stopping master stops waiting for its
/// replacement: the StatefulSet controller creates the new pod right after the old one is
/// removed, so a name still free after this is not coming back (the Valkey, its StatefulSet or
/// its namespace is being deleted).
pub const REPLACEMENT_GRACE: Duration = Duration::from_secs(5);

/// Whether no replacement is coming: every peer pod has been missing for at least
/// [`REPLACEMENT_GRACE`] (`missing_for`, `None`: present, or its state unknown), or the API
/// refuses this sidecar's own credentials (its Role and ServiceAccount belong to the Valkey:
/// the Valkey or its namespace is being deleted).
pub fn no_replacement_coming(missing_for: &[Option<Duration>], peers: &[PeerPod]) -> bool {
    peers.contains(&PeerPod::Refused)
        || (!missing_for.is_empty()
            && missing_for
                .iter()
                .all(|m| m.is_some_and(|m| m >= REPLACEMENT_GRACE)))
}

/// An online replica of the stopping master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub endpoint: Endpoint,
    /// The offset the replica last acknowledged.
    pub offset: i64,
    pub pod: PeerPod,
}

/// Whom the handover may promote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Successors {
    /// Replicas whose pods stay (or whose state the API did not tell): those with a Ready pod
    /// first, then the most caught up.
    pub eligible: Vec<Endpoint>,
    /// Those of `eligible` whose pods are Ready.
    pub ready: Vec<Endpoint>,
    /// Replicas whose pods are leaving: never promoted while an eligible one exists (a
    /// promoted replica that is itself being deleted takes the master role down with it).
    pub leaving: Vec<Endpoint>,
}

impl Successors {
    /// Sentinel's `never_promote`: the leaving replicas, unless no other is online (then
    /// steering every replica away would leave Sentinel no replica to promote).
    pub fn never_promote(&self) -> Vec<Endpoint> {
        if self.eligible.is_empty() {
            Vec::new()
        } else {
            self.leaving.clone()
        }
    }

    /// No online replica stays — every one is leaving, or none is online: a stopping master
    /// that has peers waits for a successor (ADR 0048, 0051) rather than hand over to a replica
    /// that goes with it, or leave with the only copy while replacements are still copying.
    pub fn none_stays(&self) -> bool {
        self.eligible.is_empty()
    }

    /// The direct promotion's target when some replica is leaving: the first eligible one (a
    /// Ready pod first); otherwise `None` (the switchover takes the most caught-up online
    /// replica).
    pub fn direct_target(&self) -> Option<Endpoint> {
        if self.leaving.is_empty() {
            None
        } else {
            self.eligible.first().cloned()
        }
    }
}

pub fn successors(candidates: &[Candidate]) -> Successors {
    let mut eligible: Vec<&Candidate> = candidates.iter().filter(|c| !c.pod.leaves()).collect();
    let ready = |c: &Candidate| matches!(c.pod, PeerPod::Staying { ready: true });
    eligible.sort_by(|a, b| {
        ready(b)
            .cmp(&ready(a))
            .then(b.offset.cmp(&a.offset))
            .then(a.endpoint.cmp(&b.endpoint))
    });
    Successors {
        ready: eligible
            .iter()
            .filter(|c| ready(c))
            .map(|c| c.endpoint.clone())
            .collect(),
        eligible: eligible.into_iter().map(|c| c.endpoint.clone()).collect(),
        leaving: candidates
            .iter()
            .filter(|c| c.pod.leaves())
            .map(|c| c.endpoint.clone())
            .collect(),
    }
}

/// Whether a Sentinel would pick `replica` in a failover now: connected and not down, a
/// non-zero priority, its link to the master up.
pub fn promotable_by_sentinel(replica: &SentinelReplica) -> bool {
    !replica.flags.is_down()
        && replica.priority != Some(0)
        && replica.master_link_status.as_deref() == Some("ok")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use vko_valkey::parse::ReplicationRole;

    use super::*;

    #[test]
    fn discovery_is_behind_when_a_sentinel_knows_more_sentinels_than_were_found() {
        assert!(sentinel_discovery_behind(&[3], 1));
        assert!(sentinel_discovery_behind(&[1, 3], 2));
        assert!(!sentinel_discovery_behind(&[3, 3], 3));
        assert!(!sentinel_discovery_behind(&[1], 1));
        assert!(!sentinel_discovery_behind(&[], 0));
    }

    fn ep(i: u16) -> Endpoint {
        Endpoint::new(format!("vk-{i}.vk-headless.ns.svc.cluster.local"), 6379)
    }

    fn answered(i: u16, master: bool, offset: i64, keys: u64) -> PeerEvidence {
        PeerEvidence::Answered(PeerReport {
            endpoint: ep(i),
            role: if master {
                ReplicationRole::Master
            } else {
                ReplicationRole::Replica
            },
            upstream: (!master).then(|| Endpoint::new(HOLD_HOST, 6379)),
            master_repl_offset: offset,
            keys,
            replicas: Vec::new(),
        })
    }

    fn vote(sentinel: u16, master: u16, known: u32, epoch: u64) -> Option<SentinelAnswer> {
        Some(SentinelAnswer {
            sentinel: Endpoint::new(format!("s{sentinel}"), 26379),
            master: ep(master),
            known_sentinels: known,
            config_epoch: epoch,
            promoting: None,
            reach: crate::topology::MasterReach::Waited(Duration::ZERO),
            lists_replicas: true,
        })
    }

    #[test]
    fn the_label_word_is_the_authority_proof_then_a_promotion_elsewhere_then_the_majority() {
        let me = ep(0);
        let promoting = |answer: Option<SentinelAnswer>, promoted: u16| {
            answer.map(|a| SentinelAnswer {
                promoting: Some(ep(promoted)),
                ..a
            })
        };
        // The majority names this pod.
        let named = [vote(1, 0, 3, 1), vote(2, 0, 3, 1), None];
        assert_eq!(
            sentinel_word(&me, &named, 3),
            SentinelWord::Names(me.clone())
        );
        // The failover in progress promotes this pod; the others still name the old master.
        let promoted = [promoting(vote(1, 1, 3, 1), 0), vote(2, 1, 3, 1), None];
        assert_eq!(
            sentinel_word(&me, &promoted, 3),
            SentinelWord::Promotes(me.clone())
        );
        // The same with one answer out of three: no majority answered, no proof.
        let alone = [promoting(vote(1, 1, 3, 1), 0), None, None];
        assert_eq!(sentinel_word(&me, &alone, 3), SentinelWord::NoMajority);
        // Seen by the old master (ep 1): the majority still names it, but a failover promotes
        // another pod — its label goes.
        assert_eq!(
            sentinel_word(&ep(1), &promoted, 3),
            SentinelWord::Promotes(me.clone())
        );
        // A third pod promoted by one Sentinel while the majority still names this one: the
        // failover it runs moves the master away, so this pod's label goes already.
        let third = [
            promoting(vote(1, 0, 3, 1), 2),
            vote(2, 0, 3, 1),
            vote(3, 0, 3, 1),
        ];
        assert_eq!(sentinel_word(&me, &third, 3), SentinelWord::Promotes(ep(2)));
        // Nobody promotes, the majority names another pod.
        let other = [vote(1, 1, 3, 1), vote(2, 1, 3, 1), None];
        assert_eq!(sentinel_word(&me, &other, 3), SentinelWord::Names(ep(1)));
    }

    #[test]
    fn a_vote_vouches_from_its_sentinels_oldest_unanswered_ping() {
        use crate::topology::MasterReach;
        let me = ep(0);
        let answer = |reach| SentinelAnswer {
            reach,
            ..vote(1, 0, 3, 1).unwrap()
        };
        let at = Duration::from_secs(10);
        let f = Duration::from_secs(2);
        let held = |a: &SentinelAnswer| held_answer(a, at);
        let proof = |reaches: [MasterReach; 2]| {
            let answers: Vec<_> = reaches.iter().map(|r| held(&answer(*r))).collect();
            held_proof(&me, &answers, 3, 1, at, f)
        };
        let ms = Duration::from_millis;
        assert_eq!(
            proof([MasterReach::Waited(ms(0)), MasterReach::Waited(ms(0))]),
            Some(at)
        );
        assert_eq!(
            proof([MasterReach::Waited(ms(300)), MasterReach::Waited(ms(0))]),
            Some(at - ms(300)),
            "dated back by the wait"
        );
        for worse in [
            MasterReach::Waited(f),
            MasterReach::FlagsDown,
            MasterReach::Unsaid,
        ] {
            assert_eq!(
                proof([worse, MasterReach::Waited(ms(0))]),
                None,
                "{worse:?} vouches for nothing"
            );
        }
    }

    #[test]
    fn the_sentinel_master_needs_more_than_half_of_the_electorate() {
        assert_eq!(
            sentinel_master(&[vote(0, 1, 3, 0), vote(1, 1, 3, 0), None], 3),
            Some(ep(1))
        );
        assert_eq!(sentinel_master(&[vote(0, 1, 3, 0), None, None], 3), None);
        // One of three discovered answers, knowing no peer yet: still a minority.
        assert_eq!(sentinel_master(&[vote(0, 1, 1, 0), None, None], 3), None);
        // Split vote: no majority.
        assert_eq!(
            sentinel_master(&[vote(0, 1, 3, 1), vote(1, 2, 3, 2), None], 3),
            None
        );
        // Only two pods resolved, but they know of five Sentinels: two votes are not enough.
        assert_eq!(
            sentinel_master(&[vote(0, 1, 5, 0), vote(1, 1, 5, 0)], 2),
            None
        );
        assert_eq!(sentinel_master(&[None, None, None], 3), None);
    }

    #[test]
    fn monitor_target_prefers_majority_then_newest_epoch_then_seed() {
        // This Sentinel restarts; the two others agree.
        assert_eq!(
            monitor_target(&[vote(0, 2, 3, 1), vote(1, 2, 3, 1)], 3),
            Some(ep(2))
        );
        assert_eq!(
            monitor_target(&[vote(0, 1, 3, 1), vote(1, 2, 3, 4)], 3),
            Some(ep(2))
        );
        // Two of five agree on an older epoch: no majority of the five, so the newest epoch.
        assert_eq!(
            monitor_target(&[vote(0, 1, 5, 1), vote(1, 1, 5, 1), vote(2, 2, 5, 3)], 5),
            Some(ep(2))
        );
        // A single answer is followed (it beats the rendered seed).
        assert_eq!(monitor_target(&[vote(0, 1, 3, 1), None], 3), Some(ep(1)));
        assert_eq!(monitor_target(&[None, None], 3), None);
        assert_eq!(monitor_target(&[], 1), None);
    }

    #[test]
    fn boot_role_decision_table() {
        let me = ep(0);
        let hold = RoleLine::Hold { port: 6379 };
        // Standalone: plain master config.
        assert_eq!(
            boot_role(&me, &Authority::Standalone, &[]),
            RoleLine::Master
        );
        // No authority: never guess.
        assert_eq!(boot_role(&me, &Authority::NoAnswer, &[]), hold);
        assert_eq!(
            boot_role(&me, &Authority::NoAnswer, &[answered(1, false, 0, 0)]),
            hold
        );
        // The authority names another pod: replica of it, whatever the peers say.
        assert_eq!(
            boot_role(
                &me,
                &Authority::Names(ep(2)),
                &[PeerEvidence::Unreachable(ep(2))]
            ),
            RoleLine::ReplicaOf(ep(2))
        );
        // Names this pod, first boot of a new cluster: every peer answered empty.
        assert_eq!(
            boot_role(
                &me,
                &Authority::Names(me.clone()),
                &[answered(1, false, 0, 0), answered(2, false, 0, 0)]
            ),
            RoleLine::Master
        );
        assert_eq!(
            boot_role(&me, &Authority::Names(me.clone()), &[]),
            RoleLine::Master
        );
        // Names this pod but a peer replicated from it (offset) or has keys: hold.
        assert_eq!(
            boot_role(
                &me,
                &Authority::Names(me.clone()),
                &[answered(1, false, 1234, 0)]
            ),
            hold
        );
        assert_eq!(
            boot_role(
                &me,
                &Authority::Names(me.clone()),
                &[answered(1, false, 0, 7)]
            ),
            hold
        );
        // Names this pod but a peer is silent: it may hold data, so hold.
        assert_eq!(
            boot_role(
                &me,
                &Authority::Names(me.clone()),
                &[answered(1, false, 0, 0), PeerEvidence::Unreachable(ep(2))]
            ),
            hold
        );
    }

    #[test]
    fn the_relay_copies_from_the_most_caught_up_peer_only_when_every_peer_answered() {
        // The most caught-up by offset, then keys; an empty peer is never the source.
        let peers = [
            answered(1, false, 5000, 10),
            answered(2, false, 7000, 9),
            answered(3, false, 0, 0),
        ];
        assert_eq!(relay_source(&peers), Some(ep(2)));
        let tied = [answered(1, false, 7000, 10), answered(2, false, 7000, 9)];
        assert_eq!(relay_source(&tied), Some(ep(1)));
        // A silent peer may hold more than any that answered.
        let silent = [
            answered(1, false, 5000, 10),
            PeerEvidence::Unreachable(ep(2)),
        ];
        assert_eq!(relay_source(&silent), None);
        // A peer serving as master: a failover's or the operator's business, not a relay's.
        let master = [answered(1, false, 5000, 10), answered(2, true, 7000, 9)];
        assert_eq!(relay_source(&master), None);
        // Nothing to copy.
        let empty = [answered(1, false, 0, 0), answered(2, false, 0, 0)];
        assert_eq!(relay_source(&empty), None);
        assert_eq!(relay_source(&[]), None);
    }

    #[test]
    fn sentinel_cannot_promote_only_when_a_majority_of_all_sentinels_refused_for_want_of_one() {
        assert!(sentinel_cannot_promote(2, 3));
        assert!(sentinel_cannot_promote(3, 3));
        assert!(!sentinel_cannot_promote(1, 3));
        assert!(!sentinel_cannot_promote(2, 4));
        assert!(sentinel_cannot_promote(3, 5));
        assert!(!sentinel_cannot_promote(0, 0));
        assert!(sentinel_cannot_promote(1, 1));
    }

    #[test]
    fn the_relay_is_copied_once_the_link_is_up_and_the_source_offset_applied() {
        assert!(relay_copied(Some(6421), 6407));
        assert!(relay_copied(Some(6407), 6407));
        assert!(!relay_copied(Some(6406), 6407));
        // Not following the source with its link up.
        assert!(!relay_copied(None, 6407));
    }

    #[test]
    fn leaving_the_hold_decision_table() {
        let me = ep(0);
        let names_me = Authority::Names(me.clone());
        assert_eq!(
            leave_hold(&me, &Authority::Standalone, &[], false),
            HoldExit::PromoteSelf
        );
        assert!(matches!(
            leave_hold(&me, &Authority::NoAnswer, &[], true),
            HoldExit::Wait(_)
        ));
        // Another master that answers as master: follow it.
        assert_eq!(
            leave_hold(
                &me,
                &Authority::Names(ep(1)),
                &[answered(1, true, 99, 3)],
                true
            ),
            HoldExit::ReplicaOf(ep(1))
        );
        // Named, but it is itself in the hold or silent: wait.
        assert!(matches!(
            leave_hold(
                &me,
                &Authority::Names(ep(1)),
                &[answered(1, false, 99, 3)],
                true
            ),
            HoldExit::Wait(_)
        ));
        assert!(matches!(
            leave_hold(
                &me,
                &Authority::Names(ep(1)),
                &[PeerEvidence::Unreachable(ep(1))],
                false
            ),
            HoldExit::Wait(_)
        ));
        // This pod restarted faster than the failover and a replica holds data.
        let data = [answered(1, false, 5000, 10), answered(2, false, 0, 0)];
        assert_eq!(
            leave_hold(&me, &names_me, &data, true),
            HoldExit::RequestFailover
        );
        assert!(matches!(
            leave_hold(&me, &names_me, &data, false),
            HoldExit::Wait(_)
        ));
        // Nothing anywhere: become master with what persistence restored.
        let empty = [answered(1, false, 0, 0), answered(2, false, 0, 0)];
        assert_eq!(
            leave_hold(&me, &names_me, &empty, true),
            HoldExit::PromoteSelf
        );
        // A silent peer could hold data.
        assert!(matches!(
            leave_hold(
                &me,
                &names_me,
                &[answered(1, false, 0, 0), PeerEvidence::Unreachable(ep(2))],
                true
            ),
            HoldExit::Wait(_)
        ));
    }

    #[test]
    fn the_file_always_describes_a_safe_restart() {
        let hold = Some(RoleLine::Hold { port: 6379 });
        assert_eq!(file_role(&LiveRole::Master, false, 6379), hold);
        assert_eq!(file_role(&LiveRole::Hold, false, 6379), hold);
        assert_eq!(
            file_role(&LiveRole::Master, true, 6379),
            Some(RoleLine::Master)
        );
        assert_eq!(
            file_role(&LiveRole::ReplicaOf(ep(2)), false, 6379),
            Some(RoleLine::ReplicaOf(ep(2)))
        );
        // Never an IP address in the file.
        assert_eq!(
            file_role(
                &LiveRole::ReplicaOf(Endpoint::new("10.244.0.7", 6379)),
                false,
                6379
            ),
            None
        );
    }

    #[test]
    fn live_role_reads_the_hold() {
        let report = |role, upstream: Option<Endpoint>| PeerReport {
            endpoint: ep(0),
            role,
            upstream,
            master_repl_offset: 0,
            keys: 0,
            replicas: Vec::new(),
        };
        assert_eq!(
            live_role(&report(ReplicationRole::Master, None)),
            LiveRole::Master
        );
        assert_eq!(
            live_role(&report(
                ReplicationRole::Replica,
                Some(Endpoint::new(HOLD_HOST, 6379))
            )),
            LiveRole::Hold
        );
        assert_eq!(
            live_role(&report(ReplicationRole::Replica, Some(ep(1)))),
            LiveRole::ReplicaOf(ep(1))
        );
    }

    #[test]
    fn label_is_cross_checked_against_sentinel() {
        use SentinelWord::{Names, NoMajority, NoSentinel, Promotes};
        let me = ep(0);
        let other = ep(1);
        let master = InstanceRole::Master;
        let replica = InstanceRole::Replica;
        assert_eq!(label_for(&LiveRole::Master, &me, NoSentinel, None), master);
        assert_eq!(label_for(&LiveRole::Master, &me, Names(&me), None), master);
        // Just promoted, the Sentinels not agreed yet: not master before they name it.
        assert_eq!(
            label_for(&LiveRole::Master, &me, NoMajority, Some(replica)),
            replica
        );
        assert_eq!(
            label_for(&LiveRole::Master, &me, NoMajority, Some(master)),
            master
        );
        // Promoted by the failover in progress (ADR 0049): master before the majority names it;
        // the master it fails over from loses its label at once.
        assert_eq!(
            label_for(&LiveRole::Master, &me, Promotes(&me), Some(replica)),
            master
        );
        assert_eq!(
            label_for(&LiveRole::Master, &me, Promotes(&other), Some(master)),
            replica
        );
        // A stale master: Sentinel's majority names another pod.
        assert_eq!(
            label_for(&LiveRole::Master, &me, Names(&other), Some(master)),
            replica
        );
        assert_eq!(
            label_for(&LiveRole::ReplicaOf(ep(1)), &me, Names(&me), None),
            replica
        );
        assert_eq!(
            label_for(&LiveRole::Hold, &me, Names(&me), Some(master)),
            replica
        );
        // vko-authority depends on nothing, so it spells the label values itself.
        assert_eq!(
            InstanceRole::Master.as_str(),
            vko_api::consts::labels::ROLE_MASTER
        );
        assert_eq!(
            InstanceRole::Replica.as_str(),
            vko_api::consts::labels::ROLE_REPLICA
        );
    }

    #[test]
    fn a_replica_behind_another_than_sentinels_master_is_repointed_only_to_a_live_master() {
        let me = Endpoint::new("vk-1.h", 6379);
        let old = Endpoint::new("vk-0.h", 6379);
        let named = Endpoint::new("vk-2.h", 6379);
        assert_eq!(
            repoint_replica(&me, &old, Some(&named), true),
            Some(named.clone())
        );
        // The named master does not answer as master (yet): wait.
        assert_eq!(repoint_replica(&me, &old, Some(&named), false), None);
        // Already following it, no majority, or Sentinel names this pod: nothing to do here.
        assert_eq!(repoint_replica(&me, &named, Some(&named), true), None);
        assert_eq!(repoint_replica(&me, &old, None, true), None);
        assert_eq!(repoint_replica(&me, &old, Some(&me), true), None);
    }

    fn candidate(host: &str, offset: i64, pod: PeerPod) -> Candidate {
        Candidate {
            endpoint: Endpoint::new(host, 6379),
            offset,
            pod,
        }
    }

    #[test]
    fn a_stopping_master_waits_only_when_every_other_data_pod_is_leaving() {
        use PeerPod::{Gone, Leaving, Unknown};
        let staying = PeerPod::Staying { ready: true };
        assert!(awaits_successor(&[Leaving, Leaving]));
        assert!(awaits_successor(&[Leaving, Gone]));
        assert!(awaits_successor(&[Gone]));
        // A single pod has nobody to wait for.
        assert!(!awaits_successor(&[]));
        // A peer that stays can take over now; an unanswered API proves nothing: no wait.
        assert!(!awaits_successor(&[Leaving, staying]));
        assert!(!awaits_successor(&[Leaving, Unknown]));
        assert!(!awaits_successor(&[Leaving, PeerPod::Refused]));
    }

    #[test]
    fn the_wait_ends_once_every_peer_pod_has_been_missing_past_the_grace() {
        let past = Some(REPLACEMENT_GRACE);
        let recent = Some(REPLACEMENT_GRACE - Duration::from_millis(1));
        let leaving = [PeerPod::Leaving, PeerPod::Leaving];
        assert!(no_replacement_coming(&[past, past], &leaving));
        // One name taken again (a replacement exists), or missing only briefly: keep waiting.
        assert!(!no_replacement_coming(&[past, None], &leaving));
        assert!(!no_replacement_coming(&[past, recent], &leaving));
        assert!(!no_replacement_coming(&[], &[]));
        // The sidecar's own Role or ServiceAccount is gone: the Valkey is being deleted.
        assert!(no_replacement_coming(
            &[None, None],
            &[PeerPod::Leaving, PeerPod::Refused]
        ));
    }

    #[test]
    fn leaving_replicas_are_never_promoted_while_another_is_online() {
        use PeerPod::{Gone, Leaving, Unknown};
        let picked = successors(&[
            candidate("vk-0.h", 990, Gone),
            candidate("vk-1.h", 900, Leaving),
            candidate("vk-2.h", 700, PeerPod::Staying { ready: false }),
            candidate("vk-3.h", 800, Unknown),
            candidate("vk-4.h", 600, PeerPod::Staying { ready: true }),
        ]);
        // A Ready pod first, then the most caught up; the API not answering about a pod keeps
        // it eligible (not ready).
        let ep = |host| Endpoint::new(host, 6379);
        assert_eq!(
            picked.eligible,
            vec![ep("vk-4.h"), ep("vk-3.h"), ep("vk-2.h")]
        );
        assert_eq!(picked.ready, vec![ep("vk-4.h")]);
        assert_eq!(picked.never_promote(), vec![ep("vk-0.h"), ep("vk-1.h")]);
        assert_eq!(picked.direct_target(), Some(ep("vk-4.h")));
    }

    #[test]
    fn with_every_replica_leaving_or_none_the_handover_is_unsteered() {
        use PeerPod::Leaving;
        let staying = PeerPod::Staying { ready: true };
        let all_leaving = successors(&[
            candidate("vk-1.h", 900, Leaving),
            candidate("vk-2.h", 700, Leaving),
        ]);
        assert!(all_leaving.eligible.is_empty());
        assert!(all_leaving.none_stays());
        assert_eq!(all_leaving.never_promote(), Vec::<Endpoint>::new());
        assert_eq!(all_leaving.direct_target(), None);
        // Nobody leaving: the switchover picks as it always did.
        let steady = successors(&[
            candidate("vk-1.h", 900, staying),
            candidate("vk-2.h", 950, staying),
        ]);
        assert_eq!(steady.never_promote(), Vec::<Endpoint>::new());
        assert_eq!(steady.direct_target(), None);
        assert!(!steady.none_stays());
        assert_eq!(successors(&[]), Successors::default());
        assert!(
            Successors::default().none_stays(),
            "no online replica: the replacements may still be copying"
        );
        let one_stays = successors(&[
            candidate("vk-1.h", 900, Leaving),
            candidate("vk-2.h", 700, PeerPod::Staying { ready: false }),
        ]);
        assert!(!one_stays.none_stays());
    }

    #[test]
    fn sentinel_promotes_only_a_connected_replica_with_priority_and_its_link_up() {
        let listed = |flags: &str, priority: Option<i64>, link: Option<&str>| SentinelReplica {
            name: "vk-1.h:6379".into(),
            host: "vk-1.h".into(),
            port: 6379,
            runid: None,
            flags: vko_valkey::parse::InstanceFlags::parse(flags),
            master_link_status: link.map(str::to_owned),
            master_host: None,
            master_port: None,
            priority,
            repl_offset: None,
            announced: None,
            role_reported: None,
            other: Default::default(),
        };
        assert!(promotable_by_sentinel(&listed(
            "slave",
            Some(100),
            Some("ok")
        )));
        assert!(!promotable_by_sentinel(&listed(
            "s_down,slave",
            Some(100),
            Some("ok")
        )));
        assert!(!promotable_by_sentinel(&listed(
            "slave,disconnected",
            Some(100),
            Some("ok")
        )));
        assert!(!promotable_by_sentinel(&listed(
            "slave",
            Some(0),
            Some("ok")
        )));
        assert!(!promotable_by_sentinel(&listed(
            "slave",
            Some(100),
            Some("err")
        )));
        assert!(!promotable_by_sentinel(&listed("slave", Some(100), None)));
    }
}
