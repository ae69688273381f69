//! Master self-fencing (ADR 0019): a master that cannot prove it still holds the authority stops
//! acknowledging writes.
//!
//! With Sentinel, a master *proves* its authority when a strict majority of every Sentinel the
//! cluster has ([`crate::sentinel_majority`] over an [`crate::Electorate`]) is reachable and names
//! it. The master's sidecar asks every few hundred milliseconds and keeps the time of the last
//! proof. Once no proof is younger than `fence_after` (F), the server must be fenced (its writes
//! paused); it is unfenced only when a proof comes back or once the server is a replica (then it
//! acknowledges no write anyway). Sentinel promotes another pod only after the master has been
//! unreachable for its `down-after` period, so with F well below it the old master stops
//! acknowledging before a new one can start: at most F of acknowledged writes (plus one poll) are
//! lost to a master cut off from its Sentinel majority. A Sentinel's vote counts from its oldest
//! unanswered PING to the master (ADR 0041), so a master its Sentinels cannot reach while it
//! still reaches them (a one-way cut) is fenced too, before any of them may flag it down.
//!
//! Times are durations on one monotonic clock the caller reads (e.g. since its start): this crate
//! reads no clock.

use std::time::Duration;

use crate::sentinel::{Electorate, Vote, sentinel_majority};

/// F by default: a master unproven for this long is fenced. Well below Sentinel's `down-after`
/// (`vko_render::conf::DOWN_AFTER_MS`, 5 s), which the sidecar asserts at compile time and checks
/// again for the F it is given.
pub const DEFAULT_FENCE_AFTER: Duration = Duration::from_secs(2);

/// What the local server should be told now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceAction {
    /// Pause its writes (again, while already fenced: the pause is renewed before it expires).
    Fence(FenceReason),
    /// Lift the pause: the authority is proven again, or the server is a replica.
    Unfence(UnfenceReason),
    /// Nothing to do: an unfenced master whose last proof is younger than F.
    Keep,
}

/// Why the server is fenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FenceReason {
    /// The master never proved its authority since the caller started watching it (at boot,
    /// before the Sentinel majority names it, or after a sidecar restart).
    NeverProven,
    /// The last proof is older than F.
    ProofExpired,
    /// Without Sentinel: the master Lease names another pod (ADR 0022).
    HeldByOther,
}

impl FenceReason {
    /// A stable, machine-readable name (log fields, the pod annotation, the operator's reason).
    pub const fn as_str(self) -> &'static str {
        match self {
            FenceReason::NeverProven => "AuthorityNeverProven",
            FenceReason::ProofExpired => "AuthorityNotProven",
            FenceReason::HeldByOther => "AuthorityHeldByOther",
        }
    }
}

/// Why the fence is lifted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnfenceReason {
    /// The Sentinel majority names this master again.
    AuthorityProven,
    /// The server is a replica now: it acknowledges no write.
    NowReplica,
}

/// What the sidecar knows at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FenceInput {
    /// The local server answers as master.
    pub is_master: bool,
    /// When the authority was last proven (`None`: never since the caller started).
    pub last_proven: Option<Duration>,
    /// Now, on the same clock.
    pub now: Duration,
    /// F.
    pub fence_after: Duration,
    /// The server is fenced now (its writes paused by the fence).
    pub fenced: bool,
}

/// The fence decision.
pub fn fence_action(input: FenceInput) -> FenceAction {
    if !input.is_master {
        return if input.fenced {
            FenceAction::Unfence(UnfenceReason::NowReplica)
        } else {
            FenceAction::Keep
        };
    }
    let proven = match input.last_proven {
        None => Err(FenceReason::NeverProven),
        // A proof "from the future" (a caller mixing clocks) is no proof.
        Some(at) if at > input.now => Err(FenceReason::ProofExpired),
        Some(at) if input.now - at >= input.fence_after => Err(FenceReason::ProofExpired),
        Some(_) => Ok(()),
    };
    match (proven, input.fenced) {
        (Err(reason), _) => FenceAction::Fence(reason),
        (Ok(()), true) => FenceAction::Unfence(UnfenceReason::AuthorityProven),
        (Ok(()), false) => FenceAction::Keep,
    }
}

