//! Configuration warnings: a spec the API server accepts and the operator runs as asked, but that
//! weakens security or availability in a way an SRE should hear about once — as the
//! `ConfigurationWarning` condition and one Warning Event per warning when it first appears.
//!
//! Refusing these at admission would break specs the reference accepts (ADR 0003 addendum); a CEL
//! `warningPolicy`-style message cannot be had from a CRD (CEL messages are refusals), so they are
//! reported here, after admission.

use vko_api::{ConditionReason, ValkeySpec};

/// One warning: its typed reason (the Event's reason too) and a message naming the problem and the
/// fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advisory {
    pub reason: ConditionReason,
    pub message: String,
}

impl Advisory {
    fn new(reason: ConditionReason, message: String) -> Advisory {
        Advisory { reason, message }
    }
}

/// Every reason [`advisories`] can give (tests and dashboards tell them from failures by it).
pub const ADVISORY_REASONS: &[ConditionReason] = &[
    ConditionReason::AuthDisabled,
    ConditionReason::SentinelAuthDisabled,
    ConditionReason::ExporterScrapeUnrestricted,
    ConditionReason::SentinelCountNotHighlyAvailable,
    ConditionReason::SentinelCountEven,
    ConditionReason::SentinelWithOneDataPod,
    ConditionReason::PodDisruptionBudgetTooPermissive,
    ConditionReason::SentinelPodDisruptionBudgetBlocksDrains,
    ConditionReason::PodDisruptionBudgetNotOwned,
];

/// A PodDisruptionBudget under one of the generated budget names that this `Valkey` does not
/// control (its StatefulSet's name: `<name>` or `<name>-sentinel`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForeignBudget {
    pub name: String,
    /// It holds the Sentinel tier's name (else the data tier's).
    pub sentinel: bool,
}

/// The warnings `spec` deserves, in a fixed order (the condition's message must not change between
/// passes of an unchanged spec), with the foreign budgets found under the generated names.
pub fn advisories(spec: &ValkeySpec, foreign_budgets: &[ForeignBudget]) -> Vec<Advisory> {
    let mut found = Vec::new();
    if !spec.auth_enabled() {
        found.push(Advisory::new(
            ConditionReason::AuthDisabled,
            "spec.auth is not set: every client that can reach the Valkey and Sentinel ports reads \
             and writes without a password; set spec.auth.secretName to a Secret holding one, and \
             spec.networkPolicy.enabled to limit who can connect"
                .to_owned(),
        ));
    }
    if spec.sentinel_enabled() && spec.sentinel_auth_disabled() {
        found.push(Advisory::new(
            ConditionReason::SentinelAuthDisabled,
            "spec.sentinel.disableAuth is true: anyone who reaches a Sentinel port can run its \
             admin commands (SENTINEL FAILOVER, SET, RESET) without a password; remove it, or \
             restrict who reaches Sentinel with spec.networkPolicy.enabled and spec.tls"
                .to_owned(),
        ));
    }
    if spec.metrics_enabled() {
        found.push(Advisory::new(
            ConditionReason::ExporterScrapeUnrestricted,
            format!(
                "spec.metrics is on: redis_exporter's /scrape endpoint on port {} connects to any \
                 address a caller names, with this cluster's password, and redis_exporter cannot \
                 turn it off; the port is open to every namespace (Prometheus must reach it), so \
                 restrict port {} to your Prometheus's namespace with a NetworkPolicy of your own",
                spec.metrics_port(),
                spec.metrics_port()
            ),
        ));
    }
    if spec.sentinel_enabled() {
        found.extend(sentinel_count_advisory(spec));
        if spec.replicas() == 1 {
            found.push(Advisory::new(
                ConditionReason::SentinelWithOneDataPod,
                "Sentinel is on with spec.replicas 1: there is no replica to fail over to, so a \
                 lost master is not replaced; set spec.replicas to 3 for automatic failover"
                    .to_owned(),
            ));
        }
    }
    found.extend(pod_disruption_budget_advisories(spec, foreign_budgets));
    found
}

fn sentinel_count_advisory(spec: &ValkeySpec) -> Option<Advisory> {
    let sentinels = spec.sentinel_replicas();
    let quorum = spec.sentinel_quorum();
    if sentinels <= 2 {
        Some(Advisory::new(
            ConditionReason::SentinelCountNotHighlyAvailable,
            format!(
                "spec.sentinel.replicas is {sentinels}: a failover needs {quorum} of them, so one \
                 Sentinel outage leaves a lost master unreplaced; use 3 (or 5) Sentinels"
            ),
        ))
    } else if sentinels % 2 == 0 {
        Some(Advisory::new(
            ConditionReason::SentinelCountEven,
            format!(
                "spec.sentinel.replicas is {sentinels}: a failover needs {quorum}, so it tolerates \
                 {} Sentinel outages, no more than {} Sentinels would; use an odd count",
                sentinels - quorum,
                sentinels - 1
            ),
        ))
    } else {
        None
    }
}

