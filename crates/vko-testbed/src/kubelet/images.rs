//! The image map: the testbed has no images, so an image name is mapped to host binaries, and the
//! container's argv is computed from the pod's `command`/`args` the way a container runtime combines
//! them with an image's ENTRYPOINT and CMD.

use std::path::PathBuf;

/// Where an image's extra binaries are bind-mounted inside the container (first on PATH).
pub const EXTRA_BIN_MOUNT: &str = "/vko/bin";

/// The PATH a container gets unless its env sets one (the usual image default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What an image name stands for on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageMapping {
    /// How the image's ENTRYPOINT treats the argv it is given.
    pub entrypoint: Entrypoint,
    /// The image's CMD: used when the pod gives neither `command` nor `args`.
    pub default_cmd: Vec<String>,
    /// Host directory bind-mounted at [`EXTRA_BIN_MOUNT`] and put first on PATH.
    pub bin_dir: Option<PathBuf>,
    /// The command that builds `bin_dir` when it is missing (named in the `ErrImagePull`).
    pub build_command: Option<String>,
}

/// The ENTRYPOINT of a mapped image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entrypoint {
    /// No ENTRYPOINT: the argv is CMD (or the pod's `args`) as given.
    None,
    /// The official valkey image's `docker-entrypoint.sh`: when the first argument is an option
    /// (`-x`/`--x`) or a `*.conf` file, `valkey-server` is put in front of it; otherwise the argv runs
    /// as given. (Its `gosu valkey` user switch is not emulated: containers run as the pod says.)
    ValkeyDockerEntrypoint,
    /// An ENTRYPOINT that is one executable (like redis_exporter's `["/redis_exporter"]`): the CMD
    /// or the pod's `args` follow it.
    Executable(String),
}

/// The redis_exporter release the testbed runs for every `oliver006/redis_exporter` tag: `cargo
/// xtask exporter build` builds it from `xtask/exporter` (the module proxy refuses the source of
/// v1.66.0, the reference's default tag, so the closest newer release it serves is used).
pub const REDIS_EXPORTER_VERSION: &str = "v1.74.0";

/// The repositories of the redis_exporter image (Docker Hub and quay.io publish the same image).
const REDIS_EXPORTER_REPOSITORIES: [&str; 3] = [
    "oliver006/redis_exporter",
    "docker.io/oliver006/redis_exporter",
    "quay.io/oliver006/redis_exporter",
];

/// `~/.cache/vko/redis_exporter-<version>/`: where `cargo xtask exporter build` puts `redis_exporter`.
pub fn redis_exporter_dir() -> PathBuf {
    crate::paths::cache_root().join(format!("redis_exporter-{REDIS_EXPORTER_VERSION}"))
}

/// The Valkey release the host's `valkey-server`, `valkey-sentinel` and `valkey-cli` are
/// (bookworm-backports' packages, which `cargo xtask test` installs).
pub const HOST_VALKEY_VERSION: &str = "8.0.1";

/// The Valkey releases `cargo xtask valkey build` builds into [`valkey_bin_dir`].
pub const BUILT_VALKEY_VERSIONS: [&str; 2] = ["8.1.1", "9.1.2"];

/// Which binaries a `valkey/valkey` tag runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValkeyRelease {
    /// The host's binaries on PATH ([`HOST_VALKEY_VERSION`]).
    Host,
    /// A release built into [`valkey_bin_dir`] (one of [`BUILT_VALKEY_VERSIONS`]).
    Built(&'static str),
}

impl ValkeyRelease {
    /// The `major.minor.patch` this release reports as `valkey_version` in `INFO server`.
    pub fn version(self) -> &'static str {
        match self {
            ValkeyRelease::Host => HOST_VALKEY_VERSION,
            ValkeyRelease::Built(version) => version,
        }
    }
}

/// The tag table of `valkey/valkey`: a tag's version (the part before any `-variant`, such as
/// `8.1.1-alpine`) whose major matches, and whose minor matches where one is given here, runs that
/// release. The testbed has one build of each release line, so `8.1.0` runs 8.1.1 too.
const VALKEY_TAGS: [(u32, Option<u32>, ValkeyRelease); 3] = [
    (8, Some(0), ValkeyRelease::Host),
    (8, Some(1), ValkeyRelease::Built(BUILT_VALKEY_VERSIONS[0])),
    (9, None, ValkeyRelease::Built(BUILT_VALKEY_VERSIONS[1])),
];

