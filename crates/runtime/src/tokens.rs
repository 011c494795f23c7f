//! Counting tokens for the context budget: the provider's tokenizer where it is known
//! (tiktoken for OpenAI's models), otherwise bytes / 4. The journal says which was used.

use tiktoken_rs::CoreBPE;

#[derive(Clone, Copy)]
pub enum Counter {
    Tiktoken {
        name: &'static str,
        bpe: &'static CoreBPE,
    },
    /// A model whose tokenizer we do not have: a token is taken as four bytes.
    Bytes,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Counter {
    /// The counter for a model name (`gpt-4o`, `openai/gpt-4.1`, `claude-...`).
    pub fn for_model(model: &str) -> Counter {
        use tiktoken_rs::tokenizer::Tokenizer;
        // Routers name models `vendor/model`.
        let bare = model.rsplit('/').next().unwrap_or(model);
        let Some(tokenizer) = tiktoken_rs::tokenizer::get_tokenizer(bare) else {
            return Counter::Bytes;
        };
        let name = match tokenizer {
            Tokenizer::O200kBase => "o200k_base",
            Tokenizer::O200kHarmony => "o200k_harmony",
            Tokenizer::Cl100kBase => "cl100k_base",
            Tokenizer::P50kBase => "p50k_base",
            Tokenizer::R50kBase => "r50k_base",
            Tokenizer::P50kEdit => "p50k_edit",
            Tokenizer::Gpt2 => "gpt2",
        };
        match tiktoken_rs::bpe_for_tokenizer(tokenizer) {
            Ok(bpe) => Counter::Tiktoken { name, bpe },
            Err(_) => Counter::Bytes,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Counter::Tiktoken { name, .. } => name,
            Counter::Bytes => "bytes/4",
        }
    }

    pub fn count(&self, text: &str) -> usize {
        match self {
            Counter::Tiktoken { bpe, .. } => bpe.count_ordinary(text),
            Counter::Bytes => text.len().div_ceil(4),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_models_use_tiktoken_and_others_bytes() {
        let c = Counter::for_model("gpt-4o");
        assert_eq!(c.name(), "o200k_base");
        assert_eq!(c.count("hello world"), 2);
        assert_eq!(Counter::for_model("openai/gpt-4").name(), "cl100k_base");
        let other = Counter::for_model("SmolLM2-135M-Instruct");
        assert_eq!(other.name(), "bytes/4");
        assert_eq!(other.count("12345678"), 2);
        assert_eq!(other.count("123456789"), 3);
    }
}
