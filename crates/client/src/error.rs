//! What can go wrong talking to a manager, as one enum a caller can match on: the manager's
//! refusal (its HTTP status and the API's error body, with its typed reason), a manager that cannot be reached (with
//! its address), a certificate that is not trusted, credentials that are missing or broken.
//! Each message says what was wrong and how to fix it; the CLI prints them as they are.

use std::path::PathBuf;

use berth_model::api::{ErrorBody, ErrorReason};
use reqwest::StatusCode;

/// Why a call to the manager (or reading the credentials) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The manager refused the request (4xx other than 401): its status and the API's words,
    /// and why as a word where the manager says ([`Error::refused_reason`]).
    #[error("{message}")]
    Refused { status: StatusCode, message: String, reason: Option<ErrorReason> },
    /// The token is missing, unknown, expired or revoked (401).
    #[error("{message}{}", unauthorized_hint(*.reason))]
    Unauthorized { message: String, reason: Option<ErrorReason> },
    /// The manager failed (5xx): the fault is not the caller's.
    #[error("the berth manager failed ({}): {message}", .status.as_u16())]
    Server { status: StatusCode, message: String },
    /// Nothing answered at `at` (a URL, or `unix socket PATH`); `hint` says what to check.
    #[error("cannot reach the berth manager at {at}: {hint}")]
    Unreachable {
        at: String,
        hint: &'static str,
        #[source]
        source: Option<std::io::Error>,
    },
    /// The manager accepted the connection and did not answer in time.
    #[error("the berth manager at {at} did not answer in time")]
    Timeout { at: String },
    /// The manager's certificate is signed by nobody this client trusts.
    #[error(
        "the berth manager's certificate at {at} is not trusted ({why}): set BERTH_CA_FILE to the CA certificate (PEM) that signed it"
    )]
    Untrusted { at: String, why: String },
    /// The certificate is trusted but names other hosts.
    #[error(
        "the berth manager's certificate at {at} is not valid for this address ({why}): use a name it is valid for in BERTH_URL, or set BERTH_CA_FILE to the certificate itself"
    )]
    WrongName { at: String, why: String },
    /// An `https://` URL for a manager that serves plain HTTP.
    #[error("the berth manager at {at} does not speak TLS: use http:// in BERTH_URL")]
    NotTls { at: String },
    /// The CA file cannot be used.
    #[error(transparent)]
    CaFile(#[from] berth_tls::client::CaFileError),
    /// Another transport failure, with reqwest's cause.
    #[error("request to the berth manager at {at} failed")]
    Request {
        at: String,
        #[source]
        source: reqwest::Error,
    },
    /// A WebSocket could not be opened (for another reason than a refusal).
    #[error("cannot open a stream to the berth manager at {at}: {error}")]
    Stream { at: String, error: Box<tokio_tungstenite::tungstenite::Error> },
    /// The manager's answer is not what this client expects (another version, a proxy).
    #[error("unexpected answer from the manager for {path}")]
    Decode {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    /// The answer broke a rule of the protocol (a bad header value, an unreadable body).
    #[error("{0}")]
    Protocol(String),
    /// Several managers are configured and none leads now.
    #[error("no manager leads right now (a takeover is under way): try again in a few seconds")]
    NoLeader,
    /// A manager URL that is not `http://` or `https://` (BERTH_URL, the credentials file).
    #[error("invalid manager url `{url}`: {why}")]
    InvalidUrl { url: String, why: String },
    /// No manager configured; `looked` says where this client looked (see `credentials`).
    #[error("{NOT_CONFIGURED}{looked}")]
    NotConfigured { looked: String },
    /// `BERTH_URL` without a token.
    #[error("BERTH_URL is set but no token is: set BERTH_TOKEN too ({NOT_CONFIGURED})")]
    NoToken,
    /// `BERTH_TOKEN` without a URL.
    #[error("BERTH_TOKEN is set but no manager URL is: set BERTH_URL too ({NOT_CONFIGURED})")]
    NoUrl,
    /// `--context`/`BERTH_CONTEXT` (or the file's current context) names no context.
    #[error("unknown context `{name}`{}: {}", if *.chosen { "" } else { " (the current context in the credentials file)" }, known_contexts(.known))]
    UnknownContext { name: String, chosen: bool, known: Vec<String> },
    /// A context name with characters outside the rule.
    #[error(
        "invalid context name `{0}`: use 1 to 63 letters, digits, `.`, `_` or `-`, starting with a letter or digit"
    )]
    InvalidContextName(String),
    /// Neither `XDG_CONFIG_HOME` nor `HOME` says where the credentials file is.
    #[error("cannot find the credentials file: neither XDG_CONFIG_HOME nor HOME is set")]
    NoConfigDir,
    /// The credentials file is not valid TOML of the expected shape.
    #[error("invalid credentials file {}", .path.display())]
    BadCredentials {
        path: PathBuf,
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A file could not be read or written; `what` says which and how.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Something this client could not set up (its HTTP stack, a task).
    #[error("{what}")]
    Internal {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The start of every "no manager" message.
pub(crate) const NOT_CONFIGURED: &str = "no berth manager configured: run `berth up`, or set BERTH_URL and BERTH_TOKEN";

impl Error {
    /// The status of a request the manager refused (4xx but 401), for callers that act on it:
    /// a 404 that means "nothing there", a 409 that says where an upload stands.
    pub fn refused_status(&self) -> Option<StatusCode> {
        match self {
            Error::Refused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// Why the manager refused the request (4xx but 401), where it says: the typed reason
    /// callers decide by (a job that is pending, or has ended), never the message's words.
    pub fn refused_reason(&self) -> Option<ErrorReason> {
        match self {
            Error::Refused { reason, .. } => *reason,
            _ => None,
        }
    }

    /// Whether the mistake is in how the caller named things (an unknown or invalid context),
    /// not in the cluster: the CLI exits 2 for these, like a usage error.
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::UnknownContext { .. } | Error::InvalidContextName(_))
    }

    /// The error of an answer with `status` and the API's error text `message` (no reason).
    pub fn from_answer(status: StatusCode, message: String) -> Error {
        Error::from_body(status, ErrorBody::new(message))
    }

    /// The error of an answer with `status` and the API's error body.
    pub fn from_body(status: StatusCode, body: ErrorBody) -> Error {
        let ErrorBody { error: message, reason } = body;
        if status.is_server_error() {
            Error::Server { status, message }
        } else if status == StatusCode::UNAUTHORIZED {
            Error::Unauthorized { message, reason }
        } else {
            Error::Refused { status, message, reason }
        }
    }

    pub(crate) fn io(what: String, source: std::io::Error) -> Error {
        Error::Io { what, source }
    }

    pub(crate) fn internal(what: &'static str, source: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error::Internal { what, source: Box::new(source) }
    }
}

/// Where a 401's token comes from, unless the manager's message already says: its answers for
/// a missing or invalid token name `BERTH_TOKEN` themselves.
fn unauthorized_hint(reason: Option<ErrorReason>) -> &'static str {
    match reason {
        Some(ErrorReason::TokenMissing | ErrorReason::TokenInvalid) => "",
        _ => " (check BERTH_TOKEN or the credentials file)",
    }
}

fn known_contexts(known: &[String]) -> String {
    if known.is_empty() {
        "there are none: add one with `berth context add` or `berth login`".to_string()
    } else {
        format!("known contexts: {}", known.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_keep_the_managers_words() {
        let e = Error::from_answer(StatusCode::CONFLICT, "job 7 already finished".into());
        assert_eq!(e.to_string(), "job 7 already finished");
        assert_eq!(e.refused_status(), Some(StatusCode::CONFLICT));
        let e = Error::from_answer(StatusCode::INTERNAL_SERVER_ERROR, "store unavailable".into());
        assert_eq!(e.to_string(), "the berth manager failed (500): store unavailable");
        let e = Error::from_answer(StatusCode::UNAUTHORIZED, "invalid token".into());
        assert_eq!(e.to_string(), "invalid token (check BERTH_TOKEN or the credentials file)");
        let missing = ErrorBody { error: "no token: set BERTH_TOKEN".into(), reason: Some(ErrorReason::TokenMissing) };
        let e = Error::from_body(StatusCode::UNAUTHORIZED, missing);
        assert_eq!(e.to_string(), "no token: set BERTH_TOKEN");
    }

    #[test]
    fn a_refusal_carries_the_managers_reason() {
        let body = ErrorBody { error: "job 7 is pending".into(), reason: Some(ErrorReason::JobPending) };
        let e = Error::from_body(StatusCode::CONFLICT, body.clone());
        assert_eq!((e.to_string(), e.refused_reason()), ("job 7 is pending".into(), Some(ErrorReason::JobPending)));
        assert_eq!(Error::from_answer(StatusCode::CONFLICT, "job 7 is pending".into()).refused_reason(), None);
        let failed = Error::from_body(StatusCode::INTERNAL_SERVER_ERROR, body);
        assert_eq!(failed.refused_reason(), None, "only a refusal has a reason");
    }
}
