//! A record batch as Java's Arrow loader takes it: field nodes (length,
//! null count) and buffers (address, length) in pre-order, every field's
//! validity buffer first (an absent one as address 0, length 0), then its
//! data buffers as the Arrow format orders them (offsets before values).
//! The JVM reads each buffer where it is (`NativeColumnVector`, which
//! checks this description first): no byte is copied.

use arrow_array::{Array, RecordBatch};
use arrow_data::ArrayData;

use crate::{Error, Result};

/// The layout of one batch: `[rows, nodes, (length, nulls)*, buffers,
/// (address, length)*]`.
pub fn describe(batch: &RecordBatch) -> Result<Vec<i64>> {
    let (mut nodes, mut bufs) = (Vec::new(), Vec::new());
    for col in batch.columns() {
        walk(&col.to_data(), &mut nodes, &mut bufs)?;
    }
    let mut out = Vec::with_capacity(3 + nodes.len() + bufs.len());
    out.push(len(batch.num_rows())?);
    out.push(len(nodes.len() / 2)?);
    out.extend(nodes);
    out.push(len(bufs.len() / 2)?);
    out.extend(bufs);
    Ok(out)
}

fn len(n: usize) -> Result<i64> {
    i64::try_from(n).map_err(|_| Error::State(format!("size {n} too large")))
}

fn walk(d: &ArrayData, nodes: &mut Vec<i64>, bufs: &mut Vec<i64>) -> Result<()> {
    if d.offset() != 0 {
        // The engine's builders never slice; a sliced array would need its
        // offset carried, which Java's loader cannot take.
        return Err(Error::State("a sliced array cannot be handed over".into()));
    }
    nodes.push(len(d.len())?);
    nodes.push(len(d.null_count())?);
    match d.nulls() {
        Some(n) if n.null_count() > 0 => {
            if n.offset() != 0 {
                return Err(Error::State("a sliced validity buffer".into()));
            }
            bufs.push(n.buffer().as_ptr() as i64);
            bufs.push(len(n.buffer().len())?);
        }
        // No nulls: Java's loader makes its own all-valid bitmap.
        _ => bufs.extend([0, 0]),
    }
    for b in d.buffers() {
        bufs.push(b.as_ptr() as i64);
        bufs.push(len(b.len())?);
    }
    for c in d.child_data() {
        walk(c, nodes, bufs)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{ListBuilder, StringBuilder};
    use arrow_array::{Int32Array, StringArray};

    use super::*;

    #[test]
    fn buffers_come_in_pre_order_with_validity_first() {
        let ints = Int32Array::from(vec![Some(1), None, Some(3)]);
        let strs = StringArray::from(vec!["a", "bc", ""]);
        let mut lb = ListBuilder::new(StringBuilder::new());
        lb.values().append_value("k");
        lb.append(true);
        lb.append(true);
        lb.append(true);
        let list = lb.finish();
        let b = RecordBatch::try_from_iter([
            ("i", Arc::new(ints) as _),
            ("s", Arc::new(strs) as _),
            ("l", Arc::new(list) as _),
        ])
        .unwrap();
        let d = describe(&b).unwrap();
        assert_eq!(d[0], 3);
        assert_eq!(d[1], 4); // i, s, l, l's element
        assert_eq!(&d[2..10], &[3, 1, 3, 0, 3, 0, 1, 0]);
        let bufs = &d[11..];
        assert_eq!(d[10], 2 + 3 + 2 + 3);
        assert_eq!(bufs.len(), 20);
        assert_ne!(bufs[0], 0); // i's validity (it has a null)
        assert_eq!(bufs[3], 12); // i's values
        assert_eq!(&bufs[4..6], &[0, 0]); // s: no validity
        assert_eq!(bufs[7], 16); // s's offsets
        assert_eq!(bufs[9], 3); // s's values
    }
}
