"""What people type: spans kept character for character (mtkit.text.spans), ALL CAPS and Title Case
translated in sentence case and cased again (mtkit.text.casing), several sentences in a line, and the
spelling guard (mtkit.decoding.constraints.SpellingGuard).

Engines that copy or reverse their source make every step visible: whatever an engine does with the
stand-ins, each span comes back exactly, and a line's sentences all come back, in order.
"""

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import TINY_TRAIN, run_mtkit
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.decoding.constraints import SpellingGuard, constrain
from mtkit.decoding.search import Hypothesis, SearchConfig
from mtkit.model.files import load_model_file
from mtkit.text.augment import MIN_DICE, Augmentation, spans, title, typos, upper, word_translations
from mtkit.text.casing import TITLE, UPPER, casing_of, recase, sentence_case
from mtkit.text.sentence_splitter import SentenceSplitter
from mtkit.text.spans import find_spans, invented_spans, mask
from mtkit.text.tokenizer import Tokenizer
from mtkit.translation.sentences import segmenter_for
from mtkit.translation.translate import TextTranslator, Translator


class EchoTranslator(TextTranslator):
    """Translates each piece into its source's text, or that text with its words in reverse order."""

    def __init__(self, tokenizer: Tokenizer, reverse: bool = False, drop_digits: bool = False):
        self.src_tokenizer = self.tgt_tokenizer = tokenizer
        self.model_meta = {"src_lang": "en", "tgt_lang": "de"}
        self.reverse, self.drop_digits = reverse, drop_digits
        self.seen: list[str] = []

    def _search(self, sentences, prefixes=None, on_done=None):
        texts = self.src_tokenizer.decode_batch(sentences)
        self.seen += texts
        out = []
        for text in texts:
            words = text.split()[::-1] if self.reverse else text.split()
            if self.drop_digits:  # an engine that loses every stand-in
                words = [w for w in words if not re.fullmatch(r"[\d.,]+|[XYZQWKJV][.,]?", w)]
            out.append(" ".join(words))
        return [[Hypothesis(ids, -1.0, -1.0)] for ids in self.tgt_tokenizer.encode_batch(out)]


@pytest.fixture(scope="module")
def tokenizer(tokenizer_path) -> Tokenizer:
    return Tokenizer.load(tokenizer_path)


SPAN_EXAMPLES = {
    "A dog runs on the beach at 7:45 in 2019.": ["7:45", "2019"],
    "About 1,250 people watch a concert.": ["1,250"],
    "A man writes to anna.berg@example.com on a laptop.": ["anna.berg@example.com"],
    "A sign says https://example.org/a?b=1 in red.": ["https://example.org/a?b=1"],
    "Call +49 30 1234567 or (555) 123-4567, it costs $5.99 or 12,50 €.": [
        "+49 30 1234567", "(555) 123-4567", "$5.99", "12,50 €",
    ],
    "Run `ls -la` in /usr/local/bin and ~/notes.txt or C:\\Users\\me\\a.txt.": [
        "`ls -la`", "/usr/local/bin", "~/notes.txt", "C:\\Users\\me\\a.txt",
    ],
    "Hello %s, you have {count} new {{kind}} messages (%(n)d, %1$d, %{name}, ${user}).": [
        "%s", "{count}", "{{kind}}", "%(n)d", "%1$d", "%{name}", "${user}",
    ],
    "We met on 2024-03-01, 1.3.2024 and 12/24/2020 at 50% 🙂 👍🏽 🇩🇪.": [
        "2024-03-01", "1.3.2024", "12/24/2020", "50%", "🙂", "👍🏽", "🇩🇪",
    ],
}  # fmt: skip


@pytest.mark.parametrize("text", SPAN_EXAMPLES)
def test_spans_are_found_whole_and_nothing_else(text):
    assert [span.text for span in find_spans(text)] == SPAN_EXAMPLES[text]


def test_words_and_sentence_ends_are_not_spans():
    assert find_spans("A man and/or a dog, e.g. Mr. Smith, walk.") == []
    assert [s.text for s in find_spans("See https://example.org/a_(b). Then www.x.de, ok")] == [
        "https://example.org/a_(b)",
        "www.x.de",
    ]


