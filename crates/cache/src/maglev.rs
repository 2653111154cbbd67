//! Maglev consistent hashing (Eisenbud et al., NSDI 2016): which cache node owns a key.
//!
//! Every node builds the same lookup table from the same member list, so any node (or a
//! client holding `/v1/members`) finds a key's owner with one hash and one array index. The
//! hash is fixed and versioned ([`HASH_VERSION`]): xxh3-64 with constant seeds, never Rust's
//! `DefaultHasher`, whose output may change between Rust releases and would silently move
//! every key after an upgrade. Changing a seed or the key encoding means bumping the version.
//!
//! Members are *known* (in the list) and *up* or *down*. The Maglev table is built over every
//! known member, so a member going down does not change it; the slots of down members are then
//! handed to up members ([`Maglev::with_table_size`]). A member going down thus moves exactly
//! its own slots, and coming back moves exactly those slots back. Only a brand-new member
//! (or one removed from the list) rebuilds the table, where Maglev's fill order moves a little
//! more than its share (docs/perf.md).

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Version of the hash functions, key encoding and table construction below; shown in
/// `/v1/members` so that clients routing by themselves can refuse a table they do not
/// understand. v2: members sorted by name, down members' slots handed to up members.
pub const HASH_VERSION: u32 = 2;

const SEED_OFFSET: u64 = 0x6265_7274_685f_6f66; // "berth_of"
const SEED_SKIP: u64 = 0x6265_7274_685f_736b; // "berth_sk"
const SEED_KEY: u64 = 0x6265_7274_685f_6b79; // "berth_ky"
const SEED_RANK: u64 = 0x6265_7274_685f_726b; // "berth_rk"

/// The table size used when nodes are few: the paper's 65537, a prime.
pub const DEFAULT_TABLE_SIZE: usize = 65_537;

/// Whether a member serves now. A down member keeps its place in the table (so the table does
/// not move when it goes down or comes back), but its slots are served by up members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemberState {
    #[default]
    Up,
    Down,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Up => "up",
            MemberState::Down => "down",
        }
    }
}

/// One member: its name (the URL other nodes and clients reach it at), relative weight and
/// state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    #[serde(default = "one")]
    pub weight: u32,
    #[serde(default)]
    pub state: MemberState,
}

fn one() -> u32 {
    1
}

impl Member {
    /// An up member of weight 1.
    pub fn up(name: impl Into<String>) -> Member {
        Member { name: name.into(), weight: 1, state: MemberState::Up }
    }

    pub fn is_up(&self) -> bool {
        self.state == MemberState::Up
    }
}

/// The routing hash of an object: `bucket`, a zero byte, then `key`.
pub fn key_hash(bucket: &str, key: &[u8]) -> u64 {
    let mut buf = Vec::with_capacity(bucket.len() + 1 + key.len());
    buf.extend_from_slice(bucket.as_bytes());
    buf.push(0);
    buf.extend_from_slice(key);
    xxh3_64_with_seed(&buf, SEED_KEY)
}

/// A Maglev lookup table over a list of known members, each up or down.
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

/// Slots per known member in the default table size (see [`table_size_for`]).
pub const SLOTS_PER_MEMBER: usize = 1000;

/// The table size for `nodes` known members: 65537, or the first prime ≥ 1000 × nodes when
/// that is larger. Balance needs ≥ 100 slots per node (Maglev gives each node its share ± 1
/// slot) and a down node's slots spread evenly only when it has more of them than there are
/// up nodes; a brand-new node joining moves close to its share only with many slots per node
/// (3 × 1/N at 1000 nodes with 1000 per node, 7 × with 65). Measured in docs/perf.md.
pub fn table_size_for(nodes: usize) -> usize {
    DEFAULT_TABLE_SIZE.max(next_prime(SLOTS_PER_MEMBER * nodes))
}

impl Maglev {
    /// Builds the table with the default size for this many known members.
    pub fn new(members: Vec<Member>) -> Maglev {
        let m = table_size_for(members.len());
        Self::with_table_size(members, m)
    }

