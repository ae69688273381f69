//! The port matrix of the reference's Port Summary.
//!
//! | component | no TLS  | TLS only | TLS + allowUnencrypted |
//! |-----------|---------|----------|------------------------|
//! | Valkey    | 6379    | 16379    | 16379 + 6379           |
//! | Sentinel  | 26379   | 36379    | 36379 + 26379          |
//!
//! The port named `valkey` / `sentinel` is always the primary one (the TLS port under TLS); the
//! plaintext port kept open by `allowUnencrypted` is named `valkey-plain` / `sentinel-plain`.

use vko_api::ValkeySpec;
use vko_api::consts::ports;

/// Port of the sidecar's health endpoint (`/healthz`, `/readyz`, `/drain`).
pub const SIDECAR_HEALTH: i32 = 8082;

/// Container and Service port names.
pub mod names {
    /// The primary Valkey port.
    pub const VALKEY: &str = "valkey";
    /// The plaintext Valkey port next to TLS.
    pub const VALKEY_PLAIN: &str = "valkey-plain";
    /// The primary Sentinel port.
    pub const SENTINEL: &str = "sentinel";
    /// The plaintext Sentinel port next to TLS.
    pub const SENTINEL_PLAIN: &str = "sentinel-plain";
    /// Sidecar and observer health ports.
    pub const HEALTH: &str = "health";
    /// The exporter's `/metrics`.
    pub const METRICS: &str = "metrics";
}

// vko-api's port constants as `u16`; the assertion makes a constant outside 0..=65535 a build
// error instead of a truncated port.
const _: () = assert!(
    ports::VALKEY >= 0
        && ports::VALKEY_TLS >= 0
        && ports::SENTINEL >= 0
        && ports::SENTINEL_TLS >= 0
        && ports::VALKEY <= u16::MAX as i32
        && ports::VALKEY_TLS <= u16::MAX as i32
        && ports::SENTINEL <= u16::MAX as i32
        && ports::SENTINEL_TLS <= u16::MAX as i32
);
const VALKEY_U16: u16 = ports::VALKEY as u16;
const VALKEY_TLS_U16: u16 = ports::VALKEY_TLS as u16;
const SENTINEL_U16: u16 = ports::SENTINEL as u16;
const SENTINEL_TLS_U16: u16 = ports::SENTINEL_TLS as u16;

/// The ports one `Valkey` listens on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortPlan {
    /// TLS is on: the primary ports are TLS ports.
    pub tls: bool,
    /// Primary Valkey port (6379, or 16379 under TLS).
    pub valkey: i32,
    /// Plaintext Valkey port kept open next to TLS.
    pub valkey_plain: Option<i32>,
    /// Primary Sentinel port (26379, or 36379 under TLS).
    pub sentinel: i32,
    /// Plaintext Sentinel port kept open next to TLS.
    pub sentinel_plain: Option<i32>,
}

impl PortPlan {
    /// The plan for a spec.
    pub fn of(spec: &ValkeySpec) -> PortPlan {
        let tls = spec.tls_enabled();
        PortPlan {
            tls,
            valkey: if tls {
                ports::VALKEY_TLS
            } else {
                ports::VALKEY
            },
            valkey_plain: spec.valkey_unencrypted_allowed().then_some(ports::VALKEY),
            sentinel: if tls {
                ports::SENTINEL_TLS
            } else {
                ports::SENTINEL
            },
            sentinel_plain: spec
                .sentinel_unencrypted_allowed()
                .then_some(ports::SENTINEL),
        }
    }

    /// The primary Valkey port as the operator dials it (the same choice as [`PortPlan::of`]).
    pub fn valkey_dial_port(&self) -> u16 {
        if self.tls { VALKEY_TLS_U16 } else { VALKEY_U16 }
    }

    /// The primary Sentinel port as the operator dials it (the same choice as [`PortPlan::of`]).
    pub fn sentinel_dial_port(&self) -> u16 {
        if self.tls {
            SENTINEL_TLS_U16
        } else {
            SENTINEL_U16
        }
    }

    /// `(name, port)` of every Valkey port, primary first.
    pub fn valkey_ports(&self) -> Vec<(&'static str, i32)> {
        let mut all = vec![(names::VALKEY, self.valkey)];
        all.extend(self.valkey_plain.map(|p| (names::VALKEY_PLAIN, p)));
        all
    }

    /// `(name, port)` of every Sentinel port, primary first.
    pub fn sentinel_ports(&self) -> Vec<(&'static str, i32)> {
        let mut all = vec![(names::SENTINEL, self.sentinel)];
        all.extend(self.sentinel_plain.map(|p| (names::SENTINEL_PLAIN, p)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dial_ports_are_the_primary_ports() {
        for tls in [false, true] {
            let spec = ValkeySpec {
                tls: Some(vko_api::TlsSpec {
                    enabled: Some(tls),
                    ..Default::default()
                }),
                ..ValkeySpec::default()
            };
            let plan = PortPlan::of(&spec);
            assert_eq!(plan.tls, tls);
            assert_eq!(i32::from(plan.valkey_dial_port()), plan.valkey);
            assert_eq!(i32::from(plan.sentinel_dial_port()), plan.sentinel);
        }
    }
}