def test_a_masked_text_holds_stand_ins_the_text_did_not_and_restores_exactly():
    masked = mask("I saw 2 dogs at 7:45 and wrote to a@b.de")
    assert masked.text == "I saw 1 dogs at 3 and wrote to 4"  # "2" is the text's own: never a stand-in
    assert masked.restore("Ich sah 1 Hunde um 3 und schrieb 4") == "Ich sah 2 Hunde um 7:45 und schrieb a@b.de"


def test_a_stand_in_the_translation_lost_goes_back_at_its_share_of_the_words():
    masked = mask("A dog runs at 7:45 on the beach.")
    assert masked.text == "A dog runs at 1 on the beach."
    assert masked.restore("Ein Hund rennt am Strand.") == "Ein Hund rennt 7:45 am Strand."
    assert mask("It costs 5.").restore("Es kostet.") == "Es kostet 5."


def test_a_stand_in_the_model_wrote_twice_is_one_span():
    masked = mask("It costs $5.99, see https://example.org.")
    assert masked.text == "It costs 1, see 2."
    assert masked.restore("Es kostet 1,1, siehe 2 2.") == "Es kostet $5.99, siehe https://example.org."


def test_numbers_the_model_made_of_stand_ins_are_dropped_and_its_own_kept():
    masked = mask("A dog runs at 7:45 with 3 cats.")
    assert masked.text == "A dog runs at 1 with 2 cats."
    assert masked.restore("Ein Hund rennt um 10 1 mit 2 Katzen.") == "Ein Hund rennt um 7:45 mit 3 Katzen."
    assert masked.restore("10 Hunde rennen um 1 mit 2,1 und 40 Katzen.") == "Hunde rennen um 7:45 mit 3 und 40 Katzen."


def test_a_span_put_back_never_reads_as_another_stand_in():
    masked = mask("From 1,2 to 3 and 4")
    assert masked.restore(masked.text) == "From 1,2 to 3 and 4"


SPAN_VALUES = st.sampled_from(
    ["7:45", "2019", "1,250", "$5.99", "12,50 €", "https://example.org/a?b=1", "anna@example.com", "%s", "{name}",
     "{{count}}", "%(n)d", "`x = 1`", "/usr/bin/env", "🙂", "+49 30 1234567", "2024-03-01", "50%", "3.5"]
)  # fmt: skip
WORDS = st.sampled_from(["a", "dog", "runs", "on", "the", "beach", "with", "two", "Men", "and", "see", "it"])


@given(st.lists(st.one_of(WORDS, SPAN_VALUES), min_size=1, max_size=14), st.booleans())
@settings(max_examples=200, deadline=None)
def test_any_text_keeps_every_span_through_copying_and_reversing_engines(tokenizer, parts, reverse):
    text = " ".join(parts) + "."
    spans = [span.text for span in find_spans(text)]
    translator = EchoTranslator(tokenizer, reverse=reverse)
    (out,) = translator.translate([text])
    for span in spans:
        assert out.count(span) >= spans.count(span)
    if not reverse:
        assert out == text


@given(st.lists(st.one_of(WORDS, SPAN_VALUES), min_size=1, max_size=10))
@settings(max_examples=100, deadline=None)
def test_spans_come_back_even_where_the_engine_loses_every_stand_in(tokenizer, parts):
    text = " ".join(parts) + "."
    (out,) = EchoTranslator(tokenizer, drop_digits=True).translate([text])
    for span in find_spans(text):
        assert span.text in out


def test_no_keep_spans_gives_the_model_the_text_as_it_is(tokenizer):
    translator = EchoTranslator(tokenizer)
    translator.set_segmenter(keep_spans=False)
    translator.translate(["It is 7:45."])
    assert translator.seen == ["It is 7:45."]


