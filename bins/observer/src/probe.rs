//! The I/O of one round: dial every data pod and Sentinel by host name (vko-valkey), write and
//! read the health key, and hand what was seen to `evaluate`. Every connection is new (TLS files
//! are re-read on every dial, so a rotated Secret is picked up) and every call is bounded.

use std::time::{Duration, Instant};

use futures::future::join_all;
use vko_valkey::parse::{InstanceFlag, LinkStatus, ReplicationRole};
use vko_valkey::switchover::Address;
use vko_valkey::{Dialer, ValkeyClient};

use crate::cli::{Config, SentinelTarget};
use crate::error::{ObserverError, Result};
use crate::evaluate::{
    DataPod, DataRole, Endpoint, HealthTest, MasterChoice, Observation, ReplicaRead,
    SentinelAnswer, SentinelMasterView, SentinelTier, SentinelView, choose_master,
};

/// `vko_valkey`'s dialer addresses an instance as it is announced.
fn address(ep: &Endpoint) -> Address {
    Address::new(ep.host.clone(), ep.port)
}

/// A valkey-server, authenticated, PINGed.
async fn valkey(dialer: &Dialer, ep: &Endpoint) -> Result<ValkeyClient> {
    let client = dialer
        .valkey(&address(ep))
        .await
        .map_err(ObserverError::valkey(format!("connect to {ep}")))?;
    client
        .ping()
        .await
        .map_err(ObserverError::valkey(format!("PING {ep}")))?;
    Ok(client)
}

/// Runs one round: probes, chooses the master, writes and reads the health key.
pub async fn observe(cfg: &Config, round: u64) -> Observation {
    let sentinel = async {
        match &cfg.sentinel {
            Some(target) => Some(probe_sentinels(&cfg.dialer, target).await),
            None => None,
        }
    };
    let data = join_all(
        cfg.data_pods
            .iter()
            .map(|(name, ep)| probe_data_pod(&cfg.dialer, name, ep)),
    );
    let (sentinel, data) = tokio::join!(sentinel, data);
    let master = choose_master(&data, sentinel.as_ref());
    let value = format!("{round}:{}", unix_millis());
    let health = health_test(cfg, &master, &data, value).await;
    Observation {
        replicas: cfg.replicas,
        data,
        sentinel,
        master,
        health,
    }
}

fn unix_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default()
}

async fn probe_data_pod(dialer: &Dialer, name: &str, ep: &Endpoint) -> DataPod {
    let role = async {
        let client = valkey(dialer, ep).await?;
        let info = client
            .info_replication()
            .await
            .map_err(ObserverError::valkey(format!("INFO replication on {ep}")));
        client.close().await;
        let info = info?;
        Ok::<_, ObserverError>(match (info.role, info.upstream) {
            (ReplicationRole::Master, _) => DataRole::Master,
            (ReplicationRole::Replica, Some(up)) => DataRole::Replica {
                upstream: Endpoint::new(up.master_host, up.master_port),
                link_up: up.link_status == LinkStatus::Up,
                sync_in_progress: up.sync_in_progress,
            },
            (ReplicationRole::Replica, None) => {
                return Err(ObserverError::Config(format!(
                    "{ep}: role:slave without master_host"
                )));
            }
        })
    }
    .await
    .map_err(|e| e.to_string());
    DataPod {
        name: name.to_owned(),
        endpoint: ep.clone(),
        role,
    }
}

async fn probe_sentinels(dialer: &Dialer, target: &SentinelTarget) -> SentinelTier {
    let sentinels = join_all(target.pods.iter().map(|(name, ep)| async move {
        // No PING first: `SENTINEL MASTER` right after fails the same way.
        let state = match dialer.sentinel(&address(ep)).await {
            Err(e) => Err(format!("connect to {ep}: {e}")),
            Ok(client) => {
                let master = client
                    .master(&target.monitor)
                    .await
                    .map(|m| SentinelMasterView {
                        address: Endpoint::new(m.host, m.port),
                        s_down: m.flags.contains(&InstanceFlag::SDown),
                        o_down: m.flags.contains(&InstanceFlag::ODown),
                        known_sentinels: usize::try_from(m.num_other_sentinels)
                            .unwrap_or(usize::MAX)
                            .saturating_add(1),
                    })
                    .map_err(|e| format!("SENTINEL MASTER {}: {e}", target.monitor));
                let replicas = client
                    .replicas(&target.monitor)
                    .await
                    .map(|list| {
                        list.into_iter()
                            .map(|r| Endpoint::new(r.host, r.port))
                            .collect()
                    })
                    .map_err(|e| format!("SENTINEL REPLICAS {}: {e}", target.monitor));
                client.close().await;
                Ok(SentinelAnswer { master, replicas })
            }
        };
        SentinelView {
            name: name.clone(),
            state,
        }
    }))
    .await;
    SentinelTier {
        configured: target.configured,
        sentinels,
    }
}

