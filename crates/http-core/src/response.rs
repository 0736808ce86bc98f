//! The fields and bodies the [`Limits`](crate::Limits) write:
//! `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-11,
//! serialized with `sfv`), the legacy `X-RateLimit-*`, `Retry-After`, and
//! RFC 9457 problem bodies.

use std::fmt;
use std::sync::LazyLock;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use serde::{Serialize, Serializer};
use sfv::ListSerializer;

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

/// The largest structured-field Integer (15 digits): values past it are
/// clamped (no quota or wait comes near it).
const INTEGER_MAX: u64 = 999_999_999_999_999;

/// One policy's static description: `"name";q=..;w=..`, serialized once.
#[derive(Debug, Clone)]
pub(crate) struct PolicyItem {
    pub(crate) q: u64,
    pub(crate) w: u64,
    /// The whole `RateLimit-Policy` item.
    serialized: Box<str>,
    /// The name as a structured-field String (quoted, escaped), and `;r=`:
    /// what every `RateLimit` item of the policy starts
    /// with, so that a response's value is the numbers and one copy.
    limit_prefix: Box<[u8]>,
    /// The item alone, as a field value: what most responses carry, shared
    /// rather than written again.
    alone: Option<HeaderValue>,
}

impl PolicyItem {
    /// The item of the policy `name` (a checked structured-field String),
    /// with quota `q` over `w` seconds.
    pub(crate) fn new(name: &sfv::String, q: u64, w: u64) -> Self {
        let mut ser = ListSerializer::new();
        let _ = ser.bare_item(&**name);
        let quoted = ser.finish().unwrap_or_default();
        let mut serialized = FieldValue::default();
        serialized.push(quoted.as_bytes());
        serialized.parameter(b";q=", q);
        serialized.parameter(b";w=", w);
        let alone = serialized.finish();
        let serialized = String::from_utf8_lossy(serialized.as_bytes()).into();
        let limit_prefix = [quoted.as_bytes(), b";r="].concat().into();
        PolicyItem {
            q,
            w,
            serialized,
            limit_prefix,
            alone,
        }
    }

    /// The `RateLimit-Policy` value of this policy alone (shared: no copy).
    pub(crate) fn policy_alone(&self) -> Option<HeaderValue> {
        self.alone.clone()
    }

    /// The `RateLimit` value of this policy alone, `r` remaining and `t`
    /// seconds (what most responses carry): the policy's prefix and the
    /// numbers, written straight into the value's own buffer, sized exactly
    /// so that the value takes it as it is.
    pub(crate) fn limit_alone(&self, r: u64, t: u64) -> Option<HeaderValue> {
        let mut r_digits = itoa::Buffer::new();
        let r = r_digits.format(r.min(INTEGER_MAX)).as_bytes();
        let mut t_digits = itoa::Buffer::new();
        let t = t_digits.format(t.min(INTEGER_MAX)).as_bytes();
        let prefix = &*self.limit_prefix;
        let mut value = Vec::with_capacity(prefix.len() + r.len() + 3 + t.len());
        value.extend_from_slice(prefix);
        value.extend_from_slice(r);
        value.extend_from_slice(b";t=");
        value.extend_from_slice(t);
        // Quoted names, separators and digits: always visible ASCII.
        HeaderValue::from_maybe_shared(Bytes::from(value)).ok()
    }
}

/// One policy's current state: `"name";r=..;t=..`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitItem<'a> {
    /// The policy's item, whose name starts it.
    pub(crate) policy: &'a PolicyItem,
    pub(crate) r: u64,
    pub(crate) t: u64,
}

/// A field value being written: on the stack, spilled to the heap only past
/// [`FieldValue::STACK`] bytes. Written by hand rather than with `sfv`'s
/// serializer, whose formatting machinery cost more per response than the
/// rest of the layer: every piece is either serialized once with `sfv`
/// ([`PolicyItem`]) or a list separator, a parameter key or an Integer.
struct FieldValue {
    stack: [u8; FieldValue::STACK],
    len: usize,
    heap: Vec<u8>,
}

impl Default for FieldValue {
    fn default() -> Self {
        FieldValue {
            stack: [0; FieldValue::STACK],
            len: 0,
            heap: Vec::new(),
        }
    }
}

impl FieldValue {
    const STACK: usize = 192;

