//! Unit tests of the tools module: the schema subset, the registry, each built-in tool and
//! each refusal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _, PermissionsExt as _, symlink};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::*;

fn workspace() -> (TempDir, ToolContext) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(dir.path()).unwrap();
    (dir, ctx)
}

async fn call(ctx: &ToolContext, tool: &str, args: Value) -> Result<ToolOutput, ToolError> {
    ToolRegistry::with_builtins().call(ctx, tool, args).await
}

fn problems(err: ToolError) -> Vec<String> {
    match err {
        ToolError::InvalidArguments { problems, .. } => problems,
        other => panic!("expected invalid arguments, got {other:?}"),
    }
}

fn assert_outside(result: Result<ToolOutput, ToolError>, requested: &str, ctx: &ToolContext) {
    match result {
        Err(err @ ToolError::PathOutsideWorkspace { .. }) => {
            assert!(!err.is_transient());
            assert!(err.to_string().contains("paths must stay inside the workspace"));
            let ToolError::PathOutsideWorkspace { path, workspace } = err else { unreachable!() };
            assert_eq!(path, requested);
            assert_eq!(workspace, ctx.workspace());
        }
        other => panic!("expected a refusal of {requested:?}, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// schema subset

#[test]
fn type_keyword_names_expected_and_found_types() {
    let cases = [
        ("object", json!([]), "expected object, found array"),
        ("string", json!(1), "expected string, found integer"),
        ("integer", json!("5"), "expected integer, found string"),
        ("integer", json!(1.5), "expected integer, found number"),
        ("number", json!(true), "expected number, found boolean"),
        ("boolean", json!(null), "expected boolean, found null"),
        ("array", json!({}), "expected array, found object"),
        ("null", json!(0), "expected null, found integer"),
    ];
    for (ty, value, message) in cases {
        let schema = json!({ "type": ty });
        assert_eq!(validate(&schema, &value), [format!("arguments: {message}")]);
    }
    let accepted = [
        ("object", json!({})),
        ("string", json!("")),
        ("integer", json!(-3)),
        ("integer", json!(u64::MAX)),
        ("number", json!(3)),
        ("number", json!(2.5)),
        ("boolean", json!(false)),
        ("array", json!([1, "a"])),
        ("null", json!(null)),
    ];
    for (ty, value) in accepted {
        assert!(validate(&json!({ "type": ty }), &value).is_empty(), "{ty} {value}");
    }
}

#[test]
fn a_list_of_types_accepts_any_of_them() {
    let schema = json!({ "type": ["string", "null"] });
    assert!(validate(&schema, &json!(null)).is_empty());
    assert!(validate(&schema, &json!("x")).is_empty());
    assert_eq!(validate(&schema, &json!(1)), ["arguments: expected string or null, found integer"]);
}

#[test]
fn required_additional_properties_and_properties_report_each_problem_with_its_path() {
    let schema = json!({
        "type": "object",
        "properties": {
            "path": { "type": "string" },
            "timeout_ms": { "type": "integer" },
        },
        "required": ["path"],
        "additionalProperties": false,
    });
    assert_eq!(
        validate(&schema, &json!({ "timeout_ms": "5", "extra": 1 })),
        [
            "`path`: required property is missing",
            "`extra`: unknown property; expected one of: path, timeout_ms",
            "`timeout_ms`: expected integer, found string",
        ]
    );
    assert!(validate(&schema, &json!({ "path": "a", "timeout_ms": 5 })).is_empty());
    // Without `additionalProperties: false`, other properties are allowed.
    let open = json!({ "type": "object", "properties": { "a": { "type": "string" } } });
    assert!(validate(&open, &json!({ "b": 1 })).is_empty());
    // An object without properties that is closed takes none.
    let closed = json!({ "type": "object", "additionalProperties": false });
    assert_eq!(
        validate(&closed, &json!({ "b": 1 })),
        ["`b`: unknown property; this object takes no properties"]
    );
}

#[test]
fn nested_objects_and_arrays_show_the_full_path() {
    let schema = json!({
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": { "name": { "type": "string" }, "odd key": { "type": "integer" } },
                    "required": ["name", "odd key"],
                },
            },
        },
    });
    let value = json!({ "steps": [{ "name": "a", "odd key": 1 }, { "name": 7 }] });
    assert_eq!(
        validate(&schema, &value),
        [
            "`steps[1][\"odd key\"]`: required property is missing",
            "`steps[1].name`: expected string, found integer",
        ]
    );
}

#[test]
fn items_validates_every_element() {
    let schema = json!({ "type": "array", "items": { "type": "integer", "minimum": 0 } });
    assert_eq!(
        validate(&schema, &json!([1, -2, "x"])),
        ["`[1]`: -2 is less than the minimum 0", "`[2]`: expected integer, found string"]
    );
}

