//! Where data lives: a local path, or an object (or a prefix, read like a folder) in a
//! store, named by URL (`s3://`, `s3a://`, `gs://`, `az://`, `abfss://`, `file://`).

use std::fmt;
use std::path::{Path, PathBuf};

use object_store::path::Path as Key;

use super::settings::IoOptions;
use crate::error::{Error, Result};

/// A store's kind, by URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scheme {
    /// `s3://` (and `s3a://`, Hadoop's name for it).
    S3,
    /// `gs://`.
    Gcs,
    /// `az://` and `abfss://`.
    Azure,
}

/// An object (or a prefix, read like a folder) in a store.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectUrl {
    scheme: Scheme,
    /// The URL up to the key, as given (`s3://bucket`, `abfss://c@acct.dfs.core.windows.net`).
    root: String,
    /// The key, without a leading or trailing `/` (empty for the bucket's root).
    key: String,
    /// The settings every request about this object runs with.
    io: IoOptions,
}

impl ObjectUrl {
    /// The store's kind.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The URL up to the key (`s3://bucket`).
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The settings requests about this object run with.
    pub fn io(&self) -> IoOptions {
        self.io
    }

    /// The same object under another key of the same bucket.
    pub(super) fn with_key(&self, key: &str) -> ObjectUrl {
        ObjectUrl {
            key: key.to_owned(),
            ..self.clone()
        }
    }

    /// The key within the bucket.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The object or prefix `name` below this one (`name` may hold `/`).
    pub fn join(&self, name: &str) -> ObjectUrl {
        let name = name.trim_matches('/');
        let key = match (self.key.is_empty(), name.is_empty()) {
            (true, _) => name.to_owned(),
            (false, true) => self.key.clone(),
            (false, false) => format!("{}/{name}", self.key),
        };
        ObjectUrl {
            key,
            ..self.clone()
        }
    }

    /// The prefix this object is in (the bucket's root stays the root).
    pub fn parent(&self) -> ObjectUrl {
        let key = match self.key.rfind('/') {
            Some(i) => self.key[..i].to_owned(),
            None => String::new(),
        };
        ObjectUrl {
            key,
            ..self.clone()
        }
    }

    /// The last segment of the key.
    pub fn file_name(&self) -> &str {
        self.key.rsplit('/').next().unwrap_or("")
    }

    /// The key relative to `base`, when this object lies below it.
    pub fn relative_to(&self, base: &ObjectUrl) -> Option<&str> {
        if self.root != base.root {
            return None;
        }
        if base.key.is_empty() {
            return Some(&self.key);
        }
        self.key
            .strip_prefix(&base.key)
            .and_then(|rest| rest.strip_prefix('/'))
    }

    /// The URL as a path value, for the places that carry either (error locations,
    /// command-line inputs, manifests' `inputs`).
    pub fn to_path(&self) -> PathBuf {
        PathBuf::from(self.to_string())
    }

    pub(super) fn object_key(&self) -> Result<Key> {
        Key::parse(&self.key).map_err(|e| {
            Error::invalid_option("URL", format!("{self}: not a valid object key: {e}"))
        })
    }

    /// The key as a prefix to list under (`key/`, so that `a/b` does not list `a/bc`).
    pub(super) fn prefix_key(&self) -> Result<Option<Key>> {
        if self.key.is_empty() {
            return Ok(None);
        }
        self.object_key().map(Some)
    }
}

impl fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}", self.root)
        } else {
            write!(f, "{}/{}", self.root, self.key)
        }
    }
}

/// A path argument resolved: a local path or an object URL.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Place {
    /// A local file or folder (a plain path, or a `file://` URL).
    Local(PathBuf),
    /// An object or prefix in a store.
    Remote(ObjectUrl),
}

/// Resolves a command-line path: `scheme://...` is a URL (an unknown scheme is a usage
/// error, never a local folder named `s3:`), anything else a local path. A URL's
/// requests run with the settings `io`.
///
/// # Errors
///
/// [`ErrorKind::InvalidOption`](crate::error::ErrorKind::InvalidOption) for an unsupported
/// scheme or a URL without a bucket.
pub(crate) fn locate(arg: &Path, io: IoOptions) -> Result<Place> {
    let text = arg.to_string_lossy();
    let Some((scheme, rest)) = text.split_once("://") else {
        return Ok(Place::Local(arg.to_path_buf()));
    };
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Ok(Place::Local(arg.to_path_buf()));
    }
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "file" => return Ok(Place::Local(PathBuf::from(rest))),
        "s3" | "s3a" => Scheme::S3,
        "gs" => Scheme::Gcs,
        "az" | "abfss" => Scheme::Azure,
        other => {
            return Err(Error::invalid_option(
                "URL",
                format!(
                    "{text}: unsupported scheme {other}:// (use s3://, s3a://, gs://, az://, \
                     abfss://, file:// or a local path)"
                ),
            ))
        }
    };
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::invalid_option(
            "URL",
            format!("{text}: no bucket or container"),
        ));
    }
    // s3a:// is Hadoop's spelling of the same store: one bucket, one client.
    let scheme_text = if kind == Scheme::S3 { "s3" } else { scheme };
    Ok(Place::Remote(ObjectUrl {
        scheme: kind,
        root: format!("{scheme_text}://{bucket}"),
        key: key.trim_matches('/').to_owned(),
        io,
    }))
}

/// Whether `arg` is an object URL (of any scheme we accept).
pub fn is_url(arg: &Path) -> bool {
    matches!(locate(arg, IoOptions::default()), Ok(Place::Remote(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn url(s: &str) -> ObjectUrl {
        match locate(Path::new(s), IoOptions::default()).unwrap() {
            Place::Remote(u) => u,
            Place::Local(p) => panic!("{} is local", p.display()),
        }
    }

    #[test]
    fn urls_and_paths() {
        let io = IoOptions::default();
        assert_eq!(
            locate(Path::new("out/x"), io).unwrap(),
            Place::Local("out/x".into())
        );
        assert_eq!(
            locate(Path::new("file:///tmp/x"), io).unwrap(),
            Place::Local("/tmp/x".into())
        );
        let u = url("s3a://bucket/table/dt=1/");
        assert_eq!(u.to_string(), "s3://bucket/table/dt=1");
        assert_eq!(u.key(), "table/dt=1");
        assert_eq!(u.join("part-0.parquet").key(), "table/dt=1/part-0.parquet");
        assert_eq!(u.parent().to_string(), "s3://bucket/table");
        assert_eq!(u.file_name(), "dt=1");
        let base = url("s3://bucket/table");
        assert_eq!(u.relative_to(&base), Some("dt=1"));
        assert_eq!(url("s3://bucket/tablex").relative_to(&base), None);
        assert_eq!(url("gs://b").join("a/b").to_string(), "gs://b/a/b");
        assert_eq!(
            url("abfss://c@acct.dfs.core.windows.net/t").to_string(),
            "abfss://c@acct.dfs.core.windows.net/t"
        );
        for bad in ["http://host/x", "hdfs://nn/x", "s3://", "s3:///key"] {
            let e = locate(Path::new(bad), io).unwrap_err();
            assert!(
                matches!(e.kind(), crate::error::ErrorKind::InvalidOption { .. }),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_url_carries_the_settings_it_was_resolved_with() {
        let slow = IoOptions::default().with_concurrency(2);
        let Place::Remote(u) = locate(Path::new("s3://b/k"), slow).unwrap() else {
            panic!("a URL")
        };
        assert_eq!(u.io(), slow);
        assert_eq!(u.join("x").io(), slow);
        assert_eq!(u.parent().io(), slow);
    }
}
