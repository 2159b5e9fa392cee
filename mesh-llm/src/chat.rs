//! A small typed client of the OpenAI chat-completions API (`POST …/chat/completions` with
//! `stream: true`), as llama.cpp's server, vLLM, Ollama and OpenAI serve it: the request, and
//! the server-sent chunks read into content deltas and, at the end, the turn's tool calls.
//!
//! What real servers send is tolerated: members nobody asked for (llama.cpp's `timings`), a
//! last usage chunk whose `choices` is empty, tool-call arguments streamed a few characters at
//! a time (integers beyond 2^53 in them are kept as written: the arguments stay text until a
//! tool reads them). What no server should send fails the turn with a clear error: an HTTP
//! error (its status and the start of its body), a chunk that is not JSON, a stream that ends
//! before the turn does, and anything past the bounds below.

use std::time::Duration;

use futures_util::StreamExt;
use mesh_core::sse::SseParser;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ModelConfig;

/// The most bytes of content one turn may generate.
pub const MAX_CONTENT: usize = 1024 * 1024;

/// The most tool calls in one turn.
pub const MAX_TOOL_CALLS: usize = 32;

/// The most bytes of one tool call's arguments.
pub const MAX_ARGUMENTS: usize = 256 * 1024;

/// The most bytes of one server-sent event.
const MAX_EVENT: usize = 1024 * 1024;

/// The most bytes of an error body quoted.
const MAX_ERROR_BODY: usize = 2_000;

/// A message of the conversation, as the API takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: &'static str,
    /// The text (none for an assistant turn that only calls tools).
    pub content: Option<String>,
    /// An assistant turn's tool calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallOut>>,
    /// A tool message: the call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message of `role` with `content`.
    pub fn text(role: &'static str, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: Some(content.into()),
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// A tool call, as an assistant message carries it back to the server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallOut {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionOut,
}

/// The function of a [`ToolCallOut`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionOut {
    pub name: String,
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name (`[A-Za-z0-9_-]`, at most 64).
    pub name: String,
    pub description: String,
    /// Its parameters' JSON schema.
    pub parameters: Value,
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments, as the model wrote them (JSON text).
    pub arguments: String,
}

/// How one turn ended.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    /// All the content of the turn.
    pub content: String,
    /// Its tool calls (none: the answer is the content).
    pub tool_calls: Vec<ToolCall>,
    /// The server's `finish_reason` (`stop`, `length`, `tool_calls`, …).
    pub finish_reason: Option<String>,
}

/// Why a turn failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatError {
    /// The server could not be reached.
    #[error("the model server at {url} could not be reached: {why}")]
    Unreachable { url: String, why: String },
    /// It answered with an HTTP error.
    #[error("the model server answered {status}: {body}")]
    Status { status: u16, body: String },
    /// It sent something that is not a chat-completion stream.
    #[error("the model server sent a malformed answer: {0}")]
    Malformed(String),
    /// The turn took longer than the request timeout.
    #[error("the model did not finish within {0} s")]
    Timeout(u64),
    /// The turn went past a bound.
    #[error("the model's answer went past a bound: {0}")]
    TooLarge(String),
}

/// What a turn's stream says next.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatEvent {
    /// More content, as it came.
    Content(String),
    /// The turn ended.
    Done(Completion),
}

/// The chat-completions client of one model.
#[derive(Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    endpoint: String,
    model: ModelConfig,
}

#[derive(Serialize)]
struct Request<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<Value>,
    stream: bool,
    stream_options: Value,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
}

impl ChatClient {
    /// A client of `model`.
    pub fn new(model: ModelConfig) -> ChatClient {
        mesh_core::tls::install_crypto_provider();
        ChatClient {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default(),
            endpoint: format!("{}/chat/completions", model.url),
            model,
        }
    }

