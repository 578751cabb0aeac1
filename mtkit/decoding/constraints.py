"""What a search may not produce, as -inf log-probabilities: <pad> and <s>, </s> before the least
length, banned id sequences (a tokenizer's line breaks), repeated n-grams, and loops.

The loop guard lets an n-gram occur a bounded number of times in a translation: a token that
would make it occur once more is banned. Legitimate repeats ("a man and a man") stay possible,
but a hypothesis stuck in a loop ("-S-S-S-S-...") must leave it, whatever the loop's period.
Within a word the spelling guard (SpellingGuard) goes further: no letter more than three times in a
row ("MEEEEGGGG"), and no subword of two letters or more a third time in one word
("Irokesenschenschenschen"); no word of the languages mtkit is used for needs either.

Each step applies them to every row at once, and none waits for the device: on a GPU, a read of a
device value on the host stalls the search until every queued kernel has run.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from mtkit.text.spans import SPAN_MARKS
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

if TYPE_CHECKING:
    from mtkit.decoding.search_rules import SearchConfig


def constrain(
    lprobs: Tensor,
    steps: Tensor,
    history: Tensor,
    min_len: int,
    banned: tuple[tuple[int, ...], ...],
    no_repeat: int,
    loop_guard: tuple[int, int] = (0, 0),
    spelling: SpellingGuard | None = None,
) -> Tensor:
    """Forbid <pad>/<s>, </s> before min_len, the banned sequences, repeated n-grams of size
    no_repeat (0: allowed), with loop_guard (n, most) an n-gram's occurrence past its most-th
    (n = 0: no guard), and what `spelling` forbids; steps: each row's tokens so far; history: each
    row's tokens (the last ones: rows may be left-padded)."""
    lprobs[:, PAD_ID] = float("-inf")
    lprobs[:, BOS_ID] = float("-inf")
    lprobs[:, EOS_ID] = lprobs[:, EOS_ID].masked_fill(steps < min_len, float("-inf"))
    if banned:
        lprobs = _ban_sequences(lprobs, history, banned)
    if no_repeat and history.size(1) >= no_repeat:
        lprobs = _ban_repeated_ngrams(lprobs, history, no_repeat)
    loop_n, most = loop_guard
    if loop_n and history.size(1) >= loop_n + most - 1:  # the shortest history with `most` of one n-gram
        lprobs = _ban_ngrams_past(lprobs, history, loop_n, most)
    if spelling is not None and loop_n and history.size(1):
        lprobs = spelling.apply(lprobs, history)
    return lprobs


def without_line_breaks(cfg: SearchConfig, tgt_tokenizer: Tokenizer) -> SearchConfig:
    """cfg, banning every id sequence that decodes to a line break (a translation is one line), with
    the spelling guard of the target vocabulary (mtkit.decoding.constraints)."""
    banned = tuple(map(tuple, tgt_tokenizer.line_break_sequences()))
    return dataclasses.replace(cfg, banned=banned, spelling=spelling_guard(tgt_tokenizer))


def without_made_up_spans(cfg: SearchConfig, tgt_tokenizer: Tokenizer) -> SearchConfig:
    """cfg, also banning every id sequence that writes a character only a span holds (SPAN_MARKS: the
    braces of placeholders, @, backticks, % and currency signs): where the source's spans reach the
    model as stand-ins (mtkit.text.spans), such a character in a translation is one the model made up."""
    banned = tuple(dict.fromkeys(cfg.banned + _span_mark_sequences(tgt_tokenizer)))
    return dataclasses.replace(cfg, banned=banned)


@functools.lru_cache(maxsize=4)
def _span_mark_sequences(tokenizer: Tokenizer) -> tuple[tuple[int, ...], ...]:
    return tuple(map(tuple, tokenizer.sequences_writing(SPAN_MARKS)))


@functools.lru_cache(maxsize=4)
def spelling_guard(tokenizer: Tokenizer) -> SpellingGuard:
    """A tokenizer's spelling guard, made once (its vocabulary read token by token)."""
    return SpellingGuard.of(tokenizer.vocabulary())


def _ban_sequences(lprobs: Tensor, history: Tensor, banned: tuple[tuple[int, ...], ...]) -> Tensor:
    """Forbid the last token of every banned sequence whose other tokens end a row's history."""
    singles, longer = _banned_tensors(banned, lprobs.device)
    lprobs.index_fill_(1, singles, float("-inf"))
    for before, last in longer:
        if history.size(1) >= before.numel():
            ends_with = (history[:, history.size(1) - before.numel() :] == before).all(dim=1)
            lprobs[:, last] = lprobs[:, last].masked_fill(ends_with, float("-inf"))  # no wait for the device
    return lprobs


