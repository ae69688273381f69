//! A real Kubernetes on one machine whose pods are processes: the control plane from real binaries, a
//! process kubelet, and a harness for end-to-end tests. Test infrastructure, never shipped.
//!
//! Layout: [`paths`] (where state and caches live), [`pki`] (the testbed's own CA and certificates),
//! [`controlplane`] (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy),
//! [`kube_proxy`] (its configuration and netfilter cleanup), [`net`] (bridge,
//! per-pod network namespaces), [`runtime`] (containers as processes in their own namespaces),
//! [`kubelet`] (fake Nodes that run the Pods bound to them), [`harness`] (what `tests/` uses),
//! [`cert_manager`] and [`prometheus`] (the monitoring and certificate parts users run).

pub mod cert_manager;
pub mod control;
pub mod controlplane;
pub mod error;
pub mod harness;
pub mod kube_proxy;
pub mod kube_router;
pub mod kubelet;
pub mod net;
pub mod paths;
pub mod pki;
pub mod prometheus;
pub mod rbac_audit;
pub mod runtime;

pub use error::{Error, Result};
