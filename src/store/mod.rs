//! Where data lives: a local path, or an object in a store (`s3://`, `gs://`, `az://`,
//! `abfss://`; DESIGN.md, "Tables as data platforms store them").
//!
//! Local paths keep their native back-end everywhere else in the crate (memory maps,
//! fsync before rename). URLs go through arrow-rs `object_store` behind one trait object
//! per bucket, configured from `object_store`'s documented environment variables. This
//! module is the only one that talks to a store: listing, ranged reads pinned to an
//! ETag, conditional puts, multipart uploads, server-side copies, deletes. Every call
//! blocks the calling thread on a small runtime of its own (started on first use), holds
//! one of `--io-concurrency` permits while it runs, and gives up after `--io-timeout`
//! with an error that names the URL and the cause ([`StoreProblem`]).

mod parquet;
pub mod paths;
mod read;
pub(crate) mod remote_output;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::multipart::MultipartStore;
use object_store::path::Path as Key;
use object_store::signer::{HeaderName, HeaderValue, Method, SignedUrlOptions, Signer};
use object_store::{
    ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload,
};

use crate::error::{Error, ErrorKind, Result};

pub(crate) use self::parquet::{RemoteChunks, RemoteParquet};
pub use read::RemoteRead;

/// Requests in flight and how long a request may take, with its retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoOptions {
    /// `--io-concurrency`: requests in flight at most, across the process (default 16).
    pub concurrency: usize,
    /// `--io-timeout`: the longest a request may take, retries and backoff included
    /// (default 5 minutes). Nothing waits longer.
    pub timeout: Duration,
}

impl Default for IoOptions {
    fn default() -> IoOptions {
        IoOptions {
            concurrency: 16,
            timeout: Duration::from_secs(300),
        }
    }
}

static IO_OPTIONS: OnceLock<IoOptions> = OnceLock::new();

/// Sets the process's store settings. Only the first call counts, and only before the
/// first URL is used; later calls return `false`.
pub fn set_io_options(options: IoOptions) -> bool {
    IO_OPTIONS.set(options).is_ok()
}

fn io_options() -> IoOptions {
    *IO_OPTIONS.get_or_init(IoOptions::default)
}

/// A store's kind, by URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
}

impl ObjectUrl {
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

    fn object_key(&self) -> Result<Key> {
        Key::parse(&self.key).map_err(|e| {
            Error::invalid_option("URL", format!("{self}: not a valid object key: {e}"))
        })
    }

    /// The key as a prefix to list under (`key/`, so that `a/b` does not list `a/bc`).
    fn prefix_key(&self) -> Result<Option<Key>> {
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
pub enum Location {
    /// A local file or folder (a plain path, or a `file://` URL).
    Local(PathBuf),
    /// An object or prefix in a store.
    Remote(ObjectUrl),
}

/// Resolves a command-line path: `scheme://...` is a URL (an unknown scheme is a usage
/// error, never a local folder named `s3:`), anything else a local path.
///
/// # Errors
///
/// [`ErrorKind::InvalidOption`] for an unsupported scheme or a URL without a bucket.
pub fn locate(arg: &Path) -> Result<Location> {
    let text = arg.to_string_lossy();
    let Some((scheme, rest)) = text.split_once("://") else {
        return Ok(Location::Local(arg.to_path_buf()));
    };
    let scheme_ok = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Ok(Location::Local(arg.to_path_buf()));
    }
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "file" => return Ok(Location::Local(PathBuf::from(rest))),
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
    Ok(Location::Remote(ObjectUrl {
        scheme: kind,
        root: format!("{scheme_text}://{bucket}"),
        key: key.trim_matches('/').to_owned(),
    }))
}

/// Whether `arg` is an object URL (of any scheme we accept).
pub fn is_url(arg: &Path) -> bool {
    matches!(locate(arg), Ok(Location::Remote(_)))
}

/// What went wrong talking to a store, as the one line says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreProblem {
    /// 401/403.
    AccessDenied,
    /// No such bucket or key.
    NotFound,
    /// The endpoint refused, timed out or could not be resolved.
    Unreachable,
    /// Throttling (429, 503 SlowDown) that outlasted the retries.
    Throttled,
    /// The object's ETag is no longer the one the run started with.
    Changed,
    /// A conditional put found the object already there.
    AlreadyExists,
    /// Anything else the store said.
    Other,
}

impl fmt::Display for StoreProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreProblem::AccessDenied => "access denied",
            StoreProblem::NotFound => "not found",
            StoreProblem::Unreachable => "cannot reach endpoint",
            StoreProblem::Throttled => "throttled",
            StoreProblem::Changed => "changed during the run",
            StoreProblem::AlreadyExists => "already exists",
            StoreProblem::Other => "store error",
        })
    }
}

