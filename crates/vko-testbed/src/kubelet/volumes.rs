//! A pod's volumes as host directories, ready to be bind-mounted at each container's mountPath.
//!
//! Every volume gets one directory (`<pod_dir>/volumes/<volume name>`, or the PV's directory for a
//! claim). File-backed volumes (configMap, secret, downwardAPI, projected) are written like the real
//! kubelet's AtomicWriter: the files live in a timestamped data directory `..<timestamp>`, a `..data`
//! symlink points at it and is swapped atomically on every change, and each top-level entry is a
//! symlink through `..data`. A container that bind-mounts the volume DIRECTORY therefore sees updates
//! appear in place, all at once.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, ServiceAccount, ServiceAccountTokenProjection, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

use crate::{Error, Result};

/// The kubelet's default file mode for configMap, secret, downwardAPI and projected volumes (0644).
pub const DEFAULT_MODE: u32 = 0o644;
/// The lifetime the ServiceAccount admission plugin gives the default projected token.
pub const DEFAULT_TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// A token is replaced once this share of its lifetime has passed (as the kubelet's token manager).
const TOKEN_REFRESH_PERCENT: i64 = 80;
/// The symlink to the current data directory of an atomically written volume.
const DATA_LINK: &str = "..data";
const DATA_LINK_TMP: &str = "..data_tmp";

/// One file of a file-backed volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
}

/// The files of a file-backed volume: relative path → content and mode.
pub type Payload = BTreeMap<String, FileProjection>;

/// The host directory of every volume of a pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PreparedVolumes {
    /// Volume name → host path to bind-mount.
    pub dirs: BTreeMap<String, PathBuf>,
}

/// Where a pod's own volume directories live (never PV data).
pub fn volumes_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumes")
}

/// Prepares every volume of `pod`. Fails with a message that names the volume and the missing
/// object when a non-optional ConfigMap/Secret is missing or a claim is not bound yet; the caller
/// shows it as waiting and retries.
pub async fn prepare(client: &kube::Client, pod: &Pod, pod_dir: &Path) -> Result<PreparedVolumes> {
    let context = PodContext::new(pod)?;
    let root = volumes_dir(pod_dir);
    create_dir(&root, 0o755)?;
    let mut prepared = PreparedVolumes::default();
    for volume in pod
        .spec
        .as_ref()
        .and_then(|spec| spec.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        let dir = prepare_volume(client, &context, volume, &root)
            .await
            .map_err(|error| setup_failed(&volume.name, error))?;
        prepared.dirs.insert(volume.name.clone(), dir);
    }
    Ok(prepared)
}

