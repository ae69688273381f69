//! `cargo xtask alerts`: the chart's PrometheusRule, checked and unit-tested by promtool. The rule is
//! rendered by helm, its `spec.groups` written as a plain Prometheus rules file next to a copy of
//! [`TESTS_FILE`], then `promtool check rules` and `promtool test rules` run on them. `cargo xtask
//! test` runs the same step after building helm.
//!
//! The test cases live in `xtask/alerts/`, with the other inputs of xtask commands and outside the
//! chart, so `helm package` does not ship a test file whose rules file is not in the chart.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::{Value, json};
use vko_testbed::harness::yaml_documents;

/// The promtool unit tests of the chart's alerts, relative to the repository root.
pub const TESTS_FILE: &str = "xtask/alerts/valkey-operator.test.yaml";
/// The name the tests file's `rule_files` refers to; written next to the copy of the tests.
const RULES_FILE_NAME: &str = "valkey-operator-rules.yaml";
const CHART: &str = "charts/valkey-operator";
/// Values that render the PrometheusRule and the ServiceMonitor whose scrape the tests' series model.
const VALUES: [&str; 2] = [
    "metrics.prometheusRule.enabled=true",
    "metrics.serviceMonitor.enabled=true",
];

#[derive(clap::Args)]
pub struct Args {}

/// The standalone command: promtool is installed when missing, helm built when missing.
pub fn run(_args: Args) -> anyhow::Result<()> {
    crate::test::install_commands(&[crate::test::PROMTOOL])?;
    let helm = crate::helm::build()?;
    check(&helm)
}

