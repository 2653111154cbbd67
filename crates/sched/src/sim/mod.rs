//! `berth sim`: replays a job trace in virtual time through the same [`schedule`](crate::schedule) pass the
//! manager runs, and measures what each queue policy does to completion time, queueing delay,
//! utilisation and fairness.
//!
//! Pure like the rest of the crate: no I/O (the CLI opens and decompresses the trace and hands
//! a reader to [`parse_philly`] / [`parse_swf`]) and no clock (time is the trace's, in
//! [`Millis`](crate::Millis) from its first job). The same trace and options always give the same
//! [`Metrics`].
//!
//! The event loop keeps arrivals (the sorted trace) and completions (a heap keyed by
//! `(time, seq)`); after each batch of events at one instant it runs ONE pass, applies its
//! preemptions (release, requeue) and starts (allocate the bindings on the ledgers, schedule
//! the completion), and keeps the pending and running sets as vectors updated in place.

mod engine;
mod metrics;
mod trace;

pub use engine::{
    Cluster, JobOutcome, Policy, SimError, SimOptions, SimProgress, simulate, simulate_detailed, simulate_observed,
    too_big,
};
pub use metrics::{Metrics, jain, percentile};
pub use trace::{
    PhillyOptions, SwfOptions, Trace, TraceError, TraceFormat, TraceJob, Window, parse, parse_philly, parse_swf,
    parse_timestamp, swf_priority,
};
