//! API errors: a status and a message that says what to fix, always as JSON `ErrorBody`, with
//! a typed `reason` where callers act on the refusal ([`ApiError::because`]).
//!
//! axum's own rejections (bad JSON, bad query, bad path) are turned into the same shape by
//! the [`Json`], [`Query`] and [`Path`] extractors below, so clients never see plain text.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use berth_model::api::{ErrorBody, ErrorReason};
use berth_store::StoreError;
use serde::de::DeserializeOwned;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Nothing was done and the request may go to the leader: answered with `Retry-After`,
    /// which clients with several managers take as "try again, elsewhere if need be".
    pub retry: bool,
    /// Why, for programs (`ErrorBody::reason`): set where a caller acts on the refusal.
    pub reason: Option<ErrorReason>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), retry: false, reason: None }
    }
    /// The same answer, saying why as a word for programs.
    pub fn because(self, reason: ErrorReason) -> ApiError {
        ApiError { reason: Some(reason), ..self }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, m)
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, m)
    }
    pub fn conflict(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, m)
    }
    pub fn unprocessable(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m)
    }
    pub fn unavailable(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, m)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        tracing::error!("store error: {e}");
        match e {
            StoreError::Conflict { .. } => ApiError::conflict(format!("{e}; try again")),
            // The API's layer (`api::track_store_health`) puts the data dir into the message.
            StoreError::DiskFull(_) => ApiError::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "the manager's disk is full: nothing was written; free space in its data dir and try again",
            ),
            StoreError::Fenced { .. } => {
                ApiError { retry: true, ..ApiError::unavailable(format!("{e}; another manager leads now: try again")) }
            }
            _ => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error: {e}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut resp =
            (self.status, axum::Json(ErrorBody { error: self.message, reason: self.reason })).into_response();
        if self.retry {
            resp.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        resp
    }
}

/// The largest request body the API reads: 1 MiB (the router refuses a bigger one with 413).
pub const MAX_BODY: usize = 1 << 20;

/// A JSON body whose rejection is a JSON 400 (415 when the content type is wrong). Every
/// request body of the API is an object: anything else is refused, even where serde would
/// read a struct from an array (`[]` once created a token).
pub struct Json<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let axum::Json(Object(mut v)) =
            axum::Json::<Object<serde_json::Value>>::from_request(req, state).await.map_err(json_rejection)?;
        integral(&mut v);
        if let Some(n) = past_int64(&v) {
            return Err(ApiError::bad_request(format!(
                "invalid request body: {n} is too large: integers are at most {} (int64)",
                i64::MAX
            )));
        }
        // With the path to the bad field, as axum's own extractor says it.
        serde_path_to_error::deserialize(v)
            .map(Json)
            .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
    }
}

/// Turns numbers like `50.0` into `50`: JSON (and JSON Schema) call them integers, serde's
/// integer fields would refuse them.
fn integral(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15) {
                *n = serde_json::Number::from(f as i64);
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(integral),
        serde_json::Value::Object(m) => m.values_mut().for_each(integral),
        _ => {}
    }
}

/// A number in `v` past `i64::MAX`: every integer of the API is `int64` at most (the store
/// keeps them as such), even where serde would read a `u64`.
fn past_int64(v: &serde_json::Value) -> Option<u64> {
    match v {
        serde_json::Value::Number(n) => n.as_u64().filter(|n| *n > i64::MAX as u64),
        serde_json::Value::Array(a) => a.iter().find_map(past_int64),
        serde_json::Value::Object(m) => m.values().find_map(past_int64),
        _ => None,
    }
}

/// `T` read from a JSON object only.
pub struct Object<T>(pub T);

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Object<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visit<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData)).map(Object)
    }
}

/// Refuses a number outside what the spec states for query parameter `name`.
pub fn in_range(name: &str, value: u64, min: u64, max: u64) -> Result<(), ApiError> {
    if value < min || value > max {
        return Err(ApiError::bad_request(format!("invalid query: `{name}` is {value}: use {min} to {max}")));
    }
    Ok(())
}

fn json_rejection(e: JsonRejection) -> ApiError {
    match e {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "expected a JSON body: send `Content-Type: application/json`",
        ),
        JsonRejection::JsonSyntaxError(e) => ApiError::bad_request(format!("malformed JSON: {}", e.body_text())),
        JsonRejection::JsonDataError(e) => ApiError::bad_request(format!("invalid request body: {}", e.body_text())),
        e if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body too large: at most {MAX_BODY} bytes"))
        }
        e => ApiError::new(e.status(), format!("invalid request body: {}", e.body_text())),
    }
}

/// A query string whose rejection is a JSON 400.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Query(q.0))
            .map_err(|e: QueryRejection| ApiError::bad_request(format!("invalid query: {}", e.body_text())))
    }
}

/// Path parameters whose rejection is a JSON 400 (e.g. a job id that is not a number).
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e: PathRejection| ApiError::bad_request(format!("invalid path: {}", e.body_text())))
    }
}

/// A length of time from the query (`since`, `step`), in seconds, at most back to 1970.
pub fn period(name: &str, text: Option<&str>, default: &str, now: jiff::Timestamp) -> Result<i64, ApiError> {
    let text = text.filter(|s| !s.is_empty()).unwrap_or(default);
    let secs = berth_model::parse_duration(text)
        .map_err(|e| ApiError::bad_request(format!("invalid `{name}` `{text}`: {e} (e.g. 7d, 12h)")))?;
    Ok(i64::try_from(secs).unwrap_or(i64::MAX).min(now.as_second()))
}
