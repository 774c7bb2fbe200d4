//! API keys and roles: who may call what.
//!
//! Every route but `GET /healthz` needs `Authorization: Bearer <key>`. A key has one of three
//! roles, each including the ones below it:
//!
//! ```text
//!   viewer   < operator                       < admin
//!   reads      + changes tasks, replays one     + bulk operations (DLQ redrive)
//!              dead letter
//! ```
//!
//! The role a route needs is [`required_role`]: a function of the method and the route's
//! pattern, so a new route falls under the rule of its method (GET is `viewer`, anything else
//! `operator`) unless it is named as an exception, and an unknown route needs a key too (no
//! route is open by omission). The route test walks every operation of the OpenAPI document
//! and checks each refuses a missing key (401) and a role too weak (403).
//!
//! # Storage
//!
//! Keys are kept only as SHA-256 digests, in memory and on disk. A key is 32 random bytes
//! (256 bits, [`generate_key`]), so a fast hash is enough: the slow hashes (argon2, bcrypt)
//! exist to stretch low-entropy passwords, and would cost every request tens of
//! milliseconds. A presented key is hashed and compared with every stored digest in constant
//! time (`subtle`), so the answer time says nothing about how close a guess was.
//!
//! Keys come from a file (TOML or JSON, a list of `{name, role, key | sha256}`) or from the
//! environment (`role:key,role:key`); reading them is the binary's job, parsing is here.

use std::fmt;
use std::str::FromStr;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::ApiState;
use crate::error::ApiError;

/// What a key may do. Ordered: each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read tasks, dead letters, shards, stats and metrics.
    Viewer,
    /// Also create, cancel, reschedule and replay tasks, and replay or purge one dead letter.
    Operator,
    /// Also bulk operations: redrive the whole DLQ.
    Admin,
}

impl Role {
    /// Every role, weakest first.
    pub const ALL: [Role; 3] = [Role::Viewer, Role::Operator, Role::Admin];

    /// The role's name as written in key files: `viewer`, `operator`, `admin`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "unknown role {other:?}; use viewer, operator or admin"
            )),
        }
    }
}

/// A SHA-256 digest of a key.
pub type KeyDigest = [u8; 32];

/// The digest of `key`, as stored.
pub fn digest(key: &str) -> KeyDigest {
    Sha256::digest(key.as_bytes()).into()
}

/// A digest as lowercase hex, as written in key files.
pub fn digest_hex(d: &KeyDigest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse_hex(s: &str) -> Option<KeyDigest> {
    let s = s.trim();
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// A fresh key: `pk_` and 32 random bytes in hex. Fails only if the OS has no randomness.
pub fn generate_key() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("pk_{}", digest_hex(&bytes)))
}

/// One known key, by its digest.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey {
    /// A name for logs and audits (`ci`, `console`, `generated-admin`).
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// The key's SHA-256 digest.
    pub digest: KeyDigest,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKey")
            .field("name", &self.name)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

/// The keys a server accepts. Empty refuses every request that needs a key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRing {
    keys: Vec<ApiKey>,
}

/// One entry of a key file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// A name for logs.
    #[serde(default)]
    pub name: Option<String>,
    /// `viewer`, `operator` or `admin`.
    pub role: Role,
    /// The key itself (hashed on load and then forgotten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Or its SHA-256 digest in hex, so the file holds no secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// A key file: `[[keys]]` entries (TOML) or `{"keys": [...]}` (JSON).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// The keys.
    pub keys: Vec<KeyEntry>,
}

impl KeyRing {
    /// No keys.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if no key is known.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys (digests only).
    pub fn keys(&self) -> &[ApiKey] {
        &self.keys
    }

    /// Adds a key given in clear; only its digest is kept.
    pub fn add_plain(&mut self, name: impl Into<String>, role: Role, key: &str) {
        self.add_digest(name, role, digest(key));
    }

    /// Adds a key by its digest.
    pub fn add_digest(&mut self, name: impl Into<String>, role: Role, digest: KeyDigest) {
        self.keys.push(ApiKey {
            name: name.into(),
            role,
            digest,
        });
    }

