//! The StoreConfig fields the JVM connector's opens take, by their
//! snake_case names and as strings (Spark options), read into the engine's
//! [`StoreOptions`] the way the Python `StoreConfig` is: booleans `true` /
//! `false` (any case), integers, enums by member name, durations in ms;
//! the segment and index sizes checked against the ranges StoreConfig
//! checks (the Python source refuses the same ones).
//!
//! A read-only open uses [`READ_FIELDS`]; a writer also [`WRITE_FIELDS`]
//! (its flush and replication settings, as the Python sink's writer takes
//! them). A read-only open given a writer's field ignores it, as the
//! Python source does; a name in neither list is refused, naming both.

use std::net::IpAddr;
use std::time::Duration;

use engine::{transient_pool_in_use, AllowedNet, FlushDiskType, HaRole, StoreOptions};

use crate::{Error, Result};

/// The fields a read-only open uses (they also shape a writer's open).
pub const READ_FIELDS: &[&str] = &[
    "mapped_file_size_commit_log",
    "mapped_file_size_consume_queue",
    "commit_log_dir",
    "check_crc_on_recover",
    "on_corruption",
    "message_index_enable",
    "max_hash_slot_num",
    "max_index_num",
];

/// The fields only a writer uses: its flush, its puts and its replication.
pub const WRITE_FIELDS: &[&str] = &[
    "broker_role",
    "flush_disk_type",
    "sync_flush_timeout",
    "flush_interval_commit_log",
    "flush_commit_log_least_pages",
    "flush_commit_log_thorough_interval",
    "commit_interval_commit_log",
    "commit_commit_log_least_pages",
    "commit_commit_log_thorough_interval",
    "flush_interval_consume_queue",
    "flush_consume_queue_least_pages",
    "flush_consume_queue_thorough_interval",
    "transient_store_pool_enable",
    "transient_store_pool_size",
    "max_message_size",
    "enabled_append_prop_crc",
    "message_index_safe",
    "os_page_cache_busy_time_out_mills",
    "ha_listen_address",
    "ha_listen_port",
    "ha_allowed_slaves",
    "ha_master_address",
    "ha_send_heartbeat_interval",
    "ha_housekeeping_interval",
    "ha_transfer_batch_size",
    "ha_slave_fallbehind_max",
    "ha_new_slave_from_first_file",
    "slave_timeout",
];

/// An open's options: the engine's, and the recovery's two choices.
#[derive(Debug, Clone)]
pub struct Open {
    /// The engine's options.
    pub opts: StoreOptions,
    /// `check_crc_on_recover`.
    pub check_crc: bool,
    /// `on_corruption = "skip"`.
    pub skip: bool,
}

fn parse<T: std::str::FromStr>(k: &str, v: &str) -> Result<T> {
    v.trim()
        .parse()
        .map_err(|_| Error::Arg(format!("option {k}={v:?}: not a valid value")))
}

/// `k`=`v`, an integer in `[low, high]`: StoreConfig's range for the field,
/// refused in StoreConfig's words (`note` says why the range is what it is).
fn int_in(k: &str, v: &str, low: usize, high: usize, note: &str) -> Result<usize> {
    let n: i64 = parse(k, v)?;
    match usize::try_from(n) {
        Ok(u) if (low..=high).contains(&u) => Ok(u),
        _ => Err(Error::Arg(
            format!("{k}={n}: must be in [{low}, {high}] {note}")
                .trim_end()
                .to_owned(),
        )),
    }
}

/// The largest segment or file size a store takes (a Java int).
const I32_MAX: usize = i32::MAX as usize;

/// A CommitLog segment size StoreConfig accepts.
fn commit_log_size(k: &str, v: &str) -> Result<usize> {
    use engine::internals::message::{END_FILE_MIN_BLANK_LENGTH, FIXED_OVERHEAD_V4};
    let note = format!(
        "(a minimal {FIXED_OVERHEAD_V4}-byte record plus the \
         {END_FILE_MIN_BLANK_LENGTH}-byte blank must fit)"
    );
    int_in(
        k,
        v,
        FIXED_OVERHEAD_V4 + END_FILE_MIN_BLANK_LENGTH,
        I32_MAX,
        &note,
    )
}

/// A ConsumeQueue file size StoreConfig accepts, rounded up to whole units
/// as it rounds it.
fn consume_queue_size(k: &str, v: &str) -> Result<usize> {
    use engine::internals::queue::CQ_UNIT_SIZE;
    let n = int_in(k, v, 1, I32_MAX, "")?;
    let rounded = n.div_ceil(CQ_UNIT_SIZE) * CQ_UNIT_SIZE;
    if rounded > I32_MAX {
        return Err(Error::Arg(format!(
            "{k}={n}: rounds up to {rounded}, above {I32_MAX}"
        )));
    }
    Ok(rounded)
}

