"""AutoGen's side of `cargo xtask bench --peers`: the peer workloads on autogen-core.

Run by xtask with the virtual environment's Python (`target/peers/venv`, where xtask installs
the pinned autogen-core). It prints one JSON object on stdout, the same shape for every
runtime:

    {"runtime": "autogen-core", "version": "0.7.5", "python": "3.11.7",
     "figures": [{"id": "autogen/throughput/1000", "agents": 1000, "messages_per_s": ...}, ...]}

Progress goes to stderr. The workloads, as in `crates/agent-pool/benches/peers.rs`:

- throughput: N agents of one type, `RoutedAgent`s whose `@message_handler` does nothing,
  created before the clock starts; 100 messages per agent are published round-robin (one
  `TypeSubscription` maps topic source `k` to the agent with key `k`, so each message reaches
  exactly one agent), and the clock stops when `stop_when_idle` returns: every message taken
  from the runtime's queue and its handler returned;
- creation: N agents instantiated through the runtime's factory (`runtime.get(..., lazy=False)`:
  AutoGen creates agents lazily, on their first message; this forces it);
- memory: the growth of the resident set while N agents are instantiated, in a fresh Python
  process per N (`memory N` on the command line), divided by N.

There is no idle-cycle workload: AutoGen has no heartbeat, and an idle agent is an object in a
dictionary that costs nothing until a message arrives.

Usage: `python autogen_bench.py [--quick]` for everything, `python autogen_bench.py memory N`
for one memory figure (what the full run calls in a child process).
"""

import asyncio
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

from autogen_core import (
    AgentType,
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    TypeSubscription,
    message_handler,
)

# The same sizes as the Rust side (peers.rs); `--quick` keeps the first two of each.
THROUGHPUT_AGENTS = [100, 1_000, 10_000]
MESSAGES_PER_AGENT = 100
SCALE_AGENTS = [1_000, 10_000, 100_000]
THROUGHPUT_REPETITIONS = 3
CREATE_REPETITIONS = 3

AGENT_TYPE = "noop"
TOPIC_TYPE = "bench"


@dataclass
class Ping:
    """The message: a number, like the Rust runtimes' messages."""

    n: int


class Noop(RoutedAgent):
    """An agent whose message handler does nothing."""

    def __init__(self) -> None:
        super().__init__("does nothing")

    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> None:
        pass


def log(text: str) -> None:
    print(f"autogen: {text}", file=sys.stderr, flush=True)


def resident_bytes() -> int:
    """The process's resident set size, from VmRSS in /proc/self/status (Linux)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


async def runtime_with_agents(agents: int) -> SingleThreadedAgentRuntime:
    """A runtime with the agent type registered, its subscription, and `agents` instances."""
    runtime = SingleThreadedAgentRuntime()
    await Noop.register(runtime, AGENT_TYPE, Noop)
    await runtime.add_subscription(TypeSubscription(topic_type=TOPIC_TYPE, agent_type=AGENT_TYPE))
    for key in range(agents):
        await runtime.get(AgentType(AGENT_TYPE), key=str(key), lazy=False)
    return runtime


async def throughput(agents: int, repetitions: int) -> dict:
    runtime = await runtime_with_agents(agents)
    topics = [TopicId(type=TOPIC_TYPE, source=str(key)) for key in range(agents)]
    total = agents * MESSAGES_PER_AGENT

    async def one_run(rounds: int) -> float:
        runtime.start()
        start = time.perf_counter()
        n = 0
        for _ in range(rounds):
            for topic in topics:
                await runtime.publish_message(Ping(n), topic)
                n += 1
        await runtime.stop_when_idle()
        return time.perf_counter() - start

    # One message per agent first, untimed: each topic's recipients are resolved and cached on
    # first use.
    await one_run(1)
    times = [await one_run(MESSAGES_PER_AGENT) for _ in range(repetitions)]
    median = statistics.median(times)
    await runtime.close()
    return {
        "id": f"autogen/throughput/{agents}",
        "agents": agents,
        "messages": total,
        "messages_per_s": round(total / median, 1),
        "median_ms": round(median * 1e3, 3),
        "repetitions": repetitions,
    }


async def creation(agents: int, repetitions: int) -> dict:
    times = []
    for _ in range(repetitions):
        runtime = SingleThreadedAgentRuntime()
        await Noop.register(runtime, AGENT_TYPE, Noop)
        gc.collect()
        start = time.perf_counter()
        for key in range(agents):
            await runtime.get(AgentType(AGENT_TYPE), key=str(key), lazy=False)
        times.append(time.perf_counter() - start)
        await runtime.close()
        del runtime
        gc.collect()
    median = statistics.median(times)
    return {
        "id": f"autogen/create/{agents}",
        "agents": agents,
        "agents_per_s": round(agents / median, 1),
        "median_ms": round(median * 1e3, 3),
        "repetitions": repetitions,
    }


async def memory(agents: int) -> dict:
    """Bytes per agent; meant for a fresh process, so freed memory does not hide the growth."""
    runtime = await runtime_with_agents(0)
    gc.collect()
    before = resident_bytes()
    for key in range(agents):
        await runtime.get(AgentType(AGENT_TYPE), key=str(key), lazy=False)
    gc.collect()
    after = resident_bytes()
    return {
        "id": f"autogen/memory/{agents}",
        "agents": agents,
        "bytes_per_agent": round(max(after - before, 0) / agents, 1),
    }


def memory_in_child(agents: int) -> dict:
    child = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "memory", str(agents)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    return json.loads(child.stdout)


async def main(quick: bool) -> None:
    throughput_agents = THROUGHPUT_AGENTS[:2] if quick else THROUGHPUT_AGENTS
    scale_agents = SCALE_AGENTS[:2] if quick else SCALE_AGENTS
    figures = []
    for agents in throughput_agents:
        # The largest size is a million messages, about 90 s here: one repetition.
        repetitions = 1 if agents >= 10_000 else THROUGHPUT_REPETITIONS
        figure = await throughput(agents, repetitions)
        log(f"{figure['id']}: {figure['messages_per_s']:.0f} messages/s")
        figures.append(figure)
    for agents in scale_agents:
        figure = await creation(agents, CREATE_REPETITIONS)
        log(f"{figure['id']}: {figure['agents_per_s']:.0f} agents/s")
        figures.append(figure)
    for agents in scale_agents:
        figure = memory_in_child(agents)
        log(f"{figure['id']}: {figure['bytes_per_agent']:.1f} bytes/agent")
        figures.append(figure)
    report = {
        "runtime": "autogen-core",
        "version": importlib.metadata.version("autogen-core"),
        "python": platform.python_version(),
        "figures": figures,
    }
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "memory":
        print(json.dumps(asyncio.run(memory(int(sys.argv[2])))), flush=True)
    elif sys.argv[1:] in ([], ["--quick"]):
        asyncio.run(main(quick=sys.argv[1:] == ["--quick"]))
    else:
        sys.exit("usage: autogen_bench.py [--quick] | autogen_bench.py memory N")
