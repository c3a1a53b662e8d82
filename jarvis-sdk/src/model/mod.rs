//! The model layer: the [`Provider`] trait and its request and event
//! vocabulary, the shared tool-call assembler, and [`FauxProvider`].
//!
//! `model` knows no layer above it: no memory, sessions, tools or UI.

mod assembler;
mod error;
mod event;
mod faux;
mod message;
mod provider;
mod request;

pub use assembler::{ModelResponse, ResponseAssembler};
pub use error::ProviderError;
pub use event::{FinishReason, ProviderEvent};
pub use faux::{
    DEMO_SCRIPT, FAUX_SCRIPT_ENV, FauxError, FauxProvider, FauxReply, FauxRule, FauxScript, FauxToolCall,
    FauxWhen,
};
pub use message::{
    AssistantMessage, Message, Role, ThinkingBlock, ToolCall, ToolResultMessage, Usage, UserMessage,
};
pub use provider::{Provider, ProviderExt, ProviderStream};
pub use request::{ChatRequest, Purpose, RequestMetadata, ToolSpec};
