//! `berth sim`: replays a job trace in virtual time through the same [`schedule`](crate::schedule) pass the
//! manager runs, and measures what each queue policy does to completion time, queueing delay,
//! utilisation and fairness.
//!
//! Pure like the rest of the crate: no I/O (the CLI opens and decompresses the trace and hands
//! a reader to [`parse_philly`] / [`parse_swf`]) and no clock (time is the trace's, in
//! [`Millis`](crate::Millis) from its first job). The same trace and options always give the same
//! [`Metrics`].
//!
//! The event loop (`engine.rs`) keeps arrivals (the sorted trace) and completions (a heap
//! keyed by `(time, seq)`); after each batch of events at one instant it runs ONE pass and
//! applies it to the replay's state (`replay.rs`) with the manager's code (`apply.rs`): starts
//! take their bindings on the ledgers and schedule their completion, preempted jobs stop at
//! once (requeued or cancelled). The pending and running jobs are the kept sets a pass reads
//! (`PendingSet`, `RunningSet`), changed as jobs arrive, start and stop.

mod cluster;
mod engine;
mod metrics;
mod policy;
mod replay;
mod trace;

pub use cluster::{Cluster, TooBig};
pub use engine::{JobOutcome, SimProgress, simulate, simulate_detailed, simulate_observed, simulate_setup, too_big};
pub use metrics::{Metrics, jain, percentile};
pub use policy::{
    DEFAULT_RESERVATIONS, DEFAULT_RESERVE_AFTER, Policy, Setup, SimError, SimOptions, UnknownPolicy, Victims,
};
pub use trace::{
    PhillyOptions, SwfOptions, Trace, TraceError, TraceFormat, TraceJob, UnknownFormat, Window, parse, parse_philly,
    parse_swf, parse_timestamp, swf_priority,
};