@pytest.mark.parametrize(
    ("text", "casing", "model_text"),
    [
        ("TWO MEN ARE PLAYING SOCCER IN A PARK.", UPPER, "Two men are playing soccer in a park."),
        ("Two Men Are Playing Soccer In A Park.", TITLE, "Two men are playing soccer in a park."),
        ("I THINK I SAW A DOG.", UPPER, "I think I saw a dog."),
        ("Two men play soccer in Berlin.", None, "Two men play soccer in Berlin."),
        ("NASA", None, "NASA"),
        ("The USA and NATO meet.", None, "The USA and NATO meet."),
        ("Hello World", None, "Hello World"),  # two words: a name as likely as a heading
        ("a Men Men Men.", None, "a Men Men Men."),  # a small word: not Title Case
        ("TWO MEN IN a PARK", None, "TWO MEN IN a PARK"),  # nor ALL CAPS
    ],
)
def test_casing_is_found_and_the_model_gets_sentence_case(text, casing, model_text):
    assert casing_of(text) == casing
    assert sentence_case(text, casing, "en") == model_text


def test_a_german_line_of_capitalised_words_is_left_as_written():
    assert casing_of("Guten Morgen Liebe Freunde.", "de") is None and casing_of("GUTEN MORGEN BERLIN", "de") == UPPER
    assert casing_of("Guten Morgen Liebe Freunde.", "en") == TITLE


def test_translations_are_cased_as_their_sources_were():
    assert recase("Zwei Männer spielen Fußball in einem Park.", UPPER) == "ZWEI MÄNNER SPIELEN FUSSBALL IN EINEM PARK."
    assert recase("Zwei Männer spielen Fußball in einem Park.", TITLE) == "Zwei Männer Spielen Fußball In Einem Park."
    assert recase("l'homme d'affaires", TITLE) == "L'homme D'affaires"


def test_a_shouted_line_reaches_the_model_in_sentence_case_and_comes_back_shouted(tokenizer):
    translator = EchoTranslator(tokenizer)
    out = translator.translate(["A DOG RUNS AT 7:45. IT IS HAPPY!", "Two Men Sit On A Bench At Home."])
    assert translator.seen == ["A dog runs at 1.", "It is happy!", "Two men sit on a bench at home."]
    assert out == ["A DOG RUNS AT 7:45. IT IS HAPPY!", "Two Men Sit On A Bench At Home."]


def test_every_sentence_of_a_line_is_translated_by_default(tokenizer):
    translator = EchoTranslator(tokenizer)
    line = "A dog runs on the beach. It is happy. A man watches it."
    assert translator.translate([line]) == [line]
    assert translator.seen == ["A dog runs on the beach.", "It is happy.", "A man watches it."]
    translator.set_segmenter(split_sentences=False)
    translator.seen = []
    translator.translate([line])
    assert translator.seen == [line]


SENTENCES = st.lists(
    st.lists(WORDS, min_size=1, max_size=8).map(lambda words: " ".join(words).capitalize() + "."),
    min_size=1,
    max_size=5,
)


@given(SENTENCES)
@settings(max_examples=100, deadline=None)
def test_sentences_split_then_joined_give_back_the_line(tokenizer, sentences):
    line = " ".join(sentences)
    assert " ".join(SentenceSplitter("en").split(line)) == line
    assert EchoTranslator(tokenizer).translate([line]) == [line]


def test_a_cut_knows_its_sentences_and_restores_each(tokenizer):
    segmenter = segmenter_for(tokenizer, {"src_lang": "en", "tgt_lang": "de"})
    (cut,) = segmenter.pieces(["IT IS 5 PM. See a@b.de now."], [tokenizer.encode_batch(["x"])[0]])
    assert [s.text for s in cut.sentences] == ["It is 1 pm.", "See 2 now."]
    translations = [[(Hypothesis([7], -1.0, -1.0), "ES IST 1 UHR.")], [(Hypothesis([8], -1.0, -1.0), "Siehe 2 jetzt.")]]
    ((hypothesis, text),) = segmenter.join(translations, cut)
    assert text == "ES IST 5 UHR. Siehe a@b.de jetzt." and hypothesis.tokens == [7, 8]


GUARD_VOCAB = ["<pad>", "<unk>", "<s>", "</s>", "▁M", "E", "EE", "G", "▁Iro", "kes", "en", "schen", "▁ein", "e", "f",
               "▁Kaffee", ".", "<0xC3>"]  # fmt: skip


