//! Running berth as a system service: secrets read from files instead of command lines
//! (`--join-token-file`, systemd credentials), readiness and stopping told to the service
//! manager (`sd_notify`: a unit of `Type=notify` is started once berth serves), and the log
//! format (`--log-format json` for log shippers).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{Context, bail};
use clap::ValueEnum;

/// How daemons write their log (stderr).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Lines for people
    #[default]
    Text,
    /// One JSON object per line (journald, Loki, Elasticsearch and the like)
    Json,
}

/// `--log-format`, a flag of the daemons only (`up`, `manager`, `agent`, `cache serve`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct LogArgs {
    /// How the daemon writes its log: text, or json (one object per line, for log shippers)
    #[arg(long, value_enum, default_value_t, env = "BERTH_LOG_FORMAT", value_name = "FORMAT")]
    pub log_format: LogFormat,
}

/// Installs the global log subscriber: `RUST_LOG` if set, else `default`.
pub fn init_logging(default: &str, format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        // Flattened: a line's fields (the access log's method, path, status...) are keys of
        // its object, not of a nested `fields`.
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
    }
}

/// A secret kept in a file (a join token, a systemd credential): its first line, trimmed.
/// A file others may read is refused: the secret would be no secret.
pub fn read_secret_file(path: &Path, what: &str) -> anyhow::Result<String> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    if meta.mode() & 0o004 != 0 {
        bail!(
            "the {what} file {} can be read by every user: make it private (chmod 600 {})",
            path.display(),
            path.display()
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read the {what} file {}", path.display()))?;
    let secret = text.lines().next().unwrap_or("").trim().to_string();
    if secret.is_empty() {
        bail!("the {what} file {} is empty", path.display());
    }
    Ok(secret)
}

/// Tells the service manager that berth serves now (nothing outside a `Type=notify` unit).
pub fn ready(status: &str) {
    notify(&[sd_notify::NotifyState::Ready, sd_notify::NotifyState::Status(status)]);
}

/// Tells the service manager that berth is stopping.
pub fn stopping() {
    notify(&[sd_notify::NotifyState::Stopping]);
}

fn notify(states: &[sd_notify::NotifyState]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!("cannot notify the service manager: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secret_files_are_private_and_not_empty() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "s3cret\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret_file(&p, "join token").unwrap(), "s3cret");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(read_secret_file(&p, "join token").unwrap_err().to_string().contains("chmod 600"));
        std::fs::write(&p, "\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_secret_file(&p, "join token").unwrap_err().to_string().contains("is empty"));
        let missing = read_secret_file(&dir.path().join("nope"), "join token").unwrap_err();
        assert!(format!("{missing:#}").contains("cannot read the join token file"));
    }

    #[test]
    fn ready_tells_a_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // SAFETY: this test is the only one in the binary that touches NOTIFY_SOCKET.
        unsafe { std::env::set_var("NOTIFY_SOCKET", &path) };
        ready("serving");
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let mut buf = [0u8; 256];
        let n = sock.recv(&mut buf).unwrap();
        let got = String::from_utf8_lossy(&buf[..n]);
        assert!(got.contains("READY=1") && got.contains("STATUS=serving"), "{got}");
    }
}
