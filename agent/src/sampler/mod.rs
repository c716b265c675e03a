//! sampler stage.
