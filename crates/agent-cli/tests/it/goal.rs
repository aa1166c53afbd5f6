//! A task given as a goal in words (`strata run --goal`) or with goal steps (a description and
//! no tool): refused with exit code 2 before anything is written when the reasoner cannot plan
//! (the rule-based one, the default), and `--goal` and a plan file are one or the other. With a
//! model that plans (a fake one over HTTP, `agent_llm::testing`), the shipped goal example runs
//! to success, and a run killed with SIGKILL at varied moments resumes to the same success:
//! every agent spawned once, every result recorded once, every file written once.

use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_llm::testing::{FakeModel, add_program_scenario, speaker_of};
use serde_json::Value;

use crate::support::{FAST, Out, Running, Scratch, listed_run, snapshot};

/// `strata run ARGS` in `s` with the data directory `D` and workspace `W`; asserts that
/// neither was created and that nothing else in the scratch directory changed.
#[track_caller]
fn run(s: &Scratch, args: &[&str]) -> Out {
    let before = snapshot(s.root());
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--data", "D", "--workspace", "W", "--quiet", FAST[0], FAST[1]]);
    let out = s.strata(&all);
    assert!(!s.path("D").exists(), "`strata {}` created the data directory", out.args);
    assert!(!s.path("W").exists(), "`strata {}` created the workspace", out.args);
    assert_eq!(snapshot(s.root()), before, "`strata {}` wrote something", out.args);
    out
}

/// What the refusal says, whichever agent it names.
const NEEDS_PLANNING: [&str; 3] = [
    "which needs a reasoner that plans",
    "use --reasoner openai, anthropic or local",
    "the rule-based reasoner runs only steps that name their tool and args",
];

#[test]
fn a_goal_on_the_rule_based_reasoner_is_refused_before_anything_starts() {
    let s = Scratch::with_example();
    let refused = run(&s, &["--goal", "write a README for the project"]);
    refused.bad_input(&NEEDS_PLANNING).bad_input(&[
        "this task has only a goal",
        "`top-a`, the top power that proposes it, has the rule-based one",
    ]);

    // The same with a team file, and with the rule-based reasoner named on the command line.
    let refused =
        run(&s, &["--goal", "write a README", "--team", "team.toml", "--reasoner", "rule-based"]);
    refused.bad_input(&NEEDS_PLANNING);

    // An empty goal is bad input of its own.
    run(&s, &["--goal", "  "]).bad_input(&["--goal is empty"]);
}

#[test]
fn a_plan_with_a_goal_step_on_the_rule_based_reasoner_is_refused() {
    let s = Scratch::with_example();
    let plan = s.read("plan.toml").replace(
        "tool = \"write_file\"\nargs = { path = \"hello.txt\", content = \"hello, strata\\n\" }\n",
        "acceptance = \"hello.txt holds a greeting\"\n",
    );
    assert_ne!(plan, s.read("plan.toml"), "the example plan changed: update this test");
    s.write("goal-step.toml", &plan);
    let refused = run(&s, &["goal-step.toml"]);
    refused.bad_input(&[
        "this task has goal steps (write-hello), which need a reasoner that plans",
        "use --reasoner openai, anthropic or local",
    ]);

    // The example plan itself (every step scripted) still runs on the rule-based reasoner.
    s.strata(&["run", "plan.toml", "--data", "D", "--workspace", "W", "--quiet", FAST[0], FAST[1]])
        .code(0);
}

#[test]
fn a_plan_file_and_goal_are_one_or_the_other() {
    let s = Scratch::with_example();
    let both = run(&s, &["plan.toml", "--goal", "write a README"]);
    both.code(2);
    assert!(both.stderr.contains("cannot be used with"), "{}", both.stderr);
    let neither = run(&s, &[]);
    neither.code(2);
    assert!(
        neither.stderr.contains("the following required arguments were not provided")
            && neither.stderr.contains("<PLAN|--goal <TEXT>>"),
        "{}",
        neither.stderr
    );
}

