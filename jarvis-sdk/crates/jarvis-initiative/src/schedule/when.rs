//! [`parse_when`]: the `<when>` of `/schedule <when> <prompt>`, in English
//! or Korean, turned into a [`Trigger`]; the rest of the text is the
//! prompt. [`WHEN_FORMS`] lists what is accepted.
//!
//! Times of day are in the scheduler's time zone (a time in a
//! spring-forward gap is the first instant after it). Korean hours without
//! 오전/오후 are read on the 24-hour clock (`9시` is 09:00, `21시` 21:00);
//! 오전/아침/새벽 mean a.m., 오후/낮/저녁/밤 p.m. A trailing `에` (`9시에`,
//! `2시간 후에`) is allowed.

use super::error::ScheduleError;
use super::trigger::{MAX_INTERVAL, Trigger, check_interval, parse_duration};
use jarvis_common::{TimeZone, Timestamp};

/// The accepted forms, shown with every error.
pub const WHEN_FORMS: &str = "accepted forms (이렇게 써 주세요), followed by what to do:
  every 30m | every 2h | every 1d             30분마다 | 2시간마다 | 매시간
  daily 09:00 | weekdays 9am | weekends 10:00  매일 오전 9시 | 평일 9시 30분 | 주말 10시
  weekly mon 09:00 | weekly mon,thu 18:30      매주 월요일 9시 | 매주 월,목 저녁 6시 반
  monthly 1 09:00                              매월 1일 오전 9시
  at 2026-12-01 09:00 | at 21:30               내일 오전 9시 | 오늘 오후 3시 | 모레 7시
  tomorrow 09:00 | today 18:00 | in 2h         2시간 후 | 30분 뒤
  cron \"0 9 * * 1\"
e.g. /schedule 매일 오전 9시 오늘 일정 알려줘";

/// A `/schedule` command's time and prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct When {
    /// When the job runs.
    pub trigger: Trigger,
    /// What it asks: the text after the time.
    pub prompt: String,
}

/// Reads `<when> <prompt>` at `now`, with times of day in `zone`.
///
/// ```
/// use jarvis_common::{Timestamp, UtcOffset};
/// use jarvis_initiative::{Trigger, parse_when};
/// let now = Timestamp::parse_rfc3339("2026-11-30T12:00:00+09:00").unwrap();
/// let when = parse_when("매일 오전 9시 오늘 일정 알려줘", now, UtcOffset::KST).unwrap();
/// assert_eq!(when.trigger, Trigger::cron("0 9 * * *").unwrap());
/// assert_eq!(when.prompt, "오늘 일정 알려줘");
/// let when = parse_when("내일 오후 3시 회의 준비", now, UtcOffset::KST).unwrap();
/// assert_eq!(when.trigger, Trigger::At(Timestamp::parse_rfc3339("2026-12-01T15:00:00+09:00").unwrap()));
/// ```
pub fn parse_when(input: &str, now: Timestamp, zone: impl Into<TimeZone>) -> Result<When, ScheduleError> {
    let zone = zone.into();
    let offset = &zone;
    let words = Words::new(input);
    let fail = |message: String| ScheduleError::When {
        message: format!("{message}\n{WHEN_FORMS}"),
    };
    let (trigger, end) = match read(&words, now, offset) {
        Ok(Some(found)) => found,
        Ok(None) => {
            return Err(fail(format!(
                "could not read a time at the start of {:?} (시간 표현을 이해하지 못했습니다)",
                input.trim()
            )));
        }
        Err(message) => return Err(fail(message)),
    };
    let prompt = input[end..].trim().to_owned();
    if prompt.is_empty() {
        return Err(fail(
            "nothing to do follows the time (시간 뒤에 할 일을 적어 주세요)".to_owned(),
        ));
    }
    Ok(When { trigger, prompt })
}

/// The words of the input with their byte spans.
struct Words<'a> {
    text: &'a str,
    spans: Vec<(usize, usize)>,
}

