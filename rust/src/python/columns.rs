//! `READ_COLUMNS`: the read schema's columns as Python sees them, one
//! `ReadColumn` per row of [`COLUMNS`] (their one owner). The Spark
//! format derives its schema and its pushdown's column facts from them.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::columnar::{ColumnSpec, Nulls, COLUMNS};

/// One column of the read schema (private; see `crate::columnar::COLUMNS`).
#[pyclass(frozen, module = "rocketstore._native", name = "ReadColumn")]
pub struct PyReadColumn {
    spec: &'static ColumnSpec,
}

#[pymethods]
impl PyReadColumn {
    /// The column's name.
    #[getter]
    fn name(&self) -> &'static str {
        self.spec.name
    }

    /// Its Arrow type as pyarrow spells it (`str(pyarrow.DataType)`).
    #[getter]
    fn arrow_type(&self) -> &'static str {
        self.spec.ty.arrow_name()
    }

    /// True when no row holds a null in it.
    #[getter]
    fn never_null(&self) -> bool {
        self.spec.nulls == Nulls::Never
    }

    /// How the Spark format pushes filters on it down: `"values"` (`=`,
    /// `IN`), `"range"` (comparisons) or `None`.
    #[getter]
    fn pushdown(&self) -> Option<&'static str> {
        self.spec.pushdown.name()
    }

    fn __repr__(&self) -> String {
        let pushdown = match self.spec.pushdown.name() {
            Some(p) => format!("'{p}'"),
            None => "None".into(),
        };
        format!(
            "ReadColumn('{}', '{}', never_null={}, pushdown={pushdown})",
            self.spec.name,
            self.spec.ty.arrow_name(),
            if self.never_null() { "True" } else { "False" },
        )
    }
}

/// Adds `READ_COLUMNS` (a tuple of `ReadColumn`, in the schema's order) and
/// the `ReadColumn` class to the module.
pub fn add_read_columns(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let cols = COLUMNS
        .iter()
        .map(|spec| Bound::new(py, PyReadColumn { spec }))
        .collect::<PyResult<Vec<_>>>()?;
    m.add("READ_COLUMNS", PyTuple::new(py, cols)?)?;
    m.add_class::<PyReadColumn>()
}
