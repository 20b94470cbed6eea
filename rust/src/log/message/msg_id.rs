//! Message ids: the offset message id is the store host's ip and port
//! followed by the record's CommitLog offset, in upper-case hex:
//!
//! ```text
//!  IPv4: [ip 4][port 4][offset 8]  -> 32 hex digits
//!  IPv6: [ip 16][port 4][offset 8] -> 56 hex digits
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::encode::put_host;

/// The offset message id: store ip ‖ port ‖ physical offset, upper-case hex.
pub fn offset_msg_id(store_host: &SocketAddr, phy_offset: i64) -> String {
    let mut raw = [0u8; 28];
    let n = put_host(&mut raw, store_host);
    raw[n..n + 8].copy_from_slice(&phy_offset.to_be_bytes());
    to_hex_upper(&raw[..n + 8])
}

/// Upper-case hex of `bytes`.
pub fn to_hex_upper(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xF) as usize] as char);
    }
    s
}

/// Decodes an offset message id into `(store host, physical offset)`.
pub fn decode_msg_id(id: &str) -> Option<(SocketAddr, i64)> {
    if !id.is_ascii() || (id.len() != 32 && id.len() != 56) {
        return None;
    }
    let mut raw = Vec::with_capacity(id.len() / 2);
    for i in (0..id.len()).step_by(2) {
        raw.push(u8::from_str_radix(&id[i..i + 2], 16).ok()?);
    }
    let (ip, rest): (IpAddr, &[u8]) = if raw.len() == 16 {
        let o: [u8; 4] = raw[..4].try_into().ok()?;
        (IpAddr::V4(Ipv4Addr::from(o)), &raw[4..])
    } else {
        let o: [u8; 16] = raw[..16].try_into().ok()?;
        (IpAddr::V6(Ipv6Addr::from(o)), &raw[16..])
    };
    let port = i32::from_be_bytes(rest[..4].try_into().ok()?);
    let off = i64::from_be_bytes(rest[4..12].try_into().ok()?);
    Some((SocketAddr::new(ip, port as u16), off))
}