    /// Builds the table with `m` slots (`m` must be prime for every member's permutation to
    /// visit every slot). Members are sorted by name (the table depends on the set, not on the
    /// order it was listed in; a repeated name counts once).
    ///
    /// 1. Maglev's population over every known member of positive weight, up or down.
    /// 2. Each down member's slots, in slot order, are spread over the other members in an
    ///    order fixed per pair of names (a hash of both), each of them taking a run of slots
    ///    in proportion to its weight; a slot landing on a member that is down too goes to the
    ///    next up member in that order. So each up member gets an even part of a down member's
    ///    slots, and a second member going down moves only the slots it held.
    ///
    /// A member with weight 0 owns nothing; with no up member of positive weight the table is
    /// empty and [`Maglev::owner`] answers `None`.
    pub fn with_table_size(mut members: Vec<Member>, m: usize) -> Maglev {
        assert!(m >= 2 && next_prime(m) == m, "maglev table size {m} must be a prime");
        members.sort_by(|a, b| a.name.cmp(&b.name));
        members.dedup_by(|a, b| a.name == b.name);
        let live: Vec<usize> = (0..members.len()).filter(|&i| members[i].weight > 0).collect();
        if !live.iter().any(|&i| members[i].is_up()) {
            return Maglev { members, table: vec![] };
        }
        let mut table = populate(&members, &live, m);
        if live.iter().any(|&i| !members[i].is_up()) {
            hand_over_down_slots(&members, &live, &mut table);
        }
        Maglev { members, table }
    }

    /// The known members, sorted by name.
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

/// Maglev's population: each member walks its own permutation of the slots (offset and skip
/// from its name) and claims the next free one, in turns weighted by `weight`.
fn populate(members: &[Member], live: &[usize], m: usize) -> Vec<u32> {
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
    loop {
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
                    return table;
                }
            }
        }
    }
}

