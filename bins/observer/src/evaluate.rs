//! Pure: what one round observed, which pod is the master, and the verdict of every check.
//! No I/O here; `probe` fills an [`Observation`], [`evaluate`] judges it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use vko_authority::{Electorate, Tally, Vote, tally};

use crate::check::{Check, CheckResult, Status};

/// A Valkey or Sentinel address as announced (host name and port).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    pub fn new(host: impl Into<String>, port: u16) -> Endpoint {
        Endpoint {
            host: host.into(),
            port,
        }
    }

    /// Same instance: host names compare without case (DNS), ports exactly.
    pub fn same(&self, other: &Endpoint) -> bool {
        self.port == other.port && self.host.eq_ignore_ascii_case(&other.host)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// A host that is an IPv4 or IPv6 address rather than a DNS name.
pub fn is_bare_ip(host: &str) -> bool {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
        .is_ok()
}

/// Replication role of a data pod, from its own INFO replication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRole {
    Master,
    Replica {
        /// `master_host:master_port`.
        upstream: Endpoint,
        /// `master_link_status:up`.
        link_up: bool,
        /// `master_sync_in_progress:1`.
        sync_in_progress: bool,
    },
}

/// One data pod (`<name>-<i>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataPod {
    /// Pod name, e.g. `cache-1`.
    pub name: String,
    /// Its stable DNS name and the Valkey port.
    pub endpoint: Endpoint,
    /// Its role, or why it could not be read (connect, AUTH, PING or INFO failed).
    pub role: Result<DataRole, String>,
}

/// What one Sentinel says about the monitored master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelMasterView {
    pub address: Endpoint,
    /// `s_down` / `o_down` as present in the master's flags.
    pub s_down: bool,
    pub o_down: bool,
    /// This Sentinel plus the peers it knows (`num-other-sentinels + 1`).
    pub known_sentinels: usize,
}

/// One Sentinel pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelView {
    /// Pod name, e.g. `cache-sentinel-0`.
    pub name: String,
    /// `Err`: it did not answer PING (or could not be connected to).
    pub state: Result<SentinelAnswer, String>,
}

/// A reachable Sentinel's answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelAnswer {
    /// `SENTINEL MASTER <monitor>`; `Err` when it does not monitor it or the call failed.
    pub master: Result<SentinelMasterView, String>,
    /// `SENTINEL REPLICAS <monitor>`: the replica addresses it lists.
    pub replicas: Result<Vec<Endpoint>, String>,
}

/// The Sentinel tier as observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelTier {
    /// The configured number of Sentinels (`--sentinel-replicas`).
    pub configured: u32,
    pub sentinels: Vec<SentinelView>,
}

impl SentinelTier {
    /// The votes of [`SentinelTier::votes`] (by their index) counted by `vko-authority`'s one
    /// majority rule: against every Sentinel configured, asked or reported (ADR 0014).
    fn tally(&self, votes: &[(Endpoint, Vec<&str>)]) -> Tally<usize> {
        let electorate = Electorate::new(
            usize::try_from(self.configured).unwrap_or(usize::MAX),
            self.sentinels.len(),
        );
        let ballots = self.master_views().map(|(_, view)| {
            Vote::new(
                votes.iter().position(|(addr, _)| addr.same(&view.address)),
                view.known_sentinels,
            )
        });
        tally(electorate, ballots)
    }

    /// `(sentinel name, its master view)` of every Sentinel that named a master.
    fn master_views(&self) -> impl Iterator<Item = (&str, &SentinelMasterView)> {
        self.sentinels.iter().filter_map(|s| match &s.state {
            Ok(SentinelAnswer {
                master: Ok(view), ..
            }) => Some((s.name.as_str(), view)),
            _ => None,
        })
    }

    /// Each named master address with the Sentinels naming it, most named first (ties by
    /// address, so the order is deterministic).
    fn votes(&self) -> Vec<(Endpoint, Vec<&str>)> {
        let mut votes: Vec<(Endpoint, Vec<&str>)> = Vec::new();
        for (name, view) in self.master_views() {
            match votes.iter_mut().find(|(addr, _)| addr.same(&view.address)) {
                Some((_, names)) => names.push(name),
                None => votes.push((view.address.clone(), vec![name])),
            }
        }
        votes.sort_by(|(a, an), (b, bn)| bn.len().cmp(&an.len()).then_with(|| a.cmp(b)));
        votes
    }
}

/// Which address this round treats as the master, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MasterChoice {
    pub master: Option<Endpoint>,
    /// How it was chosen, or why none was.
    pub reason: String,
}

