//! Slurm host lists (`n[1-3,05],gpu01`): [`compress`] writes one from host names (for
//! `SLURM_JOB_NODELIST`, `scontrol show hostlist`), [`expand`] reads one back (`scontrol show
//! hostnames`). They are inverses: `expand(&compress(hosts))` gives the hosts back, in order,
//! repeats dropped. Also Slurm's per-node counts in the same spirit ([`counts`], `4(x2),3`).

use std::collections::HashSet;

/// The most names a host list may expand to: `n[1-999999999]` is a typo, not a cluster.
pub const MAX_HOSTS: usize = 1 << 20;

/// Why a host list cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    #[error("unbalanced brackets in host list `{0}`")]
    Brackets(String),
    #[error("bad range `{0}` in host list: write numbers like `1-4` or `01-16`")]
    Range(String),
    #[error("host list expands to more than {MAX_HOSTS} names")]
    TooLong,
}

/// A host name split for a host list: the text before its trailing digits, and the digits.
fn split_host(h: &str) -> (&str, &str) {
    let cut = h.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    h.split_at(cut)
}

/// Whether a number of `digits` digits (zero-padded to `width`, or 0) may join a group of
/// `numbers` padded to `group_width` (or 0): `n09` and `n10` share `n[09-10]`.
fn same_width(group_width: usize, numbers: &[u64], width: usize, digits: usize) -> bool {
    group_width == width
        || (width == 0 && digits == group_width)
        || (group_width == 0 && numbers.iter().all(|m| m.to_string().len() == digits))
}

/// Compresses host names the way Slurm writes host lists (`n[1-3,5],gpu01`): neighbours with
/// the same prefix and digit width share brackets, consecutive numbers make ranges. Order is
/// kept (and repeats dropped), so the list expands back to the same names in the same order.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    // (prefix, width of zero-padded numbers or 0, numbers), for runs of neighbours.
    let mut groups: Vec<(&str, usize, Vec<u64>)> = Vec::new();
    let mut seen = HashSet::new();
    for h in hosts.iter().map(AsRef::as_ref).filter(|h| seen.insert(*h)) {
        let (prefix, digits) = split_host(h);
        // Numbers too long to hold stay names.
        let Some(n) = (!digits.is_empty()).then(|| digits.parse::<u64>().ok()).flatten() else {
            groups.push((h, usize::MAX, Vec::new()));
            continue;
        };
        let width = if digits.len() > 1 && digits.starts_with('0') { digits.len() } else { 0 };
        match groups.last_mut() {
            Some((p, w, ns)) if *p == prefix && *w != usize::MAX && same_width(*w, ns, width, digits.len()) => {
                *w = (*w).max(width);
                ns.push(n);
            }
            _ => groups.push((prefix, width, vec![n])),
        }
    }
    let parts: Vec<String> = groups
        .iter()
        .map(|(prefix, width, ns)| {
            if *width == usize::MAX {
                return prefix.to_string();
            }
            let num = |n: u64| format!("{n:0width$}", width = *width);
            if ns.len() == 1 {
                return format!("{prefix}{}", num(ns[0]));
            }
            let mut ranges: Vec<String> = Vec::new();
            let mut i = 0;
            while i < ns.len() {
                let mut j = i;
                while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
                    j += 1;
                }
                ranges.push(if j > i { format!("{}-{}", num(ns[i]), num(ns[j])) } else { num(ns[i]) });
                i = j + 1;
            }
            format!("{prefix}[{}]", ranges.join(","))
        })
        .collect();
    parts.join(",")
}

