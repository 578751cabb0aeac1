"""The one exception type that the CLI turns into a red one-line message."""


class MtkitError(Exception):
    """An expected failure caused by the user's input, files or settings."""


DOCUMENTS_EXTRA = "pip install 'mtkit[documents]'"  # what reading documents needs (translate-file, /translate_file)
