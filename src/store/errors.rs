//! Store errors: what went wrong, as the one line says it ([`StoreProblem`]), classified
//! from typed values: `object_store`'s error variant, the HTTP status of the answer
//! (kept by the client's connector where `object_store` folds it into a generic error,
//! and carried by [`HttpStatus`] for our own presigned requests), and the transport
//! failure's kind. Never by searching an error's words.

use std::fmt;

use object_store::client::{HttpError, HttpErrorKind};

use super::url::ObjectUrl;
use crate::error::{Error, ErrorKind};

pub use crate::error::StoreProblem;

/// Replaces the values of the secret environment variables in `text` (an error from a
/// store may quote a request): no secret is ever printed.
pub(super) fn redact(text: &str) -> String {
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

/// Classifies an `object_store` error; `status` is the HTTP status of the last failed
/// answer of the request, when the client saw one.
pub(super) fn store_error(url: &ObjectUrl, e: &object_store::Error, status: Option<u16>) -> Error {
    use object_store::Error as E;
    let whole = redact(&e.to_string());
    let cause = redact(&root_cause(e));
    // The evidence, most direct first: object_store's own variant; our presigned
    // request's answer; a request that got no answer; the status of the last answer
    // the client saw in this request (object_store folds 429, 5xx and a listing's 404
    // into a generic error).
    let problem = match e {
        E::NotFound { .. } => StoreProblem::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => StoreProblem::AccessDenied,
        E::Precondition { .. } => StoreProblem::Changed,
        E::AlreadyExists { .. } => StoreProblem::AlreadyExists,
        _ => match find::<HttpStatus>(e) {
            Some(own) => match own.status {
                401 | 403 => StoreProblem::AccessDenied,
                404 => StoreProblem::NotFound,
                // A copy source replaced since it was listed (x-amz-copy-source-if-match).
                412 => StoreProblem::Changed,
                status => of_status(status, own.code.as_deref()),
            },
            None if no_answer(e) => StoreProblem::Unreachable,
            None => match status {
                Some(401 | 403) => StoreProblem::AccessDenied,
                // A listing's 404 comes generic (a missing bucket).
                Some(404) => StoreProblem::NotFound,
                Some(412) => StoreProblem::Changed,
                Some(status) => of_status(status, xml_value(&whole, "Code")),
                None => StoreProblem::Other,
            },
        },
    };
    let timeout = url.io().timeout;
    let detail = match problem {
        // The store's own words can quote the key id; the hint is what helps.
        StoreProblem::AccessDenied => "check the credentials (AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_KEY) \
             and the bucket's policy"
            .to_owned(),
        StoreProblem::Unreachable => {
            format!("{cause} (after retries for up to {timeout:?}; see --io-timeout)")
        }
        StoreProblem::Throttled => {
            format!("retries ran out after {timeout:?} (--io-timeout): {cause}")
        }
        StoreProblem::Changed => {
            "its ETag is not the one this run started with; rerun on a stable input".to_owned()
        }
        // The body's <Code> names what is missing (NoSuchBucket, NoSuchKey, ...).
        StoreProblem::NotFound => match find::<HttpStatus>(e)
            .and_then(|s| s.code.clone())
            .or_else(|| xml_value(&whole, "Code").map(str::to_owned))
        {
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

/// A failed answer's problem by its status, or for an answer of 200 that carries an
/// error (S3's copies and completions), by its XML `<Code>`.
fn of_status(status: u16, code: Option<&str>) -> StoreProblem {
    match (status, code) {
        // S3's SlowDown and Azure's ServerBusy are 503s.
        (429 | 503, _) | (200, Some("SlowDown" | "ServerBusy")) => StoreProblem::Throttled,
        (408 | 504, _) | (_, Some("RequestTimeout")) => StoreProblem::Unreachable,
        _ => StoreProblem::Other,
    }
}

/// The first error of type `T` in `e`'s chain of causes.
fn find<'e, T: std::error::Error + 'static>(
    e: &'e (dyn std::error::Error + 'static),
) -> Option<&'e T> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

/// Whether the request never got an answer: no connection, a timeout, a request cut
/// off (the kinds `object_store`'s client and reqwest give such failures).
fn no_answer(e: &object_store::Error) -> bool {
    if let Some(http) = find::<HttpError>(e) {
        return matches!(
            http.kind(),
            HttpErrorKind::Connect
                | HttpErrorKind::Request
                | HttpErrorKind::Timeout
                | HttpErrorKind::Interrupted
        );
    }
    find::<reqwest::Error>(e).is_some_and(|r| r.is_connect() || r.is_timeout() || r.is_request())
}

/// At most about 300 characters of a store's words, on one line.
pub(super) fn shorten(text: &str) -> String {
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match one_line.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &one_line[..i]),
        None => one_line,
    }
}

/// Whether a 2xx body of a copy or a multipart completion is a success: S3 may answer
/// 200 and still carry an error in the body; only an ETag is success.
pub(super) fn has_etag(body: &str) -> bool {
    xml_value(body, "ETag").is_some() && xml_value(body, "Code").is_none()
}

/// The text of the first `<tag>` element of an XML body.
pub(super) fn xml_value<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = text.find(&open)? + open.len();
    let end = start + text[start..].find(&format!("</{tag}>"))?;
    Some(&text[start..end])
}

