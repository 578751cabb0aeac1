"""Terminology: positive lexical constraints in beam search (mtkit.decoding.lexical), glossaries
(mtkit.text.glossary), the translator's terms (mtkit.translation.terminology), the command line and the server."""

import gc
import unicodedata

import pytest
import torch
from conftest import random_sources, run_mtkit, tiny_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.data.batching import pad_batch
from mtkit.decoding.beam import beam_search
from mtkit.decoding.ensemble import Ensemble
from mtkit.decoding.lexical import contains
from mtkit.decoding.search import SearchConfig, search
from mtkit.model.files import load_model_file
from mtkit.serving.engine import Engine, Options, Sentence
from mtkit.serving.terms import ServerTerms, TermsError
from mtkit.text.glossary import UNSPACED_SCRIPTS, Glossary, Term, occurs, parse_glossary
from mtkit.text.tokenizer import EOS_ID
from mtkit.translation.terminology import phrase_ids
from mtkit.translation.translate import Translator

VOCAB = 40
CPU = torch.device("cpu")
LINES = ["A dog runs at the beach.", "Two children play in the park with a red ball.", "A woman sits on the grass."]


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab=VOCAB, seed=1)


@pytest.fixture(scope="module")
def translator(trained_run):
    return Translator(load_model_file(trained_run), SearchConfig(beam=4, nbest=2), device="cpu", precision="fp32")


def batch(lengths, seed):
    return pad_batch(random_sources(lengths, VOCAB, seed), CPU, suffix=EOS_ID)


# --- the search --------------------------------------------------------------------------------


def test_without_constraints_the_search_is_unchanged_bit_for_bit(model):
    src, cfg = batch([5, 9, 3, 7], seed=3), SearchConfig(beam=3, nbest=3)
    plain = beam_search(model, src, cfg)
    assert beam_search(model, src, cfg, constraints=[[], [], [], []]) == plain
    mixed = beam_search(model, src, cfg, constraints=[[], [[7, 8]], [], [[20], [30, 31]]])
    assert [mixed[0], mixed[2]] == [plain[0], plain[2]]  # the sentences without any, beside ones with
    assert contains(mixed[1][0].tokens, [7, 8]) and contains(mixed[3][0].tokens, [30, 31])


phrases = st.lists(st.integers(4, VOCAB - 1), min_size=1, max_size=3)


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sentences=st.lists(st.tuples(st.integers(1, 10), st.lists(phrases, max_size=2)), min_size=1, max_size=5),
    beam=st.integers(2, 4),
    nbest=st.integers(1, 2),
    ensemble=st.booleans(),
    seed=st.integers(0, 20),
)
def test_every_hypothesis_holds_its_phrases_in_any_batch(model, sentences, beam, nbest, ensemble, seed):
    """Each of the n-best holds every phrase of its sentence, whatever the batch, the beam and the models;
    only a hypothesis cut at the length limit may lack one, and then it says how many."""
    src = batch([n for n, _ in sentences], seed)
    constraints = [cons for _, cons in sentences]
    cfg = SearchConfig(beam=beam, nbest=min(nbest, beam), loop_ngram=0)
    decoder = Ensemble([model, tiny_model(vocab=VOCAB, seed=2)]) if ensemble else model
    for hypotheses, phrases_of in zip(beam_search(decoder, src, cfg, constraints=constraints), constraints):
        assert hypotheses
        for hypothesis in hypotheses:
            missing = sum(not contains(hypothesis.tokens, phrase) for phrase in phrases_of)
            assert hypothesis.missed_constraints == missing
            assert missing == 0 or not hypothesis.ended  # </s> only once every phrase is in
        assert hypotheses[0].missed_constraints == 0  # the limit leaves room for a few short phrases


def test_a_sentence_finds_the_same_alone_and_in_a_batch(model):
    src, cfg = batch([4, 8, 6], seed=5), SearchConfig(beam=3, loop_ngram=0)
    constraints = [[[9, 10]], [], [[11], [12, 13, 14]]]
    together = beam_search(model, src, cfg, constraints=constraints)
    for i in range(3):
        one = pad_batch([random_sources([4, 8, 6], VOCAB, 5)[i]], CPU, suffix=EOS_ID)
        assert beam_search(model, one, cfg, constraints=[constraints[i]])[0][0].tokens == together[i][0].tokens


