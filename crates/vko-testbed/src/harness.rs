//! What end-to-end tests in `tests/` use against a running testbed: connect, a namespace per test,
//! apply YAML, wait for conditions, find a pod's IP, run `valkey-cli` and `kubectl`.
//!
//! Tests get the testbed from the environment `cargo xtask test` sets: `KUBECONFIG` (the admin
//! kubeconfig) and `VKO_TESTBED_BIN_DIR` (where `kubectl` is).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{
    Api, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::Scope;
use serde::Deserialize;

use crate::{Error, Result, paths};

/// Field manager of everything the tests apply.
pub const FIELD_MANAGER: &str = "vko-e2e";
/// Label on every namespace a test creates (value: the test's prefix).
pub const TEST_NAMESPACE_LABEL: &str = "vko-e2e/test";
const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// A connection to a running testbed.
#[derive(Clone)]
pub struct Testbed {
    client: kube::Client,
    kubeconfig: PathBuf,
}

impl Testbed {
    /// Connects with the kubeconfig in `KUBECONFIG` (what `cargo xtask testbed up` prints).
    pub async fn from_env() -> Result<Testbed> {
        let kubeconfig = std::env::var_os("KUBECONFIG").filter(|value| !value.is_empty()).ok_or_else(|| {
            Error::Other(
                "KUBECONFIG is not set: run the end-to-end tests with `cargo xtask test`, or start a \
                 testbed with `cargo xtask testbed up` and export the KUBECONFIG it prints"
                    .into(),
            )
        })?;
        let kubeconfig = PathBuf::from(kubeconfig);
        let client = crate::controlplane::client_from_kubeconfig(&kubeconfig).await?;
        Ok(Testbed { client, kubeconfig })
    }

    /// A client with the admin identity.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Injects a fault through the supervisor's control socket (in the state directory,
    /// `VKO_TESTBED_DIR` or `/run/vko-testbed`); returns once it took effect.
    pub async fn fault(&self, fault: crate::control::Fault) -> Result<()> {
        let paths = paths::Paths::from_env();
        crate::control::send(&crate::control::socket_path(paths.state_dir()), &fault).await
    }
}

/// A namespace of its own for one test: uniquely named, labelled, deleted by
/// [`TestNamespace::cleanup`] (and, best effort, when dropped without it, for example on a panic).
pub struct TestNamespace {
    name: String,
    client: kube::Client,
    cleaned_up: bool,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and waits until pods can be created in it (its `default`
    /// ServiceAccount and `kube-root-ca.crt` ConfigMap exist).
    pub async fn create(client: &kube::Client, prefix: &str) -> Result<TestNamespace> {
        let name = unique_name(prefix);
        let label = sanitize_label_value(prefix);
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": { "name": name, "labels": { TEST_NAMESPACE_LABEL: label } },
        }))
        .map_err(|error| Error::Other(format!("namespace object: {error}")))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await?;
        let test_namespace = TestNamespace {
            name: name.clone(),
            client: client.clone(),
            cleaned_up: false,
        };

        let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &name);
        wait_until(
            &format!("the default ServiceAccount and kube-root-ca.crt in {name}"),
            Duration::from_secs(60),
            || {
                let service_accounts = service_accounts.clone();
                let config_maps = config_maps.clone();
                async move {
                    let ready = service_accounts.get_opt("default").await?.is_some()
                        && config_maps.get_opt("kube-root-ca.crt").await?.is_some();
                    Ok(ready.then_some(()))
                }
            },
        )
        .await?;
        Ok(test_namespace)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace and waits until it is gone (its pods stopped by the kubelet).
    pub async fn cleanup(mut self) -> Result<()> {
        self.cleaned_up = true;
        let namespaces: Api<Namespace> = Api::all(self.client.clone());
        match namespaces
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(error) => return Err(error.into()),
        }
        wait_until(
            &format!("namespace {} to be deleted", self.name),
            Duration::from_secs(180),
            || {
                let namespaces = namespaces.clone();
                let name = self.name.clone();
                async move { Ok(namespaces.get_opt(&name).await?.is_none().then_some(())) }
            },
        )
        .await
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.cleaned_up {
            return;
        }
        // The test's runtime may be shutting down (a panic unwinds through here), so the deletion
        // gets a thread, a runtime and a client of its own; it does not wait for the namespace to go.
        let name = self.name.clone();
        block_on_own_thread(async move {
            if let Ok(testbed) = Testbed::from_env().await {
                let namespaces: Api<Namespace> = Api::all(testbed.client());
                let _ = tokio::time::timeout(
                    Duration::from_secs(10),
                    namespaces.delete(&name, &DeleteParams::background()),
                )
                .await;
            }
        });
    }
}

