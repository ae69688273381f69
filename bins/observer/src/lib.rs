//! vko-observer: the optional Cluster Observer of one `Valkey`. It dials the data pods and
//! Sentinels by host name (no Kubernetes API access), runs the ten checks of the reference's
//! `spec.observer.unreadyWhen` every few seconds, and serves the verdict on `/readyz` (200 / 503
//! with a JSON body of per-check details), `/healthz` (always 200) and `/metrics`.
//!
//! * [`check`]: the check names and results.
//! * [`evaluate`]: pure: an observed round -> the master choice and every check's verdict.
//! * [`probe`]: the I/O of one round (vko-valkey).
//! * [`run`]: the loop, the HTTP endpoints, logging, shutdown.

pub mod check;
pub mod cli;
pub mod error;
pub mod evaluate;
pub mod metrics;
pub mod probe;
pub mod run;

pub use error::{ObserverError, Result};