def test_greedy_search_and_sampling_refuse_constraints(model):
    src = batch([4], seed=0)
    for cfg in (SearchConfig(beam=1), SearchConfig(beam=1, sample=True)):
        with pytest.raises(MtkitError, match="need beam search"):
            search(model, src, cfg, constraints=[[[5]]])


# --- glossaries --------------------------------------------------------------------------------


def test_a_glossary_file_is_read_with_its_lines_named():
    lines = ["# product names", "", "invoice\tRechnung", "dog\tHund ", "  # indented comment"]
    assert parse_glossary(lines, "g.tsv", None, None) == [
        Term("Rechnung", "invoice", "g.tsv line 3"),
        Term("Hund", "dog", "g.tsv line 4"),  # cells stripped
    ]
    with pytest.raises(MtkitError, match=r"^g.tsv line 2: 3 tab-separated columns, where its first line has 2$"):
        parse_glossary(["a\tb", "c\td\te"], "g.tsv", None, None)
    with pytest.raises(MtkitError, match=r"^g.tsv line 1: a source term and a target term"):
        parse_glossary(["lonely term\t"], "g.tsv", None, None)


def test_a_glossary_of_several_languages_is_read_by_its_header():
    lines = ["en\tde\tfr", "dog\tHund\tchien", "cat\t\tchat"]
    assert parse_glossary(lines, "g.tsv", "en", "fr") == [
        Term("chien", "dog", "g.tsv line 2"),
        Term("chat", "cat", "g.tsv line 3"),
    ]
    assert parse_glossary(lines, "g.tsv", "en", "de") == [Term("Hund", "dog", "g.tsv line 2")]  # an empty cell: none
    with pytest.raises(MtkitError, match=r"no column for the target language cs \(it has en, de, fr\)"):
        parse_glossary(lines, "g.tsv", "en", "cs")
    with pytest.raises(MtkitError, match="needs --src-lang and --tgt-lang"):
        parse_glossary(lines, "g.tsv", None, None)


def test_terms_are_found_on_word_boundaries_longest_first_case_insensitively():
    glossary = Glossary([Term("Katze", "cat"), Term("New York", "New York"), Term("neu", "new"), Term("Hund", "dog")])
    assert [t.target for t in glossary.terms("A cat in New York, and a new DOG.")] == [
        "Katze",
        "New York",
        "neu",
        "Hund",
    ]
    assert glossary.terms("a category of doghouses") == []  # inside longer words: no
    unspaced = Glossary([Term("cat", "猫"), Term("Bangkok", "กรุงเทพ")])  # scripts without spaces: anywhere
    assert [t.target for t in unspaced.terms("我的猫很好, ไปกรุงเทพฯ")] == ["cat", "Bangkok"]
    assert [t.target for t in glossary.terms("cat, cat and cat")] == ["Katze"]  # each term once
    strict = Glossary([Term("Hund", "Dog")], case_sensitive=True)
    assert strict.terms("a dog") == [] and strict.terms("a Dog")[0].target == "Hund"


def test_terms_are_matched_after_the_models_normalization():
    nfkc = lambda text: unicodedata.normalize("NFKC", text)  # noqa: E731
    glossary = Glossary([Term("Fisch", "ﬁsh")], nfkc)  # the "ﬁ" ligature in the glossary
    assert [t.target for t in glossary.terms("a fish swims")] == ["Fisch"]
    assert occurs(glossary.terms("a ﬁsh")[0], "one fish")


def test_a_large_glossary_adds_no_object_for_the_collector_beyond_its_terms():
    """A server keeps large glossaries: a full pass of the garbage collector walks every tracked object
    (a dict a trie node made 27,000 terms hundreds of thousands of them, tens of ms holding the interpreter)."""
    terms = [Term(f"Z{n}", f"word{n} of the house {n * 7919 % 10_007}") for n in range(5_000)]
    gc.collect()
    before = len(gc.get_objects())
    glossary = Glossary(terms)
    gc.collect()
    assert len(gc.get_objects()) - before <= len(terms) + 10  # its own Term of each, the glossary, its dicts
    assert [t.target for t in glossary.terms("A word17 of the house 4532 and word4999 OF THE HOUSE 5.")] == ["Z17"]
    assert [t.target for t in glossary.terms("word4999 of the house 9396")] == ["Z4999"]


