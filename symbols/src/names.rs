//! Name -> symbols index: every entry's 32-bit name hash next to its
//! index, radix-sorted once on first use (sequential passes over 1 MB
//! rather than a random access per symbol). The entries of one name are
//! adjacent and in address order; a lookup is a binary search.

use crate::kallsyms::Table;

/// The index; see the module documentation.
#[derive(Debug, Default)]
pub(crate) struct NameIndex {
    /// `hash << 32 | entry`, sorted.
    keys: Vec<u64>,
}

/// A fast non-cryptographic hash of a symbol name (the input is the kernel's
/// own symbol table, not attacker-chosen keys).
fn hash(name: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = name.len() as u64;
    let mut words = name.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    // murmur3's finaliser: spreads the bits over the whole word.
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn hash32(name: &[u8]) -> u64 {
    hash(name) >> 32
}

impl NameIndex {
    /// Indexes every entry of `table`.
    pub(crate) fn build(table: &Table) -> Self {
        // Entry counts fit in u32: the parser refuses more.
        let mut keys: Vec<u64> = table
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| hash32(table.name_bytes(e)) << 32 | i as u64)
            .collect();
        radix_sort_high32(&mut keys);
        NameIndex { keys }
    }

    /// The entries named `name`, in address order.
    pub(crate) fn get<'a>(
        &'a self,
        table: &'a Table,
        name: &'a str,
    ) -> impl Iterator<Item = usize> + 'a {
        let h = hash32(name.as_bytes());
        let from = self.keys.partition_point(|&k| k >> 32 < h);
        self.keys[from..]
            .iter()
            .take_while(move |&&k| k >> 32 == h)
            .map(|&k| (k & 0xffff_ffff) as usize)
            .filter(move |&i| table.name(&table.entries[i]) == name)
    }

    /// The first entry of every distinct name, in no particular order.
    pub(crate) fn firsts<'a>(&'a self, table: &'a Table) -> impl Iterator<Item = usize> + 'a {
        let name = move |k: u64| table.name(&table.entries[(k & 0xffff_ffff) as usize]);
        self.keys.iter().enumerate().filter_map(move |(at, &k)| {
            // Earlier keys of the same hash: a duplicate, or (rarely) another
            // name with the same hash.
            let earlier = self.keys[..at]
                .iter()
                .rev()
                .take_while(|&&e| e >> 32 == k >> 32);
            let mut earlier = earlier;
            (!earlier.any(|&e| name(e) == name(k))).then_some((k & 0xffff_ffff) as usize)
        })
    }
}

/// Stable LSD radix sort on the high 32 bits: three passes of 11, 11
/// and 10 bits.
fn radix_sort_high32(keys: &mut Vec<u64>) {
    const BITS: usize = 11;
    const BUCKETS: usize = 1 << BITS;
    let digit = |k: u64, pass: usize| (k >> (32 + BITS * pass)) as usize & (BUCKETS - 1);
    let mut counts = vec![[0usize; BUCKETS]; 3];
    for &k in keys.iter() {
        for (pass, c) in counts.iter_mut().enumerate() {
            c[digit(k, pass)] += 1;
        }
    }
    let mut from = std::mem::take(keys);
    let mut to = vec![0u64; from.len()];
    for (pass, c) in counts.iter().enumerate() {
        // A pass where every key has the same digit changes nothing.
        if c.contains(&from.len()) {
            continue;
        }
        let mut next = vec![0usize; BUCKETS];
        let mut sum = 0;
        for (slot, &n) in next.iter_mut().zip(c) {
            *slot = sum;
            sum += n;
        }
        for &k in &from {
            let d = digit(k, pass);
            to[next[d]] = k;
            next[d] += 1;
        }
        std::mem::swap(&mut from, &mut to);
    }
    *keys = from;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kallsyms::Parser;

    #[test]
    fn radix_sort_is_a_stable_sort_on_the_high_half() {
        let mut keys: Vec<u64> = (0..10_000u64)
            .map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 36) << 32 | i)
            .collect();
        let mut expected = keys.clone();
        expected.sort_by_key(|k| k >> 32);
        radix_sort_high32(&mut keys);
        assert_eq!(keys, expected);
        let mut same = vec![5u64 << 32 | 2, 5 << 32 | 1];
        radix_sort_high32(&mut same);
        assert_eq!(same, vec![5 << 32 | 2, 5 << 32 | 1]);
    }

    #[test]
    fn chains_duplicates_in_address_order_and_finds_every_name() {
        let mut text = String::new();
        for i in 0..5000u64 {
            text.push_str(&format!("{:016x} t f{}\n", 0x1000 + i * 16, i % 1700));
        }
        let mut p = Parser::new(text.len());
        p.feed(&text).unwrap();
        let table = p.finish();
        let idx = NameIndex::build(&table);
        assert_eq!(idx.firsts(&table).count(), 1700);
        let f3: Vec<_> = idx.get(&table, "f3").collect();
        assert_eq!(f3, vec![3, 1703, 3403]);
        assert_eq!(idx.get(&table, "f1699").count(), 2);
        assert_eq!(idx.get(&table, "f1700").count(), 0);
        assert_eq!(idx.get(&table, "").count(), 0);
        let empty = NameIndex::default();
        assert_eq!(empty.get(&table, "f3").count(), 0);
    }
}