/// Renders the chart with `helm`, then runs `promtool check rules` and `promtool test rules`.
pub fn check(helm: &Path) -> anyhow::Result<()> {
    let root = crate::testbed::repo_root();
    let rendered = helm_template(helm, &root.join(CHART))?;
    let objects = yaml_documents(&rendered).context("parsing helm's output")?;
    check_scrape_keeps_resource_labels(&objects)?;
    let rules = rules_file(&objects)?;
    let tests_path = tests_path();
    let tests_text = std::fs::read_to_string(&tests_path)
        .with_context(|| format!("reading {}", tests_path.display()))?;
    let tests: Value = serde_norway::from_str(&tests_text)
        .with_context(|| format!("parsing {}", tests_path.display()))?;
    let cases = check_coverage(&rules, &tests)?;

    let dir = std::env::temp_dir().join(format!("vko-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = run_promtool(&dir, &rules, &tests_text);
    let _ = std::fs::remove_dir_all(&dir);
    result?;
    println!(
        "the chart's {} alerts pass promtool check rules and {cases} promtool test cases ({TESTS_FILE})",
        alert_names(&rules).len()
    );
    Ok(())
}

fn run_promtool(dir: &Path, rules: &Value, tests_text: &str) -> anyhow::Result<()> {
    let rules_path = dir.join(RULES_FILE_NAME);
    // JSON is YAML: nothing in it depends on how a YAML writer quotes strings.
    let rules_text = serde_json::to_string_pretty(rules).context("serializing the rules")?;
    std::fs::write(&rules_path, rules_text)
        .with_context(|| format!("writing {}", rules_path.display()))?;
    let tests_path = dir.join("valkey-operator.test.yaml");
    std::fs::write(&tests_path, tests_text)
        .with_context(|| format!("writing {}", tests_path.display()))?;
    promtool(&["check", "rules"], &rules_path)?;
    promtool(&["test", "rules"], &tests_path)
}

fn promtool(args: &[&str], file: &Path) -> anyhow::Result<()> {
    println!("promtool {} {}", args.join(" "), file.display());
    let status = Command::new("promtool")
        .args(args)
        .arg(file)
        .status()
        .context("could not start promtool (Debian package `prometheus`)")?;
    if !status.success() {
        bail!(
            "promtool {} failed ({status}); its output is above",
            args.join(" ")
        );
    }
    Ok(())
}

fn helm_template(helm: &Path, chart: &Path) -> anyhow::Result<String> {
    let mut command = Command::new(helm);
    command
        .args(["template", "vko"])
        .arg(chart)
        .args(["--namespace", "vko-system"]);
    for value in VALUES {
        command.args(["--set", value]);
    }
    let output = command
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !output.status.success() {
        bail!(
            "helm template failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    String::from_utf8(output.stdout).context("helm's output is not UTF-8")
}

/// The PrometheusRule's `spec.groups` as a Prometheus rules file (`{"groups": [...]}`).
pub fn rules_file(objects: &[Value]) -> anyhow::Result<Value> {
    let mut rules = objects
        .iter()
        .filter(|object| object["kind"] == "PrometheusRule");
    let (Some(rule), None) = (rules.next(), rules.next()) else {
        bail!("the chart must render exactly one PrometheusRule");
    };
    let groups = &rule["spec"]["groups"];
    if groups.as_array().is_none_or(|groups| groups.is_empty()) {
        bail!("the PrometheusRule has no spec.groups");
    }
    Ok(json!({ "groups": groups }))
}

/// The tests' series carry the Valkey resource's `namespace`, as the operator exports it. Prometheus
/// keeps it only with `honorLabels: true`; without, it renames it to `exported_namespace` and puts
/// the operator pod's namespace there, and every `by (namespace, name)` of the rules would merge
/// same-named resources of different namespaces and name the wrong namespace.
pub fn check_scrape_keeps_resource_labels(objects: &[Value]) -> anyhow::Result<()> {
    let monitors: Vec<&Value> = objects
        .iter()
        .filter(|object| object["kind"] == "ServiceMonitor")
        .collect();
    if monitors.is_empty() {
        bail!("the chart rendered no ServiceMonitor");
    }
    for monitor in monitors {
        let endpoints = monitor["spec"]["endpoints"]
            .as_array()
            .filter(|endpoints| !endpoints.is_empty())
            .context("the ServiceMonitor has no endpoints")?;
        if let Some(endpoint) = endpoints
            .iter()
            .find(|endpoint| endpoint["honorLabels"] != true)
        {
            bail!(
                "the ServiceMonitor endpoint {} does not set honorLabels: true, so Prometheus would \
                 rename the series' namespace label to exported_namespace",
                endpoint["port"]
            );
        }
    }
    Ok(())
}

fn alert_names(rules: &Value) -> Vec<&str> {
    rules["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["rules"].as_array().into_iter().flatten())
        .filter_map(|rule| rule["alert"].as_str())
        .collect()
}

/// Every alert of `rules` has a test case in which it fires and one in which it must not, and every
/// case names an alert that exists (promtool passes an empty expectation for a misspelt name).
/// Returns the number of cases.
pub fn check_coverage(rules: &Value, tests: &Value) -> anyhow::Result<usize> {
    let alerts = alert_names(rules);
    if alerts.is_empty() {
        bail!("the rules define no alert");
    }
    let cases: Vec<(&str, bool)> = tests["tests"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["alert_rule_test"].as_array().into_iter().flatten())
        .map(|case| {
            let fires = case["exp_alerts"]
                .as_array()
                .is_some_and(|expected| !expected.is_empty());
            (case["alertname"].as_str().unwrap_or_default(), fires)
        })
        .collect();
    let mut problems = Vec::new();
    for (name, _) in &cases {
        if !alerts.contains(name) {
            problems.push(format!("a case names {name:?}, which no rule defines"));
        }
    }
    for alert in &alerts {
        for (fires, what) in [(true, "fires"), (false, "must not fire")] {
            if !cases.contains(&(alert, fires)) {
                problems.push(format!("{alert}: no case in which it {what}"));
            }
        }
    }
    if !problems.is_empty() {
        bail!(
            "{TESTS_FILE} does not cover the rules: {}",
            problems.join("; ")
        );
    }
    Ok(cases.len())
}

fn tests_path() -> PathBuf {
    crate::testbed::repo_root().join(TESTS_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_object(alerts: &[&str]) -> Value {
        let rules: Vec<Value> = alerts
            .iter()
            .map(|alert| json!({"alert": alert, "expr": "vector(1)"}))
            .collect();
        json!({
            "kind": "PrometheusRule",
            "metadata": {"name": "vko-valkey-operator"},
            "spec": {"groups": [{"name": "valkey-operator", "rules": rules}]}
        })
    }

    #[test]
    fn the_rules_file_is_the_groups_of_the_one_prometheus_rule() {
        let objects = [json!({"kind": "Service"}), rule_object(&["A", "B"])];
        let rules = rules_file(&objects).unwrap();
        assert_eq!(rules, json!({"groups": objects[1]["spec"]["groups"]}));
        assert_eq!(alert_names(&rules), ["A", "B"]);

        assert!(rules_file(&objects[..1]).is_err());
        let twice = [rule_object(&["A"]), rule_object(&["A"])];
        assert!(rules_file(&twice).is_err());
        let empty = [json!({"kind": "PrometheusRule", "spec": {"groups": []}})];
        assert!(rules_file(&empty).is_err());
    }

    #[test]
    fn the_service_monitor_must_honor_the_operators_labels() {
        let monitor = |endpoint: Value| {
            [json!({"kind": "ServiceMonitor", "spec": {"endpoints": [endpoint]}})]
        };
        check_scrape_keeps_resource_labels(&monitor(
            json!({"port": "metrics", "honorLabels": true}),
        ))
        .unwrap();
        let error =
            check_scrape_keeps_resource_labels(&monitor(json!({"port": "metrics"}))).unwrap_err();
        assert!(error.to_string().contains("exported_namespace"), "{error}");
        assert!(
            check_scrape_keeps_resource_labels(&monitor(json!({"honorLabels": false}))).is_err()
        );
        assert!(check_scrape_keeps_resource_labels(&[json!({"kind": "Service"})]).is_err());
    }

    #[test]
    fn every_alert_needs_a_firing_and_a_silent_case_and_no_case_a_missing_alert() {
        let rules = rules_file(&[rule_object(&["A", "B"])]).unwrap();
        let fires = |name: &str| json!({"alertname": name, "exp_alerts": [{"exp_labels": {}}]});
        let silent = |name: &str| json!({"alertname": name, "exp_alerts": []});
        let tests = |cases: Vec<Value>| json!({"tests": [{"alert_rule_test": cases}]});

        let covered = tests(vec![fires("A"), silent("A"), fires("B"), silent("B")]);
        assert_eq!(check_coverage(&rules, &covered).unwrap(), 4);

        let error = check_coverage(&rules, &tests(vec![fires("A"), silent("A"), fires("B")]))
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("B: no case in which it must not fire"),
            "{error}"
        );
        assert!(!error.contains("A:"), "{error}");

        // A case without exp_alerts expects no alert, like an empty list.
        let implicit = json!({"tests": [{"alert_rule_test": [
            fires("A"), {"alertname": "A"}, fires("B"), silent("B"),
        ]}]});
        assert_eq!(check_coverage(&rules, &implicit).unwrap(), 4);

        let misspelt = tests(vec![
            fires("A"),
            silent("A"),
            fires("B"),
            silent("B"),
            silent("C"),
        ]);
        let error = check_coverage(&rules, &misspelt).unwrap_err().to_string();
        assert!(error.contains("\"C\", which no rule defines"), "{error}");
    }

    #[test]
    fn the_repositorys_tests_cover_the_charts_nine_alerts() {
        // The rules as the template names them, without helm: the coverage half of `check`.
        let template = std::fs::read_to_string(
            crate::testbed::repo_root()
                .join(CHART)
                .join("templates/prometheusrule.yaml"),
        )
        .unwrap();
        let alerts: Vec<&str> = template
            .lines()
            .filter_map(|line| line.trim().strip_prefix("- alert: "))
            .collect();
        assert_eq!(alerts.len(), 9, "{alerts:?}");
        let rules = rules_file(&[rule_object(&alerts)]).unwrap();
        let tests: Value =
            serde_norway::from_str(&std::fs::read_to_string(tests_path()).unwrap()).unwrap();
        assert!(check_coverage(&rules, &tests).unwrap() >= 16);
    }
}
