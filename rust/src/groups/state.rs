//! A consumer group's `state` file: its members and who owns each queue
//! (docs/format.md §13.2), as text lines with a version and a CRC.
//!
//! ```text
//! rocketstore-consumer-group 1                     magic and version
//! boot <boot id>                                   /proc/sys/kernel/random/boot_id
//! generation <n>                                   +1 at every membership change
//! quiet_until <monotonic ms>                       no queue handed out before
//! group <escaped name>
//! topic <escaped name>
//! member <id> <pid> <host> <since_ms> <heartbeat> <session_timeout_ms> <poll_deadline> <strategy> <fixed>
//! queue <id> <owner|-> <epoch> <lease_until> <revoking 0|1>
//! crc <crc32 of every byte before this line, 8 hex digits>
//! ```
//!
//! Times are CLOCK_MONOTONIC milliseconds (one clock for every process of
//! the host) except `since_ms` (wall clock, for display). Names and hosts
//! are escaped (`%XX` for `%`, spaces, controls and non-ASCII bytes) so a
//! line splits on spaces; `fixed` is a comma list of queue ids or `-`.
//! Decoding never panics: a file that breaks any rule is
//! [`StateError::Garbage`], a file written in another boot is empty.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The first line of a state file, before the version.
pub const MAGIC: &str = "rocketstore-consumer-group";
/// The version this code writes and reads.
pub const VERSION: u32 = 1;
/// The most bytes a state file may hold (64 members and thousands of
/// queues fit many times over); a longer file is garbage.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// How a member takes its share of the queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// RocketMQ's `AllocateMessageQueueAveragely`: consecutive runs.
    Average,
    /// RocketMQ's `AllocateMessageQueueAveragelyByCircle`: every n-th queue.
    Circle,
    /// Exactly the queues the member names.
    Fixed,
}

impl Strategy {
    /// The name in the file and in the API.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Average => "average",
            Strategy::Circle => "circle",
            Strategy::Fixed => "fixed",
        }
    }

    /// The strategy called `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "average" => Some(Strategy::Average),
            "circle" => Some(Strategy::Circle),
            "fixed" => Some(Strategy::Fixed),
            _ => None,
        }
    }
}

/// One member as the state records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// `<host>-<pid>-<random>`: unique, and the name of its lock file.
    pub id: String,
    /// Its process id.
    pub pid: u32,
    /// Its host name.
    pub host: String,
    /// When it joined (wall clock ms, for display).
    pub since_ms: i64,
    /// Its last heartbeat (monotonic ms).
    pub heartbeat: u64,
    /// Its session timeout (ms): a heartbeat older than this drops it.
    pub session_timeout_ms: u64,
    /// Monotonic ms by which it must have polled again.
    pub poll_deadline: u64,
    /// How it takes its share.
    pub strategy: Strategy,
    /// The queues a [`Strategy::Fixed`] member takes (sorted).
    pub fixed: Vec<u32>,
}

/// One queue's ownership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueOwner {
    /// The member that owns it, if any.
    pub owner: Option<String>,
    /// +1 at every change of owner.
    pub epoch: u64,
    /// Monotonic ms until which the owner's lease runs.
    pub lease_until: u64,
    /// The owner is asked to give it up.
    pub revoking: bool,
}

/// A group's state (one topic).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupState {
    /// The boot the state belongs to.
    pub boot_id: String,
    /// +1 at every membership change.
    pub generation: u64,
    /// No free queue is handed out before this monotonic ms (set when a
    /// state is rebuilt while members may still hold leases).
    pub quiet_until: u64,
    /// The group's name.
    pub group: String,
    /// The topic's name.
    pub topic: String,
    /// The members, sorted by id.
    pub members: Vec<Member>,
    /// Every queue a member has seen, with its owner.
    pub queues: BTreeMap<u32, QueueOwner>,
}

/// Why a state file could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// The bytes break a rule: the line (1-based) and which rule.
    Garbage {
        /// The line at fault (0: the whole file).
        line: usize,
        /// What is wrong there.
        reason: String,
    },
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::Garbage { line: 0, reason } => write!(f, "{reason}"),
            StateError::Garbage { line, reason } => write!(f, "line {line}: {reason}"),
        }
    }
}

fn garbage(line: usize, reason: impl Into<String>) -> StateError {
    StateError::Garbage {
        line,
        reason: reason.into(),
    }
}

