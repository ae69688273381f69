//! The process kubelet: fake Nodes that run the Pods the real scheduler binds to them, as processes.

pub mod dns;
pub mod nodes;
pub mod provisioner;
pub mod volumes;

pub mod env;
pub mod images;
pub mod pods;
pub mod probes;
