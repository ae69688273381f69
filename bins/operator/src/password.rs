//! Step 5 with auth on: the password rotation (ADR 0035). Asks every data pod and Sentinel which
//! passwords its `default` user accepts, decides with [`vko_roll::password::step`] and carries
//! the step out: adds the new password where it is missing (dialling with the previous one this
//! process remembers), and once the grace period is over and every sidecar moved its server's
//! `masterauth`, moves Sentinel's `auth-pass` to it and retires the old ones.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use vko_render::Names;
use vko_roll::Millis;
use vko_roll::password::{Accepts, PasswordStep, PasswordWorld};
use vko_status::password::PasswordRotation;
use vko_valkey::dial::DEFAULT_USER;
use vko_valkey::switchover::Address;
use vko_valkey::{Credentials, Dialer, password_hash};

use crate::leader::Leadership;

/// The password each cluster was last dialled with, by the `Valkey`'s uid: when the auth
/// Secret changes, the one before is the fallback for servers that do not accept the new one
/// yet. Lost when the operator restarts; the pods' sidecars hand the new password to their
/// servers themselves.
#[derive(Default)]
pub struct Remembered(
    Mutex<HashMap<String, Credentials>>,
    Mutex<HashMap<String, HashSet<String>>>,
);

impl Remembered {
    /// The credentials to dial cluster `uid` with, given the auth Secret's usable password now
    /// (`None`: auth off, or the Secret unusable) and, with auth off, the password the pods not
    /// rolled yet still require (read from the Secret they mount).
    pub fn for_cluster(
        &self,
        uid: &str,
        password: Option<&str>,
        still_required: Option<&str>,
    ) -> Credentials {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(password) = password else {
            // Auth on with an unusable Secret: the servers still run with the last password.
            // Auth turned off: the pods not yet rolled still require it, and a pod without a
            // password accepts `AUTH default <anything>`, so it keeps working for both.
            if let Some(kept) = all.get(uid) {
                return kept.clone();
            }
            // Nothing remembered (this process started after auth was turned off): the
            // password the old pods' volume names.
            return Credentials::new(still_required.map(str::to_owned));
        };
        let credentials = all
            .entry(uid.to_owned())
            .or_insert_with(|| Credentials::new(Some(password.to_owned())));
        if credentials.rotate_to(password.to_owned()) {
            tracing::info!(
                uid,
                "the auth Secret's password changed; the previous one is kept as the fallback"
            );
        }
        credentials.clone()
    }

    pub fn forget(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }

    /// Whether the auth transition was carried out on pod `pod_uid` of cluster `uid`.
    fn transitioned(&self, uid: &str, pod_uid: &str) -> bool {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .is_some_and(|pods| pods.contains(pod_uid))
    }

    fn mark_transitioned(&self, uid: &str, pod_uid: &str) {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(uid.to_owned())
            .or_default()
            .insert(pod_uid.to_owned());
    }
}

/// Who and how to ask.
pub struct Targets<'a> {
    pub dialer: &'a Dialer,
    pub names: &'a Names,
    pub valkey_port: u16,
    pub sentinel_port: u16,
    /// Data pods that should run: `(pod, ordinal)`.
    pub data: Vec<(String, u32)>,
    /// Sentinel pods that should run, when Sentinel is on: `(pod, ordinal)`.
    pub sentinels: Vec<(String, u32)>,
    /// Whether the Sentinels require a password.
    pub sentinel_auth: bool,
}

/// The rotation's inputs besides the pods.
pub struct Plan<'a> {
    pub password: &'a str,
    pub grace: Duration,
    pub accepted_since: Option<Millis>,
    pub now: Millis,
}

/// One server or Sentinel, asked and (when it does not accept the password yet) given it: the
/// client, still open, and the passwords it accepts.
macro_rules! ask_with {
    ($client:expr, $password:expr, $leadership:expr) => {{
        let client = $client.map_err(|e| e.to_string())?;
        let hash = password_hash($password);
        let mut passwords = client.default_user_passwords().await;
        if let Ok(list) = &passwords
            && !list.contains(&hash)
            && $leadership.check("ACL SETUSER").is_ok()
        {
            // Reached with the previous password: it accepts the new one from now on.
            if client.add_default_user_password($password).await.is_ok() {
                passwords = client.default_user_passwords().await;
            }
        }
        (client, passwords.map_err(|e| e.to_string()))
    }};
}

/// Dials the Sentinel (`sentinel`) or the valkey-server at `at`, runs `call` on the client (the
/// two client types share the ACL calls) and closes it.
macro_rules! on_server {
    ($dialer:expr, $at:expr, $sentinel:expr, |$client:ident| $call:expr) => {
        if $sentinel {
            match $dialer.sentinel($at).await {
                Ok($client) => {
                    let result = $call.await;
                    $client.close().await;
                    result
                }
                Err(error) => Err(error),
            }
        } else {
            match $dialer.valkey($at).await {
                Ok($client) => {
                    let result = $call.await;
                    $client.close().await;
                    result
                }
                Err(error) => Err(error),
            }
        }
    };
}

