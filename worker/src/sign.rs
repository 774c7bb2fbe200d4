//! Webhook signatures: a receiver can check that a call comes from this deployment and was
//! not replayed long after.
//!
//! Every `http` target call carries
//!
//! ```text
//! X-Punctual-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>
//! ```
//!
//! where `<body>` is the exact bytes sent. The timestamp is inside the MAC, so a receiver that
//! refuses a `t` older than a few minutes refuses replays of captured calls; the
//! `Idempotency-Key` header (the task id) lets it drop the duplicates at-least-once delivery
//! allows. `v1` names the scheme so a second one can be added without breaking receivers.
//! [`verify`] is the receiver's side, in Rust; the README shows it in Python.
//!
//! The secret is one per deployment, given to the worker in
//! [`WorkerConfig::webhook_secret`](crate::WorkerConfig::webhook_secret); without one, calls
//! go unsigned.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header carrying the signature.
pub const SIGNATURE_HEADER: &str = "X-Punctual-Signature";

/// The deployment's signing secret. Its `Debug` output never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Arc<[u8]>);

impl WebhookSecret {
    /// A secret from its bytes.
    pub fn new(bytes: &[u8]) -> Self {
        Self(Arc::from(bytes))
    }

    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(<redacted>)")
    }
}

fn mac(secret: &[u8], timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// The header value for `body` sent at `timestamp` (unix seconds).
pub fn signature(secret: &[u8], timestamp: i64, body: &[u8]) -> String {
    let digest = mac(secret, timestamp, body).finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("t={timestamp},v1={hex}")
}

/// Why a signature was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The header is not `t=<int>,v1=<hex>`.
    #[error("malformed signature header")]
    Malformed,
    /// The timestamp is further from now than the tolerance.
    #[error("timestamp outside the tolerance")]
    Stale,
    /// No `v1` value matches.
    #[error("signature mismatch")]
    Mismatch,
}

/// Checks a received call: `header` is the `X-Punctual-Signature` value, `body` the raw body,
/// `now` unix seconds; a timestamp more than `tolerance_s` away is refused. Compares in
/// constant time.
pub fn verify(
    secret: &[u8],
    header: &str,
    body: &[u8],
    now: i64,
    tolerance_s: i64,
) -> Result<(), VerifyError> {
    let mut timestamp = None;
    let mut candidates = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => timestamp = v.parse::<i64>().ok(),
            Some(("v1", v)) => candidates.push(v.to_owned()),
            _ => {}
        }
    }
    let t = timestamp.ok_or(VerifyError::Malformed)?;
    if candidates.is_empty() {
        return Err(VerifyError::Malformed);
    }
    if (now - t).abs() > tolerance_s {
        return Err(VerifyError::Stale);
    }
    for c in candidates {
        let Some(bytes) = decode_hex(&c) else {
            continue;
        };
        if mac(secret, t, body).verify_slice(&bytes).is_ok() {
            return Ok(());
        }
    }
    Err(VerifyError::Mismatch)
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Sets `payload` as the JSON body of `request` and, when there is a secret, signs it.
pub fn signed_json(
    request: reqwest::RequestBuilder,
    payload: &serde_json::Value,
    secret: Option<&WebhookSecret>,
) -> reqwest::RequestBuilder {
    let body = serde_json::to_vec(payload).unwrap_or_else(|_| b"null".to_vec());
    let request = request.header(reqwest::header::CONTENT_TYPE, "application/json");
    let request = match secret {
        Some(secret) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            request.header(SIGNATURE_HEADER, signature(secret.as_bytes(), now, &body))
        }
        None => request,
    };
    request.body(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_and_a_change_does_not() {
        let s = b"deployment-secret";
        let body = br#"{"order":42}"#;
        let h = signature(s, 1_767_225_600, body);
        assert!(h.starts_with("t=1767225600,v1="));
        assert_eq!(h.len(), "t=1767225600,v1=".len() + 64);
        assert_eq!(verify(s, &h, body, 1_767_225_600 + 10, 300), Ok(()));
        assert_eq!(
            verify(s, &h, br#"{"order":43}"#, 1_767_225_600, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(b"other", &h, body, 1_767_225_600, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(s, &h, body, 1_767_225_600 + 301, 300),
            Err(VerifyError::Stale)
        );
        let moved = h.replace("t=1767225600", "t=1767225601");
        assert_eq!(
            verify(s, &moved, body, 1_767_225_600, 300),
            Err(VerifyError::Mismatch)
        );
        assert_eq!(
            verify(s, "v1=ab", body, 0, 300),
            Err(VerifyError::Malformed)
        );
        assert_eq!(verify(s, "t=1", body, 1, 300), Err(VerifyError::Malformed));
    }

    #[test]
    fn a_known_vector() {
        // Computed independently: printf '1700000000.{}' | openssl dgst -sha256 -hmac k
        assert_eq!(
            signature(b"k", 1_700_000_000, b"{}"),
            "t=1700000000,v1=c6ef4734033cee2367414a0939385eca0397754aa7a59716da7463a9298b5146"
        );
    }
}