/// The reference's three PDB warnings, only while `spec.podDisruptionBudget.enabled` (a cluster
/// that never opted in leaves a foreign budget alone silently). A foreign budget takes the place
/// of ours, so the content warnings about ours are not given for its tier.
fn pod_disruption_budget_advisories(
    spec: &ValkeySpec,
    foreign_budgets: &[ForeignBudget],
) -> Vec<Advisory> {
    let mut found = Vec::new();
    if !spec.pod_disruption_budget_enabled() {
        return found;
    }
    for budget in foreign_budgets {
        found.push(Advisory::new(
            ConditionReason::PodDisruptionBudgetNotOwned,
            format!(
                "PodDisruptionBudget {} is not controlled by this Valkey: it is left untouched and \
                 spec.podDisruptionBudget has no effect on the {} pods while it exists; delete or \
                 rename it to hand the name over",
                budget.name,
                if budget.sentinel { "Sentinel" } else { "data" }
            ),
        ));
    }
    let foreign = |sentinel: bool| foreign_budgets.iter().any(|b| b.sentinel == sentinel);
    let replicas = spec.replicas();
    let max_unavailable = spec.pod_disruption_budget_max_unavailable();
    if spec.needs_data_pod_disruption_budget() && max_unavailable >= replicas && !foreign(false) {
        found.push(Advisory::new(
            ConditionReason::PodDisruptionBudgetTooPermissive,
            format!(
                "spec.podDisruptionBudget.maxUnavailable ({max_unavailable}) is not below \
                 spec.replicas ({replicas}): a node drain may evict every data pod at once; set it \
                 below {replicas} (the default 1 evicts one pod at a time)"
            ),
        ));
    }
    let sentinels = spec.sentinel_replicas();
    let quorum = spec.sentinel_quorum();
    if spec.needs_sentinel_pod_disruption_budget() && quorum >= sentinels && !foreign(true) {
        found.push(Advisory::new(
            ConditionReason::SentinelPodDisruptionBudgetBlocksDrains,
            format!(
                "the Sentinel PodDisruptionBudget keeps minAvailable {quorum} (the failover \
                 quorum) of {sentinels} Sentinels, so no Sentinel pod can be evicted and a \
                 kubectl drain of a node running one never finishes; use 3 Sentinels \
                 (spec.sentinel.replicas)"
            ),
        ));
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> ValkeySpec {
        serde_json::from_str(json).unwrap()
    }

    fn reasons(spec: &ValkeySpec) -> Vec<ConditionReason> {
        advisories(spec, &[])
            .into_iter()
            .map(|a| a.reason)
            .collect()
    }

    const AUTH: &str = r#""auth": {"secretName": "pw"}"#;

    #[test]
    fn a_secured_three_plus_three_cluster_gets_no_warning() {
        let spec = spec(&format!(
            r#"{{"image": "valkey/valkey:8.0", "replicas": 3, {AUTH},
                "sentinel": {{"enabled": true, "replicas": 3}},
                "podDisruptionBudget": {{"enabled": true}}}}"#
        ));
        assert_eq!(reasons(&spec), vec![]);
    }

    #[test]
    fn each_warning_from_the_spec_that_causes_it() {
        let cases: &[(&str, &[ConditionReason])] = &[
            (r#""replicas": 1"#, &[ConditionReason::AuthDisabled]),
            (
                &format!(
                    r#""replicas": 3, {AUTH}, "sentinel": {{"enabled": true, "disableAuth": true}}"#
                ),
                &[ConditionReason::SentinelAuthDisabled],
            ),
            (
                // disableAuth without auth means nothing (Sentinel has no password anyway).
                r#""replicas": 3, "sentinel": {"enabled": true, "disableAuth": true}"#,
                &[ConditionReason::AuthDisabled],
            ),
            (
                &format!(r#""replicas": 1, {AUTH}, "metrics": {{"enabled": true}}"#),
                &[ConditionReason::ExporterScrapeUnrestricted],
            ),
            (
                &format!(
                    r#""replicas": 3, {AUTH}, "sentinel": {{"enabled": true, "replicas": 1}}"#
                ),
                &[ConditionReason::SentinelCountNotHighlyAvailable],
            ),
            (
                &format!(
                    r#""replicas": 3, {AUTH}, "sentinel": {{"enabled": true, "replicas": 4}}"#
                ),
                &[ConditionReason::SentinelCountEven],
            ),
            (
                &format!(r#""replicas": 1, {AUTH}, "sentinel": {{"enabled": true}}"#),
                &[ConditionReason::SentinelWithOneDataPod],
            ),
            (
                &format!(
                    r#""replicas": 3, {AUTH},
                       "podDisruptionBudget": {{"enabled": true, "maxUnavailable": 3}}"#
                ),
                &[ConditionReason::PodDisruptionBudgetTooPermissive],
            ),
            (
                // Two Sentinels: no HA, and with a PDB no drain of a Sentinel's node finishes.
                &format!(
                    r#""replicas": 3, {AUTH}, "sentinel": {{"enabled": true, "replicas": 2}},
                       "podDisruptionBudget": {{"enabled": true}}"#
                ),
                &[
                    ConditionReason::SentinelCountNotHighlyAvailable,
                    ConditionReason::SentinelPodDisruptionBudgetBlocksDrains,
                ],
            ),
        ];
        for (fields, expected) in cases {
            let spec = spec(&format!(r#"{{"image": "valkey/valkey:8.0", {fields}}}"#));
            assert_eq!(&reasons(&spec), expected, "{fields}");
        }
    }

    #[test]
    fn sentinel_warnings_only_when_sentinel_is_on() {
        let spec = spec(&format!(
            r#"{{"image": "valkey/valkey:8.0", "replicas": 1, {AUTH},
                "sentinel": {{"enabled": false, "replicas": 2, "disableAuth": true}},
                "podDisruptionBudget": {{"enabled": true, "maxUnavailable": 5}}}}"#
        ));
        // One data pod gets no data PDB, so maxUnavailable 5 is not permissive either.
        assert_eq!(reasons(&spec), vec![]);
    }

    #[test]
    fn the_pdb_bounds_are_exact() {
        let permissive = |max: i32| {
            let spec = spec(&format!(
                r#"{{"image": "v", "replicas": 3, {AUTH},
                    "podDisruptionBudget": {{"enabled": true, "maxUnavailable": {max}}}}}"#
            ));
            reasons(&spec).contains(&ConditionReason::PodDisruptionBudgetTooPermissive)
        };
        assert!(!permissive(2));
        assert!(permissive(3));
        assert!(permissive(4));
        let blocks = |sentinels: i32| {
            let spec = spec(&format!(
                r#"{{"image": "v", "replicas": 3, {AUTH},
                    "sentinel": {{"enabled": true, "replicas": {sentinels}}},
                    "podDisruptionBudget": {{"enabled": true}}}}"#
            ));
            reasons(&spec).contains(&ConditionReason::SentinelPodDisruptionBudgetBlocksDrains)
        };
        // One Sentinel gets no PDB; 2 → quorum 2 of 2; 3 → 2 of 3 allows one eviction.
        assert!(!blocks(1));
        assert!(blocks(2));
        assert!(!blocks(3));
        assert!(!blocks(4));
    }

    #[test]
    fn a_foreign_budget_is_named_and_replaces_the_warnings_about_ours() {
        let permissive = spec(&format!(
            r#"{{"image": "v", "replicas": 3, {AUTH},
                "sentinel": {{"enabled": true, "replicas": 3}},
                "podDisruptionBudget": {{"enabled": true, "maxUnavailable": 3}}}}"#
        ));
        let data = ForeignBudget {
            name: "a".into(),
            sentinel: false,
        };
        let found: Vec<_> = advisories(&permissive, std::slice::from_ref(&data))
            .into_iter()
            .map(|a| (a.reason, a.message))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, ConditionReason::PodDisruptionBudgetNotOwned);
        assert!(found[0].1.contains("PodDisruptionBudget a ") && found[0].1.contains("data pods"));
        // Without the foreign budget, ours is the permissive one.
        assert_eq!(
            reasons(&permissive),
            vec![ConditionReason::PodDisruptionBudgetTooPermissive]
        );
        // Not opted in: a foreign budget is left alone silently.
        let off = spec(&format!(r#"{{"image": "v", "replicas": 3, {AUTH}}}"#));
        assert_eq!(advisories(&off, &[data]), vec![]);
        // Opted in but not applicable (one pod, no Sentinel): the name is still taken.
        let one = spec(&format!(
            r#"{{"image": "v", "replicas": 1, {AUTH}, "podDisruptionBudget": {{"enabled": true}}}}"#
        ));
        let sentinel = ForeignBudget {
            name: "a-sentinel".into(),
            sentinel: true,
        };
        assert_eq!(
            advisories(&one, &[sentinel])
                .into_iter()
                .map(|a| a.reason)
                .collect::<Vec<_>>(),
            vec![ConditionReason::PodDisruptionBudgetNotOwned]
        );
    }

    #[test]
    fn messages_name_the_field_and_the_fix() {
        for advisory in advisories(
            &spec(
                r#"{"image": "v", "replicas": 1, "metrics": {"enabled": true, "port": 9200},
                "sentinel": {"enabled": true, "replicas": 2}}"#,
            ),
            &[],
        ) {
            assert!(advisory.message.contains("spec."), "{advisory:?}");
            assert!(
                advisory.message.contains("; set")
                    || advisory.message.contains("; use")
                    || advisory.message.contains("restrict"),
                "{advisory:?}"
            );
            assert!(ADVISORY_REASONS.contains(&advisory.reason));
        }
    }
}
