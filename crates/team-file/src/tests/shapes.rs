//! Team shapes in team files: `shape` written or inferred, the crew and single-agent examples,
//! plans for them, and where each shape's mistakes point.

use super::*;
use agent_pool::TeamShape;

const CREW: &str = r#"
[[mid]]
id = "lead"
domain = "work"

[[bottom]]
id = "e1"
supervisor = "lead"
tools = ["write_file", "shell"]

[[bottom]]
id = "e2"
supervisor = "lead"
tools = ["list_dir"]
"#;

const SINGLE: &str = r#"
[[bottom]]
id = "solo"
tools = ["write_file", "shell", "list_dir"]
"#;

#[test]
fn the_checked_in_shape_examples_are_what_init_writes() {
    assert_eq!(
        include_str!("../../../../examples/shapes/crew/team.toml"),
        shape_team_toml(TeamShape::Crew)
    );
    assert_eq!(
        include_str!("../../../../examples/shapes/crew/plan.toml"),
        shape_plan_toml(TeamShape::Crew)
    );
    assert_eq!(
        include_str!("../../../../examples/shapes/single/team.toml"),
        shape_team_toml(TeamShape::Single)
    );
    assert_eq!(
        include_str!("../../../../examples/shapes/single/plan.toml"),
        shape_plan_toml(TeamShape::Single)
    );
    assert_eq!(shape_team_toml(TeamShape::Layered), example_team_toml());
    assert_eq!(shape_plan_toml(TeamShape::Layered), example_plan_toml());
}

#[test]
fn each_example_team_has_its_shape_and_runs_every_shape_plan() {
    let tools = ToolRegistry::with_builtins();
    for shape in TeamShape::ALL {
        let team = parse_team(Path::new("team.toml"), shape_team_toml(shape), &tools)
            .unwrap_or_else(|e| panic!("the {shape} example: {e}"));
        assert_eq!(team.spec.shape(), shape);
        let entry = team.spec.entry().expect("an entry agent");
        assert_eq!(entry.config.supervisor, None, "{shape}: the entry agent has no supervisor");
        // The crew and single plans name no lead and no agent: they run on every shape.
        for plan_shape in [TeamShape::Crew, TeamShape::Single] {
            let task =
                parse_plan(Path::new("plan.toml"), shape_plan_toml(plan_shape), &team.spec, &tools)
                    .unwrap_or_else(|e| panic!("the {plan_shape} plan on the {shape} team: {e}"));
            assert_eq!(task.steps.len(), 4);
        }
    }
    let single = parse_team(Path::new("t"), shape_team_toml(TeamShape::Single), &tools).unwrap();
    let RoleSpec::Bottom(agent) = &single.spec.agents[0].role else { panic!("an executor") };
    for tool in ["read_file", "write_file", "edit_file", "list_dir", "search", "glob", "shell"] {
        assert!(agent.tools.iter().any(|t| t == tool), "the single agent has `{tool}`");
    }
}

#[test]
fn the_shape_is_inferred_or_written() {
    let crew = team(CREW);
    assert_eq!(crew.spec.shape(), TeamShape::Crew);
    assert_eq!(crew.spec.entry().map(|a| a.config.id.as_str()), Some("lead"));
    assert_eq!(crew.spec.agents[1].config.supervisor, Some(AgentId::new("lead")));
    let written = team(&format!("shape = \"crew\"\n{}", text(CREW)));
    assert_eq!(written.spec, crew.spec);

    let single = team(SINGLE);
    assert_eq!(single.spec.shape(), TeamShape::Single);
    assert_eq!(single.spec.entry().map(|a| a.config.id.as_str()), Some("solo"));
    assert_eq!(team(&format!("shape = \"single\"\n{}", text(SINGLE))).spec, single.spec);

    let layered = team(&format!("shape = \"layered\"\n{}", example_team_toml()));
    assert_eq!(layered.spec.shape(), TeamShape::Layered);
    assert_eq!(layered.spec, team(example_team_toml()).spec);
    assert_eq!(layered.spec.entry().map(|a| a.config.id.as_str()), Some("top-a"));
}

