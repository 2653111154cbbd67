//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): which cache node owns a key.
//!
//! Every node builds the same lookup table from the same member list, so any node (or a
//! client holding `/v1/members`) finds a key's owner with one hash and one array index. The
//! hash is fixed and versioned ([`HASH_VERSION`]): xxh3-64 with constant seeds, never Rust's
//! `DefaultHasher`, whose output may change between Rust releases and would silently move
//! every key after an upgrade. Changing a seed or the key encoding means bumping the version.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Version of the hash functions and key encoding below; shown in `/v1/members` so that
/// clients routing by themselves can refuse a table they do not understand.
pub const HASH_VERSION: u32 = 1;

const SEED_OFFSET: u64 = 0x6265_7274_685f_6f66; // "berth_of"
const SEED_SKIP: u64 = 0x6265_7274_685f_736b; // "berth_sk"
const SEED_KEY: u64 = 0x6265_7274_685f_6b79; // "berth_ky"

/// The table size used when nodes are few: the paper's 65537, a prime.
pub const DEFAULT_TABLE_SIZE: usize = 65_537;

/// One member: its name (the URL other nodes and clients reach it at) and relative weight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub weight: u32,
}

/// The routing hash of an object: `bucket`, a zero byte, then `key`.
pub fn key_hash(bucket: &str, key: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(bucket.len() + 1 + key.len());
    buf.extend_from_slice(bucket.as_bytes());
    buf.push(0);
    buf.extend_from_slice(key);
    xxh3_64_with_seed(&buf, SEED_KEY)
}

/// A Maglev lookup table over a fixed list of members.
#[derive(Debug, Clone)]
pub struct Maglev {
    members: Vec<Member>,
    table: Vec<u32>,
}

/// The smallest prime ≥ `n` (trial division: table sizes are at most a few million).
pub fn next_prime(n: usize) -> usize {
    let is_prime = |p: usize| {
        if p < 2 {
            return false;
        }
        let mut d = 2;
        while d * d <= p {
            if p.is_multiple_of(d) {
                return false;
            }
            d += 1;
        }
        true
    };
    (n.max(2)..).find(|&p| is_prime(p)).expect("primes are unbounded")
}

/// The table size for `nodes` members: 65537, or the first prime ≥ 1000 × nodes when that is
/// larger. Balance is fine from 100 slots per node, but a member leaving moves ~1/N of the
/// keys only when slots per node are many: at 65 per node (1000 nodes in 65537) it moves 7×
/// its share, at 1000 per node about 1.5× (docs/perf.md).
pub fn table_size_for(nodes: usize) -> usize {
    DEFAULT_TABLE_SIZE.max(next_prime(1000 * nodes))
}

impl Maglev {
    /// Builds the table with the default size for this many members.
    pub fn new(members: Vec<Member>) -> Maglev {
        let m = table_size_for(members.len());
        Self::with_table_size(members, m)
    }