/// Does this round of Sentinel answers prove `me`'s authority? Only when a strict majority of
/// the whole electorate (not of those that answered) names `me`: one of three, or two answering
/// Sentinels when a peer reports five, prove nothing.
pub fn proves_authority<K: PartialEq>(
    me: &K,
    electorate: Electorate,
    votes: impl IntoIterator<Item = Vote<K>>,
) -> bool {
    sentinel_majority(electorate, votes).is_some_and(|named| named == *me)
}

/// One answering Sentinel as the fencer sees it: whom it names, and, while it runs a failover,
/// the replica that failover promotes (its `SENTINEL REPLICAS` entry flagged `promoted`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FenceAnswer<K> {
    pub vote: Vote<K>,
    /// `Some` only while this Sentinel's master entry is flagged `failover_in_progress`.
    pub promoting: Option<K>,
}

/// How a round proved the authority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// A strict majority of the electorate names this master ([`proves_authority`]).
    Majority,
    /// ADR 0030: the Sentinel running the failover promotes this pod, the other answers still
    /// name the master it fails over from, and a strict majority answered.
    Promotion,
}

/// ADR 0030: does this round prove `me`'s authority? A strict majority naming `me`, or a
/// failover in progress that promotes `me`: a Sentinel names the master `from` it fails over and
/// promotes `me`, every other answer names `me` or `from` (a view the failover's end will
/// replace) without promoting anybody else, and a strict majority of the electorate answered (a
/// pod cut off with its promoter alone proves nothing). Sentinel names the promoted replica only
/// when its failover ends, after every other replica was reconfigured (up to its reconf timeout
/// per replica that does not follow); the promotion itself is the authority's act.
pub fn authority_proof<K: PartialEq + Clone>(
    me: &K,
    electorate: Electorate,
    answers: &[FenceAnswer<K>],
) -> Option<Proof> {
    let votes = || answers.iter().map(|a| a.vote.clone());
    if proves_authority(me, electorate, votes()) {
        return Some(Proof::Majority);
    }
    let counted = crate::sentinel::tally(electorate, votes());
    if counted.answered < counted.needed() {
        return None;
    }
    let from = answers
        .iter()
        .find_map(|a| match (&a.vote.master, &a.promoting) {
            (Some(from), Some(promoted)) if promoted == me && from != me => Some(from.clone()),
            _ => None,
        })?;
    answers
        .iter()
        .all(|a| {
            let names_me_or_from =
                a.vote.master.as_ref() == Some(me) || a.vote.master.as_ref() == Some(&from);
            let promotes_none_else = a.promoting.as_ref().is_none_or(|p| p == me);
            names_me_or_from && promotes_none_else
        })
        .then_some(Proof::Promotion)
}

/// One Sentinel's latest answer as the fencer holds it (ADR 0040), when the ask that got it
/// began (on the caller's clock), and how long that Sentinel's PINGs to the master it names had
/// gone unanswered (ADR 0041).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldAnswer<K> {
    pub answer: FenceAnswer<K>,
    pub asked_at: Duration,
    /// How long the Sentinel has counted the master it names as not answering its PINGs (the age
    /// of its oldest unanswered PING; zero when every PING was answered). A Sentinel flags the
    /// master `s_down` only once this exceeds its `down-after`.
    pub unanswered_ping: Duration,
    /// The Sentinel lists a replica of the master (`num-slaves` > 0): one it could promote.
    pub lists_replicas: bool,
}

