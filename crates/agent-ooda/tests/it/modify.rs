//! Self-modification: levels 1 to 4, refusals that change nothing, rollback, and a kill during
//! a modification.

use agent_core::AuditLog;
use agent_core::ScriptedAnswer;
use agent_ooda::{Ooda, ReasonerLoop};
use agent_state::ooda::{OodaEventKind, StopReason};
use agent_state::{AgentId, DecisionStatus};
use governance::Governance;
use serde_json::{Value, json};

use crate::support::*;

fn outcome(data: &Value) -> &str {
    data["outcome"].as_str().unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_level_one_change_is_recorded_then_applied_at_the_next_step_as_a_new_version() {
    let w = World::new().await;
    let mut ctx = w
        .ctx(script([modify("prompt", "prompt", json!({"text": "Be brief."}), 1), finish("done")]));
    let mut ooda = ooda(config(2));

    let first = ooda.step(&mut ctx).await.unwrap();
    assert!(first.steps.iter().any(|s| s.step_type == OodaEventKind::ModifySelf && s.success));
    assert_eq!(ooda.state().state_version, 1, "not applied yet: its intent is recorded");
    assert_eq!(ooda.pending().unwrap().version, 2);
    assert_eq!(ooda.config().prompt, "");

    let second = ooda.step(&mut ctx).await.unwrap();
    assert_eq!(second.steps.len(), 1, "a turn of its own");
    assert_eq!(ooda.state().state_version, 2);
    assert_eq!(ooda.config().prompt, "Be brief.");
    let record = &ooda.versions()[0];
    assert_eq!(record.version, 2);
    assert_ne!(record.before_hash, record.after_hash);
    let applied = w.modifications().await;
    assert_eq!(applied.iter().map(outcome).collect::<Vec<_>>(), ["validated", "applied"]);
    assert_eq!(applied[1]["before"], json!(record.before_hash));

    let end = ooda.run(&mut ctx, 3).await.unwrap();
    assert!(matches!(end.stop, Some(StopReason::Finished { .. })));
}

/// Runs one step with `request` as the decision and checks it was refused with `expected` in
/// its reason, leaving the agent as it was.
async fn refused(config: agent_state::ooda::OodaConfig, request: ScriptedAnswer, expected: &str) {
    let w = World::new().await;
    w.write("notes.md", "hello\n");
    let mut ctx = w.ctx(script([request]));
    let mut ooda = ooda(config);
    let (config_before, version_before) = (ooda.config().clone(), ooda.state().state_version);

    let end = ooda.step(&mut ctx).await.unwrap();

    let step = end.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
    assert!(!step.success);
    let error = step.error.clone().unwrap();
    assert!(error.contains(expected), "{error} should say {expected}");
    assert_eq!(outcome(&w.modifications().await[0]), "refused");
    assert_eq!(ooda.config(), &config_before);
    assert_eq!(ooda.state().state_version, version_before);
    assert!(ooda.pending().is_none());
    assert_eq!(w.read("notes.md"), "hello\n");
    let denied = w
        .audit
        .records(Some(&AgentId::new(ME)))
        .await
        .unwrap()
        .into_iter()
        .any(|r| matches!(r.event, agent_core::AuditEvent::Denied { ref action, .. } if action == "modify_self"));
    assert!(denied, "the refusal is audited");
}

#[tokio::test(start_paused = true)]
async fn bad_or_forbidden_changes_are_refused_with_typed_reasons_and_change_nothing() {
    let two = config(2);
    refused(
        two.clone(),
        modify("config", "max_iterations", json!({"value": 0}), 2),
        "max_iterations",
    )
    .await;
    refused(two.clone(), modify("config", "max_iterations", json!({"value": "many"}), 2), "schema")
        .await;
    refused(
        two.clone(),
        modify("firmware", "x", json!({}), 1),
        "unknown modification type `firmware`",
    )
    .await;
    refused(
        two.clone(),
        modify("prompt", "prompt", json!({"text": "x"}), 7),
        "safety level 7 does not exist",
    )
    .await;
    refused(
        two.clone(),
        modify("config", "colour", json!({"value": 1}), 1),
        "target colour does not exist",
    )
    .await;
    refused(
        two.clone(),
        modify("code", "../outside.md", json!({"content": "x"}), 1),
        "not a path inside the workspace",
    )
    .await;
    refused(
        two.clone(),
        modify("code", "notes.md", json!({"replace": {"old": "bye", "new": "x"}}), 1),
        "does not exist",
    )
    .await;
    refused(
        two.clone(),
        modify("code", "data.json", json!({"content": "{not json"}), 2),
        "not valid JSON",
    )
    .await;
    refused(
        two.clone(),
        modify("prompt", "prompt", json!({"text": "x"}), 3),
        "exceeds this agent's allowed level 2",
    )
    .await;
    refused(two.clone(), modify("architecture", "tools", json!({"add": ["shell"]}), 2), "widen")
        .await;
    refused(
        two.clone(),
        modify("config", "self_modification_level", json!({"value": 4}), 1),
        "widen",
    )
    .await;
    let mut off = config(2);
    off.self_modification_enabled = false;
    refused(off, modify("prompt", "prompt", json!({"text": "x"}), 1), "disabled").await;
    refused(config(3), modify("prompt", "prompt", json!({"text": "x"}), 3), "test_command").await;
    refused(config(4), modify("prompt", "prompt", json!({"text": "x"}), 4), "[approvals] humans")
        .await;
}

fn tested(level: u8) -> agent_state::ooda::OodaConfig {
    let mut c = config(level);
    c.test_command = Some("grep -q hello notes.md".into());
    c
}

// Real time: the test command is a real process, which paused time would time out at once.
#[tokio::test]
async fn a_level_three_change_that_fails_the_tests_is_rolled_back_and_one_that_passes_applies() {
    let w = World::new().await;
    w.write("notes.md", "hello world\n");
    let mut ctx = w.ctx(script([
        modify("code", "notes.md", json!({"content": "goodbye\n"}), 3),
        modify("code", "notes.md", json!({"replace": {"old": "world", "new": "there"}}), 3),
    ]));
    let mut ooda = ooda(tested(3));

    let first = ooda.step(&mut ctx).await.unwrap();
    let step = first.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
    assert!(!step.success);
    let error = step.error.clone().unwrap();
    assert!(error.contains("fail after the change, so it was rolled back"), "{error}");
    assert_eq!(outcome(&w.modifications().await[0]), "rolled_back");
    assert_eq!(w.read("notes.md"), "hello world\n", "the workspace never saw it");
    assert_eq!(ooda.state().state_version, 1);

    ooda.step(&mut ctx).await.unwrap(); // validated on the copy
    assert_eq!(w.read("notes.md"), "hello world\n");
    ooda.step(&mut ctx).await.unwrap(); // applied
    assert_eq!(w.read("notes.md"), "hello there\n");
    assert_eq!(ooda.state().state_version, 2);
    assert!(
        !w.dir
            .path()
            .read_dir()
            .unwrap()
            .any(|e| { e.unwrap().file_name().to_string_lossy().starts_with("strata-ooda-") })
    );
}

// Real time: the test command is a real process, which paused time would time out at once.
#[tokio::test]
async fn tests_that_fail_before_the_change_refuse_it() {
    let w = World::new().await;
    w.write("notes.md", "nothing yet\n");
    let mut ctx = w.ctx(script([modify("code", "notes.md", json!({"content": "hello\n"}), 3)]));
    let mut ooda = ooda(tested(3));

    let end = ooda.step(&mut ctx).await.unwrap();

    let step = end.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
    assert!(step.error.as_deref().unwrap().contains("fail before the change"));
    assert_eq!(w.read("notes.md"), "nothing yet\n");
}

#[tokio::test(start_paused = true)]
async fn a_level_four_change_waits_for_a_human_and_applies_only_after_a_signature() {
    for approve in [true, false] {
        let w = World::new().await;
        let mut ctx = w.ctx(script([modify("prompt", "prompt", json!({"text": "Ask first."}), 4)]));
        let mut ooda = Ooda::new(AgentId::new(ME), config(4), ReasonerLoop, &tools(), START)
            .unwrap()
            .with_approvers(vec!["alice".into()]);

        ooda.step(&mut ctx).await.unwrap();
        let decision = ooda.pending().unwrap().decision.expect("a decision for a human");
        let stored = w.governance.get(decision).await.unwrap().unwrap();
        assert_eq!(stored.status, DecisionStatus::Pending);
        assert_eq!(stored.human_approval.unwrap().allowed, ["alice"]);
        // Waiting: nothing runs, however often it is stepped.
        for _ in 0..3 {
            let end = ooda.step(&mut ctx).await.unwrap();
            assert!(end.waiting && end.steps.is_empty());
        }
        assert_eq!(ooda.config().prompt, "");

        let alice = AgentId::human("alice").unwrap();
        if approve {
            w.governance.sign(decision, &alice, START).await.unwrap();
        } else {
            w.governance.veto(decision, &alice, "not now", START).await.unwrap();
        }
        let end = ooda.step(&mut ctx).await.unwrap();

        let last = w.modifications().await.pop().unwrap();
        if approve {
            assert_eq!(outcome(&last), "applied");
            assert_eq!(
                (ooda.config().prompt.as_str(), ooda.state().state_version),
                ("Ask first.", 2)
            );
        } else {
            assert_eq!(outcome(&last), "vetoed");
            assert!(last["reason"].as_str().unwrap().contains("not now"));
            assert!(!end.steps[0].success);
            assert_eq!((ooda.config().prompt.as_str(), ooda.state().state_version), ("", 1));
        }
        assert!(ooda.pending().is_none());
    }
}

#[tokio::test(start_paused = true)]
async fn a_rollback_brings_back_an_earlier_version_as_a_new_one() {
    let w = World::new().await;
    w.write("notes.md", "v1\n");
    let mut ctx = w.ctx(script([
        modify("code", "notes.md", json!({"content": "v2\n"}), 2),
        modify("prompt", "prompt", json!({"text": "third"}), 1),
        modify("code", "new.md", json!({"content": "created\n"}), 2),
    ]));
    let mut ooda = ooda(config(2));
    for _ in 0..6 {
        ooda.step(&mut ctx).await.unwrap();
    }
    assert_eq!(ooda.state().state_version, 4);
    assert_eq!((w.read("notes.md").as_str(), ooda.config().prompt.as_str()), ("v2\n", "third"));

    assert!(matches!(
        ooda.rollback(4),
        Err(agent_ooda::OodaError::NoSuchVersion { asked: 4, current: 4 })
    ));
    assert!(matches!(ooda.rollback(0), Err(agent_ooda::OodaError::NoSuchVersion { .. })));
    assert_eq!(ooda.rollback(1).unwrap(), (5, None));
    ooda.step(&mut ctx).await.unwrap();

    assert_eq!(ooda.state().state_version, 5);
    assert_eq!(w.read("notes.md"), "v1\n");
    assert_eq!(ooda.config().prompt, "");
    assert!(!w.dir.path().join("new.md").exists(), "a file created since is removed");
    let last = w.modifications().await.pop().unwrap();
    assert_eq!(outcome(&last), "rolled_back_to");
    assert_eq!(last["version"], 5);
    assert_eq!(ooda.config(), &ooda.versions()[0].config_before, "the configuration of version 1");
}

#[tokio::test(start_paused = true)]
async fn a_kill_during_a_modification_leaves_the_old_version_or_completes_the_new_one() {
    // The agent is "killed" at each point of a code change: after its intent is saved, and
    // after the file was written but before the new version was saved. A fresh agent restored
    // from the last snapshot (on the same store, whose journal survived) finishes it.
    for kill_after_write in [false, true] {
        let w = World::new().await;
        w.write("notes.md", "old\n");
        let mut ctx = w.ctx(script([modify("code", "notes.md", json!({"content": "new\n"}), 2)]));
        let mut ooda = ooda(config(2));
        ooda.step(&mut ctx).await.unwrap();
        let saved = ooda.snapshot(); // the turn's end: the intent is saved
        assert_eq!((ooda.state().state_version, w.read("notes.md").as_str()), (1, "old\n"));
        if kill_after_write {
            ooda.step(&mut ctx).await.unwrap(); // writes the file and records v2 ...
            assert_eq!(w.read("notes.md"), "new\n");
            // ... but the snapshot with v2 is never saved: the old one is restored.
        }
        drop(ooda);

        let mut resumed =
            Ooda::new(AgentId::new(ME), config(2), ReasonerLoop, &tools(), START).unwrap();
        resumed.restore(saved, START).unwrap();
        assert_eq!(resumed.state().state_version, 1);
        assert_eq!(resumed.pending().unwrap().version, 2);
        let mut ctx = w.ctx(script([finish("done")]));
        resumed.step(&mut ctx).await.unwrap();

        assert_eq!(resumed.state().state_version, 2);
        assert_eq!(w.read("notes.md"), "new\n");
        assert_eq!(resumed.versions().len(), 1);
        assert_eq!(resumed.versions()[0].files[0].before.as_deref(), Some("old\n"));
    }
}

/// The team file gives the agent safety level 3 and a test command. The agent's own proposals
/// cannot loosen either: a `test_command = "true"` change is refused, and a destructive code
/// change it calls level 1 is validated at its team's level 3 (the tests fail after it, so it
/// is rolled back, the workspace untouched).
// Real time: the test command is a real process, which paused time would time out at once.
#[tokio::test]
async fn the_agent_cannot_set_its_own_safety_level_or_test_command() {
    let w = World::new().await;
    w.write("notes.md", "hello world\n");
    let mut team = tested(3);
    team.safety_level = agent_state::ooda::SafetyLevel::MEDIUM;
    let mut ctx = w.ctx(script([
        modify("config", "test_command", json!({"value": "true"}), 1),
        modify("config", "safety_level", json!({"value": 1}), 1),
        modify("code", "notes.md", json!({"content": "rm -rf ./*\n"}), 1),
    ]));
    let mut ooda = ooda(team.clone());

    for (i, expected) in ["never by the agent", "never by the agent"].into_iter().enumerate() {
        let end = ooda.step(&mut ctx).await.unwrap();
        let step = end.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
        let error = step.error.clone().unwrap_or_default();
        assert!(!step.success && error.contains(expected), "{i}: {error}");
    }
    assert_eq!(ooda.config(), &team, "nothing changed");

    let end = ooda.step(&mut ctx).await.unwrap();
    let step = end.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
    let error = step.error.clone().unwrap_or_default();
    assert!(!step.success && error.contains("fail after the change"), "{error}");
    assert_eq!(w.read("notes.md"), "hello world\n", "the workspace never saw it");
    assert_eq!(ooda.state().state_version, 1);
    let outcomes: Vec<String> =
        w.modifications().await.iter().map(|d| outcome(d).to_owned()).collect();
    assert_eq!(outcomes, ["refused", "refused", "rolled_back"]);
}

/// A code change is never unchecked: without a safety level of its own from the team file, a
/// code change called level 1 still gets the level-2 syntax check, and an agent allowed only
/// level 1 may not make one.
#[tokio::test(start_paused = true)]
async fn a_code_change_is_validated_at_least_at_level_two_whatever_it_claims() {
    refused(
        config(2),
        modify("code", "data.json", json!({"content": "{not json"}), 1),
        "not valid JSON",
    )
    .await;
    let mut one = config(1);
    one.safety_level = agent_state::ooda::SafetyLevel::READ_ONLY;
    refused(one, modify("code", "notes.md", json!({"content": "x"}), 1), "exceeds").await;
}

/// A saved snapshot (the agent's own state) whose configuration carries other safety settings
/// or another test command does not get them back: the team's are kept.
#[tokio::test(start_paused = true)]
async fn a_restored_snapshot_cannot_change_the_supervised_settings() {
    let team = tested(3);
    let ooda = ooda(team.clone());
    let mut saved = ooda.snapshot();
    saved["config"]["test_command"] = json!("true");
    saved["config"]["safety_level"] = json!(1);
    saved["config"]["self_modification_level"] = json!(4);
    saved["config"]["prompt"] = json!("restored");
    let mut resumed =
        Ooda::new(AgentId::new(ME), team.clone(), ReasonerLoop, &tools(), START).unwrap();
    resumed.restore(saved, START).unwrap();
    assert_eq!(resumed.config().prompt, "restored", "the rest is restored");
    assert_eq!(resumed.config().test_command, team.test_command);
    assert_eq!(resumed.config().safety_level, team.safety_level);
    assert_eq!(resumed.config().self_modification_level, team.self_modification_level);
}

/// An OODA agent configured without `test_exec` cannot run its test step, without `code_gen`
/// cannot change code: the change is refused (audited), nothing runs or changes.
#[tokio::test(start_paused = true)]
async fn an_agent_without_test_exec_or_code_gen_cannot_run_tests_or_change_code() {
    use agent_state::{AgentConfig, AgentLayer, Capability};
    for (missing, request, expected) in [
        (
            Capability::TestExec,
            modify("prompt", "prompt", json!({"text": "x"}), 3),
            "lacks the `test_exec` capability",
        ),
        (
            Capability::CodeGen,
            modify("code", "notes.md", json!({"content": "x"}), 2),
            "lacks the `code_gen` capability",
        ),
    ] {
        let w = World::new().await;
        w.write("notes.md", "hello\n");
        let caps = AgentLayer::Bottom.capabilities().filter(|c| *c != missing);
        let config = AgentConfig::new(ME, "Improver", AgentLayer::Bottom).with_capabilities(caps);
        let mut ctx = w.ctx_as(std::sync::Arc::new(script([request])), config);
        let mut ooda = ooda(tested(3));
        let end = ooda.step(&mut ctx).await.unwrap();
        let step = end.steps.iter().find(|s| s.step_type == OodaEventKind::ModifySelf).unwrap();
        let error = step.error.clone().unwrap_or_default();
        assert!(!step.success && error.contains(expected), "{error}");
        assert_eq!(w.read("notes.md"), "hello\n");
        assert_eq!(ooda.state().state_version, 1);
    }
}
