//! Everything around the pods: ConfigMaps, Services, PodDisruptionBudgets, NetworkPolicies,
//! cert-manager Certificates, the ServiceMonitor, the observer and the sidecar's RBAC.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, KeyToPath, PodSpec, PodTemplateSpec, SecretVolumeSource, Service,
    ServiceAccount, ServicePort, ServiceSpec, Volume,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};
use vko_api::ValkeySpec;
use vko_api::consts::{defaults, labels as label_keys, ports as port_numbers};

use crate::conf::{TLS_CA_FILE, TLS_CERT_FILE, TLS_DIR, TLS_KEY_FILE};
use crate::labels::{Component, METRICS_LABEL, merge_user_labels};
use crate::names::{Names, is_certificate_dns_name};
use crate::pod::{
    OBSERVER_BINARY, Timing, auth_volume, cluster_args, container_port, container_security_context,
    env_field, http_probe, mount, password_file, paths, pod_security_context,
};
use crate::ports::names as port_names;
use crate::{Ctx, ObserverObjects, RenderError, SidecarRbac, TlsSecrets};

/// uid/gid of the operator image's non-root user (distroless `nonroot`).
pub const OPERATOR_UID: i64 = 65532;

/// A ConfigMap holding one config file.
pub fn config_map(
    ctx: &Ctx<'_>,
    name: String,
    component: Component,
    key: &str,
    text: String,
) -> ConfigMap {
    ConfigMap {
        metadata: ctx.meta(name, ctx.labels(component)),
        data: Some(BTreeMap::from([(key.to_owned(), text)])),
        ..ConfigMap::default()
    }
}

/// Which Secret each tier mounts.
pub fn tls_secrets(spec: &ValkeySpec, names: &Names) -> TlsSecrets {
    if let Some(user) = spec.tls_secret_name() {
        return TlsSecrets {
            data: user.to_owned(),
            sentinel: None,
        };
    }
    TlsSecrets {
        data: names.tls_certificate(),
        sentinel: (spec.sentinel_enabled() && !spec.unified_certificate())
            .then(|| names.sentinel_tls_certificate()),
    }
}

fn service_ports(ports: &[(&'static str, i32)]) -> Vec<ServicePort> {
    ports
        .iter()
        .map(|(name, port)| ServicePort {
            name: Some((*name).to_owned()),
            port: *port,
            target_port: Some(IntOrString::String((*name).to_owned())),
            protocol: Some("TCP".to_owned()),
            ..ServicePort::default()
        })
        .collect()
}

/// Every Service.
pub fn services(ctx: &Ctx<'_>) -> Result<Vec<Service>, RenderError> {
    let spec = ctx.spec;
    let names = &ctx.names;
    let valkey_ports = service_ports(&ctx.ports.valkey_ports());
    let with_role = |role: Option<&str>| {
        let mut selector = ctx.selector(Component::Valkey);
        if let Some(role) = role {
            selector.insert(label_keys::INSTANCE_ROLE.to_owned(), role.to_owned());
        }
        selector
    };
    let headless = |name: String, component: Component, ports: Vec<ServicePort>| Service {
        metadata: ctx.meta(name, ctx.labels(component)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            // Pods must resolve each other (replication, Sentinel hello, the init's master
            // lookup) before they are ready.
            publish_not_ready_addresses: Some(true),
            selector: Some(ctx.selector(component)),
            ports: Some(ports),
            ..ServiceSpec::default()
        }),
        status: None,
    };
    let client = |name: String, selector: BTreeMap<String, String>| Service {
        metadata: ctx.meta(name, ctx.labels(Component::Valkey)),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(selector),
            ports: Some(valkey_ports.clone()),
            ..ServiceSpec::default()
        }),
        status: None,
    };

    let mut services = vec![
        headless(
            names.headless_service(),
            Component::Valkey,
            valkey_ports.clone(),
        ),
        client(names.rw_service(), with_role(Some(label_keys::ROLE_MASTER))),
    ];
    if spec.replicas() > 1 {
        services.push(client(
            names.r_service(),
            with_role(Some(label_keys::ROLE_REPLICA)),
        ));
        services.push(client(names.all_service(), with_role(None)));
    }
    if spec.sentinel_enabled() {
        services.push(headless(
            names.sentinel_headless_service(),
            Component::Sentinel,
            service_ports(&ctx.ports.sentinel_ports()),
        ));
    }
    if spec.metrics_service_enabled() {
        let mut operator_labels = ctx.labels(Component::Valkey);
        operator_labels.insert(METRICS_LABEL.to_owned(), "true".to_owned());
        let labels = merge_user_labels(
            "spec.metrics.service.labels",
            spec.metrics
                .as_ref()
                .and_then(|m| m.service.as_ref())
                .and_then(|s| s.labels.as_ref()),
            operator_labels,
        )?;
        services.push(Service {
            metadata: ctx.meta(names.metrics_service(), labels),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".to_owned()),
                selector: Some(ctx.selector(Component::Valkey)),
                ports: Some(service_ports(&[(port_names::METRICS, spec.metrics_port())])),
                ..ServiceSpec::default()
            }),
            status: None,
        });
    }
    if spec.observer_service_monitor_enabled() {
        services.push(Service {
            metadata: ctx.meta(names.observer(), ctx.labels(Component::Observer)),
            spec: Some(ServiceSpec {
                // Only for scraping: no ClusterIP, and an unready observer (a failing check) is
                // exactly when its metrics matter.
                cluster_ip: Some("None".to_owned()),
                publish_not_ready_addresses: Some(true),
                selector: Some(ctx.selector(Component::Observer)),
                ports: Some(service_ports(&[(
                    port_names::HEALTH,
                    port_numbers::OBSERVER,
                )])),
                ..ServiceSpec::default()
            }),
            status: None,
        });
    }
    Ok(services)
}