    fn push(&mut self, bytes: &[u8]) {
        if self.heap.is_empty() && self.len + bytes.len() <= Self::STACK {
            self.stack[self.len..self.len + bytes.len()].copy_from_slice(bytes);
            self.len += bytes.len();
            return;
        }
        if self.heap.is_empty() {
            self.heap.extend_from_slice(&self.stack[..self.len]);
        }
        self.heap.extend_from_slice(bytes);
    }

    /// A list member's separator, before every member but the first.
    fn separate(&mut self) {
        if !self.as_bytes().is_empty() {
            self.push(b", ");
        }
    }

    /// `;<key>=<n>` (`key` given with its `;` and `=`), `n` a
    /// structured-field Integer.
    fn parameter(&mut self, key: &[u8], n: u64) {
        self.push(key);
        self.push(itoa::Buffer::new().format(n.min(INTEGER_MAX)).as_bytes());
    }

    fn as_bytes(&self) -> &[u8] {
        if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap
        }
    }

    /// The value; `None` for an empty list (not a valid field value).
    fn finish(&self) -> Option<HeaderValue> {
        // Quoted names, separators and digits: always visible ASCII. (The
        // value holds `Bytes`: a clone shares it.)
        Some(self.as_bytes())
            .filter(|bytes| !bytes.is_empty())
            .and_then(|bytes| HeaderValue::from_bytes(bytes).ok())
    }
}

/// The `RateLimit-Policy` value for `items`; `None` for no item (an empty
/// list is not a valid field value).
pub(crate) fn policy_field<'a>(
    items: impl IntoIterator<Item = &'a PolicyItem>,
) -> Option<HeaderValue> {
    let mut items = items.into_iter();
    let first = items.next()?;
    let Some(second) = items.next() else {
        return first.alone.clone();
    };
    let mut value = FieldValue::default();
    for item in [first, second].into_iter().chain(items) {
        value.separate();
        value.push(item.serialized.as_bytes());
    }
    value.finish()
}

/// The `RateLimit` value for `items`; `None` for no item.
pub(crate) fn limit_field<'a>(
    items: impl IntoIterator<Item = LimitItem<'a>>,
) -> Option<HeaderValue> {
    let mut items = items.into_iter();
    let first = items.next()?;
    let Some(second) = items.next() else {
        return first.policy.limit_alone(first.r, first.t);
    };
    let mut value = FieldValue::default();
    for item in [first, second].into_iter().chain(items) {
        value.separate();
        value.push(&item.policy.limit_prefix);
        value.push(
            itoa::Buffer::new()
                .format(item.r.min(INTEGER_MAX))
                .as_bytes(),
        );
        value.parameter(b";t=", item.t);
    }
    value.finish()
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

/// The standard members of an RFC 9457 problem before its `detail`.
#[derive(Serialize)]
struct Head {
    #[serde(rename = "type")]
    kind: &'static str,
    title: &'static str,
    status: u16,
}

impl Head {
    /// `{"type":…,"title":…,"status":…,"detail":` as `serde_json` writes
    /// the whole problem: these members are the same in every body of a
    /// status, so they are serialized once.
    fn bytes(&self) -> Box<[u8]> {
        let mut head = serde_json::to_vec(self).expect("three plain members serialize");
        assert_eq!(head.pop(), Some(b'}'), "a JSON object");
        head.extend_from_slice(br#","detail":"#);
        head.into_boxed_slice()
    }
}

/// A value written as the JSON string it displays as.
struct Displayed<D>(D);

impl<D: fmt::Display> Serialize for Displayed<D> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// Names written as a JSON array.
struct Names<P>(P);

impl<'a, P: Iterator<Item = &'a str> + Clone> Serialize for Names<P> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.clone())
    }
}

