//! Inline completion from a fill-in-the-middle model, the pure half (docs/completion.md): the
//! context sent (`context`: the text around the cursor in a budget, the definitions the code
//! near it names, snippets of other open files), the prompt in a model family's FIM template
//! (`template`), the answer cut to what belongs at the cursor (`cut`), and the cache that
//! answers a user typing the start of a shown suggestion (`cache`), and the next-edit
//! suggestion's prompt and answer (`next_edit`). No IO: the runtime sends,
//! the LSP front end decides when.

pub mod cache;
pub mod context;
pub mod cut;
pub mod next_edit;
pub mod template;

pub use cache::Cache;
pub use context::{Budget, Context, Snippet, around, named_definitions, similar_snippets};
pub use cut::{Shape, finish};
pub use template::{Family, prompt, stop_words};
