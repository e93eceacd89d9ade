//! The clients: one `object_store` client per bucket and settings, the runtime every
//! store call blocks on, the `--io-concurrency` permits, the backstop timeout, and the
//! client of the presigned requests `object_store` has no call for, with its retries.
//!
//! Settings are values ([`IoOptions`]), carried by each [`ObjectUrl`]: two runs in one
//! process with different settings get clients and permits of their own.

use std::cell::Cell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::multipart::MultipartStore;
use object_store::signer::Signer;
use object_store::{ClientConfigKey, ClientOptions, ObjectStore};

use super::errors::{generic, store_error, HttpStatus, StoreProblem};
use super::settings::IoOptions;
use super::url::{ObjectUrl, Scheme};
use crate::error::{Error, ErrorKind, Result};

/// One store bucket (or container) and its clients.
pub(super) struct Bucket {
    pub(super) store: Arc<dyn ObjectStore>,
    pub(super) multipart: Arc<dyn MultipartStore>,
    /// Presigns the requests `object_store` has no call for (S3's UploadPartCopy, Azure's
    /// Get Blob Properties for a copy's status), sent by [`http_client`].
    pub(super) signer: Arc<dyn Signer>,
    /// The credential is a SAS token, which cannot presign another request.
    pub(super) sas_token: bool,
}

/// The clients made so far, by scheme, bucket and settings.
type Buckets = Mutex<HashMap<(Scheme, String, IoOptions), Arc<Bucket>>>;

fn buckets() -> &'static Buckets {
    static BUCKETS: PerProcess<Buckets> = PerProcess::new();
    BUCKETS.get(Default::default)
}

/// A process-wide value (the I/O runtime, clients with their connection pools, the
/// permits) made again in a forked child, whose copy of the parent's has no threads and
/// shares the parent's sockets: a PyTorch DataLoader forks its workers after the
/// dataset found its shards in the store. The parent's copy is left alone in the child
/// (dropping it there would wait for threads that do not exist).
struct PerProcess<T: 'static> {
    made: Mutex<Option<(u32, &'static T)>>,
}

impl<T> PerProcess<T> {
    const fn new() -> Self {
        PerProcess {
            made: Mutex::new(None),
        }
    }

    /// This process's value, made by `make` the first time it asks.
    fn get(&self, make: impl FnOnce() -> T) -> &'static T {
        let pid = std::process::id();
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        match *made {
            Some((owner, value)) if owner == pid => value,
            _ => {
                let value: &'static T = Box::leak(Box::new(make()));
                *made = Some((pid, value));
                value
            }
        }
    }
}

pub(super) fn bucket(url: &ObjectUrl) -> Result<Arc<Bucket>> {
    let io = url.io();
    let id = (url.scheme(), url.root().to_owned(), io);
    let mut all = buckets().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(b) = all.get(&id) {
        return Ok(b.clone());
    }
    let timeout = millis(io.timeout);
    let connect = millis(io.timeout.min(Duration::from_secs(10)));
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
        Error::invalid_option(
            "URL",
            format!("{url}: {}", super::errors::redact(&e.to_string())),
        )
    };
    // One client per scheme, configured alike: the environment, then our timeouts, and
    // the connector that keeps each failed answer's status.
    macro_rules! client {
        ($builder:ty, $client_key:path, $sas:expr) => {{
            let builder = <$builder>::from_env()
                .with_url(url.root())
                .with_config($client_key(ClientConfigKey::Timeout), &timeout)
                .with_config($client_key(ClientConfigKey::ConnectTimeout), &connect)
                .with_retry(retry)
                .with_http_connector(StatusKeepingConnector);
            let sas_token = $sas(&builder);
            let store = Arc::new(builder.build().map_err(bad)?);
            Bucket {
                store: store.clone(),
                multipart: store.clone(),
                signer: store,
                sas_token,
            }
        }};
    }
    let bucket = match url.scheme() {
        Scheme::S3 => client!(
            object_store::aws::AmazonS3Builder,
            object_store::aws::AmazonS3ConfigKey::Client,
            |_: &object_store::aws::AmazonS3Builder| false
        ),
        Scheme::Gcs => client!(
            object_store::gcp::GoogleCloudStorageBuilder,
            object_store::gcp::GoogleConfigKey::Client,
            |_: &object_store::gcp::GoogleCloudStorageBuilder| false
        ),
        Scheme::Azure => client!(
            object_store::azure::MicrosoftAzureBuilder,
            object_store::azure::AzureConfigKey::Client,
            |b: &object_store::azure::MicrosoftAzureBuilder| b
                .get_config_value(&object_store::azure::AzureConfigKey::SasKey)
                .is_some()
        ),
    };
    let bucket = Arc::new(bucket);
    all.insert(id, bucket.clone());
    Ok(bucket)
}

