//! The master Lease without Sentinel (ADR 0022): `<name>-master` in the `Valkey`'s namespace,
//! owned by the `Valkey`. The operator reads it every pass of a cluster above one replica,
//! creates it naming the master it adopts, and moves it (a PUT on the `resourceVersion` it read,
//! so a renew that lands first makes the move fail) before every promotion; the master's
//! sidecar renews it. What may be done is `vko_authority::decide_master_by_lease`'s decision.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{Api, PostParams};

use crate::error::Error;
use crate::leader::Leadership;

/// Bound on each Lease call (the client's own timeouts are longer).
pub const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(3);

fn failed(name: &str, message: String) -> Error {
    Error::WriteFailed {
        kind: "Lease".into(),
        name: name.to_owned(),
        message,
    }
}

/// The holder named by a Lease.
pub fn holder_of(lease: &Lease) -> Option<&str> {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty())
}

/// The Lease, `None` when it does not exist.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<Option<Lease>, Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(LEASE_CALL_TIMEOUT, leases.get_opt(name)).await {
        Ok(Ok(lease)) => Ok(lease),
        Ok(Err(e)) => Err(failed(name, format!("get: {e}"))),
        Err(_) => Err(failed(name, "get timed out".into())),
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Creates the Lease naming `holder` (a pod name), owned by the `Valkey`.
pub async fn grant(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    owner: Option<OwnerReference>,
    holder: &str,
    leadership: &Leadership,
) -> Result<(), Error> {
    leadership.check("create the master Lease")?;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(
                i32::try_from(vko_authority::MASTER_LEASE_DURATION.as_secs()).unwrap_or(5),
            ),
            acquire_time: Some(now()),
            renew_time: Some(now()),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    };
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(
        LEASE_CALL_TIMEOUT,
        leases.create(&PostParams::default(), &lease),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(failed(name, format!("create: {e}"))),
        Err(_) => Err(failed(name, "create timed out".into())),
    }
}

/// Moves `lease` (as read: its `resourceVersion` is the precondition) to `to`.
pub async fn transfer(
    client: &kube::Client,
    namespace: &str,
    lease: &Lease,
    to: &str,
    leadership: &Leadership,
) -> Result<(), Error> {
    let name = lease.metadata.name.clone().unwrap_or_default();
    leadership.check("move the master Lease")?;
    let mut moved = lease.clone();
    let spec = moved.spec.get_or_insert_with(LeaseSpec::default);
    spec.holder_identity = Some(to.to_owned());
    spec.acquire_time = Some(now());
    spec.renew_time = Some(now());
    spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match tokio::time::timeout(
        LEASE_CALL_TIMEOUT,
        leases.replace(&name, &PostParams::default(), &moved),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(status))) if status.code == 409 => Err(failed(
            &name,
            "changed since it was read (its holder renewed it): not moved".into(),
        )),
        Ok(Err(e)) => Err(failed(&name, format!("update: {e}"))),
        Err(_) => Err(failed(&name, "update timed out".into())),
    }
}

/// Moves the Lease to `to` after reading it afresh; used where no sighting is kept (the roll's
/// switchover, under its pause: the old master is paused and the holder).
pub async fn move_to(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    to: &str,
    leadership: &Leadership,
) -> Result<(), Error> {
    let mut last = None;
    // The holder renews every 500 ms: a conflict is read again, a few times.
    for _ in 0..3 {
        let Some(lease) = read(client, namespace, name).await? else {
            return Err(failed(name, "does not exist".into()));
        };
        if holder_of(&lease) == Some(to) {
            return Ok(());
        }
        match transfer(client, namespace, &lease, to, leadership).await {
            Ok(()) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| failed(name, "not moved".into())))
}
