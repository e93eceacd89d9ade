//! Shard, index, manifest and temporary names.

use crate::tfrecord::Compression;

pub use crate::manifest::MANIFEST_SUFFIX;

/// `{prefix}-{index:05}-of-{count:05}.tfrecord` plus `.gz`/`.zlib`; for a TFDS prefix
/// (`{NAME}-{split}.tfrecord`, see [`crate::tfds`]) TFDS's `{prefix}-{index:05}-of-{count:05}`
/// (always uncompressed).
pub fn shard_name(prefix: &str, index: usize, count: usize, compression: Compression) -> String {
    if is_tfds_prefix(prefix) {
        return format!("{prefix}-{index:05}-of-{count:05}");
    }
    format!(
        "{prefix}-{index:05}-of-{count:05}.tfrecord{}",
        compression.suffix()
    )
}

/// Generation `generation`'s shard: generation 0's is [`shard_name`]'s, a later one's
/// `{prefix}-g{generation:05}-{index:05}-of-{count:05}.tfrecord` (plus `.gz`/`.zlib`).
pub fn generation_shard_name(
    prefix: &str,
    generation: u32,
    index: usize,
    count: usize,
    compression: Compression,
) -> String {
    if generation == 0 {
        return shard_name(prefix, index, count, compression);
    }
    format!(
        "{prefix}-g{generation:05}-{index:05}-of-{count:05}.tfrecord{}",
        compression.suffix()
    )
}

/// `{prefix}.manifest-g{generation:05}.json`: the manifest as generation `generation`
/// published it, kept so that a training run can pin the set as it was.
pub fn pinned_manifest_name(prefix: &str, generation: u32) -> String {
    format!("{prefix}.manifest-g{generation:05}.json")
}

/// The generation of `name` if it is one of `prefix`'s pinned manifests.
pub fn pinned_generation(prefix: &str, name: &str) -> Option<u32> {
    let g = name
        .strip_prefix(prefix)?
        .strip_prefix(".manifest-g")?
        .strip_suffix(".json")?;
    (g.len() >= 5 && g.bytes().all(|b| b.is_ascii_digit()))
        .then(|| g.parse().ok())
        .flatten()
}

/// The shard prefix when none is given.
pub const DEFAULT_PREFIX: &str = "data";

/// `{prefix}.manifest.json` (for a TFDS prefix, `{NAME}-{split}.manifest.json`).
pub fn manifest_name(prefix: &str) -> String {
    let prefix = prefix.strip_suffix(TFDS_SUFFIX).unwrap_or(prefix);
    format!("{prefix}{MANIFEST_SUFFIX}")
}

/// What ends the shard prefix of a TFDS split.
const TFDS_SUFFIX: &str = ".tfrecord";

/// Whether shards of `prefix` are named as TFDS names them.
pub fn is_tfds_prefix(prefix: &str) -> bool {
    prefix.ends_with(TFDS_SUFFIX)
}

/// Whether `prefix` ends in `-g` and 5 or more digits, as the part of a later
/// generation's shard name after another prefix does (`data-g00001-00000-of-00002`):
/// such a prefix is refused.
pub fn ends_like_a_generation(prefix: &str) -> bool {
    prefix.rsplit_once("-g").is_some_and(|(head, g)| {
        !head.is_empty() && g.len() >= 5 && g.bytes().all(|b| b.is_ascii_digit())
    })
}

/// `.{prefix}.tfshard-tmp`: the one hidden folder a run keeps its temporaries in.
pub fn tmp_dir_name(prefix: &str) -> String {
    format!(".{prefix}.tfshard-tmp")
}

/// The shard a companion file (`{shard}.idx`, `{shard}.stats`) is of.
pub fn companion_of(name: &str) -> Option<&str> {
    name.strip_suffix(".idx")
        .or_else(|| name.strip_suffix(".stats"))
}

/// A set's statistics file: `{prefix}.stats.pb`.
pub fn stats_name(prefix: &str) -> String {
    format!("{prefix}.stats.pb")
}

/// `.{prefix}.tfshard-parts`: where workers put their parts for `finalize`.
pub fn parts_dir_name(prefix: &str) -> String {
    format!(".{prefix}.tfshard-parts")
}

