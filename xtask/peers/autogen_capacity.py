"""AutoGen's side of `cargo xtask bench --capacity`: the hello example's team on autogen-core.

Run by xtask with the Python of `target/peers/venv` (where the pinned autogen-core is). It
prints one JSON object on stdout:

    {"runtime": "autogen-core", "version": "0.7.5", "python": "3.11.7", "messages": 18,
     "figures": [{"id": "autogen/capacity/10", "tasks": 10, "tasks_per_s": ..., "p50_ms": ...,
                  "p99_ms": ..., "peak_rss_bytes": ...}, ...]}

Progress goes to stderr. The team is the hello example's (`examples/hello/team.toml`): three
powers (`top-a` proposes, `top-b` and `top-c` sign), two leads (`mid-docs`, `mid-build`) and
four executors, as `RoutedAgent`s of one `SingleThreadedAgentRuntime`. For each task they
exchange the messages a Strata run of `examples/hello/plan.toml` exchanges (counted from its
audit log with `strata inspect RUN --messages`; the heartbeat acknowledgements excluded, which
AutoGen has no counterpart for):

1. the task to `top-a`;
2. `top-a` asks `top-b` and `top-c` to sign the plan; each answers that it signed;
3. wave 1: `top-a` hands `write-hello` and `write-notes` to `mid-docs` (one work package),
   which hands one step to each of its executors (`bottom-d1`, and `bottom-d2`, which the plan
   names); each writes its file and reports its result; `mid-docs` reports to `top-a`;
4. wave 2: `top-a` hands `measure` and `list` to `mid-build`, which hands them to `bottom-b1`
   and `bottom-b2`; one runs `wc -c < hello.txt` in a shell, the other lists the workspace;
   both report; `mid-build` reports to `top-a`;
5. `top-a` reports the task closed to `system` (here: the bench, which waits for it).

N copies of the task are submitted at once into the one running team; each task's latency is
from its submission to its closing report. Each N runs in a fresh Python process
(`one N` on the command line), so its peak resident set (`ru_maxrss`) is its own.

Usage: `python autogen_capacity.py [--quick]` (quick: 1 and 10 tasks), or
`python autogen_capacity.py one N` for one size.
"""

import asyncio
import importlib.metadata
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from autogen_core import (
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    TypeSubscription,
    message_handler,
)

SIZES = [1, 10, 100, 1_000]

# The plan: step, its lead, its executor, what it does, the steps it waits for.
STEPS = [
    ("write-hello", "mid-docs", "bottom-d1", ("write", "hello.txt", "hello, strata\n"), []),
    ("write-notes", "mid-docs", "bottom-d2",
     ("write", "notes/plan.md", "# Plan\n- greet\n- measure\n"), []),
    ("measure", "mid-build", "bottom-b1", ("shell", "wc -c < hello.txt"), ["write-hello"]),
    ("list", "mid-build", "bottom-b2", ("list", "."), ["write-hello", "write-notes"]),
]
SIGNERS = ["top-b", "top-c"]


@dataclass
class Mail:
    """Every message of the team: its kind, task, sender and content."""

    kind: str
    task: str
    sender: str
    content: dict = field(default_factory=dict)


def topic(agent: str) -> TopicId:
    """Agents are named `layer-name`; the topic's type is the layer and its source the name."""
    return TopicId(type=agent.split("-")[0], source=agent)


