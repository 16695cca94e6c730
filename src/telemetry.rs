//! Logging: the subscriber the binary installs, writing through [`Redacting`], which masks every
//! URL's query string, fragment and userinfo in each log line — whatever crate logged it (rmcp
//! and reqwest print whole URLs in their errors), at any level.

use std::borrow::Cow;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Layer, SubscriberExt};

/// `line` with every `http(s)://` URL's secrets masked (see [`crate::redact::mask_url`]).
pub fn redact_line(line: &str) -> Cow<'_, str> {
    let lower = line.to_ascii_lowercase();
    if !lower.contains("://") {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut rest = 0;
    let mut search = 0;
    while let Some(found) = lower[search..].find("://").map(|i| i + search) {
        // The scheme: letters, digits, `+ - .` right before `://`.
        let start = lower[..found]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
            .map(|i| i + 1)
            .unwrap_or(0);
        let end = line[found..]
            .find(|c: char| c.is_whitespace() || "\"'<>()[]{},\\`".contains(c))
            .map(|i| i + found)
            .unwrap_or(line.len());
        if start < found && start >= rest {
            out.push_str(&line[rest..start]);
            out.push_str(&crate::redact::mask_url(&line[start..end]));
            rest = end;
        }
        search = end.max(found + 3);
    }
    out.push_str(&line[rest..]);
    Cow::Owned(out)
}

/// A writer that redacts each write (the fmt layer writes one whole event per write).
pub struct Redacting<W>(pub W);

impl<W: Write> Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(redact_line(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Wraps a [`MakeWriter`] so everything written through it is redacted.
pub struct RedactingMakeWriter<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for RedactingMakeWriter<M> {
    type Writer = Redacting<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Redacting(self.0.make_writer())
    }
}

/// Installs the binary's subscriber: `RELAY_LOG` filter (default `info,rmcp=warn`), to stderr,
/// redacted; as text (colours only on a terminal) or one JSON object per line (the event's fields
/// at the top level, the request's id as `span.request_id`). The spans made for export
/// ([`crate::otel::TARGET`]) never show in the log.
pub fn init(format: crate::config::LogFormat) {
    use tracing_subscriber::util::SubscriberInitExt;
    tracing_subscriber::registry()
        .with(global_log_filter())
        .with(fmt_layer(format))
        .init();
}

/// `RELAY_LOG` (default `info,rmcp=warn`), never showing the spans made for export.
fn log_filter() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
        .unwrap_or_else(|_| DEFAULT_LOG.into())
        .add_directive(
            format!("{}=off", crate::otel::TARGET)
                .parse()
                .expect("a valid directive"),
        )
}

const DEFAULT_LOG: &str = "info,rmcp=warn";

/// `RELAY_LOG` as a `Targets` filter, when it names only targets and levels (the default does):
/// an `EnvFilter` takes a read lock and pushes a thread-local scope on every span enter and exit,
/// and the request's span is entered on every poll of a streaming run (1-2% of the relay's CPU per
/// event); a `Targets` filter does nothing there. `None` for span and field directives, which
/// need the `EnvFilter` ([`log_filter`]).
fn log_targets() -> Option<tracing_subscriber::filter::Targets> {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    let spec = std::env::var("RELAY_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_string());
    match spec.parse::<Targets>() {
        Ok(targets) if !spec.contains(['[', '{']) => {
            Some(targets.with_target(crate::otel::TARGET, LevelFilter::OFF))
        }
        _ => None,
    }
}

/// The log's filter as the whole subscriber's: [`log_targets`], else [`log_filter`].
fn global_log_filter() -> Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync> {
    match log_targets() {
        Some(targets) => targets.boxed(),
        None => log_filter().boxed(),
    }
}

/// [`init`], with an OpenTelemetry layer beside the log that sees only the spans made for
/// export, and those spans handed to `provider` (see [`crate::otel::start`]).
pub fn init_with_traces(
    format: crate::config::LogFormat,
    provider: &opentelemetry_sdk::trace::SdkTracerProvider,
) {
    use opentelemetry::trace::TracerProvider;
    use tracing_subscriber::util::SubscriberInitExt;
    let traces = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("responses-relay"))
        // No work per poll of an instrumented future: no busy/idle timing, no context attached.
        .with_tracked_inactivity(false)
        .with_context_activation(false)
        .with_location(false)
        .with_threads(false)
        .with_target(false)
        .with_level(false)
        // A `Targets` filter, not a closure: its interest is decided once per callsite and its
        // level bound (INFO) keeps every `debug!`/`trace!` callsite of the stack statically off.
        // A closure filter has neither, and cost ~1 µs more CPU per streamed event.
        .with_filter(
            tracing_subscriber::filter::Targets::new()
                .with_target(crate::otel::TARGET, tracing::Level::INFO),
        );
    tracing_subscriber::registry()
        .with(log_layer(format))
        .with(NoEnterExit(traces))
        .init();
}

/// A layer that is told nothing of spans being entered and exited, everything else passed on.
///
/// Around the OpenTelemetry layer: its per-layer filter looked every entered span up (the
/// request's log span, entered on every poll of a run's task, included) only to find it is not
/// one of its spans, and for its own spans the layer took a lock and the clock on each exit to
/// note an end time, which then became the span's end: a `chat` span ended when its stream
/// opened, not when it ended, and `invoke_agent` when its last child was made. Without enters
/// and exits (the layer tracks no busy time and activates no context), a span ends when it
/// closes: when the last handle to it, a child's included, is dropped.
struct NoEnterExit<L>(L);

impl<S: tracing::Subscriber, L: Layer<S>> Layer<S> for NoEnterExit<L> {
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.0.on_register_dispatch(subscriber)
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.0.on_layer(subscriber)
    }

    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        self.0.register_callsite(metadata)
    }

    fn enabled(
        &self,
        metadata: &tracing::Metadata<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        self.0.enabled(metadata, ctx)
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_new_span(attrs, id, ctx)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_record(
        &self,
        span: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_record(span, values, ctx)
    }

    fn on_follows_from(
        &self,
        span: &tracing::span::Id,
        follows: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_follows_from(span, follows, ctx)
    }

    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        self.0.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.0.on_event(event, ctx)
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.0.on_close(id, ctx)
    }

    fn on_id_change(
        &self,
        old: &tracing::span::Id,
        new: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.0.on_id_change(old, new, ctx)
    }

    // How the subscriber finds the per-layer filter inside and the OpenTelemetry layer's
    // context access (`OpenTelemetrySpanExt`).
    unsafe fn downcast_raw(&self, id: std::any::TypeId) -> Option<*const ()> {
        if id == std::any::TypeId::of::<Self>() {
            Some(self as *const Self as *const ())
        } else {
            // SAFETY: passed on as asked; the inner layer answers only for its own types.
            unsafe { self.0.downcast_raw(id) }
        }
    }
}

type LogLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

/// [`init`]'s log as a layer beside others (its filter its own).
fn log_layer(format: crate::config::LogFormat) -> LogLayer {
    match log_targets() {
        Some(targets) => fmt_layer(format).with_filter(targets).boxed(),
        None => fmt_layer(format).with_filter(log_filter()).boxed(),
    }
}

/// The log's lines on stderr, redacted: text (colours only on a terminal) or JSON.
fn fmt_layer<S>(format: crate::config::LogFormat) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer().with_writer(RedactingMakeWriter(io::stderr));
    match format {
        crate::config::LogFormat::Text => fmt.with_ansi(io::stderr().is_terminal()).boxed(),
        crate::config::LogFormat::Json => fmt
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
    }
}