/// Data PDB (`maxUnavailable`) and Sentinel PDB (`minAvailable` = quorum), each only for a
/// tier of at least two pods.
pub fn pod_disruption_budgets(ctx: &Ctx<'_>) -> Vec<PodDisruptionBudget> {
    let spec = ctx.spec;
    let mut budgets = Vec::new();
    if spec.needs_data_pod_disruption_budget() {
        budgets.push(PodDisruptionBudget {
            metadata: ctx.meta(ctx.names.data_statefulset(), ctx.labels(Component::Valkey)),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(
                    spec.pod_disruption_budget_max_unavailable(),
                )),
                selector: Some(LabelSelector {
                    match_labels: Some(ctx.selector(Component::Valkey)),
                    match_expressions: None,
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        });
    }
    if spec.needs_sentinel_pod_disruption_budget() {
        budgets.push(PodDisruptionBudget {
            metadata: ctx.meta(
                ctx.names.sentinel_statefulset(),
                ctx.labels(Component::Sentinel),
            ),
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(spec.sentinel_quorum())),
                selector: Some(LabelSelector {
                    match_labels: Some(ctx.selector(Component::Sentinel)),
                    match_expressions: None,
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            status: None,
        });
    }
    budgets
}

fn tcp_ports(ports: &[i32]) -> Vec<NetworkPolicyPort> {
    ports
        .iter()
        .map(|port| NetworkPolicyPort {
            port: Some(IntOrString::Int(*port)),
            protocol: Some("TCP".to_owned()),
            end_port: None,
        })
        .collect()
}

/// Ingress-only NetworkPolicies. Valkey and Sentinel ports: from every pod in the namespace
/// (clients, the other tier, the observer, replication) and from the operator pod. Exporter
/// port: from `networkPolicy.metricsFrom`, else from the namespace only (the exporter dials any
/// `/scrape?target=`). Observer port: from anywhere (kubelet probes come from the node). See docs/adr/0004-data-pod-anatomy.md.
pub fn network_policies(ctx: &Ctx<'_>) -> Vec<NetworkPolicy> {
    let spec = ctx.spec;
    if !spec.network_policy_enabled() {
        return Vec::new();
    }
    let prefix = spec
        .network_policy
        .as_ref()
        .and_then(|n| n.name_prefix.as_deref());
    let same_namespace = NetworkPolicyPeer {
        pod_selector: Some(LabelSelector::default()),
        ..NetworkPolicyPeer::default()
    };
    let operator = ctx
        .inputs
        .operator_peer
        .as_ref()
        .map(|peer| NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    "kubernetes.io/metadata.name".to_owned(),
                    peer.namespace.clone(),
                )])),
                match_expressions: None,
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(peer.pod_labels.clone()),
                match_expressions: None,
            }),
            ..NetworkPolicyPeer::default()
        });
    let peers = || {
        let mut from = vec![same_namespace.clone()];
        from.extend(operator.clone());
        from
    };
    let policy = |name: String, component: Component, ingress: Vec<NetworkPolicyIngressRule>| {
        NetworkPolicy {
            metadata: ctx.meta(name, ctx.labels(component)),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(ctx.selector(component)),
                    match_expressions: None,
                }),
                policy_types: Some(vec!["Ingress".to_owned()]),
                ingress: Some(ingress),
                egress: None,
            }),
        }
    };

    let valkey_ports: Vec<i32> = ctx.ports.valkey_ports().iter().map(|(_, p)| *p).collect();
    let mut data_rules = vec![NetworkPolicyIngressRule {
        from: Some(peers()),
        ports: Some(tcp_ports(&valkey_ports)),
    }];
    if spec.metrics_enabled() {
        // An empty list would render `from: []`, which admits everyone: the CRD refuses it, and
        // it falls back to this namespace here too.
        let scrapers = spec
            .network_policy
            .as_ref()
            .and_then(|n| n.metrics_from.clone())
            .filter(|peers| !peers.is_empty())
            .unwrap_or_else(|| vec![same_namespace.clone()]);
        data_rules.push(NetworkPolicyIngressRule {
            from: Some(scrapers),
            ports: Some(tcp_ports(&[spec.metrics_port()])),
        });
    }
    let names = &ctx.names;
    let mut policies = vec![policy(
        names.network_policy(prefix, None),
        Component::Valkey,
        data_rules,
    )];
    if spec.sentinel_enabled() {
        let sentinel_ports: Vec<i32> = ctx.ports.sentinel_ports().iter().map(|(_, p)| *p).collect();
        policies.push(policy(
            names.network_policy(prefix, Some("sentinel")),
            Component::Sentinel,
            vec![NetworkPolicyIngressRule {
                from: Some(peers()),
                ports: Some(tcp_ports(&sentinel_ports)),
            }],
        ));
    }
    if spec.observer_enabled() {
        policies.push(policy(
            names.network_policy(prefix, Some("observer")),
            Component::Observer,
            vec![NetworkPolicyIngressRule {
                from: None,
                ports: Some(tcp_ports(&[port_numbers::OBSERVER])),
            }],
        ));
    }
    policies
}

