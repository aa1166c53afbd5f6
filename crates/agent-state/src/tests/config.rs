//! The capability matrix (docs/concepts.md#capabilities) and `AgentConfig::validate`.

use crate::{
    AgentConfig, AgentLayer, Capability, ConfigError, ConfigErrorKind, DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_MS, MAX_AGENT_ID_LEN, check_agent_id,
};

use AgentLayer::{Bottom, Mid, Top};

/// The matrix of docs/concepts.md#capabilities, row by row: capability, then top / mid / bottom (1
/// = ✅).
#[rustfmt::skip]
const SEED_MATRIX: [(Capability, [u8; 3]); 10] = [
    //                              top mid bottom
    (Capability::Plan,       [1,  1,  1]),
    (Capability::Execute,    [0,  0,  1]),
    (Capability::Reflect,    [1,  1,  1]),
    (Capability::ToolCall,   [0,  0,  1]),
    (Capability::CodeGen,    [0,  0,  1]),
    (Capability::TestExec,   [0,  0,  1]),
    (Capability::Review,     [1,  1,  0]),
    (Capability::Coordinate, [1,  1,  1]),
    (Capability::Delegate,   [1,  1,  0]),
    (Capability::Arbitrate,  [1,  0,  0]),
];

#[test]
fn capability_matrix_equals_seed_001_7_1() {
    let layers = [Top, Mid, Bottom];
    let mut mismatches = Vec::new();
    for (capability, row) in SEED_MATRIX {
        for (layer, allowed) in layers.into_iter().zip(row) {
            let expected = allowed == 1;
            if layer.allows(capability) != expected {
                mismatches.push(format!("{layer} / {capability}: expected {expected}"));
            }
            if capability.layers().any(|l| l == layer) != expected {
                mismatches.push(format!("{capability}.layers() / {layer}: expected {expected}"));
            }
        }
    }
    assert!(mismatches.is_empty(), "matrix differs from the documented one: {mismatches:#?}");
}

#[test]
fn capability_all_lists_the_ten_in_seed_order() {
    let seed_order: Vec<Capability> = SEED_MATRIX.iter().map(|(c, _)| *c).collect();
    assert_eq!(Capability::ALL.to_vec(), seed_order);
}

#[test]
fn layer_capabilities_lists_exactly_the_allowed_ones() {
    use Capability::*;
    assert_eq!(
        Top.capabilities().collect::<Vec<_>>(),
        [Plan, Reflect, Review, Coordinate, Delegate, Arbitrate]
    );
    assert_eq!(
        Mid.capabilities().collect::<Vec<_>>(),
        [Plan, Reflect, Review, Coordinate, Delegate]
    );
    assert_eq!(
        Bottom.capabilities().collect::<Vec<_>>(),
        [Plan, Execute, Reflect, ToolCall, CodeGen, TestExec, Coordinate]
    );
}

#[test]
fn layer_ranks_order_top_above_mid_above_bottom() {
    assert!(Top.is_above(Mid) && Top.is_above(Bottom) && Mid.is_above(Bottom));
    assert!(!Mid.is_above(Top) && !Bottom.is_above(Mid) && !Mid.is_above(Mid));
}

fn top() -> AgentConfig {
    AgentConfig::new("top-1", "Power A", Top).with_subordinates(["mid-1"])
}

fn mid() -> AgentConfig {
    AgentConfig::new("mid-1", "Lead", Mid)
        .with_supervisor("top-1")
        .with_subordinates(["bottom-1", "bottom-2"])
}

fn bottom() -> AgentConfig {
    AgentConfig::new("bottom-1", "Builder", Bottom).with_supervisor("mid-1")
}

