//! `berth admin store copy`: moves an installation from one store to another (SQLite to
//! PostgreSQL, or back) with nothing lost: every table, row for row, ids, hashes and times as
//! they were, in one transaction on the target, which must be empty.

use crate::{PgStore, Result, SqliteStore, StoreError, StoreUrl};

/// A column's type, as both adapters read and bind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Int,
    /// An integer SQLite keeps in a TEXT column (`cache_bucket_tombstones.deleted_at`).
    IntFromText,
    Real,
    Text,
    Bool,
}

/// One value of one column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
    Bool(bool),
}

/// A table to copy: its columns and the order to read them in.
/// The single-row counters copied beside the tables: the cache's member counter, and the
/// leader lease's epoch (the lease itself is not copied: the new store starts unled).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters {
    pub cache_seq: i64,
    pub lease_epoch: i64,
}

pub(crate) struct Table {
    pub name: &'static str,
    pub cols: &'static [(&'static str, Kind)],
    pub order: &'static str,
}

use Kind::{Bool, Int, IntFromText, Real, Text};

/// Every table but `cache_seq` (one counter row), parents before the rows that refer to them.
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "users",
        cols: &[("id", Int), ("name", Text), ("role", Text), ("disabled", Bool), ("created_at", Int)],
        order: "id",
    },
    Table { name: "projects", cols: &[("id", Int), ("name", Text), ("created_at", Int)], order: "id" },
    Table {
        name: "project_members",
        cols: &[("project_id", Int), ("user_id", Int), ("added_at", Int)],
        order: "project_id, user_id",
    },
    Table {
        name: "api_tokens",
        cols: &[
            ("hash", Text),
            ("user_id", Int),
            ("label", Text),
            ("created_at", Int),
            ("expires_at", Int),
            ("revoked_at", Int),
            ("last_used_at", Int),
            ("scope", Text),
        ],
        order: "hash",
    },
    Table { name: "join_tokens", cols: &[("hash", Text), ("created_at", Int)], order: "hash" },
    Table {
        name: "jobs",
        cols: &[
            ("id", Int),
            ("user_id", Int),
            ("spec", Text),
            ("queue", Text),
            ("priority", Int),
            ("state", Text),
            ("attempt", Int),
            ("submitted_at", Int),
            ("started_at", Int),
            ("ended_at", Int),
            ("exit_code", Int),
            ("reason", Text),
            ("pending_reason", Text),
            ("nodes", Text),
            ("project", Text),
            ("shared", Bool),
            ("submitter_uid", Int),
            ("submitter_gid", Int),
            ("cancelled_by", Text),
            ("preempted_by", Int),
            ("preempt_action", Text),
            ("idle_stop_secs", Int),
            ("scaled_down_to", Int),
            ("end_cause", Text),
            ("used_cpu_seconds", Real),
            ("used_memory_peak_bytes", Int),
            ("used_gpu_seconds", Real),
            ("array_id", Int),
            ("array_index", Int),
            ("end_signal", Int),
            ("hold", Text),
        ],
        order: "id",
    },
    Table {
        name: "job_archive",
        cols: &[
            ("id", Int),
            ("user_id", Int),
            ("project", Text),
            ("shared", Bool),
            ("queue", Text),
            ("name", Text),
            ("state", Text),
            ("end_cause", Text),
            ("exit_code", Int),
            ("reason", Text),
            ("attempt", Int),
            ("submitted_at", Int),
            ("started_at", Int),
            ("ended_at", Int),
            ("node_count", Int),
            ("kernels_per_node", Int),
            ("cpu_milli", Int),
            ("mem_bytes", Int),
            ("gpu_milli", Int),
            ("nodes", Text),
            ("used_cpu_seconds", Real),
            ("used_memory_peak_bytes", Int),
            ("used_gpu_seconds", Real),
        ],
        order: "id",
    },
    Table {
        name: "kernels",
        cols: &[
            ("job_id", Int),
            ("attempt", Int),
            ("idx", Int),
            ("node", Text),
            ("binding", Text),
            ("exit_code", Int),
            ("cpu_seconds", Real),
            ("memory_peak_bytes", Int),
            ("gpu_seconds", Real),
        ],
        order: "job_id, attempt, idx",
    },
    Table {
        name: "transitions",
        cols: &[("seq", Int), ("job_id", Int), ("at", Int), ("from_state", Text), ("to_state", Text), ("reason", Text)],
        order: "seq",
    },
    Table {
        name: "nodes",
        cols: &[
            ("name", Text),
            ("queue", Text),
            ("topology", Text),
            ("version", Text),
            ("state", Text),
            ("last_heartbeat", Int),
            ("address", Text),
            ("drain_reason", Text),
        ],
        order: "name",
    },
    Table { name: "meta", cols: &[("key", Text), ("value", Text)], order: "key" },
    Table {
        name: "queues",
        cols: &[("name", Text), ("policy", Text), ("seed", Text), ("updated_at", Int)],
        order: "name",
    },
    Table { name: "usage", cols: &[("kind", Text), ("name", Text), ("value", Real), ("at", Int)], order: "kind, name" },
    Table {
        name: "audit",
        cols: &[("id", Int), ("at", Int), ("actor", Text), ("action", Text), ("target", Text), ("detail", Text)],
        order: "id",
    },
    Table {
        name: "quotas",
        cols: &[("kind", Text), ("name", Text), ("limits", Text), ("updated_at", Int)],
        order: "kind, name",
    },
    Table {
        name: "cache_nodes",
        cols: &[
            ("node", Text),
            ("url", Text),
            ("updated_at", Int),
            ("reported_weight", Int),
            ("weight", Int),
            ("removed", Bool),
            ("seq", Int),
        ],
        order: "node",
    },
    Table {
        name: "cache_buckets",
        cols: &[
            ("name", Text),
            ("public", Bool),
            ("quota", Int),
            ("projects", Text),
            ("updated_at", Int),
            ("origin", Text),
            ("placement", Text),
        ],
        order: "name",
    },
    Table { name: "cache_bucket_tombstones", cols: &[("name", Text), ("deleted_at", IntFromText)], order: "name" },
    Table {
        name: "folders",
        cols: &[("id", Int), ("name", Text), ("owner_id", Int), ("project", Text), ("quota", Int), ("created_at", Int)],
        order: "id",
    },
    Table {
        name: "folder_shares",
        cols: &[("folder_id", Int), ("project", Text), ("read_only", Bool), ("shared_at", Int)],
        order: "folder_id, project",
    },
    Table {
        name: "endpoints",
        cols: &[
            ("id", Int),
            ("name", Text),
            ("owner_id", Int),
            ("submitter_uid", Int),
            ("submitter_gid", Int),
            ("spec", Text),
            ("revision", Int),
            ("previous", Text),
            ("desired", Int),
            ("rollout", Text),
            ("message", Text),
            ("created_at", Int),
            ("updated_at", Int),
        ],
        order: "id",
    },
    Table {
        name: "endpoint_tokens",
        cols: &[("id", Int), ("endpoint_id", Int), ("label", Text), ("hash", Text), ("created_at", Int)],
        order: "id",
    },
];