#[test]
fn a_plan_for_a_crew_or_a_single_agent_takes_any_domain() {
    let tools = ToolRegistry::with_builtins();
    let plan = r#"
id = "p"
goal = "g"

[[steps]]
id = "a"
domain = "docs"
tool = "write_file"
args = { path = "a.txt", content = "a" }

[[steps]]
id = "b"
domain = "build"
tool = "shell"
args = { command = "true" }
"#;
    for t in [CREW, SINGLE] {
        let spec = team(t).spec;
        let task = parse_plan(Path::new("plan.toml"), text(plan), &spec, &tools).unwrap();
        assert_eq!(task.steps[0].target, StepTarget::Domain("docs".into()));
    }
    // A tool nobody has is still refused, and an unknown agent too.
    let err = plan_err_for(&team(SINGLE).spec, &plan.replace("\"shell\"", "\"edit_file\""));
    assert_at(&err, 13, 8, &["no executor in the team has the tool `edit_file`"]);
    let named = plan.replace("domain = \"build\"", "agent = \"e9\"");
    let err = plan_err_for(&team(CREW).spec, &named);
    assert_at(&err, 12, 9, &["unknown agent `e9`", "lead, e1, e2"]);
    // Naming the single agent, or the crew's lead or an executor, is fine.
    let solo = plan.replace("domain = \"build\"", "agent = \"solo\"");
    parse_plan(Path::new("plan.toml"), text(&solo), &team(SINGLE).spec, &tools).unwrap();
    let lead = plan.replace("domain = \"build\"", "agent = \"lead\"");
    parse_plan(Path::new("plan.toml"), text(&lead), &team(CREW).spec, &tools).unwrap();
}

#[test]
fn a_layered_team_still_needs_every_supervisor() {
    // The complaint of peer frameworks' users was this refusal for a lone executor; in a team
    // with powers it stays, and says what to add.
    let err = team_err(&format!(
        "{ONE_POWER}\n[[mid]]\nid = \"m\"\ndomain = \"d\"\nsupervisor = \"top-a\"\n\n[[bottom]]\nid = \"b\"\ntools = [\"shell\"]\n"
    ));
    assert_at(
        &err,
        11,
        6,
        &["the bottom executor `b` has no `supervisor`", "it reports to a lead (m)"],
    );
    let err = team_err(&format!("{ONE_POWER}\n[[mid]]\nid = \"m\"\ndomain = \"d\"\n"));
    assert_at(&err, 6, 6, &["the mid lead `m` has no `supervisor`", "a top power (top-a)"]);
}

#[test]
fn a_written_shape_must_match_the_agents() {
    let err = team_err(&format!("shape = \"crew\"\n{ONE_POWER}{}", text(CREW)));
    assert_at(
        &err,
        3,
        6,
        &[
            "`top-a` is a top power",
            "`shape = \"crew\"`",
            "no top powers",
            "write `shape = \"layered\"`",
        ],
    );
    let err = team_err(&format!("shape = \"single\"\n{}", text(CREW)));
    assert_at(&err, 3, 6, &["`lead` is a mid lead", "no lead", "write `shape = \"crew\"`"]);
    let err = team_err(&format!("shape = \"layered\"\n{}", text(SINGLE)));
    assert_at(&err, 1, 9, &["needs top powers", "add a [[top]] table", "`shape = \"single\"`"]);
    let err = team_err(&format!("shape = \"crew\"\n{}", text(SINGLE)));
    assert_at(&err, 1, 9, &["needs a lead", "`shape = \"single\"`"]);
    let err = team_err(&format!("shape = \"pair\"\n{}", text(SINGLE)));
    assert_at(&err, 1, 9, &["`shape` is \"layered\"", "\"crew\"", "\"single\"", "not \"pair\""]);
}

#[test]
fn an_empty_team_says_what_each_shape_needs() {
    let err = team_err("heartbeat = \"1s\"\n");
    assert_at(&err, 1, 1, &["the team has no agents", "[[bottom]]", "[[mid]]", "[[top]]"]);
}

