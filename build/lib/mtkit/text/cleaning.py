"""What `preprocess` drops from a training split, and why: empty sides, lengths and their ratio
(in subwords), and the noise filters for crawled corpora (mtkit.text.langid): a side in another language
or script, a target that copies its source, numbers that differ."""

from __future__ import annotations

from dataclasses import dataclass

from mtkit.core.errors import MtkitError
from mtkit.text.langid import check_known, numbers, probability, require_langid, script_share

DROP_REASONS = ("empty", "too_long", "ratio", "duplicate", "copy", "numbers", "script", "language")


@dataclass
class CleaningRules:
    """What `preprocess` drops from the training split (valid and test keep every line)."""

    strip: bool = True
    drop_empty: bool = True
    max_len: int = 250  # subword tokens on either side; 0 = no limit
    max_ratio: float = 3.0  # longer side / shorter side in subword tokens; 0 = no limit
    dedup: bool = False
    # Noise filters (mtkit.text.langid), each off by default:
    langid: bool = False  # drop a pair where a side's language has probability below langid_min_prob
    langid_min_prob: float = 0.05
    min_script_share: float = 0.0  # drop a pair where a side has fewer of its letters in its language's scripts
    drop_copies: bool = False  # drop a pair whose target is its source (case and spaces aside)
    check_numbers: bool = False  # drop a pair whose sides both write numbers, and different ones

    def validate(self, src_lang: str, tgt_lang: str) -> None:
        if self.max_len < 0:
            raise MtkitError(f"--max-len {self.max_len}: must not be negative (0: no limit)")
        if self.max_ratio < 0:
            raise MtkitError(f"--max-ratio {self.max_ratio:g}: must not be negative (0: off)")
        if not 0 <= self.min_script_share <= 1:
            raise MtkitError(f"--min-script-share {self.min_script_share:g}: must be in [0, 1] (0: off)")
        if not 0 < self.langid_min_prob < 1:
            raise MtkitError(f"--langid-min-prob {self.langid_min_prob:g}: must be in (0, 1)")
        if self.langid:
            require_langid("--langid")
            for lang in (src_lang, tgt_lang):
                check_known(lang, f"--langid with language {lang}")


def drop_reason(src: list[int], tgt: list[int], rules: CleaningRules) -> str | None:
    if not src or not tgt:
        return "empty" if rules.drop_empty else None
    if rules.max_len and max(len(src), len(tgt)) > rules.max_len:
        return "too_long"
    if rules.max_ratio and max(len(src), len(tgt)) / min(len(src), len(tgt)) > rules.max_ratio:
        return "ratio"
    return None


def _numbers_differ(src: str, tgt: str) -> bool:
    """Both sides write numbers (in digits), and not the same ones: "3 dogs" against "Drei Hunde" is
    a translation, "3 dogs" against "4 Hunde" is not."""
    src_numbers, tgt_numbers = numbers(src), numbers(tgt)
    return bool(src_numbers and tgt_numbers and src_numbers != tgt_numbers)


def noise_reason(texts: tuple[str, str], langs: tuple[str, str], rules: CleaningRules) -> str | None:
    """Why the noise filters drop a pair of texts in languages `langs`, or None (cheapest test first)."""
    if rules.drop_copies and "".join(texts[0].split()).casefold() == "".join(texts[1].split()).casefold():
        return "copy"
    if rules.check_numbers and _numbers_differ(*texts):
        return "numbers"
    if rules.min_script_share and min(map(script_share, texts, langs)) < rules.min_script_share:
        return "script"
    if rules.langid and min(map(probability, texts, langs)) < rules.langid_min_prob:
        return "language"
    return None