/// What a copy moved: rows per table, parents before the rows that refer to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    pub tables: Vec<(&'static str, usize)>,
}

impl CopyReport {
    pub fn rows(&self) -> usize {
        self.tables.iter().map(|(_, n)| n).sum()
    }
}

/// Either adapter, opened.
enum Opened {
    Sqlite(SqliteStore),
    Pg(PgStore),
}

impl Opened {
    async fn open(url: &StoreUrl) -> Result<Opened> {
        Ok(match url {
            StoreUrl::Sqlite(p) => Opened::Sqlite(SqliteStore::open(p).await?),
            StoreUrl::Postgres(u) => Opened::Pg(PgStore::open(u).await?),
        })
    }

    async fn close(&self) {
        match self {
            Opened::Sqlite(s) => crate::Store::close(s).await,
            Opened::Pg(s) => crate::Store::close(s).await,
        }
    }
}

/// Copies every row of the store at `from` into the (new or empty) store at `to`, both
/// migrated to this berth's schema first; `to` holding any row is refused and left as it was.
pub async fn copy(from: &StoreUrl, to: &StoreUrl) -> Result<CopyReport> {
    if from == to {
        return Err(StoreError::BadUrl(format!("--from and --to are both {from}: copy to another store")));
    }
    if let StoreUrl::Sqlite(p) = from
        && !p.is_file()
    {
        return Err(StoreError::BadUrl(format!("{from}: no such store file")));
    }
    let (src, dst) = (Opened::open(from).await?, Opened::open(to).await?);
    let result = copy_between(&src, &dst, to).await;
    src.close().await;
    dst.close().await;
    result
}

async fn copy_between(src: &Opened, dst: &Opened, to: &StoreUrl) -> Result<CopyReport> {
    let held = match dst {
        Opened::Sqlite(s) => crate::sqlite::copy_rows_in(s).await?,
        Opened::Pg(s) => crate::postgres::copy_rows_in(s).await?,
    };
    if held > 0 {
        return Err(StoreError::BadUrl(format!(
            "{to} is not empty ({held} rows): copy into a new database, or drop this one first"
        )));
    }
    let (tables, counters) = match src {
        Opened::Sqlite(s) => crate::sqlite::copy_read(s).await?,
        Opened::Pg(s) => crate::postgres::copy_read(s).await?,
    };
    match dst {
        Opened::Sqlite(s) => crate::sqlite::copy_write(s, &tables, counters).await?,
        Opened::Pg(s) => crate::postgres::copy_write(s, &tables, counters).await?,
    }
    Ok(CopyReport { tables: TABLES.iter().zip(&tables).map(|(t, rows)| (t.name, rows.len())).collect() })
}
