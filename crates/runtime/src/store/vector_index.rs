//! The index that makes a memory vector search fast (docs/memory.md "Vector search"): each
//! record's embedding reduced to one bit per dimension (its sign), in a sqlite-vec `vec0`
//! table per dimension (`memory_vec_<dims>`, made when a store first meets that dimension),
//! partitioned by model and scope. A search takes the nearest by Hamming distance from it
//! (a few bytes a record, scanned in chunks) and ranks only those by exact cosine
//! similarity, from the float vectors `memory_vectors` keeps. Comparing every float vector
//! took 190 ms at 100,000 records of 384 dimensions; this takes a few (docs/memory.md).

use rusqlite::{Connection, OptionalExtension, params};

/// How many candidates the bit index gives for each record wanted, and at least how many:
/// ranking eight times the records wanted exactly is the usual way to make up for sign bits'
/// coarseness (a record among the best by cosine is seldom outside the best few dozen by
/// Hamming distance); sqlite-vec's time grows with it (docs/memory.md).
const CANDIDATES_PER_HIT: usize = 8;
const MIN_CANDIDATES: usize = 64;
/// sqlite-vec's largest `k`.
const MAX_CANDIDATES: usize = 4096;
/// The Hamming distance first tried, as a part of the dimensions, when every record is
/// wanted however dissimilar (`min_similarity` 0 or less): a quarter of the bits differing
/// is about cosine similarity 0.7. Few records are that near, so sqlite-vec keeps few of
/// each chunk's and the search costs little beyond the distances; only when that gives
/// fewer than the records wanted is every record a candidate. With a least similarity, the
/// one search goes as far as a record at that similarity can be (`reach`).
const FIRST_RADIUS: f64 = 0.25;

/// The Hamming distance (as a part of the dimensions) within which a record of cosine
/// similarity `min` to the query all but surely is: for vectors at angle θ each sign bit
/// differs with chance θ/π, so the distance is about acos(min)/π, give or take
/// 0.5/sqrt(dims); three of those are allowed. At similarity 0 or below, any distance.
fn reach(min: f64, dims: usize) -> f64 {
    if min <= 0.0 {
        return 1.0;
    }
    (min.min(1.0).acos() / std::f64::consts::PI + 1.5 / (dims as f64).sqrt()).min(1.0)
}

/// The index table for vectors of `dims` dimensions.
fn table(dims: usize) -> String {
    format!("memory_vec_{dims}")
}

/// A vector's signs, one bit per dimension (set when positive), in sqlite-vec's bit order
/// (dimension `i` is bit `i % 8` of byte `i / 8`), padded with zeros to whole bytes.
pub fn signs(v: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; v.len().div_ceil(8)];
    for (i, x) in v.iter().enumerate() {
        if *x > 0.0 {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

fn exists(conn: &Connection, dims: usize) -> rusqlite::Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1")?
        .query_row([table(dims)], |_| Ok(()))
        .optional()
        .map(|r| r.is_some())
}

/// Makes the index of `dims` when there is none yet, with the vectors of that dimension the
/// store already has (those written before the index existed).
pub fn ensure(conn: &Connection, dims: usize) -> rusqlite::Result<()> {
    if dims == 0 || exists(conn, dims)? {
        return Ok(());
    }
    let bits = dims.div_ceil(8) * 8;
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS {} USING vec0(
            model TEXT PARTITION KEY, scope TEXT PARTITION KEY, bits BIT[{bits}])",
        table(dims)
    ))?;
    let mut stmt = conn.prepare(
        "SELECT v.memory_id, v.model, m.scope, v.embedding FROM memory_vectors v
         JOIN memories m ON m.id = v.memory_id WHERE v.dims = ?1",
    )?;
    let rows = stmt.query_map([dims as i64], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, Vec<u8>>(3)?,
        ))
    })?;
    for row in rows {
        let (id, model, scope, blob) = row?;
        let v: Vec<f32> = blob
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        insert(conn, id, &model, &scope, &v)?;
    }
    Ok(())
}

/// Makes the index of every dimension the store has vectors of: the migration that brought
/// the index to stores written before it.
pub fn ensure_all(conn: &Connection) -> rusqlite::Result<()> {
    let dims: Vec<i64> = conn
        .prepare("SELECT DISTINCT dims FROM memory_vectors")?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    for d in dims {
        if let Ok(d) = usize::try_from(d) {
            ensure(conn, d)?;
        }
    }
    Ok(())
}