    /// A ring of one key given in clear.
    pub fn single(role: Role, key: &str) -> Self {
        let mut ring = Self::new();
        ring.add_plain(role.as_str(), role, key);
        ring
    }

    /// Adds every key of `other`.
    pub fn extend(&mut self, other: KeyRing) {
        self.keys.extend(other.keys);
    }

    /// The key matching `presented`, comparing digests in constant time against every key.
    pub fn verify(&self, presented: &str) -> Option<&ApiKey> {
        let d = digest(presented);
        let mut found = None;
        for k in &self.keys {
            if bool::from(k.digest.ct_eq(&d)) && found.is_none() {
                found = Some(k);
            }
        }
        found
    }

    /// Parses a key file's entries. Each needs a non-empty `key` or a hex `sha256`, not both.
    pub fn from_file(file: KeyFile) -> Result<Self, String> {
        let mut ring = Self::new();
        for (i, e) in file.keys.into_iter().enumerate() {
            let name = e.name.unwrap_or_else(|| format!("key-{i}"));
            match (e.key, e.sha256) {
                (Some(k), None) if !k.trim().is_empty() => ring.add_plain(name, e.role, k.trim()),
                (None, Some(h)) => {
                    let d = parse_hex(&h)
                        .ok_or_else(|| format!("keys[{i}].sha256: not 64 hex digits"))?;
                    ring.add_digest(name, e.role, d);
                }
                _ => return Err(format!("keys[{i}]: give a non-empty `key` or a `sha256`")),
            }
        }
        Ok(ring)
    }

    /// Parses a TOML key file.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let file: KeyFile = toml::from_str(text).map_err(|e| e.to_string())?;
        Self::from_file(file)
    }

    /// Parses a JSON key file.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: KeyFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        Self::from_file(file)
    }

    /// Parses the environment's form: `role:key` pairs separated by commas
    /// (`admin:k1,viewer:k2`). Blank entries are ignored.
    pub fn from_env_value(value: &str) -> Result<Self, String> {
        let mut ring = Self::new();
        for (i, part) in value.split(',').map(str::trim).enumerate() {
            if part.is_empty() {
                continue;
            }
            let (role, key) = part
                .split_once(':')
                .ok_or_else(|| format!("entry {i}: expected role:key"))?;
            let role: Role = role.parse().map_err(|e| format!("entry {i}: {e}"))?;
            if key.trim().is_empty() {
                return Err(format!("entry {i}: empty key"));
            }
            ring.add_plain(format!("env-{i}"), role, key.trim());
        }
        Ok(ring)
    }

    /// The ring as a TOML key file holding digests only.
    pub fn to_toml_digests(&self) -> String {
        let file = KeyFile {
            keys: self
                .keys
                .iter()
                .map(|k| KeyEntry {
                    name: Some(k.name.clone()),
                    role: k.role,
                    key: None,
                    sha256: Some(digest_hex(&k.digest)),
                })
                .collect(),
        };
        toml::to_string(&file).unwrap_or_default()
    }
}

/// The role a route needs; `None` for the routes open to all (`GET /healthz`).
///
/// `path` is the route's pattern (`/v1/tasks/{id}`), or the raw path when no route matched.
pub fn required_role(method: &Method, path: &str) -> Option<Role> {
    match (method, path) {
        (&Method::GET | &Method::HEAD, "/healthz") => None,
        (_, "/v1/dlq/redrive") => Some(Role::Admin),
        // Purging one letter loses it for good (its task stays): an operator's decision, like
        // replaying it; the rule for non-GET methods says so already, named here to be seen.
        (&Method::DELETE, "/v1/dlq/{id}") => Some(Role::Operator),
        (&Method::GET | &Method::HEAD, _) => Some(Role::Viewer),
        _ => Some(Role::Operator),
    }
}

