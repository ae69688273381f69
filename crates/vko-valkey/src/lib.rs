//! Typed calls to Valkey and Sentinel, and pure parsers for their replies.
//!
//! * [`parse`]: pure parsers for INFO, ROLE and SENTINEL replies (no I/O).
//! * [`client`]: [`ValkeyClient`] and [`SentinelClient`], async, one connection each, TLS via rustls
//!   (ring) and per-call timeouts. The wire library (fred) is an implementation detail: none of its
//!   types appear in this crate's API, so it can be replaced.
//! * [`dial`]: [`Dialer`], the one way operator, sidecar and observer reach a server (passwords,
//!   TLS material, timeouts, an announced-name → address hook).
//! * [`certificate`]: whether user-provided TLS material can serve a cluster (pure).
//! * [`served`]: which certificate a TLS port serves (one verified handshake).
//! * [`switchover`]: the planned, lossless hand-over of the master role (sidecar and operator).
//! * [`Error`]: one error enum with a stable [`Error::reason`].

pub mod certificate;
pub mod client;
pub mod dial;
mod error;
pub mod parse;
mod reply;
pub mod served;
pub mod switchover;

pub use client::{
    ConnectOptions, SentinelClient, TlsOptions, ValkeyClient, install_default_crypto_provider,
};
pub use dial::{Credentials, Dialer, Resolve, TlsFiles, TlsMaterial};
pub use error::{Error, Result};
pub use parse::password_hash;
pub use reply::{Reply, decode_resp2};
