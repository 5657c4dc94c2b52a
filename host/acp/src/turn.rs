//! `session/prompt`: one prompt through warden's loop, its events sent to
//! the editor as they happen, and the answer's stop reason.
//!
//! The bus is subscribed and the connection attached to the session
//! (so questions are asked, not refused) before the prompt is sent; when
//! the loop returns, every event it published is already queued, so they
//! are drained and sent before the answer. Lines go out through one
//! writer, so the answer never overtakes an update.

use agent_client_protocol_schema::v1::{
    self as acp, CompactionStatus, CompactionSummaryChunk, CompactionUpdate, ContentBlock,
    ContentChunk, EmbeddedResourceResource, Error, Notice, NoticeSeverity, PromptRequest,
    PromptResponse, SessionNotification, SessionUpdate, StopReason, ToolCall, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use warden_core::PromptInput;
use warden_protocol::{
    Event, FinishReason, MessageError, MessageInfo, MessageWithParts, PartBody, PermissionRequest,
    SessionId, SessionStatus,
};

use crate::agent::{Agent, Prompting};
use crate::rpc::code;
use crate::updates::{Stream, Tools};

/// Run a prompt and answer with its stop reason. The session was marked
/// as prompting when the request was read ([`Agent::begin_prompt`]), so a
/// cancel that follows at once is heard.
pub async fn prompt(
    agent: &Agent,
    request: PromptRequest,
    prompting: Prompting,
) -> Result<Value, Error> {
    let id = prompting.id.clone();
    let token = prompting.token.clone();
    let text = prompt_text(&request.prompt)?;
    // A session closed meanwhile cancelled the token: the answer is then
    // `cancelled`, as for a session/cancel.
    let directory = prompting.directory.clone();
    let result = if token.is_cancelled() {
        // Cancelled before it started: nothing runs.
        Ok(None)
    } else {
        run(agent, &id, &directory, text, &token).await.map(Some)
    };
    drop(prompting);
    let stop = match result {
        _ if token.is_cancelled() => StopReason::Cancelled,
        Ok(None) => StopReason::Cancelled,
        Ok(Some(answer)) => stop_reason(agent, &id, &answer)?,
        Err(e) => return Err(Error::new(code::INTERNAL_ERROR, e.to_string())),
    };
    serde_json::to_value(PromptResponse::new(stop))
        .map_err(|e| Error::new(code::INTERNAL_ERROR, e.to_string()))
}

/// The prompt's text: text blocks as they are, resource links as a line
/// naming them, embedded text resources in a `<file>` block.
fn prompt_text(blocks: &[ContentBlock]) -> Result<String, Error> {
    let mut parts = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block {
            ContentBlock::Text(t) => parts.push(t.text.clone()),
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("@{} ({})", link.name, link.uri))
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(r) => {
                    parts.push(format!("<file uri=\"{}\">\n{}\n</file>", r.uri, r.text));
                }
                _ => return Err(refused_block(i, "a binary resource")),
            },
            ContentBlock::Image(_) => return Err(refused_block(i, "an image")),
            ContentBlock::Audio(_) => return Err(refused_block(i, "audio")),
            _ => return Err(refused_block(i, "a kind of block warden does not know")),
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(Error::new(
            code::INVALID_PARAMS,
            "the prompt has no text; send at least one text block",
        ));
    }
    Ok(text)
}

fn refused_block(i: usize, what: &str) -> Error {
    Error::new(
        code::INVALID_PARAMS,
        format!(
            "prompt[{i}] is {what}; warden takes text, resource links and embedded text resources"
        ),
    )
}

async fn run(
    agent: &Agent,
    id: &SessionId,
    directory: &std::path::Path,
    text: String,
    token: &CancellationToken,
) -> warden_core::Result<MessageWithParts> {
    let core = &agent.core;
    // This session's events only: another session's burst cannot make it lag.
    let mut events = core.bus().subscribe_session(id);
    let _attached = core.permissions().attach_to(id);
    let tools = Tools::new(core.tools().tools());
    let mut turn = Turn {
        agent,
        id,
        stream: Stream::new(&tools, directory),
        asks: JoinSet::new(),
        asked: HashSet::new(),
        synthetic: HashMap::new(),
        compaction: None,
    };
    let input = PromptInput {
        session_id: id.clone(),
        text,
        model: agent.options.model.clone(),
        ..Default::default()
    };
    let answer = core.prompt(input);
    tokio::pin!(answer);
    // A cancel is asked of the core until it takes: the run may not have
    // started yet when the cancel comes (the prompt is still being queued).
    let mut cancelled = false;
    let result = loop {
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Ok(event) => turn.event(&event),
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "the ACP connection fell behind the session's events");
                    // Text and calls catch up with their next write; a
                    // question would wait unasked, so the waiting ones are asked now.
                    turn.ask_pending();
                }
                Err(RecvError::Closed) => {}
            },
            result = &mut answer => break result,
            _ = token.cancelled(), if !cancelled => {
                cancelled = core.cancel(id);
                if !cancelled {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    };
    loop {
        match events.try_recv() {
            Ok(event) => turn.event(&event),
            Err(TryRecvError::Lagged(_)) => turn.ask_pending(),
            Err(_) => break,
        }
    }
    turn.finish().await;
    result
}

