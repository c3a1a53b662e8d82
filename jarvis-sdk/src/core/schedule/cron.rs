//! [`CronExpr`]: the five-field cron expressions of Vixie cron
//! (`minute hour day-of-month month day-of-week`), matched and stepped at a
//! fixed UTC offset.
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
//! Slots are whole minutes. The search is by calendar day, so a next (or
//! previous) slot is found in at most a few thousand cheap steps even for
//! `0 0 29 2 *`; an expression that can never match (`0 0 31 2 *`) is
//! refused when parsed.

use std::fmt;

use super::error::ScheduleError;
use super::trigger::UtcOffset;
use crate::common::Timestamp;

const MS_PER_MINUTE: i64 = 60_000;
/// How far the day search looks: past the longest gap between two slots
/// of any satisfiable expression (29 February, skipped in 2100).
const SEARCH_DAYS: i64 = 366 * 9;

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

impl std::str::FromStr for CronExpr {
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
        let cron = CronExpr {
            source,
            minutes,
            hours,
            days,
            months,
            weekdays,
            dom_star: dom.starts_with('*'),
            dow_star: dow.starts_with('*'),
        };
        if cron.dow_star && !cron.dom_star {
            let possible = (1..=12u32).any(|m| {
                cron.months & (1 << m) != 0
                    && (1..=MAX_MONTH_DAYS[m as usize - 1]).any(|d| cron.days & (1 << d) != 0)
            });
            if !possible {
                return Err(err("it never matches: none of its months has that day".to_owned()));
            }
        }
        Ok(cron)
    }

    /// The expression as written (whitespace collapsed).
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the minute containing `t` is a slot, at `offset`.
    pub fn matches(&self, t: Timestamp, offset: UtcOffset) -> bool {
        let c = t.civil(offset.minutes());
        self.day_matches(c.month, c.day, c.weekday)
            && self.hours & (1 << c.hour) != 0
            && self.minutes & (1 << c.minute) != 0
    }

    /// The first slot strictly after `t`, at `offset`.
    pub fn next_after(&self, t: Timestamp, offset: UtcOffset) -> Option<Timestamp> {
        let from = Timestamp::from_millis(floor_minute(t.as_millis()) + MS_PER_MINUTE);
        self.scan(from, offset, true)
    }

    /// The last slot at or before `t`, at `offset`.
    pub fn latest_at_or_before(&self, t: Timestamp, offset: UtcOffset) -> Option<Timestamp> {
        self.scan(Timestamp::from_millis(floor_minute(t.as_millis())), offset, false)
    }

    /// The first slot at or after the minute `from` (`forward`), or the
    /// last one at or before it, searching day by day.
    fn scan(&self, from: Timestamp, offset: UtcOffset, forward: bool) -> Option<Timestamp> {
        let c = from.civil(offset.minutes());
        let step = if forward { 1 } else { -1 };
        for i in 0..SEARCH_DAYS {
            let day = Timestamp::from_civil(
                c.year,
                c.month,
                i64::from(c.day) + step * i,
                0,
                0,
                offset.minutes(),
            );
            let d = day.civil(offset.minutes());
            if !self.day_matches(d.month, d.day, d.weekday) {
                continue;
            }
            let time = match (forward, i == 0) {
                (true, true) => self.first_time_from((c.hour, c.minute)),
                (true, false) => self.first_time_from((0, 0)),
                (false, true) => self.last_time_until((c.hour, c.minute)),
                (false, false) => self.last_time_until((23, 59)),
            };
            if let Some((h, m)) = time {
                return Some(Timestamp::from_millis(
                    day.as_millis() + i64::from(h) * 3_600_000 + i64::from(m) * MS_PER_MINUTE,
                ));
            }
        }
        None
    }

    /// `weekday` counts from Monday (0), as `CivilTime` does.
    fn day_matches(&self, month: u32, day: u32, weekday: u32) -> bool {
        if self.months & (1 << month) == 0 {
            return false;
        }
        let dom = self.days & (1 << day) != 0;
        let dow = self.weekdays & (1 << ((weekday + 1) % 7)) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn first_time_from(&self, (h0, m0): (u32, u32)) -> Option<(u32, u32)> {
        (h0..24).filter(|h| self.hours & (1 << h) != 0).find_map(|h| {
            let from = if h == h0 { m0 } else { 0 };
            (from..60).find(|m| self.minutes & (1 << m) != 0).map(|m| (h, m))
        })
    }

    fn last_time_until(&self, (h0, m0): (u32, u32)) -> Option<(u32, u32)> {
        (0..=h0)
            .rev()
            .filter(|h| self.hours & (1 << h) != 0)
            .find_map(|h| {
                let to = if h == h0 { m0 } else { 59 };
                (0..=to)
                    .rev()
                    .find(|m| self.minutes & (1 << m) != 0)
                    .map(|m| (h, m))
            })
    }
}

fn floor_minute(ms: i64) -> i64 {
    ms - ms.rem_euclid(MS_PER_MINUTE)
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
