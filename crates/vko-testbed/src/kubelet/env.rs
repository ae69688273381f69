//! A container's environment, resolved like the kubelet's `makeEnvironmentVariables`: `envFrom` in
//! order, then `env` in order (a plain `value` may reference earlier variables and the service
//! variables with `$(VAR)`), then the `kubernetes` service variables not already defined. The
//! runtime-provided `PATH` and `HOSTNAME` come first and are overridden by the pod's own.
//!
//! Only the `kubernetes` service's link variables are injected (service links of other Services in the
//! namespace are not): pointing at the API server's bridge address, as `KUBERNETES_SERVICE_HOST/PORT`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddrV4;

use k8s_openapi::api::core::v1::{ConfigMap, Container, EnvVarSource, Pod, Secret};

/// Why a container's configuration cannot be built (reported as `CreateContainerConfigError`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Everything outside the container spec that env resolution reads.
#[derive(Clone, Debug)]
pub struct EnvContext<'a> {
    pub pod: &'a Pod,
    pub pod_ip: &'a str,
    pub host_ip: &'a str,
    /// The container's hostname (the pod's `spec.hostname` or name).
    pub hostname: &'a str,
    pub api_server: SocketAddrV4,
    /// Secrets of the pod's namespace by name; `None` when it does not exist.
    pub secrets: &'a BTreeMap<String, Option<Secret>>,
    /// ConfigMaps of the pod's namespace by name; `None` when it does not exist.
    pub config_maps: &'a BTreeMap<String, Option<ConfigMap>>,
    /// The image's environment, under the pod's (`ImageMapping::base_env`).
    pub image_env: &'a [(String, String)],
}

/// The Secrets and ConfigMaps (by name) a container's env and envFrom refer to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct References {
    pub secrets: BTreeSet<String>,
    pub config_maps: BTreeSet<String>,
}

/// Which Secrets and ConfigMaps must be fetched to resolve this container's environment.
pub fn references(container: &Container) -> References {
    let mut refs = References::default();
    for from in container.env_from.iter().flatten() {
        if let Some(config_map) = &from.config_map_ref {
            refs.config_maps.insert(config_map.name.clone());
        }
        if let Some(secret) = &from.secret_ref {
            refs.secrets.insert(secret.name.clone());
        }
    }
    for var in container.env.iter().flatten() {
        if let Some(source) = &var.value_from {
            if let Some(key) = &source.config_map_key_ref {
                refs.config_maps.insert(key.name.clone());
            }
            if let Some(key) = &source.secret_key_ref {
                refs.secrets.insert(key.name.clone());
            }
        }
    }
    refs
}

/// The resolved environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvedEnv {
    /// What `$(VAR)` in command, args and subPathExpr expands against (pod env + service variables,
    /// not the runtime's PATH/HOSTNAME — as in the kubelet).
    pub expansion: BTreeMap<String, String>,
    /// The full environment the process gets, in order, each name once.
    pub process: Vec<(String, String)>,
}

impl ResolvedEnv {
    /// Expands `$(VAR)` references against the container's variables.
    pub fn expand(&self, input: &str) -> String {
        expand(input, |name| self.expansion.get(name).cloned())
    }
}

/// The `kubernetes` service's link variables, as the kubelet injects them.
pub fn service_variables(api_server: SocketAddrV4) -> Vec<(String, String)> {
    let host = api_server.ip().to_string();
    let port = api_server.port().to_string();
    let url = format!("tcp://{host}:{port}");
    let prefix = format!("KUBERNETES_PORT_{port}_TCP");
    vec![
        ("KUBERNETES_SERVICE_HOST".into(), host.clone()),
        ("KUBERNETES_SERVICE_PORT".into(), port.clone()),
        ("KUBERNETES_SERVICE_PORT_HTTPS".into(), port.clone()),
        ("KUBERNETES_PORT".into(), url.clone()),
        (prefix.clone(), url),
        (format!("{prefix}_PROTO"), "tcp".into()),
        (format!("{prefix}_PORT"), port),
        (format!("{prefix}_ADDR"), host),
    ]
}