# Letters of scripts written with spaces (a term in Chinese or Thai is found anywhere: no word boundaries there).
SPACED_LETTERS = st.characters(categories=("Ll", "Lu", "Lo")).filter(
    lambda c: not unicodedata.name(c, "").startswith(UNSPACED_SCRIPTS)
)


@settings(max_examples=100, deadline=None)
@given(
    words=st.lists(st.text(SPACED_LETTERS, min_size=1, max_size=8), min_size=1, max_size=8),
    pick=st.integers(0, 7),
)
def test_a_word_of_the_text_is_found_and_never_inside_a_longer_one(words, pick):
    word = words[pick % len(words)]
    glossary = Glossary([Term("X", word)])
    assert glossary.terms(" ".join(words)) == [Term("X", word, "", False)]
    assert glossary.terms("x" + word + "x") == [] and glossary.terms("7" + word) == []


# --- the translator and the command line -------------------------------------------------------


def test_the_translator_places_a_glossarys_terms(translator):
    plain = translator.translate(LINES)
    translator.glossary = Glossary([Term("Kater", "dog"), Term("Wiese", "grass")], translator.src_tokenizer.normalize)
    try:
        found = translator.translate(LINES)
    finally:
        translator.glossary = None
    assert "Kater" in found[0] and "Kater" not in plain[0]
    assert found[1] == plain[1]  # no term: the same translation
    assert "Wiese" in found[2]


def test_terms_reach_the_pieces_that_hold_their_source(translator):
    translator.set_segmenter(max_len=12)  # a long line in pieces
    try:
        line = f"{LINES[0]} {LINES[2]}"
        terms = [[Term("Kater", "dog", "g line 1"), Term("Wiese", "grass", "g line 2")]]
        ((best, text), _) = translator.translate_hypotheses([line], terms=terms)[0]
        assert "Kater" in text and "Wiese" in text
        with pytest.raises(MtkitError, match=r"^line 1: translated in 2 pieces, and c line 1 gives phrases"):
            translator.translate_hypotheses([line], terms=[[Term("Kater", None, "c line 1")]])
    finally:
        translator.set_segmenter()


def test_terms_the_beam_cannot_hold_or_the_model_cannot_write_are_refused(translator):
    with pytest.raises(MtkitError, match=r"^line 7: 5 terms to place, more than --beam 4 holds: raise --beam$"):
        phrase_ids(translator, [Term(w) for w in "a b c d e".split()], 7)

    class NoBytes:  # a SentencePiece vocabulary without byte fallback: <unk> for what it lacks
        def encode_batch(self, texts):
            return [[1] for _ in texts]

    class Imported:
        cfg, takes_constraints, tgt_tokenizer = SearchConfig(beam=4), True, NoBytes()

    with pytest.raises(MtkitError, match=r"^g.tsv line 3: the model's target vocabulary cannot write 'ß'$"):
        phrase_ids(Imported(), [Term("ß", "ss", "g.tsv line 3")], 1)


def test_translate_with_a_glossary_and_with_constraints(trained_run, tmp_path):
    (tmp_path / "g.tsv").write_text("# terms\ndog\tKater\n", encoding="utf-8")
    (tmp_path / "c.txt").write_text("Wiese\n\n", encoding="utf-8")
    stdin = "".join(line + "\n" for line in (LINES[0], LINES[2])).encode()
    result = run_mtkit("translate", "-m", trained_run, "--glossary", tmp_path / "g.tsv", "--constraints",
                       tmp_path / "c.txt", "--precision", "fp32", stdin=stdin)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    first, second = result.stdout.decode().splitlines()
    assert "Kater" in first and "Wiese" in first and "Kater" not in second


