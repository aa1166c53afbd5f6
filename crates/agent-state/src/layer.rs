//! Layers and capabilities, and the layer–capability matrix (docs/concepts.md#capabilities).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::MessageKind;

/// The three layers of a team.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentLayer {
    /// The three powers: sign, veto, arbitrate.
    Top,
    /// Leads: decompose, delegate, aggregate, escalate.
    Mid,
    /// Executors: run tools and report back.
    Bottom,
}

impl AgentLayer {
    /// Every layer, top first.
    pub const ALL: [AgentLayer; 3] = [AgentLayer::Top, AgentLayer::Mid, AgentLayer::Bottom];

    /// The wire name (`top`, `mid`, `bottom`).
    pub const fn as_str(self) -> &'static str {
        match self {
            AgentLayer::Top => "top",
            AgentLayer::Mid => "mid",
            AgentLayer::Bottom => "bottom",
        }
    }

    /// Rank from the top: top is 0, bottom is 2.
    pub const fn rank(self) -> u8 {
        match self {
            AgentLayer::Top => 0,
            AgentLayer::Mid => 1,
            AgentLayer::Bottom => 2,
        }
    }

    /// Whether `self` is strictly above `other` in the hierarchy.
    pub const fn is_above(self, other: AgentLayer) -> bool {
        self.rank() < other.rank()
    }

    /// Whether an agent of this layer may hold `capability` (the matrix).
    pub const fn allows(self, capability: Capability) -> bool {
        use Capability::*;
        match self {
            AgentLayer::Top => {
                matches!(capability, Plan | Reflect | Review | Coordinate | Delegate | Arbitrate)
            }
            AgentLayer::Mid => {
                matches!(capability, Plan | Reflect | Review | Coordinate | Delegate)
            }
            AgentLayer::Bottom => matches!(
                capability,
                Plan | Execute | Reflect | ToolCall | CodeGen | TestExec | Coordinate
            ),
        }
    }

    /// Every capability this layer may hold, in [`Capability::ALL`] order.
    pub fn capabilities(self) -> impl Iterator<Item = Capability> {
        Capability::ALL.into_iter().filter(move |c| self.allows(*c))
    }

    /// The same as [`capabilities`](Self::capabilities), as a slice that lives for the whole
    /// program: what a new agent's configuration holds by default, shared by every agent of the
    /// layer instead of copied into each.
    pub const fn default_capabilities(self) -> &'static [Capability] {
        use Capability::*;
        match self {
            AgentLayer::Top => &[Plan, Reflect, Review, Coordinate, Delegate, Arbitrate],
            AgentLayer::Mid => &[Plan, Reflect, Review, Coordinate, Delegate],
            AgentLayer::Bottom => {
                &[Plan, Execute, Reflect, ToolCall, CodeGen, TestExec, Coordinate]
            }
        }
    }
}

impl fmt::Display for AgentLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The ten capabilities (docs/concepts.md#capabilities).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Capability {
    /// Decompose tasks and create plans.
    Plan,
    /// Execute work.
    Execute,
    /// Reflect on results.
    Reflect,
    /// Call tools.
    ToolCall,
    /// Generate code.
    CodeGen,
    /// Run tests.
    TestExec,
    /// Review proposals and work.
    Review,
    /// Coordinate over the bus and whiteboards.
    Coordinate,
    /// Delegate tasks to subordinates.
    Delegate,
    /// Resolve conflicts and make final decisions.
    Arbitrate,
}

impl Capability {
    /// All ten, in the order of docs/concepts.md#capabilities.
    pub const ALL: [Capability; 10] = [
        Capability::Plan,
        Capability::Execute,
        Capability::Reflect,
        Capability::ToolCall,
        Capability::CodeGen,
        Capability::TestExec,
        Capability::Review,
        Capability::Coordinate,
        Capability::Delegate,
        Capability::Arbitrate,
    ];

