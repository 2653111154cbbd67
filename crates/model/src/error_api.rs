//! The body of every error answer of the REST API (`ErrorBody`), and the typed reasons
//! (`ErrorReason`) callers act on instead of reading the message's text. Re-exported by `api`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Every error answer: what was wrong and how to fix it, and for the refusals programs act
/// on, why as a word (`reason`), so no client parses the message's text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
    /// Why, for programs (like Kubernetes' Status `reason`); absent where no caller needs one.
    /// A reason this client does not know reads as none, so a newer manager may add reasons.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "known_reason")]
    pub reason: Option<ErrorReason>,
}

impl ErrorBody {
    /// An answer saying `error`, with no reason.
    pub fn new(error: impl Into<String>) -> ErrorBody {
        ErrorBody { error: error.into(), reason: None }
    }
}

/// Why a request was refused, for the callers that act on it (scancel's words, the CLI's
/// hints). Each says a state, never how the message words it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, strum::EnumString, strum::Display,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum ErrorReason {
    /// The job waits in its queue: it runs nothing to signal or requeue (409).
    JobPending,
    /// The job (or job array) has ended already (409).
    JobEnded,
    /// The job has left its queue (it runs or is stopping): only a pending job can be held
    /// (409).
    JobNotPending,
    /// The signal named is not one berth knows (422).
    BadSignal,
    /// No API token was sent; the message says to set `BERTH_TOKEN` (401).
    TokenMissing,
    /// The API token is unknown, revoked or for another use; the message says to check
    /// `BERTH_TOKEN` (401).
    TokenInvalid,
}

/// An [`ErrorBody`]'s `reason`, none where it is absent or one this build does not know.
fn known_reason<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<ErrorReason>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.and_then(|r| r.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_reason_is_a_snake_case_word_and_an_unknown_one_reads_as_none() {
        let body = ErrorBody { error: "job 9 is pending".into(), reason: Some(ErrorReason::JobPending) };
        let text = serde_json::to_string(&body).unwrap();
        assert_eq!(text, r#"{"error":"job 9 is pending","reason":"job_pending"}"#);
        assert_eq!(serde_json::from_str::<ErrorBody>(&text).unwrap(), body);
        assert_eq!(serde_json::to_string(&ErrorBody::new("no")).unwrap(), r#"{"error":"no"}"#, "no reason, no key");
        let newer: ErrorBody = serde_json::from_str(r#"{"error":"x","reason":"quota_frozen"}"#).unwrap();
        assert_eq!(newer, ErrorBody::new("x"), "a newer manager's reason is none, the message still reads");
        let old: ErrorBody = serde_json::from_str(r#"{"error":"x"}"#).unwrap();
        assert_eq!(old.reason, None);
        assert_eq!(ErrorReason::BadSignal.to_string(), "bad_signal");
    }
}
