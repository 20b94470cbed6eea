//! The bytes of the HA protocol (docs/format.md §21): the
//! slave's 8-byte reports, the master's frames (8-byte start offset, 4-byte
//! size, that many CommitLog bytes), and the slave's parser of a frame
//! stream, which takes only whole frames and refuses one that breaks the
//! protocol before a byte of it is used.

/// Bytes of a frame header: the start offset (8) and the size (4).
pub const FRAME_HEADER: usize = 12;

/// Largest frame body a slave takes (RocketMQ's slave read buffer, 4 MiB):
/// a larger size field is a protocol error.
pub const MAX_FRAME_BODY: usize = 4 << 20;

/// Bytes of one report.
pub const REPORT_LEN: usize = 8;

/// The header of a frame carrying `size` bytes from `start`.
pub fn frame_header(start: u64, size: u32) -> [u8; FRAME_HEADER] {
    let mut h = [0u8; FRAME_HEADER];
    h[..8].copy_from_slice(&start.to_be_bytes());
    h[8..].copy_from_slice(&size.to_be_bytes());
    h
}

/// One report: the slave's CommitLog end, 8 bytes big-endian.
pub fn report(offset: u64) -> [u8; REPORT_LEN] {
    offset.to_be_bytes()
}

/// A whole frame, viewed in the parser's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// CommitLog offset of the first byte (for a heartbeat: where the
    /// master's next frame starts).
    pub start: u64,
    /// The CommitLog bytes (empty for a heartbeat).
    pub body: &'a [u8],
}

/// Bytes a slave asks the socket for in one read (RocketMQ's slave reads
/// into a 4 MiB buffer): large reads take many frames per system call.
pub const READ_CHUNK: usize = 1 << 20;

/// Splits a byte stream into frames, in place: bytes are kept until a
/// frame is complete; a header that breaks the protocol is an error at once.
#[derive(Debug, Default)]
pub struct FrameParser {
    buf: Vec<u8>,
    /// The first byte not yet taken as a frame.
    start: usize,
    /// The end of the received bytes.
    end: usize,
}

impl FrameParser {
    /// An empty parser.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the bytes not yet taken to the buffer's start and makes room
    /// for `more` bytes after them.
    fn make_room(&mut self, more: usize) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.buf.len() < self.end + more {
            self.buf.resize(self.end + more, 0);
        }
    }

    /// Adds received bytes.
    #[cfg(test)]
    pub fn feed(&mut self, bytes: &[u8]) {
        self.make_room(bytes.len());
        self.buf[self.end..self.end + bytes.len()].copy_from_slice(bytes);
        self.end += bytes.len();
    }

    /// Reads once from `r` straight into the buffer (at most
    /// [`READ_CHUNK`] bytes); returns what `read` returned.
    pub fn read_from(&mut self, r: &mut impl std::io::Read) -> std::io::Result<usize> {
        self.make_room(READ_CHUNK);
        let n = r.read(&mut self.buf[self.end..self.end + READ_CHUNK])?;
        self.end += n;
        Ok(n)
    }

    /// Bytes received and not yet taken as a frame.
    pub fn pending(&self) -> usize {
        self.end - self.start
    }

    /// The next whole frame as its start offset and a view of its body,
    /// `Ok(None)` when more bytes are needed, or why the header breaks the
    /// protocol (a negative start, or a size over [`MAX_FRAME_BODY`]).
    pub fn next_frame_ref(&mut self) -> Result<Option<FrameRef<'_>>, String> {
        let b = &self.buf[self.start..self.end];
        if b.len() < FRAME_HEADER {
            return Ok(None);
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(&b[..8]);
        let start = i64::from_be_bytes(s);
        let mut z = [0u8; 4];
        z.copy_from_slice(&b[8..FRAME_HEADER]);
        let size = i32::from_be_bytes(z);
        if start < 0 {
            return Err(format!("frame with a negative start offset {start}"));
        }
        if size < 0 || size as usize > MAX_FRAME_BODY {
            return Err(format!(
                "frame of {size} bytes (a frame holds 0 to {MAX_FRAME_BODY} bytes)"
            ));
        }
        let end = FRAME_HEADER + size as usize;
        if b.len() < end {
            return Ok(None);
        }
        let at = self.start;
        self.start += end;
        Ok(Some(FrameRef {
            start: start as u64,
            body: &self.buf[at + FRAME_HEADER..at + end],
        }))
    }
}

/// Reads reports from a slave's byte stream as RocketMQ's master does: of
/// the whole 8-byte groups received, the last one counts; a partial group
/// waits for its remaining bytes.
#[derive(Debug, Default)]
pub struct ReportReader {
    buf: Vec<u8>,
}

