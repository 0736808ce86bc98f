//! The device cookie: read from a request's `Cookie` fields, written as a
//! `Set-Cookie` field (RFC 6265).

use std::time::Duration;

use http::header::COOKIE;
use http::{HeaderMap, HeaderValue};

use super::token::MAX_LEN;

/// The `SameSite` attribute of the device cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SameSite {
    /// Sent only with requests from the site itself (the default): a login
    /// form posts to its own site.
    #[default]
    Strict,
    /// Also sent when a user follows a link from another site.
    Lax,
    /// Sent with cross-site requests too (a login form on another site);
    /// browsers require `Secure` with it.
    None,
}

impl SameSite {
    fn as_str(self) -> &'static str {
        match self {
            SameSite::Strict => "Strict",
            SameSite::Lax => "Lax",
            SameSite::None => "None",
        }
    }
}

/// The device cookie's name by default where the browser lets it carry the
/// `__Host-` prefix (`Secure`, `Path=/`): a sibling subdomain can neither
/// set nor overwrite a cookie of that name.
pub(crate) const HOST_NAME: &str = "__Host-ratelab_device";

/// The device cookie's name by default otherwise (an insecure cookie, or
/// one with another path), and the name of the cookies issued before the
/// prefix, still read beside [`HOST_NAME`].
pub(crate) const PLAIN_NAME: &str = "ratelab_device";

/// How the device cookie is written.
#[derive(Debug, Clone)]
pub(crate) struct CookieSettings {
    /// The name set; `None` for the default, [`HOST_NAME`] or
    /// [`PLAIN_NAME`] as `secure` and `path` allow.
    pub(crate) name: Option<String>,
    pub(crate) path: String,
    pub(crate) secure: bool,
    pub(crate) same_site: SameSite,
}

impl CookieSettings {
    /// The name the cookie is written under.
    pub(crate) fn name(&self) -> &str {
        match &self.name {
            Some(name) => name,
            None if self.host_prefix_allowed() => HOST_NAME,
            None => PLAIN_NAME,
        }
    }

    /// The names a device cookie is read under: the name it is written
    /// under, and with the default `__Host-` name, the name cookies had
    /// before it (so that a device known before stays known).
    pub(crate) fn read_names(&self) -> [&str; 2] {
        let name = self.name();
        let legacy = if self.name.is_none() && name == HOST_NAME {
            PLAIN_NAME
        } else {
            name
        };
        [name, legacy]
    }

    /// Whether a `__Host-` name is allowed: `Secure` and `Path=/` (and no
    /// `Domain`, which this cookie never has).
    pub(crate) fn host_prefix_allowed(&self) -> bool {
        self.secure && self.path == "/"
    }
}

/// The most cookies named like ours one request is searched for. Every one
/// is verified (each a MAC over a few dozen bytes, after a syntax check):
/// more than any browser sends for one site (Chrome keeps 180 cookies per
/// site, Firefox 150), so that cookies planted in front of the owner's own
/// (cookie tossing from a sibling subdomain) never hide it.
const MAX_CANDIDATES: usize = 256;

/// The distinct values of the cookies named one of `names` in `headers`,
/// each no longer than a token, at most [`MAX_CANDIDATES`]: the ones worth
/// verifying, in the order they came.
pub(crate) fn candidates<'a>(headers: &'a HeaderMap, names: [&'a str; 2]) -> Vec<&'a str> {
    let mut found: Vec<&str> = Vec::new();
    let values = headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            names
                .contains(&key.trim())
                .then(|| value.trim().trim_matches('"'))
        })
        .filter(|value| !value.is_empty() && value.len() <= MAX_LEN);
    for value in values {
        if found.len() == MAX_CANDIDATES {
            break;
        }
        if !found.contains(&value) {
            found.push(value);
        }
    }
    found
}