impl<K> HeldAnswer<K> {
    /// ADR 0041: from when this answer vouches for the master it names — the moment the
    /// Sentinel's oldest unanswered PING was sent (at the latest), not the moment it answered. A
    /// Sentinel that names this master but cannot reach it (a one-way cut: the master still
    /// reaches its Sentinels) vouches from ever further back, so its vote ages out of F while its
    /// PING is pending, long before it may flag the master down.
    pub fn vouches_from(&self) -> Duration {
        self.asked_at.saturating_sub(self.unanswered_ping)
    }
}

/// ADR 0040: the authority proven over each Sentinel's latest answer rather than one round's.
/// Counted are the answers younger than F (`fence_after`); when a strict majority of the
/// electorate (sized over those answers) names `me` with votes vouching younger than F
/// ([`HeldAnswer::vouches_from`], ADR 0041), the authority counts as proven from the oldest vote
/// of the youngest such majority — never later than a vote it rests on, so a master cut off from
/// its Sentinels at `t` (either way: it cannot ask them, or they cannot PING it) is fenced by
/// `t + F` plus one Sentinel PING period. A Sentinel flags the master down only once its oldest
/// unanswered PING is `down-after` (D > F) old, and a failover needs a majority flagging it, which
/// shares a member with the proving majority: no failover can start before the fence. Answers
/// naming another pod or none count against it exactly as in one round: a majority is one of the
/// whole electorate, so at most one pod has one. One round of answers proves exactly what
/// [`proves_authority`] proves on it; what this adds is a majority whose members answered at
/// different moments within F (one of two live Sentinels slow or cut off while the third is being
/// replaced).
///
/// The waits matter only where a failover could promote another pod: the master has a replica
/// (`local_replicas`), or an answering Sentinel lists one. With neither (one data pod) nobody can
/// be promoted, so nothing acknowledged can be lost to a Sentinel that cannot reach the master,
/// and votes count from their answers (ADR 0040): a restarted single master on a new pod IP,
/// which its Sentinels keep dialling at the old one until they restart, is not paused for it.
pub fn held_majority_proof<K: PartialEq + Clone>(
    me: &K,
    electorate: Electorate,
    held: &[HeldAnswer<K>],
    local_replicas: usize,
    now: Duration,
    fence_after: Duration,
) -> Option<Duration> {
    let fresh: Vec<&HeldAnswer<K>> = held
        .iter()
        .filter(|h| h.asked_at <= now && now - h.asked_at < fence_after)
        .collect();
    let waits_matter = local_replicas > 0 || fresh.iter().any(|h| h.lists_replicas);
    let counted = crate::sentinel::tally(electorate, fresh.iter().map(|h| h.answer.vote.clone()));
    let mut naming_me: Vec<Duration> = fresh
        .iter()
        .filter(|h| h.answer.vote.master.as_ref() == Some(me))
        .map(|h| {
            if waits_matter {
                h.vouches_from()
            } else {
                h.asked_at
            }
        })
        .filter(|&from| now - from < fence_after)
        .collect();
    naming_me.sort_unstable_by(|a, b| b.cmp(a));
    naming_me.get(counted.needed() - 1).copied()
}

