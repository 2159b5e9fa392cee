//! Agents as MCP tools, as data: an agent's card as a tool, a tool call's arguments as the
//! message it sends, and a task (or a direct message) as the tool's result.
//!
//! **The call.** Every tool takes `text` (the message; required), and optionally `data` (an
//! object, sent as a data part), `files` (each `{name, mimeType, bytes}` with the bytes in
//! base64, or `{name, mimeType, uri}`) and `taskId`. A task that stops waiting for input
//! answers with its question and its id (`structuredContent`: `{taskId, state, question}`); a
//! call with that `taskId` sends its `text` as the task's next message, which continues it.
//!
//! **The result.** The task's artifacts, then its final status message, as MCP content: text
//! parts as text; file parts as images or audio by their media type, else as embedded
//! resources (`a2a://tasks/<task>/artifacts/<artifact>`), by URL as resource links; data parts
//! as their JSON text, and the first data part that is an object as `structuredContent`. A
//! task that failed, was rejected or canceled is an error result (`isError`) with its status
//! text.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mesh_core::model::{AgentCard, Message, Part, PartContent, Role, Task, TaskState, state_name};
use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents, Tool};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The most files one call may carry.
pub(crate) const MAX_FILES: usize = 16;

/// The longest tool description made from a card (longer ones are cut).
const MAX_DESCRIPTION: usize = 4_000;

/// The input schema every agent's tool shares.
fn input_schema() -> Arc<Map<String, Value>> {
    let schema = json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "The message to the agent"},
            "data": {"type": "object", "description": "Structured input, sent as a data part"},
            "files": {
                "type": "array",
                "maxItems": MAX_FILES,
                "description": "Files, each by its bytes (base64) or a URI",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "mimeType": {"type": "string"},
                        "bytes": {"type": "string", "description": "The file's bytes, base64"},
                        "uri": {"type": "string"}
                    }
                }
            },
            "taskId": {
                "type": "string",
                "description": "Continue this task (one that waits for input): `text` is its answer"
            }
        },
        "required": ["text"]
    });
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::default(),
    }
}

/// The tool of an agent: its name, and a description made of the card's description and
/// skills.
pub(crate) fn tool(name: &str, card: Option<&AgentCard>) -> Tool {
    let mut description = String::new();
    if let Some(card) = card {
        description.push_str(card.description.trim());
        for skill in &card.skills {
            description.push_str(&format!("\n- {}: {}", skill.name, skill.description));
        }
    }
    if description.trim().is_empty() {
        description = format!("The agent {name} of the mesh");
    }
    let description: String = description.chars().take(MAX_DESCRIPTION).collect();
    let mut tool = Tool::new(name.to_owned(), description, input_schema());
    tool.title = card.map(|c| c.name.clone()).filter(|t| !t.is_empty());
    tool
}

/// What a call asks: the message to send, and the task it continues.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Asked {
    pub message: Message,
    pub task_id: Option<String>,
}

/// The message a call's `arguments` make, or why they make none.
pub(crate) fn asked(arguments: Option<&Map<String, Value>>) -> Result<Asked, String> {
    let empty = Map::new();
    let arguments = arguments.unwrap_or(&empty);
    let text = match arguments.get("text") {
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err("`text` must be a string".into()),
        None => return Err("`text` is required: the message to the agent".into()),
    };
    let mut parts = vec![Part::text(text)];
    match arguments.get("data") {
        None | Some(Value::Null) => {}
        Some(data @ Value::Object(_)) => parts.push(Part::data(data.clone())),
        Some(_) => return Err("`data` must be an object".into()),
    }
    match arguments.get("files") {
        None | Some(Value::Null) => {}
        Some(Value::Array(files)) if files.len() <= MAX_FILES => {
            for (i, file) in files.iter().enumerate() {
                parts.push(file_part(file).map_err(|e| format!("files[{i}]: {e}"))?);
            }
        }
        Some(Value::Array(_)) => return Err(format!("at most {MAX_FILES} files")),
        Some(_) => return Err("`files` must be an array".into()),
    }
    let task_id = match arguments.get("taskId") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id.clone()),
        Some(_) => return Err("`taskId` must be a task's id".into()),
    };
    let mut message = Message::new(Role::User, parts);
    message.task_id.clone_from(&task_id);
    Ok(Asked { message, task_id })
}

