//! Which config directives the Valkey version named by the image tag understands.
//!
//! Valkey refuses to start on a directive it does not know (`Bad directive or wrong number of
//! arguments`, measured on 8.0.1 with the 8.1 directive `import-mode`). So every directive that
//! is newer than the oldest supported release is rendered only when the image tag names a
//! version that has it. A tag that names no version (`latest`, a digest, `unstable`) gets the
//! 8.0 set: the oldest release this project is tested against, and one whose directives every
//! newer release still accepts.

/// A Valkey release line, as far as the config is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ValkeyVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl ValkeyVersion {
    /// The set used when the tag names no version.
    pub const FALLBACK: ValkeyVersion = ValkeyVersion { major: 8, minor: 0 };

    /// The version a tag names: `8`, `8.0`, `8.0.1`, `8.0.1-alpine`, `v9.0.0`. Anything else
    /// (including an empty tag of a digest-only reference) is [`ValkeyVersion::FALLBACK`].
    pub fn from_tag(tag: &str) -> ValkeyVersion {
        ValkeyVersion::named_by_tag(tag).unwrap_or(ValkeyVersion::FALLBACK)
    }

    /// The version a tag names, `None` when it names none (`latest`, a digest, `unstable`).
    pub fn named_by_tag(tag: &str) -> Option<ValkeyVersion> {
        let tag = tag.strip_prefix('v').unwrap_or(tag);
        let numeric: &str = tag.split(['-', '_']).next().unwrap_or("");
        let mut parts = numeric.split('.');
        let major = parts.next().and_then(|p| p.parse::<u32>().ok());
        let minor = match parts.next() {
            None => Some(0),
            Some(p) => p.parse::<u32>().ok(),
        };
        match (major, minor) {
            // Valkey started at 7.2; a smaller number is not a Valkey tag we know.
            (Some(major), Some(minor)) if major >= 7 => Some(ValkeyVersion { major, minor }),
            _ => None,
        }
    }

    /// The version an image reference names (see `vko_api::image_version`).
    pub fn from_image(image: &str) -> ValkeyVersion {
        ValkeyVersion::from_tag(vko_api::image_version(image))
    }

    /// Whether the Sentinels of `spec` reload a new certificate in place (ADR 0053): TLS and
    /// Sentinel on, and an image whose tag names a release with [`Feature::TlsAutoReload`] (a
    /// tag that names no version is not assumed to have it). Otherwise a new certificate rolls
    /// the Sentinel pods.
    pub fn sentinel_reloads_tls(spec: &vko_api::ValkeySpec) -> bool {
        spec.tls_enabled()
            && spec.sentinel_enabled()
            && ValkeyVersion::named_by_image(&spec.image)
                .is_some_and(|version| version.supports(Feature::TlsAutoReload))
    }

    /// The version an image reference names, `None` when its tag names none.
    pub fn named_by_image(image: &str) -> Option<ValkeyVersion> {
        ValkeyVersion::named_by_tag(vko_api::image_version(image))
    }

    /// The RDB format this release writes, and the newest it loads. Valkey 9.0 moved to 80;
    /// every 8.x refuses it at start ("Can't handle RDB format version 80", measured: 8.1.1 on a
    /// dump 9.1.2 saved, while 8.0.1 loads what 8.1.1 saves, format 11).
    pub const fn rdb_format(self) -> u32 {
        if self.major >= 9 { 80 } else { 11 }
    }

    /// Whether this release starts from the files `writer` saved (RDB; the AOF base is one too).
    pub const fn loads_files_of(self, writer: ValkeyVersion) -> bool {
        writer.rdb_format() <= self.rdb_format()
    }

    /// Whether this version accepts the directives of `feature`.
    pub fn supports(self, feature: Feature) -> bool {
        self >= feature.since()
    }
}

