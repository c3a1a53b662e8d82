//! Time in memory, in English and Korean: the days a remembered text
//! states ([`stated_days`]), and the period a question asks about
//! ([`period_of`]).
//!
//! A memory happened when it was written (its turn's time) or on a day its
//! text names: "my dentist is on March 14", "3월 14일에 치과", "we got back
//! yesterday", "다음 주 화요일". Relative days are read from the time the
//! text was written, in the user's time zone. A question that names a
//! period ("what did I buy last month?", "지난달에 병원 어디 갔었지?",
//! "what did we do in March?") is searched again inside it, so what
//! happened then ranks first.
//!
//! Only unambiguous forms are read: a month name with a day, ISO dates,
//! Korean `M월 D일`, named relative days and weekdays with
//! last/this/next (지난주/이번 주/다음 주). Slash dates (`3/4`) are left
//! alone: months and days are written in both orders.

use regex::Regex;
use std::sync::OnceLock;

use jarvis_common::{CivilTime, TimeZone, Timestamp};

/// A calendar day.
type Day = (i64, u32, u32);

/// The English month names and their numbers.
const MONTHS: [(&str, u32); 21] = [
    ("january", 1),
    ("february", 2),
    ("march", 3),
    ("april", 4),
    ("may", 5),
    ("june", 6),
    ("july", 7),
    ("august", 8),
    ("september", 9),
    ("october", 10),
    ("november", 11),
    ("december", 12),
    ("jan", 1),
    ("feb", 2),
    ("mar", 3),
    ("apr", 4),
    ("jun", 6),
    ("jul", 7),
    ("aug", 8),
    ("sep", 9),
    ("sept", 9),
];

/// Abbreviations a day may follow (`Oct 3`), beside [`MONTHS`].
const MORE_MONTHS: [(&str, u32); 3] = [("oct", 10), ("nov", 11), ("dec", 12)];

const WEEKDAYS: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];
const KO_WEEKDAYS: [&str; 7] = ["월", "화", "수", "목", "금", "토", "일"];

fn month_number(name: &str) -> Option<u32> {
    MONTHS
        .iter()
        .chain(MORE_MONTHS.iter())
        .find(|(n, _)| *n == name)
        .map(|&(_, m)| m)
}

fn month_pattern() -> String {
    let mut names: Vec<&str> = MONTHS.iter().chain(MORE_MONTHS.iter()).map(|(n, _)| *n).collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    names.join("|")
}

/// Number words up to twelve, and digits.
fn count(word: &str) -> Option<i64> {
    const WORDS: [&str; 13] = [
        "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    match word {
        "a" | "an" => Some(1),
        "a couple of" | "couple of" => Some(2),
        "a few" | "few" => Some(3),
        _ => word
            .parse()
            .ok()
            .or_else(|| WORDS.iter().position(|w| *w == word).map(|n| n as i64)),
    }
}

/// Korean counts of days (하루, 이틀, …) and number words.
fn korean_count(word: &str) -> Option<i64> {
    const NATIVE: [&str; 10] = [
        "한", "두", "세", "네", "다섯", "여섯", "일곱", "여덟", "아홉", "열",
    ];
    match word {
        "하루" => Some(1),
        "이틀" => Some(2),
        "사흘" => Some(3),
        "나흘" => Some(4),
        "일주일" | "한 주" => Some(7),
        "석" => Some(3),
        "몇" => Some(3),
        _ => word
            .parse()
            .ok()
            .or_else(|| NATIVE.iter().position(|w| *w == word).map(|n| n as i64 + 1)),
    }
}

struct Patterns {
    iso: Regex,
    month_day: Regex,
    day_month: Regex,
    relative_day: Regex,
    weekday: Regex,
    ago: Regex,
    ko_date: Regex,
    ko_relative: Regex,
    ko_weekday: Regex,
    ko_ago: Regex,
    period: Regex,
    in_month: Regex,
    season: Regex,
    months_ago: Regex,
    ko_period: Regex,
    ko_month: Regex,
    ko_season: Regex,
    ko_months_ago: Regex,
}

