//! A lead hears that one of its executors took a step over from another (peer help): the step's
//! assignee becomes the one that has it now, so its load, the wait-for graph and a later
//! reassignment (which skips the executors that tried the step) stay right.

use agent_core::{AgentContext, AgentError};
use agent_state::{AgentId, Message};

use super::MidAgent;

impl MidAgent {
    /// `StatusReport::HandedOver` from executor `to` (the sender): step `step_id` of task
    /// `task_id` went from `from` to it. Ignored unless the step is open here and still
    /// `from`'s (a redelivery, or a step the lead moved or finished already, changes nothing).
    pub(super) async fn handed_over(
        &mut self,
        ctx: &mut AgentContext,
        message: &Message,
        (task_id, step_id): (&str, &str),
        from: &AgentId,
        to: &AgentId,
    ) -> Result<(), AgentError> {
        if message.from.agent() != Some(to) || !self.executors.iter().any(|e| &e.id == from) {
            return Ok(());
        }
        let Some(key) = self.package_of(task_id, step_id) else { return Ok(()) };
        let Some(state) = self.work.get_mut(&key) else { return Ok(()) };
        if state.closed || state.results.contains_key(step_id) {
            return Ok(());
        }
        let Some(subtask) = state.subtasks.get_mut(step_id) else { return Ok(()) };
        if &subtask.assignee != from {
            return Ok(());
        }
        subtask.assignee = to.clone();
        subtask.attempt += 1;
        let attempt = subtask.attempt;
        let tried = state.tried.entry(step_id.to_owned()).or_default();
        for agent in [from, to] {
            if !tried.contains(agent) {
                tried.push(agent.clone());
            }
        }
        ctx.append_own(&format!("- [{to}] took over {step_id} from [{from}] (attempt {attempt})"))
            .await?;
        Ok(())
    }
}