impl ReportReader {
    /// An empty reader.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds received bytes; returns the last whole report among them, if
    /// one completed, or an error for a report that is negative or past
    /// `end` (the master's CommitLog end: the slave would hold bytes the
    /// master does not).
    pub fn feed(&mut self, bytes: &[u8], end: u64) -> Result<Option<u64>, String> {
        self.buf.extend_from_slice(bytes);
        let whole = self.buf.len() / REPORT_LEN * REPORT_LEN;
        if whole == 0 {
            return Ok(None);
        }
        let mut last = None;
        for chunk in self.buf[..whole].chunks_exact(REPORT_LEN) {
            let mut b = [0u8; 8];
            b.copy_from_slice(chunk);
            let v = i64::from_be_bytes(b);
            if v < 0 {
                return Err(format!("report of a negative offset {v}"));
            }
            if v as u64 > end {
                return Err(format!(
                    "it reported offset {v}, past this store's CommitLog end {end} \
                     (it holds bytes this store does not)"
                ));
            }
            last = Some(v as u64);
        }
        self.buf.drain(..whole);
        Ok(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_taken_whole_and_in_order() {
        let mut p = FrameParser::new();
        let mut bytes = frame_header(4096, 3).to_vec();
        bytes.extend_from_slice(b"abc");
        bytes.extend_from_slice(&frame_header(4099, 0));
        p.feed(&bytes[..7]);
        assert_eq!(p.next_frame_ref(), Ok(None));
        p.feed(&bytes[7..]);
        let f = p.next_frame_ref().expect("valid").expect("whole");
        assert_eq!((f.start, f.body), (4096, &b"abc"[..]));
        let h = p.next_frame_ref().expect("valid").expect("whole");
        assert_eq!((h.start, h.body.len()), (4099, 0));
        assert_eq!(p.pending(), 0);
    }

    /// Hands out its bytes `step` at a time.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl std::io::Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(buf.len()).min(self.bytes.len() - self.at);
            buf[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn frames_read_in_pieces_come_out_whole_up_to_the_largest() {
        let sizes = [0usize, 5, MAX_FRAME_BODY, 1, READ_CHUNK + 3, 0, 32 << 10];
        let mut bytes = Vec::new();
        let mut start = 0u64;
        for (i, n) in sizes.iter().enumerate() {
            bytes.extend_from_slice(&frame_header(start, *n as u32));
            bytes.extend((0..*n).map(|k| (k + i) as u8));
            start += *n as u64;
        }
        for step in [7, 4096, 3 << 20] {
            let mut r = Trickle {
                bytes: bytes.clone(),
                at: 0,
                step,
            };
            let mut p = FrameParser::new();
            let mut got = Vec::new();
            while p.read_from(&mut r).expect("read") > 0 {
                while let Some(f) = p.next_frame_ref().expect("valid") {
                    let i = got.len();
                    assert!(f.body.iter().enumerate().all(|(k, b)| *b == (k + i) as u8));
                    got.push((f.start, f.body.len()));
                }
            }
            let want: Vec<_> = sizes
                .iter()
                .scan(0u64, |s, n| {
                    let at = *s;
                    *s += *n as u64;
                    Some((at, *n))
                })
                .collect();
            assert_eq!(got, want, "read {step} bytes at a time");
            assert_eq!(p.pending(), 0);
        }
    }

    #[test]
    fn an_oversized_or_negative_header_is_an_error() {
        let mut p = FrameParser::new();
        p.feed(&frame_header(0, (MAX_FRAME_BODY + 1) as u32));
        assert!(p.next_frame_ref().is_err());
        let mut p = FrameParser::new();
        p.feed(&frame_header(u64::MAX, 1));
        assert!(p.next_frame_ref().is_err());
    }

    #[test]
    fn the_last_whole_report_counts() {
        let mut r = ReportReader::new();
        let mut b = report(10).to_vec();
        b.extend_from_slice(&report(20));
        b.extend_from_slice(&[0, 0]);
        assert_eq!(r.feed(&b, 100), Ok(Some(20)));
        assert_eq!(r.feed(&[0, 0, 0, 0, 0], 100), Ok(None));
        assert_eq!(r.feed(&[30], 100), Ok(Some(30)));
        assert!(r.feed(&u64::MAX.to_be_bytes(), 100).is_err());
        let mut r = ReportReader::new();
        let mut b = report(200).to_vec();
        b.extend_from_slice(&report(50));
        assert!(
            r.feed(&b, 100).is_err(),
            "a report past the end counts anywhere"
        );
    }
}
