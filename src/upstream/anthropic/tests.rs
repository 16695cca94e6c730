//! The request builder and the event parser of an Anthropic upstream, on hand-made turns and
//! streams.

use super::*;

fn parse(events: &[Value]) -> Vec<ModelEvent> {
    let mut p = EventParser::new();
    let mut out = Vec::new();
    for e in events {
        p.parse(&e.to_string(), &mut out).unwrap();
    }
    assert!(p.finished());
    out
}

#[test]
fn thinking_then_a_tool_call_gives_its_signed_block_and_the_call() {
    let out = parse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 10, "cache_read_input_tokens": 4, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "think."}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "SIG=="}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "redacted_thinking", "data": "OPAQUE"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "ping"}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"a\":"}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "g", "input": {}}}),
        json!({"type": "content_block_stop", "index": 3}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}}),
        json!({"type": "message_stop"}),
    ]);
    let call = |index, id: Option<&str>, name: Option<&str>, args: &str| ModelEvent::ToolCall {
        index,
        id: id.map(str::to_string),
        name: name.map(str::to_string),
        arguments: args.into(),
    };
    let mut usage = Usage {
        input_tokens: 14,
        output_tokens: 30,
        total_tokens: 44,
        ..Usage::default()
    };
    usage.input_tokens_details.cached_tokens = 4;
    assert_eq!(
        out,
        vec![
            ModelEvent::ResponseId("msg_1".into()),
            ModelEvent::ReasoningSummary("Let me ".into()),
            ModelEvent::ReasoningSummary("think.".into()),
            ModelEvent::SignedReasoning(
                json!({"type": "thinking", "thinking": "Let me think.", "signature": "SIG=="})
            ),
            ModelEvent::SignedReasoning(json!({"type": "redacted_thinking", "data": "OPAQUE"})),
            call(0, Some("toolu_1"), Some("f"), ""),
            call(0, None, None, "{\"a\":"),
            call(0, None, None, "1}"),
            call(1, Some("toolu_2"), Some("g"), ""),
            call(1, None, None, "{}"),
            ModelEvent::Usage(usage),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[test]
fn text_deltas_are_read_whole_and_a_delta_for_a_block_that_never_started_is_an_error() {
    let out = parse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "plain "}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a \"quote\"\n\u{e9}"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": null}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        json!({"type": "message_stop"}),
    ]);
    let texts: Vec<&str> = out
        .iter()
        .filter_map(|e| match e {
            ModelEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["plain ", "a \"quote\"\n\u{e9}"]);

    let mut p = EventParser::new();
    let err = p
        .parse(
            &json!({"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "x"}}).to_string(),
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(
        matches!(&err, UpstreamError::Protocol(m) if m.contains("content block 5")),
        "{err:?}"
    );
}

#[test]
fn stop_reasons_map_to_finish_reasons() {
    for (stop, want) in [
        ("end_turn", FinishReason::Stop),
        ("stop_sequence", FinishReason::Stop),
        ("max_tokens", FinishReason::Length),
        ("refusal", FinishReason::ContentFilter),
        ("tool_use", FinishReason::ToolCalls),
    ] {
        let out = parse(&[
            json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 1, "output_tokens": 1}}}),
            json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 2}}),
            json!({"type": "message_stop"}),
        ]);
        assert_eq!(out.last(), Some(&ModelEvent::Finish(want)), "{stop}");
    }
}

#[test]
fn an_error_event_is_an_error_with_anthropics_status() {
    let mut p = EventParser::new();
    let e = p
        .parse(
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(
        matches!(&e, UpstreamError::Status { status: 529, message, .. } if message == "Overloaded"),
        "{e:?}"
    );
    assert!(
        p.parse(r#"{"type": "content_block_delta", "index": 5, "delta": {"type": "text_delta", "text": "x"}}"#, &mut Vec::new())
            .is_err()
    );
}

fn turn() -> TurnRequest {
    TurnRequest {
        model: "claude".into(),
        instructions: Some("Be brief.".into()),
        items: Vec::new(),
        tools: Vec::new(),
        tool_choice: TurnToolChoice::Auto,
        parallel_tool_calls: true,
        max_output_tokens: None,
        temperature: None,
        top_p: None,
        text_format: None,
        reasoning_effort: None,
        user: None,
        client_bearer: None,
        responses_only: Default::default(),
        signed_reasoning: HashMap::new(),
    }
}

fn items(v: Value) -> Vec<InputItem> {
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_body_merges_roles_and_puts_signed_blocks_before_the_calls() {
    let mut req = turn();
    req.items = items(json!([
        {"type": "message", "role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "input_image", "image_url": "https://example.com/cat.jpg"}]},
        {"type": "message", "role": "user", "content": "and this"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call.1", "name": "f", "arguments": "{\"a\":1}"},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "call.1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "two"}]},
    ]));
    let block = json!({"type": "thinking", "thinking": "hm", "signature": "S"});
    req.signed_reasoning.insert(3, vec![block.clone()]);
    req.reasoning_effort = Some("low".into());
    req.tools = vec![super::super::FunctionDef {
        name: "f".into(),
        description: "F.".into(),
        parameters: std::sync::Arc::new(json!({"type": "object"})),
        strict: None,
        custom: None,
    }];
    req.tool_choice = TurnToolChoice::Function("f".into());
    req.parallel_tool_calls = false;
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(b["system"], "Be brief.\n\nUse tools.");
    assert_eq!(b["max_tokens"], 8192 + 2048);
    assert_eq!(
        b["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(b["stream"], true);
    assert_eq!(
        b["tool_choice"],
        json!({"type": "tool", "name": "f", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        b["tools"],
        json!([{"name": "f", "description": "F.", "input_schema": {"type": "object"}}])
    );
    assert_eq!(
        b["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "Look:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                // The turn before the last answer, and the conversation's end, are
                // prompt-cache breakpoints (`cache`).
                {"type": "text", "text": "and this", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                block,
                {"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "call_2", "name": "g", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "one"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "two"}],
                    "cache_control": {"type": "ephemeral"}}]},
        ])
    );
}

#[test]
fn max_tokens_bounds_the_thinking_budget() {
    let mut req = turn();
    req.max_output_tokens = Some(3000);
    req.reasoning_effort = Some("high".into());
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(
        (
            b["max_tokens"].clone(),
            b["thinking"]["budget_tokens"].clone()
        ),
        (json!(3000), json!(2999))
    );
    req.max_output_tokens = Some(500);
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert!(b.get("thinking").is_none(), "{b}");
    req.reasoning_effort = Some("none".into());
    req.max_output_tokens = None;
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
    assert!(
        b.get("thinking").is_none() && b.get("tools").is_none() && b.get("tool_choice").is_none()
    );
}

#[test]
fn a_user_message_before_the_tool_results_comes_after_them_in_their_message() {
    let (_, messages) = messages(
        None,
        &items(json!([
            {"type": "message", "role": "user", "content": "look it up"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "message", "role": "user", "content": "prefer recent results"},
            {"type": "function_call_output", "call_id": "c1", "output": "r1"},
        ])),
        |_| None,
    );
    assert_eq!(
        messages[2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": "r1"},
            {"type": "text", "text": "prefer recent results"}]})
    );
}
