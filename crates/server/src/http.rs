//! The HTTP endpoints envoyproxy/ratelimit serves beside gRPC: on its HTTP
//! port, `/healthcheck` (200 `OK` while healthy, 500 otherwise) and `/json`
//! (a `RateLimitRequest` in protobuf's JSON form, POSTed; the
//! `RateLimitResponse` back, with 200, or 429 when over the limit, or 400
//! for a request it cannot read or answer); on its debug port, `/`,
//! `/rlconfig` (the limits loaded) and `/stats` (every statistic); and the
//! Prometheus endpoint.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor,
    rate_limit_descriptor::{Entry, RateLimitOverride},
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{Struct, UInt64Value, Value as ProtoValue, value::Kind};
use serde_json::{Map, Value, json};

use crate::config::Unit;
use crate::{Health, Service, Stats};

/// The HTTP port's routes: `/healthcheck` and `/json`.
pub fn router(service: Arc<Service>, health: Health) -> Router {
    Router::new()
        .route(
            "/healthcheck",
            get(move || {
                let ok = health.is_ok();
                async move {
                    if ok {
                        (StatusCode::OK, "OK").into_response()
                    } else {
                        StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    }
                }
            }),
        )
        .route("/json", any(json_endpoint))
        .with_state(service)
}

/// The debug port's routes: `/`, `/rlconfig` and `/stats`.
pub fn debug_router(service: Arc<Service>) -> Router {
    let listing = "/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n";
    Router::new()
        .route("/", get(move || async move { listing }))
        .route(
            "/rlconfig",
            get(
                |State(service): State<Arc<Service>>| async move { service.config().read().dump() },
            ),
        )
        .route(
            "/stats",
            get(|State(service): State<Arc<Service>>| async move { service.stats().dump() }),
        )
        .with_state(service)
}

/// The Prometheus endpoint at `path`.
pub fn metrics_router(stats: Arc<Stats>, path: &str) -> Router {
    Router::new().route(
        path,
        get(move || {
            let text = stats.prometheus();
            async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
        }),
    )
}

fn bad_request() -> Response {
    (StatusCode::BAD_REQUEST, "Bad Request\n").into_response()
}

async fn json_endpoint(State(service): State<Arc<Service>>, body: Bytes) -> Response {
    let request = match serde_json::from_slice::<Value>(&body)
        .map_err(|e| e.to_string())
        .and_then(|v| request_from_json(&v))
    {
        Ok(request) => request,
        Err(error) => {
            tracing::warn!(%error, "/json: a request that cannot be read");
            return bad_request();
        }
    };
    let response = match service.decide(&request).await {
        Ok(response) => response,
        Err(status) => {
            tracing::warn!(code = ?status.code(), message = status.message(), "/json: not answered");
            return bad_request();
        }
    };
    let status = match Code::try_from(response.overall_code) {
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        Ok(Code::Ok) => StatusCode::OK,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        response_to_json(&response).to_string(),
    )
        .into_response()
}

/// A field under its JSON name or its proto name, as protobuf's JSON
/// mapping accepts either.
fn field<'a>(
    object: &'a Map<String, Value>,
    json_name: &str,
    proto_name: &str,
) -> Option<&'a Value> {
    object
        .get(json_name)
        .or_else(|| object.get(proto_name))
        .filter(|v| !v.is_null())
}

fn object<'a>(
    value: &'a Value,
    what: &str,
    known: &[&str],
) -> Result<&'a Map<String, Value>, String> {
    let object = value
        .as_object()
        .ok_or_else(|| format!("{what} is not an object"))?;
    if let Some(unknown) = object.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("{what}: unknown field {unknown:?}"));
    }
    Ok(object)
}

fn string(value: Option<&Value>, what: &str) -> Result<String, String> {
    match value {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what} is not a string")),
    }
}

/// An integer as JSON carries one: a number, or a string of digits.
fn integer(value: Option<&Value>, what: &str) -> Result<u64, String> {
    match value {
        None => Ok(0),
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 18_446_744_073_709_551_616.0)
                    // Whole and in range: exact.
                    .map(|f| {
                        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                        let n = f as u64;
                        n
                    })
            })
            .ok_or_else(|| format!("{what} is not an unsigned integer")),
        Some(Value::String(s)) => s
            .parse()
            .map_err(|_| format!("{what} is not an unsigned integer")),
        Some(_) => Err(format!("{what} is not an unsigned integer")),
    }
}

fn unit(value: Option<&Value>) -> Result<i32, String> {
    match value {
        None => Ok(0),
        Some(Value::String(name)) => match name.as_str() {
            "UNKNOWN" => Ok(0),
            _ => (1..=7)
                .find(|&n| Unit::from_proto(n).is_some_and(|u| u.proto_name() == name))
                .ok_or_else(|| format!("unknown unit {name:?}")),
        },
        Some(v) => {
            let n = integer(Some(v), "unit")?;
            i32::try_from(n).map_err(|_| "unit out of range".to_owned())
        }
    }
}

/// A `RateLimitRequest` from protobuf's JSON form.
pub fn request_from_json(value: &Value) -> Result<RateLimitRequest, String> {
    let request = object(
        value,
        "the request",
        &["domain", "descriptors", "hitsAddend", "hits_addend"],
    )?;
    let mut descriptors = Vec::new();
    match field(request, "descriptors", "descriptors") {
        None => {}
        Some(Value::Array(items)) => {
            for item in items {
                descriptors.push(descriptor_from_json(item)?);
            }
        }
        Some(_) => return Err("descriptors is not a list".into()),
    }
    let hits = integer(field(request, "hitsAddend", "hits_addend"), "hitsAddend")?;
    Ok(RateLimitRequest {
        domain: string(field(request, "domain", "domain"), "domain")?,
        descriptors,
        hits_addend: u32::try_from(hits).map_err(|_| "hitsAddend out of range".to_owned())?,
    })
}

