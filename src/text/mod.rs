//! Pure text handling: documents as ropes with versions, and position math across encodings.
//! No IO and no LSP types live here.

pub mod buffer;
pub mod position;

pub use buffer::{Buffer, ChangeError, TextChange};
pub use position::{Encoding, Position, PositionError, Range, to_char_index, to_position};
