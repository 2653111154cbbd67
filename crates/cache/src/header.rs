//! The header at the front of every object file: the object's own metadata, so that a file is
//! self-describing and the index can be rebuilt from the files alone after a restart.
//!
//! ```text
//! magic "BRTHOBJ1" | header_len u32 | size u64 | etag u64 | created_us i64
//! | bucket_len u16 | key_len u32 | bucket | key | checksum u64 (xxh3 of all bytes before it)
//! ```
//! Little endian. The data follows at `header_len`. A file whose checksum or length does not
//! match is not an object (it is deleted at start, never served).

use xxhash_rust::xxh3::xxh3_64;

pub const MAGIC: &[u8; 8] = b"BRTHOBJ1";
const FIXED: usize = 8 + 4 + 8 + 8 + 8 + 2 + 4;

/// What an object file says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub size: u64,
    /// xxh3-64 of the data.
    pub etag: u64,
    pub created_us: i64,
    pub bucket: String,
    pub key: Vec<u8>,
}

impl Header {
    /// Bytes the encoded header takes (where the data starts).
    pub fn len_for(bucket: &str, key: &[u8]) -> usize {
        FIXED + bucket.len() + key.len() + 8
    }

    pub fn encoded_len(&self) -> usize {
        Self::len_for(&self.bucket, &self.key)
    }

    pub fn encode(&self) -> Vec<u8> {
        let n = self.encoded_len();
        let mut b = Vec::with_capacity(n);
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(n as u32).to_le_bytes());
        b.extend_from_slice(&self.size.to_le_bytes());
        b.extend_from_slice(&self.etag.to_le_bytes());
        b.extend_from_slice(&self.created_us.to_le_bytes());
        b.extend_from_slice(&(self.bucket.len() as u16).to_le_bytes());
        b.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        b.extend_from_slice(self.bucket.as_bytes());
        b.extend_from_slice(&self.key);
        let sum = xxh3_64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// The header's length from its first 12 bytes, to know how much to read.
    pub fn peek_len(b: &[u8]) -> Option<usize> {
        if b.len() < 12 || &b[..8] != MAGIC {
            return None;
        }
        Some(u32::from_le_bytes(b[8..12].try_into().ok()?) as usize)
    }

    /// Decodes a header from the start of `b`; `None` if it is not a whole, intact header.
    pub fn decode(b: &[u8]) -> Option<Header> {
        let n = Self::peek_len(b)?;
        if n < FIXED + 8 || b.len() < n {
            return None;
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let sum = u64_at(n - 8);
        if xxh3_64(&b[..n - 8]) != sum {
            return None;
        }
        let size = u64_at(12);
        let etag = u64_at(20);
        let created_us = u64_at(28) as i64;
        let bl = u16::from_le_bytes(b[36..38].try_into().ok()?) as usize;
        let kl = u32::from_le_bytes(b[38..42].try_into().ok()?) as usize;
        if FIXED + bl + kl + 8 != n {
            return None;
        }
        let bucket = String::from_utf8(b[FIXED..FIXED + bl].to_vec()).ok()?;
        let key = b[FIXED + bl..FIXED + bl + kl].to_vec();
        Some(Header { size, etag, created_us, bucket, key })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let h = Header { size: 42, etag: 7, created_us: 1, bucket: "ds".into(), key: b"s3://h/b//k\0\xff".to_vec() };
        let mut b = h.encode();
        assert_eq!(b.len(), h.encoded_len());
        assert_eq!(Header::decode(&b), Some(h.clone()));
        b.extend_from_slice(b"data after the header");
        assert_eq!(Header::decode(&b), Some(h.clone()), "data after the header is not part of it");
        for i in 0..h.encoded_len() {
            let mut bad = b.clone();
            bad[i] ^= 1;
            assert_ne!(Header::decode(&bad), Some(h.clone()), "a flipped bit at {i} is noticed");
        }
        assert_eq!(Header::decode(&b[..h.encoded_len() - 1]), None, "a truncated header is no header");
    }
}
