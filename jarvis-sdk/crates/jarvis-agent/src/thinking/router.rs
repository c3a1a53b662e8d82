//! [`ThoughtRouter`]: decides, before a turn and without a model call,
//! whether thinking first is likely to help.
//!
//! Features of the request (each capped) and of its context, combined by a
//! logistic model into `p_think`; `think = p_think ≥ threshold`:
//!
//! | feature | weight |
//! |---|---|
//! | length: characters / 100, at most 4 | +0.55 each |
//! | questions (`?`, `？`), at most 3 | +0.35 each |
//! | multi-step wording (그리고/다음에/먼저/비교/계획/정리/분석/왜/어떻게/장단점, and then/first/compare/plan/steps/analyse/why/how/explain …), at most 3 | +1.5 each |
//! | tool wording (찾아/검색/계산/파일/실행/조회, find/search/calculate/file/run/look up …), at most 2 | +0.7 each |
//! | list items (commas), at most 3 | +0.45 each |
//! | a short greeting or thanks | −3.0 |
//! | an open loop is due | +0.8 |
//! | recent failures (errors, overflows), at most 3 | +0.6 each |
//! | bias | −2.1 |
//!
//! The weights were set by hand on the labelled table in the router's tests.

use unicode_normalization::{IsNormalized, UnicodeNormalization, is_nfc_quick};

/// The default threshold.
pub const DEFAULT_THINK_THRESHOLD: f32 = 0.5;

/// What the router looks at.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouterSignals<'a> {
    /// The (validated) request.
    pub prompt: &'a str,
    /// Open loops of the session that are due.
    pub due_loops: usize,
    /// Recent turns of the session that ended in an error or overflowed.
    pub recent_failures: usize,
}

/// The router's features of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RouteFeatures {
    /// Characters / 100, at most 4.
    pub length: f32,
    /// Question marks, at most 3.
    pub questions: f32,
    /// Multi-step cues, at most 3.
    pub multi_step: f32,
    /// Tool cues, at most 2.
    pub tools: f32,
    /// Items of a list (commas), at most 3.
    pub enumeration: f32,
    /// A short greeting or thanks.
    pub trivial: bool,
}

/// A decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Route {
    /// Whether to think.
    pub think: bool,
    /// The probability that thinking helps.
    pub p_think: f32,
    /// The features it was computed from.
    pub features: RouteFeatures,
}

/// The Thought Router; see the module docs.
#[derive(Debug, Clone, Copy)]
pub struct ThoughtRouter {
    threshold: f32,
}

impl Default for ThoughtRouter {
    fn default() -> Self {
        Self::new(DEFAULT_THINK_THRESHOLD)
    }
}

const MULTI_STEP: [&str; 32] = [
    "그리고",
    "다음에",
    "다음으로",
    "먼저",
    "그 다음",
    "그다음",
    "비교",
    "계획",
    "정리",
    "분석",
    "단계",
    "각각",
    "모두",
    "왜",
    "어떻게",
    "결과로",
    "까지 해",
    "장단점",
    "and then",
    "first",
    "then ",
    "compare",
    "plan",
    "step",
    "analy",
    "summar",
    "why",
    "how ",
    "each",
    "pros and cons",
    "trade-off",
    "explain",
];
const TOOLS: [&str; 18] = [
    "찾아",
    "검색",
    "계산",
    "파일",
    "실행",
    "조회",
    "알아봐",
    "확인해",
    "find",
    "search",
    "calculat",
    "file",
    "run ",
    "look up",
    "check",
    "fetch",
    "read",
    "write",
];
const TRIVIAL: [&str; 16] = [
    "안녕",
    "고마워",
    "감사",
    "좋아",
    "ㅋㅋ",
    "ㅎㅎ",
    "잘 자",
    "hi",
    "hello",
    "hey",
    "thanks",
    "thank you",
    "ok",
    "okay",
    "good morning",
    "bye",
];

fn cues(text: &str, list: &[&str]) -> usize {
    list.iter().filter(|cue| text.contains(*cue)).count()
}

impl ThoughtRouter {
    /// A router thinking when `p_think ≥ threshold`.
    pub fn new(threshold: f32) -> Self {
        Self { threshold }
    }

    /// The features of `prompt`.
    pub fn features(prompt: &str) -> RouteFeatures {
        // Text already in NFC (nearly every prompt) skips normalising.
        let text: String = if is_nfc_quick(prompt.chars()) == IsNormalized::Yes {
            prompt.chars().flat_map(char::to_lowercase).collect()
        } else {
            prompt.nfc().flat_map(char::to_lowercase).collect()
        };
        let chars = text.chars().count();
        let padded = format!("{text} ");
        RouteFeatures {
            length: (chars as f32 / 100.0).min(4.0),
            questions: (text.matches(['?', '？']).count() as f32).min(3.0),
            multi_step: (cues(&padded, &MULTI_STEP) as f32).min(3.0),
            tools: (cues(&padded, &TOOLS) as f32).min(2.0),
            enumeration: (text.matches([',', '、', '，']).count() as f32).min(3.0),
            trivial: chars <= 20 && cues(&text, &TRIVIAL) > 0,
        }
    }

