//! A tiny dynamic provisioner: host-directory PersistentVolumes for the default StorageClass.
//!
//! It plays the part of an external CSI provisioner: for every unbound claim of class
//! [`STORAGE_CLASS`] it creates a directory under the PV root and a `hostPath` PV pre-bound to the
//! claim (`claimRef`); the real PV controller in kube-controller-manager completes the binding. When
//! a PV of ours becomes `Released` (its claim was deleted) the directory and the PV are deleted. The
//! directory outlives the pods that use it: that is how persistence is tested.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio_util::sync::CancellationToken;

use crate::{Error, Result};

/// The default StorageClass of the testbed.
pub const STORAGE_CLASS: &str = "standard";
/// The provisioner name written into the StorageClass and every PV we create.
pub const PROVISIONER: &str = "vko.gtrfc.com/testbed-hostpath";

/// The annotation the PV controller sets on a claim it leaves to an external provisioner.
const STORAGE_PROVISIONER_ANNOTATION: &str = "volume.kubernetes.io/storage-provisioner";
/// Its pre-1.23 spelling, still set by the PV controller for compatibility.
const BETA_STORAGE_PROVISIONER_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-provisioner";
/// The annotation that marks a PV as made by a given provisioner (what the PV controller checks).
const PROVISIONED_BY_ANNOTATION: &str = "pv.kubernetes.io/provisioned-by";
const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
const FIELD_MANAGER: &str = "vko-testbed";
/// A full pass runs at least this often, so a failed create or delete is retried without an event.
const RESYNC_INTERVAL: Duration = Duration::from_secs(10);

/// Ensures the StorageClass, then provisions and deletes PVs until `shutdown`.
pub async fn run(
    client: kube::Client,
    pv_root: PathBuf,
    shutdown: CancellationToken,
) -> Result<()> {
    std::fs::create_dir_all(&pv_root).map_err(Error::io(format!(
        "creating the PV root {}",
        pv_root.display()
    )))?;
    // The API server may still be settling (or restarting): keep trying rather than give up.
    while let Err(error) = ensure_storage_class(&client).await {
        tracing::warn!(%error, "creating the default StorageClass failed; retrying");
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(Duration::from_secs(2)) => {}
        }
    }

    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    // The watches only say "something changed"; every pass lists both kinds and reconciles all, which
    // at testbed scale is cheap and leaves no event-ordering cases to get wrong.
    let claim_events = watcher(claims.clone(), watcher::Config::default())
        .default_backoff()
        .map(|_| ());
    let volume_events = watcher(volumes.clone(), watcher::Config::default())
        .default_backoff()
        .map(|_| ());
    let mut changes = std::pin::pin!(futures::stream::select(claim_events, volume_events));
    let mut resync = tokio::time::interval(RESYNC_INTERVAL);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            _ = resync.tick() => {}
            change = changes.next() => {
                if change.is_none() {
                    return Err(Error::Other("the PVC/PV watch ended".into()));
                }
                // Collapse a burst of events (a StatefulSet creates several claims at once) into one pass.
                tokio::time::sleep(Duration::from_millis(100)).await;
                while let Some(Some(())) = changes.next().now_or_never() {}
            }
        }
        if let Err(error) = reconcile(&claims, &volumes, &pv_root).await {
            tracing::warn!(%error, "PV provisioner pass failed; retrying");
        }
    }
}

/// Creates or updates (server-side apply) the default StorageClass.
async fn ensure_storage_class(client: &kube::Client) -> Result<()> {
    let classes: Api<StorageClass> = Api::all(client.clone());
    classes
        .patch(
            STORAGE_CLASS,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(storage_class()),
        )
        .await?;
    Ok(())
}

