//! Even splitting under capacity limits ("water filling"), shared by memory attribution and
//! interleaved CPU placement.

/// Splits `total` over buckets with the given free capacities as evenly as possible: every
/// bucket gets the same level, capped by its capacity, and the few leftover units go to the
/// first buckets that still have room. `None` when the capacities sum to less than `total`.
///
/// Even rather than greedy because the split models interleaved memory and CPUs: a greedy fill
/// would empty the first NUMA node and leave nothing local there for the next job.
pub fn water_fill(free: &[u64], total: u64) -> Option<Vec<u64>> {
    let sum: u128 = free.iter().map(|&f| f as u128).sum();
    if sum < total as u128 {
        return None;
    }
    if total == 0 {
        return Some(vec![0; free.len()]);
    }
    // The smallest level L with sum(min(free, L)) >= total.
    let filled = |level: u64| -> u128 { free.iter().map(|&f| f.min(level) as u128).sum() };
    let (mut lo, mut hi) = (0u64, free.iter().copied().max().unwrap_or(0));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if filled(mid) >= total as u128 { hi = mid } else { lo = mid + 1 }
    }
    let level = lo;
    // Fill to level - 1 everywhere, then one more unit to the first buckets that can take it.
    let mut out: Vec<u64> = free.iter().map(|&f| f.min(level.saturating_sub(1))).collect();
    let mut left = total - out.iter().sum::<u64>();
    for (o, &f) in out.iter_mut().zip(free) {
        if left == 0 {
            break;
        }
        if f >= level {
            *o += 1;
            left -= 1;
        }
    }
    debug_assert_eq!(left, 0);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::water_fill;

    #[test]
    fn splits_evenly_with_remainder_first() {
        assert_eq!(water_fill(&[10, 10, 10], 7), Some(vec![3, 2, 2]));
        assert_eq!(water_fill(&[10, 10], 8), Some(vec![4, 4]));
    }

    #[test]
    fn caps_at_capacity_and_moves_the_rest() {
        assert_eq!(water_fill(&[1, 10, 10], 9), Some(vec![1, 4, 4]));
        assert_eq!(water_fill(&[0, 5], 5), Some(vec![0, 5]));
        assert_eq!(water_fill(&[3, 3], 6), Some(vec![3, 3]));
    }

    #[test]
    fn refuses_more_than_fits() {
        assert_eq!(water_fill(&[3, 3], 7), None);
        assert_eq!(water_fill(&[], 1), None);
        assert_eq!(water_fill(&[], 0), Some(vec![]));
    }
}
