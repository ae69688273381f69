//! Support of the end-to-end tests, shared by their areas: the tests themselves are one test binary
//! (`e2e`, `tests/e2e/main.rs`, a module per area in `tests/e2e/<area>.rs`) that runs against the
//! testbed. Behind the `e2e` feature like the binary, so plain `cargo test --workspace` builds none
//! of it.

/// What the fencing tests and `bench fence` compute from the writers' acknowledgements: when a
/// master stopped acknowledging, which lost writes fall inside the allowed window.
pub mod fence_measure;
/// The fencing tests' writers (inside a pod's network namespace, through a Service) and the
/// master-label sampler.
#[cfg(feature = "e2e")]
pub mod fence_support;
/// A minimal RESP client, pod-IP resolution and the writers of the Sentinel HA tests.
#[cfg(feature = "e2e")]
pub mod ha_support;
/// Real helm against the testbed, the in-cluster operator's pod and raw etcd access.
#[cfg(feature = "e2e")]
pub mod helm_support;
/// The disruption matrix's rows, measurements, bounds and page (issue 15, ADR 0042).
pub mod matrix;
/// The matrix's runner on the testbed: a cluster per topology, writers, sampler, each fault.
#[cfg(feature = "e2e")]
pub mod matrix_run;
/// The operator under test as a host process shared by the tests of the binary, with the chart's
/// RBAC.
#[cfg(feature = "e2e")]
pub mod operator_support;
/// Certificates for the TLS tests.
#[cfg(feature = "e2e")]
pub mod tls_support;
