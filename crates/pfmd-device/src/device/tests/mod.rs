//! State-machine tests of the device over the mock backend.

mod core;
mod ev5;
mod ev6;
mod hostile;
mod hotplug;
mod sampling;