impl<'a> Words<'a> {
    fn new(text: &'a str) -> Self {
        let mut spans = Vec::new();
        let mut start = None;
        for (i, c) in text.char_indices() {
            match (c.is_whitespace(), start) {
                (true, Some(s)) => {
                    spans.push((s, i));
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        if let Some(s) = start {
            spans.push((s, text.len()));
        }
        Self { text, spans }
    }

    fn get(&self, i: usize) -> Option<&'a str> {
        self.spans.get(i).map(|&(a, b)| &self.text[a..b])
    }

    /// The byte just after word `i - 1` (the start of the rest).
    fn end_before(&self, i: usize) -> usize {
        if i == 0 { 0 } else { self.spans[i - 1].1 }
    }
}

/// A trigger and the byte where the rest of the input starts.
type Found = Option<(Trigger, usize)>;
/// A time of day `(hour, minute)` and the index of the word after it.
type TimeAt = Option<((u32, u32), usize)>;

fn read(w: &Words<'_>, now: Timestamp, offset: &TimeZone) -> Result<Found, String> {
    let Some(first) = w.get(0) else {
        return Ok(None);
    };
    let lower = first.to_lowercase();
    let cron_at = |days: &str, (h, m): (u32, u32), next: usize| -> Result<Found, String> {
        let trigger = Trigger::cron(&format!("{m} {h} * * {days}")).map_err(|e| e.to_string())?;
        Ok(Some((trigger, w.end_before(next))))
    };
    match lower.as_str() {
        "every" => {
            if w.get(1).is_some_and(|t| t.eq_ignore_ascii_case("day")) {
                let (time, next) = need_time(w, 2)?;
                return cron_at("*", time, next);
            }
            let (d, next) = duration_words(w, 1).ok_or("every needs an interval such as 30m, 2h or 1d")?;
            every(d, w.end_before(next))
        }
        "daily" => {
            let (time, next) = need_time(w, 1)?;
            cron_at("*", time, next)
        }
        "weekdays" => {
            let (time, next) = need_time(w, 1)?;
            cron_at("1-5", time, next)
        }
        "weekends" => {
            let (time, next) = need_time(w, 1)?;
            cron_at("0,6", time, next)
        }
        "weekly" => {
            let days = w.get(1).ok_or("weekly needs days, e.g. weekly mon 09:00")?;
            let days = weekdays(days)
                .ok_or_else(|| format!("{days:?} is not a list of days such as mon or mon,thu"))?;
            let (time, next) = need_time(w, 2)?;
            cron_at(&days, time, next)
        }
        "monthly" => {
            let day = w
                .get(1)
                .and_then(|d| d.parse::<u32>().ok())
                .filter(|d| (1..=31).contains(d));
            let day = day.ok_or("monthly needs a day of the month from 1 to 31, e.g. monthly 1 09:00")?;
            let ((h, m), next) = need_time(w, 2)?;
            let trigger = Trigger::cron(&format!("{m} {h} {day} * *")).map_err(|e| e.to_string())?;
            Ok(Some((trigger, w.end_before(next))))
        }
        "cron" => cron_words(w),
        "at" => at_words(w, now, offset),
        "in" => {
            let (d, next) = duration_words(w, 1).ok_or("in needs a duration such as 30m or 2h")?;
            after(now, d, w.end_before(next))
        }
        "today" | "tomorrow" => {
            let days = if lower == "today" { 0 } else { 1 };
            let (time, next) = need_time(w, 1)?;
            Ok(Some((
                Trigger::At(on_day(now, offset, days, time)?),
                w.end_before(next),
            )))
        }
        _ => read_korean(w, now, offset),
    }
}

fn read_korean(w: &Words<'_>, now: Timestamp, offset: &TimeZone) -> Result<Found, String> {
    let first = w.get(0).unwrap_or_default();
    let cron_at = |spec: String, next: usize| -> Result<Found, String> {
        let trigger = Trigger::cron(&spec).map_err(|e| e.to_string())?;
        Ok(Some((trigger, w.end_before(next))))
    };
    match first {
        "매일" => {
            let ((h, m), next) = need_time(w, 1)?;
            return cron_at(format!("{m} {h} * * *"), next);
        }
        "평일" => {
            let ((h, m), next) = need_time(w, 1)?;
            return cron_at(format!("{m} {h} * * 1-5"), next);
        }
        "주말" => {
            let ((h, m), next) = need_time(w, 1)?;
            return cron_at(format!("{m} {h} * * 0,6"), next);
        }
        "매주" => {
            let days = w
                .get(1)
                .ok_or("매주 다음에 요일을 적어 주세요 (e.g. 매주 월요일 9시)")?;
            let days = korean_weekdays(days)
                .ok_or_else(|| format!("{days:?}: 요일을 알 수 없습니다 (e.g. 월요일, 월,목)"))?;
            let ((h, m), next) = need_time(w, 2)?;
            return cron_at(format!("{m} {h} * * {days}"), next);
        }
        "매월" | "매달" => {
            let day = w
                .get(1)
                .and_then(|d| d.strip_suffix('일'))
                .and_then(|d| d.parse::<u32>().ok())
                .filter(|d| (1..=31).contains(d))
                .ok_or("매월 다음에 날짜를 적어 주세요 (e.g. 매월 1일 오전 9시)")?;
            let ((h, m), next) = need_time(w, 2)?;
            return cron_at(format!("{m} {h} {day} * *"), next);
        }
        "매시간" | "매시" => return every(std::time::Duration::from_secs(3_600), w.end_before(1)),
        "오늘" | "내일" | "모레" => {
            let days = match first {
                "오늘" => 0,
                "내일" => 1,
                _ => 2,
            };
            let (time, next) = need_time(w, 1)?;
            return Ok(Some((
                Trigger::At(on_day(now, offset, days, time)?),
                w.end_before(next),
            )));
        }
        _ => {}
    }
    // `30분마다`, `2시간 마다`; `2시간 후`, `30분뒤에`.
    let bare = first.strip_suffix('에').unwrap_or(first);
    for (suffix, repeat) in [("마다", true), ("후", false), ("뒤", false)] {
        if let Some(d) = bare.strip_suffix(suffix).and_then(korean_duration) {
            return if repeat {
                every(d, w.end_before(1))
            } else {
                after(now, d, w.end_before(1))
            };
        }
    }
    if let Some(d) = korean_duration(first) {
        let next = w.get(1).map(|t| t.strip_suffix('에').unwrap_or(t));
        match next {
            Some("마다") => return every(d, w.end_before(2)),
            Some("후" | "뒤" | "있다가") => return after(now, d, w.end_before(2)),
            _ => {}
        }
    }
    Ok(None)
}

fn every(d: std::time::Duration, end: usize) -> Result<Found, String> {
    Ok(Some((Trigger::Every(check_interval(d)?), end)))
}

/// A one-shot `d` from `now` (`in 2h`, `2시간 후`), rounded up to a whole
/// minute; `d` is at most [`MAX_INTERVAL`].
fn after(now: Timestamp, d: std::time::Duration, end: usize) -> Result<Found, String> {
    if d > MAX_INTERVAL {
        return Err("the delay is longer than the maximum of 366 days (최대 366일)".to_owned());
    }
    let ms = now
        .as_millis()
        .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let at = Timestamp::from_millis(ms.saturating_add((60_000 - ms.rem_euclid(60_000)) % 60_000));
    Ok(Some((Trigger::At(at), end)))
}

/// The time `h:m` on the local day `days` after today; an error if passed.
fn on_day(now: Timestamp, offset: &TimeZone, days: i64, (h, m): (u32, u32)) -> Result<Timestamp, String> {
    let c = offset.civil(now);
    let t = offset
        .at_local(c.year, c.month, i64::from(c.day) + days, h, m, 0)
        .ok_or_else(|| "that day is out of range (years 0000 to 9999)".to_owned())?;
    if t <= now {
        return Err(format!(
            "{h:02}:{m:02} today has already passed (이미 지난 시간입니다)"
        ));
    }
    Ok(t)
}

/// A duration at word `i`: `30m`, `1h30m`, `30 minutes`, `30분`.
fn duration_words(w: &Words<'_>, i: usize) -> Option<(std::time::Duration, usize)> {
    let word = w.get(i)?;
    if let Some(d) = parse_duration(word).or_else(|| korean_duration(word)) {
        return Some((d, i + 1));
    }
    let n: u64 = word.parse().ok()?;
    let unit = match w.get(i + 1)?.to_lowercase().as_str() {
        "s" | "sec" | "secs" | "second" | "seconds" => 1,
        "m" | "min" | "mins" | "minute" | "minutes" => 60,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
        "d" | "day" | "days" => 86_400,
        _ => return None,
    };
    Some((std::time::Duration::from_secs(n.checked_mul(unit)?), i + 2))
}

/// `30분`, `2시간`, `1일`, `90초`, `1시간30분`.
fn korean_duration(text: &str) -> Option<std::time::Duration> {
    let mut rest = text;
    let mut total = 0u64;
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return None;
        }
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (unit, after) = [("시간", 3_600u64), ("분", 60), ("초", 1), ("일", 86_400)]
            .iter()
            .find_map(|(u, secs)| rest.strip_prefix(u).map(|r| (*secs, r)))?;
        total = total.checked_add(n.checked_mul(unit)?)?;
        rest = after;
    }
    (total > 0).then(|| std::time::Duration::from_secs(total))
}