/// Brings file-backed volumes up to date: changed ConfigMaps/Secrets/labels/annotations, and
/// ServiceAccount tokens past 80 % of their lifetime. Other volumes are left alone. A failing volume
/// keeps its last content (as in the kubelet); the first error is returned after trying all.
pub async fn refresh(client: &kube::Client, pod: &Pod, pod_dir: &Path) -> Result<()> {
    let context = PodContext::new(pod)?;
    let root = volumes_dir(pod_dir);
    let mut first_error = None;
    for volume in pod
        .spec
        .as_ref()
        .and_then(|spec| spec.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if !is_file_backed(volume) {
            continue;
        }
        let dir = root.join(&volume.name);
        let result = async {
            let payload = file_payload(client, &context, volume, &dir).await?;
            write_atomic(&dir, &payload, context.fs_group)
        };
        if let Err(error) = result.await {
            first_error.get_or_insert(setup_failed(&volume.name, error));
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Removes the pod's volume directories. PV data lives elsewhere and is never touched.
pub async fn cleanup(pod_dir: &Path) -> Result<()> {
    let root = volumes_dir(pod_dir);
    match tokio::fs::remove_dir_all(&root).await {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(Error::io(format!("removing {}", root.display()))(error)),
    }
}

/// What of the pod the volume code needs.
struct PodContext<'a> {
    pod: &'a Pod,
    namespace: String,
    name: String,
    uid: String,
    service_account: String,
    fs_group: Option<u32>,
}

impl<'a> PodContext<'a> {
    fn new(pod: &'a Pod) -> Result<PodContext<'a>> {
        let invalid = |detail: &str| Error::Invalid {
            what: "pod".into(),
            detail: detail.into(),
        };
        let spec = pod.spec.as_ref().ok_or_else(|| invalid("no spec"))?;
        let fs_group = spec
            .security_context
            .as_ref()
            .and_then(|context| context.fs_group)
            .map(|group| {
                u32::try_from(group).map_err(|_| invalid("securityContext.fsGroup out of range"))
            })
            .transpose()?;
        Ok(PodContext {
            pod,
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
            uid: pod
                .metadata
                .uid
                .clone()
                .ok_or_else(|| invalid("no metadata.uid"))?,
            service_account: spec
                .service_account_name
                .clone()
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| "default".into()),
            fs_group,
        })
    }
}

/// The kubelet's wording, so a pod's waiting message reads like the real thing.
fn setup_failed(volume: &str, error: Error) -> Error {
    Error::Other(format!(
        "MountVolume.SetUp failed for volume \"{volume}\" : {error}"
    ))
}

fn is_file_backed(volume: &Volume) -> bool {
    volume.config_map.is_some()
        || volume.secret.is_some()
        || volume.downward_api.is_some()
        || volume.projected.is_some()
}

async fn prepare_volume(
    client: &kube::Client,
    context: &PodContext<'_>,
    volume: &Volume,
    root: &Path,
) -> Result<PathBuf> {
    let own_dir = root.join(&volume.name);
    if volume.empty_dir.is_some() {
        // The kubelet makes emptyDirs world-writable so any container user can use them.
        create_dir(&own_dir, 0o777)?;
        if let Some(group) = context.fs_group {
            apply_fs_group(&own_dir, group)?;
        }
        return Ok(own_dir);
    }
    if is_file_backed(volume) {
        let payload = file_payload(client, context, volume, &own_dir).await?;
        write_atomic(&own_dir, &payload, context.fs_group)?;
        return Ok(own_dir);
    }
    let claim = match (&volume.persistent_volume_claim, &volume.ephemeral) {
        (Some(source), _) => Some(source.claim_name.clone()),
        // A generic ephemeral volume's claim is named `<pod>-<volume>` by the ephemeral controller.
        (None, Some(_)) => Some(format!("{}-{}", context.name, volume.name)),
        (None, None) => None,
    };
    if let Some(claim) = claim {
        let dir = claim_dir(client, &context.namespace, &claim).await?;
        if let Some(group) = context.fs_group {
            apply_fs_group(&dir, group)?;
        }
        return Ok(dir);
    }
    if let Some(host_path) = &volume.host_path {
        let dir = PathBuf::from(&host_path.path);
        match host_path.type_.as_deref() {
            Some("DirectoryOrCreate") => create_dir(&dir, 0o755)?,
            Some("Directory") if !dir.is_dir() => {
                return Err(Error::Other(format!(
                    "hostPath type check failed: {} is not a directory",
                    dir.display()
                )));
            }
            _ => {}
        }
        return Ok(dir);
    }
    Err(Error::Invalid {
        what: "volume".into(),
        detail: format!(
            "volume \"{}\" is of a kind the testbed does not support",
            volume.name
        ),
    })
}

/// The PV directory behind a claim; an error while the claim is missing or not bound yet.
async fn claim_dir(client: &kube::Client, namespace: &str, claim_name: &str) -> Result<PathBuf> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims
        .get_opt(claim_name)
        .await?
        .ok_or_else(|| Error::Other(format!("persistentvolumeclaim \"{claim_name}\" not found")))?;
    let bound = claim
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        == Some("Bound");
    let volume_name = claim
        .spec
        .as_ref()
        .and_then(|spec| spec.volume_name.clone())
        .filter(|name| !name.is_empty());
    let Some(volume_name) = volume_name.filter(|_| bound) else {
        return Err(Error::Other(format!(
            "persistentvolumeclaim \"{claim_name}\" is not bound yet"
        )));
    };
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let volume = volumes.get_opt(&volume_name).await?.ok_or_else(|| {
        Error::Other(format!(
            "persistentvolume \"{volume_name}\" of claim \"{claim_name}\" not found"
        ))
    })?;
    let dir = pv_dir(&volume).ok_or_else(|| {
        Error::Other(format!(
            "persistentvolume \"{volume_name}\" is neither hostPath nor local"
        ))
    })?;
    if !dir.is_dir() {
        let create = volume
            .spec
            .as_ref()
            .and_then(|spec| spec.host_path.as_ref())
            .is_some_and(|host_path| host_path.type_.as_deref() == Some("DirectoryOrCreate"));
        if !create {
            return Err(Error::Other(format!(
                "the directory {} of persistentvolume \"{volume_name}\" does not exist",
                dir.display()
            )));
        }
        create_dir(&dir, 0o777)?;
    }
    Ok(dir)
}

/// A PV's host directory: `hostPath.path` or `local.path`.
pub fn pv_dir(volume: &PersistentVolume) -> Option<PathBuf> {
    let spec = volume.spec.as_ref()?;
    spec.host_path
        .as_ref()
        .map(|host_path| host_path.path.clone())
        .or_else(|| spec.local.as_ref().map(|local| local.path.clone()))
        .filter(|path| !path.is_empty())
        .map(PathBuf::from)
}

/// The files of a configMap, secret, downwardAPI or projected volume. `dir` is the volume's current
/// directory, whose ServiceAccount tokens are reused while still fresh.
async fn file_payload(
    client: &kube::Client,
    context: &PodContext<'_>,
    volume: &Volume,
    dir: &Path,
) -> Result<Payload> {
    if let Some(source) = &volume.config_map {
        let object = fetch_config_map(client, &context.namespace, &source.name).await?;
        return key_payload(
            "configmap",
            &source.name,
            object.map(config_map_data).as_ref(),
            source.items.as_deref(),
            mode_or(source.default_mode, DEFAULT_MODE),
            source.optional.unwrap_or(false),
        );
    }
    if let Some(source) = &volume.secret {
        let name = source.secret_name.clone().unwrap_or_default();
        let object = fetch_secret(client, &context.namespace, &name).await?;
        return key_payload(
            "secret",
            &name,
            object.map(secret_data).as_ref(),
            source.items.as_deref(),
            mode_or(source.default_mode, DEFAULT_MODE),
            source.optional.unwrap_or(false),
        );
    }
    if let Some(source) = &volume.downward_api {
        let default_mode = mode_or(source.default_mode, DEFAULT_MODE);
        return downward_payload(
            context.pod,
            source.items.as_deref().unwrap_or_default(),
            default_mode,
        );
    }
    let Some(projected) = &volume.projected else {
        return Err(Error::Other(format!(
            "volume \"{}\" is not file-backed",
            volume.name
        )));
    };
    let default_mode = mode_or(projected.default_mode, DEFAULT_MODE);
    let mut payload = Payload::new();
    for source in projected.sources.iter().flatten() {
        let part = if let Some(source) = &source.config_map {
            let object = fetch_config_map(client, &context.namespace, &source.name).await?;
            key_payload(
                "configmap",
                &source.name,
                object.map(config_map_data).as_ref(),
                source.items.as_deref(),
                default_mode,
                source.optional.unwrap_or(false),
            )?
        } else if let Some(source) = &source.secret {
            let object = fetch_secret(client, &context.namespace, &source.name).await?;
            key_payload(
                "secret",
                &source.name,
                object.map(secret_data).as_ref(),
                source.items.as_deref(),
                default_mode,
                source.optional.unwrap_or(false),
            )?
        } else if let Some(source) = &source.downward_api {
            downward_payload(
                context.pod,
                source.items.as_deref().unwrap_or_default(),
                default_mode,
            )?
        } else if let Some(source) = &source.service_account_token {
            let token = service_account_token(client, context, source, dir).await?;
            Payload::from([(
                source.path.clone(),
                FileProjection {
                    data: token,
                    mode: default_mode,
                },
            )])
        } else {
            return Err(Error::Invalid {
                what: "projected volume source".into(),
                detail: "only configMap, secret, downwardAPI and serviceAccountToken are supported"
                    .into(),
            });
        };
        payload.extend(part);
    }
    Ok(payload)
}

async fn fetch_config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<ConfigMap>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?)
}

