//! Why a setting of the config file, or of a queue's policy sent to the API, is not valid: one
//! variant per refusal, each naming the key and saying what to fix (the words are the ones
//! the file's users and `berth admin queue set` have always seen).

use berth_model::QuantityError;
use berth_sched::Ordering;

/// A setting that is not valid, as [`super::parse`], [`super::apply_update`] and
/// [`super::from_policy`] refuse it.
#[derive(Debug, thiserror::Error)]
pub enum SettingError {
    /// The file is not TOML of the expected shape (an unknown key, a wrong type).
    #[error("{}", .0.message())]
    Toml(#[from] Box<toml::de::Error>),
    /// A `[[queue]]` entry's setting, with the queue's name.
    #[error("queue `{queue}`: {error}")]
    InQueue { queue: String, error: Box<SettingError> },
    #[error("queue `{0}` is defined twice")]
    QueueTwice(String),
    #[error("queue name `{0}`: use 1-64 letters, digits, `-` and `_`")]
    QueueName(String),
    #[error("store and store_file: give one of them")]
    StoreTwice,
    #[error("store: {0}")]
    Store(berth_store::StoreError),
    #[error(
        "store: `{0}` holds a password: put it in ~/.pgpass (or PGPASSFILE), or the URL in a 0600 file named by \
         store_file"
    )]
    StorePassword(String),
    #[error("store_file: {0}")]
    StoreFile(berth_store::StoreError),
    #[error("fair_share.half_life: {0}")]
    HalfLife(QuantityError),
    #[error("fair_share.half_life must be more than 0s")]
    HalfLifeZero,
    #[error("fair_share.weights.{project} = {weight}: a weight must be a number above 0")]
    Weight { project: String, weight: f64 },
    #[error("retain: {0}")]
    Retain(Box<SettingError>),
    /// A retention period that is not a duration (its parser's words alone: `--retain` shows
    /// them after the flag).
    #[error("{0}")]
    RetainDuration(QuantityError),
    #[error("`{0}` is too short: finished jobs are kept at least 1h (e.g. 180d)")]
    RetainTooShort(String),
    #[error(transparent)]
    Qos(#[from] crate::qos::QosError),
    #[error(
        "head_of_line `{0}` is not valid: use \"strict\", \"backfill\" or \"skip-after-N\" with N ≥ 1, e.g. \
         \"skip-after-3\""
    )]
    HeadOfLine(String),
    #[error("ordering `{}` is not valid: use {}", .0, Ordering::names_quoted())]
    Ordering(String),
    #[error(
        "reservations = {0} is not valid: use a whole number of at least 1 (blocked jobs that hold a backfill \
         reservation in each pass; 1 is EASY backfill)"
    )]
    Reservations(i64),
    #[error("las_thresholds is empty: give at least one duration of device time, e.g. [\"1h\", \"10h\"]")]
    LasEmpty,
    #[error("las_thresholds: each threshold must be more than 0s, e.g. [\"1h\", \"10h\"]")]
    LasZero,
    #[error(
        "las_thresholds [{}] are not ascending: list each level's service after the one before, e.g. [\"1h\", \
         \"10h\"]",
        shown(.0)
    )]
    LasOrder(Vec<u64>),
    #[error("las_thresholds: `{text}`: {error} (durations of device time, e.g. \"1h\")")]
    LasThreshold { text: String, error: QuantityError },
    #[error("scoring `{0}` is not valid: use \"binpack\" or \"spread\"")]
    Scoring(String),
    #[error("preemption `{0}` is not valid: use \"off\", \"requeue\" or \"cancel\"")]
    Preemption(String),
    #[error("default_time_limit must be more than 0s")]
    DefaultTimeLimitZero,
    #[error("backfill_window must be at least 1 (jobs tried past the first that cannot start)")]
    BackfillWindowZero,
    /// A duration that does not read, under its key.
    #[error("{key}: {error}")]
    Duration { key: &'static str, error: QuantityError },
    /// A limit of 0s where `none` means no limit.
    #[error("{0} must be more than 0s (or `none`)")]
    ZeroNotNone(&'static str),
    #[error("reserve_after: {0} (or \"off\")")]
    ReserveAfter(QuantityError),
    #[error("reserve_after must be more than 0s (or \"off\" for no wait bound)")]
    ReserveAfterZero,
    #[error("projects: `{0}` is not a project name (1-64 letters, digits, `-`, `_`, `.`)")]
    Project(String),
    #[error("nodes: `{0}` is not a node name (letters, digits, `-`, `_`, `.`)")]
    Node(String),
    #[error("node_labels: `{key}={value}` is not a label (1-63 letters, digits, `-`, `_`, `.`, `/`)")]
    Label { key: String, value: String },
    #[error(
        "default_time_limit ({}) is above max_time_limit ({}): lower the default or raise the maximum",
        berth_model::format_duration(*.default),
        berth_model::format_duration(*.max)
    )]
    DefaultAboveMax { default: u64, max: u64 },
}

impl SettingError {
    /// This error of the `[[queue]]` entry named `queue`.
    pub fn in_queue(queue: &str) -> impl FnOnce(SettingError) -> SettingError + '_ {
        move |e| SettingError::InQueue { queue: queue.to_string(), error: Box::new(e) }
    }
}

fn shown(secs: &[u64]) -> String {
    secs.iter().map(|&s| berth_model::format_duration(s)).collect::<Vec<_>>().join(", ")
}