/// The index geometry StoreConfig accepts: an IndexFile's size is a Java int.
fn check_index_geometry(o: &StoreOptions) -> Result<()> {
    use engine::internals::index::{
        index_file_size, HASH_SLOT_SIZE, INDEX_ENTRY_SIZE, INDEX_HEADER_SIZE,
    };
    let (slots, num) = (o.max_hash_slot_num, o.max_index_num);
    if index_file_size(slots, num).is_some_and(|n| n <= I32_MAX) {
        return Ok(());
    }
    let size = [
        (1, INDEX_HEADER_SIZE),
        (slots, HASH_SLOT_SIZE),
        (num, INDEX_ENTRY_SIZE),
    ]
    .iter()
    .map(|&(n, unit)| n as u128 * unit as u128)
    .sum::<u128>();
    Err(Error::Arg(format!(
        "max_hash_slot_num={slots}, max_index_num={num}: IndexFile size {size} exceeds \
         {I32_MAX} bytes"
    )))
}

fn boolean(k: &str, v: &str) -> Result<bool> {
    parse(k, &v.trim().to_lowercase())
}

fn ms(k: &str, v: &str) -> Result<Duration> {
    parse(k, v).map(Duration::from_millis)
}

fn one_of<T: Copy>(k: &str, v: &str, names: &[(&str, T)]) -> Result<T> {
    let v = v.trim();
    names
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(v))
        .map(|(_, t)| *t)
        .ok_or_else(|| {
            let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            Error::Arg(format!(
                "option {k}={v:?}: must be one of {}",
                all.join(", ")
            ))
        })
}

/// The options of an open of the store at `path` with StoreConfig
/// `fields` (name, value), read-only or as its writer.
pub fn open_options(path: &str, fields: &[(String, String)], read_only: bool) -> Result<Open> {
    let mut o = Open {
        opts: StoreOptions {
            read_only,
            ..StoreOptions::at(path)
        },
        check_crc: true,
        skip: false,
    };
    let mut transient = o.opts.transient_store_pool_enable;
    for (k, v) in fields {
        let k = k.as_str();
        if READ_FIELDS.contains(&k) {
            read_field(&mut o, k, v)?;
        } else if !WRITE_FIELDS.contains(&k) {
            return Err(Error::Arg(format!(
                "option {k}: not a store field the JVM connector takes (reads take {}; \
                 writes also {})",
                READ_FIELDS.join(", "),
                WRITE_FIELDS.join(", ")
            )));
        } else if !read_only {
            if k == "transient_store_pool_enable" {
                transient = boolean(k, v)?;
            } else {
                write_field(&mut o.opts, k, v)?;
            }
        }
    }
    // The engine's one rule: the pool only under ASYNC_FLUSH, never on a SLAVE.
    let t = transient_pool_in_use(
        transient,
        o.opts.flush.flush_disk_type,
        o.opts.ha.role == HaRole::Slave,
    );
    o.opts.transient_store_pool_enable = t;
    o.opts.flush.transient = t;
    check_index_geometry(&o.opts)?;
    Ok(o)
}

fn read_field(o: &mut Open, k: &str, v: &str) -> Result<()> {
    let s = &mut o.opts;
    match k {
        "mapped_file_size_commit_log" => s.commit_log_file_size = Some(commit_log_size(k, v)?),
        "mapped_file_size_consume_queue" => {
            s.consume_queue_file_size = Some(consume_queue_size(k, v)?)
        }
        "commit_log_dir" => s.commit_log_dir = v.into(),
        "check_crc_on_recover" => o.check_crc = boolean(k, v)?,
        "on_corruption" => {
            o.skip = match v {
                "skip" => true,
                "refuse" => false,
                _ => {
                    return Err(Error::Arg(format!(
                        "option on_corruption={v:?}: must be \"refuse\" or \"skip\""
                    )))
                }
            }
        }
        "message_index_enable" => s.message_index_enable = boolean(k, v)?,
        "max_hash_slot_num" => s.max_hash_slot_num = int_in(k, v, 1, I32_MAX, "")?,
        "max_index_num" => s.max_index_num = int_in(k, v, 1, I32_MAX, "")?,
        _ => return Err(Error::Arg(format!("option {k}: not a read field"))),
    }
    Ok(())
}

