"""Translation memories: stored translations of sentences, found again exactly or nearly (fuzzy
matches), as CAT tools, Weblate and DeepL keep them."""
