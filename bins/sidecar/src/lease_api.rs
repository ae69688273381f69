//! The master Lease (ADR 0022) as the sidecar uses it: read it, renew it while this pod holds
//! it, and (in the preStop handover) move it to the successor. Each write is a PUT carrying the
//! `resourceVersion` last read, so a renew or move that raced with another writer fails with a
//! conflict instead of overwriting it. Behind a trait so the logic is tested without an API
//! server; the Role allows `get` and `update` on this one Lease by name.

use futures::future::BoxFuture;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};

use vko_api::consts::kube_api;

use crate::error::{Result, SidecarError};

/// The Lease as last read or written.
#[derive(Clone, Debug, PartialEq)]
pub struct HeldLease {
    /// `spec.holderIdentity`: a pod name.
    pub holder: Option<String>,
    /// The object, `metadata.resourceVersion` included: the precondition of the next write.
    pub object: Lease,
}

impl HeldLease {
    pub fn of(object: Lease) -> HeldLease {
        HeldLease {
            holder: object
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            object,
        }
    }
}

/// What a conditional write found.
#[derive(Clone, Debug, PartialEq)]
pub enum Written {
    Done(Box<HeldLease>),
    /// Someone wrote the Lease since it was read (409): read it again.
    Conflict,
}

pub trait LeaseApi: Send + Sync {
    /// The Lease (`None`: it does not exist yet).
    fn read(&self) -> BoxFuture<'_, Result<Option<HeldLease>>>;
    /// `spec.renewTime` = now, on the version read.
    fn renew<'a>(&'a self, lease: &'a HeldLease) -> BoxFuture<'a, Result<Written>>;
    /// `spec.holderIdentity` = `to` (acquire and renew time now, one more transition), on the
    /// version read.
    fn transfer<'a>(&'a self, lease: &'a HeldLease, to: &'a str) -> BoxFuture<'a, Result<Written>>;
}

/// The real API, in-cluster credentials.
pub struct KubeLeaseApi {
    leases: Api<Lease>,
    name: String,
}

impl KubeLeaseApi {
    pub async fn in_cluster(namespace: &str, name: &str) -> Result<KubeLeaseApi> {
        let mut config = crate::pod_api::in_cluster_config()?;
        config.read_timeout = Some(kube_api::RESPONSE_TIMEOUT);
        config.reset_reader_on_write = true;
        let client = kube::Client::try_from(config)
            .map_err(|e| SidecarError::Kube(format!("client: {e}")))?;
        Ok(KubeLeaseApi {
            leases: Api::namespaced(client, namespace),
            name: name.to_owned(),
        })
    }

    async fn put(&self, object: Lease) -> Result<Written> {
        match self
            .leases
            .replace(&self.name, &PostParams::default(), &object)
            .await
        {
            Ok(lease) => Ok(Written::Done(Box::new(HeldLease::of(lease)))),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(Written::Conflict),
            Err(e) => Err(SidecarError::Kube(format!(
                "update lease {}: {e}",
                self.name
            ))),
        }
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl LeaseApi for KubeLeaseApi {
    fn read(&self) -> BoxFuture<'_, Result<Option<HeldLease>>> {
        Box::pin(async move {
            self.leases
                .get_opt(&self.name)
                .await
                .map(|lease| lease.map(HeldLease::of))
                .map_err(|e| SidecarError::Kube(format!("get lease {}: {e}", self.name)))
        })
    }

    fn renew<'a>(&'a self, lease: &'a HeldLease) -> BoxFuture<'a, Result<Written>> {
        Box::pin(async move {
            let mut object = lease.object.clone();
            object.spec.get_or_insert_with(Default::default).renew_time = Some(now());
            self.put(object).await
        })
    }

    fn transfer<'a>(&'a self, lease: &'a HeldLease, to: &'a str) -> BoxFuture<'a, Result<Written>> {
        Box::pin(async move {
            let mut object = lease.object.clone();
            let spec = object.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(to.to_owned());
            spec.acquire_time = Some(now());
            spec.renew_time = Some(now());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            self.put(object).await
        })
    }
}
