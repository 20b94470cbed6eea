//! The one configuration object that crosses the FFI: the Python
//! `StoreConfig` is read here, attribute by attribute, into the engine's
//! `StoreOptions`. A missing attribute or a value of the wrong type is an
//! error naming the field (`StoreConfig.max_index_num must be int, not str`).
//! The engine's defaults (`StoreOptions::default()`) are exposed to Python so
//! a test can pin them equal to `config/store_config.py`'s.

use std::path::PathBuf;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyString};

use std::net::IpAddr;

use crate::ha::{AllowedNet, HaOptions, HaRole};
use crate::log::allocate::WarmConfig;
use crate::log::message::parse_delay_levels;
use crate::queue::consume_queue::DEFAULT_CQ_FILE_SIZE;
use crate::services::flush::{FlushConfig, FlushDiskType};
use crate::store::{StoreOptions, DEFAULT_COMMIT_LOG_FILE_SIZE};

use super::args::parse_host;
use super::args::{i64_arg, type_error};

/// Reads fields of one config object, naming them in errors.
struct Fields<'a, 'py> {
    cfg: &'a Bound<'py, PyAny>,
}

impl<'py> Fields<'_, 'py> {
    fn label(name: &str) -> String {
        format!("StoreConfig.{name}")
    }

    fn get(&self, name: &str) -> PyResult<Bound<'py, PyAny>> {
        self.cfg.getattr(name).map_err(|_| {
            PyTypeError::new_err(format!(
                "config has no field {name:?}: expected a rocketstore.StoreConfig, not {}",
                super::args::type_name(self.cfg)
            ))
        })
    }

    fn bool(&self, name: &str) -> PyResult<bool> {
        let v = self.get(name)?;
        v.downcast::<PyBool>()
            .map(|b| b.is_true())
            .map_err(|_| type_error(&Self::label(name), "bool", &v))
    }

    fn i64(&self, name: &str) -> PyResult<i64> {
        i64_arg(&self.get(name)?, &Self::label(name))
    }

    fn u64(&self, name: &str) -> PyResult<u64> {
        let v = self.get(name)?;
        let i = i64_arg(&v, &Self::label(name))?;
        u64::try_from(i).map_err(|_| {
            PyValueError::new_err(format!("{} must be >= 0, got {i}", Self::label(name)))
        })
    }

    fn usize(&self, name: &str) -> PyResult<usize> {
        let v = self.u64(name)?;
        usize::try_from(v).map_err(|_| {
            PyValueError::new_err(format!("{} is out of range: {v}", Self::label(name)))
        })
    }

    fn opt_usize(&self, name: &str) -> PyResult<Option<usize>> {
        if self.get(name)?.is_none() {
            Ok(None)
        } else {
            self.usize(name).map(Some)
        }
    }

    fn ms(&self, name: &str) -> PyResult<Duration> {
        self.u64(name).map(Duration::from_millis)
    }

    fn str(&self, name: &str) -> PyResult<String> {
        let v = self.get(name)?;
        let s = v
            .downcast::<PyString>()
            .map_err(|_| type_error(&Self::label(name), "str", &v))?;
        Ok(s.to_str()?.to_owned())
    }

    fn path(&self, name: &str) -> PyResult<PathBuf> {
        let v = self.get(name)?;
        v.extract::<PathBuf>()
            .map_err(|_| type_error(&Self::label(name), "a path (str or os.PathLike)", &v))
    }

    /// An enum field, by member name.
    fn enum_name(&self, name: &str) -> PyResult<String> {
        let v = self.get(name)?;
        let member = v
            .getattr("name")
            .map_err(|_| type_error(&Self::label(name), "an enum member", &v))?;
        member
            .downcast::<PyString>()
            .map_err(|_| type_error(&Self::label(name), "an enum member", &v))?
            .to_str()
            .map(str::to_owned)
    }
}

