//! The scripted provider's usage estimate, for a turn whose cassette gives
//! none: counted from the conversation's text, and counted once per message
//! across a conversation's requests, so a step's cost does not grow with
//! the session's length.

use std::sync::Arc;

use warden_protocol::{ChatMessage, LlmRequest, Usage};

use super::Turn;

/// About four characters a token, so step-finish parts carry plausible
/// numbers. `chars` is the conversation's size ([`Counted::update`]).
pub(super) fn estimate_usage(turn: &Turn, request: &LlmRequest, chars: usize) -> Usage {
    let input_chars = request.system.iter().map(|s| s.len()).sum::<usize>() + chars;
    let output_chars = turn.text.as_ref().map_or(0, |t| t.len())
        + turn.reasoning.as_ref().map_or(0, |t| t.len())
        + turn
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.as_ref().map_or(0, |a| a.to_string().len()))
            .sum::<usize>();
    Usage {
        input: input_chars.div_ceil(4) as u64,
        output: output_chars.div_ceil(4) as u64,
        reasoning: turn
            .reasoning
            .as_ref()
            .map_or(0, |t| t.len().div_ceil(4) as u64),
        ..Usage::default()
    }
}

/// What a conversation's last request counted of its messages, so the next
/// request, which extends it, counts only the messages it adds.
#[derive(Default)]
pub(super) struct Counted {
    /// How many messages were counted, and their characters.
    messages: usize,
    chars: usize,
    /// The first and the last message counted: held, so their addresses
    /// cannot be taken by other messages while they are compared.
    ends: Option<(Arc<ChatMessage>, Arc<ChatMessage>)>,
}

impl Counted {
    /// The characters of `messages`, counting again from the start unless
    /// they begin with what was counted last time (the same first and last
    /// messages at the same places: a conversation compacted, edited or of
    /// another request starts over).
    pub(super) fn update(&mut self, messages: &[Arc<ChatMessage>]) -> usize {
        let extends = self.ends.as_ref().is_some_and(|(first, last)| {
            messages.len() >= self.messages
                && messages.first().is_some_and(|m| Arc::ptr_eq(m, first))
                && Arc::ptr_eq(&messages[self.messages - 1], last)
        });
        if !extends {
            self.messages = 0;
            self.chars = 0;
        }
        self.chars += messages[self.messages..]
            .iter()
            .map(|m| message_chars(m))
            .sum::<usize>();
        self.messages = messages.len();
        self.ends = match (messages.first(), messages.last()) {
            (Some(first), Some(last)) => Some((first.clone(), last.clone())),
            _ => None,
        };
        self.chars
    }
}

/// A message's text, in characters, as the usage estimate counts it (from
/// the text, not by serialising the message).
fn message_chars(m: &ChatMessage) -> usize {
    use warden_protocol::llm::{AssistantContent, UserContent};
    match m {
        ChatMessage::User { content } => content
            .iter()
            .map(|UserContent::Text { text }| text.len())
            .sum(),
        ChatMessage::Assistant { content } => content
            .iter()
            .map(|c| match c {
                AssistantContent::Text { text } | AssistantContent::Reasoning { text, .. } => {
                    text.len()
                }
                AssistantContent::ToolCall { name, .. } => name.len() + 32,
            })
            .sum(),
        ChatMessage::Tool { content } => content.iter().map(|r| r.output.len() + 16).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::llm::UserContent;

    fn says(text: &str) -> Arc<ChatMessage> {
        Arc::new(ChatMessage::User {
            content: vec![UserContent::Text { text: text.into() }],
        })
    }

    fn whole(messages: &[Arc<ChatMessage>]) -> usize {
        messages.iter().map(|m| message_chars(m)).sum()
    }

    #[test]
    fn a_conversation_is_counted_once_per_message_and_again_when_it_changes() {
        let mut counted = Counted::default();
        let mut chat = vec![says("hello"), says("world!")];
        assert_eq!(counted.update(&chat), 11);
        chat.push(says("abc"));
        assert_eq!(counted.update(&chat), 14);
        assert_eq!(counted.messages, 3, "only the new message was added");
        // Compacted: the first message is another one.
        let compacted = vec![says("summary"), chat[2].clone()];
        assert_eq!(counted.update(&compacted), whole(&compacted));
        // Edited: shorter than what was counted.
        assert_eq!(counted.update(&compacted[..1]), 7);
        // Another conversation of the same length, the same text.
        let other = vec![says("summary")];
        assert_eq!(counted.update(&other), 7);
        assert_eq!(counted.update(&[]), 0);
        assert_eq!(counted.update(&chat), whole(&chat));
    }
}
