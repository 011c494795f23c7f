//! The prompt of a plain completion endpoint in a model family's fill-in-the-middle template.
//! Each family was trained on its own sentinel tokens; a prompt in another family's tokens is
//! read as text and the model writes nonsense, so the family is the user's to name.

use serde::{Deserialize, Serialize};

use super::context::Context;

/// A model family's FIM template (`completion.template`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// StarCoder and StarCoder2: `<fim_prefix>…<fim_suffix>…<fim_middle>`, other files as
    /// `<file_sep>` sections (StarCoder2's repository format).
    StarCoder,
    /// Qwen2.5-Coder: `<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>`, other files as
    /// `<|file_sep|>` sections after `<|repo_name|>`.
    #[default]
    Qwen,
    /// Code Llama: `<PRE> … <SUF>… <MID>`; it has no token for other files.
    CodeLlama,
    /// DeepSeek-Coder: `<｜fim▁begin｜>…<｜fim▁hole｜>…<｜fim▁end｜>`; other files go before it as
    /// `# path` sections, its repository-level training format.
    DeepSeek,
}

/// The prompt for `cx` in `family`'s template.
pub fn prompt(family: Family, cx: &Context) -> String {
    let mut out = String::new();
    match family {
        Family::StarCoder => {
            for s in &cx.snippets {
                out.push_str(&format!("<file_sep>{}\n{}\n", s.path, s.text));
            }
            if !cx.snippets.is_empty() {
                out.push_str(&format!("<file_sep>{}\n", cx.path));
            }
            out.push_str(&format!(
                "<fim_prefix>{}<fim_suffix>{}<fim_middle>",
                cx.prefix, cx.suffix
            ));
        }
        Family::Qwen => {
            if !cx.snippets.is_empty() {
                out.push_str("<|repo_name|>workspace\n");
                for s in &cx.snippets {
                    out.push_str(&format!("<|file_sep|>{}\n{}\n", s.path, s.text));
                }
                out.push_str(&format!("<|file_sep|>{}\n", cx.path));
            }
            out.push_str(&format!(
                "<|fim_prefix|>{}<|fim_suffix|>{}<|fim_middle|>",
                cx.prefix, cx.suffix
            ));
        }
        Family::CodeLlama => {
            out.push_str(&format!("<PRE> {} <SUF>{} <MID>", cx.prefix, cx.suffix));
        }
        Family::DeepSeek => {
            for s in &cx.snippets {
                out.push_str(&format!("# {}\n{}\n", s.path, s.text));
            }
            out.push_str(&format!(
                "<｜fim▁begin｜>{}<｜fim▁hole｜>{}<｜fim▁end｜>",
                cx.prefix, cx.suffix
            ));
        }
    }
    out
}

/// Where the family's model ends a middle: sent as `stop`, and cut at again in case a
/// server ignores it.
pub fn stop_words(family: Family) -> &'static [&'static str] {
    match family {
        Family::StarCoder => &["<file_sep>", "<|endoftext|>", "<fim_prefix>"],
        Family::Qwen => &[
            "<|endoftext|>",
            "<|file_sep|>",
            "<|fim_prefix|>",
            "<|im_end|>",
        ],
        Family::CodeLlama => &["<EOT>", " <EOT>", "<PRE>"],
        Family::DeepSeek => &["<｜end▁of▁sentence｜>", "<｜fim▁begin｜>"],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::completion::context::Snippet;

    fn cx() -> Context {
        Context {
            path: "src/a.py".into(),
            prefix: "def add(a, b):\n    ".into(),
            suffix: "\n\nprint(add(1, 2))\n".into(),
            snippets: vec![Snippet {
                path: "src/b.py".into(),
                text: "X = 1".into(),
            }],
        }
    }

    #[test]
    fn each_family_puts_prefix_suffix_and_middle_in_its_order() {
        let qwen = prompt(Family::Qwen, &cx());
        assert_eq!(
            qwen,
            "<|repo_name|>workspace\n<|file_sep|>src/b.py\nX = 1\n<|file_sep|>src/a.py\n<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>"
        );
        let star = prompt(Family::StarCoder, &cx());
        assert!(
            star.ends_with(
                "<fim_prefix>def add(a, b):\n    <fim_suffix>\n\nprint(add(1, 2))\n<fim_middle>"
            ),
            "{star}"
        );
        assert!(star.starts_with("<file_sep>src/b.py\nX = 1\n"));
        let llama = prompt(Family::CodeLlama, &cx());
        assert_eq!(
            llama,
            "<PRE> def add(a, b):\n     <SUF>\n\nprint(add(1, 2))\n <MID>"
        );
        let deep = prompt(Family::DeepSeek, &cx());
        assert!(deep.starts_with("# src/b.py\nX = 1\n<｜fim▁begin｜>def add"));
        assert!(deep.ends_with("<｜fim▁hole｜>\n\nprint(add(1, 2))\n<｜fim▁end｜>"));
    }

    #[test]
    fn without_other_files_qwen_sends_the_bare_template() {
        let mut c = cx();
        c.snippets.clear();
        assert!(prompt(Family::Qwen, &c).starts_with("<|fim_prefix|>"));
    }
}
