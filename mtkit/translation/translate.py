"""Translation: text in, text out (encode, cut into pieces, batch by length, search, restore the input
order, decode). What `mtkit translate` prints of it: mtkit.translation.output."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from mtkit.core.console import warn
from mtkit.core.device import autocast, autocast_dtype, resolve_device, resolve_precision
from mtkit.core.errors import MtkitError
from mtkit.data.batching import pad_batch
from mtkit.decoding.beam import BeamStream
from mtkit.decoding.constraints import without_line_breaks
from mtkit.decoding.cuda_graphs import GraphedDecoder, check_device
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.greedy_stream import GreedyStream
from mtkit.decoding.search import MAX_SOURCE_TOKENS, Hypothesis, OnDone, SearchConfig, prefix_tensor, translate_ids
from mtkit.model.files import ModelFile
from mtkit.model.packed import cast_linear_weights, pack_linear_layers
from mtkit.text.glossary import Glossary, Term
from mtkit.text.targets import LANGUAGE_TOKENS, framing
from mtkit.text.tokenizer import EOS_ID, LINE_BREAKS, Tokenizer
from mtkit.translation.alignment import alignment_layers, cross_attention_batches, pharaoh, word_alignment
from mtkit.translation.sentences import Segmenter, segmenter_for
from mtkit.translation.terminology import line_terms, phrase_ids, piece_constraints


def one_line(prefix: str) -> str:
    """A target prefix as one line: a translation begins with it, and no translation breaks a line."""
    return "".join(" " if char in LINE_BREAKS else char for char in prefix).strip()


def without_start(hyps: list[Hypothesis], given: int) -> list[Hypothesis]:  # the search was given the first ones
    return [dataclasses.replace(h, tokens=h.tokens[given:], attention=None) for h in hyps] if given else hyps


class TextTranslator:
    """Raw lines in, n-best hypotheses out: what every engine shares on top of its _search(ids).

    An engine sets src_tokenizer, tgt_tokenizer and cfg; _search takes subword ids (no </s>), each at most
    MAX_SOURCE_TOKENS long, target prefixes (ids, or None) and an optional on_done(i, hypotheses) to call
    for each sentence as soon as it is finished (an engine may skip it), and returns each sentence's n-best.
    """

    src_tokenizer: Tokenizer
    tgt_tokenizer: Tokenizer
    model_meta: dict[str, Any] = {}  # the model file's meta: its languages and training lengths
    lines_in_pieces = 0  # lines longer than the segmenter's max_len, so far
    cfg: SearchConfig
    source_tag: int | None = None  # the id that starts every source: the target's tag (mtkit.text.targets)
    target_start: list[int] = []  # the ids every translation starts with, given: the target language's token
    _segmenter: Segmenter | None = None
    glossary: Glossary | None = None  # terms every line's translation uses where its source has theirs
    takes_constraints = False  # whether _search takes `constraints` (mtkit.decoding.lexical)
    warn_missed_terms = True  # a line cut before it held its terms named on stderr (a server answers it instead)

    def set_target(self, tgt_lang: str | None, src_lang: str | None = None) -> None:
        """The languages (mtkit.text.targets): a target's tag starts every source, where the model has tags; a
        model with language tokens (NLLB) starts sources with the source's, translations with the target's."""
        self.source_tag, self.target_start = framing(self.model_meta, self.src_tokenizer, src_lang, tgt_lang)
        self.cfg = dataclasses.replace(self.cfg, given_prefix=len(self.target_start))

    def tagged(self, rows: list[list[int]]) -> list[list[int]]:
        return rows if self.source_tag is None else [[self.source_tag, *row] for row in rows]

    @property
    def segmenter(self) -> Segmenter:
        """How lines are cut into pieces (mtkit.translation.sentences): at most the model's training length."""
        if self._segmenter is None:
            self.set_segmenter()
        return self._segmenter

    def set_segmenter(
        self, split_sentences: bool = True, max_len: int = 0, keep_spans: bool = True, recase: bool = True
    ) -> None:
        """split_sentences: translate each line sentence by sentence; max_len: the most subwords
        translated as one piece (0: the model's training data's length limit); keep_spans, recase: see
        mtkit.translation.sentences."""
        self._segmenter = segmenter_for(
            self.src_tokenizer, self.model_meta, split_sentences, max_len, keep_spans, recase
        )

    def keep_lines_whole(self) -> None:
        """Translate every line as one piece (of up to MAX_SOURCE_TOKENS subwords, its tag included):
        for a caller that cuts and tags its lines itself, and gives their targets' starts, as a server does."""
        self._segmenter = Segmenter(self.src_tokenizer, MAX_SOURCE_TOKENS)
        self.cfg = dataclasses.replace(self.cfg, given_prefix=1 if self.model_meta.get(LANGUAGE_TOKENS) else 0)

    def _search(
        self, sentences: list[list[int]], prefixes: list[list[int]] | None = None, on_done: OnDone | None = None
    ) -> list[list[Hypothesis]]:
        raise NotImplementedError

    def translate_hypotheses(
        self,
        lines: Sequence[str],
        first_line: int | Sequence[int] = 1,
        prefixes: Sequence[str] | None = None,
        on_line: Callable[[int, NbestList], None] | None = None,
        encoded: Sequence[Sequence[int]] | None = None,
        starts: Sequence[Sequence[int]] | None = None,
        terms: Sequence[Sequence[Term]] | None = None,
    ) -> list[NbestList]:
        """n-best (hypothesis, detokenized text) per line; a blank line gets no hypotheses.

        Each line is translated in the pieces of self.segmenter (one, unless the line is long or sentences
        are split), and a warning names each long line (lines count from first_line, or it lists their
        numbers). `prefixes`: per line, text every translation must begin with ("" for none; its first
        piece's). on_line(i, n-best) is called once per line, as soon as that line's translation is known
        (before the others, where the engine finishes sentences one by one). `encoded`: each line's subword
        ids, where the caller has encoded the stripped lines (a server costs its requests by them);
        `starts`: each line's given start in place of target_start (a server's requests differ in it);
        `terms`: per line, target terms its translation must contain (beside self.glossary's). A line cut
        at the length limit before it held them all is named in a warning.
        """
        segmenter = self.segmenter
        number = (lambda i: first_line + i) if isinstance(first_line, int) else first_line.__getitem__
        stripped = [line.strip() for line in lines]
        wanted = [i for i, line in enumerate(stripped) if line]
        if encoded is None:
            ids = self.src_tokenizer.encode_batch([stripped[i] for i in wanted])
        else:
            ids = [list(encoded[i]) for i in wanted]
        pieces = segmenter.pieces([stripped[i] for i in wanted], ids)
        for i, row, parts in zip(wanted, ids, pieces):
            if len(row) > segmenter.max_len:
                self.lines_in_pieces += 1
                warn(
                    f"line {number(i)}: {len(row):,} subwords, more than {segmenter.max_len:,}: "
                    f"translated in {len(parts)} pieces"
                )
        owner = [j for j, parts in enumerate(pieces) for _ in parts]  # the j-th non-blank line of each piece
        first = [0]  # the first piece of each non-blank line
        for parts in pieces:
            first.append(first[-1] + len(parts))
        given = [list(starts[i]) for i in wanted] if starts is not None else [self.target_start] * len(wanted)
        forced = [given[j] for j in owner] if any(given) else None
        if prefixes:
            encoded_prefixes = self.tgt_tokenizer.encode_batch([one_line(prefixes[i]) for i in wanted])
            forced = [given[j] + (encoded_prefixes[j] if k == first[j] else []) for k, j in enumerate(owner)]
        constraints = piece_constraints(self, stripped, wanted, pieces, terms, number) if terms or self.glossary else None  # fmt: skip
        out: list[NbestList] = [[] for _ in lines]
        found: list[NbestList | None] = [None] * len(owner)
        waiting = [len(parts) for parts in pieces]

        def finish(k: int, hyps: list[Hypothesis]) -> None:  # k: the k-th piece
            j = owner[k]
            hyps = without_start(hyps, len(given[j]))
            found[k] = list(zip(hyps, self.tgt_tokenizer.decode_batch([h.tokens for h in hyps])))
            waiting[j] -= 1
            if waiting[j] == 0:
                out[wanted[j]] = segmenter.join(found[first[j] : first[j + 1]], pieces[j])
                if self.warn_missed_terms and out[wanted[j]] and out[wanted[j]][0][0].missed_constraints:
                    warn(f"line {number(wanted[j])}: cut at the length limit before it held every term")
                if on_line:
                    on_line(wanted[j], out[wanted[j]])

        for i, line in enumerate(stripped):
            if on_line and not line:
                on_line(i, [])
        flat = self.tagged([piece for parts in pieces for piece in parts])
        extra = {"constraints": constraints} if constraints else {}
        results = self._search(flat, forced, finish if on_line else None, **extra)
        for k, hyps in enumerate(results):
            if found[k] is None:
                finish(k, hyps)
        return out

    def open_stream(self, deliver: Callable[[Any, str, NbestList], None]) -> LineStream | None:
        """A running search that lines can join between steps (see LineStream); None where the
        engine translates in whole batches only."""
        return None

    def translate(self, lines: Sequence[str]) -> list[str]:
        """The best translation of each line ("" for a blank line)."""
        return [nbest[0][1] if nbest else "" for nbest in self.translate_hypotheses(lines)]

    def translate_stream(
        self, lines: Iterable[str] | Iterable[tuple[str, str, list[Term]]], chunk_lines: int, paired: bool = False
    ) -> Iterator[tuple[str, list[tuple[Hypothesis, str]]]]:
        """Translate an endless stream in chunks, yielding (line, its n-best) in input order.
        paired: the stream holds (line, target prefix, terms) triples."""
        chunk: list = []
        first_line = 1
        for item in lines:
            chunk.append(item)
            if len(chunk) >= chunk_lines:
                yield from self._translate_chunk(chunk, first_line, paired)
                first_line += len(chunk)
                chunk = []
        if chunk:
            yield from self._translate_chunk(chunk, first_line, paired)

    def _translate_chunk(self, chunk: list, first_line: int, paired: bool):
        if not paired:
            return zip(chunk, self.translate_hypotheses(chunk, first_line))
        sources, prefixes, terms = (list(column) for column in zip(*chunk))
        found = self.translate_hypotheses(sources, first_line, prefixes if any(prefixes) else None, terms=terms)
        return zip(sources, found)


