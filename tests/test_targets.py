"""--tgt-lang: a bilingual model takes only its own target; a model of several needs one of its tags'
languages (or a code that names exactly one of them)."""

import pytest
from conftest import run_mtkit

from mtkit.core.errors import MtkitError
from mtkit.text.targets import marian_target_tags, target_tag

ROMANCE = {"target_tags": {"fra": ">>fra<<", "spa": ">>spa<<", "zho_Hans": ">>zho_Hans<<", "zho_Hant": ">>zho_Hant<<"}}


def test_a_multilingual_model_s_languages_by_their_codes():
    assert target_tag(ROMANCE, "fra") == ">>fra<<"
    assert target_tag(ROMANCE, "fr") == ">>fra<<"
    assert target_tag(ROMANCE, "zho_Hant") == ">>zho_Hant<<"
    with pytest.raises(
        MtkitError, match=r"--tgt-lang zh: several of this model's languages have that code \(zho_Hans, zho_Hant\)"
    ):
        target_tag(ROMANCE, "zh")
    with pytest.raises(MtkitError, match=r"choose one with --tgt-lang \(fra, spa, zho_Hans, zho_Hant\)"):
        target_tag(ROMANCE, None)
    with pytest.raises(MtkitError, match="--tgt-lang de: this model translates into fra, spa, zho_Hans, zho_Hant"):
        target_tag(ROMANCE, "de")


def test_a_bilingual_model_takes_only_its_own_target():
    assert target_tag({"tgt_lang": "de"}, None) is None
    assert target_tag({"tgt_lang": "de"}, "de") is None
    with pytest.raises(MtkitError, match="--tgt-lang fr: this model translates into de only"):
        target_tag({"tgt_lang": "de"}, "fr")
    with pytest.raises(MtkitError, match="which its file does not name"):
        target_tag({}, "de")


def test_marian_tags_are_the_vocabulary_s_language_tokens():
    tokens = ["</s>", ">>fra<<", "▁le", ">>pt_br<<", ">><<", "a>>b<<", ">>spa<<"]
    assert marian_target_tags(tokens) == {"fra": ">>fra<<", "pt_br": ">>pt_br<<", "spa": ">>spa<<"}


def test_translate_with_the_model_s_own_target_is_translate_without_it(trained_run):
    stdin = b"A dog runs in the park.\nTwo men wait.\n"
    plain = run_mtkit("translate", "-m", trained_run, "--beam", "2", stdin=stdin)
    named = run_mtkit("translate", "-m", trained_run, "--beam", "2", "--tgt-lang", "de", stdin=stdin)
    assert plain.returncode == named.returncode == 0
    assert named.stdout == plain.stdout