@pytest.mark.parametrize(
    "options, message",
    [
        (["--beam", "1"], "terms and constraints need beam search: --beam 2 or more"),
        (["--constraints", "SHORT"], "--constraints SHORT: 1 lines, fewer than the input (stdin)"),
        (["--glossary", "BAD"], "BAD line 1: a source term and a target term, separated by a tab, are needed"),
    ],
)
def test_bad_terms_get_one_line(trained_run, tmp_path, options, message):
    (tmp_path / "SHORT").write_text("Kater\n", encoding="utf-8")
    (tmp_path / "BAD").write_text("dog Kater\n", encoding="utf-8")
    (tmp_path / "g.tsv").write_text("dog\tKater\n", encoding="utf-8")
    options = [str(tmp_path / o) if o in ("SHORT", "BAD") else o for o in options]
    if "--glossary" not in options:
        options += ["--glossary", str(tmp_path / "g.tsv")]
    result = run_mtkit("translate", "-m", trained_run, *options, stdin=b"A dog runs.\nA dog sits.\n")
    stderr = result.stderr.decode()
    assert result.returncode == 1 and "Traceback" not in stderr
    assert message.replace("SHORT", str(tmp_path / "SHORT")).replace("BAD", str(tmp_path / "BAD")) in stderr


def test_evaluate_counts_the_terms_used(trained_run, corpus, tmp_path):
    (tmp_path / "g.tsv").write_text("dog\tKater\nbeach\tMeer\n", encoding="utf-8")
    result = run_mtkit("evaluate", "-m", trained_run, "--src", corpus / "test.en", "--ref", corpus / "test.de",
                       "--glossary", tmp_path / "g.tsv", "--json", "--precision", "fp32")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    import json

    report = json.loads(result.stdout)
    sources = (corpus / "test.en").read_text(encoding="utf-8").lower()
    terms = sum(line.count(" dog ") > 0 for line in sources.splitlines()) + sum(
        " beach" in line for line in sources.splitlines()
    )
    assert report["terms"] == {"score": 100.0, "signature": f"{terms} of {terms} glossary terms held, as written"}


# --- the server ----------------------------------------------------------------------------------


def test_two_requests_with_different_glossaries_share_a_batch(trained_run, translator):
    """One engine batch and one running search, each with two sentences whose terms differ."""
    terms = ServerTerms(translator.src_tokenizer, translator.tgt_tokenizer)
    cat, meadow = (terms.for_request([pair]) for pair in (["dog", "Kater"], ["dog", "Wiese"]))
    found = [terms.per_piece(g, [(0, LINES[0])], 4)[0] for g in (cat, meadow)]
    sentences = [
        Sentence(LINES[0], ids, (), t) for ids, t in zip(translator.src_tokenizer.encode_batch(LINES[:1] * 2), found)
    ]
    engine = Engine(lambda: translator)
    engine.translator = translator
    delivered = {}
    engine.translate(sentences, Options(4, 1, 0.6, False), lambda i, result: delivered.update({i: result[0][0][1]}))
    assert "Kater" in delivered[0] and "Wiese" in delivered[1] and "Kater" not in delivered[1]
    streamed = {}
    stream = engine.open_stream(Options(4, 1, 0.6, False), lambda i, result: streamed.update({i: result[0][0][1]}))
    stream.add([0, 1], sentences)
    while len(stream.stream.search):
        stream.step()
    assert streamed == delivered


def test_a_requests_glossary_is_checked_before_it_is_queued(translator):
    terms = ServerTerms(translator.src_tokenizer, translator.tgt_tokenizer, [Term("Hund", "dog", "s.tsv line 1")])
    assert [t.target for t in terms.per_piece(terms.for_request([["dog", "Kater"]]), [(0, "a dog")], 4)[0]] == ["Kater"]
    assert terms.per_piece(terms.for_request(None), [(0, "a dog")], 4)[0][0].target == "Hund"  # the server's
    with pytest.raises(TermsError, match=r"^glossary entry 1: a \[source term, target term\] pair"):
        terms.for_request([["dog", "Kater"], ["cat"]])
    with pytest.raises(TermsError, match="terms need beam search"):
        terms.per_piece(terms.glossary, [(0, "a dog")], 1)
    engine_less = ServerTerms(translator.src_tokenizer, translator.tgt_tokenizer, refused="needs --engine pytorch")
    with pytest.raises(TermsError, match="^glossary: needs --engine pytorch$"):
        engine_less.per_piece(engine_less.for_request([["dog", "Kater"]]), [(0, "a dog")], 4)