fn descriptor_from_json(value: &Value) -> Result<RateLimitDescriptor, String> {
    let d = object(
        value,
        "a descriptor",
        &[
            "entries",
            "limit",
            "hitsAddend",
            "hits_addend",
            "isNegativeHits",
            "is_negative_hits",
        ],
    )?;
    let mut entries = Vec::new();
    match field(d, "entries", "entries") {
        None => {}
        Some(Value::Array(items)) => {
            for item in items {
                let e = object(item, "an entry", &["key", "value"])?;
                entries.push(Entry {
                    key: string(field(e, "key", "key"), "key")?,
                    value: string(field(e, "value", "value"), "value")?,
                });
            }
        }
        Some(_) => return Err("entries is not a list".into()),
    }
    let limit = match field(d, "limit", "limit") {
        None => None,
        Some(v) => {
            let l = object(
                v,
                "a limit",
                &["requestsPerUnit", "requests_per_unit", "unit"],
            )?;
            let rpu = integer(
                field(l, "requestsPerUnit", "requests_per_unit"),
                "requestsPerUnit",
            )?;
            Some(RateLimitOverride {
                requests_per_unit: u32::try_from(rpu)
                    .map_err(|_| "requestsPerUnit out of range".to_owned())?,
                unit: unit(field(l, "unit", "unit"))?,
            })
        }
    };
    let hits_addend = match field(d, "hitsAddend", "hits_addend") {
        None => None,
        Some(v) => Some(UInt64Value {
            value: integer(Some(v), "hitsAddend")?,
        }),
    };
    let is_negative_hits = match field(d, "isNegativeHits", "is_negative_hits") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("isNegativeHits is not a boolean".into()),
    };
    Ok(RateLimitDescriptor {
        entries,
        limit,
        hits_addend,
        is_negative_hits,
    })
}

fn code_name(code: i32) -> &'static str {
    match Code::try_from(code) {
        Ok(Code::Ok) => "OK",
        Ok(Code::OverLimit) => "OVER_LIMIT",
        _ => "UNKNOWN",
    }
}

/// A `RateLimitResponse` in protobuf's JSON form (default values left
/// out).
pub fn response_to_json(response: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    if response.overall_code != 0 {
        out.insert(
            "overallCode".into(),
            json!(code_name(response.overall_code)),
        );
    }
    let statuses: Vec<Value> = response
        .statuses
        .iter()
        .map(|s| {
            let mut status = Map::new();
            if s.code != 0 {
                status.insert("code".into(), json!(code_name(s.code)));
            }
            if let Some(limit) = &s.current_limit {
                let mut l = Map::new();
                if !limit.name.is_empty() {
                    l.insert("name".into(), json!(limit.name));
                }
                if limit.requests_per_unit != 0 {
                    l.insert("requestsPerUnit".into(), json!(limit.requests_per_unit));
                }
                if let Some(unit) = Unit::from_proto(limit.unit) {
                    l.insert("unit".into(), json!(unit.proto_name()));
                }
                status.insert("currentLimit".into(), Value::Object(l));
            }
            if s.limit_remaining != 0 {
                status.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                status.insert(
                    "durationUntilReset".into(),
                    json!(duration(d.seconds, d.nanos)),
                );
            }
            Value::Object(status)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !response.response_headers_to_add.is_empty() {
        let headers: Vec<Value> = response
            .response_headers_to_add
            .iter()
            .map(|h| json!({"key": h.key, "value": h.value}))
            .collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    if let Some(metadata) = &response.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_to_json(metadata));
    }
    Value::Object(out)
}

/// A `google.protobuf.Duration` as JSON writes it: `"50s"`, `"1.500s"`.
fn duration(seconds: i64, nanos: i32) -> String {
    if nanos == 0 {
        return format!("{seconds}s");
    }
    let fraction = format!("{:09}", nanos.unsigned_abs());
    let fraction = if fraction.ends_with("000000") {
        &fraction[..3]
    } else if fraction.ends_with("000") {
        &fraction[..6]
    } else {
        &fraction[..]
    };
    format!("{seconds}.{fraction}s")
}

fn struct_to_json(s: &Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &ProtoValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => json!(s),
        Some(Kind::BoolValue(b)) => json!(b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => Value::Array(l.values.iter().map(value_to_json).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_either_field_name_and_numbers_as_strings() {
        let request = request_from_json(&json!({
            "domain": "d",
            "hits_addend": 2,
            "descriptors": [
                {"entries": [{"key": "k", "value": "v"}], "hitsAddend": "5",
                 "limit": {"requestsPerUnit": 3, "unit": "MINUTE"}},
                {"entries": []}
            ]
        }))
        .unwrap();
        assert_eq!(request.hits_addend, 2);
        assert_eq!(
            request.descriptors[0].hits_addend,
            Some(UInt64Value { value: 5 })
        );
        assert_eq!(request.descriptors[0].limit.unwrap().unit, 2);
        assert!(request.descriptors[1].entries.is_empty());
        assert!(request_from_json(&json!({"domain": "d", "nope": 1})).is_err());
        assert!(request_from_json(&json!([1])).is_err());
    }

    #[test]
    fn durations_are_written_as_protobuf_does() {
        assert_eq!(duration(50, 0), "50s");
        assert_eq!(duration(1, 500_000_000), "1.500s");
        assert_eq!(duration(0, 1), "0.000000001s");
    }
}