/// Whether `name` is a shard (or its `.idx` or `.stats`) of `prefix`, of any count, compression and
/// generation (`{prefix}-g{g:05}-{i:05}-of-{n:05}.tfrecord`), or one of its generations'
/// pinned manifests (`{prefix}.manifest-g{g:05}.json`): what `--overwrite` may delete.
pub fn is_own_shard(prefix: &str, name: &str) -> bool {
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|b| b.is_ascii_digit());
    let pinned = (name.strip_prefix(prefix))
        .and_then(|r| r.strip_prefix(".manifest-g"))
        .and_then(|r| r.strip_suffix(".json"));
    if let Some(generation) = pinned {
        return !is_tfds_prefix(prefix) && digits(generation);
    }
    let Some(rest) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    let rest = companion_of(rest).unwrap_or(rest);
    if is_tfds_prefix(prefix) {
        return rest
            .split_once("-of-")
            .is_some_and(|(i, n)| digits(i) && digits(n));
    }
    let rest = rest
        .strip_suffix(".tfrecord.gz")
        .or_else(|| rest.strip_suffix(".tfrecord.zlib"))
        .or_else(|| rest.strip_suffix(".tfrecord"));
    let Some(rest) = rest else {
        return false;
    };
    // A generation after the first: `g{g:05}-` before the index.
    let rest = match rest.strip_prefix('g').and_then(|r| r.split_once('-')) {
        Some((generation, rest)) if digits(generation) => rest,
        _ => rest,
    };
    match rest.split_once("-of-") {
        Some((index, count)) => digits(index) && digits(count),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            shard_name("data", 0, 3, Compression::None),
            "data-00000-of-00003.tfrecord"
        );
        assert_eq!(
            shard_name("train", 11, 12, Compression::Gzip),
            "train-00011-of-00012.tfrecord.gz"
        );
        assert_eq!(
            shard_name("d", 123456, 200000, Compression::Zlib),
            "d-123456-of-200000.tfrecord.zlib"
        );
        assert_eq!(manifest_name("data"), "data.manifest.json");
        assert_eq!(
            shard_name("ds-train.tfrecord", 1, 12, Compression::None),
            "ds-train.tfrecord-00001-of-00012"
        );
        assert_eq!(manifest_name("ds-train.tfrecord"), "ds-train.manifest.json");
        assert!(is_own_shard(
            "ds-train.tfrecord",
            "ds-train.tfrecord-00001-of-00012"
        ));
        assert!(!is_own_shard(
            "ds-train.tfrecord",
            "ds-train.tfrecord-00001-of-00012.tfrecord"
        ));
        assert!(!is_own_shard(
            "ds-train",
            "ds-train.tfrecord-00001-of-00012"
        ));
    }

    #[test]
    fn own_shards_only() {
        assert!(is_own_shard("data", "data-00000-of-00003.tfrecord"));
        assert!(is_own_shard("data", "data-00002-of-00003.tfrecord.gz"));
        assert!(is_own_shard("data", "data-00002-of-00003.tfrecord.idx"));
        assert!(is_own_shard("data", "data-00002-of-00003.tfrecord.stats"));
        assert!(!is_own_shard("data", "data.stats.pb"));
        assert!(!is_own_shard("data", "data-extra-00000-of-00003.tfrecord"));
        assert!(!is_own_shard("data", "train-00000-of-00003.tfrecord"));
        assert!(!is_own_shard("data", "data-00000-of-00003.tfrecord.bak"));
        assert!(!is_own_shard("data", "data.manifest.json"));
        assert!(!is_own_shard("data", "data-0000-of-00003.tfrecord"));
        // Generations and their pinned manifests.
        assert!(is_own_shard("data", "data-g00001-00000-of-00002.tfrecord"));
        assert!(is_own_shard(
            "data",
            "data-g00012-00001-of-00002.tfrecord.gz.idx"
        ));
        assert!(is_own_shard("data", "data.manifest-g00003.json"));
        assert_eq!(
            generation_shard_name("data", 3, 1, 2, Compression::Gzip),
            "data-g00003-00001-of-00002.tfrecord.gz"
        );
        assert!(is_own_shard(
            "data",
            &generation_shard_name("data", 3, 1, 2, Compression::Gzip)
        ));
        assert_eq!(
            pinned_manifest_name("data", 12),
            "data.manifest-g00012.json"
        );
        assert_eq!(
            pinned_generation("data", "data.manifest-g00012.json"),
            Some(12)
        );
        assert_eq!(pinned_generation("data", "data.manifest-g0012.json"), None);
        assert_eq!(pinned_generation("dat", "data.manifest-g00012.json"), None);
        assert!(!is_own_shard("data", "data-g0001-00000-of-00002.tfrecord"));
        assert!(!is_own_shard("data", "data-gx0001-00000-of-00002.tfrecord"));
        assert!(!is_own_shard("data", "data.manifest-g0003.json"));
        assert!(!is_own_shard("data", "data.manifest-g00003.json.tmp"));
        assert!(!is_own_shard("dat", "data.manifest-g00003.json"));
        assert!(!is_own_shard(
            "ds-train.tfrecord",
            "ds-train.tfrecord.manifest-g00001.json"
        ));
    }
}
