//! The stored form of one event (a *record*) and its canonical binary codec.
//!
//! A record is what the hash chain covers, byte for byte. The codec is canonical: every value has
//! exactly one encoding and the decoder rejects anything else (unknown format byte, unknown flag
//! bits, trailing bytes, invalid names), so `encode(decode(b)) == b` for every accepted `b`. That
//! property is what lets an export carry decoded fields and an import rebuild identical bytes and
//! identical hashes.
//!
//! Layout (integers big-endian):
//!
//! ```text
//! u8   format = 1
//! u64  global sequence
//! [16] event id (UUID bytes)
//! u64  stream version (1 for a stream's first event)
//! i64  recorded-at, nanoseconds since the Unix epoch (UTC)
//! u32  schema version of the payload
//! [32] prev hash (hash of the previous record; zero for sequence 1)
//! u8   flags: bit 0 = causation id present, bit 1 = correlation id present
//! [16] causation id   (if bit 0)
//! [16] correlation id (if bit 1)
//! u16  stream id length, then the stream id (ASCII, see `validate_stream`)
//! u16  event type length, then the event type (ASCII, see `validate_event_type`)
//! u32  payload length, then the payload (compact JSON)
//! ```

use uuid::Uuid;

use crate::error::{InputError, RecordError};
use crate::hash::{Hash, event_hash};
use crate::limits::{EVENT_TYPE_BYTES_MAX, PAYLOAD_BYTES_MAX, RECORD_FIXED_BYTES, STREAM_BYTES_MAX};

const FORMAT_V1: u8 = 1;
const FLAG_CAUSATION: u8 = 0b01;
const FLAG_CORRELATION: u8 = 0b10;

/// An event proposed for appending: everything except what the writer assigns (sequence, stream
/// version, prev hash).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventData {
    /// Unique id; also the idempotency key of the append.
    pub id: Uuid,
    /// Event type name, e.g. `artifact.created`.
    pub event_type: String,
    /// Version of the payload's schema, for upcasting.
    pub schema_version: u32,
    /// When the event was recorded, from the caller's clock, in ns since the Unix epoch (UTC).
    pub recorded_at_ns: i64,
    /// The event or command that caused this one.
    pub causation: Option<Uuid>,
    /// The workflow or request this event belongs to.
    pub correlation: Option<Uuid>,
    /// Compact JSON.
    pub payload: Vec<u8>,
}

impl EventData {
    /// Checks names and payload against the journal's rules.
    pub fn validate(&self) -> Result<(), InputError> {
        validate_event_type(&self.event_type)?;
        validate_payload(&self.payload)
    }

    /// The record this event becomes when the writer places it: in `stream` at `version`, at
    /// journal sequence `seq`, after the record hashed `prev`.
    pub fn placed<'a>(&'a self, stream: &'a str, seq: u64, version: u64, prev: Hash) -> Record<'a> {
        Record {
            seq,
            id: self.id,
            stream,
            version,
            event_type: &self.event_type,
            schema_version: self.schema_version,
            recorded_at_ns: self.recorded_at_ns,
            causation: self.causation,
            correlation: self.correlation,
            payload: &self.payload,
            prev,
        }
    }
}

/// A decoded record that borrows the stored bytes; what projections see during replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Global sequence, gapless from 1.
    pub seq: u64,
    /// Event id.
    pub id: Uuid,
    /// Stream the event belongs to.
    pub stream: &'a str,
    /// Position in its stream, from 1.
    pub version: u64,
    /// Event type name.
    pub event_type: &'a str,
    /// Payload schema version.
    pub schema_version: u32,
    /// Recorded-at, ns since the Unix epoch.
    pub recorded_at_ns: i64,
    /// Causation id.
    pub causation: Option<Uuid>,
    /// Correlation id.
    pub correlation: Option<Uuid>,
    /// Compact JSON payload.
    pub payload: &'a [u8],
    /// Hash of the previous record.
    pub prev: Hash,
}

/// An owned record plus its hash; what reads and subscriptions return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// Global sequence.
    pub seq: u64,
    /// Event id.
    pub id: Uuid,
    /// Stream id.
    pub stream: String,
    /// Stream version.
    pub version: u64,
    /// Event type.
    pub event_type: String,
    /// Payload schema version.
    pub schema_version: u32,
    /// Recorded-at, ns since the Unix epoch.
    pub recorded_at_ns: i64,
    /// Causation id.
    pub causation: Option<Uuid>,
    /// Correlation id.
    pub correlation: Option<Uuid>,
    /// Compact JSON payload.
    pub payload: Vec<u8>,
    /// Hash of the previous record.
    pub prev: Hash,
    /// Hash of this record's stored bytes.
    pub hash: Hash,
}

impl Envelope {
    /// Borrows this envelope as a record view.
    pub fn as_record(&self) -> Record<'_> {
        Record {
            seq: self.seq,
            id: self.id,
            stream: &self.stream,
            version: self.version,
            event_type: &self.event_type,
            schema_version: self.schema_version,
            recorded_at_ns: self.recorded_at_ns,
            causation: self.causation,
            correlation: self.correlation,
            payload: &self.payload,
            prev: self.prev,
        }
    }
}

