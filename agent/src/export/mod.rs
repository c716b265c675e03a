//! export stage.
