//! When a job runs: a [`Trigger`] (cron, interval or one-shot) yields
//! discrete **slots**, the instants the job is due, at a fixed
//! [`UtcOffset`].
//!
//! - `cron`: the minutes the expression matches, in local time.
//! - `every`: the multiples of the interval counted from local midnight of
//!   1970-01-01, so `every: 1d` is due at 00:00 local, `every: 6h` at 00,
//!   06, 12 and 18, `every: 15m` at :00, :15, :30 and :45, whenever the job
//!   was written, and the same after a restart.
//! - `at`: one slot.

use std::fmt;
use std::time::Duration;

use super::cron::CronExpr;
use super::error::ScheduleError;
use crate::common::Timestamp;

/// The shortest interval an `every` trigger may have.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);
/// The longest interval an `every` trigger (or an `in …` delay) may have:
/// 366 days. Anything rarer is a cron expression or a one-shot.
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);
const MAX_OFFSET_MINUTES: i32 = 14 * 60;

/// A fixed offset from UTC, in minutes east (`+09:00` is 540).
///
/// Jobs use a fixed offset rather than a named time zone: no time-zone
/// database ships with the SDK, and the product's home, Korea, has had no
/// daylight-saving time since 1988, so `+09:00` is exact there.
// ponytail: no named zones; a job in a zone with daylight-saving time needs
// its offset edited when the clocks change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UtcOffset(i32);

impl UtcOffset {
    /// UTC itself.
    pub const UTC: UtcOffset = UtcOffset(0);
    /// Korea Standard Time, `+09:00`: the default.
    pub const KST: UtcOffset = UtcOffset(9 * 60);

    /// The offset `minutes` east of UTC (from -14:00 to +14:00).
    pub fn from_minutes(minutes: i32) -> Result<Self, ScheduleError> {
        if (-MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES).contains(&minutes) {
            Ok(UtcOffset(minutes))
        } else {
            Err(ScheduleError::invalid(format!(
                "utc_offset must lie between -14:00 and +14:00, got {minutes} minutes"
            )))
        }
    }

    /// Minutes east of UTC.
    pub const fn minutes(self) -> i32 {
        self.0
    }

    /// Parses `+09:00`, `-05:30`, `+9`, `Z` or `UTC`: a sign, hours (one or
    /// two digits) and optionally `:` and two digits of minutes.
    pub fn parse(text: &str) -> Result<Self, ScheduleError> {
        let bad = || {
            ScheduleError::invalid(format!(
                "utc_offset {text:?} is not an offset like \"+09:00\" or \"-05:00\""
            ))
        };
        let t = text.trim();
        if t.eq_ignore_ascii_case("z") || t.eq_ignore_ascii_case("utc") {
            return Ok(Self::UTC);
        }
        let (sign, rest) = match t.as_bytes().first() {
            Some(b'+') => (1, &t[1..]),
            Some(b'-') => (-1, &t[1..]),
            _ => return Err(bad()),
        };
        let (h, m) = rest.split_once(':').unwrap_or((rest, "00"));
        let number = |s: &str, lengths: std::ops::RangeInclusive<usize>| {
            (lengths.contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<i32>().ok())
                .flatten()
        };
        match (number(h, 1..=2), number(m, 2..=2)) {
            (Some(h), Some(m)) if m < 60 => Self::from_minutes(sign * (h * 60 + m)).map_err(|_| bad()),
            _ => Err(bad()),
        }
    }
}

impl Default for UtcOffset {
    fn default() -> Self {
        Self::KST
    }
}

impl fmt::Display for UtcOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { '-' } else { '+' };
        let m = self.0.unsigned_abs();
        write!(f, "{sign}{:02}:{:02}", m / 60, m % 60)
    }
}

/// What makes a job due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// A five-field cron expression, in the job's local time.
    Cron(CronExpr),
    /// Every so often (whole seconds from [`MIN_INTERVAL`] to
    /// [`MAX_INTERVAL`]), on the multiples of the interval from local
    /// midnight of 1970-01-01.
    Every(Duration),
    /// Once, at this instant.
    At(Timestamp),
}