/// A time of day at word `i`, or an error naming what was expected.
fn need_time(w: &Words<'_>, i: usize) -> Result<((u32, u32), usize), String> {
    match time_words(w, i)? {
        Some(found) => Ok(found),
        None => Err(format!(
            "expected a time of day after {:?}, such as 09:00, 9am or 오전 9시 (시각을 적어 주세요)",
            w.get(i.saturating_sub(1)).unwrap_or_default()
        )),
    }
}

/// A time of day at word `i`: `09:00`, `9:30pm`, `9 am`, `noon`, `오전 9시`,
/// `9시 30분`, `9시반`, `정오`, `자정`. `Ok(None)` when word `i` is none.
fn time_words(w: &Words<'_>, i: usize) -> Result<TimeAt, String> {
    let Some(word) = w.get(i) else {
        return Ok(None);
    };
    let word = word.strip_suffix('에').unwrap_or(word);
    match word.to_lowercase().as_str() {
        "noon" | "정오" => return Ok(Some(((12, 0), i + 1))),
        "midnight" | "자정" => return Ok(Some(((0, 0), i + 1))),
        _ => {}
    }
    // A Korean period, alone or glued to the hour (`오전9시`).
    const AM: [&str; 3] = ["오전", "아침", "새벽"];
    const PM: [&str; 4] = ["오후", "낮", "저녁", "밤"];
    for (period, pm) in AM
        .iter()
        .map(|p| (*p, false))
        .chain(PM.iter().map(|p| (*p, true)))
    {
        let Some(rest) = word.strip_prefix(period) else {
            continue;
        };
        let (hm, next) = if rest.is_empty() {
            match korean_clock(w, i + 1)? {
                Some(found) => found,
                None => return Err(format!("expected an hour after {period} (e.g. {period} 9시)")),
            }
        } else {
            match korean_clock_word(rest, w, i)? {
                Some(found) => found,
                None => return Err(format!("{word:?} is not a time (e.g. {period} 9시)")),
            }
        };
        let (h, m) = hm;
        if !(1..=12).contains(&h) {
            return Err(format!("{period} {h}시: the hour must be 1 to 12 with {period}"));
        }
        let h = match (pm, h) {
            (false, 12) => 0,
            (false, h) => h,
            (true, 12) if period == "밤" => 0,
            (true, 12) => 12,
            (true, h) => h + 12,
        };
        return Ok(Some(((h, m), next)));
    }
    if let Some(found) = korean_clock(w, i)? {
        return Ok(Some(found));
    }
    english_clock(w, i)
}

