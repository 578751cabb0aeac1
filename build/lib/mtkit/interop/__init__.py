"""Other toolkits' formats: export to Hugging Face and CTranslate2, import from MarianMT, and the
engine a command translates with."""
