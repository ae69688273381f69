//! The one error type of the operator. `reason()` is stable: it becomes the condition reason, the
//! Event reason and the `reason` label of `vko_reconcile_errors_total`.

use vko_api::ConditionReason;

/// Why a reconcile pass (or one of its steps) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `Valkey` lacks a field the API server always sets (namespace, name, uid).
    #[error("the Valkey has no {0}")]
    MissingObjectField(&'static str),

    /// vko-render refused the spec.
    #[error("cannot render the desired objects: {0}")]
    Render(#[from] vko_render::RenderError),

    /// A generated name is held by an object this `Valkey` does not control.
    #[error(
        "{kind} {name} exists but is not controlled by this Valkey; delete or rename it so the operator can create its own"
    )]
    ForeignObject { kind: String, name: String },

    /// An admission webhook or policy refused a write.
    #[error("an admission webhook denied writing {kind} {name}: {message}")]
    AdmissionWebhookDenied {
        kind: String,
        name: String,
        message: String,
    },

    /// The StatefulSet controller cannot create this `Valkey`'s pods: an admission gate refused
    /// them (its `FailedCreate` Event). Clears itself once the gate reopens.
    #[error(
        "the StatefulSet controller cannot create the pods of {statefulset}: {message}; the operator nudges {statefulset} so they are created as soon as the admission gate lets them"
    )]
    PodCreationDenied {
        statefulset: String,
        message: String,
    },

    /// Any other failed write (RBAC, quota, conflict, API server unreachable).
    #[error("writing {kind} {name} failed: {message}")]
    WriteFailed {
        kind: String,
        name: String,
        message: String,
    },

    /// Listing an unwatched kind (Certificates, ServiceMonitors) for clean-up failed; reported
    /// with the apply step's failed writes, whose clean-up it holds up.
    #[error("listing the {kind}s in namespace {namespace} failed: {message}")]
    ListFailed {
        kind: &'static str,
        namespace: String,
        message: String,
    },

    /// A Secret the spec references does not exist (or lacks the key).
    #[error("{what} Secret {name} {problem}; create it, the operator continues by itself")]
    SecretMissing {
        what: &'static str,
        name: String,
        problem: String,
    },

    /// `spec.tls.certManager` is set and cert-manager's API is not served: the Certificates are
    /// not written (a TLS Secret issued before keeps serving, but nothing renews it).
    #[error(
        "spec.tls.certManager is set but cert-manager is not installed (no established CRD certificates.cert-manager.io serving v1), so Certificate {certificates} cannot be written and its TLS Secret is neither issued nor renewed; install cert-manager or use spec.tls.secretName, the operator continues by itself once the CRD is established"
    )]
    CertManagerMissing { certificates: String },

    /// The auth Secret's password is empty, only whitespace or not UTF-8: nothing is started or
    /// rolled with it (it would mean a server without a password, or another password).
    #[error(
        "auth Secret {name} key {key:?} (spec.auth.secretPasswordKey): {source}; put a non-empty password there, the operator continues by itself"
    )]
    PasswordUnusable {
        name: String,
        key: String,
        source: vko_api::Error,
    },

    /// A user-provided TLS Secret's certificate cannot serve the pods (wrong issuer, expired,
    /// missing clientAuth usage, host names not covered); nothing is started with it.
    #[error(
        "TLS Secret {name} cannot serve this cluster: {problems}; replace the certificate, the operator continues by itself"
    )]
    TlsCertificateUnusable { name: String, problems: String },

    /// `spec.persistence` turned on or off on an existing StatefulSet: its volume claims cannot
    /// change, so nothing is written to it.
    #[error("StatefulSet {name}: {difference}")]
    StorageRecreateRequired { name: String, difference: String },

    /// `spec.image` names a Valkey that cannot load the files the running one saved on the
    /// persistent volumes: the cluster keeps running its image.
    #[error(
        "spec.image {} is Valkey {}.{}, which cannot load the RDB files Valkey {}.{} saves (format {}; a pod restarted with it would stop at start), and the data is on persistent volumes: the pods keep {}. Set spec.image back to a Valkey {}.x image; to move the data to an older Valkey, replicate it into a cluster without persistence",
        .0.target_image, .0.target.major, .0.target.minor, .0.running.major, .0.running.minor,
        .0.running.rdb_format(), .0.running_image, .0.running.major
    )]
    DowngradeUnsupported(vko_status::downgrade::RefusedDowngrade),

    /// Writing `status` failed.
    #[error("writing the status failed: {0}")]
    StatusWrite(#[source] kube::Error),

    /// Publishing an Event failed.
    #[error("publishing an Event failed: {0}")]
    EventPublish(#[source] kube::Error),

    /// A data-plane command (promotion, redirection) failed.
    #[error("{action} on pod {pod} failed: {source}")]
    DataPlane {
        action: &'static str,
        pod: String,
        #[source]
        source: vko_valkey::Error,
    },

    /// A promotion could not be carried out or verified.
    #[error("promoting pod {pod} failed: {why}")]
    PromotionRefused { pod: String, why: String },

    /// A rendered object could not be turned into an API request.
    #[error("rendered object is unusable: {0}")]
    InvalidObject(String),

    /// The leader gate refused an action: the renew deadline of the leader Lease passed (or the
    /// Lease was lost, or never held), so another operator may be acting (ADR 0017).
    #[error(
        "not the leader: {action} refused (the leader Lease was not renewed within the renew deadline)"
    )]
    NotLeader { action: &'static str },

    /// Leader-election flags that would let two operators act at once.
    #[error("leader election: {0}")]
    LeaderElectionTimings(String),

    /// One or more steps of the pass failed; the first (most important) one is kept.
    #[error("{count} step(s) of the reconcile failed, first: {first}")]
    StepsFailed { count: usize, first: Box<Error> },
}