    /// Decides for one request.
    pub fn route(&self, signals: &RouterSignals<'_>) -> Route {
        let f = Self::features(signals.prompt);
        let z = -2.1
            + 0.55 * f.length
            + 0.35 * f.questions
            + 1.5 * f.multi_step
            + 0.7 * f.tools
            + 0.45 * f.enumeration
            - if f.trivial { 3.0 } else { 0.0 }
            + if signals.due_loops > 0 { 0.8 } else { 0.0 }
            + 0.6 * signals.recent_failures.min(3) as f32;
        let p_think = 1.0 / (1.0 + (-z).exp());
        Route {
            think: p_think >= self.threshold,
            p_think,
            features: f,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Requests with the decision a thoughtful assistant would make.
    const TABLE: [(&str, bool); 36] = [
        ("안녕", false),
        ("고마워!", false),
        ("hi", false),
        ("thanks a lot", false),
        ("좋아", false),
        ("ok", false),
        ("지금 몇 시야?", false),
        ("What's 2+2?", false),
        ("오늘 날씨 어때?", false),
        ("Tell me a joke", false),
        ("이 단어 뜻이 뭐야?", false),
        ("What does NFC mean?", false),
        ("서울 SH 공고 하나만 찾아 줘", false),
        ("read a.txt", false),
        ("번역해 줘: good night", false),
        ("Say hello to KAREN", false),
        ("내 이름은 민수야", false),
        ("Remind me to call mom", false),
        (
            "서울과 경기의 청약 공고를 비교해서 예산에 맞는 걸 정리해 줘",
            true,
        ),
        ("먼저 파일을 읽고, 그 다음에 요약해서 계획을 세워 줘", true),
        (
            "Compare the three loan methods and explain which one fits a 30-year plan, step by step",
            true,
        ),
        (
            "Find the latest LH notices, then check which ones close this week and summarize them",
            true,
        ),
        (
            "1억 원을 4%로 30년 빌리면 원리금균등과 원금균등 중 뭐가 나아? 왜 그런지 분석해 줘",
            true,
        ),
        (
            "Why does my build fail? Look at the log file and figure out the cause, then plan a fix",
            true,
        ),
        (
            "프로젝트 폴더의 파일들을 각각 검사하고 문제를 모두 정리해 줘",
            true,
        ),
        (
            "How should I plan my move to Seoul? Compare neighbourhoods, budgets and commute times",
            true,
        ),
        (
            "Analyse these results and tell me what to do next, and then draft an email",
            true,
        ),
        (
            "KAREN 에게 공고를 찾아 달라고 하고, 그 결과로 대출 계산까지 해 줘",
            true,
        ),
        (
            "Write a script that reads the CSV file, computes totals per month, and plots them",
            true,
        ),
        ("어떤 순서로 청약을 준비해야 하는지 단계별로 계획을 짜 줘", true),
        ("What are the pros and cons of equal principal repayment?", true),
        (
            "Search for rental notices in Busan and compare them with Seoul's",
            true,
        ),
        ("먼저 예산을 정리하고 그다음에 맞는 공고를 찾아 줘", true),
        (
            "Explain how the overflow resume works and why it never ends empty-handed",
            true,
        ),
        ("이 문서의 핵심을 분석해서 세 줄로 정리해 줘", true),
        (
            "Please look up my profile, check my budget and find notices that fit",
            true,
        ),
    ];

    #[test]
    fn the_router_agrees_with_the_labelled_table() {
        let router = ThoughtRouter::default();
        let mut wrong = Vec::new();
        for (prompt, expected) in TABLE {
            let route = router.route(&RouterSignals {
                prompt,
                ..RouterSignals::default()
            });
            if route.think != expected {
                wrong.push(format!(
                    "{prompt:?}: p_think {:.2}, expected {expected}",
                    route.p_think
                ));
            }
        }
        let agreement = 1.0 - wrong.len() as f64 / TABLE.len() as f64;
        println!(
            "thought router agreement: {:.1}% on {} requests",
            agreement * 100.0,
            TABLE.len()
        );
        assert!(
            agreement >= 0.9,
            "agreement {agreement:.2}; disagreements:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn context_pushes_towards_thinking() {
        let router = ThoughtRouter::default();
        let plain = RouterSignals {
            prompt: "서울 SH 공고 하나만 찾아 줘",
            ..RouterSignals::default()
        };
        let base = router.route(&plain).p_think;
        let due = router
            .route(&RouterSignals {
                due_loops: 1,
                ..plain
            })
            .p_think;
        let failed = router
            .route(&RouterSignals {
                recent_failures: 2,
                ..plain
            })
            .p_think;
        assert!(due > base && failed > due);
        assert!(!ThoughtRouter::new(0.99).route(&plain).think);
        assert!(ThoughtRouter::new(0.0).route(&plain).think);
    }

    #[test]
    fn features_are_capped_and_count_characters() {
        let f = ThoughtRouter::features(&"가".repeat(1_000));
        assert_eq!(f.length, 4.0);
        let q = ThoughtRouter::features("? ? ? ? ?");
        assert_eq!(q.questions, 3.0);
        assert!(ThoughtRouter::features("안녕!").trivial);
        assert!(!ThoughtRouter::features("안녕, 오늘 할 일을 모두 정리하고 계획을 세워 줘").trivial);
    }
}
