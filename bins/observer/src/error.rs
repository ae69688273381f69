//! The one error type of the observer. `reason()` is stable: it appears in logs.

#[derive(Debug, thiserror::Error)]
pub enum ObserverError {
    /// An argument or environment variable is missing or unusable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// Talking to valkey-server or valkey-sentinel failed.
    #[error("{what}: {source}")]
    Valkey {
        what: String,
        #[source]
        source: vko_valkey::Error,
    },

    /// The HTTP listener could not be bound or failed.
    #[error("HTTP server on {addr}: {source}")]
    Http {
        addr: String,
        #[source]
        source: std::io::Error,
    },
}

impl ObserverError {
    pub fn reason(&self) -> &'static str {
        match self {
            ObserverError::Config(_) => "InvalidConfiguration",
            ObserverError::Valkey { source, .. } => source.reason(),
            ObserverError::Http { .. } => "HttpServerError",
        }
    }

    pub(crate) fn valkey(
        what: impl Into<String>,
    ) -> impl FnOnce(vko_valkey::Error) -> ObserverError {
        let what = what.into();
        move |source| ObserverError::Valkey { what, source }
    }
}

pub type Result<T, E = ObserverError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_stable() {
        assert_eq!(
            ObserverError::Config("x".into()).reason(),
            "InvalidConfiguration"
        );
        let refused = vko_valkey::Error::ConnectionRefused { addr: "h:1".into() };
        assert_eq!(
            ObserverError::valkey("PING")(refused).reason(),
            "ConnectionRefused"
        );
    }
}
