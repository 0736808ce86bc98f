//! [`Route`]: a method and a path pattern a policy applies to.

use std::fmt;

use http::Method;

/// A method (or any method) and a path pattern, in axum's syntax:
///
/// - a literal segment matches itself (`/login`), case-sensitively;
/// - `{name}` matches exactly one segment (`/users/{id}`): an empty one too
///   when more of the path follows (`/users//posts` for
///   `/users/{id}/posts`), not at the end (`/users/` is not `/users/{id}`),
///   as axum's router matches it;
/// - `{*name}`, last only, matches everything after it, even nothing
///   (`/admin/{*rest}` matches `/admin/`, `/admin/a/b`, and `/admin`).
///
/// The pattern is matched against the raw path, as axum's router does:
/// percent-encoded characters are not decoded, a trailing slash is a
/// different path (`/login/` does not match `/login`). If something in front
/// of your router rewrites paths (normalising slashes, decoding), put it
/// before the rate limit layer so that the layer sees the path the router
/// routes on.
///
/// A `GET` route also matches `HEAD`, because routers answer `HEAD` with the
/// `GET` handler: otherwise `HEAD` would run the handler unlimited.
///
/// ```
/// use http::Method;
/// use ratelab_http_core::Route;
///
/// let route = Route::new(Some(Method::GET), "/users/{id}/posts")?;
/// assert!(route.matches(&Method::GET, "/users/7/posts"));
/// assert!(route.matches(&Method::HEAD, "/users/7/posts"));
/// assert!(!route.matches(&Method::POST, "/users/7/posts"));
/// assert!(route.matches(&Method::GET, "/users//posts"));
/// assert!(!route.matches(&Method::GET, "/users/7/posts/"));
/// assert!(Route::new(None, "no-leading-slash").is_err());
/// # Ok::<(), ratelab_http_core::RouteError>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Route {
    method: Option<Method>,
    pattern: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
    CatchAll,
}

/// A path pattern that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid route pattern {pattern:?}: {reason}")]
pub struct RouteError {
    /// The pattern given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl Route {
    /// `method` (`None`: any method) on paths matching `pattern`.
    pub fn new(method: Option<Method>, pattern: &str) -> Result<Self, RouteError> {
        let error = |reason| RouteError {
            pattern: pattern.to_owned(),
            reason,
        };
        let rest = pattern
            .strip_prefix('/')
            .ok_or_else(|| error("a pattern starts with '/'"))?;
        let pieces: Vec<&str> = rest.split('/').collect();
        let mut segments = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.iter().enumerate() {
            let segment = if let Some(inner) = piece.strip_prefix('{') {
                let name = inner
                    .strip_suffix('}')
                    .ok_or_else(|| error("a '{' must close with '}' at the end of its segment"))?;
                if let Some(name) = name.strip_prefix('*') {
                    if i + 1 != pieces.len() {
                        return Err(error("a catch-all {*name} must be the last segment"));
                    }
                    check_name(name).map_err(error)?;
                    Segment::CatchAll
                } else {
                    check_name(name).map_err(error)?;
                    Segment::Param
                }
            } else if piece.contains(['{', '}']) {
                return Err(error(
                    "braces are only allowed around a whole segment: {name} or {*name}",
                ));
            } else {
                Segment::Literal((*piece).to_owned())
            };
            segments.push(segment);
        }
        Ok(Route {
            method,
            pattern: pattern.to_owned(),
            segments,
        })
    }

    /// The method matched, `None` for any.
    pub fn method(&self) -> Option<&Method> {
        self.method.as_ref()
    }

    /// The path pattern.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// A request with `method` on `path` (the raw path, without the query)
    /// matches.
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        let method_matches = match &self.method {
            None => true,
            Some(m) => m == method || (*m == Method::GET && *method == Method::HEAD),
        };
        method_matches && self.matches_path(path)
    }

    fn matches_path(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let mut pieces = rest.split('/').peekable();
        for segment in &self.segments {
            match segment {
                Segment::CatchAll => return true,
                Segment::Literal(literal) => {
                    if pieces.next() != Some(literal.as_str()) {
                        return false;
                    }
                }
                // axum's router gives a parameter an empty segment when a
                // slash follows it, never the path's empty end.
                Segment::Param => match pieces.next() {
                    Some(piece) if !piece.is_empty() || pieces.peek().is_some() => {}
                    _ => return false,
                },
            }
        }
        pieces.next().is_none()
    }
}

fn check_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() || name.contains(['{', '}', '*']) {
        return Err("a parameter needs a name: {id}, {*rest}");
    }
    Ok(())
}

impl fmt::Debug for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Route({self})")
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.method {
            Some(m) => write!(f, "{m} {}", self.pattern),
            None => write!(f, "* {}", self.pattern),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        Route::new(None, pattern)
            .unwrap()
            .matches(&Method::GET, path)
    }

    #[test]
    fn literals_and_params() {
        assert!(m("/", "/"));
        assert!(!m("/", "/x"));
        assert!(m("/login", "/login"));
        assert!(!m("/login", "/login/"));
        assert!(!m("/login", "/Login"));
        assert!(!m("/login", "/l%6Fgin"));
        assert!(!m("/login", "/login/x"));
        assert!(!m("/login", ""));
        assert!(!m("/login", "*"));
        assert!(m("/users/{id}", "/users/1"));
        assert!(!m("/users/{id}", "/users/"));
        assert!(!m("/users/{id}", "/users"));
        assert!(!m("/users/{id}", "/users/1/2"));
        assert!(m("/users/{id}/posts", "/users//posts"));
        assert!(!m("/users/{id}/posts", "/users/7/posts/"));
        assert!(m("/{a}/{b}", "//x"));
        assert!(!m("/{a}/{b}", "/x/"));
        assert!(!m("/{a}", "/"));
    }

    #[test]
    fn catch_all() {
        assert!(m("/admin/{*rest}", "/admin"));
        assert!(m("/admin/{*rest}", "/admin/"));
        assert!(m("/admin/{*rest}", "/admin/a/b"));
        assert!(!m("/admin/{*rest}", "/administrator"));
        assert!(!m("/admin/{*rest}", "/"));
        assert!(m("/{*all}", "/"));
        assert!(m("/{*all}", "/anything/at/all"));
    }

    #[test]
    fn methods() {
        let post = Route::new(Some(Method::POST), "/sms").unwrap();
        assert!(post.matches(&Method::POST, "/sms"));
        assert!(!post.matches(&Method::GET, "/sms"));
        assert!(!post.matches(&Method::HEAD, "/sms"));
        assert_eq!(post.to_string(), "POST /sms");
    }

    #[test]
    fn invalid_patterns() {
        for bad in [
            "",
            "login",
            "/{",
            "/{}",
            "/{*}",
            "/a{id}",
            "/{*rest}/x",
            "/{id",
            "/{a*}",
        ] {
            assert!(Route::new(None, bad).is_err(), "{bad:?}");
        }
    }
}
