//! The testbed's one error type.

/// Everything that can go wrong while building, starting, running or tearing down the testbed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the testbed needs root (network and mount namespaces): run it as root")]
    NotRoot,
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("timed out after {seconds}s waiting for {what}")]
    Timeout { what: String, seconds: u64 },
    #[error("certificates: {0}")]
    Pki(String),
    #[error("invalid {what}: {detail}")]
    Invalid { what: String, detail: String },
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Wraps an I/O error with what was being done, so the message says which file or call failed.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }

    /// `Ok` for a command that exited 0, else a `Command` error with its exit status and stderr.
    pub fn unless_success(output: &std::process::Output, description: &str) -> Result<(), Error> {
        if output.status.success() {
            return Ok(());
        }
        Err(Error::Command {
            command: description.to_string(),
            detail: format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
    }
}