// ---------------------------------------------------------------------------------------------
// The shipped goal example against a fake model over HTTP (`agent_llm::testing`): to success,
// and killed (SIGKILL) at varied moments, then resumed to the same success.
// ---------------------------------------------------------------------------------------------

/// The goal example, as shipped.
const GOAL_TEAM: &str = include_str!("../../../../examples/goal/team.toml");
const GOAL_TEXT: &str = include_str!("../../../../examples/goal/goal.txt");

/// The key the fake model wants, in the variable [`KEY_VAR`] the tests' team file names.
const KEY: &str = "sk-goal-5d3f0a-not-a-real-key";

/// The variable the tests' copy of the example names with `api_key_env`.
const KEY_VAR: &str = "STRATA_GOAL_TEST_KEY";

/// The agents the scenario spawns (id, spawner, role): the two leads the plan names, created
/// by the proposing power, and the workers the leads spawn.
const SPAWNED: [(&str, &str, &str); 6] = [
    ("code_lead-1", "top-a", "code_lead"),
    ("docs_lead-1", "top-a", "docs_lead"),
    ("coder-1", "code_lead-1", "coder"),
    ("coder-2", "code_lead-1", "coder"),
    ("tester-1", "code_lead-1", "tester"),
    ("writer-1", "docs_lead-1", "writer"),
];

/// The workers that return results, one result each.
const RETURNING: [&str; 4] = ["coder-1", "coder-2", "tester-1", "writer-1"];

/// The files the scenario's workers write with `write_file`.
const WRITTEN: [&str; 3] = ["add.sh", "test_add.sh", "README.md"];

/// What `write_file` says of a call a kill interrupted, which it runs again (it is idempotent).
const RERUN: &str = "interrupted by a crash; idempotent, so it runs again";

/// How the audit shows a call whose result was stored before a kill, found again on resume.
const REUSED: &str = "recorded result reused, tool not run again: wrote";

/// How long a resume of the example may take: it finishes in a second or two; one that has
/// not finished by then has stalled.
const RESUME_DEADLINE: Duration = Duration::from_secs(20);

/// The value of the first `name = "..."` line of a TOML text.
#[track_caller]
fn setting(toml: &str, name: &str) -> String {
    let prefix = format!("{name} = \"");
    toml.lines()
        .find_map(|line| line.strip_prefix(&prefix).and_then(|rest| rest.split_once('"')))
        .map(|(value, _)| value.to_owned())
        .unwrap_or_else(|| panic!("the goal example has no `{name} = \"...\"` line"))
}

/// The tool an OpenAI response body calls, if it calls one.
fn called(answer: &Value) -> Option<&str> {
    answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"].as_str()
}

/// What the test's handler knows and may be told: whether to hold back code_lead's finish while
/// its coders work, and when a coder's results were answered.
#[derive(Default)]
struct Hold {
    /// Hold code_lead's "waiting for the coders" finish until a coder's results have been
    /// answered and [`HOLD_FOR`] has passed, and then [`HOLD_FOR`] more (the test kills the
    /// run meanwhile).
    armed: AtomicBool,
    /// Whether code_lead's finish is being held now.
    holding: AtomicBool,
    /// When a coder's `return_results` was first answered while armed.
    coder_returned: Mutex<Option<Instant>>,
}

/// How long a held answer waits after a coder's results were answered: enough for the coder
/// to store its result and report it to its lead.
const HOLD_FOR: Duration = Duration::from_millis(400);

