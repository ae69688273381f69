//! vko-sidecar: the operator's binary inside every data pod (`init`, `run`) and Sentinel pod
//! (`sentinel-init`). See docs/adr/0004-data-pod-anatomy.md and
//! docs/adr/0005-master-authority-and-restart-guard.md.

pub mod cli;
pub mod conf;
pub mod decide;
pub mod error;
pub mod fence;
pub mod handover;
pub mod init;
pub mod lease_api;
pub mod node;
pub mod password;
pub mod pod_api;
pub mod run;
pub mod sentinel_init;
pub mod sentinel_tls;
pub mod tls_reload;
pub mod topology;

pub use error::{Result, SidecarError};
