//! The image map: the testbed pulls no images, so a third-party image name is mapped to host
//! binaries (on an overlay of the host's `/`), and our own images run from their unpacked root
//! filesystem ([`UnpackedImage`]). The container's argv is computed from the pod's `command`/`args`
//! the way a container runtime combines them with an image's ENTRYPOINT and CMD.

use std::path::{Path, PathBuf};

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
    /// The image's own root filesystem, the lower layer of the container's overlay; `None`: the
    /// host's `/`.
    pub rootfs: Option<PathBuf>,
    /// The image's environment, under the pod's; `None`: [`ImageMapping::base_env`]'s default PATH.
    pub env: Option<Vec<(String, String)>>,
    /// The image's user (`uid:gid`) when the pod names none.
    pub user: Option<(u32, u32)>,
}

impl ImageMapping {
    /// The environment a container of this image starts from, before the pod's: the image's own,
    /// else the usual PATH (with [`EXTRA_BIN_MOUNT`] first when the image has a `bin_dir`).
    pub fn base_env(&self) -> Vec<(String, String)> {
        if let Some(env) = &self.env {
            return env.clone();
        }
        let path = if self.bin_dir.is_some() {
            format!("{EXTRA_BIN_MOUNT}:{DEFAULT_PATH}")
        } else {
            DEFAULT_PATH.to_owned()
        };
        vec![("PATH".to_owned(), path)]
    }
}

/// One of our own images, unpacked (`cargo xtask testbed up` exports it from the local containers
/// storage): `<dir>/rootfs/` is its root filesystem and `<dir>/config.json` its config (`podman
/// image inspect`'s `.Config`). Its containers run on that filesystem, not the host's, so a missing
/// library, CA file or writable path fails here as it would in a user's cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackedImage {
    /// Image names starting with this run from this image (the longest matching prefix wins).
    pub prefix: String,
    pub rootfs: PathBuf,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    /// `Env`, each `NAME=value` split once.
    pub env: Option<Vec<(String, String)>>,
    /// `User` as `(uid, gid)`.
    pub user: Option<(u32, u32)>,
}

/// The parts of an OCI image config a container runtime applies, as `config.json` holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ImageConfig {
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
    #[serde(default)]
    pub env: Option<Vec<String>>,
    /// `uid[:gid]`, numeric (a name would need the image's /etc/passwd).
    #[serde(default)]
    pub user: Option<String>,
}

/// The files of an unpacked image directory.
pub const UNPACKED_ROOTFS: &str = "rootfs";
pub const UNPACKED_CONFIG: &str = "config.json";

impl UnpackedImage {
    /// Reads `<dir>/config.json` and checks `<dir>/rootfs/` (`--image PREFIX=DIR`).
    pub fn load(prefix: &str, dir: &Path) -> Result<UnpackedImage, String> {
        let rootfs = dir.join(UNPACKED_ROOTFS);
        if !rootfs.is_dir() {
            return Err(format!("{} is not a directory", rootfs.display()));
        }
        let config_path = dir.join(UNPACKED_CONFIG);
        let text = std::fs::read_to_string(&config_path)
            .map_err(|error| format!("reading {}: {error}", config_path.display()))?;
        let config: ImageConfig = serde_json::from_str(&text)
            .map_err(|error| format!("parsing {}: {error}", config_path.display()))?;
        let user = config
            .user
            .as_deref()
            .map(parse_user)
            .transpose()
            .map_err(|error| format!("{}: {error}", config_path.display()))?;
        let env = config.env.map(|env| {
            env.iter()
                .map(|entry| match entry.split_once('=') {
                    Some((name, value)) => (name.to_owned(), value.to_owned()),
                    None => (entry.clone(), String::new()),
                })
                .collect()
        });
        Ok(UnpackedImage {
            prefix: prefix.to_owned(),
            rootfs,
            entrypoint: config.entrypoint,
            cmd: config.cmd,
            env,
            user,
        })
    }
}