@functools.lru_cache(maxsize=8)
def _banned_tensors(banned: tuple[tuple[int, ...], ...], device: torch.device) -> tuple[Tensor, list]:
    """The banned single tokens, and (earlier tokens, last token) of the longer sequences, on `device` once."""
    singles = torch.tensor([sequence[0] for sequence in banned if len(sequence) == 1], dtype=torch.long)
    longer = [(torch.tensor(sequence[:-1], device=device), sequence[-1]) for sequence in banned if len(sequence) > 1]
    return singles.to(device), longer


def _completions(history: Tensor, n: int, spare: int) -> Tensor:
    """(N, t - n + 1): the token that followed each earlier occurrence of the row's last n - 1
    tokens, where that occurrence is the start of an n-gram of the history; `spare` elsewhere."""
    ngrams = history.unfold(1, n, 1)  # (N, t - n + 1, n)
    prefix = history[:, history.size(1) - n + 1 :]  # the last n - 1 tokens, (N, n - 1)
    matches = (ngrams[:, :, :-1] == prefix[:, None, :]).all(dim=2)  # (N, t - n + 1)
    return ngrams[:, :, -1].masked_fill(~matches, spare)


# The guards below ban a few tokens of each row by scattering -inf to their ids; a row's slots that ban
# nothing point at <pad>, which every search bans anyway. So no step builds a (rows, vocabulary) mask:
# that is what made the guards cost more than half of a CPU beam search.


def _ban_repeated_ngrams(lprobs: Tensor, history: Tensor, n: int) -> Tensor:
    """Forbid every token that would complete an n-gram already present in the row's history."""
    return lprobs.scatter_(1, _completions(history, n, PAD_ID), float("-inf"))


def _ban_ngrams_past(lprobs: Tensor, history: Tensor, n: int, most: int) -> Tensor:
    """Forbid every token that would complete an n-gram already present `most` times in the row's
    history (occurrences may overlap: "a a a a" holds "a a a" twice)."""
    spare = lprobs.size(1)  # sorts after every token
    completions = _completions(history, n, spare).sort(dim=1).values
    if completions.size(1) < most:
        return lprobs
    # Sorted, a token present `most` times is equal to the one `most - 1` places before it.
    reached = completions[:, most - 1 :]
    reached = reached.masked_fill((reached != completions[:, : reached.size(1)]) | (reached == spare), PAD_ID)
    return lprobs.scatter_(1, reached, float("-inf"))


@dataclass(frozen=True, eq=False)
class SpellingGuard:
    """What the spelling guard knows of each target token (by id), read off its text: its first and
    last letter (lower-cased; -1 where the token starts or ends otherwise: a space, a digit, a mark),
    the runs of those letters at its ends, whether it is one letter repeated (a run goes on through
    it), its longest run inside, and whether it is a subword of two letters or more inside a word."""

    first: tuple[int, ...]
    lead: tuple[int, ...]
    last: tuple[int, ...]
    trail: tuple[int, ...]
    uniform: tuple[bool, ...]
    inner: tuple[int, ...]
    word_start: tuple[bool, ...]
    counted: tuple[bool, ...]
    most_letters: int = 3  # a letter at most this many times in a row
    most_subwords: int = 2  # a counted subword at most this many times in one word
    window: int = 16  # the tokens a word is looked for in

    @classmethod
    def of(cls, vocabulary: list[str]) -> SpellingGuard:
        """The guard of a vocabulary (Tokenizer.vocabulary(): "▁" starts a word; special and byte
        tokens, "<...>", are neither letters nor counted)."""
        rows = [_spelling(token) for token in vocabulary]
        return cls(*(tuple(column) for column in zip(*rows)))

    def apply(self, lprobs: Tensor, history: Tensor) -> Tensor:
        """Ban, in each row, what would spell a letter past most_letters in a row or a subword past
        most_subwords in the word; lprobs' <pad> is banned already (constrain)."""
        vocab = min(len(self.first), lprobs.size(1))  # a model may score fewer tokens than its tokenizer has
        tables = _guard_tables(self, lprobs.device, vocab)
        lprobs.index_fill_(1, tables.long_runs, float("-inf"))
        history = history.clamp(max=vocab - 1)
        lprobs.scatter_(1, self._run_breakers(tables, history), float("-inf"))
        return lprobs.scatter_(1, self._repeated_subwords(tables, history[:, -self.window :]), float("-inf"))

    def _run_breakers(self, tables: _GuardTables, history: Tensor) -> Tensor:
        """(N, widest): the tokens that would carry the run of one letter ending each row's history past
        most_letters, <pad> in the other slots."""
        recent = history[:, -(self.most_letters + 1) :]
        letter, run = tables.last[recent[:, -1]], tables.trail[recent[:, -1]]
        going = tables.uniform[recent[:, -1]]
        for k in range(2, recent.size(1) + 1):  # through the last tokens that are that letter alone
            token = recent[:, -k]
            same = going & (tables.last[token] == letter)
            run, going = run + torch.where(same, tables.trail[token], 0), same & tables.uniform[token]
        # Tokens starting with the letter are listed by their leading run, longest first: a run of r
        # bans the first tables.banned_by_run[letter, r] of them.
        code = tables.letter_code[recent[:, -1]]
        count = tables.banned_by_run[code, run.clamp(max=self.most_letters)]
        slots = torch.arange(tables.widest, device=history.device)
        listed = (tables.offsets[code][:, None] + slots).clamp(max=tables.by_letter.numel() - 1)
        return torch.where(slots < count[:, None], tables.by_letter[listed], PAD_ID)

    def _repeated_subwords(self, tables: _GuardTables, word: Tensor) -> Tensor:
        """(N, window): the counted subwords the current word (from its last word start on) already
        holds most_subwords times, <pad> in the other slots."""
        starts = tables.word_start[word].long()
        later = starts.flip(1).cumsum(1).flip(1) - starts  # word starts after each position
        in_word = (later == 0) & tables.counted[word]
        times = ((word[:, :, None] == word[:, None, :]) & in_word[:, None, :]).sum(dim=2)
        return torch.where(times >= self.most_subwords, word, PAD_ID)


