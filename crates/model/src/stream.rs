//! Byte streams between a user and a running kernel (`berth exec`, `berth attach`), carried
//! over WebSockets: the client's to the manager (`GET /v1/jobs/{id}/exec`,
//! `GET /v1/jobs/{id}/attach`), and one the agent dials back to the manager for each stream
//! (`GET /v1/agents/streams/{id}`), which the manager splices. A stream never shares the
//! agent's control connection, so a busy one delays no command.
//!
//! After the upgrade the client sends one text message, an [`ExecRequest`] or an
//! [`AttachRequest`]; then both sides send binary messages whose first byte names the channel
//! ([`STDIN`], [`STDOUT`], ...). The stream ends with one [`CONTROL`] message, a JSON
//! [`StreamEnd`], then a close. On a terminal (`tty`) the output is one stream ([`STDOUT`]) and
//! the client sends its window size ([`RESIZE`]) first and whenever it changes.
//!
//! Port forwards (`GET /v1/jobs/{id}/port-forward?port=P&kernel=N`, one WebSocket per TCP
//! connection) use the same channels with no request message: the agent's first frame is
//! [`OPENED`] once it connected (or a [`CONTROL`] end saying why not), then the bytes the
//! client sends go in on [`STDIN`], the bytes the port answers come back on [`STDOUT`], and
//! [`STDIN_EOF`] is the client's half-close.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Client → kernel: bytes for the command's standard input.
pub const STDIN: u8 = 0;
/// Kernel → client: the command's standard output.
pub const STDOUT: u8 = 1;
/// Kernel → client: the command's standard error.
pub const STDERR: u8 = 2;
/// Kernel → client: the end, a JSON [`StreamEnd`].
pub const CONTROL: u8 = 3;
/// Client → kernel: standard input is closed (no payload).
pub const STDIN_EOF: u8 = 4;
/// Client → kernel: the client's terminal size, a JSON [`WindowSize`] (ignored without a tty).
pub const RESIZE: u8 = 5;
/// Kernel → client, forwards only: the connection inside the kernel is open, a JSON
/// [`ForwardOpened`]; data follows.
pub const OPENED: u8 = 6;

/// The most bytes of one data message (a read of the command's output is sent as it comes,
/// up to this).
pub const MAX_CHUNK: usize = 64 * 1024;

/// The read buffer of a stream's WebSocket, on both ends. tungstenite zero-fills up to this
/// much of its buffer before every read (128 KiB by default: with ~100-byte frames, a
/// forwarded HTTP request's, that memset was 15% of the serving path); a larger frame still
/// arrives whole, in several reads.
pub const READ_BUFFER: usize = 16 * 1024;

/// What `berth exec` asks for (the first message of the client's stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExecRequest {
    /// Which kernel of the job (0: `main`).
    #[serde(default)]
    pub kernel: u32,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Whether the client sends standard input (else the command's is empty).
    #[serde(default)]
    pub stdin: bool,
    /// Run the command on a pseudo-terminal (its controlling terminal), like `ssh -t`.
    #[serde(default)]
    pub tty: bool,
    /// Variables set for the command over the kernel's own environment (`srun`'s task
    /// variables); device variables (`CUDA_VISIBLE_DEVICES`, ...) stay the kernel's.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// Only these of the kernel's GPUs, by position in its binding (0: its first), for the
    /// command (`srun --gpus-per-task`): the agent narrows the kernel's set, never widens it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<u32>>,
}

/// The most variables an [`ExecRequest`] may set.
pub const MAX_EXEC_ENV_VARS: usize = 4096;

/// The most bytes (`NAME=value\0` each) of an [`ExecRequest`]'s variables: a job's own limit.
pub const MAX_EXEC_ENV_BYTES: usize = 256 * 1024;

