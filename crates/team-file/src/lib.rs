//! Strata's team and plan files: the TOML a person writes, parsed and checked into a team
//! ([`TeamFile`], whose `spec` is an [`agent_pool::TeamSpec`]) and a task
//! ([`agent_state::Task`]).
//!
//! The package is `strata-team-file` (`strata-team-file = "0.1"` in `Cargo.toml`); code
//! names it `team_file`.
//!
//! The `strata` command, programs that embed Strata, and later the workers and the dashboard
//! read these files through this crate, so a file means the same everywhere and a mistake is
//! reported the same way: every error, from invalid TOML to a step whose tool no executor has,
//! is a [`FileError`] that points at the offending value as `path:line:column: message` and
//! says what is expected.
//!
//! What it deliberately does **not** do:
//! - no file system access except [`read`], which reads the one file it is given (at most the
//!   limit and one byte more); [`parse_team`], [`parse_plan`] and [`decode`] take the text or
//!   bytes the caller has, and their path only names the file in messages;
//! - no network, no environment variables, no clock: `api_key_env` names the variable that
//!   holds a key; whether it is set, whether a model server answers and whether a model file is
//!   there are for the caller to check before a run (the `strata` command does);
//! - no printing and no exit codes: errors are values, the caller decides what to show.
//!
//! Key items: [`parse_team`] → [`TeamFile`], [`parse_plan`] → [`agent_state::Task`],
//! [`goal_plan_toml`] (the plan file of a goal in words, `strata run --goal`),
//! [`default_team`] (the team used without a team file), [`example_team_toml`] /
//! [`example_plan_toml`] (what `strata init` writes), [`scaled_team_toml`] /
//! [`scaled_plan_toml`] (what `strata init --scale N` writes), [`shape_team_toml`] /
//! [`shape_plan_toml`] (what `strata init --shape SHAPE` writes), [`ExecutorSettings`] (the
//! team's executor of agent kinds: `[http]`, `[[endpoints]]`, `[executor]`),
//! [`with_executor_kind`] / [`exec_plan_toml`] (what `strata exec KIND` runs) and
//! [`FileError`].
//!
//! ```
//! use std::path::Path;
//!
//! use agent_core::tools::ToolRegistry;
//!
//! let tools = ToolRegistry::with_builtins();
//! let team = team_file::parse_team(
//!     Path::new("team.toml"),
//!     r#"
//! [[top]]
//! id = "top-a"
//! power_type = "power_a"
//!
//! [[mid]]
//! id = "mid-docs"
//! domain = "docs"
//! supervisor = "top-a"
//!
//! [[bottom]]
//! id = "bottom-d1"
//! supervisor = "mid-docs"
//! tools = ["write_file"]
//! "#,
//!     &tools,
//! )?;
//! assert_eq!(team.spec.agents.len(), 3);
//!
//! let plan = r#"
//! id = "hello"
//! goal = "write a greeting"
//!
//! [[steps]]
//! id = "write-hello"
//! domain = "docs"
//! tool = "write_file"
//! args = { path = "hello.txt", content = "hello\n" }
//! "#;
//! let task = team_file::parse_plan(Path::new("plan.toml"), plan, &team.spec, &tools)?;
//! assert_eq!(task.steps[0].id, "write-hello");
//!
//! // A mistake is reported where it is written (the text starts with a newline, so `domain`
//! // is on line 7 and its value starts in column 10), with what is expected there.
//! let wrong = plan.replace(r#"domain = "docs""#, r#"domain = "build""#);
//! let err = team_file::parse_plan(Path::new("plan.toml"), &wrong, &team.spec, &tools)
//!     .unwrap_err();
//! assert_eq!(
//!     err.to_string(),
//!     "plan.toml:7:10: no lead has the domain `build`; the team's domains: docs"
//! );
//! assert_eq!((err.line(), err.column()), (7, 10));
//! # Ok::<(), team_file::FileError>(())
//! ```
//!
//! # Limits
//!
//! Each is refused with the position where it is passed: a plan file over
//! [`MAX_PLAN_FILE_BYTES`] (16 MiB), a team file over [`MAX_TEAM_FILE_BYTES`] (32 MiB), more
//! than [`MAX_PLAN_STEPS`] (10 000) steps, a step whose `args` are over [`MAX_STEP_ARGS_BYTES`]
//! (8 MiB as JSON), and a `heartbeat` outside [`MIN_HEARTBEAT`] to [`MAX_HEARTBEAT`] (10 ms to
//! 1 h, [`check_heartbeat`]; `strata run --heartbeat` takes the same range, written as the
//! file writes it: [`parse_duration`]). A file that is
//! not UTF-8 ([`decode`], [`read`]) points at its first invalid byte. Ids and names (the plan and step ids, agent ids, names, roles,
//! role names and layers, `enabled_agents`, models, domains, power types, tools, `after`,
//! `prefer`) may not hold a control character (newline, tab, escape, other C0/C1 controls);
//! the goal, step descriptions, acceptance checks and role descriptions and prompts are free
//! text, escaped where printed ([`escape_controls`]).
//!
//! # The team file
//!
//! Every field is shown below; those marked required must be given, the rest may be left out.
//! A field not listed here is an error, and so is a `supervisor` on a top power.
//!
//! ```toml
//! shape = "layered"         # "layered", "crew" or "single" (see "Team shapes" below); left
//!                           # out, the shape the agents make; written, checked against them
//! heartbeat = "4s"          # "250ms", "4s", "1m" or "1h"; default "4s"; 10ms to 1h
//! max_agents = 50           # the pool's limit; default 50
//! max_spawn_depth = 3       # how deep agents may spawn agents (a top power's lead is depth 1);
//!                           # 1 to 10, default 3
//!
//! [reasoner]                # the default for every agent; may be left out
//! kind = "rule-based"       # "rule-based" (default, no model), "openai", "anthropic", "local"
//! forbid_tools = []         # rule-based: top powers veto plans using these tools, e.g. ["shell"]
//! prefer = ["option-a"]     # rule-based: in arbitration, vote for the first of these
//! base_url = "http://127.0.0.1:11434/v1"   # openai/anthropic: default the vendor's API
//!                           # (openai: $OPENAI_BASE_URL first); --base-url overrides it
//! model = "gpt-4o-mini"     # openai/anthropic: required here or on each agent; local:
//!                           # "gemma-3-270m-q4_k_m" (the only one)
//! stream = true             # model reasoners: answers stream and show as they are written
//!                           # (live view, --json); default true; usage is exact either way;
//!                           # off, a call is answered whole: it may take request_timeout
//!                           # plus twice its max_tokens at the slowest rate measured
//! api_key_env = "OPENAI_API_KEY"   # the variable holding the key (never the key itself);
//!                           # default OPENAI_API_KEY (anthropic: ANTHROPIC_API_KEY when no
//!                           # base_url is set); a server on loopback needs none
//! request_timeout = "120s"  # one model call; streamed, the longest wait for its next piece;
//!                           # answered whole, plus the time its max_tokens may take
//! max_tokens = 512          # most tokens one decision may generate
//! structured_output = "auto"  # openai/anthropic: how JSON answers are asked for: "auto"
//!                           # (default: the best mode the server takes, moving on when it
//!                           # refuses one), "json_schema", "json_object", "tool_call", "prompt"
//! small_model = false       # openai/anthropic: a small model (Gemma 3 270M behind a local
//!                           # server; `--small-model` sets it for every agent): the embedded
//!                           # model's narrow tool loop (an executor is offered its step's tool,
//!                           # with the plan's arguments; a lead spawns without the model),
//!                           # temperature 0 unless an agent sets one, and (openai) each request
//!                           # as the embedded model's transcript on /completions under the
//!                           # answer's grammar, when the server keeps one (llama.cpp's servers)
//! plan_repairs = 3          # model reasoners: most times an invalid plan goes back to the
//!                           # model with its problems (each audited) before the task fails
//!                           # as an invalid plan; 0 to 10, default 3
//!
//! [prices]                  # US dollars per million tokens, 0 or more; unpriced models cost 0
//! "gpt-4o-mini" = { input_per_mtok = 0.15, output_per_mtok = 0.6 }
//!
//! [budget]                  # per run, all agents together; every limit optional
//! max_tokens = 200000       # tokens in and out
//! max_cost_usd = 1.0
//! max_wall = "30m"          # wall time since the run started, all sessions
//! max_calls = 500           # model calls
//! on_exceed = "stop"        # "stop": the run fails with the reason; "ask": it pauses and the
//!                           # top powers vote on raising the limit by its original size;
//!                           # "ask_human": it pauses until one of the [approvals] humans
//!                           # signs (`strata approve RUN DECISION --as NAME`) or vetoes it
//!                           # (`strata veto`, the run stops); needs [approvals] humans.
//!                           # The pause does not count against [timeouts] reasoning_ms
//!
//! [conversation]            # each agent's own history, oldest turns dropped past either limit
//! max_turns = 8
//! max_chars = 12000
//!
//! [timeouts]                # the team's time limits in ms, each optional; 1 to 604800000 (7 days)
//! tool_ms = 600000          # one tool call; default 600000 (10 min); a `shell` call asking
//!                           # for a longer `timeout_ms` gets this one
//! reasoning_ms = 1200000    # one reasoning call (a model's answer, its retries included)
//!                           # while it keeps producing tokens; default 1200000 (20 min)
//! silence_ms = 120000       # a reasoning call that produces nothing (no token, no prompt
//!                           # batch read) this long is cut; default 120000 (2 min)
//! turn_ms = 1800000         # one heartbeat turn of an agent without its own `timeout_ms`;
//!                           # default 1800000 (30 min)
//! subtask_ms = 1800000      # one step's tool loop on its agent, from its start, across
//!                           # heartbeats; default 1800000 (30 min)
//! task_ms = 7200000         # one task, from its submission; default 7200000 (2 h)
//! tool_soft_ms = 300000     # soft limits: past one the work goes on, but a `soft_timeout` is
//! turn_soft_ms = 900000     # audited and the supervisor warned (a task's: the run's output);
//! task_soft_ms = 3600000    # each optional, below its hard limit; default half of it
//!
//! [guards]                  # runs that go nowhere; each optional
//! repeat_limit = 3          # the same call (tool and arguments) this many times in a row by
//!                           # one agent is a loop; default 3, at least 2
//! bounce_limit = 4          # one step or message handed back and forth between the same two
//!                           # agents this many times is a ping-pong; default 4, at least 3
//! idle_heartbeats = 15      # heartbeats with a task open and nothing moving; default 15
//! wait_heartbeats = 2       # heartbeats a cycle of agents waiting on each other must last;
//!                           # default 2
//! on_stuck = "stop"         # "stop": the task ends with the reason; "escalate": the stuck
//!                           # agent's supervisor is told first (default "stop")
//!
//! [arbitration]             # what the top layer settles by a weighted vote of the powers
//!                           # holding `arbitrate`; the result goes on the global board and to
//!                           # the parties, which act on it
//! escalations = true        # a step every able executor failed: "retry" it once or "abandon"
//!                           # the task (default true; false: the task fails at once)
//! acceptance = true         # a lead finds a result falls short of its step's `acceptance`
//!                           # (judged by its reasoner): "redo" it elsewhere or "accept" it
//!                           # (default true)
//! vetoed_plans = false      # a vetoed plan: "proceed" or "abandon" (default false: a veto is
//!                           # final)
//!
//! [approvals]               # humans in governance: they sign as `human:<name>` with
//!                           # `strata approve RUN DECISION --as NAME` (or `strata veto ...
//!                           # --reason TEXT`) from another terminal while the run waits
//! humans = ["alice", "bob"] # who may sign for humans: ASCII letters, digits, `-` and `_`, at
//!                           # most 64 characters each; default none
//! plans = false             # every plan the top layer proposes also needs the signature of
//!                           # one of `humans` (the proposer waits in `waiting_approval`);
//!                           # default false
//!
//! [sandbox]                 # where `shell` commands run: the built-in sandbox with the system
//!                           # read-only, the workspace read-write, home and the run data
//!                           # hidden (`strata run --unsandboxed` turns it off); each optional
//! network = false           # commands may use the network; default false (an executor's or
//!                           # role's own `network` wins)
//! memory_mb = 8192          # address space of each process and, as root, memory of the
//!                           # whole command tree; default 8192; at least 1
//! processes = 512           # processes and threads at once; default 512
//! file_size_mb = 1024       # the largest file a command writes; default 1024
//! open_files = 4096         # per process; default 4096
//! tmp_mb = 256              # the command's private /tmp and /dev/shm, each; default 256
//! read_only = ["/opt/toolchain"]   # absolute paths commands see read-only even inside a
//!                           # hidden directory (a toolchain in the home); default none
//! env = ["CARGO_HOME"]      # Strata's environment variables commands get; default none
//!                           # (they see only PATH, LANG, TERM and HOME besides)
//!
//! [http]                    # where executor kinds may reach over HTTP; default: nowhere
//! allow_hosts = ["127.0.0.1:8080", "docs.example.com"]   # a host (that host only, not its
//!                           # subdomains) or an IP address, optionally with a port (then only
//!                           # that port); a URL is an error
//! timeout_ms = 30000        # one request; default 30000; above 0
//! max_body_bytes = 1048576  # most bytes of an answer read (the rest is cut, and said so);
//!                           # default 1048576; above 0
//!
//! # Endpoints: the external services `integrations_agent` may call, by name.
//! [[endpoints]]
//! name = "tickets"                 # required, unique: 1 to 64 ASCII letters, digits, `-`, `_`
//! method = "POST"                  # GET (default), POST, PUT, PATCH or DELETE
//! url = "http://127.0.0.1:8080/api/tickets"   # required: http(s), its host in `allow_hosts`
//! description = "opens a ticket"   # for the model and `strata exec --list`; default ""
//! headers = { Authorization = { env = "API_TOKEN" }, Accept = "application/json" }
//!                                  # a value as written, or `{ env = "VAR" }`: read from the
//!                                  # environment variable when the call is made (secrets never
//!                                  # go in the file)
//!
//! # MCP servers: programs whose tools executors and roles may list, as
//! # `mcp__<server>__<tool>` (in `tools`, `forbid_tools` and a plan step's `tool`).
//! [[mcp_servers]]
//! name = "notes"                   # required, unique: 1 to 32 ASCII letters, digits, `-`, `_`
//!                                  # (no `__`, not ending in `_`)
//! command = "python3"              # a program speaking MCP on stdio, started in the sandbox
//! args = ["notes_server.py"]       # in the workspace (relative paths: from the workspace)
//! env = { NOTES_DIR = "notes" }    # its environment: PATH, LANG, TERM, HOME, these; default none
//! pass_env = ["NOTES_LANG"]        # variables of strata's passed by name (never its API keys,
//!                                  # tokens or OTLP headers); default none
//! network = false                  # the network inside the sandbox; default false
//! sandbox = true                   # `false`: run it outside the sandbox (audited, printed at
//!                                  # start); only ever explicit; default true
//!
//! [[mcp_servers]]
//! name = "search"
//! url = "http://127.0.0.1:8931/mcp"   # or: a running streamable-HTTP server (`http://` only);
//!                                     # not a process strata starts: not sandboxed by strata
//!
//! [executor]                # the retry policy of executor kind runs; each field
//! max_retries = 1           # optional, default 1: retries after the first attempt
//! initial_delay_ms = 1000   # the wait before the first retry
//! max_delay_ms = 5000       # the cap of every wait; at least `initial_delay_ms`
//! backoff_multiplier = 2.0  # each wait this many times the one before; 1 or more
//! hard_timeout_ms = 300000  # a run ends (failed) this long after it started, retries
//!                           # included; above 0
//! soft_timeout_ms = 120000  # a warning past this; above 0, at most `hard_timeout_ms`
//!
//! [executor.kinds.research_agent]   # the runs of one kind: the same fields; those left out
//! max_retries = 2                   # are the kind's own, else [executor]'s
//!
//! # Top powers sign, veto and arbitrate. The first one in the file proposes the plans.
//! [[top]]
//! id = "top-a"                     # required: 1 to 64 ASCII letters, digits, `-`, `_`
//! name = "Power A"                 # default: the id
//! power_type = "power_a"           # required
//! vote_weight = 2.0                # default 1.0; 0 or more
//! signature_authority = ["plan"]   # default ["plan"]; a power without "plan" signs no plans
//! # Optional on every agent:
//! role = "governance"              # free text for the system prompt; default "". In a team
//!                                  # with [[roles]], a lead's or an executor's `role` names a
//!                                  # role of its layer (it may then spawn what that role
//!                                  # enables); a top power's may not name one of the roles
//! capabilities = ["plan", "review", "arbitrate"]   # default: all its layer may hold
//! model = "some-model"             # for an LLM reasoner
//! temperature = 0.2                # 0.0 to 2.0
//! max_retries = 3                  # default 3
//! timeout_ms = 30000               # one heartbeat turn; default [timeouts] turn_ms; 1 to 7 days
//! reasoner = { forbid_tools = [], prefer = [] }   # overrides fields of [reasoner]
//!
//! [[top]]
//! id = "top-b"
//! power_type = "power_b"
//!
//! # Mid leads own a domain and delegate its steps to their executors.
//! [[mid]]
//! id = "mid-docs"
//! name = "Docs lead"
//! domain = "docs"                  # required; one lead per domain
//! supervisor = "top-a"             # required: a top power (none for a crew's lead)
//! max_subordinates = 4             # default 4
//! role = "docs_lead"               # a mid role (below): this lead may spawn writers
//!
//! # Bottom executors run tools.
//! [[bottom]]
//! id = "bottom-d1"
//! name = "Writer"
//! supervisor = "mid-docs"          # required: a mid lead (none for a single agent)
//! tools = ["write_file", "shell"] # required: registered tools, at least one
//! network = true                   # its `shell` commands may use the network; default its
//!                                  # role's `network`, else [sandbox] network
//!
//! [[bottom]]
//! id = "bottom-r1"
//! supervisor = "mid-docs"
//! tools = ["read_file", "search"]
//! kind = "research_agent"          # an executor kind: research_agent, writer_agent,
//!                                  # planner_agent or integrations_agent. Its goal steps, and
//!                                  # steps whose `tool` is the kind, run as runs of it
//!                                  # instead of a tool loop; default none
//! executor_retry = { max_retries = 3 }   # with a `kind`: the retry policy of its runs, the
//!                                  # fields of [executor]; those left out are what its kind
//!                                  # gets
//!
//! [[bottom]]
//! id = "bottom-o1"
//! supervisor = "mid-docs"
//! tools = ["read_file", "write_file"]
//! [bottom.ooda]                    # an OODA agent instead of a tool loop: it takes
//!                                  # its lead's steps as objectives and runs observe, decide,
//!                                  # act, reflect; plan steps for it may name `modify_self`
//!                                  # (args: a modification) or `send_message`; not with `kind`
//! role = "Editor"                  # required
//! goal = "keep the docs clear"     # required; a lead's step is its objective while it has one
//! backstory = ""                   # for its prompt
//! prompt = ""                      # extra instructions (a `prompt` modification changes them)
//! # tools = ["read_file"]          # default: the executor's tools; at most those
//! max_iterations = 10              # loops per objective, 1 to 10000; then it stops
//! timeout_ms = 300000              # the most one test-command run may take
//! self_modification_enabled = false   # whether it may modify itself
//! self_modification_level = 2      # the riskiest change it may make: 1 (no validation), 2 (a
//!                                  # schema or syntax check), 3 (its tests pass before and
//!                                  # after, on a copy), 4 (a human signs: [approvals] humans)
//! test_command = "test -s README.md"   # levels 3 and 4: run with `sh -c` in the sandbox
//! # model = "gpt-4o-mini"          # its model, when the team reasons with one; default the
//!                                  # executor's
//! # max_retries = 3                # its runtime settings; default the executor's (a
//! # turn_timeout_ms = 30000        # hot-swapped genome, `strata adopt`, sets them; a
//! # temperature = 0.2              # rollback restores them)
//!
//! # Roles: the kinds of agent the team may create while it works, each spawned by an agent
//! # whose role enables it. Without roles the team is the agents listed above.
//! [[roles]]
//! name = "writer"                  # required: 1 to 40 ASCII letters, digits, `-`, `_`
//! layer = "bottom"                 # required: "mid" (a lead) or "bottom" (an executor)
//! description = "writes and edits documentation"   # for whoever may spawn it; default ""
//! system_prompt = "You write short, clear docs."   # default: the layer's own
//! tools = ["read_file", "write_file"]   # bottom roles: required, registered tools; mid: none
//! capabilities = ["execute", "tool_call", "reflect"]   # default: all its layer may hold
//! model = "gpt-4o-mini"            # for an LLM reasoner
//! reasoner = { kind = "openai" }   # overrides fields of [reasoner], like an agent's
//! max_instances = 4                # most agents of the role alive at once; default: no limit
//!                                  # but the pool's; 1 or more
//! network = false                  # its agents' `shell` commands may use the network;
//!                                  # default [sandbox] network
//! # kind = "writer_agent"          # bottom roles: the executor kind its agents run, like an
//!                                  # executor's `kind`
//!
//! [[roles]]
//! name = "docs_lead"
//! layer = "mid"
//! enabled_agents = ["writer"]      # the roles it may spawn: of its layer or below; default
//!                                  # none; a bottom role enables none
//! ```
//!
//! # Team shapes
//!
//! A team is one of three shapes ([`agent_pool::TeamShape`]), named by `shape` or, left out,
//! by its agents: with a `[[top]]` power it is **layered**; without, with a `[[mid]]` lead it
//! is a **crew**; with one `[[bottom]]` executor alone it is a **single** agent.
//! - layered: every lead has a `supervisor` (a top power) and every executor one (a lead);
//!   the first power proposes each plan, as above;
//! - crew: exactly one lead, without a `supervisor`, and at least one executor, each with
//!   `supervisor` naming that lead. The lead takes each task itself (nothing is signed), and
//!   takes every plan step whatever its `domain`;
//! - single: exactly one executor, without a `supervisor`, not an OODA agent (it may have a
//!   `kind`). It takes each task itself and works its steps in turn.
//!
//! A crew and a single agent have no powers, so `[[roles]]`, `[arbitration]`, `[approvals]
//! plans = true` and `[budget] on_exceed = "ask"` are refused there (`ask_human` is not);
//! where a layered team would vote, the agent that took the task decides (a step no executor
//! can finish fails the task; a result short of its `acceptance` goes to another executor).
//! Each mistake points at the agent or value at fault: a written `shape` the agents do not
//! make, a second lead of a crew or a second agent of a single, a `supervisor` a crew's lead
//! or a single agent may not have, a lead or an executor of a team with powers (or an executor
//! of a crew) without one.
//!
//! Time limits (`[timeouts]`): every limit is measured on the run's clock, and hitting one is a
//! typed failure written to the audit log. A tool call past `tool_ms` fails with the tool's
//! timeout error (audited as a failed call; an agent's tool loop shows it to its reasoner); a
//! reasoning call past `reasoning_ms`, one silent for `silence_ms` (a model still producing
//! tokens is never cut by it: the limit is on silence, the totals are backstops sized for a
//! CPU model on 2 cores) and a turn past the agent's `timeout_ms` are audited as
//! `timed_out` and fail the turn, which is retried up to `max_retries`; a step whose tool loop
//! runs past `subtask_ms` and a task open past `task_ms` end the task with the failure
//! `timed_out` (naming the limit), not retried nor reassigned. A turn never cuts a
//! side-effecting tool call short: `tool_ms` bounds it.
//!
//! Soft limits (`tool_soft_ms`, `turn_soft_ms`, `task_soft_ms`: soft timeouts for the tool
//! calls, turns and tasks of a team): a tool call, a heartbeat turn or a task still
//! running at its soft limit goes on to its hard limit unchanged, but is audited once as
//! `soft_timeout` and the supervisor gets a `warning` message (a tool call's or a turn's: the
//! agent's supervisor, `system` for a top power; a task's: `system`, shown in the run's
//! output). Each left out is half its hard limit; one given must be from 1 ms to below its
//! hard limit (refused at the value otherwise). An agent's own `timeout_ms` keeps
//! `turn_soft_ms` when that is below it, else half of it.
//!
//! MCP tools (`[[mcp_servers]]`): [`mcp_servers`] reads the declarations alone, so that a
//! program starts the servers and registers their tools (the `agent-mcp` crate) before
//! [`parse_team`] checks the lists; a tool a list names that its server does not offer is an
//! error at that name. An executor or role may call only the MCP tools it lists, as for the
//! built-in tools. A tool annotated read-only by its server simply runs; any other is
//! journaled like `write_file` or `shell` (not run again after a crash unless annotated
//! idempotent). [`parse_stored_team`] reads a stored run's team file without starting them.
//!
//! Capabilities: a top power may hold `plan`, `reflect`, `review`, `coordinate`, `delegate` and
//! `arbitrate`; a mid lead the same but `arbitrate`; a bottom executor `plan`, `execute`,
//! `reflect`, `tool_call`, `code_gen`, `test_exec` and `coordinate`. A role may hold what its layer
//! may (docs/concepts.md#capabilities), which is also why only mid roles enable roles (`delegate`)
//! and only bottom roles have tools (`tool_call`).
//!
//! # The plan file
//!
//! ```toml
//! id = "hello"                     # required, not empty
//! goal = "write a greeting and measure it"   # required, not empty
//!
//! [[steps]]                        # none: a goal-only task, the top layer plans the steps
//! id = "write-hello"               # required, unique in the plan
//! description = "write hello.txt"  # default: "<id> (<tool>)"
//! domain = "docs"                  # a lead's domain (a crew's lead, a single agent: any), or
//! # agent = "bottom-d1"            # a lead or an executor; neither: any executor with the tool
//! tool = "write_file"              # a registered tool an executor it reaches (or its role) has
//! args = { path = "hello.txt", content = "hello\n" }   # checked against the tool's schema
//! # or, one per line: args.path = "hello.txt"
//!
//! [[steps]]
//! id = "measure"
//! domain = "docs"
//! tool = "shell"
//! args = { command = "wc -c < hello.txt" }
//! after = ["write-hello"]          # steps listed earlier that must finish first
//! idempotent = true                # running it twice is safe; default false
//!
//! [[steps]]                        # a goal step: no `tool` and no `args`
//! id = "readme"
//! description = "write README.md explaining hello.txt"   # required in a goal step
//! domain = "docs"
//! role = "writer"                  # a bottom role of the team: the agent the step needs
//! acceptance = "README.md exists and names hello.txt"    # how to tell it is done well
//! after = ["measure"]
//!
//! [[steps]]                        # a run of an executor kind: `tool` names the kind
//! id = "research"
//! agent = "bottom-r1"              # (or a domain) reaching an executor with that `kind`, or
//!                                  # a `role` with it
//! tool = "research_agent"
//! args = { objective = "what do the docs say about greetings?", inputs = { paths = ["*.txt"] } }
//!                                  # `objective`: required, not empty, at most 16 KiB;
//!                                  # `inputs`: optional, checked against the kind's schema
//!                                  # (`strata exec --list` shows each kind's)
//! after = ["write-hello"]
//! ```
//!
//! A step with a `tool` (a scripted step) runs on any reasoner, the rule-based one included. A
//! goal step, and a plan without steps, need a reasoner that plans and chooses its tools (an
//! LLM reasoner): [`agent_state::Task::is_scripted`] tells which a plan is, and `strata run`
//! refuses a plan that is not scripted on the rule-based reasoner, unless each of its goal
//! steps goes to executors with a `kind` (the kind runs it, its description the objective).
//!
//! # Dependencies
//!
//! Each is here for the types a file becomes or is checked against:
//! - `agent-state`: ids, layers, capabilities, agent configurations, roles and the role book,
//!   tasks and plan steps, the control-character rule;
//! - `agent-layers`: the top, mid and bottom role settings;
//! - `agent-pool`: `TeamSpec`, `AgentSpec`, `RoleSpec`, the pool's defaults and largest size;
//! - `agent-core`: the tool registry that executors' tools and steps' `args` are checked
//!   against;
//! - `agent-executor`: the executor kinds a `kind` names and a kind step's `inputs` are
//!   checked against ([`agent_executor::builtins()`]), and what `[http]`, `[[endpoints]]` and
//!   `[executor]` become ([`ExecutorSettings`], which builds the team's
//!   [`agent_executor::Executor`]);
//! - `agent-llm`: `[prices]`, `[budget]` and `[conversation]` become its `PriceTable`, `Budget`
//!   and `ConversationLimits`. It is the heaviest (with its default HTTP providers), and a
//!   program that runs a team from a file has it already;
//! - `toml` (parsing with byte spans, turned into lines and columns), `toml_edit` (the spans
//!   `toml` cannot give, and [`with_executor_kind`]'s edit that keeps comments), `serde`,
//!   `serde_json` (a step's `args` as the JSON a tool takes) and `thiserror`.