#[test]
fn enum_lists_the_allowed_values() {
    let schema = json!({ "enum": ["fast", "safe", 3] });
    assert!(validate(&schema, &json!("safe")).is_empty());
    assert!(validate(&schema, &json!(3)).is_empty());
    assert_eq!(
        validate(&schema, &json!("slow")),
        ["arguments: expected one of \"fast\", \"safe\", 3, found \"slow\""]
    );
}

#[test]
fn minimum_and_maximum_bound_numbers_inclusively() {
    let schema = json!({ "type": "number", "minimum": 1, "maximum": 2.5 });
    assert!(validate(&schema, &json!(1)).is_empty());
    assert!(validate(&schema, &json!(2.5)).is_empty());
    assert_eq!(validate(&schema, &json!(0.5)), ["arguments: 0.5 is less than the minimum 1"]);
    assert_eq!(validate(&schema, &json!(3)), ["arguments: 3 is greater than the maximum 2.5"]);
    // Large integers compare exactly, not through f64.
    let exact = json!({ "type": "integer", "maximum": 9_007_199_254_740_992_u64 });
    assert_eq!(
        validate(&exact, &json!(9_007_199_254_740_993_u64)),
        ["arguments: 9007199254740993 is greater than the maximum 9007199254740992"]
    );
    // Bounds do not apply to other types.
    assert!(validate(&json!({ "minimum": 5 }), &json!("text")).is_empty());
}

#[test]
fn min_length_counts_characters() {
    let one = json!({ "type": "string", "minLength": 1 });
    assert_eq!(validate(&one, &json!("")), ["arguments: must not be empty"]);
    let three = json!({ "type": "string", "minLength": 3 });
    assert!(validate(&three, &json!("äöü")).is_empty());
    assert_eq!(
        validate(&three, &json!("ab")),
        ["arguments: must be at least 3 characters long, found 2"]
    );
}

#[test]
fn check_schema_accepts_the_builtins_and_the_subset() {
    for tool in ToolRegistry::with_builtins().names() {
        let registry = ToolRegistry::with_builtins();
        let tool = registry.get(tool).unwrap();
        assert_eq!(check_schema(tool.schema()), Vec::<String>::new(), "{}", tool.name());
    }
    let full = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "title": "t",
        "properties": {
            "a": { "type": ["string", "null"], "minLength": 2, "default": "xx" },
            "b": { "type": "array", "items": { "enum": [1, 2] } },
            "c": { "type": "number", "minimum": 0, "maximum": 1.5, "description": "d" },
        },
        "required": ["a"],
        "additionalProperties": false,
    });
    assert!(check_schema(&full).is_empty());
}

#[test]
fn check_schema_refuses_unsupported_keywords_and_bad_shapes() {
    let schema = json!({
        "type": "object",
        "properties": {
            "a": { "type": "string", "pattern": "^x" },
            "b": { "type": "float" },
            "c": { "type": "array", "items": 5 },
            "d/e": { "minLength": -1, "enum": [] },
        },
        "required": "a",
        "additionalProperties": { "type": "string" },
    });
    assert_eq!(
        check_schema(&schema),
        [
            "`#/additionalProperties`: must be `true` or `false` (schemas are not supported here)",
            "`#/properties/a/pattern`: unsupported keyword `pattern`; use only: type, properties, \
             required, additionalProperties, items, enum, minimum, maximum, minLength",
            "`#/properties/b/type`: unknown type \"float\"; use one of: object, string, integer, \
             number, boolean, array, null",
            "`#/properties/c/items`: a schema must be a JSON object",
            "`#/properties/d~1e/enum`: must be a non-empty array of allowed values",
            "`#/properties/d~1e/minLength`: must be a non-negative integer",
            "`#/required`: must be an array of property names",
        ]
    );
    assert_eq!(
        check_schema(&json!({ "type": "string" })),
        ["`#`: the root of an argument schema must have \"type\": \"object\""]
    );
}

// ---------------------------------------------------------------------------------------------
// registry

/// A tool that counts its calls, to prove the registry validates before calling.
struct Counting {
    calls: AtomicUsize,
    schema: Value,
    name: &'static str,
}

impl Counting {
    fn new(name: &'static str, schema: Value) -> Arc<Self> {
        Arc::new(Self { calls: AtomicUsize::new(0), schema, name })
    }
}

#[async_trait]
impl Tool for Counting {
    fn name(&self) -> &str {
        self.name
    }

    fn description(&self) -> &str {
        "counts calls"
    }

    fn schema(&self) -> &Value {
        &self.schema
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutput { success: true, output: "counted".into(), data: args })
    }
}

fn count_schema() -> Value {
    json!({
        "type": "object",
        "properties": { "n": { "type": "integer" } },
        "required": ["n"],
        "additionalProperties": false,
    })
}

