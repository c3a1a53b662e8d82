//! [`Timestamp`]: a point in time as milliseconds since the Unix epoch,
//! written as an RFC 3339 UTC string with millisecond precision
//! (`2026-11-29T19:45:05.123Z`) in every file, table and JSON body.
//!
//! The calendar is jiff's (proleptic Gregorian, exact over years
//! 0000–9999); local times in a time zone are [`TimeZone`]'s. Timestamps
//! are made from an injected [`Clock`](super::Clock)'s reading, never from
//! the system clock directly (R-IDEM-4).

use jiff::SignedDuration;
use jiff::civil::DateTime;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::zone::{EPOCH, TimeZone};

/// 0000-01-01T00:00:00.000Z.
pub(super) const MIN_MS: i64 = -62_167_219_200_000;
/// 9999-12-31T23:59:59.999Z.
pub(super) const MAX_MS: i64 = 253_402_300_799_999;

/// Milliseconds since 1970-01-01T00:00:00Z, shown as RFC 3339 UTC.
///
/// Ordering is chronological. Values outside years 0000–9999 are clamped to
/// that range when formatted; parsing rejects them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The timestamp `millis` milliseconds after the epoch (before it when negative).
    pub const fn from_millis(millis: i64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The time `t`, cut to whole milliseconds.
    pub fn from_system_time(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => {
                let before = e.duration();
                // Round towards the past so that cutting never moves a time forward.
                let ms = i64::try_from(before.as_millis()).unwrap_or(i64::MAX);
                let extra = i64::from(before.subsec_nanos() % 1_000_000 != 0);
                Timestamp(ms.saturating_add(extra).saturating_neg())
            }
        }
    }

    /// This timestamp as a `SystemTime`.
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_millis(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    /// Parses an RFC 3339 date-time: `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    /// Digits of the fraction beyond milliseconds are cut; `t` and `z` are
    /// accepted in lower case, and a space may stand for `T`.
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        parse(s.as_bytes()).ok_or_else(|| TimestampError {
            input: s.chars().take(64).collect(),
        })
    }
}

impl From<SystemTime> for Timestamp {
    fn from(t: SystemTime) -> Self {
        Timestamp::from_system_time(t)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.clamp(MIN_MS, MAX_MS);
        let dt = EPOCH
            .checked_add(SignedDuration::from_millis(ms))
            .unwrap_or(EPOCH);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.subsec_nanosecond() / 1_000_000
        )
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse_rfc3339(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 date-time such as 2026-11-29T19:45:05.123Z")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                Timestamp::parse_rfc3339(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Visitor)
    }
}

/// A calendar date and a time of day in some time zone
/// ([`TimeZone::civil`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CivilTime {
    /// The year.
    pub year: i64,
    /// The month, 1 to 12.
    pub month: u32,
    /// The day of the month, from 1.
    pub day: u32,
    /// The hour, 0 to 23.
    pub hour: u32,
    /// The minute, 0 to 59.
    pub minute: u32,
    /// The second, 0 to 59.
    pub second: u32,
    /// The day of the week, 0 (Monday) to 6 (Sunday).
    pub weekday: u32,
}

impl Timestamp {
    /// This time as a date and time of day `offset_minutes` east of UTC
    /// (a fixed offset; [`TimeZone::civil`] for a zone with daylight-saving
    /// time).
    pub fn civil(self, offset_minutes: i32) -> CivilTime {
        TimeZone::from_offset_minutes(offset_minutes).civil(self)
    }

    /// The time of a date and time of day `offset_minutes` east of UTC;
    /// `day` may run past the end of the month (it counts on into the next).
    /// Saturates at the ends of years 0000–9999.
    pub fn from_civil(year: i64, month: u32, day: i64, hour: u32, minute: u32, offset_minutes: i32) -> Self {
        let (month, hour, minute) = (month.clamp(1, 12), hour.min(23), minute.min(59));
        let year = year.clamp(0, 9999);
        TimeZone::from_offset_minutes(offset_minutes)
            .at_local(year, month, day, hour, minute, 0)
            .unwrap_or(Timestamp(if day < 1 { MIN_MS } else { MAX_MS }))
    }

    /// The days of `month` in `year` (31 for a month outside 1–12).
    pub fn days_in_month(year: i64, month: u32) -> u32 {
        i16::try_from(year)
            .ok()
            .and_then(|y| jiff::civil::Date::new(y, i8::try_from(month).ok()?, 1).ok())
            .map_or(31, |d| d.days_in_month() as u32)
    }
}

/// A string that is not an RFC 3339 date-time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timestamp: {input:?} is not an RFC 3339 date-time (expected e.g. 2026-11-29T19:45:05.123Z)")]
pub struct TimestampError {
    input: String,
}