fn service_dns_names(names: &Names, service: &str) -> Vec<String> {
    let namespace = names.namespace();
    vec![
        service.to_owned(),
        format!("{service}.{namespace}"),
        format!("{service}.{namespace}.svc"),
        names.service_fqdn(service),
    ]
}

/// DNS names of the data tier. Every client Service is listed at every size, so scaling from
/// one pod to several does not re-issue the certificate (which would roll the pods).
fn data_dns_names(names: &Names) -> Vec<String> {
    let mut dns = vec![format!(
        "*.{}",
        names.service_fqdn(&names.headless_service())
    )];
    for service in [
        names.headless_service(),
        names.rw_service(),
        names.r_service(),
        names.all_service(),
    ] {
        dns.extend(service_dns_names(names, &service));
    }
    dns
}

fn sentinel_dns_names(names: &Names) -> Vec<String> {
    let headless = names.sentinel_headless_service();
    let mut dns = vec![format!("*.{}", names.service_fqdn(&headless))];
    dns.extend(service_dns_names(names, &headless));
    dns
}

/// cert-manager Certificates: `<name>-tls` (data, or both tiers when unified) and
/// `<name>-sentinel-tls` (Sentinel, separate).
pub fn certificates(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let names = &ctx.names;
    let Some(cert_manager) = spec.cert_manager() else {
        return Ok(Vec::new());
    };
    let extra = cert_manager.extra_dns_names.clone().unwrap_or_default();
    for (index, name) in extra.iter().enumerate() {
        if !is_certificate_dns_name(name) {
            return Err(RenderError::InvalidDnsName {
                field: format!("spec.tls.certManager.extraDnsNames[{index}]"),
                value: name.clone(),
            });
        }
    }
    let issuer = &cert_manager.issuer;
    let issuer_ref = json!({
        "name": issuer.name,
        "kind": issuer.kind,
        "group": issuer.group.as_deref().filter(|g| !g.is_empty()).unwrap_or(defaults::CERT_MANAGER_GROUP),
    });
    let secrets = tls_secrets(spec, names);
    let certificate = |name: String,
                       component: Component,
                       dns: Vec<String>|
     -> Result<Value, RenderError> {
        let mut unique = Vec::new();
        for entry in dns {
            if !unique.contains(&entry) {
                unique.push(entry);
            }
        }
        let metadata = serde_json::to_value(ctx.meta(name.clone(), ctx.labels(component)))
            .map_err(|e| RenderError::serialization("Certificate metadata", &e))?;
        Ok(json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": metadata,
            "spec": {
                "secretName": name,
                "issuerRef": issuer_ref,
                "dnsNames": unique,
                // The pods present the same certificate as clients (replication, Sentinel,
                // sidecar), so it must be valid for both directions.
                "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
            },
        }))
    };
    let mut data_dns = data_dns_names(names);
    if spec.sentinel_enabled() && secrets.sentinel.is_none() {
        data_dns.extend(sentinel_dns_names(names));
    }
    data_dns.extend(extra);
    let mut out = vec![certificate(
        secrets.data.clone(),
        Component::Valkey,
        data_dns,
    )?];
    // extraDnsNames are names clients use for Valkey; they go on the certificate Valkey
    // serves, not on a separate Sentinel certificate.
    if let Some(sentinel_secret) = secrets.sentinel {
        out.push(certificate(
            sentinel_secret,
            Component::Sentinel,
            sentinel_dns_names(names),
        )?);
    }
    Ok(out)
}

