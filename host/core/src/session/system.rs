//! What the model is told besides the conversation.

use crate::agent::Agent;

/// Appended as the last message on an agent's final allowed step, when no
/// tools are offered.
pub const MAX_STEPS: &str = "MAXIMUM STEPS REACHED. This agent has used every step it is allowed for \
this request, so tools are switched off until the user writes again. Answer now with text only: \
say what was done, what is left, and what you would do next.";

/// The system prompt for an agent working in `directory`.
pub fn prompt(agent: &Agent, directory: &str) -> Vec<String> {
    let base = agent.system.clone().unwrap_or_else(|| {
        "You are warden's agent. You work in the user's project through the tools you are offered; \
         every tool runs sandboxed and may be refused by the user's permission rules. Read before you \
         answer questions about files. When a tool fails, read its error and adjust; do not repeat a \
         call that failed the same way. Be brief and concrete."
            .to_string()
    });
    let env = format!(
        "<env>\nWorking directory: {directory}\nPlatform: {}\nAgent: {}\n</env>",
        std::env::consts::OS,
        agent.name
    );
    vec![base, env]
}
