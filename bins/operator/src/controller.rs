//! The Controller over `Valkey` and its reconcile pass: a fixed pipeline of named steps,
//! observe (stores) → render → apply → probe (one round over the data pods and Sentinels, read by
//! all that follows) → act (master authority, then one roll step) → status (derived by
//! `vko-status`, written when changed, Events) → outcome (requeue).
//! A failed step is recorded and the pass goes on.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use vko_api::consts::labels;
use vko_api::{ConditionReason, Valkey, ValkeyStatus};
use vko_authority::{Electorate, LeaseDecision, PodProbe, ordinal_of};
use vko_render::{Names, OperatorPeer, PortPlan, RenderInputs, SkipReason};
use vko_status::downgrade::RefusedDowngrade;
use vko_status::recreation::{BLOCKED_RECHECK, NUDGE_INTERVAL};
use vko_status::storage::{self, StorageConflict};
use vko_status::{self as status, Blocked, PeerCount, SentinelPeers, Snapshot, StorageCheck};
use vko_valkey::{Dialer, TlsMaterial, TlsOptions};

use crate::apply::{self, DesiredObject, FIELD_MANAGER};
use crate::cache_sync::{self, SyncOutcome};
use crate::dataplane::{self, PlaneAnswers, SentinelAnswer};
use crate::discovery::{self, OptionalApis};
use crate::error::Error;
use crate::events::EventPublisher;
use crate::leader::Leadership;
use crate::master_lease;
use crate::metrics::Metrics;
use crate::nudge;
use crate::optional_watch::OptionalStores;
use crate::own_writes::OwnWrites;
use crate::roll;
use crate::secrets;
use crate::stores::{self, ManagedKind, Stores};

/// How soon a pass looks again while a Sentinel still has something to forget: a reset Sentinel
/// rediscovers its peers within ~2 s (hello messages) and its replicas within ~10 s (the
/// master's INFO), and the next one is reset only then.
const SENTINEL_RESET_RECHECK: Duration = Duration::from_secs(3);

/// Version written to `status.operatorVersion` and every object's annotation.
pub const OPERATOR_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Settings of the whole operator.
#[derive(Clone, Debug)]
pub struct OperatorConfig {
    /// Where this operator runs, for the NetworkPolicies that must admit it.
    pub operator_peer: Option<OperatorPeer>,
    pub operator_image: String,
    pub cluster_domain: String,
    /// Whether cert-manager and the Prometheus-Operator are served, refreshed while running.
    pub optional_apis: Arc<OptionalApis>,
}

/// What every pass shares.
pub struct Context {
    pub client: kube::Client,
    pub stores: Stores,
    /// The optional CRD kinds, watched while served (ADR 0046).
    pub optional: OptionalStores,
    pub events: EventPublisher,
    pub config: OperatorConfig,
    pub metrics: Arc<Metrics>,
    /// Asked before the pass and before every data-plane command (the API client asks it before
    /// every write too).
    pub leadership: Leadership,
    /// Consecutive failures per resource, for the backoff.
    failures: Mutex<HashMap<ObjectRef<Valkey>, u32>>,
    /// Consecutive passes per resource that ended not ready, without an error, and with the
    /// status unchanged (no progress), for [`not_ready_delay`].
    stalled: Mutex<HashMap<ObjectRef<Valkey>, u32>>,
    /// Since when each StatefulSet has been short of pods (ADR 0020).
    short_since: nudge::ShortSince,
    /// The data of referenced Secrets (the watch keeps metadata only; ADR 0021).
    secret_data: secrets::SecretData,
    /// Without Sentinel: what each master Lease looked like and since when (ADR 0022), on
    /// [`Context::clock`].
    lease_sightings: Mutex<HashMap<ObjectRef<Valkey>, vko_authority::LeaseSighting>>,
    /// What this process's last status write of each Valkey returned (ADR 0027).
    own_writes: OwnWrites,
    /// The password each cluster was last dialled with, the fallback while a rotation runs
    /// (ADR 0035).
    passwords: crate::password::Remembered,
    /// This process's monotonic clock, for the Lease sightings.
    clock: std::time::Instant,
}

impl Context {
    pub fn new(
        client: kube::Client,
        stores: Stores,
        optional: OptionalStores,
        events: EventPublisher,
        config: OperatorConfig,
        metrics: Arc<Metrics>,
        leadership: Leadership,
    ) -> Context {
        Context {
            client,
            stores,
            optional,
            events,
            config,
            metrics,
            leadership,
            failures: Mutex::new(HashMap::new()),
            stalled: Mutex::new(HashMap::new()),
            short_since: nudge::ShortSince::default(),
            secret_data: secrets::SecretData::default(),
            lease_sightings: Mutex::new(HashMap::new()),
            own_writes: OwnWrites::default(),
            passwords: crate::password::Remembered::default(),
            clock: std::time::Instant::now(),
        }
    }
}

/// Requeue delay after `failures` consecutive failed passes: 5 s doubling to 5 min.
pub fn backoff(failures: u32) -> Duration {
    let seconds = 5u64.saturating_mul(1u64 << failures.saturating_sub(1).min(6));
    Duration::from_secs(seconds.min(300))
}

/// Requeue delay of a pass that ended without an error but not ready, after `stalled` such passes
/// in a row that changed nothing in the status: 5 s while it makes progress (or for the first
/// stalled pass), then 10 s, 20 s, at most 30 s. Before, such a Valkey (pods crash-looping, an
/// image that does not pull) was passed over every 5 s forever, each pass dialling its pods, and
/// a few of them kept the `--max-concurrent-reconciles` slots from the healthy ones. Watch events
/// (a pod turning Ready, a StatefulSet change) still start a pass at once; the delay only bounds
/// how late a change that only the data plane shows (a replication link coming up) is noticed.
pub fn not_ready_delay(stalled: u32) -> Duration {
    let seconds = 5u64.saturating_mul(1u64 << stalled.saturating_sub(1).min(3));
    Duration::from_secs(seconds.min(30))
}

/// How often a pass blocked by a foreign object is retried at most. Its removal triggers nothing
/// (the foreign object has no owner reference to map it back), and passes that other events
/// trigger while it blocks drive the backoff to 5 min within seconds, so without this cap the
/// Valkey stayed blocked for minutes after the user removed the object.
const FOREIGN_OBJECT_RECHECK: Duration = Duration::from_secs(15);

/// How soon a pass refused by the leader gate looks again (a regained Lease is acted on this fast).
const NOT_LEADER_RECHECK: Duration = Duration::from_secs(5);

/// Requeue delay after `failures` consecutive failed passes that ended with `reason`.
pub fn requeue_delay(reason: ConditionReason, failures: u32) -> Duration {
    let delay = backoff(failures);
    match reason {
        ConditionReason::ForeignObject => delay.min(FOREIGN_OBJECT_RECHECK),
        ConditionReason::AdmissionWebhookDenied => delay.min(BLOCKED_RECHECK),
        // Not failing: waiting to lead again; a regained Lease is acted on within this.
        ConditionReason::NotLeader => delay.min(NOT_LEADER_RECHECK),
        _ => delay,
    }
}

/// The Secrets one `Valkey` references, as observed.
#[derive(Default)]
struct SecretView {
    password: Option<String>,
    /// With auth off: the password the pods not rolled yet still require, read from the Secret
    /// they mount ([`still_mounted_auth`]).
    still_required: Option<String>,
    auth_missing: bool,
    /// `vko_render::tls_material_fingerprint` of the data tier's Secret.
    tls_hash: Option<String>,
    /// `vko_render::tls_trust_fingerprint` of the data tier's Secret: what the data template
    /// carries (ADR 0038).
    tls_trust_hash: Option<String>,
    /// The fingerprint of the data Secret's certificate (`tls.crt`'s leaf), what the data pods'
    /// sidecars report serving once they reloaded it.
    tls_certificate: Option<String>,
    sentinel_tls_hash: Option<String>,
    /// The Sentinel tier's fingerprint: its own Secret's, or the data Secret's when they share it.
    sentinel_current_tls_hash: Option<String>,
    /// The Secret the Sentinels mount, as a Sentinel that reloads in place is measured against
    /// (ADR 0053).
    sentinel_tls: Option<SentinelTlsView>,
    tls: Option<TlsOptions>,
    problems: Vec<Error>,
}

/// The Sentinel tier's TLS Secret as a Sentinel that reloads its certificate in place is
/// rendered and measured (ADR 0053).
#[derive(Clone)]
struct SentinelTlsView {
    /// `vko_render::tls_trust_fingerprint` of its `ca.crt`: what such a Sentinel's template
    /// carries.
    trust: String,
    /// Its certificate's fingerprint, what such a Sentinel serves once it reloaded.
    certificate: Option<String>,
    /// Its `ca.crt`, to verify what a Sentinel serves.
    ca: Vec<u8>,
}

impl SentinelTlsView {
    fn of(secret: &Secret) -> SentinelTlsView {
        let ca = secret_key(secret, "ca.crt").unwrap_or_default();
        SentinelTlsView {
            trust: vko_render::tls_trust_fingerprint(ca),
            certificate: secret_key(secret, "tls.crt")
                .and_then(|cert| vko_valkey::certificate::leaf_fingerprint(cert).ok()),
            ca: ca.to_vec(),
        }
    }
}

fn secret_key<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| bytes.0.as_slice())
}

/// `tls.crt`, `tls.key` and `ca.crt` of a TLS Secret; `None` while it is not usable. A
/// user-provided Secret must hold all three, non-empty: every pod's config names `/tls/ca.crt`
/// and valkey-server refuses to start without it ("Failed to configure CA certificate(s)"), so
/// creating the StatefulSets would only crash-loop the pods. A cert-manager Secret without
/// `ca.crt` stays accepted (its `ca.crt` counts as empty), as before.
fn tls_material(secret: &Secret, user_provided: bool) -> Option<(&[u8], &[u8], &[u8])> {
    let cert = secret_key(secret, "tls.crt")?;
    let key = secret_key(secret, "tls.key")?;
    let ca = match secret_key(secret, "ca.crt").filter(|ca| !ca.is_empty()) {
        Some(ca) => ca,
        None if user_provided => return None,
        None => &[],
    };
    Some((cert, key, ca))
}