/// Reads a `StoreConfig` (by attribute name) into engine options.
pub fn options_from_config(cfg: &Bound<'_, PyAny>, read_only: bool) -> PyResult<StoreOptions> {
    let f = Fields { cfg };
    let flush_disk_type = flush_disk_type_arg(&f.enum_name("flush_disk_type")?)
        .map_err(|e| PyValueError::new_err(format!("StoreConfig.flush_disk_type {e}")))?;
    let delay = f.str("message_delay_level")?;
    let delay_levels = parse_delay_levels(&delay).ok_or_else(|| {
        PyValueError::new_err(format!(
            "StoreConfig.message_delay_level: cannot parse {delay:?}"
        ))
    })?;
    // The config applies the rule (`transient_pool_in_use`: ASYNC_FLUSH,
    // not a SLAVE), since only it knows the broker role.
    let transient_store_pool_enable = f.bool("effective_transient_store_pool_enable")?;
    let warm = f.bool("warm_mapped_file_enable")?;
    let flush = FlushConfig {
        flush_disk_type,
        transient: transient_store_pool_enable,
        flush_interval: f.ms("flush_interval_commit_log")?,
        flush_least_pages: f.usize("flush_commit_log_least_pages")?,
        flush_thorough_interval: f.ms("flush_commit_log_thorough_interval")?,
        commit_interval: f.ms("commit_interval_commit_log")?,
        commit_least_pages: f.usize("commit_commit_log_least_pages")?,
        commit_thorough_interval: f.ms("commit_commit_log_thorough_interval")?,
        cq_interval: f.ms("flush_interval_consume_queue")?,
        cq_least_pages: f.usize("flush_consume_queue_least_pages")?,
        cq_thorough_interval: f.ms("flush_consume_queue_thorough_interval")?,
        sync_timeout: f.ms("sync_flush_timeout")?,
    };
    Ok(StoreOptions {
        root: f.path("store_path")?,
        commit_log_dir: f.path("commit_log_dir")?,
        commit_log_file_size: f.opt_usize("mapped_file_size_commit_log")?,
        consume_queue_file_size: f.opt_usize("mapped_file_size_consume_queue")?,
        max_message_size: f.usize("max_message_size")?,
        store_host: parse_host(&f.get("store_host")?, "StoreConfig.store_host")?,
        delay_levels,
        read_only,
        wait_for_writer: false,
        create: false,
        repair: false,
        cut_at: None,
        message_index_enable: f.bool("message_index_enable")?,
        max_hash_slot_num: f.usize("max_hash_slot_num")?,
        max_index_num: f.usize("max_index_num")?,
        max_msgs_num_batch: f.usize("max_msgs_num_batch")?,
        max_transfer_bytes_in_memory: f.usize("max_transfer_bytes_on_message_in_memory")?,
        max_transfer_count_in_memory: f.usize("max_transfer_count_on_message_in_memory")?,
        max_transfer_bytes_in_disk: f.usize("max_transfer_bytes_on_message_in_disk")?,
        max_transfer_count_in_disk: f.usize("max_transfer_count_on_message_in_disk")?,
        access_message_in_memory_max_ratio: f.u64("access_message_in_memory_max_ratio")?,
        message_index_safe: f.bool("message_index_safe")?,
        transient_store_pool_enable,
        transient_store_pool_size: f.usize("transient_store_pool_size")?,
        os_page_cache_busy_timeout_ms: f.i64("os_page_cache_busy_time_out_mills")?,
        flush,
        // The next CommitLog file is made ahead in the background with
        // warm-up only: a made-ahead file is not yet understood by read-only
        // followers (they take a later file as proof the earlier is full).
        preallocate: warm,
        warm: WarmConfig {
            enabled: warm,
            flush_every_pages: f.usize("flush_least_pages_when_warm_mapped_file")?,
            ..Default::default()
        },
        enabled_append_prop_crc: f.bool("enabled_append_prop_crc")?,
        ha: ha_options(&f)?,
    })
}

