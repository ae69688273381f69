//! End-to-end tests against the testbed live in `tests/e2e/`; this crate only hosts them.
