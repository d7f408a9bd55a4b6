//! Frames: the unit the journal stores in sled.
//!
//! sled charges a fixed cost per key written (about 8 µs on the reference VM), so one key per
//! event caps a durable journal well below what group commit can reach. The writer therefore
//! packs the records of a committed batch into frames, one sled value each, keyed by the sequence
//! of their first record. Frames are storage chunking only: every record keeps its own bytes and
//! its own hash, and an export carries records, not frames.
//!
//! Layout (integers big-endian):
//!
//! ```text
//! u8   format = 1
//! u32  record count (>= 1)
//! per record: [32] record hash, u32 record length, record bytes
//! ```
//!
//! The stored hash lets `verify` tell *which* record was altered (a record that no longer
//! matches its own stored hash) from a broken link (a `prev` that does not match).

use crate::error::RecordError;
use crate::hash::{Hash, event_hash};
use crate::record::Record;

const FORMAT_V1: u8 = 1;

/// Key prefix of frames in the journal tree.
pub const FRAME_PREFIX: u8 = b'f';

/// The sled key of the frame whose first record has sequence `first_seq`.
pub fn frame_key(first_seq: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[0] = FRAME_PREFIX;
    k[1..].copy_from_slice(&first_seq.to_be_bytes());
    k
}

/// The first sequence named by a frame key, if `key` is one.
pub fn frame_key_seq(key: &[u8]) -> Option<u64> {
    if key.len() != 9 || key[0] != FRAME_PREFIX {
        return None;
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&key[1..]);
    Some(u64::from_be_bytes(b))
}

/// Builds one frame.
#[derive(Debug)]
pub struct FrameBuilder {
    bytes: Vec<u8>,
    count: u32,
}

impl Default for FrameBuilder {
    fn default() -> Self {
        FrameBuilder::new()
    }
}

impl FrameBuilder {
    /// An empty frame.
    pub fn new() -> FrameBuilder {
        let mut bytes = Vec::with_capacity(4096);
        bytes.push(FORMAT_V1);
        bytes.extend_from_slice(&0u32.to_be_bytes());
        FrameBuilder { bytes, count: 0 }
    }

    /// Adds one record with its hash.
    pub fn push(&mut self, hash: &Hash, record: &[u8]) {
        self.bytes.extend_from_slice(&hash.0);
        // Records are bounded by RECORD_BYTES_MAX (< u32::MAX).
        self.bytes.extend_from_slice(&(record.len() as u32).to_be_bytes());
        self.bytes.extend_from_slice(record);
        self.count += 1;
    }

    /// Encodes `record` straight into the frame and returns its hash (no intermediate copy).
    pub fn push_record(&mut self, record: &Record<'_>) -> Hash {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0u8; 36]);
        record.encode_into(&mut self.bytes);
        let body = start + 36;
        let hash = event_hash(&self.bytes[body..]);
        let len = (self.bytes.len() - body) as u32;
        self.bytes[start..start + 32].copy_from_slice(&hash.0);
        self.bytes[start + 32..body].copy_from_slice(&len.to_be_bytes());
        self.count += 1;
        hash
    }

    /// Records added so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no record was added.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size so far.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// The encoded frame.
    pub fn finish(mut self) -> Vec<u8> {
        self.bytes[1..5].copy_from_slice(&self.count.to_be_bytes());
        self.bytes
    }
}

/// Writes a frame of the one record `record` with hash `hash` into `out` (cleared first), so a
/// reader producing one frame per record reuses one buffer.
pub fn write_single(out: &mut Vec<u8>, hash: &Hash, record: &[u8]) {
    out.clear();
    out.push(FORMAT_V1);
    out.extend_from_slice(&1u32.to_be_bytes());
    out.extend_from_slice(&hash.0);
    // Records are bounded by RECORD_BYTES_MAX (< u32::MAX).
    out.extend_from_slice(&(record.len() as u32).to_be_bytes());
    out.extend_from_slice(record);
}

/// Iterates the `(stored hash, record bytes)` entries of an encoded frame.
pub fn entries(frame: &[u8]) -> Result<FrameEntries<'_>, RecordError> {
    if frame.len() < 5 {
        return Err(RecordError::Truncated);
    }
    if frame[0] != FORMAT_V1 {
        return Err(RecordError::UnknownFormat(frame[0]));
    }
    let mut c = [0u8; 4];
    c.copy_from_slice(&frame[1..5]);
    let count = u32::from_be_bytes(c);
    if count == 0 {
        return Err(RecordError::Invalid("frame holds no records"));
    }
    Ok(FrameEntries { frame, pos: 5, left: count })
}

/// Iterator over a frame's entries; yields an error once and then stops if the frame is damaged.
#[derive(Debug)]
pub struct FrameEntries<'a> {
    frame: &'a [u8],
    pos: usize,
    left: u32,
}

impl<'a> Iterator for FrameEntries<'a> {
    type Item = Result<(Hash, &'a [u8]), RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            if self.pos != self.frame.len() {
                self.pos = self.frame.len();
                return Some(Err(RecordError::Invalid("trailing bytes after the last record of a frame")));
            }
            return None;
        }
        let rest = &self.frame[self.pos..];
        if rest.len() < 36 {
            self.left = 0;
            self.pos = self.frame.len();
            return Some(Err(RecordError::Truncated));
        }
        let mut h = [0u8; 32];
        h.copy_from_slice(&rest[..32]);
        let mut l = [0u8; 4];
        l.copy_from_slice(&rest[32..36]);
        let len = u32::from_be_bytes(l) as usize;
        let Some(record) = rest.get(36..36 + len) else {
            self.left = 0;
            self.pos = self.frame.len();
            return Some(Err(RecordError::Truncated));
        };
        self.pos += 36 + len;
        self.left -= 1;
        Some(Ok((Hash(h), record)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_reject_damage() {
        let mut b = FrameBuilder::new();
        b.push(&Hash([1; 32]), b"one");
        b.push(&Hash([2; 32]), b"three");
        let f = b.finish();
        let got: Vec<_> = entries(&f).unwrap().map(|e| e.unwrap()).collect();
        assert_eq!(got, vec![(Hash([1; 32]), &b"one"[..]), (Hash([2; 32]), &b"three"[..])]);
        let cut = &f[..f.len() - 1];
        assert!(entries(cut).unwrap().any(|e| e.is_err()));
        let mut extra = f.clone();
        extra.push(0);
        assert!(entries(&extra).unwrap().any(|e| e.is_err()));
        assert_eq!(frame_key_seq(&frame_key(42)), Some(42));
        assert_eq!(frame_key_seq(b"m"), None);
    }

    #[test]
    fn a_single_record_frame_is_the_built_one() {
        let mut b = FrameBuilder::new();
        b.push(&Hash([3; 32]), b"record");
        let mut out = b"left over".to_vec();
        write_single(&mut out, &Hash([3; 32]), b"record");
        assert_eq!(out, b.finish());
    }
}
