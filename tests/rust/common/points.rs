//! The fail-point guard of the fault-injection test targets: fail points
//! are process-global, so a test holds [`Points`] while it arms any.

use std::sync::{Mutex, MutexGuard};

use _native::internals::failpoint;

static ARMED: Mutex<()> = Mutex::new(());

/// Serialises the tests and disarms every point before and after each.
pub struct Points(#[allow(dead_code)] MutexGuard<'static, ()>);

impl Points {
    pub fn take() -> Self {
        let g = ARMED.lock().unwrap_or_else(|e| e.into_inner());
        failpoint::clear();
        Points(g)
    }

    pub fn arm(&self, name: &str, errno: i32) {
        assert!(failpoint::set(name, errno), "unknown fail point {name}");
    }
}

impl Drop for Points {
    fn drop(&mut self) {
        failpoint::clear();
    }
}