/// Runs `work` to its end on a thread with a runtime of its own, for a `Drop` that cleans up: the
/// test's runtime may be shutting down (a panic unwinds through the drop) and cannot be blocked on.
pub fn block_on_own_thread(work: impl std::future::Future<Output = ()> + Send + 'static) {
    let worker = std::thread::spawn(move || {
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(work);
    });
    let _ = worker.join();
}

/// `<prefix>-<5 hex digits>`, unique within this process and very likely across processes.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let mixed = nanos
        ^ std::process::id().rotate_left(16)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9);
    let prefix: String = sanitize_label_value(prefix)
        .to_lowercase()
        .chars()
        .take(50)
        .collect();
    format!("{}-{:05x}", prefix.trim_end_matches('-'), mixed & 0xF_FFFF)
}

/// Keeps `[a-z0-9-]`, maps everything else to `-`.
fn sanitize_label_value(value: &str) -> String {
    let mapped: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    let trimmed = mapped.trim_matches('-');
    if trimmed.is_empty() {
        "test".to_string()
    } else {
        trimmed.to_string()
    }
}

/// Server-side applies a CustomResourceDefinition (field manager [`FIELD_MANAGER`]) and waits until
/// it is Established.
pub async fn install_crd(
    client: &kube::Client,
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let name = crd.metadata.name.clone().ok_or_else(|| Error::Invalid {
        what: "CustomResourceDefinition".into(),
        detail: "missing metadata.name".into(),
    })?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await?;
    wait_until(
        &format!("CRD {name} to be Established"),
        Duration::from_secs(60),
        || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await?;
                let established = crd
                    .status
                    .and_then(|status| status.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established.then_some(()))
            }
        },
    )
    .await
}

/// Server-side applies every document of a (multi-document) YAML, namespaced objects into
/// `namespace` unless they name one; returns the applied objects.
pub async fn apply_yaml(
    client: &kube::Client,
    namespace: &str,
    yaml: &str,
) -> Result<Vec<DynamicObject>> {
    let mut applied = Vec::new();
    for document in serde_norway::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document).map_err(|error| Error::Invalid {
            what: "YAML".into(),
            detail: error.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let object: DynamicObject =
            serde_json::from_value(value).map_err(|error| Error::Invalid {
                what: "Kubernetes object".into(),
                detail: error.to_string(),
            })?;
        let types = object.types.as_ref().ok_or_else(|| Error::Invalid {
            what: "Kubernetes object".into(),
            detail: "missing apiVersion/kind".into(),
        })?;
        let gvk = GroupVersionKind::try_from(types).map_err(|error| Error::Invalid {
            what: "apiVersion".into(),
            detail: error.to_string(),
        })?;
        let name = object.metadata.name.clone().ok_or_else(|| Error::Invalid {
            what: format!("{} object", gvk.kind),
            detail: "missing metadata.name".into(),
        })?;
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => {
                let target = object.metadata.namespace.as_deref().unwrap_or(namespace);
                Api::namespaced_with(client.clone(), target, &resource)
            }
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let params = PatchParams::apply(FIELD_MANAGER).force();
        applied.push(api.patch(&name, &params, &Patch::Apply(&object)).await?);
    }
    Ok(applied)
}

// ---------------------------------------------------------------------------------------------
// The chart's operator RBAC, bound to the operator under test
// ---------------------------------------------------------------------------------------------

