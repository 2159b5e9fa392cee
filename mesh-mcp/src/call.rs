//! How a message calls a tool, and how the tool's result is answered.
//!
//! **The call.** A data part `{"tool": "<name>", "arguments": {…}}` calls that tool with those
//! arguments (`arguments` may be left out: none). Without such a part, the message's text calls
//! the server's one tool when it has exactly one, and that tool takes exactly one string
//! argument: the text is that argument (`mcp-server-time`-like servers with one tool, an
//! `echo`). Anything else is refused with the list of tools and the rule.
//!
//! **The answer.** The result's content becomes the parts of one artifact named after the
//! tool: text as text parts; images and audio as file parts (their bytes, with their media
//! types); an embedded resource as a file (its text or bytes, named after its URI, with its
//! media type); a resource link as a file part by URL; structured content as a data part. A
//! result that is an error (`isError`) fails the task with the tool's text.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use mesh_agent::model::{Message, Part, PartContent};
use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::{Map, Value};

/// The longest failure text taken from a tool's error (longer ones are cut).
const MAX_ERROR_TEXT: usize = 4_000;

/// A tool call a message asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The tool.
    pub tool: String,
    /// Its arguments (an object).
    pub arguments: Map<String, Value>,
}

/// The name of the one string argument of the server's one tool, when that is what the server
/// has (then a message's text is that argument).
pub fn single_text_argument(tools: &[Tool]) -> Option<(&str, String)> {
    let [tool] = tools else { return None };
    let properties = tool.input_schema.get("properties")?.as_object()?;
    let mut names = properties.iter();
    let (name, schema) = names.next()?;
    if names.next().is_some() {
        return None;
    }
    let string = schema.get("type").and_then(Value::as_str) == Some("string");
    string.then(|| (&*tool.name, name.clone()))
}

/// The tool call `message` asks for among `tools`, or why it asks for none (a sentence for
/// the task's failure, naming the tools).
pub fn tool_call(message: &Message, tools: &[Tool]) -> Result<ToolCall, String> {
    let asked = message.parts.iter().find_map(|part| match &part.content {
        PartContent::Data(Value::Object(data)) if data.contains_key("tool") => Some(data),
        _ => None,
    });
    if let Some(data) = asked {
        let Some(tool) = data.get("tool").and_then(Value::as_str) else {
            return Err(format!(
                "the data part's \"tool\" must be a tool's name; {}",
                tool_list(tools)
            ));
        };
        if !tools.iter().any(|t| t.name == tool) {
            return Err(format!("there is no tool {tool:?}; {}", tool_list(tools)));
        }
        let arguments = match data.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(arguments)) => arguments.clone(),
            Some(_) => {
                return Err(format!(
                    "the arguments of {tool:?} must be an object (its input schema is on the \
                     agent's card)"
                ));
            }
        };
        return Ok(ToolCall {
            tool: tool.to_owned(),
            arguments,
        });
    }
    let text: Vec<&str> = message.parts.iter().filter_map(Part::as_text).collect();
    match single_text_argument(tools) {
        Some((tool, argument)) if !text.is_empty() => Ok(ToolCall {
            tool: tool.to_owned(),
            arguments: Map::from_iter([(argument, Value::String(text.join("\n")))]),
        }),
        _ => Err(format!(
            "say which tool to call: a data part {{\"tool\": name, \"arguments\": {{…}}}} \
             (text alone calls a server's only tool when it takes one string); {}",
            tool_list(tools)
        )),
    }
}

fn tool_list(tools: &[Tool]) -> String {
    if tools.is_empty() {
        return "the server has no tools".into();
    }
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    format!("tools: {}", names.join(", "))
}

/// What a tool's result answers: the parts of its artifact, or the failure it reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The tool's output.
    Parts(Vec<Part>),
    /// The tool reported an error (`isError`), with its text.
    Failed(String),
}

/// The answer `result` gives.
pub fn answer(result: CallToolResult) -> Answer {
    if result.is_error == Some(true) {
        let text: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| match c {
                ContentBlock::Text(t) => Some(t.text.clone()),
                _ => None,
            })
            .collect();
        let mut text = text.join("\n");
        if text.is_empty() {
            text = "the tool reported an error".into();
        }
        return Answer::Failed(text.chars().take(MAX_ERROR_TEXT).collect());
    }
    let mut parts: Vec<Part> = result.content.into_iter().map(content_part).collect();
    if let Some(structured) = result.structured_content {
        let mut part = Part::data(structured);
        part.media_type = Some("application/json".into());
        parts.push(part);
    }
    if parts.is_empty() {
        parts.push(Part::text(""));
    }
    Answer::Parts(parts)
}

/// The answer of `result` as text, for a reader of text (a language model): text as it is,
/// structured content as JSON, files by name; a tool error as `error: <its text>`.
pub fn answer_text(result: CallToolResult) -> String {
    match answer(result) {
        Answer::Failed(why) => format!("error: {why}"),
        Answer::Parts(parts) => {
            let texts: Vec<String> = parts
                .iter()
                .map(|p| match &p.content {
                    PartContent::Text(t) => t.clone(),
                    PartContent::Data(d) => d.to_string(),
                    _ => format!("[file {}]", p.filename.as_deref().unwrap_or("unnamed")),
                })
                .collect();
            texts.join("\n")
        }
    }
}

