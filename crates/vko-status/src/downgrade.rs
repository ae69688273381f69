//! A change of `spec.image` to a Valkey that cannot load what the running one saved. Valkey 9
//! saves RDB format 80, which no 8.x loads (`vko_render::ValkeyVersion::rdb_format`): with
//! persistence on, every data pod restarted on the older image would stop at start, one after
//! the other as the roll reaches it. Without persistence a restarted pod starts empty and syncs
//! from its master, which a 9.x master serves to an 8.x replica (measured: 9.1.2 → 8.1.1 full
//! sync), so that downgrade rolls like any other image change. Pure: the controller feeds in the
//! images it sees.

use vko_render::ValkeyVersion;

/// The image change the operator does not apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedDowngrade {
    /// `spec.image`.
    pub target_image: String,
    pub target: ValkeyVersion,
    /// The newest image the cluster runs; its pods keep it.
    pub running_image: String,
    pub running: ValkeyVersion,
}

/// `Some` when the cluster keeps data on persistent volumes, `spec.image` names a version and
/// some image the cluster runs (its live StatefulSets' or pods') names one whose files the
/// target cannot load. An image whose tag names no version proves nothing either way.
pub fn refused_downgrade<'a>(
    target_image: &str,
    running_images: impl IntoIterator<Item = &'a str>,
    persistent: bool,
) -> Option<RefusedDowngrade> {
    if !persistent {
        return None;
    }
    let target = ValkeyVersion::named_by_image(target_image)?;
    let (running_image, running) = running_images
        .into_iter()
        .filter_map(|image| Some((image, ValkeyVersion::named_by_image(image)?)))
        .filter(|(_, running)| !target.loads_files_of(*running))
        .max_by_key(|(_, running)| *running)?;
    Some(RefusedDowngrade {
        target_image: target_image.to_owned(),
        target,
        running_image: running_image.to_owned(),
        running,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_persistent_cluster_on_9_is_kept_from_8() {
        let refused = |target: &str, running: &[&str], persistent| {
            refused_downgrade(target, running.iter().copied(), persistent).map(|r| r.running_image)
        };
        // (spec.image, running images, persistent, the image kept, why)
        type Case<'a> = (&'a str, &'a [&'a str], bool, Option<&'a str>, &'a str);
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("valkey/valkey:8.1", &["valkey/valkey:9.1"], true, Some("valkey/valkey:9.1"), "9 -> 8 with persistence"),
            ("valkey/valkey:8.1", &["valkey/valkey:9.1"], false, None, "without persistence a replica syncs"),
            ("valkey/valkey:9.1", &["valkey/valkey:8.1"], true, None, "an upgrade"),
            ("valkey/valkey:8.0", &["valkey/valkey:8.1"], true, None, "8.1 -> 8.0 loads format 11"),
            ("valkey/valkey:8.1", &["valkey/valkey:8.1", "valkey/valkey:9.0", "valkey/valkey:9.1"], true,
             Some("valkey/valkey:9.1"), "mid-roll: the newest running image is kept"),
            ("valkey/valkey@sha256:00", &["valkey/valkey:9.1"], true, None, "a digest names no version"),
            ("valkey/valkey:8.1", &["valkey/valkey:latest"], true, None, "latest names no version"),
            ("valkey/valkey:8.1", &[], true, None, "nothing runs yet"),
        ];
        for (target, running, persistent, want, why) in cases {
            assert_eq!(
                refused(target, running, *persistent).as_deref(),
                *want,
                "{why}"
            );
        }
    }
}