#[test]
fn builtins_are_registered_with_their_side_effects() {
    let registry = ToolRegistry::with_builtins();
    assert_eq!(
        registry.names(),
        ["edit_file", "glob", "list_dir", "read_file", "search", "shell", "write_file"]
    );
    let effects: Vec<(&str, bool, bool)> = registry
        .names()
        .into_iter()
        .map(|name| {
            let tool = registry.get(name).unwrap();
            (name, tool.has_side_effects(), tool.idempotent())
        })
        .collect();
    assert_eq!(
        effects,
        [
            ("edit_file", true, false),
            ("glob", false, true),
            ("list_dir", false, true),
            ("read_file", false, true),
            ("search", false, true),
            ("shell", true, false),
            ("write_file", true, true),
        ]
    );
    for name in registry.names() {
        assert!(!registry.get(name).unwrap().description().is_empty());
    }
    assert!(registry.get("nope").is_none());
}

#[test]
fn registering_a_duplicate_name_is_refused_and_keeps_the_first() {
    let mut registry = ToolRegistry::new();
    let first = Counting::new("count", count_schema());
    registry.register(first.clone()).unwrap();
    let err = registry.register(Counting::new("count", count_schema())).unwrap_err();
    assert!(matches!(&err, ToolError::DuplicateTool { name } if name == "count"));
    assert_eq!(
        err.to_string(),
        "a tool named `count` is already registered; give each tool a unique name"
    );
    assert!(!err.is_transient());
    let kept = registry.get("count").unwrap();
    assert!(std::ptr::addr_eq(Arc::as_ptr(&kept), Arc::as_ptr(&first)));

    let mut builtins = ToolRegistry::with_builtins();
    let err = builtins.register(Arc::new(Shell::new())).unwrap_err();
    assert!(matches!(err, ToolError::DuplicateTool { name } if name == "shell"));
}

#[test]
fn registering_an_unsupported_schema_is_refused() {
    let mut registry = ToolRegistry::new();
    let err = registry
        .register(Counting::new("loose", json!({ "type": "object", "oneOf": [] })))
        .unwrap_err();
    match err {
        ToolError::InvalidSchema { tool, problems } => {
            assert_eq!(tool, "loose");
            assert_eq!(problems.len(), 1);
            assert!(problems[0].starts_with("`#/oneOf`: unsupported keyword `oneOf`"));
        }
        other => panic!("expected invalid schema, got {other:?}"),
    }
    assert!(registry.names().is_empty());
}

/// A tool whose schema is any JSON Schema, checked by the program serving it (an MCP tool).
struct Foreign(Value);

#[async_trait]
impl Tool for Foreign {
    fn name(&self) -> &str {
        "foreign"
    }

    fn description(&self) -> &str {
        "served elsewhere"
    }

    fn schema(&self) -> &Value {
        &self.0
    }

    fn has_side_effects(&self) -> bool {
        false
    }

    fn foreign_schema(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput { success: true, output: "served".into(), data: args })
    }
}

#[tokio::test(start_paused = true)]
async fn a_foreign_schema_is_registered_with_any_keywords_and_checked_by_the_known_ones() {
    let (_dir, ctx) = workspace();
    let mut registry = ToolRegistry::new();
    let schema = json!({
        "type": "object",
        "properties": {
            "n": { "type": "integer", "exclusiveMinimum": 0 },
            "s": { "anyOf": [{ "type": "string" }, { "type": "null" }] },
        },
        "required": ["n"],
        "$defs": { "x": { "type": "string" } },
    });
    registry.register(Arc::new(Foreign(schema))).unwrap();
    let out = registry.call(&ctx, "foreign", json!({ "n": 1, "s": null })).await.unwrap();
    assert_eq!(out.output, "served");
    // What the known keywords say is still checked before the call.
    let err = registry.call(&ctx, "foreign", json!({ "n": "1" })).await.unwrap_err();
    assert_eq!(problems(err), ["`n`: expected integer, found string"]);
    // A root that is not an object schema is refused even so.
    let err = ToolRegistry::new().register(Arc::new(Foreign(json!({ "type": "string" }))));
    assert!(matches!(err, Err(ToolError::InvalidSchema { tool, .. }) if tool == "foreign"));
}

#[tokio::test(start_paused = true)]
async fn unknown_tool_lists_the_available_ones() {
    let (_dir, ctx) = workspace();
    let err = call(&ctx, "delete_everything", json!({})).await.unwrap_err();
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        "unknown tool `delete_everything`; use one of: edit_file, glob, list_dir, read_file, \
         search, shell, write_file"
    );
    assert!(matches!(
        err,
        ToolError::UnknownTool { name, available }
            if name == "delete_everything" && available.len() == 7
    ));
}

