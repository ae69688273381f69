//! The failover-aware rolling update as one pure state machine: an observed world in, the next single
//! action out. No I/O.
