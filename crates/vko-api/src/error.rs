//! Errors of this crate.

/// Why a value in a `Valkey` could not be interpreted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A duration string (Go syntax, e.g. `5m` or `1h30m`) did not parse.
    #[error("invalid duration {value:?}: {reason}")]
    InvalidDuration {
        /// The text as written.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A string did not name any variant of a fixed set (condition type, reason, ...).
    #[error("unknown {what} {value:?}")]
    UnknownName {
        /// The set that was searched.
        what: &'static str,
        /// The text as written.
        value: String,
    },
    /// An auth password that would mean "no password" or another password than the Secret's.
    #[error("the password {problem}")]
    UnusablePassword {
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl Error {
    /// Stable, CamelCase reason for conditions, Events and metric labels.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidDuration { .. } => "InvalidDuration",
            Error::UnknownName { .. } => "UnknownName",
            Error::UnusablePassword { .. } => "PasswordUnusable",
        }
    }
}