/// The ServiceMonitors: `<name>-metrics` selecting the metrics Service, and with the observer
/// `<name>-observer` selecting its Service. Both carry the same interval, timeout and labels.
pub fn service_monitors(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let mut metrics_selector = ctx.selector(Component::Valkey);
    metrics_selector.insert(METRICS_LABEL.to_owned(), "true".to_owned());
    let mut monitors = vec![service_monitor(
        ctx,
        ctx.names.metrics_service(),
        Component::Valkey,
        metrics_selector,
        port_names::METRICS,
    )?];
    if spec.observer_service_monitor_enabled() {
        monitors.push(service_monitor(
            ctx,
            ctx.names.observer(),
            Component::Observer,
            ctx.selector(Component::Observer),
            port_names::HEALTH,
        )?);
    }
    Ok(monitors)
}

fn service_monitor(
    ctx: &Ctx<'_>,
    name: String,
    component: Component,
    selector: BTreeMap<String, String>,
    port: &str,
) -> Result<Value, RenderError> {
    let spec = ctx.spec;
    let monitor = spec
        .metrics
        .as_ref()
        .and_then(|m| m.service_monitor.as_ref());
    let labels = merge_user_labels(
        "spec.metrics.serviceMonitor.labels",
        monitor.and_then(|m| m.labels.as_ref()),
        ctx.labels(component),
    )?;
    let mut endpoint = json!({
        "port": port,
        "path": "/metrics",
        "interval": spec.metrics_scrape_interval(),
    });
    if let Some(timeout) = monitor
        .and_then(|m| m.scrape_timeout.as_deref())
        .filter(|t| !t.is_empty())
    {
        endpoint["scrapeTimeout"] = json!(timeout);
    }
    let metadata = serde_json::to_value(ctx.meta(name, labels))
        .map_err(|e| RenderError::serialization("ServiceMonitor metadata", &e))?;
    Ok(json!({
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata,
        "spec": {
            "selector": { "matchLabels": selector },
            "namespaceSelector": { "matchNames": [ctx.names.namespace()] },
            "endpoints": [endpoint],
        },
    }))
}