#[test]
fn valid_configs_of_every_layer_pass() {
    for config in [top(), mid(), bottom()] {
        assert_eq!(config.validate(), Ok(()), "{config:?}");
    }
    // Boundaries that are still valid.
    let mut c = bottom();
    c.temperature = Some(0.0);
    assert_eq!(c.validate(), Ok(()));
    c.temperature = Some(2.0);
    assert_eq!(c.validate(), Ok(()));
    assert_eq!(bottom().with_timeout_ms(1).validate(), Ok(()));
    assert_eq!(bottom().with_capabilities([]).validate(), Ok(()));
    let long = "a".repeat(MAX_AGENT_ID_LEN);
    assert_eq!(AgentConfig::new(long.as_str(), "n", Top).validate(), Ok(()));
    assert_eq!(AgentConfig::new("A-z_09", "n", Top).validate(), Ok(()));
}

#[test]
fn defaults_are_three_retries_and_thirty_seconds() {
    assert_eq!(DEFAULT_MAX_RETRIES, 3);
    assert_eq!(DEFAULT_TIMEOUT_MS, 30_000);
    let c = AgentConfig::new("mid-1", "Lead", Mid);
    assert_eq!((c.max_retries, c.timeout_ms), (3, 30_000));
    assert_eq!(c.capabilities, Mid.capabilities().collect::<Vec<_>>());
    for layer in [Top, Mid, Bottom] {
        let defaults = layer.default_capabilities();
        assert_eq!(
            defaults,
            layer.capabilities().collect::<Vec<_>>(),
            "{layer}: the shared defaults are the matrix's row"
        );
    }
    assert_eq!((c.role.as_str(), &c.supervisor, c.subordinates.len()), ("", &None, 0));
    assert_eq!((&c.model, c.temperature), (&None, None));
}

#[test]
fn builders_set_their_fields() {
    let c = bottom()
        .with_role("backend")
        .with_capabilities([Capability::Execute])
        .with_max_retries(5)
        .with_timeout_ms(10);
    assert_eq!(c.role, "backend");
    assert_eq!(c.capabilities[..], [Capability::Execute]);
    assert!(c.has(Capability::Execute) && !c.has(Capability::Plan));
    assert_eq!((c.max_retries, c.timeout_ms), (5, 10));
}

#[test]
fn deserializing_with_missing_optional_fields_applies_defaults() {
    let json =
        r#"{"id":"bottom-1","name":"Builder","layer":"bottom","capabilities":["tool_call"]}"#;
    let c: AgentConfig = serde_json::from_str(json).unwrap();
    assert_eq!(
        c,
        AgentConfig {
            id: "bottom-1".into(),
            name: "Builder".to_owned(),
            layer: Bottom,
            role: String::new(),
            supervisor: None,
            subordinates: Vec::new(),
            capabilities: vec![Capability::ToolCall].into(),
            model: None,
            temperature: None,
            max_retries: 3,
            timeout_ms: 30_000,
        }
    );
}

#[test]
fn deserializing_keeps_given_optional_fields() {
    let json = r#"{"id":"mid-1","name":"Lead","layer":"mid","capabilities":[],
        "supervisor":"top-1","subordinates":["bottom-1"],"model":"gemma","temperature":0.5,
        "max_retries":0,"timeout_ms":5}"#;
    let c: AgentConfig = serde_json::from_str(json).unwrap();
    assert_eq!(c.supervisor.as_ref().map(|s| s.as_str()), Some("top-1"));
    assert_eq!(c.subordinates, [super::id("bottom-1")]);
    assert_eq!((c.model.as_deref(), c.temperature), (Some("gemma"), Some(0.5)));
    assert_eq!((c.max_retries, c.timeout_ms), (0, 5));
}

#[test]
fn deserializing_rejects_unknown_layer_and_capability_names() {
    let bad_layer = r#"{"id":"a","name":"n","layer":"middle","capabilities":[]}"#;
    assert!(serde_json::from_str::<AgentConfig>(bad_layer).is_err());
    let bad_cap = r#"{"id":"a","name":"n","layer":"mid","capabilities":["toolCall"]}"#;
    assert!(serde_json::from_str::<AgentConfig>(bad_cap).is_err());
}

