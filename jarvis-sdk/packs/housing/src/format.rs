//! Text the housing tools return: amounts in 원 with thousands separators
//! and notice lists a model can quote from without guessing.

use super::notice::{Notice, NoticeQuery};

/// `amount` rounded to the nearest won, as `"477,415원"`.
pub(crate) fn won(amount: f64) -> String {
    let rounded = amount.round();
    let negative = rounded < 0.0;
    // Amounts are validated far below 2^53, so the cast is exact.
    let digits = (rounded.abs() as u64).to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 4);
    if negative {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out.push('원');
    out
}

/// The conditions of a query in words: `지역=서울, 키워드=행복주택`.
pub(crate) fn describe_query(query: &NoticeQuery) -> String {
    let mut parts = Vec::new();
    if let Some(region) = query.region() {
        parts.push(format!("지역={region}"));
    }
    if let Some(keyword) = query.keyword() {
        parts.push(format!("키워드={keyword}"));
    }
    parts.push(format!("최대 {}건", query.effective_limit()));
    parts.join(", ")
}

/// One notice as an indented block, numbered `n`.
pub(crate) fn notice_block(n: usize, notice: &Notice) -> String {
    let sample = if notice.sample { " (샘플 데이터)" } else { "" };
    let mut lines = vec![format!("{n}. {}{sample}", notice.title)];
    lines.push(format!(
        "   - 종류: {} | 지역: {}",
        or_unknown(&notice.kind),
        or_unknown(&notice.region)
    ));
    lines.push(format!(
        "   - 공고일: {} | 마감일: {} | 상태: {}",
        notice.posted.as_deref().unwrap_or("정보 없음"),
        notice.closes.as_deref().unwrap_or("정보 없음"),
        or_unknown(&notice.status)
    ));
    let mut money = Vec::new();
    if let Some(deposit) = notice.deposit {
        money.push(format!("보증금 {}부터", won(deposit as f64)));
    }
    if let Some(rent) = notice.monthly_rent {
        money.push(format!("월 임대료 {}부터", won(rent as f64)));
    }
    if let Some(price) = notice.price {
        money.push(format!("분양가 {}부터", won(price as f64)));
    }
    if !money.is_empty() {
        lines.push(format!("   - 금액: {}", money.join(", ")));
    }
    lines.push(format!(
        "   - 링크: {}",
        notice.url.as_deref().unwrap_or("정보 없음")
    ));
    lines.push(format!(
        "   - 출처: {} ({}), 공고 ID {}",
        notice.source,
        notice.source.korean_name(),
        notice.id
    ));
    lines.join("\n")
}

fn or_unknown(text: &str) -> &str {
    if text.trim().is_empty() {
        "정보 없음"
    } else {
        text
    }
}

/// The answer of a notice look-up: a header naming the source and the
/// conditions, then one block per notice, or a plain "no notice matched".
pub(crate) fn notice_list(source: &str, query: &NoticeQuery, notices: &[Notice]) -> String {
    let conditions = describe_query(query);
    if notices.is_empty() {
        return format!(
            "조건에 맞는 공고가 없습니다 (no notice matched). 출처: {source}. 조건: {conditions}. \
             다른 지역이나 키워드로 다시 찾을 수 있습니다."
        );
    }
    let mut out = format!(
        "{source}에서 찾은 공고 {}건 (조건: {conditions}, 최근 공고부터):",
        notices.len()
    );
    if notices.iter().any(|n| n.sample) {
        out.push_str("\n※ 샘플 데이터입니다: 실제 공고가 아니라 오프라인 시연용 예시입니다.");
    }
    for (i, notice) in notices.iter().enumerate() {
        out.push_str("\n\n");
        out.push_str(&notice_block(i + 1, notice));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn won_groups_thousands_and_rounds() {
        assert_eq!(won(477_415.295), "477,415원");
        assert_eq!(won(611_111.5), "611,112원");
        assert_eq!(won(0.0), "0원");
        assert_eq!(won(999.0), "999원");
        assert_eq!(won(1000.0), "1,000원");
        assert_eq!(won(120_000_000.0), "120,000,000원");
        assert_eq!(won(-1234.0), "-1,234원");
    }
}