/// The testbed's default StorageClass.
pub fn storage_class() -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(STORAGE_CLASS.into()),
            annotations: Some(BTreeMap::from([(
                DEFAULT_CLASS_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            ..ObjectMeta::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("Immediate".into()),
        ..StorageClass::default()
    }
}

/// One pass: a PV for every claim that wants one, and away with every released PV of ours.
async fn reconcile(
    claims: &Api<PersistentVolumeClaim>,
    volumes: &Api<PersistentVolume>,
    pv_root: &Path,
) -> Result<()> {
    let all_claims = claims.list(&ListParams::default()).await?;
    let all_volumes = volumes.list(&ListParams::default()).await?;
    let existing: std::collections::BTreeSet<String> = all_volumes
        .items
        .iter()
        .filter_map(|pv| pv.metadata.name.clone())
        .collect();

    let mut first_error = None;
    for claim in all_claims
        .items
        .iter()
        .filter(|claim| wants_provisioning(claim))
    {
        let Some(pv) = persistent_volume_for(claim, pv_root) else {
            continue;
        };
        let Some(name) = pv.metadata.name.clone() else {
            continue;
        };
        if existing.contains(&name) {
            continue;
        }
        if let Err(error) = provision(volumes, &pv, pv_root).await {
            tracing::warn!(pv = %name, %error, "provisioning failed");
            first_error.get_or_insert(error);
        }
    }
    for pv in &all_volumes.items {
        let Some(dir) = released_volume_dir(pv, pv_root) else {
            continue;
        };
        let name = pv.metadata.name.clone().unwrap_or_default();
        if let Err(error) = delete_released(volumes, &name, &dir).await {
            tracing::warn!(pv = %name, %error, "deleting a released PV failed");
            first_error.get_or_insert(error);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn provision(
    volumes: &Api<PersistentVolume>,
    pv: &PersistentVolume,
    pv_root: &Path,
) -> Result<()> {
    let dir = pv
        .spec
        .as_ref()
        .and_then(|spec| spec.host_path.as_ref())
        .map(|host_path| PathBuf::from(&host_path.path))
        .ok_or_else(|| Error::Other("a provisioned PV without hostPath".into()))?;
    create_volume_dir(&dir)?;
    match volumes.create(&PostParams::default(), pv).await {
        Ok(_) => {
            tracing::info!(pv = ?pv.metadata.name, dir = %dir.display(), "provisioned");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => {
            // Keep the root tidy: the next pass recreates the directory along with the PV.
            if dir.starts_with(pv_root) {
                let _ = std::fs::remove_dir(&dir);
            }
            Err(error.into())
        }
    }
}

/// Creates the data directory world-writable, as local-path style provisioners do, so a container
/// that runs as a non-root user without an fsGroup can still write its data.
fn create_volume_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))
        .map_err(Error::io(format!("chmod {}", dir.display())))
}

async fn delete_released(volumes: &Api<PersistentVolume>, name: &str, dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(Error::io(format!("removing {}", dir.display()))(error)),
    }
    match volumes.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(pv = %name, dir = %dir.display(), "deleted a released PV and its data");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}

/// Whether a claim is unbound, alive, of our class and not claimed by another provisioner.
pub fn wants_provisioning(claim: &PersistentVolumeClaim) -> bool {
    if claim.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(spec) = claim.spec.as_ref() else {
        return false;
    };
    if spec
        .volume_name
        .as_deref()
        .is_some_and(|name| !name.is_empty())
    {
        return false;
    }
    if claim
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        == Some("Bound")
    {
        return false;
    }
    // A claim without a class gets the default one from the admission plugin, or later from the PV
    // controller (retroactive default class); an explicit "" means "no class" and is never ours.
    if spec.storage_class_name.as_deref() != Some(STORAGE_CLASS) {
        return false;
    }
    // A selector asks for a pre-existing PV with matching labels; provisioners must not serve it.
    if spec.selector.is_some() {
        return false;
    }
    let annotations = claim.metadata.annotations.as_ref();
    let assigned = annotations.and_then(|annotations| {
        annotations
            .get(STORAGE_PROVISIONER_ANNOTATION)
            .or_else(|| annotations.get(BETA_STORAGE_PROVISIONER_ANNOTATION))
    });
    assigned.is_none_or(|provisioner| provisioner == PROVISIONER)
}

/// The PV that serves `claim`: `pvc-<claim uid>`, a hostPath directory `pv_root/<claim uid>`,
/// pre-bound to the claim. `None` when the claim lacks a UID, a namespace or a storage request.
pub fn persistent_volume_for(
    claim: &PersistentVolumeClaim,
    pv_root: &Path,
) -> Option<PersistentVolume> {
    let uid = claim
        .metadata
        .uid
        .as_deref()
        .filter(|uid| !uid.is_empty())?;
    let namespace = claim.metadata.namespace.clone()?;
    let name = claim.metadata.name.clone()?;
    let spec = claim.spec.as_ref()?;
    let storage = spec
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?
        .clone();
    let access_modes = spec
        .access_modes
        .clone()
        .filter(|modes| !modes.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_string()]);
    Some(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(format!("pvc-{uid}")),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY_ANNOTATION.to_string(),
                PROVISIONER.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            access_modes: Some(access_modes),
            capacity: Some(BTreeMap::from([("storage".to_string(), storage)])),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(namespace),
                name: Some(name),
                uid: Some(uid.to_string()),
                ..ObjectReference::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: pv_root.join(uid).to_string_lossy().into_owned(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            persistent_volume_reclaim_policy: Some("Delete".into()),
            storage_class_name: Some(STORAGE_CLASS.into()),
            volume_mode: Some(
                spec.volume_mode
                    .clone()
                    .unwrap_or_else(|| "Filesystem".into()),
            ),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    })
}

/// The data directory to remove when `pv` is one of ours, `Released`, with reclaim policy Delete.
/// Only a directory directly under `pv_root` is ever returned, whatever the PV says.
pub fn released_volume_dir(pv: &PersistentVolume, pv_root: &Path) -> Option<PathBuf> {
    let ours = pv
        .metadata
        .annotations
        .as_ref()
        .and_then(|annotations| annotations.get(PROVISIONED_BY_ANNOTATION))
        .is_some_and(|by| by == PROVISIONER);
    if !ours || pv.metadata.deletion_timestamp.is_some() {
        return None;
    }
    if pv
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref())
        != Some("Released")
    {
        return None;
    }
    let spec = pv.spec.as_ref()?;
    if spec.persistent_volume_reclaim_policy.as_deref() != Some("Delete") {
        return None;
    }
    let dir = PathBuf::from(&spec.host_path.as_ref()?.path);
    let inside_root = dir.parent() == Some(pv_root)
        && dir
            .file_name()
            .is_some_and(|name| name != "." && name != "..");
    inside_root.then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeStatus,
        VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim(class: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data-db-0".into()),
                namespace: Some("team".into()),
                uid: Some("1234-abcd".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: class.map(str::to_string),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), Quantity("1Gi".into()))])),
                    limits: None,
                }),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some("Pending".into()),
                ..PersistentVolumeClaimStatus::default()
            }),
        }
    }

    #[test]
    fn storage_class_is_the_default_immediate_delete_class() {
        let class = storage_class();
        assert_eq!(class.metadata.name.as_deref(), Some("standard"));
        assert_eq!(
            class.metadata.annotations.unwrap()["storageclass.kubernetes.io/is-default-class"],
            "true"
        );
        assert_eq!(class.provisioner, PROVISIONER);
        assert_eq!(class.reclaim_policy.as_deref(), Some("Delete"));
        assert_eq!(class.volume_binding_mode.as_deref(), Some("Immediate"));
    }

    #[test]
    fn only_unbound_live_claims_of_our_class_are_provisioned() {
        assert!(wants_provisioning(&claim(Some("standard"))));
        assert!(
            !wants_provisioning(&claim(None)),
            "no class yet: wait for the default"
        );
        assert!(
            !wants_provisioning(&claim(Some(""))),
            "explicitly classless"
        );
        assert!(!wants_provisioning(&claim(Some("fast"))));

        let mut bound = claim(Some("standard"));
        bound.spec.as_mut().unwrap().volume_name = Some("pv-x".into());
        assert!(!wants_provisioning(&bound));
        let mut bound_phase = claim(Some("standard"));
        bound_phase.status.as_mut().unwrap().phase = Some("Bound".into());
        assert!(!wants_provisioning(&bound_phase));

        let mut deleting = claim(Some("standard"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        assert!(!wants_provisioning(&deleting));

        let mut ours = claim(Some("standard"));
        ours.metadata.annotations = Some(BTreeMap::from([(
            STORAGE_PROVISIONER_ANNOTATION.into(),
            PROVISIONER.into(),
        )]));
        assert!(wants_provisioning(&ours));
        let mut theirs = claim(Some("standard"));
        theirs.metadata.annotations = Some(BTreeMap::from([(
            BETA_STORAGE_PROVISIONER_ANNOTATION.into(),
            "ebs.csi.aws.com".into(),
        )]));
        assert!(!wants_provisioning(&theirs));
    }

    #[test]
    fn the_pv_is_a_prebound_hostpath_directory_named_after_the_claim_uid() {
        let pv =
            persistent_volume_for(&claim(Some("standard")), Path::new("/run/tb/volumes")).unwrap();
        assert_eq!(pv.metadata.name.as_deref(), Some("pvc-1234-abcd"));
        assert_eq!(
            pv.metadata.annotations.as_ref().unwrap()[PROVISIONED_BY_ANNOTATION],
            PROVISIONER
        );
        let spec = pv.spec.unwrap();
        assert_eq!(
            spec.host_path.as_ref().unwrap().path,
            "/run/tb/volumes/1234-abcd"
        );
        assert_eq!(
            spec.host_path.unwrap().type_.as_deref(),
            Some("DirectoryOrCreate")
        );
        assert_eq!(spec.capacity.unwrap()["storage"], Quantity("1Gi".into()));
        assert_eq!(
            spec.access_modes.unwrap(),
            vec!["ReadWriteOnce".to_string()]
        );
        let claim_ref = spec.claim_ref.unwrap();
        assert_eq!(claim_ref.namespace.as_deref(), Some("team"));
        assert_eq!(claim_ref.name.as_deref(), Some("data-db-0"));
        assert_eq!(claim_ref.uid.as_deref(), Some("1234-abcd"));
        assert_eq!(spec.storage_class_name.as_deref(), Some("standard"));
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        assert_eq!(spec.volume_mode.as_deref(), Some("Filesystem"));
    }

    #[test]
    fn a_claim_without_a_storage_request_gets_no_pv() {
        let mut no_request = claim(Some("standard"));
        no_request.spec.as_mut().unwrap().resources = None;
        assert!(persistent_volume_for(&no_request, Path::new("/v")).is_none());
        let mut no_uid = claim(Some("standard"));
        no_uid.metadata.uid = None;
        assert!(persistent_volume_for(&no_uid, Path::new("/v")).is_none());
    }

    #[test]
    fn only_our_released_pvs_under_the_root_are_deleted() {
        let root = Path::new("/run/tb/volumes");
        let mut pv = persistent_volume_for(&claim(Some("standard")), root).unwrap();
        assert_eq!(released_volume_dir(&pv, root), None, "no phase yet");
        pv.status = Some(PersistentVolumeStatus {
            phase: Some("Bound".into()),
            ..Default::default()
        });
        assert_eq!(released_volume_dir(&pv, root), None);
        pv.status = Some(PersistentVolumeStatus {
            phase: Some("Released".into()),
            ..Default::default()
        });
        assert_eq!(released_volume_dir(&pv, root), Some(root.join("1234-abcd")));

        let mut foreign = pv.clone();
        foreign.metadata.annotations = None;
        assert_eq!(released_volume_dir(&foreign, root), None);
        let mut retained = pv.clone();
        retained
            .spec
            .as_mut()
            .unwrap()
            .persistent_volume_reclaim_policy = Some("Retain".into());
        assert_eq!(released_volume_dir(&retained, root), None);
        let with_host_path = |path: &str| {
            let mut moved = pv.clone();
            moved
                .spec
                .as_mut()
                .unwrap()
                .host_path
                .as_mut()
                .unwrap()
                .path = path.into();
            moved
        };
        let escaping = with_host_path("/etc");
        assert_eq!(released_volume_dir(&escaping, root), None);
        let nested = with_host_path("/run/tb/volumes/../../etc");
        assert_eq!(released_volume_dir(&nested, root), None);
    }
}
