//! unwind stage.
pub mod sample; pub use sample::ThreadSample;