/// One store bucket (or container) and its clients.
struct Bucket {
    store: Arc<dyn ObjectStore>,
    multipart: Arc<dyn MultipartStore>,
    /// Presigns the requests `object_store` has no call for (S3's UploadPartCopy, Azure's
    /// Get Blob Properties for a copy's status), sent by [`http_client`].
    signer: Arc<dyn Signer>,
}

/// The clients made so far, by scheme and bucket.
type Buckets = Mutex<HashMap<(Scheme, String), Arc<Bucket>>>;

fn buckets() -> &'static Buckets {
    static BUCKETS: OnceLock<Buckets> = OnceLock::new();
    BUCKETS.get_or_init(Default::default)
}

fn bucket(url: &ObjectUrl) -> Result<Arc<Bucket>> {
    let id = (url.scheme, url.root.clone());
    let mut all = buckets().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = all.get(&id) {
        return Ok(b.clone());
    }
    let io = io_options();
    let timeout = humantime_secs(io.timeout);
    let connect = humantime_secs(io.timeout.min(Duration::from_secs(10)));
    let retry = object_store::RetryConfig {
        backoff: object_store::BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(15),
            base: 2.0,
        },
        max_retries: 10,
        retry_timeout: io.timeout,
    };
    let bad = |e: object_store::Error| {
        Error::invalid_option("URL", format!("{url}: {}", redact(&e.to_string())))
    };
    // One client per scheme, configured alike: the environment, then our timeouts.
    macro_rules! client {
        ($builder:ty, $client_key:path) => {{
            let store = <$builder>::from_env()
                .with_url(&url.root)
                .with_config($client_key(ClientConfigKey::Timeout), &timeout)
                .with_config($client_key(ClientConfigKey::ConnectTimeout), &connect)
                .with_retry(retry)
                .build()
                .map_err(bad)?;
            let store = Arc::new(store);
            Bucket {
                store: store.clone(),
                multipart: store.clone(),
                signer: store,
            }
        }};
    }
    let bucket = match url.scheme {
        Scheme::S3 => client!(
            object_store::aws::AmazonS3Builder,
            object_store::aws::AmazonS3ConfigKey::Client
        ),
        Scheme::Gcs => client!(
            object_store::gcp::GoogleCloudStorageBuilder,
            object_store::gcp::GoogleConfigKey::Client
        ),
        Scheme::Azure => client!(
            object_store::azure::MicrosoftAzureBuilder,
            object_store::azure::AzureConfigKey::Client
        ),
    };
    let bucket = Arc::new(bucket);
    all.insert(id, bucket.clone());
    Ok(bucket)
}

fn humantime_secs(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// The runtime every store call blocks on (two I/O threads; requests are bounded by
/// the permits, not the threads).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tfshard-io")
            .enable_all()
            .build()
            .expect("the I/O runtime starts (threads and timers only)")
    })
}

/// The `--io-concurrency` permits.
fn permits() -> &'static Arc<tokio::sync::Semaphore> {
    static PERMITS: OnceLock<Arc<tokio::sync::Semaphore>> = OnceLock::new();
    PERMITS.get_or_init(|| Arc::new(tokio::sync::Semaphore::new(io_options().concurrency.max(1))))
}

/// Runs one request: holds a permit, and gives up after the timeout (the client's own
/// timeouts and retry budget come first; this is the backstop that nothing outlives).
async fn request<T>(
    url: &ObjectUrl,
    f: impl Future<Output = object_store::Result<T>>,
) -> Result<T> {
    let _permit = permits()
        .acquire()
        .await
        .expect("the semaphore is never closed");
    let limit = io_options().timeout * 2 + Duration::from_secs(1);
    match tokio::time::timeout(limit, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(store_error(url, &e)),
        Err(_) => Err(Error::new(ErrorKind::Store {
            problem: StoreProblem::Unreachable,
            detail: format!("no answer within {:?}", limit),
        })
        .with_file(url.to_path())),
    }
}

/// Blocks on a future on the I/O runtime.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// Spawns a future on the I/O runtime.
pub(crate) fn spawn<F>(f: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime().spawn(f)
}

/// Replaces the values of the secret environment variables in `text` (an error from a
/// store may quote a request): no secret is ever printed.
fn redact(text: &str) -> String {
    let mut out = text.to_owned();
    for var in [
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_SAS_KEY",
        "AZURE_CLIENT_SECRET",
        "GOOGLE_SERVICE_ACCOUNT_KEY",
    ] {
        if let Ok(secret) = std::env::var(var) {
            if secret.len() >= 4 {
                out = out.replace(&secret, "[redacted]");
            }
        }
    }
    out
}