pub(super) fn generic(source: Box<dyn std::error::Error + Send + Sync>) -> object_store::Error {
    object_store::Error::Generic {
        store: "tfshard",
        source,
    }
}

/// The answer to one of our own (presigned) requests that was not a success: its status
/// and the `<Code>` of its XML body.
#[derive(Debug)]
pub(super) struct HttpStatus {
    pub(super) status: u16,
    pub(super) code: Option<String>,
}

impl HttpStatus {
    /// The answer as an `object_store` error ([`store_error`] finds it in the chain).
    pub(super) fn error(status: u16, body: &str) -> object_store::Error {
        let code = xml_value(body, "Code").map(str::to_owned);
        generic(Box::new(HttpStatus { status, code }))
    }
}

impl fmt::Display for HttpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the store answered {}", self.status)?;
        match &self.code {
            Some(code) => write!(f, ": {code}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for HttpStatus {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::settings::IoOptions;
    use crate::store::url::{locate, Place};

    fn url(s: &str) -> ObjectUrl {
        match locate(std::path::Path::new(s), IoOptions::default()).unwrap() {
            Place::Remote(u) => u,
            Place::Local(p) => panic!("{} is local", p.display()),
        }
    }

    fn problem(e: &object_store::Error, status: Option<u16>) -> StoreProblem {
        match store_error(&url("s3://b/k"), e, status).kind() {
            ErrorKind::Store { problem, .. } => problem.clone(),
            other => panic!("{other}"),
        }
    }

    /// Classified from statuses and error types, never from words: a URL's
    /// port or a key may hold "503" or "timeout".
    #[test]
    fn store_errors_are_classified_from_typed_values() {
        let ours = |status, body| HttpStatus::error(status, body);
        let denied = ours(403, "<Error><Code>AccessDenied</Code></Error>");
        assert_eq!(problem(&denied, None), StoreProblem::AccessDenied);
        let slow = ours(503, "<Error><Code>SlowDown</Code></Error>");
        assert_eq!(problem(&slow, None), StoreProblem::Throttled);
        assert_eq!(problem(&ours(404, ""), None), StoreProblem::NotFound);
        // A copy source replaced since it was listed (x-amz-copy-source-if-match).
        let replaced = ours(412, "<Error><Code>PreconditionFailed</Code></Error>");
        assert_eq!(problem(&replaced, None), StoreProblem::Changed);
        assert_eq!(problem(&ours(500, ""), None), StoreProblem::Other);
        // object_store's generic error, classified by the status its client kept.
        let words = generic("Server returned non-2xx status code: 503: timeout at :4040".into());
        assert_eq!(problem(&words, Some(429)), StoreProblem::Throttled);
        assert_eq!(problem(&words, Some(401)), StoreProblem::AccessDenied);
        assert_eq!(
            problem(&words, None),
            StoreProblem::Other,
            "words are not read"
        );
        let missing = object_store::Error::NotFound {
            path: "k".into(),
            source: "gone".into(),
        };
        assert_eq!(problem(&missing, None), StoreProblem::NotFound);
        // A transport failure without an answer.
        let refused = generic(Box::new(HttpError::new(
            HttpErrorKind::Connect,
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
        )));
        assert_eq!(problem(&refused, None), StoreProblem::Unreachable);
        // A request that got no answer in the end is unreachable, whatever
        // an earlier try was answered; our own answer outranks a kept status.
        assert_eq!(problem(&refused, Some(503)), StoreProblem::Unreachable);
        assert_eq!(problem(&ours(412, ""), Some(403)), StoreProblem::Changed);
        assert_eq!(problem(&words, Some(404)), StoreProblem::NotFound);
        assert_eq!(problem(&words, Some(504)), StoreProblem::Unreachable);
        let busy = generic("<Error><Code>SlowDown</Code></Error>".into());
        assert_eq!(problem(&busy, Some(200)), StoreProblem::Throttled);
        let detail = store_error(&url("s3://b/k"), &ours(404, "<Code>NoSuchKey</Code>"), None);
        assert!(
            detail.to_string().contains("the store says NoSuchKey"),
            "{detail}"
        );
    }

    #[test]
    fn copy_results_and_errors_are_read_from_xml() {
        let ok = "<CopyPartResult><LastModified>x</LastModified><ETag>&quot;9b2c&quot;</ETag></CopyPartResult>";
        assert_eq!(xml_value(ok, "ETag"), Some("&quot;9b2c&quot;"));
        assert_eq!(xml_value(ok, "Code"), None);
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
