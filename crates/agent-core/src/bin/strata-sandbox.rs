//! `strata-sandbox`: Strata's sandbox launcher, for programs that use agent-core's `shell`
//! tool without calling `agent_core::tools::run_sandbox_launcher_if_requested` first in their
//! own `main` (and for test binaries). Strata finds it next to the running executable or in
//! that executable's parent directory; it is never run by hand.

fn main() {
    agent_core::tools::sandbox_launcher_main()
}