/// Middleware: refuses a request without a known key (401) or whose key's role is below the
/// route's (403), before its body is read.
pub(crate) async fn require_key(
    State(state): State<ApiState>,
    matched: Option<MatchedPath>,
    req: Request,
    next: Next,
) -> Response {
    let path = matched
        .as_ref()
        .map_or_else(|| req.uri().path().to_owned(), |m| m.as_str().to_owned());
    let Some(needed) = required_role(req.method(), &path) else {
        return next.run(req).await;
    };
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    let Some(presented) = presented else {
        return ApiError::Unauthorized(
            "this route needs an API key: send `Authorization: Bearer <key>`".into(),
        )
        .into_response();
    };
    let Some(key) = state.config.keys.verify(&presented) else {
        return ApiError::Unauthorized("the API key is not known to this server".into())
            .into_response();
    };
    if key.role < needed {
        return ApiError::Forbidden(format!(
            "the key `{}` has role {}; {} {} needs {needed} or above",
            key.name,
            key.role,
            req.method(),
            path
        ))
        .into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_verify_by_digest_only() {
        let mut ring = KeyRing::new();
        ring.add_plain("a", Role::Admin, "secret-a");
        ring.add_digest("v", Role::Viewer, digest("secret-v"));
        assert_eq!(ring.verify("secret-a").unwrap().role, Role::Admin);
        assert_eq!(ring.verify("secret-v").unwrap().name, "v");
        assert!(ring.verify("secret").is_none());
        assert!(ring.verify("").is_none());
        assert!(!format!("{ring:?}").contains("secret"));
    }

    #[test]
    fn key_files_and_environment_parse() {
        let toml = format!(
            "[[keys]]\nname = \"ci\"\nrole = \"operator\"\nkey = \"k1\"\n\n[[keys]]\nrole = \"viewer\"\nsha256 = \"{}\"\n",
            digest_hex(&digest("k2"))
        );
        let ring = KeyRing::from_toml(&toml).unwrap();
        assert_eq!(ring.verify("k1").unwrap().role, Role::Operator);
        assert_eq!(ring.verify("k2").unwrap().role, Role::Viewer);
        let again = KeyRing::from_toml(&ring.to_toml_digests()).unwrap();
        assert_eq!(again, ring);
        let json = r#"{"keys":[{"role":"admin","key":"k3"}]}"#;
        assert_eq!(
            KeyRing::from_json(json).unwrap().verify("k3").unwrap().role,
            Role::Admin
        );
        assert!(KeyRing::from_json(r#"{"keys":[{"role":"admin"}]}"#).is_err());
        assert!(KeyRing::from_json(r#"{"keys":[{"role":"root","key":"x"}]}"#).is_err());
        assert!(KeyRing::from_toml("[[keys]]\nrole = \"admin\"\nsha256 = \"zz\"\n").is_err());
        let env = KeyRing::from_env_value("admin:a1, viewer:v1,").unwrap();
        assert_eq!(env.keys().len(), 2);
        assert_eq!(env.verify("v1").unwrap().role, Role::Viewer);
        assert!(KeyRing::from_env_value("admin").is_err());
        assert!(KeyRing::from_env_value("boss:x").is_err());
    }

    #[test]
    fn generated_keys_are_long_and_distinct() {
        let a = generate_key().unwrap();
        let b = generate_key().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 64);
    }

    #[test]
    fn roles_by_route() {
        assert_eq!(required_role(&Method::GET, "/healthz"), None);
        assert_eq!(
            required_role(&Method::POST, "/healthz"),
            Some(Role::Operator)
        );
        assert_eq!(required_role(&Method::GET, "/v1/tasks"), Some(Role::Viewer));
        assert_eq!(
            required_role(&Method::POST, "/v1/tasks"),
            Some(Role::Operator)
        );
        assert_eq!(
            required_role(&Method::POST, "/v1/dlq/redrive"),
            Some(Role::Admin)
        );
        assert_eq!(required_role(&Method::GET, "/nowhere"), Some(Role::Viewer));
        assert_eq!(
            required_role(&Method::GET, "/v1/dlq/{id}"),
            Some(Role::Viewer)
        );
        assert_eq!(
            required_role(&Method::DELETE, "/v1/dlq/{id}"),
            Some(Role::Operator)
        );
    }
}