#[test]
fn a_single_agent_is_one_executor_without_a_supervisor() {
    let two = format!("{}\n[[bottom]]\nid = \"other\"\ntools = [\"shell\"]\n", text(SINGLE));
    let err = team_err(&two);
    assert_at(
        &err,
        6,
        6,
        &["a single-agent team has one agent", "`solo` (line 2)", "remove `other`", "a crew"],
    );
    let err = team_err(&SINGLE.replace("tools", "supervisor = \"ghost\"\ntools"));
    assert_at(&err, 3, 14, &["a single agent has no supervisor", "remove `supervisor`"]);
    let ooda = format!("{}ooda = {{ role = \"r\", goal = \"g\" }}\n", text(SINGLE));
    let err = team_err(&ooda);
    assert_at(&err, 4, 8, &["an OODA agent takes its objectives from a lead", "remove `ooda`"]);
}

#[test]
fn a_crew_has_one_lead_without_a_supervisor_and_its_executors() {
    let two = format!("{}\n[[mid]]\nid = \"lead2\"\ndomain = \"more\"\n", text(CREW));
    let err = team_err(&two);
    assert_at(
        &err,
        16,
        6,
        &["a crew has one lead", "`lead` (line 2)", "remove `lead2`", "layered"],
    );
    let err =
        team_err(&CREW.replace("domain = \"work\"", "domain = \"work\"\nsupervisor = \"boss\""));
    assert_at(&err, 4, 14, &["a crew's lead has no supervisor", "remove `supervisor`"]);
    let err = team_err(&CREW.replace("id = \"e2\"\nsupervisor = \"lead\"\n", "id = \"e2\"\n"));
    assert_at(
        &err,
        11,
        6,
        &["the executor `e2` has no `supervisor`", "add `supervisor = \"lead\"`"],
    );
    let err = team_err("[[mid]]\nid = \"lead\"\ndomain = \"work\"\n");
    assert_at(&err, 2, 6, &["a crew needs at least one executor", "supervisor = \"lead\""]);
    // An executor of a crew reports to its lead, nobody else.
    let err = team_err(&CREW.replace(
        "supervisor = \"lead\"\ntools = [\"list_dir\"]",
        "supervisor = \"e1\"\ntools = [\"list_dir\"]",
    ));
    assert_at(&err, 12, 14, &["`e1` is a bottom executor", "reports to a mid lead (lead)"]);
}

#[test]
fn tables_that_need_powers_are_refused_in_a_crew_or_a_single_agent() {
    let cases: [(&str, &str, usize, usize, &[&str]); 4] = [
        (
            "[[roles]]\nname = \"writer\"\nlayer = \"bottom\"\ntools = [\"write_file\"]\n",
            CREW,
            16,
            8,
            &["[[roles]]", "needs top powers, and a crew has none"],
        ),
        (
            "[arbitration]\nacceptance = false\n",
            SINGLE,
            6,
            14,
            &[
                "[arbitration] needs top powers, and a single-agent team has none",
                "nothing is put to a vote",
            ],
        ),
        (
            "[approvals]\nhumans = [\"alice\"]\nplans = true\n",
            CREW,
            17,
            9,
            &["`plans = true`", "needs top powers, and a crew has none"],
        ),
        (
            "[budget]\nmax_calls = 5\non_exceed = \"ask\"\n",
            SINGLE,
            7,
            13,
            &["`on_exceed = \"ask\"`", "Use \"stop\", or \"ask_human\""],
        ),
    ];
    for (table, t, line, column, fragments) in cases {
        let err = team_err(&format!("{}\n{table}", text(t)));
        assert_at(&err, line, column, fragments);
    }
    // What needs no powers stays: humans for a budget that asks one, guards, time limits.
    team(&format!(
        "{}\n[approvals]\nhumans = [\"alice\"]\n\n[budget]\nmax_calls = 5\non_exceed = \"ask_human\"\n",
        text(SINGLE)
    ));
}