/// The replication fields (`broker_role`, `ha_*`, `slave_timeout`).
fn ha_options(f: &Fields<'_, '_>) -> PyResult<HaOptions> {
    let role_name = f.enum_name("broker_role")?;
    let role = HaRole::from_name(&role_name).ok_or_else(|| {
        PyValueError::new_err(format!("StoreConfig.broker_role: unknown role {role_name}"))
    })?;
    let addr = f.str("ha_listen_address")?;
    let listen_address: IpAddr = addr.parse().map_err(|_| {
        PyValueError::new_err(format!(
            "StoreConfig.ha_listen_address: {addr:?} is not an IP address"
        ))
    })?;
    let listen_port =
        match f.get("ha_listen_port")?.is_none() {
            true => None,
            false => Some(u16::try_from(f.u64("ha_listen_port")?).map_err(|_| {
                PyValueError::new_err("StoreConfig.ha_listen_port must be 0 to 65535")
            })?),
        };
    let master_address = match f.get("ha_master_address")?.is_none() {
        true => None,
        false => Some(f.str("ha_master_address")?),
    };
    let mut allowed_slaves = Vec::new();
    let allowed = f.str("ha_allowed_slaves")?;
    for s in allowed.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        allowed_slaves.push(AllowedNet::parse(s).ok_or_else(|| {
            PyValueError::new_err(format!(
                "StoreConfig.ha_allowed_slaves: {s:?} is not an address or network"
            ))
        })?);
    }
    Ok(HaOptions {
        role,
        listen_address,
        listen_port,
        master_address,
        allowed_slaves,
        heartbeat: f.ms("ha_send_heartbeat_interval")?,
        housekeeping: f.ms("ha_housekeeping_interval")?,
        batch_size: f.usize("ha_transfer_batch_size")?,
        fallbehind_max: f.u64("ha_slave_fallbehind_max")?,
        slave_timeout: f.ms("slave_timeout")?,
        new_slave_from_first_file: f.bool("ha_new_slave_from_first_file")?,
    })
}

/// The engine's flush type named `name` (`SYNC_FLUSH`, `ASYNC_FLUSH`).
fn flush_disk_type_arg(name: &str) -> Result<FlushDiskType, String> {
    FlushDiskType::from_name(name).ok_or_else(|| {
        let names: Vec<&str> = FlushDiskType::ALL.iter().map(|t| t.name()).collect();
        format!("must be one of {}, not {name}", names.join(", "))
    })
}

/// Whether the transient store pool is used with these settings (the
/// engine's one rule: ASYNC_FLUSH only, never on a SLAVE).
#[pyfunction]
pub fn transient_pool_in_use(enabled: bool, flush_disk_type: &str, slave: bool) -> PyResult<bool> {
    let t = flush_disk_type_arg(flush_disk_type)
        .map_err(|e| PyValueError::new_err(format!("flush_disk_type {e}")))?;
    Ok(crate::services::flush::transient_pool_in_use(
        enabled, t, slave,
    ))
}

fn ms(d: Duration) -> u64 {
    d.as_millis() as u64
}

