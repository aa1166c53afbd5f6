//! `strata approve`, `strata veto`, `strata rollback` and `strata adopt`: the operator's
//! commands. They parse their arguments, hand the request to the run's operator inbox
//! ([`strata::operator`], which checks and delivers it, and waits for a live run's answer),
//! and print what became of it.
//!
//! Bad input (exit 2, and audited): a decision that does not exist or is decided already, a
//! name not in `[approvals] humans`, a decision that needs no human, a veto without a reason,
//! a rollback of an agent that is not an OODA agent of the run.
//! A name that cannot name a human, a malformed decision id, or no name at all is refused
//! before anything is written (exit 2, not audited: it names nobody who could sign).

use agent_state::{AgentId, DecisionId, HUMAN_PREFIX};
use strata::operator::{Delivery, OperatorRequest, Submitted, Target, WAIT};

use crate::cli::{AdoptArgs, ApproveArgs, DecisionTarget, Operator, RollbackArgs, VetoArgs};
use crate::{Failure, TASK_FAILED};

/// `strata approve RUN DECISION`.
pub(crate) async fn approve(args: &ApproveArgs) -> Result<u8, Failure> {
    let request = |decision, human| OperatorRequest::Approve { decision, human };
    decide(&args.target, request).await
}

/// `strata veto RUN DECISION --reason TEXT`.
pub(crate) async fn veto(args: &VetoArgs) -> Result<u8, Failure> {
    let reason = args.reason.clone();
    let request = move |decision, human| OperatorRequest::Veto { decision, human, reason };
    decide(&args.target, request).await
}

/// `strata rollback RUN AGENT VERSION`.
pub(crate) async fn rollback(args: &RollbackArgs) -> Result<u8, Failure> {
    let agent = AgentId::new(args.agent.as_str());
    let request = |human| {
        Ok(OperatorRequest::Rollback { agent: agent.clone(), version: args.version, human })
    };
    let delivery =
        strata::operator::send_command(&target(&args.operator, &args.run), request).await?;
    Ok(match &delivery.submitted {
        Submitted::Applied(_) => {
            outln!(
                "{agent} told to roll back to version {}; it does at its next turns (`strata inspect {} audit` shows it)",
                args.version,
                delivery.run_id
            );
            0
        }
        Submitted::Queued | Submitted::TimedOut => tell(&delivery),
    })
}

/// `strata adopt RUN AGENT GENOME`: a genome file, or an evolution whose best genome it is.
pub(crate) async fn adopt(args: &AdoptArgs) -> Result<u8, Failure> {
    let agent = AgentId::new(args.agent.as_str());
    let mut short = String::new();
    let request = |human| {
        let genome = strata::evolve::read_genome(&args.operator.data, &args.genome)?;
        short = genome.id.short().to_owned();
        Ok(OperatorRequest::Adopt { agent: agent.clone(), genome: Box::new(genome), human })
    };
    let delivery =
        strata::operator::send_command(&target(&args.operator, &args.run), request).await?;
    Ok(match &delivery.submitted {
        Submitted::Applied(_) => {
            outln!(
                "{agent} told to become genome {short}; it does at its next turn (`strata inspect {} audit` shows it, `strata rollback` goes back)",
                delivery.run_id
            );
            0
        }
        Submitted::Queued | Submitted::TimedOut => tell(&delivery),
    })
}

/// The run and operator the flags name.
fn target<'a>(operator: &'a Operator, run: &'a str) -> Target<'a> {
    Target {
        data: &operator.data,
        run,
        as_name: operator.as_name.as_deref(),
        no_wait: operator.no_wait,
    }
}

/// Says what became of a request the run has not applied (yet), as the commands say it, and
/// returns the exit code: queued for `strata resume` or not waited for, 0; not taken in time,
/// [`TASK_FAILED`].
fn tell(delivery: &Delivery) -> u8 {
    let (run, request) = (&delivery.run_id, &delivery.request_id);
    match delivery.submitted {
        Submitted::Applied(_) => 0,
        Submitted::Queued if !delivery.live => {
            outln!(
                "run {run} is not running: request {request} is queued; `strata resume {run}` applies it"
            );
            0
        }
        Submitted::Queued => {
            outln!("request {request} delivered to run {run}");
            0
        }
        Submitted::TimedOut => {
            errln!(
                "run {run} has not taken request {request} within {} s; it stays queued and is applied when the run reads its requests",
                WAIT.as_secs()
            );
            TASK_FAILED
        }
    }
}

async fn decide(
    target: &DecisionTarget,
    request: impl FnOnce(DecisionId, String) -> OperatorRequest,
) -> Result<u8, Failure> {
    let to = self::target(&target.operator, &target.run);
    let sent = strata::operator::send_decision(&to, &target.decision, request).await?;
    Ok(match &sent.delivery.submitted {
        Submitted::Applied(done) => {
            outln!(
                "decision {}: {} by {HUMAN_PREFIX}{}",
                sent.decision,
                done.outcome.replace('_', " "),
                sent.human
            );
            0
        }
        Submitted::Queued | Submitted::TimedOut => tell(&sent.delivery),
    })
}
