//! Pure rendering of every Kubernetes object and config file a `Valkey` needs. No I/O.