impl Hold {
    /// The scenario, with code_lead's first finish held back when armed.
    fn answer(&self, body: &Value) -> Result<Value, String> {
        let answer = add_program_scenario(body)?;
        let armed = self.armed.load(Ordering::SeqCst);
        if armed && called(&answer) == Some("return_results") && speaker_of(body) == "coder" {
            self.coder_returned.lock().unwrap().get_or_insert_with(Instant::now);
        }
        let finishing = called(&answer) == Some("finish_subtask")
            && answer.to_string().contains("waiting for the coders");
        if armed && finishing && speaker_of(body) == "code_lead" {
            self.holding.store(true, Ordering::SeqCst);
            let started = Instant::now();
            while started.elapsed() < Duration::from_secs(5) && !self.held_long_enough() {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Held until the test has killed the run; this answer then goes nowhere.
            std::thread::sleep(HOLD_FOR);
            self.holding.store(false, Ordering::SeqCst);
        }
        Ok(answer)
    }

    /// Holds code_lead's first finish in the run about to start, or holds nothing.
    fn arm(&self, armed: bool) {
        *self.coder_returned.lock().unwrap() = None;
        self.armed.store(armed, Ordering::SeqCst);
    }

    /// Whether a coder's results were answered at least [`HOLD_FOR`] ago.
    fn held_long_enough(&self) -> bool {
        self.coder_returned.lock().unwrap().is_some_and(|at| at.elapsed() >= HOLD_FOR)
    }
}

/// A scratch directory holding the goal example's team file pointed at a fake model playing
/// `add_program_scenario`, which runs on a tokio runtime of its own while the test waits on
/// `strata` processes.
struct GoalExample {
    s: Scratch,
    model: FakeModel,
    hold: Arc<Hold>,
    key_var: String,
    _runtime: tokio::runtime::Runtime,
}

impl GoalExample {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let hold = Arc::new(Hold::default());
        let handler = {
            let hold = hold.clone();
            move |body: &Value| hold.answer(body)
        };
        let served = setting(GOAL_TEAM, "model");
        let model = runtime.block_on(FakeModel::start_with_key(served, KEY, handler)).unwrap();
        // Only `base_url` changes, and the fake model's key is named (`api_key_env`, a server
        // the file names gets a key only so): everything else is the example as shipped.
        let shipped = format!("base_url = \"{}\"", setting(GOAL_TEAM, "base_url"));
        let ours = format!("base_url = \"{}\"\napi_key_env = \"{KEY_VAR}\"", model.url());
        let team = GOAL_TEAM.replacen(&shipped, &ours, 1);
        assert_ne!(team, GOAL_TEAM, "the example's base_url line was not replaced");
        let s = Scratch::new();
        s.write("team.toml", &team);
        Self { s, model, hold, key_var: KEY_VAR.to_owned(), _runtime: runtime }
    }