async fn fetch_secret(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Secret>> {
    Ok(Api::<Secret>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?)
}

/// A ConfigMap's `data` and `binaryData` as bytes.
fn config_map_data(config_map: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = config_map
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.into_bytes()))
        .collect();
    data.extend(
        config_map
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(key, value)| (key, value.0)),
    );
    data
}

fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, value.0))
        .collect()
}

/// A volume mode from the API (an `i32` like 0o644) or the default.
fn mode_or(mode: Option<i32>, default: u32) -> u32 {
    mode.and_then(|mode| u32::try_from(mode).ok())
        .map_or(default, |mode| mode & 0o7777)
}

/// The files of a configMap or secret source. `data` is `None` when the object does not exist.
/// Without `items` every key becomes a file of the same name; with `items` only the listed keys, at
/// their paths and modes. A missing object or key fails unless `optional`.
pub fn key_payload(
    kind: &str,
    object_name: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
) -> Result<Payload> {
    let Some(data) = data else {
        if optional {
            return Ok(Payload::new());
        }
        return Err(Error::Other(format!("{kind} \"{object_name}\" not found")));
    };
    let mut payload = Payload::new();
    match items {
        None => {
            for (key, value) in data {
                payload.insert(
                    key.clone(),
                    FileProjection {
                        data: value.clone(),
                        mode: default_mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(value) => {
                        let mode = mode_or(item.mode, default_mode);
                        payload.insert(
                            item.path.clone(),
                            FileProjection {
                                data: value.clone(),
                                mode,
                            },
                        );
                    }
                    None if optional => {}
                    None => {
                        return Err(Error::Other(format!(
                            "{kind} \"{object_name}\" has no key \"{}\" (referenced by an item)",
                            item.key
                        )));
                    }
                }
            }
        }
    }
    Ok(payload)
}

/// The files of a downwardAPI source.
pub fn downward_payload(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: u32,
) -> Result<Payload> {
    let mut payload = Payload::new();
    for item in items {
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(field), _) => pod_field(&pod.metadata, &field.field_path)?,
            (None, Some(resource)) => {
                return Err(Error::Invalid {
                    what: "downwardAPI item".into(),
                    detail: format!(
                        "resourceFieldRef ({}) is not supported in volumes by the testbed",
                        resource.resource
                    ),
                });
            }
            (None, None) => {
                return Err(Error::Invalid {
                    what: "downwardAPI item".into(),
                    detail: format!(
                        "item {} has neither fieldRef nor resourceFieldRef",
                        item.path
                    ),
                });
            }
        };
        let mode = mode_or(item.mode, default_mode);
        payload.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode,
            },
        );
    }
    Ok(payload)
}

