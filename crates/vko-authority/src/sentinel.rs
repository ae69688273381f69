//! The one Sentinel-majority rule (ADR 0014).
//!
//! A master is named only by a strict majority of the *electorate*: every Sentinel the cluster
//! has, as far as the caller can know it. That is the largest of
//!
//! - the configured number (`spec.sentinel.replicas`), when the caller knows it;
//! - the Sentinels discovered (pods, DNS names, the list given), answering or not;
//! - the largest peer count any answer reports (`num-other-sentinels + 1`);
//! - the number of answers.
//!
//! A Sentinel that does not answer is a vote for nobody, never a smaller electorate, so a
//! partitioned minority cannot name a master. Sentinel never forgets a peer until `SENTINEL
//! RESET`: a stale peer inflates `num-other-sentinels`, and then no master is named until the
//! reset. Sentinel's own failover needs a majority of the same peers, so the rule asks no more
//! than Sentinel itself does.

use std::collections::BTreeSet;

/// What the caller knows about how many Sentinels the cluster has, before any answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Electorate {
    /// `spec.sentinel.replicas`; 0 when the caller cannot know it (it then relies on the
    /// discovered and reported counts).
    pub configured: usize,
    /// The Sentinels found and asked, answering or not.
    pub discovered: usize,
}

impl Electorate {
    pub const fn new(configured: usize, discovered: usize) -> Electorate {
        Electorate {
            configured,
            discovered,
        }
    }
}

/// One answering Sentinel's vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vote<K> {
    /// The master it names; `None` when it answered but names none (it considers the master
    /// down, or its answer is not one of this cluster's pods).
    pub master: Option<K>,
    /// This Sentinel plus the peers it knows (`num-other-sentinels + 1`); 0 when not asked.
    pub known_sentinels: usize,
}

impl<K> Vote<K> {
    pub const fn new(master: Option<K>, known_sentinels: usize) -> Vote<K> {
        Vote {
            master,
            known_sentinels,
        }
    }
}

/// The votes counted against the electorate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally<K> {
    /// The electorate's size: the largest of configured, discovered, reported and answered.
    pub electorate: usize,
    /// How many Sentinels answered (votes for nobody included).
    pub answered: usize,
    /// Each named master with its number of votes, in the order first named.
    pub counts: Vec<(K, usize)>,
}

impl<K> Tally<K> {
    /// Votes a master needs: more than half of the electorate.
    pub const fn needed(&self) -> usize {
        self.electorate / 2 + 1
    }

    /// The master named by a strict majority of the electorate, with its votes. At most one
    /// master can have one, since the votes never exceed the electorate.
    pub fn majority(&self) -> Option<(&K, usize)> {
        let (master, votes) = self.counts.get(self.majority_index()?)?;
        Some((master, *votes))
    }

    /// Where in [`Tally::counts`] the master with a strict majority is: the one comparison.
    fn majority_index(&self) -> Option<usize> {
        self.counts
            .iter()
            .position(|(_, votes)| *votes >= self.needed())
    }
}

/// Counts `votes` (the answering Sentinels) against the electorate.
pub fn tally<K: PartialEq>(
    electorate: Electorate,
    votes: impl IntoIterator<Item = Vote<K>>,
) -> Tally<K> {
    let mut answered = 0;
    let mut reported = 0;
    let mut counts: Vec<(K, usize)> = Vec::new();
    for vote in votes {
        answered += 1;
        reported = reported.max(vote.known_sentinels);
        let Some(master) = vote.master else {
            continue;
        };
        match counts.iter_mut().find(|(named, _)| *named == master) {
            Some((_, n)) => *n += 1,
            None => counts.push((master, 1)),
        }
    }
    Tally {
        electorate: electorate
            .configured
            .max(electorate.discovered)
            .max(reported)
            .max(answered),
        answered,
        counts,
    }
}

/// The master a strict majority of every Sentinel the cluster has names, or `None`.
pub fn sentinel_majority<K: PartialEq>(
    electorate: Electorate,
    votes: impl IntoIterator<Item = Vote<K>>,
) -> Option<K> {
    let mut tally = tally(electorate, votes);
    let index = tally.majority_index()?;
    Some(tally.counts.swap_remove(index).0)
}

/// One Sentinel's answer in data-pod ordinals (`SENTINEL MASTER` + `SENTINEL REPLICAS`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelReport {
    /// The ordinal of the master it names; `None` when it names no pod of this cluster or
    /// considers the master down.
    pub master: Option<u32>,
    /// Ordinals of the replicas it lists in good health.
    pub replicas: Vec<u32>,
    /// `num-other-sentinels + 1`.
    pub known_sentinels: usize,
}

/// What the Sentinels say together, in ordinals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SentinelVerdict {
    /// How many Sentinels answered.
    pub answered: usize,
    /// The electorate's size.
    pub electorate: usize,
    /// The master a strict majority of the electorate names.
    pub master: Option<u32>,
    /// How many Sentinels name that master (0 without one).
    pub agreeing: usize,
    /// The replicas every agreeing Sentinel lists (Sentinel picks a failover candidate and
    /// reconfigures replicas from its own list), ascending; empty without a master.
    pub known_replicas: Vec<u32>,
}

