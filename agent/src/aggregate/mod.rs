//! aggregate stage.
