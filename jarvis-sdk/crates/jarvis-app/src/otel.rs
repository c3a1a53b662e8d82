//! OpenTelemetry export of the GenAI spans (feature `otel`): a
//! `tracing-subscriber` layer that sends every span of
//! [`GENAI_TARGET`](jarvis_common::trace::GENAI_TARGET) over OTLP (HTTP/protobuf)
//! to a collector, Jaeger, Tempo, Langfuse or Phoenix.
//!
//! [`otel_layer_from_env`] builds nothing unless `OTEL_EXPORTER_OTLP_ENDPOINT`
//! (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, so a process without
//! it exports nothing and pays for nothing but the spans' interest checks.
//! The standard variables apply as the OpenTelemetry SDK reads them:
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`,
//! `OTEL_SERVICE_NAME` (default `jarvis`), `OTEL_RESOURCE_ATTRIBUTES`;
//! `OTEL_TRACES_EXPORTER=none` turns export off. Spans are batched on a
//! thread of the SDK's own; [`OtelGuard`] flushes them when dropped.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::registry::LookupSpan;

use jarvis_common::trace::GENAI_TARGET;

/// The variable naming the OTLP endpoint (`http://localhost:4318`); the
/// traces go to `<endpoint>/v1/traces`.
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// The variable naming the traces endpoint itself (used as it is).
pub const OTLP_TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("OpenTelemetry: could not build the OTLP exporter: {0}")]
pub struct OtelError(String);

/// Keeps the exporter running; flushes and stops it when dropped.
#[derive(Debug)]
pub struct OtelGuard {
    provider: SdkTracerProvider,
}

impl OtelGuard {
    /// Sends every span ended so far, waiting for the collector's answer.
    pub fn flush(&self) -> Result<(), OtelError> {
        self.provider.force_flush().map_err(|e| OtelError(e.to_string()))
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "OpenTelemetry: the last spans could not be sent");
        }
    }
}

/// A boxed layer for any registry-based subscriber.
pub type OtelLayer<S> = Box<dyn Layer<S> + Send + Sync + 'static>;

/// The export layer the standard `OTEL_*` variables describe, or `None`
/// when no endpoint is set (or `OTEL_TRACES_EXPORTER=none`).
pub fn otel_layer_from_env<S>() -> Result<Option<(OtelLayer<S>, OtelGuard)>, OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let off = std::env::var("OTEL_TRACES_EXPORTER").is_ok_and(|v| v.trim().eq_ignore_ascii_case("none"));
    if off || !(set(OTLP_ENDPOINT_ENV) || set(OTLP_TRACES_ENDPOINT_ENV)) {
        return Ok(None);
    }
    // The SDK reads the endpoint, headers and timeout from the variables.
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| OtelError(e.to_string()))?;
    Ok(Some(layer_for(exporter, set("OTEL_SERVICE_NAME"))))
}

/// The export layer sending to the traces endpoint `traces_url`
/// (`http://127.0.0.1:4318/v1/traces`), whatever the environment says
/// about endpoints; for tests and apps that configure it themselves.
pub fn otel_layer<S>(traces_url: &str) -> Result<(OtelLayer<S>, OtelGuard), OtelError>
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(traces_url)
        .build()
        .map_err(|e| OtelError(e.to_string()))?;
    Ok(layer_for(exporter, false))
}

fn layer_for<S>(exporter: SpanExporter, named: bool) -> (OtelLayer<S>, OtelGuard)
where
    S: Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    // `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` are read by the
    // resource's detectors; without a name the service is `jarvis`.
    let resource = if named {
        Resource::builder().build()
    } else {
        Resource::builder().with_service_name("jarvis").build()
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("jarvis");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(|meta| meta.target() == GENAI_TARGET));
    (Box::new(layer), OtelGuard { provider })
}