/// Whether `e` is a store error of this kind.
pub(crate) fn is_problem(e: &Error, problem: StoreProblem) -> bool {
    matches!(e.kind(), ErrorKind::Store { problem: p, .. } if *p == problem)
}

/// The innermost cause of an error, one line.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !t.is_empty() {
            text = t;
        }
        source = s.source();
    }
    text
}

/// Classifies an `object_store` error.
fn store_error(url: &ObjectUrl, e: &object_store::Error) -> Error {
    use object_store::Error as E;
    let whole = redact(&e.to_string());
    let cause = redact(&root_cause(e));
    let lower = whole.to_ascii_lowercase();
    let problem = match e {
        E::NotFound { .. } => StoreProblem::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StoreProblem::AccessDenied,
        E::Precondition { .. } => StoreProblem::Changed,
        E::AlreadyExists { .. } => StoreProblem::AlreadyExists,
        // Our own requests' 412 (a copy source's ETag); a conditional put's is above.
        _ if lower.contains("status code: 412") || lower.contains("preconditionfailed") => {
            StoreProblem::Changed
        }
        // Status codes only as the client words them: a URL's port can hold "503".
        _ if [
            "status code: 403",
            "status code: 401",
            "accessdenied",
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
        ]
        .iter()
        .any(|s| lower.contains(s)) =>
        {
            StoreProblem::AccessDenied
        }
        _ if [
            "status code: 404",
            "nosuchbucket",
            "nosuchkey",
            "containernotfound",
        ]
        .iter()
        .any(|s| lower.contains(s)) =>
        {
            StoreProblem::NotFound
        }
        _ if [
            "status code: 429",
            "status code: 503",
            "slowdown",
            "throttl",
            "too many requests",
            "serverbusy",
        ]
        .iter()
        .any(|s| lower.contains(s)) =>
        {
            StoreProblem::Throttled
        }
        _ if [
            "timed out",
            "timeout",
            "error sending request",
            "connection refused",
            "connect",
            "dns error",
        ]
        .iter()
        .any(|s| lower.contains(s)) =>
        {
            StoreProblem::Unreachable
        }
        _ => StoreProblem::Other,
    };
    let detail = match problem {
        // The store's own words can quote the key id; the hint is what helps.
        StoreProblem::AccessDenied => "check the credentials (AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_KEY) \
             and the bucket's policy"
            .to_owned(),
        StoreProblem::Unreachable => format!(
            "{cause} (after retries for up to {:?}; see --io-timeout)",
            io_options().timeout
        ),
        StoreProblem::Throttled => format!(
            "retries ran out after {:?} (--io-timeout): {cause}",
            io_options().timeout
        ),
        StoreProblem::Changed => {
            "its ETag is not the one this run started with; rerun on a stable input".to_owned()
        }
        StoreProblem::NotFound => match xml_code(&whole) {
            Some(code) => format!("the store says {code}"),
            None => "no such bucket or object".to_owned(),
        },
        _ => cause,
    };
    Error::new(ErrorKind::Store {
        problem,
        detail: shorten(&detail),
    })
    .with_file(url.to_path())
}

/// At most about 300 characters of a store's words, on one line.
fn shorten(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// The `<Code>` of an S3/Azure XML error body, when the error quotes one.
fn xml_code(text: &str) -> Option<&str> {
    xml_value(text, "Code")
}

/// The text of the first `<tag>` element of an XML body.
fn xml_value<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{tag}>"))?;
    Some(&text[start..end])
}

/// An object found by a listing or a HEAD.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Where it is.
    pub url: ObjectUrl,
    /// Its size.
    pub size: u64,
    /// Its ETag (or version), which later reads are pinned to.
    pub etag: Option<String>,
}

fn listed(url: &ObjectUrl, meta: object_store::ObjectMeta) -> Listed {
    Listed {
        url: ObjectUrl {
            key: meta.location.as_ref().to_owned(),
            ..url.clone()
        },
        size: meta.size,
        etag: meta.e_tag.or(meta.version),
    }
}

/// Every object below `url` (recursively), in key byte order.
///
/// # Errors
///
/// A store error naming the URL.
pub fn list(url: &ObjectUrl) -> Result<Vec<Listed>> {
    block_on(list_async(url))
}

pub(crate) async fn list_async(url: &ObjectUrl) -> Result<Vec<Listed>> {
    let b = bucket(url)?;
    let prefix = url.prefix_key()?;
    let mut out: Vec<Listed> = request(url, async {
        b.store.list(prefix.as_ref()).try_collect::<Vec<_>>().await
    })
    .await?
    .into_iter()
    .map(|m| listed(url, m))
    .collect();
    out.sort_by(|a, b| a.url.key.as_bytes().cmp(b.url.key.as_bytes()));
    Ok(out)
}