/// Adds record `id`'s vector (its index must exist: `ensure`).
pub fn insert(
    conn: &Connection,
    id: i64,
    model: &str,
    scope: &str,
    v: &[f32],
) -> rusqlite::Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO {} (rowid, model, scope, bits) VALUES (?1, ?2, ?3, vec_bit(?4))",
        table(v.len())
    ))?
    .execute(params![id, model, scope, signs(v)])?;
    Ok(())
}

/// Takes record `id`'s vector out of its index, before its row in `memory_vectors` goes
/// (which says the dimension, so the index). sqlite-vec zeroes the bits it held.
pub fn remove(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    let dims: Option<i64> = conn
        .prepare_cached("SELECT dims FROM memory_vectors WHERE memory_id = ?1")?
        .query_row([id], |r| r.get(0))
        .optional()?;
    let Some(dims) = dims.and_then(|d| usize::try_from(d).ok()) else {
        return Ok(());
    };
    if exists(conn, dims)? {
        conn.prepare_cached(&format!("DELETE FROM {} WHERE rowid = ?1", table(dims)))?
            .execute([id])?;
    }
    Ok(())
}

/// The ids of the records whose vectors (by `model`, of `query`'s dimension; `scope`'s only
/// when given) are nearest `query`, best first, with their cosine similarity, at most
/// `limit`, none under `min_similarity`: the bit index's nearest candidates (within the
/// distance `reach` allows) ranked exactly.
pub fn nearest(
    conn: &Connection,
    scope: Option<&str>,
    model: &str,
    query: &[f32],
    min_similarity: f64,
    limit: usize,
) -> rusqlite::Result<Vec<(i64, f64)>> {
    if query.is_empty() || limit == 0 || !exists(conn, query.len())? {
        return Ok(Vec::new());
    }
    let k = (limit.saturating_mul(CANDIDATES_PER_HIT)).clamp(MIN_CANDIDATES, MAX_CANDIDATES);
    let in_scope = if scope.is_some() {
        "AND scope = ?4"
    } else {
        "AND ?4 IS NULL"
    };
    // The candidates are materialized first, so the planner cannot turn the join around and
    // scan the index without its MATCH.
    let sql = format!(
        "WITH near AS MATERIALIZED (
             SELECT rowid FROM {} WHERE bits MATCH vec_bit(?1) AND k = ?2 AND model = ?3
             {in_scope} AND distance <= ?7)
         SELECT v.memory_id, 1.0 - vec_distance_cosine(v.embedding, ?5) AS s
         FROM near JOIN memory_vectors v ON v.memory_id = near.rowid
         ORDER BY s DESC LIMIT ?6",
        table(query.len())
    );
    let blob: Vec<u8> = query.iter().flat_map(|x| x.to_le_bytes()).collect();
    let bits = signs(query);
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut best = Vec::new();
    let last = reach(min_similarity, query.len());
    let radii = if min_similarity <= 0.0 {
        vec![FIRST_RADIUS, last]
    } else {
        vec![last]
    };
    for part in radii {
        let radius = (query.len() as f64 * part).ceil();
        best = stmt
            .query_map(
                params![bits, k as i64, model, scope, blob, limit as i64, radius],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .filter(|r| r.as_ref().map_or(true, |(_, s)| *s >= min_similarity))
            .collect::<Result<Vec<(i64, f64)>, _>>()?;
        if best.len() >= limit {
            break;
        }
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reach_grows_as_the_least_similarity_falls() {
        assert_eq!(reach(0.0, 384), 1.0);
        let half = reach(0.5, 384);
        assert!(half > 1.0 / 3.0 && half < 0.45, "{half}");
        assert!(reach(0.9, 384) < half);
    }

    #[test]
    fn signs_are_in_sqlite_vecs_bit_order_and_padded() {
        assert_eq!(signs(&[1.0, -1.0, 0.0, 2.0]), vec![0b1001]);
        let mut v = vec![-1.0; 9];
        v[8] = 0.5;
        assert_eq!(signs(&v), vec![0, 1]);
    }
}