/// `text` with `%`, spaces, controls and non-ASCII bytes as `%XX`, and `-`
/// as `%2D` (a lone `-` means "none" in a record); never empty: an empty
/// text is a lone `%`.
pub fn escape(text: &str) -> String {
    if text.is_empty() {
        return "%".to_owned();
    }
    if text == "-" {
        return "%2D".to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b > b' ' && b < 0x7f && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The inverse of [`escape`]; `None` for a bad escape or bytes that are
/// not UTF-8.
pub fn unescape(text: &str) -> Option<String> {
    if text == "%" {
        return Some(String::new());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl GroupState {
    /// An empty state of this boot.
    pub fn empty(boot_id: &str, group: &str, topic: &str) -> Self {
        Self {
            boot_id: boot_id.to_owned(),
            group: group.to_owned(),
            topic: topic.to_owned(),
            ..Self::default()
        }
    }

    /// The member called `id`.
    pub fn member(&self, id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.id == id)
    }

    /// The file's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC} {VERSION}");
        let _ = writeln!(s, "boot {}", escape(&self.boot_id));
        let _ = writeln!(s, "generation {}", self.generation);
        let _ = writeln!(s, "quiet_until {}", self.quiet_until);
        let _ = writeln!(s, "group {}", escape(&self.group));
        let _ = writeln!(s, "topic {}", escape(&self.topic));
        for m in &self.members {
            let fixed = if m.fixed.is_empty() {
                "-".to_owned()
            } else {
                let ids: Vec<String> = m.fixed.iter().map(u32::to_string).collect();
                ids.join(",")
            };
            let _ = writeln!(
                s,
                "member {} {} {} {} {} {} {} {} {}",
                escape(&m.id),
                m.pid,
                escape(&m.host),
                m.since_ms,
                m.heartbeat,
                m.session_timeout_ms,
                m.poll_deadline,
                m.strategy.name(),
                fixed
            );
        }
        for (q, o) in &self.queues {
            let owner = o.owner.as_deref().map_or_else(|| "-".to_owned(), escape);
            let _ = writeln!(
                s,
                "queue {q} {owner} {} {} {}",
                o.epoch,
                o.lease_until,
                u8::from(o.revoking)
            );
        }
        let crc = crc32fast::hash(s.as_bytes());
        let _ = writeln!(s, "crc {crc:08x}");
        s.into_bytes()
    }

    /// Decodes a state file. A file of another boot (its `boot` line
    /// readable, even if the rest is torn) is an empty state of
    /// `boot_id`; anything else that breaks a rule is garbage.
    pub fn decode(
        bytes: &[u8],
        boot_id: &str,
        group: &str,
        topic: &str,
    ) -> Result<Self, StateError> {
        if let Some(other) = boot_line(bytes) {
            if other != boot_id {
                return Ok(Self::empty(boot_id, group, topic));
            }
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| garbage(0, "the file is not UTF-8 text"))?;
        if text.is_empty() {
            return Err(garbage(0, "the file is empty"));
        }
        let body_end = text.trim_end_matches('\n').rfind('\n').map_or(0, |i| i + 1);
        let (body, last) = text.split_at(body_end);
        let lines = body.lines().count() + 1;
        let crc_hex = last
            .strip_suffix('\n')
            .and_then(|l| l.strip_prefix("crc "))
            .ok_or_else(|| garbage(lines, "the last line is not the checksum (a torn write?)"))?;
        let want = u32::from_str_radix(crc_hex, 16)
            .ok()
            .filter(|_| crc_hex.len() == 8)
            .ok_or_else(|| garbage(lines, "the checksum is not 8 hex digits"))?;
        let got = crc32fast::hash(body.as_bytes());
        if got != want {
            return Err(garbage(
                lines,
                format!("checksum mismatch (file {want:08x}, content {got:08x})"),
            ));
        }
        let st = decode_body(body)?;
        if st.boot_id != boot_id {
            return Ok(Self::empty(boot_id, group, topic));
        }
        Ok(st)
    }
}

/// The `boot` line's value, if the file's second line is one.
fn boot_line(bytes: &[u8]) -> Option<String> {
    let mut lines = bytes.split(|&b| b == b'\n');
    let first = std::str::from_utf8(lines.next()?).ok()?;
    if first.split(' ').next() != Some(MAGIC) {
        return None;
    }
    let second = std::str::from_utf8(lines.next()?).ok()?;
    // A torn second line (no newline after it) is not trusted.
    if !bytes.starts_with(format!("{first}\n{second}\n").as_bytes()) {
        return None;
    }
    unescape(second.strip_prefix("boot ")?)
}

fn num<T: std::str::FromStr>(line: usize, what: &str, text: Option<&str>) -> Result<T, StateError> {
    text.and_then(|t| t.parse().ok())
        .ok_or_else(|| garbage(line, format!("{what} is not a number")))
}

fn name(line: usize, what: &str, text: Option<&str>) -> Result<String, StateError> {
    text.and_then(unescape)
        .ok_or_else(|| garbage(line, format!("{what} is not an escaped name")))
}

fn decode_body(body: &str) -> Result<GroupState, StateError> {
    let mut st = GroupState::default();
    let mut seen_header = [false; 5];
    for (i, line) in body.lines().enumerate() {
        let n = i + 1;
        let mut f = line.split(' ');
        let key = f.next().unwrap_or("");
        if n == 1 {
            if key != MAGIC {
                return Err(garbage(n, "not a consumer group state file"));
            }
            let v: u32 = num(n, "the version", f.next())?;
            if v != VERSION {
                return Err(garbage(
                    n,
                    format!("version {v} (this code reads {VERSION})"),
                ));
            }
            continue;
        }
        match key {
            "boot" => {
                st.boot_id = name(n, "the boot id", f.next())?;
                seen_header[0] = true;
            }
            "generation" => {
                st.generation = num(n, "the generation", f.next())?;
                seen_header[1] = true;
            }
            "quiet_until" => {
                st.quiet_until = num(n, "quiet_until", f.next())?;
                seen_header[2] = true;
            }
            "group" => {
                st.group = name(n, "the group", f.next())?;
                seen_header[3] = true;
            }
            "topic" => {
                st.topic = name(n, "the topic", f.next())?;
                seen_header[4] = true;
            }
            "member" => st.members.push(decode_member(n, &mut f)?),
            "queue" => {
                let q: u32 = num(n, "the queue id", f.next())?;
                let owner = match f.next() {
                    Some("-") => None,
                    other => Some(name(n, "the owner", other)?),
                };
                let o = QueueOwner {
                    owner,
                    epoch: num(n, "the epoch", f.next())?,
                    lease_until: num(n, "lease_until", f.next())?,
                    revoking: match f.next() {
                        Some("0") => false,
                        Some("1") => true,
                        _ => return Err(garbage(n, "revoking is not 0 or 1")),
                    },
                };
                if st.queues.insert(q, o).is_some() {
                    return Err(garbage(n, format!("queue {q} twice")));
                }
            }
            _ => return Err(garbage(n, format!("unknown record {key:?}"))),
        }
        if f.next().is_some() {
            return Err(garbage(n, "more fields than the record has"));
        }
    }
    if seen_header.contains(&false) {
        return Err(garbage(0, "a header line is missing"));
    }
    let mut ids: Vec<&str> = st.members.iter().map(|m| m.id.as_str()).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(garbage(0, "a member is listed twice"));
    }
    st.members.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(st)
}

fn decode_member<'a>(
    n: usize,
    f: &mut impl Iterator<Item = &'a str>,
) -> Result<Member, StateError> {
    let id = name(n, "the member id", f.next())?;
    let pid = num(n, "the pid", f.next())?;
    let host = name(n, "the host", f.next())?;
    let since_ms = num(n, "since_ms", f.next())?;
    let heartbeat = num(n, "the heartbeat", f.next())?;
    let session_timeout_ms = num(n, "the session timeout", f.next())?;
    let poll_deadline = num(n, "the poll deadline", f.next())?;
    let strategy = f
        .next()
        .and_then(Strategy::parse)
        .ok_or_else(|| garbage(n, "unknown strategy"))?;
    let fixed = match f.next() {
        Some("-") => Vec::new(),
        Some(list) => {
            let mut ids = Vec::new();
            for q in list.split(',') {
                ids.push(num(n, "a fixed queue id", Some(q))?);
            }
            ids
        }
        None => return Err(garbage(n, "the fixed queue list is missing")),
    };
    Ok(Member {
        id,
        pid,
        host,
        since_ms,
        heartbeat,
        session_timeout_ms,
        poll_deadline,
        strategy,
        fixed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "boot-1";

    fn sample() -> GroupState {
        let mut st = GroupState::empty(BOOT, "g roup%", "orders");
        st.generation = 7;
        st.quiet_until = 12;
        st.members.push(Member {
            id: "h-1-0a".into(),
            pid: 1,
            host: "h ost".into(),
            since_ms: 1_700_000_000_000,
            heartbeat: 5,
            session_timeout_ms: 10_000,
            poll_deadline: 300_005,
            strategy: Strategy::Fixed,
            fixed: vec![1, 3],
        });
        st.members.push(Member {
            id: "h-2-0b".into(),
            pid: 2,
            host: "-".into(),
            since_ms: 0,
            heartbeat: 6,
            session_timeout_ms: 500,
            poll_deadline: 9,
            strategy: Strategy::Circle,
            fixed: vec![],
        });
        st.queues.insert(0, QueueOwner::default());
        st.queues.insert(
            3,
            QueueOwner {
                owner: Some("h-1-0a".into()),
                epoch: 4,
                lease_until: 10_005,
                revoking: true,
            },
        );
        st
    }

    #[test]
    fn encode_decode_round_trip() {
        let st = sample();
        let bytes = st.encode();
        let back = GroupState::decode(&bytes, BOOT, "x", "y").unwrap();
        assert_eq!(back, st);
        assert_eq!(
            GroupState::decode(&back.encode(), BOOT, "", "").unwrap(),
            st
        );
        for name in ["", "-", "%", "a b\nc", "ünï", "x%41"] {
            assert_eq!(unescape(&escape(name)).as_deref(), Some(name), "{name:?}");
            assert!(!escape(name).contains([' ', '\n']));
        }
    }

    #[test]
    fn another_boots_state_is_empty_even_torn() {
        let bytes = sample().encode();
        let other = GroupState::decode(&bytes, "boot-2", "g", "t").unwrap();
        assert_eq!(other, GroupState::empty("boot-2", "g", "t"));
        // Torn after the boot line, written in another boot: empty too.
        let cut = bytes.len() / 2;
        let torn = GroupState::decode(&bytes[..cut], "boot-2", "g", "t").unwrap();
        assert_eq!(torn, GroupState::empty("boot-2", "g", "t"));
    }

    #[test]
    fn a_torn_state_of_this_boot_is_garbage() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            let got = GroupState::decode(&bytes[..cut], BOOT, "g", "t");
            assert!(
                matches!(got, Err(StateError::Garbage { .. })),
                "cut at {cut}: {got:?}"
            );
        }
    }

    #[test]
    fn a_changed_byte_is_garbage() {
        let bytes = sample().encode();
        // Every byte of the body flipped (not the boot line, whose change
        // reads as another boot).
        let boot_end = bytes
            .iter()
            .enumerate()
            .filter(|(_, &b)| b == b'\n')
            .nth(1)
            .map(|(i, _)| i)
            .unwrap();
        for i in boot_end + 1..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            let got = GroupState::decode(&bad, BOOT, "g", "t");
            assert!(got.is_err(), "byte {i} changed: {got:?}");
        }
    }

    proptest::proptest! {
        /// Any bytes decode without a panic; what decodes re-encodes to a
        /// state that decodes to itself.
        #[test]
        fn any_bytes_decode_without_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
            if let Ok(st) = GroupState::decode(&bytes, BOOT, "g", "t") {
                let again = GroupState::decode(&st.encode(), BOOT, "g", "t");
                proptest::prop_assert_eq!(again.ok(), Some(st));
            }
        }

        /// A valid state with bytes changed, cut or spliced never panics,
        /// and is refused unless it still reads as a state of some boot.
        #[test]
        fn a_damaged_state_is_refused_or_consistent(
            edits in proptest::collection::vec((0usize..2000, proptest::prelude::any::<u8>()), 0..8),
            cut in 0usize..2000,
        ) {
            let mut bytes = sample().encode();
            for (at, b) in edits {
                let n = bytes.len();
                bytes[at % n] = b;
            }
            bytes.truncate(cut.max(1));
            if let Ok(st) = GroupState::decode(&bytes, BOOT, "g", "t") {
                let again = GroupState::decode(&st.encode(), BOOT, "g", "t");
                proptest::prop_assert_eq!(again.ok(), Some(st));
            }
        }
    }

    #[test]
    fn garbage_is_refused_with_a_reason() {
        let cases: [&[u8]; 6] = [
            b"",
            b"hello\n",
            b"\xff\xfe\n",
            b"rocketstore-consumer-group 2\nboot boot-1\n",
            b"{\"json\": true}",
            &[0u8; 64],
        ];
        for bytes in cases {
            let got = GroupState::decode(bytes, BOOT, "g", "t");
            let Err(e) = got else {
                panic!("{bytes:?} decoded: {got:?}");
            };
            assert!(!e.to_string().is_empty());
        }
        // A valid checksum over bad records is still garbage.
        for body in [
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration x\n",
            "rocketstore-consumer-group 1\nboot boot-1\nfoo 1\n",
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration 1\n",
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration 1\nquiet_until 0\ngroup g\n\
             topic t\nqueue 1 - 1 0 2\n",
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration 1\nquiet_until 0\ngroup g\n\
             topic t\nqueue 1 - 1 0 0\nqueue 1 - 1 0 0\n",
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration 1\nquiet_until 0\ngroup g\n\
             topic t\nmember a 1 h 0 0 1 1 average - extra\n",
            "rocketstore-consumer-group 1\nboot boot-1\ngeneration 1\nquiet_until 0\ngroup g\n\
             topic t\nmember a 1 h 0 0 1 1 sideways -\n",
        ] {
            let text = format!("{body}crc {:08x}\n", crc32fast::hash(body.as_bytes()));
            let got = GroupState::decode(text.as_bytes(), BOOT, "g", "t");
            assert!(got.is_err(), "{body:?} decoded: {got:?}");
        }
    }
}