/// Step 1b: reads the auth and TLS Secrets from what the pass fetched.
fn observe_secrets(
    valkey: &Valkey,
    namespace: &str,
    names: &Names,
    fetched: &secrets::Fetched,
) -> Result<SecretView, Error> {
    let spec = &valkey.spec;
    let mut view = SecretView::default();
    if let Some(name) = spec.auth_secret_name() {
        let key = spec.auth_password_key();
        match fetched.get(name) {
            None => {
                view.auth_missing = true;
                view.problems.push(Error::SecretMissing {
                    what: "auth",
                    name: name.to_owned(),
                    problem: format!(
                        "does not exist in namespace {namespace} (spec.auth.secretName)"
                    ),
                });
            }
            Some(secret) => match secret_key(secret, key).map(vko_api::usable_password) {
                Some(Ok(password)) => view.password = Some(password.to_owned()),
                // Held back like a missing key: pods started now would run without a password.
                Some(Err(source)) => {
                    view.auth_missing = true;
                    view.problems.push(Error::PasswordUnusable {
                        name: name.to_owned(),
                        key: key.to_owned(),
                        source,
                    });
                }
                None => {
                    view.auth_missing = true;
                    view.problems.push(Error::SecretMissing {
                        what: "auth",
                        name: name.to_owned(),
                        problem: format!("has no key {key:?} (spec.auth.secretPasswordKey)"),
                    });
                }
            },
        }
    }
    if let Some(secrets) = vko_render::tls_secrets(valkey)? {
        let user_provided = spec.tls_secret_name().is_some();
        let data_hosts: Vec<String> = (0..spec.replicas_u32())
            .map(|ordinal| names.data_pod_fqdn(ordinal))
            .collect();
        let sentinel_hosts: Vec<String> = if spec.sentinel_enabled() {
            (0..spec.sentinel_replicas_u32())
                .map(|ordinal| names.sentinel_pod_fqdn(ordinal))
                .collect()
        } else {
            Vec::new()
        };
        // The pods that present each Secret's certificate.
        let data_secret_hosts: Vec<String> = match &secrets.sentinel {
            Some(_) => data_hosts,
            None => data_hosts
                .into_iter()
                .chain(sentinel_hosts.clone())
                .collect(),
        };
        let unusable = std::cell::RefCell::new(Vec::new());
        let fingerprint = |name: &str, hosts: &[String]| -> Option<(String, Arc<Secret>)> {
            let secret = fetched.get(name)?;
            let (cert, key, ca) = tls_material(secret, user_provided)?;
            // A user's certificate is checked before any pod starts with it: one that cannot
            // serve the pods would give a cluster that never replicates. (cert-manager's are
            // issued from our own Certificate, with the usages and names the pods need.)
            if user_provided {
                let problems = vko_valkey::certificate::serving_certificate_problems(
                    cert,
                    ca,
                    hosts,
                    vko_valkey::certificate::UnixTime::now(),
                );
                if !problems.is_empty() {
                    unusable.borrow_mut().push(Error::TlsCertificateUnusable {
                        name: name.to_owned(),
                        problems: problems.join("; "),
                    });
                    return None;
                }
            } else {
                // An issued certificate is held back until it names every pod that would mount
                // it: after `unifiedCertificate` is turned on, `<name>-tls` is re-issued with the
                // Sentinel names, and neither tier moves before that (one roll, onto material
                // that serves them all).
                let problem = match vko_valkey::certificate::host_names_not_covered(cert, hosts) {
                    Ok(uncovered) => uncovered.first().map(|first| {
                        format!(
                            "is issued for names that leave out {} of the {} pod host names \
                             that mount it (first: {first}); cert-manager re-issues it from \
                             the Certificate, the pods keep their current material until then",
                            uncovered.len(),
                            hosts.len()
                        )
                    }),
                    Err(problem) => Some(format!("is not usable yet: {problem}")),
                };
                if let Some(problem) = problem {
                    unusable.borrow_mut().push(Error::SecretMissing {
                        what: "TLS",
                        name: name.to_owned(),
                        problem,
                    });
                    return None;
                }
            }
            Some((
                vko_render::tls_material_fingerprint(cert, key, ca),
                secret.clone(),
            ))
        };
        let mut missing = |name: &str| {
            view.problems.push(Error::SecretMissing {
                what: "TLS",
                name: name.to_owned(),
                problem: if user_provided {
                    format!("does not exist in namespace {namespace} or lacks tls.crt/tls.key/ca.crt (spec.tls.secretName)")
                } else {
                    format!("is not issued yet by cert-manager in namespace {namespace}")
                },
            });
        };
        match fingerprint(&secrets.data, &data_secret_hosts) {
            Some((hash, secret)) => {
                if secrets.sentinel.is_none() {
                    view.sentinel_tls = Some(SentinelTlsView::of(&secret));
                }
                view.tls_hash = Some(hash);
                view.tls_trust_hash = Some(vko_render::tls_trust_fingerprint(
                    secret_key(&secret, "ca.crt").unwrap_or_default(),
                ));
                view.tls_certificate = secret_key(&secret, "tls.crt")
                    .and_then(|cert| vko_valkey::certificate::leaf_fingerprint(cert).ok());
                view.tls = Some(TlsOptions {
                    ca_pem: secret_key(&secret, "ca.crt").unwrap_or_default().to_vec(),
                    client_cert_pem: secret_key(&secret, "tls.crt").map(<[u8]>::to_vec),
                    client_key_pem: secret_key(&secret, "tls.key").map(<[u8]>::to_vec),
                    server_name: None,
                });
            }
            None => {
                if unusable.borrow().is_empty() {
                    missing(&secrets.data);
                }
            }
        }
        if let Some(sentinel) = &secrets.sentinel {
            let before = unusable.borrow().len();
            match fingerprint(sentinel, &sentinel_hosts) {
                Some((hash, secret)) => {
                    view.sentinel_tls_hash = Some(hash);
                    view.sentinel_tls = Some(SentinelTlsView::of(&secret));
                }
                None => {
                    if unusable.borrow().len() == before {
                        missing(sentinel);
                    }
                }
            }
        }
        view.sentinel_current_tls_hash = match &secrets.sentinel {
            Some(_) => view.sentinel_tls_hash.clone(),
            None => view.tls_hash.clone(),
        };
        view.problems.extend(unusable.into_inner());
    }
    Ok(view)
}

/// (kind, name) of objects in one namespace.
type ObjectKeys = BTreeSet<(ManagedKind, String)>;

/// Step 3 helper: the rendered objects to apply and the names held back on purpose.
fn desired_objects(
    rendered: &vko_render::Rendered,
    hold_statefulsets: bool,
) -> Result<(Vec<DesiredObject>, ObjectKeys), Error> {
    let mut keep: ObjectKeys = rendered
        .skipped
        .iter()
        .filter(|skipped| skipped.reason == SkipReason::TlsMaterialUnknown)
        .map(|skipped| (ManagedKind::StatefulSet, skipped.name.clone()))
        .collect();
    let mut desired = Vec::new();
    for value in rendered.objects()? {
        let object = DesiredObject::from_value(value)?;
        if hold_statefulsets && object.kind == ManagedKind::StatefulSet {
            keep.insert(object.key());
        } else {
            desired.push(object);
        }
    }
    Ok((desired, keep))
}

fn is_controlled_by<K: Resource>(object: &K, uid: &str) -> bool {
    object
        .meta()
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// Step 3 helper: compares the rendered data StatefulSet's `volumeClaimTemplates` with the live
/// one's. A claim set that differs holds the StatefulSet back (kept, not written); a size /
/// class / access-mode difference keeps the live claims in what is applied, so every other
/// change still goes through.
fn guard_volume_claim_templates(
    desired: &mut Vec<DesiredObject>,
    keep: &mut ObjectKeys,
    live: Option<&StatefulSet>,
) -> StorageCheck {
    let Some(live) = live else {
        return StorageCheck::NotCompared;
    };
    let Some(name) = live.metadata.name.clone() else {
        return StorageCheck::NotCompared;
    };
    let Some(index) = desired
        .iter()
        .position(|object| object.kind == ManagedKind::StatefulSet && object.name == name)
    else {
        return StorageCheck::NotCompared;
    };
    let live_templates = live
        .spec
        .as_ref()
        .and_then(|spec| spec.volume_claim_templates.clone())
        .unwrap_or_default();
    let wanted = &desired[index].body["spec"]["volumeClaimTemplates"];
    let desired_templates: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        if wanted.is_null() {
            Vec::new()
        } else {
            // The renderer wrote them from these types: a failure here is a bug, not input.
            match serde_json::from_value(wanted.clone()) {
                Ok(templates) => templates,
                Err(_) => return StorageCheck::NotCompared,
            }
        };
    let found = storage::conflict(&live_templates, &desired_templates);
    match &found {
        Some(StorageConflict::RecreateRequired { .. }) => {
            let held = desired.remove(index);
            keep.insert(held.key());
        }
        Some(StorageConflict::Immutable { .. }) => {
            if let Ok(live_value) = serde_json::to_value(&live_templates) {
                desired[index].body["spec"]["volumeClaimTemplates"] = live_value;
            }
        }
        None => {}
    }
    StorageCheck::from(found)
}

/// With auth off: the auth Secret and key the cluster's pods still mount (pods rendered with
/// auth on that the roll has not replaced yet). Their servers require that password until the
/// auth transition reaches them; an operator that restarted since auth was turned off no longer
/// remembers it and reads it from there (ADR 0035).
fn still_mounted_auth(pass: &Pass<'_>) -> Option<(String, String)> {
    if pass.valkey.spec.auth_enabled() {
        return None;
    }
    let Target {
        namespace, name, ..
    } = &pass.target;
    pass.ctx
        .stores
        .cluster_pods(namespace, name)
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter_map(|pod| pod.spec.as_ref())
        .find_map(|spec| {
            let (secret, key) = vko_render::mounted_auth_secret(spec)?;
            Some((secret.to_owned(), key.to_owned()))
        })
}

fn component_of(pod: &Pod) -> Option<&str> {
    pod.labels().get(labels::COMPONENT).map(String::as_str)
}

/// The reconcile pass: a fixed list of named steps. A failed step is recorded in `problems` and
/// the pass goes on; the most urgent problem becomes `ReconcileBlocked` and the pass's error.
pub async fn reconcile(valkey: Arc<Valkey>, ctx: Arc<Context>) -> Result<Action, Error> {
    // A pass that starts after the renew deadline passed (a resumed process) does nothing.
    ctx.leadership.check("reconcile")?;
    ctx.metrics.reconciles.inc();
    let valkey = ctx.own_writes.freshest(valkey);
    let Some(target) = Target::of(&valkey, &ctx.config)? else {
        // Being deleted: the garbage collector removes the children through their ownerReferences.
        ctx.own_writes.forget(&valkey.uid().unwrap_or_default());
        ctx.passwords.forget(&valkey.uid().unwrap_or_default());
        return Ok(Action::await_change());
    };
    let pass = Pass {
        ctx: &ctx,
        valkey: &valkey,
        target,
    };
    let mut problems: Vec<Error> = Vec::new();
    let still_mounted = still_mounted_auth(&pass);
    let mut referenced = secrets::referenced(&valkey);
    referenced.extend(still_mounted.as_ref().map(|(secret, _)| secret.clone()));
    let referenced: Vec<&str> = referenced.iter().map(String::as_str).collect();
    let fetched = ctx
        .secret_data
        .fetch(
            &ctx.client,
            &ctx.stores,
            &pass.target.namespace,
            &referenced,
        )
        .await;
    let mut observed = observe(&pass, &fetched)?;
    observed.secrets.still_required = still_mounted.and_then(|(secret, key)| {
        let bytes = secret_key(fetched.get(&secret)?, &key)?;
        vko_api::usable_password(bytes).ok().map(str::to_owned)
    });
    problems.append(&mut observed.secrets.problems);
    if let Some(refused) = &observed.refused_downgrade {
        problems.push(Error::DowngradeUnsupported(refused.clone()));
    }
    let rendered = render(&pass, &observed);
    if let Ok(rendered) = &rendered {
        problems.extend(cert_manager_missing(rendered));
    }
    let applied = apply(
        &pass,
        &rendered,
        observed.secrets.auth_missing,
        &mut problems,
    )
    .await;
    let short = recover(&pass, &mut problems).await;
    let plane = probe(&pass, &observed).await;
    let acted = act(&pass, &observed, &plane, &rendered, &mut problems).await;
    // The problem that needs a human first is the one reported.
    problems.sort_by_key(Error::priority);
    let snapshot = snapshot(&pass, &observed, plane, &acted, applied, &problems);
    let status_changed = write_status_and_events(&pass, &snapshot).await?;
    outcome(&pass, problems, &snapshot, &acted, status_changed, short)
}

/// The Certificates the render skipped because cert-manager's API is not served, as the problem
/// that names them (the reference skips a ServiceMonitor with a log line; a Certificate nobody
/// issues or renews is a problem the user has to hear about).
fn cert_manager_missing(rendered: &vko_render::Rendered) -> Option<Error> {
    let certificates: Vec<&str> = rendered
        .skipped
        .iter()
        .filter(|skipped| skipped.reason == SkipReason::CertManagerMissing)
        .map(|skipped| skipped.name.as_str())
        .collect();
    (!certificates.is_empty()).then(|| Error::CertManagerMissing {
        certificates: certificates.join(", "),
    })
}

/// One pass over one `Valkey`.
struct Pass<'a> {
    ctx: &'a Context,
    valkey: &'a Valkey,
    target: Target,
}

/// Who a pass is about: the fields the API server always sets, and the generated names.
struct Target {
    namespace: String,
    name: String,
    uid: String,
    names: Names,
}

impl Target {
    /// `None` while the `Valkey` is being deleted.
    fn of(valkey: &Valkey, config: &OperatorConfig) -> Result<Option<Target>, Error> {
        let namespace = valkey
            .namespace()
            .ok_or(Error::MissingObjectField("metadata.namespace"))?;
        let name = valkey.name_any();
        let uid = valkey
            .uid()
            .ok_or(Error::MissingObjectField("metadata.uid"))?;
        if valkey.metadata.deletion_timestamp.is_some() {
            return Ok(None);
        }
        let names = Names::new(&name, &namespace, &config.cluster_domain)?;
        Ok(Some(Target {
            namespace,
            name,
            uid,
            names,
        }))
    }
}

/// Step 1, observe: what the stores hold for one `Valkey` and the data of the Secrets it
/// references (fetched before: a GET only for a Secret version not read yet, ADR 0021).
struct Observed {
    secrets: SecretView,
    data_pods: BTreeMap<u32, Arc<Pod>>,
    sentinel_pods: Vec<Arc<Pod>>,
    /// `status.masterPod` as an ordinal below the data StatefulSet's count this pass.
    recorded: Option<u32>,
    /// A `spec.image` whose Valkey cannot load what the running one saved: the image the
    /// cluster runs is rendered instead, and the pass reports it.
    refused_downgrade: Option<RefusedDowngrade>,
    /// The data StatefulSet's count this pass: `spec.replicas`, or more while a scale-down waits
    /// for the master to leave the removed ordinals (ADR 0024).
    data_replicas: vko_roll::scale::DataReplicas,
    /// The Sentinels as rendered this pass reload a new certificate in place (ADR 0053).
    sentinel_reloads_tls: bool,
}