    /// Starts a turn: `messages` so far, `tools` on offer; the whole turn bounded by
    /// `timeout`.
    pub async fn stream(
        &self,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        timeout: Duration,
    ) -> Result<ChatStream, ChatError> {
        let request = Request {
            model: &self.model.name,
            messages,
            tools: tools
                .iter()
                .map(|t| {
                    serde_json::json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect(),
            stream: true,
            stream_options: serde_json::json!({"include_usage": true}),
            max_tokens: self.model.max_tokens,
            temperature: self.model.temperature,
            top_p: self.model.top_p,
            seed: self.model.seed,
        };
        let mut post = self
            .http
            .post(&self.endpoint)
            .json(&request)
            .timeout(timeout);
        if let Some(key) = &self.model.api_key {
            post = post.bearer_auth(key);
        }
        let response = post.send().await.map_err(|e| {
            if e.is_timeout() {
                ChatError::Timeout(timeout.as_secs())
            } else {
                ChatError::Unreachable {
                    url: self.endpoint.clone(),
                    why: e.to_string(),
                }
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            let body = response.bytes().await.unwrap_or_default();
            let body =
                String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_BODY)]).into_owned();
            return Err(ChatError::Status {
                status: status.as_u16(),
                body,
            });
        }
        Ok(ChatStream {
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::default(),
            turn: Turn::default(),
            pending: std::collections::VecDeque::new(),
            unread: 0,
            timeout,
            ended: false,
        })
    }
}

type Body = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<bytes::Bytes, reqwest::Error>> + Send>,
>;

/// One turn's stream (dropping it closes the connection: the server stops generating).
pub struct ChatStream {
    body: Body,
    parser: SseParser,
    turn: Turn,
    pending: std::collections::VecDeque<String>,
    /// Bytes fed to the parser since its last event.
    unread: usize,
    timeout: Duration,
    ended: bool,
}

impl ChatStream {
    /// The next content delta, or the end of the turn.
    pub async fn next(&mut self) -> Result<ChatEvent, ChatError> {
        loop {
            if let Some(delta) = self.pending.pop_front() {
                return Ok(ChatEvent::Content(delta));
            }
            if self.ended {
                return Ok(ChatEvent::Done(std::mem::take(&mut self.turn).finish()?));
            }
            let bytes = match self.body.next().await {
                Some(Ok(bytes)) => bytes,
                Some(Err(e)) if e.is_timeout() => {
                    return Err(ChatError::Timeout(self.timeout.as_secs()));
                }
                Some(Err(e)) => return Err(ChatError::Malformed(format!("the stream broke: {e}"))),
                None => {
                    self.parser.finish();
                    self.take_events()?;
                    self.ended = true;
                    continue;
                }
            };
            self.unread += bytes.len();
            self.parser.feed(&bytes);
            self.take_events()?;
            if self.unread > MAX_EVENT {
                return Err(ChatError::TooLarge(format!(
                    "an event of more than {MAX_EVENT} bytes"
                )));
            }
        }
    }

