//! The Gemini request builder and chunk parser.

use super::*;
use std::collections::HashMap;

fn parse(chunks: &[Value]) -> Vec<ModelEvent> {
    let mut p = ChunkParser::new();
    let mut out = Vec::new();
    for c in chunks {
        p.parse(&c.to_string(), &mut out).unwrap();
    }
    assert!(p.finished());
    p.end(&mut out).unwrap();
    out
}

fn call(index: u32, name: &str, args: &str) -> ModelEvent {
    ModelEvent::ToolCall {
        index,
        id: None,
        name: Some(name.into()),
        arguments: args.into(),
    }
}

#[test]
fn thoughts_signed_parallel_calls_and_usage_become_model_events() {
    let out = parse(&[
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me ", "thought": true}]}}], "responseId": "r1"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "think.", "thought": true}]}}], "responseId": "r1"}),
        json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "SIG1"},
            {"functionCall": {"name": "g", "args": {}}}]},
            "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": 10, "cachedContentTokenCount": 4,
                "candidatesTokenCount": 5, "thoughtsTokenCount": 7, "totalTokenCount": 22}}),
    ]);
    let mut usage = Usage {
        input_tokens: 10,
        output_tokens: 12,
        total_tokens: 22,
        ..Usage::default()
    };
    usage.input_tokens_details.cached_tokens = 4;
    usage.output_tokens_details.reasoning_tokens = 7;
    assert_eq!(
        out,
        vec![
            ModelEvent::ResponseId("r1".into()),
            ModelEvent::ReasoningSummary("Let me ".into()),
            ModelEvent::ReasoningSummary("think.".into()),
            ModelEvent::SignedReasoning(
                json!({"gemini": "functionCall", "name": "f", "thoughtSignature": "SIG1"})
            ),
            call(0, "f", "{\"a\":1}"),
            call(1, "g", "{}"),
            ModelEvent::Usage(usage),
            ModelEvent::Finish(FinishReason::ToolCalls),
        ]
    );
}

#[test]
fn a_signed_last_text_part_is_kept_after_the_text() {
    let out = parse(&[
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}]}),
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "", "thoughtSignature": "T"}]}, "finishReason": "STOP"}]}),
    ]);
    assert_eq!(
        out,
        vec![
            ModelEvent::Text("Hi".into()),
            ModelEvent::SignedReasoning(
                json!({"gemini": "text", "text": "", "thoughtSignature": "T"})
            ),
            ModelEvent::Finish(FinishReason::Stop),
        ]
    );
}

