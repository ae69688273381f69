//! Properties of the one Sentinel-majority rule, over random and over every small electorate.

use proptest::prelude::*;
use vko_authority::{Electorate, Vote, sentinel_majority, tally};

/// Up to 7 Sentinels, each silent (`None`), voting for nobody (`Some(None)`) or for one of
/// three masters, each reporting a peer count of 0..=8.
fn answers() -> impl Strategy<Value = Vec<Option<(Option<u8>, usize)>>> {
    prop::collection::vec(
        prop::option::of((prop::option::of(0u8..3), 0usize..=8)),
        0..=7,
    )
}

fn votes(answers: &[Option<(Option<u8>, usize)>]) -> Vec<Vote<u8>> {
    answers
        .iter()
        .flatten()
        .map(|(master, known)| Vote::new(*master, *known))
        .collect()
}

proptest! {
    #[test]
    fn never_two_masters_and_the_named_one_has_a_strict_majority(
        configured in 0usize..=7,
        answers in answers(),
    ) {
        let electorate = Electorate::new(configured, answers.len());
        let tally = tally(electorate, votes(&answers));
        let with_majority: Vec<&u8> = tally
            .counts
            .iter()
            .filter(|(_, n)| n * 2 > tally.electorate)
            .map(|(m, _)| m)
            .collect();
        prop_assert!(with_majority.len() <= 1);
        let named = sentinel_majority(electorate, votes(&answers));
        prop_assert_eq!(named.as_ref(), with_majority.first().copied());
        if let Some(master) = named {
            let for_it = votes(&answers).iter().filter(|v| v.master == Some(master)).count();
            prop_assert!(for_it * 2 > configured.max(answers.len()));
        }
    }

    #[test]
    fn a_minority_of_answers_never_names_a_master(
        configured in 0usize..=7,
        answers in answers(),
    ) {
        let answered = answers.iter().flatten().count();
        let electorate = Electorate::new(configured, answers.len());
        if answered * 2 <= configured.max(answers.len()) {
            prop_assert_eq!(sentinel_majority(electorate, votes(&answers)), None);
        }
    }

    #[test]
    fn adding_a_non_answer_never_creates_a_master(
        configured in 0usize..=7,
        answers in answers(),
        at in any::<prop::sample::Index>(),
    ) {
        let before = sentinel_majority(Electorate::new(configured, answers.len()), votes(&answers));
        let mut more = answers.clone();
        more.insert(at.index(answers.len() + 1), None);
        let after = sentinel_majority(Electorate::new(configured, more.len()), votes(&more));
        if before.is_none() {
            prop_assert_eq!(after, None);
        } else {
            prop_assert!(after.is_none() || after == before);
        }
    }

    #[test]
    fn a_larger_configured_or_reported_count_never_creates_a_master(
        configured in 0usize..=7,
        extra in 0usize..=4,
        answers in answers(),
    ) {
        let discovered = answers.len();
        let before = sentinel_majority(Electorate::new(configured, discovered), votes(&answers));
        let after = sentinel_majority(Electorate::new(configured + extra, discovered), votes(&answers));
        let stale: Vec<Vote<u8>> = votes(&answers)
            .into_iter()
            .map(|v| Vote::new(v.master, v.known_sentinels + extra))
            .collect();
        let stale = sentinel_majority(Electorate::new(configured, discovered), stale);
        for other in [after, stale] {
            prop_assert!(other.is_none() || other == before);
        }
    }

    #[test]
    fn one_of_three_answering_names_no_master(
        master in prop::option::of(0u8..3),
        known in 0usize..=8,
        discovered in 1usize..=3,
    ) {
        prop_assert_eq!(
            sentinel_majority(Electorate::new(3, discovered), [Vote::new(master, known)]),
            None
        );
    }

    #[test]
    fn every_sentinel_agreeing_names_the_master(n in 1usize..=7, master in 0u8..3) {
        let votes = (0..n).map(|_| Vote::new(Some(master), n));
        prop_assert_eq!(sentinel_majority(Electorate::new(n, n), votes), Some(master));
    }
}

/// Every assignment of 0..=5 Sentinels to {silent, for nobody, for A, for B}, with every
/// configured count 0..=5 and the peer count they report either exact or one stale peer.
#[test]
fn every_small_cluster_names_a_master_exactly_when_a_strict_majority_agrees() {
    for n in 0u32..=5 {
        for code in 0..4usize.pow(n) {
            let answers: Vec<Option<Option<u8>>> = (0..n)
                .map(|i| match code / 4usize.pow(i) % 4 {
                    0 => None,
                    1 => Some(None),
                    2 => Some(Some(0)),
                    _ => Some(Some(1)),
                })
                .collect();
            for configured in 0usize..=5 {
                for stale in [0usize, 1] {
                    let known = n as usize + stale;
                    let votes: Vec<Vote<u8>> = answers
                        .iter()
                        .flatten()
                        .map(|m| Vote::new(*m, known))
                        .collect();
                    let electorate = configured.max(known);
                    let for_master = |m: u8| votes.iter().filter(|v| v.master == Some(m)).count();
                    let expected = [0u8, 1]
                        .into_iter()
                        .find(|m| for_master(*m) * 2 > electorate);
                    let named = sentinel_majority(Electorate::new(configured, n as usize), votes);
                    assert_eq!(
                        named, expected,
                        "{n} Sentinels {answers:?}, configured {configured}, stale {stale}"
                    );
                }
            }
        }
    }
}