fn patterns() -> &'static Patterns {
    static PATTERNS: OnceLock<Patterns> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        let months = month_pattern();
        let weekdays = WEEKDAYS.join("|");
        let number = r"\d{1,2}|a|an|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a few|a couple of";
        let re = |p: &str| Regex::new(p).expect("a valid pattern");
        Patterns {
            iso: re(r"(?-u:\b)(\d{4})[-./](\d{1,2})[-./](\d{1,2})(?-u:\b)"),
            month_day: re(&format!(
                r"(?-u:\b)({months})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?-u:\b)(?:,?\s+(\d{{4}}))?"
            )),
            day_month: re(&format!(
                r"(?-u:\b)(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({months})(?-u:\b)(?:,?\s+(\d{{4}}))?"
            )),
            relative_day: re(
                r"(?-u:\b)(the day before yesterday|the day after tomorrow|yesterday|today|tonight|this morning|this afternoon|this evening|tomorrow)(?-u:\b)",
            ),
            weekday: re(&format!(r"(?-u:\b)(last|this|next|on|this coming)\s+({weekdays})(?-u:\b)")),
            ago: re(&format!(r"(?-u:\b)({number})\s+(day|days|week|weeks)\s+(ago|from now|later)(?-u:\b)|(?-u:\b)in\s+({number})\s+(day|days|week|weeks)(?-u:\b)")),
            ko_date: re(r"(?:(\d{4})\s*년\s*)?(\d{1,2})\s*월\s*(\d{1,2})\s*일"),
            ko_relative: re(r"(그저께|그제|어제|오늘|내일|모레|글피)"),
            ko_weekday: re(r"(지난\s*주|저번\s*주|이번\s*주|다음\s*주|담주)\s*([월화수목금토일])요일"),
            ko_ago: re(r"(\d+|하루|이틀|사흘|나흘|일주일|한|두|세|네)\s*(일|주|주일)?\s*(전|후|뒤)"),
            period: re(
                r"(?-u:\b)(last|this|past|previous)\s+(month|week|year|weekend)(?-u:\b)|(?-u:\b)(yesterday|today|earlier this year|earlier this month)(?-u:\b)",
            ),
            in_month: re(&format!(r"(?-u:\b)(?:in|during|back in|last|this)\s+({months})(?-u:\b)(?:\s+(\d{{4}}))?")),
            season: re(r"(?-u:\b)(?:in|during|this|last)\s+(?:the\s+)?(spring|summer|fall|autumn|winter)(?-u:\b)"),
            months_ago: re(&format!(r"(?-u:\b)({number})\s+(month|months|week|weeks)\s+ago(?-u:\b)")),
            ko_period: re(
                r"(지난\s*달|저번\s*달|지난\s*주말|저번\s*주말|이번\s*주말|지난\s*주|저번\s*주|이번\s*주|이번\s*달|작년|올해|어제|오늘|연초)",
            ),
            ko_month: re(r"(?:(\d{4})\s*년\s*)?(\d{1,2})\s*월(?:\s*(?:에|달|중|초|말|쯤))?"),
            ko_season: re(r"(봄|여름|가을|겨울)(?:에|철|쯤|동안)"),
            ko_months_ago: re(r"(\d+|한|두|석|세|네|몇)\s*(달|개월|주)\s*(?:전|쯤 전)"),
        }
    })
}

fn civil_day(c: &CivilTime) -> Day {
    (c.year, c.month, c.day)
}

/// `day` moved by `days` days.
fn add_days(zone: &TimeZone, (y, m, d): Day, days: i64) -> Option<Day> {
    let t = zone.at_local(y, m, i64::from(d) + days, 12, 0, 0)?;
    Some(civil_day(&zone.civil(t)))
}

fn midnight(zone: &TimeZone, (y, m, d): Day) -> Option<Timestamp> {
    zone.at_local(y, m, i64::from(d), 0, 0, 0)
}

