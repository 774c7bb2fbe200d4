//! The `http` target: POST the payload to a webhook and read its answer as an [`Outcome`].
//!
//! One pooled client serves every run (rustls, no redirects: a redirected POST would become a
//! GET and lose the payload). Each call carries the task id as `Idempotency-Key`, so a
//! receiver can drop the duplicates that at-least-once delivery allows, and the attempt
//! number as `X-Punctual-Attempt`.
//!
//! | answer | outcome |
//! |---|---|
//! | 2xx | `Success` |
//! | 4xx but 408 and 429 | `GiveUp`: the request itself is wrong and will not improve |
//! | 429 with `Retry-After: <seconds>` | `Retry` after that long |
//! | anything else: 1xx, 3xx, 5xx, 408, 429, timeout, connection error | `Retry` with backoff |

use std::time::Duration;

use punctual_core::Task;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, RETRY_AFTER};

use crate::handler::Outcome;

/// Header carrying the task id.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";
/// Header carrying the attempt number, from 1.
pub const ATTEMPT_HEADER: &str = "X-Punctual-Attempt";
/// Most bytes of a response body read for an error message.
const EXCERPT_BYTES: usize = 1_024;
/// Most characters of a response body quoted in an error message.
const EXCERPT_CHARS: usize = 200;
/// Longest `Retry-After` honoured; longer answers are capped here.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3_600);

/// The webhook caller: one pooled client for all runs.
#[derive(Debug, Clone)]
pub struct HttpTarget {
    client: reqwest::Client,
    secret: Option<crate::sign::WebhookSecret>,
}

impl HttpTarget {
    /// Builds the client once: rustls, pooled, no redirects; calls are signed with `secret`
    /// when there is one.
    pub fn new(secret: Option<crate::sign::WebhookSecret>) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .user_agent(concat!("punctual-worker/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()?;
        Ok(Self { client, secret })
    }

    /// POSTs `task.payload` to `url` and classifies the answer.
    pub async fn call(&self, task: &Task, url: &str, timeout: Duration) -> Outcome {
        let request = self
            .client
            .post(url)
            .timeout(timeout)
            .header(IDEMPOTENCY_KEY, &task.task_id)
            .header(ATTEMPT_HEADER, task.attempt.to_string());
        // The JSON body, signed with the deployment's secret (`X-Punctual-Signature`).
        let sent = crate::sign::signed_json(request, &task.payload, self.secret.as_ref())
            .send()
            .await;
        let mut resp = match sent {
            Ok(resp) => resp,
            Err(e) => return Outcome::retry(describe_error(&e, timeout)),
        };
        let status = resp.status();
        let headers = resp.headers().clone();
        // Read a little of the body: for the error message, and so a small answer leaves the
        // connection reusable. A failure here does not change what the status said.
        let mut body = Vec::new();
        while body.len() < EXCERPT_BYTES {
            match resp.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        classify(status, &headers, &body)
    }
}

/// The outcome a webhook's answer means.
pub fn classify(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Outcome {
    if status.is_success() {
        return Outcome::Success;
    }
    let excerpt = excerpt(body);
    let what = if excerpt.is_empty() {
        format!("http {status}")
    } else {
        format!("http {status}: {excerpt}")
    };
    match status {
        StatusCode::TOO_MANY_REQUESTS => Outcome::Retry {
            error: what,
            after: retry_after(headers),
        },
        StatusCode::REQUEST_TIMEOUT => Outcome::retry(what),
        s if s.is_client_error() => Outcome::give_up(what),
        _ => Outcome::retry(what),
    }
}

/// `Retry-After` in seconds; the HTTP-date form is ignored (the backoff applies).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let secs: u64 = headers
        .get(RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER))
}

/// The start of a body, as one line of text.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(EXCERPT_BYTES)]);
    let mut out: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(EXCERPT_CHARS + 1)
        .collect();
    if out.chars().count() > EXCERPT_CHARS {
        out = out.chars().take(EXCERPT_CHARS).collect();
        out.push('…');
    }
    out
}

/// A transport failure in a few words, without the URL's query string.
fn describe_error(e: &reqwest::Error, timeout: Duration) -> String {
    let kind = if e.is_timeout() {
        format!("timed out after {} ms", timeout.as_millis())
    } else if e.is_connect() {
        "connection failed".to_string()
    } else if e.is_request() || e.is_body() {
        "request failed".to_string()
    } else {
        "http error".to_string()
    };
    // The source chain says why (refused, reset, DNS); the URL is left out on purpose.
    let mut cause = String::new();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        cause = s.to_string();
        src = s.source();
    }
    if cause.is_empty() {
        kind
    } else {
        format!("{kind}: {cause}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn class(code: u16) -> Outcome {
        classify(StatusCode::from_u16(code).unwrap(), &HeaderMap::new(), b"")
    }

    #[test]
    fn statuses_map_to_outcomes() {
        for ok in [200, 201, 202, 204, 299] {
            assert_eq!(class(ok), Outcome::Success, "{ok}");
        }
        for permanent in [400, 401, 403, 404, 410, 422, 499] {
            assert!(
                matches!(class(permanent), Outcome::GiveUp { .. }),
                "{permanent}"
            );
        }
        for transient in [100, 301, 302, 408, 429, 500, 502, 503, 504] {
            assert!(
                matches!(class(transient), Outcome::Retry { after: None, .. }),
                "{transient}"
            );
        }
    }

    #[test]
    fn give_up_quotes_status_and_body() {
        let o = classify(
            StatusCode::BAD_REQUEST,
            &HeaderMap::new(),
            b"{\"error\":\n  \"bad field\"}",
        );
        assert_eq!(
            o,
            Outcome::give_up("http 400 Bad Request: {\"error\": \"bad field\"}")
        );
        let long = vec![b'x'; 5_000];
        let Outcome::GiveUp { reason } = classify(StatusCode::NOT_FOUND, &HeaderMap::new(), &long)
        else {
            panic!()
        };
        assert!(reason.ends_with('…') && reason.len() < 300, "{reason}");
    }

    #[test]
    fn too_many_requests_honours_retry_after_seconds() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, HeaderValue::from_static(" 7 "));
        let o = classify(StatusCode::TOO_MANY_REQUESTS, &h, b"");
        assert_eq!(
            o,
            Outcome::retry_after("http 429 Too Many Requests", Duration::from_secs(7))
        );
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        let o = classify(StatusCode::TOO_MANY_REQUESTS, &h, b"");
        assert!(matches!(o, Outcome::Retry { after: None, .. }));
        h.insert(RETRY_AFTER, HeaderValue::from_static("999999999"));
        let o = classify(StatusCode::TOO_MANY_REQUESTS, &h, b"");
        assert!(matches!(o, Outcome::Retry { after: Some(d), .. } if d == MAX_RETRY_AFTER));
    }
}
