//! [`CronExpr`]: the five-field cron expressions of Vixie cron
//! (`minute hour day-of-month month day-of-week`), stepped in a job's
//! [`TimeZone`] by the `croner` crate.
//!
//! Each field is a comma-separated list of `*`, a value, a range `a-b`,
//! each optionally with a step (`*/15`, `1-10/2`, `5/10` = `5-max/10`).
//! Months take `jan`…`dec` and days of the week `sun`…`sat` (any case);
//! day of week `0` and `7` are both Sunday. The day rule is Vixie's: when
//! both the day of month and the day of week are restricted (neither field
//! starts with `*`), a day matching **either** counts; otherwise both must
//! match. `@yearly`, `@monthly`, `@weekly`, `@daily` and `@hourly` stand for
//! their usual expressions.
//!
//! This module only reads that syntax (so every error names the field and
//! what is wrong with it) and hands croner the values each field allows;
//! croner finds the slots. Slots are whole minutes of local time, and
//! daylight-saving changes follow the Open Cron Pattern Specification:
//!
//! - an expression with one minute and one hour (`30 2 * * *`) whose time
//!   falls in a spring-forward gap runs once, at the first instant after
//!   the gap (03:00 on the day New York skips 02:00–03:00); in a fall-back
//!   repeat it runs once, at the first occurrence;
//! - an expression with several minutes or hours (`*/15 * * * *`) has no
//!   slots in a gap, and in a repeat runs at both occurrences: its slots
//!   count wall-clock minutes as they pass.
//!
//! An expression that can never match (`0 0 31 2 *`) is refused when
//! parsed.

use std::fmt;
use std::str::FromStr;

use super::error::ScheduleError;
use jarvis_common::{TimeZone, Timestamp, jiff_timestamp};

const MS_PER_MINUTE: i64 = 60_000;

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
/// The most days each month can have (February in a leap year).
const MAX_MONTH_DAYS: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// A parsed cron expression.
#[derive(Clone, PartialEq, Eq)]
pub struct CronExpr {
    source: String,
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    dom_star: bool,
    dow_star: bool,
    /// Boxed: croner's pattern is a few hundred bytes.
    cron: Box<croner::Cron>,
}

impl fmt::Debug for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CronExpr").field(&self.source).finish()
    }
}

impl fmt::Display for CronExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl FromStr for CronExpr {
    type Err = ScheduleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CronExpr::parse(s)
    }
}

