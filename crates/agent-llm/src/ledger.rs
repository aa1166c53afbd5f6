//! The usage ledger and run budgets, shared by every reasoner of a team.
//!
//! Every model call goes through the ledger twice: [`UsageLedger::reserve`] before it is made,
//! with an estimate (prompt characters / 4 plus the most tokens it may generate, priced with
//! the model's price), and [`UsageLedger::settle`] after, with the tokens the provider counted.
//! A reservation that would take the run past a [`Budget`] limit is refused: with
//! [`OnExceed::Stop`] the run stops with [`BudgetExceeded`] as its reason; with
//! [`OnExceed::AskTop`] the ledger opens an [`ApprovalRequest`], every reservation waits (but
//! the top powers' own, who decide it), and whoever answers it (the team runner puts it to the
//! top layer as a governance decision) calls [`UsageLedger::approve`]; with
//! [`OnExceed::AskHuman`] the same, but the team's humans decide it and every reservation
//! waits, the top powers' too. A reservation's wait is [`agent_core::untimed`]: it does not
//! count against the reasoning call's time limit nor its turn's. On approval the exceeded limit
//! grows to the larger of itself plus its original size and what is used by then (the powers'
//! reviews of the extension included) plus its original size, so every extension leaves a whole
//! original budget's worth of room. A refused extension ([`UsageLedger::refuse`]) stops the run.
//!
//! Totals are kept per agent, per layer and per model, with the cost from a [`PriceTable`]
//! (US dollars per million tokens; a model without a price costs 0 and is reported as unpriced).
//! As an [`agent_core::CostMeter`] the ledger tells what one agent's own calls cost
//! ([`UsageReport::agent_cost_usd`]): nothing when the cost is not known.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_state::{AgentId, AgentLayer, BackendError, Versioned};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use crate::calls::CallRecord;
use crate::provider::Usage;
use crate::store::LlmStore;

/// The price of a model, in US dollars per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Per million prompt tokens.
    pub input_per_mtok: f64,
    /// Per million generated tokens.
    pub output_per_mtok: f64,
}

/// A price that cannot be used.
#[derive(Clone, Debug, PartialEq, Error)]
#[error(
    "price of model `{model}`: {field} is {value}; prices are US dollars per million tokens and must be finite numbers of 0 or more"
)]
pub struct PriceError {
    /// The model.
    pub model: String,
    /// `input_per_mtok` or `output_per_mtok`.
    pub field: &'static str,
    /// The value given.
    pub value: f64,
}

/// Prices per model.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PriceTable {
    prices: BTreeMap<String, Price>,
}

impl PriceTable {
    /// No prices: every call costs 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the price of `model`; a negative or non-finite price is refused.
    pub fn set(&mut self, model: impl Into<String>, price: Price) -> Result<(), PriceError> {
        let model = model.into();
        for (field, value) in
            [("input_per_mtok", price.input_per_mtok), ("output_per_mtok", price.output_per_mtok)]
        {
            if !value.is_finite() || value < 0.0 {
                return Err(PriceError { model, field, value });
            }
        }
        self.prices.insert(model, price);
        Ok(())
    }

    /// The price of `model`, if set.
    pub fn get(&self, model: &str) -> Option<Price> {
        self.prices.get(model).copied()
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The cost of `usage` on `model` (0 for a model without a price).
    pub fn cost(&self, model: &str, usage: Usage) -> f64 {
        self.get(model).map_or(0.0, |p| {
            (usage.input_tokens as f64 * p.input_per_mtok
                + usage.output_tokens as f64 * p.output_per_mtok)
                / 1_000_000.0
        })
    }
}

/// What a run may spend on reasoning. `None` is no limit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// Tokens in and out, all calls together.
    pub max_tokens: Option<u64>,
    /// Cost in US dollars.
    pub max_cost_usd: Option<f64>,
    /// Wall time since the run started, counting every session of it.
    pub max_wall: Option<Duration>,
    /// Reasoning calls (each attempt of a model call counts).
    pub max_calls: Option<u64>,
    /// What happens when a limit would be passed.
    pub on_exceed: OnExceed,
}

/// What happens when a call would take the run past its budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExceed {
    /// The run stops with [`BudgetExceeded`] as its reason.
    #[default]
    Stop,
    /// The run pauses and asks the top layer to approve an extension as a governance decision.
    AskTop,
    /// The run pauses and asks one of the team's humans (`[approvals] humans`) to approve an
    /// extension as a governance decision (`strata approve` / `strata veto`).
    AskHuman,
}

