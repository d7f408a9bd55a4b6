//! A snapshot body as loaded: its bytes in one or more segments, in order. A chunked body keeps
//! its chunks where the store has them (mapped from their files by the sled store) instead of
//! copying them into one buffer: at 116k artifacts that buffer was 90 MB of fresh memory, and
//! touching it for the first time cost more than everything the load did with it.

use std::ops::Range;
use std::sync::Arc;

use rkyv::util::AlignedVec;

/// One run of a body's bytes.
pub enum Segment {
    /// Bytes in 16-aligned memory.
    Aligned(AlignedVec<16>),
    /// Bytes read into a plain buffer.
    Bytes(Vec<u8>),
    /// A chunk file mapped read-only (see [`crate::store::Store::chunk_segment`]); shared with
    /// the check of its hash, which may run beside the restore that reads it.
    Mapped(Arc<memmap2::Mmap>),
}

impl Segment {
    /// Its bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Segment::Aligned(v) => v,
            Segment::Bytes(v) => v,
            Segment::Mapped(m) => &m[..],
        }
    }
}

/// The bytes of a snapshot body.
#[derive(Default)]
pub struct Body {
    segments: Vec<Segment>,
    /// Offset of each segment in the body.
    starts: Vec<usize>,
    len: usize,
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Body({} bytes in {} segments)", self.len, self.segments.len())
    }
}

impl From<AlignedVec<16>> for Body {
    fn from(v: AlignedVec<16>) -> Body {
        let mut b = Body::default();
        b.push(Segment::Aligned(v));
        b
    }
}

impl Body {
    /// Appends a segment.
    pub fn push(&mut self, s: Segment) {
        let n = s.as_bytes().len();
        if n == 0 {
            return;
        }
        self.starts.push(self.len);
        self.segments.push(s);
        self.len += n;
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes at `range` in 16-aligned memory (as rkyv's validated access needs): borrowed
    /// where they lie in one segment at an aligned address, else copied into `scratch`. `None`
    /// when the range is past the end.
    pub fn aligned<'a>(&'a self, range: Range<usize>, scratch: &'a mut AlignedVec<16>) -> Option<&'a [u8]> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        let i = self.segment_of(range.start);
        if let Some(seg) = self.segments.get(i) {
            let local = range.start - self.starts[i]..range.end - self.starts[i];
            if let Some(b) = seg.as_bytes().get(local)
                && (b.as_ptr() as usize).is_multiple_of(16)
            {
                return Some(b);
            }
        }
        scratch.clear();
        self.copy_into(range, scratch);
        Some(scratch.as_slice())
    }

    /// The segment holding offset `at` (the last one when `at` is the end).
    fn segment_of(&self, at: usize) -> usize {
        self.starts.partition_point(|&s| s <= at).saturating_sub(1)
    }

    /// Appends the bytes at `range` (within the body) to `out`.
    fn copy_into(&self, range: Range<usize>, out: &mut AlignedVec<16>) {
        let mut at = range.start;
        let mut i = self.segment_of(at);
        while at < range.end {
            let Some(seg) = self.segments.get(i) else { return };
            let b = seg.as_bytes();
            let from = at - self.starts[i];
            let to = (range.end - self.starts[i]).min(b.len());
            out.extend_from_slice(&b[from..to]);
            at += to - from;
            i += 1;
        }
    }

    /// The whole body in one 16-aligned buffer (itself, when it is one).
    pub fn into_aligned(mut self) -> AlignedVec<16> {
        if let [Segment::Aligned(_)] = self.segments.as_slice()
            && let Some(Segment::Aligned(v)) = self.segments.pop()
        {
            return v;
        }
        self.to_aligned()
    }

    /// The whole body in one 16-aligned buffer.
    pub fn to_aligned(&self) -> AlignedVec<16> {
        let mut v = AlignedVec::<16>::with_capacity(self.len);
        for s in &self.segments {
            v.extend_from_slice(s.as_bytes());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_across_segments_and_always_aligned() {
        let whole: Vec<u8> = (0..200u8).collect();
        let mut body = Body::default();
        for (a, b) in [(0usize, 32usize), (32, 32), (32, 77), (77, 160), (160, 200)] {
            body.push(Segment::Bytes(whole[a..b].to_vec()));
        }
        assert_eq!(body.len(), 200);
        assert_eq!(body.to_aligned().as_slice(), &whole[..]);
        let mut scratch = AlignedVec::<16>::new();
        for (a, b) in [(0, 0), (0, 200), (5, 31), (30, 40), (32, 77), (70, 199), (199, 200), (200, 200)] {
            let got = body.aligned(a..b, &mut scratch).unwrap();
            assert_eq!(got, &whole[a..b], "{a}..{b}");
            assert!((got.as_ptr() as usize).is_multiple_of(16) || got.is_empty());
        }
        assert!(body.aligned(190..201, &mut scratch).is_none());
    }
}