fn write_field(s: &mut StoreOptions, k: &str, v: &str) -> Result<()> {
    let f = &mut s.flush;
    let ha = &mut s.ha;
    match k {
        "broker_role" => {
            ha.role = one_of(
                k,
                v,
                &[
                    ("ASYNC_MASTER", HaRole::AsyncMaster),
                    ("SYNC_MASTER", HaRole::SyncMaster),
                    ("SLAVE", HaRole::Slave),
                ],
            )?
        }
        "flush_disk_type" => {
            let names: Vec<(&str, FlushDiskType)> =
                FlushDiskType::ALL.iter().map(|t| (t.name(), *t)).collect();
            f.flush_disk_type = one_of(k, v, &names)?
        }
        "sync_flush_timeout" => f.sync_timeout = ms(k, v)?,
        "flush_interval_commit_log" => f.flush_interval = ms(k, v)?,
        "flush_commit_log_least_pages" => f.flush_least_pages = parse(k, v)?,
        "flush_commit_log_thorough_interval" => f.flush_thorough_interval = ms(k, v)?,
        "commit_interval_commit_log" => f.commit_interval = ms(k, v)?,
        "commit_commit_log_least_pages" => f.commit_least_pages = parse(k, v)?,
        "commit_commit_log_thorough_interval" => f.commit_thorough_interval = ms(k, v)?,
        "flush_interval_consume_queue" => f.cq_interval = ms(k, v)?,
        "flush_consume_queue_least_pages" => f.cq_least_pages = parse(k, v)?,
        "flush_consume_queue_thorough_interval" => f.cq_thorough_interval = ms(k, v)?,
        "transient_store_pool_size" => s.transient_store_pool_size = parse(k, v)?,
        "max_message_size" => s.max_message_size = parse(k, v)?,
        "enabled_append_prop_crc" => s.enabled_append_prop_crc = boolean(k, v)?,
        "message_index_safe" => s.message_index_safe = boolean(k, v)?,
        "os_page_cache_busy_time_out_mills" => s.os_page_cache_busy_timeout_ms = parse(k, v)?,
        "ha_listen_address" => ha.listen_address = parse::<IpAddr>(k, v)?,
        "ha_listen_port" => ha.listen_port = Some(parse(k, v)?),
        "ha_allowed_slaves" => {
            ha.allowed_slaves = v
                .split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(|a| {
                    AllowedNet::parse(a).ok_or_else(|| {
                        Error::Arg(format!("option {k}: {a:?} is not an address or network"))
                    })
                })
                .collect::<Result<_>>()?
        }
        "ha_master_address" => ha.master_address = Some(v.trim().to_owned()),
        "ha_send_heartbeat_interval" => ha.heartbeat = ms(k, v)?,
        "ha_housekeeping_interval" => ha.housekeeping = ms(k, v)?,
        "ha_transfer_batch_size" => ha.batch_size = parse(k, v)?,
        "ha_slave_fallbehind_max" => ha.fallbehind_max = parse(k, v)?,
        "ha_new_slave_from_first_file" => ha.new_slave_from_first_file = boolean(k, v)?,
        "slave_timeout" => ha.slave_timeout = ms(k, v)?,
        _ => return Err(Error::Arg(format!("option {k}: not a write field"))),
    }
    Ok(())
}

/// The fields of `fields` that shape a read-only open, sorted: what opens
/// of the same store may share.
pub fn read_key(fields: &[(String, String)]) -> Vec<(String, String)> {
    let mut k: Vec<(String, String)> = fields
        .iter()
        .filter(|(n, _)| READ_FIELDS.contains(&n.as_str()))
        .cloned()
        .collect();
    k.sort();
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_writer_takes_its_flush_and_replication_settings() {
        let o = open_options(
            "/x",
            &f(&[
                ("flush_disk_type", "SYNC_FLUSH"),
                ("sync_flush_timeout", "700"),
                ("broker_role", "sync_master"),
                ("ha_listen_port", "0"),
                ("ha_allowed_slaves", "10.0.0.0/8, 127.0.0.1"),
                ("transient_store_pool_enable", "true"),
                ("on_corruption", "skip"),
            ]),
            false,
        )
        .expect("options");
        assert_eq!(o.opts.flush.flush_disk_type, FlushDiskType::SyncFlush);
        assert_eq!(o.opts.flush.sync_timeout, Duration::from_millis(700));
        assert_eq!(o.opts.ha.role, HaRole::SyncMaster);
        assert_eq!(o.opts.ha.listen_port, Some(0));
        assert_eq!(o.opts.ha.allowed_slaves.len(), 2);
        // The pool needs ASYNC_FLUSH: SYNC_FLUSH turns it off.
        assert!(!o.opts.transient_store_pool_enable && !o.opts.flush.transient);
        assert!(o.skip && o.check_crc && !o.opts.read_only);
    }

    #[test]
    fn a_read_only_open_ignores_a_writers_fields_and_refuses_unknown_ones() {
        let o =
            open_options("/x", &f(&[("flush_disk_type", "SYNC_FLUSH")]), true).expect("options");
        assert_eq!(o.opts.flush.flush_disk_type, FlushDiskType::AsyncFlush);
        let e = open_options("/x", &f(&[("file_reserved_time", "1")]), true);
        assert!(matches!(e, Err(Error::Arg(m)) if m.contains("file_reserved_time")));
        let e = open_options("/x", &f(&[("flush_disk_type", "SOMETIMES")]), false);
        assert!(matches!(e, Err(Error::Arg(m)) if m.contains("ASYNC_FLUSH, SYNC_FLUSH")));
        let e = open_options("/x", &f(&[("ha_allowed_slaves", "nowhere")]), false);
        assert!(matches!(e, Err(Error::Arg(m)) if m.contains("nowhere")));
    }

    #[test]
    fn the_read_key_is_the_read_fields_sorted() {
        let k = read_key(&f(&[
            ("max_index_num", "40"),
            ("flush_disk_type", "SYNC_FLUSH"),
            ("check_crc_on_recover", "false"),
        ]));
        assert_eq!(
            k,
            f(&[("check_crc_on_recover", "false"), ("max_index_num", "40")])
        );
    }
}
