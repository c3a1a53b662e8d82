//! The rule-based open-loop detector: finds promises and requests that carry
//! a time or a condition in Korean and English, works out when they are
//! due, and recognises cancelling utterances. No model call; it is also the
//! fallback when the model's judgement is unusable.
//!
//! A turn opens a loop when the person
//! - asks to be reminded or told (`알려 줘`, `리마인드`, `말해 줘`, `remind me`,
//!   `let me know when/if`, `notify me`, `ping me`, `follow up`, `tell me
//!   (when|if|tomorrow|next …)`), not in thanks or in the past tense
//!   (`알려줘서 고마워`, `reminded`);
//! - asks for something by a time (`금요일까지 … 해 줘`, `이번 달 말까지 …`);
//! - promises something with a time (`내일까지 답 줄게`, `I'll … by Friday`).
//!
//! Due times are read from the text relative to now, at a fixed UTC offset:
//! `N분/시간 후`, `in N minutes/hours/days`, `내일`/`tomorrow`, `모레`,
//! `다음 주`/`next week`, weekdays (`금요일`, `Friday`, `next Monday`), an
//! hour (`오전/오후/저녁 N시`, `at 5pm`, `at 9`), `N일`/`on the 25th`, and
//! `이번 달 말`/`end of the month`. A day without an hour is 09:00; a
//! deadline (`까지`, `by`) without an hour is 18:00. A loop with a condition
//! (`나오면`, `올라오면`, `when …`, `if …`) and no time has no due time.

use regex::Regex;
use std::sync::OnceLock;

use jarvis_common::{TimeZone, Timestamp};

/// What the detector found in one utterance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    /// A promise by the speaker (`false`: a request to be reminded or told).
    pub promise: bool,
    /// When it is due, if a time was given.
    pub due: Option<Timestamp>,
    /// The condition, if one was given (`SH 공고 나오면`).
    pub condition: Option<String>,
}

struct Patterns {
    remind: Regex,
    not_a_request: Regex,
    deadline_request: Regex,
    promise: Regex,
    time: Regex,
    condition: Regex,
    cancel: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |p: &str| Regex::new(p).expect("the open-loop patterns are valid");
        Patterns {
            remind: re(r"(?i)(알려\s*(줘|주세요|줄래|달라)|리마인드\s*해|말해\s*(줘|주세요)|깨워\s*(줘|주세요)|챙기라고|연락\s*(줘|주세요)|remind me|let me know (when|if|once|as soon)|notify me|ping me|follow up|tell me (when|if|once|next|tomorrow|on|at|in)|don't forget to remind)"),
            not_a_request: re(r"(?i)(알려\s*줘서|알려\s*주셔서|고마워|감사|reminded|thanks for|thank you for|무슨 뜻|what does|how do i|어떻게 써)"),
            deadline_request: re(r"(?i)((까지|by (monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|the end))[^?]*?(해\s*(줘|주세요)|보내\s*(줘|주세요)|확인해|정리해|please)|(해\s*(줘|주세요)|확인해\s*(줘|주세요)|보내\s*(줘|주세요))[^?]*까지)"),
            promise: re(r"(?i)((할게|줄게|드릴게|보낼게|할께|줄께)|i'll .+ (by|tomorrow|tonight|on|next|before)|i will .+ (by|tomorrow|tonight|on|next|before))"),
            time: re(r"(?i)(\d+\s*(분|시간|일)\s*(후|뒤)|in \d+ (minute|hour|day)s?|내일|모레|다음\s*주|이번\s*주|tomorrow|tonight|next (week|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|(월|화|수|목|금|토|일)요일|monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{1,2}\s*시|at \d{1,2}(:\d{2})?\s*(am|pm)?|\d{1,2}\s*일|the \d{1,2}(st|nd|rd|th)|이번\s*달\s*말|end of the month|오늘\s*(저녁|밤|오후)|this (evening|afternoon))"),
            condition: re(r"(?i)(\S+\s*)?(\S+\s+)?(나오면|올라오면|되면|끝나면|바뀌면|마감되면|열리면|when the [^,.?]+|if the [^,.?]+|once the [^,.?]+|when [a-z]+ [^,.?]+ (is|are) out)"),
            cancel: re(r"(?i)(취소|그만\s*알려|안\s*알려\s*줘도|알려\s*주지\s*마|필요\s*없어|됐어|never\s*mind|cancel|forget (it|about)|no longer need|stop remind|don't remind)"),
        }
    })
}

/// Whether `text` opens a loop, and its due time and condition.
pub fn detect(text: &str, now: Timestamp, zone: impl Into<TimeZone>) -> Option<Detected> {
    let p = patterns();
    if p.cancel.is_match(text) {
        return None;
    }
    let asks = p.remind.is_match(text) && !p.not_a_request.is_match(text);
    let deadline = p.deadline_request.is_match(text);
    let promise = p.promise.is_match(text) && p.time.is_match(text);
    if !(asks || deadline || promise) {
        return None;
    }
    let condition = p.condition.find(text).map(|m| m.as_str().trim().to_owned());
    let due = due_time(text, now, zone);
    if asks && due.is_none() && condition.is_none() && !p.time.is_match(text) {
        // "remind me" with neither a time nor a condition is still a promise
        // to remind; it is due at once.
        return Some(Detected {
            promise: false,
            due: Some(now),
            condition: None,
        });
    }
    Some(Detected {
        promise: promise && !asks,
        due,
        condition,
    })
}

/// Whether `text` has anything an open-loop judgement could act on: a
/// reminder, a deadline, a promise, a time, a condition or a cancellation.
/// Broader than [`detect`]; [`ModelJudge`](super::ModelJudge) asks the model
/// only about such texts, so ordinary turns cost no extra call.
pub fn has_cue(text: &str) -> bool {
    let p = patterns();
    p.cancel.is_match(text)
        || p.remind.is_match(text)
        || p.deadline_request.is_match(text)
        || p.promise.is_match(text)
        || p.time.is_match(text)
        || p.condition.is_match(text)
}