/// Validates `config`, expects `kind`, and checks the field and that the message names it.
#[track_caller]
fn check_rejected(config: AgentConfig, kind: ConfigErrorKind, field: &str) {
    let err: ConfigError = config.validate().unwrap_err();
    assert_eq!(err.kind, kind);
    assert_eq!(err.agent, config.id.as_str());
    assert_eq!(err.field(), field);
    assert_eq!(err.kind.field(), field);
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("agent `{}`: ", config.id)), "{msg}");
    assert!(msg.contains(&format!("`{field}`")), "message does not name `{field}`: {msg}");
}

#[test]
fn empty_or_blank_name_is_rejected() {
    let mut c = bottom();
    c.name = String::new();
    check_rejected(c.clone(), ConfigErrorKind::EmptyName, "name");
    c.name = " \t\n".to_owned();
    check_rejected(c, ConfigErrorKind::EmptyName, "name");
}

#[test]
fn capability_not_allowed_for_the_layer_is_rejected() {
    let cases = [
        (top(), Capability::Execute),
        (top(), Capability::ToolCall),
        (mid(), Capability::Arbitrate),
        (mid(), Capability::CodeGen),
        (bottom(), Capability::Delegate),
        (bottom(), Capability::Review),
        (bottom(), Capability::Arbitrate),
    ];
    for (config, capability) in cases {
        let layer = config.layer;
        let config = config.with_capabilities([Capability::Plan, capability]);
        check_rejected(
            config.clone(),
            ConfigErrorKind::CapabilityNotAllowed { capability, layer },
            "capabilities",
        );
        let msg = config.validate().unwrap_err().to_string();
        assert!(msg.contains(&format!("`{capability}`")), "{msg}");
        assert!(msg.contains("allowed: plan"), "message lists the allowed set: {msg}");
    }
}

#[test]
fn top_with_supervisor_is_rejected() {
    check_rejected(
        top().with_supervisor("top-2"),
        ConfigErrorKind::TopWithSupervisor { supervisor: "top-2".to_owned() },
        "supervisor",
    );
}

#[test]
fn mid_or_bottom_without_supervisor_is_valid_config() {
    // The lead of a crew and the agent of a single-agent team take their tasks from the
    // system: whether a team may have such an agent is the team's check, not the config's.
    let mut m = mid();
    m.supervisor = None;
    assert_eq!(m.validate(), Ok(()));
    let mut b = bottom();
    b.supervisor = None;
    assert_eq!(b.validate(), Ok(()));
}

#[test]
fn supervising_itself_as_supervisor_is_rejected() {
    check_rejected(mid().with_supervisor("mid-1"), ConfigErrorKind::SupervisesItself, "supervisor");
    check_rejected(
        bottom().with_supervisor("bottom-1"),
        ConfigErrorKind::SupervisesItself,
        "supervisor",
    );
}

#[test]
fn supervising_itself_as_subordinate_is_rejected() {
    // `field()` reports `supervisor` for both cases (one variant); the message names both fields.
    let c = mid().with_subordinates(["bottom-1", "mid-1"]);
    check_rejected(c.clone(), ConfigErrorKind::SupervisesItself, "supervisor");
    assert!(c.validate().unwrap_err().to_string().contains("`subordinates`"));
    check_rejected(
        top().with_subordinates(["top-1"]),
        ConfigErrorKind::SupervisesItself,
        "supervisor",
    );
}

#[test]
fn subordinates_on_bottom_are_rejected() {
    check_rejected(
        bottom().with_subordinates(["bottom-2", "bottom-3"]),
        ConfigErrorKind::SubordinatesOnBottom { count: 2 },
        "subordinates",
    );
}

#[test]
fn duplicate_subordinate_is_rejected() {
    check_rejected(
        mid().with_subordinates(["bottom-1", "bottom-2", "bottom-1"]),
        ConfigErrorKind::DuplicateSubordinate { subordinate: "bottom-1".to_owned() },
        "subordinates",
    );
}

