//! The bytes of the offsets sync (docs/format.md §21.7): a slave's request
//! and the master's snapshot of its consumer offsets and delay offsets.
//! Both are rocketstore's own, on a port of their own: nothing of them
//! travels on the HA port.
//!
//! ```text
//! request  = "RSOQ" version:u32                                  8 bytes
//! snapshot = "RSOF" version:u32 commitlog_end:u64 taken_ms:i64
//!            consumer_len:u32 delay_len:u32                     32 bytes
//!            consumer json, delay json
//!            crc32 of every byte before it:u32                   4 bytes
//! ```
//!
//! Every integer is big-endian.

/// The request's first bytes.
pub const REQUEST_MAGIC: [u8; 4] = *b"RSOQ";
/// The snapshot's first bytes.
pub const SNAPSHOT_MAGIC: [u8; 4] = *b"RSOF";
/// The version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of a request.
pub const REQUEST_LEN: usize = 8;
/// Bytes of a snapshot's header.
pub const HEADER_LEN: usize = 32;
/// Largest table (each of the two json documents) a slave takes.
pub const MAX_TABLE: usize = 256 << 20;

/// One snapshot: the master's tables and its CommitLog end when it took
/// them (every delivery and consumption they count lies below it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The master's CommitLog end when the tables were taken.
    pub commitlog_end: u64,
    /// The master's clock then (ms since the epoch).
    pub taken_ms: i64,
    /// `consumerOffset.json`'s document (docs/format.md §13).
    pub consumer: Vec<u8>,
    /// `delayOffset.json`'s document (docs/format.md §13).
    pub delay: Vec<u8>,
}

/// A slave's request.
pub fn request() -> [u8; REQUEST_LEN] {
    let mut r = [0u8; REQUEST_LEN];
    r[..4].copy_from_slice(&REQUEST_MAGIC);
    r[4..].copy_from_slice(&VERSION.to_be_bytes());
    r
}

/// Checks a request; why it is not one this build answers.
pub fn check_request(r: &[u8; REQUEST_LEN]) -> Result<(), String> {
    if r[..4] != REQUEST_MAGIC {
        return Err("not an offsets request (wrong magic)".into());
    }
    let mut v = [0u8; 4];
    v.copy_from_slice(&r[4..]);
    match u32::from_be_bytes(v) {
        VERSION => Ok(()),
        v => Err(format!(
            "offsets request of version {v} (this store speaks {VERSION})"
        )),
    }
}

impl Snapshot {
    /// The snapshot's bytes, checksum included.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        for (what, t) in [("consumer", &self.consumer), ("delay", &self.delay)] {
            if t.len() > MAX_TABLE {
                return Err(format!(
                    "the {what} offsets table has {} bytes (at most {MAX_TABLE})",
                    t.len()
                ));
            }
        }
        let mut b = Vec::with_capacity(HEADER_LEN + self.consumer.len() + self.delay.len() + 4);
        b.extend_from_slice(&SNAPSHOT_MAGIC);
        b.extend_from_slice(&VERSION.to_be_bytes());
        b.extend_from_slice(&self.commitlog_end.to_be_bytes());
        b.extend_from_slice(&self.taken_ms.to_be_bytes());
        b.extend_from_slice(&(self.consumer.len() as u32).to_be_bytes());
        b.extend_from_slice(&(self.delay.len() as u32).to_be_bytes());
        b.extend_from_slice(&self.consumer);
        b.extend_from_slice(&self.delay);
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_be_bytes());
        Ok(b)
    }

    /// The body's length a header announces (tables and checksum), or why
    /// the header is not a snapshot's.
    pub fn body_len(h: &[u8; HEADER_LEN]) -> Result<usize, String> {
        if h[..4] != SNAPSHOT_MAGIC {
            return Err("the reply is not an offsets snapshot (wrong magic)".into());
        }
        let v = be_u32(&h[4..8]);
        if v != VERSION {
            return Err(format!(
                "offsets snapshot of version {v} (this store reads {VERSION})"
            ));
        }
        let (c, d) = (be_u32(&h[24..28]) as usize, be_u32(&h[28..32]) as usize);
        if c > MAX_TABLE || d > MAX_TABLE {
            return Err(format!(
                "offsets snapshot announces tables of {c} and {d} bytes (at most {MAX_TABLE})"
            ));
        }
        Ok(c + d + 4)
    }

    /// Decodes a whole snapshot (header and body), checking its checksum.
    pub fn decode(b: &[u8]) -> Result<Self, String> {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(b.get(..HEADER_LEN).ok_or("offsets snapshot cut short")?);
        let body = Self::body_len(&h)?;
        if b.len() != HEADER_LEN + body {
            return Err(format!(
                "offsets snapshot of {} bytes, its header announces {}",
                b.len(),
                HEADER_LEN + body
            ));
        }
        let (data, crc) = b.split_at(b.len() - 4);
        let (want, got) = (be_u32(crc), crc32fast::hash(data));
        if want != got {
            return Err(format!(
                "offsets snapshot checksum mismatch (sent {want:08x}, computed {got:08x})"
            ));
        }
        let c = be_u32(&h[24..28]) as usize;
        let mut e = [0u8; 8];
        e.copy_from_slice(&h[8..16]);
        let commitlog_end = u64::from_be_bytes(e);
        e.copy_from_slice(&h[16..24]);
        let taken_ms = i64::from_be_bytes(e);
        Ok(Self {
            commitlog_end,
            taken_ms,
            consumer: data[HEADER_LEN..HEADER_LEN + c].to_vec(),
            delay: data[HEADER_LEN + c..].to_vec(),
        })
    }
}

fn be_u32(b: &[u8]) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[..4]);
    u32::from_be_bytes(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap() -> Snapshot {
        Snapshot {
            commitlog_end: 4096,
            taken_ms: 1_700_000_000_000,
            consumer: b"{\"offsetTable\":{\"T@g\":{0:5}}}".to_vec(),
            delay: b"{\"offsetTable\":{1:3}}".to_vec(),
        }
    }

    #[test]
    fn a_snapshot_round_trips() {
        let b = snap().encode().expect("encodes");
        assert_eq!(Snapshot::decode(&b), Ok(snap()));
        assert!(check_request(&request()).is_ok());
    }

    #[test]
    fn any_changed_byte_is_refused() {
        let b = snap().encode().expect("encodes");
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(Snapshot::decode(&c).is_err(), "byte {i} changed and taken");
        }
        assert!(Snapshot::decode(&b[..b.len() - 1]).is_err());
        let mut r = request();
        r[7] = 2;
        assert!(check_request(&r).is_err());
    }

    #[test]
    fn an_oversized_table_is_refused_from_its_header() {
        let mut b = snap().encode().expect("encodes");
        b[24..28].copy_from_slice(&((MAX_TABLE + 1) as u32).to_be_bytes());
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&b[..HEADER_LEN]);
        assert!(Snapshot::body_len(&h).is_err());
    }
}
