//! The perf_event_open backend (being written).
