//! The least-privilege check of the operator's RBAC: which requests the operator really made (read
//! from the API server's audit log, see [`crate::controlplane::AUDIT_POLICY`]) against what its
//! ClusterRole grants. Pure: parsing and comparing only; the end-to-end test `rbac_least_privilege`
//! does the I/O.
//!
//! The verdict fails when
//! - a rule grants a write verb (anything but get, list, watch) on a resource the operator never used
//!   that verb on (the grant is broader than needed) -- unless a Role the operator itself writes
//!   grants it (the API server lets a Role grant only what its writer holds: RBAC's escalation
//!   check) and the operator did write Roles; a PATCH or PUT answered 201 (it created the object)
//!   uses `create` as well, as the API server authorizes it so,
//! - a rule uses a wildcard (`*`): no recording can prove a wildcard is needed,
//! - the operator was refused (HTTP 403): a rule is missing -- unless the refusal came while the
//!   API server was starting (before its readiness, its authorizer's RBAC cache may be empty: it
//!   then refuses every component, kube-controller-manager included) and the rules do grant it,
//!   or after the refused ServiceAccount's binding was deleted (an uninstall while its pod ran),
//! - the log is too thin to prove anything (fewer than the minimum of operator requests, or no
//!   successful write at all), so the check never passes vacuously.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde::Deserialize;

/// Verbs that only read; every other verb (create, update, patch, delete, deletecollection, and the
/// special ones such as bind, escalate, impersonate) changes something and must be proved needed.
pub const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// Whether `verb` changes something (see [`READ_VERBS`]).
pub fn is_write_verb(verb: &str) -> bool {
    !READ_VERBS.contains(&verb)
}

/// Who counts as "the operator" in the audit log.
#[derive(Debug, Clone, Default)]
pub struct OperatorIdentities {
    /// Exact user names (the host-process operator's client certificate CN).
    pub users: Vec<String>,
    /// Name endings of the ServiceAccounts of in-cluster operators, in any namespace
    /// (`system:serviceaccount:<ns>:<name>`): the chart names its ServiceAccount after the release,
    /// `<release>-valkey-operator`.
    pub service_account_suffixes: Vec<String>,
}

impl OperatorIdentities {
    pub fn matches(&self, username: &str) -> bool {
        if self.users.iter().any(|user| user == username) {
            return true;
        }
        username
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .is_some_and(|(_, name)| {
                self.service_account_suffixes
                    .iter()
                    .any(|suffix| name.ends_with(suffix.as_str()))
            })
    }
}

/// One API request, as the audit log records it (the fields the check needs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Request {
    pub user: String,
    pub verb: String,
    pub target: Target,
    /// The HTTP status of the response (0 when the log has none, for example a panic).
    pub code: u16,
    /// Why RBAC refused it, when it did (a 403 from authorization, not one from admission such as
    /// "namespace is being terminated", which RBAC had allowed).
    pub refused: Option<String>,
    /// When the API server received it (RFC 3339, microseconds, UTC: compares as text).
    pub received: String,
    /// When its last recorded stage was written (the response; same format). Authorization runs
    /// after API Priority and Fairness has queued the request, so a request can be received
    /// before a binding's deletion and still be authorized after it.
    pub completed: String,
    /// A refusal that came after the identity's binding was deleted (an uninstall while the
    /// operator pod still ran): not a missing rule.
    pub after_unbinding: bool,
    /// A request answered while the API server was starting (see [`ApiserverStart`]).
    pub during_apiserver_start: bool,
}

/// One start of kube-apiserver, from the moment the testbed began (re)starting it to the moment its
/// `/readyz` first answered OK (same timestamp format as [`Request::received`]). Until `/readyz`'s
/// `informer-sync` check passes, the RBAC authorizer may still be reading Roles and bindings and
/// refuses what they grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiserverStart {
    pub began: String,
    pub ready: String,
}

/// Parses the testbed's record of API server starts: one `<began> <ready>` line per start.
pub fn read_apiserver_starts(text: &str) -> Vec<ApiserverStart> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            Some(ApiserverStart {
                began: fields.next()?.to_string(),
                ready: fields.next()?.to_string(),
            })
        })
        .collect()
}

/// Marks every request answered within one of `starts`.
pub fn mark_requests_during_apiserver_starts(requests: &mut [Request], starts: &[ApiserverStart]) {
    for request in requests.iter_mut() {
        request.during_apiserver_start = starts.iter().any(|start| {
            start.began.as_str() <= request.completed.as_str()
                && request.completed.as_str() <= start.ready.as_str()
        });
    }
}

/// What a request was about: a resource (with its API group, optional subresource, whether it named a
/// namespace, and the object's name when it had one), or a non-resource URL path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    Resource {
        api_group: String,
        resource: String,
        subresource: Option<String>,
        namespaced: bool,
        name: Option<String>,
    },
    NonResource {
        path: String,
    },
}

