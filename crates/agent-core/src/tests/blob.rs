//! Large contents stored once: references in, contents out, and what happens when a content
//! is missing or damaged.

use serde_json::json;

use super::*;
use crate::blob::{BLOB_THRESHOLD, BlobError, externalize, hash_of, is_ref, resolve};
use crate::{StateStore, ToolCall};

#[tokio::test]
async fn large_strings_are_stored_once_and_come_back_unchanged() {
    let store = InMemoryStateStore::new();
    let big = "é".repeat(BLOB_THRESHOLD); // 2 bytes each: well past the threshold
    let small = "a".repeat(BLOB_THRESHOLD);
    let original =
        json!({ "path": "a.txt", "content": big, "nested": [{ "also": big }], "small": small });
    let mut args = original.clone();

    externalize(&mut args, &store, BLOB_THRESHOLD).await.unwrap();

    assert!(is_ref(&args["content"]), "{args}");
    assert_eq!(args["content"], args["nested"][0]["also"], "one content, one reference");
    assert_eq!(args["content"]["bytes"], big.len());
    assert_eq!(args["small"], original["small"], "at the threshold a string stays in place");
    assert_eq!(args["path"], "a.txt");
    assert!(serde_json::to_string(&args["content"]).unwrap().len() < 200);
    assert_eq!(resolve(&args, &store).await.unwrap(), original);
    let hash = args["content"]["$blob"].as_str().unwrap();
    assert_eq!(hash, hash_of(big.as_bytes()));
}

#[tokio::test]
async fn externalizing_twice_gives_the_same_references() {
    let store = InMemoryStateStore::new();
    let mut once = json!({ "content": "z".repeat(BLOB_THRESHOLD + 1) });
    let mut twice = once.clone();
    externalize(&mut once, &store, BLOB_THRESHOLD).await.unwrap();
    externalize(&mut twice, &store, BLOB_THRESHOLD).await.unwrap();
    externalize(&mut twice, &store, BLOB_THRESHOLD).await.unwrap();
    assert_eq!(once, twice);
}

#[tokio::test]
async fn a_reference_to_a_missing_content_is_a_typed_permanent_error() {
    let store = InMemoryStateStore::new();
    let args = json!({ "content": { "$blob": hash_of(b"never stored"), "bytes": 12 } });

    let err = resolve(&args, &store).await.unwrap_err();

    assert!(matches!(err, BlobError::Missing { bytes: 12, .. }), "{err:?}");
    assert!(err.to_string().contains("is not in the run's store"), "{err}");
    assert_eq!(AgentError::from(err).class(), agent_state::ErrorClass::Permanent);
}

#[tokio::test]
async fn a_damaged_content_is_refused() {
    let store = InMemoryStateStore::new();
    let hash = hash_of(b"the real content");
    store.put_blob(&hash, b"something else").await.unwrap();
    let args = json!({ "content": { "$blob": hash, "bytes": 16 } });

    let err = resolve(&args, &store).await.unwrap_err();

    assert!(matches!(err, BlobError::Damaged { .. }), "{err:?}");
}

#[tokio::test]
async fn objects_that_only_look_like_references_are_left_alone() {
    let store = InMemoryStateStore::new();
    let args = json!({ "a": { "$blob": "md5:abc", "bytes": 3 }, "b": { "$blob": "sha256:x", "bytes": 1, "c": 2 } });
    assert_eq!(resolve(&args, &store).await.unwrap(), args);
}

/// A tool call whose plan step holds a reference writes the whole content, and the audit
/// log keeps the reference, not the content.
#[tokio::test(start_paused = true)]
async fn a_tool_call_runs_with_the_content_and_is_audited_with_the_reference() {
    let s = Services::new().await;
    let mut agent = s.ready(&Probe::default()).await;
    let content = "line\n".repeat(BLOB_THRESHOLD);
    let mut args = json!({ "path": "big.txt", "content": content });
    externalize(&mut args, s.deps.state.as_ref(), BLOB_THRESHOLD).await.unwrap();

    let out = agent
        .ctx_mut()
        .call_tool(&ToolCall { tool: "write_file".into(), args: args.clone() })
        .await
        .unwrap();

    assert!(out.success, "{}", out.output);
    let written = std::fs::read_to_string(s.deps.workspace.workspace().join("big.txt")).unwrap();
    assert_eq!(written, content);
    let audited: Vec<serde_json::Value> = s
        .events("bottom-1")
        .await
        .into_iter()
        .filter_map(|e| match e {
            AuditEvent::ToolCall { args, .. } => Some(args),
            _ => None,
        })
        .collect();
    assert_eq!(audited, [args]);
}

/// A model that writes a large content in its call: the content is stored once and the audit
/// log keeps a reference.
#[tokio::test(start_paused = true)]
async fn a_large_content_in_a_call_is_audited_as_a_reference() {
    let s = Services::new().await;
    let mut agent = s.ready(&Probe::default()).await;
    let content = "y".repeat(BLOB_THRESHOLD * 2);
    let call = ToolCall {
        tool: "write_file".into(),
        args: json!({ "path": "m.txt", "content": content }),
    };

    agent.ctx_mut().call_tool(&call).await.unwrap();

    let audited = s
        .events("bottom-1")
        .await
        .into_iter()
        .find_map(|e| match e {
            AuditEvent::ToolCall { args, .. } => Some(args),
            _ => None,
        })
        .unwrap();
    assert!(is_ref(&audited["content"]), "{audited}");
    let stored = s.deps.state.blob(audited["content"]["$blob"].as_str().unwrap()).await.unwrap();
    assert_eq!(stored.as_deref(), Some(content.as_bytes()));
}