/// Step 2 of [`Maglev::with_table_size`]: the slots of down members go to up members. Integer
/// arithmetic only, so every node and client computes the same table.
fn hand_over_down_slots(members: &[Member], live: &[usize], table: &mut [u32]) {
    let mut slots: Vec<Vec<usize>> = vec![vec![]; members.len()];
    for (s, &o) in table.iter().enumerate() {
        if !members[o as usize].is_up() {
            slots[o as usize].push(s);
        }
    }
    let name_hash: Vec<u64> = members.iter().map(|m| xxh3_64_with_seed(m.name.as_bytes(), SEED_RANK)).collect();
    for &d in live {
        let mine = &slots[d];
        if mine.is_empty() {
            continue;
        }
        // the other members in an order fixed for this pair of names, up or down, so that
        // another member's state changes neither the order nor the runs below
        let mut order: Vec<(u64, usize)> = live
            .iter()
            .filter(|&&i| i != d)
            .map(|&i| {
                let mut pair = [0u8; 16];
                pair[..8].copy_from_slice(&name_hash[d].to_le_bytes());
                pair[8..].copy_from_slice(&name_hash[i].to_le_bytes());
                (xxh3_64_with_seed(&pair, SEED_RANK), i)
            })
            .collect();
        order.sort_unstable();
        // member j of the order covers [end[j-1], end[j]) of a line of length total weight
        let mut end = Vec::with_capacity(order.len());
        let mut total = 0u64;
        for &(_, i) in &order {
            total += members[i].weight as u64;
            end.push(total);
        }
        let n = mine.len() as u128;
        for (k, &slot) in mine.iter().enumerate() {
            // slot k of n sits at the middle of the k-th n-th of the line
            let point = ((2 * k as u128 + 1) * total as u128 / (2 * n)) as u64;
            let mut p = end.partition_point(|&e| e <= point);
            while !members[order[p].1].is_up() {
                p = (p + 1) % order.len();
            }
            table[slot] = order[p].1 as u32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn members(n: usize) -> Vec<Member> {
        (0..n).map(|i| Member::up(format!("http://10.0.{}.{}:7171", i / 250, i % 250))).collect()
    }

    fn with_down(mut ms: Vec<Member>, down: &[usize]) -> Vec<Member> {
        for &d in down {
            ms[d].state = MemberState::Down;
        }
        ms
    }

    fn moved(a: &Maglev, b: &Maglev) -> usize {
        a.slot_owners().zip(b.slot_owners()).filter(|(x, y)| x != y).count()
    }

    /// max/mean slots over the up members.
    fn imbalance(t: &Maglev) -> f64 {
        let s = t.slots_per_member();
        let up: Vec<usize> = (0..s.len()).filter(|&i| t.members()[i].is_up()).map(|i| s[i]).collect();
        let mean = t.table_size() as f64 / up.len() as f64;
        *up.iter().max().unwrap() as f64 / mean
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
        // and the table built from a fixed list (v2)
        let t = Maglev::with_table_size(with_down(members(5), &[3]), 65_537);
        let owners: Vec<&str> = t.slot_owners().collect();
        let digest = xxhash_rust::xxh3::xxh3_64(owners.join("\n").as_bytes());
        assert_eq!(digest, 10039606668436342502, "the v2 table changed: bump HASH_VERSION");
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
    fn a_down_members_slots_go_to_the_others_by_weight() {
        let mut ms = members(4);
        ms[1].weight = 3;
        let all = Maglev::new(ms.clone());
        let before = all.slots_per_member();
        let t = Maglev::new(with_down(ms, &[0]));
        let after = t.slots_per_member();
        assert_eq!(after[0], 0);
        let gained: Vec<usize> = (1..4).map(|i| after[i] - before[i]).collect();
        // weights 3:1:1 of member 0's slots, to the slot
        let share = before[0] as f64 / 5.0;
        assert!((gained[0] as f64 - 3.0 * share).abs() <= 2.0, "{gained:?} of {}", before[0]);
        assert!((gained[1] as f64 - share).abs() <= 2.0, "{gained:?} of {}", before[0]);
    }

    #[test]
    fn zero_weight_owns_nothing_and_empty_tables_route_nowhere() {
        let mut ms = members(2);
        ms[1].weight = 0;
        let t = Maglev::new(ms);
        assert_eq!(t.slots_per_member()[1], 0);
        assert!(Maglev::new(vec![]).owner("b", b"k").is_none());
        assert!(Maglev::new(with_down(members(3), &[0, 1, 2])).owner("b", b"k").is_none(), "all down");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Equal weights, all up: every member owns ⌊M/N⌋ or ⌈M/N⌉ slots, give or take one.
        #[test]
        fn balance(n in 1usize..300) {
            let t = Maglev::with_table_size(members(n), 65_537);
            let s = t.slots_per_member();
            let mean = 65_537.0 / n as f64;
            for c in s {
                prop_assert!((c as f64 - mean).abs() <= 1.0 + 1e-9, "{} slots vs mean {}", c, mean);
            }
        }

        /// With the default table size, balance stays within 1 % with one member down.
        #[test]
        fn balance_with_one_down(n in 2usize..400, gone in 0usize..400) {
            let t = Maglev::new(with_down(members(n), &[gone % n]));
            let b = imbalance(&t);
            prop_assert!(b <= 1.01, "max/mean {} with n={}", b, n);
        }

        /// A member going down moves exactly the slots it owned, all to up members, even when
        /// others are down already; it coming back restores the table slot for slot.
        #[test]
        fn a_leaver_moves_exactly_its_slots_and_a_rejoin_restores_them(
            n in 2usize..200,
            gone in 0usize..200,
            already in proptest::collection::vec(0usize..200, 0..5),
        ) {
            let gone = gone % n;
            let already: Vec<usize> = already.into_iter().map(|d| d % n).filter(|&d| d != gone).collect();
            let before = Maglev::with_table_size(with_down(members(n), &already), 65_537);
            let mut down = already.clone();
            down.push(gone);
            let after = Maglev::with_table_size(with_down(members(n), &down), 65_537);
            let name = &members(n)[gone].name;
            let owned = before.slot_owners().filter(|o| o == name).count();
            if after.table_size() == 0 {
                // the leaver was the last up member
                prop_assert!(before.members().iter().filter(|m| m.is_up()).count() == 1);
            } else {
                prop_assert_eq!(moved(&before, &after), owned);
                for (b, a) in before.slot_owners().zip(after.slot_owners()) {
                    prop_assert!(a != name.as_str());
                    prop_assert!(b == name.as_str() || a == b);
                }
                let up: Vec<&str> = after.members().iter().filter(|m| m.is_up()).map(|m| m.name.as_str()).collect();
                prop_assert!(after.slot_owners().all(|o| up.contains(&o)));
            }
            let back = Maglev::with_table_size(with_down(members(n), &already), 65_537);
            prop_assert_eq!(moved(&before, &back), 0);
        }

        /// Lookups agree across independently built tables, whatever order the members were
        /// listed in (what lets any node forward and clients route by themselves).
        #[test]
        fn deterministic(n in 1usize..50, rot in 0usize..50, key in proptest::collection::vec(any::<u8>(), 0..64)) {
            let ms = with_down(members(n), &[n / 2]);
            let mut shuffled = ms.clone();
            shuffled.rotate_left(rot % n);
            shuffled.reverse();
            let a = Maglev::new(ms);
            let b = Maglev::new(shuffled);
            prop_assert_eq!(a.owner("b", &key), b.owner("b", &key));
            prop_assert_eq!(moved(&a, &b), 0);
        }
    }

    #[test]
    fn a_new_member_takes_about_its_share() {
        // a brand-new member rebuilds the table: Maglev's fill order moves a little more
        // than the newcomer's share
        let a = Maglev::with_table_size(members(20), 65_537);
        let b = Maglev::with_table_size(members(21), 65_537);
        let moved = moved(&a, &b) as f64 / 65_537.0;
        assert!((1.0 / 21.0 - 0.001..2.0 / 21.0).contains(&moved), "moved {moved}");
    }
}
