//! The `Valkey` custom resource (`vko.gtrfc.com/v1`): spec and status types, defaults, validation,
//! condition/phase/reason enums, label keys and port numbers. No I/O: `Valkey::crd()` is the single
//! source of the CRD.
