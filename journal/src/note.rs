//! Signed checkpoints in the C2SP `tlog-checkpoint` / `signed-note` text form, with Ed25519 keys
//! in the Go `note` key encoding.
//!
//! A checkpoint body is three lines: origin, tree size (decimal), root hash (base64). A signed
//! note is the body, a blank line, then one line per signature:
//! `— <key name> <base64(key id || signature)>`. The key id is the first four bytes of
//! `SHA-256(key name || "\n" || 0x01 || public key)`; 0x01 is the Ed25519 signature type.
//! Verifiers ignore signatures by keys they do not know, which is what allows rotation and
//! witness cosigning.
//!
//! Key strings:
//! * verifier: `<name>+<key id, 8 hex>+<base64(0x01 || public key)>`
//! * signer:   `PRIVATE+KEY+<name>+<key id, 8 hex>+<base64(0x01 || seed)>`

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

use crate::error::NoteError;
use crate::hash::Hash;
use crate::limits::{NOTE_BYTES_MAX, NOTE_SIGNATURES_MAX, ORIGIN_BYTES_MAX};

const ALG_ED25519: u8 = 0x01;
const SIG_PREFIX: &str = "\u{2014} ";

/// An Ed25519 signing key with its name.
pub struct SignerKey {
    name: String,
    key: SigningKey,
}

impl std::fmt::Debug for SignerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignerKey({})", self.name)
    }
}

/// An Ed25519 verifying key with its name and key id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifierKey {
    name: String,
    key: VerifyingKey,
    id: u32,
}

fn check_key_name(name: &str) -> Result<(), NoteError> {
    if name.is_empty()
        || name.len() > 100
        || name.contains('+')
        || name.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(NoteError::KeyName(name.chars().take(60).collect()));
    }
    Ok(())
}

fn key_id(name: &str, public: &[u8; 32]) -> u32 {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([ALG_ED25519]);
    h.update(public);
    let d = h.finalize();
    u32::from_be_bytes([d[0], d[1], d[2], d[3]])
}

impl SignerKey {
    /// A key from a 32-byte seed (the caller supplies the randomness: the journal reads no RNG).
    pub fn from_seed(name: &str, seed: [u8; 32]) -> Result<SignerKey, NoteError> {
        check_key_name(name)?;
        Ok(SignerKey { name: name.to_owned(), key: SigningKey::from_bytes(&seed) })
    }

    /// Parses a `PRIVATE+KEY+…` string.
    pub fn parse(text: &str) -> Result<SignerKey, NoteError> {
        let text = text.trim();
        let rest =
            text.strip_prefix("PRIVATE+KEY+").ok_or(NoteError::KeyFormat("a signer key starts with PRIVATE+KEY+"))?;
        // The key material is standard base64 and may itself contain '+': split twice only.
        let mut parts = rest.splitn(3, '+');
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NoteError::KeyFormat("expected PRIVATE+KEY+<name>+<id>+<key>"));
        };
        let raw = B64.decode(b64).map_err(|_| NoteError::KeyFormat("key material is not base64"))?;
        let [alg, seed @ ..] = raw.as_slice() else {
            return Err(NoteError::KeyFormat("key material is empty"));
        };
        if *alg != ALG_ED25519 || seed.len() != 32 {
            return Err(NoteError::KeyFormat("only Ed25519 keys (type 0x01, 32-byte seed) are supported"));
        }
        let mut s = [0u8; 32];
        s.copy_from_slice(seed);
        let key = SignerKey::from_seed(name, s)?;
        if format!("{:08x}", key.verifier().id) != id_hex {
            return Err(NoteError::KeyFormat("key id does not match the key"));
        }
        Ok(key)
    }

    /// The `PRIVATE+KEY+…` encoding.
    pub fn to_text(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(&self.key.to_bytes());
        format!("PRIVATE+KEY+{}+{:08x}+{}", self.name, self.verifier().id, B64.encode(raw))
    }

    /// The matching verifier key.
    pub fn verifier(&self) -> VerifierKey {
        let key = self.key.verifying_key();
        VerifierKey { id: key_id(&self.name, key.as_bytes()), name: self.name.clone(), key }
    }

    /// Key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Signs `text` (which must end in a newline) and returns the full signed note.
    pub fn sign_note(&self, text: &str) -> Result<String, NoteError> {
        if !text.ends_with('\n') || text.contains("\n\n") {
            return Err(NoteError::Malformed("note text must end with one newline and have no blank lines"));
        }
        let sig: Signature = self.key.sign(text.as_bytes());
        let mut raw = self.verifier().id.to_be_bytes().to_vec();
        raw.extend_from_slice(&sig.to_bytes());
        Ok(format!("{text}\n{SIG_PREFIX}{} {}\n", self.name, B64.encode(raw)))
    }
}