/// A data pod: the passwords it accepts, and whether its `masterauth` is `password`.
async fn ask_data(
    dialer: &Dialer,
    at: &Address,
    password: &str,
    leadership: &Leadership,
) -> Result<(Vec<String>, bool), String> {
    let (client, passwords) = ask_with!(dialer.valkey(at).await, password, leadership);
    let masterauth = client.config_get("masterauth").await;
    client.close().await;
    let moved = masterauth
        .map_err(|e| e.to_string())?
        .get("masterauth")
        .is_some_and(|value| value == password);
    Ok((passwords?, moved))
}

/// A Sentinel: the passwords it accepts.
async fn ask_sentinel(
    dialer: &Dialer,
    at: &Address,
    password: &str,
    leadership: &Leadership,
) -> Result<Vec<String>, String> {
    let (client, passwords) = ask_with!(dialer.sentinel(at).await, password, leadership);
    client.close().await;
    passwords
}

/// Asks every pod, decides and acts; the rotation as this pass leaves it.
pub async fn rotate(
    targets: &Targets<'_>,
    plan: &Plan<'_>,
    leadership: &Leadership,
) -> PasswordRotation {
    let data_at =
        |ordinal: u32| Address::new(targets.names.data_pod_fqdn(ordinal), targets.valkey_port);
    let sentinel_at = |ordinal: u32| {
        Address::new(
            targets.names.sentinel_pod_fqdn(ordinal),
            targets.sentinel_port,
        )
    };
    let data = futures::future::join_all(targets.data.iter().map(|(pod, ordinal)| async move {
        let answer = ask_data(
            targets.dialer,
            &data_at(*ordinal),
            plan.password,
            leadership,
        )
        .await;
        if let Err(error) = &answer {
            tracing::debug!(pod, %error, "password rotation: could not ask");
        }
        let (passwords, moved) = answer.ok().unzip();
        Accepts {
            pod: pod.clone(),
            passwords,
            moved,
        }
    }));
    let sentinels = futures::future::join_all(
        targets
            .sentinels
            .iter()
            .filter(|_| targets.sentinel_auth)
            .map(|(pod, ordinal)| async move {
                let passwords = ask_sentinel(
                    targets.dialer,
                    &sentinel_at(*ordinal),
                    plan.password,
                    leadership,
                )
                .await;
                Accepts {
                    pod: pod.clone(),
                    passwords: passwords.ok(),
                    moved: None,
                }
            }),
    );
    let (data, sentinels) = tokio::join!(data, sentinels);
    let hash = password_hash(plan.password);
    let world = PasswordWorld {
        current: &hash,
        data,
        sentinels,
        accepted_since: plan.accepted_since,
        now: plan.now,
        grace: plan.grace,
    };
    let step = vko_roll::password::step(&world);
    let PasswordStep::Retire {
        data, sentinels, ..
    } = &step
    else {
        return PasswordRotation {
            step,
            failure: None,
        };
    };
    let retiring = Retiring {
        data,
        sentinels,
        seen: &world.sentinels,
    };
    match retire(targets, plan.password, &hash, &retiring, leadership).await {
        Ok(()) => PasswordRotation {
            step: PasswordStep::Settled,
            failure: None,
        },
        Err(failure) => PasswordRotation {
            step,
            failure: Some(failure),
        },
    }
}

/// The grace period is over and every sidecar moved `masterauth`: every Sentinel's `auth-pass`
/// to `password`; every Sentinel puts it first (it authenticates to its peers with its first
/// password); then every server and Sentinel accepts it only. Stops at the first failure
/// (`"<pod>: <command>: <error>"`); every command is idempotent, so the next pass starts over.
/// What [`PasswordStep::Retire`] names, and what each Sentinel accepted.
struct Retiring<'a> {
    data: &'a [String],
    sentinels: &'a [String],
    seen: &'a [Accepts],
}

