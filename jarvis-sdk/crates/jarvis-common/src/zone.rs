//! [`TimeZone`]: the person's (or a scheduled job's) time zone, either an
//! IANA zone such as `Asia/Seoul` or `America/New_York` with its
//! daylight-saving rules, or a fixed [`UtcOffset`]; and what the rest of the
//! SDK asks of one: the local date and time of a [`Timestamp`]
//! ([`TimeZone::civil`]), the offset in force at an instant
//! ([`TimeZone::offset_at`]) and the instant of a local date and time
//! ([`TimeZone::at_local`]).
//!
//! The rules come from jiff's compiled-in copy of the IANA time zone
//! database, so a name means the same on every machine, with or without
//! `/usr/share/zoneinfo`. The system's own zone is never consulted.
//!
//! A local time that does not exist (skipped when clocks spring forward)
//! stands for the first instant after the gap: 02:30 on 8 March 2026 in New
//! York is 03:00 EDT. A local time that happens twice (clocks fall back)
//! stands for its first occurrence: 01:30 on 1 November 2026 in New York is
//! 01:30 EDT, not the EST one an hour later.

use jiff::SignedDuration;
use jiff::civil::DateTime;
use jiff::tz::{AmbiguousOffset, Offset};
use std::fmt;

use super::time::{CivilTime, MAX_MS, MIN_MS, Timestamp};

/// The most minutes a [`UtcOffset`] may lie east or west of UTC.
const MAX_OFFSET_MINUTES: i32 = 14 * 60;
/// 1970-01-01T00:00:00, the civil time of the Unix epoch in UTC.
pub(super) const EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// The person's zone when nothing says otherwise: the product speaks Korean
/// first.
pub const DEFAULT_TIME_ZONE: &str = "Asia/Seoul";

/// A time zone name or offset that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimeZoneError {
    /// Not a name in the IANA time zone database.
    #[error("time zone: {name:?} is not an IANA time zone name (e.g. Asia/Seoul, America/New_York, UTC)")]
    UnknownZone {
        /// The name as given.
        name: String,
    },
    /// Not an offset like `+09:00`.
    #[error("time zone: utc_offset {text:?} is not an offset like \"+09:00\" or \"-05:00\"")]
    BadOffset {
        /// The text as given.
        text: String,
    },
    /// An offset beyond ±14:00.
    #[error("time zone: utc_offset must lie between -14:00 and +14:00, got {minutes} minutes")]
    OffsetOutOfRange {
        /// The offset asked for, in minutes east of UTC.
        minutes: i32,
    },
}

/// A fixed offset from UTC, in minutes east (`+09:00` is 540).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UtcOffset(i32);

impl UtcOffset {
    /// UTC itself.
    pub const UTC: UtcOffset = UtcOffset(0);
    /// Korea Standard Time, `+09:00`.
    pub const KST: UtcOffset = UtcOffset(9 * 60);

    /// The offset `minutes` east of UTC (from -14:00 to +14:00).
    pub fn from_minutes(minutes: i32) -> Result<Self, TimeZoneError> {
        if (-MAX_OFFSET_MINUTES..=MAX_OFFSET_MINUTES).contains(&minutes) {
            Ok(UtcOffset(minutes))
        } else {
            Err(TimeZoneError::OffsetOutOfRange { minutes })
        }
    }

    /// Minutes east of UTC.
    pub const fn minutes(self) -> i32 {
        self.0
    }