/// `9시`, `9시30분`, `9시반`, `9시 30분`, `9시 반`, or `09:00`, at word `i`.
fn korean_clock(w: &Words<'_>, i: usize) -> Result<TimeAt, String> {
    let Some(word) = w.get(i) else {
        return Ok(None);
    };
    let word = word.strip_suffix('에').unwrap_or(word);
    korean_clock_word(word, w, i)
}

/// [`korean_clock`] on `word`, standing at word `i` of `w`.
fn korean_clock_word(word: &str, w: &Words<'_>, i: usize) -> Result<TimeAt, String> {
    if let Some(hm) = colon_time(word) {
        return hm.map(|hm| Some((hm, i + 1)));
    }
    let Some((hour, rest)) = word.split_once('시') else {
        return Ok(None);
    };
    let Ok(h) = hour.parse::<u32>() else {
        return Ok(None);
    };
    if h > 23 {
        return Err(format!("{h}시: the hour must be 0 to 23"));
    }
    let minute_of = |text: &str| -> Result<Option<u32>, String> {
        if text == "반" {
            return Ok(Some(30));
        }
        match text.strip_suffix('분').map(str::parse::<u32>) {
            Some(Ok(m)) if m < 60 => Ok(Some(m)),
            Some(Ok(m)) => Err(format!("{m}분: the minute must be 0 to 59")),
            _ => Ok(None),
        }
    };
    if !rest.is_empty() {
        return match minute_of(rest)? {
            Some(m) => Ok(Some(((h, m), i + 1))),
            None => Err(format!("{word:?} is not a time (e.g. 9시, 9시 30분)")),
        };
    }
    if let Some(next) = w.get(i + 1) {
        let next = next.strip_suffix('에').unwrap_or(next);
        if let Some(m) = minute_of(next)? {
            return Ok(Some(((h, m), i + 2)));
        }
    }
    Ok(Some(((h, 0), i + 1)))
}