/// The objects directly below `url` and the names of its sub-prefixes.
///
/// # Errors
///
/// A store error naming the URL.
pub fn list_dir(url: &ObjectUrl) -> Result<(Vec<Listed>, Vec<String>)> {
    block_on(list_dir_async(url))
}

pub(crate) async fn list_dir_async(url: &ObjectUrl) -> Result<(Vec<Listed>, Vec<String>)> {
    let b = bucket(url)?;
    let prefix = url.prefix_key()?;
    let result = request(url, b.store.list_with_delimiter(prefix.as_ref())).await?;
    let mut objects: Vec<Listed> = result.objects.into_iter().map(|m| listed(url, m)).collect();
    objects.sort_by(|a, b| a.url.key.as_bytes().cmp(b.url.key.as_bytes()));
    let dirs = result
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_owned))
        .collect();
    Ok((objects, dirs))
}

/// The object's size and ETag.
///
/// # Errors
///
/// A store error naming the URL (`not found` when there is no such object).
pub fn head(url: &ObjectUrl) -> Result<Listed> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let meta = block_on(request(url, b.store.head(&key)))?;
    Ok(listed(url, meta))
}

/// Bytes `range` of the object, as it was when its ETag was `etag`.
pub(crate) async fn get_range(
    url: &ObjectUrl,
    range: Range<u64>,
    etag: Option<&str>,
) -> Result<Bytes> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let options = GetOptions {
        if_match: etag.map(str::to_owned),
        range: Some(GetRange::Bounded(range)),
        ..Default::default()
    };
    request(url, async {
        let result = b.store.get_opts(&key, options).await?;
        let len = (result.range.end - result.range.start) as usize;
        if len < MAPPED_READ_BYTES {
            return result.bytes().await;
        }
        // Large reads land in an anonymous map, given back to the system when dropped:
        // from the heap they stayed in the I/O threads' malloc arenas (peak RSS).
        let failed =
            |source: Box<dyn std::error::Error + Send + Sync>| object_store::Error::Generic {
                store: "tfshard",
                source,
            };
        let mut map = memmap2::MmapMut::map_anon(len).map_err(|e| failed(Box::new(e)))?;
        let mut at = 0;
        let mut stream = result.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk?;
            let end = at + chunk.len();
            if end > len {
                return Err(failed(
                    "the store sent more bytes than the range asked".into(),
                ));
            }
            map[at..end].copy_from_slice(&chunk);
            at = end;
        }
        if at != len {
            return Err(failed(
                format!("the store sent {at} of the {len} bytes asked").into(),
            ));
        }
        let map = map.make_read_only().map_err(|e| failed(Box::new(e)))?;
        Ok(Bytes::from_owner(map))
    })
    .await
}

/// Reads of at least this many bytes go to an anonymous map rather than the heap.
const MAPPED_READ_BYTES: usize = 1 << 20;

/// The whole object.
///
/// # Errors
///
/// A store error naming the URL.
pub fn read_all(url: &ObjectUrl) -> Result<Bytes> {
    block_on(read_all_async(url))
}

pub(crate) async fn read_all_async(url: &ObjectUrl) -> Result<Bytes> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    request(url, async { b.store.get(&key).await?.bytes().await }).await
}

/// Writes a small object in one request; with `create_only`, only if nothing is there
/// (a conditional put: `already exists` otherwise).
///
/// # Errors
///
/// A store error naming the URL.
pub fn put(url: &ObjectUrl, bytes: Vec<u8>, create_only: bool) -> Result<()> {
    block_on(put_async(url, bytes, create_only))
}

pub(crate) async fn put_async(url: &ObjectUrl, bytes: Vec<u8>, create_only: bool) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let options = PutOptions {
        mode: if create_only {
            PutMode::Create
        } else {
            PutMode::Overwrite
        },
        ..Default::default()
    };
    request(
        url,
        b.store.put_opts(&key, PutPayload::from(bytes), options),
    )
    .await?;
    Ok(())
}

/// The record of a multipart upload started for `target`, kept in a temporary folder
/// (`uploads/NAME`) so that a later run can abort it after a kill: its key and id.
pub(crate) fn upload_record(target: &ObjectUrl, id: &str) -> Vec<u8> {
    format!("{}\n{id}", target.key()).into_bytes()
}

/// Aborts the upload that the record `record` names, and deletes the record.
pub(crate) async fn abort_recorded(record: &ObjectUrl) -> Result<()> {
    let text = match read_all_async(record).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => return Ok(()),
        other => other?,
    };
    if let Some((key, id)) = String::from_utf8_lossy(&text).split_once('\n') {
        let target = ObjectUrl {
            key: key.to_owned(),
            ..record.clone()
        };
        abort_multipart(&target, id).await?;
    }
    delete(record).await
}

