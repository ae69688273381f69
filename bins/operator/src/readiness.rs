//! What the operator pod's `/readyz` answers. A standby is Ready, as controller-runtime's
//! operators are (the reference's `/readyz` is a ping): a healthy candidate is what a Deployment
//! rollout waits for, so `kubectl rollout status` completes with `replicaCount > 1`. A leader is
//! Ready only once its watches have listed; which pod leads is the Lease's `holderIdentity`, and
//! the body of `/readyz` says it too (`leading` / `standing by`).

use std::sync::atomic::{AtomicU8, Ordering};

/// Where the process is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Connecting to the API server, before the election or the controller.
    Starting = 0,
    /// Waiting for the leader Lease (first campaign, or again after a loss).
    StandingBy = 1,
    /// Holding the Lease (or not elected) while the watches have not all listed.
    Listing = 2,
    /// Holding the Lease with every watch listed: reconciling.
    Leading = 3,
    /// Shutting down.
    Stopping = 4,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            1 => Phase::StandingBy,
            2 => Phase::Listing,
            3 => Phase::Leading,
            4 => Phase::Stopping,
            _ => Phase::Starting,
        }
    }

    /// Whether `/readyz` answers 200, and its body.
    pub fn answer(self) -> (bool, &'static str) {
        match self {
            Phase::Starting => (false, "starting"),
            Phase::StandingBy => (true, "standing by"),
            Phase::Listing => (false, "leading; the watches have not listed yet"),
            Phase::Leading => (true, "leading"),
            Phase::Stopping => (false, "stopping"),
        }
    }
}

/// The phase, shared by the election, the controller and the HTTP server.
#[derive(Debug, Default)]
pub struct Readiness(AtomicU8);

impl Readiness {
    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::SeqCst);
    }

    pub fn get(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::SeqCst))
    }

    /// The phase of a process that holds the Lease (or is not elected): `Leading` once the
    /// watches have listed.
    pub fn lead(&self, synced: bool) {
        self.set(if synced {
            Phase::Leading
        } else {
            Phase::Listing
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_and_a_listed_leader_are_ready_nothing_else_is() {
        let cases = [
            (Phase::Starting, false, "starting"),
            (Phase::StandingBy, true, "standing by"),
            (
                Phase::Listing,
                false,
                "leading; the watches have not listed yet",
            ),
            (Phase::Leading, true, "leading"),
            (Phase::Stopping, false, "stopping"),
        ];
        for (phase, ready, body) in cases {
            assert_eq!(phase.answer(), (ready, body), "{phase:?}");
            let shared = Readiness::default();
            assert_eq!(shared.get(), Phase::Starting);
            shared.set(phase);
            assert_eq!(shared.get(), phase);
        }
        let shared = Readiness::default();
        shared.lead(false);
        assert_eq!(shared.get(), Phase::Listing);
        shared.lead(true);
        assert_eq!(shared.get(), Phase::Leading);
    }
}