    /// Builds the table with `m` slots (`m` must be prime for every member's permutation to
    /// visit every slot). A member with weight 0 owns nothing; with no member of positive
    /// weight the table is empty and [`Maglev::owner`] answers `None`.
    pub fn with_table_size(members: Vec<Member>, m: usize) -> Maglev {
        assert!(m >= 2 && next_prime(m) == m, "maglev table size {m} must be a prime");
        let live: Vec<usize> = (0..members.len()).filter(|&i| members[i].weight > 0).collect();
        if live.is_empty() {
            return Maglev { members, table: vec![] };
        }
        let mm = m as u64;
        let (offset, skip): (Vec<u64>, Vec<u64>) = live
            .iter()
            .map(|&i| {
                let name = members[i].name.as_bytes();
                (xxh3_64_with_seed(name, SEED_OFFSET) % mm, xxh3_64_with_seed(name, SEED_SKIP) % (mm - 1) + 1)
            })
            .unzip();
        let max_w = live.iter().map(|&i| members[i].weight as u64).max().unwrap_or(1);
        let mut next = vec![0u64; live.len()];
        let mut credit = vec![0u64; live.len()];
        let mut table = vec![u32::MAX; m];
        let mut filled = 0;
        // Weighted population: each round every member earns its weight in credit and claims
        // one slot per `max_w` of credit, so the heaviest claims one slot a round and a member
        // of half the weight one every other round.
        'fill: loop {
            for (j, &i) in live.iter().enumerate() {
                credit[j] += members[i].weight as u64;
                while credit[j] >= max_w {
                    credit[j] -= max_w;
                    let mut c = ((offset[j] + next[j] * skip[j]) % mm) as usize;
                    while table[c] != u32::MAX {
                        next[j] += 1;
                        c = ((offset[j] + next[j] * skip[j]) % mm) as usize;
                    }
                    table[c] = i as u32;
                    next[j] += 1;
                    filled += 1;
                    if filled == m {
                        break 'fill;
                    }
                }
            }
        }
        Maglev { members, table }
    }

    pub fn members(&self) -> &[Member] {
        &self.members
    }

    pub fn table_size(&self) -> usize {
        self.table.len()
    }

    /// Index into [`Maglev::members`] of the owner of a key hash.
    pub fn owner_index(&self, hash: u64) -> Option<usize> {
        if self.table.is_empty() {
            return None;
        }
        Some(self.table[(hash % self.table.len() as u64) as usize] as usize)
    }

    /// The member owning `key` of `bucket`.
    pub fn owner(&self, bucket: &str, key: &[u8]) -> Option<&Member> {
        self.owner_index(key_hash(bucket, key)).map(|i| &self.members[i])
    }

    /// How many table slots each member owns (its expected share of keys × table size).
    pub fn slots_per_member(&self) -> Vec<usize> {
        let mut n = vec![0; self.members.len()];
        for &i in &self.table {
            n[i as usize] += 1;
        }
        n
    }

    /// The member name owning each slot; two tables of the same size compare slot by slot.
    pub fn slot_owners(&self) -> impl Iterator<Item = &str> + '_ {
        self.table.iter().map(|&i| self.members[i as usize].name.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(n: usize) -> Vec<Member> {
        (0..n).map(|i| Member { name: format!("http://10.0.{}.{}:7171", i / 250, i % 250), weight: 1 }).collect()
    }

    fn moved(a: &Maglev, b: &Maglev) -> usize {
        a.slot_owners().zip(b.slot_owners()).filter(|(x, y)| x != y).count()
    }

    #[test]
    fn table_sizes_are_primes_of_at_least_1000_per_node() {
        assert_eq!(table_size_for(3), 65_537);
        let m = table_size_for(1000);
        assert!(m >= 1_000_000 && next_prime(m) == m);
        assert_eq!(next_prime(65_536), 65_537);
    }

    #[test]
    fn the_hash_is_fixed_across_builds() {
        // Pinned outputs: if these change, keys move to other nodes between releases and
        // files get other names; that needs a new HASH_VERSION.
        assert_eq!(key_hash("imagenet", b"s3://host/bucket/train/0001.jpg"), 2285748668382159609);
        assert_eq!(crate::store::object_id("imagenet", b"train/0001.jpg"), 157327889988272737172821022754439033201);
        assert_ne!(key_hash("a", b"bc"), key_hash("ab", b"c"), "bucket and key are separated");
    }

    #[test]
    fn weights_give_proportional_shares() {
        let mut ms = members(3);
        ms[2].weight = 2;
        let t = Maglev::new(ms);
        let s = t.slots_per_member();
        let total: usize = s.iter().sum();
        assert_eq!(total, t.table_size());
        // weights 1:1:2 → 1/4, 1/4, 1/2 of the slots, within one slot per round of rounding
        assert!((s[2] as f64 / total as f64 - 0.5).abs() < 0.01, "{s:?}");
        assert!((s[0] as f64 / total as f64 - 0.25).abs() < 0.01, "{s:?}");
    }

    #[test]
    fn zero_weight_owns_nothing_and_empty_tables_route_nowhere() {
        let mut ms = members(2);
        ms[1].weight = 0;
        let t = Maglev::new(ms);
        assert_eq!(t.slots_per_member()[1], 0);
        assert!(Maglev::new(vec![]).owner("b", b"k").is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Equal weights: every member owns ⌊M/N⌋ or ⌈M/N⌉ slots, give or take one.
        #[test]
        fn balance(n in 1usize..300) {
            let t = Maglev::with_table_size(members(n), 65_537);
            let s = t.slots_per_member();
            let mean = 65_537.0 / n as f64;
            for c in s {
                prop_assert!((c as f64 - mean).abs() <= 1.0 + 1e-9, "{} slots vs mean {}", c, mean);
            }
        }

        /// One member leaving moves its own slots and only a little more (the paper's bound is
        /// loose; we hold it to 2 × 1/N plus noise), and every slot it did not own that moved
        /// went to... anywhere: only the count is bounded.
        #[test]
        fn disruption_when_one_leaves(n in 2usize..200, gone in 0usize..200) {
            let gone = gone % n;
            let all = members(n);
            let mut rest = all.clone();
            rest.remove(gone);
            let a = Maglev::with_table_size(all.clone(), 65_537);
            let b = Maglev::with_table_size(rest, 65_537);
            let moved = moved(&a, &b) as f64 / 65_537.0;
            prop_assert!(moved <= 2.0 / n as f64 + 0.01, "moved {} with n={}", moved, n);
            // the departed member's slots all moved, and nothing routes to it any more
            prop_assert!(b.slot_owners().all(|o| o != all[gone].name));
        }

        /// Lookups agree across independently built tables (what lets any node forward).
        #[test]
        fn deterministic(n in 1usize..50, key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let a = Maglev::new(members(n));
            let b = Maglev::new(members(n));
            prop_assert_eq!(a.owner("b", &key), b.owner("b", &key));
        }
    }

    #[test]
    fn a_joining_member_takes_about_its_share() {
        let a = Maglev::with_table_size(members(20), 65_537);
        let b = Maglev::with_table_size(members(21), 65_537);
        let moved = moved(&a, &b) as f64 / 65_537.0;
        assert!((1.0 / 21.0 - 0.001..2.0 / 21.0).contains(&moved), "moved {moved}");
    }
}
