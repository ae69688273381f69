//! Per-pod `/etc/hosts` files kept current: the testbed has no cluster DNS, so every pod's hosts file
//! carries the names cluster DNS would answer.
//!
//! [`Dns`] watches Pods and Services cluster-wide and rewrites every registered hosts file IN PLACE
//! (truncate and write the same inode: the file is bind-mounted at a container's `/etc/hosts`, and a
//! rename would leave the container with the old inode) whenever its content changes. The content
//! is a pure function, [`hosts_content`], of the pod the file belongs to and a [`ClusterView`].
//!
//! What goes in, following what CoreDNS serves from EndpointSlices:
//! - the kubelet's own lines: localhost, then `<ip> <hostname>.<subdomain>.<ns>.svc.<domain> … <hostname>`
//!   (or `<ip> <hostname>` without a subdomain), then `spec.hostAliases`;
//! - for every pod with `spec.hostname` and `spec.subdomain` selected by a headless Service named
//!   `<subdomain>` in its namespace, while its endpoint counts as ready (pod Ready and not terminating,
//!   or the Service has `publishNotReadyAddresses`): its FQDN and short forms;
//! - for every headless Service: one line per ready endpoint (cluster DNS answers all of them);
//! - for every ClusterIP Service: its ClusterIP under `<svc>.<ns>.svc.<domain>` and short forms.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// Events arriving within this window after the first are folded into one rewrite.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// The kubelet's limit on a pod hostname (a DNS label).
const MAX_HOSTNAME_LEN: usize = 63;

/// What of a Pod matters to cluster DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRecord {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    /// `spec.hostname` as given (only an explicit hostname gets an endpoint hostname record).
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ip: Option<Ipv4Addr>,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase `Succeeded` or `Failed`: such pods are in no EndpointSlice.
    pub terminal: bool,
    pub labels: BTreeMap<String, String>,
}

impl PodRecord {
    /// `None` for a pod without a name, namespace or UID (never the case for stored objects).
    pub fn from_pod(pod: &Pod) -> Option<PodRecord> {
        let status = pod.status.as_ref();
        let spec = pod.spec.as_ref();
        let phase = status.and_then(|status| status.phase.as_deref());
        Some(PodRecord {
            uid: pod.metadata.uid.clone()?,
            namespace: pod.metadata.namespace.clone()?,
            name: pod.metadata.name.clone()?,
            hostname: spec
                .and_then(|spec| spec.hostname.clone())
                .filter(|name| !name.is_empty()),
            subdomain: spec
                .and_then(|spec| spec.subdomain.clone())
                .filter(|name| !name.is_empty()),
            ip: status
                .and_then(|status| status.pod_ip.as_deref())
                .and_then(|ip| ip.parse().ok()),
            ready: status
                .and_then(|status| status.conditions.as_ref())
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|condition| condition.type_ == "Ready" && condition.status == "True")
                }),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
        })
    }
}

/// What of a Service matters to cluster DNS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceRecord {
    pub namespace: String,
    pub name: String,
    /// `Some` for a ClusterIP Service with an IPv4 cluster IP.
    pub cluster_ip: Option<Ipv4Addr>,
    /// `clusterIP: None`.
    pub headless: bool,
    pub publish_not_ready_addresses: bool,
    /// Empty: no selector, so no endpoints managed by the EndpointSlice controller.
    pub selector: BTreeMap<String, String>,
}

impl ServiceRecord {
    /// `None` for an ExternalName Service (a CNAME, which a hosts file cannot express).
    pub fn from_service(service: &Service) -> Option<ServiceRecord> {
        let spec = service.spec.as_ref()?;
        if spec.type_.as_deref() == Some("ExternalName") {
            return None;
        }
        let cluster_ip = spec.cluster_ip.as_deref().unwrap_or_default();
        Some(ServiceRecord {
            namespace: service.metadata.namespace.clone()?,
            name: service.metadata.name.clone()?,
            cluster_ip: cluster_ip.parse().ok(),
            headless: cluster_ip == "None",
            publish_not_ready_addresses: spec.publish_not_ready_addresses.unwrap_or(false),
            selector: spec.selector.clone().unwrap_or_default(),
        })
    }

