"""Other services' APIs on mtkit's translation service: DeepL's v2 (deepl) and LibreTranslate's (libretranslate)."""