/// The value of a downwardAPI volume `fieldRef` (the volume supports only metadata fields).
pub fn pod_field(metadata: &ObjectMeta, field_path: &str) -> Result<String> {
    let empty = BTreeMap::new();
    let labels = metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = metadata.annotations.as_ref().unwrap_or(&empty);
    let subscript = |prefix: &str| {
        field_path
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
    };
    Ok(match field_path {
        "metadata.name" => metadata.name.clone().unwrap_or_default(),
        "metadata.namespace" => metadata.namespace.clone().unwrap_or_default(),
        "metadata.uid" => metadata.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(labels),
        "metadata.annotations" => format_map(annotations),
        _ => {
            if let Some(key) = subscript("metadata.labels") {
                labels.get(key).cloned().unwrap_or_default()
            } else if let Some(key) = subscript("metadata.annotations") {
                annotations.get(key).cloned().unwrap_or_default()
            } else {
                return Err(Error::Invalid {
                    what: "downwardAPI fieldRef".into(),
                    detail: format!("unsupported fieldPath {field_path:?}"),
                });
            }
        }
    })
}

/// The kubelet's format for labels/annotations files: sorted `key="value"` lines, Go-quoted values.
pub fn format_map(map: &BTreeMap<String, String>) -> String {
    map.iter()
        .map(|(key, value)| format!("{key}={}", go_quote(value)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Go's `strconv.Quote` (what the kubelet's `%q` produces).
fn go_quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A ServiceAccount token for `source`: the one already in the volume while it is fresh, else a new
/// one from the TokenRequest API, bound to the pod.
async fn service_account_token(
    client: &kube::Client,
    context: &PodContext<'_>,
    source: &ServiceAccountTokenProjection,
    dir: &Path,
) -> Result<Vec<u8>> {
    if let Ok(current) = std::fs::read(dir.join(&source.path))
        && token_is_fresh(&current, unix_now())
    {
        return Ok(current);
    }
    let request = token_request(context, source);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &context.namespace);
    let response = accounts
        .create_token_request(&context.service_account, &PostParams::default(), &request)
        .await
        .map_err(|error| {
            Error::Other(format!(
                "requesting a token for serviceaccount \"{}\": {error}",
                context.service_account
            ))
        })?;
    let token = response
        .status
        .map(|status| status.token)
        .unwrap_or_default();
    if token.is_empty() {
        return Err(Error::Other(
            "the TokenRequest API returned no token".into(),
        ));
    }
    Ok(token.into_bytes())
}

fn token_request(context: &PodContext<'_>, source: &ServiceAccountTokenProjection) -> TokenRequest {
    TokenRequest {
        metadata: ObjectMeta::default(),
        spec: TokenRequestSpec {
            // No audience: the API server's own audiences (what the kubelet sends as well).
            audiences: source
                .audience
                .iter()
                .filter(|audience| !audience.is_empty())
                .cloned()
                .collect(),
            expiration_seconds: Some(
                source
                    .expiration_seconds
                    .unwrap_or(DEFAULT_TOKEN_EXPIRATION_SECONDS),
            ),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(context.name.clone()),
                uid: Some(context.uid.clone()),
            }),
        },
        status: None,
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

/// Whether a JWT was issued less than 80 % of its lifetime before `now` (unix seconds). Anything
/// that is not a JWT with `iat` and `exp` counts as stale, so it gets replaced.
pub fn token_is_fresh(token: &[u8], now: i64) -> bool {
    let Some(claims) = token.split(|&byte| byte == b'.').nth(1) else {
        return false;
    };
    let Some(json) = base64url_decode(claims) else {
        return false;
    };
    let Ok(claims) = serde_json::from_slice::<serde_json::Value>(&json) else {
        return false;
    };
    let (Some(issued), Some(expires)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return false;
    };
    expires > issued && now < issued + (expires - issued) * TOKEN_REFRESH_PERCENT / 100
}

/// Unpadded (or padded) base64url, as in JWTs.
fn base64url_decode(input: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(input.len() * 3 / 4);
    let mut buffer: u32 = 0;
    let mut bits = 0;
    for &byte in input.iter().take_while(|&&byte| byte != b'=') {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        buffer = (buffer << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((buffer >> bits) & 0xff) as u8);
        }
    }
    Some(out)
}

/// Creates `dir` (and parents) and sets its mode regardless of the umask.
fn create_dir(dir: &Path, mode: u32) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
        .map_err(Error::io(format!("chmod {}", dir.display())))
}

/// What the kubelet does for `fsGroup` on writable volumes: everything below `dir` gets group
/// `group` and g+rwX; directories get the setgid bit so new files inherit the group.
pub fn apply_fs_group(dir: &Path, group: u32) -> Result<()> {
    let metadata =
        std::fs::symlink_metadata(dir).map_err(Error::io(format!("stat {}", dir.display())))?;
    std::os::unix::fs::lchown(dir, None, Some(group))
        .map_err(Error::io(format!("chown {}", dir.display())))?;
    if metadata.file_type().is_symlink() {
        return Ok(());
    }
    let mode = metadata.permissions().mode() & 0o7777;
    let new_mode = if metadata.is_dir() {
        mode | 0o070 | 0o2000
    } else if mode & 0o100 != 0 {
        mode | 0o070
    } else {
        mode | 0o060
    };
    if new_mode != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(new_mode))
            .map_err(Error::io(format!("chmod {}", dir.display())))?;
    }
    if metadata.is_dir() {
        let entries =
            std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
        for entry in entries {
            let entry = entry.map_err(Error::io(format!("listing {}", dir.display())))?;
            apply_fs_group(&entry.path(), group)?;
        }
    }
    Ok(())
}