    fn take_events(&mut self) -> Result<(), ChatError> {
        let events = self.parser.take_events();
        if !events.is_empty() {
            self.unread = 0;
        }
        for event in events {
            if event.data.trim() == "[DONE]" {
                self.ended = true;
                continue;
            }
            if let Some(delta) = self.turn.chunk(&event.data)? {
                self.pending.push_back(delta);
            }
        }
        Ok(())
    }
}

/// A turn being read, chunk by chunk (pure: the tests feed it what servers send).
#[derive(Debug, Default)]
pub struct Turn {
    content: String,
    calls: Vec<ToolCall>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<CallDelta>>,
}

#[derive(Deserialize)]
struct CallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

impl Turn {
    /// Reads one chunk's JSON: its content delta, if it has one.
    pub fn chunk(&mut self, data: &str) -> Result<Option<String>, ChatError> {
        let chunk: Chunk = serde_json::from_str(data).map_err(|e| {
            let start: String = data.chars().take(200).collect();
            ChatError::Malformed(format!(
                "a chunk is not a chat-completion chunk ({e}): {start}"
            ))
        })?;
        let mut content = None;
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            let Some(delta) = choice.delta else { continue };
            if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
                if self.content.len() + text.len() > MAX_CONTENT {
                    return Err(ChatError::TooLarge(format!(
                        "more than {MAX_CONTENT} bytes of content"
                    )));
                }
                self.content.push_str(&text);
                content.get_or_insert_with(String::new).push_str(&text);
            }
            for call in delta.tool_calls.into_iter().flatten() {
                let index = call.index.unwrap_or(self.calls.len().saturating_sub(1));
                if index >= MAX_TOOL_CALLS {
                    return Err(ChatError::TooLarge(format!(
                        "more than {MAX_TOOL_CALLS} tool calls"
                    )));
                }
                while self.calls.len() <= index {
                    self.calls.push(ToolCall::default());
                }
                let slot = &mut self.calls[index];
                if let Some(id) = call.id {
                    slot.id = id;
                }
                if let Some(function) = call.function {
                    if let Some(name) = function.name {
                        slot.name.push_str(&name);
                    }
                    if let Some(arguments) = function.arguments {
                        if slot.arguments.len() + arguments.len() > MAX_ARGUMENTS {
                            return Err(ChatError::TooLarge(format!(
                                "tool arguments of more than {MAX_ARGUMENTS} bytes"
                            )));
                        }
                        slot.arguments.push_str(&arguments);
                    }
                }
            }
        }
        Ok(content)
    }

    /// The turn, once the stream ended.
    pub fn finish(self) -> Result<Completion, ChatError> {
        if self.finish_reason.is_none() && self.calls.is_empty() && self.content.is_empty() {
            return Err(ChatError::Malformed(
                "the stream ended before the turn did".into(),
            ));
        }
        let mut tool_calls = self.calls;
        for (i, call) in tool_calls.iter_mut().enumerate() {
            if call.id.is_empty() {
                call.id = format!("call-{i}");
            }
        }
        Ok(Completion {
            content: self.content,
            tool_calls,
            finish_reason: self.finish_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunks as llama.cpp's server sends them (a tool call streamed a few characters at a
    /// time, `timings`, a usage chunk with no choices).
    #[test]
    fn llama_cpp_chunks_read() {
        let mut turn = Turn::default();
        let chunks = [
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"object":"chat.completion.chunk"}"#,
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"id":"abc","type":"function","function":{"name":"clock","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"n\": 123456789012345678901"}}]}}]}"#,
            r#"{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}"#,
            r#"{"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}],"timings":{"predicted_n":9}}"#,
            r#"{"choices":[],"usage":{"completion_tokens":9,"prompt_tokens":90,"total_tokens":99}}"#,
        ];
        for chunk in chunks {
            assert_eq!(turn.chunk(chunk).unwrap(), None);
        }
        let done = turn.finish().unwrap();
        assert_eq!(done.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(done.tool_calls[0].name, "clock");
        assert_eq!(
            done.tool_calls[0].arguments,
            r#"{"n": 123456789012345678901}"#
        );
    }

    #[test]
    fn content_streams_as_deltas() {
        let mut turn = Turn::default();
        assert_eq!(
            turn.chunk(r#"{"choices":[{"delta":{"content":"O"}}]}"#)
                .unwrap()
                .as_deref(),
            Some("O")
        );
        assert_eq!(
            turn.chunk(r#"{"choices":[{"delta":{"content":"K"},"finish_reason":"stop"}]}"#)
                .unwrap()
                .as_deref(),
            Some("K")
        );
        let done = turn.finish().unwrap();
        assert_eq!(
            (done.content.as_str(), done.finish_reason.as_deref()),
            ("OK", Some("stop"))
        );
    }

    #[test]
    fn what_no_server_should_send_is_an_error() {
        let mut turn = Turn::default();
        assert!(matches!(
            turn.chunk("not json"),
            Err(ChatError::Malformed(_))
        ));
        assert!(matches!(
            Turn::default().finish(),
            Err(ChatError::Malformed(m)) if m.contains("ended before")
        ));
        let mut turn = Turn::default();
        let too_many = format!(
            r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{MAX_TOOL_CALLS},"function":{{"name":"x"}}}}]}}}}]}}"#
        );
        assert!(matches!(turn.chunk(&too_many), Err(ChatError::TooLarge(_))));
    }
}