/// Aborts every upload recorded directly below `dir` (blocking).
///
/// # Errors
///
/// A store error naming the URL.
pub fn abort_recorded_below(dir: &ObjectUrl) -> Result<()> {
    block_on(async {
        for record in list_async(dir).await? {
            abort_recorded(&record.url).await?;
        }
        Ok(())
    })
}

/// [`copy_recorded`] for a caller that keeps no upload ids (blocking): a multipart
/// copy's id is recorded in the object `record` while it runs ([`abort_recorded_below`]
/// aborts it after a kill).
///
/// # Errors
///
/// A store error naming the URL.
pub fn copy_object_recorded(from: &ObjectUrl, to: &ObjectUrl, record: &ObjectUrl) -> Result<()> {
    block_on(copy_recorded(
        from,
        to,
        async |id: String| put_async(record, upload_record(to, &id), false).await,
        async |()| {
            let _ = delete(record).await;
        },
    ))
}

/// The largest object S3's CopyObject copies in one request; a larger one is copied
/// as a multipart upload of ranges (UploadPartCopy). `TFSHARD_MAX_COPY_BYTES` lowers it,
/// for tests.
pub const MAX_COPY_BYTES: u64 = 5 << 30;

/// Bytes per part of a multipart copy (S3: 5 MiB to 5 GiB a part, 10,000 parts, so
/// objects up to 5 TB). `TFSHARD_COPY_PART_BYTES` lowers it, for tests.
pub const COPY_PART_BYTES: u64 = 512 << 20;

fn limit_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// Copies an object within its bucket, on the server: one request, or on S3, for an
/// object above [`MAX_COPY_BYTES`], a multipart copy; on Azure, where a copy may finish
/// after its request, this returns once the copy has completed.
///
/// A multipart copy's id goes to `record` before its first part is sent. Once the copy
/// has completed, or failed and been aborted, `forget` gets what `record` returned; an
/// abort that fails skips `forget`, so the record stays for a later run to abort.
pub(crate) async fn copy_recorded<R>(
    from: &ObjectUrl,
    to: &ObjectUrl,
    record: impl AsyncFnOnce(String) -> Result<R>,
    forget: impl AsyncFnOnce(R),
) -> Result<()> {
    let mut recorded = None;
    let slot = &mut recorded;
    let copied = copy_on_server(from, to, async move |id: String| {
        *slot = Some((id.clone(), record(id).await?));
        Ok(())
    })
    .await;
    if let Some((id, kept)) = recorded {
        if copied.is_err() && abort_multipart(to, &id).await.is_err() {
            return copied;
        }
        forget(kept).await;
    }
    copied
}

/// [`copy_recorded`]'s request: calls `started` with the id of a multipart copy before
/// its first part, and leaves a multipart copy that fails open.
async fn copy_on_server(
    from: &ObjectUrl,
    to: &ObjectUrl,
    started: impl AsyncFnOnce(String) -> Result<()>,
) -> Result<()> {
    let b = bucket(from)?;
    let (src, dst) = (from.object_key()?, to.object_key()?);
    match from.scheme {
        Scheme::S3 => {
            let source = request(from, b.store.head(&src)).await?;
            if source.size > limit_from_env("TFSHARD_MAX_COPY_BYTES", MAX_COPY_BYTES) {
                let etag = source.e_tag.as_deref();
                return multipart_copy(&b, from, to, source.size, etag, started).await;
            }
            request(to, b.store.copy(&src, &dst)).await
        }
        Scheme::Azure => {
            request(to, b.store.copy(&src, &dst)).await?;
            wait_for_copy(&b, to).await
        }
        Scheme::Gcs => request(to, b.store.copy(&src, &dst)).await,
    }
}

/// Copies `from` (`size` bytes, pinned to `etag`) to `to` as a multipart upload whose
/// parts are ranges of the source, copied on the server in parallel (the permits bound
/// them). Left open on failure (the caller aborts it).
async fn multipart_copy(
    b: &Bucket,
    from: &ObjectUrl,
    to: &ObjectUrl,
    size: u64,
    etag: Option<&str>,
    started: impl AsyncFnOnce(String) -> Result<()>,
) -> Result<()> {
    // Settings whose headers an UploadPartCopy would need and this one does not send.
    for var in ["AWS_CHECKSUM_ALGORITHM", "AWS_SSE_CUSTOMER_KEY_BASE64"] {
        if std::env::var_os(var).is_some_and(|v| !v.is_empty()) {
            return Err(Error::invalid_option(
                "URL",
                format!(
                    "{to}: a shard above {MAX_COPY_BYTES} bytes is copied in parts, which \
                     tfshard cannot do with {var} set; use a smaller --target-shard-size"
                ),
            ));
        }
    }
    let (id, ()) = create_recorded(to, async |id: &str| started(id.to_owned()).await).await?;
    // S3 takes 10,000 parts at most.
    let step =
        limit_from_env("TFSHARD_COPY_PART_BYTES", COPY_PART_BYTES).max(size.div_ceil(10_000));
    let ranges = (0..size)
        .step_by(step as usize)
        .map(|s| s..(s + step).min(size));
    let parts = ranges
        .enumerate()
        .map(|(i, range)| copy_part(b, from, to, &id, i, range, etag));
    let parts = futures_util::future::try_join_all(parts).await?;
    kill_point("store:parts-copied").await?;
    complete_multipart(to, &id, parts).await
}