/// The tag table as the `ErrImagePull` of an unmapped tag (and docs/testbed.md) states it.
pub const VALKEY_TAG_MAP: &str = concat!(
    "8.0, 8.0.* -> 8.0.1 (host); 8.1, 8.1.* -> 8.1.1; 9, 9.* -> 9.1.2; ",
    "no tag, latest -> 8.0.1 (host)"
);

/// The release a `valkey/valkey` tag runs, or `None` for a tag outside [`VALKEY_TAGS`]. A reference
/// without a version (no tag, a digest alone, `latest`) runs the host's 8.0.1: the release
/// vko-render renders such a tag's config for (its `ValkeyVersion::FALLBACK`).
pub fn valkey_release(tag: &str) -> Option<ValkeyRelease> {
    let version = tag.split('-').next().unwrap_or(tag);
    if version.is_empty() || version == "latest" {
        return Some(ValkeyRelease::Host);
    }
    let mut parts = version.split('.');
    let major = parts.next()?.parse::<u32>().ok()?;
    let minor = parts.next().map(str::parse::<u32>).transpose().ok()?;
    // A patch part must be a number too: `8.1.x` is no version.
    for part in parts {
        part.parse::<u32>().ok()?;
    }
    VALKEY_TAGS
        .iter()
        .find(|(row_major, row_minor, _)| {
            *row_major == major && row_minor.is_none_or(|row_minor| minor == Some(row_minor))
        })
        .map(|(_, _, release)| *release)
}

/// `~/.cache/vko/valkey-<version>/`: where `cargo xtask valkey build --version <version>` puts a
/// Valkey release.
pub fn valkey_dir(version: &str) -> PathBuf {
    crate::paths::cache_root().join(format!("valkey-{version}"))
}

/// `~/.cache/vko/valkey-<version>/bin/`: `valkey-server`, `valkey-sentinel`, `valkey-cli`,
/// `valkey-benchmark` of that release, bind-mounted first on PATH in containers of its tags.
pub fn valkey_bin_dir(version: &str) -> PathBuf {
    valkey_dir(version).join("bin")
}

/// An image the testbed has no binaries for (reported as `ErrImagePull`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "image {image:?} is not mapped to host binaries by the testbed (known: [docker.io/]valkey/valkey with tags {tags}; [docker.io/|quay.io/]oliver006/redis_exporter:*, vko-testbed/shell:*{extra})",
    tags = VALKEY_TAG_MAP
)]
pub struct UnmappedImage {
    pub image: String,
    extra: String,
}

/// Maps an image name to host binaries. `extra_images` are (image-name prefix, binary dir) pairs.
pub fn resolve(
    image: &str,
    extra_images: &[(String, PathBuf)],
) -> Result<ImageMapping, UnmappedImage> {
    let repository = repository_of(image);
    let unmapped = || {
        let extra = extra_images
            .iter()
            .map(|(prefix, _)| format!(", {prefix}*"))
            .collect::<String>();
        UnmappedImage {
            image: image.to_string(),
            extra,
        }
    };
    if repository == "valkey/valkey" || repository == "docker.io/valkey/valkey" {
        let (bin_dir, build_command) = match valkey_release(tag_of(image)).ok_or_else(unmapped)? {
            ValkeyRelease::Host => (None, None),
            ValkeyRelease::Built(version) => (
                Some(valkey_bin_dir(version)),
                Some(format!("cargo xtask valkey build --version {version}")),
            ),
        };
        return Ok(ImageMapping {
            entrypoint: Entrypoint::ValkeyDockerEntrypoint,
            default_cmd: vec!["valkey-server".into()],
            bin_dir,
            build_command,
        });
    }
    if REDIS_EXPORTER_REPOSITORIES.contains(&repository) {
        // The image's ENTRYPOINT is `/redis_exporter` with no CMD; it is configured by env vars.
        return Ok(ImageMapping {
            entrypoint: Entrypoint::Executable(format!("{EXTRA_BIN_MOUNT}/redis_exporter")),
            default_cmd: Vec::new(),
            bin_dir: Some(redis_exporter_dir()),
            build_command: Some("cargo xtask exporter build".into()),
        });
    }
    if repository == "vko-testbed/shell" {
        return Ok(ImageMapping {
            entrypoint: Entrypoint::None,
            default_cmd: vec!["sh".into()],
            bin_dir: None,
            build_command: None,
        });
    }
    // The longest matching prefix wins, so a specific entry can override a general one.
    if let Some((_, dir)) = extra_images
        .iter()
        .filter(|(prefix, _)| !prefix.is_empty() && image.starts_with(prefix.as_str()))
        .max_by_key(|(prefix, _)| prefix.len())
    {
        // The image's CMD is its last path segment (e.g. `example/operator:dev` runs `operator`),
        // found on PATH where the image's binaries come first.
        let name = repository
            .rsplit('/')
            .next()
            .unwrap_or(repository)
            .to_string();
        return Ok(ImageMapping {
            entrypoint: Entrypoint::None,
            default_cmd: vec![name],
            bin_dir: Some(dir.clone()),
            build_command: None,
        });
    }
    Err(unmapped())
}