/// Chooses the master. With Sentinel: the address a strict majority of every Sentinel names
/// (configured, asked or reported; `vko-authority`, ADR 0014); when no Sentinel answered or no
/// address has that majority, the data pods decide as without Sentinel (the tier's own
/// agreement is judged by `sentinelQuorumFailure`). Without Sentinel: the one pod whose INFO
/// says `role:master`; none or several is no master.
pub fn choose_master(data: &[DataPod], sentinel: Option<&SentinelTier>) -> MasterChoice {
    let mut sentinel_note = None;
    if let Some(tier) = sentinel {
        let votes = tier.votes();
        let tally = tier.tally(&votes);
        let answered: usize = votes.iter().map(|(_, names)| names.len()).sum();
        if let Some((&index, agreeing)) = tally.majority()
            && let Some((address, _)) = votes.get(index)
        {
            return MasterChoice {
                master: Some(address.clone()),
                reason: format!(
                    "named by {agreeing} of {answered} answering Sentinels (a majority of {})",
                    tally.electorate
                ),
            };
        }
        if let [(address, names)] = votes.as_slice() {
            sentinel_note = Some(format!(
                "only {} of {} Sentinels name {address}, not a majority; ",
                names.len(),
                tally.electorate
            ));
        } else if !votes.is_empty() {
            sentinel_note = Some(format!(
                "the Sentinels are split ({}); ",
                describe_votes(&votes)
            ));
        } else {
            sentinel_note = Some("no Sentinel named a master; ".to_owned());
        }
    }
    let note = sentinel_note.unwrap_or_default();
    let masters: Vec<&DataPod> = data
        .iter()
        .filter(|pod| matches!(pod.role, Ok(DataRole::Master)))
        .collect();
    match masters.as_slice() {
        [one] => MasterChoice {
            master: Some(one.endpoint.clone()),
            reason: format!("{note}{} is the only pod reporting role:master", one.name),
        },
        [] => MasterChoice {
            master: None,
            reason: format!("{note}no data pod reports role:master"),
        },
        several => MasterChoice {
            master: None,
            reason: format!(
                "{note}{} data pods report role:master ({}): no single master",
                several.len(),
                several
                    .iter()
                    .map(|pod| pod.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    }
}

fn describe_votes(votes: &[(Endpoint, Vec<&str>)]) -> String {
    votes
        .iter()
        .map(|(addr, names)| format!("{addr} by {}", names.join(", ")))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A replica's answer to the health-key read, after its catch-up time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaRead {
    /// It returned the value written this round.
    Fresh,
    /// It returned another value (an older round's).
    Stale { got: String },
    /// The key was missing.
    Missing,
    /// The read failed (connect, AUTH, SELECT or GET).
    Error(String),
}

/// The write/read test against the master and the replicas.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthTest {
    /// Connect + PING of the chosen master; `None` when there was no master to ping.
    pub ping: Option<Result<(), String>>,
    /// The value written this round.
    pub value: String,
    /// SET of the health key on the master; `None` when not attempted.
    pub write: Option<Result<(), String>>,
    /// GET of the health key on the master right after; `None` when not attempted.
    pub read: Option<Result<Option<String>, String>>,
    /// Per non-master data pod name; empty when nothing was written.
    pub replica_reads: BTreeMap<String, ReplicaRead>,
    /// How long replicas were given to catch up, for the details.
    pub catch_up_ms: u64,
}

/// Everything one round observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `--replicas`: the configured number of data pods.
    pub replicas: u32,
    /// The data pods, ordinals 0..replicas.
    pub data: Vec<DataPod>,
    /// `None` without Sentinel.
    pub sentinel: Option<SentinelTier>,
    pub master: MasterChoice,
    pub health: HealthTest,
}

/// The verdict of one round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// No check whose failure makes the observer unready failed.
    pub ready: bool,
    /// The master this round used, if any.
    pub master: Option<String>,
    pub checks: BTreeMap<Check, CheckResult>,
}

impl Report {
    /// Checks that failed this round.
    pub fn failures(&self) -> impl Iterator<Item = (&Check, &CheckResult)> {
        self.checks.iter().filter(|(_, result)| result.failed())
    }
}

struct Verdict {
    status: Status,
    detail: String,
}

fn pass(detail: impl Into<String>) -> Verdict {
    Verdict {
        status: Status::Pass,
        detail: detail.into(),
    }
}
fn fail(detail: impl Into<String>) -> Verdict {
    Verdict {
        status: Status::Fail,
        detail: detail.into(),
    }
}
fn skip(detail: impl Into<String>) -> Verdict {
    Verdict {
        status: Status::Skipped,
        detail: detail.into(),
    }
}

/// Fails with the problems joined, or passes with `ok`.
fn problems_or(problems: Vec<String>, ok: impl FnOnce() -> String) -> Verdict {
    if problems.is_empty() {
        pass(ok())
    } else {
        fail(problems.join("; "))
    }
}