/// Held from a multipart upload's creation until its id is recorded, and by the failure
/// points that stand for a kill: uploads and copies run side by side, and a test's kill
/// must not fall between another one's two requests. (A real kill can: that upload is
/// then left to the bucket's lifecycle rule for incomplete uploads, as the README says.)
static RECORDING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a multipart upload of `target` and hands its id to `record` (which keeps it
/// where a later run finds it) before anything else may stop the process.
pub(crate) async fn create_recorded<R>(
    target: &ObjectUrl,
    record: impl AsyncFnOnce(&str) -> Result<R>,
) -> Result<(String, R)> {
    let _recording = RECORDING.lock().await;
    let id = create_multipart(target).await?;
    let kept = record(&id).await?;
    Ok((id, kept))
}

/// Failure point `name`, where a kill finds every upload started so far recorded.
pub(crate) async fn kill_point(name: &str) -> Result<()> {
    let _recording = RECORDING.lock().await;
    crate::failpoint::hit(name)
}

/// What an S3 key is in an `x-amz-copy-source` header: URL-encoded, `/` kept.
const COPY_SOURCE_KEY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Copies bytes `range` of `from` into part `index` of upload `id` of `to`
/// (UploadPartCopy, which `object_store` has no call for: presigned by its signer, with
/// the copy headers in the signature, and retried here as its own requests are).
async fn copy_part(
    b: &Bucket,
    from: &ObjectUrl,
    to: &ObjectUrl,
    id: &str,
    index: usize,
    range: Range<u64>,
    etag: Option<&str>,
) -> Result<object_store::multipart::PartId> {
    let key = to.object_key()?;
    let bucket_name = from.root.trim_start_matches("s3://");
    let source = format!(
        "/{bucket_name}/{}",
        percent_encoding::utf8_percent_encode(&from.key, COPY_SOURCE_KEY)
    );
    let header = |name: &'static str, value: &str| {
        HeaderValue::from_str(value)
            .map(|v| (HeaderName::from_static(name), v))
            .map_err(|_| {
                Error::invalid_option("URL", format!("{from}: not a valid copy source header"))
            })
    };
    let mut headers = vec![
        header("x-amz-copy-source", &source)?,
        header(
            "x-amz-copy-source-range",
            &format!("bytes={}-{}", range.start, range.end - 1),
        )?,
    ];
    if let Some(etag) = etag {
        headers.push(header("x-amz-copy-source-if-match", etag)?);
    }
    let mut options = SignedUrlOptions::new().with_query([
        ("partNumber", (index + 1).to_string()),
        ("uploadId", id.to_owned()),
    ]);
    for (name, value) in &headers {
        options = options.with_signed_header(name.clone(), value.clone());
    }
    // A 200 can still carry an error (S3 says so for copies): only an ETag is success.
    let copied =
        |body: &str| xml_value(body, "ETag").is_some() && xml_value(body, "Code").is_none();
    let body = send_retried(to, copied, || async {
        let url = b
            .signer
            .signed_url_opts(Method::PUT, &key, PRESIGNED_FOR, &options)
            .await?;
        let mut req = http_client()?
            .put(url.as_str())
            .header("content-length", "0");
        for (name, value) in &headers {
            req = req.header(name, value);
        }
        Ok(req)
    })
    .await?
    .1;
    let etag = xml_value(&body, "ETag").unwrap_or_default();
    Ok(object_store::multipart::PartId {
        content_id: etag.replace("&quot;", "\"").replace("&#34;", "\""),
    })
}

/// How long a presigned request stays valid (it is sent at once; retries sign anew).
const PRESIGNED_FOR: Duration = Duration::from_secs(15 * 60);