@dataclass(frozen=True)
class _GuardTables:
    """A SpellingGuard's columns on the device, and its ban lists: long_runs, the tokens that hold a
    run past most_letters themselves; by_letter, the tokens that start with a letter, grouped by
    letter (offsets[code] is where a letter's group starts; the last code, no letter, has none) and
    by leading run, longest first; banned_by_run[code, r], how many of its group a run of r bans."""

    last: Tensor
    trail: Tensor
    uniform: Tensor
    word_start: Tensor
    counted: Tensor
    letter_code: Tensor  # each token's last letter, as the index of its group
    long_runs: Tensor
    by_letter: Tensor
    offsets: Tensor
    banned_by_run: Tensor
    widest: int  # the largest group


@functools.lru_cache(maxsize=8)
def _guard_tables(guard: SpellingGuard, device: torch.device, vocab: int) -> _GuardTables:
    most = guard.most_letters
    groups: dict[int, list[int]] = {}
    for token in range(vocab):
        if guard.first[token] >= 0:
            groups.setdefault(guard.first[token], []).append(token)
    letters = list(groups)
    code_of = {letter: code for code, letter in enumerate(letters)}
    none = len(letters)  # the code of "no letter a group starts with": bans nothing
    by_letter, offsets, banned_by_run = [], [], []
    for letter in letters:
        group = sorted(groups[letter], key=lambda token: -guard.lead[token])
        offsets.append(len(by_letter))
        by_letter += group
        banned_by_run.append([sum(guard.lead[token] + run > most for token in group) for run in range(most + 1)])
    offsets.append(len(by_letter))
    banned_by_run.append([0] * (most + 1))

    def on_device(values, dtype=torch.long) -> Tensor:
        return torch.tensor(values, dtype=dtype, device=device)

    return _GuardTables(
        last=on_device(guard.last[:vocab]),
        trail=on_device(guard.trail[:vocab]),
        uniform=on_device(guard.uniform[:vocab], torch.bool),
        word_start=on_device(guard.word_start[:vocab], torch.bool),
        counted=on_device(guard.counted[:vocab], torch.bool),
        letter_code=on_device([code_of.get(letter, none) for letter in guard.last[:vocab]]),
        long_runs=on_device([token for token in range(vocab) if guard.inner[token] > most]),
        by_letter=on_device(by_letter or [PAD_ID]),
        offsets=on_device(offsets),
        banned_by_run=on_device(banned_by_run),
        widest=max((len(group) for group in groups.values()), default=0),
    )


def _spelling(token: str) -> tuple[int, int, int, int, bool, int, bool, bool]:
    if token.startswith("<") and token.endswith(">") and len(token) > 2:  # special, byte or tag token
        return -1, 0, -1, 0, False, 0, False, False
    text = token.replace("▁", " ").lower()
    runs = [(char, len(list(group))) for char, group in itertools.groupby(text)]
    letter = [char.isalpha() for char, _ in runs]
    first, lead = (ord(runs[0][0]), runs[0][1]) if runs and letter[0] else (-1, 0)
    last, trail = (ord(runs[-1][0]), runs[-1][1]) if runs and letter[-1] else (-1, 0)
    inner = max((n for (char, n), is_letter in zip(runs, letter) if is_letter), default=0)
    word_start = token.startswith("▁")
    counted = not word_start and sum(c.isalpha() for c in text) >= 2
    return first, lead, last, trail, len(runs) == 1 and letter[0], inner, word_start, counted
