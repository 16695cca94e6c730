//! Which model server a turn goes to, and the model list over all of them.
//!
//! Invariant: `model: "NAME/REST"` with a configured upstream `NAME` goes there as `REST`; any
//! other model goes to the default upstream exactly as the client wrote it (so
//! `meta-llama/Llama-3.1-8B` still reaches a default vLLM). Routing never changes what the
//! Response echoes: the run keeps the client's model; only the upstream body carries `REST`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ModelEvent, ModelStream, TurnRequest, Upstream, UpstreamError};

/// Longest wait for one upstream's model list.
const MODELS_WAIT: Duration = Duration::from_secs(5);
/// How long a merged model list is served from memory.
const MODELS_TTL: Duration = Duration::from_secs(10);

/// Every configured upstream. Cheap to share (each upstream holds its own connection pool).
pub struct Upstreams {
    default: Upstream,
    /// The default's name when it is also one of `named`.
    default_name: Option<String>,
    named: Vec<(String, Upstream)>,
    /// The merged list of the last `GET /v1/models` made with the relay's own keys.
    models: Mutex<Option<(Instant, Vec<Value>)>>,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
}

impl Upstreams {
    pub fn new(
        default: Upstream,
        default_name: Option<String>,
        named: Vec<(String, Upstream)>,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> Self {
        Upstreams {
            default,
            default_name,
            named,
            models: Mutex::new(None),
            metrics,
        }
    }

    /// The name of the upstream `model` goes to (`default` for an unnamed default).
    pub fn name_for(&self, model: &str) -> &str {
        match self.named_route(model) {
            Some((name, _, _)) => name,
            None => self.default_name.as_deref().unwrap_or("default"),
        }
    }

    /// The upstream `model` goes to, and the model name it is sent as.
    pub fn route<'m>(&self, model: &'m str) -> (&Upstream, &'m str) {
        match self.named_route(model) {
            Some((_, upstream, rest)) => (upstream, rest),
            None => (&self.default, model),
        }
    }

    /// `NAME/REST` with a configured upstream `NAME`: its name, the upstream, and `REST`.
    fn named_route<'m>(&self, model: &'m str) -> Option<(&str, &Upstream, &'m str)> {
        let (prefix, rest) = model.split_once('/')?;
        let (name, upstream) = self.named.iter().find(|(n, _)| n == prefix)?;
        (!rest.is_empty()).then_some((name.as_str(), upstream, rest))
    }

    /// Starts one model turn at the upstream its model routes to, inside its `chat {model}`
    /// trace span (which lasts as long as the returned stream).
    pub async fn open(&self, req: &TurnRequest) -> Result<ModelStream, UpstreamError> {
        use tracing::Instrument;
        let (upstream, model) = self.route(&req.model);
        let span = crate::otel::chat_span(model, self.name_for(&req.model));
        crate::otel::content(&span, "gen_ai.input.messages", || {
            serde_json::to_string(&req.items).unwrap_or_default()
        });
        if let Some(instructions) = &req.instructions {
            crate::otel::content(&span, "gen_ai.system_instructions", || {
                serde_json::json!([{"type": "text", "content": instructions}]).to_string()
            });
        }
        let started = Instant::now();
        let opened = upstream.open(req, model).instrument(span.clone()).await;
        self.metrics
            .upstream_request(self.name_for(&req.model), started.elapsed());
        if span.is_disabled() {
            return opened;
        }
        match opened {
            Ok(stream) => Ok(Box::pin(Traced::new(stream, span))),
            Err(e) => {
                crate::otel::failed(&span, &e.kind());
                Err(e)
            }
        }
    }

    /// The prompt tokens of `req` from the count endpoint of the upstream its model routes to,
    /// where that upstream's API has one ([`Upstream::count_tokens`]).
    pub async fn count_tokens(&self, req: &TurnRequest) -> Result<Option<u64>, UpstreamError> {
        let (upstream, model) = self.route(&req.model);
        upstream.count_tokens(req, model).await
    }

    /// Every upstream's models, asked concurrently: a named upstream's as `NAME/id` (`owned_by:
    /// NAME`), the default's also bare. An upstream that fails is left out (logged); only when
    /// every one fails is the answer an error (the first one's).
    pub async fn models(&self, client_bearer: Option<&str>) -> Result<Vec<Value>, UpstreamError> {
        let cacheable = client_bearer.is_none();
        if cacheable
            && let Some((at, list)) = &*self.models.lock().expect("not poisoned")
            && at.elapsed() < MODELS_TTL
        {
            return Ok(list.clone());
        }
        let mut asked: Vec<(Option<&str>, &Upstream)> = Vec::new();
        if self.default_name.is_none() {
            asked.push((None, &self.default));
        }
        asked.extend(self.named.iter().map(|(n, u)| (Some(n.as_str()), u)));
        let lists = futures::future::join_all(
            asked
                .iter()
                .map(|(_, u)| u.models(client_bearer, MODELS_WAIT)),
        )
        .await;
        let (mut bare, mut prefixed) = (Vec::new(), Vec::new());
        let mut first_error = None;
        let mut listed = false;
        for ((name, _), list) in asked.iter().zip(lists) {
            match list {
                Ok(list) => {
                    listed = true;
                    if name.is_none() || *name == self.default_name.as_deref() {
                        bare.extend(list.iter().cloned());
                    }
                    if let Some(name) = name {
                        prefixed.extend(list.into_iter().filter_map(|m| with_prefix(name, m)));
                    }
                }
                Err(e) => {
                    tracing::warn!(upstream = name.unwrap_or("default"), error = %e,
                        "an upstream did not list its models: left out of /v1/models");
                    first_error.get_or_insert(e);
                }
            }
        }
        if !listed {
            return Err(first_error.expect("at least the default upstream was asked"));
        }
        bare.append(&mut prefixed);
        self.metrics
            .models_listed(bare.iter().filter_map(|m| m.get("id")?.as_str()));
        if cacheable {
            *self.models.lock().expect("not poisoned") = Some((Instant::now(), bare.clone()));
        }
        Ok(bare)
    }
}

