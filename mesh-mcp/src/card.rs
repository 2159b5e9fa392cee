//! The card of an MCP server's agent: one skill per tool (its name as the skill's id, its title
//! or name, its description, an example call), and the tools' input schemas in the card's one
//! place for such data, the parameters of the extension [`TOOLS_EXTENSION`] (within a budget:
//! a schema that does not fit is left out, the skill stays).

use std::collections::HashMap;

use mesh_agent::model::{AgentCard, AgentExtension, AgentSkill};
use rmcp::model::Tool;
use serde_json::{Value, json};

use crate::call;

/// The URI of the card extension whose `params.tools` maps each tool to its input schema.
pub const TOOLS_EXTENSION: &str = "https://agent-mesh.dev/extensions/mcp-tools/v1";

/// The most bytes of input schemas a card carries.
pub const SCHEMA_BUDGET: usize = 32 * 1024;

/// The longest tool description carried on a skill (longer ones are cut).
const MAX_DESCRIPTION: usize = 2_000;

/// `card` with its skills and tool schemas replaced by `tools`'.
pub fn with_tools(mut card: AgentCard, tools: &[Tool]) -> AgentCard {
    let one_text_tool = call::single_text_argument(tools).is_some();
    card.skills = tools
        .iter()
        .map(|tool| skill(tool, one_text_tool))
        .collect();
    let mut schemas = serde_json::Map::new();
    let mut spent = 0;
    for tool in tools {
        let schema = Value::Object((*tool.input_schema).clone());
        let size = schema.to_string().len();
        if spent + size <= SCHEMA_BUDGET {
            spent += size;
            schemas.insert(tool.name.to_string(), schema);
        }
    }
    let extension = AgentExtension {
        uri: TOOLS_EXTENSION.into(),
        description: Some(
            "The input schema of each tool (a skill's id is the tool's name); a message calls \
             one with a data part {\"tool\": name, \"arguments\": {…}}"
                .into(),
        ),
        required: Some(false),
        params: Some(HashMap::from([(
            "tools".to_owned(),
            Value::Object(schemas),
        )])),
    };
    let extensions = card.capabilities.extensions.get_or_insert_with(Vec::new);
    extensions.retain(|e| e.uri != TOOLS_EXTENSION);
    extensions.push(extension);
    card
}

/// The skill of one tool.
fn skill(tool: &Tool, one_text_tool: bool) -> AgentSkill {
    let description = tool.description.as_deref().unwrap_or_default();
    let mut description: String = description.chars().take(MAX_DESCRIPTION).collect();
    if description.is_empty() {
        description = format!("The MCP tool {}", tool.name);
    }
    let call = json!({"tool": tool.name, "arguments": example_arguments(tool)}).to_string();
    let mut examples = vec![call];
    if one_text_tool {
        examples.insert(0, "(any text: it is the tool's one argument)".into());
    }
    AgentSkill {
        id: tool.name.to_string(),
        name: tool
            .title
            .clone()
            .or_else(|| tool.annotations.as_ref().and_then(|a| a.title.clone()))
            .unwrap_or_else(|| tool.name.to_string()),
        description,
        tags: vec!["mcp".into()],
        examples: Some(examples),
        input_modes: Some(vec!["application/json".into(), "text/plain".into()]),
        output_modes: None,
        security_requirements: None,
    }
}

/// Arguments of the shape the schema asks for: each required property with a placeholder of
/// its type.
fn example_arguments(tool: &Tool) -> Value {
    let properties = tool
        .input_schema
        .get("properties")
        .and_then(Value::as_object);
    let required: Vec<&str> = tool
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut arguments = serde_json::Map::new();
    for name in required {
        let kind = properties
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let placeholder = match kind {
            "number" | "integer" => json!(0),
            "boolean" => json!(false),
            "array" => json!([]),
            "object" => json!({}),
            _ => json!("…"),
        };
        arguments.insert(name.to_owned(), placeholder);
    }
    Value::Object(arguments)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tool(name: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else {
            panic!("an object")
        };
        Tool::new(name.to_owned(), format!("does {name}"), Arc::new(schema))
    }

    /// The card an agent starts with.
    fn base_card() -> AgentCard {
        let handler = mesh_agent::handler_fn(|_ctx: mesh_agent::TaskContext| async {
            Ok(mesh_agent::Outcome::completed())
        });
        mesh_agent::Agent::new("clock", handler)
            .agent_card()
            .clone()
    }

    #[test]
    fn one_skill_per_tool_and_the_schemas_in_the_extension() {
        let tools = [
            tool(
                "get_current_time",
                json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}),
            ),
            tool(
                "get-sum",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            ),
        ];
        let card = with_tools(base_card(), &tools);
        let ids: Vec<&str> = card.skills.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["get_current_time", "get-sum"]);
        assert_eq!(card.skills[1].description, "does get-sum");
        let example: Value =
            serde_json::from_str(&card.skills[1].examples.as_ref().unwrap()[0]).unwrap();
        assert_eq!(
            example,
            json!({"tool": "get-sum", "arguments": {"a": 0, "b": 0}})
        );
        let extension = &card.capabilities.extensions.as_ref().unwrap()[0];
        assert_eq!(extension.uri, TOOLS_EXTENSION);
        let schemas = &extension.params.as_ref().unwrap()["tools"];
        assert_eq!(schemas["get-sum"]["required"], json!(["a", "b"]));
        // Updating replaces the extension, never adds a second.
        let again = with_tools(card, &tools[..1]);
        assert_eq!(again.capabilities.extensions.as_ref().unwrap().len(), 1);
        assert_eq!(again.skills.len(), 1);
    }

    #[test]
    fn schemas_beyond_the_budget_are_left_out_but_the_skills_stay() {
        let big = json!({"type": "object", "description": "x".repeat(SCHEMA_BUDGET)});
        let tools = [tool("small", json!({"type": "object"})), tool("big", big)];
        let card = with_tools(base_card(), &tools);
        assert_eq!(card.skills.len(), 2);
        let schemas = &card.capabilities.extensions.as_ref().unwrap()[0]
            .params
            .as_ref()
            .unwrap()["tools"];
        assert!(schemas.get("small").is_some());
        assert!(schemas.get("big").is_none());
    }
}