class Translator(TextTranslator):
    """A loaded model ready to translate raw lines with mtkit's own (PyTorch) search."""

    takes_constraints = True

    def __init__(
        self,
        model_file: ModelFile | Sequence[ModelFile],
        cfg: SearchConfig,
        device: str = "auto",
        precision: str = "auto",
        batch_size: int = 128,
        max_tokens: int = 8192,
        cuda_graphs: bool = False,
    ):
        """One model file, or several for an ensemble (same tokenizers; see mtkit.decoding.ensemble);
        cuda_graphs: decoding steps replayed as CUDA graphs (mtkit.decoding.cuda_graphs)."""
        cfg.validate()
        files = [model_file] if isinstance(model_file, ModelFile) else list(model_file)
        self.src_tokenizer, self.tgt_tokenizer = files[0].src_tokenizer, files[0].tgt_tokenizer
        self.model_meta = files[0].meta
        self.cfg = without_line_breaks(cfg, self.tgt_tokenizer)
        self.device = resolve_device(device)
        if cuda_graphs:
            check_device(self.device)  # before the models load
        self.precision = resolve_precision(precision, self.device)
        models = [f.build_model(self.device) for f in files]
        for model in models:
            if self.precision != "fp32":
                cast_linear_weights(model, autocast_dtype(self.precision))
            elif self.device.type == "cpu":
                pack_linear_layers(model)
        self.model = models[0] if len(models) == 1 else Ensemble(models)
        # What the search runs: the model, or the same weights decoding in CUDA graphs' static buffers.
        searchers = [GraphedDecoder(model, capture=True) for model in models] if cuda_graphs else models
        self.searcher = searchers[0] if len(searchers) == 1 else Ensemble(searchers)
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def _search(
        self,
        sentences: list[list[int]],
        prefixes: list[list[int]] | None = None,
        on_done: OnDone | None = None,
        constraints: list[list[list[int]]] | None = None,
    ) -> list[list[Hypothesis]]:
        return translate_ids(
            self.searcher, sentences, self.cfg, self.device, self.precision, self.batch_size, self.max_tokens, prefixes,
            on_done, constraints,
        )  # fmt: skip

    def open_stream(self, deliver: Callable[[Any, str, NbestList], None]) -> LineStream | None:
        if isinstance(self.model, Ensemble):
            return None
        return LineStream(self, deliver)

    def keep_attention(self) -> None:
        """Greedy searches keep each hypothesis' cross-attention (SearchConfig.attention_layers), so that
        alignments() reads it instead of running the model again; beam search and a search replayed as
        CUDA graphs do not keep it, and alignments() runs the model for theirs."""
        if self.searcher is self.model:
            self.cfg = dataclasses.replace(self.cfg, attention_layers=alignment_layers(self.model))

    def alignments(self, lines: Sequence[str], hypotheses: Sequence[Hypothesis]) -> list[str]:
        """Pharaoh-format word alignment of each translation (mtkit.translation.alignment.word_alignment), from the
        attention its hypothesis kept or read in batches, of the source as prepared; "" for a line in pieces."""
        if isinstance(self.model, Ensemble):
            raise MtkitError("--alignment needs one model, not an ensemble")
        if self.source_tag is not None:
            raise MtkitError("--alignment is not available for a model with target tags or language tokens")
        stripped = [line.strip() for line in lines]
        cuts = self.segmenter.pieces(stripped, self.src_tokenizer.encode_batch(stripped))
        src_rows = [cut[0] for cut in cuts]
        whole = [i for i, cut in enumerate(cuts) if len(cut) == 1]  # else: no one attention
        weights = {i: hypotheses[i].attention for i in whole if hypotheses[i].attention is not None}
        missing = [i for i in whole if i not in weights]
        with autocast(self.device, self.precision):
            found = cross_attention_batches(
                self.model, [src_rows[i] for i in missing], [hypotheses[i].tokens for i in missing]
            )
        weights.update(zip(missing, found))
        out, source, target = [""] * len(lines), self.src_tokenizer.id_to_token, self.tgt_tokenizer.id_to_token
        for i, cross in weights.items():
            src_tokens, tgt_tokens = [source(t) for t in src_rows[i]], [target(t) for t in hypotheses[i].tokens]
            out[i] = pharaoh(word_alignment(cross, src_tokens, tgt_tokens))
        return out


