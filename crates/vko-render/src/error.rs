//! The one error type of this crate.

use vko_api::ConditionReason;

/// Why a `Valkey` (or the inputs next to it) cannot be rendered. Every variant names the field it
/// is about, so the operator can put the message into a condition as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A name that becomes part of object names, DNS names or config files is not acceptable.
    #[error("{field} {value:?} is not usable: {why}")]
    InvalidName {
        /// Where the name comes from, e.g. `metadata.name`.
        field: String,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A user-supplied label or annotation would overwrite one the operator relies on.
    #[error("{field} sets the key {key:?}, which the operator manages itself")]
    ReservedKey {
        /// e.g. `spec.podLabels`.
        field: String,
        /// The offending key.
        key: String,
    },
    /// A DNS name for the certificate is not a DNS name.
    #[error("{field} contains {value:?}, which is not a DNS name")]
    InvalidDnsName {
        /// e.g. `spec.tls.certManager.extraDnsNames[1]`.
        field: String,
        /// The value as given.
        value: String,
    },
    /// A command-line argument cannot be passed to a process (it contains a NUL byte).
    #[error("{field} contains an argument with a NUL byte")]
    InvalidArgument {
        /// e.g. `spec.metrics.extraArgs[0]`.
        field: String,
    },
    /// A count is outside what the schema allows (objects built in code skip the schema).
    #[error("{field} is {value}, but must be at least {min}")]
    OutOfRange {
        /// e.g. `spec.replicas`.
        field: &'static str,
        /// The value as given.
        value: i64,
        /// The smallest acceptable value.
        min: i64,
    },
    /// The recorded master is not one of the data pods the spec asks for.
    #[error("the recorded master ordinal {ordinal} is not below the data replicas {replicas}")]
    RecordedMasterOutOfRange {
        /// The recorded ordinal.
        ordinal: u32,
        /// The data StatefulSet's replicas (`spec.replicas`, or a held scale-down's count).
        replicas: i32,
    },
    /// An input given by the embedding program (not by the user) is unusable.
    #[error("render input {field} is invalid: {why}")]
    InvalidInput {
        /// Name of the `RenderInputs` field.
        field: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A rendered object could not be turned into JSON (for hashing or for `objects()`).
    #[error("could not serialize the rendered {what}: {message}")]
    Serialization {
        /// Which object.
        what: String,
        /// serde_json's message.
        message: String,
    },
}

impl RenderError {
    /// Stable, CamelCase reason for conditions, Events and metric labels.
    pub fn reason(&self) -> ConditionReason {
        match self {
            RenderError::InvalidName { .. } => ConditionReason::InvalidName,
            RenderError::ReservedKey { .. } => ConditionReason::ReservedKey,
            RenderError::InvalidDnsName { .. } => ConditionReason::InvalidDnsName,
            RenderError::InvalidArgument { .. } => ConditionReason::InvalidArgument,
            RenderError::OutOfRange { .. } => ConditionReason::OutOfRange,
            RenderError::RecordedMasterOutOfRange { .. } => {
                ConditionReason::RecordedMasterOutOfRange
            }
            RenderError::InvalidInput { .. } => ConditionReason::InvalidRenderInput,
            RenderError::Serialization { .. } => ConditionReason::SerializationFailed,
        }
    }

    pub(crate) fn serialization(what: impl Into<String>, error: &serde_json::Error) -> Self {
        RenderError::Serialization {
            what: what.into(),
            message: error.to_string(),
        }
    }
}