impl Trigger {
    /// A cron trigger.
    pub fn cron(expr: &str) -> Result<Self, ScheduleError> {
        CronExpr::parse(expr).map(Trigger::Cron)
    }

    /// An interval trigger from text like `90s`, `15m`, `2h`, `1d` or `1h30m`.
    pub fn every(text: &str) -> Result<Self, ScheduleError> {
        parse_interval(text).map(Trigger::Every)
    }

    /// Whether it fires once only.
    pub fn is_one_shot(&self) -> bool {
        matches!(self, Trigger::At(_))
    }

    /// The first slot strictly after `t`.
    pub fn next_after(&self, t: Timestamp, offset: UtcOffset) -> Option<Timestamp> {
        match self {
            Trigger::Cron(cron) => cron.next_after(t, offset),
            Trigger::Every(every) => {
                let slot = latest_every(*every, t, offset);
                Some(Timestamp::from_millis(slot.saturating_add(every_period(*every))))
            }
            Trigger::At(at) => (*at > t).then_some(*at),
        }
    }

    /// The last slot at or before `t`.
    pub fn latest_at_or_before(&self, t: Timestamp, offset: UtcOffset) -> Option<Timestamp> {
        match self {
            Trigger::Cron(cron) => cron.latest_at_or_before(t, offset),
            Trigger::Every(every) => Some(Timestamp::from_millis(latest_every(*every, t, offset))),
            Trigger::At(at) => (*at <= t).then_some(*at),
        }
    }

    /// The trigger in words for lists and the AGENDA: `cron "0 9 * * 1"`,
    /// `every 30m`, `at 2026-12-01 09:00 (+09:00)`.
    pub fn describe(&self, offset: UtcOffset) -> String {
        match self {
            Trigger::Cron(cron) => format!("cron \"{cron}\" ({offset})"),
            Trigger::Every(every) => format!("every {}", format_interval(*every)),
            Trigger::At(at) => format!("at {} ({offset})", format_local(*at, offset, ' ')),
        }
    }
}

/// An interval's period in milliseconds (at least 1).
fn every_period(every: Duration) -> i64 {
    i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The last slot of `every` at or before `t`, in milliseconds: slots are the
/// multiples of the period from local midnight of 1970-01-01.
fn latest_every(every: Duration, t: Timestamp, offset: UtcOffset) -> i64 {
    let origin = -i64::from(offset.minutes()) * 60_000;
    let since = t.as_millis().saturating_sub(origin);
    origin.saturating_add(since.saturating_sub(since.rem_euclid(every_period(every))))
}

/// Checks an interval for `every` (and a delay for `in`): whole seconds,
/// from [`MIN_INTERVAL`] to [`MAX_INTERVAL`]. The message starts with what
/// is wrong, for the caller to prefix.
pub(crate) fn check_interval(d: Duration) -> Result<Duration, String> {
    if d.subsec_nanos() != 0 {
        Err("the interval must be whole seconds".to_owned())
    } else if d < MIN_INTERVAL {
        Err("the interval is shorter than the minimum of 1 minute (최소 1분)".to_owned())
    } else if d > MAX_INTERVAL {
        Err("the interval is longer than the maximum of 366 days (최대 366일)".to_owned())
    } else {
        Ok(d)
    }
}

/// Parses `90s`, `15m`, `2h`, `1d`, or several joined (`1h30m`), within
/// [`check_interval`]'s bounds.
pub(crate) fn parse_interval(text: &str) -> Result<Duration, ScheduleError> {
    let d = parse_duration(text).ok_or_else(|| {
        ScheduleError::invalid(format!(
            "every {text:?} is not an interval like \"90s\", \"15m\", \"2h\" or \"1d\""
        ))
    })?;
    check_interval(d).map_err(|reason| ScheduleError::invalid(format!("every {text:?}: {reason}")))
}

/// `<n><unit>…` with units `s`, `m`, `h`, `d`; `None` when it is not one.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in t.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return None,
        };
        let n: u64 = digits.parse().ok()?;
        digits.clear();
        total = total.checked_add(n.checked_mul(unit)?)?;
    }
    (digits.is_empty() && total > 0).then(|| Duration::from_secs(total))
}

