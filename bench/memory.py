"""A translation memory at the size of tatoeba-de-en's training set: how long its import takes, how long
a lookup takes, and what the matches are worth (the stored German alone, scored against the references).

    python bench/memory.py [--data ../shared/data/tatoeba-de-en] [--lookups 500]
                           [--memory DIR/tm.db | --memory postgresql://USER@HOST/DB]

Imports train.en/train.de (154,696 pairs) into a fresh SQLite memory, or PostgreSQL's (the memory
`default` of that database, emptied first) (the import's wall time, one transaction), builds the word index (the first lookup), looks up the first --lookups test sentences
with the default threshold, 75 (each lookup's wall time: median, 95th percentile, mean), and groups
them by their best match's band at threshold 60 (100, 90-99, 75-89, 60-74, none); per band, the BLEU
and chrF of the best match's German alone against the references.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
from common import REPO, conditions, print_table

sys.path.insert(0, str(REPO))
from mtkit.core.database import is_url, without_password  # noqa: E402
from mtkit.memory.sources import aligned_units  # noqa: E402
from mtkit.memory.store import TranslationMemory  # noqa: E402

BANDS = [("100", 100, 100), ("90-99", 90, 99), ("75-89", 75, 89), ("60-74", 60, 74)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "tatoeba-de-en")
    parser.add_argument("--lookups", type=int, default=500)
    parser.add_argument(
        "--memory",
        default=None,
        help="where the memory is built: a file, or a postgresql:// URL (default: a temporary file)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.memory or str(Path(tmp) / "tm.db")
        if is_url(path):
            TranslationMemory(path).delete()
        else:
            Path(path).unlink(missing_ok=True)
        memory = TranslationMemory(path)
        started = time.perf_counter()
        counts = memory.add(aligned_units(args.data / "train.en", args.data / "train.de", "en", "de"), "en")
        import_s = time.perf_counter() - started
        sources = (args.data / "test.en").read_text(encoding="utf-8").splitlines()[: args.lookups]
        references = (args.data / "test.de").read_text(encoding="utf-8").splitlines()[: args.lookups]
        started = time.perf_counter()
        memory.lookup(sources[0], "en", "de")  # the first builds the word index
        first_s = time.perf_counter() - started
        times = []
        for sentence in sources:
            started = time.perf_counter()
            memory.lookup(sentence, "en", "de", threshold=75, limit=1)
            times.append(1000 * (time.perf_counter() - started))
        best = [next(iter(memory.lookup(sentence, "en", "de", threshold=60, limit=1)), None) for sentence in sources]
        database_size = "SELECT pg_database_size(current_database())"
        size = (memory.db.value(database_size) if is_url(path) else Path(path).stat().st_size) / 2**20
    print(f"conditions: {conditions()}")
    print(f"memory: {without_password(path) if args.memory else 'SQLite, a temporary file'}; {args.data}/train ({counts.added:,} units added, {counts.updated:,} merged), {size:,.0f} MiB; "
          f"{len(sources):,} test sentences looked up\n")  # fmt: skip
    times.sort()
    print_table(
        ["import s", "units/s", "word index s", "lookup ms median", "p95", "mean", "max"],
        [[import_s, (counts.added + counts.updated) / import_s, first_s, statistics.median(times),
          times[int(0.95 * (len(times) - 1))], statistics.fmean(times), times[-1]]],
    )  # fmt: skip
    print()
    rows = []
    for name, low, high in BANDS:
        chosen = [i for i, match in enumerate(best) if match and low <= match.score <= high]
        hyps, refs = [best[i].target for i in chosen], [references[i] for i in chosen]
        bleu = sacrebleu.corpus_bleu(hyps, [refs]).score if chosen else float("nan")
        chrf = sacrebleu.corpus_chrf(hyps, [refs]).score if chosen else float("nan")
        rows.append([name, len(chosen), bleu, chrf])
    rows.append(["none >= 60", sum(match is None for match in best), "", ""])
    print_table(["best match", "sentences", "BLEU of the match alone", "chrF"], rows)


if __name__ == "__main__":
    main()
