"""Text in every script: pre-tokens bounded where words have no spaces, Latin text segmented as before,
and decode(encode(x)) == normalize(x) under each normalization, for BPE and Unigram alike."""

import json
import unicodedata
from pathlib import Path

import pytest
from conftest import write_lines
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mtkit.text.tokenizer import Tokenizer, train_tokenizer

# Real sentences (written for these tests) in the scripts that break naive tokenizers.
SCRIPT_LINES = {
    "zh": ["我们明天早上八点在火车站见面，然后一起去博物馆参观。", "这家餐厅的饺子非常好吃，价格也很便宜。"],
    "ja": [
        "東京駅から新幹線に乗って、京都までおよそ二時間半かかります。",
        "コンピューターのプログラムを書くのが好きです。",
    ],
    "th": ["ภาษาไทยเป็นภาษาที่มีวรรณยุกต์และไม่เว้นวรรคระหว่างคำในประโยค", "ฉันชอบกินข้าวเหนียวมะม่วงในฤดูร้อน"],
    "hi": ["हिन्दी देवनागरी लिपि में लिखी जाती है और इसमें संयुक्ताक्षर होते हैं।", "क्षत्रिय, ज्ञान और श्री में मात्राएँ जुड़ती हैं।"],
    "ar": ["اللغة العربية تكتب من اليمين إلى اليسار.", "مرحبا بكم في المدينة القديمة\u200f 2024"],
    "he": ["עברית נכתבת מימין לשמאל, עם מספרים כמו 123 בתוכה.", "\u200fשלום\u200e world\u200f"],
    "fa": ["می\u200cخواهم کتاب\u200cها را به کتابخانه برگردانم.", "زبان فارسی از نیم\u200cفاصله استفاده می\u200cکند."],
    "emoji": [
        "family 👨\u200d👩\u200d👧\u200d👦 and a thumbs up 👍🏽 from 🇩🇪 to 🇯🇵",
        "🏳️\u200d🌈 flags 🏴\u200d☠️ and a keycap 1️⃣ with a heart ❤️",
    ],
    "mixed": ["iPhone手机 costs ฿30,000 — это дорого! नमस्ते 😀", "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ ｶﾀｶﾅ ﬁne ½ x² Ⅻ"],
}
NO_SPACES = ("zh", "ja", "th")
LATIN = ["A dog runs on the beach.", "Zwei Männer spielen Fußball (im Park).", "Ça coûte 5 € — naïve façade!"]


@pytest.fixture(scope="module")
def script_corpus(tmp_path_factory, corpus) -> Path:
    root = tmp_path_factory.mktemp("scripts")
    lines = [line for group in SCRIPT_LINES.values() for line in group] * 20
    write_lines(root / "scripts.txt", lines + (corpus / "train.en").read_text(encoding="utf-8").splitlines())
    return root / "scripts.txt"


@pytest.fixture(scope="module", params=[(k, n) for k in ("bpe", "unigram") for n in ("nfkc", "nfc", "none")])
def script_tokenizer(request, script_corpus, tmp_path_factory) -> Tokenizer:
    kind, normalization = request.param
    path = tmp_path_factory.mktemp(f"{kind}-{normalization}") / "tokenizer.json"
    train_tokenizer(
        [script_corpus], path, vocab_size=700, kind=kind, split_punctuation=True, normalization=normalization
    )
    return Tokenizer.load(path)


def as_read(tokenizer: Tokenizer, text: str) -> str:
    """What a translated line must come back as: normalized, "▁" read as a space, stripped."""
    return tokenizer.normalize(text).replace("▁", " ").strip()


@pytest.mark.parametrize("script", SCRIPT_LINES)
def test_every_script_round_trips_under_every_normalization(script_tokenizer, script):
    lines = SCRIPT_LINES[script]
    decoded = script_tokenizer.decode_batch(script_tokenizer.encode_batch(lines))
    assert decoded == [as_read(script_tokenizer, line) for line in lines]


def test_the_normalization_is_stored_in_the_file_and_applied(script_tokenizer):
    normalizer = json.loads(script_tokenizer.json_text)["normalizer"]
    kind = normalizer["type"] if normalizer else "none"
    folded = script_tokenizer.decode_batch(script_tokenizer.encode_batch(["ﬁne ｶﾀｶﾅ e\u0301"]))[0]
    expected = {"NFKC": "fine カタカナ é", "NFC": "ﬁne ｶﾀｶﾅ é", "none": "ﬁne ｶﾀｶﾅ e\u0301"}
    assert folded == expected[kind]