/// The message that answers an interrupted task's question (an elicitation's answer).
pub(crate) fn answer(task_id: String, text: String) -> Asked {
    let mut message = Message::new(Role::User, vec![Part::text(text)]);
    message.task_id = Some(task_id.clone());
    Asked {
        message,
        task_id: Some(task_id),
    }
}

fn file_part(file: &Value) -> Result<Part, String> {
    let Value::Object(file) = file else {
        return Err("must be an object".into());
    };
    let text = |key: &str| file.get(key).and_then(Value::as_str).map(str::to_owned);
    let content = match (text("bytes"), text("uri")) {
        (Some(bytes), None) => PartContent::Raw(
            STANDARD
                .decode(bytes.as_bytes())
                .map_err(|e| format!("`bytes` is not base64: {e}"))?,
        ),
        (None, Some(uri)) => PartContent::Url(uri),
        _ => return Err("give either `bytes` (base64) or `uri`".into()),
    };
    Ok(Part {
        content,
        filename: text("name"),
        media_type: text("mimeType"),
        metadata: None,
    })
}

/// The result of a call answered by `task`.
pub(crate) fn task_result(task: &Task) -> CallToolResult {
    let status_text = task
        .status
        .message
        .as_ref()
        .map(message_text)
        .unwrap_or_default();
    match task.status.state {
        TaskState::Failed | TaskState::Rejected | TaskState::Canceled => {
            let state = state_name(&task.status.state);
            let text = if status_text.is_empty() {
                format!("the task {} ended {state}", task.id)
            } else {
                status_text
            };
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
        TaskState::InputRequired | TaskState::AuthRequired => {
            let state = state_name(&task.status.state);
            let text = format!(
                "{status_text}\n\n(The task {id} is {state}: call this tool again with \
                 \"taskId\": \"{id}\" and the answer as \"text\".)",
                id = task.id
            );
            let mut result = CallToolResult::success(vec![ContentBlock::text(text.trim_start())]);
            result.structured_content = Some(json!({
                "taskId": task.id,
                "state": state,
                "question": status_text,
            }));
            result
        }
        _ => {
            let mut content = Vec::new();
            let mut structured = None;
            for artifact in task.artifacts.iter().flatten() {
                for part in &artifact.parts {
                    let uri = format!("a2a://tasks/{}/artifacts/{}", task.id, artifact.artifact_id);
                    content.push(part_content(part, &uri, &mut structured));
                }
            }
            if let Some(message) = &task.status.message {
                let uri = format!("a2a://tasks/{}/status", task.id);
                for part in &message.parts {
                    content.push(part_content(part, &uri, &mut structured));
                }
            }
            if content.is_empty() {
                content.push(ContentBlock::text(format!(
                    "the task {} ended {}",
                    task.id,
                    state_name(&task.status.state)
                )));
            }
            let mut result = CallToolResult::success(content);
            result.structured_content = structured;
            result
        }
    }
}

/// The result of a call answered by a direct message.
pub(crate) fn message_result(message: &Message) -> CallToolResult {
    let mut structured = None;
    let content = message
        .parts
        .iter()
        .map(|p| part_content(p, "a2a://messages", &mut structured))
        .collect();
    let mut result = CallToolResult::success(content);
    result.structured_content = structured;
    result
}

/// The text parts of `message`, joined.
pub(crate) fn message_text(message: &Message) -> String {
    let texts: Vec<&str> = message.parts.iter().filter_map(Part::as_text).collect();
    texts.join("\n")
}

/// One part as MCP content; the first object of a data part becomes `structured`.
fn part_content(part: &Part, uri: &str, structured: &mut Option<Value>) -> ContentBlock {
    let media = part
        .media_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    match &part.content {
        PartContent::Text(text) => ContentBlock::text(text.clone()),
        PartContent::Raw(bytes) => {
            let data = STANDARD.encode(bytes);
            if media.starts_with("image/") {
                ContentBlock::image(data, media)
            } else if media.starts_with("audio/") {
                ContentBlock::audio(data, media)
            } else {
                let uri = match &part.filename {
                    Some(name) => format!("{uri}/{name}"),
                    None => uri.to_owned(),
                };
                let mut blob = ResourceContents::blob(data, uri);
                if let ResourceContents::BlobResourceContents { mime_type, .. } = &mut blob {
                    *mime_type = Some(media.to_owned());
                }
                ContentBlock::resource(blob)
            }
        }
        PartContent::Url(url) => {
            let name = part.filename.clone().unwrap_or_else(|| url.clone());
            let mut resource = Resource::new(url.clone(), name);
            resource.mime_type.clone_from(&part.media_type);
            ContentBlock::resource_link(resource)
        }
        PartContent::Data(data) => {
            if structured.is_none() && data.is_object() {
                *structured = Some(data.clone());
            }
            ContentBlock::text(data.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::model::{Artifact, TaskStatus};

    fn task(state: TaskState, artifacts: Vec<Part>, status: Option<&str>) -> Task {
        Task {
            id: "t1".into(),
            context_id: "c1".into(),
            status: TaskStatus {
                state,
                message: status.map(|s| Message::new(Role::Agent, vec![Part::text(s)])),
                timestamp: None,
            },
            artifacts: Some(vec![Artifact {
                artifact_id: "a1".into(),
                name: None,
                description: None,
                parts: artifacts,
                metadata: None,
                extensions: None,
            }]),
            history: None,
            metadata: None,
        }
    }

    #[test]
    fn arguments_make_the_message() {
        let args = json!({"text": "hi", "data": {"k": 1},
            "files": [{"name": "a.txt", "mimeType": "text/plain", "bytes": "aGk="},
                      {"name": "b", "uri": "https://x.example/b"}],
            "taskId": "t9"});
        let asked = asked(args.as_object()).unwrap();
        assert_eq!(asked.task_id.as_deref(), Some("t9"));
        assert_eq!(asked.message.task_id.as_deref(), Some("t9"));
        let parts = &asked.message.parts;
        assert_eq!(parts[0].as_text(), Some("hi"));
        assert_eq!(parts[1].content, PartContent::Data(json!({"k": 1})));
        assert_eq!(parts[2].content, PartContent::Raw(b"hi".to_vec()));
        assert_eq!(
            parts[3].content,
            PartContent::Url("https://x.example/b".into())
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let cases = [
            (json!({}), "`text` is required"),
            (json!({"text": 1}), "`text` must be a string"),
            (
                json!({"text": "x", "data": [1]}),
                "`data` must be an object",
            ),
            (
                json!({"text": "x", "files": [{"bytes": "!!"}]}),
                "files[0]: `bytes` is not base64",
            ),
            (json!({"text": "x", "files": [{}]}), "files[0]: give either"),
            (json!({"text": "x", "taskId": 3}), "`taskId` must be"),
            (
                json!({"text": "x", "files": vec![json!({"uri": "u"}); MAX_FILES + 1]}),
                "at most",
            ),
        ];
        for (args, said) in cases {
            let error = asked(args.as_object()).unwrap_err();
            assert!(error.contains(said), "{args}: {error}");
        }
    }

    #[test]
    fn tasks_become_results() {
        let png = Part {
            content: PartContent::Raw(vec![1, 2]),
            filename: None,
            media_type: Some("image/png".into()),
            metadata: None,
        };
        let done = task_result(&task(
            TaskState::Completed,
            vec![Part::text("answer"), png, Part::data(json!({"n": 1}))],
            Some("done"),
        ));
        assert_eq!(done.is_error, Some(false));
        assert_eq!(done.content.len(), 4);
        assert!(matches!(&done.content[1], ContentBlock::Image(i) if i.mime_type == "image/png"));
        assert_eq!(done.structured_content, Some(json!({"n": 1})));

        let failed = task_result(&task(TaskState::Failed, vec![], Some("it broke")));
        assert_eq!(failed.is_error, Some(true));
        assert!(matches!(&failed.content[0], ContentBlock::Text(t) if t.text == "it broke"));

        let asking = task_result(&task(TaskState::InputRequired, vec![], Some("Which date?")));
        assert_eq!(asking.is_error, Some(false));
        let structured = asking.structured_content.unwrap();
        assert_eq!(structured["taskId"], "t1");
        assert_eq!(structured["question"], "Which date?");
    }
}