/// Whether `text` cancels something (a reminder, a request).
pub fn cancels(text: &str) -> bool {
    patterns().cancel.is_match(text)
}

const WEEKDAYS_KO: [&str; 7] = [
    "월요일",
    "화요일",
    "수요일",
    "목요일",
    "금요일",
    "토요일",
    "일요일",
];
const WEEKDAYS_EN: [&str; 7] = [
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
];

fn number_before(text: &str, unit: &str) -> Option<i64> {
    let re = Regex::new(&format!(r"(\d+)\s*{unit}")).ok()?;
    re.captures(text)?.get(1)?.as_str().parse().ok()
}

/// When `text` says something is due, relative to `now`, with days and
/// times of day in `zone` (the person's; a time in a spring-forward gap is
/// the first instant after it).
pub fn due_time(text: &str, now: Timestamp, zone: impl Into<TimeZone>) -> Option<Timestamp> {
    let zone = zone.into();
    let t = text.to_lowercase();
    let here = zone.civil(now);
    let minute_ms = 60_000;
    for (unit, ms) in [
        ("분\\s*(후|뒤)", minute_ms),
        ("시간\\s*(후|뒤)", 60 * minute_ms),
        ("일\\s*(후|뒤)", 1_440 * minute_ms),
    ] {
        if let Some(n) = number_before(&t, unit) {
            return Some(Timestamp::from_millis(now.as_millis() + n * ms));
        }
    }
    for (unit, ms) in [
        ("minute", minute_ms),
        ("hour", 60 * minute_ms),
        ("day", 1_440 * minute_ms),
    ] {
        if let Some(c) = Regex::new(&format!(r"in (\d+) {unit}")).ok()?.captures(&t) {
            let n: i64 = c[1].parse().ok()?;
            return Some(Timestamp::from_millis(now.as_millis() + n * ms));
        }
    }
    let deadline = t.contains("까지") || t.contains("by ");
    let default_hour = if deadline { 18 } else { 9 };
    let hour = hour_of_day(&t);
    let today = i64::from(here.day);
    let weekday = (0..7).find(|w| t.contains(WEEKDAYS_KO[*w]) || t.contains(WEEKDAYS_EN[*w]));
    let next_week = t.contains("다음 주") || t.contains("다음주");
    let day_offset: Option<i64> = if t.contains("모레") {
        Some(2)
    } else if t.contains("내일") || t.contains("tomorrow") {
        Some(1)
    } else if let Some(w) = weekday {
        let w = w as i64;
        let current = i64::from(here.weekday);
        Some(if next_week {
            // 다음 주 금요일: that weekday of the coming week (weeks start on Monday).
            7 - current + w
        } else {
            // 금요일, next Friday: the next time that weekday comes (today, for a deadline).
            match (w - current).rem_euclid(7) {
                0 if deadline => 0,
                0 => 7,
                ahead => ahead,
            }
        })
    } else if next_week || t.contains("next week") {
        Some(7)
    } else if t.contains("이번 달 말") || t.contains("이번달 말") || t.contains("end of the month") {
        let last = i64::from(Timestamp::days_in_month(here.year, here.month));
        Some(last - today)
    } else if let Some(day) = number_before(&t, "일(에|까지|\\s|$)").or_else(|| {
        Regex::new(r"the (\d{1,2})(st|nd|rd|th)")
            .ok()?
            .captures(&t)?
            .get(1)?
            .as_str()
            .parse()
            .ok()
    }) {
        if (1..=31).contains(&day) {
            let days = i64::from(Timestamp::days_in_month(here.year, here.month));
            Some(if day >= today {
                day - today
            } else {
                days - today + day
            })
        } else {
            None
        }
    } else if t.contains("오늘")
        || t.contains("tonight")
        || t.contains("this evening")
        || t.contains("this afternoon")
    {
        Some(0)
    } else {
        None
    };
    match (day_offset, hour) {
        (Some(days), h) => {
            let h = h.unwrap_or(if t.contains("tonight") || t.contains("저녁") {
                19
            } else {
                default_hour
            });
            zone.at_local(here.year, here.month, today + days, h, 0, 0)
        }
        (None, Some(h)) => {
            // An hour alone is the next time that hour comes round.
            let days = if h > here.hour || (h == here.hour && here.minute == 0) {
                0
            } else {
                1
            };
            zone.at_local(here.year, here.month, today + days, h, 0, 0)
        }
        (None, None) => None,
    }
}

/// The hour of day the text names, 0 to 23.
fn hour_of_day(t: &str) -> Option<u32> {
    let ko = Regex::new(r"(오전|아침|오후|저녁|밤)?\s*(\d{1,2})\s*시").ok()?;
    if let Some(c) = ko.captures(t) {
        let h: u32 = c[2].parse().ok()?;
        let pm = matches!(c.get(1).map(|m| m.as_str()), Some("오후" | "저녁" | "밤"));
        return (h <= 24).then_some(if pm && h < 12 { h + 12 } else { h % 24 });
    }
    let en = Regex::new(r"at (\d{1,2})(:\d{2})?\s*(am|pm)?").ok()?;
    if let Some(c) = en.captures(t) {
        let h: u32 = c[1].parse().ok()?;
        let pm = c.get(3).is_some_and(|m| m.as_str() == "pm");
        return (h <= 24).then_some(if pm && h < 12 { h + 12 } else { h % 24 });
    }
    if t.contains("아침") || t.contains("morning") {
        return Some(9);
    }
    None
}
