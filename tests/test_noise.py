"""preprocess's noise filters (--langid, --min-script-share, --drop-copies, --check-numbers): what
each drops and keeps, their counts in the report, and scripts without spaces kept by every default."""

import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import synthetic_pairs, write_lines
from typer.testing import CliRunner

from mtkit.cli import app
from mtkit.text.cleaning import CleaningRules, noise_reason
from mtkit.text.langid import identify, numbers, script_of, script_share

pytest.importorskip("py3langid")

ALL_ON = CleaningRules(langid=True, min_script_share=0.5, drop_copies=True, check_numbers=True)
CJK_PAIRS = [  # (zh, en), (ja, en), (th, en): no spaces between words on one side
    ("我们明天早上8点在火车站见面。", "We meet at the station at 8 tomorrow morning."),
    ("这家餐厅的饺子非常好吃。", "The dumplings in this restaurant are delicious."),
    ("東京駅から新幹線に乗りました。", "I took the bullet train from Tokyo station."),
    ("ภาษาไทยเป็นภาษาที่มีวรรณยุกต์", "Thai is a tonal language."),
]


def test_scripts_of_letters_and_shares_of_a_language_s_script():
    assert [script_of(c) for c in "aßЖ中あカーｶ々한ก"] == [
        "LATIN", "LATIN", "CYRILLIC", "CJK", "HIRAGANA", "KATAKANA", "KATAKANA", "KATAKANA", "CJK", "HANGUL", "THAI",
    ]  # fmt: skip
    assert script_share("Ein Hund läuft.", "de") == 1.0
    assert script_share("Собака bellt", "de") == 5 / 11
    assert script_share("東京に行きます", "ja") == 1.0 and script_share("123 !", "zh") == 1.0
    assert script_share("iPhone手机", "zh") == 2 / 8


def test_numbers_are_compared_by_value_in_any_digits():
    assert numbers("3 Hunde und 12 Katzen, 3 Mäuse") == Counter({3: 2, 12: 1})
    assert numbers("٣ dogs and １２ cats") == numbers("3 Hunde, 12 Katzen")


@pytest.mark.parametrize(
    ("src", "tgt", "reason"),
    [
        ("A dog runs.", "a  DOG runs.", "copy"),
        ("Two dogs run in 2 parks.", "Zwei Hunde laufen in 3 Parks.", "numbers"),
        ("A dog runs on the beach.", "Собака бежит по пляжу.", "script"),
        ("A dog runs on the beach.", "Un chien court sur la plage.", "language"),
        ("A dog runs on the beach.", "Pes běží po pláži.", "language"),
        ("Un chien court sur la plage.", "Ein Hund läuft am Strand.", "language"),
        ("A dog runs on the beach with 2 balls.", "Ein Hund läuft mit 2 Bällen am Strand.", None),
        ("Here are 2 moms listening to a toddler.", "Hier sind zwei Mütter, die einem Kind zuhören.", None),
    ],
)
def test_each_filter_drops_its_kind_of_noise(src, tgt, reason):
    assert noise_reason((src, tgt), ("en", "de"), ALL_ON) == reason


@pytest.mark.parametrize(("text", "english"), CJK_PAIRS)
def test_scripts_without_spaces_pass_every_filter(text, english):
    lang = identify(text)[0]
    assert lang in ("zh", "ja", "th")
    assert noise_reason((text, english), (lang, "en"), ALL_ON) is None


def test_identification_among_given_languages_takes_the_likeliest_of_them():
    czech = "Malý chlapec skáče do vody."  # a Multi30k caption: Slovak, by a little, among every language
    assert identify(czech)[0] == "sk"
    lang, probability = identify(czech, among=("cs", "de", "en", "fr"))
    assert lang == "cs" and probability > 0.99
    assert identify(czech)[0] == "sk"  # the restricted identifier is one of its own


def test_the_report_counts_what_each_filter_dropped(tmp_path, tokenizer_path):
    clean = synthetic_pairs(60, seed=3)
    noise = [
        ("A dog runs in the park.", "A dog runs in the park."),  # copy
        ("Three men sit on 4 chairs.", "Drei Männer sitzen auf 5 Stühlen."),  # numbers
        ("A girl plays on the grass.", "Девочка играет на траве."),  # script
        ("A man waits on the street.", "Un homme attend dans la rue."),  # language: French
        ("A boy jumps near the water.", "Chlapec skáče u vody."),  # language: Czech
    ]
    pairs = clean[:30] + noise + clean[30:]
    for side, lang in enumerate(("en", "de")):
        write_lines(tmp_path / f"noisy.{lang}", [pair[side] for pair in pairs])
    # --max-ratio 0: the Cyrillic line, in byte tokens, is over the default ratio
    flags = ["--langid", "--min-script-share", "0.5", "--drop-copies", "--check-numbers", "--max-ratio", "0"]
    args = ["preprocess", "-s", "en", "-t", "de", "--train", str(tmp_path / "noisy"), "--tokenizer",
            str(tokenizer_path), "-o", str(tmp_path / "bin"), *flags]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "bin" / "manifest.json").read_text())["splits"]["train"]
    assert report["kept"] == 60 and report["read"] == 65
    assert {k: v for k, v in report["dropped"].items() if v} == {"copy": 1, "numbers": 1, "script": 1, "language": 2}
    assert "kept 60 of 65 pairs (dropped: copy 1, numbers 1, script 1, language 2)" in result.output


def test_default_cleaning_and_every_filter_keep_scripts_without_spaces(tmp_path):
    from mtkit.text.tokenizer import train_tokenizer

    groups = {"zh": CJK_PAIRS[:2], "ja": CJK_PAIRS[2:3], "th": CJK_PAIRS[3:]}
    for lang, pairs in groups.items():
        write_lines(tmp_path / f"{lang}.{lang}", [text for text, _ in pairs] * 5)
        write_lines(tmp_path / f"{lang}.en", [english for _, english in pairs] * 5)
    inputs = [tmp_path / f"{lang}.{side}" for lang in groups for side in (lang, "en")]
    train_tokenizer(inputs, tmp_path / "tok.json", vocab_size=400)
    filters = ["--langid", "--min-script-share", "0.5", "--drop-copies", "--check-numbers"]
    for lang, pairs in groups.items():
        for name, flags in (("default", []), ("filters", filters)):
            args = ["preprocess", "-s", lang, "-t", "en", "--train", str(tmp_path / lang), "--tokenizer",
                    str(tmp_path / "tok.json"), "-o", str(tmp_path / f"{lang}-{name}"), *flags]  # fmt: skip
            result = CliRunner().invoke(app, args)
            assert result.exit_code == 0, result.output
            assert f"kept {5 * len(pairs)} of {5 * len(pairs)} pairs (dropped: none)" in result.output


def test_langid_without_the_extra_is_refused_in_one_line(tmp_path, corpus, tokenizer_path):
    code = (
        "import sys; sys.modules['py3langid'] = None\n"
        "from mtkit.cli import main\n"
        f"sys.argv = ['mtkit', 'preprocess', '-s', 'en', '-t', 'de', '--train', {str(corpus / 'train')!r}, "
        f"'--tokenizer', {str(tokenizer_path)!r}, '-o', {str(tmp_path / 'bin')!r}, '--langid']\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert result.returncode == 1 and "Traceback" not in result.stderr.decode()
    assert (
        result.stderr.decode()
        .strip()
        .endswith("--langid needs py3langid, the language identifier: pip install 'mtkit[langid]'")
    )
    assert not (tmp_path / "bin").exists()