    /// `strata ARGS` with the key in the variable the team file names.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = self.s.command(args);
        command.env(&self.key_var, KEY);
        command
    }

    fn strata(&self, args: &[&str]) -> Out {
        Out::of(args, &mut self.command(args))
    }

    fn spawn(&self, args: &[&str]) -> Running {
        Scratch::spawn_command(args, &mut self.command(args))
    }

    /// `strata run --goal ...` of the example as run `id`, workspace `ws`, data `data`.
    fn run_args<'a>(id: &'a str, ws: &'a str) -> Vec<&'a str> {
        vec![
            "run",
            "--goal",
            GOAL_TEXT.trim(),
            "--team",
            "team.toml",
            "--data",
            "data",
            "--workspace",
            ws,
            "--reasoner",
            "openai",
            "--heartbeat",
            "250ms",
            "--quiet",
            "--run-id",
            id,
        ]
    }

    /// `strata resume ID`, killed if it has not finished within [`RESUME_DEADLINE`]: `Err`
    /// with what it printed then.
    fn resume(&self, id: &str) -> Result<Out, Out> {
        let args = ["resume", id, "--data", "data", "--quiet"];
        let mut resume = self.spawn(&args);
        let started = Instant::now();
        while !resume.exited() {
            if started.elapsed() > RESUME_DEADLINE {
                return Err(resume.kill());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(resume.finish())
    }

    /// The model was asked only what the scenario expects.
    #[track_caller]
    fn no_problems(&self) {
        let problems = self.model.problems();
        assert!(
            problems.is_empty(),
            "the fake model was asked what it did not expect: {problems:#?}"
        );
    }

    /// What a stalled run looks like: its tree, what is left in its inboxes and its leads'
    /// whiteboards (each worker's report that reached its lead is a `returned` line there).
    fn stalled(&self, id: &str) -> String {
        let show = |view: &str| {
            let out = self.s.strata(&["inspect", id, view, "--data", "data"]);
            format!("--- inspect {view}:\n{}", out.stdout)
        };
        let boards = self.s.strata(&["inspect", id, "whiteboards", "--data", "data"]).stdout;
        let leads: String = boards
            .split("=== ")
            .filter(|b| b.contains("_lead-1 (mid"))
            .map(|b| format!("=== {b}"))
            .collect();
        format!(
            "{}\n{}\n--- the leads' whiteboards (a worker whose report reached its lead has a \
             `[worker] returned` line there):\n{leads}",
            show("tree"),
            show("messages")
        )
    }

    /// What a goal run that succeeded must show, however often it was killed and resumed: its
    /// files, the six agents spawned once each, four trusted results (one per worker), a
    /// verified audit chain, and each file written once (an extra write only where a kill
    /// interrupted a write, which `write_file`, idempotent, runs again).
    #[track_caller]
    fn check_succeeded(&self, id: &str, ws: &str) {
        let s = &self.s;
        for file in WRITTEN {
            assert!(s.path(ws).join(file).is_file(), "run {id}: {ws}/{file} was not written");
        }
        let test = Command::new("sh").arg("test_add.sh").current_dir(s.path(ws)).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&test.stdout).trim(), "PASS", "run {id}: the test");
        assert_eq!(listed_run(s, "data", id)["status"], "succeeded", "run {id}");

        let tree = s.strata(&["inspect", id, "tree", "--data", "data"]);
        tree.code(0);
        for (agent, _, role) in SPAWNED {
            let shown = format!("{agent} ({role})");
            assert_eq!(
                tree.stdout.matches(&shown).count(),
                1,
                "run {id}: `inspect tree` shows {shown:?} once:\n{}",
                tree.stdout
            );
        }
        let json = s.strata(&["inspect", id, "tree", "--data", "data", "--json"]).code(0).json();
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let mut spawned: Vec<(String, String, String)> = json["agents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["spawned"] == true)
            .map(|a| (text(&a["id"]), text(&a["supervisor"]), text(&a["role"])))
            .collect();
        spawned.sort();
        let mut expected: Vec<(String, String, String)> = SPAWNED
            .iter()
            .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
            .collect();
        expected.sort();
        assert_eq!(
            spawned, expected,
            "run {id}: exactly these six agents are spawned, each once:\n{}",
            tree.stdout
        );

        let results = s.strata(&["inspect", id, "results", "--data", "data"]);
        results.code(0);
        assert!(!results.stdout.contains("UNTRUSTED"), "run {id}:\n{}", results.stdout);
        let json = s.strata(&["inspect", id, "results", "--data", "data", "--json"]).code(0).json();
        let listed = json.as_array().unwrap();
        let mut by: Vec<String> = listed.iter().map(|r| text(&r["agent"])).collect();
        by.sort();
        let twice: Vec<&String> =
            by.iter().filter(|a| by.iter().filter(|b| b == a).count() > 1).collect();
        assert_eq!(
            by, RETURNING,
            "run {id}: one structured result from each worker; recorded more than once: \
             {twice:?} (a worker killed after its `return_results` was audited, before its \
             heartbeat was stored, runs its subtask again on resume and audits its result \
             again):\n{}",
            results.stdout
        );
        assert!(listed.iter().all(|r| r["trusted"] == true), "run {id}: {json:#}");

        let verify = s.strata(&["verify", id, "--data", "data"]);
        verify.code(0).stdout_has(&["the run verifies"]);

        // Each write happened once: per file, every `wrote` beyond the first follows a call
        // that a kill interrupted and that therefore ran again. A call whose result was stored
        // just before a kill, but not yet audited, shows only as reused on resume.
        let audit = s.strata(&["inspect", id, "audit", "--data", "data", "--json"]).code(0).json();
        let writes: Vec<&Value> = audit
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["event"]["event"] == "tool_call" && r["event"]["tool"] == "write_file")
            .collect();
        for file in WRITTEN {
            let of_file: Vec<&Value> =
                writes.iter().copied().filter(|r| r["event"]["args"]["path"] == file).collect();
            let summary = |r: &Value| text(&r["event"]["summary"]);
            let ok = |r: &&Value| r["event"]["success"] == true;
            let wrote = of_file.iter().filter(|r| ok(r) && summary(r).starts_with("wrote")).count();
            let reused = of_file.iter().filter(|r| ok(r) && summary(r).starts_with(REUSED)).count();
            let rerun = of_file.iter().filter(|r| summary(r) == RERUN).count();
            let shown: Vec<String> =
                of_file.iter().map(|r| format!("{}: {}", text(&r["agent"]), summary(r))).collect();
            assert!(
                wrote + reused >= 1 && wrote <= 1 + rerun,
                "run {id}: {file} was written {wrote} time(s), {rerun} of them again after a \
                 kill interrupted the call; its write_file calls in the audit:\n{}",
                shown.join("\n")
            );
        }
    }
}