impl Record<'_> {
    /// Copies the record into an owned envelope with the given hash.
    pub fn to_envelope(&self, hash: Hash) -> Envelope {
        Envelope {
            seq: self.seq,
            id: self.id,
            stream: self.stream.to_owned(),
            version: self.version,
            event_type: self.event_type.to_owned(),
            schema_version: self.schema_version,
            recorded_at_ns: self.recorded_at_ns,
            causation: self.causation,
            correlation: self.correlation,
            payload: self.payload.to_vec(),
            prev: self.prev,
            hash,
        }
    }

    /// Length of the encoding of this record.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED_BYTES
            + 16 * (usize::from(self.causation.is_some()) + usize::from(self.correlation.is_some()))
            + 2
            + self.stream.len()
            + 2
            + self.event_type.len()
            + 4
            + self.payload.len()
    }

    /// Appends the canonical encoding to `out`. Callers validate names and payload first.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.push(FORMAT_V1);
        out.extend_from_slice(&self.seq.to_be_bytes());
        out.extend_from_slice(self.id.as_bytes());
        out.extend_from_slice(&self.version.to_be_bytes());
        out.extend_from_slice(&self.recorded_at_ns.to_be_bytes());
        out.extend_from_slice(&self.schema_version.to_be_bytes());
        out.extend_from_slice(&self.prev.0);
        let flags = (if self.causation.is_some() { FLAG_CAUSATION } else { 0 })
            | (if self.correlation.is_some() { FLAG_CORRELATION } else { 0 });
        out.push(flags);
        if let Some(c) = self.causation {
            out.extend_from_slice(c.as_bytes());
        }
        if let Some(c) = self.correlation {
            out.extend_from_slice(c.as_bytes());
        }
        put_str16(out, self.stream);
        put_str16(out, self.event_type);
        // Payload length is bounded by PAYLOAD_BYTES_MAX (< u32::MAX), checked at validation.
        out.extend_from_slice(&(self.payload.len() as u32).to_be_bytes());
        out.extend_from_slice(self.payload);
    }

    /// The canonical encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Hash of the canonical encoding.
    pub fn hash(&self) -> Hash {
        event_hash(&self.encode())
    }
}