/// The tag of an image reference, `""` when it has none (`valkey/valkey@sha256:…` → `""`).
fn tag_of(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    let repository = repository_of(without_digest);
    without_digest
        .get(repository.len()..)
        .and_then(|rest| rest.strip_prefix(':'))
        .unwrap_or("")
}

/// The image name without tag or digest (`docker.io/valkey/valkey:8.0@sha256:…` → `docker.io/valkey/valkey`).
fn repository_of(image: &str) -> &str {
    let without_digest = image.split('@').next().unwrap_or(image);
    // A ':' after the last '/' starts the tag; one before it belongs to a registry host:port.
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// The argv a container runs, following the runtime's rules: `command` replaces the ENTRYPOINT (and
/// the CMD); `args` alone replace the CMD and are handed to the ENTRYPOINT. Both are already
/// `$(VAR)`-expanded.
pub fn container_argv(mapping: &ImageMapping, command: &[String], args: &[String]) -> Vec<String> {
    if !command.is_empty() {
        return command.iter().chain(args).cloned().collect();
    }
    let cmd: Vec<String> = if args.is_empty() {
        mapping.default_cmd.clone()
    } else {
        args.to_vec()
    };
    match mapping.entrypoint {
        Entrypoint::None => cmd,
        Entrypoint::Executable(ref executable) => {
            std::iter::once(executable.clone()).chain(cmd).collect()
        }
        Entrypoint::ValkeyDockerEntrypoint => {
            let first = cmd.first().map(String::as_str).unwrap_or("");
            if first.starts_with('-') || first.ends_with(".conf") {
                std::iter::once("valkey-server".to_string())
                    .chain(cmd)
                    .collect()
            } else {
                cmd
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|item| item.to_string()).collect()
    }

    #[test]
    fn valkey_images_map_to_valkey_server() {
        for image in [
            "valkey/valkey:8.0",
            "docker.io/valkey/valkey:8.0.1",
            "valkey/valkey",
            "valkey/valkey@sha256:abc",
        ] {
            let mapping = resolve(image, &[]).unwrap();
            assert_eq!(mapping.default_cmd, strings(&["valkey-server"]), "{image}");
            assert_eq!(mapping.entrypoint, Entrypoint::ValkeyDockerEntrypoint);
        }
        assert_eq!(
            resolve("vko-testbed/shell:latest", &[])
                .unwrap()
                .default_cmd,
            strings(&["sh"])
        );
    }

    #[test]
    fn valkey_tags_map_to_the_release_of_their_line() {
        let host = None;
        let v81 = Some(valkey_bin_dir("8.1.1"));
        let v9 = Some(valkey_bin_dir("9.1.2"));
        for (image, bin_dir) in [
            ("valkey/valkey:8.0", &host),
            ("valkey/valkey:8.0.1", &host),
            ("valkey/valkey:8.0.3-alpine", &host),
            ("docker.io/valkey/valkey:8.0", &host),
            ("valkey/valkey:8.0@sha256:abc", &host),
            ("valkey/valkey", &host),
            ("valkey/valkey@sha256:abc", &host),
            ("valkey/valkey:latest", &host),
            ("valkey/valkey:8.1", &v81),
            ("valkey/valkey:8.1.0", &v81),
            ("valkey/valkey:8.1.1", &v81),
            ("docker.io/valkey/valkey:8.1.1-bookworm", &v81),
            ("valkey/valkey:9", &v9),
            ("valkey/valkey:9.0.0", &v9),
            ("valkey/valkey:9.1", &v9),
            ("valkey/valkey:9.1.2", &v9),
            ("docker.io/valkey/valkey:9.1.2-alpine@sha256:abc", &v9),
        ] {
            let mapping = resolve(image, &[]).unwrap();
            assert_eq!(&mapping.bin_dir, bin_dir, "{image}");
            assert_eq!(mapping.entrypoint, Entrypoint::ValkeyDockerEntrypoint);
        }
        assert_eq!(
            resolve("valkey/valkey:9.1", &[]).unwrap().build_command,
            Some("cargo xtask valkey build --version 9.1.2".into())
        );
        assert_eq!(
            resolve("valkey/valkey:8.0", &[]).unwrap().build_command,
            None
        );
        assert!(valkey_bin_dir("9.1.2").ends_with("vko/valkey-9.1.2/bin"));
        // The releases of the table report the version the table names.
        assert_eq!(
            valkey_release("8.1.1").map(ValkeyRelease::version),
            Some("8.1.1")
        );
        assert_eq!(
            valkey_release("9").map(ValkeyRelease::version),
            Some("9.1.2")
        );
        assert_eq!(
            valkey_release("8.0").map(ValkeyRelease::version),
            Some("8.0.1")
        );
        // The stated map is the table's.
        for (major, minor, release) in VALKEY_TAGS {
            let line = match minor {
                Some(minor) => format!("{major}.{minor}.* -> {}", release.version()),
                None => format!("{major}.* -> {}", release.version()),
            };
            assert!(VALKEY_TAG_MAP.contains(&line), "{line} in {VALKEY_TAG_MAP}");
        }
    }

    #[test]
    fn valkey_tags_outside_the_table_are_refused_naming_it() {
        for image in [
            "valkey/valkey:7.2",
            "valkey/valkey:7.2.5",
            "valkey/valkey:8",
            "valkey/valkey:8.2",
            "valkey/valkey:8.10",
            "valkey/valkey:10.0",
            "valkey/valkey:unstable",
            "valkey/valkey:alpine",
            "valkey/valkey:8.1.x",
            "valkey/valkey:9.",
        ] {
            let error = resolve(image, &[]).unwrap_err().to_string();
            assert!(error.contains(&format!("{image:?}")), "{error}");
            assert!(error.contains(VALKEY_TAG_MAP), "{error}");
        }
    }

    #[test]
    fn the_tag_is_what_follows_the_repository() {
        assert_eq!(tag_of("valkey/valkey:8.0"), "8.0");
        assert_eq!(tag_of("valkey/valkey"), "");
        assert_eq!(tag_of("valkey/valkey@sha256:abc"), "");
        assert_eq!(tag_of("valkey/valkey:9.1@sha256:abc"), "9.1");
        assert_eq!(tag_of("host:5000/valkey/valkey"), "");
        assert_eq!(tag_of("host:5000/valkey/valkey:8.1"), "8.1");
    }

    #[test]
    fn redis_exporter_images_run_the_cached_binary_with_args_after_it() {
        for image in [
            "oliver006/redis_exporter:v1.66.0",
            "docker.io/oliver006/redis_exporter:v1.74.0",
            "quay.io/oliver006/redis_exporter:v1.66.0-alpine",
            "oliver006/redis_exporter@sha256:abc",
        ] {
            let mapping = resolve(image, &[]).unwrap();
            assert_eq!(mapping.bin_dir, Some(redis_exporter_dir()), "{image}");
            assert_eq!(
                container_argv(&mapping, &[], &[]),
                strings(&["/vko/bin/redis_exporter"]),
                "{image}"
            );
            // spec.metrics.extraArgs arrive as args: handed to the entrypoint.
            assert_eq!(
                container_argv(&mapping, &[], &strings(&["--check-keys=*"])),
                strings(&["/vko/bin/redis_exporter", "--check-keys=*"])
            );
            // A command replaces the entrypoint.
            assert_eq!(
                container_argv(&mapping, &strings(&["sh"]), &strings(&["-c", "x"])),
                strings(&["sh", "-c", "x"])
            );
        }
        assert!(
            redis_exporter_dir().ends_with(format!("vko/redis_exporter-{REDIS_EXPORTER_VERSION}"))
        );
        // A look-alike repository is not the exporter.
        assert!(resolve("oliver006/redis_exporter-extra:1", &[]).is_err());
        assert!(resolve("example.com/oliver006/redis_exporter:1", &[]).is_err());
    }

    #[test]
    fn unmapped_images_are_refused_with_their_name() {
        let error = resolve("bitnami/redis:7", &[]).unwrap_err();
        assert!(error.to_string().contains("\"bitnami/redis:7\""), "{error}");
        // A look-alike is not the valkey image.
        assert!(resolve("valkey/valkey-extra:1", &[]).is_err());
        assert!(resolve("myregistry:5000/valkey/valkey:8", &[]).is_err());
    }

    #[test]
    fn extra_images_match_by_longest_prefix_and_run_their_last_segment() {
        let extra = vec![
            ("example.com/vko/".to_string(), PathBuf::from("/tmp/all")),
            (
                "example.com/vko/operator".to_string(),
                PathBuf::from("/tmp/operator"),
            ),
        ];
        let mapping = resolve("example.com/vko/operator:dev", &extra).unwrap();
        assert_eq!(mapping.bin_dir, Some(PathBuf::from("/tmp/operator")));
        assert_eq!(mapping.default_cmd, strings(&["operator"]));
        assert_eq!(
            resolve("example.com/vko/sidecar:dev", &extra)
                .unwrap()
                .bin_dir,
            Some(PathBuf::from("/tmp/all"))
        );
        let error = resolve("other/image:1", &extra).unwrap_err().to_string();
        assert!(error.contains("example.com/vko/*"), "{error}");
    }

    #[test]
    fn repository_strips_tag_and_digest_but_not_registry_port() {
        assert_eq!(repository_of("valkey/valkey:8.0"), "valkey/valkey");
        assert_eq!(
            repository_of("host:5000/valkey/valkey"),
            "host:5000/valkey/valkey"
        );
        assert_eq!(
            repository_of("host:5000/valkey/valkey:8"),
            "host:5000/valkey/valkey"
        );
        assert_eq!(repository_of("valkey/valkey:8@sha256:00"), "valkey/valkey");
    }

    #[test]
    fn command_and_args_combine_like_a_container_runtime() {
        let valkey = resolve("valkey/valkey:8.0", &[]).unwrap();
        assert_eq!(
            container_argv(&valkey, &[], &[]),
            strings(&["valkey-server"])
        );
        // args alone go to the entrypoint, which puts valkey-server before options and *.conf files.
        assert_eq!(
            container_argv(&valkey, &[], &strings(&["--port", "7000"])),
            strings(&["valkey-server", "--port", "7000"])
        );
        assert_eq!(
            container_argv(&valkey, &[], &strings(&["/etc/valkey/valkey.conf"])),
            strings(&["valkey-server", "/etc/valkey/valkey.conf"])
        );
        assert_eq!(
            container_argv(&valkey, &[], &strings(&["valkey-sentinel", "/x"])),
            strings(&["valkey-sentinel", "/x"])
        );
        // command replaces entrypoint and CMD; args follow it.
        assert_eq!(
            container_argv(
                &valkey,
                &strings(&["valkey-server"]),
                &strings(&["--port", "1"])
            ),
            strings(&["valkey-server", "--port", "1"])
        );
        let shell = resolve("vko-testbed/shell:1", &[]).unwrap();
        assert_eq!(container_argv(&shell, &[], &[]), strings(&["sh"]));
        assert_eq!(
            container_argv(&shell, &[], &strings(&["-c", "true"])),
            strings(&["-c", "true"])
        );
    }
}