/// The `Set-Cookie` value that hands `token` to the browser for
/// `lifetime`: `HttpOnly` always (no script reads it), `Secure` and
/// `SameSite` as `settings` say.
pub(crate) fn set_cookie(
    settings: &CookieSettings,
    token: &str,
    lifetime: Duration,
) -> Option<HeaderValue> {
    let mut value = format!(
        "{}={token}; Max-Age={}; Path={}; HttpOnly; SameSite={}",
        settings.name(),
        lifetime.as_secs(),
        settings.path,
        settings.same_site.as_str()
    );
    if settings.secure {
        value.push_str("; Secure");
    }
    HeaderValue::from_str(&value).ok()
}

/// Whether `name` can name a cookie (an RFC 6265 token).
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| {
            b.is_ascii_graphic()
                && !matches!(
                    b,
                    b'(' | b')'
                        | b'<'
                        | b'>'
                        | b'@'
                        | b','
                        | b';'
                        | b':'
                        | b'\\'
                        | b'"'
                        | b'/'
                        | b'['
                        | b']'
                        | b'?'
                        | b'='
                        | b'{'
                        | b'}'
                )
        })
}

/// Whether `path` can be a cookie's `Path`: absolute, without `;` or
/// control characters.
pub(crate) fn valid_path(path: &str) -> bool {
    path.starts_with('/') && path.bytes().all(|b| b.is_ascii_graphic() && b != b';')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_are_the_named_cookies_across_fields() {
        let names = ["device", "old"];
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, "a=1; device=x; b=2; old=w".parse().unwrap());
        headers.append(COOKIE, "device=\"y\";device=; device=x".parse().unwrap());
        headers.append(COOKIE, HeaderValue::from_bytes(b"device=\xff").unwrap());
        assert_eq!(candidates(&headers, names), ["x", "w", "y"]);
        // Every distinct one, up to more than a browser sends.
        let many: String = (0..300).map(|i| format!("device=z{i}; ")).collect();
        headers.insert(COOKIE, many.parse().unwrap());
        assert_eq!(candidates(&headers, names).len(), MAX_CANDIDATES);
        let repeated = "device=z; ".repeat(300);
        headers.insert(COOKIE, repeated.parse().unwrap());
        assert_eq!(candidates(&headers, names), ["z"]);
        let long = format!("device={}", "z".repeat(MAX_LEN + 1));
        headers.insert(COOKIE, long.parse().unwrap());
        assert!(candidates(&headers, names).is_empty());
    }

    #[test]
    fn the_default_name_has_the_host_prefix_where_browsers_allow_it() {
        let mut settings = CookieSettings {
            name: None,
            path: "/".into(),
            secure: true,
            same_site: SameSite::Strict,
        };
        assert_eq!(settings.read_names(), [HOST_NAME, PLAIN_NAME]);
        settings.secure = false;
        assert_eq!(settings.read_names(), [PLAIN_NAME, PLAIN_NAME]);
        settings.secure = true;
        settings.path = "/login".into();
        assert_eq!(settings.name(), PLAIN_NAME);
        settings.name = Some("mine".into());
        assert_eq!(settings.read_names(), ["mine", "mine"]);
    }

    #[test]
    fn the_cookie_says_http_only_and_what_it_is_told() {
        let settings = CookieSettings {
            name: Some("device".into()),
            path: "/".into(),
            secure: true,
            same_site: SameSite::Strict,
        };
        let value = set_cookie(&settings, "v1.t", Duration::from_secs(60)).unwrap();
        assert_eq!(
            value,
            "device=v1.t; Max-Age=60; Path=/; HttpOnly; SameSite=Strict; Secure"
        );
        let plain = CookieSettings {
            secure: false,
            same_site: SameSite::Lax,
            ..settings
        };
        let value = set_cookie(&plain, "v1.t", Duration::from_secs(60)).unwrap();
        assert_eq!(
            value,
            "device=v1.t; Max-Age=60; Path=/; HttpOnly; SameSite=Lax"
        );
        assert!(valid_name("ratelab_device") && !valid_name("a b") && !valid_name("a=b"));
        assert!(valid_path("/login") && !valid_path("login") && !valid_path("/a;b"));
    }
}
