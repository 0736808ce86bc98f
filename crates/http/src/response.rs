//! The fields and bodies the layer writes: `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers-11, serialized with `sfv`), the
//! legacy `X-RateLimit-*`, `Retry-After`, and RFC 9457 problem bodies.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use sfv::{Integer, KeyRef, ListSerializer, StringRef, key_ref};

/// `RateLimit-Policy`: the quota policies that applied to the request.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`: the current service limit of each policy.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// Legacy `X-RateLimit-Limit` (opt-in).
pub const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// Legacy `X-RateLimit-Remaining` (opt-in).
pub const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// Legacy `X-RateLimit-Reset`, in seconds from now (opt-in).
pub const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers-11),
/// whose `violated-policies` member names the policies.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

const Q: &KeyRef = key_ref("q");
const W: &KeyRef = key_ref("w");
const R: &KeyRef = key_ref("r");
const T: &KeyRef = key_ref("t");

/// A structured-field Integer: values past its 15 digits are clamped (no
/// quota or wait comes near it).
fn integer(n: u64) -> Integer {
    Integer::try_from(n).unwrap_or(Integer::MAX)
}

/// One policy's static description: `"name";q=..;w=..`.
#[derive(Debug, Clone)]
pub(crate) struct PolicyItem {
    pub(crate) name: sfv::String,
    pub(crate) q: u64,
    pub(crate) w: u64,
}

/// One policy's current state: `"name";r=..;t=..`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitItem<'a> {
    pub(crate) name: &'a StringRef,
    pub(crate) r: u64,
    pub(crate) t: u64,
}

fn header_value(serialized: Option<String>) -> Option<HeaderValue> {
    // A serialized structured field is visible ASCII: always a valid value.
    serialized.and_then(|s| HeaderValue::from_str(&s).ok())
}

/// The `RateLimit-Policy` value for `items`; `None` for no item (an empty
/// list is not a valid field value).
pub(crate) fn policy_field<'a>(
    items: impl IntoIterator<Item = &'a PolicyItem>,
) -> Option<HeaderValue> {
    let mut ser = ListSerializer::new();
    for item in items {
        ser.bare_item(&*item.name)
            .parameter(Q, integer(item.q))
            .parameter(W, integer(item.w));
    }
    header_value(ser.finish())
}

/// The `RateLimit` value for `items`; `None` for no item.
pub(crate) fn limit_field<'a>(
    items: impl IntoIterator<Item = LimitItem<'a>>,
) -> Option<HeaderValue> {
    let mut ser = ListSerializer::new();
    for item in items {
        ser.bare_item(item.name)
            .parameter(R, integer(item.r))
            .parameter(T, integer(item.t));
    }
    header_value(ser.finish())
}

/// Appends the fields (a list may be split over several lines, so layers
/// nested around one service each add their own).
pub(crate) fn append_fields(
    headers: &mut HeaderMap,
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
) {
    if let Some(value) = policy {
        headers.append(RATELIMIT_POLICY, value);
    }
    if let Some(value) = limit {
        headers.append(RATELIMIT, value);
    }
}

/// Sets the legacy fields, replacing any set by an inner layer.
pub(crate) fn set_legacy(headers: &mut HeaderMap, limit: u64, remaining: u64, reset: u64) {
    headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(limit));
    headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
    headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
}

/// An RFC 9457 problem: the standard members, then the extension member
/// `list_name` with `policies`.
#[derive(serde::Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(flatten)]
    policies: std::collections::BTreeMap<&'a str, &'a [&'a str]>,
}

fn problem(
    status: StatusCode,
    kind: &str,
    title: &str,
    detail: &str,
    list_name: &str,
    policies: &[&str],
) -> Response<Full<Bytes>> {
    let body = Problem {
        kind,
        title,
        status: status.as_u16(),
        detail,
        policies: [(list_name, policies)].into_iter().collect(),
    };
    let body = serde_json::to_vec(&body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// `429 Too Many Requests`, with `Retry-After` when a wait helps.
pub(crate) fn too_many_requests(
    violated: &[&str],
    detail: &str,
    retry_after: Option<u64>,
) -> Response<Full<Bytes>> {
    let mut response = problem(
        StatusCode::TOO_MANY_REQUESTS,
        QUOTA_EXCEEDED,
        "Request cannot be satisfied as assigned quota has been exceeded",
        detail,
        "violated-policies",
        violated,
    );
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// `503 Service Unavailable`: a policy that fails closed could not decide;
/// with `Retry-After` when the limiter said when it could.
pub(crate) fn unavailable(policies: &[&str], retry_after: Option<u64>) -> Response<Full<Bytes>> {
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "about:blank",
        "Service Unavailable",
        "The rate limiter could not decide whether this request is within its quota, \
         and refuses it rather than let it pass unchecked. Try again later.",
        "unavailable-policies",
        policies,
    );
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(name: &str, q: u64, w: u64) -> PolicyItem {
        PolicyItem {
            name: sfv::String::from_string(name.to_owned()).unwrap(),
            q,
            w,
        }
    }

    #[test]
    fn fields_serialize_as_the_draft_shows() {
        let items = [item("burst", 100, 60), item("daily", 1000, 86400)];
        assert_eq!(
            policy_field(&items).unwrap(),
            r#""burst";q=100;w=60, "daily";q=1000;w=86400"#
        );
        assert_eq!(policy_field([]), None);
        let limits = [LimitItem {
            name: &items[0].name,
            r: 42,
            t: 17,
        }];
        assert_eq!(limit_field(limits).unwrap(), r#""burst";r=42;t=17"#);
        let huge = [LimitItem {
            name: &items[0].name,
            r: u64::MAX,
            t: 0,
        }];
        assert_eq!(
            limit_field(huge).unwrap(),
            r#""burst";r=999999999999999;t=0"#
        );
    }

    #[test]
    fn problem_body_members_in_order() {
        let response = too_many_requests(&["login"], "slow down", Some(3));
        assert_eq!(response.headers()[RETRY_AFTER], "3");
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        let body = format!("{:?}", response.body());
        assert!(body.contains("quota-exceeded"), "{body}");
    }
}
