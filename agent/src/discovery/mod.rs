//! discovery stage.
