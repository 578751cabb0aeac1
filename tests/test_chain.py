"""Models chained through a pivot (mtkit.interop.engines.Chain, `--then`): the chain's output is the
legs run one after the other, its word alignment is theirs composed, markup keeps its elements
through both legs, and a chain whose languages do not meet is refused in one line."""

import pytest
from conftest import run_mtkit

from mtkit.core.errors import MtkitError
from mtkit.decoding.search import Hypothesis
from mtkit.interop.engines import Chain, check_chain
from mtkit.text.markup_placement import translate_markup
from mtkit.translation.translate import TextTranslator


class WordTranslator(TextTranslator):
    """Moves each line's words by a rule (reversed, or rotated left by one), tagging each with the
    target language, and says where each source word went."""

    def __init__(self, src: str, tgt: str, rule: str):
        self.model_meta, self.rule, self.lines_in_pieces = {"src_lang": src, "tgt_lang": tgt}, rule, 0
        self.src_tokenizer = self.tgt_tokenizer = self.cfg = None  # no subwords: words move whole

    def order(self, n: int) -> list[int]:  # the source word at each target position
        return list(reversed(range(n))) if self.rule == "reverse" else [*range(1, n), 0][:n]

    def keep_attention(self) -> None:
        pass

    def translate_hypotheses(self, lines, first_line=1, prefixes=None, on_line=None, encoded=None, starts=None,
                             terms=None):  # fmt: skip
        out = []
        for index, line in enumerate(lines):
            words = [word.split(":")[0] for word in line.split()]
            text = " ".join(f"{words[i]}:{self.model_meta['tgt_lang']}" for i in self.order(len(words)))
            out.append([(Hypothesis([], 0.0, 0.0), text)] if words else [])
            if on_line:
                on_line(index, out[-1])
        return out

    def alignments(self, lines, hypotheses) -> list[str]:
        return [" ".join(f"{i}-{j}" for j, i in enumerate(self.order(len(line.split())))) for line in lines]


def test_a_chain_is_its_legs_one_after_the_other_and_composes_their_alignments():
    first, second = WordTranslator("de", "en", "reverse"), WordTranslator("en", "fr", "rotate")
    chain = Chain([first, second])
    lines = ["a b c d", "", "x y"]
    assert (
        chain.translate(lines) == second.translate(first.translate(lines)) == ["c:fr b:fr a:fr d:fr", "", "x:fr y:fr"]
    )
    best = [nbest[0][0] if nbest else None for nbest in chain.translate_hypotheses(lines)]
    # a -> pivot 3 -> target 2; b -> 2 -> 1; c -> 1 -> 0; d -> 0 -> 3; x -> 1 -> 0, y -> 0 -> 1
    assert chain.alignments([lines[0], lines[2]], [best[0], best[2]]) == ["0-2 1-1 2-0 3-3", "0-0 1-1"]
    assert chain.model_meta["src_lang"] == "de" and chain.model_meta["tgt_lang"] == "fr"


def test_markup_keeps_its_elements_through_the_pivot():
    chain = Chain([WordTranslator("de", "en", "reverse"), WordTranslator("en", "fr", "reverse")])

    def engine(texts):
        best = [nbest[0] for nbest in chain.translate_hypotheses(texts)]
        found = chain.alignments(texts, [hyp for hyp, _ in best])
        return [(text, [tuple(map(int, p.split("-"))) for p in a.split()]) for (_, text), a in zip(best, found)]

    (out,) = translate_markup(['ein <b id="e1">roter Hund</b> läuft <a href="/x">hier</a>'], "html", engine)
    assert out == 'ein:fr <b id="e1">roter:fr Hund:fr</b> läuft:fr <a href="/x">hier:fr</a>'


def test_a_chain_whose_languages_do_not_meet_is_refused():
    legs = [WordTranslator("de", "en", "reverse"), WordTranslator("fr", "cs", "reverse")]
    with pytest.raises(MtkitError, match=r"^--then b\.pt: translates from fr, but a\.pt translates into en$"):
        check_chain(legs, ["a.pt", "b.pt"])
    check_chain([WordTranslator("de", "en", "reverse"), WordTranslator("en", "fr", "reverse")], ["a.pt", "b.pt"])


def test_the_command_line_refuses_a_chain_that_does_not_meet_and_a_glossary(trained_run, tmp_path):
    model = str(trained_run)
    result = run_mtkit("translate", "-m", model, "--then", model, stdin=b"A dog runs.\n")
    assert result.returncode == 1 and "translates from en, but" in result.stderr.decode(), result.stderr
    terms = tmp_path / "terms.tsv"
    terms.write_text("dog\tHund\n")
    result = run_mtkit("translate", "-m", model, "--then", model, "--glossary", str(terms), stdin=b"A dog.\n")
    assert result.returncode == 1 and "--then: --glossary is of one model, not a chain" in result.stderr.decode()