fn valid(y: i64, m: u32, d: u32) -> Option<Day> {
    ((1..=12).contains(&m) && d >= 1 && d <= Timestamp::days_in_month(y, m)).then_some((y, m, d))
}

/// The `month`/`day` (no year given) nearest to `today`: this year's, or
/// the next or the previous year's when that is closer.
fn nearest_year(today: Day, month: u32, day: u32) -> Option<Day> {
    let distance = |y: i64| -> Option<i64> {
        let this = valid(y, month, day)?;
        Some(
            ((this.0 * 372 + i64::from(this.1) * 31 + i64::from(this.2))
                - (today.0 * 372 + i64::from(today.1) * 31 + i64::from(today.2)))
            .abs(),
        )
    };
    [today.0, today.0 + 1, today.0 - 1]
        .into_iter()
        .filter_map(|y| distance(y).map(|d| (d, y)))
        .min()
        .and_then(|(_, y)| valid(y, month, day))
}

/// The day of `weekday` (0 Monday) relative to `today`: `last` the most
/// recent one before today (1–7 days back), `지난주` that day of last week,
/// `next`/`다음주` that day of next week, `이번주` of this week,
/// otherwise the coming one (today or later).
fn weekday_day(zone: &TimeZone, today: Day, today_weekday: u32, weekday: u32, which: &str) -> Option<Day> {
    let ahead = (i64::from(weekday) - i64::from(today_weekday)).rem_euclid(7);
    let days = match which {
        // The most recent one before today.
        "last" => -(i64::from(today_weekday) - i64::from(weekday) - 1).rem_euclid(7) - 1,
        // That day of the week before this one.
        "지난주" | "저번주" => -i64::from(today_weekday) - 7 + i64::from(weekday),
        "next" | "다음주" | "담주" => 7 - i64::from(today_weekday) + i64::from(weekday),
        "이번주" => i64::from(weekday) - i64::from(today_weekday),
        _ => ahead,
    };
    add_days(zone, today, days)
}