/// The observer's readiness and liveness probes: the same timing, on its one HTTP port.
const OBSERVER_PROBE_TIMING: Timing = Timing {
    initial_delay: 5,
    period: 10,
    timeout: 3,
    failure_threshold: 3,
};

/// The observer Deployment and its ServiceAccount.
pub fn observer(
    ctx: &Ctx<'_>,
    tls: Option<&TlsSecrets>,
) -> Result<Option<ObserverObjects>, RenderError> {
    let spec = ctx.spec;
    if !spec.observer_enabled() {
        return Ok(None);
    }
    let names = &ctx.names;
    let labels = ctx.labels(Component::Observer);
    let checks = spec.observer_unready_when();
    let unready_on: Vec<&str> = [
        (checks.master_unreachable, "master-unreachable"),
        (checks.write_test_failure, "write-test-failure"),
        (checks.read_test_failure, "read-test-failure"),
        (checks.replica_sync_failure, "replica-sync-failure"),
        (
            checks.replica_read_test_failure,
            "replica-read-test-failure",
        ),
        (checks.sentinel_unreachable, "sentinel-unreachable"),
        (checks.sentinel_quorum_failure, "sentinel-quorum-failure"),
        (checks.sentinel_master_down, "sentinel-master-down"),
        (
            checks.sentinel_master_hostname_invalid,
            "sentinel-master-hostname-invalid",
        ),
        (
            checks.sentinel_replica_hostnames_invalid,
            "sentinel-replica-hostnames-invalid",
        ),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    let log_level = serde_json::to_value(spec.observer_log_level())
        .map_err(|e| RenderError::serialization("observer log level", &e))?;
    let mut args = vec![
        format!("--listen-port={}", port_numbers::OBSERVER),
        format!("--replicas={}", spec.replicas()),
        format!("--db={}", spec.observer_db()),
        format!("--log-level={}", log_level.as_str().unwrap_or("info")),
        format!("--unready-on={}", unready_on.join(",")),
    ];
    args.extend(cluster_args(ctx));
    if spec.sentinel_enabled() {
        args.push(format!("--sentinel-replicas={}", spec.sentinel_replicas()));
    }
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(secrets) = tls {
        args.push(format!("--tls-ca-file={TLS_CA_FILE}"));
        let valkey_mtls = spec.observer_valkey_mtls();
        let sentinel_mtls = spec.observer_sentinel_mtls();
        // Without mTLS only the CA is mounted: no private key in the observer pod.
        let data_items =
            (!(valkey_mtls || (sentinel_mtls && secrets.sentinel.is_none()))).then(|| {
                vec![KeyToPath {
                    key: "ca.crt".to_owned(),
                    path: "ca.crt".to_owned(),
                    mode: None,
                }]
            });
        volumes.push(secret_volume("tls", &secrets.data, data_items));
        mounts.push(mount("tls", TLS_DIR, true));
        if valkey_mtls {
            args.push(format!("--valkey-client-cert-file={TLS_CERT_FILE}"));
            args.push(format!("--valkey-client-key-file={TLS_KEY_FILE}"));
        }
        if sentinel_mtls && spec.sentinel_enabled() {
            let dir = match &secrets.sentinel {
                Some(sentinel_secret) => {
                    volumes.push(secret_volume("sentinel-tls", sentinel_secret, None));
                    mounts.push(mount("sentinel-tls", paths::SENTINEL_TLS_DIR, true));
                    paths::SENTINEL_TLS_DIR
                }
                None => TLS_DIR,
            };
            args.push(format!("--sentinel-client-cert-file={dir}/tls.crt"));
            args.push(format!("--sentinel-client-key-file={dir}/tls.key"));
        }
    }
    let mut env = vec![env_field("POD_NAMESPACE", "metadata.namespace")];
    // Read on every round: a rotated password reaches the observer without a restart.
    if let Some((var, auth_mount)) = password_file(ctx) {
        env.push(var);
        mounts.push(auth_mount);
        volumes.extend(auth_volume(ctx));
    }
    let container = Container {
        name: "observer".to_owned(),
        image: Some(ctx.inputs.operator_image.clone()),
        command: Some(vec![OBSERVER_BINARY.to_owned()]),
        args: Some(args),
        ports: Some(vec![container_port(
            port_names::HEALTH,
            port_numbers::OBSERVER,
        )]),
        env: Some(env),
        resources: Some(spec.observer_resources()),
        readiness_probe: Some(http_probe(
            "/readyz",
            port_numbers::OBSERVER,
            OBSERVER_PROBE_TIMING,
        )),
        liveness_probe: Some(http_probe(
            "/healthz",
            port_numbers::OBSERVER,
            OBSERVER_PROBE_TIMING,
        )),
        volume_mounts: (!mounts.is_empty()).then_some(mounts),
        security_context: Some(container_security_context()),
        ..Container::default()
    };
    let selector = ctx.selector(Component::Observer);
    let deployment = Deployment {
        metadata: ctx.meta(names.observer(), labels.clone()),
        spec: Some(DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(selector),
                match_expressions: None,
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(names.observer()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    termination_grace_period_seconds: Some(10),
                    security_context: Some(pod_security_context(OPERATOR_UID)),
                    containers: vec![container],
                    volumes: (!volumes.is_empty()).then_some(volumes),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    };
    Ok(Some(ObserverObjects {
        service_account: ServiceAccount {
            metadata: ctx.meta(names.observer(), labels),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        },
        deployment,
    }))
}

fn secret_volume(name: &str, secret: &str, items: Option<Vec<KeyToPath>>) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items,
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The sidecar's ServiceAccount, Role and RoleBinding. The Role allows `get` and `patch` on
/// this cluster's own data pods by name (the spec's pods plus any that still exist), and `get`
/// and `update` on the cluster's master Lease by name, nothing else: the sidecar labels its own
/// pod's role, reads whether it is terminating, and renews or hands over the master Lease.
pub fn sidecar_rbac(ctx: &Ctx<'_>) -> SidecarRbac {
    let names = &ctx.names;
    let labels = ctx.labels(Component::Valkey);
    let desired = u32::try_from(ctx.spec.replicas()).unwrap_or(0);
    let mut ordinals: Vec<u32> = (0..desired).collect();
    ordinals.extend(ctx.inputs.live_pod_ordinals.iter().copied());
    ordinals.sort_unstable();
    ordinals.dedup();
    let pods: Vec<String> = ordinals.into_iter().map(|o| names.data_pod(o)).collect();
    SidecarRbac {
        service_account: ServiceAccount {
            metadata: ctx.meta(names.sidecar(), labels.clone()),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        },
        role: Role {
            metadata: ctx.meta(names.sidecar(), labels.clone()),
            rules: Some(vec![
                PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["pods".to_owned()]),
                    // `list`/`watch`: the sidecar watches its own pod by name (its label read
                    // back without a GET every 10 s); RBAC matches `metadata.name=<pod>`
                    // against these names.
                    verbs: ["get", "list", "watch", "patch"].map(String::from).to_vec(),
                    resource_names: Some(pods),
                    non_resource_urls: None,
                },
                // The master Lease without Sentinel (ADR 0022): read, renewed by its holder and
                // moved to the successor by the preStop handover, each a guarded PUT.
                PolicyRule {
                    api_groups: Some(vec!["coordination.k8s.io".to_owned()]),
                    resources: Some(vec!["leases".to_owned()]),
                    verbs: vec!["get".to_owned(), "update".to_owned()],
                    resource_names: Some(vec![format!("{}-master", names.name())]),
                    non_resource_urls: None,
                },
            ]),
        },
        role_binding: RoleBinding {
            metadata: ctx.meta(names.sidecar(), labels),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".to_owned(),
                kind: "Role".to_owned(),
                name: names.sidecar(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: names.sidecar(),
                namespace: Some(names.namespace().to_owned()),
                api_group: None,
            }]),
        },
    }
}