impl Target {
    /// `resource` or `resource/subresource`, the way RBAC rules name it.
    fn rbac_resource(&self) -> Option<String> {
        match self {
            Target::Resource {
                resource,
                subresource: Some(subresource),
                ..
            } => Some(format!("{resource}/{subresource}")),
            Target::Resource { resource, .. } => Some(resource.clone()),
            Target::NonResource { .. } => None,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditEvent {
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: String,
    verb: String,
    #[serde(rename = "requestURI")]
    request_uri: String,
    user: AuditUser,
    object_ref: Option<AuditObjectRef>,
    response_status: Option<AuditStatus>,
    #[serde(default)]
    annotations: HashMap<String, String>,
    #[serde(default)]
    request_received_timestamp: String,
    #[serde(default)]
    stage_timestamp: String,
}

#[derive(Deserialize)]
struct AuditUser {
    #[serde(default)]
    username: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuditObjectRef {
    #[serde(default)]
    resource: String,
    namespace: Option<String>,
    name: Option<String>,
    #[serde(default)]
    api_group: String,
    subresource: Option<String>,
}

#[derive(Deserialize)]
struct AuditStatus {
    #[serde(default)]
    code: u16,
    #[serde(default)]
    message: String,
}

/// The audit annotation with the authorizer's decision on the request's own verb.
const DECISION_ANNOTATION: &str = "authorization.k8s.io/decision";
/// What the API server's refusal says when authorization (not admission) refused: also for the
/// second check a creating PATCH/PUT gets (`cannot create resource ...`), whose request-level
/// decision is still "allow".
const RBAC_REFUSAL_MARK: &str = "is forbidden: User \"";

/// Whether the response is authorization's refusal (see [`RBAC_REFUSAL_MARK`]).
fn refused_by_authorization(
    code: u16,
    message: &str,
    annotations: &HashMap<String, String>,
) -> bool {
    code == 403
        && (annotations.get(DECISION_ANNOTATION).map(String::as_str) == Some("forbid")
            || message.contains(RBAC_REFUSAL_MARK))
}

/// What reading an audit log gave.
#[derive(Debug, Default)]
pub struct AuditLog {
    /// Every request of an operator identity, once each (keyed by audit ID; the last stage wins).
    pub requests: Vec<Request>,
    /// Lines (events) read, of anyone.
    pub events: usize,
    /// Lines that were not audit events.
    pub unparsable_lines: usize,
    /// Successful writes of (Cluster)RoleBindings, by anyone, in log order.
    pub binding_changes: Vec<BindingChange>,
}

/// A (Cluster)RoleBinding was written (exists afterwards) or deleted, at `at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingChange {
    pub at: String,
    pub name: String,
    pub exists: bool,
}

/// Marks the refusals that came after the refused ServiceAccount's binding was deleted. The chart
/// names its bindings after the ServiceAccount (`<name>`, `<name>-leader-election`); when the last
/// change of one of them before the refusal's response was its deletion, the operator pod outlived
/// its RBAC (helm uninstall deletes the bindings while the pod is still in its termination grace
/// period). The response time, not the arrival, is what counts: the request may have waited in
/// the API server's fairness queue, before authorization, while the binding went.
fn mark_refusals_after_unbinding(requests: &mut [Request], changes: &[BindingChange]) {
    for request in requests.iter_mut().filter(|r| r.refused.is_some()) {
        let Some(name) = request
            .user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
            .map(|(_, name)| name)
        else {
            continue;
        };
        let leader_election = format!("{name}-leader-election");
        let own_binding =
            |change: &&BindingChange| change.name == name || change.name == leader_election;
        let last = changes
            .iter()
            .filter(own_binding)
            .rfind(|change| change.at <= request.completed);
        request.after_unbinding = last.is_some_and(|change| !change.exists);
    }
}

/// Reads the JSON-lines audit log `text`, keeping the requests of `identities`. A request appears in
/// several stages (ResponseStarted for watches, then ResponseComplete); it counts once.
pub fn read_audit_log(text: &str, identities: &OperatorIdentities) -> AuditLog {
    let mut log = AuditLog::default();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let Ok(event) = serde_json::from_str::<AuditEvent>(line) else {
            log.unparsable_lines += 1;
            continue;
        };
        log.events += 1;
        if let Some(object) = &event.object_ref
            && (object.resource == "clusterrolebindings" || object.resource == "rolebindings")
            && event.stage == "ResponseComplete"
            && let Some(status) = &event.response_status
            && (200..300).contains(&status.code)
            && let Some(name) = &object.name
        {
            let exists = match event.verb.as_str() {
                "create" | "update" | "patch" => Some(true),
                "delete" => Some(false),
                _ => None,
            };
            if let Some(exists) = exists {
                log.binding_changes.push(BindingChange {
                    at: event.request_received_timestamp.clone(),
                    name: name.clone(),
                    exists,
                });
            }
        }
        if !identities.matches(&event.user.username) {
            continue;
        }
        let target = match event.object_ref {
            Some(object) if !object.resource.is_empty() => Target::Resource {
                api_group: object.api_group,
                resource: object.resource,
                subresource: object.subresource.filter(|sub| !sub.is_empty()),
                namespaced: object.namespace.is_some_and(|ns| !ns.is_empty()),
                name: object.name.filter(|name| !name.is_empty()),
            },
            _ => Target::NonResource {
                path: event
                    .request_uri
                    .split('?')
                    .next()
                    .unwrap_or_default()
                    .to_string(),
            },
        };
        let (code, message) = event
            .response_status
            .map(|status| (status.code, status.message))
            .unwrap_or_default();
        let refused =
            refused_by_authorization(code, &message, &event.annotations).then_some(message);
        let request = Request {
            user: event.user.username,
            verb: event.verb,
            target,
            code,
            refused,
            received: event.request_received_timestamp,
            completed: event.stage_timestamp,
            after_unbinding: false,
            during_apiserver_start: false,
        };
        match by_id.get(&event.audit_id) {
            Some(&index) => {
                // ResponseComplete (or Panic) carries the final code.
                if event.stage != "ResponseStarted" {
                    log.requests[index] = request;
                }
            }
            None => {
                by_id.insert(event.audit_id, log.requests.len());
                log.requests.push(request);
            }
        }
    }
    // Requests and binding changes are both in log order; sort the changes by time anyway
    // (stages of concurrent requests interleave).
    log.binding_changes.sort_by(|a, b| a.at.cmp(&b.at));
    mark_refusals_after_unbinding(&mut log.requests, &log.binding_changes);
    log
}

/// One (verb, resource) a rule grants and nobody used.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub verb: String,
    pub api_group: String,
    /// `resource` or `resource/subresource`, or a non-resource URL.
    pub resource: String,
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.resource.starts_with('/') {
            "non-resource URL"
        } else if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(f, "{} {} ({group})", self.verb, self.resource)
    }
}