/// The mode a file of a read-only volume ends up with: with an fsGroup the kubelet adds r--r-----.
fn effective_mode(mode: u32, fs_group: Option<u32>) -> u32 {
    if fs_group.is_some() {
        mode | 0o440
    } else {
        mode
    }
}

/// Checks that every payload path is relative, free of `..` and does not start with `..` (those
/// names belong to the writer).
fn validate_payload(payload: &Payload) -> Result<()> {
    for path in payload.keys() {
        let invalid = |detail: &str| Error::Invalid {
            what: format!("volume file path {path:?}"),
            detail: detail.into(),
        };
        if path.is_empty() {
            return Err(invalid("empty"));
        }
        if path.starts_with("..") {
            return Err(invalid("must not start with \"..\""));
        }
        for component in Path::new(path).components() {
            match component {
                Component::Normal(_) => {}
                Component::CurDir => {}
                _ => return Err(invalid("must be a relative path without \"..\"")),
            }
        }
    }
    Ok(())
}

/// The first path component of every payload path: the entries linked at the volume's top level.
fn top_level_names(payload: &Payload) -> BTreeSet<String> {
    payload
        .keys()
        .filter_map(|path| {
            Path::new(path)
                .components()
                .find_map(|component| match component {
                    Component::Normal(name) => Some(name.to_string_lossy().into_owned()),
                    _ => None,
                })
        })
        .collect()
}

/// Writes `payload` into `dir` the AtomicWriter way. Returns whether anything changed (an identical
/// payload leaves the directory untouched).
pub fn write_atomic(dir: &Path, payload: &Payload, fs_group: Option<u32>) -> Result<bool> {
    validate_payload(payload)?;
    create_dir(dir, 0o755)?;
    if let Some(group) = fs_group {
        std::os::unix::fs::chown(dir, None, Some(group))
            .map_err(Error::io(format!("chown {}", dir.display())))?;
    }
    let data_link = dir.join(DATA_LINK);
    let current = std::fs::read_link(&data_link)
        .ok()
        .map(|target| dir.join(target));
    if let Some(current) = &current
        && directory_matches(current, payload, fs_group)
    {
        return Ok(false);
    }

    let data_dir_name = new_data_dir_name();
    let data_dir = dir.join(&data_dir_name);
    create_dir(&data_dir, 0o755)?;
    for (path, file) in payload {
        let target = data_dir.join(path);
        if let Some(parent) = target.parent()
            && parent != data_dir
        {
            create_dir(parent, 0o755)?;
        }
        std::fs::write(&target, &file.data)
            .map_err(Error::io(format!("writing {}", target.display())))?;
        std::fs::set_permissions(
            &target,
            std::fs::Permissions::from_mode(effective_mode(file.mode, fs_group)),
        )
        .map_err(Error::io(format!("chmod {}", target.display())))?;
        if let Some(group) = fs_group {
            std::os::unix::fs::chown(&target, None, Some(group))
                .map_err(Error::io(format!("chown {}", target.display())))?;
        }
    }

    // Swap `..data` with a rename over it: readers see either the old or the new set, never a mix.
    let tmp_link = dir.join(DATA_LINK_TMP);
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(&data_dir_name, &tmp_link)
        .map_err(Error::io(format!("linking {}", tmp_link.display())))?;
    std::fs::rename(&tmp_link, &data_link)
        .map_err(Error::io(format!("renaming to {}", data_link.display())))?;

    let wanted = top_level_names(payload);
    for name in &wanted {
        let link = dir.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_LINK).join(name), &link)
                .map_err(Error::io(format!("linking {}", link.display())))?;
        }
    }
    let entries =
        std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    for entry in entries {
        let entry = entry.map_err(Error::io(format!("listing {}", dir.display())))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || wanted.contains(&name) {
            continue;
        }
        // Only links we made live at the top level; anything else is left alone.
        if entry.file_type().is_ok_and(|kind| kind.is_symlink()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if let Some(old) = current
        && old != data_dir
    {
        let _ = std::fs::remove_dir_all(&old);
    }
    Ok(true)
}

/// `..YYYY_MM_DD_HH_MM_SS.<unique>`, like the kubelet's timestamped data directories.
fn new_data_dir_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = k8s_openapi::jiff::Timestamp::now();
    let stamp = now.strftime("%Y_%m_%d_%H_%M_%S");
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("..{stamp}.{}{unique:04}", now.subsec_nanosecond())
}

/// Whether `dir` holds exactly `payload` (same files, contents and modes).
fn directory_matches(dir: &Path, payload: &Payload, fs_group: Option<u32>) -> bool {
    let mut found = BTreeMap::new();
    if collect_files(dir, Path::new(""), &mut found).is_err() {
        return false;
    }
    found.len() == payload.len()
        && payload.iter().all(|(path, file)| {
            let normalized: PathBuf = Path::new(path).components().collect();
            found.get(&normalized)
                == Some(&(file.data.clone(), effective_mode(file.mode, fs_group)))
        })
}