/// One content block as a part.
fn content_part(content: ContentBlock) -> Part {
    match content {
        ContentBlock::Text(text) => Part::text(text.text),
        ContentBlock::Image(image) => file(&image.data, image.mime_type, None),
        ContentBlock::Audio(audio) => file(&audio.data, audio.mime_type, None),
        ContentBlock::Resource(embedded) => match embedded.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => Part {
                content: PartContent::Raw(text.into_bytes()),
                filename: Some(file_name(&uri)),
                media_type: Some(mime_type.unwrap_or_else(|| "text/plain".into())),
                metadata: None,
            },
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => file(
                &blob,
                mime_type.unwrap_or_else(|| "application/octet-stream".into()),
                Some(file_name(&uri)),
            ),
            other => Part::data(serde_json::to_value(other).unwrap_or(Value::Null)),
        },
        ContentBlock::ResourceLink(link) => Part {
            content: PartContent::Url(link.uri),
            filename: Some(link.name),
            media_type: link.mime_type,
            metadata: None,
        },
        other => Part::data(serde_json::to_value(other).unwrap_or(Value::Null)),
    }
}

/// A file part of base64 `data`; data that is not base64 is kept as the text it is.
fn file(data: &str, media_type: String, name: Option<String>) -> Part {
    let content = match STANDARD.decode(data) {
        Ok(bytes) => PartContent::Raw(bytes),
        Err(_) => PartContent::Text(data.to_owned()),
    };
    Part {
        content,
        filename: name,
        media_type: Some(media_type),
        metadata: None,
    }
}

/// The last segment of a URI, as a file name.
fn file_name(uri: &str) -> String {
    let path = uri.split(['?', '#']).next().unwrap_or_default();
    let name = path
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("resource");
    name.chars().take(255).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_agent::model::Role;
    use rmcp::model::Resource;
    use serde_json::json;
    use std::sync::Arc;

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else {
            panic!("an object")
        };
        Tool::new(name.to_owned(), "", Arc::new(schema))
    }

    fn message(parts: Vec<Part>) -> Message {
        Message::new(Role::User, parts)
    }

    fn echo() -> Tool {
        tool(
            "echo",
            json!({"type": "object", "properties": {"message": {"type": "string"}}}),
        )
    }

    #[test]
    fn a_data_part_names_the_tool_and_its_arguments() {
        let tools = [echo(), tool("get-sum", json!({"type": "object"}))];
        let call = tool_call(
            &message(vec![Part::data(
                json!({"tool": "get-sum", "arguments": {"a": 1, "b": 2}}),
            )]),
            &tools,
        );
        assert_eq!(
            call,
            Ok(ToolCall {
                tool: "get-sum".into(),
                arguments: Map::from_iter([("a".into(), json!(1)), ("b".into(), json!(2))])
            })
        );
        let none = tool_call(&message(vec![Part::data(json!({"tool": "echo"}))]), &tools);
        assert_eq!(none.unwrap().arguments, Map::new());
    }

    #[test]
    fn text_calls_the_only_tool_when_it_takes_one_string() {
        let call = tool_call(&message(vec![Part::text("hi")]), &[echo()]).unwrap();
        assert_eq!(call.tool, "echo");
        assert_eq!(call.arguments["message"], json!("hi"));
        // Two tools: text alone is not enough, and the refusal lists them.
        let two = [echo(), tool("other", json!({"type": "object"}))];
        let refused = tool_call(&message(vec![Part::text("hi")]), &two).unwrap_err();
        assert!(refused.contains("tools: echo, other"), "{refused}");
        // One tool of two arguments: the same.
        let sum = tool(
            "sum",
            json!({"properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        );
        assert!(tool_call(&message(vec![Part::text("1 2")]), &[sum]).is_err());
    }

    #[test]
    fn unknown_tools_and_bad_arguments_are_refused_saying_why() {
        let tools = [echo()];
        let unknown = tool_call(&message(vec![Part::data(json!({"tool": "nope"}))]), &tools);
        assert!(
            unknown
                .unwrap_err()
                .contains("there is no tool \"nope\"; tools: echo")
        );
        let bad = tool_call(
            &message(vec![Part::data(json!({"tool": "echo", "arguments": [1]}))]),
            &tools,
        );
        assert!(bad.unwrap_err().contains("must be an object"));
        let not_named = tool_call(&message(vec![Part::data(json!({"tool": 5}))]), &tools);
        assert!(not_named.unwrap_err().contains("must be a tool's name"));
    }

    #[test]
    fn results_become_parts_and_errors_failures() {
        let image = ContentBlock::image(STANDARD.encode([1u8, 2, 3]), "image/png");
        let text = ContentBlock::text("hello");
        let link =
            ContentBlock::resource_link(Resource::new("file:///tmp/report.pdf", "report.pdf"));
        let resource = ContentBlock::embedded_text("file:///notes/today.md", "# notes");
        let mut result = CallToolResult::success(vec![text, image, resource, link]);
        result.structured_content = Some(json!({"temperature": 21}));
        let Answer::Parts(parts) = answer(result) else {
            panic!("parts")
        };
        assert_eq!(parts[0].as_text(), Some("hello"));
        assert_eq!(parts[1].content, PartContent::Raw(vec![1, 2, 3]));
        assert_eq!(parts[1].media_type.as_deref(), Some("image/png"));
        assert_eq!(parts[2].content, PartContent::Raw(b"# notes".to_vec()));
        assert_eq!(parts[2].filename.as_deref(), Some("today.md"));
        assert_eq!(
            parts[3].content,
            PartContent::Url("file:///tmp/report.pdf".into())
        );
        assert_eq!(
            parts[4].content,
            PartContent::Data(json!({"temperature": 21}))
        );
        let failed = CallToolResult::error(vec![ContentBlock::text("no such zone")]);
        assert_eq!(answer(failed), Answer::Failed("no such zone".into()));
    }
}