/// Judges every check; `unready_on` are the checks whose failure makes the observer unready.
pub fn evaluate(obs: &Observation, unready_on: &BTreeSet<Check>) -> Report {
    let checks: BTreeMap<Check, CheckResult> = Check::ALL
        .into_iter()
        .map(|check| {
            let verdict = judge(check, obs);
            (
                check,
                CheckResult {
                    status: verdict.status,
                    detail: verdict.detail,
                    unready_on_failure: unready_on.contains(&check),
                },
            )
        })
        .collect();
    let ready = !checks
        .values()
        .any(|result| result.failed() && result.unready_on_failure);
    Report {
        ready,
        master: obs.master.master.as_ref().map(ToString::to_string),
        checks,
    }
}

fn judge(check: Check, obs: &Observation) -> Verdict {
    match check {
        Check::MasterUnreachable => master_unreachable(obs),
        Check::WriteTestFailure => write_test(obs),
        Check::ReadTestFailure => read_test(obs),
        Check::ReplicaSyncFailure => replica_sync(obs),
        Check::ReplicaReadTestFailure => replica_read(obs),
        Check::SentinelUnreachable => with_sentinel(obs, sentinel_unreachable),
        Check::SentinelQuorumFailure => with_sentinel(obs, sentinel_quorum),
        Check::SentinelMasterDown => with_sentinel(obs, sentinel_master_down),
        Check::SentinelMasterHostnameInvalid => with_sentinel(obs, sentinel_master_hostname),
        Check::SentinelReplicaHostnamesInvalid => with_sentinel(obs, sentinel_replica_hostnames),
    }
}

fn master_unreachable(obs: &Observation) -> Verdict {
    let Some(master) = &obs.master.master else {
        return fail(format!("no master: {}", obs.master.reason));
    };
    match &obs.health.ping {
        Some(Ok(())) => pass(format!("{master} answers PING ({})", obs.master.reason)),
        Some(Err(e)) => fail(format!("{master} ({}): {e}", obs.master.reason)),
        None => fail(format!("{master} was not pinged")),
    }
}

fn write_test(obs: &Observation) -> Verdict {
    match (&obs.health.write, &obs.master.master) {
        (Some(Ok(())), Some(master)) => pass(format!("health key written to {master}")),
        (Some(Err(e)), Some(master)) => fail(format!("writing the health key to {master}: {e}")),
        _ => fail("not run: no reachable master"),
    }
}

fn read_test(obs: &Observation) -> Verdict {
    let master = obs
        .master
        .master
        .as_ref()
        .map_or_else(|| "the master".to_owned(), ToString::to_string);
    match &obs.health.read {
        Some(Ok(Some(value))) if *value == obs.health.value => {
            pass(format!("health key read back from {master}"))
        }
        Some(Ok(Some(value))) => fail(format!(
            "{master} returned {value:?} right after {:?} was written",
            obs.health.value
        )),
        Some(Ok(None)) => fail(format!(
            "{master}: the health key is missing right after the write"
        )),
        Some(Err(e)) => fail(format!("reading the health key from {master}: {e}")),
        None => fail(match &obs.health.write {
            Some(Ok(())) => "not run".to_owned(),
            _ => "not run: the health key could not be written".to_owned(),
        }),
    }
}

fn not_master(obs: &Observation) -> impl Iterator<Item = &DataPod> {
    obs.data.iter().filter(|pod| {
        obs.master
            .master
            .as_ref()
            .is_none_or(|master| !pod.endpoint.same(master))
    })
}

fn replica_sync(obs: &Observation) -> Verdict {
    if obs.replicas <= 1 {
        return skip("not applicable: one data pod");
    }
    let master = obs.master.master.as_ref();
    let mut problems = Vec::new();
    let mut replicas = 0;
    for pod in not_master(obs) {
        replicas += 1;
        match &pod.role {
            Err(e) => problems.push(format!("{}: unreachable: {e}", pod.name)),
            Ok(DataRole::Master) => problems.push(match master {
                Some(master) => format!(
                    "{}: reports role:master, but the master is {master}",
                    pod.name
                ),
                None => format!("{}: reports role:master", pod.name),
            }),
            Ok(DataRole::Replica {
                upstream,
                link_up,
                sync_in_progress,
            }) => {
                if !link_up {
                    problems.push(format!(
                        "{}: master_link_status:down (to {upstream})",
                        pod.name
                    ));
                }
                if *sync_in_progress {
                    problems.push(format!(
                        "{}: bulk sync from {upstream} in progress",
                        pod.name
                    ));
                }
                if let Some(master) = master
                    && !upstream.same(master)
                {
                    problems.push(format!(
                        "{}: replicates from {upstream}, not from the master {master}",
                        pod.name
                    ));
                }
            }
        }
    }
    problems_or(problems, || {
        format!("{replicas} replicas linked to the master and in sync")
    })
}