def banned_after(history: list[int]) -> list[str]:
    guard = SpellingGuard.of(GUARD_VOCAB)
    lprobs = torch.zeros(1, len(GUARD_VOCAB))
    out = constrain(lprobs, torch.tensor([len(history)]), torch.tensor([history]), 0, (), 0, (4, 2), guard)
    return [GUARD_VOCAB[i] for i in range(4, len(GUARD_VOCAB)) if out[0, i].isneginf()]


@pytest.mark.parametrize(
    ("history", "banned"),
    [
        ([4, 5, 5], ["EE"]),  # "MEE": a third E is allowed, a fourth is not
        ([4, 5, 6], ["E", "EE", "en", "e"]),  # "MEEE", case-insensitive
        ([15], ["EE"]),  # "Kaffee"
        ([8, 9, 10, 11, 11], ["schen"]),  # a third "schen" in one word
        ([8, 11, 11, 12, 11], []),  # a new word counts afresh
        ([17, 17, 17, 17], []),  # byte tokens are neither letters nor counted subwords
    ],
)
def test_the_spelling_guard_bans_a_fourth_letter_and_a_third_subword_in_a_word(history, banned):
    assert banned_after(history) == banned


def test_the_spelling_guard_is_off_with_the_loop_guard():
    guard = SpellingGuard.of(GUARD_VOCAB)
    lprobs = torch.zeros(1, len(GUARD_VOCAB))
    out = constrain(lprobs, torch.tensor([3]), torch.tensor([[4, 5, 6]]), 0, (), 0, (0, 0), guard)
    assert not out[0, 4:].isneginf().any()


# --- training pairs as people write them (mtkit.text.augment) ----------------------------------------


def test_augmentation_shares_are_parsed_and_bad_ones_named():
    parsed = Augmentation.parse("upper=0.05, title=0.1,spans=0.2")
    assert (parsed.upper, parsed.title, parsed.typos, parsed.spans, parsed.short) == (0.05, 0.1, 0.0, 0.2, 0.0)
    assert not Augmentation.parse("").active and parsed.active
    for bad, named in [
        ("shout=0.1", "the kinds are"),
        ("upper=lots", "give a share"),
        ("upper=0.7,title=0.5", "at most 1"),
    ]:
        with pytest.raises(MtkitError, match=named):
            Augmentation.parse(bad)


PAIRS = [
    ("A man in a red shirt runs.", "Ein Mann in einem roten Hemd läuft."),
    ("Two dogs play.", "Zwei Hunde spielen."),
]


def test_each_kind_of_copy_writes_the_pair_as_people_do():
    rng = random.Random(0)
    assert upper(*PAIRS[0], rng) == ("A MAN IN A RED SHIRT RUNS.", "EIN MANN IN EINEM ROTEN HEMD LÄUFT.")
    assert title(*PAIRS[0], rng) == ("A Man In A Red Shirt Runs.", "Ein Mann In Einem Roten Hemd Läuft.")
    src, tgt = typos(*PAIRS[0], rng)
    assert tgt == PAIRS[0][1] and src != PAIRS[0][0] and src[0] == "A" and src.endswith("s.")
    for seed in range(50):
        src, tgt = spans(*PAIRS[1], random.Random(seed))
        added = [s.text for s in find_spans(src)]
        assert len(added) == 1 and added == [s.text for s in find_spans(tgt)], (src, tgt)
        assert " ".join(src.replace(added[0], "").split()).replace(" .", ".") == PAIRS[1][0]
        assert src.startswith(added[0] + " ") or src.endswith(f" {added[0]}.")


def test_copies_are_drawn_from_the_pair_s_position_at_their_shares():
    pairs = PAIRS * 2000
    augmentation = Augmentation(upper=0.1, spans=0.05, seed=3)
    copies = augmentation.copies(pairs, first=0)
    assert copies == augmentation.copies(pairs, first=0)  # the same corpus gives the same copies
    kinds = Counter(kind for _, kind, _, _ in copies)
    assert 340 <= kinds["upper"] <= 460 and 150 <= kinds["spans"] <= 250 and set(kinds) == {"upper", "spans"}
    assert copies != Augmentation(upper=0.1, spans=0.05, seed=4).copies(pairs, first=0)


