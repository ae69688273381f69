//! Pod naming: a StatefulSet's pods are `<statefulset>-<ordinal>`, and a pod's stable host name
//! under the headless Service is `<pod>.<service>.<namespace>.svc.<domain>`.

/// The ordinal of `<name>-<n>`, or of a host name whose first label is that. `name` is the
/// StatefulSet's name (the cluster name for data pods, `<cluster>-sentinel` for Sentinels).
/// `None` for anything else: another cluster's pod, the hold host, an IP address.
pub fn ordinal_of(name: &str, host_or_pod: &str) -> Option<u32> {
    let first = host_or_pod.split('.').next()?;
    let digits = first.strip_prefix(name)?.strip_prefix('-')?;
    // `u32::from_str` takes a leading `+`; a pod name never has one.
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ordinals_come_from_names_and_host_names() {
        assert_eq!(ordinal_of("a", "a-2"), Some(2));
        assert_eq!(
            ordinal_of("a", "a-1.a-headless.ns.svc.cluster.local"),
            Some(1)
        );
        assert_eq!(ordinal_of("a", "ab-1"), None);
        assert_eq!(ordinal_of("a", "vko-hold.invalid"), None);
        assert_eq!(ordinal_of("a-b", "a-b-10.x"), Some(10));
        assert_eq!(ordinal_of("a", "a-sentinel-0"), None);
        assert_eq!(ordinal_of("a-sentinel", "a-sentinel-0"), Some(0));
        assert_eq!(ordinal_of("a", "a-+1"), None);
        assert_eq!(ordinal_of("a", "a-"), None);
        assert_eq!(ordinal_of("a", "10.0.0.1"), None);
    }
}
