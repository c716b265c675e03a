//! symbolize stage.
pub mod frame; pub use frame::{Frame, FrameKind};
