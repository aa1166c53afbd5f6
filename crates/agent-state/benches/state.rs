//! Benchmarks of the pure lifecycle: status transitions per second through `Lifecycle::apply`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use agent_state::{AgentId, AgentStatus, Lifecycle, Timestamp};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

/// The allowed edges one iteration walks, from `idle` back to `idle`.
const CYCLE: [AgentStatus; 4] =
    [AgentStatus::Working, AgentStatus::Blocked, AgentStatus::Working, AgentStatus::Idle];

fn lifecycle(c: &mut Criterion) {
    let mut group = c.benchmark_group("lifecycle");
    group.measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_secs(1));

    // idle -> working -> idle: the two transitions of every heartbeat that has work.
    // Each includes what the runtime pays: the reason string and the record for the audit log.
    group.throughput(Throughput::Elements(2));
    group.bench_function("apply_idle_working_idle", |bench| {
        let mut life = Lifecycle::restore(AgentId::new("bottom-1"), AgentStatus::Idle);
        let mut now = 0;
        bench.iter(|| {
            now += 1;
            let there = life.apply(AgentStatus::Working, "processing 1 message(s)", Timestamp(now));
            black_box(there.is_ok());
            let back = life.apply(AgentStatus::Idle, "work complete", Timestamp(now));
            black_box(back.is_ok());
        });
        assert_eq!(life.status(), AgentStatus::Idle);
    });

    // A longer cycle through `blocked`, to show the cost does not depend on the edge.
    group.throughput(Throughput::Elements(CYCLE.len() as u64));
    group.bench_function("apply_idle_working_blocked_working_idle", |bench| {
        let mut life = Lifecycle::restore(AgentId::new("bottom-1"), AgentStatus::Idle);
        let mut now = 0;
        bench.iter(|| {
            for to in CYCLE {
                now += 1;
                black_box(life.apply(to, "benchmark", Timestamp(now)).is_ok());
            }
        });
        assert_eq!(life.status(), AgentStatus::Idle);
    });

    // A refused edge (idle -> terminated): the error path builds the list of allowed targets.
    group.throughput(Throughput::Elements(1));
    group.bench_function("apply_refused", |bench| {
        let mut life = Lifecycle::restore(AgentId::new("bottom-1"), AgentStatus::Idle);
        bench.iter(|| {
            black_box(life.apply(AgentStatus::Terminated, "skip shutdown", Timestamp(0)).is_err());
        });
    });
    group.finish();
}

criterion_group!(benches, lifecycle);
criterion_main!(benches);