/// `HH:MM` → `Some(Ok)`, a bad `HH:MM` → `Some(Err)`, anything else `None`.
fn colon_time(word: &str) -> Option<Result<(u32, u32), String>> {
    let (h, m) = word.split_once(':')?;
    if h.is_empty() || h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (h, m) = (h.parse::<u32>().ok()?, m.parse::<u32>().ok()?);
    Some(if h < 24 && m < 60 {
        Ok((h, m))
    } else {
        Err(format!("{word} is not a time of day"))
    })
}

/// `9am`, `9:30pm`, `9 am` at word `i`.
fn english_clock(w: &Words<'_>, i: usize) -> Result<TimeAt, String> {
    let Some(word) = w.get(i) else {
        return Ok(None);
    };
    let lower = word.to_lowercase();
    let (clock, pm, next) = if let Some(c) = lower.strip_suffix("am") {
        (c.to_owned(), Some(false), i + 1)
    } else if let Some(c) = lower.strip_suffix("pm") {
        (c.to_owned(), Some(true), i + 1)
    } else {
        match w.get(i + 1).map(str::to_lowercase).as_deref() {
            Some("am") => (lower.clone(), Some(false), i + 2),
            Some("pm") => (lower.clone(), Some(true), i + 2),
            _ => (lower.clone(), None, i + 1),
        }
    };
    let Some(pm) = pm else {
        return Ok(None);
    };
    let (h, m) = match colon_time(&clock) {
        Some(hm) => hm?,
        None => match clock.parse::<u32>() {
            Ok(h) => (h, 0),
            Err(_) => return Ok(None),
        },
    };
    if !(1..=12).contains(&h) {
        return Err(format!("{word}: the hour must be 1 to 12 with am/pm"));
    }
    let h = match (pm, h) {
        (false, 12) => 0,
        (true, 12) => 12,
        (false, h) => h,
        (true, h) => h + 12,
    };
    Ok(Some(((h, m), next)))
}

/// `mon`, `monday`, `mon,thu`, `mon-fri` as a cron day-of-week field.
fn weekdays(text: &str) -> Option<String> {
    const NAMES: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let day = |s: &str| -> Option<usize> {
        let s = s.to_lowercase();
        NAMES
            .iter()
            .position(|n| s == *n || (s.len() > 3 && s.starts_with(n) && s.ends_with("day")))
    };
    let parts: Option<Vec<String>> = text
        .split(',')
        .map(|part| match part.split_once('-') {
            Some((a, b)) => Some(format!("{}-{}", day(a)?, day(b)?)),
            None => day(part).map(|d| d.to_string()),
        })
        .collect();
    parts.map(|p| p.join(","))
}

