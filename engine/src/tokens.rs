//! Token counting with a real BPE tokenizer: OpenAI's o200k (via `bpe-openai`, compiled in, no
//! network). Prompt sizes in strata are o200k counts; a per-model-family factor (configured by
//! the adapters) turns them into estimates for other tokenizers.

/// Identifier of the tokenizer, recorded wherever counts are recorded.
pub const TOKENIZER_ID: &str = "o200k_base";

/// Number of o200k tokens in `text`.
pub fn count(text: &str) -> usize {
    bpe_openai::o200k_base().count(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_real_bpe_counts() {
        // Golden values from the o200k_base vocabulary.
        assert_eq!(count(""), 0);
        assert_eq!(count("Hello, world!"), 4);
        assert!(count(&"strata ".repeat(100)) >= 100);
    }
}
