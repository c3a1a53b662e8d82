//! The [`Provider`] trait: one streaming entry point per model service.

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use std::fmt::Debug;

use super::assembler::{ModelResponse, ResponseAssembler};
use super::error::ProviderError;
use super::event::ProviderEvent;
use super::request::ChatRequest;

/// The stream a provider returns.
pub type ProviderStream = BoxStream<'static, Result<ProviderEvent, ProviderError>>;

/// A model service (R-MODEL-1): one streaming entry point.
///
/// The stream yields deltas and ends with one [`ProviderEvent::Stop`]; an
/// `Err` item ends the call. Implementations hold their configuration and
/// HTTP client and are shared as `Arc<dyn Provider>`.
pub trait Provider: Send + Sync + Debug {
    /// Starts one model call.
    fn stream(&self, request: ChatRequest) -> ProviderStream;

    /// A short name for logs (`openai`, `anthropic`, `ollama`, `faux`).
    fn name(&self) -> &str;
}

/// Helpers for every [`Provider`].
pub trait ProviderExt: Provider {
    /// Runs one call to the end and assembles the answer.
    fn complete(&self, request: ChatRequest) -> BoxFuture<'static, Result<ModelResponse, ProviderError>> {
        let mut stream = self.stream(request);
        let mut assembler = ResponseAssembler::for_provider(self.name());
        Box::pin(async move {
            while let Some(event) = stream.next().await {
                assembler.push(event?);
            }
            assembler.finish()
        })
    }
}

impl<P: Provider + ?Sized> ProviderExt for P {}
