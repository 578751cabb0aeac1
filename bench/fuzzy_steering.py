"""Fuzzy matches steering the model, measured: request-time adaptation as ModernMT does it (a few
updates on a sentence's fuzzy matches from the memory, the sentence translated, the weights restored)
against the model alone and the best match's translation alone, per band of the best match's score.

    python bench/fuzzy_steering.py -m MODEL [--data ../shared/data/tatoeba-de-en] [--lines 300]
        [--steps 10] [--lr 1e-3] [--matches 3] [--threshold 75] [--beam 5] [--memory tm.db]

The memory is tatoeba-de-en's train (imported into a temporary SQLite file unless --memory names one
that holds it); the sentences are the first --lines of its test set. For each sentence with matches at
or above --threshold, the model (fp32) takes --steps Adam updates (learning rate --lr) on up to
--matches of them, all in one batch, translates the sentence, and gets its weights back
(mtkit.training.adaptation.Steering: `translate --tm-steer`). Rows: the
bands of the best match at threshold 60 (90-99, 75-89, 75-99, 60-74) and all sentences; BLEU and chrF
(sacrebleu) of each way, and the p-values of paired bootstrap resampling (sacrebleu, 1,000 samples) of
the steered BLEU against the model's and the match's; the seconds a steered sentence took, on average.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
from common import REPO, conditions, print_table

sys.path.insert(0, str(REPO))
import torch  # noqa: E402

from mtkit.decoding.search_rules import SearchConfig  # noqa: E402
from mtkit.memory.sources import aligned_units  # noqa: E402
from mtkit.memory.store import TranslationMemory  # noqa: E402
from mtkit.model.files import load_model_file  # noqa: E402
from mtkit.training.adaptation import STEER_LR, STEER_STEPS, Steering  # noqa: E402
from mtkit.translation.translate import Translator  # noqa: E402

BANDS = [("90-99", 90, 99), ("75-89", 75, 89), ("75-99", 75, 99), ("60-74", 60, 74), ("all", 0, 100)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "tatoeba-de-en")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--steps", type=int, default=STEER_STEPS)
    parser.add_argument("--lr", type=float, default=STEER_LR)
    parser.add_argument("--matches", type=int, default=3)
    parser.add_argument("--threshold", type=int, default=75)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--memory", type=Path, default=None)
    args = parser.parse_args()
    sources = (args.data / "test.en").read_text(encoding="utf-8").splitlines()[: args.lines]
    references = (args.data / "test.de").read_text(encoding="utf-8").splitlines()[: args.lines]
    with tempfile.TemporaryDirectory() as tmp:
        path = args.memory or Path(tmp) / "tm.db"
        memory = TranslationMemory(path)
        if not len(memory):
            memory.add(aligned_units(args.data / "train.en", args.data / "train.de", "en", "de"), "en")
        model_file = load_model_file(args.model)
        translator = Translator(model_file, SearchConfig(beam=args.beam), precision="fp32")
        plain = [text for _, text in (h[0] for h in translator.translate_hypotheses(sources))]
        best = [next(iter(memory.lookup(s, "en", "de", threshold=60, limit=1)), None) for s in sources]
        steered, seconds = [], []
        steer = Steering(model_file, SearchConfig(beam=args.beam), args.steps, args.lr)
        for sentence, own in zip(sources, plain):
            matches = memory.lookup(sentence, "en", "de", threshold=args.threshold, limit=args.matches)
            if not matches:
                steered.append(own)
                continue
            started = time.perf_counter()
            steered.append(steer(sentence, [(m.source, m.target) for m in matches][: args.matches]))
            seconds.append(time.perf_counter() - started)
    print(f"conditions: {conditions()}")
    print(f"model {args.model}; memory {args.data}/train; the first {len(sources):,} test sentences; beam "
          f"{args.beam}; steered: {args.steps} Adam updates at lr {args.lr:g} on up to {args.matches} matches "
          f">= {args.threshold}; {torch.get_num_threads()} threads\n")  # fmt: skip
    rows = []
    for name, low, high in BANDS:
        chosen = [i for i, m in enumerate(best) if (m and low <= m.score <= high) or (name == "all")]
        refs = [[references[i] for i in chosen]]
        row: list[object] = [name, len(chosen)]
        ways = [[outputs[i] for i in chosen] for outputs in (plain, [m.target if m else "" for m in best], steered)]
        for hyps in ways:
            row += [sacrebleu.corpus_bleu(hyps, refs).score, sacrebleu.corpus_chrf(hyps, refs).score]
        rows.append(row + [_p_value(ways[0], ways[2], refs[0]), _p_value(ways[1], ways[2], refs[0])])
    headers = ["best match", "sentences", "model BLEU", "chrF", "match BLEU", "chrF", "steered BLEU", "chrF",
               "p, steered vs model", "p, vs match"]  # fmt: skip
    print_table(headers, rows)
    if seconds:
        print(f"\nsteered sentences: {len(seconds)}, {sum(seconds) / len(seconds):.3f} s each on average")


def _p_value(baseline: list[str], system: list[str], references: list[str]) -> str:
    """sacrebleu's paired bootstrap resampling (1,000 samples): the p-value of the system's BLEU against
    the baseline's ("same": the outputs are the same)."""
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    if baseline == system:
        return "same"
    test = PairedTest([("baseline", baseline), ("system", system)], {"BLEU": BLEU(references=[references])},
                      references=None, test_type="bs", n_samples=1000)  # fmt: skip
    return f"{test()[1]['BLEU'][1].p_value:.3f}"


if __name__ == "__main__":
    main()
