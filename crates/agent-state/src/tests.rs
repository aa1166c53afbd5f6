//! Unit tests for the pure core.