class Member(RoutedAgent):
    """One agent of the team; what it does with a message depends on its layer."""

    count = 0  # messages sent, all agents together

    def __init__(self, workspace: str, closed) -> None:
        super().__init__("a member of the hello team")
        self.workspace = workspace
        self.closed = closed
        self.tasks: dict = {}

    @property
    def name(self) -> str:
        return self.id.key

    async def send(self, to: str, kind: str, task: str, **content) -> None:
        Member.count += 1
        await self.publish_message(Mail(kind, task, self.name, content), topic(to))

    @message_handler
    async def on_mail(self, message: Mail, ctx: MessageContext) -> None:
        layer = self.name.split("-")[0]
        await getattr(self, f"{layer}_{message.kind}")(message)

    # The proposing power.
    async def top_task(self, mail: Mail) -> None:
        self.tasks[mail.task] = {"signed": 0, "done": set(), "sent": set()}
        for signer in SIGNERS:
            await self.send(signer, "sign", mail.task)

    async def top_sign(self, mail: Mail) -> None:  # a signer
        await self.send(mail.sender, "signed", mail.task)

    async def top_signed(self, mail: Mail) -> None:
        state = self.tasks[mail.task]
        state["signed"] += 1
        if state["signed"] == len(SIGNERS):
            await self.dispatch(mail.task)

    async def top_report(self, mail: Mail) -> None:
        state = self.tasks[mail.task]
        state["done"].update(mail.content["steps"])
        if len(state["done"]) == len(STEPS):
            del self.tasks[mail.task]
            Member.count += 1  # the closing report to `system`
            self.closed(mail.task)
        else:
            await self.dispatch(mail.task)

    async def dispatch(self, task: str) -> None:
        state = self.tasks[task]
        packages: dict = {}
        for step, lead, _, _, after in STEPS:
            if step not in state["sent"] and all(d in state["done"] for d in after):
                packages.setdefault(lead, []).append(step)
        for lead, steps in packages.items():
            state["sent"].update(steps)
            await self.send(lead, "work", task, steps=steps)

    # A lead.
    async def mid_work(self, mail: Mail) -> None:
        self.tasks[(mail.task, tuple(mail.content["steps"]))] = set()
        for step, _, executor, _, _ in STEPS:
            if step in mail.content["steps"]:
                await self.send(executor, "step", mail.task, step=step)

    async def mid_result(self, mail: Mail) -> None:
        for (task, steps), done in list(self.tasks.items()):
            if task == mail.task and mail.content["step"] in steps:
                done.add(mail.content["step"])
                if len(done) == len(steps):
                    del self.tasks[(task, steps)]
                    await self.send("top-a", "report", task, steps=list(steps))
                return

    # An executor.
    async def bottom_step(self, mail: Mail) -> None:
        action = next(s[3] for s in STEPS if s[0] == mail.content["step"])
        output = await self.run(action)
        await self.send(mail.sender, "result", mail.task, step=mail.content["step"], output=output)

    async def run(self, action) -> str:
        if action[0] == "write":
            path = os.path.join(self.workspace, action[1])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(action[2])
            return f"wrote {len(action[2])} bytes"
        if action[0] == "shell":
            shell = await asyncio.create_subprocess_shell(
                action[1], cwd=self.workspace, stdout=asyncio.subprocess.PIPE
            )
            output, _ = await shell.communicate()
            return output.decode()
        return "\n".join(sorted(os.listdir(os.path.join(self.workspace, action[1]))))


async def one(tasks: int) -> dict:
    """`tasks` concurrent tasks in one running team; the figure."""
    workspace = tempfile.mkdtemp(prefix="autogen-capacity-")
    runtime = SingleThreadedAgentRuntime()
    done: dict = {}
    submitted: dict = {}
    finished = asyncio.Event()

    def closed(task: str) -> None:
        done[task] = time.perf_counter() - submitted[task]
        if len(done) == tasks:
            finished.set()

    await Member.register(runtime, "top", lambda: Member(workspace, closed))
    await Member.register(runtime, "mid", lambda: Member(workspace, closed))
    await Member.register(runtime, "bottom", lambda: Member(workspace, closed))
    for layer in ("top", "mid", "bottom"):
        await runtime.add_subscription(TypeSubscription(topic_type=layer, agent_type=layer))
    runtime.start()
    start = time.perf_counter()
    for n in range(1, tasks + 1):
        task = "hello" if n == 1 else f"hello-{n}"
        submitted[task] = time.perf_counter()
        Member.count += 1  # the task, to `top-a`
        await runtime.publish_message(Mail("task", task, "system"), topic("top-a"))
    await finished.wait()
    elapsed = time.perf_counter() - start
    await runtime.stop_when_idle()
    await runtime.close()
    latencies = sorted(ms * 1e3 for ms in done.values())

    def percentile(p: float) -> float:
        return latencies[min(round((len(latencies) - 1) * p), len(latencies) - 1)]

    return {
        "id": f"autogen/capacity/{tasks}",
        "tasks": tasks,
        "tasks_per_s": round(tasks / elapsed, 2),
        "p50_ms": round(percentile(0.50), 2),
        "p99_ms": round(percentile(0.99), 2),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "messages_per_task": Member.count / tasks,
    }


def in_child(tasks: int) -> dict:
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "one", str(tasks)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


def main(quick: bool) -> None:
    figures = []
    for tasks in SIZES[:2] if quick else SIZES:
        figure = in_child(tasks)
        print(f"autogen: {figure['id']}: {figure['tasks_per_s']} tasks/s", file=sys.stderr)
        figures.append(figure)
    report = {
        "runtime": "autogen-core",
        "version": importlib.metadata.version("autogen-core"),
        "python": platform.python_version(),
        "messages": round(figures[0]["messages_per_task"]),
        "figures": figures,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "one":
        print(json.dumps(asyncio.run(one(int(sys.argv[2])))), flush=True)
    elif sys.argv[1:] in ([], ["--quick"]):
        main(quick=sys.argv[1:] == ["--quick"])
    else:
        sys.exit("usage: autogen_capacity.py [--quick] | autogen_capacity.py one N")
