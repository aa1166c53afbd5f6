//! The usage ledger: totals and costs, prices, budget limits (tokens, cost, calls, wall time),
//! failed calls and rate-limit waits, and a stored ledger continuing after a restart.

use std::sync::Arc;
use std::time::Duration;

use agent_core::{ReasonError, Reasoner};
use agent_llm::{
    Budget, BudgetExceeded, BudgetLimit, CallSite, ConversationLimits, Conversations, LlmReasoner,
    LlmSettings, LlmStore, OnExceed, Price, PriceError, PriceTable, ProviderErrorKind,
    SledLlmStore, Tally, Usage, UsageLedger,
};
use agent_state::{AgentId, AgentLayer, Timestamp};
use run_store::{Durability, RunStore};
use serde_json::json;

use crate::mock::{MockProvider, failure, rate_limited, shared, text};
use crate::reasoner::{Agent, conflict, plan_decision, rig, rig_full, rig_with};

fn site(agent: &str, layer: AgentLayer, provider: &str, model: &str) -> CallSite {
    CallSite { agent: AgentId::new(agent), layer, provider: provider.into(), model: model.into() }
}

fn usage(input: u64, output: u64) -> Usage {
    Usage { input_tokens: input, output_tokens: output }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

fn prices() -> PriceTable {
    let mut prices = PriceTable::new();
    prices.set("gpt-a", Price { input_per_mtok: 2.0, output_per_mtok: 10.0 }).unwrap();
    prices
}

fn budget(f: impl FnOnce(&mut Budget)) -> Budget {
    let mut b = Budget::default();
    f(&mut b);
    b
}

/// A vote answer counting `input` tokens in and none out.
fn vote_answer(input: u64) -> crate::mock::Answer {
    text(json!({"choice": "a", "reason": "ok"}).to_string(), input, 0)
}

fn ballot() -> agent_core::Conflict {
    conflict(&["a", "b"])
}

#[tokio::test]
async fn totals_are_kept_per_agent_layer_and_model_with_costs_from_the_price_table() {
    let ledger = UsageLedger::new(prices(), Budget::default());
    let top = site("top-a", AgentLayer::Top, "openai", "gpt-a");
    let exec_priced = site("exec-1", AgentLayer::Bottom, "openai", "gpt-a");
    let exec_local = site("exec-1", AgentLayer::Bottom, "local", "tiny");
    let exec_failing = site("exec-2", AgentLayer::Bottom, "local", "tiny");

    let r = ledger.reserve(1_200, 0.004, false).await.unwrap();
    ledger.settle(r, &top, usage(1_000, 200));
    ledger.rate_limited(&top, 2);
    let r = ledger.reserve(3_100, 0.007, false).await.unwrap();
    ledger.settle(r, &exec_priced, usage(3_000, 100));
    let r = ledger.reserve(550, 0.0, false).await.unwrap();
    ledger.settle(r, &exec_local, usage(500, 50));
    let r = ledger.reserve(550, 0.0, false).await.unwrap();
    ledger.fail(r, &exec_failing);

    let report = ledger.report();
    let t = report.total;
    assert_eq!(
        (t.calls, t.failed_calls, t.input_tokens, t.output_tokens, t.rate_limit_waits),
        (3, 1, 4_500, 350, 2)
    );
    assert_eq!(t.tokens(), 4_850);
    // 1 000 × 2 + 200 × 10 + 3 000 × 2 + 100 × 10 = 11 000 dollars per million tokens.
    assert!(close(t.cost_usd, 0.011), "{}", t.cost_usd);

    let top_a = report.by_agent["top-a"];
    assert_eq!((top_a.calls, top_a.input_tokens, top_a.output_tokens), (1, 1_000, 200));
    assert_eq!(top_a.rate_limit_waits, 2);
    assert!(close(top_a.cost_usd, 0.004));
    let exec_1 = report.by_agent["exec-1"];
    assert_eq!((exec_1.calls, exec_1.input_tokens, exec_1.output_tokens), (2, 3_500, 150));
    assert!(close(exec_1.cost_usd, 0.007));
    assert_eq!(report.by_agent["exec-2"], Tally { failed_calls: 1, ..Tally::default() });

    assert_eq!(report.by_layer.keys().collect::<Vec<_>>(), ["bottom", "top"]);
    assert_eq!(report.by_layer["bottom"].calls, 2);
    assert_eq!(report.by_layer["bottom"].failed_calls, 1);
    assert_eq!(report.by_layer["top"].calls, 1);

    assert_eq!(report.by_model.keys().collect::<Vec<_>>(), ["local/tiny", "openai/gpt-a"]);
    let gpt = report.by_model["openai/gpt-a"];
    assert_eq!((gpt.calls, gpt.input_tokens, gpt.output_tokens), (2, 4_000, 300));
    assert!(close(gpt.cost_usd, 0.011));
    let tiny = report.by_model["local/tiny"];
    assert_eq!((tiny.calls, tiny.failed_calls, tiny.cost_usd), (1, 1, 0.0));
    assert_eq!(report.unpriced_models, ["local/tiny"]);
}

#[tokio::test(start_paused = true)]
async fn a_reasoners_calls_are_booked_under_its_agent_layer_and_model() {
    let (_, dynamic) = shared(
        MockProvider::queue([vote_answer(1_000), vote_answer(2_000)]).named("openai", "gpt-a"),
    );
    let ledger = Arc::new(UsageLedger::new(prices(), Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let reasoner = LlmReasoner::new(dynamic, ledger.clone(), conversations);
    let top = Agent::new("top-a", AgentLayer::Top);
    let mid = Agent::new("mid-docs", AgentLayer::Mid);
    reasoner.vote(top.persona(), &ballot()).await.unwrap();
    reasoner.vote(mid.persona(), &ballot()).await.unwrap();
    let report = ledger.report();
    assert_eq!(report.by_agent["top-a"].input_tokens, 1_000);
    assert_eq!(report.by_agent["mid-docs"].input_tokens, 2_000);
    assert_eq!(report.by_layer["mid"].calls, 1);
    assert_eq!(report.by_model["openai/gpt-a"].calls, 2);
    assert!(close(report.total.cost_usd, 0.006));
    assert!(report.unpriced_models.is_empty());
}

#[test]
fn a_price_table_refuses_negative_and_non_finite_prices_naming_the_model_and_field() {
    let mut prices = PriceTable::new();
    prices.set("gpt-x", Price { input_per_mtok: 1.5, output_per_mtok: 6.0 }).unwrap();
    let err =
        prices.set("gpt-x", Price { input_per_mtok: -0.5, output_per_mtok: 6.0 }).unwrap_err();
    assert_eq!(err, PriceError { model: "gpt-x".into(), field: "input_per_mtok", value: -0.5 });
    let message = err.to_string();
    assert!(message.contains("`gpt-x`") && message.contains("input_per_mtok"), "{message}");
    assert_eq!(
        prices.get("gpt-x"),
        Some(Price { input_per_mtok: 1.5, output_per_mtok: 6.0 }),
        "a refused price changes nothing"
    );

    let err = prices
        .set("claude-y", Price { input_per_mtok: 3.0, output_per_mtok: f64::NAN })
        .unwrap_err();
    assert_eq!((err.model.as_str(), err.field), ("claude-y", "output_per_mtok"));
    assert!(err.to_string().contains("claude-y") && err.to_string().contains("output_per_mtok"));
    let err = prices
        .set("inf", Price { input_per_mtok: f64::INFINITY, output_per_mtok: 0.0 })
        .unwrap_err();
    assert_eq!(err.field, "input_per_mtok");
    assert_eq!(prices.get("claude-y"), None);
    assert_eq!(prices.get("inf"), None);

    // A free model is fine, and an unpriced one costs nothing.
    prices.set("free", Price::default()).unwrap();
    assert_eq!(prices.cost("free", usage(1_000_000, 1_000_000)), 0.0);
    assert_eq!(prices.cost("unknown", usage(1_000_000, 1_000_000)), 0.0);
    assert!(close(prices.cost("gpt-x", usage(2_000_000, 500_000)), 6.0));
}

/// The budget error of a refused call, from the reasoner's error.
fn budget_message(err: &ReasonError) -> &str {
    match err {
        ReasonError::Backend { message, .. } => message,
        other => panic!("expected a backend error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_call_past_the_token_budget_is_refused_before_the_provider_is_asked() {
    let ledger = UsageLedger::new(PriceTable::new(), budget(|b| b.max_tokens = Some(10_100)));
    let rig = rig_with(MockProvider::queue([vote_answer(10_000), vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    assert_eq!(rig.ledger.stopped(), None);

    let err = rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert_eq!(rig.provider.calls(), 1, "the second call never reached the provider");
    let stop = rig.ledger.stopped().expect("the run stopped");
    assert_eq!((stop.limit, stop.used, stop.cap), (BudgetLimit::Tokens, 10_000.0, 10_100.0));
    assert!(stop.requested > 100.0, "the estimate includes the answer's token limit");
    assert_eq!((stop.on_exceed, stop.refused.clone()), (OnExceed::Stop, None));
    let message = budget_message(&err);
    assert!(message.contains(&stop.to_string()), "{message}");
    assert!(stop.to_string().contains("raise `max_tokens`"), "{stop}");
    assert!(stop.to_string().contains("on_exceed = \"ask\""), "{stop}");

    // The run is stopped: every later call is refused at once.
    let other = Agent::new("top-b", AgentLayer::Top);
    rig.reasoner.review_decision(other.persona(), &plan_decision(1)).await.unwrap_err();
    assert_eq!(rig.provider.calls(), 1);
    assert_eq!(rig.ledger.report().stopped, Some(stop));
}

#[tokio::test(start_paused = true)]
async fn a_call_past_the_cost_budget_is_refused_before_the_provider_is_asked() {
    let mut prices = PriceTable::new();
    // A dollar per thousand tokens, in and out.
    prices.set("mock-model", Price { input_per_mtok: 1_000.0, output_per_mtok: 1_000.0 }).unwrap();
    let ledger = UsageLedger::new(prices, budget(|b| b.max_cost_usd = Some(1.0)));
    let rig = rig_with(MockProvider::queue([vote_answer(900), vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    assert!(close(rig.ledger.report().total.cost_usd, 0.9));

    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert_eq!(rig.provider.calls(), 1);
    let stop = rig.ledger.stopped().expect("stopped");
    assert_eq!(stop.limit, BudgetLimit::Cost);
    assert!(close(stop.used, 0.9) && close(stop.cap, 1.0), "{stop:?}");
    // At least the answer's 200 tokens at a dollar per thousand.
    assert!(stop.requested >= 0.2, "{stop:?}");
    assert!(stop.to_string().contains("raise `max_cost_usd`"), "{stop}");
}

#[tokio::test(start_paused = true)]
async fn a_call_past_the_call_budget_is_refused_before_the_provider_is_asked() {
    let ledger = UsageLedger::new(PriceTable::new(), budget(|b| b.max_calls = Some(2)));
    let rig =
        rig_with(MockProvider::queue([vote_answer(1), vote_answer(1), vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    let err = rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert_eq!(rig.provider.calls(), 2);
    let stop = rig.ledger.stopped().expect("stopped");
    assert_eq!(
        (stop.limit, stop.used, stop.requested, stop.cap),
        (BudgetLimit::Calls, 2.0, 1.0, 2.0)
    );
    assert!(budget_message(&err).contains("raise `max_calls`"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_repair_attempt_counts_as_a_call_and_can_hit_the_budget() {
    let ledger = UsageLedger::new(PriceTable::new(), budget(|b| b.max_calls = Some(1)));
    let rig = rig_with(MockProvider::queue([text("not json", 1, 1), vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    let err = rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert!(budget_message(&err).contains("max_calls"), "{err}");
    assert_eq!(rig.provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn the_wall_time_limit_stops_the_run_once_passed() {
    let ledger =
        UsageLedger::new(PriceTable::new(), budget(|b| b.max_wall = Some(Duration::from_secs(60))));
    let rig = rig_with(MockProvider::queue([vote_answer(1), vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    assert_eq!(rig.ledger.check_wall(), None);
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(rig.ledger.check_wall(), None);
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();

    tokio::time::advance(Duration::from_secs(2)).await;
    let stop = rig.ledger.check_wall().expect("61 s of a 60 s budget");
    assert_eq!(stop.limit, BudgetLimit::WallTime);
    assert_eq!(stop.cap, 60.0);
    assert!(stop.used >= 61.0, "{stop:?}");
    assert!(stop.to_string().contains("raise `max_wall`"), "{stop}");
    assert_eq!(rig.ledger.stopped(), Some(stop.clone()));
    assert_eq!(rig.ledger.check_wall(), Some(stop), "stays stopped");

    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert_eq!(rig.provider.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_after_the_wall_time_is_refused_even_without_check_wall() {
    let ledger =
        UsageLedger::new(PriceTable::new(), budget(|b| b.max_wall = Some(Duration::from_secs(60))));
    let rig = rig_with(MockProvider::queue([vote_answer(1)]), ledger);
    let agent = Agent::new("top-a", AgentLayer::Top);
    tokio::time::advance(Duration::from_secs(60)).await;
    let err = rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    assert!(budget_message(&err).contains("wall time"), "{err}");
    assert_eq!(rig.provider.calls(), 0);
    assert_eq!(rig.ledger.stopped().map(|s| s.limit), Some(BudgetLimit::WallTime));
}

#[tokio::test(start_paused = true)]
async fn failed_provider_calls_are_counted_as_failed_calls() {
    let rig = rig(MockProvider::queue([
        failure(ProviderErrorKind::Unauthorized, "401"),
        failure(ProviderErrorKind::Server, "502"),
        vote_answer(7),
        failure(ProviderErrorKind::Timeout, "slow"),
        failure(ProviderErrorKind::Timeout, "slow"),
        failure(ProviderErrorKind::Timeout, "slow"),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top); // two retries
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    let t = rig.ledger.report().total;
    assert_eq!((t.calls, t.failed_calls), (0, 1), "a permanent failure: one failed call");

    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    let t = rig.ledger.report().total;
    assert_eq!((t.calls, t.failed_calls, t.input_tokens), (1, 2, 7), "the failed attempt counts");

    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    let t = rig.ledger.report().total;
    assert_eq!((t.calls, t.failed_calls), (1, 5), "each of three failed attempts counts");
    assert_eq!(rig.ledger.report().by_agent["top-a"].failed_calls, 5);
    assert_eq!(rig.provider.calls(), 6);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_are_recorded_and_are_not_failures() {
    let rig = rig(MockProvider::queue([
        rate_limited(Duration::from_secs(7)),
        rate_limited(Duration::from_secs(3)),
        vote_answer(5),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    let start = tokio::time::Instant::now();
    assert_eq!(rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap(), "a");
    assert_eq!(start.elapsed(), Duration::from_secs(10), "the server's Retry-After, twice");
    let report = rig.ledger.report();
    assert_eq!(
        (report.total.calls, report.total.failed_calls, report.total.rate_limit_waits),
        (1, 0, 2)
    );
    assert_eq!(report.by_agent["top-a"].rate_limit_waits, 2);
    assert_eq!(rig.provider.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_of_a_call_that_fails_in_the_end_are_recorded_too() {
    let rig = rig(MockProvider::queue([
        rate_limited(Duration::from_secs(1)),
        failure(ProviderErrorKind::BadRequest, "400 context too long"),
    ]));
    let agent = Agent::new("top-a", AgentLayer::Top);
    rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap_err();
    let t = rig.ledger.report().total;
    assert_eq!((t.calls, t.failed_calls, t.rate_limit_waits), (0, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_frees_its_reservation_and_counts_as_failed() {
    // Each call reserves about 5 000 tokens (its answer's limit); 7 000 fit one, not two.
    let (provider, dynamic) = shared(
        MockProvider::queue([vote_answer(0), vote_answer(0)]).with_delay(Duration::from_secs(10)),
    );
    let ledger =
        Arc::new(UsageLedger::new(PriceTable::new(), budget(|b| b.max_tokens = Some(7_000))));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let reasoner = LlmReasoner::new(dynamic, ledger.clone(), conversations)
        .with_settings(LlmSettings { max_tokens: 5_000, ..LlmSettings::default() });
    let agent = Agent::new("top-a", AgentLayer::Top);

    // The agent's task timeout cancels the call while the provider works on it.
    let cancelled =
        tokio::time::timeout(Duration::from_secs(1), reasoner.vote(agent.persona(), &ballot()))
            .await;
    assert!(cancelled.is_err(), "the call was cancelled");
    assert_eq!(provider.calls(), 1);
    assert_eq!(ledger.report().total.failed_calls, 1, "it reached the provider");

    // Its estimate no longer holds the budget.
    reasoner.vote(agent.persona(), &ballot()).await.unwrap();
    assert_eq!(ledger.stopped(), None);
    assert_eq!(ledger.report().total.calls, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stored_ledger_continues_its_totals_extensions_and_wall_time_after_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let limits = budget(|b| {
        b.max_calls = Some(2);
        b.on_exceed = OnExceed::AskTop;
    });
    {
        let store = RunStore::create(&dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
        let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
        let ledger = Arc::new(UsageLedger::stored(prices(), limits.clone(), llm.clone()).unwrap());
        let conversations = Arc::new(Conversations::stored(ConversationLimits::default(), llm));
        let rig = rig_full(
            MockProvider::queue([vote_answer(100), vote_answer(200), vote_answer(300)])
                .named("openai", "gpt-a"),
            ledger,
            conversations,
        );
        let agent = Agent::new("top-a", AgentLayer::Top);
        rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
        rig.reasoner.vote(agent.persona(), &ballot()).await.unwrap();
        let reasoner = rig.reasoner.clone();
        let third = tokio::spawn(async move {
            let agent = Agent::new("top-a", AgentLayer::Top);
            reasoner.vote(agent.persona(), &ballot()).await
        });
        let request = rig.ledger.next_approval().await;
        assert!(rig.ledger.approve(request.id));
        third.await.unwrap().unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        rig.ledger.flush().unwrap();
        store.commit().await.unwrap();
    }

    let store = RunStore::open(&dir, Durability::Synced).unwrap();
    let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
    let stored = llm.load_usage().unwrap().expect("a stored report");
    assert_eq!(stored.total.calls, 3);
    assert_eq!(stored.wall_ms, 10_000);
    let ledger = UsageLedger::stored(prices(), limits, llm).unwrap();
    let report = ledger.report();
    assert_eq!((report.total.calls, report.total.input_tokens), (3, 600));
    assert!(close(report.total.cost_usd, 0.0012));
    assert_eq!(report.by_model["openai/gpt-a"].calls, 3);
    assert_eq!(report.extensions.iter().map(|e| e.limit).collect::<Vec<_>>(), [BudgetLimit::Calls]);
    // The power's third call went on while the extension was pending, so 3 were used at the
    // approval: the limit became 3 plus the original 2.
    assert_eq!(report.budget.max_calls, Some(5), "the approved extension is applied again");
    assert_eq!(report.wall_ms, 10_000, "the wall time of the first session counts");

    // Two calls fit the extended budget; the next asks again.
    for _ in 0..2 {
        let r = ledger.reserve(10, 0.0, false).await.unwrap();
        ledger.settle(r, &site("top-a", AgentLayer::Top, "openai", "gpt-a"), usage(10, 0));
    }
    let waiting = ledger.reserve(10, 0.0, false);
    tokio::pin!(waiting);
    tokio::select! {
        _ = &mut waiting => panic!("a sixth call passed a budget of five"),
        request = ledger.next_approval() => {
            assert_eq!((request.limit, request.cap, request.proposed_cap), (BudgetLimit::Calls, 5.0, 7.0));
        }
    }
}

/// A run stopped on its token budget, stored in `dir`.
async fn stopped_run(dir: &std::path::Path) {
    let store = RunStore::create(dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
    let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
    let ledger =
        UsageLedger::stored(PriceTable::new(), budget(|b| b.max_tokens = Some(1_000)), llm)
            .unwrap();
    let s = site("top-a", AgentLayer::Top, "mock", "mock-model");
    let r = ledger.reserve(900, 0.0, false).await.unwrap();
    ledger.settle(r, &s, usage(900, 0));
    let err = ledger.reserve(200, 0.0, false).await.unwrap_err();
    assert_eq!(err.limit, BudgetLimit::Tokens);
    ledger.flush().unwrap();
    drop(ledger);
    store.commit().await.unwrap();
}

fn reopen(dir: &std::path::Path, max_tokens: u64) -> (RunStore, UsageLedger) {
    let store = RunStore::open(dir, Durability::Synced).unwrap();
    let llm: Arc<dyn LlmStore> = Arc::new(SledLlmStore::open(&store).unwrap());
    let ledger =
        UsageLedger::stored(PriceTable::new(), budget(|b| b.max_tokens = Some(max_tokens)), llm)
            .unwrap();
    (store, ledger)
}

#[tokio::test(start_paused = true)]
async fn a_stopped_run_resumed_with_the_same_budget_stays_stopped() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    stopped_run(&dir).await;
    let (_store, ledger) = reopen(&dir, 1_000);
    let stop: BudgetExceeded = ledger.stopped().expect("still stopped");
    assert_eq!((stop.limit, stop.cap), (BudgetLimit::Tokens, 1_000.0));
    assert_eq!(ledger.reserve(1, 0.0, false).await.unwrap_err(), stop);
}

#[tokio::test(start_paused = true)]
async fn a_stopped_run_resumed_with_the_raised_limit_runs_again() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    stopped_run(&dir).await;
    // The message said: raise `max_tokens`. The user did.
    let (_store, ledger) = reopen(&dir, 2_000);
    assert_eq!(ledger.stopped(), None);
    assert_eq!(ledger.report().total.input_tokens, 900, "the totals are kept");
    let r = ledger.reserve(200, 0.0, false).await.unwrap();
    ledger.release(r);
    let err = ledger.reserve(1_200, 0.0, false).await.unwrap_err();
    assert_eq!((err.used, err.cap), (900.0, 2_000.0), "the raised limit is enforced");
}

#[tokio::test(start_paused = true)]
async fn a_released_reservation_is_not_counted() {
    let ledger = UsageLedger::new(
        PriceTable::new(),
        budget(|b| {
            b.max_tokens = Some(100);
            b.max_calls = Some(1);
        }),
    );
    for _ in 0..3 {
        let r = ledger.reserve(100, 0.0, false).await.unwrap();
        ledger.release(r);
    }
    let report = ledger.report();
    assert_eq!((report.total.calls, report.total.failed_calls, report.total.tokens()), (0, 0, 0));
    let held = ledger.reserve(60, 0.0, false).await.unwrap();
    let err = ledger.reserve(60, 0.0, false).await.unwrap_err();
    assert_eq!(err.limit, BudgetLimit::Calls, "a held reservation counts as a call in flight");
    ledger.release(held);
}