NbestList = list[tuple[Hypothesis, str]]


class LineStream:
    """Raw lines joining one running search (mtkit.decoding.beam.BeamStream), for a server:
    add(keys, lines) between steps; each step() calls deliver(key, line, n-best) for every line
    it finished. A blank line is delivered at once, with no hypotheses; a line is translated from
    its first MAX_SOURCE_TOKENS subwords. Beam 1 runs as greedy search (GreedyStream)."""

    def __init__(self, translator: Translator, deliver: Callable[[Any, str, NbestList], None]):
        self.translator, self.deliver = translator, deliver
        cfg, greedy = translator.cfg, translator.cfg.beam == 1 and not translator.cfg.sample
        self.search = (GreedyStream if greedy else BeamStream)(translator.searcher, cfg, translator.device)
        self.lines: dict[Any, tuple[str, int]] = {}  # each key's line, and its given start's length

    def add(
        self,
        keys: Sequence[Any],
        lines: Sequence[str],
        encoded: Sequence[Sequence[int]] | None = None,
        starts: Sequence[Sequence[int]] | None = None,
        terms: Sequence[Sequence[Term]] | None = None,
    ) -> None:
        """Lines join the search at the next step; `encoded`: their subword ids, where the caller has
        already encoded the stripped lines; `starts`: their translations' given starts (default: the
        translator's target_start); `terms`: target terms each line's translation must contain."""
        translator = self.translator
        encoded = encoded if encoded is not None else [None] * len(lines)
        starts = starts if starts is not None else [translator.target_start] * len(lines)
        terms = terms if terms is not None else [()] * len(lines)
        joining = [
            (key, line.strip(), ids, list(start), given)
            for key, line, ids, start, given in zip(keys, lines, encoded, starts, terms)
        ]
        for key, line, *_ in joining:
            if not line:
                self.deliver(key, line, [])
        joining = [entry for entry in joining if entry[1]]
        if not joining:
            return
        if any(ids is None for _, _, ids, *_ in joining):
            ids = translator.src_tokenizer.encode_batch([line for _, line, *_ in joining])
        else:
            ids = [list(ids) for _, _, ids, *_ in joining]
        src = pad_batch([row[:MAX_SOURCE_TOKENS] for row in translator.tagged(ids)], translator.device, suffix=EOS_ID)
        forced = prefix_tensor([start for *_, start, _ in joining], len(joining), translator.device)
        constraints = [phrase_ids(translator, line_terms(translator, line, given), 0) for _, line, *_, given in joining]
        with autocast(translator.device, translator.precision):
            self.search.add(src, [key for key, *_ in joining], forced, constraints if any(constraints) else None)
        self.lines.update((key, (line, len(start))) for key, line, _, start, _ in joining)

    def step(self) -> None:
        with autocast(self.translator.device, self.translator.precision):
            finished = self.search.step()
        for key, hyps in finished:
            line, given = self.lines.pop(key)
            hyps = without_start(hyps, given)
            texts = self.translator.tgt_tokenizer.decode_batch([h.tokens for h in hyps])
            self.deliver(key, line, list(zip(hyps, texts)))