fn digits(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let slice = b.get(at..at + n)?;
    slice.iter().try_fold(0i64, |acc, &c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

fn parse(b: &[u8]) -> Option<Timestamp> {
    let y = digits(b, 0, 4)?;
    let mo = digits(b, 5, 2)?;
    let d = digits(b, 8, 2)?;
    let h = digits(b, 11, 2)?;
    let mi = digits(b, 14, 2)?;
    let s = digits(b, 17, 2)?;
    if b.get(4) != Some(&b'-')
        || b.get(7) != Some(&b'-')
        || !matches!(b.get(10), Some(b'T' | b't' | b' '))
        || b.get(13) != Some(&b':')
        || b.get(16) != Some(&b':')
    {
        return None;
    }
    if h > 23 || mi > 59 || s > 60 {
        return None;
    }
    // jiff checks the date (29 February, 31 April); a leap second (60)
    // counts as the next minute's first.
    let dt = DateTime::new(
        i16::try_from(y).ok()?,
        i8::try_from(mo).ok()?,
        i8::try_from(d).ok()?,
        h as i8,
        mi as i8,
        0,
        0,
    )
    .ok()?;
    let mut at = 19;
    let mut milli = 0;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            if at - start < 3 {
                milli = milli * 10 + i64::from(b[at] - b'0');
            }
            at += 1;
        }
        let n = at - start;
        if n == 0 {
            return None;
        }
        for _ in n..3 {
            milli *= 10;
        }
    }
    let offset_min = match b.get(at)? {
        b'Z' | b'z' if at + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if at + 6 == b.len() && b[at + 3] == b':' => {
            let oh = digits(b, at + 1, 2)?;
            let om = digits(b, at + 4, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 60 + om;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let local_ms = i64::try_from(dt.duration_since(EPOCH).as_millis()).ok()?;
    let ms = local_ms + (s - offset_min * 60) * 1_000 + milli;
    (MIN_MS..=MAX_MS).contains(&ms).then_some(Timestamp(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    #[test]
    fn civil_times_round_trip_at_an_offset() {
        let t = ts("2026-11-29T19:45:05.123Z");
        let seoul = t.civil(9 * 60);
        assert_eq!(
            (seoul.year, seoul.month, seoul.day, seoul.hour, seoul.minute),
            (2026, 11, 30, 4, 45)
        );
        assert_eq!(seoul.weekday, 0, "30 November 2026 is a Monday");
        assert_eq!(t.civil(0).weekday, 6);
        let back = Timestamp::from_civil(2026, 11, 30, 4, 45, 9 * 60);
        assert_eq!(back.as_millis(), t.as_millis() - 5_123);
        // Days past the month's end count on.
        assert_eq!(
            Timestamp::from_civil(2026, 12, 32, 0, 0, 0),
            ts("2027-01-01T00:00:00Z")
        );
        assert_eq!(Timestamp::days_in_month(2028, 2), 29);
    }

    #[test]
    fn formats_with_milliseconds_in_utc() {
        assert_eq!(Timestamp::EPOCH.to_string(), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            Timestamp::from_millis(1_795_981_505_123).to_string(),
            "2026-11-29T19:45:05.123Z"
        );
        assert_eq!(Timestamp::from_millis(-1).to_string(), "1969-12-31T23:59:59.999Z");
        assert_eq!(
            Timestamp::from_millis(951_782_400_000).to_string(),
            "2000-02-29T00:00:00.000Z"
        );
    }

    #[test]
    fn parses_what_it_formats_and_common_variants() {
        assert_eq!(ts("2026-11-29T19:45:05.123Z").as_millis(), 1_795_981_505_123);
        assert_eq!(ts("2026-11-29T19:45:05Z").as_millis(), 1_795_981_505_000);
        assert_eq!(ts("2026-11-29T19:45:05.1Z").as_millis(), 1_795_981_505_100);
        assert_eq!(ts("2026-11-29T19:45:05.123999Z").as_millis(), 1_795_981_505_123);
        assert_eq!(
            ts("2026-11-30T04:45:05.123+09:00"),
            ts("2026-11-29T19:45:05.123Z")
        );
        assert_eq!(
            ts("2026-11-29T14:45:05.123-05:00"),
            ts("2026-11-29T19:45:05.123Z")
        );
        assert_eq!(ts("2026-11-29 19:45:05.123z"), ts("2026-11-29T19:45:05.123Z"));
        assert_eq!(ts("0000-01-01T00:00:00Z").as_millis(), MIN_MS);
        assert_eq!(ts("9999-12-31T23:59:59.999Z").as_millis(), MAX_MS);
    }

    #[test]
    fn rejects_what_is_not_a_date_time() {
        for bad in [
            "",
            "2026-11-29",
            "2026-11-29T19:45:05",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T19:45:05.Z",
            "2026-11-29T19:45:05.123Zjunk",
            "2026-11-29T19:45:05+0900",
            "2026-11-29T19:45:05+24:00",
            "２026-11-29T19:45:05Z",
            "0000-01-01T00:00:00+00:01",
        ] {
            let err = Timestamp::parse_rfc3339(bad).unwrap_err();
            assert!(err.to_string().starts_with("timestamp: "), "{bad}: {err}");
        }
    }

    #[test]
    fn round_trips_through_serde_and_system_time() {
        let t = Timestamp::from_millis(1_795_981_505_123);
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2026-11-29T19:45:05.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        assert!(serde_json::from_str::<Timestamp>("12").is_err());
        assert_eq!(Timestamp::from(t.to_system_time()), t);
        let before = Timestamp::from_millis(-1_500);
        assert_eq!(Timestamp::from(before.to_system_time()), before);
        let sub_ms = UNIX_EPOCH - Duration::from_micros(1_500);
        assert_eq!(Timestamp::from(sub_ms).as_millis(), -2);
    }

    #[test]
    fn formatting_clamps_out_of_range_values() {
        assert_eq!(
            Timestamp::from_millis(i64::MAX).to_string(),
            "9999-12-31T23:59:59.999Z"
        );
        assert_eq!(
            Timestamp::from_millis(i64::MIN).to_string(),
            "0000-01-01T00:00:00.000Z"
        );
    }
}
