//! The model string's options (`NAME?k=v&k=v`): pacing, reasoning, refusal, finish reason,
//! Chat quirks, Anthropic's pings and redacted thinking, and the injected fault. An unknown option or value is an error (HTTP 400).

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fault {
    None,
    Status500,
    Status429,
    Status429Once,
    /// Anthropic's `overloaded_error` (HTTP 529), every time or once per model string.
    Status529,
    Status529Once,
    /// Gemini's `UNAVAILABLE` (HTTP 503), every time or once per model string.
    Status503,
    Status503Once,
    Status400,
    Cut,
    Malformed,
    NoDone,
    Stall,
    SlowHeaders,
    ErrorChunk,
}

/// Options from the model string's query part.
#[derive(Debug, Clone)]
pub(super) struct Opts {
    /// Pieces the answer text is streamed in (default 8).
    pub(super) deltas: usize,
    /// Sleep between chunks (before the headers with `fault=slow_headers`).
    pub(super) delay: Duration,
    /// Leading reasoning deltas (`think `).
    pub(super) reasoning: usize,
    pub(super) refusal: bool,
    pub(super) finish_length: bool,
    pub(super) usage_on_finish: bool,
    /// Chat: every tool call of a turn at `index` 0, told apart only by its `id` (as Ollama and
    /// SGLang stream parallel calls).
    pub(super) one_index: bool,
    pub(super) fault: Fault,
    /// Responses: the `phase` the assistant message carries (`commentary` or `final_answer`), as
    /// OpenAI's models mark their messages; none by default.
    pub(super) phase: Option<&'static str>,
    /// The fault hits only a turn that carries tool results (the model's turn after tools ran).
    pub(super) fault_after_tools: bool,
    /// Anthropic: `ping` events after `message_start` (each `delay` apart, as every frame is).
    pub(super) pings: usize,
    /// Anthropic: a `redacted_thinking` block after the thinking.
    pub(super) redacted: bool,
    /// Gemini: prompt tokens reported read from its cache (`cachedContentTokenCount`).
    pub(super) cached: u64,
    /// The stream pauses after its first frames until the gate of this name is opened
    /// (`FakeUpstream::open_gate`, or `POST /gates/NAME`); an open gate stays open.
    pub(super) hold: Option<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            deltas: 8,
            delay: Duration::ZERO,
            reasoning: 0,
            refusal: false,
            finish_length: false,
            usage_on_finish: false,
            one_index: false,
            fault: Fault::None,
            phase: None,
            fault_after_tools: false,
            pings: 0,
            redacted: false,
            cached: 0,
            hold: None,
        }
    }
}

/// Splits `NAME?k=v&k=v` into the name and its options.
pub(super) fn parse_model(model: &str) -> Result<(&str, Opts), String> {
    let (name, query) = match model.split_once('?') {
        Some((n, q)) => (n, q),
        None => (model, ""),
    };
    let mut o = Opts::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let num = || {
            v.parse::<u64>()
                .map_err(|_| format!("model option {k}={v}: not a number"))
        };
        let flag = || match v {
            "1" | "true" | "" => Ok(true),
            "0" | "false" => Ok(false),
            _ => Err(format!("model option {k}={v}: expected 1 or 0")),
        };
        match k {
            "deltas" => o.deltas = (num()? as usize).max(1),
            "delay_ms" => o.delay = Duration::from_millis(num()?),
            "reasoning" => o.reasoning = num()? as usize,
            "refusal" => o.refusal = flag()?,
            "usage_on_finish" => o.usage_on_finish = flag()?,
            "one_index" => o.one_index = flag()?,
            "fault_after_tools" => o.fault_after_tools = flag()?,
            "pings" => o.pings = num()? as usize,
            "redacted" => o.redacted = flag()?,
            "cached" => o.cached = num()?,
            "hold" => o.hold = Some(v.to_string()),
            "phase" => {
                o.phase = Some(match v {
                    "commentary" => "commentary",
                    "final_answer" => "final_answer",
                    _ => {
                        return Err(format!(
                            "model option phase={v}: expected commentary or final_answer"
                        ));
                    }
                })
            }
            "finish" => match v {
                "length" => o.finish_length = true,
                "stop" => o.finish_length = false,
                _ => return Err(format!("model option finish={v}: expected stop or length")),
            },
            "fault" => {
                o.fault = match v {
                    "status500" => Fault::Status500,
                    "status429" => Fault::Status429,
                    "status429_once" => Fault::Status429Once,
                    "status529" => Fault::Status529,
                    "status529_once" => Fault::Status529Once,
                    "status503" => Fault::Status503,
                    "status503_once" => Fault::Status503Once,
                    "status400" => Fault::Status400,
                    "cut" => Fault::Cut,
                    "malformed" => Fault::Malformed,
                    "no_done" => Fault::NoDone,
                    "stall" => Fault::Stall,
                    "slow_headers" => Fault::SlowHeaders,
                    "error_chunk" => Fault::ErrorChunk,
                    _ => return Err(format!("unknown fault '{v}'")),
                }
            }
            _ => return Err(format!("unknown model option '{k}'")),
        }
    }
    Ok((name, o))
}