/// `uid[:gid]` (the gid defaults to the uid's, as numeric users have no passwd entry to name one).
fn parse_user(user: &str) -> Result<(u32, u32), String> {
    let number = |part: &str| {
        part.parse::<u32>()
            .map_err(|_| format!("image user {user:?} is not numeric uid[:gid]"))
    };
    match user.split_once(':') {
        Some((uid, gid)) => Ok((number(uid)?, number(gid)?)),
        None => number(user).map(|uid| (uid, uid)),
    }
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
    /// An exec-form ENTRYPOINT (like redis_exporter's `["/redis_exporter"]`): the CMD or the pod's
    /// `args` follow it.
    Command(Vec<String>),
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

/// The cert-manager release the testbed runs (`cargo xtask cert-manager build` builds it from
/// `xtask/cert-manager`): the newest whose root module still holds `cmd/controller`, `cmd/webhook`
/// and `cmd/cainjector` (later releases moved them into nested modules the module proxy does not
/// serve).
pub const CERT_MANAGER_VERSION: &str = "v1.11.5";

/// The cert-manager components run from their images (its Helm chart's `image.repository`
/// defaults); each is mapped to the binary of the same name.
pub const CERT_MANAGER_COMPONENTS: [&str; 3] = ["controller", "webhook", "cainjector"];

/// Where cert-manager's images are published (the chart's default registry).
const CERT_MANAGER_REPOSITORY_PREFIX: &str = "quay.io/jetstack/cert-manager-";

/// Its images' `USER 1000` (`hack/containers/Containerfile.*`): the chart's `runAsNonRoot` holds.
const CERT_MANAGER_USER: (u32, u32) = (1000, 1000);

/// `~/.cache/vko/cert-manager-<version>/`: its `bin/` (the binaries) and `chart/` (its Helm chart,
/// assembled from the module the way its release does).
pub fn cert_manager_dir() -> PathBuf {
    crate::paths::cache_root().join(format!("cert-manager-{CERT_MANAGER_VERSION}"))
}

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
    "image {image:?} is not mapped by the testbed (known: [docker.io/]valkey/valkey with tags {tags}; [docker.io/|quay.io/]oliver006/redis_exporter:*, quay.io/jetstack/cert-manager-{{controller,webhook,cainjector}}:*, vko-testbed/shell:*{extra})",
    tags = VALKEY_TAG_MAP
)]
pub struct UnmappedImage {
    pub image: String,
    extra: String,
}

/// Maps an image name to host binaries or to one of `unpacked` images.
pub fn resolve(image: &str, unpacked: &[UnpackedImage]) -> Result<ImageMapping, UnmappedImage> {
    let repository = repository_of(image);
    let unmapped = || {
        let extra = unpacked
            .iter()
            .map(|unpacked| format!(", {}*", unpacked.prefix))
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
            ..host_mapping()
        });
    }
    if REDIS_EXPORTER_REPOSITORIES.contains(&repository) {
        // The image's ENTRYPOINT is `/redis_exporter` with no CMD; it is configured by env vars.
        return Ok(ImageMapping {
            entrypoint: Entrypoint::Command(vec![format!("{EXTRA_BIN_MOUNT}/redis_exporter")]),
            default_cmd: Vec::new(),
            bin_dir: Some(redis_exporter_dir()),
            build_command: Some("cargo xtask exporter build".into()),
            ..host_mapping()
        });
    }
    if let Some(component) = repository
        .strip_prefix(CERT_MANAGER_REPOSITORY_PREFIX)
        .filter(|component| CERT_MANAGER_COMPONENTS.contains(component))
    {
        // The image's ENTRYPOINT is `/app/cmd/<component>/<component>`; the chart passes args.
        return Ok(ImageMapping {
            entrypoint: Entrypoint::Command(vec![format!("{EXTRA_BIN_MOUNT}/{component}")]),
            default_cmd: Vec::new(),
            bin_dir: Some(cert_manager_dir().join("bin")),
            build_command: Some("cargo xtask cert-manager build".into()),
            user: Some(CERT_MANAGER_USER),
            ..host_mapping()
        });
    }
    if repository == "vko-testbed/shell" {
        return Ok(ImageMapping {
            default_cmd: vec!["sh".into()],
            ..host_mapping()
        });
    }
    // The longest matching prefix wins, so a specific entry can override a general one.
    if let Some(unpacked) = unpacked
        .iter()
        .filter(|unpacked| !unpacked.prefix.is_empty() && image.starts_with(&unpacked.prefix))
        .max_by_key(|unpacked| unpacked.prefix.len())
    {
        return Ok(ImageMapping {
            entrypoint: match &unpacked.entrypoint {
                Some(entrypoint) if !entrypoint.is_empty() => {
                    Entrypoint::Command(entrypoint.clone())
                }
                _ => Entrypoint::None,
            },
            default_cmd: unpacked.cmd.clone().unwrap_or_default(),
            rootfs: Some(unpacked.rootfs.clone()),
            env: unpacked.env.clone(),
            user: unpacked.user,
            ..host_mapping()
        });
    }
    Err(unmapped())
}