fn millis(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

tokio::task_local! {
    /// The status of the last answer in the request running on this task:
    /// `object_store` folds some statuses (429, 5xx) into a generic error, and
    /// [`store_error`] classifies by this instead of by the error's words.
    static LAST_STATUS: Cell<Option<u16>>;
}

/// `object_store`'s own HTTP client, noting each failed answer's status in
/// [`LAST_STATUS`].
#[derive(Debug)]
struct StatusKeeping(HttpClient);

type Answer<'a> =
    Pin<Box<dyn Future<Output = std::result::Result<HttpResponse, HttpError>> + Send + 'a>>;

impl HttpService for StatusKeeping {
    fn call<'a, 'b>(&'a self, req: HttpRequest) -> Answer<'b>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let response = self.0.execute(req).await?;
            // Every answer's, so that what is kept is the last one's.
            let status = response.status().as_u16();
            let _ = LAST_STATUS.try_with(|s| s.set(Some(status)));
            Ok(response)
        })
    }
}

/// Makes `object_store`'s usual client, wrapped in [`StatusKeeping`].
#[derive(Debug)]
struct StatusKeepingConnector;

impl HttpConnector for StatusKeepingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(StatusKeeping(inner)))
    }
}

/// The runtime every store call blocks on (two I/O threads; requests are bounded by
/// the permits, not the threads).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: PerProcess<tokio::runtime::Runtime> = PerProcess::new();
    RUNTIME.get(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tfshard-io")
            .enable_all()
            .build()
            .expect("the I/O runtime starts (threads and timers only)")
    })
}

/// The `--io-concurrency` permits of these settings.
fn permits(io: IoOptions) -> Arc<tokio::sync::Semaphore> {
    type Permits = Mutex<HashMap<IoOptions, Arc<tokio::sync::Semaphore>>>;
    static PERMITS: PerProcess<Permits> = PerProcess::new();
    let mut all = PERMITS
        .get(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    all.entry(io)
        .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(io.concurrency.max(1))))
        .clone()
}

/// Runs one request: holds a permit, and gives up after the timeout (the client's own
/// timeouts and retry budget come first; this is the backstop that nothing outlives).
pub(super) async fn request<T>(
    url: &ObjectUrl,
    f: impl Future<Output = object_store::Result<T>>,
) -> Result<T> {
    let io = url.io();
    let permits = permits(io);
    let _permit = permits
        .acquire()
        .await
        .expect("the semaphore is never closed");
    let limit = io.timeout * 2 + Duration::from_secs(1);
    let kept = LAST_STATUS.scope(Cell::new(None), async {
        let result = f.await;
        (result, LAST_STATUS.with(Cell::get))
    });
    match tokio::time::timeout(limit, kept).await {
        Ok((Ok(v), _)) => Ok(v),
        Ok((Err(e), status)) => Err(store_error(url, &e, status)),
        Err(_) => Err(Error::new(ErrorKind::Store {
            problem: StoreProblem::Unreachable,
            detail: format!("no answer within {limit:?}"),
        })
        .with_file(url.to_path())),
    }
}

