"""Files people translate (office documents, subtitles, message catalogues, Markdown, e-books) as segments of text with inline codes for their formatting, and the files again from the segments' translations."""

DOCUMENTS_EXTRA = "pip install 'mtkit[documents]'"  # what a missing reader of this stage asks for
