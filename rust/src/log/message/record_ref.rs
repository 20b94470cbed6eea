//! A checked record's fields read where they lie, when asked for.
//!
//! [`RecordRef`]: the record's bytes and its [`RecordFrame`] (size, magic,
//! sysFlag, where the body, topic and properties lie).
//!
//! A read checks a record once ([`parse_record`](super::parse_record):
//! sizes, CRC) and hands out its bytes. A caller that keeps those bytes and
//! reads only some fields of each record (a `MessageExt` of a pull reads
//! its body and perhaps two more) reads each field from the bytes when it
//! is asked for, at the position docs/format.md §3 gives it, instead of
//! decoding every field up front into a [`RecordView`](super::RecordView).
//! The positions after BORNHOST move with the hosts' IP versions
//! ([`TailLayout`], the same rule the decoder uses).
//!
//! Every read is checked: a field outside the bytes is `None`, never a
//! panic (the bytes of a checked record always hold every field).

use std::net::SocketAddr;

use super::decode::{be_i32, be_i64, read_host, TailLayout};
use super::{pos, RecordFrame};

/// The bytes of one record a read checked (exactly its TOTALSIZE bytes)
/// and its frame; its fixed fields decoded on access.
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    b: &'a [u8],
    frame: RecordFrame,
}

impl<'a> RecordRef<'a> {
    /// The record in `b` (its TOTALSIZE bytes, checked by a read), whose
    /// frame is `frame`.
    #[inline]
    pub fn new(b: &'a [u8], frame: RecordFrame) -> Self {
        Self { b, frame }
    }