/// What the operator used, summarised: (verb, group, resource[/sub], namespaced?) → request count.
pub type UsageTable = BTreeMap<(String, String, String, bool), usize>;

/// Thresholds under which the log proves nothing.
#[derive(Debug, Clone, Copy)]
pub struct Minimums {
    pub requests: usize,
    pub successful_writes: usize,
}

/// The check's outcome.
#[derive(Debug, Default)]
pub struct Verdict {
    pub operator_requests: usize,
    pub successful_writes: usize,
    pub usage: UsageTable,
    /// Granted write verbs nobody used: the ClusterRole is broader than needed.
    pub unused_writes: Vec<Grant>,
    /// Granted read verbs nobody used (reported, not failed: reads change nothing).
    pub unused_reads: Vec<Grant>,
    /// Grants the operator never used itself but holds so it may write the Roles it renders.
    pub delegated: Vec<Grant>,
    /// Rules with a `*` (printed as the rule's index and what the wildcard is in).
    pub wildcards: Vec<String>,
    /// Requests RBAC refused (403): (verb, target) → (count, the first refusal's message).
    pub forbidden: BTreeMap<(String, String), (usize, String)>,
    /// Refusals after the identity's binding was deleted (see [`Request::after_unbinding`]).
    pub refused_after_unbinding: usize,
    /// Refusals of something the rules grant, while the API server was starting (see
    /// [`ApiserverStart`]).
    pub refused_during_apiserver_start: usize,
    /// Why the log is too thin to prove anything, if it is.
    pub too_thin: Vec<String>,
}

impl Verdict {
    pub fn passed(&self) -> bool {
        self.unused_writes.is_empty()
            && self.wildcards.is_empty()
            && self.forbidden.is_empty()
            && self.too_thin.is_empty()
    }

    /// One line per reason the verdict failed (empty when it passed): short enough for a summary.
    pub fn failures(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.extend(
            self.unused_writes
                .iter()
                .map(|grant| format!("granted write nobody used: {grant}")),
        );
        lines.extend(
            self.wildcards
                .iter()
                .map(|wildcard| format!("wildcard: {wildcard}")),
        );
        lines.extend(
            self.forbidden
                .iter()
                .map(|((verb, target), (count, message))| {
                    format!("forbidden {verb} {target}: {count}x (first: {message})")
                }),
        );
        lines.extend(
            self.too_thin
                .iter()
                .map(|thin| format!("log too thin: {thin}")),
        );
        lines
    }
}

fn rule_list(values: &Option<Vec<String>>) -> &[String] {
    values.as_deref().unwrap_or_default()
}

/// Whether `request` is one `rule` allows with `verb` on `api_group`/`resource` (a single expanded
/// grant of the rule): verb, group and resource equal, and the object's name among the rule's
/// resourceNames when it lists any.
fn request_uses(request: &Request, grant: &Grant, resource_names: &[String]) -> bool {
    // A PATCH (server-side apply) or PUT that creates the object (answered 201 Created) is
    // authorized as `create` as well (the API server's patch and update handlers check it).
    let created_by_write = grant.verb == "create"
        && (request.verb == "patch" || request.verb == "update")
        && request.code == 201;
    if request.verb != grant.verb && !created_by_write {
        return false;
    }
    match &request.target {
        Target::Resource {
            api_group, name, ..
        } => {
            *api_group == grant.api_group
                && request.target.rbac_resource().as_deref() == Some(grant.resource.as_str())
                && (resource_names.is_empty()
                    || name
                        .as_ref()
                        .is_some_and(|name| resource_names.contains(name)))
        }
        Target::NonResource { path } => {
            grant.api_group.is_empty()
                && match grant.resource.strip_suffix('*') {
                    Some(prefix) => path.starts_with(prefix),
                    None => *path == grant.resource,
                }
        }
    }
}

/// Whether a rule of a Role the operator writes grants `grant` (names aside: the ClusterRole must
/// hold the verb for every name the Role lists).
fn delegates(rules: &[PolicyRule], grant: &Grant) -> bool {
    rules.iter().any(|rule| {
        rule.verbs.contains(&grant.verb)
            && rule_list(&rule.api_groups).contains(&grant.api_group)
            && rule_list(&rule.resources).contains(&grant.resource)
    })
}

/// The single grants of `rule` (every verb with every group and resource, or non-resource URL); none
/// for a rule with a wildcard (those are reported, never matched).
fn expand(rule: &PolicyRule) -> Vec<Grant> {
    let groups = rule_list(&rule.api_groups);
    let resources = rule_list(&rule.resources);
    let non_resource_urls = rule_list(&rule.non_resource_urls);
    let mut expanded = Vec::new();
    for verb in &rule.verbs {
        for group in groups {
            for resource in resources {
                expanded.push(Grant {
                    verb: verb.clone(),
                    api_group: group.clone(),
                    resource: resource.clone(),
                });
            }
        }
        for url in non_resource_urls {
            expanded.push(Grant {
                verb: verb.clone(),
                api_group: String::new(),
                resource: url.clone(),
            });
        }
    }
    expanded
}