    /// The wire name, such as `tool_call`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Capability::Plan => "plan",
            Capability::Execute => "execute",
            Capability::Reflect => "reflect",
            Capability::ToolCall => "tool_call",
            Capability::CodeGen => "code_gen",
            Capability::TestExec => "test_exec",
            Capability::Review => "review",
            Capability::Coordinate => "coordinate",
            Capability::Delegate => "delegate",
            Capability::Arbitrate => "arbitrate",
        }
    }

    /// A one-line description, as in the seeds' capability registry.
    pub const fn description(self) -> &'static str {
        match self {
            Capability::Plan => "decompose tasks and create plans",
            Capability::Execute => "execute concrete work",
            Capability::Reflect => "reflect on results and adjust",
            Capability::ToolCall => "call tools from the tool registry",
            Capability::CodeGen => "generate code",
            Capability::TestExec => "run tests",
            Capability::Review => "review proposals and results",
            Capability::Coordinate => "coordinate through the message bus and whiteboards",
            Capability::Delegate => "assign tasks to subordinates",
            Capability::Arbitrate => "resolve conflicts and make final decisions",
        }
    }

    /// The layers that may hold this capability.
    pub fn layers(self) -> impl Iterator<Item = AgentLayer> {
        AgentLayer::ALL.into_iter().filter(move |l| l.allows(self))
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An act that needs a capability: the one table that says which. The
/// runtime checks it where the act happens, against the agent's configured capabilities; every
/// capability of the matrix is needed by at least one act ([`Action::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Proposing a plan or another decision for signatures, or decomposing a task into
    /// steps for others: `plan`.
    Plan,
    /// Working a subtask (an executor's tool loop, an executor kind's run, an OODA agent's
    /// objective): `execute`.
    Execute,
    /// Reflecting on a result to adjust (an OODA agent's reflect phase): `reflect`.
    Reflect,
    /// Calling a tool, or running an effect that stands for a tool call: `tool_call`.
    CallTool,
    /// Writing code or files: a tool that writes the workspace ([`Action::of_tool`]), an OODA
    /// agent's code change: `code_gen`.
    WriteCode,
    /// Running tests (an OODA agent's test command, before and after a change): `test_exec`.
    RunTests,
    /// Signing or vetoing a decision: `review`.
    Review,
    /// Coordinating: sending a message of a kind that needs no other capability, writing a
    /// whiteboard: `coordinate`.
    Coordinate,
    /// Assigning work to another agent (a `task_assign` message): `delegate`.
    AssignWork,
    /// Creating a subordinate agent: `delegate`.
    Spawn,
    /// Asking for or casting a vote on a conflict (`vote_request`, `vote_response`):
    /// `arbitrate`.
    Vote,
    /// Announcing the resolution of a conflict (`arbitration_result`): `arbitrate`.
    Arbitrate,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 12] = [
        Action::Plan,
        Action::Execute,
        Action::Reflect,
        Action::CallTool,
        Action::WriteCode,
        Action::RunTests,
        Action::Review,
        Action::Coordinate,
        Action::AssignWork,
        Action::Spawn,
        Action::Vote,
        Action::Arbitrate,
    ];

    /// The capability an agent needs to do this.
    pub const fn required_capability(self) -> Capability {
        match self {
            Action::Plan => Capability::Plan,
            Action::Execute => Capability::Execute,
            Action::Reflect => Capability::Reflect,
            Action::CallTool => Capability::ToolCall,
            Action::WriteCode => Capability::CodeGen,
            Action::RunTests => Capability::TestExec,
            Action::Review => Capability::Review,
            Action::Coordinate => Capability::Coordinate,
            Action::AssignWork | Action::Spawn => Capability::Delegate,
            Action::Vote | Action::Arbitrate => Capability::Arbitrate,
        }
    }

    /// The action sending a message of `kind` performs: delegating (a task or an operator's
    /// command to a subordinate), voting, arbitrating, or else coordinating.
    pub const fn of_message(kind: MessageKind) -> Action {
        match kind {
            MessageKind::TaskAssign | MessageKind::OperatorCommand => Action::AssignWork,
            MessageKind::VoteRequest | MessageKind::VoteResponse => Action::Vote,
            MessageKind::ArbitrationResult => Action::Arbitrate,
            _ => Action::Coordinate,
        }
    }

    /// The action a call of the built-in tool `tool` performs beside [`Action::CallTool`], if
    /// any: writing the workspace (`write_file`, `edit_file`) is [`Action::WriteCode`].
    pub fn of_tool(tool: &str) -> Option<Action> {
        matches!(tool, "write_file" | "edit_file").then_some(Action::WriteCode)
    }

    /// The wire name, such as `assign_work`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Action::Plan => "plan",
            Action::Execute => "execute",
            Action::Reflect => "reflect",
            Action::CallTool => "call_tool",
            Action::WriteCode => "write_code",
            Action::RunTests => "run_tests",
            Action::Review => "review",
            Action::Coordinate => "coordinate",
            Action::AssignWork => "assign_work",
            Action::Spawn => "spawn",
            Action::Vote => "vote",
            Action::Arbitrate => "arbitrate",
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