/// One prompt's updates under way.
struct Turn<'a> {
    agent: &'a Agent,
    id: &'a SessionId,
    stream: Stream<'a>,
    /// Questions being asked of the editor; dropped (aborted) with the turn,
    /// by when the loop has settled every one of them.
    asks: JoinSet<()>,
    /// The questions asked so far, by id.
    asked: HashSet<String>,
    /// The calls shown for questions of no call, by the task asking.
    synthetic: HashMap<tokio::task::Id, acp::ToolCallId>,
    /// The compaction under way, by its part's id.
    compaction: Option<String>,
}

impl Turn<'_> {
    fn send(&self, update: SessionUpdate) {
        self.agent.peer.notify(
            "session/update",
            SessionNotification::new(acp::SessionId::new(self.id.0.as_str()), update),
        );
    }

    fn event(&mut self, event: &Event) {
        if event.session_id() != self.id {
            return;
        }
        // A client that shows compactions gets the summary as the
        // compaction's own; any other sees it as the agent's thought.
        let summary = match (event, &self.compaction) {
            (Event::PartUpdated { part, .. }, Some(compaction))
                if matches!(part.body, PartBody::Text { .. })
                    && self.stream.is_summary(&part.message_id.0)
                    && self.shows(|c| c.shows_compaction()) =>
            {
                Some(compaction.clone())
            }
            _ => None,
        };
        for update in self.stream.updates(event) {
            match (update, &summary) {
                (SessionUpdate::AgentThoughtChunk(chunk), Some(compaction)) => self.send(
                    SessionUpdate::CompactionSummaryChunk(CompactionSummaryChunk::new(
                        acp::CompactionId::new(compaction.as_str()),
                        chunk.content,
                    )),
                ),
                (update, _) => self.send(update),
            }
        }
        match event {
            Event::PermissionAsked { request } => self.ask(request),
            Event::SessionStatus {
                status:
                    SessionStatus::Retry {
                        attempt, message, ..
                    },
                ..
            } => {
                let said = format!("The model failed ({message}); retrying, attempt {attempt}.");
                if self.shows(|c| c.shows_notices()) {
                    self.send(SessionUpdate::Notice(Notice::new(
                        NoticeSeverity::Warning,
                        said,
                    )));
                } else {
                    self.send(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                        said.into(),
                    )));
                }
            }
            Event::PartUpdated { part, .. } if matches!(part.body, PartBody::Compaction { .. }) => {
                if self.compaction.is_some() {
                    return;
                }
                self.compaction = Some(part.id.0.clone());
                if self.shows(|c| c.shows_compaction()) {
                    self.send(SessionUpdate::CompactionUpdate(CompactionUpdate::new(
                        acp::CompactionId::new(part.id.0.as_str()),
                        CompactionStatus::InProgress,
                    )));
                } else {
                    self.send(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                        "warden is compacting the conversation: earlier messages will be sent as a summary."
                            .into(),
                    )));
                }
            }
            // The summary's message ended: the compaction did, one way or the other.
            Event::MessageUpdated {
                info: MessageInfo::Assistant(a),
            } if a.summary && a.time.completed.is_some() => {
                let Some(compaction) = self.compaction.take() else {
                    return;
                };
                if self.shows(|c| c.shows_compaction()) {
                    let status = if a.error.is_some() {
                        CompactionStatus::Failed
                    } else {
                        CompactionStatus::Completed
                    };
                    let mut update =
                        CompactionUpdate::new(acp::CompactionId::new(compaction.as_str()), status);
                    if let Some(e) = &a.error {
                        update = update.error(e.message().to_string());
                    }
                    self.send(SessionUpdate::CompactionUpdate(update));
                }
            }
            _ => {}
        }
    }

    fn shows(&self, f: impl Fn(&crate::agent::Client) -> bool) -> bool {
        self.agent.lock_client().as_ref().is_some_and(f)
    }

    /// Ask the editor, about the call that asks (announced already) or,
    /// for a question of no call, about a call announced for it.
    fn ask(&mut self, request: &PermissionRequest) {
        if !self.asked.insert(request.id.clone()) {
            return;
        }
        let title = format!(
            "warden asks: `{}` on {}",
            request.permission,
            request.patterns.join(", ")
        );
        let known = request.tool.as_ref().and_then(|t| {
            self.stream
                .call_of(&t.message_id.0, t.call_id.as_str())
                .map(str::to_string)
        });
        let synthetic = known.is_none();
        let call = match known {
            Some(part) => {
                ToolCallUpdate::new(acp::ToolCallId::new(part), ToolCallUpdateFields::new())
            }
            None => {
                self.send(SessionUpdate::ToolCall(
                    ToolCall::new(acp::ToolCallId::new(request.id.as_str()), title.clone())
                        .kind(ToolKind::Other)
                        .status(ToolCallStatus::Pending),
                ));
                ToolCallUpdate::new(
                    acp::ToolCallId::new(request.id.as_str()),
                    ToolCallUpdateFields::new().title(title),
                )
            }
        };
        let (peer, core, request) = (
            self.agent.peer.clone(),
            self.agent.core.clone(),
            request.clone(),
        );
        let shown = call.tool_call_id.clone();
        let task = self
            .asks
            .spawn(crate::ask::ask(peer, core, request, call, synthetic));
        if synthetic {
            self.synthetic.insert(task.id(), shown);
        }
    }

    /// End what the turn showed and did not end, before its answer is
    /// sent: questions still out are withdrawn (their tasks aborted), a
    /// call shown for one of them fails, and so does a compaction under way.
    async fn finish(&mut self) {
        self.asks.abort_all();
        while let Some(done) = self.asks.join_next_with_id().await {
            let (task, ended) = match &done {
                Ok((task, ())) => (*task, true),
                Err(e) => (e.id(), false),
            };
            if let Some(call) = self.synthetic.remove(&task)
                && !ended
            {
                self.send(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call,
                    ToolCallUpdateFields::new().status(ToolCallStatus::Failed),
                )));
            }
        }
        if let Some(compaction) = self.compaction.take()
            && self.shows(|c| c.shows_compaction())
        {
            self.send(SessionUpdate::CompactionUpdate(
                CompactionUpdate::new(
                    acp::CompactionId::new(compaction.as_str()),
                    CompactionStatus::Failed,
                )
                .error("the turn ended before the compaction did".to_string()),
            ));
        }
    }

    /// Ask what waits unasked (after events were missed).
    fn ask_pending(&mut self) {
        for request in self.agent.core.permissions().pending(Some(self.id)) {
            self.ask(&request);
        }
    }
}