/// `월요일`, `월`, `월,목`, `월수금`, `월~금` as a cron day-of-week field.
fn korean_weekdays(text: &str) -> Option<String> {
    const NAMES: [char; 7] = ['일', '월', '화', '수', '목', '금', '토'];
    let day = |c: char| NAMES.iter().position(|n| *n == c);
    let text = text.strip_suffix("마다").unwrap_or(text);
    let mut out = Vec::new();
    for part in text.split(',') {
        let part = part.replace("요일", "");
        if let Some((a, b)) = part.split_once(['~', '-']) {
            let (a, b) = (single(a).and_then(day)?, single(b).and_then(day)?);
            out.push(format!("{a}-{b}"));
            continue;
        }
        if part.is_empty() {
            return None;
        }
        for c in part.chars() {
            out.push(day(c)?.to_string());
        }
    }
    (!out.is_empty()).then(|| out.join(","))
}

fn single(s: &str) -> Option<char> {
    let mut chars = s.chars();
    let c = chars.next()?;
    chars.next().is_none().then_some(c)
}

/// `cron "0 9 * * 1" rest`, `cron '…' rest`, or `cron 0 9 * * 1 rest`.
fn cron_words(w: &Words<'_>) -> Result<Found, String> {
    let start = w.end_before(1);
    let rest = &w.text[start..];
    let trimmed = rest.trim_start();
    let at = start + (rest.len() - trimmed.len());
    if let Some(quote) = trimmed.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let body = &trimmed[1..];
        let close = body
            .find(quote)
            .ok_or("the cron expression's closing quote is missing")?;
        let trigger = Trigger::cron(&body[..close]).map_err(|e| e.to_string())?;
        return Ok(Some((trigger, at + 1 + close + 1)));
    }
    if w.spans.len() < 6 {
        return Err("cron needs five fields, e.g. cron \"0 9 * * 1\"".to_owned());
    }
    let expr = (1..6).filter_map(|i| w.get(i)).collect::<Vec<_>>().join(" ");
    let trigger = Trigger::cron(&expr).map_err(|e| e.to_string())?;
    Ok(Some((trigger, w.end_before(6))))
}

/// `at 2026-12-01 09:00`, `at 2026-12-01T09:00`, `at <RFC 3339>`, or
/// `at 21:30` (the next such time).
fn at_words(w: &Words<'_>, now: Timestamp, offset: &TimeZone) -> Result<Found, String> {
    let word = w
        .get(1)
        .ok_or("at needs a date and time, e.g. at 2026-12-01 09:00")?;
    let future = |t: Option<Timestamp>, next: usize| -> Result<Found, String> {
        match t {
            Some(t) if t > now => Ok(Some((Trigger::At(t), w.end_before(next)))),
            Some(t) => Err(format!("{t} has already passed (이미 지난 시간입니다)")),
            None => Err(format!("{word:?} is out of range (years 0000 to 9999)")),
        }
    };
    if let Ok(t) = Timestamp::parse_rfc3339(word) {
        return future(Some(t), 2);
    }
    if let Some((date, time)) = word.split_once(['T', 't'])
        && let (Some(ymd), Some(Ok(hm))) = (date_of(date), colon_time(time))
    {
        return future(local(ymd, hm, offset), 2);
    }
    if let Some(ymd) = date_of(word) {
        let (hm, next) = need_time(w, 2)?;
        return future(local(ymd, hm, offset), next);
    }
    if let Some((hm, next)) = time_words(w, 1)? {
        let t = match on_day(now, offset, 0, hm) {
            Ok(t) => t,
            Err(_) => on_day(now, offset, 1, hm)?,
        };
        return Ok(Some((Trigger::At(t), w.end_before(next))));
    }
    Err(format!("{word:?} is not a date (YYYY-MM-DD) or a time of day"))
}

fn date_of(text: &str) -> Option<(i64, u32, i64)> {
    let mut parts = text.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d) = (
        y.parse::<i64>().ok()?,
        m.parse::<u32>().ok()?,
        d.parse::<i64>().ok()?,
    );
    ((1..=12).contains(&m) && d >= 1 && d <= i64::from(Timestamp::days_in_month(y, m))).then_some((y, m, d))
}

