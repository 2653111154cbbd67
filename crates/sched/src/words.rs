//! Whether a pass writes its waiting jobs' reasons out in words or gives only their kinds. The
//! manager shows the messages; `berth sim` reads only the kinds, and formatting a message for
//! every job tried was a measurable part of a replay ([`crate::schedule_set_kinds`]).

use berth_model::{PendingKind, PendingReason};

/// Whether a pass writes its reasons' messages or only their kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Words {
    All,
    KindsOnly,
}

impl Words {
    /// A reason of `kind`, its message written only when the caller reads messages.
    pub fn reason(self, kind: PendingKind, text: impl FnOnce() -> String) -> PendingReason {
        match self {
            Words::All => PendingReason::new(kind, text()),
            Words::KindsOnly => PendingReason::new(kind, String::new()),
        }
    }
}
