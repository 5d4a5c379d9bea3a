//! The EV6 and EV67 models: two counters, `PCNT6*` ioctls, EV67 aggregate
//! pairs and profile-me (contract §5.3, §5.4). Not implemented yet: with
//! `--model ev6|ev67` pfmd refuses to start until it lands.