    /// Whether this Service's EndpointSlices carry `pod` as a ready endpoint (what DNS serves):
    /// selected, with an IP, not terminal, and Ready-and-not-terminating unless
    /// `publishNotReadyAddresses` (mirrors the EndpointSlice controller's `podToEndpoint`).
    pub fn serves(&self, pod: &PodRecord) -> bool {
        !self.selector.is_empty()
            && pod.namespace == self.namespace
            && self
                .selector
                .iter()
                .all(|(key, value)| pod.labels.get(key) == Some(value))
            && pod.ip.is_some()
            && !pod.terminal
            && (self.publish_not_ready_addresses || (pod.ready && !pod.terminating))
    }
}

/// The pods and services DNS knows about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// By pod UID.
    pub pods: BTreeMap<String, PodRecord>,
    /// By (namespace, name).
    pub services: BTreeMap<(String, String), ServiceRecord>,
}

/// The pod a hosts file belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnPod {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub ip: Ipv4Addr,
    /// `spec.hostAliases`: (ip, hostnames).
    pub host_aliases: Vec<(String, Vec<String>)>,
}

impl OwnPod {
    pub fn from_pod(pod: &Pod, ip: Ipv4Addr) -> Result<OwnPod> {
        let invalid = |detail: &str| Error::Invalid {
            what: "pod".into(),
            detail: detail.into(),
        };
        let spec = pod.spec.as_ref();
        Ok(OwnPod {
            uid: pod
                .metadata
                .uid
                .clone()
                .ok_or_else(|| invalid("no metadata.uid"))?,
            namespace: pod
                .metadata
                .namespace
                .clone()
                .ok_or_else(|| invalid("no metadata.namespace"))?,
            name: pod
                .metadata
                .name
                .clone()
                .ok_or_else(|| invalid("no metadata.name"))?,
            hostname: spec
                .and_then(|spec| spec.hostname.clone())
                .filter(|name| !name.is_empty()),
            subdomain: spec
                .and_then(|spec| spec.subdomain.clone())
                .filter(|name| !name.is_empty()),
            ip,
            host_aliases: spec
                .and_then(|spec| spec.host_aliases.as_ref())
                .map(|aliases| {
                    aliases
                        .iter()
                        .map(|alias| {
                            (
                                alias.ip.clone(),
                                alias.hostnames.clone().unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The pod's hostname as the kubelet computes it: `spec.hostname`, else the pod name cut to a
    /// DNS label.
    pub fn effective_hostname(&self) -> String {
        match &self.hostname {
            Some(hostname) => hostname.clone(),
            None => truncate_hostname(&self.name),
        }
    }
}

fn truncate_hostname(name: &str) -> String {
    if name.len() <= MAX_HOSTNAME_LEN {
        return name.to_string();
    }
    name[..MAX_HOSTNAME_LEN]
        .trim_end_matches(['-', '.'])
        .to_string()
}

/// `<name>.<ns>.svc.<domain>`, `<name>.<ns>.svc`, `<name>.<ns>` and, seen from the same namespace,
/// `<name>`: the names a pod's resolver reaches through its search path.
fn service_names(name: &str, namespace: &str, domain: &str, same_namespace: bool) -> Vec<String> {
    let mut names = vec![
        format!("{name}.{namespace}.svc.{domain}"),
        format!("{name}.{namespace}.svc"),
        format!("{name}.{namespace}"),
    ];
    if same_namespace {
        names.push(name.to_string());
    }
    names
}

/// The full content of `own`'s hosts file. Pure and deterministic (sorted), so files are rewritten
/// only when something relevant changed.
pub fn hosts_content(own: &OwnPod, view: &ClusterView, domain: &str) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file (vko-testbed).\n\
         127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    let hostname = own.effective_hostname();
    match &own.subdomain {
        Some(subdomain) => {
            let mut names = service_names(
                &format!("{hostname}.{subdomain}"),
                &own.namespace,
                domain,
                true,
            );
            names.push(hostname);
            push_line(&mut out, own.ip, &names);
        }
        None => push_line(&mut out, own.ip, &[hostname]),
    }
    if !own.host_aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for (ip, hostnames) in &own.host_aliases {
            out.push_str(ip);
            for hostname in hostnames {
                out.push('\t');
                out.push_str(hostname);
            }
            out.push('\n');
        }
    }

    let services: Vec<&ServiceRecord> = view.services.values().collect();
    let headless = || services.iter().copied().filter(|service| service.headless);

    // Endpoint hostnames under headless Services: (namespace, subdomain, hostname, ip).
    let mut pod_records: Vec<(&str, &str, &str, Ipv4Addr)> = Vec::new();
    for pod in view.pods.values().filter(|pod| pod.uid != own.uid) {
        let (Some(hostname), Some(subdomain), Some(ip)) = (&pod.hostname, &pod.subdomain, pod.ip)
        else {
            continue;
        };
        let named_service = headless().find(|service| {
            &service.name == subdomain && service.namespace == pod.namespace && service.serves(pod)
        });
        if named_service.is_some() {
            pod_records.push((&pod.namespace, subdomain, hostname, ip));
        }
    }
    pod_records.sort();
    pod_records.dedup();
    if !pod_records.is_empty() {
        out.push_str("\n# Pods under headless Services.\n");
        for (namespace, subdomain, hostname, ip) in pod_records {
            let names = service_names(
                &format!("{hostname}.{subdomain}"),
                namespace,
                domain,
                namespace == own.namespace,
            );
            push_line(&mut out, ip, &names);
        }
    }

    // Headless Services resolve to all their ready endpoints.
    let mut headless_records: Vec<(&str, &str, Ipv4Addr)> = Vec::new();
    for service in headless() {
        for pod in view.pods.values().filter(|pod| service.serves(pod)) {
            if let Some(ip) = pod.ip {
                headless_records.push((&service.namespace, &service.name, ip));
            }
        }
    }
    headless_records.sort();
    headless_records.dedup();
    if !headless_records.is_empty() {
        out.push_str("\n# Headless Services.\n");
        for (namespace, name, ip) in headless_records {
            push_line(
                &mut out,
                ip,
                &service_names(name, namespace, domain, namespace == own.namespace),
            );
        }
    }

    let cluster_ip_services: Vec<&ServiceRecord> = services
        .iter()
        .copied()
        .filter(|service| service.cluster_ip.is_some())
        .collect();
    if !cluster_ip_services.is_empty() {
        out.push_str("\n# Services.\n");
        for service in cluster_ip_services {
            if let Some(ip) = service.cluster_ip {
                let same_namespace = service.namespace == own.namespace;
                push_line(
                    &mut out,
                    ip,
                    &service_names(&service.name, &service.namespace, domain, same_namespace),
                );
            }
        }
    }
    out
}

fn push_line(out: &mut String, ip: Ipv4Addr, names: &[String]) {
    out.push_str(&ip.to_string());
    for name in names {
        out.push('\t');
        out.push_str(name);
    }
    out.push('\n');
}

/// A registered hosts file and what was last written to it.
struct HostsFile {
    path: PathBuf,
    own: OwnPod,
    written: String,
}

#[derive(Default)]
struct State {
    view: ClusterView,
    files: BTreeMap<String, HostsFile>,
}

/// Keeps every registered per-pod hosts file current.
pub struct Dns {
    state_dir: PathBuf,
    cluster_domain: String,
    state: Mutex<State>,
    changed: Notify,
}

impl std::fmt::Debug for Dns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dns")
            .field("state_dir", &self.state_dir)
            .finish_non_exhaustive()
    }
}

impl Dns {
    /// Starts the Pod and Service watches and the rewriter; they stop at `shutdown`. Must be called
    /// inside a Tokio runtime.
    pub fn start(
        client: kube::Client,
        state_dir: PathBuf,
        cluster_domain: String,
        shutdown: CancellationToken,
    ) -> Arc<Dns> {
        let dns = Arc::new(Dns {
            state_dir,
            cluster_domain,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        });

        let pods =
            watcher(Api::<Pod>::all(client.clone()), watcher::Config::default()).default_backoff();
        tokio::spawn(follow(
            dns.clone(),
            pods,
            shutdown.clone(),
            |pod: &Pod| pod.metadata.uid.clone(),
            PodRecord::from_pod,
            |view| &mut view.pods,
        ));
        let services =
            watcher(Api::<Service>::all(client), watcher::Config::default()).default_backoff();
        tokio::spawn(follow(
            dns.clone(),
            services,
            shutdown.clone(),
            |service: &Service| {
                Some((
                    service.metadata.namespace.clone()?,
                    service.metadata.name.clone()?,
                ))
            },
            ServiceRecord::from_service,
            |view| &mut view.services,
        ));

        let rewriter = dns.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = rewriter.changed.notified() => {}
                }
                tokio::time::sleep(DEBOUNCE).await;
                rewriter.rewrite_all();
            }
        });
        dns
    }

