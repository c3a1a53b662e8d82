//! The shared assembler yields the same tool calls however the argument
//! deltas are split and however parallel calls interleave.

use jarvis_sdk::model::{FinishReason, ProviderEvent, ResponseAssembler, Usage};
use proptest::prelude::*;
use serde_json::{Value, json};

fn arg_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        "[가-힣a-z0-9 \"\\\\{}:,😀]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 12, 4, |inner| {
        prop::collection::btree_map("[a-z_가]{1,6}", inner, 0..4).prop_map(|m| json!(m))
    })
}

fn calls() -> impl Strategy<Value = Vec<(String, Value)>> {
    prop::collection::vec(
        (
            "[a-z_]{1,10}",
            prop::collection::btree_map("[a-z]{1,5}", arg_value(), 0..4).prop_map(|m| json!(m)),
        ),
        1..4,
    )
}

/// Splits `s` into pieces at the given character positions.
fn split(s: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (chars.len() + 1)).collect();
    points.push(0);
    points.push(chars.len());
    points.sort_unstable();
    points.dedup();
    points
        .windows(2)
        .map(|w| chars[w[0]..w[1]].iter().collect())
        .collect()
}

proptest! {
    #[test]
    fn splitting_and_interleaving_do_not_change_the_calls(
        calls in calls(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
        order_seed in any::<u64>(),
    ) {
        // Each call's pieces, in order; the first piece carries id and name.
        let mut queues: Vec<Vec<ProviderEvent>> = calls
            .iter()
            .enumerate()
            .map(|(index, (name, args))| {
                split(&args.to_string(), &cuts)
                    .into_iter()
                    .enumerate()
                    .map(|(n, piece)| ProviderEvent::ToolCallDelta {
                        index,
                        id: (n == 0).then(|| format!("id{index}")),
                        name: (n == 0).then(|| name.clone()),
                        arguments_delta: piece,
                    })
                    .rev()
                    .collect()
            })
            .collect();
        // Interleave the queues pseudo-randomly, keeping each call's order.
        let mut assembler = ResponseAssembler::new();
        let mut seed = order_seed;
        while queues.iter().any(|q| !q.is_empty()) {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let live: Vec<usize> = (0..queues.len()).filter(|i| !queues[*i].is_empty()).collect();
            let pick = live[(seed >> 33) as usize % live.len()];
            assembler.push(queues[pick].pop().unwrap());
        }
        assembler.push(ProviderEvent::Stop { reason: FinishReason::ToolUse, usage: Usage::default() });
        let response = assembler.finish().unwrap();
        prop_assert_eq!(response.tool_calls.len(), calls.len());
        for (i, (call, (name, args))) in response.tool_calls.iter().zip(&calls).enumerate() {
            prop_assert_eq!(&call.id, &format!("id{i}"));
            prop_assert_eq!(&call.name, name);
            prop_assert_eq!(&call.arguments, args);
        }
    }
}
