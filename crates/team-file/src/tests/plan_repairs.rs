//! `[reasoner] plan_repairs`: read, inherited by an agent's own reasoner table, left out by
//! default, and refused above its limit at the value.

use super::*;

const ONE_POWER: &str = "[[top]]\nid = \"top-a\"\npower_type = \"power_a\"\n";

#[test]
fn plan_repairs_is_read_inherited_and_bounded() {
    let t = team(&format!(
        "[reasoner]\nkind = \"local\"\nplan_repairs = 5\n\n{ONE_POWER}reasoner = {{ kind = \"local\" }}\n"
    ));
    assert_eq!(t.default_reasoner.plan_repairs, Some(5));
    let own = &t.agent_reasoners[&AgentId::new("top-a")];
    assert_eq!(own.plan_repairs, Some(5), "inherited");
    assert_eq!(team(ONE_POWER).default_reasoner.plan_repairs, None, "the default: left out");
    let none = team(&format!("[reasoner]\nkind = \"local\"\nplan_repairs = 0\n\n{ONE_POWER}"));
    assert_eq!(none.default_reasoner.plan_repairs, Some(0));

    let err = team_err(&format!("[reasoner]\nkind = \"local\"\nplan_repairs = 11\n\n{ONE_POWER}"));
    assert_at(&err, 3, 16, &["`plan_repairs` must be at most 10"]);
}