#[tokio::test(start_paused = true)]
async fn the_registry_validates_before_calling() {
    let (_dir, ctx) = workspace();
    let tool = Counting::new("count", count_schema());
    let mut registry = ToolRegistry::new();
    registry.register(tool.clone()).unwrap();

    let err = registry.call(&ctx, "count", json!({ "n": "1", "m": 2 })).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid arguments for tool `count`: `m`: unknown property; expected one of: n; \
         `n`: expected integer, found string"
    );
    assert_eq!(tool.calls.load(Ordering::SeqCst), 0);

    let out = registry.call(&ctx, "count", json!({ "n": 1 })).await.unwrap();
    assert_eq!(out.data, json!({ "n": 1 }));
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn builtins_refuse_missing_extra_and_mistyped_arguments() {
    let (_dir, ctx) = workspace();
    let cases = [
        ("read_file", json!({}), vec!["`path`: required property is missing"]),
        ("read_file", json!({ "path": 7 }), vec!["`path`: expected string, found integer"]),
        ("read_file", json!({ "path": "" }), vec!["`path`: must not be empty"]),
        ("write_file", json!({ "path": "a.txt" }), vec!["`content`: required property is missing"]),
        (
            "list_dir",
            json!({ "path": ".", "recursive": true }),
            vec!["`recursive`: unknown property; expected one of: path"],
        ),
        (
            "shell",
            json!({ "command": "true", "timeout_ms": "100" }),
            vec!["`timeout_ms`: expected integer, found string"],
        ),
        (
            "shell",
            json!({ "command": "true", "timeout_ms": 0 }),
            vec!["`timeout_ms`: 0 is less than the minimum 1"],
        ),
        ("shell", json!("ls"), vec!["arguments: expected object, found string"]),
    ];
    for (tool, args, expected) in cases {
        let err = call(&ctx, tool, args.clone()).await.unwrap_err();
        assert!(!err.is_transient());
        assert_eq!(problems(err), expected, "{tool} {args}");
    }
}

#[tokio::test(start_paused = true)]
async fn tools_called_directly_still_check_their_arguments() {
    let (_dir, ctx) = workspace();
    let err = ReadFile::new().call(&ctx, json!({ "path": 1 })).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { ref tool, .. } if tool == "read_file"));
    let err = ReadFile::new().call(&ctx, json!({ "path": "" })).await.unwrap_err();
    assert_eq!(problems(err), ["`path`: must not be empty"]);
    let err = Shell::new().call(&ctx, json!({ "command": "" })).await.unwrap_err();
    assert_eq!(problems(err), ["`command`: must not be empty"]);
}

// ---------------------------------------------------------------------------------------------
// context and errors

#[test]
fn the_context_creates_and_canonicalizes_its_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let requested = dir.path().join("new/./ws");
    let ctx = ToolContext::new(&requested).unwrap();
    assert!(ctx.workspace().is_dir());
    assert_eq!(ctx.workspace(), std::fs::canonicalize(dir.path().join("new/ws")).unwrap());
    assert_eq!(ctx.shell_timeout(), Duration::from_secs(30));
    let ctx = ctx.with_shell_timeout(Duration::from_millis(5));
    assert_eq!(ctx.shell_timeout(), Duration::from_millis(5));

    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let err = ToolContext::new(file.join("ws")).unwrap_err();
    assert_eq!(err.path, file.join("ws"));
}

#[test]
fn transient_errors_are_timeouts_and_passing_io_failures() {
    let io = |kind| ToolError::Io {
        tool: "t".into(),
        path: "p".into(),
        source: std::io::Error::from(kind),
    };
    assert!(ToolError::Timeout { tool: "t".into(), after_ms: 1 }.is_transient());
    assert!(io(std::io::ErrorKind::Interrupted).is_transient());
    assert!(io(std::io::ErrorKind::WouldBlock).is_transient());
    assert!(!io(std::io::ErrorKind::NotFound).is_transient());
    assert!(!io(std::io::ErrorKind::PermissionDenied).is_transient());
    assert_eq!(io(std::io::ErrorKind::TimedOut).class(), agent_state::ErrorClass::Transient);
    assert_eq!(ToolError::failed("t", "m").class(), agent_state::ErrorClass::Permanent);
}

#[test]
fn tool_output_round_trips_through_json() {
    let out = ToolOutput { success: false, output: "x".into(), data: json!({ "exit_code": 1 }) };
    let text = serde_json::to_string(&out).unwrap();
    assert_eq!(text, r#"{"success":false,"output":"x","data":{"exit_code":1}}"#);
    assert_eq!(serde_json::from_str::<ToolOutput>(&text).unwrap(), out);
}

// ---------------------------------------------------------------------------------------------
// file tools

#[tokio::test(start_paused = true)]
async fn write_then_read_round_trips_and_creates_parents() {
    let (dir, ctx) = workspace();
    let out = call(&ctx, "write_file", json!({ "path": "src/deep/a.txt", "content": "héllo\n" }))
        .await
        .unwrap();
    assert!(out.success);
    assert_eq!(out.output, "wrote 7 bytes to src/deep/a.txt");
    assert_eq!(out.data, json!({ "path": "src/deep/a.txt", "bytes": 7 }));
    assert_eq!(std::fs::read_to_string(dir.path().join("src/deep/a.txt")).unwrap(), "héllo\n");

    let out = call(&ctx, "read_file", json!({ "path": "./src/../src/deep/a.txt" })).await.unwrap();
    assert!(out.success);
    assert_eq!(out.output, "héllo\n");
    assert_eq!(out.data, json!({ "path": "src/deep/a.txt", "bytes": 7 }));
}

#[tokio::test(start_paused = true)]
async fn write_replaces_atomically_keeps_permissions_and_leaves_no_temp_files() {
    let (dir, ctx) = workspace();
    let script = dir.path().join("run.sh");
    std::fs::write(&script, "old").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();

    call(&ctx, "write_file", json!({ "path": "run.sh", "content": "new" })).await.unwrap();
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "new");
    let mode = std::fs::metadata(&script).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o750);
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["run.sh"]);
}

