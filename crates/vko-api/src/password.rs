//! What counts as a password. An auth Secret whose value is empty, only whitespace or not UTF-8
//! must never mean "no password" (the server would start open while the spec says auth is on),
//! nor be silently mangled into another password; the operator and the sidecar both refuse it by
//! this one rule.

use crate::Error;

/// The password in `value` (the auth Secret's key, or the password file a pod reads), or why it
/// cannot be used.
pub fn usable_password(value: &[u8]) -> Result<&str, Error> {
    let text = std::str::from_utf8(value).map_err(|_| Error::UnusablePassword {
        problem: "is not valid UTF-8",
    })?;
    if text.is_empty() {
        return Err(Error::UnusablePassword {
            problem: "is empty",
        });
    }
    if text.trim().is_empty() {
        return Err(Error::UnusablePassword {
            problem: "holds only whitespace",
        });
    }
    Ok(text)
}

/// The password a container was given in its password env var: `None` when the variable is unset
/// (auth is off: vko-render sets it only with `spec.auth`), an error when it is set to a value
/// [`usable_password`] refuses (a program must then not start a server without the password the
/// spec asks for).
pub fn password_from_env_value(value: Option<&std::ffi::OsStr>) -> Result<Option<String>, Error> {
    value
        .map(|value| usable_password(value.as_encoded_bytes()).map(str::to_owned))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_whitespace_and_non_utf8_values_are_refused() {
        for (value, problem) in [
            (&b""[..], "is empty"),
            (b" ", "holds only whitespace"),
            (b"\t\n  \r", "holds only whitespace"),
            (b"\xff\xfe", "is not valid UTF-8"),
        ] {
            assert_eq!(
                usable_password(value),
                Err(Error::UnusablePassword { problem }),
                "{value:?}"
            );
        }
    }

    #[test]
    fn an_unset_variable_is_no_auth_and_a_set_one_must_be_usable() {
        use std::ffi::OsStr;
        assert_eq!(password_from_env_value(None), Ok(None));
        assert_eq!(
            password_from_env_value(Some(OsStr::new("pw"))),
            Ok(Some("pw".to_owned()))
        );
        assert_eq!(
            password_from_env_value(Some(OsStr::new(""))),
            Err(Error::UnusablePassword {
                problem: "is empty"
            })
        );
    }

    #[test]
    fn any_other_value_is_the_password_as_written() {
        for value in ["p", " padded ", "p w\"\n#x", "pässwörd"] {
            assert_eq!(usable_password(value.as_bytes()), Ok(value));
        }
    }
}
