//! Replication (RocketMQ 4.9's HA protocol, docs/format.md §21): a master serves its CommitLog bytes to slaves over TCP, a slave
//! appends them to its own CommitLog byte for byte and reports how far it
//! holds them; a SYNC_MASTER put waits for such a report.
//!
//! ```text
//!  master                                   slave
//!  CommitLog --frames (start,size,bytes)--> CommitLog --> dispatch
//!  Acks     <--reports (8-byte end)-------- (its end)
//! ```
//!
//! Every loop is a Rust thread the store starts and stops; none holds the
//! GIL. This module reads the CommitLog and wakes dispatch; it knows
//! nothing of the store facade above it.
//!
//! # Files
//!
//! - `wire.rs`: the protocol's bytes (frames, reports) and their parsers.
//! - `acks.rs`: what slaves reported (the SYNC_MASTER wait) and the
//!   master's "the log grew" wake-up.
//! - `apply.rs`: a slave's checks and append of one frame.
//! - `master.rs`: the listener and one thread pair per connected slave.
//! - `slave.rs`: the slave's client loop (connect, report, apply, reconnect).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

pub mod acks;
pub mod apply;
pub mod master;
pub mod slave;
pub mod wire;

pub use acks::Acks;

/// The store's replication role (RocketMQ's `BrokerRole`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HaRole {
    /// Serves slaves; puts return without waiting for them.
    AsyncMaster,
    /// Serves slaves; a put waits until a slave holds it.
    SyncMaster,
    /// Follows a master; takes no puts.
    Slave,
}

impl HaRole {
    /// The role named `name` (`ASYNC_MASTER`, `SYNC_MASTER`, `SLAVE`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "ASYNC_MASTER" => Some(Self::AsyncMaster),
            "SYNC_MASTER" => Some(Self::SyncMaster),
            "SLAVE" => Some(Self::Slave),
            _ => None,
        }
    }

    /// The role's code in an atomic (see [`HaRole::from_code`]).
    pub fn code(self) -> u8 {
        match self {
            Self::AsyncMaster => 0,
            Self::SyncMaster => 1,
            Self::Slave => 2,
        }
    }

    /// The role of [`HaRole::code`] `c`.
    pub fn from_code(c: u8) -> Self {
        match c {
            1 => Self::SyncMaster,
            2 => Self::Slave,
            _ => Self::AsyncMaster,
        }
    }

    /// RocketMQ's name of the role.
    pub fn name(self) -> &'static str {
        match self {
            Self::AsyncMaster => "ASYNC_MASTER",
            Self::SyncMaster => "SYNC_MASTER",
            Self::Slave => "SLAVE",
        }
    }
}

/// An address or network a master accepts slaves from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllowedNet {
    /// The network's address.
    pub addr: IpAddr,
    /// Prefix length in bits (32 or 128 for one address).
    pub prefix: u8,
}

impl AllowedNet {
    /// Parses `"10.0.0.5"` or `"10.0.0.0/8"` (IPv4 or IPv6).
    pub fn parse(s: &str) -> Option<Self> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) => p.trim().parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Self { addr, prefix })
    }

    /// True if `ip` lies in this network (an IPv4-mapped IPv6 address
    /// counts as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - self.prefix as u32).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - self.prefix as u32).unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// Replication settings (the `ha_*` fields of `StoreConfig`, `slave_timeout`).
#[derive(Debug, Clone)]
pub struct HaOptions {
    /// The role.
    pub role: HaRole,
    /// Address a master listens on (loopback unless set on purpose).
    pub listen_address: IpAddr,
    /// Port a master listens on; `None`: no listener; 0 picks a free one.
    pub listen_port: Option<u16>,
    /// `host:port` of the master a slave follows.
    pub master_address: Option<String>,
    /// When not empty, the only addresses or networks a master serves.
    pub allowed_slaves: Vec<AllowedNet>,
    /// A master's heartbeat (an empty frame) after this long without a
    /// frame; a slave reports at least this often.
    pub heartbeat: Duration,
    /// A connection with nothing received for this long is closed.
    pub housekeeping: Duration,
    /// Largest frame body a master sends.
    pub batch_size: usize,
    /// A SYNC_MASTER put is SLAVE_NOT_AVAILABLE when the best slave is
    /// this many bytes or more behind the record's end.
    pub fallbehind_max: u64,
    /// How long a SYNC_MASTER put waits for a slave (FLUSH_SLAVE_TIMEOUT).
    pub slave_timeout: Duration,
    /// A new slave (reporting 0) starts at the master's first file instead
    /// of its last one.
    pub new_slave_from_first_file: bool,
}

impl Default for HaOptions {
    fn default() -> Self {
        Self {
            role: HaRole::AsyncMaster,
            listen_address: IpAddr::V4(Ipv4Addr::LOCALHOST),
            listen_port: None,
            master_address: None,
            allowed_slaves: Vec::new(),
            heartbeat: Duration::from_millis(5000),
            housekeeping: Duration::from_millis(20_000),
            batch_size: 32 << 10,
            fallbehind_max: 256 << 20,
            slave_timeout: Duration::from_millis(3000),
            new_slave_from_first_file: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_networks_match_their_addresses() {
        let n = AllowedNet::parse("10.1.0.0/16").expect("valid");
        assert!(n.contains("10.1.2.3".parse().expect("ip")));
        assert!(!n.contains("10.2.0.1".parse().expect("ip")));
        let one = AllowedNet::parse("127.0.0.1").expect("valid");
        assert!(one.contains("::ffff:127.0.0.1".parse().expect("ip")));
        assert!(!one.contains("127.0.0.2".parse().expect("ip")));
        assert!(AllowedNet::parse("0.0.0.0/0")
            .expect("valid")
            .contains("8.8.8.8".parse().expect("ip")));
        assert!(AllowedNet::parse("10.0.0.0/33").is_none());
        assert!(AllowedNet::parse("nonsense").is_none());
    }
}