/// Version-dependent directives. The table is [`Feature::since`]; add a row per directive that
/// an older supported release would refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Feature {
    /// `hide-user-data-from-log yes`: keys and values stay out of the server log (crash reports,
    /// slow-log style messages). Introduced in Valkey 8.0.
    HideUserDataFromLog,
    /// `tls-auto-reload-interval <s>`: the process re-reads its TLS files when they change. The
    /// one way a Sentinel reloads its certificate (ADR 0053). Measured: 8.0.1 and 8.1.1 refuse
    /// the directive, 9.1.2 reloads (9.0 not measured, so not relied on).
    TlsAutoReload,
}

impl Feature {
    /// Every feature, for tests and documentation.
    pub const ALL: [Feature; 2] = [Feature::HideUserDataFromLog, Feature::TlsAutoReload];

    /// First release that accepts the directive.
    pub fn since(self) -> ValkeyVersion {
        match self {
            Feature::HideUserDataFromLog => ValkeyVersion { major: 8, minor: 0 },
            Feature::TlsAutoReload => ValkeyVersion { major: 9, minor: 1 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> ValkeyVersion {
        ValkeyVersion { major, minor }
    }

    #[test]
    fn tags_name_versions() {
        assert_eq!(ValkeyVersion::from_tag("8.0"), v(8, 0));
        assert_eq!(ValkeyVersion::from_tag("8"), v(8, 0));
        assert_eq!(ValkeyVersion::from_tag("8.1.3"), v(8, 1));
        assert_eq!(ValkeyVersion::from_tag("9.0.0-alpine"), v(9, 0));
        assert_eq!(ValkeyVersion::from_tag("7.2.5-bookworm"), v(7, 2));
        assert_eq!(ValkeyVersion::from_tag("v9.0"), v(9, 0));
    }

    #[test]
    fn unknown_tags_get_the_fallback_set() {
        for tag in ["", "latest", "unstable", "alpine", "6.2", "x.y", "8.x"] {
            assert_eq!(
                ValkeyVersion::from_tag(tag),
                ValkeyVersion::FALLBACK,
                "{tag:?}"
            );
        }
        assert_eq!(
            ValkeyVersion::from_image("valkey/valkey@sha256:0123"),
            ValkeyVersion::FALLBACK
        );
        assert_eq!(ValkeyVersion::from_image("valkey/valkey:7.2"), v(7, 2));
    }

    #[test]
    fn only_a_tag_with_a_version_names_one() {
        assert_eq!(ValkeyVersion::named_by_tag("9.1.2"), Some(v(9, 1)));
        assert_eq!(ValkeyVersion::named_by_tag("latest"), None);
        assert_eq!(
            ValkeyVersion::named_by_image("valkey/valkey@sha256:0123"),
            None
        );
        assert_eq!(
            ValkeyVersion::named_by_image("registry:5000/valkey/valkey:8.1"),
            Some(v(8, 1))
        );
    }

    #[test]
    fn no_8_x_loads_what_9_saves() {
        for (reader, writer, loads) in [
            (v(8, 0), v(8, 1), true),
            (v(8, 1), v(8, 0), true),
            (v(9, 1), v(8, 1), true),
            (v(8, 1), v(9, 0), false),
            (v(7, 2), v(9, 1), false),
            (v(9, 0), v(9, 1), true),
        ] {
            assert_eq!(
                reader.loads_files_of(writer),
                loads,
                "{reader:?} <- {writer:?}"
            );
        }
    }

    #[test]
    fn table_gates_directives_by_version() {
        assert!(!v(7, 2).supports(Feature::HideUserDataFromLog));
        assert!(v(8, 0).supports(Feature::HideUserDataFromLog));
        assert!(v(9, 0).supports(Feature::HideUserDataFromLog));
        // The fallback must accept everything the oldest tested release (8.0) accepts and
        // nothing newer.
        for feature in Feature::ALL {
            assert_eq!(
                ValkeyVersion::FALLBACK.supports(feature),
                feature.since() <= v(8, 0)
            );
        }
    }
}