impl CronExpr {
    /// Parses `expr` (see the module documentation for the syntax).
    pub fn parse(expr: &str) -> Result<Self, ScheduleError> {
        let source = expr.split_whitespace().collect::<Vec<_>>().join(" ");
        let err = |reason: String| ScheduleError::Cron {
            expr: expr.to_owned(),
            reason,
        };
        let expanded = match source.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_owned(),
            "@monthly" => "0 0 1 * *".to_owned(),
            "@weekly" => "0 0 * * 0".to_owned(),
            "@daily" | "@midnight" => "0 0 * * *".to_owned(),
            "@hourly" => "0 * * * *".to_owned(),
            other if other.starts_with('@') => return Err(err(format!("unknown macro {other}"))),
            _ => source.clone(),
        };
        let fields: Vec<&str> = expanded.split(' ').collect();
        let [minute, hour, dom, month, dow] = fields[..] else {
            return Err(err(format!(
                "it has {} fields; expected 5: minute hour day-of-month month day-of-week",
                fields.len()
            )));
        };
        let field = |text: &str, name: &str, min: u32, max: u32, names: &[&str], first_name: u32| {
            parse_field(text, min, max, names, first_name).map_err(|reason| err(format!("{name}: {reason}")))
        };
        let minutes = field(minute, "minute", 0, 59, &[], 0)?;
        let hours = field(hour, "hour", 0, 23, &[], 0)? as u32;
        let days = field(dom, "day of month", 1, 31, &[], 0)? as u32;
        let months = field(month, "month", 1, 12, &MONTHS, 1)? as u16;
        let dow_bits = field(dow, "day of week", 0, 7, &WEEKDAYS, 0)?;
        // Bit 7 (Sunday written as 7) joins bit 0.
        let weekdays = ((dow_bits | (dow_bits >> 7)) & 0x7f) as u8;
        let (dom_star, dow_star) = (dom.starts_with('*'), dow.starts_with('*'));
        if dow_star && !dom_star {
            let possible = (1..=12u32).any(|m| {
                months & (1 << m) != 0 && (1..=MAX_MONTH_DAYS[m as usize - 1]).any(|d| days & (1 << d) != 0)
            });
            if !possible {
                return Err(err("it never matches: none of its months has that day".to_owned()));
            }
        }
        // croner gets the allowed values spelled out; `*` only where the
        // field was a plain star, so croner's day rule sees what Vixie's
        // sees, and `+` (both must match) where a field only starts with one.
        let star = |text: &str, bits: u64, min: u32, max: u32| {
            if text == "*" || (text.starts_with('*') && (min..=max).all(|v| bits & (1 << v) != 0)) {
                "*".to_owned()
            } else {
                values(bits, min, max)
            }
        };
        let dom_field = star(dom, u64::from(days), 1, 31);
        let dow_field = star(dow, u64::from(weekdays), 0, 6);
        let both = (dom_star || dow_star) && dom_field != "*" && dow_field != "*";
        let pattern = format!(
            "{} {} {dom_field} {} {}{dow_field}",
            values(minutes, 0, 59),
            values(u64::from(hours), 0, 23),
            values(u64::from(months), 1, 12),
            if both { "+" } else { "" },
        );
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(&pattern)
            .map_err(|e| err(format!("the cron library refused {pattern:?}: {e}")))?;
        Ok(CronExpr {
            source,
            minutes,
            hours,
            days,
            months,
            weekdays,
            dom_star,
            dow_star,
            cron: Box::new(cron),
        })
    }

    /// The expression as written (whitespace collapsed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the minute containing `t` is a slot in `zone`.
    pub fn matches(&self, t: Timestamp, zone: impl Into<TimeZone>) -> bool {
        let minute = floor_minute(t.as_millis());
        self.latest_at_or_before(t, zone)
            .is_some_and(|slot| slot.as_millis() == minute)
    }

    /// The first slot strictly after `t`, in `zone`. `None` when there is
    /// none before year 5000 (croner's horizon).
    pub fn next_after(&self, t: Timestamp, zone: impl Into<TimeZone>) -> Option<Timestamp> {
        let from = zoned(floor_minute(t.as_millis()), &zone.into())?;
        let next = self.cron.find_next_occurrence(&from, false).ok()?;
        Some(Timestamp::from_millis(next.timestamp().as_millisecond()))
    }

    /// The last slot at or before `t`, in `zone`.
    pub fn latest_at_or_before(&self, t: Timestamp, zone: impl Into<TimeZone>) -> Option<Timestamp> {
        let ms = t.as_millis();
        let from = zoned(ms - ms.rem_euclid(1_000), &zone.into())?;
        let latest = self.cron.find_previous_occurrence(&from, true).ok()?;
        Some(Timestamp::from_millis(latest.timestamp().as_millisecond()))
    }
}

/// `ms` in `zone`, if jiff's range holds it.
fn zoned(ms: i64, zone: &TimeZone) -> Option<jiff::Zoned> {
    let t = jiff_timestamp(Timestamp::from_millis(ms));
    (t.as_millisecond() == ms).then(|| t.to_zoned(zone.jiff().clone()))
}

fn floor_minute(ms: i64) -> i64 {
    ms - ms.rem_euclid(MS_PER_MINUTE)
}

