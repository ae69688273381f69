//! The data of the Secrets a `Valkey` references (ADR 0021). The watch over Secrets keeps their
//! metadata only (it triggers the passes and says which version exists); the data of a referenced
//! Secret is read by one GET when the watch shows a version this cache does not hold, and kept
//! until the Secret changes or goes. Unrelated Secrets' data never reaches the operator's memory,
//! and a steady state costs no request.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Resource, ResourceExt};

use crate::stores::Stores;

/// `(namespace, name)` → `(resourceVersion, Secret)`.
type Cached = HashMap<(String, String), (String, Arc<Secret>)>;

/// Referenced Secrets' data, by the version it was read at.
#[derive(Default)]
pub struct SecretData(Mutex<Cached>);

/// The referenced Secrets of one pass: present ones by name; a name not in it does not exist (or
/// could not be read, logged: the pass then holds back as for a missing Secret).
pub type Fetched = BTreeMap<String, Arc<Secret>>;

impl SecretData {
    fn cached(&self, key: &(String, String), version: &str) -> Option<Arc<Secret>> {
        let cached = self.0.lock().ok()?;
        cached
            .get(key)
            .filter(|(held, _)| held == version)
            .map(|(_, secret)| secret.clone())
    }

    fn keep(&self, key: (String, String), version: String, secret: Arc<Secret>) {
        if let Ok(mut cached) = self.0.lock() {
            cached.insert(key, (version, secret));
        }
    }

    fn forget(&self, key: &(String, String)) {
        if let Ok(mut cached) = self.0.lock() {
            cached.remove(key);
        }
    }

    /// How many Secrets' data is held (for tests and the log).
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |cached| cached.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The Secrets `names` in `namespace`: from the cache while the watch shows the version it
    /// holds, else one GET each.
    pub async fn fetch(
        &self,
        client: &kube::Client,
        stores: &Stores,
        namespace: &str,
        names: &[&str],
    ) -> Fetched {
        let mut fetched = Fetched::new();
        for name in names {
            let key = (namespace.to_owned(), (*name).to_owned());
            let Some(meta) = stores.secret_meta(namespace, name) else {
                self.forget(&key);
                continue;
            };
            let version = meta.resource_version().unwrap_or_default();
            if let Some(secret) = self.cached(&key, &version) {
                fetched.insert((*name).to_owned(), secret);
                continue;
            }
            let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
            match api.get_opt(name).await {
                Ok(Some(secret)) => {
                    let secret = Arc::new(secret);
                    // Kept under the version read, which may be newer than the watch's: the
                    // next pass then reads again once, when the watch catches up.
                    let read = secret.meta().resource_version.clone().unwrap_or_default();
                    self.keep(key, read, secret.clone());
                    fetched.insert((*name).to_owned(), secret);
                }
                Ok(None) => self.forget(&key),
                Err(error) => {
                    tracing::warn!(%namespace, secret = name, %error, "could not read a referenced Secret")
                }
            }
        }
        fetched
    }
}

/// The Secrets a `Valkey` references: its auth Secret and its TLS Secrets (none while its TLS
/// spec does not render; the pass reports that).
pub fn referenced(valkey: &vko_api::Valkey) -> Vec<String> {
    let mut names: Vec<String> = valkey
        .spec
        .auth_secret_name()
        .map(str::to_owned)
        .into_iter()
        .collect();
    if let Ok(Some(tls)) = vko_render::tls_secrets(valkey) {
        names.push(tls.data);
        names.extend(tls.sentinel);
    }
    names.sort();
    names.dedup();
    names
}

/// The `Valkey`s in `namespace` that reference the Secret `name` (a Secret change triggers them).
pub fn valkeys_referencing(
    valkeys: &[Arc<vko_api::Valkey>],
    namespace: Option<&str>,
    name: &str,
) -> Vec<kube::runtime::reflector::ObjectRef<vko_api::Valkey>> {
    valkeys
        .iter()
        .filter(|valkey| valkey.namespace().as_deref() == namespace)
        .filter(|valkey| referenced(valkey).iter().any(|found| found == name))
        .map(|valkey| kube::runtime::reflector::ObjectRef::from_obj(valkey.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use kube::core::PartialObjectMeta;
    use kube::runtime::watcher;

    fn meta(name: &str, version: &str) -> PartialObjectMeta<Secret> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": version}
        }))
        .unwrap()
    }

    /// Against a mock API server that answers every GET with the Secret at the version it is
    /// told: a version is read once, a new one once more, an unknown or deleted Secret not at all.
    #[tokio::test]
    async fn a_secret_version_is_read_once_and_unreferenced_or_absent_ones_never() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let version = Arc::new(Mutex::new("1".to_owned()));
        let served_version = version.clone();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some((request, respond)) = handle.next_request().await {
                seen.push(format!("{} {}", request.method(), request.uri().path()));
                let at = served_version.lock().unwrap().clone();
                let body = serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "pw", "namespace": "ns", "resourceVersion": at},
                    "data": {"password": "c2VjcmV0"}
                });
                respond.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
            seen
        });
        let (stores, mut writers) = Stores::empty();
        writers
            .secrets
            .apply_watcher_event(&watcher::Event::Apply(meta("pw", "1")));
        let data = SecretData::default();

        // "gone" is not in the metadata store: not asked for.
        let first = data.fetch(&client, &stores, "ns", &["pw", "gone"]).await;
        assert_eq!(first.keys().collect::<Vec<_>>(), ["pw"]);
        let password = first["pw"].data.as_ref().unwrap()["password"].0.clone();
        assert_eq!(password, b"secret");
        // The same version again: from the cache, no request.
        let again = data.fetch(&client, &stores, "ns", &["pw"]).await;
        assert!(Arc::ptr_eq(&first["pw"], &again["pw"]));
        // A new version in the watch: read once more.
        *version.lock().unwrap() = "2".into();
        writers
            .secrets
            .apply_watcher_event(&watcher::Event::Apply(meta("pw", "2")));
        let changed = data.fetch(&client, &stores, "ns", &["pw"]).await;
        assert!(!Arc::ptr_eq(&first["pw"], &changed["pw"]));
        data.fetch(&client, &stores, "ns", &["pw"]).await;
        // Deleted: forgotten, without a request.
        writers
            .secrets
            .apply_watcher_event(&watcher::Event::Delete(meta("pw", "2")));
        assert!(data.fetch(&client, &stores, "ns", &["pw"]).await.is_empty());
        assert!(data.is_empty());

        drop(client);
        let seen = server.await.unwrap();
        assert_eq!(
            seen,
            [
                "GET /api/v1/namespaces/ns/secrets/pw",
                "GET /api/v1/namespaces/ns/secrets/pw"
            ]
        );
    }
}
