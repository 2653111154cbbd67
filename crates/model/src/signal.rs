//! A warning signal before the time limit (Slurm's `--signal=[{R|B}:]SIG[@TIME]`): the job gets
//! signal SIG TIME seconds (default 60) before its time limit ends, so that it can save its
//! work (submitit asks for `USR2@90` and checkpoints on it).
//!
//! As in Slurm, the signal goes to the job's steps (the commands `srun` started in its kernels,
//! and their children), not to the batch shell; with `B:` only to the batch shell (each
//! kernel's main process). `R:` lets a Slurm job overlap a reservation with `MaxStartDelay`;
//! berth has no reservations, so it is accepted and changes nothing. The agent sends the signal
//! (`berth_agent::runtime::watch`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::SpecError;

/// Slurm's default warning time, in seconds before the time limit.
pub const DEFAULT_BEFORE_SECS: u16 = 60;
/// The highest signal number (Linux's `SIGRTMAX`).
pub const MAX_SIGNAL: u8 = 64;

/// The standard Linux signals by number (1..=31), without the `SIG` prefix.
const NAMES: [&str; 31] = [
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2", "PIPE", "ALRM", "TERM",
    "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO",
    "PWR", "SYS",
];

/// Which signal goes to a job, when, and to which of its processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignalSpec {
    /// The signal's number (1 to 64; 10 is SIGUSR1, 12 SIGUSR2, 15 SIGTERM).
    pub signal: u8,
    /// Seconds before the time limit (0 to 65535): at the limit minus this the signal goes.
    #[serde(default = "default_before")]
    pub before_secs: u16,
    /// Only the batch shell (each kernel's main process) gets it, none of the steps (`B:`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch_only: bool,
}

fn default_before() -> u16 {
    DEFAULT_BEFORE_SECS
}

/// A signal's name without `SIG` (`USR1`), or its number for one without a name (`40`).
pub fn signal_name(signal: u8) -> String {
    match NAMES.get(usize::from(signal).wrapping_sub(1)) {
        Some(n) => (*n).to_string(),
        None => signal.to_string(),
    }
}

/// A signal by name (`USR1`, `SIGUSR1`, `usr1`) or number (`10`, 1 to 64).
pub fn parse_signal(s: &str) -> Result<u8, SpecError> {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s.parse::<u8>().ok().filter(|n| (1..=MAX_SIGNAL).contains(n)).ok_or_else(|| {
            SpecError(format!("signal number {s} is out of range: use 1 to {MAX_SIGNAL} (or a name such as USR1)"))
        });
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    match NAMES.iter().position(|n| *n == name) {
        Some(i) => Ok(i as u8 + 1),
        None => Err(SpecError(format!(
            "unknown signal `{s}`: use a name such as USR1, USR2, TERM, INT or HUP, or a number from 1 to {MAX_SIGNAL}"
        ))),
    }
}

/// Which of a running job's processes a signal sent now (`scancel --signal`) reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SignalTarget {
    /// The steps (`srun`, `berth exec`), not the batch shell: Slurm's default.
    #[default]
    Steps,
    /// The batch shell alone, not its children (`scancel -b`).
    Batch,
    /// The batch shell with its children, and the steps (`scancel -f`).
    All,
}

impl SignalTarget {
    /// What kernel `index` of `spec` gets: a kernel that only holds its node for `srun` has no
    /// batch shell, so it gets the steps part alone (`None`: nothing).
    pub fn for_kernel(self, spec: &crate::JobSpec, index: u32) -> Option<SignalTarget> {
        match self {
            _ if !spec.holds_only(index) => Some(self),
            SignalTarget::Batch => None,
            SignalTarget::Steps | SignalTarget::All => Some(SignalTarget::Steps),
        }
    }

    /// The words for people: `steps`, `batch shell`, `batch shell and steps`.
    pub fn describe(self) -> &'static str {
        match self {
            SignalTarget::Steps => "steps",
            SignalTarget::Batch => "batch shell",
            SignalTarget::All => "batch shell and steps",
        }
    }
}

impl SignalSpec {
    /// Checks a spec sent as JSON: a signal number that exists.
    pub fn validate(&self) -> Result<(), SpecError> {
        if !(1..=MAX_SIGNAL).contains(&self.signal) {
            return Err(SpecError(format!(
                "signal number {} is out of range: use 1 to {MAX_SIGNAL} (10 is SIGUSR1, 12 SIGUSR2)",
                self.signal
            )));
        }
        Ok(())
    }

    /// When to send it, in seconds from the kernel's start, for a time limit of `limit_secs`
    /// (at once when the warning time is longer than the limit).
    pub fn at_secs(&self, limit_secs: u64) -> u64 {
        limit_secs.saturating_sub(u64::from(self.before_secs))
    }
}

impl std::fmt::Display for SignalSpec {
    /// Slurm's syntax: `B:USR1@90`, `USR2@60`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let batch = if self.batch_only { "B:" } else { "" };
        write!(f, "{batch}{}@{}", signal_name(self.signal), self.before_secs)
    }
}

impl std::str::FromStr for SignalSpec {
    type Err = SpecError;