/// Resolves a container's environment. A missing non-optional Secret/ConfigMap or key, or an
/// unsupported field reference, is a [`ConfigError`] with the kubelet's wording.
pub fn resolve(container: &Container, ctx: &EnvContext<'_>) -> Result<ResolvedEnv, ConfigError> {
    let namespace = ctx.pod.metadata.namespace.as_deref().unwrap_or("default");
    let service_env = service_variables(ctx.api_server);
    let mut pod_env: Vec<(String, String)> = Vec::new();

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.as_deref().unwrap_or("");
        if let Some(reference) = &from.config_map_ref {
            match ctx
                .config_maps
                .get(&reference.name)
                .and_then(Option::as_ref)
            {
                Some(config_map) => {
                    for (key, value) in config_map.data.iter().flatten() {
                        set_if_valid(&mut pod_env, format!("{prefix}{key}"), value.clone());
                    }
                }
                None if reference.optional == Some(true) => {}
                None => {
                    return Err(ConfigError(format!(
                        "configmap {:?} not found",
                        reference.name
                    )));
                }
            }
        }
        if let Some(reference) = &from.secret_ref {
            match ctx.secrets.get(&reference.name).and_then(Option::as_ref) {
                Some(secret) => {
                    for (key, value) in secret.data.iter().flatten() {
                        set_if_valid(
                            &mut pod_env,
                            format!("{prefix}{key}"),
                            String::from_utf8_lossy(&value.0).into_owned(),
                        );
                    }
                }
                None if reference.optional == Some(true) => {}
                None => {
                    return Err(ConfigError(format!(
                        "secret {:?} not found",
                        reference.name
                    )));
                }
            }
        }
    }

    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (Some(value), _) if !value.is_empty() => {
                let defined: BTreeMap<&str, &str> = service_env
                    .iter()
                    .chain(pod_env.iter())
                    .map(|(name, value)| (name.as_str(), value.as_str()))
                    .collect();
                Some(expand(value, |name| {
                    defined.get(name).map(|value| value.to_string())
                }))
            }
            (_, Some(source)) => value_from(source, ctx, namespace)?,
            _ => Some(String::new()),
        };
        if let Some(value) = value {
            set(&mut pod_env, var.name.clone(), value);
        }
    }

    let mut expansion: BTreeMap<String, String> = service_env.iter().cloned().collect();
    expansion.extend(pod_env.iter().cloned());

    let mut process = ctx.image_env.to_vec();
    set(
        &mut process,
        "HOSTNAME".to_string(),
        ctx.hostname.to_string(),
    );
    for (name, value) in pod_env.iter().chain(
        service_env
            .iter()
            .filter(|(name, _)| !pod_env.iter().any(|(n, _)| n == name)),
    ) {
        set(&mut process, name.clone(), value.clone());
    }
    Ok(ResolvedEnv { expansion, process })
}

fn value_from(
    source: &EnvVarSource,
    ctx: &EnvContext<'_>,
    namespace: &str,
) -> Result<Option<String>, ConfigError> {
    if let Some(field) = &source.field_ref {
        return field_value(&field.field_path, ctx).map(Some);
    }
    if let Some(key) = &source.secret_key_ref {
        let optional = key.optional == Some(true);
        return match ctx.secrets.get(&key.name).and_then(Option::as_ref) {
            None if optional => Ok(None),
            None => Err(ConfigError(format!("secret {:?} not found", key.name))),
            Some(secret) => match secret.data.as_ref().and_then(|data| data.get(&key.key)) {
                Some(value) => Ok(Some(String::from_utf8_lossy(&value.0).into_owned())),
                None => match secret
                    .string_data
                    .as_ref()
                    .and_then(|data| data.get(&key.key))
                {
                    Some(value) => Ok(Some(value.clone())),
                    None if optional => Ok(None),
                    None => Err(ConfigError(format!(
                        "couldn't find key {} in Secret {namespace}/{}",
                        key.key, key.name
                    ))),
                },
            },
        };
    }
    if let Some(key) = &source.config_map_key_ref {
        let optional = key.optional == Some(true);
        return match ctx.config_maps.get(&key.name).and_then(Option::as_ref) {
            None if optional => Ok(None),
            None => Err(ConfigError(format!("configmap {:?} not found", key.name))),
            Some(config_map) => {
                match config_map.data.as_ref().and_then(|data| data.get(&key.key)) {
                    Some(value) => Ok(Some(value.clone())),
                    None if optional => Ok(None),
                    None => Err(ConfigError(format!(
                        "couldn't find key {} in ConfigMap {namespace}/{}",
                        key.key, key.name
                    ))),
                }
            }
        };
    }
    if source.resource_field_ref.is_some() {
        return Err(ConfigError(
            "env valueFrom.resourceFieldRef is not supported by the testbed kubelet".into(),
        ));
    }
    Err(ConfigError(
        "env valueFrom has no supported source (fieldRef, secretKeyRef, configMapKeyRef)".into(),
    ))
}