/// A mapping to the host's `/` with nothing of its own.
fn host_mapping() -> ImageMapping {
    ImageMapping {
        entrypoint: Entrypoint::None,
        default_cmd: Vec::new(),
        bin_dir: None,
        build_command: None,
        rootfs: None,
        env: None,
        user: None,
    }
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
        Entrypoint::Command(ref entrypoint) => entrypoint.iter().cloned().chain(cmd).collect(),
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
    fn cert_manager_images_run_their_component_binary_as_user_1000() {
        for component in CERT_MANAGER_COMPONENTS {
            let image = format!("quay.io/jetstack/cert-manager-{component}:{CERT_MANAGER_VERSION}");
            let mapping = resolve(&image, &[]).unwrap();
            assert_eq!(mapping.bin_dir, Some(cert_manager_dir().join("bin")));
            assert_eq!(mapping.user, Some((1000, 1000)));
            assert_eq!(
                container_argv(&mapping, &[], &strings(&["--v=2"])),
                vec![format!("/vko/bin/{component}"), "--v=2".to_owned()]
            );
        }
        assert!(cert_manager_dir().ends_with(format!("vko/cert-manager-{CERT_MANAGER_VERSION}")));
        // Only the three components the testbed builds; the ACME solver and cmctl are not mapped.
        assert!(resolve("quay.io/jetstack/cert-manager-acmesolver:v1.11.5", &[]).is_err());
        assert!(resolve("quay.io/jetstack/cert-manager-ctl:v1.11.5", &[]).is_err());
    }

    #[test]
    fn unmapped_images_are_refused_with_their_name() {
        let error = resolve("bitnami/redis:7", &[]).unwrap_err();
        assert!(error.to_string().contains("\"bitnami/redis:7\""), "{error}");
        // A look-alike is not the valkey image.
        assert!(resolve("valkey/valkey-extra:1", &[]).is_err());
        assert!(resolve("myregistry:5000/valkey/valkey:8", &[]).is_err());
    }

    fn unpacked(prefix: &str, rootfs: &str) -> UnpackedImage {
        UnpackedImage {
            prefix: prefix.to_owned(),
            rootfs: PathBuf::from(rootfs),
            entrypoint: None,
            cmd: None,
            env: None,
            user: None,
        }
    }

    #[test]
    fn unpacked_images_match_by_longest_prefix_and_run_on_their_own_root_with_their_config() {
        let operator = UnpackedImage {
            entrypoint: Some(strings(&["vko-operator"])),
            env: Some(vec![
                ("PATH".to_owned(), "/usr/local/bin:/usr/bin".to_owned()),
                ("SSL_CERT_FILE".to_owned(), "/etc/ca".to_owned()),
            ]),
            user: Some((65532, 65532)),
            ..unpacked("example.com/vko/operator", "/tmp/operator")
        };
        let extra = vec![unpacked("example.com/vko/", "/tmp/all"), operator];
        let mapping = resolve("example.com/vko/operator:dev", &extra).unwrap();
        assert_eq!(mapping.rootfs, Some(PathBuf::from("/tmp/operator")));
        assert_eq!(mapping.bin_dir, None);
        assert_eq!(mapping.user, Some((65532, 65532)));
        assert_eq!(
            mapping.base_env(),
            vec![
                ("PATH".to_owned(), "/usr/local/bin:/usr/bin".to_owned()),
                ("SSL_CERT_FILE".to_owned(), "/etc/ca".to_owned()),
            ]
        );
        // The ENTRYPOINT takes the args; a command replaces it.
        assert_eq!(
            container_argv(&mapping, &[], &strings(&["--help"])),
            strings(&["vko-operator", "--help"])
        );
        assert_eq!(
            container_argv(&mapping, &strings(&["vko-sidecar"]), &strings(&["init"])),
            strings(&["vko-sidecar", "init"])
        );
        let general = resolve("example.com/vko/sidecar:dev", &extra).unwrap();
        assert_eq!(general.rootfs, Some(PathBuf::from("/tmp/all")));
        assert_eq!(general.entrypoint, Entrypoint::None);
        assert_eq!(general.user, None);
        assert_eq!(
            general.base_env(),
            vec![("PATH".to_owned(), DEFAULT_PATH.to_owned())]
        );
        let error = resolve("other/image:1", &extra).unwrap_err().to_string();
        assert!(error.contains("example.com/vko/*"), "{error}");
        // Host-mapped images keep the host's root.
        assert_eq!(resolve("valkey/valkey:8.0", &extra).unwrap().rootfs, None);
    }

    #[test]
    fn an_unpacked_image_needs_its_rootfs_and_a_config_with_a_numeric_user() {
        let dir = std::env::temp_dir().join(format!("vko-unpacked-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let error = UnpackedImage::load("x/", &dir).unwrap_err();
        assert!(error.contains("rootfs is not a directory"), "{error}");
        std::fs::create_dir(dir.join(UNPACKED_ROOTFS)).unwrap();
        assert!(
            UnpackedImage::load("x/", &dir)
                .unwrap_err()
                .contains("config.json")
        );
        std::fs::write(dir.join(UNPACKED_CONFIG), r#"{"User":"nonroot","Env":[]}"#).unwrap();
        let error = UnpackedImage::load("x/", &dir).unwrap_err();
        assert!(error.contains("not numeric"), "{error}");
        std::fs::write(
            dir.join(UNPACKED_CONFIG),
            r#"{"User":"65532","Entrypoint":["a"],"WorkingDir":"/","Labels":{}}"#,
        )
        .unwrap();
        let image = UnpackedImage::load("x/", &dir).unwrap();
        assert_eq!(image.rootfs, dir.join(UNPACKED_ROOTFS));
        assert_eq!(image.entrypoint, Some(strings(&["a"])));
        assert_eq!(image.user, Some((65532, 65532)));
        std::fs::write(
            dir.join(UNPACKED_CONFIG),
            r#"{"User":"1:2","Env":["PATH=/bin","EMPTY=","A=b=c"]}"#,
        )
        .unwrap();
        let image = UnpackedImage::load("x/", &dir).unwrap();
        assert_eq!(image.user, Some((1, 2)));
        assert_eq!(
            image.env,
            Some(vec![
                ("PATH".to_owned(), "/bin".to_owned()),
                ("EMPTY".to_owned(), String::new()),
                ("A".to_owned(), "b=c".to_owned()),
            ])
        );
        assert_eq!(parse_user("65532"), Ok((65532, 65532)));
        assert_eq!(parse_user("1:2"), Ok((1, 2)));
        std::fs::remove_dir_all(&dir).unwrap();
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