impl OnExceed {
    /// Whether a passed limit asks for an extension (rather than stopping the run).
    pub fn asks(self) -> bool {
        matches!(self, Self::AskTop | Self::AskHuman)
    }
}

/// A budget limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetLimit {
    /// `max_tokens`.
    Tokens,
    /// `max_cost_usd`.
    Cost,
    /// `max_wall`.
    WallTime,
    /// `max_calls`.
    Calls,
}

impl BudgetLimit {
    /// The setting's name in a team file's `[budget]` table.
    pub fn setting(self) -> &'static str {
        match self {
            Self::Tokens => "max_tokens",
            Self::Cost => "max_cost_usd",
            Self::WallTime => "max_wall",
            Self::Calls => "max_calls",
        }
    }
}

impl fmt::Display for BudgetLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tokens => "tokens",
            Self::Cost => "cost (USD)",
            Self::WallTime => "wall time (s)",
            Self::Calls => "reasoning calls",
        })
    }
}

/// Why a run stopped on its budget.
#[derive(Clone, Debug, PartialEq, Error, Serialize, Deserialize)]
#[error(
    "run budget exceeded: {limit}: {used} used + {requested} requested would pass the limit of {cap}{}; raise `{}` in the team file's [budget] table{}",
    refused.as_ref().map(|r| format!(" (extension refused: {r})")).unwrap_or_default(),
    limit.setting(),
    if *on_exceed == OnExceed::Stop { " or set on_exceed = \"ask\" (or \"ask_human\") to let the top layer (or a human) approve more" } else { "" }
)]
pub struct BudgetExceeded {
    /// Which limit.
    pub limit: BudgetLimit,
    /// Used so far.
    pub used: f64,
    /// What the refused call would have added (its estimate).
    pub requested: f64,
    /// The limit.
    pub cap: f64,
    /// The policy in force.
    pub on_exceed: OnExceed,
    /// With [`OnExceed::AskTop`] or [`OnExceed::AskHuman`]: why the extension was refused.
    pub refused: Option<String>,
}

/// An extension the ledger waits for (with [`OnExceed::AskTop`] or [`OnExceed::AskHuman`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// Sequence number, unique within a run.
    pub id: u64,
    /// The limit that would be passed.
    pub limit: BudgetLimit,
    /// Used so far.
    pub used: f64,
    /// The estimate of the call that waits.
    pub requested: f64,
    /// The limit now.
    pub cap: f64,
    /// The limit if approved, as proposed: the current one plus the original one. On approval
    /// the limit becomes the larger of this and what is used by then plus the original one.
    pub proposed_cap: f64,
}

/// An approved extension: which limit grew and by how much.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Extension {
    /// The limit.
    pub limit: BudgetLimit,
    /// How much it grew (tokens, dollars, seconds or calls).
    pub raised_by: f64,
}

/// Totals of a group of calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    /// Calls made (attempts that reached the provider and came back with an answer).
    pub calls: u64,
    /// Calls that failed.
    pub failed_calls: u64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Cost in US dollars.
    pub cost_usd: f64,
    /// Waits on a provider's rate limit (not failures).
    pub rate_limit_waits: u64,
    /// Calls (of `calls`) on a model without a price, counted as $0: while there are any,
    /// the cost of these calls is not known (`cost_usd` is only a lower bound).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unpriced_calls: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Tally {
    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    fn add(&mut self, other: &Tally) {
        self.calls += other.calls;
        self.failed_calls += other.failed_calls;
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_usd += other.cost_usd;
        self.rate_limit_waits += other.rate_limit_waits;
        self.unpriced_calls += other.unpriced_calls;
    }
}

