"""Lines of raw text: the subword tokenizer, and what cleaning, deduplication, language
identification and target-language tags make of them."""