/// A client of `ep` with `db` selected.
async fn valkey_in_db(dialer: &Dialer, ep: &Endpoint, db: u32) -> Result<ValkeyClient> {
    let client = valkey(dialer, ep).await?;
    client
        .select(db)
        .await
        .map_err(ObserverError::valkey(format!("SELECT {db} on {ep}")))?;
    Ok(client)
}

async fn health_test(
    cfg: &Config,
    choice: &MasterChoice,
    data: &[DataPod],
    value: String,
) -> HealthTest {
    let mut test = HealthTest {
        value,
        catch_up_ms: u64::try_from(cfg.catch_up.as_millis()).unwrap_or(u64::MAX),
        ..HealthTest::default()
    };
    let Some(master) = &choice.master else {
        return test;
    };
    let client = match valkey(&cfg.dialer, master).await {
        Ok(client) => client,
        Err(e) => {
            test.ping = Some(Err(e.to_string()));
            return test;
        }
    };
    test.ping = Some(Ok(()));
    let written = async {
        client
            .select(cfg.db)
            .await
            .map_err(ObserverError::valkey(format!("SELECT {}", cfg.db)))?;
        client
            .set_with_expiry(&cfg.health_key, test.value.as_bytes(), cfg.health_key_ttl)
            .await
            .map_err(ObserverError::valkey(format!("SET {}", cfg.health_key)))
    }
    .await;
    let written_at = Instant::now();
    test.write = Some(written.as_ref().map(|_| ()).map_err(ToString::to_string));
    if written.is_ok() {
        test.read = Some(
            client
                .get(&cfg.health_key)
                .await
                .map(|got| got.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
                .map_err(|e| format!("GET {}: {e}", cfg.health_key)),
        );
    }
    client.close().await;
    if written.is_err() || cfg.replicas <= 1 {
        return test;
    }
    let deadline = written_at + cfg.catch_up;
    let replicas = data.iter().filter(|pod| !pod.endpoint.same(master));
    let reads = join_all(replicas.map(|pod| async {
        let read = read_replica(cfg, &pod.endpoint, &test.value, deadline).await;
        (pod.name.clone(), read)
    }))
    .await;
    test.replica_reads = reads.into_iter().collect();
    test
}

/// Reads the health key from a replica until it returns `expected` or `deadline` passes, so a
/// replica that applies the write a little later is not reported as stale.
async fn read_replica(
    cfg: &Config,
    ep: &Endpoint,
    expected: &str,
    deadline: Instant,
) -> ReplicaRead {
    let client = match valkey_in_db(&cfg.dialer, ep, cfg.db).await {
        Ok(client) => client,
        Err(e) => return ReplicaRead::Error(e.to_string()),
    };
    let result = loop {
        let read = match client.get(&cfg.health_key).await {
            Ok(Some(bytes)) if bytes == expected.as_bytes() => break ReplicaRead::Fresh,
            Ok(Some(bytes)) => ReplicaRead::Stale {
                got: String::from_utf8_lossy(&bytes).into_owned(),
            },
            Ok(None) => ReplicaRead::Missing,
            Err(e) => ReplicaRead::Error(format!("GET {}: {e}", cfg.health_key)),
        };
        if Instant::now() + REREAD_EVERY > deadline {
            break read;
        }
        tokio::time::sleep(REREAD_EVERY).await;
    };
    client.close().await;
    result
}

/// Pause between two reads of a replica that has not caught up yet.
const REREAD_EVERY: Duration = Duration::from_millis(200);
