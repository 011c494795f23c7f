//! The pure half of the repo map: what a file defines and uses (`tags`) and the ranking of
//! files and definitions (`rank`). Reading files and the cache live in the runtime's `repomap`.

pub mod rank;
pub mod tags;

pub use rank::Focus;
