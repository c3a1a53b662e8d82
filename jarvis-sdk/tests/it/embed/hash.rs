//! The offline `HashEmbedder`: fixed vectors, unit length, Korean particles
//! and English inflections, and retrieval on a small labelled set.

use jarvis_sdk::model::{EmbedRole, Embedder, EmbedderExt, HashEmbedder, cosine};
use std::sync::Arc;

fn sim(e: &HashEmbedder, a: &str, b: &str) -> f32 {
    cosine(&e.embed_text(a), &e.embed_text(b))
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

/// The non-zero entries as `index:value` with 4 decimals.
fn sparse(v: &[f32]) -> String {
    v.iter()
        .enumerate()
        .filter(|(_, x)| **x != 0.0)
        .map(|(i, x)| format!("{i}:{x:.4}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn vectors_are_fixed_across_runs_and_platforms() {
    // A change of hash, features or weights changes these; then raise the
    // embedder's version so stored vectors are recomputed.
    let e = HashEmbedder::default();
    assert_eq!(e.name(), "hash-v1-512");
    assert_eq!(Embedder::dimensions(&e), Some(512));
    insta::assert_snapshot!("hash_fixed_vectors", {
        ["서울", "Run", "공고를 찾아줘"]
            .iter()
            .map(|t| format!("{t}: {}", sparse(&e.embed_text(t))))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let small = HashEmbedder::with_dimensions(64).unwrap();
    assert_eq!(small.name(), "hash-v1-64");
    assert_eq!(small.embed_text("서울").len(), 64);
}

#[test]
fn vectors_have_unit_length_or_are_zero() {
    let e = HashEmbedder::default();
    for text in [
        "서울",
        "a",
        "The quick brown fox jumps over the lazy dog",
        "서울에서 SH 행복주택 공고를 찾아줘 😀",
        &"아주 긴 문장 ".repeat(500),
        "日本語のテキストも大丈夫",
        "ÀÉÎÕÜ café naïve",
    ] {
        let v = e.embed_text(text);
        assert_eq!(v.len(), 512);
        assert!(v.iter().all(|x| x.is_finite()), "{text}");
        assert!((norm(&v) - 1.0).abs() < 1e-4, "{text}: {}", norm(&v));
    }
    for text in ["", "   ", "?!…—", "😀🎉", "\u{0}\u{7}\n\t"] {
        let v = e.embed_text(text);
        assert!(v.iter().all(|x| *x == 0.0), "{text:?} gives a zero vector");
        assert_eq!(cosine(&v, &e.embed_text("서울")), 0.0);
        assert_eq!(cosine(&v, &v), 0.0);
    }
}

#[test]
fn equivalent_forms_give_equal_vectors() {
    let e = HashEmbedder::default();
    let same = |a: &str, b: &str| assert_eq!(e.embed_text(a), e.embed_text(b), "{a} / {b}");
    same("Hello, World!", "hello world");
    same("서울 공고", "  서울,  공고!! ");
    // Decomposed Hangul (NFD, as macOS file names have it) and full-width letters.
    same("\u{1109}\u{1165}\u{110b}\u{116e}\u{11af} ＳＨ", "서울 SH");
    // Word order does not matter.
    same("공고 서울", "서울 공고");
}

#[test]
fn korean_particles_and_endings_do_not_hide_the_match() {
    let e = HashEmbedder::default();
    let unrelated = "내일 아침 일곱 시에 깨워 줘";
    for (query, memory) in [
        ("서울 공고", "서울에서 공고를"),
        ("서울 공고", "서울에서 새 공고를 찾아줘"),
        ("공고 정리", "공고를 정리해줘"),
        ("대출 금리", "대출은 금리가 낮을수록"),
        ("강아지 예방접종", "강아지의 예방접종이 밀려 있다"),
        ("SH 공고", "SH의 공고는"),
    ] {
        let related = sim(&e, query, memory);
        let other = sim(&e, query, unrelated);
        assert!(related > 0.4, "{query} / {memory}: {related}");
        assert!(related > other + 0.3, "{query} / {memory}: {related} vs {other}");
    }
}

#[test]
fn english_inflections_do_not_hide_the_match() {
    let e = HashEmbedder::default();
    let unrelated = "Booked a table for two at the Italian place";
    for (query, memory) in [
        ("apply for housing", "applied for the housing lottery"),
        ("run every morning", "the user runs every morning"),
        ("saved notices", "saving the notice"),
        ("mortgage rate comparison", "compared mortgage rates"),
        ("renamed photos", "renaming the photo"),
    ] {
        let related = sim(&e, query, memory);
        let other = sim(&e, query, unrelated);
        assert!(related > 0.4, "{query} / {memory}: {related}");
        assert!(related > other + 0.3, "{query} / {memory}: {related} vs {other}");
    }
}

#[test]
fn particles_alone_do_not_make_texts_alike() {
    let e = HashEmbedder::default();
    let s = sim(&e, "서울에서 공고를", "부산에서 대출을");
    assert!(s < 0.1, "{s}");
    let s = sim(&e, "the price of the house", "the color of the sky");
    assert!(s < 0.1, "{s}");
}

/// Memories and, for each, a query sharing its wording in another form:
/// particles and endings attached or dropped, inflections, word order,
/// partial phrases.
const KOREAN: &[(&str, &str)] = &[
    ("사용자는 서울 강남구에 살고 있다.", "사용자 사는 곳 강남구"),
    ("주인님은 매운 음식을 싫어하신다.", "매운 음식 싫어하는지"),
    (
        "SH 행복주택 공고를 서울에서 찾아 정리했다.",
        "서울 행복주택 SH 공고",
    ),
    (
        "LH 국민임대 청약 일정을 캘린더에 등록했다.",
        "LH 청약 일정을 등록했나",
    ),
    (
        "주택담보대출 금리를 연 4.2%로 계산했다.",
        "주택담보대출 금리 계산",
    ),
    (
        "매주 월요일 아침 아홉 시에 팀 회의가 있다.",
        "월요일 팀 회의 시간",
    ),
    ("딸의 생일은 5월 14일이다.", "딸 생일이 언제지"),
    ("전세 보증금은 3억 원으로 예산을 잡았다.", "전세 예산 보증금"),
    (
        "파이썬 스크립트로 엑셀 파일을 정리하는 방법을 알려 줬다.",
        "엑셀 파일 정리 파이썬",
    ),
    ("다음 주 금요일에 부산으로 출장을 간다.", "부산 출장 가는 날"),
    ("혈압약을 매일 아침 식후에 복용한다.", "혈압약 복용"),
    (
        "신혼부부 특별공급 자격 조건을 확인했다.",
        "신혼부부 특별공급 자격",
    ),
    (
        "사용자가 가장 좋아하는 커피는 아이스 아메리카노다.",
        "좋아하는 커피가 뭐였지",
    ),
    (
        "자동차 보험 갱신 기한은 7월 말이다.",
        "자동차 보험 갱신은 언제까지",
    ),
    (
        "영어 회화 학원을 화요일과 목요일 저녁에 다닌다.",
        "영어 회화 학원 다니는 요일",
    ),
    ("아파트 관리비가 지난달보다 많이 올랐다.", "관리비가 올랐어"),
    (
        "원리금균등상환 방식으로 대출 상환 계획을 세웠다.",
        "대출 상환 계획을 원리금균등으로",
    ),
    ("강아지 이름은 콩이이고 예방접종이 밀려 있다.", "콩이 예방접종"),
    (
        "회사 노트북 비밀번호 변경 주기는 90일이다.",
        "노트북 비밀번호 변경 주기",
    ),
    (
        "경기도 성남시 임대주택 모집공고를 알림으로 설정했다.",
        "성남시 임대주택 모집공고 알림",
    ),
];

const ENGLISH: &[(&str, &str)] = &[
    (
        "The user prefers window seats on long flights.",
        "window seat preference for flights",
    ),
    (
        "Booked a dentist appointment for March 3rd at 10 am.",
        "dentist appointments in March",
    ),
    (
        "Set up a weekly reminder to water the plants every Sunday.",
        "reminder for watering plants",
    ),
    (
        "Compared fixed and variable mortgage rates from three banks.",
        "mortgage rate comparison between banks",
    ),
    (
        "The user's daughter plays the violin in the school orchestra.",
        "daughter playing violin",
    ),
    (
        "Wrote a Rust script that renames photos by their capture date.",
        "rust script renaming photos by date",
    ),
    (
        "The user is allergic to peanuts and shellfish.",
        "peanut and shellfish allergy",
    ),
    (
        "Renewed the car insurance policy with a higher deductible.",
        "car insurance renewal deductible",
    ),
    (
        "Summarized the quarterly sales report for the marketing team.",
        "quarterly sales reports summary",
    ),
    (
        "Cancelled the gym membership because of the price increase.",
        "why did I cancel my gym membership",
    ),
    (
        "The user runs five kilometers every morning before work.",
        "running kilometers every morning",
    ),
    (
        "Tracked the package shipped from Seattle; delivery expected Friday.",
        "where is the package from Seattle",
    ),
    (
        "Applied for the housing lottery in Seongnam.",
        "housing lottery application Seongnam",
    ),
    (
        "Migrated the blog from WordPress to a static site generator.",
        "blog migration from WordPress",
    ),
    (
        "The user's favorite restaurant is a small ramen shop downtown.",
        "favourite ramen restaurant",
    ),
    (
        "Paid the electricity bill and set up automatic payments.",
        "automatic payment of electricity bills",
    ),
    (
        "Researched noise-cancelling headphones under 300 dollars.",
        "noise cancelling headphone research",
    ),
    (
        "Planned a weekend hiking trip to Bukhansan with friends.",
        "hiking trip Bukhansan weekend",
    ),
    (
        "Backed up the family photos to an external hard drive.",
        "backup of family photos",
    ),
    (
        "Translated the lease agreement into English for review.",
        "lease agreement translation",
    ),
];

/// Share of queries whose memory is among the `k` most similar of all
/// memories (both languages).
async fn hit_rate(embedder: Arc<dyn Embedder>, set: &[(&str, &str)], k: usize) -> f32 {
    let memories: Vec<String> = KOREAN.iter().chain(ENGLISH).map(|(m, _)| m.to_string()).collect();
    let vectors = embedder
        .embed(memories.clone(), EmbedRole::Document)
        .await
        .unwrap();
    let mut hits = 0;
    for (memory, query) in set {
        let q = embedder.embed_one(*query, EmbedRole::Query).await.unwrap();
        let mut scored: Vec<(f32, &String)> = vectors.iter().map(|v| cosine(&q, v)).zip(&memories).collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        if scored[..k].iter().any(|(_, m)| m == memory) {
            hits += 1;
        } else {
            println!("miss: {query} → {:?}", &scored[..k]);
        }
    }
    hits as f32 / set.len() as f32
}

#[tokio::test]
async fn recall_finds_memories_worded_another_way() {
    let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::default());
    let (ko3, en3) = (
        hit_rate(embedder.clone(), KOREAN, 3).await,
        hit_rate(embedder.clone(), ENGLISH, 3).await,
    );
    let (ko1, en1) = (
        hit_rate(embedder.clone(), KOREAN, 1).await,
        hit_rate(embedder.clone(), ENGLISH, 1).await,
    );
    println!("top-3: ko {ko3:.2}, en {en3:.2}; top-1: ko {ko1:.2}, en {en1:.2}");
    assert!(ko3 >= 0.95 && en3 >= 0.95, "top-3: ko {ko3}, en {en3}");
    assert!(ko1 >= 0.85 && en1 >= 0.85, "top-1: ko {ko1}, en {en1}");
}

#[tokio::test]
async fn the_trait_embeds_batches_in_order() {
    let e = HashEmbedder::default();
    let embedder: Arc<dyn Embedder> = Arc::new(e.clone());
    assert!(
        embedder
            .embed(Vec::new(), EmbedRole::Document)
            .await
            .unwrap()
            .is_empty()
    );
    let texts = vec!["서울".to_string(), String::new(), "run".to_string()];
    let vectors = embedder.embed(texts.clone(), EmbedRole::Document).await.unwrap();
    let one_by_one: Vec<Vec<f32>> = texts.iter().map(|t| e.embed_text(t)).collect();
    assert_eq!(vectors, one_by_one);
    assert!(HashEmbedder::with_dimensions(0).is_err());
    assert!(
        HashEmbedder::with_dimensions(1 << 30)
            .unwrap_err()
            .to_string()
            .contains("hash embedder: dimensions must be between")
    );
}