mod error;
mod examples;
mod exec;
mod executor;
mod limits;
mod mcp;
mod plan;
mod raw;
mod shape;
mod shapes;
mod team;
mod text;

#[cfg(test)]
mod tests;

pub use error::{FileError, ReadError};
pub use examples::{
    MIN_SCALE, example_plan_toml, example_team_toml, scaled_plan_toml, scaled_team_toml,
};
pub use exec::{ExecTeam, exec_plan_toml, with_executor_kind};
pub use executor::ExecutorSettings;
pub use limits::{
    HeartbeatOutOfRange, MAX_HEARTBEAT, MAX_ID_BYTES, MAX_PLAN_FILE_BYTES, MAX_PLAN_STEPS,
    MAX_PLAN_TEXT_BYTES, MAX_STEP_ARGS_BYTES, MAX_TEAM_FILE_BYTES, MAX_TEXT_BYTES, MIN_HEARTBEAT,
    check_heartbeat, parse_duration,
};
pub use mcp::{
    MAX_MCP_SERVER_NAME, MCP_TOOL_PREFIX, McpServerDecl, McpTransport, mcp_servers,
    parse_stored_team, split_mcp_tool, toml_strings, with_unstarted_tools,
};
pub use plan::{goal_plan_toml, parse_plan};
pub use shapes::{shape_plan_toml, shape_team_toml};
pub use team::{
    DEFAULT_MAX_SUBORDINATES, MAX_SPAWN_DEPTH_LIMIT, ReasonerKind, ReasonerSettings,
    SandboxSettings, TeamFile, UnknownReasonerKind, default_team, parse_team,
};
pub use text::{decode, escape_controls, read};