impl Error {
    /// Stable CamelCase reason.
    pub fn reason(&self) -> ConditionReason {
        match self {
            Error::MissingObjectField(_) | Error::InvalidObject(_) => {
                ConditionReason::InvalidObject
            }
            Error::Render(error) => error.reason(),
            Error::ForeignObject { .. } => ConditionReason::ForeignObject,
            Error::AdmissionWebhookDenied { .. } | Error::PodCreationDenied { .. } => {
                ConditionReason::AdmissionWebhookDenied
            }
            Error::WriteFailed { .. } | Error::ListFailed { .. } => ConditionReason::WriteFailed,
            Error::SecretMissing { .. } => ConditionReason::SecretMissing,
            Error::PasswordUnusable { .. } => ConditionReason::PasswordUnusable,
            Error::TlsCertificateUnusable { .. } => ConditionReason::TLSCertificateUnusable,
            Error::CertManagerMissing { .. } => ConditionReason::CertManagerMissing,
            Error::StorageRecreateRequired { .. } => ConditionReason::RecreateRequired,
            Error::DowngradeUnsupported(_) => ConditionReason::DowngradeUnsupported,
            Error::StatusWrite(_) => ConditionReason::StatusWriteFailed,
            Error::EventPublish(_) => ConditionReason::EventPublishFailed,
            Error::DataPlane { .. } => ConditionReason::DataPlaneCommandFailed,
            Error::PromotionRefused { .. } => ConditionReason::PromotionFailed,
            Error::NotLeader { .. } => ConditionReason::NotLeader,
            Error::LeaderElectionTimings(_) => ConditionReason::InvalidArgument,
            Error::StepsFailed { first, .. } => first.reason(),
        }
    }

    /// Order in which problems are reported (lowest first): the ones that need a human lead,
    /// `ForeignObject` before a missing Secret before admission denials before other failures.
    pub fn priority(&self) -> u8 {
        match self.reason() {
            ConditionReason::ForeignObject => 0,
            ConditionReason::RecreateRequired
            | ConditionReason::DowngradeUnsupported
            | ConditionReason::SecretMissing
            | ConditionReason::PasswordUnusable
            | ConditionReason::TLSCertificateUnusable
            | ConditionReason::CertManagerMissing => 1,
            ConditionReason::AdmissionWebhookDenied => 2,
            ConditionReason::WriteFailed => 3,
            _ => 4,
        }
    }