/// A local date and time in `zone`, if a [`Timestamp`] can hold it.
fn local((y, mo, d): (i64, u32, i64), (h, m): (u32, u32), zone: &TimeZone) -> Option<Timestamp> {
    zone.at_local(y, mo, d, h, m, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jarvis_common::UtcOffset;
    use std::time::Duration;

    /// Monday 30 November 2026, 12:00 in Seoul.
    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-11-30T12:00:00+09:00").unwrap()
    }

    fn kst(s: &str) -> Trigger {
        Trigger::At(Timestamp::parse_rfc3339(&format!("{s}+09:00")).unwrap())
    }

    fn cron(s: &str) -> Trigger {
        Trigger::cron(s).unwrap()
    }

    #[track_caller]
    fn check(input: &str, trigger: Trigger, prompt: &str) {
        let when = parse_when(input, now(), UtcOffset::KST).unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(when.trigger, trigger, "{input}");
        assert_eq!(when.prompt, prompt, "{input}");
    }

    #[test]
    fn english_forms() {
        let every = |secs| Trigger::Every(Duration::from_secs(secs));
        for (input, trigger, prompt) in [
            ("every 30m stretch", every(1_800), "stretch"),
            ("every 2 hours drink water", every(7_200), "drink water"),
            ("every 1d summary", every(86_400), "summary"),
            ("every day 07:30 news", cron("30 7 * * *"), "news"),
            ("daily 09:00 plan the day", cron("0 9 * * *"), "plan the day"),
            ("daily 9pm review", cron("0 21 * * *"), "review"),
            ("daily 12 am backup", cron("0 0 * * *"), "backup"),
            ("weekdays 9:15am standup", cron("15 9 * * 1-5"), "standup"),
            ("weekends noon brunch", cron("0 12 * * 0,6"), "brunch"),
            (
                "weekly mon 09:00 notices report",
                cron("0 9 * * 1"),
                "notices report",
            ),
            ("weekly Monday,thu 18:30 gym", cron("30 18 * * 1,4"), "gym"),
            ("weekly mon-fri 08:00 commute", cron("0 8 * * 1-5"), "commute"),
            ("monthly 1 09:00 rent", cron("0 9 1 * *"), "rent"),
            (
                "at 2026-12-01 09:00 call mom",
                kst("2026-12-01T09:00:00"),
                "call mom",
            ),
            (
                "at 2026-12-01T09:00 call mom",
                kst("2026-12-01T09:00:00"),
                "call mom",
            ),
            ("at 2026-12-01T00:00:00Z x", kst("2026-12-01T09:00:00"), "x"),
            ("at 21:30 lights", kst("2026-11-30T21:30:00"), "lights"),
            ("at 08:00 wake", kst("2026-12-01T08:00:00"), "wake"),
            (
                "in 2h check the oven",
                kst("2026-11-30T14:00:00"),
                "check the oven",
            ),
            ("in 90 minutes tea", kst("2026-11-30T13:30:00"), "tea"),
            ("tomorrow 09:00 dentist", kst("2026-12-01T09:00:00"), "dentist"),
            ("today 18:00 leave", kst("2026-11-30T18:00:00"), "leave"),
            (
                "cron \"0 9 * * 1\"  weekly note ",
                cron("0 9 * * 1"),
                "weekly note",
            ),
            ("cron '*/15 * * * *' poll", cron("*/15 * * * *"), "poll"),
            ("cron 0 9 * * 1 note", cron("0 9 * * 1"), "note"),
        ] {
            check(input, trigger, prompt);
        }
    }

    #[test]
    fn korean_forms() {
        let every = |secs| Trigger::Every(Duration::from_secs(secs));
        for (input, trigger, prompt) in [
            ("매일 9시 오늘 일정 알려줘", cron("0 9 * * *"), "오늘 일정 알려줘"),
            ("매일 오전 9시 날씨", cron("0 9 * * *"), "날씨"),
            ("매일 오후 3시 30분 간식", cron("30 15 * * *"), "간식"),
            ("매일 저녁 7시반 운동", cron("30 19 * * *"), "운동"),
            ("매일 오전9시에 약", cron("0 9 * * *"), "약"),
            ("매일 21:00 일기", cron("0 21 * * *"), "일기"),
            ("매일 자정 백업", cron("0 0 * * *"), "백업"),
            ("평일 8시 출근 준비", cron("0 8 * * 1-5"), "출근 준비"),
            ("주말 10시 장보기", cron("0 10 * * 0,6"), "장보기"),
            (
                "매주 월요일 9시 청약 공고 정리",
                cron("0 9 * * 1"),
                "청약 공고 정리",
            ),
            ("매주 월요일 오전 9시 주간 보고", cron("0 9 * * 1"), "주간 보고"),
            ("매주 월,목 저녁 6시 반 헬스", cron("30 18 * * 1,4"), "헬스"),
            ("매주 월수금 7시 러닝", cron("0 7 * * 1,3,5"), "러닝"),
            ("매주 월~금 7시 러닝", cron("0 7 * * 1-5"), "러닝"),
            ("매월 25일 오전 10시 월세", cron("0 10 25 * *"), "월세"),
            ("30분마다 스트레칭", every(1_800), "스트레칭"),
            ("2시간 마다 물 마시기", every(7_200), "물 마시기"),
            ("매시간 확인", every(3_600), "확인"),
            (
                "내일 오전 9시 약 먹으라고 알려줘",
                kst("2026-12-01T09:00:00"),
                "약 먹으라고 알려줘",
            ),
            ("내일 오전 9시에 회의", kst("2026-12-01T09:00:00"), "회의"),
            ("오늘 오후 3시 회의 준비", kst("2026-11-30T15:00:00"), "회의 준비"),
            ("모레 밤 12시 마감", kst("2026-12-02T00:00:00"), "마감"),
            ("내일 오전 12시 30분 x", kst("2026-12-01T00:30:00"), "x"),
            ("2시간 후 오븐 확인", kst("2026-11-30T14:00:00"), "오븐 확인"),
            ("30분 뒤에 전화", kst("2026-11-30T12:30:00"), "전화"),
            ("1시간30분후 회의", kst("2026-11-30T13:30:00"), "회의"),
        ] {
            check(input, trigger, prompt);
        }
    }

    #[track_caller]
    fn fails(input: &str, needle: &str) {
        let err = parse_when(input, now(), UtcOffset::KST).unwrap_err().to_string();
        assert!(err.contains(needle), "{input}: {err}");
        assert!(
            err.contains("accepted forms"),
            "{input}: the forms are listed: {err}"
        );
        assert!(
            err.contains("매일 오전 9시") && err.contains("cron \"0 9 * * 1\""),
            "{err}"
        );
    }

    #[test]
    fn errors_say_what_is_wrong_and_list_the_forms() {
        fails("", "could not read a time");
        fails("remind me later", "could not read a time");
        fails("sometime 9시 x", "could not read a time");
        fails("every 30s ping", "minimum of 1 minute");
        fails("every often ping", "every needs an interval");
        fails("daily ping", "expected a time of day");
        fails("daily 25:00 ping", "25:00 is not a time of day");
        fails("daily 13pm x", "hour must be 1 to 12");
        fails("매일 오후 13시 x", "hour must be 1 to 12");
        fails("매일 25시 x", "0 to 23");
        fails("매일 9시 61분 x", "0 to 59");
        fails("weekly someday 09:00 x", "not a list of days");
        fails("매주 월요일", "expected a time of day");
        fails("매주 9시 x", "요일을 알 수 없습니다");
        fails("at 2020-01-01 09:00 x", "already passed");
        fails("today 09:00 x", "already passed");
        fails("오늘 오전 9시 x", "already passed");
        fails("at someday x", "is not a date");
        fails("cron \"0 9 * *\" x", "has 4 fields");
        fails("cron \"0 9 * * 1 x", "closing quote");
        fails("매일 오전 9시", "nothing to do follows the time");
        fails("in 2h", "nothing to do");
    }
}