def test_word_translations_are_read_off_the_corpus_and_taught_alone(corpus):
    pairs = list(zip((corpus / "train.en").read_text().splitlines(), (corpus / "train.de").read_text().splitlines()))
    lexicon = word_translations(pairs, min_dice=MIN_DICE)
    assert lexicon["dog"] == "hund" and lexicon["woman"] == "frau" and lexicon["park"] == "park"
    copies = Augmentation(short=1.0).copies(pairs[:50], 0, lexicon)
    assert len(copies) >= 40
    for i, kind, src, tgt in copies:
        assert kind == "short" and src in re.findall(r"\w+", pairs[i][0]) and tgt in re.findall(r"\w+", pairs[i][1])
        assert lexicon[src.lower()] == tgt.lower()


def test_preprocess_adds_the_copies_and_counts_them(corpus, tokenizer_path, tmp_path):
    result = run_mtkit("preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--tokenizer", tokenizer_path,
                       "-o", tmp_path / "bin", "--augment", "upper=0.1,title=0.1,typos=0.1,spans=0.1,short=0.1")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    manifest = json.loads((tmp_path / "bin" / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    added = sum(train["augmented"].values())
    assert set(train["augmented"]) == {"upper", "title", "typos", "spans", "short"} and 120 <= added <= 200
    assert train["kept"] == 400 + added and manifest["augmentation"]["short"] == 0.1
    assert f"kept 400 of 400 pairs (dropped: none); added {added:,} augmented copies" in result.stderr.decode()
    bad = run_mtkit("preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--tokenizer", tokenizer_path,
                    "-o", tmp_path / "bad", "--augment", "upper=2")  # fmt: skip
    assert bad.returncode == 1 and "Traceback" not in bad.stderr.decode()
    assert bad.stderr.decode().strip().splitlines() == [
        "error: --augment upper=2: each share in [0, 1], and at most 1 in all"
    ]
    assert not (tmp_path / "bad").exists()


# --- a model trained with the augmentation, on the inputs a newcomer types first ------------------------

NEWCOMER_LINES = [
    "A dog runs on the beach. It is happy. A man watches it.",
    "A dog runs on the beach at 7:45 in 2019.",
    "About 1,250 people watch a concert.",
    "A man writes to anna.berg@example.com on a laptop.",
    "A sign says https://example.org/a?b=1 in red.",
    "TWO MEN ARE PLAYING SOCCER IN A PARK.",
    "Two Men Are Playing Soccer In A Park.",
    "yes",
    "OK",
    "never",
]


@pytest.fixture(scope="module")
def augmented_run(corpus, tmp_path_factory) -> Path:
    """A tiny model trained on the corpus with every kind of copy added (60 updates, fp32)."""
    root = tmp_path_factory.mktemp("augmented")
    tokenizer = root / "tokenizer.json"
    steps = [
        ("train-tokenizer", "-i", corpus / "train.en", "-i", corpus / "train.de", "-o", tokenizer, "--vocab-size", "500"),
        ("preprocess", "-s", "en", "-t", "de", "--train", corpus / "train", "--valid", corpus / "valid",
         "--tokenizer", tokenizer, "-o", root / "bin", "--augment", "upper=0.1,title=0.1,typos=0.05,spans=0.1,short=0.05"),
        ("train", "-d", root / "bin", "-o", root / "run", *TINY_TRAIN, "--set", "train.max_steps=60",
         "--set", "train.precision=fp32"),
    ]  # fmt: skip
    for step in steps:
        result = run_mtkit(*step)
        assert result.returncode == 0, result.stderr.decode()
    return root / "run"


def test_what_a_newcomer_types_first_keeps_its_spans_and_sentences_and_no_letter_loops(augmented_run):
    result = run_mtkit(
        "translate", "-m", augmented_run, "--precision", "fp32", stdin="\n".join(NEWCOMER_LINES).encode()
    )
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode().splitlines()
    assert len(out) == len(NEWCOMER_LINES)
    for line, translation in zip(NEWCOMER_LINES, out):
        for span in find_spans(line):
            assert translation.count(span.text) == 1, (line, translation)
        assert not re.search(r"([^\W\d_])\1{3}", translation, re.IGNORECASE), translation
    assert out[5] == out[5].upper()  # shouted back
    assert all(word[0].isupper() for word in re.findall(r"[^\W\d_]+", out[6]))  # in Title Case


CONFUSING_LINES = ["Tom &amp; Jerry run.", "A &lt;b&gt; tag.", "I wasn't able to attend the meeting due to illness.",
                   "A man with X11X dogs walks", "Anna writes to her friend.", "A DOG RUNS. A CAT SLEEPS!",
                   "Why? Because... (maybe).", "Rock 'n' roll -- all night!", "The man at the gate.", "Hello, World!"]  # fmt: skip


def test_a_model_trained_with_span_copies_writes_no_span_its_source_lacks(augmented_run):
    """The copies teach the model to write spans: where the input has none, or others, the output
    holds none that the input lacks, and each of its own exactly once."""
    translator = Translator(load_model_file(augmented_run), SearchConfig(beam=2), "cpu", "fp32")
    lines = CONFUSING_LINES + [f"{line} at 7:45, see {{name}} or a@b.de" for line in CONFUSING_LINES]
    out = translator.translate(lines)
    assert [invented_spans(o, line) for o, line in zip(out, lines)] == [[]] * len(lines)
    assert all(o.count("7:45") == o.count("a@b.de") == o.count("{name}") == 1 for o in out[len(CONFUSING_LINES) :]), out


def test_every_sentence_of_a_line_reaches_the_trained_model(augmented_run):
    translator = Translator(load_model_file(augmented_run), SearchConfig(beam=2, max_len_b=20), "cpu", "fp32")
    searched = []
    search = translator._search
    translator._search = lambda sentences, *args, **kwargs: (
        searched.extend(sentences) or search(sentences, *args, **kwargs)
    )
    translator.translate(NEWCOMER_LINES[:1])
    texts = translator.src_tokenizer.decode_batch(searched)
    assert texts == ["A dog runs on the beach.", "It is happy.", "A man watches it."]


def _network_namespace() -> str | None:
    """Why a test cannot switch the network off here, or None where `unshare -n` can (as root)."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return "switching the network off needs root, unshare and ip (iproute2)"
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return "unshare -n is refused here (no network namespaces)"
    return None


OFFLINE_SERVE = """
import json, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_serve import Server
server = Server({model!r}, Path({log!r}), "--in-process")
try:
    answer = server.post("/translate", json={{"q": {lines!r}, "source": "en", "target": "de"}})
    print(json.dumps(answer.json()["translatedText"]))
finally:
    server.stop()
"""


def test_translation_and_serving_work_with_the_network_switched_off(trained_run, tmp_path):
    """Offline means offline: in a network namespace of its own, with only loopback up, `translate`
    and a server answer what they answer with the network on."""
    if why := _network_namespace():
        pytest.skip(why)
    lines = NEWCOMER_LINES[:5]
    stdin = "".join(line + "\n" for line in lines).encode()
    expected = run_mtkit("translate", "-m", trained_run, "--precision", "fp32", stdin=stdin).stdout.decode()
    command = [sys.executable, "-m", "mtkit", "translate", "-m", str(trained_run), "--precision", "fp32"]
    offline = subprocess.run(["unshare", "-n", *command], input=stdin, capture_output=True)
    assert offline.returncode == 0, offline.stderr.decode()
    assert offline.stdout.decode() == expected and len(expected.splitlines()) == 5
    script = OFFLINE_SERVE.format(tests=str(Path(__file__).parent), model=str(trained_run),
                                  log=str(tmp_path / "serve.log"), lines=lines)  # fmt: skip
    inner = f"ip link set lo up && exec {shlex.quote(sys.executable)} -c {shlex.quote(script)}"
    served = subprocess.run(["unshare", "-n", "sh", "-c", inner], capture_output=True)
    assert served.returncode == 0, served.stderr.decode()[-3000:]
    assert json.loads(served.stdout.decode()) == expected.splitlines()