    /// Creates (or refreshes) `state_dir/pods/<uid>/hosts` for `pod` at `pod_ip`, registers it to be
    /// kept current, and returns its path.
    pub fn hosts_file(&self, pod: &Pod, pod_ip: Ipv4Addr) -> Result<PathBuf> {
        let own = OwnPod::from_pod(pod, pod_ip)?;
        let dir = self.state_dir.join("pods").join(&own.uid);
        std::fs::create_dir_all(&dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        let path = dir.join("hosts");
        let mut state = self.lock();
        let content = hosts_content(&own, &state.view, &self.cluster_domain);
        write_in_place(&path, &content)?;
        state.files.insert(
            own.uid.clone(),
            HostsFile {
                path: path.clone(),
                own,
                written: content,
            },
        );
        Ok(path)
    }

    /// Stops keeping the pod's hosts file current (the file itself goes with the pod directory).
    pub fn forget(&self, pod_uid: &str) {
        self.lock().files.remove(pod_uid);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves consistent data (each update is one insert).
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn rewrite_all(&self) {
        let mut state = self.lock();
        let State { view, files } = &mut *state;
        for file in files.values_mut() {
            let content = hosts_content(&file.own, view, &self.cluster_domain);
            if content == file.written {
                continue;
            }
            match write_in_place(&file.path, &content) {
                Ok(()) => file.written = content,
                // The pod directory may be going away with the pod; it is retried on the next change.
                Err(error) => tracing::warn!(%error, "rewriting a hosts file failed"),
            }
        }
    }

    /// Applies `update` to the view; wakes the rewriter if the view changed.
    fn update_view(&self, update: impl FnOnce(&mut ClusterView) -> bool) {
        if update(&mut self.lock().view) {
            self.changed.notify_one();
        }
    }
}

/// Mirrors one watched kind into the view: `key` names an object's entry, `record` extracts what it
/// contributes (`None`: nothing, e.g. an ExternalName Service), `map` selects the view's map.
async fn follow<K, Key, Record>(
    dns: Arc<Dns>,
    events: impl Stream<Item = std::result::Result<watcher::Event<K>, watcher::Error>> + Send,
    shutdown: CancellationToken,
    key: impl Fn(&K) -> Option<Key> + Send,
    record: impl Fn(&K) -> Option<Record> + Send,
    map: impl Fn(&mut ClusterView) -> &mut BTreeMap<Key, Record> + Send,
) where
    Key: Ord + Send,
    Record: PartialEq + Send,
{
    let mut events = std::pin::pin!(events);
    // A (re)list is buffered and swapped in whole, so objects deleted while disconnected disappear.
    let mut relist: Option<BTreeMap<Key, Record>> = None;
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            None => return,
            Some(Err(error)) => tracing::warn!(%error, "DNS watch failed; retrying"),
            Some(Ok(watcher::Event::Init)) => relist = Some(BTreeMap::new()),
            Some(Ok(watcher::Event::InitApply(object))) => {
                if let (Some(buffer), Some(key), Some(record)) =
                    (relist.as_mut(), key(&object), record(&object))
                {
                    buffer.insert(key, record);
                }
            }
            Some(Ok(watcher::Event::InitDone)) => {
                if let Some(buffer) = relist.take() {
                    dns.update_view(|view| {
                        let current = map(view);
                        let changed = *current != buffer;
                        *current = buffer;
                        changed
                    });
                }
            }
            Some(Ok(watcher::Event::Apply(object))) => {
                let Some(key) = key(&object) else { continue };
                match record(&object) {
                    Some(record) => dns.update_view(|view| {
                        let current = map(view);
                        if current.get(&key) == Some(&record) {
                            return false;
                        }
                        current.insert(key, record);
                        true
                    }),
                    None => dns.update_view(|view| map(view).remove(&key).is_some()),
                }
            }
            Some(Ok(watcher::Event::Delete(object))) => {
                if let Some(key) = key(&object) {
                    dns.update_view(|view| map(view).remove(&key).is_some());
                }
            }
        }
    }
}

