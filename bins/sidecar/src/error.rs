//! The one error type of the sidecar. `reason()` is stable: it appears in logs and in the
//! `/drain` answer.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// A required environment variable or argument is missing or unusable.
    #[error("invalid configuration: {0}")]
    Config(String),

    /// Reading or writing a config file failed.
    #[error("{path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A config template is not what vko-render writes (e.g. a line Valkey's tokenizer refuses).
    #[error("template {path}: {detail}")]
    Template { path: PathBuf, detail: String },

    /// Talking to valkey-server or valkey-sentinel failed.
    #[error("{what}: {source}")]
    Valkey {
        what: String,
        #[source]
        source: vko_valkey::Error,
    },

    /// The Kubernetes API refused or failed a call.
    #[error("kubernetes API: {0}")]
    Kube(String),

    /// A planned handover could not finish; the local server was unpaused and kept its role.
    #[error("handover failed at {step}: {detail}")]
    Handover { step: &'static str, detail: String },

    /// A task the sidecar cannot serve without (the fencer, the label keeper, the health server)
    /// ended; the sidecar exits so the kubelet restarts it rather than run on without it.
    #[error("the {task} task ended: {detail}")]
    TaskEnded { task: &'static str, detail: String },
}

impl SidecarError {
    pub fn reason(&self) -> &'static str {
        match self {
            SidecarError::Config(_) => "InvalidConfiguration",
            SidecarError::File { .. } => "FileError",
            SidecarError::Template { .. } => "InvalidTemplate",
            SidecarError::Valkey { source, .. } => source.reason(),
            SidecarError::Kube(_) => "KubernetesApiError",
            SidecarError::Handover { .. } => "HandoverFailed",
            SidecarError::TaskEnded { .. } => "TaskEnded",
        }
    }

    pub(crate) fn valkey(
        what: impl Into<String>,
    ) -> impl FnOnce(vko_valkey::Error) -> SidecarError {
        let what = what.into();
        move |source| SidecarError::Valkey { what, source }
    }

    pub(crate) fn file(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> SidecarError {
        let path = path.into();
        move |source| SidecarError::File { path, source }
    }
}

pub type Result<T, E = SidecarError> = std::result::Result<T, E>;
