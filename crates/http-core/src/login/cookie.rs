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

/// How the device cookie is written.
#[derive(Debug, Clone)]
pub(crate) struct CookieSettings {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) secure: bool,
    pub(crate) same_site: SameSite,
}

/// The most cookies named like ours that one request is searched for: a
/// browser sends one per path and domain that set it, a client sending
/// hundreds is only making the limits work.
const MAX_CANDIDATES: usize = 8;

/// The values of the cookies named `name` in `headers`, at most
/// [`MAX_CANDIDATES`], each no longer than a token: the ones worth
/// verifying.
pub(crate) fn candidates<'a>(
    headers: &'a HeaderMap,
    name: &'a str,
) -> impl Iterator<Item = &'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(move |pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key.trim() == name).then(|| value.trim().trim_matches('"'))
        })
        .filter(|value| !value.is_empty() && value.len() <= MAX_LEN)
        .take(MAX_CANDIDATES)
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
        settings.name,
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
        let mut headers = HeaderMap::new();
        headers.append(COOKIE, "a=1; device=x; b=2".parse().unwrap());
        headers.append(COOKIE, "device=\"y\";device=".parse().unwrap());
        headers.append(COOKIE, HeaderValue::from_bytes(b"device=\xff").unwrap());
        let found: Vec<&str> = candidates(&headers, "device").collect();
        assert_eq!(found, ["x", "y"]);
        let many = "device=z; ".repeat(100);
        headers.insert(COOKIE, many.parse().unwrap());
        assert_eq!(candidates(&headers, "device").count(), MAX_CANDIDATES);
        let long = format!("device={}", "z".repeat(MAX_LEN + 1));
        headers.insert(COOKIE, long.parse().unwrap());
        assert_eq!(candidates(&headers, "device").count(), 0);
    }

    #[test]
    fn the_cookie_says_http_only_and_what_it_is_told() {
        let settings = CookieSettings {
            name: "device".into(),
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
