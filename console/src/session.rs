//! Stateless sessions: a signed cookie, and CSRF tokens derived from it.
//!
//! The console runs wherever the API runs: one `punctual serve`, several behind a balancer,
//! or a Lambda behind a Function URL where every request may meet a fresh instance. So a
//! session lives in the cookie, not in the server:
//!
//! ```text
//!   cookie  = base64url(payload) "." base64url(HMAC-SHA256(secret, "session:" payload))
//!   payload = "v1|" sid "|" role "|" key-name "|" key-digest-prefix "|" expires (epoch s)
//!   csrf    = base64url(HMAC-SHA256(secret, "csrf:" sid))
//! ```
//!
//! Any instance holding the same secret verifies a cookie with one HMAC and no lookup. The
//! payload names the key that logged in (by name and the first 16 hex digits of its SHA-256
//! digest, which identify it without revealing it); every request checks that key is still in
//! the ring with the same role, so removing a key or changing its role ends its sessions at
//! the next restart. The expiry is inside the signed payload, so a stolen cookie dies with it
//! whatever the browser does.
//!
//! The CSRF token is bound to the session id: a token from another session, or none, is
//! refused. A cross-site page cannot read it (same-origin policy) and the cookie is also
//! `SameSite=Strict`, so a forged post fails twice. The login form, which has no session yet,
//! uses the same scheme over a random nonce kept in a short-lived pre-login cookie
//! (double-submit).
//!
//! Every comparison of a MAC is constant-time (`hmac`'s `verify_slice`, `subtle`).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use punctual_api::{KeyRing, Role};
use sha2::Sha256;
use subtle::ConstantTimeEq;

type HmacSha256 = Hmac<Sha256>;

/// Name of the session cookie.
pub const SESSION_COOKIE: &str = "punctual_session";
/// Name of the pre-login cookie that carries the login form's nonce.
pub const LOGIN_COOKIE: &str = "punctual_login";
/// Name of the one-shot message cookie shown after a redirect.
pub const FLASH_COOKIE: &str = "punctual_flash";
/// Path every console cookie is scoped to.
pub const COOKIE_PATH: &str = "/console";

/// The secret that signs sessions and CSRF tokens. Every instance serving one console must
/// hold the same one.
#[derive(Clone)]
pub struct SessionSecret(Vec<u8>);

impl std::fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSecret(..)")
    }
}

impl SessionSecret {
    /// A secret from configured bytes (at least 16, or it is refused: a short secret can be
    /// guessed offline from one cookie).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, String> {
        let bytes = bytes.into();
        if bytes.len() < 16 {
            return Err(format!(
                "the session secret has {} bytes; give at least 16 (32 random bytes are best)",
                bytes.len()
            ));
        }
        Ok(Self(bytes))
    }

    /// 32 random bytes from the OS.
    pub fn random() -> Result<Self, getrandom::Error> {
        let mut bytes = vec![0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes))
    }

    fn mac(&self, domain: &str, data: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(domain.as_bytes());
        mac.update(b":");
        mac.update(data);
        mac
    }

    fn sign(&self, domain: &str, data: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(self.mac(domain, data).finalize().into_bytes())
    }

    fn verify(&self, domain: &str, data: &[u8], signature: &str) -> bool {
        let Ok(sig) = URL_SAFE_NO_PAD.decode(signature) else {
            return false;
        };
        self.mac(domain, data).verify_slice(&sig).is_ok()
    }

    /// The CSRF token of session `sid`.
    pub fn csrf_token(&self, sid: &str) -> String {
        self.sign("csrf", sid.as_bytes())
    }

    /// True if `token` is the CSRF token of session `sid`.
    pub fn csrf_ok(&self, sid: &str, token: &str) -> bool {
        let expected = self.csrf_token(sid);
        !token.is_empty() && bool::from(expected.as_bytes().ct_eq(token.as_bytes()))
    }

    /// A new pre-login nonce, and the login form's token for it.
    pub fn login_nonce(&self) -> Result<(String, String), getrandom::Error> {
        let nonce = random_id()?;
        let token = self.sign("login", nonce.as_bytes());
        Ok((nonce, token))
    }

    /// True if `token` is the login form's token for `nonce`.
    pub fn login_token_ok(&self, nonce: &str, token: &str) -> bool {
        !nonce.is_empty() && self.verify("login", nonce.as_bytes(), token)
    }

    /// The cookie value for `session`.
    pub fn seal(&self, session: &Session) -> String {
        let payload = session.encode();
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(payload.as_bytes()),
            self.sign("session", payload.as_bytes())
        )
    }

    /// The session in `cookie`, if its signature is ours, it has not expired at `now_s`, and
    /// its key is still in `keys` with the same role.
    pub fn open(&self, cookie: &str, now_s: i64, keys: &KeyRing) -> Option<Session> {
        let (payload, sig) = cookie.split_once('.')?;
        let payload = URL_SAFE_NO_PAD.decode(payload).ok()?;
        if !self.verify("session", &payload, sig) {
            return None;
        }
        let session = Session::decode(std::str::from_utf8(&payload).ok()?)?;
        if session.expires_s <= now_s {
            return None;
        }
        let still_known = keys.keys().iter().any(|k| {
            k.name == session.key_name
                && k.role == session.role
                && punctual_api::auth::digest_hex(&k.digest).starts_with(&session.key_digest)
        });
        still_known.then_some(session)
    }
}