impl ExecRequest {
    /// Checks the command and the variables: names without `=` or NUL, values without NUL,
    /// at most [`MAX_EXEC_ENV_VARS`] of them and [`MAX_EXEC_ENV_BYTES`] in all.
    pub fn validate(&self) -> Result<(), String> {
        if self.command.first().is_none_or(|c| c.is_empty()) {
            return Err("give a command to run: berth exec ID -- CMD [ARGS...]".into());
        }
        if self.command.iter().any(|a| a.contains('\0')) {
            return Err("command arguments must not contain NUL bytes".into());
        }
        if self.env.len() > MAX_EXEC_ENV_VARS {
            return Err(format!("at most {MAX_EXEC_ENV_VARS} environment variables may be set"));
        }
        for (k, v) in &self.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') {
                return Err(format!("invalid environment variable name `{k}`: use NAME=value"));
            }
            if v.contains('\0') {
                return Err(format!("environment variable `{k}` holds a NUL byte"));
            }
        }
        if let Some(g) = &self.gpus {
            let mut seen = std::collections::BTreeSet::new();
            if g.is_empty() || g.len() > 1024 || !g.iter().all(|p| seen.insert(*p)) {
                return Err("gpus: name 1 to 1024 distinct positions among the kernel's GPUs (0: its first)".into());
            }
        }
        let bytes: usize = self.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        let max = MAX_EXEC_ENV_BYTES;
        if bytes > max {
            return Err(format!(
                "the environment is {} KiB, over the limit of {} KiB",
                bytes.div_ceil(1024),
                max / 1024
            ));
        }
        Ok(())
    }
}

/// What `berth attach` (and `berth run`) asks for: the kernel's own input and output.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct AttachRequest {
    /// Which kernel of the job (only the main one, 0, has a terminal or input today).
    #[serde(default)]
    pub kernel: u32,
}

/// A terminal's size in character cells (the payload of [`RESIZE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WindowSize {
    pub rows: u16,
    pub cols: u16,
}

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct StreamEnd {
    /// The command's exit code (128 + signal when killed); none when it never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it could not run, or why the stream broke.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// How a forwarded connection opened.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ForwardOpened {
    /// The port connected to.
    pub port: u16,
    /// The secret a token-authenticated app (Jupyter) expects from the proxy; never sent on
    /// to users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Where the port listens on the node's own network, when the kernel shares it (a
    /// process, a container on the host network): the unspecified address for every address.
    /// The manager's router then reaches a serving replica without this tunnel. `None`: the
    /// kernel's network is its own (a container's private network), or nothing listens there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<std::net::IpAddr>,
}

/// A binary message on `channel` with `data`.
pub fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 1);
    out.push(channel);
    out.extend_from_slice(data);
    out
}

/// The channel and payload of a binary message; `None` for an empty one.
pub fn split(message: &[u8]) -> Option<(u8, &[u8])> {
    message.split_first().map(|(c, rest)| (*c, rest))
}

/// The [`CONTROL`] message that ends a stream.
pub fn end_frame(end: &StreamEnd) -> Vec<u8> {
    frame(CONTROL, serde_json::to_vec(end).unwrap_or_default().as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_env_is_checked() {
        let with = |k: &str, v: &str| ExecRequest {
            kernel: 0,
            command: vec!["true".into()],
            stdin: false,
            tty: false,
            env: [(k.to_string(), v.to_string())].into(),
            gpus: None,
        };
        assert!(with("RANK", "3").validate().is_ok());
        let gpus = |g: Vec<u32>| ExecRequest { gpus: Some(g), ..with("RANK", "3") };
        assert!(gpus(vec![0, 1]).validate().is_ok());
        assert!(gpus(vec![1, 1]).validate().unwrap_err().contains("distinct positions"));
        assert!(gpus(vec![]).validate().is_err());
        assert!(with("A=B", "1").validate().unwrap_err().contains("invalid environment variable name"));
        assert!(with("", "1").validate().is_err());
        assert!(with("A", "x\0y").validate().unwrap_err().contains("NUL"));
        let big = "x".repeat(MAX_EXEC_ENV_BYTES);
        assert!(with("A", &big).validate().unwrap_err().contains("over the limit"));
        let mut none = with("A", "1");
        none.command = vec![];
        assert!(none.validate().is_err());
    }

    #[test]
    fn frames_carry_their_channel() {
        assert_eq!(split(&frame(STDOUT, b"hi")), Some((STDOUT, &b"hi"[..])));
        assert_eq!(split(&[]), None);
        let end = StreamEnd { exit_code: Some(3), error: None };
        let (c, body) = split(&end_frame(&end)).map(|(c, b)| (c, b.to_vec())).unwrap();
        assert_eq!((c, serde_json::from_slice::<StreamEnd>(&body).unwrap()), (CONTROL, end));
        let req: ExecRequest = serde_json::from_str(r#"{"command":["id"]}"#).unwrap();
        assert_eq!((req.kernel, req.stdin, req.tty), (0, false, false));
        assert!(req.env.is_empty() && req.validate().is_ok());
        let size: WindowSize = serde_json::from_str(r#"{"rows":24,"cols":80}"#).unwrap();
        assert_eq!(size, WindowSize { rows: 24, cols: 80 });
    }
}
