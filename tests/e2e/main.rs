//! The end-to-end tests against the testbed: ONE test binary, a module per area
//! (`tests/e2e/<area>.rs`), the support they share in the `vko-e2e` library (`tests/src`). A
//! test's name is `<area>::<test>`, so
//! `cargo test -p vko-e2e --features e2e --test e2e -- operator_roll::` runs one area.
//!
//! Tests run concurrently (libtest's `--test-threads`; `cargo xtask test --e2e-threads`) and share
//! one testbed, one CRD and one operator process (`operator_support`); each works in namespaces of
//! its own. A test that cannot share the testbed has a name starting with `exclusive_`: it stops a
//! node, restarts the API server, needs another operator than the shared one to lead the shared
//! Lease, or needs a fresh operator. `cargo xtask test` runs the others with `--skip exclusive_`,
//! then the `exclusive_` ones one at a time (`--test-threads=1`), then the ignored RBAC check over
//! the whole suite's audit log and `helm_uninstall_crd` (alone, last). By hand: the others with
//! `--skip exclusive_`, the `exclusive_` ones with `--test-threads=1` and nothing else on the
//! testbed.
//!
//! A new area: `tests/e2e/<area>.rs` plus `mod <area>;` below (support via `use vko_e2e::...`).

mod crd_admission;
mod disruption_matrix;
mod helm_chart;
mod helm_lifecycle;
mod helm_uninstall_crd;
mod operator_apiserver_restart;
mod operator_auth_persistence;
mod operator_cert_manager;
mod operator_failover;
mod operator_fencing;
mod operator_fleet;
mod operator_ha;
mod operator_leader;
mod operator_metrics;
mod operator_migration;
mod operator_network_policy;
mod operator_objects;
mod operator_observer;
mod operator_optional_objects;
mod operator_password_rotation;
mod operator_pod_admission;
mod operator_replicas;
mod operator_roll;
mod operator_roll_stalls;
mod operator_scaling;
mod operator_services;
mod operator_standalone;
mod operator_steady_state;
mod operator_tls;
mod rbac_least_privilege;
mod render_dry_run;
mod testbed_cluster;
mod testbed_faults;
mod testbed_kubectl;
mod testbed_pods;
mod valkey_versions;
