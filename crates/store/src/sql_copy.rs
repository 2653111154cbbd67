//! Reading and writing whole tables for `berth admin store copy` ([`crate::copy()`]), for both SQL
//! adapters (expanded in `sqlite.rs` and `postgres.rs`, see `sql_rows.rs`): every column as its
//! typed [`crate::copy::Val`], ids and all, so nothing is renumbered or lost.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use sqlx::Row;

        use super::{Adapter, DbConn, snapshot, sql};
        use crate::Result;
        use crate::copy::{Counters, Kind, TABLES, Table, Val};

        /// Every row of every table of [`TABLES`], and the counters, from one snapshot (a manager still
        /// running meanwhile cannot make the copy inconsistent).
        pub(crate) async fn read_all(s: &Adapter) -> Result<(Vec<Vec<Vec<Val>>>, Counters)> {
            let mut tx = snapshot(&s.reader).await?;
            let mut tables = Vec::with_capacity(TABLES.len());
            for t in TABLES {
                tables.push(read_table(&mut tx, t).await?);
            }
            let cache_seq =
                sqlx::query_scalar("SELECT COALESCE(MAX(last), 0) FROM cache_seq").fetch_one(&mut *tx).await?;
            let lease_epoch =
                sqlx::query_scalar("SELECT epoch FROM leader_lease WHERE id = 1").fetch_one(&mut *tx).await?;
            tx.commit().await?;
            Ok((tables, Counters { cache_seq, lease_epoch }))
        }

        /// Every row of `t`, in its key order.
        async fn read_table(c: &mut DbConn, t: &Table) -> Result<Vec<Vec<Val>>> {
            let cols: Vec<String> = t.cols.iter().map(|(c, k)| select(c, *k)).collect();
            let q = format!("SELECT {} FROM {} ORDER BY {}", cols.join(", "), t.name, t.order);
            let rows = sqlx::query(&q).fetch_all(&mut *c).await?;
            rows.iter()
                .map(|r| {
                    t.cols
                        .iter()
                        .enumerate()
                        .map(|(i, (_, k))| {
                            Ok(match k {
                                Kind::Int | Kind::IntFromText => Val::Int(r.try_get(i)?),
                                Kind::Real => Val::Real(r.try_get(i)?),
                                Kind::Text => Val::Text(r.try_get(i)?),
                                Kind::Bool => Val::Bool(r.try_get(i)?),
                            })
                        })
                        .collect()
                })
                .collect()
        }

        /// A column as read: SQLite keeps a bucket tombstone's time in a TEXT column.
        fn select(col: &str, kind: Kind) -> String {
            match kind {
                Kind::IntFromText => format!("CAST({col} AS BIGINT) AS {col}"),
                _ => col.to_string(),
            }
        }

        /// How many rows the tables hold, all together (`cache_seq`, one counter row, not counted).
        pub(crate) async fn rows_in(s: &Adapter) -> Result<i64> {
            let mut n = 0;
            for t in TABLES {
                let c: i64 =
                    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {}", t.name)).fetch_one(&s.reader).await?;
                n += c;
            }
            Ok(n)
        }

        /// Writes `tables` (rows per entry of [`TABLES`]) and the counters in one transaction, then
        /// moves the id counters past the ids written.
        pub(crate) async fn write_all(s: &Adapter, tables: &[Vec<Vec<Val>>], counters: Counters) -> Result<()> {
            let mut tx = s.writer.begin().await?;
            for (t, rows) in TABLES.iter().zip(tables) {
                let names: Vec<&str> = t.cols.iter().map(|(c, _)| *c).collect();
                let one = format!("({})", vec!["?"; names.len()].join(", "));
                // Several rows a statement, well under either database's limit on arguments.
                for chunk in rows.chunks(100) {
                    let q = format!(
                        "INSERT INTO {} ({}) VALUES {}",
                        t.name,
                        names.join(", "),
                        vec![one.as_str(); chunk.len()].join(", ")
                    );
                    let q = sql(&q);
                    let mut query = sqlx::query(&q);
                    for v in chunk.iter().flatten() {
                        query = match v {
                            Val::Int(x) => query.bind(*x),
                            Val::Real(x) => query.bind(*x),
                            Val::Text(x) => query.bind(x.as_deref()),
                            Val::Bool(x) => query.bind(*x),
                        };
                    }
                    query.execute(&mut *tx).await?;
                }
            }
            sqlx::query(&sql("UPDATE cache_seq SET last = ?")).bind(counters.cache_seq).execute(&mut *tx).await?;
            // The epoch goes on from the old store's: agents refuse a leader older than one they knew.
            sqlx::query(&sql("UPDATE leader_lease SET epoch = ?")).bind(counters.lease_epoch).execute(&mut *tx).await?;
            super::after_copy(&mut tx).await?;
            tx.commit().await?;
            Ok(())
        }
    };
}
pub(crate) use items;