/// Truncates and rewrites `path` keeping its inode (a bind mount of it must see the change).
fn write_in_place(path: &Path, content: &str) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // World-readable: containers run as any user.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(path)
        .map_err(Error::io(format!("opening {}", path.display())))?;
    file.write_all(content.as_bytes())
        .map_err(Error::io(format!("writing {}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOMAIN: &str = "cluster.local";

    fn own(namespace: &str, name: &str, hostname: Option<&str>, subdomain: Option<&str>) -> OwnPod {
        OwnPod {
            uid: format!("uid-{name}"),
            namespace: namespace.into(),
            name: name.into(),
            hostname: hostname.map(str::to_string),
            subdomain: subdomain.map(str::to_string),
            ip: Ipv4Addr::new(10, 244, 0, 10),
            host_aliases: Vec::new(),
        }
    }

    fn pod(namespace: &str, name: &str, subdomain: &str, ip: [u8; 4], ready: bool) -> PodRecord {
        PodRecord {
            uid: format!("uid-{name}"),
            namespace: namespace.into(),
            name: name.into(),
            hostname: Some(name.into()),
            subdomain: Some(subdomain.into()),
            ip: Some(Ipv4Addr::from(ip)),
            ready,
            terminating: false,
            terminal: false,
            labels: BTreeMap::from([("app".into(), subdomain.into())]),
        }
    }

    fn headless(namespace: &str, name: &str, publish_not_ready: bool) -> ServiceRecord {
        ServiceRecord {
            namespace: namespace.into(),
            name: name.into(),
            cluster_ip: None,
            headless: true,
            publish_not_ready_addresses: publish_not_ready,
            selector: BTreeMap::from([("app".into(), name.into())]),
        }
    }

    fn cluster_ip(namespace: &str, name: &str, ip: [u8; 4]) -> ServiceRecord {
        ServiceRecord {
            namespace: namespace.into(),
            name: name.into(),
            cluster_ip: Some(Ipv4Addr::from(ip)),
            headless: false,
            publish_not_ready_addresses: false,
            selector: BTreeMap::from([("app".into(), name.into())]),
        }
    }

    fn view(pods: Vec<PodRecord>, services: Vec<ServiceRecord>) -> ClusterView {
        ClusterView {
            pods: pods.into_iter().map(|pod| (pod.uid.clone(), pod)).collect(),
            services: services
                .into_iter()
                .map(|service| ((service.namespace.clone(), service.name.clone()), service))
                .collect(),
        }
    }

    fn lines_for<'a>(content: &'a str, ip: &str) -> Vec<&'a str> {
        content
            .lines()
            .filter(|line| line.split('\t').next() == Some(ip))
            .collect()
    }

    #[test]
    fn own_line_without_subdomain_is_ip_and_pod_name() {
        let content = hosts_content(
            &own("ns", "web-abc", None, None),
            &ClusterView::default(),
            DOMAIN,
        );
        assert!(content.starts_with("# Kubernetes-managed hosts file"));
        assert!(content.contains("127.0.0.1\tlocalhost\n"));
        assert!(content.contains("::1\tlocalhost ip6-localhost ip6-loopback\n"));
        assert_eq!(
            lines_for(&content, "10.244.0.10"),
            vec!["10.244.0.10\tweb-abc"]
        );
    }

    #[test]
    fn own_line_with_subdomain_has_the_fqdn_first_and_the_hostname_last() {
        let content = hosts_content(
            &own("ns", "db-0", Some("db-0"), Some("db")),
            &ClusterView::default(),
            DOMAIN,
        );
        assert_eq!(
            lines_for(&content, "10.244.0.10"),
            vec![
                "10.244.0.10\tdb-0.db.ns.svc.cluster.local\tdb-0.db.ns.svc\tdb-0.db.ns\tdb-0.db\tdb-0"
            ]
        );
    }

    #[test]
    fn long_pod_names_are_cut_to_a_dns_label() {
        let name = format!("{}-{}", "a".repeat(62), "b".repeat(10));
        let content = hosts_content(
            &own("ns", &name, None, None),
            &ClusterView::default(),
            DOMAIN,
        );
        assert_eq!(
            lines_for(&content, "10.244.0.10"),
            vec![format!("10.244.0.10\t{}", "a".repeat(62))]
        );
    }

    #[test]
    fn host_aliases_are_listed() {
        let mut me = own("ns", "p", None, None);
        me.host_aliases = vec![("10.1.2.3".into(), vec!["foo.local".into(), "bar".into()])];
        let content = hosts_content(&me, &ClusterView::default(), DOMAIN);
        assert!(content.contains("# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar\n"));
    }

    #[test]
    fn ready_pods_under_a_headless_service_get_fqdn_and_short_forms() {
        let cluster = view(
            vec![pod("ns", "db-1", "db", [10, 244, 0, 11], true)],
            vec![headless("ns", "db", false)],
        );
        let content = hosts_content(&own("ns", "client", None, None), &cluster, DOMAIN);
        assert_eq!(
            lines_for(&content, "10.244.0.11"),
            vec![
                "10.244.0.11\tdb-1.db.ns.svc.cluster.local\tdb-1.db.ns.svc\tdb-1.db.ns\tdb-1.db",
                "10.244.0.11\tdb.ns.svc.cluster.local\tdb.ns.svc\tdb.ns\tdb",
            ]
        );
    }

    #[test]
    fn pods_in_other_namespaces_get_no_namespace_relative_short_form() {
        let cluster = view(
            vec![pod("other", "db-1", "db", [10, 244, 0, 11], true)],
            vec![headless("other", "db", false)],
        );
        let content = hosts_content(&own("ns", "client", None, None), &cluster, DOMAIN);
        assert_eq!(
            lines_for(&content, "10.244.0.11"),
            vec![
                "10.244.0.11\tdb-1.db.other.svc.cluster.local\tdb-1.db.other.svc\tdb-1.db.other",
                "10.244.0.11\tdb.other.svc.cluster.local\tdb.other.svc\tdb.other",
            ]
        );
    }

    #[test]
    fn not_ready_pods_appear_only_with_publish_not_ready_addresses() {
        let not_ready = pod("ns", "db-1", "db", [10, 244, 0, 11], false);
        let hidden = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![not_ready.clone()], vec![headless("ns", "db", false)]),
            DOMAIN,
        );
        assert!(lines_for(&hidden, "10.244.0.11").is_empty(), "{hidden}");
        let published = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![not_ready], vec![headless("ns", "db", true)]),
            DOMAIN,
        );
        assert_eq!(lines_for(&published, "10.244.0.11").len(), 2, "{published}");
    }

    #[test]
    fn terminating_pods_drop_out_unless_not_ready_addresses_are_published() {
        let mut terminating = pod("ns", "db-1", "db", [10, 244, 0, 11], true);
        terminating.terminating = true;
        let hidden = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![terminating.clone()], vec![headless("ns", "db", false)]),
            DOMAIN,
        );
        assert!(lines_for(&hidden, "10.244.0.11").is_empty());
        let published = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![terminating.clone()], vec![headless("ns", "db", true)]),
            DOMAIN,
        );
        assert_eq!(lines_for(&published, "10.244.0.11").len(), 2);
        terminating.terminal = true;
        let finished = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![terminating], vec![headless("ns", "db", true)]),
            DOMAIN,
        );
        assert!(
            lines_for(&finished, "10.244.0.11").is_empty(),
            "terminal pods are in no EndpointSlice"
        );
    }

    #[test]
    fn pod_records_need_a_matching_headless_service_that_selects_the_pod() {
        let me = own("ns", "client", None, None);
        let db = pod("ns", "db-1", "db", [10, 244, 0, 11], true);
        let no_service = hosts_content(&me, &view(vec![db.clone()], vec![]), DOMAIN);
        assert!(lines_for(&no_service, "10.244.0.11").is_empty());
        let other_namespace = hosts_content(
            &me,
            &view(vec![db.clone()], vec![headless("elsewhere", "db", false)]),
            DOMAIN,
        );
        assert!(lines_for(&other_namespace, "10.244.0.11").is_empty());
        let mut not_selecting = headless("ns", "db", false);
        not_selecting.selector = BTreeMap::from([("app".into(), "cache".into())]);
        let unselected = hosts_content(&me, &view(vec![db.clone()], vec![not_selecting]), DOMAIN);
        assert!(lines_for(&unselected, "10.244.0.11").is_empty());
        let mut no_selector = headless("ns", "db", false);
        no_selector.selector.clear();
        let manual = hosts_content(&me, &view(vec![db.clone()], vec![no_selector]), DOMAIN);
        assert!(lines_for(&manual, "10.244.0.11").is_empty());
        let non_headless = hosts_content(
            &me,
            &view(vec![db], vec![cluster_ip("ns", "db", [10, 96, 0, 5])]),
            DOMAIN,
        );
        assert!(lines_for(&non_headless, "10.244.0.11").is_empty());
    }

    #[test]
    fn a_pod_without_explicit_hostname_only_joins_the_service_record() {
        let mut db = pod("ns", "db-1", "db", [10, 244, 0, 11], true);
        db.hostname = None;
        let content = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![db], vec![headless("ns", "db", false)]),
            DOMAIN,
        );
        assert_eq!(
            lines_for(&content, "10.244.0.11"),
            vec!["10.244.0.11\tdb.ns.svc.cluster.local\tdb.ns.svc\tdb.ns\tdb"]
        );
    }

    #[test]
    fn pods_without_an_ip_are_left_out() {
        let mut db = pod("ns", "db-1", "db", [10, 244, 0, 11], true);
        db.ip = None;
        let content = hosts_content(
            &own("ns", "client", None, None),
            &view(vec![db], vec![headless("ns", "db", false)]),
            DOMAIN,
        );
        assert!(!content.contains("db-1"));
    }

    #[test]
    fn the_own_pod_is_listed_once() {
        let mut me = pod("ns", "db-0", "db", [10, 244, 0, 10], true);
        me.uid = "uid-db-0".into();
        let content = hosts_content(
            &own("ns", "db-0", Some("db-0"), Some("db")),
            &view(vec![me], vec![headless("ns", "db", false)]),
            DOMAIN,
        );
        let fqdn_lines = content
            .lines()
            .filter(|line| line.contains("db-0.db.ns.svc.cluster.local"))
            .count();
        assert_eq!(fqdn_lines, 1, "{content}");
    }

    #[test]
    fn cluster_ip_services_get_their_names_and_the_bare_name_in_the_same_namespace() {
        let cluster = view(
            vec![],
            vec![
                cluster_ip("ns", "api", [10, 96, 0, 20]),
                cluster_ip("other", "cache", [10, 96, 0, 21]),
            ],
        );
        let content = hosts_content(&own("ns", "client", None, None), &cluster, DOMAIN);
        assert_eq!(
            lines_for(&content, "10.96.0.20"),
            vec!["10.96.0.20\tapi.ns.svc.cluster.local\tapi.ns.svc\tapi.ns\tapi"]
        );
        assert_eq!(
            lines_for(&content, "10.96.0.21"),
            vec!["10.96.0.21\tcache.other.svc.cluster.local\tcache.other.svc\tcache.other"]
        );
    }

    #[test]
    fn a_custom_cluster_domain_is_used() {
        let cluster = view(vec![], vec![cluster_ip("ns", "api", [10, 96, 0, 20])]);
        let content = hosts_content(&own("ns", "client", None, None), &cluster, "example.test");
        assert!(content.contains("10.96.0.20\tapi.ns.svc.example.test\t"));
    }

    #[test]
    fn content_is_deterministic_whatever_the_insertion_order() {
        let pods = vec![
            pod("ns", "db-2", "db", [10, 244, 0, 13], true),
            pod("ns", "db-0", "db", [10, 244, 0, 11], true),
            pod("a", "x-0", "x", [10, 244, 0, 20], true),
            pod("ns", "db-1", "db", [10, 244, 0, 12], true),
        ];
        let services = vec![
            headless("ns", "db", false),
            headless("a", "x", false),
            cluster_ip("ns", "api", [10, 96, 0, 9]),
        ];
        let me = own("ns", "client", None, None);
        let forward = hosts_content(&me, &view(pods.clone(), services.clone()), DOMAIN);
        let backward = hosts_content(
            &me,
            &view(
                pods.into_iter().rev().collect(),
                services.into_iter().rev().collect(),
            ),
            DOMAIN,
        );
        assert_eq!(forward, backward);
        let db_lines: Vec<&str> = forward
            .lines()
            .filter(|line| line.contains(".db.ns.svc.cluster.local"))
            .collect();
        assert_eq!(db_lines.len(), 3);
        assert!(
            db_lines[0].contains("db-0")
                && db_lines[1].contains("db-1")
                && db_lines[2].contains("db-2")
        );
        assert!(
            forward.find("x-0.x.a").unwrap() < forward.find("db-0.db.ns").unwrap(),
            "sorted by namespace"
        );
    }

    #[test]
    fn records_are_built_from_api_objects() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "ns", "uid": "u1", "labels": {"app": "db"}},
            "spec": {"hostname": "db-0", "subdomain": "db", "containers": []},
            "status": {"podIP": "10.244.0.7", "phase": "Running",
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let record = PodRecord::from_pod(&pod).unwrap();
        assert_eq!(record.ip, Some(Ipv4Addr::new(10, 244, 0, 7)));
        assert!(record.ready && !record.terminating && !record.terminal);
        assert_eq!(record.subdomain.as_deref(), Some("db"));

        let service: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "ns"},
            "spec": {"clusterIP": "None", "selector": {"app": "db"}, "publishNotReadyAddresses": true}
        }))
        .unwrap();
        let record = ServiceRecord::from_service(&service).unwrap();
        assert!(
            record.headless && record.publish_not_ready_addresses && record.cluster_ip.is_none()
        );

        let external: Service = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ext", "namespace": "ns"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}
        }))
        .unwrap();
        assert!(ServiceRecord::from_service(&external).is_none());
    }

    #[test]
    fn write_in_place_keeps_the_inode() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::env::temp_dir().join(format!("vko-dns-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        struct Cleanup(PathBuf);
        impl Drop for Cleanup {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _cleanup = Cleanup(dir.clone());
        let path = dir.join("hosts");
        write_in_place(&path, "first version, rather long\n").unwrap();
        let inode = std::fs::metadata(&path).unwrap().ino();
        write_in_place(&path, "second\n").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), inode);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "second\n");
    }
}