/// When an unfenced master must be looked at again at the latest so that it is fenced on time:
/// the moment its last proof turns F old (`None`: never proven, due now).
pub fn fence_deadline(last_proven: Option<Duration>, fence_after: Duration) -> Option<Duration> {
    last_proven.map(|at| at.saturating_add(fence_after))
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: Duration = DEFAULT_FENCE_AFTER;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn input(is_master: bool, last_proven: Option<u64>, now: u64, fenced: bool) -> FenceInput {
        FenceInput {
            is_master,
            last_proven: last_proven.map(ms),
            now: ms(now),
            fence_after: F,
            fenced,
        }
    }

    #[test]
    fn table() {
        use FenceAction::*;
        use FenceReason::*;
        use UnfenceReason::*;
        // One row a case: (is master, last proof ms, now ms, fenced) → action.
        #[rustfmt::skip]
        let cases: &[(FenceInput, FenceAction, &str)] = &[
            (input(true, Some(10_000), 10_000, false), Keep, "just proven"),
            (input(true, Some(10_000), 11_999, false), Keep, "proof 1.999 s old"),
            (input(true, Some(10_000), 12_000, false), Fence(ProofExpired), "proof F old"),
            (input(true, Some(10_000), 50_000, false), Fence(ProofExpired), "long unproven"),
            (input(true, Some(10_000), 50_000, true), Fence(ProofExpired), "renew"),
            (input(true, None, 0, false), Fence(NeverProven), "never proven"),
            (input(true, None, 9_000, true), Fence(NeverProven), "never proven, renew"),
            (input(true, Some(49_900), 50_000, true), Unfence(AuthorityProven), "proven again"),
            (input(true, Some(50_001), 50_000, false), Fence(ProofExpired), "future proof"),
            (input(false, None, 50_000, true), Unfence(NowReplica), "demoted while fenced"),
            (input(false, Some(1), 50_000, true), Unfence(NowReplica), "demoted, old proof"),
            (input(false, None, 50_000, false), Keep, "a replica is never fenced"),
            (input(false, Some(49_999), 50_000, false), Keep, "replica, fresh proof"),
        ];
        for (case, want, why) in cases {
            assert_eq!(fence_action(*case), *want, "{why}: {case:?}");
        }
    }

    fn held(master: Option<&'static str>, asked_at: u64) -> HeldAnswer<&'static str> {
        HeldAnswer {
            answer: FenceAnswer {
                vote: Vote::new(master, 3),
                promoting: None,
            },
            asked_at: ms(asked_at),
            unanswered_ping: Duration::ZERO,
            lists_replicas: true,
        }
    }

    /// An answer whose Sentinel's PING to the master has waited `pending` ms.
    fn deaf(master: Option<&'static str>, asked_at: u64, pending: u64) -> HeldAnswer<&'static str> {
        HeldAnswer {
            unanswered_ping: ms(pending),
            ..held(master, asked_at)
        }
    }

    #[test]
    fn a_majority_held_across_rounds_proves_from_its_oldest_vote() {
        let me = "vk-0";
        let three = Electorate::new(0, 3);
        let now = 10_000;
        // (held answers, proof time in ms) — `now` is 10 s, F 2 s.
        #[rustfmt::skip]
        type Case = (Vec<HeldAnswer<&'static str>>, Option<u64>, &'static str);
        let cases: Vec<Case> = vec![
            (
                vec![held(Some(me), 10_000), held(Some(me), 10_000)],
                Some(10_000),
                "one round, two of three",
            ),
            (
                vec![held(Some(me), 10_000), held(Some(me), 9_000)],
                Some(9_000),
                "two rounds: the older",
            ),
            (
                vec![
                    held(Some(me), 10_000),
                    held(Some(me), 9_000),
                    held(Some(me), 9_500),
                ],
                Some(9_500),
                "the youngest majority",
            ),
            (
                vec![held(Some(me), 10_000), held(Some(me), 8_000)],
                None,
                "one vote F old",
            ),
            (
                vec![held(Some(me), 10_000), held(Some(me), 8_001)],
                Some(8_001),
                "just younger than F",
            ),
            (vec![held(Some(me), 10_000)], None, "one of three"),
            (
                vec![
                    held(Some(me), 9_000),
                    held(Some(me), 9_000),
                    held(Some("vk-1"), 9_500),
                ],
                Some(9_000),
                "two of three name me, the third another pod (as in one round)",
            ),
            (
                vec![
                    held(Some(me), 10_000),
                    held(Some(me), 10_000),
                    held(Some("vk-1"), 10_000),
                ],
                Some(10_000),
                "the same in one round",
            ),
            (
                vec![
                    held(Some(me), 10_000),
                    held(Some(me), 9_800),
                    held(None, 9_500),
                ],
                Some(9_800),
                "a third that names none",
            ),
            (
                vec![
                    held(Some(me), 10_000),
                    held(Some("vk-1"), 9_900),
                    held(Some("vk-1"), 9_000),
                ],
                None,
                "the majority names another pod",
            ),
            (
                vec![
                    held(Some(me), 10_000),
                    held(Some(me), 10_000),
                    held(Some("vk-1"), 7_000),
                ],
                Some(10_000),
                "an answer older than F is forgotten",
            ),
            (
                vec![held(Some(me), 10_500), held(Some(me), 10_000)],
                None,
                "a vote from the future is none",
            ),
            (
                vec![deaf(Some(me), 10_000, 300), held(Some(me), 10_000)],
                Some(9_700),
                "a pending PING dates its vote back",
            ),
            (
                vec![deaf(Some(me), 10_000, 2_000), held(Some(me), 10_000)],
                None,
                "a PING unanswered for F: the vote vouches nothing",
            ),
            (
                vec![
                    deaf(Some(me), 10_000, 2_500),
                    deaf(Some(me), 10_000, 1_200),
                    held(Some(me), 9_900),
                ],
                Some(8_800),
                "one Sentinel cannot reach me: the other two still prove",
            ),
            (
                vec![
                    deaf(Some(me), 10_000, 5_100),
                    deaf(Some(me), 10_000, 4_000),
                    held(Some(me), 10_000),
                ],
                None,
                "two of three cannot PING me (one-way cut): no majority, however fresh the answers",
            ),
            (
                vec![deaf(Some(me), 10_000, 12_000), held(Some(me), 10_000)],
                None,
                "a PING pending since before the clock started: vouches from 0",
            ),
        ];
        for (answers, want, why) in cases {
            assert_eq!(
                held_majority_proof(&me, three, &answers, 2, ms(now), F),
                want.map(ms),
                "{why}"
            );
        }
        // A peer reporting five Sentinels needs three.
        let mut five = vec![held(Some(me), 10_000), held(Some(me), 9_000)];
        five[0].answer.vote.known_sentinels = 5;
        assert_eq!(held_majority_proof(&me, three, &five, 2, ms(now), F), None);
    }

    #[test]
    fn held_answers_of_one_round_prove_exactly_what_the_round_proves() {
        let me = "vk-0";
        let names = [None, Some("vk-0"), Some("vk-1")];
        // Every combination of three answers, answering or not, in one round.
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    let answers: Vec<HeldAnswer<&str>> = [a, b, c]
                        .iter()
                        .filter(|&&k| k < 3)
                        .map(|&k| held(names[k], 5_000))
                        .collect();
                    let votes = answers.iter().map(|h| h.answer.vote.clone());
                    let round = proves_authority(&me, Electorate::new(0, 3), votes);
                    let windowed =
                        held_majority_proof(&me, Electorate::new(0, 3), &answers, 2, ms(5_000), F);
                    assert_eq!(windowed.is_some(), round, "{a} {b} {c}");
                }
            }
        }
    }

    #[test]
    fn a_cut_off_master_is_fenced_within_f_of_its_last_vote() {
        // Whatever answers were held, the proof never dates after a vote it counts: at any time
        // later than the last answer + F nothing proves.
        let me = "vk-0";
        for last in [1_000u64, 5_000, 9_999] {
            let answers = vec![held(Some(me), last), held(Some(me), last - 500)];
            for now in last..last + 3_000 {
                let proof =
                    held_majority_proof(&me, Electorate::new(0, 3), &answers, 2, ms(now), F);
                if let Some(at) = proof {
                    assert!(at <= ms(last) && ms(now) - at < F, "{now}: {at:?}");
                }
                if now >= last - 500 + 2_000 {
                    assert_eq!(proof, None, "{now}");
                }
            }
        }
    }

    #[test]
    fn waits_do_not_matter_where_nobody_could_be_promoted() {
        let me = "vk-0";
        let three = Electorate::new(0, 3);
        let lonely = |pending| HeldAnswer {
            lists_replicas: false,
            ..deaf(Some(me), 10_000, pending)
        };
        // One data pod: no local replica, no Sentinel lists one. Sentinels dialling a stale IP
        // (or flagging it down, encoded as waited forever) still vouch from their answers.
        let answers = vec![lonely(4_000), lonely(u64::MAX / 2), lonely(0)];
        assert_eq!(
            held_majority_proof(&me, three, &answers, 0, ms(10_000), F),
            Some(ms(10_000))
        );
        // A replica on either side: the waits count again.
        assert_eq!(
            held_majority_proof(&me, three, &answers, 1, ms(10_000), F),
            None,
            "the master has a replica"
        );
        let mut listed = answers.clone();
        listed[2].lists_replicas = true;
        assert_eq!(
            held_majority_proof(&me, three, &listed, 0, ms(10_000), F),
            None,
            "a Sentinel lists a replica it could promote"
        );
    }

    #[test]
    fn a_master_its_sentinels_cannot_ping_is_fenced_before_they_may_flag_it_down() {
        // A one-way cut at `cut`: every Sentinel keeps answering the master's asks and naming it,
        // but from the first PING after the cut (within one PING period) none is answered. At every
        // later instant the proof, if any, is younger than F, and once F has passed since the first
        // unanswered PING nothing proves — while a Sentinel flags the master down only when its
        // PING is D (5 s) old.
        let me = "vk-0";
        let (cut, ping_period, d) = (10_000u64, 1_000u64, 5_000u64);
        for first_unanswered in [cut, cut + 1, cut + ping_period / 2, cut + ping_period - 1] {
            for now in cut..cut + 10_000 {
                // Asked every 250 ms; each answer carries that Sentinel's pending PING age then.
                let asked = now - now % 250;
                let pending = asked.saturating_sub(first_unanswered);
                let answers = vec![
                    deaf(Some(me), asked, pending),
                    deaf(Some(me), asked, pending),
                    deaf(Some(me), asked, pending),
                ];
                let proof =
                    held_majority_proof(&me, Electorate::new(0, 3), &answers, 2, ms(now), F);
                if now >= first_unanswered + F.as_millis() as u64 {
                    assert_eq!(proof, None, "{first_unanswered} {now}");
                }
                if let Some(at) = proof {
                    assert!(at <= ms(first_unanswered.max(asked)), "{now}: {at:?}");
                }
            }
            assert!(F.as_millis() as u64 + 250 < d, "fenced with D - F to spare");
        }
    }

    #[test]
    fn fenced_exactly_when_the_proof_is_f_old() {
        for f in [ms(500), ms(2_000), ms(4_999)] {
            for age in 0..6_000u64 {
                let action = fence_action(FenceInput {
                    is_master: true,
                    last_proven: Some(ms(100_000)),
                    now: ms(100_000 + age),
                    fence_after: f,
                    fenced: false,
                });
                let fence = matches!(action, FenceAction::Fence(_));
                assert_eq!(fence, ms(age) >= f, "F {f:?}, age {age} ms: {action:?}");
            }
        }
    }

    #[test]
    fn only_a_majority_of_every_sentinel_naming_me_proves() {
        let me = "vk-0";
        let v = |m: Option<&'static str>, known| Vote::new(m, known);
        let three = Electorate::new(0, 3);
        let cases: Vec<(Electorate, Vec<Vote<&str>>, bool, &str)> = vec![
            (
                three,
                vec![v(Some(me), 3), v(Some(me), 3), v(Some(me), 3)],
                true,
                "all",
            ),
            (
                three,
                vec![v(Some(me), 3), v(Some(me), 3)],
                true,
                "two of three",
            ),
            (three, vec![v(Some(me), 3)], false, "one of three"),
            (three, vec![], false, "nobody answers"),
            (
                three,
                vec![v(Some(me), 3), v(None, 3), v(None, 3)],
                false,
                "two name none",
            ),
            (
                three,
                vec![v(Some(me), 3), v(Some("vk-1"), 3), v(Some("vk-1"), 3)],
                false,
                "majority names another",
            ),
            (
                Electorate::new(0, 2),
                vec![v(Some(me), 3), v(Some(me), 3)],
                true,
                "two found, three reported, two agree",
            ),
            (
                three,
                vec![v(Some(me), 5), v(Some(me), 5)],
                false,
                "a peer reports five: two is no majority",
            ),
            (
                Electorate::new(0, 1),
                vec![v(Some(me), 1)],
                true,
                "a single Sentinel",
            ),
        ];
        for (electorate, votes, want, why) in cases {
            assert_eq!(proves_authority(&me, electorate, votes), want, "{why}");
        }
    }

    #[test]
    fn a_failover_promoting_me_proves_while_the_others_name_the_old_master() {
        let (me, old, other) = ("vk-1", "vk-0", "vk-2");
        let a = |master: Option<&'static str>, promoting: Option<&'static str>| FenceAnswer {
            vote: Vote::new(master, 3),
            promoting,
        };
        let three = Electorate::new(0, 3);
        use Proof::*;
        type Case = (Vec<FenceAnswer<&'static str>>, Option<Proof>, &'static str);
        let cases: Vec<Case> = vec![
            (
                vec![
                    a(Some(old), Some(me)),
                    a(Some(old), None),
                    a(Some(old), None),
                ],
                Some(Promotion),
                "the leader promotes me, the others still name the old master",
            ),
            (
                vec![a(Some(old), Some(me)), a(Some(old), None)],
                Some(Promotion),
                "two of three answer",
            ),
            (
                vec![
                    a(Some(me), None),
                    a(Some(old), None),
                    a(Some(old), Some(me)),
                ],
                Some(Promotion),
                "one follower already names me",
            ),
            (
                vec![a(Some(me), None), a(Some(me), None), a(Some(old), Some(me))],
                Some(Majority),
                "a majority names me",
            ),
            (
                vec![a(Some(old), Some(me))],
                None,
                "cut off with the promoter alone",
            ),
            (
                vec![a(Some(old), Some(me)), a(None, None)],
                None,
                "the other answer names no master",
            ),
            (
                vec![
                    a(Some(old), Some(me)),
                    a(Some(other), None),
                    a(Some(old), None),
                ],
                None,
                "a Sentinel names a third pod",
            ),
            (
                vec![
                    a(Some(old), Some(me)),
                    a(Some(old), Some(other)),
                    a(Some(old), None),
                ],
                None,
                "a competing failover promotes another pod",
            ),
            (
                vec![a(Some(old), None), a(Some(old), None), a(Some(old), None)],
                None,
                "no failover in progress",
            ),
            (
                vec![
                    a(Some(old), Some(other)),
                    a(Some(old), None),
                    a(Some(old), None),
                ],
                None,
                "the failover promotes another pod",
            ),
        ];
        for (answers, want, why) in cases {
            assert_eq!(authority_proof(&me, three, &answers), want, "{why}");
        }
        let five_known = [
            FenceAnswer {
                vote: Vote::new(Some(old), 5),
                promoting: Some(me),
            },
            FenceAnswer {
                vote: Vote::new(Some(old), 5),
                promoting: None,
            },
        ];
        assert_eq!(
            authority_proof(&me, three, &five_known),
            None,
            "a peer reports five Sentinels: two answers are no majority"
        );
    }

    #[test]
    fn the_deadline_is_the_last_proof_plus_f() {
        assert_eq!(fence_deadline(None, F), None);
        assert_eq!(fence_deadline(Some(ms(1_000)), F), Some(ms(3_000)));
        assert_eq!(
            fence_deadline(Some(Duration::MAX), F),
            Some(Duration::MAX),
            "saturates"
        );
    }

    #[test]
    fn reasons_have_stable_names() {
        assert_eq!(FenceReason::NeverProven.as_str(), "AuthorityNeverProven");
        assert_eq!(FenceReason::ProofExpired.as_str(), "AuthorityNotProven");
        assert_eq!(FenceReason::HeldByOther.as_str(), "AuthorityHeldByOther");
    }
}