#[tokio::test(start_paused = true)]
async fn write_refuses_directories_and_the_root() {
    let (dir, ctx) = workspace();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for path in ["sub", ".", "sub/.."] {
        let err =
            call(&ctx, "write_file", json!({ "path": path, "content": "x" })).await.unwrap_err();
        assert!(
            matches!(err, ToolError::Failed { ref tool, .. } if tool == "write_file"),
            "{path}: {err:?}"
        );
    }
    assert!(dir.path().join("sub").is_dir());
}

#[tokio::test(start_paused = true)]
async fn write_through_a_symlink_inside_the_workspace_updates_its_target() {
    let (dir, ctx) = workspace();
    std::fs::write(dir.path().join("real.txt"), "old").unwrap();
    symlink(dir.path().join("real.txt"), dir.path().join("alias.txt")).unwrap();
    call(&ctx, "write_file", json!({ "path": "alias.txt", "content": "new" })).await.unwrap();
    assert_eq!(std::fs::read_to_string(dir.path().join("real.txt")).unwrap(), "new");
    assert!(
        std::fs::symlink_metadata(dir.path().join("alias.txt")).unwrap().file_type().is_symlink()
    );
}

#[tokio::test(start_paused = true)]
async fn read_refuses_files_over_one_mebibyte() {
    let (dir, ctx) = workspace();
    let big = std::fs::File::create(dir.path().join("big.bin")).unwrap();
    big.set_len(MAX_READ_BYTES + 1).unwrap();
    let err = call(&ctx, "read_file", json!({ "path": "big.bin" })).await.unwrap_err();
    assert!(!err.is_transient());
    match err {
        ToolError::TooLarge { tool, size, limit, .. } => {
            assert_eq!(tool, "read_file");
            assert_eq!(size, MAX_READ_BYTES + 1);
            assert_eq!(limit, 1_048_576);
        }
        other => panic!("expected too large, got {other:?}"),
    }

    let exact = "a".repeat(1_048_576);
    std::fs::write(dir.path().join("exact.txt"), &exact).unwrap();
    let out = call(&ctx, "read_file", json!({ "path": "exact.txt" })).await.unwrap();
    assert_eq!(out.output.len(), 1_048_576);
}

