//! Executor benches.

fn main() {}