#[test]
fn reserved_ids_are_rejected() {
    for reserved in ["system", "broadcast", "global"] {
        check_rejected(
            AgentConfig::new(reserved, "n", Top),
            ConfigErrorKind::ReservedId { id: reserved.to_owned() },
            "id",
        );
        assert_eq!(
            check_agent_id(reserved),
            Err(ConfigErrorKind::ReservedId { id: reserved.to_owned() })
        );
    }
}

#[test]
fn empty_id_is_rejected() {
    check_rejected(AgentConfig::new("", "n", Top), ConfigErrorKind::EmptyId, "id");
}

#[test]
fn invalid_id_characters_are_rejected() {
    for bad in ["bad id", "a/b", "a.b", "a:b", "é", "top-1\n", "*", ">"] {
        check_rejected(
            AgentConfig::new(bad, "n", Top),
            ConfigErrorKind::InvalidId { id: bad.to_owned() },
            "id",
        );
    }
}

#[test]
fn too_long_id_is_rejected() {
    let long = "a".repeat(MAX_AGENT_ID_LEN + 1);
    check_rejected(
        AgentConfig::new(long.as_str(), "n", Top),
        ConfigErrorKind::InvalidId { id: long.clone() },
        "id",
    );
    assert_eq!(check_agent_id(&"a".repeat(MAX_AGENT_ID_LEN)), Ok(()));
}

#[test]
fn temperature_out_of_range_is_rejected() {
    for t in [-0.001, 2.001, -1.0, 100.0, f32::INFINITY, f32::NEG_INFINITY] {
        let mut c = bottom();
        c.temperature = Some(t);
        check_rejected(c, ConfigErrorKind::TemperatureOutOfRange { value: t }, "temperature");
    }
    // NaN is not equal to itself, so match on the variant.
    let mut c = bottom();
    c.temperature = Some(f32::NAN);
    let err = c.validate().unwrap_err();
    assert!(
        matches!(err.kind, ConfigErrorKind::TemperatureOutOfRange { value } if value.is_nan()),
        "{err:?}"
    );
    assert_eq!(err.field(), "temperature");
}

#[test]
fn zero_timeout_is_rejected() {
    check_rejected(bottom().with_timeout_ms(0), ConfigErrorKind::ZeroTimeout, "timeout_ms");
}

#[test]
fn the_first_violation_is_reported_in_field_order() {
    // id before name before capabilities before supervisor (which, once the id is
    // `bottom-9`, names the agent itself).
    let mut c = AgentConfig::new("system", "", Bottom)
        .with_capabilities([Capability::Arbitrate])
        .with_supervisor("bottom-9");
    assert_eq!(c.validate().unwrap_err().field(), "id");
    c.id = "bottom-9".into();
    assert_eq!(c.validate().unwrap_err().field(), "name");
    c.name = "n".to_owned();
    assert_eq!(c.validate().unwrap_err().field(), "capabilities");
    c.capabilities.to_mut().clear();
    assert_eq!(c.validate().unwrap_err().field(), "supervisor");
}

#[test]
fn supervisor_and_subordinate_ids_must_name_agents() {
    let bottom = AgentConfig::new("bottom-9", "n", Bottom).with_supervisor("system");
    check_rejected(
        bottom,
        ConfigErrorKind::InvalidReference { field: "supervisor", id: "system".to_owned() },
        "supervisor",
    );
    check_rejected(
        mid().with_subordinates(["bottom-1", "bad id"]),
        ConfigErrorKind::InvalidReference { field: "subordinates", id: "bad id".to_owned() },
        "subordinates",
    );
}

