//! When a job runs: a [`Trigger`] (cron, interval or one-shot) yields
//! discrete **slots**, the instants the job is due, in the job's
//! [`TimeZone`].
//!
//! - `cron`: the minutes the expression matches, in local time, with the
//!   daylight-saving rules of [`CronExpr`](super::CronExpr): a daily time in
//!   a spring-forward gap runs at the first instant after the gap, one in a
//!   fall-back repeat at its first occurrence.
//! - `every`: the multiples of the interval counted from local midnight of
//!   1970-01-01, so `every: 1d` is due at 00:00 local, `every: 6h` at 00,
//!   06, 12 and 18, `every: 15m` at :00, :15, :30 and :45, whenever the job
//!   was written, and the same after a restart. The count is of absolute
//!   time: across a daylight-saving change the slots stay 6 hours apart, so
//!   in summer New York's `every: 1d` is due at 01:00 EDT.
//! - `at`: one slot.

use std::time::Duration;

use super::cron::CronExpr;
use super::error::ScheduleError;
use jarvis_common::{TimeZone, Timestamp};

/// The shortest interval an `every` trigger may have.
pub const MIN_INTERVAL: Duration = Duration::from_secs(60);
/// The longest interval an `every` trigger (or an `in …` delay) may have:
/// 366 days. Anything rarer is a cron expression or a one-shot.
pub const MAX_INTERVAL: Duration = Duration::from_secs(366 * 86_400);

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

    /// The first slot strictly after `t`, in `zone`.
    pub fn next_after(&self, t: Timestamp, zone: impl Into<TimeZone>) -> Option<Timestamp> {
        match self {
            Trigger::Cron(cron) => cron.next_after(t, zone),
            Trigger::Every(every) => {
                let slot = latest_every(*every, t, &zone.into());
                Some(Timestamp::from_millis(slot.saturating_add(every_period(*every))))
            }
            Trigger::At(at) => (*at > t).then_some(*at),
        }
    }

    /// The last slot at or before `t`, in `zone`.
    pub fn latest_at_or_before(&self, t: Timestamp, zone: impl Into<TimeZone>) -> Option<Timestamp> {
        match self {
            Trigger::Cron(cron) => cron.latest_at_or_before(t, zone),
            Trigger::Every(every) => Some(Timestamp::from_millis(latest_every(*every, t, &zone.into()))),
            Trigger::At(at) => (*at <= t).then_some(*at),
        }
    }

    /// The trigger in words for lists and the AGENDA: `cron "0 9 * * 1"
    /// (Asia/Seoul)`, `every 30m`, `at 2026-12-01 09:00 (+09:00)`.
    pub fn describe(&self, zone: impl Into<TimeZone>) -> String {
        let zone = zone.into();
        match self {
            Trigger::Cron(cron) => format!("cron \"{cron}\" ({zone})"),
            Trigger::Every(every) => format!("every {}", format_interval(*every)),
            Trigger::At(at) => format!("at {} ({zone})", zone.format_local(*at, ' ')),
        }
    }
}

/// An interval's period in milliseconds (at least 1).
fn every_period(every: Duration) -> i64 {
    i64::try_from(every.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// The last slot of `every` at or before `t`, in milliseconds: slots are the
/// multiples of the period from local midnight of 1970-01-01 in `zone` (a
/// fixed instant, so daylight-saving changes do not move them).
fn latest_every(every: Duration, t: Timestamp, zone: &TimeZone) -> i64 {
    let origin = zone.at_local(1970, 1, 1, 0, 0, 0).map_or(0, Timestamp::as_millis);
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

/// Parses a one-shot time: a full RFC 3339 date-time (its own offset), or
/// a local `YYYY-MM-DDTHH:MM[:SS]` (`T` or a space) in `zone` (a time in a
/// spring-forward gap is the first instant after it, a repeated one its
/// first occurrence).
pub(crate) fn parse_at(text: &str, zone: &TimeZone) -> Result<Timestamp, ScheduleError> {
    let t = text.trim();
    if let Ok(ts) = Timestamp::parse_rfc3339(t) {
        return Ok(ts);
    }
    parse_local(t, zone).ok_or_else(|| {
        ScheduleError::invalid(format!(
            "at {text:?} is not a time like \"2026-12-01T09:00\" (local) or \"2026-12-01T09:00:00+09:00\""
        ))
    })
}

fn parse_local(t: &str, zone: &TimeZone) -> Option<Timestamp> {
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
    if d < 1 || d > i64::from(Timestamp::days_in_month(y, u32::try_from(mo).ok()?)) {
        return None;
    }
    let field = |n: i64| u32::try_from(n).ok();
    zone.at_local(y, field(mo)?, d, field(h)?, field(mi)?, field(s)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::UtcOffset;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn format_local(t: Timestamp, offset: UtcOffset, sep: char) -> String {
        TimeZone::from(offset).format_local(t, sep)
    }

    fn parse_at(text: &str, offset: UtcOffset) -> Result<Timestamp, ScheduleError> {
        super::parse_at(text, &offset.into())
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