    /// `[{R|B}:]SIG[@TIME]` (also `RB:` and `BR:`); SIG a name or number, TIME whole seconds
    /// from 0 to 65535, 60 when left out.
    fn from_str(s: &str) -> Result<SignalSpec, SpecError> {
        let bad = |m: String| SpecError(format!("invalid signal `{s}`: {m}"));
        let (flags, rest) = match s.split_once(':') {
            Some((f, r)) => (f, r),
            None => ("", s),
        };
        let upper = flags.to_ascii_uppercase();
        let batch_only = match upper.as_str() {
            "" | "R" => false,
            "B" | "RB" | "BR" => true,
            _ => {
                return Err(bad(format!(
                    "`{flags}:` is not a flag: use B: (the batch shell only) or R:, then the signal, e.g. B:USR1@90"
                )));
            }
        };
        let (sig, time) = match rest.split_once('@') {
            Some((sig, t)) => (sig, Some(t)),
            None => (rest, None),
        };
        if sig.is_empty() {
            return Err(bad("no signal: use [B:]SIG[@TIME], e.g. USR1@90 or B:TERM".into()));
        }
        let signal = parse_signal(sig).map_err(|e| bad(e.0))?;
        let before_secs = match time {
            None => DEFAULT_BEFORE_SECS,
            Some(t) => t.parse::<u16>().ok().filter(|_| t.bytes().all(|b| b.is_ascii_digit())).ok_or_else(|| {
                bad(format!("TIME `{t}` must be a whole number of seconds from 0 to 65535 (the default is 60)"))
            })?,
        };
        Ok(SignalSpec { signal, before_secs, batch_only })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> SignalSpec {
        s.parse().unwrap_or_else(|e: SpecError| panic!("{s}: {e}"))
    }

    fn spec(signal: u8, before_secs: u16, batch_only: bool) -> SignalSpec {
        SignalSpec { signal, before_secs, batch_only }
    }

    #[test]
    fn every_slurm_form_parses() {
        assert_eq!(p("USR2@90"), spec(12, 90, false));
        assert_eq!(p("USR1"), spec(10, 60, false));
        assert_eq!(p("SIGUSR1@5"), spec(10, 5, false));
        assert_eq!(p("sigterm@0"), spec(15, 0, false));
        assert_eq!(p("10@65535"), spec(10, 65535, false));
        assert_eq!(p("B:USR1@55"), spec(10, 55, true));
        assert_eq!(p("b:TERM"), spec(15, 60, true));
        assert_eq!(p("R:USR2@30"), spec(12, 30, false));
        assert_eq!(p("RB:INT"), spec(2, 60, true));
        assert_eq!(p("BR:2@1"), spec(2, 1, true));
        assert_eq!(p("64"), spec(64, 60, false));
        assert_eq!(p("KILL@10"), spec(9, 10, false));
    }

    #[test]
    fn prints_back_in_slurm_syntax() {
        for (s, shown) in [("B:SIGUSR1@55", "B:USR1@55"), ("12", "USR2@60"), ("R:40@3", "40@3"), ("sys@1", "SYS@1")] {
            assert_eq!(p(s).to_string(), shown);
            assert_eq!(p(shown), p(s));
        }
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        for (s, says) in [
            ("", "no signal"),
            ("@90", "no signal"),
            ("B:", "no signal"),
            ("FOO@90", "unknown signal `FOO`"),
            ("SIG", "unknown signal"),
            ("USR1@", "TIME `` must be a whole number"),
            ("USR1@65536", "from 0 to 65535"),
            ("USR1@-1", "from 0 to 65535"),
            ("USR1@+5", "from 0 to 65535"),
            ("USR1@1m", "from 0 to 65535"),
            ("USR1@9@9", "TIME `9@9`"),
            ("0", "out of range: use 1 to 64"),
            ("65", "out of range"),
            ("99999999999", "out of range"),
            ("X:USR1", "`X:` is not a flag"),
            ("B:R:USR1", "unknown signal `R:USR1`"),
        ] {
            let e = s.parse::<SignalSpec>().unwrap_err().to_string();
            assert!(e.contains(says) && e.starts_with(&format!("invalid signal `{s}`")), "{s}: {e}");
        }
    }

    #[test]
    fn json_is_typed_and_validated() {
        let j = serde_json::to_string(&p("B:USR1@55")).unwrap();
        assert_eq!(j, r#"{"signal":10,"before_secs":55,"batch_only":true}"#);
        assert_eq!(serde_json::to_string(&p("USR2")).unwrap(), r#"{"signal":12,"before_secs":60}"#);
        let s: SignalSpec = serde_json::from_str(r#"{"signal":12}"#).unwrap();
        assert_eq!(s, spec(12, 60, false));
        assert!(serde_json::from_str::<SignalSpec>(r#"{"signal":12,"before_secs":70000}"#).is_err());
        assert!(spec(0, 1, false).validate().unwrap_err().0.contains("out of range"));
        assert!(spec(65, 1, false).validate().is_err());
        assert!(spec(64, 1, false).validate().is_ok());
    }

    #[test]
    fn targets_skip_the_batch_shell_of_holding_kernels() {
        let mut job = crate::JobSpec::command(["/bin/true"]);
        job.launch = crate::Launch::First;
        assert_eq!(SignalTarget::Batch.for_kernel(&job, 0), Some(SignalTarget::Batch));
        assert_eq!(SignalTarget::Batch.for_kernel(&job, 1), None);
        assert_eq!(SignalTarget::All.for_kernel(&job, 1), Some(SignalTarget::Steps));
        assert_eq!(SignalTarget::Steps.for_kernel(&job, 1), Some(SignalTarget::Steps));
        assert_eq!(serde_json::to_string(&SignalTarget::All).unwrap(), r#""all""#);
        assert!(serde_json::from_str::<SignalTarget>(r#""shell""#).is_err());
    }

    #[test]
    fn the_time_counts_back_from_the_limit() {
        assert_eq!(p("USR1@55").at_secs(60), 5);
        assert_eq!(p("USR1@90").at_secs(60), 0, "a warning longer than the limit goes at once");
        assert_eq!(signal_name(12), "USR2");
        assert_eq!(signal_name(34), "34");
        assert_eq!(parse_signal("winch").unwrap(), 28);
    }
}