def test_a_teacher_distils_with_the_glossarys_terms(trained_run, corpus, tmp_path):
    (tmp_path / "g.tsv").write_text("dog\tKater\n", encoding="utf-8")
    out = tmp_path / "distilled.de"
    result = run_mtkit("distill", "-m", trained_run, "--src", corpus / "test.en", "-o", out, "--glossary",
                       tmp_path / "g.tsv", "--precision", "fp32", "--beam", "3")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    sources = (corpus / "test.en").read_text(encoding="utf-8").splitlines()
    translations = out.read_text(encoding="utf-8").splitlines()
    with_dog = [t for s, t in zip(sources, translations) if "dog" in s.lower().split()]
    assert with_dog and all("Kater" in t for t in with_dog)
    assert not any("Kater" in t for s, t in zip(sources, translations) if "dog" not in s.lower())


def test_a_line_cut_before_its_terms_is_named_on_stderr(trained_run, tmp_path):
    (tmp_path / "g.tsv").write_text("dog\tRiesenschnauzerhundehütte\n", encoding="utf-8")
    result = run_mtkit("translate", "-m", trained_run, "--glossary", tmp_path / "g.tsv", "--max-len-a", "0",
                       "--max-len-b", "2", "--precision", "fp32", stdin=b"A woman sits.\nA dog runs.\n")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == 2
    assert "line 2: cut at the length limit before it held every term" in result.stderr.decode()
    assert "line 1:" not in result.stderr.decode()


def test_constraints_hold_after_a_forced_prefix(model):
    """A target prefix (an NLLB model's language token, or a user's prefix) comes first, the phrases after it."""
    from mtkit.decoding.search import prefix_tensor

    src = batch([6, 4], seed=7)
    forced = prefix_tensor([[5, 6], [9]], 2, CPU)
    cfg = SearchConfig(beam=3, loop_ngram=0, given_prefix=1)
    found = beam_search(model, src, cfg, forced, constraints=[[[20, 21]], [[30], [31]]])
    for hypotheses, prefix, phrases_of in zip(found, ([5, 6], [9]), ([[20, 21]], [[30], [31]])):
        assert hypotheses[0].tokens[: len(prefix)] == prefix
        assert all(contains(hypotheses[0].tokens[len(prefix) :], phrase) for phrase in phrases_of)


def targets_by_one_expression(glossary: Glossary, text: str) -> list[str]:
    """The reference: the glossary's source terms as one regular expression, the longest alternatives
    first (how glossaries were matched before the trie), scanned from the left; each match's target,
    each once."""
    from mtkit.text.glossary import _pattern

    pattern = _pattern([term.source for term in glossary.entries.values()], glossary.case_sensitive)
    key = (lambda s: s) if glossary.case_sensitive else str.lower
    matched = [] if pattern is None else [glossary.entries[key(m.group(0))].target for m in pattern.finditer(text)]
    return list(dict.fromkeys(matched))


TERM_CHARS = st.sampled_from(list("abAB ab-1_") + ["東", "京", "ก"])


@settings(max_examples=300, deadline=None)
@given(
    sources=st.lists(st.text(TERM_CHARS, min_size=1, max_size=5).map(str.strip).filter(bool), min_size=1, max_size=12),
    data=st.data(),
    case_sensitive=st.booleans(),
)
def test_the_trie_finds_what_one_expression_of_every_term_finds(sources, data, case_sensitive):
    """Any terms (overlapping, nested, in scripts with and without spaces) in a text of them and other
    characters: the same terms, in the same order, as the longest-first alternation of all of them."""
    joined = st.tuples(st.sampled_from(sources), st.sampled_from([" ", "-", ""]), st.sampled_from(sources))
    sources = sources + ["".join(parts).strip() for parts in data.draw(st.lists(joined, max_size=4))]  # nested terms
    pieces = data.draw(st.lists(st.one_of(st.sampled_from(sources), TERM_CHARS, TERM_CHARS), max_size=20))
    text = "".join(pieces)
    glossary = Glossary([Term(f"T{n}", source) for n, source in enumerate(sources)], case_sensitive=case_sensitive)
    assert [term.target for term in glossary.terms(text)] == targets_by_one_expression(glossary, text)