/// Why the turn ended, from its last message. A model or ledger failure is
/// an error answer with warden's message; a loop that stopped on purpose
/// (a refused question, the step limit) ends the turn with its reason
/// said as the agent's last words.
fn stop_reason(
    agent: &Agent,
    id: &SessionId,
    answer: &MessageWithParts,
) -> Result<StopReason, Error> {
    let MessageInfo::Assistant(info) = &answer.info else {
        return Ok(StopReason::EndTurn);
    };
    match &info.error {
        Some(MessageError::Aborted { .. }) => return Ok(StopReason::Cancelled),
        Some(MessageError::Stopped { message }) => {
            agent.peer.notify(
                "session/update",
                SessionNotification::new(
                    acp::SessionId::new(id.0.as_str()),
                    SessionUpdate::AgentMessageChunk(ContentChunk::new(
                        format!("\n\nwarden stopped: {message}").into(),
                    )),
                ),
            );
            return Ok(StopReason::EndTurn);
        }
        Some(e) => return Err(Error::new(code::INTERNAL_ERROR, e.message().to_string())),
        None => {}
    }
    Ok(match info.finish {
        Some(FinishReason::Length) => StopReason::MaxTokens,
        Some(FinishReason::ContentFilter) => StopReason::Refusal,
        _ => StopReason::EndTurn,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blocks(v: Value) -> Vec<ContentBlock> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_prompt_is_its_text_links_and_embedded_files() {
        let text = prompt_text(&blocks(json!([
            {"type": "text", "text": "look at"},
            {"type": "resource_link", "name": "a.rs", "uri": "file:///p/a.rs"},
            {"type": "resource", "resource": {"uri": "file:///p/b.rs", "text": "fn b() {}"}}
        ])))
        .unwrap();
        assert_eq!(
            text,
            "look at\n\n@a.rs (file:///p/a.rs)\n\n<file uri=\"file:///p/b.rs\">\nfn b() {}\n</file>"
        );
        let e = prompt_text(&blocks(
            json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}]),
        ))
        .unwrap_err();
        assert!(e.message.contains("prompt[0] is an image"), "{}", e.message);
        assert!(prompt_text(&blocks(json!([{"type": "text", "text": "  "}]))).is_err());
    }
}