/// An RFC 9457 problem: `head` ([`Head::bytes`]), the `detail`, then the
/// extension member `list_name` with `policies`. `serde_json` writes the
/// variable members straight into the body, escaping `detail` as it is
/// formatted: no string is built on the way (a client decides how many
/// refusals there are).
fn problem<'a>(
    status: StatusCode,
    head: &[u8],
    detail: impl fmt::Display,
    list_name: &'static str,
    policies: impl Iterator<Item = &'a str> + Clone,
) -> Response<Bytes> {
    let mut body = Vec::with_capacity(320);
    body.extend_from_slice(head);
    let written = serde_json::to_writer(&mut body, &Displayed(detail))
        .and_then(|()| {
            body.push(b',');
            serde_json::to_writer(&mut body, list_name)
        })
        .and_then(|()| {
            body.push(b':');
            serde_json::to_writer(&mut body, &Names(policies))
        });
    body.push(b'}');
    // Writing to a Vec fails only if a Display impl does, and none here
    // does: an empty body is never sent in practice.
    if written.is_err() {
        body.clear();
    }
    let mut response = Response::new(Bytes::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}

/// `429 Too Many Requests`, with `Retry-After` when a wait helps.
pub(crate) fn too_many_requests<'a>(
    violated: impl Iterator<Item = &'a str> + Clone,
    detail: impl fmt::Display,
    retry_after: Option<u64>,
) -> Response<Bytes> {
    static HEAD: LazyLock<Box<[u8]>> = LazyLock::new(|| {
        Head {
            kind: QUOTA_EXCEEDED,
            title: "Request cannot be satisfied as assigned quota has been exceeded",
            status: StatusCode::TOO_MANY_REQUESTS.as_u16(),
        }
        .bytes()
    });
    let mut response = problem(
        StatusCode::TOO_MANY_REQUESTS,
        &HEAD,
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
pub(crate) fn unavailable<'a>(
    policies: impl Iterator<Item = &'a str> + Clone,
    retry_after: Option<u64>,
) -> Response<Bytes> {
    static HEAD: LazyLock<Box<[u8]>> = LazyLock::new(|| {
        Head {
            kind: "about:blank",
            title: "Service Unavailable",
            status: StatusCode::SERVICE_UNAVAILABLE.as_u16(),
        }
        .bytes()
    });
    let mut response = problem(
        StatusCode::SERVICE_UNAVAILABLE,
        &HEAD,
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
        PolicyItem::new(&sfv::String::from_string(name.to_owned()).unwrap(), q, w)
    }

    /// What `sfv` serializes for `items`, each with its parameters.
    fn with_sfv(items: &[(&str, [(&str, u64); 2])]) -> String {
        let mut ser = ListSerializer::new();
        for (name, params) in items {
            let name = sfv::String::from_string((*name).to_owned()).unwrap();
            let mut item = ser.bare_item(&name);
            for (key, n) in params {
                let n = sfv::Integer::try_from(*n).unwrap_or(sfv::Integer::MAX);
                item = item.parameter(sfv::KeyRef::from_str(key).unwrap(), n);
            }
        }
        ser.finish().unwrap()
    }

    #[test]
    fn fields_serialize_as_sfv_does() {
        let names = [
            "a",
            "burst",
            "x.y-z_9",
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._",
        ];
        for n in [
            0,
            1,
            9,
            10,
            99,
            1234567,
            INTEGER_MAX - 1,
            INTEGER_MAX,
            INTEGER_MAX + 1,
            u64::MAX,
        ] {
            let items: Vec<PolicyItem> = names.iter().map(|name| item(name, n, n / 3)).collect();
            let expected: Vec<(&str, [(&str, u64); 2])> = names
                .iter()
                .map(|name| (*name, [("q", n), ("w", n / 3)]))
                .collect();
            assert_eq!(policy_field(&items).unwrap(), with_sfv(&expected));
            assert_eq!(policy_field(&items[..1]).unwrap(), with_sfv(&expected[..1]));
            let limits = items.iter().map(|i| LimitItem {
                policy: i,
                r: n / 7,
                t: n,
            });
            let expected: Vec<(&str, [(&str, u64); 2])> = names
                .iter()
                .map(|name| (*name, [("r", n / 7), ("t", n)]))
                .collect();
            assert_eq!(limit_field(limits).unwrap(), with_sfv(&expected));
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
            policy: &items[0],
            r: 42,
            t: 17,
        }];
        assert_eq!(limit_field(limits).unwrap(), r#""burst";r=42;t=17"#);
        let huge = [LimitItem {
            policy: &items[0],
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
        let response = too_many_requests(["login"].into_iter(), "slow down", Some(3));
        assert_eq!(response.headers()[RETRY_AFTER], "3");
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        let body = format!("{:?}", response.body());
        assert!(body.contains("quota-exceeded"), "{body}");
    }
}