/// The shortest unit form of an interval: `1d`, `2h`, `15m`, `90s`.
pub(crate) fn format_interval(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3_600 == 0 => format!("{}h", s / 3_600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// `2026-12-01T09:00` (with `sep` between date and time) at `offset`; with
/// seconds when the time has them.
pub(crate) fn format_local(t: Timestamp, offset: UtcOffset, sep: char) -> String {
    let c = t.civil(offset.minutes());
    let seconds = t.as_millis().rem_euclid(60_000) / 1_000;
    let mut out = format!(
        "{:04}-{:02}-{:02}{sep}{:02}:{:02}",
        c.year, c.month, c.day, c.hour, c.minute
    );
    if seconds != 0 {
        out.push_str(&format!(":{seconds:02}"));
    }
    out
}

/// Parses a one-shot time: a full RFC 3339 date-time (its own offset), or
/// a local `YYYY-MM-DDTHH:MM[:SS]` (`T` or a space) at `offset`.
pub(crate) fn parse_at(text: &str, offset: UtcOffset) -> Result<Timestamp, ScheduleError> {
    let t = text.trim();
    if let Ok(ts) = Timestamp::parse_rfc3339(t) {
        return Ok(ts);
    }
    parse_local(t, offset).ok_or_else(|| {
        ScheduleError::invalid(format!(
            "at {text:?} is not a time like \"2026-12-01T09:00\" (local) or \"2026-12-01T09:00:00+09:00\""
        ))
    })
}

fn parse_local(t: &str, offset: UtcOffset) -> Option<Timestamp> {
    let b = t.as_bytes();
    if !(b.len() == 16 || b.len() == 19) {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        let s = t.get(from..to)?;
        s.bytes().all(|c| c.is_ascii_digit()).then(|| s.parse().ok())?
    };
    let (y, mo, d, h, mi) = (num(0, 4)?, num(5, 7)?, num(8, 10)?, num(11, 13)?, num(14, 16)?);
    let s = if b.len() == 19 {
        if b[16] != b':' {
            return None;
        }
        num(17, 19)?
    } else {
        0
    };
    if b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    if !(1..=12).contains(&mo)
        || d < 1
        || d > i64::from(Timestamp::days_in_month(y, mo as u32))
        || h > 23
        || mi > 59
        || s > 59
    {
        return None;
    }
    let base = Timestamp::from_civil(y, mo as u32, d, h as u32, mi as u32, offset.minutes());
    within_years(Timestamp::from_millis(base.as_millis() + s * 1_000))
}

/// `t` when it lies in years 0000–9999 UTC, the range a [`Timestamp`] is
/// written and read back in (a local time near either end may fall outside).
pub(crate) fn within_years(t: Timestamp) -> Option<Timestamp> {
    (0..=9999).contains(&t.civil(0).year).then_some(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn offsets_parse_and_print() {
        assert_eq!(UtcOffset::parse("+09:00").unwrap(), UtcOffset::KST);
        assert_eq!(UtcOffset::parse("-05:30").unwrap().minutes(), -330);
        assert_eq!(UtcOffset::parse("Z").unwrap(), UtcOffset::UTC);
        assert_eq!(UtcOffset::parse(" utc ").unwrap(), UtcOffset::UTC);
        assert_eq!(UtcOffset::parse("+9").unwrap(), UtcOffset::KST);
        assert_eq!(UtcOffset::parse("-5:30").unwrap().minutes(), -330);
        assert_eq!(UtcOffset::from_minutes(-330).unwrap().to_string(), "-05:30");
        assert_eq!(UtcOffset::KST.to_string(), "+09:00");
        assert_eq!(UtcOffset::default(), UtcOffset::KST);
        for bad in [
            "09:00", "+", "+:00", "+09:0", "+09:000", "+0900", "+15:00", "+14:30", "+09:60", "+0a:00", "+-9",
            "+９", "",
        ] {
            assert!(UtcOffset::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn intervals_parse_with_a_minimum() {
        assert_eq!(parse_interval("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_interval("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_interval("2h").unwrap(), Duration::from_secs(7_200));
        assert_eq!(parse_interval("1d").unwrap(), Duration::from_secs(86_400));
        assert_eq!(parse_interval("1h30m").unwrap(), Duration::from_secs(5_400));
        assert!(
            parse_interval("59s")
                .unwrap_err()
                .to_string()
                .contains("minimum of 1 minute")
        );
        for bad in ["", "15", "m", "15x", "1.5h", "-1h", "0m"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
        assert_eq!(format_interval(Duration::from_secs(90)), "90s");
        assert_eq!(format_interval(Duration::from_secs(5_400)), "90m");
        assert_eq!(format_interval(Duration::from_secs(172_800)), "2d");
    }

    #[test]
    fn interval_slots_count_from_local_midnight() {
        let every = |secs| Trigger::Every(Duration::from_secs(secs));
        // (interval, offset, from, next slot after it, latest slot at or before it)
        for (secs, offset, from, next, latest) in [
            // Local midnight in Seoul is 15:00 UTC.
            (
                86_400,
                UtcOffset::KST,
                "2026-12-01T10:00:00Z",
                "2026-12-01T15:00:00Z",
                "2026-11-30T15:00:00Z",
            ),
            (
                86_400,
                UtcOffset::KST,
                "2026-12-01T15:00:00Z",
                "2026-12-02T15:00:00Z",
                "2026-12-01T15:00:00Z",
            ),
            (
                900,
                UtcOffset::KST,
                "2026-12-01T10:14:59Z",
                "2026-12-01T10:15:00Z",
                "2026-12-01T10:00:00Z",
            ),
            (
                90,
                UtcOffset::UTC,
                "2026-12-01T10:00:00Z",
                "2026-12-01T10:01:30Z",
                "2026-12-01T10:00:00Z",
            ),
        ] {
            assert_eq!(
                every(secs).next_after(ts(from), offset),
                Some(ts(next)),
                "{secs} s after {from}"
            );
            assert_eq!(
                every(secs).latest_at_or_before(ts(from), offset),
                Some(ts(latest)),
                "{secs} s at or before {from}"
            );
        }
    }

    #[test]
    fn one_shots_have_one_slot() {
        let at = Trigger::At(ts("2026-12-01T00:00:00Z"));
        assert_eq!(
            at.next_after(ts("2026-11-30T00:00:00Z"), UtcOffset::KST),
            Some(ts("2026-12-01T00:00:00Z"))
        );
        assert_eq!(at.next_after(ts("2026-12-01T00:00:00Z"), UtcOffset::KST), None);
        assert_eq!(
            at.latest_at_or_before(ts("2026-11-30T23:59:59Z"), UtcOffset::KST),
            None
        );
        assert_eq!(at.describe(UtcOffset::KST), "at 2026-12-01 09:00 (+09:00)");
    }

    #[test]
    fn one_shot_times_are_local_unless_they_carry_an_offset() {
        assert_eq!(
            parse_at("2026-12-01T09:00", UtcOffset::KST).unwrap(),
            ts("2026-12-01T00:00:00Z")
        );
        assert_eq!(
            parse_at("2026-12-01 09:00:30", UtcOffset::KST).unwrap(),
            ts("2026-12-01T00:00:30Z")
        );
        assert_eq!(
            parse_at("2026-12-01T09:00:00Z", UtcOffset::KST).unwrap(),
            ts("2026-12-01T09:00:00Z")
        );
        assert_eq!(
            parse_at("2026-12-01T09:00:00-05:00", UtcOffset::KST).unwrap(),
            ts("2026-12-01T14:00:00Z")
        );
        for bad in [
            "2026-02-30T09:00",
            "2026-12-01",
            "2026-12-01T24:00",
            "tomorrow",
            "2026-12-01T9:00",
        ] {
            assert!(parse_at(bad, UtcOffset::KST).is_err(), "{bad}");
        }
        assert_eq!(
            format_local(ts("2026-12-01T00:00:30Z"), UtcOffset::KST, 'T'),
            "2026-12-01T09:00:30"
        );
    }
}