@pytest.mark.parametrize("script", NO_SPACES)
def test_no_pre_token_of_a_script_without_spaces_exceeds_32_characters(script_tokenizer, script):
    pieces = [piece for line in SCRIPT_LINES[script] for piece in script_tokenizer.pre_tokens(line)]
    assert max(len(piece) for piece in pieces) <= 32
    assert len(pieces) > len(SCRIPT_LINES[script]) * 3  # not one pre-token per sentence


def test_han_is_cut_into_characters_and_kana_and_thai_into_short_runs(script_tokenizer):
    assert script_tokenizer.pre_tokens("我喜欢 东京に行きました") == [
        "▁我",
        "喜",
        "欢",
        "▁东",
        "京",
        "に",
        "行",
        "きました",
    ]
    assert script_tokenizer.pre_tokens("コンピューターを") == ["▁コンピューター", "を"]
    thai = script_tokenizer.pre_tokens("ภาษาไทยเป็นภาษาที่สวยงาม")
    assert "".join(thai) == "▁ภาษาไทยเป็นภาษาที่สวยงาม" and thai[0] == "▁ภาษาไทยเป็น"  # ten letters, the mark on ป kept


BLOCKS = [(0x4E00, 0x9FFF), (0x3041, 0x30FF), (0x0E01, 0x0E5B), (0x0E81, 0x0EDF), (0x1780, 0x17FF), (0x1000, 0x109F)]
NO_SPACE_CHARACTERS = [
    chr(c) for low, high in BLOCKS for c in range(low, high + 1) if unicodedata.category(chr(c)) != "Cn"
]
MARKS = [c for c in NO_SPACE_CHARACTERS if unicodedata.category(c).startswith("M")]
# Han, kana, Thai, Lao, Khmer and Myanmar, and often their combining marks, alone or in runs
CJK_AND_THAI = st.one_of(st.sampled_from(NO_SPACE_CHARACTERS), st.sampled_from(MARKS))


@settings(max_examples=200, deadline=None)
@given(text=st.text(CJK_AND_THAI, min_size=1, max_size=120))
@example(text="゛")  # NFKC: a space and the combining mark
@example(text="か゛き")
def test_any_run_of_han_kana_thai_lao_khmer_or_myanmar_gives_short_pre_tokens(script_tokenizer, text):
    pieces = script_tokenizer.pre_tokens(text)
    # NFKC writes some spacing marks as a space and a combining one (゛ -> " \u3099"): spaces become
    # "▁", and a text that starts with one gets no second "▁" (as SentencePiece writes it)
    spaced = script_tokenizer.normalize(text).replace(" ", "▁")
    assert "".join(pieces) == (spaced if spaced.startswith("▁") else "▁" + spaced)
    assert max(len(piece) for piece in pieces) <= 32


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from([line for group in SCRIPT_LINES.values() for line in group] + ["\u200d", "\u200c", " "]),
            st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
        ),
        max_size=6,
    )
)
def test_any_mix_of_scripts_round_trips(script_tokenizer, pieces):
    text = as_read(script_tokenizer, "".join(pieces))
    ids = script_tokenizer.encode_batch([text])[0]
    assert all(i > 3 for i in ids)
    assert script_tokenizer.decode_batch([ids])[0] == text


def test_space_delimited_text_is_segmented_as_without_script_splitting(corpus, tmp_path):
    """The script split leaves Latin text alone: the same vocabulary, the same segmentations."""
    inputs = [corpus / "train.en", corpus / "train.de"]
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    train_tokenizer(inputs, on, vocab_size=500, split_punctuation=True)
    train_tokenizer(inputs, off, vocab_size=500, split_punctuation=True, split_scripts=False)
    with_split, without = Tokenizer.load(on), Tokenizer.load(off)
    assert with_split.vocabulary() == without.vocabulary()
    lines = (corpus / "test.de").read_text(encoding="utf-8").splitlines() + LATIN
    assert with_split.encode_batch(lines) == without.encode_batch(lines)
    assert without.pre_tokens("我喜欢吃苹果") == ["▁我喜欢吃苹果"]  # the file keeps how it was trained
