//! offsets stage.
