//! The vko operator as a library: the reconcile pipeline (`controller`), its I/O steps (the
//! stores, apply, the data plane, the roll driver, Events) and the Controller that runs it.
//! `main.rs` is the command line around it; the decisions live in the pure crates (vko-render,
//! vko-authority, vko-roll, vko-status).

pub mod apply;
pub mod cache_sync;
pub mod controller;
pub mod dataplane;
pub mod discovery;
pub mod error;
pub mod events;
pub mod kube_clients;
pub mod leader;
pub mod master_lease;
pub mod metrics;
pub mod migrate;
pub mod nudge;
pub mod optional_watch;
pub mod own_writes;
pub mod password;
pub mod readiness;
pub mod roll;
pub mod scale;
pub mod secrets;
pub mod stores;