/// Waits until a copy to `to` has completed (Azure's Copy Blob may answer `pending` and
/// go on in the background): polls the blob's `x-ms-copy-status`, backing off, within
/// `--io-timeout`. A copy that failed or was aborted is an error naming the blob.
///
/// A SAS-token credential cannot presign the status request (nor can customer-provided
/// keys); the copy is then trusted as answered (copies within one storage account
/// complete at once in practice). Any other signing failure is an error.
async fn wait_for_copy(b: &Bucket, to: &ObjectUrl) -> Result<()> {
    let key = to.object_key()?;
    let started = Instant::now();
    let mut backoff = Duration::from_millis(100);
    loop {
        let url = match b.signer.signed_url(Method::GET, &key, PRESIGNED_FOR).await {
            Ok(url) => url,
            // A SAS-token credential cannot sign another SAS, and customer-provided keys
            // sign none: the copy is trusted as answered.
            Err(e)
                if e.to_string().contains("SAS")
                    || matches!(e, object_store::Error::NotSupported { .. }) =>
            {
                return Ok(())
            }
            Err(e) => return Err(store_error(to, &e)),
        };
        let (headers, _) = send_retried(
            to,
            |_| true,
            || async { Ok(http_client()?.request(Method::HEAD, url.as_str())) },
        )
        .await?;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        match copy_state(&header("x-ms-copy-status")) {
            CopyState::Done => return Ok(()),
            CopyState::Pending if started.elapsed() < io_options().timeout => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            CopyState::Pending => {
                return Err(Error::new(ErrorKind::Store {
                    problem: StoreProblem::Other,
                    detail: format!(
                        "the server-side copy was still pending after {:?} (--io-timeout; {})",
                        io_options().timeout,
                        header("x-ms-copy-progress")
                    ),
                })
                .with_file(to.to_path()))
            }
            CopyState::Failed(status) => {
                return Err(Error::new(ErrorKind::Store {
                    problem: StoreProblem::Other,
                    detail: shorten(&format!(
                        "the server-side copy {status}: {}",
                        header("x-ms-copy-status-description")
                    )),
                })
                .with_file(to.to_path()))
            }
        }
    }
}

/// A blob's copy status, as Azure's `x-ms-copy-status` says it.
#[derive(Debug, PartialEq, Eq)]
enum CopyState {
    /// `success`, or no status (the blob was not written by a copy).
    Done,
    /// `pending`: still copying.
    Pending,
    /// `aborted` or `failed` (or a status we do not know).
    Failed(String),
}

fn copy_state(status: &str) -> CopyState {
    match status.trim().to_ascii_lowercase().as_str() {
        "" | "success" => CopyState::Done,
        "pending" => CopyState::Pending,
        other => CopyState::Failed(other.to_owned()),
    }
}

/// The client of the presigned requests (its own: `object_store`'s is not public).
fn http_client() -> object_store::Result<&'static reqwest::Client> {
    static CLIENT: OnceLock<std::result::Result<reqwest::Client, String>> = OnceLock::new();
    let client = CLIENT.get_or_init(|| {
        let io = io_options();
        reqwest::Client::builder()
            .timeout(io.timeout)
            .connect_timeout(io.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| e.without_url().to_string())
    });
    client
        .as_ref()
        .map_err(|e| generic(format!("cannot start an HTTP client: {e}").into()))
}

/// Sends the request `build` makes (anew for each try), holding a permit; retries
/// connection failures, 5xx and 429 with backoff within `--io-timeout`, as
/// `object_store`'s retry layer does its own requests. Returns the headers and body of
/// a 2xx answer. Errors never quote the request's URL: a presigned one grants access.
async fn send_retried<F, Fut>(
    url: &ObjectUrl,
    accepted: impl Fn(&str) -> bool,
    build: F,
) -> Result<(reqwest::header::HeaderMap, String)>
where
    F: Fn() -> Fut,
    Fut: Future<Output = object_store::Result<reqwest::RequestBuilder>>,
{
    request(url, async {
        // The budget starts with the permit held: waiting for one is not retrying.
        let started = Instant::now();
        let mut backoff = Duration::from_millis(100);
        loop {
            let failure = match build().await?.send().await {
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    match response.text().await {
                        Ok(body) if status.is_success() && accepted(&body) => {
                            return Ok((headers, body))
                        }
                        // A 2xx whose body is an error (S3's copies): retried as a 5xx.
                        Ok(body) if status.is_success() => http_error(500, &body, "no result"),
                        Ok(body) => {
                            let error = http_error(status.as_u16(), &body, "");
                            if !(status.is_server_error() || status.as_u16() == 429) {
                                return Err(error);
                            }
                            error
                        }
                        Err(e) => generic(Box::new(e.without_url())),
                    }
                }
                Err(e) => generic(Box::new(e.without_url())),
            };
            let left = io_options().timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(failure);
            }
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(Duration::from_secs(15));
        }
    })
    .await
}