fn observe(pass: &Pass<'_>, fetched: &secrets::Fetched) -> Result<Observed, Error> {
    let Target {
        namespace, name, ..
    } = &pass.target;
    let stores = &pass.ctx.stores;
    let secrets = observe_secrets(pass.valkey, namespace, &pass.target.names, fetched)?;
    let pods = stores.cluster_pods(namespace, name);
    let data_pods: BTreeMap<u32, Arc<Pod>> = pods
        .iter()
        .filter(|pod| component_of(pod) == Some(labels::COMPONENT_VALKEY))
        .filter_map(|pod| Some((ordinal_of(name, &pod.name_any())?, pod.clone())))
        .collect();
    let sentinel_pods: Vec<Arc<Pod>> = pods
        .iter()
        .filter(|pod| component_of(pod) == Some(labels::COMPONENT_SENTINEL))
        .cloned()
        .collect();
    let recorded_anywhere = pass
        .valkey
        .status
        .as_ref()
        .and_then(|status| status.master_pod.as_deref())
        .and_then(|pod| ordinal_of(name, pod));
    let live_replicas = stores
        .statefulset(namespace, &pass.target.names.data_statefulset())
        .filter(|sts| is_controlled_by(sts.as_ref(), &pass.target.uid))
        .and_then(|sts| sts.spec.as_ref().and_then(|spec| spec.replicas))
        .map(|replicas| replicas.max(0).unsigned_abs());
    let labelled_master: Vec<u32> = data_pods
        .iter()
        .filter(|(_, pod)| pod.metadata.deletion_timestamp.is_none())
        .filter(|(_, pod)| {
            pod.labels().get(labels::INSTANCE_ROLE).map(String::as_str) == Some(labels::ROLE_MASTER)
        })
        .map(|(ordinal, _)| *ordinal)
        .collect();
    let data_replicas = vko_roll::scale::data_replicas(
        pass.valkey.spec.replicas_u32(),
        live_replicas,
        recorded_anywhere,
        &labelled_master,
    );
    if let Some(hold) = data_replicas.hold {
        tracing::info!(%namespace, %name, ?hold, keep = data_replicas.apply, "scale-down held until the master serves from an ordinal that stays");
    }
    let refused_downgrade = refused_downgrade(pass, &data_pods);
    let recorded = recorded_anywhere.filter(|ordinal| *ordinal < data_replicas.apply);
    // Decided for the image rendered this pass (the running one while a downgrade is refused).
    let sentinel_reloads_tls = {
        let mut rendered = pass.valkey.spec.clone();
        if let Some(refused) = &refused_downgrade {
            rendered.image = refused.running_image.clone();
        }
        vko_render::ValkeyVersion::sentinel_reloads_tls(&rendered)
    };
    Ok(Observed {
        secrets,
        data_pods,
        sentinel_pods,
        recorded,
        refused_downgrade,
        data_replicas,
        sentinel_reloads_tls,
    })
}

/// The image of the `valkey` container of a pod spec.
fn valkey_image(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Option<&str> {
    spec?
        .containers
        .iter()
        .find(|container| container.name == vko_render::VALKEY_CONTAINER)?
        .image
        .as_deref()
}

/// Step 1 helper: what the data tier runs (its live StatefulSet's image and every data pod's)
/// against `spec.image` (`vko_status::downgrade`).
fn refused_downgrade(
    pass: &Pass<'_>,
    data_pods: &BTreeMap<u32, Arc<Pod>>,
) -> Option<RefusedDowngrade> {
    let Target {
        namespace,
        uid,
        names,
        ..
    } = &pass.target;
    let live = pass
        .ctx
        .stores
        .statefulset(namespace, &names.data_statefulset())
        .filter(|sts| is_controlled_by(sts.as_ref(), uid));
    let live_spec = live.as_deref().and_then(|sts| sts.spec.as_ref());
    let persistent = pass.valkey.spec.persistence_enabled()
        || live_spec
            .and_then(|spec| spec.volume_claim_templates.as_ref())
            .is_some_and(|claims| !claims.is_empty());
    let running = live_spec
        .and_then(|spec| valkey_image(spec.template.spec.as_ref()))
        .into_iter()
        .chain(
            data_pods
                .values()
                .filter_map(|pod| valkey_image(pod.spec.as_ref())),
        );
    vko_status::downgrade::refused_downgrade(&pass.valkey.spec.image, running, persistent)
}

/// Step 2, render: every desired object, from the spec and what was observed.
fn render(
    pass: &Pass<'_>,
    observed: &Observed,
) -> Result<vko_render::Rendered, vko_render::RenderError> {
    let config = &pass.ctx.config;
    let mut inputs = RenderInputs::new(
        &pass.target.namespace,
        &config.operator_image,
        OPERATOR_VERSION,
    );
    inputs.cluster_domain = config.cluster_domain.clone();
    inputs.operator_peer = config.operator_peer.clone();
    inputs.owner = pass.valkey.controller_owner_ref(&());
    // The data pods reload a new certificate in place, so their template carries only the CA
    // (ADR 0038); so do Sentinels from Valkey 9.1 (ADR 0053). An older Sentinel cannot reload,
    // so every change of its Secret rolls it.
    inputs.tls_material_hash = observed.secrets.tls_trust_hash.clone();
    inputs.sentinel_tls_material_hash = if observed.sentinel_reloads_tls {
        observed
            .secrets
            .sentinel_tls
            .as_ref()
            .map(|tls| tls.trust.clone())
    } else {
        observed.secrets.sentinel_current_tls_hash.clone()
    };
    let served = config.optional_apis.served();
    inputs.cert_manager_present = served.cert_manager;
    inputs.prometheus_operator_present = served.prometheus_operator;
    inputs.recorded_master = observed.recorded;
    inputs.live_pod_ordinals = observed.data_pods.keys().copied().collect();
    let held_replicas = observed.data_replicas.apply;
    inputs.data_replicas =
        (held_replicas != pass.valkey.spec.replicas_u32()).then_some(held_replicas);
    match &observed.refused_downgrade {
        // Rendered with the image the cluster runs: the pod templates (and their hash) stay as
        // they are for the image, every other change still applies.
        Some(refused) => {
            let mut held = pass.valkey.clone();
            held.spec.image = refused.running_image.clone();
            vko_render::render(&held, &inputs)
        }
        None => vko_render::render(pass.valkey, &inputs),
    }
}

/// What the apply step found that the status reports.
struct Applied {
    storage: StorageCheck,
    /// Generated names held by objects this `Valkey` does not control (left untouched).
    foreign: Vec<(ManagedKind, String)>,
}

impl Applied {
    fn nothing_compared() -> Applied {
        Applied {
            storage: StorageCheck::NotCompared,
            foreign: Vec::new(),
        }
    }
}

/// Step 3, apply: server-side applies what was rendered (the StatefulSets held back while a
/// Secret is missing or unusable, claim changes guarded) and deletes what is no longer wanted.
async fn apply(
    pass: &Pass<'_>,
    rendered: &Result<vko_render::Rendered, vko_render::RenderError>,
    hold_statefulsets: bool,
    problems: &mut Vec<Error>,
) -> Applied {
    let rendered = match rendered {
        Ok(rendered) => rendered,
        Err(error) => {
            problems.push(Error::Render(error.clone()));
            return Applied::nothing_compared();
        }
    };
    let (mut desired, mut keep) = match desired_objects(rendered, hold_statefulsets) {
        Ok(objects) => objects,
        Err(error) => {
            problems.push(error);
            return Applied::nothing_compared();
        }
    };
    let Target {
        namespace,
        name,
        uid,
        names,
    } = &pass.target;
    let ctx = pass.ctx;
    let storage = guard_volume_claim_templates(
        &mut desired,
        &mut keep,
        ctx.stores
            .statefulset(namespace, &names.data_statefulset())
            .as_deref()
            .filter(|live| is_controlled_by(*live, uid)),
    );
    if let StorageCheck::Conflict(StorageConflict::RecreateRequired { difference }) = &storage {
        problems.push(Error::StorageRecreateRequired {
            name: names.data_statefulset(),
            difference: difference.clone(),
        });
    }
    let (stores, optional) = (&ctx.stores, &ctx.optional);
    let mut report = apply::apply_objects(&ctx.client, namespace, uid, &desired, |kind, object| {
        stores
            .object(kind, namespace, object)
            .or_else(|| optional.object(kind, namespace, object))
    })
    .await;
    if !report.applied.is_empty() {
        tracing::debug!(%namespace, %name, applied = ?report.applied, unchanged = report.unchanged.len(), "applied changed objects");
    }
    let wanted: BTreeSet<_> = desired.iter().map(DesiredObject::key).collect();
    let mut observed = stores.all_in(namespace);
    let served = ctx.config.optional_apis.served();
    for kind in ManagedKind::OPTIONAL {
        if !served.serves(kind) {
            continue;
        }
        // From the kind's watch once it has listed; one LIST by the cluster's label until then.
        if let Some(listed) = optional.listed_in(kind, namespace) {
            observed.extend(listed);
            continue;
        }
        match apply::list_unwatched(&ctx.client, namespace, name, kind).await {
            Ok(listed) => observed.extend(listed),
            Err(error) => problems.push(error),
        }
    }
    let stale = apply::stale_objects(&observed, &wanted, &keep, uid);
    apply::delete_objects(&ctx.client, namespace, &stale, &mut report).await;
    if !report.deleted.is_empty() {
        tracing::info!(%namespace, %name, deleted = ?report.deleted, "deleted objects no longer wanted");
    }
    problems.extend(report.errors);
    Applied {
        storage,
        foreign: report.foreign,
    }
}

/// Step 3b, recover: a live StatefulSet short of pods is nudged and an admission gate that
/// refuses its pods is reported (ADR 0020). Returns whether one is short.
async fn recover(pass: &Pass<'_>, problems: &mut Vec<Error>) -> bool {
    let Target {
        namespace,
        uid,
        names,
        ..
    } = &pass.target;
    let mut wanted = vec![names.data_statefulset()];
    if pass.valkey.spec.sentinel_enabled() {
        wanted.push(names.sentinel_statefulset());
    }
    let live: Vec<_> = wanted
        .iter()
        .filter_map(|name| pass.ctx.stores.statefulset(namespace, name))
        .filter(|statefulset| is_controlled_by(statefulset.as_ref(), uid))
        .collect();
    let live: Vec<&StatefulSet> = live.iter().map(AsRef::as_ref).collect();
    nudge::recover_short_statefulsets(
        &pass.ctx.client,
        &pass.ctx.short_since,
        namespace,
        &live,
        problems,
    )
    .await
}

/// Step 4, probe: the one probe round of this pass (once the data StatefulSet exists): every
/// data pod and, with Sentinel, every Sentinel, read by the authority, the roll and the status.
struct DataPlane {
    /// Reaches the pods by IP, verified against their FQDNs.
    dialer: Dialer,
    valkey_port: u16,
    sentinel_port: u16,
    statefulset_exists: bool,
    /// Ready data pods below `spec.replicas`.
    ready_count: usize,
    fqdns: Vec<String>,
    answers: PlaneAnswers,
    /// The authority's reading of the data pods below `spec.replicas`.
    probes: Vec<PodProbe>,
}

async fn probe(pass: &Pass<'_>, observed: &Observed) -> DataPlane {
    let spec = &pass.valkey.spec;
    let Target {
        namespace,
        name,
        uid,
        names,
    } = &pass.target;
    // Every pod of the StatefulSet as applied is a member (a held scale-down keeps its master).
    let replicas = observed.data_replicas.apply.max(spec.replicas_u32());
    let ports = PortPlan::of(spec);
    let secrets = &observed.secrets;
    let credentials = pass.ctx.passwords.for_cluster(
        uid,
        secrets.password.as_deref(),
        secrets.still_required.as_deref(),
    );
    let dialer = Dialer::with_credentials(credentials)
        .with_sentinel_auth(!spec.sentinel_auth_disabled())
        .with_tls(
            secrets
                .tls
                .clone()
                .filter(|_| ports.tls)
                .map(TlsMaterial::Pem),
        );
    let dialer = dataplane::by_pod_ip(
        dialer,
        observed.data_pods.values().chain(&observed.sentinel_pods),
    );
    // Read after the apply step: a StatefulSet it just created counts once the store shows it.
    let statefulset_exists = pass
        .ctx
        .stores
        .statefulset(namespace, &names.data_statefulset())
        .is_some_and(|sts| is_controlled_by(sts.as_ref(), uid));
    let ready_count = observed
        .data_pods
        .iter()
        .filter(|(ordinal, pod)| **ordinal < spec.replicas_u32() && dataplane::pod_is_ready(pod))
        .count();
    let (valkey_port, sentinel_port) = (ports.valkey_dial_port(), ports.sentinel_dial_port());
    let answers = if statefulset_exists {
        let no_sentinels: &[Arc<Pod>] = &[];
        let targets = dataplane::ProbeTargets {
            names,
            valkey_port,
            sentinel_port,
            data_pods: &observed.data_pods,
            replicas,
            sentinel_pods: if spec.sentinel_enabled() {
                &observed.sentinel_pods
            } else {
                no_sentinels
            },
            sentinel_tls_ca: secrets
                .sentinel_tls
                .as_ref()
                .filter(|_| observed.sentinel_reloads_tls)
                .map(|tls| tls.ca.as_slice()),
        };
        dataplane::probe_round(&dialer, &targets).await
    } else {
        PlaneAnswers::default()
    };
    let probes = answers
        .data
        .iter()
        .filter(|(ordinal, _)| **ordinal < replicas)
        .map(|(ordinal, answer)| dataplane::pod_probe(name, *ordinal, answer))
        .collect();
    DataPlane {
        dialer,
        valkey_port,
        sentinel_port,
        statefulset_exists,
        ready_count,
        fqdns: (0..replicas).map(|o| names.data_pod_fqdn(o)).collect(),
        answers,
        probes,
    }
}

/// What the master authority concluded (and did) in this pass.
#[derive(Default)]
struct Authority {
    master: Option<u32>,
    sentinel_failover: bool,
    sentinel_unaware: Vec<String>,
    /// Why the authority did not act, when it did not.
    note: Option<String>,
    /// It adopted or promoted a master: the roll waits and the pass requeues in 1 s.
    acted: bool,
    /// Without Sentinel: when to look at the master Lease again (its expiry, a holder settling).
    recheck: Option<Duration>,
    sentinel_peers: Option<SentinelPeers>,
}

/// Step 5, act: the master authority, then (unless it acted) one roll step.
struct Acted {
    authority: Authority,
    roll: Option<roll::RollStep>,
    /// A Sentinel still remembers what a scale-down removed (reset one at a time, ADR 0024).
    sentinels_to_forget: bool,
    /// The password rotation after this pass (ADR 0035); `None` without auth or not evaluated.
    password_rotation: Option<vko_status::password::PasswordRotation>,
}

async fn act(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    rendered: &Result<vko_render::Rendered, vko_render::RenderError>,
    problems: &mut Vec<Error>,
) -> Acted {
    let spec = &pass.valkey.spec;
    let mut authority = if !plane.statefulset_exists {
        Authority::default()
    } else if spec.sentinel_enabled() {
        sentinel_authority(pass, observed, plane).await
    } else if spec.replicas_u32() > 1 {
        operator_authority(pass, observed, plane, problems).await
    } else {
        Authority {
            master: plane
                .probes
                .iter()
                .find(|p| p.is_master())
                .map(|p| p.ordinal),
            ..Authority::default()
        }
    };
    // Auth turned on or off: the pods the roll has not reached yet are made to work with both
    // sides first (ADR 0035); the roll waits until they do.
    let auth_ready = !plane.statefulset_exists || auth_transition(pass, observed, plane).await;
    // Skipped in a pass in which the authority just acted (its effect is not observed yet) and
    // while the StatefulSets are held back.
    let roll = if plane.statefulset_exists
        && rendered.is_ok()
        && !observed.secrets.auth_missing
        && !authority.acted
        && auth_ready
    {
        roll_step(pass, observed, plane, rendered.as_ref().ok()).await
    } else {
        if pass
            .valkey
            .status
            .as_ref()
            .is_some_and(|s| s.rolling_update.is_some())
        {
            tracing::info!(
                namespace = %pass.target.namespace,
                name = %pass.target.name,
                statefulset = plane.statefulset_exists,
                rendered = rendered.is_ok(),
                auth_missing = observed.secrets.auth_missing,
                authority_acted = authority.acted,
                "roll step skipped this pass; the recorded roll stands"
            );
        }
        None
    };
    if let Some(step) = &roll {
        if let Some(promoted) = step.promoted {
            authority.master = Some(promoted);
        }
        if let Some(Error::WriteFailed {
            kind,
            name,
            message,
        }) = &step.failure
        {
            problems.push(Error::WriteFailed {
                kind: kind.clone(),
                name: name.clone(),
                message: message.clone(),
            });
        }
        for note in &step.decision.events {
            let event = status::EventSpec {
                type_: note.reason.event_type(),
                reason: note.reason.as_str().to_owned(),
                note: note.message.clone(),
            };
            publish(pass.ctx, pass.valkey, event).await;
        }
    }
    // A Sentinel roll waits for stale peers to be reset before it replaces a Sentinel (ADR 0024).
    let roll_idle = roll.as_ref().is_none_or(|step| {
        matches!(
            step.decision.action,
            vko_roll::Action::Idle
                | vko_roll::Action::Wait {
                    reason: vko_roll::WaitReason::SentinelQuorum,
                    ..
                }
        )
    });
    let sentinels_to_forget =
        spec.sentinel_enabled() && plane.statefulset_exists && roll_idle && !authority.acted && {
            reset_one_sentinel(pass, observed, plane, problems).await
        };
    let password_rotation = if plane.statefulset_exists && !authority.acted {
        rotate_password(pass, observed, plane).await
    } else {
        None
    };
    Acted {
        authority,
        roll,
        sentinels_to_forget,
        password_rotation,
    }
}

/// Auth turned on or off: the pods on the other side of the roll (ADR 0035).
async fn auth_transition(pass: &Pass<'_>, observed: &Observed, plane: &DataPlane) -> bool {
    let spec = &pass.valkey.spec;
    let names = &pass.target.names;
    let auth = spec.auth_enabled();
    let password = observed.secrets.password.as_deref();
    if auth && password.is_none() {
        return true;
    }
    let other_side = |pod: &Pod| {
        pod.metadata.deletion_timestamp.is_none()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.as_ref())
                .is_some()
            && pod
                .spec
                .as_ref()
                .is_some_and(|spec| vko_render::pod_has_password_file(spec) != auth)
    };
    let mut pods = Vec::new();
    if !auth {
        for (ordinal, pod) in &observed.data_pods {
            if other_side(pod) {
                pods.push(crate::password::TransitionPod {
                    name: pod.name_any(),
                    uid: pod.uid().unwrap_or_default(),
                    at: vko_valkey::switchover::Address::new(
                        names.data_pod_fqdn(*ordinal),
                        plane.valkey_port,
                    ),
                    sentinel: false,
                });
            }
        }
    }
    for pod in &observed.sentinel_pods {
        let ordinal = ordinal_of(&names.sentinel_statefulset(), &pod.name_any());
        if let Some(ordinal) = ordinal
            && other_side(pod)
        {
            pods.push(crate::password::TransitionPod {
                name: pod.name_any(),
                uid: pod.uid().unwrap_or_default(),
                at: vko_valkey::switchover::Address::new(
                    names.sentinel_pod_fqdn(ordinal),
                    plane.sentinel_port,
                ),
                sentinel: true,
            });
        }
    }
    if pods.is_empty() {
        return true;
    }
    crate::password::transition(
        &pass.ctx.passwords,
        &pass.target.uid,
        &plane.dialer,
        names.name(),
        password.filter(|_| auth),
        &pods,
        &pass.ctx.leadership,
    )
    .await
}