/// The values of `bits` within `min..=max`, comma-separated.
fn values(bits: u64, min: u32, max: u32) -> String {
    (min..=max)
        .filter(|v| bits & (1 << v) != 0)
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// One field as a bit set of the values it allows.
fn parse_field(text: &str, min: u32, max: u32, names: &[&str], first_name: u32) -> Result<u64, String> {
    let value = |v: &str| -> Result<u32, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(first_name + i as u32);
        }
        let n: u32 = v.parse().map_err(|_| {
            if names.is_empty() {
                format!("{v:?} is not a number")
            } else {
                format!("{v:?} is not a number or a name ({})", names.join(", "))
            }
        })?;
        if (min..=max).contains(&n) {
            Ok(n)
        } else {
            Err(format!("{n} is out of range {min}-{max}"))
        }
    };
    let mut bits = 0u64;
    for item in text.split(',') {
        if item.is_empty() {
            return Err(format!("empty item in {text:?}"));
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step
                    .parse()
                    .ok()
                    .filter(|s| *s >= 1)
                    .ok_or_else(|| format!("step {step:?} is not a whole number of at least 1"))?;
                (range, Some(step))
            }
            None => (item, None),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(a)?, value(b)?);
            if a > b {
                return Err(format!("range {range:?} runs backwards"));
            }
            (a, b)
        } else {
            let a = value(range)?;
            // `5/10` means from 5 to the end in steps of 10.
            (a, if step.is_some() { max } else { a })
        };
        let step = step.unwrap_or(1);
        let mut v = Some(lo);
        while let Some(n) = v.filter(|n| *n <= hi) {
            bits |= 1 << n;
            v = n.checked_add(step);
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn cron(s: &str) -> CronExpr {
        CronExpr::parse(s).unwrap()
    }

    use jarvis_common::UtcOffset;

    const UTC: UtcOffset = UtcOffset::UTC;
    const KST: UtcOffset = UtcOffset::KST;

    /// The next `n` slots after `from`, as RFC 3339 strings.
    fn next_n(expr: &str, from: &str, offset: UtcOffset, n: usize) -> Vec<String> {
        let c = cron(expr);
        let mut t = ts(from);
        (0..n)
            .map(|_| {
                t = c.next_after(t, offset).unwrap();
                t.to_string()
            })
            .collect()
    }

    #[test]
    fn fields_take_lists_ranges_steps_and_names() {
        let c = cron("*/15 9-17/4 1,15 jan-mar,DEC mon-fri");
        assert_eq!(c.minutes, (1 << 0) | (1 << 15) | (1 << 30) | (1 << 45));
        assert_eq!(c.hours, (1 << 9) | (1 << 13) | (1 << 17));
        assert_eq!(c.days, (1 << 1) | (1 << 15));
        assert_eq!(c.months, (1 << 1) | (1 << 2) | (1 << 3) | (1 << 12));
        assert_eq!(c.weekdays, 0b011_1110);
        assert_eq!(cron("5/20 * * * *").minutes, (1 << 5) | (1 << 25) | (1 << 45));
        assert_eq!(cron("0 0 * * 7").weekdays, 1, "7 is Sunday");
        assert_eq!(cron("0 0 * * 5-7").weekdays, 0b110_0001);
        assert_eq!(cron("0 0 * * SUN,sat").weekdays, 0b100_0001);
        assert_eq!(cron("  0   9 * *  1 ").as_str(), "0 9 * * 1");
        assert_eq!(cron("@daily").minutes, 1);
        // A step past the end keeps only the start, even a huge one.
        assert_eq!(cron("59/4294967295 * * * *").minutes, 1 << 59);
    }

    #[test]
    fn bad_expressions_say_what_is_wrong() {
        for (expr, needle) in [
            ("0 9 * *", "has 4 fields"),
            ("0 9 * * * *", "has 6 fields"),
            ("60 * * * *", "minute: 60 is out of range 0-59"),
            ("* 24 * * *", "hour: 24 is out of range"),
            ("* * 0 * *", "day of month: 0 is out of range 1-31"),
            ("* * * 13 *", "month: 13 is out of range"),
            ("* * * * 8", "day of week: 8 is out of range 0-7"),
            ("* * * foo *", "\"foo\" is not a number or a name"),
            ("5-1 * * * *", "runs backwards"),
            ("*/0 * * * *", "step \"0\""),
            ("*/99999999999 * * * *", "step \"99999999999\""),
            ("1,,2 * * * *", "empty item"),
            ("0 0 31 2 *", "never matches"),
            ("0 0 30,31 feb *", "never matches"),
            ("@often", "unknown macro"),
        ] {
            let err = CronExpr::parse(expr).unwrap_err().to_string();
            assert!(err.contains(needle), "{expr}: {err}");
            assert!(err.starts_with("schedule: cron expression"), "{err}");
        }
        // Restricted day of week makes 31 February reachable (either rule).
        assert!(CronExpr::parse("0 0 31 2 mon").is_ok());
    }

    #[test]
    fn the_vixie_day_rule_ors_two_restricted_fields() {
        // 2026-12-01 is a Tuesday; the 13th is a Sunday.
        let either = cron("0 9 13 * 2");
        assert!(either.matches(ts("2026-12-01T09:00:00Z"), UTC), "a Tuesday");
        assert!(either.matches(ts("2026-12-13T09:00:00Z"), UTC), "the 13th");
        assert!(!either.matches(ts("2026-12-02T09:00:00Z"), UTC));
        // A star in one field: both must hold (the star holds always).
        let tuesdays = cron("0 9 * * 2");
        assert!(tuesdays.matches(ts("2026-12-01T09:00:00Z"), UTC));
        assert!(!tuesdays.matches(ts("2026-12-13T09:00:00Z"), UTC));
        // `*/2` starts with a star: Vixie treats it as unrestricted, so the
        // days must be odd *and* Tuesdays.
        let odd_tuesdays = cron("0 9 */2 * 2");
        assert!(odd_tuesdays.matches(ts("2026-12-01T09:00:00Z"), UTC));
        assert!(!odd_tuesdays.matches(ts("2026-12-08T09:00:00Z"), UTC));
        assert!(!odd_tuesdays.matches(ts("2026-12-03T09:00:00Z"), UTC));
    }

    #[test]
    fn next_slots_cross_month_and_year_ends() {
        assert_eq!(
            next_n("0 9 31 * *", "2026-01-31T09:00:00Z", UTC, 3),
            [
                "2026-03-31T09:00:00.000Z",
                "2026-05-31T09:00:00.000Z",
                "2026-07-31T09:00:00.000Z"
            ]
        );
        assert_eq!(
            next_n("30 23 * * *", "2026-12-31T23:29:59Z", UTC, 2),
            ["2026-12-31T23:30:00.000Z", "2027-01-01T23:30:00.000Z"]
        );
        assert_eq!(
            next_n("0 0 29 2 *", "2026-03-01T00:00:00Z", UTC, 2),
            ["2028-02-29T00:00:00.000Z", "2032-02-29T00:00:00.000Z"]
        );
        // Strictly after: a slot equal to `t` is not returned.
        assert_eq!(
            next_n("0 9 * * *", "2026-12-01T09:00:00Z", UTC, 1),
            ["2026-12-02T09:00:00.000Z"]
        );
        // Inside a slot's minute the next one is the following slot.
        assert_eq!(
            next_n("* * * * *", "2026-12-01T09:00:30Z", UTC, 1),
            ["2026-12-01T09:01:00.000Z"]
        );
    }

    #[test]
    fn slots_are_local_to_the_offset() {
        // 09:00 in Seoul is 00:00 UTC; the local date decides the day.
        assert_eq!(
            next_n("0 9 1 * *", "2026-11-30T12:00:00Z", KST, 2),
            ["2026-12-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z"]
        );
        // 08:00 on Mondays in Seoul is Sunday 23:00 UTC.
        let mondays = cron("0 8 * * mon");
        assert_eq!(
            mondays
                .next_after(ts("2026-11-29T00:00:00Z"), KST)
                .unwrap()
                .to_string(),
            "2026-11-29T23:00:00.000Z"
        );
        assert!(mondays.matches(ts("2026-11-29T23:00:00Z"), KST));
        assert!(!mondays.matches(ts("2026-11-29T23:00:00Z"), UTC));
        // Month end at an offset: the last day of November in Seoul.
        assert_eq!(
            cron("0 0 30 11 *")
                .next_after(ts("2026-01-01T00:00:00Z"), KST)
                .unwrap()
                .to_string(),
            "2026-11-29T15:00:00.000Z"
        );
        let minus = UtcOffset::from_minutes(-5 * 60).unwrap();
        assert_eq!(
            cron("0 21 31 12 *")
                .next_after(ts("2026-06-01T00:00:00Z"), minus)
                .unwrap()
                .to_string(),
            "2027-01-01T02:00:00.000Z"
        );
    }

    #[test]
    fn latest_slots_look_back_across_month_ends() {
        let c = cron("0 9 31 * *");
        assert_eq!(
            c.latest_at_or_before(ts("2026-05-01T00:00:00Z"), UTC)
                .unwrap()
                .to_string(),
            "2026-03-31T09:00:00.000Z"
        );
        assert_eq!(
            c.latest_at_or_before(ts("2026-03-31T09:00:00Z"), UTC)
                .unwrap()
                .to_string(),
            "2026-03-31T09:00:00.000Z",
            "at or before: the slot itself"
        );
        assert_eq!(
            cron("*/20 * * * *")
                .latest_at_or_before(ts("2026-12-01T00:10:00Z"), KST)
                .unwrap()
                .to_string(),
            "2026-12-01T00:00:00.000Z"
        );
        assert_eq!(
            cron("0 9 * * *")
                .latest_at_or_before(ts("2026-12-01T08:59:59Z"), UTC)
                .unwrap()
                .to_string(),
            "2026-11-30T09:00:00.000Z"
        );
        // Round trip: every next slot is its own latest.
        let weekly = cron("15 7 * * 1,4");
        let mut t = ts("2026-01-01T00:00:00Z");
        for _ in 0..50 {
            let next = weekly.next_after(t, KST).unwrap();
            assert!(next > t && weekly.matches(next, KST));
            assert_eq!(weekly.latest_at_or_before(next, KST), Some(next));
            let just_before = Timestamp::from_millis(next.as_millis() - 1);
            assert!(weekly.latest_at_or_before(just_before, KST).unwrap() <= t);
            t = next;
        }
    }
}
