//! OpenTelemetry end to end: `strata run --otlp URL` (and `OTEL_EXPORTER_OTLP_ENDPOINT`)
//! against a real OTLP/HTTP receiver on loopback (`agent_telemetry::testing::Receiver`, which
//! decodes the protobuf bodies with the protocol's own types). The hello plan runs with an
//! OpenAI-compatible reasoner (the fake LLM server), so the trace holds reasoning calls with
//! their tokens and cost. Bad input: a collector that is down (the run goes on, one warning),
//! an endpoint that is not a URL (exit 2, nothing written).

use std::collections::{BTreeMap, BTreeSet};

use agent_telemetry::testing::{ReceivedSpan, Receiver};

use crate::fake_llm::{FakeLlm, Mode};
use crate::llm::{KEY, KEY_VAR, RUN, openai, scratch, team};
use crate::support::{Out, Scratch};

/// The hello run with the fake model (priced), quiet and fast, as run `r1`, with `more`.
fn run(s: &Scratch, more: &[&str], env: &[(&str, &str)]) -> Out {
    let mut args = RUN.to_vec();
    args.extend_from_slice(more);
    let mut command = s.command(&args);
    command
        .env(KEY_VAR, KEY)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES");
    for (k, v) in env {
        command.env(k, v);
    }
    Out::of(&args, &mut command)
}

fn priced_scratch(server: &FakeLlm) -> Scratch {
    scratch(&team(
        &openai(server),
        "[prices]\n\"fake-model\" = { input_per_mtok = 1.0, output_per_mtok = 2.0 }\n",
    ))
}

/// The spans by id.
fn by_id(spans: &[ReceivedSpan]) -> BTreeMap<&str, &ReceivedSpan> {
    spans.iter().map(|s| (s.span_id.as_str(), s)).collect()
}