#[tokio::test(start_paused = true)]
async fn read_refuses_binary_files_directories_and_reports_missing_ones() {
    let (dir, ctx) = workspace();
    std::fs::write(dir.path().join("bin"), [b'o', b'k', 0xff, 0xfe]).unwrap();
    let err = call(&ctx, "read_file", json!({ "path": "bin" })).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `read_file` failed: `bin` is not UTF-8 text (invalid byte at offset 2); \
         read_file only returns text"
    );

    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let err = call(&ctx, "read_file", json!({ "path": "sub" })).await.unwrap_err();
    assert!(err.to_string().contains("is a directory; use list_dir"));

    let err = call(&ctx, "read_file", json!({ "path": "missing/file.txt" })).await.unwrap_err();
    match err {
        ToolError::Io { tool, path, source } => {
            assert_eq!(tool, "read_file");
            assert_eq!(path, ctx.workspace().join("missing/file.txt"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected an io error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn list_dir_sorts_entries_and_marks_directories() {
    let (dir, ctx) = workspace();
    std::fs::create_dir_all(dir.path().join("src/nested")).unwrap();
    std::fs::write(dir.path().join("b.txt"), "").unwrap();
    std::fs::write(dir.path().join("a.txt"), "").unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();

    let out = call(&ctx, "list_dir", json!({})).await.unwrap();
    assert!(out.success);
    assert_eq!(out.output, "a.txt\nb.txt\nsrc/");
    assert_eq!(out.data, json!({ "path": ".", "entries": ["a.txt", "b.txt", "src/"] }));

    let out = call(&ctx, "list_dir", json!({ "path": "src" })).await.unwrap();
    assert_eq!(out.output, "lib.rs\nnested/");
    assert_eq!(out.data["path"], "src");

    let out = call(&ctx, "list_dir", json!({ "path": "src/nested" })).await.unwrap();
    assert_eq!(out.output, "");
    assert_eq!(out.data["entries"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// FIFOs, sockets and devices: refused, never blocked on

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Turns a hang into a failure: unless [`HangBreaker::disarm`] is called first, a thread
/// opens the FIFO for writing (without blocking itself) and closes it, which releases a reader
/// stuck in `open`; the tool then returns something other than the refusal the test expects.
struct HangBreaker(std::sync::mpsc::Sender<()>);

impl HangBreaker {
    fn arm(fifo: &Path) -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let fifo = fifo.to_path_buf();
        std::thread::spawn(move || {
            if rx.recv_timeout(Duration::from_secs(60))
                == Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            {
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
            }
        });
        Self(tx)
    }

    fn disarm(self) {
        let _ = self.0.send(());
    }
}

fn assert_not_a_file(err: ToolError, tool: &str, path: &str, kind: &str) {
    assert!(!err.is_transient(), "{err:?}");
    assert_eq!(err.class(), agent_state::ErrorClass::Permanent);
    match &err {
        ToolError::NotAFile { tool: t, path: p, kind: k, .. } => {
            assert_eq!((t.as_str(), p.as_str(), *k), (tool, path, kind));
        }
        other => panic!("expected NotAFile for {path}, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn read_file_refuses_a_fifo_without_blocking() {
    let (dir, ctx) = workspace();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let breaker = HangBreaker::arm(&fifo);
    let err = call(&ctx, "read_file", json!({ "path": "pipe" })).await.unwrap_err();
    breaker.disarm();
    assert_eq!(
        err.to_string(),
        "tool `read_file`: `pipe` is a FIFO (named pipe); only regular files can be read"
    );
    assert_not_a_file(err, "read_file", "pipe", "a FIFO (named pipe)");

    // Through a symlink inside the workspace, too.
    symlink(&fifo, dir.path().join("alias")).unwrap();
    let breaker = HangBreaker::arm(&fifo);
    let err = call(&ctx, "read_file", json!({ "path": "alias" })).await.unwrap_err();
    breaker.disarm();
    assert_not_a_file(err, "read_file", "pipe", "a FIFO (named pipe)");
}

#[tokio::test(start_paused = true)]
async fn write_file_refuses_a_fifo() {
    let (dir, ctx) = workspace();
    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    // A reader is waiting, so an O_WRONLY open of the FIFO would succeed and write into it.
    let reader =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&fifo).unwrap();
    let err =
        call(&ctx, "write_file", json!({ "path": "pipe", "content": "x" })).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool `write_file`: `pipe` is a FIFO (named pipe); only regular files can be written"
    );
    assert_not_a_file(err, "write_file", "pipe", "a FIFO (named pipe)");
    // Nothing went into the pipe and it is still a pipe; no temporary file is left.
    let mut got = Vec::new();
    let read = (&reader).read_to_end(&mut got);
    assert!(got.is_empty(), "{read:?} {got:?}");
    assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["pipe"]);
}

#[tokio::test(start_paused = true)]
async fn file_tools_refuse_sockets_and_list_dir_refuses_a_fifo() {
    let (dir, ctx) = workspace();
    let _listener = std::os::unix::net::UnixListener::bind(dir.path().join("sock")).unwrap();
    let err = call(&ctx, "read_file", json!({ "path": "sock" })).await.unwrap_err();
    assert_not_a_file(err, "read_file", "sock", "a socket");
    let err =
        call(&ctx, "write_file", json!({ "path": "sock", "content": "x" })).await.unwrap_err();
    assert_not_a_file(err, "write_file", "sock", "a socket");

    let fifo = dir.path().join("pipe");
    mkfifo(&fifo);
    let breaker = HangBreaker::arm(&fifo);
    let err = call(&ctx, "list_dir", json!({ "path": "pipe" })).await.unwrap_err();
    breaker.disarm();
    assert_eq!(
        err.to_string(),
        "tool `list_dir`: `pipe` is a FIFO (named pipe); only directories can be listed"
    );
    assert_not_a_file(err, "list_dir", "pipe", "a FIFO (named pipe)");
    std::fs::write(dir.path().join("plain.txt"), "x").unwrap();
    let err = call(&ctx, "list_dir", json!({ "path": "plain.txt" })).await.unwrap_err();
    assert_not_a_file(err, "list_dir", "plain.txt", "a regular file");
}

// ---------------------------------------------------------------------------------------------
// path confinement

#[tokio::test(start_paused = true)]
async fn paths_climbing_out_are_refused_by_every_file_tool() {
    let (_dir, ctx) = workspace();
    let requests = [
        ("read_file", json!({ "path": "../escape" })),
        ("read_file", json!({ "path": "a/../../escape" })),
        ("write_file", json!({ "path": "../escape", "content": "x" })),
        ("list_dir", json!({ "path": ".." })),
    ];
    for (tool, args) in requests {
        let requested = args["path"].as_str().unwrap().to_owned();
        assert_outside(call(&ctx, tool, args).await, &requested, &ctx);
    }
    let parent = ctx.workspace().parent().unwrap();
    assert!(!parent.join("escape").exists());
}

#[tokio::test(start_paused = true)]
async fn absolute_paths_outside_are_refused_and_inside_are_allowed() {
    let (dir, ctx) = workspace();
    assert_outside(
        call(&ctx, "read_file", json!({ "path": "/etc/passwd" })).await,
        "/etc/passwd",
        &ctx,
    );
    assert_outside(call(&ctx, "list_dir", json!({ "path": "/" })).await, "/", &ctx);
    std::fs::write(dir.path().join("in.txt"), "inside").unwrap();
    let inside = ctx.workspace().join("in.txt");
    let out = call(&ctx, "read_file", json!({ "path": inside.to_str().unwrap() })).await.unwrap();
    assert_eq!(out.output, "inside");
}

#[tokio::test(start_paused = true)]
async fn a_sibling_directory_sharing_the_name_prefix_is_outside() {
    let parent = tempfile::tempdir().unwrap();
    let ctx = ToolContext::new(parent.path().join("ws")).unwrap();
    std::fs::create_dir(parent.path().join("ws-other")).unwrap();
    std::fs::write(parent.path().join("ws-other/secret"), "s").unwrap();
    assert_outside(
        call(&ctx, "read_file", json!({ "path": "../ws-other/secret" })).await,
        "../ws-other/secret",
        &ctx,
    );
}

#[tokio::test(start_paused = true)]
async fn symlinks_pointing_outside_are_refused() {
    let (dir, ctx) = workspace();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    symlink(outside.path().join("secret.txt"), dir.path().join("link.txt")).unwrap();
    symlink(outside.path(), dir.path().join("out")).unwrap();

    let requests = [
        ("read_file", json!({ "path": "link.txt" })),
        ("read_file", json!({ "path": "out/secret.txt" })),
        ("list_dir", json!({ "path": "out" })),
        ("write_file", json!({ "path": "link.txt", "content": "pwned" })),
        ("write_file", json!({ "path": "out/new.txt", "content": "pwned" })),
        ("write_file", json!({ "path": "out/deeper/new.txt", "content": "pwned" })),
    ];
    for (tool, args) in requests {
        let requested = args["path"].as_str().unwrap().to_owned();
        assert_outside(call(&ctx, tool, args).await, &requested, &ctx);
    }
    assert_eq!(std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(), "secret");
    let names: Vec<_> = std::fs::read_dir(outside.path()).unwrap().collect();
    assert_eq!(names.len(), 1, "nothing was created outside the workspace");

    // Listing the workspace shows the links without following them.
    let out = call(&ctx, "list_dir", json!({})).await.unwrap();
    assert_eq!(out.output, "link.txt\nout");
}

#[tokio::test(start_paused = true)]
async fn a_workspace_reached_through_a_symlink_still_confines() {
    let real = tempfile::tempdir().unwrap();
    let links = tempfile::tempdir().unwrap();
    symlink(real.path(), links.path().join("ws")).unwrap();
    let ctx = ToolContext::new(links.path().join("ws")).unwrap();
    assert_eq!(ctx.workspace(), std::fs::canonicalize(real.path()).unwrap());
    call(&ctx, "write_file", json!({ "path": "a.txt", "content": "x" })).await.unwrap();
    assert!(real.path().join("a.txt").is_file());
    assert_outside(call(&ctx, "read_file", json!({ "path": "../a.txt" })).await, "../a.txt", &ctx);
}

// ---------------------------------------------------------------------------------------------
// shell

#[tokio::test(start_paused = true)]
async fn shell_runs_in_the_workspace_with_stdin_closed() {
    let (dir, ctx) = workspace();
    std::fs::write(dir.path().join("marker"), "").unwrap();
    let out = call(&ctx, "shell", json!({ "command": "pwd; ls; cat" })).await.unwrap();
    assert!(out.success);
    let expected = format!("{}\nmarker\n", ctx.workspace().display());
    assert_eq!(out.output, expected);
    assert_eq!(
        out.data,
        json!({
            "exit_code": 0,
            "signal": null,
            "stdout": expected,
            "stderr": "",
            "stdout_truncated": false,
            "stderr_truncated": false,
        })
    );
}

#[tokio::test(start_paused = true)]
async fn shell_reports_a_non_zero_exit_with_stderr() {
    let (_dir, ctx) = workspace();
    let out = call(&ctx, "shell", json!({ "command": "echo partial; echo oops >&2; exit 3" }))
        .await
        .unwrap();
    assert!(!out.success);
    assert_eq!(out.output, "partial\n[stderr]\noops\n[exit code 3]");
    assert_eq!(out.data["exit_code"], 3);
    assert_eq!(out.data["stderr"], "oops\n");
}

#[tokio::test(start_paused = true)]
async fn shell_waits_in_real_time_on_paused_tokio_time() {
    let (_dir, ctx) = workspace();
    let out = call(&ctx, "shell", json!({ "command": "sleep 0.2; echo done", "timeout_ms": 5000 }))
        .await
        .unwrap();
    assert!(out.success);
    assert_eq!(out.output, "done\n");
}

#[tokio::test(start_paused = true)]
async fn shell_times_out_and_the_error_is_transient() {
    let (_dir, ctx) = workspace();
    let err =
        call(&ctx, "shell", json!({ "command": "sleep 5", "timeout_ms": 300 })).await.unwrap_err();
    assert!(err.is_transient());
    assert!(matches!(
        err,
        ToolError::Timeout { ref tool, after_ms: 300 } if tool == "shell"
    ));
    assert_eq!(
        err.to_string(),
        "tool `shell` timed out after 300 ms; do less per call, or raise the call's \
         `timeout_ms` (`shell`) or the team's `[timeouts] tool_ms`"
    );
}

#[tokio::test(start_paused = true)]
async fn shell_uses_the_context_timeout_by_default() {
    let (_dir, ctx) = workspace();
    let ctx = ctx.with_shell_timeout(Duration::from_millis(200));
    let err = call(&ctx, "shell", json!({ "command": "sleep 5" })).await.unwrap_err();
    assert!(matches!(err, ToolError::Timeout { after_ms: 200, .. }));
}

/// Whether process `pid` (a `sleep`) can never run again: it is gone, or not in interruptible
/// sleep (so exiting or a zombie), or has SIGKILL pending. Checked without waiting.
fn is_killed(pid: &str) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    const SIGKILL_BIT: u64 = 1 << (9 - 1);
    let pending = |name: &str| u64::from_str_radix(&field(name), 16).unwrap_or(0);
    let kill_pending = (pending("SigPnd:") | pending("ShdPnd:")) & SIGKILL_BIT != 0;
    !field("State:").starts_with('S') || kill_pending
}

/// A `sleep` argument no other process has (30 seconds and a unique fraction), so that the
/// process can be found in `/proc` from outside the sandbox's PID namespace.
fn unique_sleep() -> String {
    format!("30.{:012}", uuid::Uuid::new_v4().as_u128() % 1_000_000_000_000)
}

/// The host pids of the processes that have `arg` as one of their arguments and can still run
/// (see [`is_killed`]).
fn alive_with_arg(arg: &str) -> Vec<String> {
    let mut alive = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if cmdline.split(|b| *b == 0).any(|a| a == arg.as_bytes()) && !is_killed(&pid) {
            alive.push(pid);
        }
    }
    alive
}

#[tokio::test(start_paused = true)]
async fn shell_timeout_kills_background_processes_too() {
    let (_dir, ctx) = workspace();
    let sleep = unique_sleep();
    let command = format!("sleep {sleep} & wait");
    let err =
        call(&ctx, "shell", json!({ "command": command, "timeout_ms": 1000 })).await.unwrap_err();
    assert!(matches!(err, ToolError::Timeout { .. }));
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new(), "background sleep survived");
}

#[tokio::test(start_paused = true)]
async fn shell_returns_when_a_background_process_holds_the_output_open() {
    let (_dir, ctx) = workspace();
    let sleep = unique_sleep();
    let command = format!("sleep {sleep} & echo started");
    let out =
        call(&ctx, "shell", json!({ "command": command, "timeout_ms": 10000 })).await.unwrap();
    assert!(out.success);
    assert_eq!(out.output, "started\n");
    assert_eq!(alive_with_arg(&sleep), Vec::<String>::new(), "background sleep survived");
}

#[tokio::test(start_paused = true)]
async fn shell_truncates_large_output_with_a_marker() {
    let (_dir, ctx) = workspace();
    let out = call(
        &ctx,
        "shell",
        json!({ "command": "head -c 100000 /dev/zero | tr '\\0' a; head -c 70000 /dev/zero | tr '\\0' b >&2" }),
    )
    .await
    .unwrap();
    assert!(out.success);
    let stdout = out.data["stdout"].as_str().unwrap();
    assert_eq!(
        stdout,
        format!(
            "{}\n[truncated: {} more bytes]\n",
            "a".repeat(MAX_STREAM_BYTES),
            100_000 - MAX_STREAM_BYTES
        )
    );
    let stderr = out.data["stderr"].as_str().unwrap();
    assert!(stderr.starts_with(&"b".repeat(MAX_STREAM_BYTES)));
    assert!(
        stderr.ends_with(&format!("\n[truncated: {} more bytes]\n", 70_000 - MAX_STREAM_BYTES))
    );
    assert_eq!(out.data["stdout_truncated"], true);
    assert_eq!(out.data["stderr_truncated"], true);
    assert!(out.output.contains("[stderr]\nbbb"));
}

#[tokio::test(start_paused = true)]
async fn shell_side_effects_stay_visible_to_the_file_tools() {
    let (_dir, ctx) = workspace();
    call(&ctx, "shell", json!({ "command": "mkdir -p out && printf 'built' > out/artifact" }))
        .await
        .unwrap();
    let out = call(&ctx, "read_file", json!({ "path": "out/artifact" })).await.unwrap();
    assert_eq!(out.output, "built");
}

#[test]
fn display_paths_are_relative_to_the_workspace() {
    let root = Path::new("/ws");
    assert_eq!(path::display(root, Path::new("/ws")), ".");
    assert_eq!(path::display(root, Path::new("/ws/a/b")), "a/b");
}

mod coding;
mod escapes;
mod journal;
mod masked;