async fn retire(
    targets: &Targets<'_>,
    password: &str,
    hash: &str,
    retiring: &Retiring<'_>,
    leadership: &Leadership,
) -> Result<(), String> {
    let fail = |pod: &str, what: &str, e: &dyn std::fmt::Display| format!("{pod}: {what}: {e}");
    let check = |what: &'static str| leadership.check(what).map_err(|e| e.to_string());
    let monitor = targets.names.name();
    let dialer = targets.dialer;
    for (pod, ordinal) in &targets.sentinels {
        let at = Address::new(
            targets.names.sentinel_pod_fqdn(*ordinal),
            targets.sentinel_port,
        );
        let client = dialer
            .sentinel(&at)
            .await
            .map_err(|e| fail(pod, "connect", &e))?;
        check("SENTINEL SET auth-pass")?;
        let set = client.set(monitor, "auth-pass", password).await;
        let reordered = match (set.is_ok(), targets.sentinel_auth) {
            (true, true) => {
                let others: Vec<String> = retiring
                    .seen
                    .iter()
                    .find(|a| a.pod == *pod)
                    .and_then(|a| a.passwords.clone())
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|h| h != hash)
                    .collect();
                client.set_default_user_passwords(password, &others).await
            }
            _ => Ok(()),
        };
        client.close().await;
        set.map_err(|e| fail(pod, "SENTINEL SET auth-pass", &e))?;
        reordered.map_err(|e| fail(pod, "ACL SETUSER default (new password first)", &e))?;
    }
    for (pod, at, sentinel) in retiring
        .data
        .iter()
        .filter_map(|pod| targets.data.iter().find(|(p, _)| p == pod))
        .map(|(pod, o)| {
            (
                pod,
                Address::new(targets.names.data_pod_fqdn(*o), targets.valkey_port),
                false,
            )
        })
        .chain(
            retiring
                .sentinels
                .iter()
                .filter_map(|pod| targets.sentinels.iter().find(|(p, _)| p == pod))
                .map(|(pod, o)| {
                    (
                        pod,
                        Address::new(targets.names.sentinel_pod_fqdn(*o), targets.sentinel_port),
                        true,
                    )
                }),
        )
    {
        check("ACL SETUSER default resetpass")?;
        let result = on_server!(dialer, &at, sentinel, |client| client
            .set_default_user_passwords(password, &[]));
        result.map_err(|e| {
            fail(
                pod,
                "ACL SETUSER default resetpass (old password retired)",
                &e,
            )
        })?;
    }
    Ok(())
}

/// A pod about to take part in turning auth on or off (ADR 0035).
pub struct TransitionPod {
    pub name: String,
    pub uid: String,
    pub at: Address,
    pub sentinel: bool,
}

/// Turning auth on or off on a running cluster is a roll; before it reaches a pod, the pods that
/// will not restart for a while must already work with both sides:
/// - auth on (`password` set): every Sentinel still running without the password file gets
///   `auth-user default` and `auth-pass` for the monitored servers (the replaced data pods
///   require the password; `AUTH default <password>` also passes on the ones that do not);
/// - auth off: every server and Sentinel still running with the password file accepts any
///   client (`ACL SETUSER default nopass`), so the replaced pods, which have no password,
///   replicate from and talk to them.
///
/// Each pod once per operator process (a pod is not changed back). Whether every pod that needs
/// it has it: the roll waits otherwise.
pub async fn transition(
    remembered: &Remembered,
    cluster_uid: &str,
    dialer: &Dialer,
    monitor: &str,
    password: Option<&str>,
    pods: &[TransitionPod],
    leadership: &Leadership,
) -> bool {
    let mut done = true;
    for pod in pods {
        if remembered.transitioned(cluster_uid, &pod.uid) || leadership.check("auth").is_err() {
            continue;
        }
        let result = match (password, pod.sentinel) {
            (Some(password), true) => {
                async {
                    let client = dialer.sentinel(&pod.at).await?;
                    let mut result = client.set(monitor, "auth-user", DEFAULT_USER).await;
                    if result.is_ok() {
                        result = client.set(monitor, "auth-pass", password).await;
                    }
                    client.close().await;
                    result
                }
                .await
            }
            (Some(_), false) => continue,
            (None, sentinel) => {
                on_server!(dialer, &pod.at, sentinel, |client| client
                    .allow_any_client())
            }
        };
        match result {
            Ok(()) => {
                tracing::info!(
                    pod = pod.name,
                    auth = password.is_some(),
                    "auth transition: the pod works with both sides of the roll"
                );
                remembered.mark_transitioned(cluster_uid, &pod.uid);
            }
            Err(error) => {
                tracing::warn!(pod = pod.name, %error, "auth transition: not done yet; the roll waits");
                done = false;
            }
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_password_keeps_the_previous_one_and_an_unusable_one_keeps_both() {
        let remembered = Remembered::default();
        let first = remembered.for_cluster("u", Some("old"), None);
        assert_eq!(first.current().as_deref(), Some("old"));
        assert_eq!(first.previous(), None);
        let second = remembered.for_cluster("u", Some("new"), None);
        assert_eq!(second.current().as_deref(), Some("new"));
        assert_eq!(second.previous().as_deref(), Some("old"));
        let emptied = remembered.for_cluster("u", None, None);
        assert_eq!(emptied.current().as_deref(), Some("new"));
        assert_eq!(emptied.previous().as_deref(), Some("old"));
        let off = remembered.for_cluster("u", None, Some("mounted"));
        assert_eq!(
            off.current().as_deref(),
            Some("new"),
            "auth turned off: the pods not rolled yet still require it"
        );
        let other = remembered.for_cluster("v", None, None);
        assert_eq!(other.current(), None, "nothing remembered: no password");
        let restarted = remembered.for_cluster("w", None, Some("mounted"));
        assert_eq!(
            restarted.current().as_deref(),
            Some("mounted"),
            "auth turned off before this process started: the password the old pods mount"
        );
    }
}