/// Whether one of `rules` allows `request`.
fn rules_grant(rules: &[PolicyRule], request: &Request) -> bool {
    rules.iter().any(|rule| {
        expand(rule)
            .iter()
            .any(|grant| request_uses(request, grant, rule_list(&rule.resource_names)))
    })
}

/// Compares the ClusterRole's `rules` with the recorded requests. `delegated` are the rules of the
/// Roles the operator writes (the sidecar's): a grant only they need is not "unused" as long as the
/// operator really wrote Roles.
pub fn check(
    rules: &[PolicyRule],
    requests: &[Request],
    delegated: &[PolicyRule],
    minimums: Minimums,
) -> Verdict {
    let mut verdict = Verdict {
        operator_requests: requests.len(),
        ..Verdict::default()
    };
    let granted: Vec<&Request> = requests.iter().filter(|r| r.refused.is_none()).collect();
    verdict.successful_writes = granted
        .iter()
        .filter(|r| is_write_verb(&r.verb) && (200..300).contains(&r.code))
        .count();
    for request in requests {
        let target = match &request.target {
            Target::Resource {
                api_group,
                namespaced,
                ..
            } => {
                let resource = request.target.rbac_resource().unwrap_or_default();
                let group = if api_group.is_empty() {
                    "core".to_string()
                } else {
                    api_group.clone()
                };
                if request.refused.is_none() {
                    *verdict
                        .usage
                        .entry((
                            request.verb.clone(),
                            api_group.clone(),
                            resource.clone(),
                            *namespaced,
                        ))
                        .or_default() += 1;
                }
                let scope = if *namespaced {
                    "namespaced"
                } else {
                    "cluster-wide"
                };
                format!("{resource} ({group}, {scope}) as {}", request.user)
            }
            Target::NonResource { path } => {
                if request.refused.is_none() {
                    *verdict
                        .usage
                        .entry((request.verb.clone(), String::new(), path.clone(), false))
                        .or_default() += 1;
                }
                format!("{path} as {}", request.user)
            }
        };
        if request.after_unbinding {
            verdict.refused_after_unbinding += 1;
        } else if request.refused.is_some()
            && request.during_apiserver_start
            && rules_grant(rules, request)
        {
            verdict.refused_during_apiserver_start += 1;
        } else if let Some(message) = &request.refused {
            verdict
                .forbidden
                .entry((request.verb.clone(), target))
                .or_insert_with(|| (0, message.clone()))
                .0 += 1;
        }
    }

    let wrote_roles = granted.iter().any(|request| {
        (request.verb == "create" || request.verb == "patch" || request.verb == "update")
            && (200..300).contains(&request.code)
            && matches!(&request.target, Target::Resource { api_group, resource, subresource: None, .. }
                if api_group == "rbac.authorization.k8s.io" && resource == "roles")
    });
    for (index, rule) in rules.iter().enumerate() {
        let groups = rule_list(&rule.api_groups);
        let resources = rule_list(&rule.resources);
        let non_resource_urls = rule_list(&rule.non_resource_urls);
        let resource_names = rule_list(&rule.resource_names);
        let mut wildcard_in = Vec::new();
        if rule.verbs.iter().any(|verb| verb == "*") {
            wildcard_in.push("verbs");
        }
        if groups.iter().any(|group| group == "*") {
            wildcard_in.push("apiGroups");
        }
        if resources
            .iter()
            .any(|resource| resource == "*" || resource.starts_with("*/"))
        {
            wildcard_in.push("resources");
        }
        if non_resource_urls.iter().any(|url| url == "*") {
            wildcard_in.push("nonResourceURLs");
        }
        if !wildcard_in.is_empty() {
            verdict
                .wildcards
                .push(format!("rule {index}: `*` in {}", wildcard_in.join(", ")));
            continue;
        }
        for grant in expand(rule) {
            let used = granted
                .iter()
                .any(|request| request_uses(request, &grant, resource_names));
            if used {
                continue;
            }
            if wrote_roles && delegates(delegated, &grant) {
                verdict.delegated.push(grant);
            } else if is_write_verb(&grant.verb) {
                verdict.unused_writes.push(grant);
            } else {
                verdict.unused_reads.push(grant);
            }
        }
    }
    for list in [
        &mut verdict.unused_writes,
        &mut verdict.unused_reads,
        &mut verdict.delegated,
    ] {
        list.sort();
        list.dedup();
    }

    if verdict.operator_requests < minimums.requests {
        verdict.too_thin.push(format!(
            "only {} operator requests in the audit log (at least {} expected after the end-to-end suite)",
            verdict.operator_requests, minimums.requests
        ));
    }
    if verdict.successful_writes < minimums.successful_writes {
        verdict.too_thin.push(format!(
            "only {} successful operator writes in the audit log (at least {} expected)",
            verdict.successful_writes, minimums.successful_writes
        ));
    }
    verdict
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "operator requests: {} ({} successful writes)",
            self.operator_requests, self.successful_writes
        )?;
        writeln!(f, "used (verb, resource, scope: requests):")?;
        for ((verb, group, resource, namespaced), count) in &self.usage {
            if resource.starts_with('/') {
                writeln!(f, "  {verb:<8} {resource} (non-resource URL): {count}")?;
                continue;
            }
            let group = if group.is_empty() { "core" } else { group };
            let scope = if *namespaced {
                "namespaced"
            } else {
                "cluster-wide"
            };
            writeln!(f, "  {verb:<8} {resource} ({group}, {scope}): {count}")?;
        }
        let sections: [(&str, Vec<String>); 6] = [
            (
                "FAIL granted write verbs nobody used (remove them from the ClusterRole)",
                self.unused_writes.iter().map(Grant::to_string).collect(),
            ),
            ("FAIL wildcards", self.wildcards.clone()),
            (
                "FAIL forbidden requests (a rule is missing)",
                self.forbidden
                    .iter()
                    .map(|((verb, target), (count, message))| {
                        format!("{verb} {target}: {count} (first: {message})")
                    })
                    .collect(),
            ),
            ("FAIL the log proves nothing", self.too_thin.clone()),
            (
                "note: held only to grant them in the Roles the operator writes (RBAC escalation check)",
                self.delegated.iter().map(Grant::to_string).collect(),
            ),
            (
                "note: granted read verbs nobody used (not failed)",
                self.unused_reads.iter().map(Grant::to_string).collect(),
            ),
        ];
        for (title, lines) in sections {
            if lines.is_empty() {
                continue;
            }
            writeln!(f, "{title}:")?;
            for line in lines {
                writeln!(f, "  {line}")?;
            }
        }
        if self.refused_after_unbinding > 0 {
            writeln!(
                f,
                "note: {} refusals came after the refused ServiceAccount's binding was deleted \
                 (uninstalled while its pod still ran; not failed)",
                self.refused_after_unbinding
            )?;
        }
        if self.refused_during_apiserver_start > 0 {
            writeln!(
                f,
                "note: {} refusals of what the rules grant came while the API server was starting \
                 (its RBAC cache not yet read; not failed)",
                self.refused_during_apiserver_start
            )?;
        }
        write!(
            f,
            "verdict: {}",
            if self.passed() { "PASS" } else { "FAIL" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOW: Minimums = Minimums {
        requests: 1,
        successful_writes: 1,
    };

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            ..PolicyRule::default()
        }
    }

    fn request(verb: &str, group: &str, resource: &str, code: u16) -> Request {
        let (resource, subresource) = match resource.split_once('/') {
            Some((resource, sub)) => (resource, Some(sub.to_string())),
            None => (resource, None),
        };
        Request {
            user: "vko-e2e-operator".into(),
            verb: verb.into(),
            target: Target::Resource {
                api_group: group.into(),
                resource: resource.into(),
                subresource,
                namespaced: true,
                name: Some("x".into()),
            },
            code,
            refused: (code == 403).then(|| {
                format!("{resource} is forbidden: User \"vko-e2e-operator\" cannot {verb}")
            }),
            received: String::new(),
            completed: String::new(),
            after_unbinding: false,
            during_apiserver_start: false,
        }
    }

    fn grants(list: &[Grant]) -> Vec<String> {
        list.iter().map(Grant::to_string).collect()
    }

    #[test]
    fn table_of_rules_and_uses() {
        struct Case {
            name: &'static str,
            rules: Vec<PolicyRule>,
            used: Vec<Request>,
            unused_writes: Vec<&'static str>,
            forbidden: usize,
            wildcards: usize,
            passed: bool,
        }
        let cases = vec![
            Case {
                name: "every granted write was used",
                rules: vec![rule(
                    &["apps"],
                    &["statefulsets"],
                    &["get", "create", "patch"],
                )],
                used: vec![
                    request("create", "apps", "statefulsets", 201),
                    request("patch", "apps", "statefulsets", 200),
                ],
                unused_writes: vec![],
                forbidden: 0,
                wildcards: 0,
                passed: true,
            },
            Case {
                name: "an unused delete fails",
                rules: vec![rule(&[""], &["services"], &["create", "delete"])],
                used: vec![request("create", "", "services", 201)],
                unused_writes: vec!["delete services (core)"],
                forbidden: 0,
                wildcards: 0,
                passed: false,
            },
            Case {
                name: "an apply that created the object used create too",
                rules: vec![rule(
                    &[""],
                    &["configmaps", "services"],
                    &["create", "patch"],
                )],
                used: vec![
                    request("patch", "", "configmaps", 201),
                    request("patch", "", "services", 200),
                ],
                unused_writes: vec!["create services (core)"],
                forbidden: 0,
                wildcards: 0,
                passed: false,
            },
            Case {
                name: "a write used on another group does not count",
                rules: vec![rule(&["policy"], &["poddisruptionbudgets"], &["patch"])],
                used: vec![request("patch", "apps", "poddisruptionbudgets", 200)],
                unused_writes: vec!["patch poddisruptionbudgets (policy)"],
                forbidden: 0,
                wildcards: 0,
                passed: false,
            },
            Case {
                name: "a subresource is its own resource",
                rules: vec![rule(
                    &["vko.gtrfc.com"],
                    &["valkeys", "valkeys/status"],
                    &["patch"],
                )],
                used: vec![request("patch", "vko.gtrfc.com", "valkeys/status", 200)],
                unused_writes: vec!["patch valkeys (vko.gtrfc.com)"],
                forbidden: 0,
                wildcards: 0,
                passed: false,
            },
            Case {
                name: "a refused request is a missing rule, not a use",
                rules: vec![rule(&[""], &["configmaps"], &["create"])],
                used: vec![
                    request("create", "", "configmaps", 201),
                    request("delete", "", "configmaps", 403),
                ],
                unused_writes: vec![],
                forbidden: 1,
                wildcards: 0,
                passed: false,
            },
            Case {
                name: "a write answered 404 or 409 still used the grant",
                rules: vec![rule(&[""], &["pods"], &["delete", "update"])],
                used: vec![
                    request("delete", "", "pods", 404),
                    request("update", "", "pods", 409),
                    request("create", "", "events", 201),
                ],
                unused_writes: vec![],
                forbidden: 0,
                wildcards: 0,
                passed: true,
            },
            Case {
                name: "wildcards fail whatever was used",
                rules: vec![
                    rule(&["*"], &["pods"], &["get"]),
                    rule(&[""], &["*"], &["*"]),
                ],
                used: vec![request("create", "", "pods", 201)],
                unused_writes: vec![],
                forbidden: 0,
                wildcards: 2,
                passed: false,
            },
            Case {
                name: "unused reads are noted, not failed",
                rules: vec![rule(
                    &[""],
                    &["secrets", "pods"],
                    &["get", "list", "create"],
                )],
                used: vec![
                    request("create", "", "secrets", 201),
                    request("create", "", "pods", 201),
                ],
                unused_writes: vec![],
                forbidden: 0,
                wildcards: 0,
                passed: true,
            },
        ];
        for case in cases {
            let verdict = check(&case.rules, &case.used, &[], LOW);
            assert_eq!(
                grants(&verdict.unused_writes),
                case.unused_writes,
                "{}",
                case.name
            );
            assert_eq!(verdict.forbidden.len(), case.forbidden, "{}", case.name);
            assert_eq!(verdict.wildcards.len(), case.wildcards, "{}", case.name);
            assert_eq!(verdict.passed(), case.passed, "{}\n{verdict}", case.name);
            // The summary lines name exactly the failed reasons.
            assert_eq!(
                verdict.failures().len(),
                case.unused_writes.len() + case.forbidden + case.wildcards,
                "{}: {:?}",
                case.name,
                verdict.failures()
            );
        }
    }

    #[test]
    fn resource_names_restrict_what_counts_as_a_use() {
        let mut lease_rule = rule(&["coordination.k8s.io"], &["leases"], &["update"]);
        lease_rule.resource_names = Some(vec!["vko-operator-leader".into()]);
        let mut other = request("update", "coordination.k8s.io", "leases", 200);
        let verdict = check(
            std::slice::from_ref(&lease_rule),
            &[other.clone()],
            &[],
            LOW,
        );
        assert_eq!(
            grants(&verdict.unused_writes),
            ["update leases (coordination.k8s.io)"]
        );
        if let Target::Resource { name, .. } = &mut other.target {
            *name = Some("vko-operator-leader".into());
        }
        assert!(check(&[lease_rule], &[other], &[], LOW).passed());
    }

    #[test]
    fn a_grant_only_the_written_roles_need_is_delegated_once_roles_were_written() {
        let cluster_role = [
            rule(&[""], &["pods"], &["get", "list", "patch"]),
            rule(&["rbac.authorization.k8s.io"], &["roles"], &["create"]),
        ];
        let mut sidecar_rule = rule(&[""], &["pods"], &["get", "patch"]);
        sidecar_rule.resource_names = Some(vec!["v-0".into()]);
        let delegated = [sidecar_rule];
        let list = request("list", "", "pods", 200);
        let role_write = request("create", "rbac.authorization.k8s.io", "roles", 201);

        let verdict = check(&cluster_role, &[list.clone(), role_write], &delegated, LOW);
        assert!(verdict.passed(), "{verdict}");
        assert_eq!(
            grants(&verdict.delegated),
            ["get pods (core)", "patch pods (core)"]
        );

        // No Role was written (refused here): nothing justifies patch on pods.
        let refused = request("create", "rbac.authorization.k8s.io", "roles", 403);
        let verdict = check(
            &cluster_role,
            &[list, refused, request("create", "", "events", 201)],
            &delegated,
            LOW,
        );
        assert!(verdict.delegated.is_empty());
        assert_eq!(
            grants(&verdict.unused_writes),
            [
                "create roles (rbac.authorization.k8s.io)",
                "patch pods (core)"
            ]
        );
    }

    #[test]
    fn refusals_after_the_binding_was_deleted_are_excused_until_it_is_back() {
        let identities = OperatorIdentities {
            users: Vec::new(),
            service_account_suffixes: vec!["valkey-operator".into()],
        };
        let binding = |id: &str, at: &str, verb: &str, name: &str| {
            format!(
                r#"{{"auditID":"{id}","stage":"ResponseComplete","requestURI":"/x","verb":"{verb}","user":{{"username":"admin"}},"objectRef":{{"resource":"clusterrolebindings","name":"{name}","apiGroup":"rbac.authorization.k8s.io"}},"responseStatus":{{"code":200}},"requestReceivedTimestamp":"{at}"}}"#
            )
        };
        // Received at `at`, answered 1 ms later (or at `completed`).
        let refused_between = |id: &str, at: &str, completed: &str| {
            format!(
                r#"{{"auditID":"{id}","stage":"ResponseComplete","requestURI":"/x","verb":"list","user":{{"username":"system:serviceaccount:rel:vko-valkey-operator"}},"objectRef":{{"resource":"pods"}},"responseStatus":{{"code":403,"message":"pods is forbidden: User \"system:serviceaccount:rel:vko-valkey-operator\" cannot list"}},"annotations":{{"authorization.k8s.io/decision":"forbid"}},"requestReceivedTimestamp":"{at}","stageTimestamp":"{completed}"}}"#
            )
        };
        let refusal = |id: &str, at: &str| {
            let completed = at.replace(".000000Z", ".001000Z");
            refused_between(id, at, &completed)
        };
        let log = [
            binding(
                "b1",
                "2026-11-30T17:00:00.000000Z",
                "create",
                "vko-valkey-operator",
            ),
            refusal("r1", "2026-11-30T17:00:01.000000Z"),
            binding(
                "b2",
                "2026-11-30T17:00:02.000000Z",
                "delete",
                "vko-valkey-operator",
            ),
            // Another release's binding does not count.
            binding(
                "b3",
                "2026-11-30T17:00:02.500000Z",
                "create",
                "other-valkey-operator",
            ),
            refusal("r2", "2026-11-30T17:00:03.000000Z"),
            binding(
                "b4",
                "2026-11-30T17:00:04.000000Z",
                "create",
                "vko-valkey-operator",
            ),
            refusal("r3", "2026-11-30T17:00:05.000000Z"),
            // Received before the deletion, queued, refused after it: excused.
            refused_between(
                "r4",
                "2026-11-30T17:00:05.900000Z",
                "2026-11-30T17:00:06.100000Z",
            ),
            binding(
                "b5",
                "2026-11-30T17:00:06.000000Z",
                "delete",
                "vko-valkey-operator-leader-election",
            ),
            binding(
                "b6",
                "2026-11-30T17:00:07.000000Z",
                "create",
                "vko-valkey-operator-leader-election",
            ),
            // The migrate hook's binding (`<name>-migrate`) is not the operator's: its deletion
            // after every upgrade excuses nothing.
            binding(
                "b7",
                "2026-11-30T17:00:08.000000Z",
                "delete",
                "vko-valkey-operator-migrate",
            ),
            refusal("r5", "2026-11-30T17:00:09.000000Z"),
        ]
        .join("\n");
        let read = read_audit_log(&log, &identities);
        assert_eq!(read.binding_changes.len(), 7);
        let excused: Vec<bool> = read.requests.iter().map(|r| r.after_unbinding).collect();
        assert_eq!(excused, [false, true, false, true, false]);
        let verdict = check(&[], &read.requests, &[], LOW);
        assert_eq!(verdict.refused_after_unbinding, 2);
        assert_eq!(
            verdict
                .forbidden
                .values()
                .map(|(count, _)| count)
                .sum::<usize>(),
            3
        );
    }

    #[test]
    fn refusals_of_granted_requests_while_the_apiserver_starts_are_excused() {
        let starts = read_apiserver_starts(
            "2026-11-30T17:00:00.000000Z 2026-11-30T17:00:01.000000Z\n\
             garbage\n\
             2026-11-30T18:00:00.000000Z 2026-11-30T18:00:02.000000Z\n",
        );
        assert_eq!(starts.len(), 2, "a line without two fields is skipped");
        let answered_at = |mut request: Request, at: &str| {
            request.completed = at.to_string();
            request
        };
        let mut requests = vec![
            // During the first start, granted by the rules: excused.
            answered_at(
                request("watch", "apps", "statefulsets", 403),
                "2026-11-30T17:00:00.500000Z",
            ),
            // During the second start, but no rule grants it: a missing rule all the same.
            answered_at(
                request("watch", "", "secrets", 403),
                "2026-11-30T18:00:01.000000Z",
            ),
            // Granted by the rules, refused after the API server was ready: a real refusal.
            answered_at(
                request("watch", "apps", "statefulsets", 403),
                "2026-11-30T17:00:01.000001Z",
            ),
            // Answered OK during a start: used, nothing to excuse.
            answered_at(
                request("patch", "apps", "statefulsets", 200),
                "2026-11-30T18:00:00.100000Z",
            ),
        ];
        mark_requests_during_apiserver_starts(&mut requests, &starts);
        let during: Vec<bool> = requests.iter().map(|r| r.during_apiserver_start).collect();
        assert_eq!(during, [true, true, false, true]);
        let rules = [rule(&["apps"], &["statefulsets"], &["watch", "patch"])];
        let verdict = check(&rules, &requests, &[], LOW);
        assert_eq!(verdict.refused_during_apiserver_start, 1);
        let forbidden: Vec<&(String, String)> = verdict.forbidden.keys().collect();
        assert_eq!(forbidden.len(), 2, "{forbidden:?}");
        assert!(!verdict.passed());
        assert!(
            verdict
                .to_string()
                .contains("1 refusals of what the rules grant"),
            "{verdict}"
        );
    }

    #[test]
    fn service_accounts_match_by_name_ending_in_any_namespace() {
        let identities = OperatorIdentities {
            users: vec!["vko-e2e-operator".into()],
            service_account_suffixes: vec!["valkey-operator".into()],
        };
        assert!(identities.matches("vko-e2e-operator"));
        assert!(identities.matches("system:serviceaccount:vko-system:vko-valkey-operator"));
        assert!(
            !identities.matches("system:serviceaccount:vko-system:vko-valkey-operator-migrate")
        );
        assert!(!identities.matches("valkey-operator"));
        assert!(!identities.matches("admin"));
    }

    #[test]
    fn an_empty_or_read_only_log_never_passes() {
        let rules = [rule(&[""], &["pods"], &["get"])];
        let empty = check(&rules, &[], &[], LOW);
        assert!(!empty.passed());
        assert_eq!(empty.too_thin.len(), 2, "{empty}");
        let reads = check(&rules, &[request("get", "", "pods", 200)], &[], LOW);
        assert!(!reads.passed(), "no write at all: {reads}");
        let minimums = Minimums {
            requests: 3,
            successful_writes: 1,
        };
        let few = check(&rules, &[request("create", "", "pods", 201)], &[], minimums);
        assert!(
            few.too_thin[0].contains("only 1 operator requests"),
            "{few}"
        );
        // A refused write is not a successful one.
        let refused = check(&rules, &[request("create", "", "pods", 403)], &[], LOW);
        assert_eq!(refused.successful_writes, 0);
    }

    #[test]
    fn reads_the_audit_log_once_per_request_for_operator_identities_only() {
        let identities = OperatorIdentities {
            users: vec!["vko-e2e-operator".into()],
            service_account_suffixes: vec!["valkey-operator".into()],
        };
        let log = r#"
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseStarted","requestURI":"/apis/vko.gtrfc.com/v1alpha1/valkeys?watch=true","verb":"watch","user":{"username":"vko-e2e-operator","groups":["system:authenticated"]},"objectRef":{"resource":"valkeys","apiGroup":"vko.gtrfc.com","apiVersion":"v1alpha1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a1","stage":"ResponseComplete","requestURI":"/apis/vko.gtrfc.com/v1alpha1/valkeys?watch=true","verb":"watch","user":{"username":"vko-e2e-operator","groups":["system:authenticated"]},"objectRef":{"resource":"valkeys","apiGroup":"vko.gtrfc.com","apiVersion":"v1alpha1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a2","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/t/pods/p","verb":"delete","user":{"username":"admin","groups":["system:masters"]},"objectRef":{"resource":"pods","namespace":"t","name":"p","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a3","stage":"ResponseComplete","requestURI":"/apis/apps/v1/namespaces/t/statefulsets/s/status","verb":"patch","user":{"username":"system:serviceaccount:vko-system:vko-valkey-operator"},"objectRef":{"resource":"statefulsets","namespace":"t","name":"s","apiGroup":"apps","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":403},"annotations":{"authorization.k8s.io/decision":"forbid","authorization.k8s.io/reason":""}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a4","stage":"ResponseComplete","requestURI":"/version","verb":"get","user":{"username":"vko-e2e-operator"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a5","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/t/pods","verb":"list","user":{"username":"system:serviceaccount:vko-system:vko-valkey-operator-migrate"},"objectRef":{"resource":"pods","namespace":"t","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":200}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a6","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/gone/services/s","verb":"patch","user":{"username":"vko-e2e-operator"},"objectRef":{"resource":"services","namespace":"gone","name":"s","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"services \"s\" is forbidden: unable to create new content in namespace gone because it is being terminated","reason":"Forbidden","code":403},"annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed"}}
{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a7","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/t/configmaps/c","verb":"patch","user":{"username":"vko-e2e-operator"},"objectRef":{"resource":"configmaps","namespace":"t","name":"c","apiVersion":"v1"},"responseStatus":{"metadata":{},"status":"Failure","message":"configmaps \"c\" is forbidden: User \"vko-e2e-operator\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"t\"","reason":"Forbidden","code":403},"annotations":{"authorization.k8s.io/decision":"allow","authorization.k8s.io/reason":"RBAC: allowed"}}
not json
"#;
        let read = read_audit_log(log, &identities);
        assert_eq!(read.events, 8);
        assert_eq!(read.unparsable_lines, 1);
        assert_eq!(read.requests.len(), 5, "{:#?}", read.requests);
        // A 403 from admission (terminating namespace) was allowed by RBAC; a creating PATCH
        // refused its `create` check was not, although the PATCH itself was allowed.
        assert_eq!(read.requests[3].code, 403);
        assert_eq!(read.requests[3].refused, None);
        assert!(
            read.requests[4]
                .refused
                .as_deref()
                .is_some_and(|message| message.contains("cannot create resource"))
        );
        assert_eq!(read.requests[0].verb, "watch");
        assert_eq!(
            read.requests[0].target,
            Target::Resource {
                api_group: "vko.gtrfc.com".into(),
                resource: "valkeys".into(),
                subresource: None,
                namespaced: false,
                name: None,
            }
        );
        assert_eq!(read.requests[1].code, 403);
        assert_eq!(
            read.requests[1].target.rbac_resource().as_deref(),
            Some("statefulsets/status")
        );
        assert_eq!(
            read.requests[2].target,
            Target::NonResource {
                path: "/version".into()
            }
        );
        let verdict = check(
            &[rule(&["apps"], &["statefulsets/status"], &["patch"])],
            &read.requests,
            &[],
            LOW,
        );
        assert_eq!(verdict.forbidden.len(), 2, "{verdict}");
        assert_eq!(
            grants(&verdict.unused_writes),
            ["patch statefulsets/status (apps)"]
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let url_rule = PolicyRule {
            non_resource_urls: Some(vec!["/metrics".into(), "/debug/*".into()]),
            verbs: vec!["post".into()],
            ..PolicyRule::default()
        };
        let post = |path: &str| Request {
            user: "u".into(),
            verb: "post".into(),
            target: Target::NonResource { path: path.into() },
            code: 200,
            refused: None,
            received: String::new(),
            completed: String::new(),
            after_unbinding: false,
            during_apiserver_start: false,
        };
        let verdict = check(
            std::slice::from_ref(&url_rule),
            &[post("/debug/pprof")],
            &[],
            LOW,
        );
        assert_eq!(
            grants(&verdict.unused_writes),
            ["post /metrics (non-resource URL)"]
        );
        let verdict = check(&[url_rule], &[post("/debug/x"), post("/metrics")], &[], LOW);
        assert!(verdict.unused_writes.is_empty(), "{verdict}");
    }
}