    /// Parses `+09:00`, `-05:30`, `+9`, `Z` or `UTC`: a sign, hours (one or
    /// two digits) and optionally `:` and two digits of minutes.
    pub fn parse(text: &str) -> Result<Self, TimeZoneError> {
        let bad = || TimeZoneError::BadOffset {
            text: text.chars().take(64).collect(),
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

    fn to_jiff(self) -> Offset {
        Offset::from_seconds(self.0.saturating_mul(60)).unwrap_or(Offset::UTC)
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

/// A time zone: an IANA zone (with its daylight-saving rules) or a fixed
/// offset. Shown as its IANA name (`Asia/Seoul`) or its offset (`+09:00`).
///
/// ```
/// use jarvis_common::{TimeZone, Timestamp};
/// let new_york = TimeZone::named("America/New_York").unwrap();
/// let summer = Timestamp::parse_rfc3339("2026-07-01T13:00:00Z").unwrap();
/// assert_eq!(new_york.offset_at(summer).to_string(), "-04:00");
/// assert_eq!(new_york.civil(summer).hour, 9);
/// // 02:30 does not exist on 8 March 2026: the first instant after the gap.
/// let gap = new_york.at_local(2026, 3, 8, 2, 30, 0).unwrap();
/// assert_eq!(gap.to_string(), "2026-03-08T07:00:00.000Z");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct TimeZone(jiff::tz::TimeZone);

impl TimeZone {
    /// UTC.
    pub const UTC: TimeZone = TimeZone(jiff::tz::TimeZone::UTC);

    /// The IANA zone `name` (`Asia/Seoul`, `America/New_York`, `UTC`; any
    /// case).
    pub fn named(name: &str) -> Result<Self, TimeZoneError> {
        let unknown = || TimeZoneError::UnknownZone {
            name: name.chars().take(64).collect(),
        };
        let trimmed = name.trim();
        if trimmed.is_empty() || trimmed.len() > 64 {
            return Err(unknown());
        }
        let zone = jiff::tz::TimeZone::get(trimmed).map_err(|_| unknown())?;
        let utc = zone
            .iana_name()
            .is_some_and(|n| n.eq_ignore_ascii_case("UTC") || n.eq_ignore_ascii_case("Etc/UTC"));
        Ok(if utc { TimeZone::UTC } else { TimeZone(zone) })
    }

    /// The fixed offset `offset`, the same all year.
    pub fn fixed(offset: UtcOffset) -> Self {
        if offset == UtcOffset::UTC {
            return TimeZone::UTC;
        }
        TimeZone(jiff::tz::TimeZone::fixed(offset.to_jiff()))
    }

    /// `offset_minutes` east of UTC as a fixed zone (beyond ±25:59 is
    /// clamped there, the furthest any zone may be).
    pub fn from_offset_minutes(offset_minutes: i32) -> Self {
        let seconds = offset_minutes.clamp(-25 * 60 - 59, 25 * 60 + 59) * 60;
        if seconds == 0 {
            return TimeZone::UTC;
        }
        TimeZone(jiff::tz::TimeZone::fixed(
            Offset::from_seconds(seconds).unwrap_or(Offset::UTC),
        ))
    }

    /// `Asia/Seoul`, the person's zone by default.
    pub fn seoul() -> Self {
        Self::named(DEFAULT_TIME_ZONE).unwrap_or_else(|_| Self::fixed(UtcOffset::KST))
    }

    /// Its IANA name, when it is a named zone.
    pub fn iana_name(&self) -> Option<&str> {
        if self.is_utc() { None } else { self.0.iana_name() }
    }

    /// Its offset, when it is a fixed-offset zone (UTC included).
    pub fn fixed_offset(&self) -> Option<UtcOffset> {
        if self.is_utc() {
            return Some(UtcOffset::UTC);
        }
        if self.0.iana_name().is_some() {
            return None;
        }
        self.0
            .to_fixed_offset()
            .ok()
            .map(|o| UtcOffset(o.seconds().div_euclid(60)))
    }

    fn is_utc(&self) -> bool {
        self.0 == jiff::tz::TimeZone::UTC
    }

    /// The offset from UTC in force at `t` (whole minutes, rounded down).
    pub fn offset_at(&self, t: Timestamp) -> UtcOffset {
        UtcOffset(self.jiff_offset_at(t).seconds().div_euclid(60))
    }

    /// The local date and time of `t` in this zone.
    pub fn civil(&self, t: Timestamp) -> CivilTime {
        civil_of(self.local_datetime(t))
    }

    /// The instant of the local date and time `year-month-day hour:minute:second`
    /// in this zone: `day` may run past the end of the month (it counts on
    /// into the next) or below 1 (back into the previous); a time in a gap
    /// is the first instant after the gap, a repeated time its first
    /// occurrence. `None` outside years 0000–9999 UTC or for an impossible
    /// month, hour, minute or second.
    pub fn at_local(
        &self,
        year: i64,
        month: u32,
        day: i64,
        hour: u32,
        minute: u32,
        second: u32,
    ) -> Option<Timestamp> {
        if !(1..=12).contains(&month) || hour > 23 || minute > 59 || second > 59 {
            return None;
        }
        let first = jiff::civil::Date::new(i16::try_from(year).ok()?, month as i8, 1).ok()?;
        let dt = first
            .at(hour as i8, minute as i8, second as i8, 0)
            .checked_add(SignedDuration::from_hours(day.checked_sub(1)?.checked_mul(24)?))
            .ok()?;
        self.resolve(dt)
    }

    /// The local date and time of `t` with `sep` between date and time:
    /// `2026-12-01 09:00`, with seconds when the time has them.
    pub fn format_local(&self, t: Timestamp, sep: char) -> String {
        let c = self.civil(t);
        let mut out = format!(
            "{:04}-{:02}-{:02}{sep}{:02}:{:02}",
            c.year, c.month, c.day, c.hour, c.minute
        );
        if c.second != 0 {
            out.push_str(&format!(":{:02}", c.second));
        }
        out
    }

    /// The instant the local day containing `t` begins, and the instant the
    /// next one begins (23 or 25 hours later on a daylight-saving change).
    pub fn day_bounds(&self, t: Timestamp) -> (Timestamp, Timestamp) {
        let c = self.civil(t);
        let (y, m, d) = (c.year, c.month, i64::from(c.day));
        let start = self.at_local(y, m, d, 0, 0, 0).unwrap_or(t);
        let end = self
            .at_local(y, m, d + 1, 0, 0, 0)
            .unwrap_or(Timestamp::from_millis(MAX_MS));
        (start, end)
    }

    /// The jiff zone underneath.
    pub fn jiff(&self) -> &jiff::tz::TimeZone {
        &self.0
    }

    fn jiff_offset_at(&self, t: Timestamp) -> Offset {
        self.0.to_offset(jiff_timestamp(t))
    }

    /// The local civil date and time of `t` (saturating at jiff's range).
    fn local_datetime(&self, t: Timestamp) -> DateTime {
        let offset_ms = i64::from(self.jiff_offset_at(t).seconds()) * 1_000;
        let local = SignedDuration::from_millis(t.as_millis().saturating_add(offset_ms));
        EPOCH.checked_add(local).unwrap_or(if local.is_negative() {
            DateTime::MIN
        } else {
            DateTime::MAX
        })
    }

    /// The instant of the local `dt`, by the gap and repeat rules.
    fn resolve(&self, dt: DateTime) -> Option<Timestamp> {
        let utc_at = |offset: Offset| -> Option<Timestamp> {
            let local_ms = i64::try_from(dt.duration_since(EPOCH).as_millis()).ok()?;
            let ms = local_ms.checked_sub(i64::from(offset.seconds()) * 1_000)?;
            (MIN_MS..=MAX_MS)
                .contains(&ms)
                .then_some(Timestamp::from_millis(ms))
        };
        match self.0.to_ambiguous_timestamp(dt).offset() {
            AmbiguousOffset::Unambiguous { offset } => utc_at(offset),
            AmbiguousOffset::Fold { before, .. } => utc_at(before),
            AmbiguousOffset::Gap { before, .. } => {
                // Read with the offset before the gap, `dt` lands past the
                // transition; the transition itself is the gap's end.
                let past = utc_at(before)?;
                let transition = self
                    .0
                    .preceding(jiff_timestamp(past))
                    .next()
                    .map(|tr| Timestamp::from_millis(tr.timestamp().as_millisecond()));
                Some(transition.unwrap_or(past))
            }
        }
    }
}

impl Default for TimeZone {
    /// [`TimeZone::seoul`].
    fn default() -> Self {
        Self::seoul()
    }
}

impl From<UtcOffset> for TimeZone {
    fn from(offset: UtcOffset) -> Self {
        TimeZone::fixed(offset)
    }
}

/// Minutes east of UTC, as a fixed zone ([`TimeZone::from_offset_minutes`]):
/// what the SDK's functions took before they took a zone.
impl From<i32> for TimeZone {
    fn from(offset_minutes: i32) -> Self {
        TimeZone::from_offset_minutes(offset_minutes)
    }
}

impl From<&TimeZone> for TimeZone {
    fn from(zone: &TimeZone) -> Self {
        zone.clone()
    }
}

impl PartialEq<UtcOffset> for TimeZone {
    fn eq(&self, other: &UtcOffset) -> bool {
        self.fixed_offset() == Some(*other)
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.iana_name(), self.fixed_offset()) {
            (Some(name), _) => f.write_str(name),
            (None, Some(offset)) => write!(f, "{offset}"),
            (None, None) => f.write_str("UTC"),
        }
    }
}

impl fmt::Debug for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TimeZone({self})")
    }
}

impl std::str::FromStr for TimeZone {
    type Err = TimeZoneError;
    /// An IANA name ([`TimeZone::named`]).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TimeZone::named(s)
    }
}