/// Host names sorted the way Slurm prints a set of nodes (squeue, sinfo): by prefix in the
/// order it first appears, then by number; repeats dropped.
pub fn compress_sorted<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut firsts: Vec<&str> = Vec::new();
    let mut keyed: Vec<(usize, u64, &str)> = hosts
        .iter()
        .map(AsRef::as_ref)
        .map(|h| {
            let (prefix, digits) = split_host(h);
            let at = firsts.iter().position(|p| *p == prefix).unwrap_or_else(|| {
                firsts.push(prefix);
                firsts.len() - 1
            });
            (at, digits.parse().unwrap_or(0), h)
        })
        .collect();
    keyed.sort();
    compress(&keyed.into_iter().map(|(_, _, h)| h).collect::<Vec<_>>())
}

/// Expands a host list (`n[1-3,05],gpu01`, `rack[1-2]-n[01-02]`) into host names, in order,
/// zero padding kept (the width of a range's first number).
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for item in split_top(list)? {
        let mut names = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            let Some(open) = rest.find('[') else {
                names.iter_mut().for_each(|n| n.push_str(rest));
                break;
            };
            let close = rest[open..].find(']').ok_or_else(|| HostlistError::Brackets(list.into()))? + open;
            let numbers = ranges(&rest[open + 1..close])?;
            let text = &rest[..open];
            if names.len().saturating_mul(numbers.len()) > MAX_HOSTS {
                return Err(HostlistError::TooLong);
            }
            names = names.iter().flat_map(|n| numbers.iter().map(move |num| format!("{n}{text}{num}"))).collect();
            rest = &rest[close + 1..];
        }
        if out.len() + names.len() > MAX_HOSTS {
            return Err(HostlistError::TooLong);
        }
        out.extend(names);
    }
    Ok(out)
}

/// The comma-separated items of a host list, commas inside brackets kept.
fn split_top(list: &str) -> Result<Vec<&str>, HostlistError> {
    split_unbracketed(list).ok_or_else(|| HostlistError::Brackets(list.into()))
}

/// The comma-separated items of `list` (trimmed, empty ones dropped), commas inside brackets
/// belonging to their item: `n[1,2],m` is two items, as `12_[1-3,9],13` (job ids) is. `None`
/// when brackets do not pair up or nest.
pub fn split_unbracketed(list: &str) -> Option<Vec<&str>> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return None;
        }
    }
    if depth != 0 {
        return None;
    }
    items.push(&list[start..]);
    Some(items.into_iter().map(str::trim).filter(|s| !s.is_empty()).collect())
}