fn put_str16(out: &mut Vec<u8>, s: &str) {
    // Names are bounded far below u16::MAX by validation.
    out.extend_from_slice(&(s.len() as u16).to_be_bytes());
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(n).ok_or(RecordError::Truncated)?;
        let s = self.bytes.get(self.pos..end).ok_or(RecordError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, RecordError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, RecordError> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, RecordError> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, RecordError> {
        Ok(u64::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn uuid(&mut self) -> Result<Uuid, RecordError> {
        Ok(Uuid::from_bytes(self.array()?))
    }
    fn str16(&mut self) -> Result<&'a str, RecordError> {
        let n = usize::from(self.u16()?);
        let b = self.take(n)?;
        std::str::from_utf8(b).map_err(|_| RecordError::Invalid("name is not UTF-8"))
    }
}

/// Decodes one record strictly. Payload JSON is not re-validated here (it was at append/import
/// time and is covered by the hash chain); names are, since they index the journal.
pub fn decode(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    let mut r = Reader { bytes, pos: 0 };
    let format = r.u8()?;
    if format != FORMAT_V1 {
        return Err(RecordError::UnknownFormat(format));
    }
    let seq = r.u64()?;
    let id = r.uuid()?;
    let version = r.u64()?;
    let recorded_at_ns = r.i64()?;
    let schema_version = r.u32()?;
    let prev = Hash(r.array()?);
    let flags = r.u8()?;
    if flags & !(FLAG_CAUSATION | FLAG_CORRELATION) != 0 {
        return Err(RecordError::Invalid("unknown flag bits"));
    }
    let causation = if flags & FLAG_CAUSATION != 0 { Some(r.uuid()?) } else { None };
    let correlation = if flags & FLAG_CORRELATION != 0 { Some(r.uuid()?) } else { None };
    let stream = r.str16()?;
    let event_type = r.str16()?;
    let payload_len = usize::try_from(r.u32()?).map_err(|_| RecordError::Invalid("payload length"))?;
    if payload_len > PAYLOAD_BYTES_MAX {
        return Err(RecordError::Invalid("payload longer than the limit"));
    }
    let payload = r.take(payload_len)?;
    if r.pos != bytes.len() {
        return Err(RecordError::Invalid("trailing bytes after the payload"));
    }
    if seq == 0 || version == 0 {
        return Err(RecordError::Invalid("sequence and stream version start at 1"));
    }
    validate_stream(stream).map_err(|_| RecordError::Invalid("stream id breaks the naming rule"))?;
    validate_event_type(event_type).map_err(|_| RecordError::Invalid("event type breaks the naming rule"))?;
    Ok(Record {
        seq,
        id,
        stream,
        version,
        event_type,
        schema_version,
        recorded_at_ns,
        causation,
        correlation,
        payload,
        prev,
    })
}

/// Stream ids: 1 to [`STREAM_BYTES_MAX`] bytes of `A-Z a-z 0-9` and `- _ . : / @ $ + =`.
pub fn validate_stream(stream: &str) -> Result<(), InputError> {
    validate_name(stream, STREAM_BYTES_MAX, b"-_.:/@$+=", "stream id")
}

/// Event types: 1 to [`EVENT_TYPE_BYTES_MAX`] bytes of `A-Z a-z 0-9` and `- _ .`.
pub fn validate_event_type(event_type: &str) -> Result<(), InputError> {
    validate_name(event_type, EVENT_TYPE_BYTES_MAX, b"-_.", "event type")
}

fn validate_name(value: &str, max: usize, extra: &'static [u8], what: &'static str) -> Result<(), InputError> {
    if value.is_empty() || value.len() > max {
        return Err(InputError::NameLength { what, value: truncate_for_error(value), max });
    }
    if let Some(bad) = value.bytes().find(|b| !(b.is_ascii_alphanumeric() || extra.contains(b))) {
        return Err(InputError::NameCharacter {
            what,
            value: truncate_for_error(value),
            character: char::from(bad),
            allowed: std::str::from_utf8(extra).unwrap_or(""),
        });
    }
    Ok(())
}

/// Payloads are compact JSON: valid, no surrounding whitespace, no raw line breaks (so an export
/// line stays one line), at most [`PAYLOAD_BYTES_MAX`] bytes.
pub fn validate_payload(payload: &[u8]) -> Result<(), InputError> {
    if payload.len() > PAYLOAD_BYTES_MAX {
        return Err(InputError::PayloadTooLarge { bytes: payload.len(), max: PAYLOAD_BYTES_MAX });
    }
    let raw: &serde_json::value::RawValue =
        serde_json::from_slice(payload).map_err(|e| InputError::PayloadNotJson { detail: e.to_string() })?;
    if raw.get().len() != payload.len() || payload.iter().any(|&b| b == b'\n' || b == b'\r') {
        return Err(InputError::PayloadNotCompact);
    }
    Ok(())
}

fn truncate_for_error(s: &str) -> String {
    const SHOWN: usize = 60;
    if s.len() <= SHOWN {
        return s.to_owned();
    }
    let mut end = SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record<'static> {
        Record {
            seq: 7,
            id: Uuid::from_u128(0x0193_0000_0000_7000_8000_0000_0000_0001),
            stream: "artifact/CR-189",
            version: 3,
            event_type: "artifact.updated",
            schema_version: 2,
            recorded_at_ns: 1_795_000_000_123_456_789,
            causation: Some(Uuid::from_u128(5)),
            correlation: None,
            payload: br#"{"a":[1,2,{"b":null}]}"#,
            prev: Hash([9; 32]),
        }
    }

    #[test]
    fn encode_decode_round_trips_exactly() {
        let rec = sample();
        let bytes = rec.encode();
        assert_eq!(bytes.len(), rec.encoded_len());
        let back = decode(&bytes).unwrap();
        assert_eq!(back, rec);
        assert_eq!(back.encode(), bytes);
    }

    #[test]
    fn record_hash_is_pinned() {
        // The record layout is part of the journal format: this hash must never change.
        assert_eq!(sample().hash().to_hex(), "7d92a2074a71504b624ef73e10022cd06c608b40d140d6ac62c1d5eca355959d");
    }

    #[test]
    fn decoder_rejects_non_canonical_bytes() {
        let bytes = sample().encode();
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert!(matches!(decode(&trailing), Err(RecordError::Invalid(_))));
        assert!(matches!(decode(&bytes[..bytes.len() - 1]), Err(RecordError::Truncated)));
        let mut bad_format = bytes.clone();
        bad_format[0] = 2;
        assert!(matches!(decode(&bad_format), Err(RecordError::UnknownFormat(2))));
        let mut bad_flags = bytes;
        bad_flags[RECORD_FIXED_BYTES - 1] |= 0x80;
        assert!(matches!(decode(&bad_flags), Err(RecordError::Invalid(_))));
    }

    #[test]
    fn names_and_payloads_are_checked() {
        assert!(validate_stream("workgroup/WG-1").is_ok());
        assert!(validate_stream("$journal").is_ok());
        assert!(validate_stream("").is_err());
        assert!(validate_stream("has space").is_err());
        assert!(validate_stream(&"x".repeat(STREAM_BYTES_MAX + 1)).is_err());
        assert!(validate_event_type("artifact.created").is_ok());
        assert!(validate_event_type("a/b").is_err());
        assert!(validate_payload(br#"{"a":1}"#).is_ok());
        assert!(matches!(validate_payload(b" {}"), Err(InputError::PayloadNotCompact)));
        assert!(matches!(validate_payload(b"{\n}"), Err(InputError::PayloadNotCompact)));
        assert!(matches!(validate_payload(b"{"), Err(InputError::PayloadNotJson { .. })));
        let big = format!("\"{}\"", "x".repeat(PAYLOAD_BYTES_MAX));
        assert!(matches!(validate_payload(big.as_bytes()), Err(InputError::PayloadTooLarge { .. })));
    }
}
