//! Helpers shared by the loop tests: run one turn on a FauxProvider script
//! and keep everything needed to assert on it.

use std::sync::Arc;

use jarvis_sdk::agent::{
    AgentIdentity, AgentLoopConfig, LoopContext, LoopOutcome, ToolGate, ToolRegistry, run_agent_loop,
};
use jarvis_sdk::model::{ChatRequest, FauxProvider, Message, Provider, Purpose};
use jarvis_sdk::testing::RecordingAdapter;
use tokio_util::sync::CancellationToken;

/// One finished turn.
pub(crate) struct Run {
    pub(crate) outcome: LoopOutcome,
    pub(crate) ui: Arc<RecordingAdapter>,
    pub(crate) faux: Arc<FauxProvider>,
}

impl Run {
    /// Requests the provider received, in order.
    pub(crate) fn requests(&self) -> Vec<ChatRequest> {
        self.faux.requests()
    }

    /// Purposes of the requests, in order.
    pub(crate) fn purposes(&self) -> Vec<Purpose> {
        self.requests().iter().map(|r| r.purpose).collect()
    }

    /// Asserts `needle` appears neither in the recorded messages nor in any event.
    #[track_caller]
    pub(crate) fn assert_not_leaked(&self, needle: &str) {
        let recorded = serde_json::to_string(&self.outcome.new_messages).unwrap();
        assert!(
            !recorded.contains(needle),
            "{needle:?} leaked into the history: {recorded}"
        );
        let events = self.ui.jsonl();
        assert!(
            !events.contains(needle),
            "{needle:?} leaked into the events: {events}"
        );
        for (i, req) in self.requests().iter().enumerate() {
            let history = serde_json::to_string(req.recorded_messages()).unwrap();
            assert!(
                !history.contains(needle),
                "{needle:?} leaked into request {i}'s history"
            );
        }
    }
}

/// Builder for one turn.
pub(crate) struct Turn {
    pub(crate) faux: Arc<FauxProvider>,
    pub(crate) provider: Option<Arc<dyn Provider>>,
    pub(crate) config: AgentLoopConfig,
    pub(crate) tools: ToolRegistry,
    pub(crate) gate: ToolGate,
    pub(crate) ui: Arc<RecordingAdapter>,
    pub(crate) cancel: CancellationToken,
    pub(crate) prompt: String,
}

impl Turn {
    pub(crate) fn new(script: &str) -> Self {
        Self::with_faux(FauxProvider::from_yaml(script).expect("valid test script"))
    }

    pub(crate) fn with_faux(faux: FauxProvider) -> Self {
        Self {
            faux: Arc::new(faux),
            provider: None,
            config: AgentLoopConfig::default(),
            tools: ToolRegistry::new(),
            gate: ToolGate::new(),
            ui: Arc::new(RecordingAdapter::new()),
            cancel: CancellationToken::new(),
            prompt: "please help".into(),
        }
    }

    pub(crate) fn max_turns(mut self, n: u32) -> Self {
        self.config.max_turns = n;
        self
    }

    pub(crate) fn tool(mut self, tool: impl jarvis_sdk::agent::Tool + 'static) -> Self {
        self.tools.register(Arc::new(tool)).unwrap();
        self
    }

    pub(crate) async fn run(self) -> Run {
        let provider = self.provider.clone().unwrap_or_else(|| self.faux.clone());
        let ctx = LoopContext::new(provider)
            .with_tools(self.tools)
            .with_gate(self.gate)
            .with_ui(self.ui.clone())
            .with_identity(AgentIdentity {
                agent_id: "main".into(),
                agent_name: "J.A.R.V.I.S.".into(),
                session_id: "s1".into(),
            });
        let outcome = run_agent_loop(&ctx, &self.config, vec![Message::user(self.prompt)], &self.cancel)
            .await
            .expect("valid loop config");
        Run {
            outcome,
            ui: self.ui,
            faux: self.faux,
        }
    }
}