#[test]
fn the_goal_example_runs_to_success_against_a_model_over_http() {
    let g = GoalExample::new();
    let out = g.strata(&GoalExample::run_args("g", "ws"));
    g.no_problems();
    out.code(0).stdout_has(&["task `goal-", "succeeded"]);
    assert!(g.model.chat_requests() > 12, "the kills below land before the end of a run");
    g.check_succeeded("g", "ws");
    g.no_problems();
}

/// When a run is killed.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// Once the model has been asked this many times: while the powers plan and sign, while
    /// the leads spawn their workers, while the workers work.
    AfterRequests(usize),
    /// While code_lead's step is in the middle of a heartbeat (its finish held back by the
    /// model) and a coder has already reported its result to it. On resume the lead gets its
    /// own task again together with the coders' reports, in one batch; the reports must not
    /// be lost (the lead would wait for them forever).
    LeadMidStepAfterAResult,
}

const KILLS: [Kill; 7] = [
    Kill::AfterRequests(2),
    Kill::AfterRequests(4),
    Kill::AfterRequests(6),
    Kill::AfterRequests(8),
    Kill::AfterRequests(10),
    Kill::AfterRequests(12),
    Kill::LeadMidStepAfterAResult,
];

#[test]
fn the_goal_example_killed_at_varied_moments_resumes_to_the_same_success() {
    let g = GoalExample::new();
    let mut failures: Vec<String> = Vec::new();
    for (n, kill) in KILLS.into_iter().enumerate() {
        let id = format!("k{n}");
        let ws = format!("ws-{n}");
        let before = g.model.chat_requests();
        g.hold.arm(matches!(kill, Kill::LeadMidStepAfterAResult));
        let args = GoalExample::run_args(&id, &ws);
        let mut run = g.spawn(&args);
        let started = Instant::now();
        let due = || match kill {
            Kill::AfterRequests(k) => g.model.chat_requests() - before >= k,
            Kill::LeadMidStepAfterAResult => {
                g.hold.holding.load(Ordering::SeqCst) && g.hold.held_long_enough()
            }
        };
        while !due() {
            assert!(!run.exited(), "run {id} ended before it was to be killed ({kill:?})");
            assert!(started.elapsed() < Duration::from_secs(30), "run {id} stalled");
            std::thread::sleep(Duration::from_millis(1));
        }
        let killed = run.kill();
        g.hold.arm(false);
        assert_eq!(killed.status.code(), None, "run {id} was killed by a signal");
        let asked = g.model.chat_requests() - before;

        let checked = match g.resume(&id) {
            Err(stalled) => {
                let lines: Vec<&str> = stalled.stdout.lines().collect();
                let tail = lines[lines.len().saturating_sub(30)..].join("\n");
                Err(format!(
                    "`strata resume {id}` did not finish within {RESUME_DEADLINE:?}: the run \
                     stalled\n--- the last lines it printed:\n{tail}\n{}",
                    g.stalled(&id)
                ))
            }
            Ok(resumed) => std::panic::catch_unwind(AssertUnwindSafe(|| {
                resumed.code(0);
                g.check_succeeded(&id, &ws);
            }))
            .map_err(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default()
            }),
        };
        if let Err(failure) = checked {
            failures.push(format!(
                "=== run {id}, killed {kill:?} (after {asked} requests to the model):\n{failure}"
            ));
        }
    }
    g.no_problems();
    assert!(
        failures.is_empty(),
        "{} of {} runs killed and resumed did not end as a run that was never killed:\n{}",
        failures.len(),
        KILLS.len(),
        failures.join("\n\n")
    );
}