/// Blocks on a future on the I/O runtime.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// The I/O runtime's handle, for a library that runs its own store calls on it
/// (delta_kernel's engine).
pub(crate) fn runtime_handle() -> tokio::runtime::Handle {
    runtime().handle().clone()
}

/// Spawns a future on the I/O runtime.
pub(crate) fn spawn<F>(f: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    runtime().spawn(f)
}

impl Bucket {
    /// A `method` request to `key`, presigned by the signer (the query and headers of
    /// `options` in the signature), on the client of `url`'s settings.
    pub(super) async fn presigned(
        &self,
        url: &ObjectUrl,
        method: object_store::signer::Method,
        key: &object_store::path::Path,
        options: &object_store::signer::SignedUrlOptions,
    ) -> object_store::Result<reqwest::RequestBuilder> {
        let signed = self
            .signer
            .signed_url_opts(method.clone(), key, PRESIGNED_FOR, options)
            .await?;
        Ok(http_client(url.io())?.request(method, signed.as_str()))
    }
}

/// How long a presigned request stays valid (it is sent at once; retries sign anew).
pub(super) const PRESIGNED_FOR: Duration = Duration::from_secs(15 * 60);

/// The client of the presigned requests, per settings (its own: `object_store`'s is not
/// public).
pub(super) fn http_client(io: IoOptions) -> object_store::Result<reqwest::Client> {
    type Clients = Mutex<HashMap<IoOptions, std::result::Result<reqwest::Client, String>>>;
    static CLIENTS: PerProcess<Clients> = PerProcess::new();
    let mut all = CLIENTS
        .get(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let client = all.entry(io).or_insert_with(|| {
        reqwest::Client::builder()
            .timeout(io.timeout)
            .connect_timeout(io.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| e.without_url().to_string())
    });
    client
        .clone()
        .map_err(|e| generic(format!("cannot start an HTTP client: {e}").into()))
}

/// Sends the request `build` makes (anew for each try), holding a permit; retries
/// connection failures, 5xx and 429 with backoff within `--io-timeout`, as
/// `object_store`'s retry layer does its own requests. Returns the headers and body of
/// a 2xx answer. Errors never quote the request's URL: a presigned one grants access.
pub(super) async fn send_retried<F, Fut>(
    url: &ObjectUrl,
    accepted: impl Fn(&str) -> bool,
    build: F,
) -> Result<(reqwest::header::HeaderMap, String)>
where
    F: Fn() -> Fut,
    Fut: Future<Output = object_store::Result<reqwest::RequestBuilder>>,
{
    let timeout = url.io().timeout;
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
                        Ok(body) if status.is_success() => HttpStatus::error(500, &body),
                        Ok(body) => {
                            let error = HttpStatus::error(status.as_u16(), &body);
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
            let left = timeout.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(failure);
            }
            tokio::time::sleep(backoff.min(left)).await;
            backoff = (backoff * 2).min(Duration::from_secs(15));
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::url::{locate, Place};

    /// Each settings value has its own permits and clients; the first run's
    /// settings are not the process's.
    #[test]
    fn each_settings_value_has_its_own_permits_and_clients() {
        let a = IoOptions::new().with_concurrency(3);
        let b = IoOptions::new()
            .with_concurrency(5)
            .with_timeout(Duration::from_secs(7));
        assert_eq!(permits(a).available_permits(), 3);
        assert_eq!(permits(b).available_permits(), 5);
        assert!(Arc::ptr_eq(&permits(a), &permits(a)));
        let at = |io| match locate(std::path::Path::new("s3://settings-test/k"), io).unwrap() {
            Place::Remote(url) => url,
            Place::Local(_) => unreachable!("a URL"),
        };
        let (ua, ub) = (at(a), at(b));
        assert!(Arc::ptr_eq(&bucket(&ua).unwrap(), &bucket(&ua).unwrap()));
        assert!(!Arc::ptr_eq(&bucket(&ua).unwrap(), &bucket(&ub).unwrap()));
        assert_eq!(IoOptions::new().with_concurrency(0).concurrency, 1);
    }
}