#[test]
fn finish_reasons_and_blocked_prompts_map_and_a_stream_without_one_is_cut() {
    for (r, want) in [
        ("STOP", Some(FinishReason::Stop)),
        ("MAX_TOKENS", Some(FinishReason::Length)),
        ("SAFETY", Some(FinishReason::ContentFilter)),
        ("RECITATION", Some(FinishReason::ContentFilter)),
        ("PROHIBITED_CONTENT", Some(FinishReason::ContentFilter)),
        ("BLOCKLIST", Some(FinishReason::ContentFilter)),
        ("SPII", Some(FinishReason::ContentFilter)),
        ("OTHER", Some(FinishReason::Stop)),
        ("MALFORMED_FUNCTION_CALL", None),
    ] {
        assert_eq!(finish_reason(r, false), want, "{r}");
    }
    let out = parse(&[json!({"promptFeedback": {"blockReason": "SAFETY"},
        "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}})]);
    assert_eq!(
        out.last(),
        Some(&ModelEvent::Finish(FinishReason::ContentFilter))
    );
    let mut p = ChunkParser::new();
    p.parse(
        r#"{"candidates": [{"content": {"parts": [{"text": "x"}]}}]}"#,
        &mut Vec::new(),
    )
    .unwrap();
    assert!(matches!(p.end(&mut Vec::new()), Err(UpstreamError::Cut(_))));
}

#[test]
fn an_error_chunk_is_an_error_with_its_code() {
    let e = ChunkParser::new()
        .parse(
            r#"{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}"#,
            &mut Vec::new(),
        )
        .unwrap_err();
    assert!(
        matches!(&e, UpstreamError::Status { status: 503, message, .. } if message == "The model is overloaded."),
        "{e:?}"
    );
}

fn turn() -> TurnRequest {
    TurnRequest {
        model: "gemini-2.5-flash".into(),
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
fn the_body_merges_roles_and_puts_each_signature_back_on_its_part() {
    let mut req = turn();
    req.items = items(json!([
        {"type": "message", "role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look:"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "input_image", "image_url": "https://example.com/cat.webp"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "not json"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done: 1"}]},
        {"type": "reasoning", "id": "rs_2", "summary": []},
    ]));
    req.signed_reasoning.insert(
        2,
        vec![
            json!({"gemini": "thought", "text": "hm", "thoughtSignature": "TH"}),
            json!({"gemini": "functionCall", "name": "f", "thoughtSignature": "FC"}),
            json!({"type": "thinking", "thinking": "another provider's", "signature": "X"}),
        ],
    );
    req.signed_reasoning.insert(
        8,
        vec![json!({"gemini": "text", "text": " 1", "thoughtSignature": "TX"})],
    );
    req.reasoning_effort = Some("low".into());
    req.max_output_tokens = Some(100);
    req.temperature = Some(0.5);
    req.top_p = Some(0.9);
    req.tools = vec![super::super::FunctionDef {
        name: "f".into(),
        description: "F.".into(),
        parameters: std::sync::Arc::new(
            json!({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": false}),
        ),
        strict: None,
        custom: None,
    }];
    req.tool_choice = TurnToolChoice::Function("f".into());
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(
        b["systemInstruction"],
        json!({"parts": [{"text": "Be brief.\n\nUse tools."}]})
    );
    assert_eq!(
        b["generationConfig"],
        json!({"maxOutputTokens": 100, "temperature": 0.5, "topP": 0.9,
            "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
    );
    assert_eq!(
        b["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}})
    );
    assert_eq!(
        b["tools"],
        json!([{"functionDeclarations": [{"name": "f", "description": "F.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}]}])
    );
    assert_eq!(
        b["contents"],
        json!([
            {"role": "user", "parts": [
                {"text": "Look:"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"fileData": {"mimeType": "image/webp", "fileUri": "https://example.com/cat.webp"}}]},
            {"role": "model", "parts": [
                {"text": "hm", "thought": true, "thoughtSignature": "TH"},
                {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": "FC"},
                {"functionCall": {"name": "g", "args": {}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "f", "response": {"output": "one"}}},
                {"functionResponse": {"name": "g", "response": {"output": "two"}}}]},
            {"role": "model", "parts": [
                {"text": "Done:"},
                {"text": " 1", "thoughtSignature": "TX"}]},
        ])
    );
}

#[test]
fn effort_none_turns_thinking_off_and_no_tools_means_no_tool_config() {
    let mut req = turn();
    req.reasoning_effort = Some("none".into());
    req.text_format = Some(TextFormat::JsonObject);
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(
        b["generationConfig"],
        json!({"responseMimeType": "application/json", "thinkingConfig": {"thinkingBudget": 0}})
    );
    assert!(
        b.get("tools").is_none() && b.get("toolConfig").is_none(),
        "{b}"
    );
    req.reasoning_effort = None;
    req.text_format = None;
    req.instructions = None;
    let b = serde_json::to_value(request_body(&req)).unwrap();
    assert_eq!(b, json!({"contents": []}));
}

#[test]
fn the_path_encodes_the_model_and_asks_for_sse() {
    assert_eq!(
        path("models/gemini-2.5-flash"),
        "/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    );
    assert_eq!(
        path("fake?reasoning=2&x=a b"),
        "/models/fake%3Freasoning%3D2%26x%3Da%20b:streamGenerateContent?alt=sse"
    );
}

#[test]
fn models_that_generate_content_are_listed_by_their_short_id() {
    let m = model_object(
        json!({"name": "models/gemini-2.5-flash", "displayName": "Gemini 2.5 Flash",
        "supportedGenerationMethods": ["generateContent", "countTokens"]}),
    )
    .unwrap();
    assert_eq!(m["id"], "gemini-2.5-flash");
    assert_eq!(m["object"], "model");
    assert_eq!(m["owned_by"], "google");
    assert!(
        model_object(
            json!({"name": "models/embedding-001", "supportedGenerationMethods": ["embedContent"]})
        )
        .is_none()
    );
}

#[test]
fn a_user_message_before_the_function_responses_comes_after_them_in_their_turn() {
    let (_, contents) = contents(
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
        contents[2],
        json!({"role": "user", "parts": [
            {"functionResponse": {"name": "f", "response": {"output": "r1"}}},
            {"text": "prefer recent results"}]})
    );
}
