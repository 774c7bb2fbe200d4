//! Extractors whose every rejection is an [`ApiError`], so a malformed request gets the same
//! problem+json answer as a refused field.
//!
//! axum's own `Json` answers plain text and folds the field into its message; this one reads
//! the body under the router's `DefaultBodyLimit` (413 beyond it), requires a JSON media type
//! (415 otherwise), and deserializes through `serde_path_to_error` so the field at fault comes
//! out separately: a syntax error is 400, a well-formed body of the wrong shape (unknown
//! field, wrong type, missing field) is 422 naming the field.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body.
#[derive(Debug)]
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let body = Bytes::from_request(req, state).await.map_err(body_error)?;
        parse_json(&body).map(ApiJson)
    }
}

/// A JSON request body that may be absent: an empty body is `None`, whatever its headers.
#[derive(Debug)]
pub(crate) struct OptionalJson<T>(pub Option<T>);

impl<S, T> FromRequest<S> for OptionalJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let headers = req.headers().clone();
        let body = Bytes::from_request(req, state).await.map_err(body_error)?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(None));
        }
        require_json(&headers)?;
        parse_json(&body).map(|v| OptionalJson(Some(v)))
    }
}

/// 415 unless the content type is `application/json` or `application/<something>+json`.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Err(ApiError::UnsupportedMediaType(
            "no Content-Type; send the body as application/json".into(),
        ));
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"));
    if json {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(format!(
            "Content-Type {:?} is not JSON; send the body as application/json",
            value.to_str().unwrap_or("(not text)")
        )))
    }
}

/// The body could not be read: too large (413) or broken off (400).
fn body_error(rejection: BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::PayloadTooLarge(
            "the request body is larger than the server accepts; send fewer tasks per batch or a smaller payload"
                .into(),
        )
    } else {
        ApiError::BadRequest {
            field: None,
            detail: rejection.body_text(),
        }
    }
}

/// Deserializes a JSON body: 400 for a syntax error, 422 naming the field for a wrong shape.
pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        json_error(inner, (path != ".").then_some(path))
    })?;
    de.end().map_err(|e| json_error(e, None))?;
    Ok(value)
}

fn json_error(e: serde_json::Error, field: Option<String>) -> ApiError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ApiError::Invalid {
            field,
            detail: format!("the JSON body does not fit: {e}"),
        },
        Category::Syntax | Category::Eof | Category::Io => ApiError::BadRequest {
            field: None,
            detail: format!("the body is not valid JSON: {e}"),
        },
    }
}

/// The pairs of a query string; 400 if it cannot be decoded.
pub(crate) fn query_pairs(raw: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    serde_urlencoded::from_str(raw.unwrap_or("")).map_err(|e| ApiError::BadRequest {
        field: None,
        detail: format!("the query string cannot be decoded: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::validate::CreateTask;

    fn field(body: &str) -> (u16, Option<String>) {
        let e = parse_json::<CreateTask>(body.as_bytes()).unwrap_err();
        (e.status().as_u16(), e.field().map(str::to_owned))
    }

    #[test]
    fn shape_errors_name_the_field() {
        assert_eq!(
            field(r#"{"max_attempts":"x"}"#),
            (422, Some("max_attempts".into()))
        );
        assert_eq!(
            field(r#"{"backoff":{"base_ms":1,"max_ms":2,"x":3}}"#),
            (422, Some("backoff.x".into()))
        );
        assert_eq!(field(r#"{"colour":1}"#), (422, Some("colour".into())));
        assert_eq!(field(r#"[1]"#), (422, Some("[0]".into())));
        assert_eq!(field(r#""a string""#), (422, None));
        assert_eq!(
            field(r#"{"target":{"type":"nope"}}"#).1,
            Some("target.type".into())
        );
    }

    #[test]
    fn syntax_errors_are_400() {
        assert_eq!(field(r#"{"delay":"#), (400, None));
        assert_eq!(field(r#"{} x"#), (400, None));
        assert_eq!(field(""), (400, None));
    }

    #[test]
    fn json_media_types() {
        let with = |ct: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, ct.parse().unwrap());
            require_json(&h).is_ok()
        };
        assert!(with("application/json"));
        assert!(with("Application/JSON; charset=utf-8"));
        assert!(with("application/merge-patch+json"));
        assert!(!with("text/plain"));
        assert!(!with("application/x-www-form-urlencoded"));
        assert!(require_json(&HeaderMap::new()).is_err());
    }
}
