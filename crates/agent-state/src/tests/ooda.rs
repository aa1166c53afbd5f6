//! The OODA schemas: defaults, validation, the version-1 migration, immutable updates,
//! modifications and their checks.

use proptest::prelude::*;
use serde_json::json;

use super::id;
use crate::ooda::*;
use crate::{Timestamp, decode, encode};

const T0: Timestamp = Timestamp(1_000);

fn config() -> OodaConfig {
    let mut c = OodaConfig::new("Refactorer", "make notes.md clearer");
    c.tools = vec!["read_file".into(), "write_file".into()];
    c.self_modification_enabled = true;
    c
}

fn ceiling() -> Vec<String> {
    ["read_file", "write_file", "edit_file"].map(String::from).to_vec()
}

fn modification(value: serde_json::Value) -> Modification {
    Modification::parse(&value).unwrap()
}

#[test]
fn a_new_config_has_seed_004s_defaults_and_validates() {
    let c = OodaConfig::new("Dev", "ship");
    assert_eq!((c.max_iterations, c.timeout_ms), (10, 300_000));
    assert!(c.sandbox_enabled && !c.self_modification_enabled);
    assert_eq!((c.safety_level, c.self_modification_level), (SafetyLevel::LOW, SafetyLevel::LOW));
    assert_eq!(c.schema_version, OODA_SCHEMA_VERSION);
    c.validate().unwrap();
    // Left out of a document, the same defaults.
    let read = OodaConfig::from_json(json!({"role": "Dev", "goal": "ship", "schema_version": 2}));
    assert_eq!(read.unwrap(), c);
}

