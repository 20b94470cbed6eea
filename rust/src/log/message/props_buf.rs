//! Where a message's properties string is built ([`PropsBuf`]): a `Vec`
//! (a batch's messages back to back, a `Message`'s own copy) or, for one
//! put, an [`InlineProps`] on the stack, so a put allocates nothing for its
//! properties (a heap buffer was ~170 instructions of a put: `malloc`,
//! `free` and their wrappers).

use std::ops::Deref;

/// The bytes a `PropertiesBuilder` builds into.
pub trait PropsBuf: Default + AsRef<[u8]> {
    /// Appends one byte.
    fn push_byte(&mut self, b: u8);
    /// Appends `s`.
    fn push_bytes(&mut self, s: &[u8]);
}

impl PropsBuf for Vec<u8> {
    #[inline]
    fn push_byte(&mut self, b: u8) {
        self.push(b);
    }
    #[inline]
    fn push_bytes(&mut self, s: &[u8]) {
        self.extend_from_slice(s);
    }
}

/// Bytes of properties an [`InlineProps`] holds in place: tags, a few
/// keys and a property or two.
pub const INLINE_PROPS: usize = 128;

/// One message's properties, in place up to [`INLINE_PROPS`] bytes; longer
/// ones move to the heap once.
#[derive(Clone)]
pub struct InlineProps {
    /// Bytes used of `inline` (while not spilled).
    len: usize,
    inline: [u8; INLINE_PROPS],
    /// Every byte, once they outgrew `inline`.
    heap: Option<Vec<u8>>,
}

impl Default for InlineProps {
    #[inline]
    fn default() -> Self {
        Self {
            len: 0,
            inline: [0; INLINE_PROPS],
            heap: None,
        }
    }
}

impl InlineProps {
    /// No bytes.
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes as a `Vec` (kept by a `Message`).
    pub fn into_vec(self) -> Vec<u8> {
        match self.heap {
            Some(v) => v,
            None => self.as_ref().to_vec(),
        }
    }

    /// Appends `s` where there is no room in place (once: then to the heap).
    #[cold]
    #[inline(never)]
    fn push_spilled(&mut self, s: &[u8]) {
        let heap = match &mut self.heap {
            Some(v) => v,
            None => {
                let mut v = Vec::with_capacity(2 * INLINE_PROPS + s.len());
                v.extend_from_slice(self.inline.get(..self.len).unwrap_or_default());
                self.heap.insert(v)
            }
        };
        heap.extend_from_slice(s);
    }
}

impl PropsBuf for InlineProps {
    #[inline]
    fn push_byte(&mut self, b: u8) {
        self.push_bytes(&[b]);
    }

    #[inline]
    fn push_bytes(&mut self, s: &[u8]) {
        let end = self.len + s.len();
        match self.inline.get_mut(self.len..end) {
            Some(room) if self.heap.is_none() => {
                room.copy_from_slice(s);
                self.len = end;
            }
            _ => self.push_spilled(s),
        }
    }
}

impl AsRef<[u8]> for InlineProps {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        match &self.heap {
            Some(v) => v,
            None => self.inline.get(..self.len).unwrap_or_default(),
        }
    }
}

impl Deref for InlineProps {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_ref()
    }
}

impl std::fmt::Debug for InlineProps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "InlineProps({:?})", String::from_utf8_lossy(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_bytes_in_place_then_on_the_heap() {
        let mut p = InlineProps::new();
        assert!(p.is_empty());
        p.push_bytes(b"TAGS");
        p.push_byte(1);
        p.push_bytes(b"t");
        assert_eq!(&*p, b"TAGS\x01t");
        assert!(p.heap.is_none());
        // Filling the inline bytes exactly stays in place; one more spills.
        let mut q = InlineProps::new();
        q.push_bytes(&[b'a'; INLINE_PROPS - 1]);
        q.push_byte(b'b');
        assert!(q.heap.is_none());
        q.push_byte(b'c');
        assert!(q.heap.is_some());
        let mut want = vec![b'a'; INLINE_PROPS - 1];
        want.extend_from_slice(b"bc");
        assert_eq!(&*q, &want[..]);
        q.push_bytes(&[b'd'; 3 * INLINE_PROPS]);
        want.extend_from_slice(&[b'd'; 3 * INLINE_PROPS]);
        assert_eq!(&*q, &want[..]);
        assert_eq!(q.clone().into_vec(), want);
        assert_eq!(p.into_vec(), b"TAGS\x01t".to_vec());
    }
}