/// Overrides where `helm` is (else `~/.cache/vko/helm-<HELM_VERSION>/helm`).
pub const HELM_BIN_ENV: &str = "VKO_HELM_BIN";
/// The helm release the cache directory is named after (`cargo xtask` builds it from `xtask/helm`).
pub const HELM_VERSION: &str = "v3.22.0";
/// Release name the end-to-end suite renders the chart's RBAC with: its objects are named
/// `vko-e2e-rbac-valkey-operator`, apart from any release a helm test installs.
pub const E2E_RBAC_RELEASE: &str = "vko-e2e-rbac";
/// The namespace of the host-process operator's leader Lease (`--leader-election-namespace`).
pub const E2E_LEASE_NAMESPACE: &str = "default";
/// The chart's templates holding the operator's RBAC: ClusterRole + ClusterRoleBinding, and the
/// leader-election Role + RoleBinding.
pub const CHART_RBAC_TEMPLATES: [&str; 2] = [
    "templates/clusterrole.yaml",
    "templates/leader-election-role.yaml",
];

/// The `helm` binary: `VKO_HELM_BIN`, else the cache.
pub fn helm_binary() -> PathBuf {
    match std::env::var_os(HELM_BIN_ENV) {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => paths::cache_root()
            .join(format!("helm-{HELM_VERSION}"))
            .join("helm"),
    }
}

/// `helm template <release> <chart> --namespace <namespace> [--set k=v]... --show-only <t>...`:
/// the rendered YAML of those templates (real helm, so the test sees what `helm install` applies).
pub async fn helm_template(
    chart: &Path,
    release: &str,
    namespace: &str,
    set: &[&str],
    show_only: &[&str],
) -> Result<String> {
    let helm = helm_binary();
    if !helm.is_file() {
        return Err(Error::Other(format!(
            "{} does not exist: build helm (the chart's helper builds it from xtask/helm into the \
             cache) or point {HELM_BIN_ENV} at a helm binary",
            helm.display()
        )));
    }
    let mut command = tokio::process::Command::new(&helm);
    command
        .arg("template")
        .arg(release)
        .arg(chart)
        .args(["--namespace", namespace]);
    for value in set {
        command.args(["--set", value]);
    }
    for template in show_only {
        command.args(["--show-only", template]);
    }
    run_output(
        command,
        &format!("helm template {release} {}", chart.display()),
    )
    .await
}