/// `strata run --json` with a model reasoner shows the models' answers as they stream: `tokens`
/// lines whose pieces, call by call, put back together, are the JSON the model answered; and
/// the usage report counts every answered call once, exactly as the model counted it, streamed
/// or not.
#[test]
fn strata_run_json_shows_the_models_answers_as_they_stream_and_counts_usage_exactly() {
    let g = GoalExample::new();
    let args: Vec<&str> = GoalExample::run_args("t", "ws")
        .into_iter()
        .map(|a| if a == "--quiet" { "--json" } else { a })
        .collect();
    let out = g.strata(&args);
    g.no_problems();
    let out = out.code(0);
    let lines: Vec<Value> =
        out.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let tokens: Vec<&Value> = lines.iter().filter(|l| l["event"] == "tokens").collect();
    assert!(!tokens.is_empty(), "no tokens lines in:\n{}", out.stdout);
    let mut answers: std::collections::BTreeMap<(String, u64, u64, String), String> =
        std::collections::BTreeMap::new();
    for t in &tokens {
        let key = (
            t["agent"].as_str().unwrap().to_owned(),
            t["call"].as_u64().unwrap(),
            t["attempt"].as_u64().unwrap(),
            t["tool"].as_str().unwrap_or_default().to_owned(),
        );
        answers.entry(key).or_default().push_str(t["text"].as_str().unwrap());
    }
    for (key, text) in &answers {
        assert!(serde_json::from_str::<Value>(text).is_ok(), "{key:?} streamed {text:?}");
    }
    let requests = g.model.requests();
    let streamed = requests.iter().filter(|r| r["stream"] == true).count();
    assert!(streamed > 12, "the agents' calls streamed: {streamed} of {}", requests.len());
    let answered =
        requests.iter().filter(|r| agent_llm::testing::decision_of(r) != Some("probe")).count()
            as u64;
    let usage = g.strata(&["inspect", "t", "usage", "--data", "data", "--json"]).code(0).json();
    let total = &usage["usage"]["total"];
    assert_eq!(total["input_tokens"], answered * agent_llm::testing::USAGE_PROMPT_TOKENS);
    assert_eq!(total["output_tokens"], answered * agent_llm::testing::USAGE_COMPLETION_TOKENS);
}

/// `strata inspect RUN calls [AGENT]` lists every model call the run made (the pre-run probe
/// is the provider's, not an agent's): agent, model, the request, the answer, tool calls with
/// the results the agent's next request fed back, tokens and outcome; plain, `--full` and
/// `--json`; an agent that made no call, or `--full` on another view, is refused.
#[test]
fn inspect_calls_lists_every_model_call_with_its_request_answer_and_tool_results() {
    let g = GoalExample::new();
    g.strata(&GoalExample::run_args("t", "ws")).code(0);
    g.no_problems();
    let answered = g
        .model
        .requests()
        .iter()
        .filter(|r| agent_llm::testing::decision_of(r) != Some("probe"))
        .count();
    let out = g.strata(&["inspect", "t", "calls", "--data", "data", "--json"]).code(0).json();
    let calls = out["calls"].as_array().unwrap();
    assert_eq!(calls.len(), answered, "{out:#}");
    for (i, call) in calls.iter().enumerate() {
        assert_eq!(call["seq"], i as u64 + 1);
        assert_eq!(call["outcome"], "answered", "{call:#}");
        assert!(!call["agent"].as_str().unwrap().is_empty());
        assert!(!call["model"].as_str().unwrap().is_empty());
        assert!(!call["messages"].as_array().unwrap().is_empty(), "{call:#}");
        assert_eq!(call["usage"]["input_tokens"], agent_llm::testing::USAGE_PROMPT_TOKENS);
    }
    let with_result = calls
        .iter()
        .flat_map(|c| c["tool_calls"].as_array().into_iter().flatten())
        .filter(|t| t["result"].is_string())
        .count();
    assert!(with_result > 0, "no tool call has its result: {out:#}");

    let plain = g.strata(&["inspect", "t", "calls", "--data", "data"]);
    plain.code(0).stdout_has(&["#1 ", " · answered", "  prompt: ", "    result: "]);
    let full = g.strata(&["inspect", "t", "calls", "--data", "data", "--full"]);
    full.code(0).stdout_has(&["  system:", "  user:"]);
    assert!(full.stdout.len() > plain.stdout.len());

    let agent = calls[calls.len() - 1]["agent"].as_str().unwrap().to_owned();
    let own =
        g.strata(&["inspect", "t", "calls", &agent, "--data", "data", "--json"]).code(0).json();
    let own = own["calls"].as_array().unwrap();
    assert!(!own.is_empty() && own.len() < calls.len(), "{} of {}", own.len(), calls.len());
    assert!(own.iter().all(|c| c["agent"] == agent.as_str()));

    g.strata(&["inspect", "t", "calls", "nobody", "--data", "data"])
        .bad_input(&["agent `nobody` made no model call in run t", &agent]);
    g.strata(&["inspect", "t", "tree", "--full", "--data", "data"])
        .bad_input(&["go with the `calls` and `timeline` views only"]);
}