impl VerifierKey {
    /// Parses `<name>+<id>+<base64>`.
    pub fn parse(text: &str) -> Result<VerifierKey, NoteError> {
        let mut parts = text.trim().splitn(3, '+');
        let (Some(name), Some(id_hex), Some(b64)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NoteError::KeyFormat("expected <name>+<id>+<key>"));
        };
        check_key_name(name)?;
        let raw = B64.decode(b64).map_err(|_| NoteError::KeyFormat("key material is not base64"))?;
        let [alg, public @ ..] = raw.as_slice() else {
            return Err(NoteError::KeyFormat("key material is empty"));
        };
        if *alg != ALG_ED25519 || public.len() != 32 {
            return Err(NoteError::KeyFormat("only Ed25519 keys (type 0x01, 32-byte key) are supported"));
        }
        let mut p = [0u8; 32];
        p.copy_from_slice(public);
        let key = VerifyingKey::from_bytes(&p).map_err(|_| NoteError::KeyFormat("not a valid Ed25519 point"))?;
        let id = key_id(name, &p);
        if format!("{id:08x}") != id_hex {
            return Err(NoteError::KeyFormat("key id does not match the key"));
        }
        Ok(VerifierKey { name: name.to_owned(), key, id })
    }

    /// The `<name>+<id>+<base64>` encoding.
    pub fn to_text(&self) -> String {
        let mut raw = vec![ALG_ED25519];
        raw.extend_from_slice(self.key.as_bytes());
        format!("{}+{:08x}+{}", self.name, self.id, B64.encode(raw))
    }

    /// Key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Key id.
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// One signature line of a note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoteSignature {
    /// Key name.
    pub name: String,
    /// Key id.
    pub key_id: u32,
    /// Raw signature bytes.
    pub signature: Vec<u8>,
}

/// A parsed signed note.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SignedNote {
    /// The signed text (ends with a newline).
    pub text: String,
    /// Signature lines in order.
    pub signatures: Vec<NoteSignature>,
}

impl SignedNote {
    /// Parses a signed note.
    pub fn parse(note: &str) -> Result<SignedNote, NoteError> {
        if note.len() > NOTE_BYTES_MAX {
            return Err(NoteError::Malformed("note is longer than 8 KiB"));
        }
        let split = note.rfind("\n\n").ok_or(NoteError::Malformed("no blank line between text and signatures"))?;
        let text = &note[..=split];
        let sigs = &note[split + 2..];
        if !sigs.ends_with('\n') {
            return Err(NoteError::Malformed("signature block must end with a newline"));
        }
        let mut signatures = Vec::new();
        for line in sigs.lines() {
            let rest = line
                .strip_prefix(SIG_PREFIX)
                .ok_or(NoteError::Malformed("signature lines start with an em dash and a space"))?;
            let (name, b64) =
                rest.split_once(' ').ok_or(NoteError::Malformed("signature line is `— <name> <base64>`"))?;
            check_key_name(name)?;
            let raw = B64.decode(b64).map_err(|_| NoteError::Malformed("signature is not base64"))?;
            if raw.len() < 5 {
                return Err(NoteError::Malformed("signature too short"));
            }
            let key_id = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
            signatures.push(NoteSignature { name: name.to_owned(), key_id, signature: raw[4..].to_vec() });
        }
        if signatures.is_empty() {
            return Err(NoteError::Malformed("note has no signature"));
        }
        if signatures.len() > NOTE_SIGNATURES_MAX {
            return Err(NoteError::Malformed("note has more than 16 signatures"));
        }
        Ok(SignedNote { text: text.to_owned(), signatures })
    }

