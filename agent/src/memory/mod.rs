//! memory stage.
