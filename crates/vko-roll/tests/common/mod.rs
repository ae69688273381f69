//! World builders shared by the decision tests and the simulation.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use vko_roll::{
    ConnectedReplica, DataPod, DataTier, MasterInfo, Millis, ReplicaInfo, SentinelPod,
    SentinelTier, SentinelView, Server, Terminating, World,
};

pub const NEW: &str = "new";
pub const OLD: &str = "old";
pub const T0: Millis = Millis(1_800_000_000_000);
pub const SYNC_TIMEOUT_MS: u64 = 300_000;

/// A healthy cluster, every pod on `NEW`, pod 0 master with data, the others in-sync replicas.
pub fn cluster(replicas: u32, sentinels: u32) -> World {
    let mut world = World {
        data: DataTier {
            statefulset: "vk".into(),
            replicas,
            target_hash: NEW.into(),
            sidecar_only_change: false,
            recorded_master: if sentinels == 0 && replicas > 1 {
                Some(0)
            } else {
                None
            },
            pods: (0..replicas)
                .map(|ordinal| DataPod {
                    ordinal,
                    name: format!("vk-{ordinal}"),
                    created_at: Millis(T0.0 - 3_600_000),
                    template_hash: NEW.into(),
                    ready: true,
                    terminating: None,
                    server: Server::Unreachable,
                })
                .collect(),
        },
        sentinel: (sentinels > 0).then(|| SentinelTier {
            statefulset: "vk-sentinel".into(),
            replicas: sentinels,
            quorum: sentinels / 2 + 1,
            target_hash: NEW.into(),
            pods: (0..sentinels)
                .map(|ordinal| SentinelPod {
                    ordinal,
                    name: format!("vk-sentinel-{ordinal}"),
                    created_at: Millis(T0.0 - 3_600_000),
                    template_hash: NEW.into(),
                    ready: true,
                    terminating: None,
                })
                .collect(),
            view: SentinelView::default(),
        }),
        sync_timeout_ms: SYNC_TIMEOUT_MS,
        persistence: false,
    };
    make_master(&mut world, 0, 10_000, 100);
    world
}

/// Makes `ordinal` the master at `offset` with `keys`, every other data pod an in-sync replica
/// of it, and the Sentinels agree.
pub fn make_master(world: &mut World, ordinal: u32, offset: u64, keys: u64) {
    let others: Vec<u32> = world
        .data
        .pods
        .iter()
        .map(|p| p.ordinal)
        .filter(|o| *o != ordinal)
        .collect();
    for pod in &mut world.data.pods {
        pod.server = if pod.ordinal == ordinal {
            Server::Master(MasterInfo {
                offset,
                keys,
                replicas: others
                    .iter()
                    .map(|o| ConnectedReplica {
                        ordinal: Some(*o),
                        online: true,
                        offset,
                    })
                    .collect(),
                replid: format!("replid-{ordinal}"),
                replid2: None,
                second_offset: None,
            })
        } else {
            Server::Replica(replica_of(ordinal, offset, keys))
        };
    }
    if let Some(sentinel) = &mut world.sentinel {
        let ready = sentinel.pods.iter().filter(|p| p.ready).count() as u32;
        sentinel.view = SentinelView {
            answered: ready,
            master: Some(ordinal),
            agreeing: ready,
            known_replicas: others,
            stale_peers: false,
        };
    }
}

pub fn replica_of(master: u32, offset: u64, keys: u64) -> ReplicaInfo {
    ReplicaInfo {
        following: Some(master),
        link_up: true,
        syncing: false,
        loading: false,
        offset,
        keys,
    }
}

pub fn data_pod(world: &mut World, ordinal: u32) -> &mut DataPod {
    world
        .data
        .pods
        .iter_mut()
        .find(|p| p.ordinal == ordinal)
        .expect("data pod exists")
}

pub fn sentinel_pod(world: &mut World, ordinal: u32) -> &mut SentinelPod {
    world
        .sentinel
        .as_mut()
        .expect("sentinel tier")
        .pods
        .iter_mut()
        .find(|p| p.ordinal == ordinal)
        .expect("sentinel pod exists")
}

pub fn replica_info(world: &mut World, ordinal: u32) -> &mut ReplicaInfo {
    match &mut data_pod(world, ordinal).server {
        Server::Replica(info) => info,
        other => panic!("vk-{ordinal} is not a replica: {other:?}"),
    }
}

pub fn master_info(world: &mut World, ordinal: u32) -> &mut MasterInfo {
    match &mut data_pod(world, ordinal).server {
        Server::Master(info) => info,
        other => panic!("vk-{ordinal} is not a master: {other:?}"),
    }
}

/// Marks the data pods `ordinals` as running the old template.
pub fn outdate(world: &mut World, ordinals: &[u32]) {
    for ordinal in ordinals {
        data_pod(world, *ordinal).template_hash = OLD.into();
    }
}

pub fn outdate_sentinels(world: &mut World, ordinals: &[u32]) {
    for ordinal in ordinals {
        sentinel_pod(world, *ordinal).template_hash = OLD.into();
    }
}

pub fn remove_data_pod(world: &mut World, ordinal: u32) {
    world.data.pods.retain(|p| p.ordinal != ordinal);
}

pub fn terminating(since: Millis) -> Option<Terminating> {
    Some(Terminating {
        since,
        grace_deadline: since.plus(30_000),
    })
}