/// The engine's defaults (`StoreOptions::default()`), keyed by the
/// `StoreConfig` field they come from, in `StoreConfig`'s units; plus
/// `delay_level_table` (ms per level) and the segment sizes of a new store.
/// For the test that pins `config/store_config.py`'s defaults to these.
#[pyfunction]
#[pyo3(name = "_default_options")]
pub fn default_options(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let o = StoreOptions::default();
    let f = &o.flush;
    let d = PyDict::new(py);
    d.set_item("mapped_file_size_commit_log", o.commit_log_file_size)?;
    d.set_item("mapped_file_size_consume_queue", o.consume_queue_file_size)?;
    d.set_item("max_message_size", o.max_message_size)?;
    d.set_item(
        "store_host",
        (o.store_host.ip().to_string(), o.store_host.port()),
    )?;
    d.set_item("flush_disk_type", f.flush_disk_type.name())?;
    d.set_item("message_index_enable", o.message_index_enable)?;
    d.set_item("max_hash_slot_num", o.max_hash_slot_num)?;
    d.set_item("max_index_num", o.max_index_num)?;
    d.set_item("max_msgs_num_batch", o.max_msgs_num_batch)?;
    d.set_item(
        "max_transfer_bytes_on_message_in_memory",
        o.max_transfer_bytes_in_memory,
    )?;
    d.set_item(
        "max_transfer_count_on_message_in_memory",
        o.max_transfer_count_in_memory,
    )?;
    d.set_item(
        "max_transfer_bytes_on_message_in_disk",
        o.max_transfer_bytes_in_disk,
    )?;
    d.set_item(
        "max_transfer_count_on_message_in_disk",
        o.max_transfer_count_in_disk,
    )?;
    d.set_item(
        "access_message_in_memory_max_ratio",
        o.access_message_in_memory_max_ratio,
    )?;
    d.set_item("message_index_safe", o.message_index_safe)?;
    d.set_item("transient_store_pool_enable", o.transient_store_pool_enable)?;
    d.set_item("transient_store_pool_size", o.transient_store_pool_size)?;
    d.set_item(
        "os_page_cache_busy_time_out_mills",
        o.os_page_cache_busy_timeout_ms,
    )?;
    d.set_item("flush_interval_commit_log", ms(f.flush_interval))?;
    d.set_item("flush_commit_log_least_pages", f.flush_least_pages)?;
    d.set_item(
        "flush_commit_log_thorough_interval",
        ms(f.flush_thorough_interval),
    )?;
    d.set_item("commit_interval_commit_log", ms(f.commit_interval))?;
    d.set_item("commit_commit_log_least_pages", f.commit_least_pages)?;
    d.set_item(
        "commit_commit_log_thorough_interval",
        ms(f.commit_thorough_interval),
    )?;
    d.set_item("flush_interval_consume_queue", ms(f.cq_interval))?;
    d.set_item("flush_consume_queue_least_pages", f.cq_least_pages)?;
    d.set_item(
        "flush_consume_queue_thorough_interval",
        ms(f.cq_thorough_interval),
    )?;
    d.set_item("sync_flush_timeout", ms(f.sync_timeout))?;
    d.set_item("warm_mapped_file_enable", o.warm.enabled)?;
    d.set_item("enabled_append_prop_crc", o.enabled_append_prop_crc)?;
    d.set_item(
        "flush_least_pages_when_warm_mapped_file",
        o.warm.flush_every_pages,
    )?;
    let ha = &o.ha;
    d.set_item("broker_role", ha.role.name())?;
    d.set_item("ha_master_address", ha.master_address.clone())?;
    d.set_item("ha_allowed_slaves", "")?;
    d.set_item("ha_listen_address", ha.listen_address.to_string())?;
    d.set_item("ha_listen_port", ha.listen_port)?;
    d.set_item("ha_send_heartbeat_interval", ms(ha.heartbeat))?;
    d.set_item("ha_housekeeping_interval", ms(ha.housekeeping))?;
    d.set_item("ha_transfer_batch_size", ha.batch_size)?;
    d.set_item("ha_slave_fallbehind_max", ha.fallbehind_max)?;
    d.set_item("slave_timeout", ms(ha.slave_timeout))?;
    d.set_item("ha_new_slave_from_first_file", ha.new_slave_from_first_file)?;
    // The string `StoreOptions::default()` parses its levels from.
    d.set_item(
        "message_delay_level",
        crate::store::DEFAULT_MESSAGE_DELAY_LEVEL,
    )?;
    d.set_item("delay_level_table", o.delay_levels)?;
    d.set_item(
        "default_mapped_file_size_commit_log",
        DEFAULT_COMMIT_LOG_FILE_SIZE,
    )?;
    d.set_item(
        "default_mapped_file_size_consume_queue",
        DEFAULT_CQ_FILE_SIZE,
    )?;
    Ok(d)
}