/// A model object of upstream `name` as the relay lists it: `id` as `name/id`, `owned_by: name`.
fn with_prefix(name: &str, mut model: Value) -> Option<Value> {
    let o = model.as_object_mut()?;
    let id = o.get("id")?.as_str()?;
    let id = format!("{name}/{id}");
    o.insert("id".into(), Value::from(id));
    o.insert("owned_by".into(), Value::from(name));
    Some(model)
}

/// A model turn's stream that records on its `chat` span what the turn reported: the model
/// server's id of its answer, usage, finish reasons, a failure, and (with `--otel-capture-content`) the text it wrote. Only made when
/// traces are on; the span ends when the stream is dropped.
struct Traced {
    inner: ModelStream,
    span: tracing::Span,
    reasons: Vec<&'static str>,
    /// The turn's text, kept only when content is captured.
    text: Option<String>,
}

impl Traced {
    fn new(inner: ModelStream, span: tracing::Span) -> Traced {
        Traced {
            inner,
            span,
            reasons: Vec::new(),
            text: crate::otel::capture_content().then(String::new),
        }
    }

    fn note(&mut self, event: &Result<ModelEvent, UpstreamError>) {
        match event {
            Ok(ModelEvent::Usage(u)) => {
                self.span
                    .record("gen_ai.usage.input_tokens", u.input_tokens as i64);
                self.span
                    .record("gen_ai.usage.output_tokens", u.output_tokens as i64);
            }
            Ok(ModelEvent::Finish(reason)) => {
                self.reasons.push(reason.as_str());
                crate::otel::string_list(
                    &self.span,
                    "gen_ai.response.finish_reasons",
                    &self.reasons,
                );
            }
            Ok(ModelEvent::ResponseId(id)) => {
                self.span.record("gen_ai.response.id", id.as_str());
            }
            Ok(ModelEvent::Text(t)) => {
                if let Some(text) = &mut self.text {
                    text.push_str(t);
                }
            }
            Err(e) => crate::otel::failed(&self.span, &e.kind()),
            Ok(_) => {}
        }
    }
}

impl futures::Stream for Traced {
    type Item = Result<ModelEvent, UpstreamError>;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let next = this.inner.as_mut().poll_next(cx);
        match &next {
            std::task::Poll::Ready(Some(event)) => this.note(event),
            std::task::Poll::Ready(None) => {
                if let Some(text) = this.text.take() {
                    let finish = this.reasons.first().copied().unwrap_or("stop");
                    crate::otel::content(&this.span, "gen_ai.output.messages", || {
                        serde_json::json!([{"role": "assistant",
                            "parts": [{"type": "text", "content": text}],
                            "finish_reason": finish}])
                        .to_string()
                    });
                }
            }
            std::task::Poll::Pending => {}
        }
        next
    }
}
