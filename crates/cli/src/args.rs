//! Value parsers of flags that several commands take: sizes (`10GiB`: cache capacities,
//! bucket quotas) and cache member weights.

/// A size in bytes with its unit: `10GiB`, `500MB`.
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    berth_model::parse_mem(s).map_err(|e| e.to_string())
}

/// `--cache-weight`: 1 to the largest weight.
pub(crate) fn parse_cache_weight(s: &str) -> Result<u32, String> {
    let w: u64 = s.trim().parse().map_err(|_| {
        format!("cache weight `{s}` is not a whole number: use 1 to {}", berth_model::api::MAX_CACHE_WEIGHT)
    })?;
    match berth_model::api::cache_weight_error(w) {
        Some(e) => Err(e),
        None => Ok(w as u32),
    }
}
