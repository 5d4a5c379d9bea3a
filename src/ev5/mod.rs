//! The EV5 model (21164, EV56, PCA56): three counters, `PCNT5*` ioctls
//! (contract §5.2). Not implemented yet: with `--model ev5|ev56|pca56` pfmd
//! refuses to start until it lands.