/// The days `text` states, as the instants their local days begin in
/// `zone`, read relative to `at` (when the text was written), in order,
/// each once.
pub(crate) fn stated_days(text: &str, at: Timestamp, zone: &TimeZone) -> Vec<Timestamp> {
    let p = patterns();
    let lower = text.to_lowercase();
    let now = zone.civil(at);
    let today = civil_day(&now);
    let mut days: Vec<Day> = Vec::new();
    for c in p.iso.captures_iter(&lower) {
        if let (Ok(y), Ok(m), Ok(d)) = (c[1].parse(), c[2].parse(), c[3].parse())
            && let Some(day) = valid(y, m, d)
        {
            days.push(day);
        }
    }
    let with_year =
        |year: Option<regex::Match<'_>>, m: u32, d: u32| match year.and_then(|y| y.as_str().parse().ok()) {
            Some(y) => valid(y, m, d),
            None => nearest_year(today, m, d),
        };
    for c in p.month_day.captures_iter(&lower) {
        if let (Some(m), Ok(d)) = (month_number(&c[1]), c[2].parse())
            && let Some(day) = with_year(c.get(3), m, d)
        {
            days.push(day);
        }
    }
    for c in p.day_month.captures_iter(&lower) {
        if let (Ok(d), Some(m)) = (c[1].parse(), month_number(&c[2]))
            && let Some(day) = with_year(c.get(3), m, d)
        {
            days.push(day);
        }
    }
    for c in p.relative_day.captures_iter(&lower) {
        let shift = match &c[1] {
            "the day before yesterday" => -2,
            "yesterday" => -1,
            "tomorrow" => 1,
            "the day after tomorrow" => 2,
            _ => 0,
        };
        days.extend(add_days(zone, today, shift));
    }
    for c in p.weekday.captures_iter(&lower) {
        if let Some(w) = WEEKDAYS.iter().position(|d| *d == &c[2]) {
            let which = if &c[1] == "this coming" { "on" } else { &c[1] };
            days.extend(weekday_day(zone, today, now.weekday, w as u32, which));
        }
    }
    for c in p.ago.captures_iter(&lower) {
        let (n, unit, sign) = match c.get(1) {
            Some(n) => (n.as_str(), &c[2], if &c[3] == "ago" { -1 } else { 1 }),
            None => (&c[4], &c[5], 1),
        };
        if let Some(n) = count(n) {
            let per = if unit.starts_with("week") { 7 } else { 1 };
            days.extend(add_days(zone, today, sign * n * per));
        }
    }
    for c in p.ko_date.captures_iter(&lower) {
        if let (Ok(m), Ok(d)) = (c[2].parse(), c[3].parse())
            && let Some(day) = with_year(c.get(1), m, d)
        {
            days.push(day);
        }
    }
    for c in p.ko_relative.captures_iter(&lower) {
        let shift = match &c[1] {
            "그저께" | "그제" => -2,
            "어제" => -1,
            "내일" => 1,
            "모레" => 2,
            "글피" => 3,
            _ => 0,
        };
        days.extend(add_days(zone, today, shift));
    }
    for c in p.ko_weekday.captures_iter(&lower) {
        let which: String = c[1].chars().filter(|c| !c.is_whitespace()).collect();
        if let Some(w) = KO_WEEKDAYS.iter().position(|d| *d == &c[2]) {
            days.extend(weekday_day(zone, today, now.weekday, w as u32, &which));
        }
    }
    for c in p.ko_ago.captures_iter(&lower) {
        let n = korean_count(&c[1]);
        let per = match c.get(2).map(|m| m.as_str()) {
            Some("주") | Some("주일") => 7,
            Some("일") => 1,
            // `3 전` says nothing; `이틀 전`, `하루 뒤` are days.
            _ if matches!(&c[1], "하루" | "이틀" | "사흘" | "나흘" | "일주일") => 1,
            _ => continue,
        };
        let sign = if &c[3] == "전" { -1 } else { 1 };
        if let Some(n) = n {
            days.extend(add_days(zone, today, sign * n * per));
        }
    }
    let mut out = Vec::new();
    for day in days {
        if let Some(t) = midnight(zone, day)
            && !out.contains(&t)
        {
            out.push(t);
        }
    }
    out
}

/// Whether a question asks for how things stand now ("what's my target
/// time now?", "where did we end up going?", "결국 어디로 갔지?", "요즘 뭐
/// 먹어?"): then the newest of the records that match it best is the
/// answer, since a later one corrects an earlier one.
pub(crate) fn asks_latest(question: &str) -> bool {
    static LATEST: OnceLock<Regex> = OnceLock::new();
    let re = LATEST.get_or_init(|| {
        Regex::new(
            r"(?i)\b(now|these days|currently|current|at the moment|right now|ended up|end up|in the end|finally|final|latest|most recent|still|anymore|any more|instead)\b|결국|지금|요즘|최종|현재|이제|요새|마지막으로|최근",
        )
        .expect("a valid pattern")
    });
    re.is_match(question)
}

