//! What `berth sim` replays a trace under: a named queue policy (`--policy`) or a queue of a
//! manager's config file (`--config`), as a [`Setup`], and the replay's options.

use std::collections::BTreeMap;

use super::cluster::QUEUE;
use crate::{HeadOfLine, Millis, Ordering, PreemptAction, Preemption, QueueConfig, Scoring};

/// A named queue policy of `berth sim` (`--policy`): an ordering with a head-of-line policy,
/// scoring and preemption (names: [`Policy::name`], kebab-case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "kebab-case")]
pub enum Policy {
    /// fifo + strict
    Fifo,
    /// lifo + strict
    Lifo,
    /// fifo + skip-after-10
    Skip,
    /// fifo + EASY backfill
    Backfill,
    /// drf + backfill
    Drf,
    /// fair-share + backfill
    FairShare,
    /// fifo + backfill + spread scoring
    Spread,
    /// priority bands + backfill + preemption (requeue); needs a trace with priorities
    Preempt,
    /// qssf + backfill: shortest expected service first, on predictions
    Qssf,
    /// las + backfill + preemption by level (Tiresias' 2D-LAS)
    Las,
}

impl Policy {
    /// Every policy, in the order of `--policy all`.
    pub const ALL: &'static [Policy] = <Policy as strum::VariantArray>::VARIANTS;

    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The queue configuration this policy stands for.
    pub fn queue_config(self, opts: &SimOptions) -> QueueConfig {
        let mut q = QueueConfig::new(QUEUE);
        q.default_time_limit_ms = opts.default_time_limit_ms;
        q.head_of_line = HeadOfLine::Backfill;
        q.reservations = opts.reservations;
        q.reserve_after_ms = opts.reserve_after_ms;
        match self {
            Policy::Fifo => q.head_of_line = HeadOfLine::Strict,
            Policy::Lifo => {
                q.ordering = Ordering::Lifo;
                q.head_of_line = HeadOfLine::Strict;
            }
            Policy::Skip => q.head_of_line = HeadOfLine::SkipAfter(10),
            Policy::Backfill => {}
            Policy::Drf => q.ordering = Ordering::Drf,
            Policy::FairShare => q.ordering = Ordering::FairShare,
            Policy::Spread => q.scoring = Scoring::Spread,
            Policy::Preempt => {
                q.preemption = Some(Preemption { action: PreemptAction::Requeue, min_runtime_ms: opts.min_runtime_ms })
            }
            Policy::Qssf => q.ordering = Ordering::Qssf,
            Policy::Las => {
                q.ordering = Ordering::Las;
                q.preemption = Some(Preemption { action: PreemptAction::Requeue, min_runtime_ms: opts.min_runtime_ms });
            }
        }
        q
    }

    /// The replay's setup for this policy.
    pub fn setup(self, opts: &SimOptions) -> Setup {
        let victims = match self {
            Policy::Preempt => Victims::UpToPriority(opts.preemptible_max_priority),
            Policy::Las | Policy::Qssf => Victims::All,
            _ => Victims::None,
        };
        Setup { name: self.name().into(), queue: self.queue_config(opts), project_weights: BTreeMap::new(), victims }
    }
}

/// Which running jobs of a replay may be preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Victims {
    None,
    /// Jobs of this priority or lower.
    UpToPriority(i32),
    All,
}

/// What one replay runs under: its name in the results, the queue every trace job goes to
/// (it holds every node), the projects' fair-share weights (a trace job's project is its
/// user), and which jobs may be preempted.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub name: String,
    pub queue: QueueConfig,
    pub project_weights: BTreeMap<String, f64>,
    pub victims: Victims,
}

impl Setup {
    /// A queue of a manager's config file, as `berth sim --config` replays it: its ordering,
    /// head-of-line policy, reservations, wait bound, scoring, default time limit, `las`
    /// thresholds and preemption as configured. Under `las` and `qssf` every job may be
    /// stopped for less service, as with `--policy las`; under priority preemption, jobs of
    /// priority ≤ `SimOptions::preemptible_max_priority`.
    pub fn of_queue(queue: QueueConfig, project_weights: BTreeMap<String, f64>, opts: &SimOptions) -> Setup {
        let victims = match (queue.ordering, queue.preemption) {
            (Ordering::Las | Ordering::Qssf, _) => Victims::All,
            (_, Some(_)) => Victims::UpToPriority(opts.preemptible_max_priority),
            (_, None) => Victims::None,
        };
        let name = queue.name.clone();
        Setup { name, queue: QueueConfig { name: QUEUE.into(), ..queue }, project_weights, victims }
    }
}

/// A `--policy` name that names no policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown policy `{0}`: use one of {names}", names = Policy::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, UnknownPolicy> {
        Policy::ALL.iter().copied().find(|p| p.name() == s).ok_or_else(|| UnknownPolicy(s.to_string()))
    }
}

/// `berth sim --reservations` unless given: the recommended queue setting.
pub const DEFAULT_RESERVATIONS: u32 = crate::RECOMMENDED_RESERVATIONS;
/// `berth sim --reserve-after` unless given (`off`: no wait bound).
pub const DEFAULT_RESERVE_AFTER: &str = "12h";

/// Replay options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// The queue's default time limit (backfill's estimate for jobs without one: every Philly
    /// job unless `time_limit_from_duration`). Jobs are never killed at it.
    pub default_time_limit_ms: Millis,
    /// Oracle: give every job its true duration as its time limit (perfect estimates).
    pub time_limit_from_duration: bool,
    /// Fair-share usage half-life.
    pub half_life_ms: Millis,
    /// A requeued (preempted) job resumes with its remaining time (checkpointed) instead of
    /// starting over.
    pub checkpoint: bool,
    /// A requeued job resumes from its last checkpoint, taken every this much of its run
    /// time (the work since is lost); `None` (and not `checkpoint`): it starts over.
    pub checkpoint_interval_ms: Option<Millis>,
    /// Predict run times from history (`predict.rs`) for backfill and `qssf`.
    pub predict: bool,
    /// Backfill reservations per pass ([`QueueConfig::reservations`]).
    pub reservations: u32,
    /// The wait bound ([`QueueConfig::reserve_after_ms`]).
    pub reserve_after_ms: Option<Millis>,
    /// `preempt` and `las`: a job that has run less than this is never a victim. Keep it at
    /// least the checkpoint interval: shorter, a victim stopped before its first checkpoint
    /// loses its whole run, and an overloaded queue stops the same jobs again and again (SDSC
    /// Blue, first 30,000 jobs at 144 nodes: `preempt` 21 days mean JCT at 10 min, 4.6 h at
    /// 30 min; FIFO 13.8 h).
    pub min_runtime_ms: Millis,
    /// `preempt` policy: jobs of priority ≤ this are preemptible.
    pub preemptible_max_priority: i32,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            default_time_limit_ms: 3_600_000,
            time_limit_from_duration: false,
            half_life_ms: 7 * 86_400_000,
            checkpoint: false,
            checkpoint_interval_ms: None,
            predict: true,
            reservations: crate::RECOMMENDED_RESERVATIONS,
            reserve_after_ms: Some(crate::RECOMMENDED_RESERVE_AFTER_MS),
            min_runtime_ms: 600_000,
            preemptible_max_priority: 0,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("policy {policy}: {why}")]
    NotApplicable { policy: &'static str, why: String },
    #[error("the cluster is empty: give it at least one node with CPUs")]
    EmptyCluster,
}
