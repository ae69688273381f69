//! Leader election on a `coordination.k8s.io/v1` Lease: take it when it is free or expired, renew
//! it while leading, and give it up on shutdown so a standby takes over at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

/// Name of the Lease.
pub const LEASE_NAME: &str = "vko-operator-leader";
/// How long a Lease stays valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the leader renews (and a candidate retries).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(5);

/// Whether `holder` may take a Lease that `spec` describes at `now`.
pub fn may_take(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = spec else { return true };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            match &spec.renew_time {
                Some(MicroTime(renewed)) => renewed
                    .saturating_add(SignedDuration::from_secs(duration))
                    .is_ok_and(|expires| expires < now),
                None => true,
            }
        }
    }
}

/// One candidate.
#[derive(Clone)]
pub struct Elector {
    api: Api<Lease>,
    identity: String,
}

impl Elector {
    pub fn new(client: kube::Client, namespace: &str, identity: String) -> Elector {
        Elector {
            api: Api::namespaced(client, namespace),
            identity,
        }
    }

    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let taking_over = previous.and_then(|spec| spec.holder_identity.as_deref())
            != Some(self.identity.as_str());
        let transitions = previous
            .and_then(|spec| spec.lease_transitions)
            .unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
            acquire_time: if taking_over {
                Some(MicroTime(now))
            } else {
                previous.and_then(|spec| spec.acquire_time.clone())
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if taking_over {
                transitions + 1
            } else {
                transitions
            }),
            ..LeaseSpec::default()
        }
    }

    /// Takes or renews the Lease; `Ok(true)` while this candidate holds it.
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        match self.api.get_opt(LEASE_NAME).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(LEASE_NAME.to_owned()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(self.spec(None, now)),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(error) => Err(error),
                }
            }
            Some(mut lease) => {
                if !may_take(lease.spec.as_ref(), &self.identity, now) {
                    return Ok(false);
                }
                lease.spec = Some(self.spec(lease.spec.as_ref(), now));
                // resourceVersion stays set: a concurrent taker makes this a 409, not a double lead.
                match self
                    .api
                    .replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
                {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                    Err(error) => Err(error),
                }
            }
        }
    }

    /// Waits until this candidate leads.
    pub async fn acquire(&self) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "leader election: Lease not reachable"),
            }
            tokio::time::sleep(RENEW_INTERVAL).await;
        }
    }

    /// Renews until the Lease is lost (returns) — the caller then stops reconciling.
    pub async fn hold(&self) {
        let mut last_renewed = std::time::Instant::now();
        loop {
            tokio::time::sleep(RENEW_INTERVAL).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewed = std::time::Instant::now(),
                Ok(false) => return,
                Err(error) => {
                    tracing::warn!(%error, "leader election: renewal failed");
                    if last_renewed.elapsed() >= LEASE_DURATION {
                        return;
                    }
                }
            }
        }
    }

    /// Gives the Lease up (best effort) so a standby need not wait for it to expire.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(LEASE_NAME).await
            && lease
                .spec
                .as_ref()
                .and_then(|spec| spec.holder_identity.as_deref())
                == Some(self.identity.as_str())
        {
            if let Some(spec) = lease.spec.as_mut() {
                spec.holder_identity = None;
            }
            let _ = self
                .api
                .replace(LEASE_NAME, &PostParams::default(), &lease)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed: i64) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(Timestamp::from_second(renewed).unwrap())),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_lease_is_taken_only_when_free_expired_or_already_ours() {
        let now = Timestamp::from_second(1_000).unwrap();
        assert!(may_take(None, "me", now));
        assert!(may_take(Some(&spec(None, 990)), "me", now));
        assert!(may_take(Some(&spec(Some("me"), 990)), "me", now));
        assert!(!may_take(Some(&spec(Some("other"), 990)), "me", now));
        assert!(may_take(Some(&spec(Some("other"), 980)), "me", now));
    }
}