/// The period a question asks about, as instants in `zone` (from, until:
/// the end excluded), read relative to `now`; `None` when it names none.
pub(crate) fn period_of(question: &str, now: Timestamp, zone: &TimeZone) -> Option<(Timestamp, Timestamp)> {
    let p = patterns();
    let lower = question.to_lowercase();
    let c = zone.civil(now);
    let today = civil_day(&c);
    let day_span = |from: Day, days: i64| -> Option<(Timestamp, Timestamp)> {
        let until = add_days(zone, from, days)?;
        Some((midnight(zone, from)?, midnight(zone, until)?))
    };
    let month_span = |y: i64, m: u32, months: u32| -> Option<(Timestamp, Timestamp)> {
        let start = zone.at_local(y, m, 1, 0, 0, 0)?;
        let end_month = m + months;
        let (ey, em) = (y + i64::from((end_month - 1) / 12), (end_month - 1) % 12 + 1);
        Some((start, zone.at_local(ey, em, 1, 0, 0, 0)?))
    };
    let previous_month = |months: u32| -> (i64, u32) {
        let total = c.year * 12 + i64::from(c.month) - 1 - i64::from(months);
        (total.div_euclid(12), total.rem_euclid(12) as u32 + 1)
    };
    // The most recent `month` not after this one.
    let recent_month = |m: u32, year: Option<i64>| -> (i64, u32) {
        match year {
            Some(y) => (y, m),
            None if m > c.month => (c.year - 1, m),
            None => (c.year, m),
        }
    };
    let week_start = add_days(zone, today, -i64::from(c.weekday))?;
    let season = |name: &str| -> Option<(Timestamp, Timestamp)> {
        let first = match name {
            "spring" | "봄" => 3,
            "summer" | "여름" => 6,
            "fall" | "autumn" | "가을" => 9,
            _ => 12,
        };
        let (mut y, m) = recent_month(first, None);
        if first == 12 && c.month <= 2 {
            // This winter began last December.
            y = c.year - 1;
        }
        month_span(y, m, 3)
    };
    // A day named outright ("on March 14", "14 March", "3월 14일에").
    let named = if let Some(m) = p.ko_date.captures(&lower) {
        Some((m.get(1), m[2].parse().ok(), m[3].parse().ok()))
    } else if let Some(m) = p.month_day.captures(&lower) {
        Some((m.get(3), month_number(&m[1]), m[2].parse().ok()))
    } else {
        p.day_month
            .captures(&lower)
            .map(|m| (m.get(3), month_number(&m[2]), m[1].parse().ok()))
    };
    if let Some((year, Some(month), Some(day))) = named {
        let day = match year.and_then(|y| y.as_str().parse().ok()) {
            Some(y) => valid(y, month, day),
            None => nearest_year(today, month, day),
        };
        if let Some(day) = day {
            return day_span(day, 1);
        }
    }
    if let Some(m) = p.period.captures(&lower) {
        let which = m.get(1).map(|x| x.as_str());
        let unit = m.get(2).map(|x| x.as_str());
        let single = m.get(3).map(|x| x.as_str());
        return match (which, unit, single) {
            (_, _, Some("yesterday")) => day_span(add_days(zone, today, -1)?, 1),
            (_, _, Some("today")) => day_span(today, 1),
            (_, _, Some("earlier this year")) => Some((zone.at_local(c.year, 1, 1, 0, 0, 0)?, now)),
            (_, _, Some("earlier this month")) => Some((zone.at_local(c.year, c.month, 1, 0, 0, 0)?, now)),
            (Some("this"), Some("month"), _) => month_span(c.year, c.month, 1),
            (Some(_), Some("month"), _) => {
                let (y, m) = previous_month(1);
                month_span(y, m, 1)
            }
            (Some("this"), Some("week"), _) => day_span(week_start, 7),
            (Some(_), Some("week"), _) => day_span(add_days(zone, week_start, -7)?, 7),
            (Some("this"), Some("year"), _) => month_span(c.year, 1, 12),
            (Some(_), Some("year"), _) => month_span(c.year - 1, 1, 12),
            (Some("this"), Some("weekend"), _) => day_span(add_days(zone, week_start, 5)?, 2),
            (Some(_), Some("weekend"), _) => day_span(add_days(zone, week_start, -2)?, 2),
            _ => None,
        };
    }
    if let Some(m) = p.months_ago.captures(&lower) {
        let n = count(&m[1])?;
        if m[2].starts_with("week") {
            // "two weeks ago": that week, a few days either side.
            let centre = add_days(zone, today, -7 * n)?;
            return day_span(add_days(zone, centre, -5)?, 11);
        }
        let (y, mo) = previous_month(u32::try_from(n).ok()?);
        return month_span(y, mo, 1);
    }
    if let Some(m) = p.in_month.captures(&lower)
        && let Some(month) = month_number(&m[1])
        // "this may be" is not a month: May needs "in" or "during".
        && (month != 5 || m[0].starts_with("in ") || m[0].starts_with("during ") || m[0].starts_with("back "))
    {
        let (y, mo) = recent_month(month, m.get(2).and_then(|y| y.as_str().parse().ok()));
        return month_span(y, mo, 1);
    }
    if let Some(m) = p.season.captures(&lower) {
        return season(&m[1]);
    }
    if let Some(m) = p.ko_period.captures(&lower) {
        let word: String = m[1].chars().filter(|c| !c.is_whitespace()).collect();
        return match word.as_str() {
            "지난달" | "저번달" => {
                let (y, m) = previous_month(1);
                month_span(y, m, 1)
            }
            "이번달" => month_span(c.year, c.month, 1),
            "지난주" | "저번주" => day_span(add_days(zone, week_start, -7)?, 7),
            "이번주" => day_span(week_start, 7),
            "지난주말" | "저번주말" => day_span(add_days(zone, week_start, -2)?, 2),
            "이번주말" => day_span(add_days(zone, week_start, 5)?, 2),
            "작년" => month_span(c.year - 1, 1, 12),
            "올해" => month_span(c.year, 1, 12),
            "연초" => month_span(c.year, 1, 3),
            "어제" => day_span(add_days(zone, today, -1)?, 1),
            _ => day_span(today, 1),
        };
    }
    if let Some(m) = p.ko_months_ago.captures(&lower) {
        let n = korean_count(&m[1])?;
        if &m[2] == "주" {
            let centre = add_days(zone, today, -7 * n)?;
            return day_span(add_days(zone, centre, -5)?, 11);
        }
        let (y, mo) = previous_month(u32::try_from(n).ok()?);
        return month_span(y, mo, 1);
    }
    if let Some(m) = p.ko_month.captures(&lower)
        && let Ok(month) = m[2].parse::<u32>()
        && (1..=12).contains(&month)
    {
        let (y, mo) = recent_month(month, m.get(1).and_then(|y| y.as_str().parse().ok()));
        return month_span(y, mo, 1);
    }
    if let Some(m) = p.ko_season.captures(&lower) {
        return season(&m[1]);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).unwrap()
    }

    fn days(text: &str, at: &str) -> Vec<String> {
        let zone = TimeZone::seoul();
        stated_days(text, t(at), &zone)
            .into_iter()
            .map(|d| zone.format_local(d, ' ')[..10].to_owned())
            .collect()
    }

    #[test]
    fn days_stated_in_english_are_read_from_when_they_were_written() {
        let at = "2026-02-20T10:00:00+09:00"; // a Friday
        assert_eq!(days("My dentist is on March 14th.", at), ["2026-03-14"]);
        assert_eq!(days("I met her on 3 Jan 2026", at), ["2026-01-03"]);
        assert_eq!(days("we got back yesterday", at), ["2026-02-19"]);
        assert_eq!(days("see you tomorrow!", at), ["2026-02-21"]);
        assert_eq!(days("the flight is on 2026-04-02", at), ["2026-04-02"]);
        assert_eq!(days("last Tuesday was rough", at), ["2026-02-17"]);
        assert_eq!(
            days("last Friday", at),
            ["2026-02-13"],
            "a week back on the day itself"
        );
        assert_eq!(days("next Monday then", at), ["2026-02-23"]);
        assert_eq!(days("on Sunday we hike", at), ["2026-02-22"]);
        assert_eq!(days("two weeks ago I fell", at), ["2026-02-06"]);
        assert_eq!(days("in 3 days", at), ["2026-02-23"]);
        assert_eq!(days("December 30", at), ["2025-12-30"], "the nearest December 30");
        assert!(days("I may go, maybe 3/4 of us", at).is_empty());
        assert!(days("nothing here at all", at).is_empty());
    }

    #[test]
    fn days_stated_in_korean_are_read_from_when_they_were_written() {
        let at = "2026-02-20T10:00:00+09:00";
        assert_eq!(days("3월 14일에 치과 예약했어", at), ["2026-03-14"]);
        assert_eq!(days("어제 병원 다녀왔어", at), ["2026-02-19"]);
        assert_eq!(days("모레 이사해", at), ["2026-02-22"]);
        assert_eq!(days("다음 주 화요일에 면접", at), ["2026-02-24"]);
        assert_eq!(days("지난주 금요일에 만났어", at), ["2026-02-13"]);
        assert_eq!(days("이틀 전에 샀어", at), ["2026-02-18"]);
        assert_eq!(days("3일 뒤에 와", at), ["2026-02-23"]);
        assert_eq!(days("2025년 12월 3일", at), ["2025-12-03"]);
    }

    fn period(q: &str, now: &str) -> Option<(String, String)> {
        let zone = TimeZone::seoul();
        period_of(q, t(now), &zone).map(|(a, b)| {
            (
                zone.format_local(a, ' ')[..10].to_owned(),
                zone.format_local(b, ' ')[..10].to_owned(),
            )
        })
    }

    fn span(a: &str, b: &str) -> Option<(String, String)> {
        Some((a.to_owned(), b.to_owned()))
    }

    #[test]
    fn questions_about_how_things_stand_now() {
        for q in [
            "What's my target time in Hamburg now?",
            "Where did the August van trip end up going?",
            "Which tablet am I on these days?",
            "페이레인 첫 출근 결국 언제 했지?",
            "지금은 뭘 하고 있지?",
            "최종 연봉 얼마로 정해졌지?",
        ] {
            assert!(asks_latest(q), "{q}");
        }
        for q in [
            "When did I adopt Milo?",
            "What was the vet's name?",
            "3월에 뭐 했더라",
        ] {
            assert!(!asks_latest(q), "{q}");
        }
    }

    #[test]
    fn periods_of_questions() {
        let now = "2026-07-10T09:00:00+09:00"; // a Friday
        assert_eq!(
            period("what did I buy last month?", now),
            span("2026-06-01", "2026-07-01")
        );
        assert_eq!(
            period("anything this month?", now),
            span("2026-07-01", "2026-08-01")
        );
        assert_eq!(
            period("what did we do in March?", now),
            span("2026-03-01", "2026-04-01")
        );
        assert_eq!(
            period("what happened in September", now),
            span("2025-09-01", "2025-10-01")
        );
        assert_eq!(period("last week's plans", now), span("2026-06-29", "2026-07-06"));
        assert_eq!(
            period("what did I do last weekend", now),
            span("2026-07-04", "2026-07-06")
        );
        assert_eq!(period("two months ago", now), span("2026-05-01", "2026-06-01"));
        assert_eq!(period("yesterday's lunch", now), span("2026-07-09", "2026-07-10"));
        assert_eq!(
            period("when was it? on June 3", now),
            span("2026-06-03", "2026-06-04")
        );
        assert_eq!(period("last year", now), span("2025-01-01", "2026-01-01"));
        assert_eq!(period("in the spring", now), span("2026-03-01", "2026-06-01"));
        assert_eq!(
            period("지난달에 병원 어디 갔었지?", now),
            span("2026-06-01", "2026-07-01")
        );
        assert_eq!(period("3월에 뭐 했더라", now), span("2026-03-01", "2026-04-01"));
        assert_eq!(period("지난주에 산 거", now), span("2026-06-29", "2026-07-06"));
        assert_eq!(period("두 달 전에", now), span("2026-05-01", "2026-06-01"));
        assert_eq!(period("작년 겨울", now), span("2025-01-01", "2026-01-01"));
        assert_eq!(period("when did I last see Dr. Ahn?", now), None);
        assert_eq!(period("You may want to check", now), None);
        assert_eq!(period("보리 사료 뭐 먹이지?", now), None);
    }
}