/// With auth on: the password rotation's step (ADR 0035).
async fn rotate_password(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
) -> Option<vko_status::password::PasswordRotation> {
    let spec = &pass.valkey.spec;
    let password = observed.secrets.password.as_deref()?;
    // While the roll that turns auth on has not reached every pod, a pod without the password
    // file must not be given a password: its sidecar and probes would be locked out.
    let before_auth = observed
        .data_pods
        .values()
        .chain(&observed.sentinel_pods)
        .filter_map(|pod| pod.spec.as_ref())
        .any(|spec| !vko_render::pod_has_password_file(spec));
    if before_auth {
        return None;
    }
    let grace = match spec.old_password_grace_period() {
        Ok(grace) => grace,
        Err(error) => {
            // The CRD admits only durations; one that still does not parse (an overflow) holds
            // the rotation where it is: the old password stays accepted.
            tracing::warn!(namespace = %pass.target.namespace, name = %pass.target.name, %error, "spec.auth.oldPasswordGracePeriod does not parse; the password rotation waits");
            return None;
        }
    };
    let names = &pass.target.names;
    let data = (0..spec.replicas_u32())
        .map(|ordinal| (names.data_pod(ordinal), ordinal))
        .collect();
    let sentinels = if spec.sentinel_enabled() {
        (0..spec.sentinel_replicas_u32())
            .map(|ordinal| {
                (
                    format!("{}-{ordinal}", names.sentinel_statefulset()),
                    ordinal,
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let targets = crate::password::Targets {
        dialer: &plane.dialer,
        names,
        valkey_port: plane.valkey_port,
        sentinel_port: plane.sentinel_port,
        data,
        sentinels,
        sentinel_auth: !spec.sentinel_auth_disabled(),
    };
    let accepted_since = pass
        .valkey
        .status
        .as_ref()
        .and_then(|status| status.password_rotation.as_ref())
        .and_then(|record| u64::try_from(record.accepted_since).ok())
        .map(vko_roll::Millis);
    let plan = crate::password::Plan {
        password,
        grace,
        accepted_since,
        now: roll::now(),
    };
    let rotation = crate::password::rotate(&targets, &plan, &pass.ctx.leadership).await;
    if rotation.step == vko_roll::password::PasswordStep::Settled {
        plane.dialer.password.forget_previous();
    }
    if let Some(failure) = &rotation.failure {
        tracing::warn!(namespace = %pass.target.namespace, name = %pass.target.name, failure, "retiring the old password failed");
    }
    Some(rotation)
}

/// With Sentinel, on a calm cluster with no roll in flight: `SENTINEL RESET` on at most one
/// Sentinel that remembers peers or replicas a scale-down removed (ADR 0024). Returns whether
/// anything is left to forget (the pass then requeues soon).
async fn reset_one_sentinel(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    problems: &mut Vec<Error>,
) -> bool {
    let spec = &pass.valkey.spec;
    let names = &pass.target.names;
    let plan = crate::scale::sentinel_to_reset(
        names,
        spec.sentinel_replicas_u32(),
        spec.replicas_u32(),
        &plane.answers.sentinels,
        &observed.sentinel_pods,
        &observed.data_pods,
    );
    let reset = match plan {
        vko_roll::scale::ResetPlan::Nothing => return false,
        vko_roll::scale::ResetPlan::Pending(why) => {
            tracing::debug!(namespace = %pass.target.namespace, name = %pass.target.name, why, "a SENTINEL RESET is due, not now");
            return true;
        }
        vko_roll::scale::ResetPlan::Reset(reset) => reset,
    };
    let note = crate::scale::describe(names, &reset);
    match crate::scale::reset(
        &plane.dialer,
        names,
        plane.sentinel_port,
        &reset,
        &pass.ctx.leadership,
    )
    .await
    {
        Ok(()) => {
            tracing::info!(namespace = %pass.target.namespace, name = %pass.target.name, "{note}");
            let event = status::EventSpec {
                type_: status::EventType::Normal,
                reason: "SentinelReset".into(),
                note,
            };
            publish(pass.ctx, pass.valkey, event).await;
        }
        Err(error) => {
            tracing::warn!(namespace = %pass.target.namespace, name = %pass.target.name, %error, "SENTINEL RESET failed");
            problems.push(error);
        }
    }
    true
}

/// With Sentinel: the master is what a majority of every Sentinel names (ADR 0014).
async fn sentinel_authority(pass: &Pass<'_>, observed: &Observed, plane: &DataPlane) -> Authority {
    let spec = &pass.valkey.spec;
    let Target { name, .. } = &pass.target;
    let sentinel_pods = &observed.sentinel_pods;
    // A Sentinel that considers the master down has not answered, for the authority.
    let answers: Vec<Option<&SentinelAnswer>> = plane
        .answers
        .sentinels
        .iter()
        .map(|s| s.answer.as_ref().filter(|a| !a.master_down))
        .collect();
    let reports: Vec<_> = answers.iter().map(|a| a.map(|a| a.report(name))).collect();
    let sentinels = spec.sentinel_replicas_u32();
    // The electorate is every Sentinel the spec asks for or that exists (ADR 0014).
    let electorate = Electorate::new(sentinels as usize, sentinel_pods.len());
    let verdict = vko_authority::sentinel_view(electorate, &reports);
    let all_ready = plane.ready_count == spec.replicas_u32() as usize
        && sentinel_pods.len() == sentinels as usize
        && sentinel_pods.iter().all(|pod| dataplane::pod_is_ready(pod));
    let mut answered: Vec<PeerCount> = sentinel_pods
        .iter()
        .zip(&answers)
        .filter_map(|(pod, answer)| {
            Some(PeerCount {
                pod: pod.name_any(),
                others: answer.as_ref()?.other_sentinels,
            })
        })
        .collect();
    answered.sort();
    Authority {
        master: verdict.master,
        sentinel_failover: verdict.master.is_none(),
        sentinel_unaware: vko_authority::replicas_unknown_to_sentinel(&verdict, &plane.probes),
        sentinel_peers: (all_ready && !answered.is_empty()).then_some(SentinelPeers {
            answers: answered,
            sentinels,
        }),
        ..Authority::default()
    }
}

/// Without Sentinel, above one replica: the operator is the authority through the master Lease
/// (ADR 0022): it grants the Lease to the master it adopts, keeps it, demotes a master that does
/// not hold it, and moves it before every promotion, which it makes only once an unreachable
/// holder's Lease has been unchanged for D + margin on this process's clock.
async fn operator_authority(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    problems: &mut Vec<Error>,
) -> Authority {
    let Target {
        namespace,
        name,
        names,
        ..
    } = &pass.target;
    let ctx = pass.ctx;
    let recorded = observed.recorded;
    let waiting = |note: String, recheck: Option<Duration>| Authority {
        master: recorded,
        note: Some(note),
        recheck,
        ..Authority::default()
    };
    let lease_name = vko_authority::master_lease_name(name);
    let lease = match master_lease::read(&ctx.client, namespace, &lease_name).await {
        Ok(lease) => lease,
        Err(error) => {
            let authority = waiting(error.to_string(), None);
            problems.push(error);
            return authority;
        }
    };
    let key = ObjectRef::from_obj(pass.valkey);
    let now = ctx.clock.elapsed();
    let view = lease.as_ref().map(|lease| {
        let version = lease
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        let holder = master_lease::holder_of(lease);
        let mut sightings = ctx
            .lease_sightings
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let sighting =
            vko_authority::LeaseSighting::seen(sightings.get(&key), version, holder, now);
        let view = sighting.view(name, now);
        sightings.insert(key.clone(), sighting);
        view
    });
    // Pods still on the Sentinel template (Sentinel just turned off) do not fence on the Lease.
    let lease_blind: Vec<u32> = observed
        .data_pods
        .iter()
        .filter(|(_, pod)| {
            pod.spec
                .as_ref()
                .is_some_and(vko_render::sidecar_runs_with_sentinel)
        })
        .map(|(ordinal, _)| *ordinal)
        .collect();
    match vko_authority::decide_master_by_lease(name, view, &plane.probes, &lease_blind) {
        LeaseDecision::Grant(ordinal) => {
            let pod = names.data_pod(ordinal);
            let owner = pass.valkey.controller_owner_ref(&());
            let granted = match &lease {
                // A Lease that proves nothing about the only master (ADR 0032): rewritten.
                Some(stale) => {
                    master_lease::transfer(&ctx.client, namespace, stale, &pod, &ctx.leadership)
                        .await
                }
                None => {
                    master_lease::grant(
                        &ctx.client,
                        namespace,
                        &lease_name,
                        owner,
                        &pod,
                        &ctx.leadership,
                    )
                    .await
                }
            };
            match granted {
                Ok(()) => {
                    tracing::info!(%namespace, %name, pod, rewritten = lease.is_some(), "master Lease granted to the only pod that answers master");
                    Authority {
                        master: Some(ordinal),
                        acted: true,
                        ..Authority::default()
                    }
                }
                Err(error) => {
                    let authority = waiting(error.to_string(), None);
                    problems.push(error);
                    authority
                }
            }
        }
        LeaseDecision::Steady { master, demote } => {
            let acted = recorded != Some(master) || !demote.is_empty();
            if !demote.is_empty() {
                // Stale masters (they lost the Lease, so their sidecars fenced them): made
                // replicas of the holder; their writes since the fence were never acknowledged.
                let note = format!(
                    "Demoted {} to replicas of {}, the master Lease holder",
                    demote
                        .iter()
                        .map(|o| names.data_pod(*o))
                        .collect::<Vec<_>>()
                        .join(", "),
                    names.data_pod(master)
                );
                demote_stale(pass, observed, plane, master, &demote).await;
                tracing::warn!(%namespace, %name, "{note}");
                let event = status::EventSpec {
                    type_: status::EventType::Warning,
                    reason: "StaleMasterDemoted".into(),
                    note,
                };
                publish(ctx, pass.valkey, event).await;
            }
            Authority {
                master: Some(master),
                acted,
                // A holder that stops renewing changes nothing the operator watches (ADR 0043).
                recheck: Some(vko_authority::LEASE_STEADY_RECHECK),
                ..Authority::default()
            }
        }
        LeaseDecision::Promote {
            candidate,
            move_lease,
            redirect,
        } => {
            if move_lease {
                let moved = match &lease {
                    Some(lease) => {
                        master_lease::transfer(
                            &ctx.client,
                            namespace,
                            lease,
                            &names.data_pod(candidate),
                            &ctx.leadership,
                        )
                        .await
                    }
                    None => Err(Error::PromotionRefused {
                        pod: names.data_pod(candidate),
                        why: "no master Lease".into(),
                    }),
                };
                if let Err(error) = moved {
                    let authority = waiting(error.to_string(), Some(Duration::from_secs(1)));
                    problems.push(error);
                    return authority;
                }
            }
            match promote(pass, observed, plane, candidate, &redirect).await {
                Ok(()) => {
                    let note = format!(
                        "Promoted {} (the most caught-up replica) after the master Lease of {} expired or moved",
                        names.data_pod(candidate),
                        view.and_then(|v| v.holder)
                            .map(|o| names.data_pod(o))
                            .unwrap_or_else(|| "nobody".into())
                    );
                    tracing::warn!(%namespace, %name, "{note}");
                    let event = status::EventSpec {
                        type_: status::EventType::Normal,
                        reason: "MasterPromoted".into(),
                        note,
                    };
                    publish(ctx, pass.valkey, event).await;
                    Authority {
                        master: Some(candidate),
                        acted: true,
                        ..Authority::default()
                    }
                }
                Err(error) => {
                    let authority = waiting(error.to_string(), None);
                    problems.push(error);
                    authority
                }
            }
        }
        LeaseDecision::Wait { why, recheck } => waiting(why, recheck),
    }
}

/// Points every stale master in `demote` at `master` (REPLICAOF); failures are logged, the next
/// pass tries again.
async fn demote_stale(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    master: u32,
    demote: &[u32],
) {
    let fqdn_of = |ordinal: u32| plane.fqdns.get(ordinal as usize).map(String::as_str);
    let Some(master_fqdn) = fqdn_of(master) else {
        return;
    };
    let targets: Vec<(u32, &Pod, &str)> = demote
        .iter()
        .filter_map(|o| Some((*o, observed.data_pods.get(o)?.as_ref(), fqdn_of(*o)?)))
        .collect();
    dataplane::repoint(
        &pass.target.name,
        master_fqdn,
        &targets,
        &plane.dialer,
        plane.valkey_port,
        &pass.ctx.leadership,
    )
    .await;
}

/// Promotes `candidate` and points `redirect` at it.
async fn promote(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    candidate: u32,
    redirect: &[u32],
) -> Result<(), Error> {
    let pod_of = |ordinal: u32| observed.data_pods.get(&ordinal).map(AsRef::as_ref);
    let fqdn_of = |ordinal: u32| plane.fqdns[ordinal as usize].as_str();
    let Some(candidate_pod) = pod_of(candidate) else {
        return Err(Error::PromotionRefused {
            pod: pass.target.names.data_pod(candidate),
            why: "the pod is gone".into(),
        });
    };
    let redirect: Vec<(u32, &Pod, &str)> = redirect
        .iter()
        .filter_map(|o| Some((*o, pod_of(*o)?, fqdn_of(*o))))
        .collect();
    dataplane::promote(
        &pass.target.name,
        (candidate, candidate_pod, fqdn_of(candidate)),
        &redirect,
        &plane.dialer,
        plane.valkey_port,
        &pass.ctx.leadership,
    )
    .await
}

/// One roll step (`vko_roll::next` and its one action).
async fn roll_step(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: &DataPlane,
    rendered: Option<&vko_render::Rendered>,
) -> Option<roll::RollStep> {
    let ctx = pass.ctx;
    let inputs = roll::RollInputs {
        client: &ctx.client,
        stores: &ctx.stores,
        valkey: pass.valkey,
        namespace: &pass.target.namespace,
        names: &pass.target.names,
        dialer: &plane.dialer,
        valkey_port: plane.valkey_port,
        sentinel_port: plane.sentinel_port,
        answers: &plane.answers,
        data_pods: &observed.data_pods,
        sentinel_pods: &observed.sentinel_pods,
        recorded_master: observed.recorded,
        rendered_data_template: rendered
            .and_then(|r| r.statefulsets.first())
            .and_then(|sts| sts.spec.as_ref())
            .map(|spec| &spec.template),
        operator_image: &ctx.config.operator_image,
        leadership: &ctx.leadership,
    };
    roll::step(&inputs).await
}

/// Step 6, status: the observed world the pure status derivation reads.
fn snapshot(
    pass: &Pass<'_>,
    observed: &Observed,
    plane: DataPlane,
    acted: &Acted,
    applied: Applied,
    problems: &[Error],
) -> Snapshot {
    let spec = &pass.valkey.spec;
    let Target {
        namespace,
        name,
        uid,
        names,
    } = &pass.target;
    let replicas = spec.replicas_u32();
    let authority = &acted.authority;
    Snapshot {
        name: name.clone(),
        generation: pass.valkey.metadata.generation,
        spec_replicas: spec.replicas(),
        sentinel: spec.sentinel_enabled(),
        statefulset_exists: plane.statefulset_exists,
        ready_pods: i32::try_from(plane.ready_count).unwrap_or(i32::MAX),
        probes: plane.probes,
        master: authority.master,
        sentinel_failover: authority.sentinel_failover,
        sentinel_unaware: authority.sentinel_unaware.clone(),
        authority_note: authority.note.clone(),
        blocked: problems.first().map(|error| Blocked {
            reason: error.reason(),
            message: error.to_string(),
        }),
        roll: acted.roll.as_ref().map(|step| step.decision.clone()),
        observer_ready: status::observer_ready(
            spec.observer_enabled(),
            pass.ctx
                .stores
                .deployments
                .get(&ObjectRef::new(&names.observer()).within(namespace))
                .as_deref(),
            uid,
        ),
        storage: applied.storage,
        sentinel_peers: authority.sentinel_peers.clone(),
        advisories: status::advisory::advisories(spec, &foreign_budgets(pass, &applied.foreign)),
        pod_problems: {
            let mut pods: Vec<&Pod> = observed
                .data_pods
                .values()
                .chain(&observed.sentinel_pods)
                .map(|pod| pod.as_ref())
                .collect();
            pods.sort_by_key(|pod| pod.metadata.name.as_deref());
            status::pods::pod_problems(pods, &Time(Timestamp::now()))
        },
        fenced_pods: status::pods::fenced_pods(
            observed
                .data_pods
                .values()
                .map(|pod| pod.as_ref())
                .filter(|pod| pod.metadata.deletion_timestamp.is_none()),
        ),
        labeled_masters: observed
            .data_pods
            .iter()
            .filter(|(ordinal, _)| **ordinal < replicas)
            .filter(|(_, pod)| {
                pod.labels().get(labels::INSTANCE_ROLE).map(String::as_str)
                    == Some(labels::ROLE_MASTER)
            })
            .map(|(_, pod)| pod.name_any())
            .collect(),
        tls_material: spec
            .tls_enabled()
            .then(|| tier_fingerprints(spec, observed, &plane.answers.sentinels)),
        password_rotation: acted.password_rotation.clone(),
    }
}

/// The PodDisruptionBudgets under the generated budget names that the apply step found held by
/// objects this `Valkey` does not control.
fn foreign_budgets(
    pass: &Pass<'_>,
    foreign: &[(ManagedKind, String)],
) -> Vec<status::advisory::ForeignBudget> {
    let names = &pass.target.names;
    [
        (names.data_statefulset(), false),
        (names.sentinel_statefulset(), true),
    ]
    .into_iter()
    .filter(|(name, _)| {
        foreign
            .iter()
            .any(|(kind, held)| *kind == ManagedKind::PodDisruptionBudget && held == name)
    })
    .map(|(name, sentinel)| status::advisory::ForeignBudget { name, sentinel })
    .collect()
}

/// The TLS fingerprints of both tiers: the Secrets' now and each pod's.
fn tier_fingerprints(
    spec: &vko_api::ValkeySpec,
    observed: &Observed,
    sentinel_answers: &[dataplane::SentinelPodAnswer],
) -> Vec<status::TierMaterial> {
    let secrets = &observed.secrets;
    let data_pods = observed
        .data_pods
        .values()
        .map(|pod| (pod.name_any(), status::data_pod_tls_material(pod)))
        .collect();
    let mut tiers = vec![status::TierMaterial {
        tier: "data",
        current: secrets
            .tls_trust_hash
            .as_deref()
            .zip(secrets.tls_certificate.as_deref())
            .map(|(trust, certificate)| status::data_tls_material(trust, certificate)),
        pods: data_pods,
    }];
    if spec.sentinel_enabled() {
        let served = |pod: &str| {
            sentinel_answers
                .iter()
                .find(|answer| answer.pod == pod)
                .and_then(|answer| answer.served_certificate.as_deref())
        };
        // A Sentinel that reloads in place is current when its template's CA and the
        // certificate it serves (measured by the probe round's handshake) are the Secret's, as
        // a data pod is (ADR 0053); otherwise by its template's full fingerprint.
        let (current, mut pods): (Option<String>, Vec<_>) = if observed.sentinel_reloads_tls {
            let current = secrets.sentinel_tls.as_ref().and_then(|tls| {
                let certificate = tls.certificate.as_deref()?;
                Some(status::data_tls_material(&tls.trust, certificate))
            });
            let pods = observed
                .sentinel_pods
                .iter()
                .map(|pod| {
                    let name = pod.name_any();
                    let material = status::pod_tls_fingerprint(pod)
                        .zip(served(&name))
                        .map(|(trust, certificate)| status::data_tls_material(&trust, certificate));
                    (name, material)
                })
                .collect();
            (current, pods)
        } else {
            let pods = observed
                .sentinel_pods
                .iter()
                .map(|pod| (pod.name_any(), status::pod_tls_fingerprint(pod)))
                .collect();
            (secrets.sentinel_current_tls_hash.clone(), pods)
        };
        // The store's order is arbitrary; the message must not change between passes.
        pods.sort();
        tiers.push(status::TierMaterial {
            tier: "Sentinel",
            current,
            pods,
        });
    }
    tiers
}

/// Writes the derived status when it changed, then one Event per transition; whether it changed.
async fn write_status_and_events(pass: &Pass<'_>, snapshot: &Snapshot) -> Result<bool, Error> {
    let current = pass.valkey.status.as_ref();
    let next = status::desired_status(current, snapshot, OPERATOR_VERSION, Time(Timestamp::now()));
    if current != Some(&next) {
        let Target {
            namespace, name, ..
        } = &pass.target;
        let written = write_status(&pass.ctx.client, namespace, name, &next).await?;
        pass.ctx.own_writes.record(pass.valkey, written);
        let advisories = status::advisory_events(current, &snapshot.advisories);
        let pods = status::pod_problem_events(current, &snapshot.pod_problems);
        let fenced = status::fenced_events(current, &snapshot.fenced_pods);
        for event in &fenced {
            pass.ctx
                .metrics
                .master_fences
                .get_or_create(&vec![
                    ("namespace", namespace.clone()),
                    ("name", name.clone()),
                    ("reason", event.reason.clone()),
                ])
                .inc();
        }
        let events = status::transition_events(current, &next).into_iter();
        for event in events.chain(advisories).chain(pods).chain(fenced) {
            publish(pass.ctx, pass.valkey, event).await;
        }
        return Ok(true);
    }
    Ok(false)
}

/// Step 7, requeue: the most urgent problem as the pass's error, else when to look again.
fn outcome(
    pass: &Pass<'_>,
    mut problems: Vec<Error>,
    snapshot: &Snapshot,
    acted: &Acted,
    status_changed: bool,
    short: bool,
) -> Result<Action, Error> {
    if !problems.is_empty() {
        let count = problems.len();
        let first = problems.remove(0);
        return Err(if count == 1 {
            first
        } else {
            Error::StepsFailed {
                count,
                first: Box::new(first),
            }
        });
    }
    let key = ObjectRef::from_obj(pass.valkey);
    pass.ctx
        .failures
        .lock()
        .map(|mut failures| failures.remove(&key))
        .ok();
    let verdict = status::data_plane_verdict(snapshot);
    let stalled = pass
        .ctx
        .stalled
        .lock()
        .map(|mut stalled| {
            if verdict.ready {
                stalled.remove(&key);
                0
            } else if status_changed {
                stalled.insert(key.clone(), 0);
                0
            } else {
                let count = stalled.entry(key.clone()).or_insert(0);
                *count = count.saturating_add(1);
                *count
            }
        })
        .unwrap_or(0);
    let roll_requeue = acted.roll.as_ref().and_then(|step| step.requeue);
    let delay = if let Some(delay) = roll_requeue {
        delay
    } else if acted.authority.acted {
        Duration::from_secs(1)
    } else if let Some(recheck) = acted.authority.recheck {
        // Waiting for the master Lease to expire or settle: look again right then.
        recheck.clamp(Duration::from_millis(200), Duration::from_secs(5))
    } else if acted.sentinels_to_forget {
        SENTINEL_RESET_RECHECK
    } else if let Some(recheck) = acted
        .password_rotation
        .as_ref()
        .and_then(|rotation| vko_roll::password::recheck(&rotation.step, roll::now()))
    {
        recheck
    } else if verdict.ready {
        Duration::from_secs(60)
    } else {
        not_ready_delay(stalled)
    };
    // A StatefulSet short of pods is looked at (and nudged when due) at least this often.
    Ok(Action::requeue(if short {
        delay.min(NUDGE_INTERVAL)
    } else {
        delay
    }))
}

async fn write_status(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    status: &ValkeyStatus,
) -> Result<Valkey, Error> {
    let api: Api<Valkey> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({
        "apiVersion": vko_api::API_VERSION,
        "kind": vko_api::KIND,
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(Error::StatusWrite)
}

async fn publish(ctx: &Context, valkey: &Valkey, event: status::EventSpec) {
    let reference = valkey.object_ref(&());
    if let Err(error) = ctx
        .events
        .publish(
            &reference,
            match event.type_ {
                status::EventType::Normal => kube::runtime::events::EventType::Normal,
                status::EventType::Warning => kube::runtime::events::EventType::Warning,
            },
            &event.reason,
            &event.note,
            "Reconcile",
        )
        .await
    {
        tracing::warn!(error = %Error::EventPublish(error), "event not published");
    }
}

/// Counts the failure and requeues with backoff.
pub fn error_policy(valkey: Arc<Valkey>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors
        .get_or_create(&vec![("reason", error.reason().as_str().to_owned())])
        .inc();
    let failures = ctx
        .failures
        .lock()
        .map(|mut failures| {
            let count = failures
                .entry(ObjectRef::from_obj(valkey.as_ref()))
                .or_insert(0);
            *count = count.saturating_add(1);
            *count
        })
        .unwrap_or(1);
    let delay = requeue_delay(error.reason(), failures);
    tracing::warn!(
        namespace = valkey.namespace().unwrap_or_default(),
        name = valkey.name_any(),
        reason = error.reason().as_str(),
        %error,
        retry_in = ?delay,
        "reconcile failed"
    );
    Action::requeue(delay)
}

/// Pause of the Controller's merged trigger stream after an error. kube-runtime's default there
/// grows to 30 s and pauses *every* watch at once (and with them their stores), so after an API
/// server restart each of the 13 watches' stale-version error stalled all of them again and the
/// operator reconciled from stale stores for minutes. Each owned watch backs off on its own
/// (`reflect`); this only keeps the main Valkey watch from retrying in a tight loop.
struct TriggerPause;

impl Iterator for TriggerPause {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(500))
    }
}

impl kube::runtime::utils::Backoff for TriggerPause {
    fn reset(&mut self) {}
}

/// Everything `run` needs from main.
pub struct RunOptions {
    pub config: OperatorConfig,
    pub concurrency: u16,
    pub reporter_instance: Option<String>,
    /// Set once every store has listed.
    pub on_ready: Box<dyn FnOnce() + Send>,
    /// How long the stores may take to list before the operator gives up (and stops).
    pub cache_sync_timeout: Duration,
    /// Filled with the stores still listing when `cache_sync_timeout` passed; `shutdown` is
    /// cancelled then.
    pub sync_failure: Arc<std::sync::OnceLock<Vec<&'static str>>>,
    pub shutdown: tokio_util::sync::CancellationToken,
    /// The leader gate (always open without `--leader-elect`).
    pub leadership: Leadership,
}

/// Builds the watches and the Controller and runs it until `shutdown`.
pub async fn run(
    clients: crate::kube_clients::KubeClients,
    metrics_slot: Arc<std::sync::OnceLock<Arc<Metrics>>>,
    options: RunOptions,
) {
    let (stores, owned_streams, mapped_streams) = Stores::reflect(&clients.watch);

    let controller = Controller::new(
        Api::<Valkey>::all(clients.watch.clone()),
        watcher::Config::default(),
    )
    .with_config(kube::runtime::controller::Config::default().concurrency(options.concurrency))
    .trigger_backoff(TriggerPause);
    let valkeys = controller.store();
    let metrics = Arc::new(Metrics::new(Some(valkeys.clone()), OPERATOR_VERSION));
    let _ = metrics_slot.set(metrics.clone());

    {
        let stores = stores.clone();
        let valkeys = valkeys.clone();
        let on_ready = options.on_ready;
        let timeout = options.cache_sync_timeout;
        let sync_failure = options.sync_failure;
        let shutdown = options.shutdown.clone();
        tokio::spawn(async move {
            let mut waits = stores.initial_lists();
            waits.push(stores::store_wait("Valkey", valkeys));
            match cache_sync::wait_for_stores(waits, timeout, cache_sync::PENDING_LOG_INTERVAL)
                .await
            {
                SyncOutcome::Ready => {
                    tracing::info!("every watch has listed; ready");
                    on_ready();
                }
                SyncOutcome::TimedOut { pending } => {
                    tracing::error!(
                        ?pending,
                        timeout_seconds = timeout.as_secs(),
                        "these stores have not listed within the cache sync timeout; stopping"
                    );
                    let _ = sync_failure.set(pending);
                    shutdown.cancel();
                }
                SyncOutcome::Stopped { stores } => {
                    tracing::debug!(?stores, "watches stopped before their initial list");
                }
            }
        });
    }

    let events = EventPublisher::new(
        clients.request.clone(),
        "vko-operator",
        options.reporter_instance,
    );
    let optional = OptionalStores::spawn(
        &clients.watch,
        options.config.optional_apis.clone(),
        &options.shutdown,
    );
    let ctx = Arc::new(Context::new(
        clients.request.clone(),
        stores.clone(),
        optional,
        events,
        options.config,
        metrics,
        options.leadership,
    ));
    // cert-manager or the Prometheus-Operator installed (or removed) while running: every Valkey
    // is reconciled again.
    let (groups_changed, groups_changes) = tokio::sync::mpsc::channel(1);
    discovery::spawn_watches(
        &clients.watch,
        ctx.config.optional_apis.clone(),
        groups_changed,
        &options.shutdown,
    );
    let secret_valkeys = valkeys.clone();
    let shutdown = options.shutdown.clone();
    owned_streams
        .trigger(controller)
        .reconcile_all_on(futures::stream::unfold(
            groups_changes,
            |mut changes| async move { changes.recv().await.map(|()| ((), changes)) },
        ))
        .watches_stream(mapped_streams.pods, |pod: Pod| {
            let cluster = pod.labels().get(labels::CLUSTER).cloned();
            let namespace = pod.namespace();
            cluster.and_then(|cluster| {
                namespace.map(|namespace| ObjectRef::<Valkey>::new(&cluster).within(&namespace))
            })
        })
        .watches_stream(
            mapped_streams.secrets,
            move |secret: PartialObjectMeta<Secret>| {
                secrets::valkeys_referencing(
                    &secret_valkeys.state(),
                    secret.namespace().as_deref(),
                    &secret.name_any(),
                )
            },
        )
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "controller event");
            }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_foreign_object_block_is_rechecked_within_fifteen_seconds() {
        assert_eq!(
            requeue_delay(ConditionReason::ForeignObject, 30),
            Duration::from_secs(15)
        );
        assert_eq!(
            requeue_delay(ConditionReason::ForeignObject, 1),
            Duration::from_secs(5)
        );
        assert_eq!(
            requeue_delay(ConditionReason::WriteFailed, 30),
            Duration::from_secs(300)
        );
    }

    #[test]
    fn a_not_ready_valkey_without_progress_backs_off_to_thirty_seconds() {
        let delays: Vec<u64> = (0..7).map(|n| not_ready_delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 5, 10, 20, 30, 30, 30]);
        assert_eq!(not_ready_delay(u32::MAX), Duration::from_secs(30));
    }

    #[test]
    fn backoff_doubles_from_five_seconds_up_to_five_minutes() {
        assert_eq!(backoff(1), Duration::from_secs(5));
        assert_eq!(backoff(2), Duration::from_secs(10));
        assert_eq!(backoff(4), Duration::from_secs(40));
        assert_eq!(backoff(30), Duration::from_secs(300));
    }

    /// The `Valkey` `namespace/name` with `spec` (and the image every test uses).
    fn valkey(namespace: &str, name: &str, mut spec: serde_json::Value) -> Arc<Valkey> {
        spec["image"] = "valkey/valkey:8.0".into();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                "metadata": {"name": name, "namespace": namespace},
                "spec": spec,
            }))
            .unwrap(),
        )
    }

    #[test]
    fn a_secret_event_maps_to_the_valkeys_that_reference_it() {
        let valkeys = vec![
            valkey("ns", "a", serde_json::json!({"auth": {"secretName": "pw"}})),
            valkey(
                "ns",
                "b",
                serde_json::json!({"tls": {"enabled": true, "secretName": "pw"}}),
            ),
            valkey(
                "other",
                "c",
                serde_json::json!({"auth": {"secretName": "pw"}}),
            ),
            valkey("ns", "d", serde_json::json!({})),
        ];
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pw", "namespace": "ns"}}))
        .unwrap();
        let refs = secrets::valkeys_referencing(
            &valkeys,
            secret.namespace().as_deref(),
            &secret.name_any(),
        );
        let names: Vec<_> = refs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, vec!["a", "b"]);
    }

    /// The auth Secret `pw` in `ns` with `password` under the key `password`, observed for a
    /// Valkey with auth on.
    fn observe_auth(password: &[u8]) -> SecretView {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "pw", "namespace": "ns"},
            "data": {"password": k8s_openapi::ByteString(password.to_vec())}
        }))
        .unwrap();
        let fetched = secrets::Fetched::from([("pw".to_owned(), Arc::new(secret))]);
        let valkey = valkey("ns", "a", serde_json::json!({"auth": {"secretName": "pw"}}));
        let names = Names::new("a", "ns", "cluster.local").unwrap();
        observe_secrets(&valkey, "ns", &names, &fetched).unwrap()
    }

    #[test]
    fn an_empty_or_blank_password_holds_the_cluster_back_and_names_secret_and_key() {
        for (value, problem) in [
            (&b""[..], "is empty"),
            (b"  \t", "holds only whitespace"),
            (b"\xff", "is not valid UTF-8"),
        ] {
            let view = observe_auth(value);
            assert!(
                view.auth_missing,
                "{value:?}: the StatefulSets are held back"
            );
            assert_eq!(view.password, None, "{value:?}: never dialled with");
            let [error] = view.problems.as_slice() else {
                panic!("{value:?}: one problem, got {:?}", view.problems);
            };
            assert_eq!(error.reason(), ConditionReason::PasswordUnusable);
            let message = error.to_string();
            for part in ["auth Secret pw", "\"password\"", problem] {
                assert!(message.contains(part), "{message:?} names {part:?}");
            }
        }
        let view = observe_auth(b"s3cret");
        assert!(!view.auth_missing && view.problems.is_empty());
        assert_eq!(view.password.as_deref(), Some("s3cret"));
    }

    #[test]
    fn a_certificate_skipped_for_want_of_cert_manager_is_a_named_problem() {
        let spec = serde_json::json!({"sentinel": {"enabled": true}, "tls": {"enabled": true,
            "certManager": {"issuer": {"kind": "ClusterIssuer", "name": "ca"}}}});
        let mut valkey = Valkey::clone(&valkey("ns", "a", spec));
        valkey.metadata.uid = Some("u".into());
        let mut inputs = RenderInputs::new("ns", "img", "v");
        inputs.owner = valkey.controller_owner_ref(&());
        inputs.cert_manager_present = false;
        let rendered = vko_render::render(&valkey, &inputs).unwrap();
        let error = cert_manager_missing(&rendered).unwrap();
        assert_eq!(error.reason(), ConditionReason::CertManagerMissing);
        let message = error.to_string();
        for part in [
            "a-tls",
            "certificates.cert-manager.io",
            "spec.tls.secretName",
            "established",
        ] {
            assert!(message.contains(part), "{message:?} names {part:?}");
        }
        inputs.cert_manager_present = true;
        let rendered = vko_render::render(&valkey, &inputs).unwrap();
        assert!(cert_manager_missing(&rendered).is_none());
    }

    /// A cert-manager-issued Secret `a-tls` whose certificate names `dns` (self-signed: the
    /// issuer's chain is not checked for issued material).
    fn issued_secret(dns: &[&str]) -> Secret {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = dns.iter().map(|name| (*name).to_owned()).collect();
        let cert = rcgen::CertificateParams::new(names)
            .unwrap()
            .self_signed(&key)
            .unwrap();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a-tls", "namespace": "ns"},
            "stringData": {},
            "data": {
                "tls.crt": k8s_openapi::ByteString(cert.pem().into_bytes()),
                "tls.key": k8s_openapi::ByteString(key.serialize_pem().into_bytes()),
                "ca.crt": k8s_openapi::ByteString(cert.pem().into_bytes()),
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_unified_certificate_not_yet_naming_the_sentinels_holds_both_tiers() {
        let valkey = valkey(
            "ns",
            "a",
            serde_json::json!({"replicas": 1, "sentinel": {"enabled": true, "replicas": 1},
                "tls": {"enabled": true, "unifiedCertificate": true,
                    "certManager": {"issuer": {"kind": "ClusterIssuer", "name": "ca"}}}}),
        );
        let names = Names::new("a", "ns", "cluster.local").unwrap();
        let observe = |secret: Secret| {
            let fetched = secrets::Fetched::from([("a-tls".to_owned(), Arc::new(secret))]);
            observe_secrets(&valkey, "ns", &names, &fetched).unwrap()
        };
        // Issued before the switch: the data pods only.
        let view = observe(issued_secret(&["*.a-headless.ns.svc.cluster.local"]));
        assert_eq!(view.tls_hash, None, "held back until re-issued");
        let [error] = view.problems.as_slice() else {
            panic!("one problem, got {:?}", view.problems);
        };
        assert_eq!(error.reason(), ConditionReason::SecretMissing);
        let message = error.to_string();
        for part in [
            "a-tls",
            "1 of the 2 pod host names",
            "a-sentinel-0.a-sentinel-headless",
        ] {
            assert!(message.contains(part), "{message:?} names {part:?}");
        }
        // Re-issued with the Sentinel names: both tiers go ahead on it.
        let view = observe(issued_secret(&[
            "*.a-headless.ns.svc.cluster.local",
            "*.a-sentinel-headless.ns.svc.cluster.local",
        ]));
        assert!(view.problems.is_empty(), "{:?}", view.problems);
        assert!(view.tls_hash.is_some());
        assert_eq!(view.sentinel_current_tls_hash, view.tls_hash);
        // What a reloading Sentinel (ADR 0053) is rendered and measured with: the shared
        // Secret's CA fingerprint (the data template's too), certificate and CA.
        let sentinel = view
            .sentinel_tls
            .as_ref()
            .expect("the Sentinel tier's TLS view");
        assert_eq!(Some(&sentinel.trust), view.tls_trust_hash.as_ref());
        assert_eq!(sentinel.certificate, view.tls_certificate);
        assert_eq!(
            Some(sentinel.ca.as_slice()),
            view.tls.as_ref().map(|tls| tls.ca_pem.as_slice())
        );
    }

    /// A Secret holding `keys` of `tls.crt` = "cert", `tls.key` = "key", `ca.crt` = "ca".
    fn secret_with(keys: &[&str]) -> Secret {
        let data: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|key| {
                let base64 = match *key {
                    "tls.crt" => "Y2VydA==",
                    "tls.key" => "a2V5",
                    _ => "Y2E=",
                };
                ((*key).to_owned(), base64.into())
            })
            .collect();
        serde_json::from_value(serde_json::json!({"metadata": {"name": "t"}, "data": data}))
            .unwrap()
    }

    #[test]
    fn a_user_provided_tls_secret_needs_its_ca_a_cert_manager_one_does_not() {
        let full = secret_with(&["tls.crt", "tls.key", "ca.crt"]);
        let material: Option<(&[u8], &[u8], &[u8])> =
            Some((b"cert".as_slice(), b"key".as_slice(), b"ca".as_slice()));
        assert_eq!(tls_material(&full, true), material);
        assert_eq!(tls_material(&full, false), material);

        let no_ca = secret_with(&["tls.crt", "tls.key"]);
        assert_eq!(tls_material(&no_ca, true), None);
        assert_eq!(
            tls_material(&no_ca, false),
            Some((b"cert".as_slice(), b"key".as_slice(), b"".as_slice()))
        );
        let mut empty_ca = full.clone();
        if let Some(data) = empty_ca.data.as_mut() {
            data.insert("ca.crt".into(), k8s_openapi::ByteString(Vec::new()));
        }
        assert_eq!(tls_material(&empty_ca, true), None);

        for keys in [&["tls.key", "ca.crt"][..], &["tls.crt", "ca.crt"][..]] {
            let partial = secret_with(keys);
            assert_eq!(tls_material(&partial, true), None, "{keys:?}");
            assert_eq!(tls_material(&partial, false), None, "{keys:?}");
        }
    }

    /// The ForeignObject path against a mock API server (tower-test, the kube-rs controller-rs
    /// pattern): every request is recorded and answered; the scenario fails if the foreign
    /// ConfigMap is patched or deleted.
    /// A mock API server that plays a [`Scenario`]: every request must be the next expected one
    /// (method and path, in order); a request out of order, one more than expected, or one
    /// expected and never made fails the test (kube-rs/controller-rs's fixtures pattern).
    mod mock_api {
        use super::*;
        use http::{Request, Response};
        use kube::client::Body;
        use kube::runtime::reflector::store::Writer;

        /// One request the server answered (its method and path are the script's).
        struct Recorded {
            path: String,
            body: serde_json::Value,
        }

        /// One pass's expected API calls, in order.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Scenario {
            /// A ConfigMap under the generated name belongs to someone else: every other object
            /// is applied, the foreign one never written; status and a Warning Event report it.
            ForeignConfigMap,
            /// The auth Secret does not exist: everything but the StatefulSet is applied (held
            /// back), then the status patch and the Warning Event, and nothing else (no pod is
            /// dialled, the roll does not run).
            MissingAuthSecret,
            /// Any request is answered (a pass that only builds the state a later scenario
            /// starts from).
            Setup,
            /// Every object is live as applied and the status is current: not one request.
            SteadyState,
            /// Someone edited the live ConfigMap: it alone is written back.
            DriftedConfigMap,
            /// A spec change that only the data StatefulSet renders (pod annotations): it alone
            /// is written, then the status (its observedGeneration).
            PodAnnotationsChanged,
        }

        const SIDECAR_RBAC: [&str; 3] = [
            "PATCH /api/v1/namespaces/ns/serviceaccounts/a-sidecar",
            "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/a-sidecar",
            "PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/ns/rolebindings/a-sidecar",
        ];
        const SERVICES: [&str; 2] = [
            "PATCH /api/v1/namespaces/ns/services/a-headless",
            "PATCH /api/v1/namespaces/ns/services/a-rw",
        ];
        const CONFIG_MAP: &str = "PATCH /api/v1/namespaces/ns/configmaps/a-config";
        const STATEFULSET: &str = "PATCH /apis/apps/v1/namespaces/ns/statefulsets/a";
        const STATUS: &str = "PATCH /apis/vko.gtrfc.com/v1/namespaces/ns/valkeys/a/status";
        const EVENT: &str = "POST /apis/events.k8s.io/v1/namespaces/ns/events";

        /// The calls that create an object the stores do not know: the GET that finds no one
        /// holding its name (ADR 0028), then the apply.
        fn created(patch: &str) -> [String; 2] {
            [patch.replacen("PATCH", "GET", 1), patch.to_owned()]
        }

        impl Scenario {
            fn expected(&self) -> Vec<String> {
                match self {
                    Scenario::Setup | Scenario::SteadyState => return Vec::new(),
                    Scenario::DriftedConfigMap => return vec![CONFIG_MAP.to_owned()],
                    Scenario::PodAnnotationsChanged => {
                        return vec![STATEFULSET.to_owned(), STATUS.to_owned()];
                    }
                    Scenario::ForeignConfigMap | Scenario::MissingAuthSecret => {}
                }
                let mut calls: Vec<String> = SIDECAR_RBAC.into_iter().flat_map(created).collect();
                match self {
                    // The store does not show the unlabelled foreign ConfigMap: the GET finds it,
                    // and it is never written; the StatefulSet is applied.
                    Scenario::ForeignConfigMap => {
                        calls.push(CONFIG_MAP.replacen("PATCH", "GET", 1));
                        calls.extend(SERVICES.into_iter().flat_map(created));
                        calls.extend(created(STATEFULSET));
                    }
                    // The ConfigMap applied, the StatefulSet held back.
                    Scenario::MissingAuthSecret => {
                        calls.extend(created(CONFIG_MAP));
                        calls.extend(SERVICES.into_iter().flat_map(created));
                    }
                    _ => {}
                }
                calls.extend([STATUS, EVENT].map(str::to_owned));
                if *self == Scenario::ForeignConfigMap {
                    // Its Valkey has no spec.auth: the AuthDisabled configuration warning.
                    calls.push(EVENT.to_owned());
                }
                calls
            }

            /// Serves the expected calls in order (the status patch echoes the status, every other
            /// write echoes its body with a UID); returns what was received once the client is
            /// gone. A deviation is answered with 500 and reported by [`Played::assert_exact`].
            fn play(
                self,
                mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
            ) -> tokio::task::JoinHandle<Played> {
                let expected = self.expected();
                let answer_anything = matches!(self, Scenario::Setup);
                tokio::spawn(async move {
                    let mut played = Played {
                        recorded: Vec::new(),
                        deviations: Vec::new(),
                        missing: Vec::new(),
                    };
                    let mut next = expected.into_iter();
                    while let Some((request, respond)) = handle.next_request().await {
                        let method = request.method().to_string();
                        let path = request.uri().path().to_owned();
                        let call = format!("{method} {path}");
                        let bytes = request.into_body().collect_bytes().await.unwrap();
                        let body: serde_json::Value =
                            serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                        let wanted = if answer_anything {
                            Some(call.clone())
                        } else {
                            next.next()
                        };
                        let reply = if wanted.as_deref() != Some(call.as_str()) {
                            played.deviations.push(match wanted {
                                Some(wanted) => format!("expected {wanted}, got {call}"),
                                None => format!("extra request {call}"),
                            });
                            Response::builder().status(500).body(Body::from(Vec::new()))
                        } else if method == "GET"
                            && self == Scenario::ForeignConfigMap
                            && path.ends_with("/configmaps/a-config")
                        {
                            let foreign = serde_json::json!({
                                "apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "a-config", "namespace": "ns",
                                             "uid": "someone-elses"},
                                "data": {"note": "hand-made"}
                            });
                            Response::builder()
                                .body(Body::from(serde_json::to_vec(&foreign).unwrap()))
                        } else if method == "GET" {
                            // No object holds the name.
                            let not_found = serde_json::json!({
                                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "NotFound", "code": 404, "message": "not found"
                            });
                            Response::builder()
                                .status(404)
                                .body(Body::from(serde_json::to_vec(&not_found).unwrap()))
                        } else {
                            let reply = if path.ends_with("/valkeys/a/status") {
                                let mut valkey = serde_json::to_value(test_valkey()).unwrap();
                                valkey["status"] = body["status"].clone();
                                valkey
                            } else {
                                let mut echoed = body.clone();
                                echoed["metadata"]["uid"] = "new-uid".into();
                                echoed
                            };
                            Response::builder()
                                .body(Body::from(serde_json::to_vec(&reply).unwrap()))
                        };
                        played.recorded.push(Recorded { path, body });
                        respond.send_response(reply.unwrap());
                    }
                    played.missing = next.collect();
                    played
                })
            }
        }

        /// What the mock API server saw in one scenario.
        struct Played {
            recorded: Vec<Recorded>,
            deviations: Vec<String>,
            missing: Vec<String>,
        }

        impl Played {
            fn assert_exact(&self) {
                assert!(
                    self.deviations.is_empty(),
                    "unexpected requests: {:#?}",
                    self.deviations
                );
                assert!(
                    self.missing.is_empty(),
                    "requests never made: {:#?}",
                    self.missing
                );
            }

            fn one(&self, suffix: &str) -> &Recorded {
                self.recorded
                    .iter()
                    .find(|r| r.path.ends_with(suffix))
                    .unwrap_or_else(|| panic!("no request to *{suffix}"))
            }
        }

        fn test_valkey() -> Valkey {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "vko.gtrfc.com/v1", "kind": "Valkey",
                "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "generation": 1},
                "spec": {"image": "valkey/valkey:8.0"}
            }))
            .unwrap()
        }

        fn context(client: kube::Client, stores: Stores) -> Arc<Context> {
            Arc::new(Context::new(
                client.clone(),
                stores,
                OptionalStores::default(),
                EventPublisher::new(client, "vko-operator", None),
                context_config(),
                Arc::new(Metrics::new(None, "test")),
                Leadership::unconditional(),
            ))
        }

        fn context_config() -> OperatorConfig {
            OperatorConfig {
                operator_peer: None,
                operator_image: "vko.local/vko:dev".into(),
                cluster_domain: "cluster.local".into(),
                optional_apis: Arc::new(OptionalApis::default()),
            }
        }

        /// Runs one pass of `valkey` against `scenario`; the server's record once the pass ended.
        async fn pass(
            scenario: Scenario,
            valkey: Valkey,
            stores: Stores,
        ) -> (Result<Action, Error>, Played) {
            passes(scenario, valkey, stores, 1).await
        }

        /// Runs `count` passes of `valkey` on one context (so with its memory between passes)
        /// against `scenario`; the last pass's result.
        async fn passes(
            scenario: Scenario,
            valkey: Valkey,
            stores: Stores,
            count: usize,
        ) -> (Result<Action, Error>, Played) {
            let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let server = scenario.play(handle);
            let client = kube::Client::new(service, "default");
            let ctx = context(client, stores);
            let valkey = Arc::new(valkey);
            let mut result = reconcile(valkey.clone(), ctx.clone()).await;
            for _ in 1..count {
                result = reconcile(valkey.clone(), ctx.clone()).await;
            }
            drop(ctx);
            (result, server.await.unwrap())
        }

        fn blocked_condition(status: &Recorded) -> &serde_json::Value {
            status.body["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "ReconcileBlocked")
                .unwrap()
        }

        #[tokio::test]
        async fn a_foreign_config_map_is_never_patched_and_blocks_with_foreign_object() {
            // Unlabelled, it is not in the store (ADR 0028): the apply step's GET finds it.
            let (stores, _writers) = Stores::empty();
            let (result, played) = pass(Scenario::ForeignConfigMap, test_valkey(), stores).await;
            played.assert_exact();
            let error = result.expect_err("a foreign object fails the pass");
            assert_eq!(error.reason(), ConditionReason::ForeignObject);
            assert!(error.to_string().contains("ConfigMap a-config"), "{error}");

            let status = played.one("/valkeys/a/status");
            let blocked = blocked_condition(status);
            assert_eq!(blocked["status"], "True");
            assert_eq!(blocked["reason"], "ForeignObject");
            assert_eq!(status.body["status"]["phase"], "Error");
            let events: Vec<_> = played
                .recorded
                .iter()
                .filter(|r| r.path.ends_with("/events"))
                .map(|r| (r.body["type"].clone(), r.body["reason"].clone()))
                .collect();
            assert_eq!(
                events,
                [("Warning", "ForeignObject"), ("Warning", "AuthDisabled")]
                    .map(|(type_, reason)| (type_.into(), reason.into()))
            );
            let event = played.one("/events");
            assert!(
                event.body["note"]
                    .as_str()
                    .unwrap()
                    .contains("delete or rename it"),
                "{}",
                event.body
            );
        }

        #[tokio::test]
        async fn a_missing_auth_secret_holds_the_statefulset_back_and_reports_it_once() {
            let (stores, _writers) = Stores::empty();
            let mut valkey = test_valkey();
            valkey.spec.auth = Some(vko_api::AuthSpec {
                secret_name: Some("pw".into()),
                ..vko_api::AuthSpec::default()
            });

            let (result, played) = pass(Scenario::MissingAuthSecret, valkey, stores).await;
            played.assert_exact();
            let error = result.expect_err("a missing Secret fails the pass");
            assert_eq!(error.reason(), ConditionReason::SecretMissing);
            assert!(error.to_string().contains("auth Secret pw"), "{error}");
            let blocked = blocked_condition(played.one("/valkeys/a/status"));
            assert_eq!(blocked["status"], "True");
            assert_eq!(blocked["reason"], "SecretMissing");
            let event = played.one("/events");
            assert_eq!(event.body["type"], "Warning");
            assert_eq!(event.body["reason"], "SecretMissing");
        }

        /// A pass of an operator whose leader gate is closed (never renewed, or past its renew
        /// deadline) fails with `NotLeader` before its first request.
        #[tokio::test]
        async fn a_pass_without_leadership_makes_no_request() {
            let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let server = tokio::spawn(async move {
                let mut requests = 0;
                while handle.next_request().await.is_some() {
                    requests += 1;
                }
                requests
            });
            let client = kube::Client::new(service, "default");
            let (stores, _writers) = Stores::empty();
            let ctx = Arc::new(Context::new(
                client.clone(),
                stores,
                OptionalStores::default(),
                EventPublisher::new(client, "vko-operator", None),
                context_config(),
                Arc::new(Metrics::new(None, "test")),
                Leadership::elected(Duration::from_secs(10)),
            ));
            let error = reconcile(Arc::new(test_valkey()), ctx).await.unwrap_err();
            assert_eq!(error.reason(), ConditionReason::NotLeader);
            assert_eq!(server.await.unwrap(), 0, "no request was made");
        }

        /// Puts what a pass wrote into the stores, as the watches would show it (the objects
        /// with a UID), and returns the status it wrote.
        fn observe_writes(
            played: &Played,
            writers: &mut crate::stores::StoreWriters,
        ) -> Option<ValkeyStatus> {
            fn put<K>(writer: &mut Writer<K>, body: &serde_json::Value)
            where
                K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
            {
                let mut live = body.clone();
                live["metadata"]["uid"] = "new-uid".into();
                let object: K = serde_json::from_value(live).unwrap();
                writer.apply_watcher_event(&watcher::Event::Apply(object));
            }
            let mut status = None;
            for recorded in &played.recorded {
                let body = &recorded.body;
                match body["kind"].as_str().unwrap_or_default() {
                    "ServiceAccount" => put(&mut writers.service_accounts, body),
                    "Role" => put(&mut writers.roles, body),
                    "RoleBinding" => put(&mut writers.role_bindings, body),
                    "ConfigMap" => put(&mut writers.config_maps, body),
                    "Service" => put(&mut writers.services, body),
                    "StatefulSet" => put(&mut writers.statefulsets, body),
                    "Valkey" => {
                        status = Some(serde_json::from_value(body["status"].clone()).unwrap());
                    }
                    // Events are not watched.
                    _ => {}
                }
            }
            status
        }

        /// Two setup passes (the first creates everything, the second sees the StatefulSet and
        /// writes the status that follows): the Valkey and stores a steady-state pass starts from.
        async fn settled(valkey: Valkey) -> (Valkey, Stores, crate::stores::StoreWriters) {
            let (stores, mut writers) = Stores::empty();
            let mut valkey = valkey;
            for _ in 0..2 {
                let (result, played) = pass(Scenario::Setup, valkey.clone(), stores.clone()).await;
                result.expect("a setup pass succeeds");
                if let Some(status) = observe_writes(&played, &mut writers) {
                    valkey.status = Some(status);
                }
            }
            (valkey, stores, writers)
        }

        #[tokio::test]
        async fn a_steady_state_pass_makes_no_request() {
            let (valkey, stores, _writers) = settled(test_valkey()).await;
            let (result, played) = pass(Scenario::SteadyState, valkey, stores).await;
            played.assert_exact();
            result.expect("the steady-state pass succeeds");
        }

        /// The settled Valkey has no pods, so it is not ready, without an error: each pass that
        /// changes nothing waits longer, up to 20 s: its StatefulSet has created no pod, and a
        /// StatefulSet short of pods is looked at every nudge interval (ADR 0020).
        #[tokio::test]
        async fn a_not_ready_valkey_whose_passes_change_nothing_is_requeued_later_each_time() {
            let (valkey, stores, _writers) = settled(test_valkey()).await;
            for (count, seconds) in [(1, 5), (2, 10), (3, 20), (4, 20), (5, 20)] {
                let (result, played) =
                    passes(Scenario::SteadyState, valkey.clone(), stores.clone(), count).await;
                played.assert_exact();
                assert_eq!(
                    result.expect("the pass succeeds"),
                    Action::requeue(Duration::from_secs(seconds)),
                    "after {count} unchanged passes"
                );
            }
        }

        #[tokio::test]
        async fn a_drifted_object_is_written_back_and_only_it() {
            let (valkey, stores, mut writers) = settled(test_valkey()).await;
            let mut edited = stores
                .config_maps
                .get(&ObjectRef::new("a-config").within("ns"))
                .unwrap()
                .as_ref()
                .clone();
            edited
                .data
                .get_or_insert_default()
                .insert("valkey.conf".into(), "port 1\n".into());
            writers
                .config_maps
                .apply_watcher_event(&watcher::Event::Apply(edited));

            let (result, played) = pass(Scenario::DriftedConfigMap, valkey, stores).await;
            played.assert_exact();
            result.expect("the pass succeeds");
            let written = played.one("/configmaps/a-config");
            assert_ne!(written.body["data"]["valkey.conf"], "port 1\n");
            assert!(
                written.body["metadata"]["annotations"][vko_render::APPLIED_HASH_ANNOTATION]
                    .is_string(),
                "{}",
                written.body
            );
        }

        #[tokio::test]
        async fn a_spec_change_writes_exactly_the_objects_it_changes() {
            let (mut valkey, stores, _writers) = settled(test_valkey()).await;
            valkey.spec.pod_annotations = Some(BTreeMap::from([(
                "example.com/note".into(),
                "changed".into(),
            )]));
            valkey.metadata.generation = Some(2);

            let (result, played) = pass(Scenario::PodAnnotationsChanged, valkey, stores).await;
            played.assert_exact();
            result.expect("the pass succeeds");
            let written = played.one("/statefulsets/a");
            assert_eq!(
                written.body["spec"]["template"]["metadata"]["annotations"]["example.com/note"],
                "changed"
            );
            let status = played.one("/valkeys/a/status");
            assert_eq!(status.body["status"]["observedGeneration"], 2);
        }

        /// Sends `call` ("METHOD /path") with an empty JSON body, ignoring the answer.
        async fn send(client: &kube::Client, call: &str) {
            let (method, path) = call.split_once(' ').unwrap();
            let request = Request::builder()
                .method(method)
                .uri(path)
                .body(b"{}".to_vec())
                .unwrap();
            let _ = client.request::<serde_json::Value>(request).await;
        }

        /// Plays `scenario` against exactly `calls`.
        async fn play_calls(scenario: Scenario, calls: &[String]) -> Played {
            let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let server = scenario.play(handle);
            let client = kube::Client::new(service, "default");
            for call in calls {
                send(&client, call).await;
            }
            drop(client);
            server.await.unwrap()
        }

        /// The runner itself: a request missing at the end, one too many, or two swapped fail.
        #[tokio::test]
        async fn the_scenario_runner_fails_on_a_missing_an_extra_or_a_reordered_request() {
            let script = Scenario::MissingAuthSecret.expected();
            let exact = play_calls(Scenario::MissingAuthSecret, &script).await;
            assert!(exact.deviations.is_empty() && exact.missing.is_empty());

            let short = play_calls(Scenario::MissingAuthSecret, &script[..script.len() - 1]).await;
            assert!(short.deviations.is_empty(), "{:#?}", short.deviations);
            assert_eq!(short.missing, [EVENT]);

            let mut long = script.clone();
            long.push("GET /api/v1/namespaces/ns/pods".to_owned());
            let long = play_calls(Scenario::MissingAuthSecret, &long).await;
            assert_eq!(
                long.deviations,
                ["extra request GET /api/v1/namespaces/ns/pods"]
            );

            let mut swapped = script.clone();
            let last = swapped.len() - 1;
            swapped.swap(last - 1, last);
            let swapped = play_calls(Scenario::MissingAuthSecret, &swapped).await;
            assert_eq!(
                swapped.deviations,
                [
                    format!("expected {STATUS}, got {EVENT}"),
                    format!("expected {EVENT}, got {STATUS}")
                ]
            );
        }
    }
}
