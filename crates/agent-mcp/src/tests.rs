//! Unit tests: server and tool names, the input-schema check, result mapping.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use super::*;

#[test]
fn tool_names_are_prefixed_cleaned_and_bounded() {
    assert_eq!(tool_name("fs", "read_file").unwrap(), "mcp__fs__read_file");
    assert_eq!(tool_name("fs", "notes.read/all").unwrap(), "mcp__fs__notes_read_all");
    let long = "x".repeat(60);
    let err = tool_name("fs", &long).unwrap_err();
    assert!(err.contains("over 64 characters"), "{err}");
    assert!(tool_name("fs", "").is_err());
    assert_eq!(split_tool_name("mcp__fs__read_file"), Some(("fs", "read_file")));
    assert_eq!(split_tool_name("mcp__my-srv__a__b"), Some(("my-srv", "a__b")));
    assert_eq!(split_tool_name("read_file"), None);
    assert_eq!(split_tool_name("mcp____x"), None);
    assert_eq!(split_tool_name("mcp__fs__"), None);
}

#[test]
fn server_names_are_checked() {
    for good in ["fs", "my-server", "a_b", "S3"] {
        assert_eq!(check_server_name(good), Ok(()), "{good}");
    }
    for bad in ["", "a__b", "a_", "a.b", "a b", &"x".repeat(33)] {
        assert!(check_server_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn specs_are_checked_before_anything_starts() {
    assert!(McpServerSpec::stdio("fs", "npx", ["x"]).check().is_ok());
    assert!(McpServerSpec::http("web", "http://127.0.0.1:8000/mcp").check().is_ok());
    let err = McpServerSpec::http("web", "https://example.com/mcp").check().unwrap_err();
    assert_eq!(err.server(), "web");
    assert!(err.to_string().contains("only plain `http://`"), "{err}");
    let err = McpServerSpec::http("web", "ftp://x").check().unwrap_err();
    assert!(err.to_string().starts_with("MCP server `web`: `ftp://x` is not"), "{err}");
    let err = McpServerSpec::stdio("fs", " ", Vec::<String>::new()).check().unwrap_err();
    assert_eq!(err.to_string(), "MCP server `fs`: the command is empty");
    let err = McpServerSpec::stdio("a.b", "x", Vec::<String>::new()).check().unwrap_err();
    assert!(matches!(err, McpError::InvalidSpec { server, .. } if server == "a.b"));
}

#[test]
fn input_schemas_must_be_json_schema() {
    let fine = json!({
        "type": "object",
        "properties": {
            "a": { "anyOf": [{ "type": "string" }, { "type": "null" }], "default": null },
            "b": { "type": "array", "items": { "type": "integer", "exclusiveMinimum": 0 } },
            "c": { "type": "object", "additionalProperties": { "type": "string" } },
            "d": true,
            "e": { "type": "string", "format": "uri", "maxLength": 10, "pattern": "^h" },
        },
        "required": ["a"],
        "$defs": { "x": { "type": "string" } },
        "x-vendor-keyword": { "anything": 1 },
    });
    assert_eq!(check_input_schema(&fine), Vec::<String>::new());
    let bad = json!({
        "type": "object",
        "properties": {
            "x": { "type": "strng" },
            "y": { "minLength": -1 },
            "z": 5,
            "w": { "anyOf": [] },
        },
        "required": "x",
    });
    assert_eq!(
        check_input_schema(&bad),
        [
            "`#/properties/w/anyOf`: must be a non-empty array of schemas",
            "`#/properties/x/type`: unknown type \"strng\"; JSON Schema has: object, string, \
             integer, number, boolean, array, null",
            "`#/properties/y/minLength`: must be a non-negative integer",
            "`#/properties/z`: a schema must be a JSON object or a boolean",
            "`#/required`: must be an array of property names",
        ]
    );
    assert_eq!(
        check_input_schema(&json!({ "type": "string" })),
        ["`#`: the root of an input schema must have \"type\": \"object\""]
    );
    assert_eq!(check_input_schema(&json!([])), ["`#`: an input schema must be a JSON object"]);
}

#[test]
fn results_map_text_errors_and_structured_content() {
    let mut result =
        CallToolResult::success(vec![ContentBlock::text("one"), ContentBlock::text("two")]);
    let out = tool::output("s", "t", result.clone());
    assert!(out.success);
    assert_eq!(out.output, "one\ntwo");
    assert_eq!(out.data, json!({ "server": "s", "tool": "t" }));

    result.is_error = Some(true);
    let out = tool::output("s", "t", result);
    assert!(!out.success);
    assert_eq!(out.data["is_error"], json!(true));

    let mut structured = CallToolResult::success(Vec::new());
    structured.structured_content = Some(json!({ "sum": 3 }));
    let out = tool::output("s", "t", structured);
    assert_eq!(out.output, "{\"sum\":3}");
    assert_eq!(out.data["structured"], json!({ "sum": 3 }));
}

#[test]
fn errors_name_the_server_and_tool() {
    let gone = McpError::ServerGone {
        server: "notes".into(),
        tool: "append_line".into(),
        stderr: "Traceback\nboom\n".into(),
    };
    assert_eq!(gone.server(), "notes");
    assert_eq!(
        gone.to_string(),
        "MCP server `notes` is gone (it exited or its connection closed) during the call of \
         `append_line`; its standard error ends with: Traceback\nboom"
    );
}