    /// The record's bytes.
    #[inline]
    pub fn bytes(&self) -> &'a [u8] {
        self.b
    }

    /// The record's frame.
    #[inline]
    pub fn frame(&self) -> RecordFrame {
        self.frame
    }

    /// TOTALSIZE: the record's length in bytes.
    #[inline]
    pub fn total_size(&self) -> usize {
        self.frame.total_size()
    }

    /// SYSFLAG.
    #[inline]
    pub fn sys_flag(&self) -> i32 {
        self.frame.sys_flag()
    }

    /// The body as stored.
    #[inline]
    pub fn body(&self) -> &'a [u8] {
        self.b.get(self.frame.body()).unwrap_or_default()
    }

    /// The topic's bytes.
    #[inline]
    pub fn topic(&self) -> &'a [u8] {
        self.b.get(self.frame.topic()).unwrap_or_default()
    }

    /// The properties string.
    #[inline]
    pub fn properties(&self) -> &'a [u8] {
        self.b.get(self.frame.properties()).unwrap_or_default()
    }

    /// BODYCRC as stored.
    #[inline]
    pub fn body_crc(&self) -> Option<i32> {
        be_i32(self.b, pos::BODY_CRC)
    }

    /// QUEUEID.
    #[inline]
    pub fn queue_id(&self) -> Option<i32> {
        be_i32(self.b, pos::QUEUE_ID)
    }

    /// FLAG.
    #[inline]
    pub fn flag(&self) -> Option<i32> {
        be_i32(self.b, pos::FLAG)
    }

    /// QUEUEOFFSET.
    #[inline]
    pub fn queue_offset(&self) -> Option<i64> {
        be_i64(self.b, pos::QUEUE_OFFSET)
    }

    /// PHYSICALOFFSET.
    #[inline]
    pub fn physical_offset(&self) -> Option<i64> {
        be_i64(self.b, pos::PHYSICAL_OFFSET)
    }

    /// BORNTIMESTAMP.
    #[inline]
    pub fn born_timestamp(&self) -> Option<i64> {
        be_i64(self.b, pos::BORN_TIMESTAMP)
    }

    /// Where the fields after BORNHOST lie.
    #[inline]
    fn tail(&self) -> Option<TailLayout> {
        Some(TailLayout::of(self.frame.sys_flag()))
    }

    /// BORNHOST.
    pub fn born_host(&self) -> Option<SocketAddr> {
        read_host(self.b, pos::BORN_HOST, self.tail()?.born_v6)
    }

    /// STORETIMESTAMP.
    #[inline]
    pub fn store_timestamp(&self) -> Option<i64> {
        be_i64(self.b, self.tail()?.store_ts_at)
    }

    /// STOREHOSTADDRESS.
    pub fn store_host(&self) -> Option<SocketAddr> {
        let t = self.tail()?;
        read_host(self.b, t.store_host_at, t.store_v6)
    }

    /// RECONSUMETIMES.
    #[inline]
    pub fn reconsume_times(&self) -> Option<i32> {
        be_i32(self.b, self.tail()?.reconsume_at)
    }

    /// PREPARED TRANSACTION OFFSET.
    #[inline]
    pub fn prepared_transaction_offset(&self) -> Option<i64> {
        be_i64(self.b, self.tail()?.prepared_at)
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv6Addr};

    use super::super::{
        body_crc, encode_v1, parse_record, parse_record_frame, spec_record_len, sysflag,
        MessageSpec, Parsed, StoreStamp,
    };
    use super::*;

    /// Every field read on access equals the decoder's, for each pair of
    /// host IP versions (the positions after BORNHOST move with them).
    #[test]
    fn fields_on_access_equal_the_decoders() {
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::new(1, 2, 3, 4, 5, 6, 7, 8)), 9876);
        let v4: SocketAddr = "10.1.2.3:4567".parse().expect("address");
        for (born, store) in [(v4, v4), (v6, v4), (v4, v6), (v6, v6)] {
            let mut sys_flag = 0;
            if born.is_ipv6() {
                sys_flag |= sysflag::BORNHOST_V6;
            }
            if store.is_ipv6() {
                sys_flag |= sysflag::STOREHOST_V6;
            }
            let spec = MessageSpec {
                sys_flag,
                born_host: born,
                flag: 7,
                reconsume_times: 3,
                prepared_transaction_offset: 99,
                ..MessageSpec::new("T", 2, &b"body"[..])
                    .with_properties(&b"TAGS\x01a"[..])
                    .born_at(1_700_000_000_123)
            };
            let stamp = StoreStamp {
                sys_flag,
                store_host: &store,
                queue_offset: 17,
                phy_offset: 4096,
                store_timestamp: 1_700_000_000_456,
                prop_crc: true,
            };
            let mut rec = vec![0u8; spec_record_len(&spec, &store, true)];
            encode_v1(&mut rec, &spec, body_crc(b"body"), &stamp);
            let Parsed::Record(v) = parse_record(&rec, true) else {
                panic!("not a record")
            };
            let frame = parse_record_frame(&rec, true).expect("frame");
            assert_eq!(frame, RecordFrame::of(&v));
            let r = RecordRef::new(&rec, frame);
            assert_eq!(frame.view(&rec), Some(v.clone()));
            assert_eq!(r.total_size(), v.total_size);
            assert_eq!(r.body(), &rec[v.body.clone()]);
            assert_eq!(r.topic(), b"T");
            assert_eq!(r.properties(), &rec[v.properties.clone()]);
            assert_eq!(r.body_crc(), Some(v.body_crc));
            assert_eq!(r.queue_id(), Some(v.queue_id));
            assert_eq!(r.flag(), Some(v.flag));
            assert_eq!(r.queue_offset(), Some(v.queue_offset));
            assert_eq!(r.physical_offset(), Some(v.physical_offset));
            assert_eq!(r.sys_flag(), v.sys_flag);
            assert_eq!(r.born_timestamp(), Some(v.born_timestamp));
            assert_eq!(r.born_host(), Some(v.born_host));
            assert_eq!(r.born_host(), Some(born));
            assert_eq!(r.store_timestamp(), Some(v.store_timestamp));
            assert_eq!(r.store_host(), Some(v.store_host));
            assert_eq!(r.store_host(), Some(store));
            assert_eq!(r.reconsume_times(), Some(v.reconsume_times));
            assert_eq!(
                r.prepared_transaction_offset(),
                Some(v.prepared_transaction_offset)
            );
        }
    }

    /// Bytes too short for a field read as `None`, never a panic (and a
    /// frame does not decode over other bytes than its record's).
    #[test]
    fn short_bytes_read_as_none() {
        let spec = MessageSpec::new("T", 0, &b"x"[..]);
        let store: SocketAddr = "127.0.0.1:1".parse().expect("address");
        let mut rec = vec![0u8; spec_record_len(&spec, &store, false)];
        let stamp = StoreStamp {
            sys_flag: 0,
            store_host: &store,
            queue_offset: 0,
            phy_offset: 0,
            store_timestamp: 0,
            prop_crc: false,
        };
        encode_v1(&mut rec, &spec, body_crc(b"x"), &stamp);
        let frame = parse_record_frame(&rec, true).expect("frame");
        for n in [0, 8, 20, 40, 60] {
            let b = vec![0xFF; n];
            let r = RecordRef::new(&b, frame);
            let _ = (
                r.body_crc(),
                r.queue_id(),
                r.queue_offset(),
                r.store_timestamp(),
            );
            let _ = (
                r.born_host(),
                r.store_host(),
                r.reconsume_times(),
                r.body(),
                r.topic(),
            );
            assert_eq!(r.prepared_transaction_offset(), None);
            assert_eq!(frame.view(&b), None);
        }
    }
}