    /// Classifies a failed write of `kind`/`name`.
    pub fn from_write(kind: &str, name: &str, error: &kube::Error) -> Error {
        let message = match error {
            kube::Error::Api(status) => status.message.clone(),
            other => other.to_string(),
        };
        if vko_status::recreation::is_admission_denial(&message) {
            Error::AdmissionWebhookDenied {
                kind: kind.to_owned(),
                name: name.to_owned(),
                message,
            }
        } else {
            Error::WriteFailed {
                kind: kind.to_owned(),
                name: name.to_owned(),
                message,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn webhook_denials_are_told_apart_from_other_write_failures() {
        // A webhook's denial and a ValidatingAdmissionPolicy's.
        for (code, message) in [
            (
                400,
                "admission webhook \"deny.example.com\" denied the request: no",
            ),
            (
                403,
                "configmaps \"a\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' denied request",
            ),
        ] {
            assert_eq!(
                Error::from_write("ConfigMap", "a-config", &api_error(code, message)).reason(),
                ConditionReason::AdmissionWebhookDenied,
                "{message}"
            );
        }
        let rbac = api_error(403, "configmaps is forbidden: User cannot patch");
        let error = Error::from_write("ConfigMap", "a", &rbac);
        assert_eq!(error.reason(), ConditionReason::WriteFailed);
        assert!(error.to_string().contains("User cannot patch"), "{error}");
    }

    #[test]
    fn problems_that_need_a_human_are_reported_first() {
        let mut problems = [
            Error::WriteFailed {
                kind: "Service".into(),
                name: "a-rw".into(),
                message: "quota".into(),
            },
            Error::SecretMissing {
                what: "auth",
                name: "pw".into(),
                problem: "does not exist".into(),
            },
            Error::ForeignObject {
                kind: "ConfigMap".into(),
                name: "a-config".into(),
            },
        ];
        problems.sort_by_key(Error::priority);
        let reasons: Vec<_> = problems.iter().map(Error::reason).collect();
        assert_eq!(
            reasons,
            [
                ConditionReason::ForeignObject,
                ConditionReason::SecretMissing,
                ConditionReason::WriteFailed
            ]
        );
    }

    #[test]
    fn reasons_keep_their_strings() {
        let cases = [
            (Error::MissingObjectField("metadata.uid"), "InvalidObject"),
            (Error::InvalidObject("x".into()), "InvalidObject"),
            (
                Error::SecretMissing {
                    what: "TLS",
                    name: "t".into(),
                    problem: "p".into(),
                },
                "SecretMissing",
            ),
            (
                Error::TlsCertificateUnusable {
                    name: "t".into(),
                    problems: "expired".into(),
                },
                "TLSCertificateUnusable",
            ),
            (
                Error::CertManagerMissing {
                    certificates: "a-tls".into(),
                },
                "CertManagerMissing",
            ),
            (
                Error::StorageRecreateRequired {
                    name: "a".into(),
                    difference: "d".into(),
                },
                "RecreateRequired",
            ),
            (
                Error::PromotionRefused {
                    pod: "a-1".into(),
                    why: "gone".into(),
                },
                "PromotionFailed",
            ),
            (
                Error::Render(vko_render::RenderError::InvalidInput {
                    field: "owner",
                    why: "w".into(),
                }),
                "InvalidRenderInput",
            ),
        ];
        for (error, reason) in cases {
            assert_eq!(error.reason().as_str(), reason, "{error}");
        }
    }

    #[test]
    fn aggregated_errors_keep_the_first_reason() {
        let error = Error::StepsFailed {
            count: 2,
            first: Box::new(Error::ForeignObject {
                kind: "ConfigMap".into(),
                name: "x".into(),
            }),
        };
        assert_eq!(error.reason(), ConditionReason::ForeignObject);
    }
}