/// The Sentinels' verdict from every Sentinel asked (`None`: it did not answer).
pub fn sentinel_view(
    electorate: Electorate,
    answers: &[Option<SentinelReport>],
) -> SentinelVerdict {
    let answered: Vec<&SentinelReport> = answers.iter().flatten().collect();
    let tally = tally(
        electorate,
        answered
            .iter()
            .map(|a| Vote::new(a.master, a.known_sentinels)),
    );
    let Some((&master, agreeing)) = tally.majority() else {
        return SentinelVerdict {
            answered: tally.answered,
            electorate: tally.electorate,
            ..SentinelVerdict::default()
        };
    };
    let mut lists = answered
        .iter()
        .filter(|a| a.master == Some(master))
        .map(|a| a.replicas.iter().copied().collect::<BTreeSet<u32>>());
    let first = lists.next().unwrap_or_default();
    let known_replicas = lists
        .fold(first, |known, list| &known & &list)
        .into_iter()
        .collect();
    SentinelVerdict {
        answered: tally.answered,
        electorate: tally.electorate,
        master: Some(master),
        agreeing,
        known_replicas,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn votes(masters: &[Option<char>], known: usize) -> Vec<Vote<char>> {
        masters.iter().map(|m| Vote::new(*m, known)).collect()
    }

    /// (configured, discovered, answers, reported peer count, expected master).
    type Row = (usize, usize, &'static [Option<char>], usize, Option<char>);

    #[test]
    fn the_majority_is_taken_of_every_sentinel_the_cluster_has() {
        const A: Option<char> = Some('a');
        const B: Option<char> = Some('b');
        let rows: &[Row] = &[
            // No Sentinel at all, or nobody answered.
            (0, 0, &[], 0, None),
            (3, 3, &[], 0, None),
            // 1 of 3 answers: a minority, whatever it says and however few peers it knows.
            (3, 3, &[A], 3, None),
            (3, 3, &[A], 1, None),
            (3, 1, &[A], 1, None),
            (0, 3, &[A], 1, None),
            (0, 1, &[A], 3, None),
            // 2 of 3 agree.
            (3, 3, &[A, A], 3, A),
            (3, 2, &[A, A], 3, A),
            (3, 3, &[A, A, B], 3, A),
            // Split, or a vote for nobody.
            (3, 3, &[A, B], 3, None),
            (3, 3, &[A, B, None], 3, None),
            (3, 3, &[A, None, None], 3, None),
            // One Sentinel configured and answering is the whole electorate.
            (1, 1, &[A], 1, A),
            // Two Sentinels: both must agree.
            (2, 2, &[A], 2, None),
            (2, 2, &[A, A], 2, A),
            // Four: three needed.
            (4, 4, &[A, A], 4, None),
            (4, 4, &[A, A, A, B], 4, A),
            // Five: three needed, wherever the five are known from.
            (5, 5, &[A, A], 5, None),
            (5, 5, &[A, A, A], 5, A),
            (0, 2, &[A, A], 5, None),
            (5, 2, &[A, A], 2, None),
            (3, 5, &[A, A, A], 3, A),
            // A stale peer (Sentinel never forgets one until SENTINEL RESET) raises the bar:
            // 2 of 3 live Sentinels are not a majority of the 4 they know.
            (3, 3, &[A, A], 4, None),
            (3, 3, &[A, A, A], 4, A),
            // Scale-down from 5 to 3 before the reset: the 5 they know still count.
            (3, 3, &[A, A, A], 5, A),
            (3, 3, &[A, A], 5, None),
            // Scale-up from 3 to 5 before the new ones answer: 3 of 5 suffice, 2 do not.
            (5, 3, &[A, A, A], 3, A),
            (5, 3, &[A, A], 3, None),
        ];
        for (configured, discovered, answers, reported, expected) in rows {
            let electorate = Electorate::new(*configured, *discovered);
            assert_eq!(
                sentinel_majority(electorate, votes(answers, *reported)),
                *expected,
                "configured {configured}, discovered {discovered}, answers {answers:?}, reported {reported}"
            );
        }
    }

    #[test]
    fn the_tally_says_how_many_votes_are_needed() {
        let tally = tally(Electorate::new(3, 2), votes(&[Some('a')], 5));
        assert_eq!(tally.electorate, 5);
        assert_eq!(tally.needed(), 3);
        assert_eq!(tally.answered, 1);
        assert_eq!(tally.counts, vec![('a', 1)]);
        assert_eq!(tally.majority(), None);
        // More answers than anyone knew of still count as the electorate.
        let tally = super::tally(Electorate::new(1, 1), votes(&[Some('a'), Some('b')], 0));
        assert_eq!(tally.electorate, 2);
        assert_eq!(tally.majority(), None);
    }

    #[test]
    fn the_view_lists_the_replicas_every_agreeing_sentinel_knows() {
        let report = |master: Option<u32>, replicas: &[u32]| {
            Some(SentinelReport {
                master,
                replicas: replicas.to_vec(),
                known_sentinels: 3,
            })
        };
        let view = sentinel_view(
            Electorate::new(3, 3),
            &[report(Some(1), &[2, 0]), report(Some(1), &[2]), None],
        );
        assert_eq!(view.answered, 2);
        assert_eq!(view.electorate, 3);
        assert_eq!(view.master, Some(1));
        assert_eq!(view.agreeing, 2);
        assert_eq!(view.known_replicas, vec![2]);
        // A disagreeing Sentinel's list does not count.
        let view = sentinel_view(
            Electorate::new(3, 3),
            &[
                report(Some(1), &[0, 2]),
                report(Some(1), &[0, 2]),
                report(Some(0), &[]),
            ],
        );
        assert_eq!(view.known_replicas, vec![0, 2]);
        // 1 of 3 answering: no master, no agreeing Sentinel, no list.
        let view = sentinel_view(Electorate::new(3, 3), &[report(Some(1), &[2]), None, None]);
        assert_eq!(view.answered, 1);
        assert_eq!(view.master, None);
        assert_eq!(view.agreeing, 0);
        assert!(view.known_replicas.is_empty());
        let split = sentinel_view(
            Electorate::new(2, 2),
            &[report(Some(1), &[]), report(Some(0), &[])],
        );
        assert_eq!(split.master, None);
        assert_eq!(split.agreeing, 0);
    }
}