/// `strata inspect RUN timeline` of a goal run: the agents the leads spawned, each with its
/// task, its spawner, how long it took and its result; the step each worker was handed, with
/// its tool calls on the way; a lead's work lists the agents it spawned.
#[test]
fn the_timeline_of_a_goal_run_shows_each_spawned_agents_task_and_tool_calls() {
    let g = GoalExample::new();
    g.strata(&GoalExample::run_args("t", "ws")).code(0);
    g.no_problems();
    let timeline =
        g.strata(&["inspect", "t", "timeline", "--data", "data", "--json"]).code(0).json();
    let steps = timeline["steps"].as_array().unwrap();
    let spawned: Vec<&Value> = steps.iter().filter(|s| s["kind"] == "spawned").collect();
    assert!(!spawned.is_empty(), "{timeline:#}");
    let starts: Vec<f64> = steps.iter().map(|s| s["start_s"].as_f64().unwrap()).collect();
    assert!(starts.is_sorted_by(|a, b| a <= b), "in the order they started: {starts:?}");
    for s in &spawned {
        assert_ne!(s["success"], false, "{s:#}");
        assert!(!s["input"].as_str().unwrap().is_empty(), "{s:#}");
        assert!(s["duration_s"].as_f64().is_some(), "every one ended: {s:#}");
    }
    let lines = |s: &Value| -> Vec<String> {
        let records = s["records"].as_array().unwrap();
        records.iter().map(|r| r["line"].as_str().unwrap().to_owned()).collect()
    };
    // A worker returned its result; the step its lead handed it holds its tool calls.
    let worker = spawned
        .iter()
        .find(|s| s["success"] == true && s["for"] != "top-a")
        .unwrap_or_else(|| panic!("no worker with a result: {timeline:#}"));
    let step = steps
        .iter()
        .find(|s| s["kind"] == "step" && s["agent"] == worker["agent"])
        .unwrap_or_else(|| panic!("no step of {}: {timeline:#}", worker["agent"]));
    assert_eq!((&step["for"], &step["success"]), (&worker["for"], &true.into()), "{step:#}");
    assert!(lines(step).iter().any(|l| l.contains(" tool ")), "{step:#}");
    // Its lead's work lists the spawn.
    let lead = spawned.iter().find(|s| s["agent"] == worker["for"]).unwrap();
    let spawn = worker["agent"].as_str().unwrap();
    assert!(lines(lead).iter().any(|l| l.contains(spawn)), "{lead:#}");
    g.strata(&["inspect", "t", "timeline", "--data", "data"]).code(0).stdout_has(&[
        "spawned ",
        " for ",
        "  input: ",
        "  output: ",
    ]);
}