/// The numbers of a bracket's ranges (`1-3,05`), each written at its range's width.
fn ranges(inside: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for r in inside.split(',') {
        let bad = || HostlistError::Range(r.to_string());
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(bad());
        }
        let (a, b): (u64, u64) = (lo.parse().map_err(|_| bad())?, hi.parse().map_err(|_| bad())?);
        if a > b {
            return Err(bad());
        }
        if (b - a) as usize >= MAX_HOSTS || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(HostlistError::TooLong);
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Slurm's compressed per-node counts, node by node (`SLURM_TASKS_PER_NODE`,
/// `SLURM_JOB_CPUS_PER_NODE`): runs of one count folded, `4(x2),3`.
pub fn counts<T: PartialEq + std::fmt::Display>(counts: &[T]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|c| **c == counts[i]).count();
        parts.push(if run > 1 { format!("{}(x{run})", counts[i]) } else { counts[i].to_string() });
        i += run;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn per_node_counts_fold_runs() {
        assert_eq!(super::counts(&[4, 4]), "4(x2)");
        assert_eq!(super::counts(&[3, 2]), "3,2");
        assert_eq!(super::counts(&[72u64, 72, 36]), "72(x2),36");
        assert_eq!(super::counts::<u32>(&[]), "");
    }

    use super::*;
    use proptest::prelude::*;

    fn list(hosts: &[&str]) -> String {
        compress(hosts)
    }

    #[test]
    fn host_lists_compress_like_slurm() {
        assert_eq!(list(&["n1", "n2", "n3", "n5", "gpu01"]), "n[1-3,5],gpu01");
        assert_eq!(list(&["n1"]), "n1");
        assert_eq!(list(&["head"]), "head");
        assert_eq!(list(&[]), "");
        assert_eq!(list(&["gpu01", "gpu02", "gpu03"]), "gpu[01-03]");
        assert_eq!(list(&["gpu09", "gpu10"]), "gpu[09-10]");
        assert_eq!(list(&["n9", "n10", "n11"]), "n[9-11]");
        assert_eq!(list(&["n10", "n05"]), "n[10,05]");
        assert_eq!(list(&["n1", "n01"]), "n1,n01");
        assert_eq!(list(&["main", "sub1", "sub2"]), "main,sub[1-2]");
        assert_eq!(list(&["a1", "a1", "a2"]), "a[1-2]", "repeats are dropped");
        assert_eq!(list(&["n3", "n1", "n2"]), "n[3,1-2]", "order is kept");
        assert_eq!(list(&["n1", "m1", "n2"]), "n1,m1,n2");
        assert_eq!(list(&["10.0.0.1", "10.0.0.2"]), "10.0.0.[1-2]");
        assert_eq!(list(&["x99999999999999999999999"]), "x99999999999999999999999");
    }

    #[test]
    fn sorted_lists_group_by_prefix() {
        let h = |s: &str| compress_sorted(&s.split(',').collect::<Vec<_>>());
        assert_eq!(h("n1"), "n1");
        assert_eq!(h("n3,n1,n2,n5"), "n[1-3,5]");
        assert_eq!(h("gpu07,gpu08,login,n2"), "gpu[07-08],login,n2");
        assert_eq!(h("b3,a1"), "b3,a1");
        assert_eq!(h("n2,m1,n1"), "n[1-2],m1");
    }

    #[test]
    fn host_lists_expand_like_slurm() {
        let e = |s: &str| expand(s).unwrap().join(" ");
        assert_eq!(e("n[1-3,05],gpu01"), "n1 n2 n3 n05 gpu01");
        assert_eq!(e("gpu[09-11]"), "gpu09 gpu10 gpu11");
        assert_eq!(e("n[9-11]"), "n9 n10 n11");
        assert_eq!(e("head"), "head");
        assert_eq!(e(""), "");
        assert_eq!(e("rack[1-2]-n[01-02]"), "rack1-n01 rack1-n02 rack2-n01 rack2-n02");
        assert_eq!(e("n[1-2]-ib"), "n1-ib n2-ib");
        assert_eq!(e(" a , b "), "a b");
        assert!(matches!(expand("n[1-3"), Err(HostlistError::Brackets(_))));
        assert!(matches!(expand("n1-3]"), Err(HostlistError::Brackets(_))));
        assert!(matches!(expand("n[[1]]"), Err(HostlistError::Brackets(_))));
        assert!(matches!(expand("n[3-1]"), Err(HostlistError::Range(_))));
        assert!(matches!(expand("n[a-b]"), Err(HostlistError::Range(_))));
        assert!(matches!(expand("n[]"), Err(HostlistError::Range(_))));
        assert_eq!(expand("n[0-99999999999]"), Err(HostlistError::TooLong));
        assert_eq!(expand("a[0-9999],b[0-9999],c[0-999]").unwrap().len(), 21000);
    }

    /// Host names as clusters name them: a prefix, maybe a number, maybe zero-padded.
    fn host() -> impl Strategy<Value = String> {
        ("(n|gpu|node-|a1b|10\\.0\\.0\\.|login)", proptest::option::of((0u64..40, 0usize..4))).prop_map(
            |(prefix, num)| match num {
                Some((n, w)) => format!("{prefix}{n:0w$}"),
                None => prefix,
            },
        )
    }

    proptest! {
        #[test]
        fn expand_undoes_compress(hosts in proptest::collection::vec(host(), 0..30)) {
            let mut seen = HashSet::new();
            let unique: Vec<String> = hosts.iter().filter(|h| seen.insert(h.as_str())).cloned().collect();
            prop_assert_eq!(expand(&compress(&hosts)).unwrap(), unique);
        }
    }
}
