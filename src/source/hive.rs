//! Hive-style partitions: `key=value` path segments below the partition base become
//! features.
//!
//! Values are URL-decoded; a key whose every value is a canonical decimal integer that
//! fits int64 (`7`, `-3`, not `007`) is an int64 feature, any other key a bytes feature;
//! `__HIVE_DEFAULT_PARTITION__` is null (the feature is omitted from that record) and
//! takes no part in the choice.

use std::sync::Arc;

use arrow_array::{new_null_array, ArrayRef, Int64Array, StringArray};
use arrow_schema::{DataType, Field};

use crate::error::{Error, ErrorKind, Result};

pub use crate::example::encode::PARTITION_METADATA;

/// The value that stands for null in a partition path.
pub const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// `--partitioning`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Partitioning {
    /// On when every file has the same keys in the same order.
    #[default]
    Auto,
    /// Required: files whose keys differ are an error.
    Hive,
    /// Off.
    None,
}

/// The `key=value` segments of a path relative to the partition base (its last
/// segment, the file name, excluded): keys and URL-decoded values (`None`: null).
pub fn segments(relative: &str) -> Vec<(String, Option<String>)> {
    let mut parts: Vec<&str> = relative.split('/').filter(|s| !s.is_empty()).collect();
    parts.pop();
    parts
        .into_iter()
        .filter_map(|segment| {
            let (key, value) = segment.split_once('=')?;
            if key.is_empty() {
                return None;
            }
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8_lossy()
                    .into_owned()
            };
            let value = (value != DEFAULT_PARTITION).then(|| decode(value));
            Some((decode(key), value))
        })
        .collect()
}

/// One partition key's typed values, one per file.
#[derive(Debug, Clone)]
pub struct PartitionColumn {
    /// The Arrow field (Int64 or Utf8, nullable, marked as a partition).
    pub field: Field,
    values: Vec<Option<String>>,
}

impl PartitionColumn {
    /// The column for file `file`'s `rows` rows: its one value repeated (or nulls).
    pub fn array(&self, file: usize, rows: usize) -> ArrayRef {
        match (&self.values[file], self.field.data_type()) {
            (None, dt) => new_null_array(dt, rows),
            (Some(v), DataType::Int64) => {
                let v: i64 = v
                    .parse()
                    .expect("typed as int64 because every value parses");
                Arc::new(Int64Array::from_value(v, rows))
            }
            (Some(v), _) => Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                v.as_str(),
                rows,
            ))),
        }
    }
}

fn canonical_int(s: &str) -> bool {
    s.parse::<i64>().is_ok_and(|v| v.to_string() == s)
}

/// Decides the partition columns of a set of files from each file's segments.
///
/// `columns` are the files' own top-level column names (a key equal to one is an
/// error). `names` name the files, for errors.
///
/// # Errors
///
/// Under [`Partitioning::Hive`], files without keys or with different keys
/// ([`ErrorKind::PartitionKeys`]); a key that is also a column
/// ([`ErrorKind::PartitionColumn`]).
pub fn columns(
    mode: Partitioning,
    files: &[Vec<(String, Option<String>)>],
    names: &[String],
    columns: &[String],
) -> Result<Vec<PartitionColumn>> {
    if mode == Partitioning::None || files.is_empty() {
        return Ok(Vec::new());
    }
    let keys = |f: &Vec<(String, Option<String>)>| -> Vec<String> {
        f.iter().map(|(k, _)| k.clone()).collect()
    };
    let first = keys(&files[0]);
    let differing = files.iter().position(|f| keys(f) != first);
    if let Some(i) = differing {
        if mode == Partitioning::Hive {
            return Err(Error::new(ErrorKind::PartitionKeys {
                detail: format!(
                    "{} has [{}], {} has [{}]",
                    names[0],
                    first.join(", "),
                    names[i],
                    keys(&files[i]).join(", ")
                ),
            }));
        }
        return Ok(Vec::new());
    }
    if first.is_empty() {
        if mode == Partitioning::Hive {
            return Err(Error::new(ErrorKind::PartitionKeys {
                detail: format!(
                    "--partitioning hive, but {} has no key=value folder below the partition base",
                    names[0]
                ),
            }));
        }
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(first.len());
    for (k, key) in first.iter().enumerate() {
        if columns.iter().any(|c| c == key) {
            return Err(Error::new(ErrorKind::PartitionColumn { key: key.clone() }));
        }
        if first[..k].contains(key) {
            return Err(Error::new(ErrorKind::PartitionKeys {
                detail: format!("key \"{key}\" appears twice in {}", names[0]),
            }));
        }
        let values: Vec<Option<String>> = files.iter().map(|f| f[k].1.clone()).collect();
        let int = values.iter().flatten().all(|v| canonical_int(v));
        let data_type = if int { DataType::Int64 } else { DataType::Utf8 };
        let marker =
            std::collections::HashMap::from([(PARTITION_METADATA.to_owned(), "true".to_owned())]);
        let field = Field::new(key, data_type, true).with_metadata(marker);
        out.push(PartitionColumn { field, values });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(path: &str) -> Vec<(String, Option<String>)> {
        segments(path)
    }

    #[test]
    fn segments_are_decoded_and_default_is_null() {
        assert_eq!(
            seg("dt=2026-11-30/city=New%20York%2FNJ/part-0.parquet"),
            vec![
                ("dt".into(), Some("2026-11-30".into())),
                ("city".into(), Some("New York/NJ".into()))
            ]
        );
        assert_eq!(
            seg("k=__HIVE_DEFAULT_PARTITION__/x/a.parquet"),
            vec![("k".into(), None)]
        );
        assert!(seg("a.parquet").is_empty());
        assert!(seg("=x/a.parquet").is_empty());
    }

    #[test]
    fn keys_are_typed_by_every_value() {
        let names: Vec<String> = (0..3).map(|i| format!("f{i}")).collect();
        let files = vec![
            seg("n=7/s=007/a.parquet"),
            seg("n=-3/s=1/b.parquet"),
            seg("n=__HIVE_DEFAULT_PARTITION__/s=__HIVE_DEFAULT_PARTITION__/c.parquet"),
        ];
        let cols = columns(Partitioning::Auto, &files, &names, &[]).unwrap();
        assert_eq!(cols[0].field.data_type(), &DataType::Int64);
        assert_eq!(cols[1].field.data_type(), &DataType::Utf8);
        assert_eq!(cols[0].array(2, 2).null_count(), 2);
        let too_big = vec![seg("n=9223372036854775808/a.parquet")];
        let cols = columns(Partitioning::Auto, &too_big, &names, &[]).unwrap();
        assert_eq!(cols[0].field.data_type(), &DataType::Utf8);
    }

    #[test]
    fn modes() {
        let names: Vec<String> = (0..2).map(|i| format!("f{i}")).collect();
        let mixed = vec![seg("a=1/x.parquet"), seg("b=1/y.parquet")];
        assert!(columns(Partitioning::Auto, &mixed, &names, &[])
            .unwrap()
            .is_empty());
        assert!(columns(Partitioning::Hive, &mixed, &names, &[]).is_err());
        let same = vec![seg("a=1/x.parquet"), seg("a=2/y.parquet")];
        assert!(columns(Partitioning::None, &same, &names, &[])
            .unwrap()
            .is_empty());
        let e = columns(Partitioning::Auto, &same, &names, &["a".into()]).unwrap_err();
        assert!(e.to_string().contains("\"a\""), "{e}");
    }
}