fn generic(source: Box<dyn std::error::Error + Send + Sync>) -> object_store::Error {
    object_store::Error::Generic {
        store: "tfshard",
        source,
    }
}

/// An HTTP answer as an `object_store` error, worded as its client words status codes
/// (so [`store_error`] classifies both alike).
fn http_error(status: u16, body: &str, note: &str) -> object_store::Error {
    let code = xml_value(body, "Code").unwrap_or(note);
    generic(format!("Server returned non-2xx status code: {status}: {code}").into())
}

/// Deletes an object; a missing one is fine (blocking).
///
/// # Errors
///
/// A store error naming the URL.
pub fn delete_object(url: &ObjectUrl) -> Result<()> {
    block_on(delete(url))
}

/// Deletes an object (a missing one is fine).
pub(crate) async fn delete(url: &ObjectUrl) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    match request(url, b.store.delete(&key)).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => Ok(()),
        other => other,
    }
}

/// Starts a multipart upload, returning its id.
pub(crate) async fn create_multipart(url: &ObjectUrl) -> Result<String> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    request(url, b.multipart.create_multipart(&key)).await
}

/// Uploads part `index` of an upload.
pub(crate) async fn put_part(
    url: &ObjectUrl,
    id: &str,
    index: usize,
    data: Bytes,
) -> Result<object_store::multipart::PartId> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    request(url, b.multipart.put_part(&key, &id, index, data.into())).await
}

/// Completes an upload from its parts, in order.
pub(crate) async fn complete_multipart(
    url: &ObjectUrl,
    id: &str,
    parts: Vec<object_store::multipart::PartId>,
) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    request(url, b.multipart.complete_multipart(&key, &id, parts)).await?;
    Ok(())
}

/// Aborts an upload (one already gone is fine).
pub(crate) async fn abort_multipart(url: &ObjectUrl, id: &str) -> Result<()> {
    let b = bucket(url)?;
    let key = url.object_key()?;
    let id = id.to_owned();
    match request(url, b.multipart.abort_multipart(&key, &id)).await {
        Err(e) if is_problem(&e, StoreProblem::NotFound) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> ObjectUrl {
        match locate(Path::new(s)).unwrap() {
            Location::Remote(u) => u,
            Location::Local(p) => panic!("{} is local", p.display()),
        }
    }

    #[test]
    fn urls_and_paths() {
        assert_eq!(
            locate(Path::new("out/x")).unwrap(),
            Location::Local("out/x".into())
        );
        assert_eq!(
            locate(Path::new("file:///tmp/x")).unwrap(),
            Location::Local("/tmp/x".into())
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
            let e = locate(Path::new(bad)).unwrap_err();
            assert!(matches!(e.kind(), ErrorKind::InvalidOption { .. }), "{bad}");
        }
    }

    #[test]
    fn copy_states() {
        assert_eq!(copy_state(""), CopyState::Done);
        assert_eq!(copy_state("success"), CopyState::Done);
        assert_eq!(copy_state("Pending"), CopyState::Pending);
        assert_eq!(copy_state("failed"), CopyState::Failed("failed".into()));
        assert_eq!(copy_state("aborted"), CopyState::Failed("aborted".into()));
    }

    #[test]
    fn copy_results_and_errors_are_read_from_xml() {
        let ok = "<CopyPartResult><LastModified>x</LastModified><ETag>&quot;9b2c&quot;</ETag></CopyPartResult>";
        assert_eq!(xml_value(ok, "ETag"), Some("&quot;9b2c&quot;"));
        assert_eq!(xml_value(ok, "Code"), None);
        let e = http_error(403, "<Error><Code>AccessDenied</Code></Error>", "");
        let url = url("s3://b/k");
        assert!(is_problem(
            &store_error(&url, &e),
            StoreProblem::AccessDenied
        ));
        let e = http_error(503, "<Error><Code>SlowDown</Code></Error>", "");
        assert!(is_problem(&store_error(&url, &e), StoreProblem::Throttled));
        let e = http_error(404, "", "");
        assert!(is_problem(&store_error(&url, &e), StoreProblem::NotFound));
        // A copy source replaced since it was listed (x-amz-copy-source-if-match).
        let e = http_error(412, "<Error><Code>PreconditionFailed</Code></Error>", "");
        assert!(is_problem(&store_error(&url, &e), StoreProblem::Changed));
    }

    #[test]
    fn secrets_are_redacted() {
        // The variable is read at redaction time; set a unique one for this test.
        std::env::set_var("AZURE_STORAGE_SAS_KEY", "sv=2026-secret-token");
        assert_eq!(
            redact("GET ...?sv=2026-secret-token failed"),
            "GET ...?[redacted] failed"
        );
        std::env::remove_var("AZURE_STORAGE_SAS_KEY");
    }
}