/// The ledger's stored state: what `strata inspect usage` shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    /// Every call.
    pub total: Tally,
    /// Per agent id.
    pub by_agent: BTreeMap<String, Tally>,
    /// Per layer (`top`, `mid`, `bottom`).
    pub by_layer: BTreeMap<String, Tally>,
    /// Per `provider/model`.
    pub by_model: BTreeMap<String, Tally>,
    /// Models used that have no price in the price table.
    pub unpriced_models: Vec<String>,
    /// The budget in force (limits raised by approved extensions included).
    pub budget: Budget,
    /// Wall time of the run's earlier sessions and this one, in milliseconds, when last stored.
    pub wall_ms: u64,
    /// Extensions approved so far, one entry per approval, naming the limit it raised.
    pub extensions: Vec<Extension>,
    /// Why the run stopped on its budget, if it did.
    pub stopped: Option<BudgetExceeded>,
    /// Per `provider/model`: the structured output mode in use and the modes the server
    /// refused ([`crate::StructuredOutput`]). Empty for providers with a single way.
    #[serde(default)]
    pub structured_output: BTreeMap<String, crate::ModeChoice>,
}

impl Versioned for UsageReport {
    const KIND: &'static str = "llm_usage";
    const VERSION: u32 = 1;
}

impl UsageReport {
    /// What `agent`'s own calls cost, in US dollars, under the run's `prices`: `None` when the
    /// cost is not known — no model has a price, or one of the agent's calls was on a model
    /// without one (counted as $0, so its total would understate) — and `Some(0.0)` for an
    /// agent that made no call yet while prices are known.
    pub fn agent_cost_usd(&self, agent: &str, prices: &PriceTable) -> Option<f64> {
        if prices.is_empty() {
            return None;
        }
        match self.by_agent.get(agent) {
            Some(t) if t.unpriced_calls > 0 => None,
            Some(t) => Some(t.cost_usd),
            None => Some(0.0),
        }
    }
}

/// Who makes a call: for the per-agent, per-layer and per-model totals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSite {
    /// The agent.
    pub agent: AgentId,
    /// Its layer.
    pub layer: AgentLayer,
    /// The provider's name.
    pub provider: String,
    /// The model.
    pub model: String,
}

impl CallSite {
    fn model_key(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Which budget checks a reservation goes through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// Every check: waits while an extension is pending, refused past a limit or after a stop.
    Checked,
    /// None, even after a stop: the top layer's review of an extension.
    Exempt,
    /// A top power's own calls: they do not wait while an extension is pending, since the power
    /// must stay free to take the signature request that decides it (its messages are handled
    /// one at a time, so a call that waited would keep it from ever signing); otherwise
    /// checked.
    WhilePending,
}

/// A call's estimate, held from [`UsageLedger::reserve`] until [`UsageLedger::settle`] or
/// [`UsageLedger::release`].
#[derive(Debug)]
#[must_use = "a reservation must be settled or released"]
pub struct Reservation {
    tokens: u64,
    cost: f64,
}

/// The ledger: shared by every reasoner of a team (`Arc<UsageLedger>`).
pub struct UsageLedger {
    prices: PriceTable,
    original: Budget,
    state: Mutex<LedgerState>,
    store: Option<Arc<dyn LlmStore>>,
    approval: watch::Sender<Option<ApprovalRequest>>,
    started: tokio::time::Instant,
    /// Without a store: the latest call records ([`crate::calls::MEMORY_CALLS`]) and the
    /// last number given.
    calls: Mutex<(std::collections::VecDeque<CallRecord>, u64)>,
}

impl fmt::Debug for UsageLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageLedger").field("budget", &self.original).finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct LedgerState {
    report: UsageReport,
    /// Wall time of earlier sessions.
    wall_before: Duration,
    reserved_tokens: u64,
    reserved_cost: f64,
    reserved_calls: u64,
    next_request: u64,
}

impl UsageLedger {
    /// A ledger with `prices` and `budget`, kept in memory.
    pub fn new(prices: PriceTable, budget: Budget) -> Self {
        Self::build(prices, budget, None, UsageReport::default())
    }

    /// A ledger written through to `store`, continuing from what the store holds (a resumed
    /// run keeps its totals and its wall time). Limits come from `budget`, raised by as many
    /// extensions as were approved before.
    pub fn stored(
        prices: PriceTable,
        budget: Budget,
        store: Arc<dyn LlmStore>,
    ) -> Result<Self, BackendError> {
        let report = store.load_usage()?.unwrap_or_default();
        Ok(Self::build(prices, budget, Some(store), report))
    }