/// `t` as a jiff timestamp, clamped to jiff's range (which ends a day
/// before year 10000, so that every offset still gives a valid local time).
pub fn jiff_timestamp(t: Timestamp) -> jiff::Timestamp {
    let ms = t.as_millis().clamp(
        jiff::Timestamp::MIN.as_millisecond(),
        jiff::Timestamp::MAX.as_millisecond(),
    );
    jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// The civil fields of `dt`.
pub(super) fn civil_of(dt: DateTime) -> CivilTime {
    CivilTime {
        year: i64::from(dt.year()),
        month: dt.month() as u32,
        day: dt.day() as u32,
        hour: dt.hour() as u32,
        minute: dt.minute() as u32,
        second: dt.second() as u32,
        weekday: u32::from(dt.weekday().to_monday_zero_offset() as u8),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn new_york() -> TimeZone {
        TimeZone::named("America/New_York").unwrap()
    }

    #[test]
    fn named_zones_follow_daylight_saving_time() {
        let ny = new_york();
        assert_eq!(ny.to_string(), "America/New_York");
        assert_eq!(ny.offset_at(ts("2026-01-15T12:00:00Z")).to_string(), "-05:00");
        assert_eq!(ny.offset_at(ts("2026-07-15T12:00:00Z")).to_string(), "-04:00");
        let c = ny.civil(ts("2026-03-08T07:00:00Z"));
        assert_eq!((c.month, c.day, c.hour, c.minute), (3, 8, 3, 0), "03:00 EDT");
        assert_eq!(c.weekday, 6, "8 March 2026 is a Sunday");
        assert_eq!(ny.fixed_offset(), None);
        assert_eq!(TimeZone::seoul().to_string(), "Asia/Seoul");
        assert_eq!(
            TimeZone::seoul().offset_at(ts("2026-07-15T12:00:00Z")),
            UtcOffset::KST
        );
    }

    #[test]
    fn gaps_resolve_to_their_end_and_repeats_to_their_first_occurrence() {
        let ny = new_york();
        // Spring forward, 8 March 2026: 02:00–03:00 does not exist.
        assert_eq!(
            ny.at_local(2026, 3, 8, 2, 30, 0),
            Some(ts("2026-03-08T07:00:00Z"))
        );
        assert_eq!(ny.at_local(2026, 3, 8, 3, 0, 0), Some(ts("2026-03-08T07:00:00Z")));
        assert_eq!(
            ny.at_local(2026, 3, 8, 1, 59, 0),
            Some(ts("2026-03-08T06:59:00Z"))
        );
        // Fall back, 1 November 2026: 01:00–02:00 happens twice; EDT first.
        assert_eq!(
            ny.at_local(2026, 11, 1, 1, 30, 0),
            Some(ts("2026-11-01T05:30:00Z"))
        );
        assert_eq!(
            ny.at_local(2026, 11, 1, 2, 0, 0),
            Some(ts("2026-11-01T07:00:00Z"))
        );
        // Days past the month's end count on; impossible fields are refused.
        assert_eq!(
            ny.at_local(2026, 12, 32, 0, 0, 0),
            Some(ts("2027-01-01T05:00:00Z"))
        );
        assert_eq!(ny.at_local(2026, 13, 1, 0, 0, 0), None);
        assert_eq!(ny.at_local(2026, 1, 1, 24, 0, 0), None);
        let (start, end) = ny.day_bounds(ts("2026-03-08T12:00:00Z"));
        assert_eq!(
            (start, end),
            (ts("2026-03-08T05:00:00Z"), ts("2026-03-09T04:00:00Z"))
        );
    }

    #[test]
    fn fixed_offsets_and_names_parse_or_say_why() {
        let kst = TimeZone::fixed(UtcOffset::KST);
        assert_eq!(kst.to_string(), "+09:00");
        assert_eq!(kst, UtcOffset::KST);
        assert_eq!(kst.fixed_offset(), Some(UtcOffset::KST));
        assert_ne!(kst, TimeZone::seoul());
        assert_eq!(TimeZone::UTC.fixed_offset(), Some(UtcOffset::UTC));
        assert_eq!(
            TimeZone::named("utc").unwrap().fixed_offset(),
            Some(UtcOffset::UTC)
        );
        assert_eq!(TimeZone::named("asia/seoul").unwrap().to_string(), "Asia/Seoul");
        for bad in ["Mars/Olympus", "", "+09:00", "../../etc/passwd", "Asia/Seoul\0"] {
            let err = TimeZone::named(bad).unwrap_err().to_string();
            assert!(err.contains("is not an IANA time zone name"), "{bad}: {err}");
        }
        assert_eq!(
            TimeZone::from_offset_minutes(i32::MAX)
                .offset_at(Timestamp::EPOCH)
                .minutes(),
            25 * 60 + 59
        );
    }

    #[test]
    fn the_edges_of_the_timestamp_range_do_not_panic() {
        for zone in [
            new_york(),
            TimeZone::fixed(UtcOffset::from_minutes(-840).unwrap()),
        ] {
            for ms in [i64::MIN, MIN_MS, 0, MAX_MS, i64::MAX] {
                let t = Timestamp::from_millis(ms);
                let _ = zone.civil(t);
                let _ = zone.day_bounds(t);
                let _ = zone.format_local(t, ' ');
            }
            assert_eq!(zone.at_local(9999, 12, 31, 23, 59, 0), None);
            assert_eq!(zone.at_local(i64::MAX, 1, 1, 0, 0, 0), None);
            assert_eq!(zone.at_local(2026, 1, i64::MIN, 0, 0, 0), None);
        }
    }
}