/// The value of a downward-API field path (the ones allowed in env).
pub fn field_value(path: &str, ctx: &EnvContext<'_>) -> Result<String, ConfigError> {
    let meta = &ctx.pod.metadata;
    let spec = ctx.pod.spec.as_ref();
    let value = match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec
            .and_then(|spec| spec.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|spec| spec.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => ctx.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.to_string(),
        _ => {
            let keyed = |prefix: &str| {
                path.strip_prefix(prefix)
                    .and_then(|rest| rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")))
                    .and_then(|rest| rest.strip_suffix("']").or_else(|| rest.strip_suffix("\"]")))
                    .map(str::to_string)
            };
            if let Some(key) = keyed("metadata.labels") {
                meta.labels
                    .as_ref()
                    .and_then(|labels| labels.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(key) = keyed("metadata.annotations") {
                meta.annotations
                    .as_ref()
                    .and_then(|annotations| annotations.get(&key))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(ConfigError(format!(
                    "unsupported fieldRef fieldPath {path:?}"
                )));
            }
        }
    };
    Ok(value)
}

/// Sets `name` (replacing an earlier definition in place, so each name appears once).
fn set(env: &mut Vec<(String, String)>, name: String, value: String) {
    match env.iter_mut().find(|(existing, _)| *existing == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    }
}

/// envFrom keys that cannot be variable names are skipped, as the kubelet does.
fn set_if_valid(env: &mut Vec<(String, String)>, name: String, value: String) {
    let valid =
        !name.is_empty() && !name.contains('=') && name.chars().all(|c| c.is_ascii_graphic());
    if valid {
        set(env, name, value);
    } else {
        tracing::debug!(
            name,
            "skipping envFrom key that is not a valid variable name"
        );
    }
}

/// Kubernetes' `$(VAR)` expansion: `$(NAME)` is replaced by the variable's value when it is defined
/// and kept verbatim when not; `$$` is an escaped `$`; any other `$` stays as it is.
pub fn expand(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    let mut checkpoint = 0;
    let mut cursor = 0;
    while cursor < bytes.len() {
        if bytes[cursor] == b'$' && cursor + 1 < bytes.len() {
            out.extend_from_slice(&bytes[checkpoint..cursor]);
            let rest = &bytes[cursor + 1..];
            let advance = match rest[0] {
                b'$' => {
                    out.push(b'$');
                    1
                }
                b'(' => match rest.iter().position(|&b| b == b')') {
                    Some(close) => {
                        let name = String::from_utf8_lossy(&rest[1..close]);
                        match lookup(&name) {
                            Some(value) => out.extend_from_slice(value.as_bytes()),
                            None => out.extend_from_slice(format!("$({name})").as_bytes()),
                        }
                        close + 1
                    }
                    None => {
                        out.extend_from_slice(b"$(");
                        1
                    }
                },
                other => {
                    out.push(b'$');
                    out.push(other);
                    1
                }
            };
            cursor += advance;
            checkpoint = cursor + 1;
        }
        cursor += 1;
    }
    out.extend_from_slice(&bytes[checkpoint.min(bytes.len())..]);
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::super::images::DEFAULT_PATH;
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_kubernetes_rules() {
        assert_eq!(expand("$(A)", lookup), "alpha");
        assert_eq!(expand("x-$(A)-y", lookup), "x-alpha-y");
        assert_eq!(expand("$(MISSING)", lookup), "$(MISSING)");
        assert_eq!(expand("$$(A)", lookup), "$(A)");
        assert_eq!(expand("$$$(A)", lookup), "$alpha");
        assert_eq!(expand("$A", lookup), "$A");
        assert_eq!(expand("$(A", lookup), "$(A");
        assert_eq!(expand("cost: 5$", lookup), "cost: 5$");
        assert_eq!(expand("$(EMPTY)!", lookup), "!");
        assert_eq!(expand("ünï$(A)ü", lookup), "ünïalphaü");
        assert_eq!(expand("$ü", lookup), "$ü");
        assert_eq!(expand("", lookup), "");
    }

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "ns1", "uid": "u-1", "labels": {"app": "web"},
                         "annotations": {"note": "hi"}},
            "spec": {"nodeName": "node-2", "serviceAccountName": "sa", "containers": []}
        }))
        .unwrap()
    }

    fn container(value: serde_json::Value) -> Container {
        serde_json::from_value(value).unwrap()
    }

    fn resolve_with(
        container: &Container,
        secrets: &BTreeMap<String, Option<Secret>>,
        config_maps: &BTreeMap<String, Option<ConfigMap>>,
    ) -> Result<ResolvedEnv, ConfigError> {
        let pod = pod();
        let image_env = vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())];
        let ctx = EnvContext {
            pod: &pod,
            pod_ip: "10.244.0.7",
            host_ip: "10.244.0.1",
            hostname: "web-0",
            api_server: "10.244.0.1:6443".parse().unwrap(),
            secrets,
            config_maps,
            image_env: &image_env,
        };
        resolve(container, &ctx)
    }

    fn get<'a>(env: &'a ResolvedEnv, name: &str) -> Option<&'a str> {
        env.process
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn values_field_refs_and_references_to_earlier_variables() {
        let c = container(serde_json::json!({
            "name": "c",
            "env": [
                {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
                {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "NOTE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['note']"}}},
                {"name": "FQDN", "value": "$(POD).svc.$(NS)"},
                {"name": "LATER", "value": "$(AFTER)"},
                {"name": "AFTER", "value": "x"},
                {"name": "API", "value": "$(KUBERNETES_SERVICE_HOST):$(KUBERNETES_SERVICE_PORT)"},
                {"name": "RAW", "value": "$$(POD)"},
                {"name": "NOVALUE"}
            ]
        }));
        let env = resolve_with(&c, &BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert_eq!(get(&env, "POD"), Some("web-0"));
        assert_eq!(get(&env, "NS"), Some("ns1"));
        assert_eq!(get(&env, "IP"), Some("10.244.0.7"));
        assert_eq!(get(&env, "IPS"), Some("10.244.0.7"));
        assert_eq!(get(&env, "HOST"), Some("10.244.0.1"));
        assert_eq!(get(&env, "NODE"), Some("node-2"));
        assert_eq!(get(&env, "SA"), Some("sa"));
        assert_eq!(get(&env, "UID"), Some("u-1"));
        assert_eq!(get(&env, "APP"), Some("web"));
        assert_eq!(get(&env, "NOTE"), Some("hi"));
        assert_eq!(get(&env, "FQDN"), Some("web-0.svc.ns1"));
        // Only earlier variables expand.
        assert_eq!(get(&env, "LATER"), Some("$(AFTER)"));
        assert_eq!(get(&env, "API"), Some("10.244.0.1:6443"));
        assert_eq!(get(&env, "RAW"), Some("$(POD)"));
        assert_eq!(get(&env, "NOVALUE"), Some(""));
        assert_eq!(get(&env, "PATH"), Some(DEFAULT_PATH));
        assert_eq!(get(&env, "HOSTNAME"), Some("web-0"));
        assert_eq!(get(&env, "KUBERNETES_PORT"), Some("tcp://10.244.0.1:6443"));
        assert_eq!(
            get(&env, "KUBERNETES_PORT_6443_TCP_ADDR"),
            Some("10.244.0.1")
        );
        assert_eq!(
            env.expand("--announce $(IP) $(NOPE)"),
            "--announce 10.244.0.7 $(NOPE)"
        );
        // PATH and HOSTNAME are not expansion sources (the runtime adds them, as in the kubelet).
        assert_eq!(env.expand("$(HOSTNAME)"), "$(HOSTNAME)");
        let names: Vec<&str> = env.process.iter().map(|(n, _)| n.as_str()).collect();
        let unique: BTreeSet<&str> = names.iter().copied().collect();
        assert_eq!(names.len(), unique.len(), "each variable once: {names:?}");
    }

    #[test]
    fn secrets_config_maps_env_from_prefix_and_overrides() {
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"}, "data": {"password": "c2VjcmV0", "user": "YWRtaW4="}
        }))
        .unwrap();
        let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"}, "data": {"mode": "fast", "bad=key": "x", "PATH": "/custom"}
        }))
        .unwrap();
        let secrets = BTreeMap::from([("s".to_string(), Some(secret))]);
        let config_maps = BTreeMap::from([
            ("cm".to_string(), Some(config_map)),
            ("gone".to_string(), None),
        ]);
        let c = container(serde_json::json!({
            "name": "c",
            "envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s"}, "prefix": "S_"},
                        {"configMapRef": {"name": "gone", "optional": true}}],
            "env": [
                {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
                {"name": "OPT", "valueFrom": {"configMapKeyRef": {"name": "gone", "key": "k", "optional": true}}},
                {"name": "OPTKEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "nokey", "optional": true}}},
                {"name": "mode", "value": "$(mode)-override"}
            ]
        }));
        let env = resolve_with(&c, &secrets, &config_maps).unwrap();
        assert_eq!(get(&env, "PW"), Some("secret"));
        assert_eq!(get(&env, "S_user"), Some("admin"));
        assert_eq!(get(&env, "S_password"), Some("secret"));
        assert_eq!(get(&env, "MODE"), Some("fast"));
        assert_eq!(get(&env, "mode"), Some("fast-override"));
        assert_eq!(get(&env, "OPT"), None);
        assert_eq!(get(&env, "OPTKEY"), None);
        assert_eq!(get(&env, "bad=key"), None);
        assert_eq!(
            get(&env, "PATH"),
            Some("/custom"),
            "the pod's PATH overrides the default"
        );
    }

    #[test]
    fn missing_required_sources_are_config_errors() {
        let secrets: BTreeMap<String, Option<Secret>> =
            BTreeMap::from([("s".to_string(), Some(Secret::default()))]);
        let none: BTreeMap<String, Option<Secret>> = BTreeMap::new();
        let no_maps: BTreeMap<String, Option<ConfigMap>> = BTreeMap::new();
        let missing_secret = container(serde_json::json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}]}));
        assert_eq!(
            resolve_with(&missing_secret, &none, &no_maps)
                .unwrap_err()
                .0,
            "secret \"absent\" not found"
        );
        let missing_key = container(serde_json::json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}));
        assert_eq!(
            resolve_with(&missing_key, &secrets, &no_maps)
                .unwrap_err()
                .0,
            "couldn't find key k in Secret ns1/s"
        );
        let missing_cm = container(
            serde_json::json!({"name": "c", "envFrom": [{"configMapRef": {"name": "cm"}}]}),
        );
        assert_eq!(
            resolve_with(&missing_cm, &none, &no_maps).unwrap_err().0,
            "configmap \"cm\" not found"
        );
        let resource = container(serde_json::json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]}));
        assert!(
            resolve_with(&resource, &none, &no_maps)
                .unwrap_err()
                .0
                .contains("resourceFieldRef")
        );
        let field = container(serde_json::json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.generation"}}}]}));
        assert!(
            resolve_with(&field, &none, &no_maps)
                .unwrap_err()
                .0
                .contains("metadata.generation")
        );
    }

    #[test]
    fn references_lists_every_object_needed() {
        let c = container(serde_json::json!({"name": "c",
            "envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "b"}}],
            "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "c", "key": "k"}}},
                    {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "d", "key": "k"}}}]}));
        let refs = references(&c);
        assert_eq!(
            refs.secrets,
            BTreeSet::from(["b".to_string(), "c".to_string()])
        );
        assert_eq!(
            refs.config_maps,
            BTreeSet::from(["a".to_string(), "d".to_string()])
        );
    }
}
