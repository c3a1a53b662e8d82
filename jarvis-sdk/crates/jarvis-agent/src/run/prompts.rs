//! The instructions the loop injects without recording them, and the
//! fallback summary. The summary instruction is the literal of R-LOOP-6.

use jarvis_common::truncate_chars;

/// The literal overflow summary instruction (R-LOOP-6): "Do not call any more
/// tools; briefly summarise what has been done, the remaining steps, and the
/// answer so far".
pub const SUMMARY_INSTRUCTION: &str = "도구를 더 부르지 말고 한 것, 남은 단계, 지금까지의 답을 짧게 정리하라";

/// The line prefix a summary's answer-so-far line starts with (R-LOOP-18).
pub const ANSWER_SO_FAR: &str = "지금까지의 답:";

/// Summaries are cut to this many characters (R-LOOP-7).
pub const SUMMARY_MAX_CHARS: usize = 2_000;

/// The empty-answer nudge (R-LOOP-3).
pub const NUDGE_INSTRUCTION: &str = "방금 답이 비어 있었다. 도구를 부르거나 답을 써라. \
(Your last answer was empty: call a tool or write your answer.)";

/// The instruction of the wrap-up call made when a budget is reached.
pub(crate) fn budget_wrap_up(limit: &str) -> String {
    format!(
        "[예산 소진] {limit} 에 이르렀다. 도구를 더 부를 수 없다. 지금까지 알아낸 것으로 답하고, \
         못 한 일이 있으면 무엇인지 말하라. (The budget is reached: {limit}. No more tools: answer with \
         what you have found so far, and say what is left undone.)"
    )
}

/// The whole summary request: a format hint, then the literal instruction,
/// which ends the message.
pub(crate) fn summary_request() -> String {
    format!("'한 것:', '남은 단계:', '{ANSWER_SO_FAR}' 세 줄로 쓴다.\n{SUMMARY_INSTRUCTION}")
}

/// The instruction appended to every continuation step (R-LOOP-9).
pub(crate) fn continuation(summary: &str, remaining_steps: u32) -> String {
    format!(
        "[이어가기] 단계 예산을 다 써서 지금까지를 정리했다:\n{summary}\n\n\
         남은 단계만 작은 단위로 나눠 하라. 이미 한 일은 반복하지 마라. \
         남은 도구 호출 차례는 {remaining_steps}번이다.\n\
         (Continue: do only the remaining steps, in small units; do not repeat work already done; \
         {remaining_steps} tool-calling steps remain.)"
    )
}

/// The summary built from the history when the summary call fails or
/// answers empty (R-LOOP-8): the tools called this turn, with counts in
/// first-call order, and the last assistant text as the answer so far.
pub(crate) fn fallback_summary<'a>(
    tool_names: impl IntoIterator<Item = &'a str>,
    answer_so_far: Option<&str>,
) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for name in tool_names {
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    let total: usize = counts.iter().map(|(_, c)| c).sum();
    let done = if counts.is_empty() {
        "도구를 부르지 않았다".to_owned()
    } else {
        let list = counts
            .iter()
            .map(|(n, c)| {
                if *c == 1 {
                    (*n).to_owned()
                } else {
                    format!("{n} ×{c}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        format!("도구 {total}번 호출 ({})", truncate_chars(&list, 600))
    };
    let answer = match answer_so_far.map(str::trim).filter(|a| !a.is_empty()) {
        Some(a) => truncate_chars(&a.replace('\n', " "), 1_000).to_owned(),
        None => "아직 없음 (none yet)".to_owned(),
    };
    format!(
        "단계 예산 안에 끝내지 못해 기록으로 만든 기본 정리다. (Default summary built from the history.)\n\
         한 것: {done}\n\
         남은 단계: 확인되지 않음. 위 결과를 바탕으로 남은 일을 이어서 해야 한다.\n\
         {ANSWER_SO_FAR} {answer}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_request_ends_with_the_literal() {
        assert!(summary_request().ends_with(SUMMARY_INSTRUCTION));
    }

    #[test]
    fn fallback_lists_tools_and_has_an_answer_line() {
        let s = fallback_summary(["read_file", "list_dir", "read_file"], Some("partial\nresult"));
        assert!(s.contains("도구 3번 호출 (read_file ×2, list_dir)"), "{s}");
        assert!(s.lines().any(|l| l == "지금까지의 답: partial result"), "{s}");
        let empty = fallback_summary([], None);
        assert!(empty.lines().any(|l| l.starts_with(ANSWER_SO_FAR)));
        let long = fallback_summary(std::iter::repeat_n("t", 5000), Some(&"가".repeat(5000)));
        assert!(jarvis_common::char_len(&long) <= SUMMARY_MAX_CHARS);
    }

    #[test]
    fn continuation_states_the_remaining_steps() {
        let c = continuation("did X", 3);
        assert!(c.contains("did X") && c.contains("3번") && c.contains("3 tool-calling steps"));
    }
}
