//! SIEVE eviction (Zhang et al., NSDI 2024) over a slab-backed doubly linked list.
//!
//! New objects enter at the head unvisited; a hit only sets the visited bit (no list
//! reordering, unlike LRU, so the hit path is one store). To evict, the hand walks from the
//! tail towards the head, clearing visited bits, and removes the first unvisited object; the
//! hand stays where it stopped. Removal of any object (DELETE, overwrite) is O(1).

/// Where an entry lives in a [`Sieve`]; stable until the entry is removed.
pub type Slot = u32;

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node<T> {
    value: Option<T>,
    prev: u32,
    next: u32,
    visited: bool,
}

/// A SIEVE queue of `T` (the cache stores object ids here).
#[derive(Debug, Clone)]
pub struct Sieve<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
    /// Newest entry.
    head: u32,
    /// Oldest entry.
    tail: u32,
    hand: u32,
    len: usize,
}

impl<T> Default for Sieve<T> {
    fn default() -> Self {
        Sieve { nodes: vec![], free: vec![], head: NIL, tail: NIL, hand: NIL, len: 0 }
    }
}

impl<T: Clone> Sieve<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds `value` at the head, unvisited.
    pub fn insert(&mut self, value: T) -> Slot {
        let node = Node { value: Some(value), prev: NIL, next: self.head, visited: false };
        let s = match self.free.pop() {
            Some(s) => {
                self.nodes[s as usize] = node;
                s
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        if self.head != NIL {
            self.nodes[self.head as usize].prev = s;
        }
        self.head = s;
        if self.tail == NIL {
            self.tail = s;
        }
        self.len += 1;
        s
    }

    /// Marks a hit.
    pub fn touch(&mut self, s: Slot) {
        if let Some(n) = self.nodes.get_mut(s as usize) {
            n.visited = true;
        }
    }

    /// Removes the entry in `s` and returns its value.
    pub fn remove(&mut self, s: Slot) -> Option<T> {
        let n = self.nodes.get_mut(s as usize)?;
        let value = n.value.take()?;
        let (prev, next) = (n.prev, n.next);
        if self.hand == s {
            self.hand = prev;
        }
        if prev != NIL {
            self.nodes[prev as usize].next = next;
        } else {
            self.head = next;
        }
        if next != NIL {
            self.nodes[next as usize].prev = prev;
        } else {
            self.tail = prev;
        }
        self.free.push(s);
        self.len -= 1;
        Some(value)
    }

    /// Chooses a victim, skipping `keep` (the entry being inserted), removes it and returns
    /// its value; `None` when nothing else is left.
    pub fn evict(&mut self, keep: Option<Slot>) -> Option<T> {
        if self.len == 0 || (self.len == 1 && keep.is_some_and(|k| k == self.head)) {
            return None;
        }
        let mut h = if self.hand == NIL { self.tail } else { self.hand };
        loop {
            if h == NIL {
                h = self.tail;
            }
            let n = &mut self.nodes[h as usize];
            if Some(h) != keep && !n.visited {
                let victim = h;
                self.hand = n.prev;
                return self.remove(victim);
            }
            n.visited = false;
            h = n.prev;
        }
    }

    /// The values from newest to oldest (a bucket's deletion, tests).
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        let mut s = self.head;
        std::iter::from_fn(move || {
            if s == NIL {
                return None;
            }
            let n = &self.nodes[s as usize];
            s = n.next;
            n.value.as_ref()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_unvisited_oldest_first_and_spares_visited_once() {
        let mut q = Sieve::default();
        let a = q.insert('a');
        let _b = q.insert('b');
        let _c = q.insert('c');
        q.touch(a);
        // a is oldest but visited: its bit is cleared and b goes
        assert_eq!(q.evict(None), Some('b'));
        // the hand moved on to c (the head), unvisited
        assert_eq!(q.evict(None), Some('c'));
        // a lost its visited bit on the first pass
        assert_eq!(q.evict(None), Some('a'));
        assert_eq!(q.evict(None), None);
        assert!(q.is_empty());
    }

    #[test]
    fn keep_is_never_the_victim_and_removal_relinks() {
        let mut q = Sieve::default();
        let a = q.insert(1);
        let b = q.insert(2);
        let c = q.insert(3);
        assert_eq!(q.remove(b), Some(2));
        assert_eq!(q.iter().copied().collect::<Vec<_>>(), vec![3, 1]);
        assert_eq!(q.evict(Some(a)), Some(3));
        assert_eq!(q.evict(Some(a)), None, "only the kept entry is left");
        assert_eq!(q.remove(c), None, "already gone");
        let d = q.insert(4);
        assert_eq!(d, c, "slots are reused");
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn all_visited_means_one_full_sweep_then_the_oldest() {
        let mut q = Sieve::default();
        let s: Vec<_> = (0..5).map(|i| q.insert(i)).collect();
        for &x in &s {
            q.touch(x);
        }
        assert_eq!(q.evict(None), Some(0));
        assert_eq!(q.evict(None), Some(1));
    }
}