/// The chain of parents from `span` up to its trace's root (or the first missing parent).
fn chain<'a>(
    span: &'a ReceivedSpan,
    ids: &BTreeMap<&str, &'a ReceivedSpan>,
) -> Vec<&'a ReceivedSpan> {
    let mut out = vec![span];
    let mut at = span;
    while !at.parent_span_id.is_empty() {
        match ids.get(at.parent_span_id.as_str()) {
            Some(parent) if out.len() < 200 => {
                out.push(parent);
                at = parent;
            }
            _ => break,
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_exports_one_trace_per_task_with_its_whole_delegation_chain_and_metrics() {
    let receiver = Receiver::start().await.unwrap();
    let server = FakeLlm::start(Mode::Sensible);
    let s = priced_scratch(&server);
    let endpoint = receiver.endpoint();
    let out = tokio::task::spawn_blocking(move || {
        let out = run(&s, &["--otlp", &endpoint], &[]);
        (out, s)
    })
    .await
    .unwrap();
    let (out, _s) = out;
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    assert!(!out.stderr.contains("cannot send"), "{}", out.stderr);

    let spans = receiver.spans();
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for name in [
        "strata.run",
        "strata.task",
        "strata.heartbeat",
        "strata.delegation",
        "strata.message",
        "strata.decision",
        "chat fake-model",
        "execute_tool write_file",
        "execute_tool shell",
    ] {
        assert!(names.contains(name), "no `{name}` span in {names:?}");
    }
    assert!(spans.iter().all(|s| s.service == "strata" && s.scope == "strata"));
    let ids = by_id(&spans);

    // The run's span is a root and names the run.
    let run = spans.iter().find(|s| s.name == "strata.run").unwrap();
    assert_eq!(run.attr("run.id"), Some("r1"));
    assert!(run.parent_span_id.is_empty());

    // The task's span is the root of its own trace, linked to the run's span.
    let tasks: Vec<&ReceivedSpan> = spans.iter().filter(|s| s.name == "strata.task").collect();
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    let task = tasks[0];
    assert_eq!(task.attr("strata.task.id"), Some("hello"));
    assert_eq!(task.attr("task.outcome"), Some("succeeded"));
    assert!(task.parent_span_id.is_empty(), "{task:?}");
    assert_eq!(task.links, vec![(run.trace_id.clone(), run.span_id.clone())]);

    // Every tool call of the task is in the task's trace, and its chain of parents goes from
    // the executor that ran it, through the lead that delegated it, up to the task: one trace
    // shows the whole delegation chain.
    let tools: Vec<&ReceivedSpan> =
        spans.iter().filter(|s| s.attr("gen_ai.operation.name") == Some("execute_tool")).collect();
    assert!(tools.len() >= 4, "{tools:?}");
    for tool in &tools {
        assert_eq!(tool.trace_id, task.trace_id, "{tool:?}");
        assert_eq!(tool.attr("tool.outcome"), Some("ok"), "{tool:?}");
        let up = chain(tool, &ids);
        let root = up.last().unwrap();
        assert_eq!(root.span_id, task.span_id, "the chain of {} stops at {root:?}", tool.name);
        let layers: BTreeSet<&str> = up.iter().filter_map(|s| s.attr("agent.layer")).collect();
        for layer in ["bottom", "mid", "top"] {
            assert!(
                layers.contains(layer),
                "no {layer} agent between {} and the task: {up:?}",
                tool.name
            );
        }
        let delegations = up.iter().filter(|s| s.name == "strata.delegation").count();
        assert!(delegations >= 2, "top→mid and mid→bottom delegations expected: {up:?}");
    }

    // Reasoning calls carry the GenAI conventions: provider, model, tokens in and out, cost.
    let chats: Vec<&ReceivedSpan> =
        spans.iter().filter(|s| s.attr("gen_ai.operation.name") == Some("chat")).collect();
    assert!(!chats.is_empty());
    for chat in &chats {
        assert_eq!(chat.attr("gen_ai.provider.name"), Some("openai"), "{chat:?}");
        assert_eq!(chat.attr("gen_ai.request.model"), Some("fake-model"));
        let input: u64 = chat.attr("gen_ai.usage.input_tokens").unwrap().parse().unwrap();
        assert!(input > 0);
        assert_eq!(chat.attr("gen_ai.usage.output_tokens"), Some("20"));
        let cost: f64 = chat.attr("strata.cost_usd").unwrap().parse().unwrap();
        let expected = (input as f64 * 1.0 + 20.0 * 2.0) / 1_000_000.0;
        assert!((cost - expected).abs() < 1e-12, "{cost} != {expected}");
        assert!(chat.attr("agent.id").is_some());
    }
    assert!(chats.iter().any(|c| c.trace_id == task.trace_id));

    // The plan's decision: proposed by top-a, then signed by the two other powers.
    let decisions: Vec<&ReceivedSpan> =
        spans.iter().filter(|s| s.name == "strata.decision").collect();
    assert!(decisions.iter().any(|d| d.attr("decision.action") == Some("propose")
        && d.attr("decision.signer") == Some("top-a")));
    let approved = decisions
        .iter()
        .filter(|d| d.attr("decision.action") == Some("sign"))
        .filter_map(|d| d.attr("decision.signatures"))
        .max_by_key(|s| s.split(',').count())
        .unwrap();
    for top in ["top-b", "top-c"] {
        assert!(approved.contains(top), "{top} did not sign: {approved}");
    }

    // Metrics: messages, transitions, tokens and cost, per agent and layer.
    let points = receiver.points();
    let metric = |name: &str| points.iter().filter(|p| p.metric == name).collect::<Vec<_>>();
    for name in
        ["strata.messages", "strata.transitions", "gen_ai.client.token.usage", "strata.cost"]
    {
        let found = metric(name);
        assert!(!found.is_empty(), "no `{name}` metric");
        assert!(found.iter().all(|p| p.attributes.contains_key("agent.layer")), "{found:?}");
    }
    let mid_messages: f64 = metric("strata.messages")
        .iter()
        .filter(|p| p.attributes.get("agent.layer").map(String::as_str) == Some("mid"))
        .map(|p| p.value)
        .sum();
    assert!(mid_messages > 0.0);
}

/// The service's name and resource as the OpenTelemetry specification has them:
/// `OTEL_SERVICE_NAME` first, then `service.name` in `OTEL_RESOURCE_ATTRIBUTES`, whose other
/// attributes (percent-encoded) the resource carries; else `strata`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_service_name_and_resource_attributes_are_honoured() {
    let attributes = "deployment.environment=staging,service.name=from-attributes,team=a%20b";
    let cases: [(&[(&str, &str)], &str); 2] = [
        (
            &[("OTEL_SERVICE_NAME", "checkout"), ("OTEL_RESOURCE_ATTRIBUTES", attributes)],
            "checkout",
        ),
        (&[("OTEL_RESOURCE_ATTRIBUTES", attributes)], "from-attributes"),
    ];
    for (env, service) in cases {
        let receiver = Receiver::start().await.unwrap();
        let server = FakeLlm::start(Mode::Sensible);
        let s = priced_scratch(&server);
        let endpoint = receiver.endpoint();
        let env: Vec<(String, String)> =
            env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let out = tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            run(&s, &["--otlp", &endpoint], &env)
        })
        .await
        .unwrap();
        out.code(0).stdout_has(&["task `hello` succeeded"]);
        let spans = receiver.spans();
        assert!(!spans.is_empty());
        for span in &spans {
            assert_eq!(span.service, service, "{span:?}");
            assert_eq!(
                span.resource.get("deployment.environment").map(String::as_str),
                Some("staging")
            );
            assert_eq!(span.resource.get("team").map(String::as_str), Some("a b"));
            assert!(span.resource.contains_key("service.version"), "{:?}", span.resource);
        }
    }
}

#[test]
fn a_collector_that_is_down_warns_once_and_the_run_goes_on() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = FakeLlm::start(Mode::Sensible);
    let s = priced_scratch(&server);
    let url = format!("http://127.0.0.1:{port}");
    // Through the standard variable this time.
    let out = run(&s, &[], &[("OTEL_EXPORTER_OTLP_ENDPOINT", &url)]);
    out.code(0).stdout_has(&["task `hello` succeeded"]);
    let warnings = out.stderr.matches("cannot send").count();
    assert_eq!(warnings, 1, "{}", out.stderr);
    assert!(out.stderr.contains(&url), "{}", out.stderr);
    assert!(out.stderr.contains("the run goes on"), "{}", out.stderr);
}

#[test]
fn an_endpoint_that_is_not_an_http_url_is_bad_input_and_nothing_is_written() {
    let server = FakeLlm::start(Mode::Sensible);
    let s = priced_scratch(&server);
    for (bad, says) in [
        ("ftp://127.0.0.1:4318", "must start with http://"),
        ("http://", "names no host"),
        ("http://127.0.0.1:99999", "port"),
        ("https://collector.example:4318", "https is not supported"),
    ] {
        let out = run(&s, &["--otlp", bad], &[]);
        out.bad_input(&["bad OTLP endpoint", says]);
        assert!(!s.path("D").exists(), "{bad}: the data directory was created");
    }
}