fn replica_read(obs: &Observation) -> Verdict {
    if obs.replicas <= 1 {
        return skip("not applicable: one data pod");
    }
    if !matches!(obs.health.write, Some(Ok(()))) {
        return skip("no health key was written this round");
    }
    let mut problems = Vec::new();
    let mut fresh = 0;
    let after = obs.health.catch_up_ms;
    for pod in not_master(obs) {
        match obs.health.replica_reads.get(&pod.name) {
            Some(ReplicaRead::Fresh) => fresh += 1,
            Some(ReplicaRead::Stale { got }) => problems.push(format!(
                "{}: stale value {got:?} after {after} ms (expected {:?})",
                pod.name, obs.health.value
            )),
            Some(ReplicaRead::Missing) => {
                problems.push(format!("{}: health key missing after {after} ms", pod.name))
            }
            Some(ReplicaRead::Error(e)) => problems.push(format!("{}: {e}", pod.name)),
            None => problems.push(format!("{}: not read", pod.name)),
        }
    }
    problems_or(problems, || {
        format!("{fresh} replicas returned the current health key")
    })
}

fn with_sentinel(obs: &Observation, judge: fn(&SentinelTier) -> Verdict) -> Verdict {
    match &obs.sentinel {
        Some(tier) => judge(tier),
        None => skip("not applicable: Sentinel is not enabled"),
    }
}

fn sentinel_unreachable(tier: &SentinelTier) -> Verdict {
    let problems: Vec<String> = tier
        .sentinels
        .iter()
        .filter_map(|s| s.state.as_ref().err().map(|e| format!("{}: {e}", s.name)))
        .collect();
    problems_or(problems, || {
        format!("all {} Sentinels answer PING", tier.sentinels.len())
    })
}

fn sentinel_quorum(tier: &SentinelTier) -> Verdict {
    let votes = tier.votes();
    let mut problems: Vec<String> = tier
        .sentinels
        .iter()
        .filter_map(|s| match &s.state {
            Ok(SentinelAnswer { master: Err(e), .. }) => {
                Some(format!("{} names no master: {e}", s.name))
            }
            _ => None,
        })
        .collect();
    let tally = tier.tally(&votes);
    let needed = tally.needed();
    match votes.as_slice() {
        [] => problems.push("no Sentinel names a master".to_owned()),
        [(address, names)] if tally.majority().is_none() => problems.push(format!(
            "only {} of {} Sentinels name {address} ({needed} needed)",
            names.len(),
            tally.electorate
        )),
        [(address, names)] => {
            if problems.is_empty() {
                return pass(format!(
                    "{} of {} Sentinels agree on {address}",
                    names.len(),
                    tally.electorate
                ));
            }
        }
        several => problems.insert(
            0,
            format!(
                "the Sentinels disagree on the master: {}",
                describe_votes(several)
            ),
        ),
    }
    fail(problems.join("; "))
}

fn answered(tier: &SentinelTier) -> bool {
    tier.master_views().next().is_some()
}

fn sentinel_master_down(tier: &SentinelTier) -> Verdict {
    if !answered(tier) {
        return skip("no Sentinel named a master");
    }
    let problems: Vec<String> = tier
        .master_views()
        .filter(|(_, view)| view.s_down || view.o_down)
        .map(|(name, view)| {
            let flags: Vec<&str> = [(view.s_down, "s_down"), (view.o_down, "o_down")]
                .into_iter()
                .filter_map(|(on, flag)| on.then_some(flag))
                .collect();
            format!("{name} flags {} {}", view.address, flags.join(","))
        })
        .collect();
    problems_or(problems, || "no Sentinel flags the master down".to_owned())
}

fn sentinel_master_hostname(tier: &SentinelTier) -> Verdict {
    if !answered(tier) {
        return skip("no Sentinel named a master");
    }
    let problems: Vec<String> = tier
        .master_views()
        .filter(|(_, view)| is_bare_ip(&view.address.host))
        .map(|(name, view)| format!("{name} names the master by IP {}", view.address))
        .collect();
    problems_or(problems, || {
        "every Sentinel names the master by hostname".to_owned()
    })
}