/// A random 128-bit id, base64url.
pub fn random_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Who is logged in, as the signed cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Random id of this login; CSRF tokens are bound to it.
    pub sid: String,
    /// The role of the key that logged in.
    pub role: Role,
    /// That key's name (for the header and the logs).
    pub key_name: String,
    /// The first 16 hex digits of that key's digest.
    pub key_digest: String,
    /// When the session ends, epoch seconds.
    pub expires_s: i64,
}

impl Session {
    /// A new session for `key`, ending `ttl_s` after `now_s`.
    pub fn new(key: &punctual_api::auth::ApiKey, now_s: i64, ttl_s: i64) -> Result<Self, String> {
        Ok(Self {
            sid: random_id().map_err(|e| format!("no randomness: {e}"))?,
            role: key.role,
            key_name: key.name.clone(),
            key_digest: punctual_api::auth::digest_hex(&key.digest)[..16].to_owned(),
            expires_s: now_s.saturating_add(ttl_s),
        })
    }

    /// True if the session's role is at least `needed`.
    pub fn may(&self, needed: Role) -> bool {
        self.role >= needed
    }

    fn encode(&self) -> String {
        // Key names come from configuration; `|` is replaced so the fields stay apart.
        format!(
            "v1|{}|{}|{}|{}|{}",
            self.sid,
            self.role.as_str(),
            self.key_name.replace('|', "/"),
            self.key_digest,
            self.expires_s
        )
    }

    fn decode(s: &str) -> Option<Self> {
        let mut it = s.split('|');
        if it.next()? != "v1" {
            return None;
        }
        let session = Self {
            sid: it.next()?.to_owned(),
            role: it.next()?.parse().ok()?,
            key_name: it.next()?.to_owned(),
            key_digest: it.next()?.to_owned(),
            expires_s: it.next()?.parse().ok()?,
        };
        (it.next().is_none() && !session.sid.is_empty()).then_some(session)
    }
}

/// Attributes of a console cookie: `HttpOnly; SameSite=Strict; Path=/console`, `Secure` when
/// `secure`, and `Max-Age` (0 deletes it).
pub fn cookie(name: &str, value: &str, max_age_s: i64, secure: bool) -> String {
    format!(
        "{name}={value}; Path={COOKIE_PATH}; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The value of cookie `name` in a `Cookie` header.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|part| {
        let (k, v) = part.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> KeyRing {
        let mut r = KeyRing::new();
        r.add_plain("ops", Role::Operator, "k-ops");
        r.add_plain("view", Role::Viewer, "k-view");
        r
    }

    #[test]
    fn a_sealed_session_opens_until_it_expires() {
        let secret = SessionSecret::new(*b"0123456789abcdef0123").unwrap();
        let keys = ring();
        let s = Session::new(keys.verify("k-ops").unwrap(), 1_000, 3_600).unwrap();
        let c = secret.seal(&s);
        assert_eq!(secret.open(&c, 1_001, &keys), Some(s.clone()));
        assert_eq!(secret.open(&c, 4_600, &keys), None, "expired");
        let other = SessionSecret::new(*b"another secret, 20b").unwrap();
        assert_eq!(
            other.open(&c, 1_001, &keys),
            None,
            "another instance's secret"
        );
        // Tampering with the payload (a viewer making itself admin) breaks the signature.
        let (p, sig) = c.split_once('.').unwrap();
        let forged = String::from_utf8(URL_SAFE_NO_PAD.decode(p).unwrap())
            .unwrap()
            .replace("operator", "admin");
        let forged = format!("{}.{sig}", URL_SAFE_NO_PAD.encode(forged));
        assert_eq!(secret.open(&forged, 1_001, &keys), None);
        // A key removed from the ring ends its sessions.
        let mut fewer = KeyRing::new();
        fewer.add_plain("view", Role::Viewer, "k-view");
        assert_eq!(secret.open(&c, 1_001, &fewer), None);
        assert_eq!(secret.open("garbage", 1_001, &keys), None);
    }

    #[test]
    fn csrf_tokens_are_bound_to_the_session() {
        let secret = SessionSecret::new(*b"0123456789abcdef").unwrap();
        let t = secret.csrf_token("sid-a");
        assert!(secret.csrf_ok("sid-a", &t));
        assert!(!secret.csrf_ok("sid-b", &t));
        assert!(!secret.csrf_ok("sid-a", ""));
        let (nonce, token) = secret.login_nonce().unwrap();
        assert!(secret.login_token_ok(&nonce, &token));
        assert!(!secret.login_token_ok("other", &token));
        assert!(SessionSecret::new(*b"short").is_err());
    }

    #[test]
    fn cookies_are_scoped_and_parsed() {
        let c = cookie(SESSION_COOKIE, "abc.def", 60, true);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict"));
        assert!(c.contains("Path=/console") && c.ends_with("; Secure"));
        assert!(!cookie(SESSION_COOKIE, "x", 0, false).contains("Secure"));
        let header = "a=1; punctual_session=abc.def; b=2";
        assert_eq!(cookie_value(header, SESSION_COOKIE), Some("abc.def"));
        assert_eq!(cookie_value(header, "c"), None);
    }
}