#[test]
fn plan_steps_may_only_wait_for_earlier_steps() {
    use crate::{PlanStep, StepTarget, Task, TaskFailure};
    let step = |id: &str, after: &[&str]| {
        PlanStep::scripted(id, id, StepTarget::Any, "shell", serde_json::json!({}))
            .with_after(after.iter().copied())
    };
    let task = |steps| Task { id: "t".into(), goal: "g".into(), steps };
    assert_eq!(task(vec![step("a", &[]), step("b", &["a"])]).check(), Ok(()));
    let Err(TaskFailure::InvalidPlan { reason }) =
        task(vec![step("a", &["b"]), step("b", &[])]).check()
    else {
        panic!("a forward reference must be refused")
    };
    assert_eq!(reason, "step `a` waits for `b`, which is not a step listed before it");
    assert!(task(vec![step("a", &["a"])]).check().is_err(), "a step cannot wait for itself");
    assert!(task(vec![step("a", &[]), step("a", &[])]).check().is_err(), "duplicate ids");
    assert!(task(vec![]).check().is_err(), "no steps");
}

#[test]
fn every_character_is_judged_by_the_rules_of_ids_and_names() {
    use crate::{find_control, is_control};
    for c in (0..0x3000).filter_map(char::from_u32) {
        let id_ok = c.is_ascii_alphanumeric() || c == '-' || c == '_';
        assert_eq!(check_agent_id(&format!("a{c}b")).is_ok(), id_ok, "{c:?}");
        let expected = is_control(c).then_some((2, c));
        assert_eq!(find_control(&format!("ab{c}d")), expected, "{c:?}");
        assert_eq!(find_control(&format!("é{c}")), is_control(c).then_some((1, c)), "{c:?}");
    }
}

#[test]
fn control_characters_in_ids_are_refused() {
    use crate::{PlanStep, StepTarget, Task, TaskFailure, find_control};
    assert_eq!(find_control("plain name, ünïcode"), None);
    assert_eq!(find_control("a\nb"), Some((1, '\n')));
    for bad in ["\t", "\r", "\u{1b}[2J", "\u{7f}", "\u{85}", "\u{9b}", "\u{2028}", "\0"] {
        assert!(find_control(&format!("x{bad}")).is_some(), "{bad:?}");
    }

    // Agent ids were already ASCII only; names, roles and models now refuse controls too.
    assert!(check_agent_id("top\na").is_err());
    for (field, config) in [
        ("name", AgentConfig::new("a", "Power\nA", Top)),
        ("role", AgentConfig::new("a", "A", Top).with_role("gov\u{1b}[31m")),
        ("model", {
            let mut c = AgentConfig::new("a", "A", Top);
            c.model = Some("m\tx".into());
            c
        }),
    ] {
        let err = config.validate().unwrap_err();
        assert_eq!(err.field(), field, "{err}");
        assert!(matches!(err.kind, ConfigErrorKind::ControlCharacter { .. }), "{err:?}");
        assert!(err.to_string().contains("control character"), "{err}");
    }
    let err = AgentConfig::new("a", "Power\nA", Top).validate().unwrap_err();
    assert_eq!(
        err.to_string(),
        "agent `a`: field `name`: character 6 is the control character \\u{a}; write it on one \
         line of printable text"
    );

    let step = |id: &str| {
        PlanStep::scripted(id, "d\nmay span lines", StepTarget::Any, "shell", serde_json::json!({}))
    };
    let task = |id: &str, steps| Task { id: id.into(), goal: "a goal\non two lines".into(), steps };
    assert_eq!(task("t", vec![step("a")]).check(), Ok(()), "goals and descriptions are text");
    let reason = |t: Task| match t.check() {
        Err(TaskFailure::InvalidPlan { reason }) => reason,
        other => panic!("expected an invalid plan, got {other:?}"),
    };
    assert!(reason(task("t\n", vec![step("a")])).starts_with("the task's `id` has the control"));
    assert!(reason(task("t", vec![step("a\u{1b}")])).starts_with("the `id` of step 1 has"));
    let mut s = step("a");
    s.target = StepTarget::Domain("docs\n".into());
    assert!(reason(task("t", vec![s])).contains("target of step `a`"));
    let mut s = step("b");
    s.after = vec!["a\r".into()];
    assert!(reason(task("t", vec![step("a"), s])).contains("`after` of step `b`"));
}
