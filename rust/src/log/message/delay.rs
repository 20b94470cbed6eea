//! The delay-level grammar (RocketMQ's `messageDelayLevel`).

/// Parses a delay-level string such as `"1s 5s 10s 30s 1m 2h 1d"` into
/// milliseconds per level (index 0 = level 1); `None` when it breaks the
/// grammar of [`delay_level_table`].
pub fn parse_delay_levels(s: &str) -> Option<Vec<i64>> {
    delay_level_table(s).ok()
}

/// The delay-level grammar (RocketMQ's `messageDelayLevel`): levels
/// separated by whitespace, each a positive decimal number (ASCII digits)
/// followed by `s`, `m`, `h` or `d`, at least one level, each at most
/// `i64::MAX` ms. The one definition: `StoreConfig` validates with it too.
/// `Err` says which level is wrong and why.
pub fn delay_level_table(s: &str) -> std::result::Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for tok in s.split_whitespace() {
        let bad =
            || format!("bad level {tok:?}: expected a positive number followed by s, m, h or d");
        let (num, unit) = tok.split_at(tok.len() - tok.chars().last().map_or(0, char::len_utf8));
        let mult: i64 = match unit {
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        let n: i64 = match num.parse() {
            Ok(n) => n,
            // All digits, so only too many of them.
            Err(_) => return Err(format!("level {tok:?} is too long")),
        };
        if n == 0 {
            return Err(bad());
        }
        out.push(
            n.checked_mul(mult)
                .ok_or_else(|| format!("level {tok:?} is too long"))?,
        );
    }
    if out.is_empty() {
        return Err("must name at least one level".into());
    }
    Ok(out)
}