fn sentinel_replica_hostnames(tier: &SentinelTier) -> Verdict {
    let mut listed = 0;
    let mut lists = 0;
    let mut problems = Vec::new();
    for sentinel in &tier.sentinels {
        let Ok(SentinelAnswer {
            replicas: Ok(replicas),
            ..
        }) = &sentinel.state
        else {
            continue;
        };
        lists += 1;
        listed += replicas.len();
        let ips: Vec<String> = replicas
            .iter()
            .filter(|r| is_bare_ip(&r.host))
            .map(ToString::to_string)
            .collect();
        if !ips.is_empty() {
            problems.push(format!(
                "{} lists replicas by IP: {}",
                sentinel.name,
                ips.join(", ")
            ));
        }
    }
    if lists == 0 {
        return skip("no Sentinel listed replicas");
    }
    problems_or(problems, || {
        format!("{lists} Sentinels list {listed} replica entries, all by hostname")
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const PORT: u16 = 6379;

    fn fqdn(pod: &str) -> String {
        format!("{pod}.c-headless.ns.svc.cluster.local")
    }

    fn ep(pod: &str) -> Endpoint {
        Endpoint::new(fqdn(pod), PORT)
    }

    fn master_pod(i: u32) -> DataPod {
        DataPod {
            name: format!("c-{i}"),
            endpoint: ep(&format!("c-{i}")),
            role: Ok(DataRole::Master),
        }
    }

    fn replica_pod(i: u32, of: u32) -> DataPod {
        DataPod {
            name: format!("c-{i}"),
            endpoint: ep(&format!("c-{i}")),
            role: Ok(DataRole::Replica {
                upstream: ep(&format!("c-{of}")),
                link_up: true,
                sync_in_progress: false,
            }),
        }
    }

    fn sentinel_ok(i: u32, master: &Endpoint, replicas: &[Endpoint]) -> SentinelView {
        SentinelView {
            name: format!("c-sentinel-{i}"),
            state: Ok(SentinelAnswer {
                master: Ok(SentinelMasterView {
                    address: master.clone(),
                    s_down: false,
                    o_down: false,
                    known_sentinels: 3,
                }),
                replicas: Ok(replicas.to_vec()),
            }),
        }
    }

    fn healthy_health(replicas: &[&str]) -> HealthTest {
        HealthTest {
            ping: Some(Ok(())),
            value: "7:1700000000000".into(),
            write: Some(Ok(())),
            read: Some(Ok(Some("7:1700000000000".into()))),
            replica_reads: replicas
                .iter()
                .map(|name| ((*name).to_owned(), ReplicaRead::Fresh))
                .collect(),
            catch_up_ms: 2000,
        }
    }

    /// A healthy 3 data + 3 Sentinel cluster, master c-0; the master choice as `choose_master`
    /// makes it.
    fn ha() -> Observation {
        let data = vec![master_pod(0), replica_pod(1, 0), replica_pod(2, 0)];
        let replicas = [ep("c-1"), ep("c-2")];
        let tier = SentinelTier {
            configured: 3,
            sentinels: (0..3)
                .map(|i| sentinel_ok(i, &ep("c-0"), &replicas))
                .collect(),
        };
        let master = choose_master(&data, Some(&tier));
        Observation {
            replicas: 3,
            data,
            sentinel: Some(tier),
            master,
            health: healthy_health(&["c-1", "c-2"]),
        }
    }

    fn all() -> BTreeSet<Check> {
        Check::ALL.into_iter().collect()
    }

    fn status(report: &Report, check: Check) -> Status {
        report.checks[&check].status
    }

    fn detail(report: &Report, check: Check) -> &str {
        &report.checks[&check].detail
    }

    /// Exactly `failing` fail; everything else passes (or is skipped when listed in `skipped`).
    fn assert_only(report: &Report, failing: &[Check], skipped: &[Check]) {
        for check in Check::ALL {
            let want = if failing.contains(&check) {
                Status::Fail
            } else if skipped.contains(&check) {
                Status::Skipped
            } else {
                Status::Pass
            };
            assert_eq!(
                status(report, check),
                want,
                "{check}: {}",
                detail(report, check)
            );
        }
    }

    #[test]
    fn a_healthy_ha_cluster_passes_every_check() {
        let report = evaluate(&ha(), &all());
        assert!(report.ready);
        assert_only(&report, &[], &[]);
        assert_eq!(
            report.master.as_deref(),
            Some("c-0.c-headless.ns.svc.cluster.local:6379")
        );
        assert!(detail(&report, Check::MasterUnreachable).contains("named by 3 of 3"));
        assert!(report.checks.values().all(|c| c.unready_on_failure));
    }

    #[test]
    fn standalone_skips_replica_and_sentinel_checks() {
        let data = vec![master_pod(0)];
        let master = choose_master(&data, None);
        let obs = Observation {
            replicas: 1,
            data,
            sentinel: None,
            master,
            health: healthy_health(&[]),
        };
        let report = evaluate(&obs, &all());
        assert!(report.ready);
        // Everything after the three master checks: replicas and Sentinel.
        let skipped = &Check::ALL[3..];
        assert_eq!(skipped[0], Check::ReplicaSyncFailure);
        assert_only(&report, &[], skipped);
        assert!(detail(&report, Check::ReplicaSyncFailure).contains("one data pod"));
        assert!(detail(&report, Check::SentinelUnreachable).contains("Sentinel is not enabled"));
        assert!(
            detail(&report, Check::MasterUnreachable).contains("only pod reporting role:master")
        );
    }

    #[test]
    fn replicas_without_sentinel_use_the_role_master_pod() {
        let data = vec![replica_pod(0, 1), master_pod(1), replica_pod(2, 1)];
        let master = choose_master(&data, None);
        assert_eq!(master.master, Some(ep("c-1")));
        let obs = Observation {
            replicas: 3,
            data,
            sentinel: None,
            master,
            health: healthy_health(&["c-0", "c-2"]),
        };
        let report = evaluate(&obs, &all());
        assert!(report.ready);
        assert_only(
            &report,
            &[],
            &[
                Check::SentinelUnreachable,
                Check::SentinelQuorumFailure,
                Check::SentinelMasterDown,
                Check::SentinelMasterHostnameInvalid,
                Check::SentinelReplicaHostnamesInvalid,
            ],
        );
    }

    #[test]
    fn several_masters_without_sentinel_is_no_master() {
        let data = vec![master_pod(0), master_pod(1), replica_pod(2, 0)];
        let master = choose_master(&data, None);
        assert_eq!(master.master, None);
        let obs = Observation {
            replicas: 3,
            data,
            sentinel: None,
            master,
            health: HealthTest::default(),
        };
        let report = evaluate(&obs, &all());
        assert!(!report.ready);
        let text = detail(&report, Check::MasterUnreachable);
        assert!(
            text.contains("2 data pods report role:master (c-0, c-1)"),
            "{text}"
        );
        assert_eq!(status(&report, Check::WriteTestFailure), Status::Fail);
        assert_eq!(status(&report, Check::ReadTestFailure), Status::Fail);
        // Both masters are "not the master" replicas: reported by the sync check.
        let sync = detail(&report, Check::ReplicaSyncFailure);
        assert!(
            sync.contains("c-0: reports role:master") && sync.contains("c-1: reports role:master"),
            "{sync}"
        );
        // Nothing was written: nothing to compare replicas against.
        assert_eq!(
            status(&report, Check::ReplicaReadTestFailure),
            Status::Skipped
        );
    }

    #[test]
    fn no_master_at_all() {
        let data = vec![replica_pod(0, 1), replica_pod(1, 0)];
        let master = choose_master(&data, None);
        assert_eq!(master.master, None);
        assert!(master.reason.contains("no data pod reports role:master"));
    }

    #[test]
    fn unreachable_master_fails_the_master_checks() {
        let mut obs = ha();
        obs.data[0].role = Err("connection refused".into());
        obs.health = HealthTest {
            ping: Some(Err("connection to c-0 refused".into())),
            ..HealthTest::default()
        };
        let report = evaluate(&obs, &all());
        assert!(!report.ready);
        assert_only(
            &report,
            &[
                Check::MasterUnreachable,
                Check::WriteTestFailure,
                Check::ReadTestFailure,
            ],
            &[Check::ReplicaReadTestFailure],
        );
        assert!(detail(&report, Check::MasterUnreachable).contains("refused"));
    }

    #[test]
    fn write_and_read_failures() {
        let mut obs = ha();
        obs.health.write = Some(Err(
            "READONLY You can't write against a read only replica".into()
        ));
        obs.health.read = None;
        obs.health.replica_reads.clear();
        let report = evaluate(&obs, &all());
        assert_only(
            &report,
            &[Check::WriteTestFailure, Check::ReadTestFailure],
            &[Check::ReplicaReadTestFailure],
        );
        assert!(detail(&report, Check::WriteTestFailure).contains("READONLY"));
        assert!(detail(&report, Check::ReadTestFailure).contains("could not be written"));

        let mut obs = ha();
        obs.health.read = Some(Ok(Some("6:1699999999000".into())));
        let report = evaluate(&obs, &all());
        assert_only(&report, &[Check::ReadTestFailure], &[]);
        assert!(detail(&report, Check::ReadTestFailure).contains("6:1699999999000"));

        obs.health.read = Some(Ok(None));
        assert!(detail(&evaluate(&obs, &all()), Check::ReadTestFailure).contains("missing"));
        obs.health.read = Some(Err("timed out".into()));
        assert!(detail(&evaluate(&obs, &all()), Check::ReadTestFailure).contains("timed out"));
    }

    #[test]
    fn replica_sync_failures() {
        let cases: [(DataPod, &str); 5] = [
            (
                DataPod {
                    role: Err("connection refused".into()),
                    ..replica_pod(1, 0)
                },
                "c-1: unreachable: connection refused",
            ),
            (
                DataPod {
                    role: Ok(DataRole::Replica {
                        upstream: ep("c-0"),
                        link_up: false,
                        sync_in_progress: false,
                    }),
                    ..replica_pod(1, 0)
                },
                "master_link_status:down",
            ),
            (
                DataPod {
                    role: Ok(DataRole::Replica {
                        upstream: ep("c-0"),
                        link_up: true,
                        sync_in_progress: true,
                    }),
                    ..replica_pod(1, 0)
                },
                "bulk sync",
            ),
            (replica_pod(1, 2), "replicates from c-2"),
            (
                DataPod {
                    role: Ok(DataRole::Master),
                    ..replica_pod(1, 0)
                },
                "c-1: reports role:master, but the master is c-0",
            ),
        ];
        for (pod, expected) in cases {
            let mut obs = ha();
            obs.data[1] = pod;
            let report = evaluate(&obs, &all());
            assert!(!report.ready);
            assert_only(&report, &[Check::ReplicaSyncFailure], &[]);
            let text = detail(&report, Check::ReplicaSyncFailure);
            assert!(text.contains(expected), "{text} lacks {expected}");
        }
    }

    #[test]
    fn replica_read_failures() {
        let cases = [
            (
                ReplicaRead::Stale {
                    got: "6:1699999995000".into(),
                },
                "c-2: stale value \"6:1699999995000\" after 2000 ms",
            ),
            (
                ReplicaRead::Missing,
                "c-2: health key missing after 2000 ms",
            ),
            (ReplicaRead::Error("timed out".into()), "c-2: timed out"),
        ];
        for (read, expected) in cases {
            let mut obs = ha();
            obs.health.replica_reads.insert("c-2".into(), read);
            let report = evaluate(&obs, &all());
            assert_only(&report, &[Check::ReplicaReadTestFailure], &[]);
            let text = detail(&report, Check::ReplicaReadTestFailure);
            assert!(text.contains(expected), "{text} lacks {expected}");
        }
        let mut obs = ha();
        obs.health.replica_reads.remove("c-1");
        assert!(
            detail(&evaluate(&obs, &all()), Check::ReplicaReadTestFailure)
                .contains("c-1: not read")
        );
    }

    #[test]
    fn one_data_pod_skips_replica_checks_even_with_sentinel() {
        let data = vec![master_pod(0)];
        let tier = SentinelTier {
            configured: 3,
            sentinels: (0..3).map(|i| sentinel_ok(i, &ep("c-0"), &[])).collect(),
        };
        let master = choose_master(&data, Some(&tier));
        let obs = Observation {
            replicas: 1,
            data,
            sentinel: Some(tier),
            master,
            health: healthy_health(&[]),
        };
        let report = evaluate(&obs, &all());
        assert!(report.ready);
        assert_only(
            &report,
            &[],
            &[Check::ReplicaSyncFailure, Check::ReplicaReadTestFailure],
        );
    }

    #[test]
    fn unreachable_sentinels() {
        let mut obs = ha();
        let tier = obs.sentinel.as_mut().unwrap();
        tier.sentinels[2].state = Err("connection refused".into());
        let report = evaluate(&obs, &all());
        // 2 of 3 still agree: only the reachability check fails.
        assert_only(&report, &[Check::SentinelUnreachable], &[]);
        assert!(
            detail(&report, Check::SentinelUnreachable)
                .contains("c-sentinel-2: connection refused")
        );

        let tier = obs.sentinel.as_mut().unwrap();
        tier.sentinels[1].state = Err("timed out".into());
        let report = evaluate(&obs, &all());
        // 1 of 3 is not a majority of the configured Sentinels.
        assert_only(
            &report,
            &[Check::SentinelUnreachable, Check::SentinelQuorumFailure],
            &[],
        );
        assert!(
            detail(&report, Check::SentinelQuorumFailure).contains("only 1 of 3 Sentinels name")
        );
        // 1 of 3 answering names no master (ADR 0014): the data pods decide, and agree.
        let master = choose_master(&obs.data, obs.sentinel.as_ref());
        assert_eq!(master.master, Some(ep("c-0")));
        assert!(
            master.reason.starts_with("only 1 of 3 Sentinels name"),
            "{}",
            master.reason
        );

        let tier = obs.sentinel.as_mut().unwrap();
        tier.sentinels[0].state = Err("timed out".into());
        let master = choose_master(&obs.data, obs.sentinel.as_ref());
        // No Sentinel: the data pods decide.
        assert_eq!(master.master, Some(ep("c-0")));
        assert!(
            master.reason.contains("no Sentinel named a master"),
            "{}",
            master.reason
        );
        obs.master = master;
        let report = evaluate(&obs, &all());
        assert_only(
            &report,
            &[Check::SentinelUnreachable, Check::SentinelQuorumFailure],
            &[
                Check::SentinelMasterDown,
                Check::SentinelMasterHostnameInvalid,
                Check::SentinelReplicaHostnamesInvalid,
            ],
        );
    }

    #[test]
    fn sentinels_that_disagree() {
        let mut obs = ha();
        let replicas = [ep("c-0"), ep("c-2")];
        obs.sentinel.as_mut().unwrap().sentinels[2] = sentinel_ok(2, &ep("c-1"), &replicas);
        let master = choose_master(&obs.data, obs.sentinel.as_ref());
        assert_eq!(master.master, Some(ep("c-0")));
        assert!(master.reason.contains("named by 2 of 3"));
        let report = evaluate(&obs, &all());
        assert_only(&report, &[Check::SentinelQuorumFailure], &[]);
        let text = detail(&report, Check::SentinelQuorumFailure);
        assert!(text.contains("disagree"), "{text}");
        assert!(
            text.contains("c-1.c-headless.ns.svc.cluster.local:6379 by c-sentinel-2"),
            "{text}"
        );

        // A 1:1 split among the answering Sentinels: the data pods decide.
        obs.sentinel.as_mut().unwrap().sentinels[0].state = Err("down".into());
        let master = choose_master(&obs.data, obs.sentinel.as_ref());
        assert_eq!(master.master, Some(ep("c-0")));
        assert!(
            master.reason.starts_with("the Sentinels are split"),
            "{}",
            master.reason
        );

        // A Sentinel that does not monitor the cluster.
        let mut obs = ha();
        obs.sentinel.as_mut().unwrap().sentinels[1].state = Ok(SentinelAnswer {
            master: Err("sentinel does not monitor a master named \"c\"".into()),
            replicas: Err("same".into()),
        });
        let report = evaluate(&obs, &all());
        assert_only(&report, &[Check::SentinelQuorumFailure], &[]);
        assert!(
            detail(&report, Check::SentinelQuorumFailure).contains("c-sentinel-1 names no master")
        );
    }

    #[test]
    fn sentinel_flags_the_master_down() {
        for (s_down, o_down, flags) in [(true, false, "s_down"), (true, true, "s_down,o_down")] {
            let mut obs = ha();
            if let Ok(answer) = &mut obs.sentinel.as_mut().unwrap().sentinels[1].state
                && let Ok(view) = &mut answer.master
            {
                view.s_down = s_down;
                view.o_down = o_down;
            }
            let report = evaluate(&obs, &all());
            assert_only(&report, &[Check::SentinelMasterDown], &[]);
            let text = detail(&report, Check::SentinelMasterDown);
            assert!(
                text.contains(&format!(
                    "c-sentinel-1 flags c-0.c-headless.ns.svc.cluster.local:6379 {flags}"
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn bare_ips_in_sentinel() {
        let mut obs = ha();
        let ip_master = Endpoint::new("10.244.0.7", PORT);
        let tier = obs.sentinel.as_mut().unwrap();
        tier.sentinels = (0..3)
            .map(|i| sentinel_ok(i, &ip_master, &[ep("c-1"), ep("c-2")]))
            .collect();
        let report = evaluate(&obs, &all());
        assert!(status(&report, Check::SentinelMasterHostnameInvalid) == Status::Fail);
        assert!(detail(&report, Check::SentinelMasterHostnameInvalid).contains("10.244.0.7:6379"));
        assert_eq!(
            status(&report, Check::SentinelReplicaHostnamesInvalid),
            Status::Pass
        );

        let mut obs = ha();
        let tier = obs.sentinel.as_mut().unwrap();
        tier.sentinels[0] = sentinel_ok(
            0,
            &ep("c-0"),
            &[ep("c-1"), Endpoint::new("10.244.0.9", PORT)],
        );
        let report = evaluate(&obs, &all());
        assert_only(&report, &[Check::SentinelReplicaHostnamesInvalid], &[]);
        assert!(
            detail(&report, Check::SentinelReplicaHostnamesInvalid)
                .contains("c-sentinel-0 lists replicas by IP: 10.244.0.9:6379")
        );

        assert!(is_bare_ip("10.0.0.1") && is_bare_ip("fd00::1") && is_bare_ip("[fd00::1]"));
        assert!(!is_bare_ip("c-0.c-headless.ns.svc.cluster.local") && !is_bare_ip("localhost"));
    }

    #[test]
    fn disabled_checks_are_reported_but_keep_the_observer_ready() {
        let mut obs = ha();
        obs.sentinel.as_mut().unwrap().sentinels[2].state = Err("connection refused".into());
        obs.health
            .replica_reads
            .insert("c-1".into(), ReplicaRead::Missing);
        let mut unready_on = all();
        unready_on.remove(&Check::SentinelUnreachable);
        unready_on.remove(&Check::ReplicaReadTestFailure);
        let report = evaluate(&obs, &unready_on);
        assert!(report.ready);
        assert_only(
            &report,
            &[Check::SentinelUnreachable, Check::ReplicaReadTestFailure],
            &[],
        );
        assert!(!report.checks[&Check::SentinelUnreachable].unready_on_failure);
        assert_eq!(report.failures().count(), 2);
        // Enabled again: unready.
        assert!(!evaluate(&obs, &all()).ready);
        // Nothing enabled: ready whatever fails.
        let mut broken = ha();
        broken.health = HealthTest::default();
        broken.master = MasterChoice {
            master: None,
            reason: "none".into(),
        };
        assert!(evaluate(&broken, &BTreeSet::new()).ready);
        assert!(!evaluate(&broken, &BTreeSet::from([Check::MasterUnreachable])).ready);
    }

    #[test]
    fn report_json_names_every_check() {
        let report = evaluate(&ha(), &all());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["ready"], true);
        for check in Check::ALL {
            assert_eq!(json["checks"][check.name()]["status"], "pass", "{check}");
            assert_eq!(json["checks"][check.name()]["unreadyOnFailure"], true);
        }
    }
}