/// The documents of a multi-document YAML, as JSON values (empty documents dropped).
pub fn yaml_documents(yaml: &str) -> Result<Vec<serde_json::Value>> {
    let mut documents = Vec::new();
    for document in serde_norway::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(document).map_err(|error| Error::Invalid {
            what: "YAML".into(),
            detail: error.to_string(),
        })?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// The chart's operator RBAC as `helm template` renders it for [`E2E_RBAC_RELEASE`] with the Lease in
/// [`E2E_LEASE_NAMESPACE`], every binding's subjects replaced by the user the host-process operator
/// authenticates as ([`crate::pki::E2E_OPERATOR_USER`]). Rules and role references are the chart's,
/// untouched: the operator under test gets exactly the chart's permissions.
pub async fn chart_operator_rbac(chart: &Path) -> Result<Vec<serde_json::Value>> {
    let lease_namespace = format!("leaderElection.namespace={E2E_LEASE_NAMESPACE}");
    let yaml = helm_template(
        chart,
        E2E_RBAC_RELEASE,
        E2E_LEASE_NAMESPACE,
        &["leaderElection.enabled=true", &lease_namespace],
        &CHART_RBAC_TEMPLATES,
    )
    .await?;
    bind_to_e2e_operator(yaml_documents(&yaml)?)
}

/// Replaces the subjects of every (Cluster)RoleBinding with the end-to-end operator user; fails
/// unless there is a ClusterRole, a Role and a binding for each.
fn bind_to_e2e_operator(mut objects: Vec<serde_json::Value>) -> Result<Vec<serde_json::Value>> {
    let kinds: Vec<String> = objects
        .iter()
        .map(|object| object["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        if !kinds.iter().any(|found| found == kind) {
            return Err(Error::Invalid {
                what: "the chart's operator RBAC".into(),
                detail: format!("no {kind} among the rendered {kinds:?}"),
            });
        }
    }
    for object in &mut objects {
        if object["kind"] == "ClusterRoleBinding" || object["kind"] == "RoleBinding" {
            object["subjects"] = serde_json::json!([{
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "User",
                "name": crate::pki::E2E_OPERATOR_USER,
            }]);
        }
    }
    Ok(objects)
}

/// The rules of the `kind` object (ClusterRole or Role) among rendered RBAC objects.
pub fn rendered_rules(
    objects: &[serde_json::Value],
    kind: &str,
) -> Result<Vec<k8s_openapi::api::rbac::v1::PolicyRule>> {
    let role = objects
        .iter()
        .find(|object| object["kind"] == kind)
        .ok_or_else(|| Error::Other(format!("no {kind} among the rendered objects")))?;
    serde_json::from_value(role["rules"].clone()).map_err(|error| Error::Invalid {
        what: format!("{kind} rules"),
        detail: error.to_string(),
    })
}

/// Applies the chart's operator RBAC bound to the end-to-end operator user (see
/// [`chart_operator_rbac`]) and waits until the API server's authorizer grants it (RBAC is read from
/// a watch cache, so a fresh binding takes a moment).
pub async fn install_operator_rbac(client: &kube::Client, chart: &Path) -> Result<()> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let objects = chart_operator_rbac(chart).await?;
    let yaml = objects
        .iter()
        .map(|object| serde_json::to_string(object).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n");
    apply_yaml(client, E2E_LEASE_NAMESPACE, &yaml).await?;

    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    // One permission from each binding: the ClusterRole's watch on Valkeys, the Role's Lease create.
    let probes = [
        ("vko.gtrfc.com", "valkeys", "list", None),
        (
            "coordination.k8s.io",
            "leases",
            "create",
            Some(E2E_LEASE_NAMESPACE),
        ),
    ];
    for (group, resource, verb, namespace) in probes {
        let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": crate::pki::E2E_OPERATOR_USER,
                "resourceAttributes": {
                    "group": group, "resource": resource, "verb": verb, "namespace": namespace,
                },
            },
        }))
        .map_err(|error| Error::Other(format!("SubjectAccessReview: {error}")))?;
        wait_until(
            &format!(
                "{} to be allowed to {verb} {resource}",
                crate::pki::E2E_OPERATOR_USER
            ),
            Duration::from_secs(30),
            || {
                let reviews = reviews.clone();
                let review = review.clone();
                async move {
                    let answer = reviews.create(&PostParams::default(), &review).await?;
                    Ok(answer
                        .status
                        .is_some_and(|status| status.allowed)
                        .then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Polls `check` every half second until it yields `Some`, for at most `timeout`. Errors from
/// `check` count as "not yet" (the API server may be briefly unavailable in fault tests); the last
/// one is part of the timeout error, which names `what` was awaited.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error: Option<String> = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(error) => last_error = Some(error.to_string()),
        }
        if Instant::now() >= deadline {
            let what = match last_error {
                Some(error) => format!("{what} (last error: {error})"),
                None => what.to_string(),
            };
            return Err(Error::Timeout {
                what,
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// The pod's IP (its `status.podIP`); an error while it has none.
pub async fn pod_ip(client: &kube::Client, namespace: &str, pod: &str) -> Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.get(pod)
        .await?
        .status
        .and_then(|status| status.pod_ip)
        .ok_or_else(|| Error::Other(format!("pod {namespace}/{pod} has no IP yet")))
}

/// Runs the host's `valkey-cli -h <ip> <args>` (the host reaches pod IPs over the bridge) and
/// returns its standard output.
pub async fn valkey_cli(ip: &str, args: &[&str]) -> Result<String> {
    let mut command = tokio::process::Command::new("valkey-cli");
    command.arg("-h").arg(ip).args(args);
    run_output(command, &format!("valkey-cli -h {ip} {}", args.join(" "))).await
}

/// Runs the testbed's `kubectl` (from `VKO_TESTBED_BIN_DIR`, else the binary cache) with the
/// environment's `KUBECONFIG`, and returns its standard output.
pub async fn kubectl(args: &[&str]) -> Result<String> {
    let mut command = tokio::process::Command::new(paths::bin_dir().join("kubectl"));
    command.args(args);
    run_output(command, &format!("kubectl {}", args.join(" "))).await
}

/// Runs the testbed's `kubectl` with `stdin` as its standard input and returns how it ended, whatever
/// its exit code (for `kubectl exec`, whose exit code is the command's).
pub async fn kubectl_output(args: &[&str], stdin: &[u8]) -> Result<std::process::Output> {
    use tokio::io::AsyncWriteExt;
    let description = format!("kubectl {}", args.join(" "));
    let mut child = tokio::process::Command::new(paths::bin_dir().join("kubectl"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(Error::io(format!("running {description}")))?;
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(stdin)
            .await
            .map_err(Error::io(format!("writing to {description}")))?;
        // Dropping the pipe ends kubectl's input.
    }
    tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .map_err(|_| Error::Timeout {
            what: description.clone(),
            seconds: 60,
        })?
        .map_err(Error::io(format!("running {description}")))
}

async fn run_output(mut command: tokio::process::Command, description: &str) -> Result<String> {
    command
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .map_err(|_| Error::Timeout {
            what: description.to_string(),
            seconds: 60,
        })?
        .map_err(Error::io(format!("running {description}")))?;
    Error::unless_success(&output, description)?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_names_are_valid_and_differ() {
        let first = unique_name("Replication_Test");
        let second = unique_name("Replication_Test");
        assert_ne!(first, second);
        assert!(first.starts_with("replication-test-"), "{first}");
        assert!(first.len() <= 63);
        assert!(
            first
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(unique_name(&"x".repeat(100)).len() <= 63);
    }

    #[test]
    fn label_values_are_sanitized() {
        assert_eq!(sanitize_label_value("a b/c"), "a-b-c");
        assert_eq!(sanitize_label_value("--"), "test");
    }

    #[tokio::test]
    async fn wait_until_returns_the_value_or_names_what_timed_out() {
        let mut calls = 0;
        let value = wait_until("the third call", Duration::from_secs(5), || {
            calls += 1;
            let now = calls;
            async move { Ok((now >= 3).then_some(now)) }
        })
        .await
        .unwrap();
        assert_eq!(value, 3);

        let error = wait_until::<(), _, _>(
            "something that never happens",
            Duration::from_millis(10),
            || async { Err(Error::Other("boom".into())) },
        )
        .await
        .unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("something that never happens"),
            "{message}"
        );
        assert!(message.contains("boom"), "{message}");
    }

    #[tokio::test]
    async fn from_env_without_kubeconfig_says_how_to_get_one() {
        // Only meaningful when the variable is unset (as in plain `cargo test`).
        if std::env::var_os("KUBECONFIG").is_some() {
            return;
        }
        let error = Testbed::from_env().await.err().unwrap();
        assert!(error.to_string().contains("cargo xtask test"));
    }

    #[test]
    fn the_chart_rbac_is_bound_to_the_e2e_operator_user_only() {
        let rendered = yaml_documents(
            "---\n# Source: x\nkind: ClusterRole\nmetadata: {name: r}\nrules: [{apiGroups: [''], resources: [pods], verbs: [list]}]\n\
             ---\nkind: ClusterRoleBinding\nmetadata: {name: r}\nroleRef: {kind: ClusterRole, name: r}\n\
             subjects: [{kind: ServiceAccount, name: sa, namespace: ns}]\n\
             ---\nkind: Role\nmetadata: {name: l}\nrules: []\n\
             ---\nkind: RoleBinding\nmetadata: {name: l}\nroleRef: {kind: Role, name: l}\n\
             subjects: [{kind: ServiceAccount, name: sa, namespace: ns}]\n",
        )
        .unwrap();
        assert_eq!(rendered.len(), 4);
        let bound = bind_to_e2e_operator(rendered.clone()).unwrap();
        for binding in [&bound[1], &bound[3]] {
            assert_eq!(
                binding["subjects"],
                serde_json::json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "vko-e2e-operator"}])
            );
        }
        assert_eq!(bound[0], rendered[0], "rules are the chart's");
        assert_eq!(bound[1]["roleRef"], rendered[1]["roleRef"]);
        let rules = rendered_rules(&bound, "ClusterRole").unwrap();
        assert!(rendered_rules(&bound, "Role").unwrap().is_empty());
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["pods".to_string()][..])
        );
        let error = bind_to_e2e_operator(rendered[..2].to_vec()).unwrap_err();
        assert!(error.to_string().contains("no Role"), "{error}");
    }

    #[tokio::test]
    async fn apply_yaml_rejects_objects_without_a_name_before_calling_the_api() {
        // An unreachable server: the name check must fail first.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let error = apply_yaml(
            &client,
            "ns",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n",
        )
        .await
        .unwrap_err();
        assert!(error.to_string().contains("metadata.name"), "{error}");
        let empty = apply_yaml(&client, "ns", "---\n---\n").await.unwrap();
        assert!(empty.is_empty());
    }
}