    fn build(
        prices: PriceTable,
        budget: Budget,
        store: Option<Arc<dyn LlmStore>>,
        mut report: UsageReport,
    ) -> Self {
        let mut current = budget.clone();
        for e in &report.extensions {
            raise(&mut current, e.limit, e.raised_by);
        }
        // A stop from an earlier session stays while its limit does: the run ran out of
        // budget. If the limit was raised (or removed) since, as the stop's message advised,
        // the run goes on and the limits are checked again on the next call.
        if let Some(stop) = &report.stopped {
            let raised = limit_value(&current, stop.limit).is_none_or(|cap| cap > stop.cap);
            if raised {
                tracing::info!(limit = %stop.limit, old_cap = stop.cap, "the budget limit that stopped the run was raised; the run goes on");
                report.stopped = None;
            }
        }
        report.budget = current;
        let wall_before = Duration::from_millis(report.wall_ms);
        let (approval, _) = watch::channel(None);
        Self {
            prices,
            original: budget,
            state: Mutex::new(LedgerState {
                report,
                wall_before,
                reserved_tokens: 0,
                reserved_cost: 0.0,
                reserved_calls: 0,
                next_request: 1,
            }),
            store,
            approval,
            started: tokio::time::Instant::now(),
            calls: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The price table.
    pub fn prices(&self) -> &PriceTable {
        &self.prices
    }

    /// The estimated cost of a call on `model` reading `input` and writing up to `output`
    /// tokens.
    pub fn estimate_cost(&self, model: &str, input: u64, output: u64) -> f64 {
        self.prices.cost(model, Usage { input_tokens: input, output_tokens: output })
    }

    fn wall(&self, state: &LedgerState) -> Duration {
        state.wall_before + self.started.elapsed()
    }

    /// Reserves `tokens` (estimated in and out) and `cost` for one call. Waits while an
    /// extension is being decided, off the clock ([`agent_core::untimed`]). `exempt` calls (the top layer's review of an extension)
    /// pass even when the budget is spent, and are still counted.
    pub async fn reserve(
        &self,
        tokens: u64,
        cost: f64,
        exempt: bool,
    ) -> Result<Reservation, BudgetExceeded> {
        let pass = if exempt { Pass::Exempt } else { Pass::Checked };
        self.reserve_as(tokens, cost, pass).await
    }

    /// [`reserve`](Self::reserve) with the finer [`Pass`].
    pub(crate) async fn reserve_as(
        &self,
        tokens: u64,
        cost: f64,
        pass: Pass,
    ) -> Result<Reservation, BudgetExceeded> {
        let mut waiter = self.approval.subscribe();
        loop {
            {
                let mut s = self.lock();
                if let Some(stop) = s.report.stopped.as_ref().filter(|_| pass != Pass::Exempt) {
                    return Err(stop.clone());
                }
                let pending = self.approval.borrow().is_some();
                // The top powers' calls pass while the powers decide; a human's decision
                // leaves them nothing to do meanwhile, so they wait like every other call.
                let pass = if pass == Pass::WhilePending
                    && s.report.budget.on_exceed == OnExceed::AskHuman
                {
                    Pass::Checked
                } else {
                    pass
                };
                if pass == Pass::Exempt || (pass == Pass::WhilePending && pending) {
                    s.reserved_tokens += tokens;
                    s.reserved_cost += cost;
                    s.reserved_calls += 1;
                    return Ok(Reservation { tokens, cost });
                }
                if !pending {
                    match self.over_limit(&s, tokens, cost) {
                        None => {
                            s.reserved_tokens += tokens;
                            s.reserved_cost += cost;
                            s.reserved_calls += 1;
                            return Ok(Reservation { tokens, cost });
                        }
                        Some(mut exceeded) => match s.report.budget.on_exceed {
                            OnExceed::Stop => {
                                tracing::warn!(limit = %exceeded.limit, used = exceeded.used, cap = exceeded.cap, "run budget exceeded");
                                s.report.stopped = Some(exceeded.clone());
                                self.persist(&s);
                                return Err(exceeded);
                            }
                            on_exceed @ (OnExceed::AskTop | OnExceed::AskHuman) => {
                                let id = s.next_request;
                                s.next_request += 1;
                                let proposed_cap = exceeded.cap
                                    + limit_value(&self.original, exceeded.limit).unwrap_or(0.0);
                                exceeded.refused = None;
                                let request = ApprovalRequest {
                                    id,
                                    limit: exceeded.limit,
                                    used: exceeded.used,
                                    requested: exceeded.requested,
                                    cap: exceeded.cap,
                                    proposed_cap,
                                };
                                let who = if on_exceed == OnExceed::AskHuman {
                                    "a human"
                                } else {
                                    "the top layer"
                                };
                                tracing::warn!(limit = %request.limit, used = request.used, cap = request.cap, proposed_cap, "run budget reached; asking {who} for an extension");
                                self.approval.send_replace(Some(request));
                            }
                        },
                    }
                }
            }
            // Off the clock: the wait lasts as long as the decision takes, which is not the
            // call's own work (nor bounded by the reasoning call's time limit).
            if agent_core::untimed(waiter.changed()).await.is_err() {
                // The sender lives in `self`; it cannot be gone while we borrow `self`.
                return Err(self.stop_now(BudgetLimit::Calls, "the ledger closed".into()));
            }
        }
    }

    fn stop_now(&self, limit: BudgetLimit, reason: String) -> BudgetExceeded {
        let mut s = self.lock();
        let stop = BudgetExceeded {
            limit,
            used: 0.0,
            requested: 0.0,
            cap: 0.0,
            on_exceed: s.report.budget.on_exceed,
            refused: Some(reason),
        };
        s.report.stopped = Some(stop.clone());
        stop
    }

    /// The first limit that `tokens` and `cost` more (and one more call) would pass.
    /// What is used of `limit` now, reservations included.
    fn used(&self, s: &LedgerState, limit: BudgetLimit) -> f64 {
        let t = &s.report.total;
        match limit {
            BudgetLimit::Calls => (t.calls + t.failed_calls + s.reserved_calls) as f64,
            BudgetLimit::Tokens => (t.tokens() + s.reserved_tokens) as f64,
            BudgetLimit::Cost => t.cost_usd + s.reserved_cost,
            BudgetLimit::WallTime => self.wall(s).as_secs_f64(),
        }
    }

    fn over_limit(&self, s: &LedgerState, tokens: u64, cost: f64) -> Option<BudgetExceeded> {
        let b = &s.report.budget;
        let t = &s.report.total;
        let checks = [
            (
                BudgetLimit::Calls,
                b.max_calls.map(|c| c as f64),
                (t.calls + t.failed_calls + s.reserved_calls) as f64,
                1.0,
            ),
            (
                BudgetLimit::Tokens,
                b.max_tokens.map(|c| c as f64),
                (t.tokens() + s.reserved_tokens) as f64,
                tokens as f64,
            ),
            (BudgetLimit::Cost, b.max_cost_usd, t.cost_usd + s.reserved_cost, cost),
            (
                BudgetLimit::WallTime,
                b.max_wall.map(|w| w.as_secs_f64()),
                self.wall(s).as_secs_f64(),
                0.0,
            ),
        ];
        checks.into_iter().find_map(|(limit, cap, used, requested)| {
            let cap = cap?;
            let over =
                if limit == BudgetLimit::WallTime { used >= cap } else { used + requested > cap };
            over.then_some(BudgetExceeded {
                limit,
                used,
                requested,
                cap,
                on_exceed: b.on_exceed,
                refused: None,
            })
        })
    }

    /// Checks the wall-time limit now (a run can pass it between calls). With
    /// [`OnExceed::Stop`], a passed limit stops the run and is returned.
    pub fn check_wall(&self) -> Option<BudgetExceeded> {
        let mut s = self.lock();
        if let Some(stop) = &s.report.stopped {
            return Some(stop.clone());
        }
        let cap = s.report.budget.max_wall?;
        let wall = self.wall(&s);
        if wall < cap || s.report.budget.on_exceed.asks() {
            return None;
        }
        let stop = BudgetExceeded {
            limit: BudgetLimit::WallTime,
            used: wall.as_secs_f64(),
            requested: 0.0,
            cap: cap.as_secs_f64(),
            on_exceed: OnExceed::Stop,
            refused: None,
        };
        s.report.stopped = Some(stop.clone());
        self.persist(&s);
        Some(stop)
    }

    /// Records a call that came back with `usage` and frees its reservation.
    pub fn settle(&self, reservation: Reservation, site: &CallSite, usage: Usage) {
        let cost = self.prices.cost(&site.model, usage);
        let tally = Tally {
            calls: 1,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cost_usd: cost,
            unpriced_calls: u64::from(self.prices.get(&site.model).is_none()),
            ..Tally::default()
        };
        let mut s = self.lock();
        self.unreserve(&mut s, &reservation);
        if tally.unpriced_calls > 0 {
            let key = site.model_key();
            if !s.report.unpriced_models.contains(&key) {
                s.report.unpriced_models.push(key);
            }
        }
        record(&mut s.report, site, &tally);
        self.persist(&s);
    }

    /// Records a call that failed (no usage is known) and frees its reservation.
    pub fn fail(&self, reservation: Reservation, site: &CallSite) {
        let mut s = self.lock();
        self.unreserve(&mut s, &reservation);
        record(&mut s.report, site, &Tally { failed_calls: 1, ..Tally::default() });
        self.persist(&s);
    }

    /// Records waits on a provider's rate limit.
    pub fn rate_limited(&self, site: &CallSite, waits: u64) {
        self.retried(site, 0, waits);
    }

    /// Records the attempts of one call that were tried again: `failed` failed attempts
    /// (counted as failed calls, toward `max_calls`) and `rate_limit_waits` waits on a rate
    /// limit (not failures).
    pub(crate) fn retried(&self, site: &CallSite, failed: u64, rate_limit_waits: u64) {
        if failed == 0 && rate_limit_waits == 0 {
            return;
        }
        let mut s = self.lock();
        let tally = Tally { failed_calls: failed, rate_limit_waits, ..Tally::default() };
        record(&mut s.report, site, &tally);
        self.persist(&s);
    }

    /// Records the structured output mode `site`'s provider uses (stored when it changed).
    pub fn structured_mode(&self, site: &CallSite, choice: crate::ModeChoice) {
        let mut s = self.lock();
        let key = site.model_key();
        if s.report.structured_output.get(&key) == Some(&choice) {
            return;
        }
        s.report.structured_output.insert(key, choice);
        self.persist(&s);
    }

    /// Frees a reservation whose call was never made.
    pub fn release(&self, reservation: Reservation) {
        let mut s = self.lock();
        self.unreserve(&mut s, &reservation);
    }

    fn unreserve(&self, s: &mut LedgerState, r: &Reservation) {
        s.reserved_tokens = s.reserved_tokens.saturating_sub(r.tokens);
        s.reserved_cost = (s.reserved_cost - r.cost).max(0.0);
        s.reserved_calls = s.reserved_calls.saturating_sub(1);
    }

    /// The extension the ledger waits for, if any.
    pub fn pending_approval(&self) -> Option<ApprovalRequest> {
        self.approval.borrow().clone()
    }

    /// Waits until an extension is asked for, and returns it.
    pub async fn next_approval(&self) -> ApprovalRequest {
        let mut rx = self.approval.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                // Unreachable while `self` lives; wait forever rather than spin.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Approves extension `id`: its limit grows to the larger of itself plus its original size
    /// and what is used now plus its original size, and waiting calls go on.
    /// Returns false if `id` is not the pending request.
    pub fn approve(&self, id: u64) -> bool {
        let request = {
            // Under the state lock: waiting calls woken by the taken request see the raised
            // limit, and a concurrent approve or refuse of the same request finds it gone.
            let mut s = self.lock();
            let Some(request) = self.take_pending(id) else {
                return false;
            };
            // The limit grows to what is used now plus its original size: the powers' reviews
            // of the extension (and anything else the top layer did meanwhile) are paid first,
            // and the run gets a whole original budget's worth of room, however small that is.
            let original = limit_value(&self.original, request.limit).unwrap_or(0.0);
            let cap = limit_value(&s.report.budget, request.limit).unwrap_or(0.0);
            let used = self.used(&s, request.limit);
            let new_cap = (cap + original).max(used + original);
            let raised_by = new_cap - cap;
            raise(&mut s.report.budget, request.limit, raised_by);
            s.report.extensions.push(Extension { limit: request.limit, raised_by });
            self.persist(&s);
            (request, new_cap)
        };
        let (request, new_cap) = request;
        tracing::info!(id, limit = %request.limit, new_cap, "budget extension approved");
        true
    }

    /// Clears the pending request if it is `id`, and returns it.
    fn take_pending(&self, id: u64) -> Option<ApprovalRequest> {
        let mut taken = None;
        self.approval.send_if_modified(|pending| {
            if pending.as_ref().is_some_and(|r| r.id == id) {
                taken = pending.take();
                true
            } else {
                false
            }
        });
        taken
    }

    /// Refuses extension `id`: the run stops. Returns false if `id` is not the pending request.
    pub fn refuse(&self, id: u64, reason: &str) -> bool {
        {
            let mut s = self.lock();
            let Some(request) = self.take_pending(id) else {
                return false;
            };
            s.report.stopped = Some(BudgetExceeded {
                limit: request.limit,
                used: request.used,
                requested: request.requested,
                cap: request.cap,
                on_exceed: s.report.budget.on_exceed,
                refused: Some(reason.to_owned()),
            });
            self.persist(&s);
        }
        tracing::warn!(id, reason, "budget extension refused; the run stops");
        true
    }

    /// Why the run stopped on its budget, if it did.
    pub fn stopped(&self) -> Option<BudgetExceeded> {
        self.lock().report.stopped.clone()
    }

    /// The totals, the budget in force and the wall time so far.
    pub fn report(&self) -> UsageReport {
        let s = self.lock();
        let mut r = s.report.clone();
        r.wall_ms = u64::try_from(self.wall(&s).as_millis()).unwrap_or(u64::MAX);
        r
    }

    /// Keeps the record of a call that ended: numbers it ([`CallRecord::seq`]) and writes it
    /// to the store, or without one keeps it among the latest
    /// [`MEMORY_CALLS`](crate::calls::MEMORY_CALLS). Returns its number.
    pub fn record_call(&self, mut record: CallRecord) -> Result<u64, BackendError> {
        if let Some(store) = &self.store {
            store.append_call(&mut record)?;
            return Ok(record.seq);
        }
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.1 += 1;
        record.seq = calls.1;
        if calls.0.len() == crate::calls::MEMORY_CALLS {
            calls.0.pop_front();
        }
        calls.0.push_back(record);
        Ok(calls.1)
    }

    /// The calls recorded, in order: every one in the store, or the latest kept in memory.
    pub fn calls(&self) -> Result<Vec<CallRecord>, BackendError> {
        match &self.store {
            Some(store) => store.load_calls(),
            None => Ok(self
                .calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .0
                .iter()
                .cloned()
                .collect()),
        }
    }

    /// Stores the report now (with the wall time so far). The runner calls this at the end of
    /// a session so the next one continues the wall-time count.
    pub fn flush(&self) -> Result<(), BackendError> {
        let report = self.report();
        match &self.store {
            Some(store) => store.save_usage(&report),
            None => Ok(()),
        }
    }

    fn persist(&self, s: &LedgerState) {
        let Some(store) = &self.store else { return };
        let mut report = s.report.clone();
        report.wall_ms = u64::try_from(self.wall(s).as_millis()).unwrap_or(u64::MAX);
        if let Err(e) = store.save_usage(&report) {
            tracing::error!(error = %e, "could not store the usage ledger");
        }
    }
}

impl agent_core::CostMeter for UsageLedger {
    /// The agent's own calls so far, as [`UsageReport::agent_cost_usd`] counts them.
    fn cost_usd(&self, agent: &AgentId) -> Option<f64> {
        self.lock().report.agent_cost_usd(agent.as_str(), &self.prices)
    }
}

fn record(report: &mut UsageReport, site: &CallSite, tally: &Tally) {
    report.total.add(tally);
    report.by_agent.entry(site.agent.to_string()).or_default().add(tally);
    report.by_layer.entry(site.layer.to_string()).or_default().add(tally);
    report.by_model.entry(site.model_key()).or_default().add(tally);
}

fn limit_value(b: &Budget, limit: BudgetLimit) -> Option<f64> {
    match limit {
        BudgetLimit::Tokens => b.max_tokens.map(|v| v as f64),
        BudgetLimit::Cost => b.max_cost_usd,
        BudgetLimit::WallTime => b.max_wall.map(|w| w.as_secs_f64()),
        BudgetLimit::Calls => b.max_calls.map(|v| v as f64),
    }
}

/// Raises `limit` of `budget` by `by` (rounded up for whole-number limits).
fn raise(budget: &mut Budget, limit: BudgetLimit, by: f64) {
    let by = by.max(0.0);
    let whole = by.ceil() as u64;
    match limit {
        BudgetLimit::Tokens => {
            if let Some(c) = budget.max_tokens.as_mut() {
                *c = c.saturating_add(whole);
            }
        }
        BudgetLimit::Cost => {
            if let Some(c) = budget.max_cost_usd.as_mut() {
                *c += by;
            }
        }
        BudgetLimit::WallTime => {
            if let Some(c) = budget.max_wall.as_mut() {
                *c += Duration::from_secs_f64(by);
            }
        }
        BudgetLimit::Calls => {
            if let Some(c) = budget.max_calls.as_mut() {
                *c = c.saturating_add(whole);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

    use agent_core::CostMeter;

    use super::*;

    fn site(agent: &str, provider: &str, model: &str) -> CallSite {
        CallSite {
            agent: AgentId::new(agent),
            layer: AgentLayer::Bottom,
            provider: provider.into(),
            model: model.into(),
        }
    }

    async fn call(ledger: &UsageLedger, site: &CallSite, input: u64, output: u64) {
        let r = ledger.reserve(input + output, 0.0, false).await.unwrap();
        ledger.settle(r, site, Usage { input_tokens: input, output_tokens: output });
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[tokio::test]
    async fn the_cost_meter_gives_each_agents_own_cost_when_its_models_are_priced() {
        let mut prices = PriceTable::new();
        prices.set("gpt-a", Price { input_per_mtok: 2.0, output_per_mtok: 10.0 }).unwrap();
        let ledger = UsageLedger::new(prices, Budget::default());
        let meter: &dyn CostMeter = &ledger;
        let (a, b, c) = (AgentId::new("a"), AgentId::new("b"), AgentId::new("c"));

        assert_eq!(meter.cost_usd(&a), Some(0.0), "no call yet: nothing spent");
        call(&ledger, &site("a", "openai", "gpt-a"), 1_000, 200).await;
        call(&ledger, &site("a", "openai", "gpt-a"), 500, 0).await;
        call(&ledger, &site("b", "openai", "gpt-a"), 100, 10).await;
        // 1 000 × 2 + 200 × 10 + 500 × 2 = 5 000 dollars per million tokens: its own calls only.
        assert!(close(meter.cost_usd(&a), 0.005), "{:?}", meter.cost_usd(&a));
        assert!(close(meter.cost_usd(&b), 0.000_3), "{:?}", meter.cost_usd(&b));

        // A call on a model without a price: the agent's cost is no longer known.
        call(&ledger, &site("c", "openai", "gpt-a"), 1_000, 0).await;
        assert!(close(meter.cost_usd(&c), 0.002));
        call(&ledger, &site("c", "local", "tiny"), 1_000, 0).await;
        assert_eq!(meter.cost_usd(&c), None);
        let report = ledger.report();
        assert_eq!(report.by_agent["c"].unpriced_calls, 1);
        assert_eq!(report.by_model["local/tiny"].unpriced_calls, 1);
        assert_eq!(report.total.unpriced_calls, 1);
        assert!(close(meter.cost_usd(&a), 0.005), "the others' costs stay known");

        // A failed call costs nothing and leaves the cost known.
        let r = ledger.reserve(10, 0.0, false).await.unwrap();
        ledger.fail(r, &site("b", "local", "tiny"));
        assert!(close(meter.cost_usd(&b), 0.000_3));

        // The stored report (what `inspect` reads) tells the same.
        let stored: UsageReport =
            agent_state::decode(&agent_state::encode(&report).unwrap()).unwrap();
        assert_eq!(stored.agent_cost_usd("c", ledger.prices()), None);
        assert!(close(stored.agent_cost_usd("a", ledger.prices()), 0.005));
    }

    #[tokio::test]
    async fn without_prices_no_cost_is_known() {
        let ledger = UsageLedger::new(PriceTable::new(), Budget::default());
        let a = AgentId::new("a");
        assert_eq!(CostMeter::cost_usd(&ledger, &a), None);
        call(&ledger, &site("a", "openai", "gpt-a"), 1_000, 200).await;
        assert_eq!(CostMeter::cost_usd(&ledger, &a), None);
    }

    #[test]
    fn a_tally_stored_before_unpriced_calls_were_counted_still_reads() {
        let old = r#"{"calls":2,"failed_calls":0,"input_tokens":5,"output_tokens":6,"cost_usd":0.5,"rate_limit_waits":0}"#;
        let t: Tally = serde_json::from_str(old).unwrap();
        assert_eq!((t.calls, t.unpriced_calls), (2, 0));
        let json = serde_json::to_string(&t).unwrap();
        assert!(!json.contains("unpriced_calls"), "written only when there are some: {json}");
    }
}