#[test]
fn a_config_breaking_a_rule_names_the_field() {
    type Breaking = fn(&mut OodaConfig);
    let cases: [(Breaking, &str); 6] = [
        (|c| c.role = " ".into(), "role"),
        (|c| c.goal.clear(), "goal"),
        (|c| c.max_iterations = 0, "max_iterations"),
        (|c| c.timeout_ms = 0, "timeout_ms"),
        (|c| c.tools.push("read_file".into()), "tools"),
        (|c| c.test_command = Some("  ".into()), "test_command"),
    ];
    for (breaking, field) in cases {
        let mut c = config();
        breaking(&mut c);
        match c.validate() {
            Err(OodaSchemaError::Field { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    let err = OodaConfig::from_json(json!({"role": "Dev", "goal": "g", "safety_level": 5}));
    assert!(err.unwrap_err().to_string().contains("safety level 5 does not exist"));
    let err = OodaConfig::from_json(json!({"role": "Dev", "goal": "g", "schema_version": 9}));
    assert_eq!(err, Err(OodaSchemaError::Unsupported { what: "config", found: 9 }));
    let err = OodaConfig::from_json(json!({"role": "Dev", "goal": "g", "colour": "red"}));
    assert!(err.is_ok(), "unknown fields of a config are ignored (seed documents carry more)");
    assert!(matches!(OodaConfig::from_json(json!([1])), Err(OodaSchemaError::NotAnObject { .. })));
}

#[test]
fn a_seed_004_config_migrates_from_version_1() {
    let seed = json!({
        "role": "Senior Developer",
        "goal": "refactor",
        "backstory": "careful",
        "tools": [{"name": "read_file", "description": "reads", "parameters": {}}],
        "llm_provider": "openai",
        "llm_model": "gpt-4",
        "llm_config": {"temperature": 0.2},
        "max_iterations": 5,
        "timeout": 12.5,
        "verbose": true,
        "sandbox_enabled": true,
        "sandbox_config": {},
        "safety_level": 3,
        "self_modification_enabled": true,
        "self_modification_level": 3,
        "empirica_enabled": true,
        "tavern_keeper_enabled": false,
        "decision_engine_enabled": true,
        "agent_id": null,
        "crew_id": "crew-1",
        "custom_handlers": {}
    });
    let c = OodaConfig::from_json(seed).unwrap();
    assert_eq!(c.schema_version, 2);
    assert_eq!(c.timeout_ms, 12_500);
    assert_eq!(c.model.as_deref(), Some("gpt-4"));
    assert_eq!(c.tools, ["read_file"]);
    assert_eq!(
        (c.max_iterations, c.safety_level.get(), c.self_modification_level.get()),
        (5, 3, 3)
    );
    assert_eq!(c.crew_id.as_deref(), Some("crew-1"));
    let err = OodaConfig::from_json(json!({"role": "r", "goal": "g", "timeout": -1})).unwrap_err();
    assert!(err.to_string().contains("timeout"), "{err}");
}

#[test]
fn a_seed_004_state_migrates_from_version_1_with_the_time_passed_in() {
    let seed = json!({
        "memory": [{"role": "user", "content": "hi", "metadata": {}, "timestamp": "2026-01-09T10:00:00"}],
        "knowledge": {"k": 1},
        "tools": [{"name": "read_file", "description": "", "parameters": {}}],
        "working_memory": {},
        "agent_id": "agent_1",
        "role": "Dev",
        "goal": "g",
        "current_step": "decide",
        "next_action": null,
        "epistemic_state": {},
        "hero_state": null,
        "inbox": [{"role": "agent", "content": "review?", "metadata": {"from": "b", "to": "agent_1"}, "timestamp": "x"}],
        "outbox": [],
        "sandbox_id": null,
        "state_version": 3,
        "last_updated": "2026-01-09T10:00:00"
    });
    let s = OodaState::from_json(seed, T0).unwrap();
    assert_eq!((s.schema_version, s.state_version, s.last_updated), (2, 3, T0));
    assert_eq!(s.tools, ["read_file"]);
    assert_eq!(s.current_step, Some(Phase::Decide));
    assert_eq!(s.memory[0].at, T0);
    assert_eq!(s.inbox[0].from, Some(id("b")));
    let err = OodaState::from_json(json!({"schema_version": 3}), T0).unwrap_err();
    assert_eq!(err, OodaSchemaError::Unsupported { what: "state", found: 3 });
}

#[test]
fn state_and_config_round_trip_through_the_versioned_envelope() {
    let c = config();
    let s = OodaState::new(id("ooda-1"), &c, T0).sending(id("mid-1"), "done?", T0);
    assert_eq!(decode::<OodaConfig>(&encode(&c).unwrap()).unwrap(), c);
    assert_eq!(decode::<OodaState>(&encode(&s).unwrap()).unwrap(), s);
}

#[test]
fn updates_return_a_new_state_and_leave_the_old_one_as_it_was() {
    let s0 = OodaState::new(id("ooda-1"), &config(), T0);
    let before = s0.clone();
    let s1 = s0
        .receiving(OodaMessage::new(MessageRole::Agent, "hello", Timestamp(2_000)))
        .entering(Phase::Observe, Timestamp(2_000));
    assert_eq!(s0, before);
    let (s2, taken) = s1.taking_inbox(Timestamp(3_000));
    assert_eq!(taken.len(), 1);
    assert!(s2.inbox.is_empty());
    assert_eq!(s2.memory.last().unwrap().content, "hello");
    let (s3, out) = s2.sending(id("peer"), "hi", Timestamp(4_000)).taking_outbox();
    assert_eq!(out[0].to, Some(id("peer")));
    assert_eq!(out[0].from, Some(id("ooda-1")));
    assert!(s3.outbox.is_empty());
    let s4 = s3.iterated(Timestamp(5_000));
    assert_eq!((s4.iteration, s4.current_step), (1, None));
    let s5 = s4.modified(&config(), Timestamp(6_000));
    assert_eq!(s5.state_version, s4.state_version + 1);
}

#[test]
fn memory_keeps_the_newest_messages() {
    let mut s = OodaState::new(id("a"), &config(), T0);
    for i in 0..(MAX_MEMORY + 10) {
        s = s.remembering(OodaMessage::new(MessageRole::Tool, i.to_string(), T0));
    }
    assert_eq!(s.memory.len(), MAX_MEMORY);
    assert_eq!(s.memory[0].content, "10");
}

#[test]
fn safety_levels_are_one_to_four_and_each_adds_to_the_validation() {
    assert!(SafetyLevel::try_from(0).is_err() && SafetyLevel::try_from(5).is_err());
    let v: Vec<Validation> =
        (1..=4).map(|l| SafetyLevel::try_from(l).unwrap().validation()).collect();
    assert_eq!(v[0], Validation { schema: false, tests: false, human: false });
    assert_eq!(v[1], Validation { schema: true, tests: false, human: false });
    assert_eq!(v[2], Validation { schema: true, tests: true, human: false });
    assert_eq!(v[3], Validation { schema: true, tests: true, human: true });
    assert_eq!(serde_json::to_value(SafetyLevel::HIGH).unwrap(), json!(4));
}

#[test]
fn bad_modifications_are_refused_with_typed_errors() {
    let unknown =
        json!({"modification_type": "firmware", "target": "x", "change": {}, "safety_level": 2});
    assert_eq!(
        Modification::parse(&unknown),
        Err(ModificationError::UnknownType { found: "firmware".into() })
    );
    let level =
        json!({"modification_type": "config", "target": "goal", "change": {}, "safety_level": 7});
    let err = Modification::parse(&level).unwrap_err();
    assert!(err.to_string().contains("safety level 7 does not exist"), "{err}");
    let level =
        json!({"modification_type": "config", "target": "goal", "change": {}, "safety_level": 0});
    assert!(matches!(Modification::parse(&level), Err(ModificationError::Level(_))));
    assert!(matches!(Modification::parse(&json!("x")), Err(ModificationError::Malformed(_))));
    let british = json!({"modification_type": "behaviour", "target": "tone", "change": {"value": 1}, "safety_level": 1});
    assert_eq!(modification(british).modification_type, ModificationType::Behavior);
}

#[test]
fn a_modification_needs_self_modification_on_and_a_level_within_the_agents() {
    let m = modification(
        json!({"modification_type": "prompt", "target": "prompt", "change": {"text": "x"}, "safety_level": 3}),
    );
    let mut c = config();
    assert_eq!(
        m.allowed_by(&c),
        Err(ModificationError::AboveLevel {
            level: SafetyLevel::MEDIUM,
            allowed: SafetyLevel::LOW
        })
    );
    c.self_modification_level = SafetyLevel::MEDIUM;
    assert_eq!(m.allowed_by(&c), Ok(()));
    c.self_modification_enabled = false;
    assert_eq!(m.allowed_by(&c), Err(ModificationError::Disabled));
}

#[test]
fn config_prompt_behaviour_and_architecture_changes_apply_to_a_new_config() {
    let c = config();
    let goal = modification(
        json!({"modification_type": "config", "target": "max_iterations", "change": {"value": 4}, "safety_level": 2}),
    );
    assert_eq!(goal.apply_to(&c, &ceiling()).unwrap().unwrap().max_iterations, 4);
    let prompt = modification(
        json!({"modification_type": "prompt", "target": "prompt", "change": {"append": "be brief"}, "safety_level": 1}),
    );
    assert_eq!(prompt.apply_to(&c, &ceiling()).unwrap().unwrap().prompt, "be brief");
    let tone = modification(
        json!({"modification_type": "behavior", "target": "tone", "change": {"value": "dry"}, "safety_level": 1}),
    );
    assert_eq!(tone.apply_to(&c, &ceiling()).unwrap().unwrap().behaviour["tone"], "dry");
    let add = modification(
        json!({"modification_type": "architecture", "target": "tools", "change": {"add": ["edit_file"], "remove": ["read_file"]}, "safety_level": 2}),
    );
    assert_eq!(add.apply_to(&c, &ceiling()).unwrap().unwrap().tools, ["write_file", "edit_file"]);
    let code = modification(
        json!({"modification_type": "code", "target": "notes.md", "change": {"content": "x"}, "safety_level": 2}),
    );
    assert_eq!(code.apply_to(&c, &ceiling()).unwrap(), None);
}

#[test]
fn a_change_never_widens_permissions_nor_breaks_the_schema() {
    let c = config();
    let shell = modification(
        json!({"modification_type": "architecture", "target": "tools", "change": {"add": ["shell"]}, "safety_level": 2}),
    );
    assert!(matches!(
        shell.apply_to(&c, &ceiling()),
        Err(ModificationError::WidensPermissions { .. })
    ));
    for field in PROTECTED_FIELDS {
        let m = modification(
            json!({"modification_type": "config", "target": field, "change": {"value": 4}, "safety_level": 2}),
        );
        assert!(
            matches!(m.apply_to(&c, &ceiling()), Err(ModificationError::WidensPermissions { .. })),
            "{field}"
        );
    }
    let zero = modification(
        json!({"modification_type": "config", "target": "max_iterations", "change": {"value": 0}, "safety_level": 2}),
    );
    assert!(matches!(zero.apply_to(&c, &ceiling()), Err(ModificationError::Invalid(_))));
    let typed = modification(
        json!({"modification_type": "config", "target": "max_iterations", "change": {"value": "many"}, "safety_level": 2}),
    );
    assert!(matches!(typed.apply_to(&c, &ceiling()), Err(ModificationError::Invalid(_))));
    let missing = modification(
        json!({"modification_type": "config", "target": "colour", "change": {"value": 1}, "safety_level": 2}),
    );
    assert_eq!(
        missing.apply_to(&c, &ceiling()),
        Err(ModificationError::NoSuchTarget { target: "colour".into() })
    );
}

#[test]
fn code_changes_replace_the_file_or_one_unique_occurrence() {
    assert_eq!(apply_code_change("a b a", &json!({"content": "c"})).unwrap(), "c");
    assert_eq!(
        apply_code_change("a b", &json!({"replace": {"old": "b", "new": "c"}})).unwrap(),
        "a c"
    );
    assert!(matches!(
        apply_code_change("a b", &json!({"replace": {"old": "z", "new": "c"}})),
        Err(ModificationError::NoSuchTarget { .. })
    ));
    assert!(apply_code_change("a a", &json!({"replace": {"old": "a", "new": "c"}})).is_err());
    assert!(apply_code_change("a", &json!({"edit": 1})).is_err());
}

#[test]
fn phases_cycle_in_loop_order() {
    let mut p = Phase::Observe;
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(p);
        p = p.next();
    }
    assert_eq!(seen, Phase::ALL);
    assert_eq!(p, Phase::Observe);
    assert_eq!(
        StopReason::MaxIterations { limit: 3 }.to_string(),
        "stopped after 3 iterations (max_iterations); raise it to go on"
    );
}

fn any_modification() -> impl Strategy<Value = serde_json::Value> {
    let kind = prop_oneof![
        Just("code"),
        Just("config"),
        Just("prompt"),
        Just("architecture"),
        Just("behavior"),
        Just("nonsense")
    ];
    let target = prop_oneof![
        Just("prompt"),
        Just("max_iterations"),
        Just("tools"),
        Just("safety_level"),
        Just("sandbox_enabled"),
        Just("tone"),
        Just("goal")
    ];
    let change = prop_oneof![
        Just(json!({"value": 3})),
        Just(json!({"value": 0})),
        Just(json!({"value": "x"})),
        Just(json!({"value": false})),
        Just(json!({"text": "t"})),
        Just(json!({"add": ["shell"]})),
        Just(json!({"add": ["edit_file"]})),
        Just(json!({"remove": ["read_file"]})),
        Just(json!({})),
    ];
    (kind, target, change, -1i64..7).prop_map(
        |(k, t, c, l)| json!({"modification_type": k, "target": t, "change": c, "safety_level": l}),
    )
}

proptest! {
    /// Whatever a modification says, an applied one yields a valid config within the
    /// supervisor's tools and with the same permission bounds; a refused one changes nothing.
    #[test]
    fn applied_modifications_never_widen_permissions(doc in any_modification()) {
        let c = config();
        let Ok(m) = Modification::parse(&doc) else { return Ok(()) };
        prop_assert!((1..=4).contains(&m.safety_level.get()));
        match m.apply_to(&c, &ceiling()) {
            Ok(Some(next)) => {
                prop_assert!(next.validate().is_ok());
                prop_assert!(next.tools.iter().all(|t| ceiling().contains(t)));
                prop_assert_eq!(next.safety_level, c.safety_level);
                prop_assert_eq!(next.self_modification_level, c.self_modification_level);
                prop_assert_eq!(next.self_modification_enabled, c.self_modification_enabled);
                prop_assert_eq!(next.sandbox_enabled, c.sandbox_enabled);
            }
            Ok(None) => prop_assert_eq!(m.modification_type, ModificationType::Code),
            Err(_) => {}
        }
        prop_assert_eq!(c, config(), "the input config is untouched");
    }

    /// Any valid config survives the envelope and reads back through `from_json`.
    #[test]
    fn configs_round_trip(iterations in 1u32..=MAX_ITERATIONS, timeout in 1u64..=1_000_000, level in 1u8..=4) {
        let mut c = config();
        c.max_iterations = iterations;
        c.timeout_ms = timeout;
        c.self_modification_level = SafetyLevel::try_from(level).unwrap();
        prop_assert_eq!(OodaConfig::from_json(serde_json::to_value(&c).unwrap()).unwrap(), c.clone());
        prop_assert_eq!(decode::<OodaConfig>(&encode(&c).unwrap()).unwrap(), c);
    }
}

#[test]
fn the_oodas_own_calls_have_specs_for_a_model() {
    let modify = call_spec(MODIFY_SELF).unwrap();
    assert_eq!(
        modify.parameters["required"],
        json!(["modification_type", "target", "change", "safety_level"])
    );
    assert_eq!(modify.parameters["properties"]["safety_level"]["maximum"], 4);
    let send = call_spec(SEND_MESSAGE).unwrap();
    assert_eq!(send.parameters["required"], json!(["to", "content"]));
    assert!(call_spec("write_file").is_none());
}