fn collect_files(
    dir: &Path,
    relative: &Path,
    found: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>,
) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let path = relative.join(entry.file_name());
        if kind.is_dir() {
            collect_files(&entry.path(), &path, found)?;
        } else {
            let mode = entry.metadata()?.permissions().mode() & 0o7777;
            found.insert(path, (std::fs::read(entry.path())?, mode));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A temp directory removed on drop, also when the test fails.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(name: &str) -> TempDir {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let unique = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!(
                "vko-volumes-{name}-{}-{unique}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn data(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(key, value)| (key.to_string(), value.as_bytes().to_vec()))
            .collect()
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    fn file(data: &str, mode: u32) -> FileProjection {
        FileProjection {
            data: data.as_bytes().to_vec(),
            mode,
        }
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn without_items_every_key_is_a_file_with_the_default_mode() {
        let payload = key_payload(
            "configmap",
            "cfg",
            Some(&data(&[("a.conf", "A"), ("b", "B")])),
            None,
            0o600,
            false,
        )
        .unwrap();
        assert_eq!(
            payload,
            Payload::from([
                ("a.conf".into(), file("A", 0o600)),
                ("b".into(), file("B", 0o600))
            ])
        );
    }

    #[test]
    fn items_select_keys_map_them_to_paths_and_override_modes() {
        let items = [
            item("a", "conf/valkey.conf", None),
            item("b", "run.sh", Some(0o755)),
        ];
        let payload = key_payload(
            "configmap",
            "cfg",
            Some(&data(&[("a", "A"), ("b", "B"), ("c", "C")])),
            Some(&items),
            DEFAULT_MODE,
            false,
        )
        .unwrap();
        assert_eq!(
            payload,
            Payload::from([
                ("conf/valkey.conf".into(), file("A", 0o644)),
                ("run.sh".into(), file("B", 0o755))
            ])
        );
    }

    #[test]
    fn a_missing_object_or_key_fails_with_its_name_unless_optional() {
        let error = key_payload("secret", "creds", None, None, DEFAULT_MODE, false)
            .unwrap_err()
            .to_string();
        assert!(error.contains("secret \"creds\" not found"), "{error}");
        assert_eq!(
            key_payload("secret", "creds", None, None, DEFAULT_MODE, true).unwrap(),
            Payload::new()
        );

        let items = [item("missing", "m", None), item("a", "a", None)];
        let error = key_payload(
            "configmap",
            "cfg",
            Some(&data(&[("a", "A")])),
            Some(&items),
            DEFAULT_MODE,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            error.contains("configmap \"cfg\"") && error.contains("\"missing\""),
            "{error}"
        );
        let optional = key_payload(
            "configmap",
            "cfg",
            Some(&data(&[("a", "A")])),
            Some(&items),
            DEFAULT_MODE,
            true,
        )
        .unwrap();
        assert_eq!(
            optional,
            Payload::from([("a".into(), file("A", DEFAULT_MODE))])
        );
    }

    #[test]
    fn api_modes_are_read_as_octal_permission_bits() {
        assert_eq!(mode_or(Some(420), 0), 0o644);
        assert_eq!(mode_or(Some(0o400), 0), 0o400);
        assert_eq!(mode_or(None, 0o640), 0o640);
        assert_eq!(mode_or(Some(-1), 0o640), 0o640);
    }

    fn downward_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "db-0", "namespace": "team", "uid": "u-123",
                "labels": {"app": "db", "role": "primary"},
                "annotations": {"note": "say \"hi\"\nbye"}
            },
            "spec": {"containers": []}
        }))
        .unwrap()
    }

    #[test]
    fn downward_api_fields_render_like_the_kubelet() {
        let pod = downward_pod();
        let field = |path: &str| pod_field(&pod.metadata, path).unwrap();
        assert_eq!(field("metadata.name"), "db-0");
        assert_eq!(field("metadata.namespace"), "team");
        assert_eq!(field("metadata.uid"), "u-123");
        assert_eq!(field("metadata.labels"), "app=\"db\"\nrole=\"primary\"");
        assert_eq!(
            field("metadata.annotations"),
            "note=\"say \\\"hi\\\"\\nbye\""
        );
        assert_eq!(field("metadata.labels['role']"), "primary");
        assert_eq!(field("metadata.labels['absent']"), "");
        assert!(pod_field(&pod.metadata, "spec.nodeName").is_err());
    }

    #[test]
    fn downward_api_items_become_files() {
        let pod = downward_pod();
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o400}
        ]))
        .unwrap();
        let payload = downward_payload(&pod, &items, DEFAULT_MODE).unwrap();
        assert_eq!(
            payload,
            Payload::from([
                ("labels".into(), file("app=\"db\"\nrole=\"primary\"", 0o644)),
                ("meta/name".into(), file("db-0", 0o400)),
            ])
        );
        let resource: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "cpu", "resourceFieldRef": {"resource": "limits.cpu"}}
        ]))
        .unwrap();
        assert!(
            downward_payload(&pod, &resource, DEFAULT_MODE).is_err(),
            "no silent success"
        );
    }

    fn jwt(claims: serde_json::Value) -> Vec<u8> {
        // Hand-rolled base64url so the test does not trust the decoder under test.
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let bytes = serde_json::to_vec(&claims).unwrap();
        let mut encoded = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk
                .iter()
                .enumerate()
                .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                encoded.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        format!("eyJhbGciOiJSUzI1NiJ9.{encoded}.c2lnbmF0dXJl").into_bytes()
    }

    #[test]
    fn tokens_are_fresh_until_80_percent_of_their_lifetime() {
        let token = jwt(
            serde_json::json!({"iat": 1000, "exp": 4600, "sub": "system:serviceaccount:ns:sa"}),
        );
        assert!(token_is_fresh(&token, 1000));
        assert!(token_is_fresh(&token, 3879));
        assert!(!token_is_fresh(&token, 3880), "80 % of 3600 s after issue");
        assert!(!token_is_fresh(&token, 5000));
        assert!(!token_is_fresh(b"not a token", 1000));
        assert!(
            !token_is_fresh(&jwt(serde_json::json!({"exp": 4600})), 1000),
            "no iat"
        );
    }

    #[test]
    fn base64url_decodes_with_and_without_padding() {
        assert_eq!(base64url_decode(b"aGVsbG8").unwrap(), b"hello");
        assert_eq!(base64url_decode(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64url_decode(b"-_8").unwrap(), vec![0xfb, 0xff]);
        assert!(base64url_decode(b"a*b").is_none());
    }

    #[test]
    fn token_requests_are_bound_to_the_pod() {
        let pod = downward_pod();
        let context = PodContext::new(&pod).unwrap();
        assert_eq!(context.service_account, "default");
        let request = token_request(
            &context,
            &ServiceAccountTokenProjection {
                audience: None,
                expiration_seconds: None,
                path: "token".into(),
            },
        );
        assert!(request.spec.audiences.is_empty());
        assert_eq!(request.spec.expiration_seconds, Some(3607));
        let bound = request.spec.bound_object_ref.unwrap();
        assert_eq!(bound.kind.as_deref(), Some("Pod"));
        assert_eq!(bound.name.as_deref(), Some("db-0"));
        assert_eq!(bound.uid.as_deref(), Some("u-123"));
        let with_audience = token_request(
            &context,
            &ServiceAccountTokenProjection {
                audience: Some("vault".into()),
                expiration_seconds: Some(600),
                path: "token".into(),
            },
        );
        assert_eq!(with_audience.spec.audiences, vec!["vault".to_string()]);
        assert_eq!(with_audience.spec.expiration_seconds, Some(600));
    }

    #[test]
    fn the_atomic_writer_lays_out_data_dir_data_link_and_key_links() {
        let temp = TempDir::new("layout");
        let dir = temp.0.join("cfg");
        let payload = Payload::from([
            ("valkey.conf".into(), file("port 6379\n", 0o644)),
            ("scripts/run.sh".into(), file("#!/bin/sh\n", 0o755)),
        ]);
        assert!(write_atomic(&dir, &payload, None).unwrap());

        let data_target = std::fs::read_link(dir.join("..data")).unwrap();
        let data_name = data_target.to_string_lossy().into_owned();
        assert!(
            data_name.starts_with("..") && data_name.len() > "..2025_01_01_00_00_00.".len(),
            "{data_name}"
        );
        assert_eq!(
            std::fs::read_link(dir.join("valkey.conf")).unwrap(),
            Path::new("..data/valkey.conf")
        );
        assert_eq!(
            std::fs::read_link(dir.join("scripts")).unwrap(),
            Path::new("..data/scripts")
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("valkey.conf")).unwrap(),
            "port 6379\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("scripts/run.sh")).unwrap(),
            "#!/bin/sh\n"
        );
        assert_eq!(mode_of(&dir.join(&data_name).join("valkey.conf")), 0o644);
        assert_eq!(mode_of(&dir.join(&data_name).join("scripts/run.sh")), 0o755);
        let entries: BTreeSet<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            entries,
            BTreeSet::from([
                "..data".into(),
                data_name,
                "scripts".into(),
                "valkey.conf".into()
            ])
        );
    }

    #[test]
    fn an_identical_payload_changes_nothing_and_a_new_one_swaps_in_place() {
        let temp = TempDir::new("swap");
        let dir = temp.0.join("cfg");
        let first = Payload::from([
            ("a".into(), file("1", 0o644)),
            ("b".into(), file("2", 0o644)),
        ]);
        assert!(write_atomic(&dir, &first, None).unwrap());
        let first_target = std::fs::read_link(dir.join("..data")).unwrap();
        let volume_inode = std::fs::metadata(&dir).unwrap().ino();
        assert!(
            !write_atomic(&dir, &first, None).unwrap(),
            "nothing changed"
        );
        assert_eq!(
            std::fs::read_link(dir.join("..data")).unwrap(),
            first_target
        );

        let mode_change = Payload::from([
            ("a".into(), file("1", 0o600)),
            ("b".into(), file("2", 0o644)),
        ]);
        assert!(
            write_atomic(&dir, &mode_change, None).unwrap(),
            "a mode change is a change"
        );

        let second = Payload::from([
            ("a".into(), file("one", 0o644)),
            ("c".into(), file("3", 0o644)),
        ]);
        assert!(write_atomic(&dir, &second, None).unwrap());
        assert_eq!(
            std::fs::metadata(&dir).unwrap().ino(),
            volume_inode,
            "the mounted directory stays"
        );
        assert_ne!(
            std::fs::read_link(dir.join("..data")).unwrap(),
            first_target
        );
        assert!(
            !dir.join(&first_target).exists(),
            "the old data directory is gone"
        );
        assert_eq!(std::fs::read_to_string(dir.join("a")).unwrap(), "one");
        assert_eq!(std::fs::read_to_string(dir.join("c")).unwrap(), "3");
        assert!(
            std::fs::symlink_metadata(dir.join("b")).is_err(),
            "a removed key's link is gone"
        );
        let data_dirs = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|entry| {
                let entry = entry.as_ref().unwrap();
                entry.file_name().to_string_lossy().starts_with("..")
                    && entry.file_type().unwrap().is_dir()
            })
            .count();
        assert_eq!(data_dirs, 1);
    }

    #[test]
    fn an_empty_payload_still_gets_a_data_link() {
        let temp = TempDir::new("empty");
        let dir = temp.0.join("optional");
        assert!(write_atomic(&dir, &Payload::new(), None).unwrap());
        assert!(dir.join("..data").is_dir());
        assert!(!write_atomic(&dir, &Payload::new(), None).unwrap());
    }

    #[test]
    fn payload_paths_may_not_escape_or_shadow_the_writer() {
        let temp = TempDir::new("escape");
        for bad in ["../x", "/etc/passwd", "..data", "a/../../b", ""] {
            let payload = Payload::from([(bad.to_string(), file("x", 0o644))]);
            assert!(
                write_atomic(&temp.0.join("v"), &payload, None).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn fs_group_makes_volume_files_group_owned_and_readable() {
        let temp = TempDir::new("fsgroup");
        let dir = temp.0.join("secret");
        let payload = Payload::from([("password".into(), file("s3cret", 0o400))]);
        write_atomic(&dir, &payload, Some(4242)).unwrap();
        let target = std::fs::canonicalize(dir.join("password")).unwrap();
        assert_eq!(std::fs::metadata(&target).unwrap().gid(), 4242);
        assert_eq!(mode_of(&target), 0o440);
        assert!(
            !write_atomic(&dir, &payload, Some(4242)).unwrap(),
            "stable with fsGroup too"
        );
    }

    #[test]
    fn fs_group_on_writable_dirs_is_recursive_group_rwx_with_setgid() {
        let temp = TempDir::new("writable");
        let data = temp.0.join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::write(data.join("sub/dump.rdb"), b"x").unwrap();
        std::fs::set_permissions(
            data.join("sub/dump.rdb"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::write(data.join("tool"), b"x").unwrap();
        std::fs::set_permissions(data.join("tool"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        std::fs::set_permissions(data.join("sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
        apply_fs_group(&data, 777).unwrap();
        for path in [
            data.clone(),
            data.join("sub"),
            data.join("sub/dump.rdb"),
            data.join("tool"),
        ] {
            assert_eq!(
                std::fs::metadata(&path).unwrap().gid(),
                777,
                "{}",
                path.display()
            );
        }
        assert_eq!(mode_of(&data.join("sub")), 0o2770);
        assert_eq!(mode_of(&data.join("sub/dump.rdb")), 0o660);
        assert_eq!(mode_of(&data.join("tool")), 0o770);
    }

    #[test]
    fn pv_dirs_come_from_host_path_or_local() {
        let host_path: PersistentVolume =
            serde_json::from_value(serde_json::json!({"spec": {"hostPath": {"path": "/pv/a"}}}))
                .unwrap();
        assert_eq!(pv_dir(&host_path), Some(PathBuf::from("/pv/a")));
        let local: PersistentVolume =
            serde_json::from_value(serde_json::json!({"spec": {"local": {"path": "/pv/b"}}}))
                .unwrap();
        assert_eq!(pv_dir(&local), Some(PathBuf::from("/pv/b")));
        let nfs: PersistentVolume = serde_json::from_value(
            serde_json::json!({"spec": {"nfs": {"server": "x", "path": "/"}}}),
        )
        .unwrap();
        assert_eq!(pv_dir(&nfs), None);
    }

    #[tokio::test]
    async fn cleanup_removes_only_the_pod_volume_dirs() {
        let temp = TempDir::new("cleanup");
        let pod_dir = temp.0.join("pod");
        let pv = temp.0.join("pv");
        std::fs::create_dir_all(volumes_dir(&pod_dir).join("scratch")).unwrap();
        std::fs::create_dir_all(&pv).unwrap();
        std::fs::write(pv.join("dump.rdb"), b"data").unwrap();
        write_atomic(
            &volumes_dir(&pod_dir).join("cfg"),
            &Payload::from([("a".into(), file("1", 0o644))]),
            None,
        )
        .unwrap();
        cleanup(&pod_dir).await.unwrap();
        assert!(!volumes_dir(&pod_dir).exists());
        assert!(
            pod_dir.exists(),
            "the pod directory itself belongs to the caller"
        );
        assert_eq!(std::fs::read(pv.join("dump.rdb")).unwrap(), b"data");
        cleanup(&pod_dir).await.unwrap();
    }
}