    /// Names of the given keys that produced a valid signature on this note. Signatures by
    /// unknown keys are ignored, as the signed-note format requires.
    pub fn verified_by(&self, keys: &[VerifierKey]) -> Vec<String> {
        let mut out = Vec::new();
        for sig in &self.signatures {
            for key in keys.iter().filter(|k| k.name == sig.name && k.id == sig.key_id) {
                let Ok(bytes) = <[u8; 64]>::try_from(sig.signature.as_slice()) else { continue };
                let signature = Signature::from_bytes(&bytes);
                if key.key.verify_strict(self.text.as_bytes(), &signature).is_ok() && !out.contains(&key.name) {
                    out.push(key.name.clone());
                }
            }
        }
        out
    }
}

/// A checkpoint: the journal's origin, its size (number of events) and the Merkle root.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Unique log name.
    pub origin: String,
    /// Number of events covered.
    pub size: u64,
    /// Merkle root over the first `size` event hashes.
    pub root: Hash,
}

impl Checkpoint {
    /// The three-line body.
    pub fn body(&self) -> String {
        format!("{}\n{}\n{}\n", self.origin, self.size, B64.encode(self.root.0))
    }

    /// Parses the body of a signed checkpoint (extension lines are rejected: nobody audits them).
    pub fn parse_body(text: &str) -> Result<Checkpoint, NoteError> {
        let mut lines = text.lines();
        let (Some(origin), Some(size), Some(root), None) = (lines.next(), lines.next(), lines.next(), lines.next())
        else {
            return Err(NoteError::Malformed("a checkpoint body is exactly: origin, size, root"));
        };
        check_origin(origin)?;
        if size.len() > 1 && size.starts_with('0') {
            return Err(NoteError::Malformed("checkpoint size has a leading zero"));
        }
        let size: u64 = size.parse().map_err(|_| NoteError::Malformed("checkpoint size is not a decimal number"))?;
        let raw = B64.decode(root).map_err(|_| NoteError::Malformed("checkpoint root is not base64"))?;
        let root = <[u8; 32]>::try_from(raw.as_slice())
            .map_err(|_| NoteError::Malformed("checkpoint root is not 32 bytes"))?;
        Ok(Checkpoint { origin: origin.to_owned(), size, root: Hash(root) })
    }
}

/// Origins are one line of printable text without leading or trailing space.
pub fn check_origin(origin: &str) -> Result<(), NoteError> {
    if origin.is_empty()
        || origin.len() > ORIGIN_BYTES_MAX
        || origin.trim() != origin
        || origin.chars().any(char::is_control)
    {
        return Err(NoteError::Origin(origin.chars().take(60).collect()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_parse_verify_round_trip() {
        let key = SignerKey::from_seed("strata.test", [7; 32]).unwrap();
        let parsed = SignerKey::parse(&key.to_text()).unwrap();
        assert_eq!(parsed.verifier(), key.verifier());
        let vkey = VerifierKey::parse(&key.verifier().to_text()).unwrap();
        let cp = Checkpoint { origin: "strata.test/log".into(), size: 42, root: Hash([3; 32]) };
        let note = key.sign_note(&cp.body()).unwrap();
        let n = SignedNote::parse(&note).unwrap();
        assert_eq!(Checkpoint::parse_body(&n.text).unwrap(), cp);
        assert_eq!(n.verified_by(std::slice::from_ref(&vkey)), vec!["strata.test".to_owned()]);
        let other = SignerKey::from_seed("strata.test", [8; 32]).unwrap().verifier();
        assert!(n.verified_by(&[other]).is_empty());
        let tampered = note.replace("\n42\n", "\n43\n");
        assert!(SignedNote::parse(&tampered).unwrap().verified_by(&[vkey]).is_empty());
    }

    #[test]
    fn key_texts_round_trip_for_many_seeds() {
        // Base64 key material often contains '+', the field separator: every seed must parse.
        for i in 0..64u8 {
            let key = SignerKey::from_seed("k", [i; 32]).unwrap();
            assert_eq!(SignerKey::parse(&key.to_text()).unwrap().verifier(), key.verifier());
            assert_eq!(VerifierKey::parse(&key.verifier().to_text()).unwrap(), key.verifier());
        }
    }

    #[test]
    fn bad_keys_and_notes_are_typed_errors() {
        assert!(VerifierKey::parse("nope").is_err());
        assert!(SignerKey::parse("PRIVATE+KEY+a+00000000+AQ==").is_err());
        assert!(SignedNote::parse("no signatures\n").is_err());
        assert!(Checkpoint::parse_body("o\n01\nAAAA\n").is_err());
        assert!(SignerKey::from_seed("has space", [0; 32]).is_err());
    }
}
