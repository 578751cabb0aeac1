"""What people type, on a trained model: several sentences in a line, ALL CAPS and Title Case, numbers,
times, prices, URLs, e-mail addresses and placeholders, and letter loops; translated with the
defaults (sentences split, spans kept, casing restored) and with all three off, as before them.

    python bench/real_inputs.py -m MODEL [--lenpen 0.6] [--beam 5] [--data ../shared/data/multi30k]
        [--sets val,test2016] [--lines 300]

Rows, on the first --lines captions of each set (chrF is sacrebleu's, case-insensitive where it says so):
- "three in a line": chrF of lines of three consecutive captions against their joined references,
  and the same three captions translated one by one and joined (the target: within 1.0); a caption
  without a final mark gets a full stop first, as sentences written in a line have one;
- "ALL CAPS", "Title Case": chrF (case-insensitive) of the captions written so, against the
  original casing's (the target: within 2.0);
- "spans": a number, time, price, URL, e-mail address or placeholder inserted into each caption
  (seeded): the share of lines whose translation holds every inserted span exactly (target 100%);
- "letter loops": outputs, of every row above, with one letter more than three times in a row where
  the source has none;
- "single words, <= 3 words out (%)": the 200 most frequent words of the training sources, each
  translated alone: the share whose translation is at most three words (a word or a phrase, not an
  invented caption); "... and holds its translation (%)": of those, the share that also holds the
  word's likeliest translation in the training pairs (mtkit.text.augment, read off the first 20,000,
  compared case-insensitively; words without one count as misses). Run once per setting, not per set.
--words-only measures the single words alone.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
import zlib
from pathlib import Path

import sacrebleu
from common import DEFAULT_MULTI30K, REPO, conditions, print_table

sys.path.insert(0, str(REPO))

SPAN_TEMPLATES = [
    ("time", "{caption} at {value}.", lambda r: f"{r.randint(1, 12)}:{r.randint(0, 59):02d}"),
    ("number", "{caption} with {value} people.", lambda r: f"{r.randint(2, 99)},{r.randint(0, 999):03d}"),
    ("price", "{caption} for {value}.", lambda r: r.choice(["$", "€", "£"]) + f"{r.randint(1, 999)}.{r.randint(0, 99):02d}"),
    ("url", "{caption}, see {value} for more.", lambda r: f"https://example.{r.choice(['org', 'com', 'de'])}/p/{r.randint(1, 9999)}?id={r.randint(1, 99)}"),
    ("email", "{caption}, write to {value} today.", lambda r: f"{r.choice(['anna', 'max.b', 'info'])}{r.randint(1, 99)}@example.com"),
    ("placeholder", "{caption} for {value}.", lambda r: r.choice(["%s", "{name}", "{{count}}", "%(n)d", "%1$d"])),
    ("year", "In {value}, {lower}.", lambda r: str(r.randint(1900, 2030))),
]  # fmt: skip
LETTER_LOOP = re.compile(r"([^\W\d_])\1{3,}", re.IGNORECASE)


def with_span(caption: str, index: int, rng: random.Random) -> tuple[str, str]:
    kind, template, value_of = SPAN_TEMPLATES[index % len(SPAN_TEMPLATES)]
    value = value_of(rng)
    base = caption.rstrip(" .")
    return template.format(caption=base, lower=base[:1].lower() + base[1:], value=value), value


def title_case(text: str) -> str:
    return re.sub(r"[^\W\d_]+", lambda m: m.group()[0].upper() + m.group()[1:], text)


def chrf(hypotheses: list[str], references: list[str], lowercase: bool = False) -> float:
    if lowercase:
        hypotheses, references = [h.lower() for h in hypotheses], [r.lower() for r in references]
    return sacrebleu.corpus_chrf(hypotheses, [references]).score


def loops(sources: list[str], outputs: list[str]) -> int:
    return sum(1 for s, o in zip(sources, outputs) if LETTER_LOOP.search(o) and not LETTER_LOOP.search(s))


def measure(translator, sources: list[str], references: list[str], rng_seed: int) -> dict[str, float]:
    found, seen = {}, []

    def run(lines: list[str]) -> list[str]:
        out = translator.translate(lines)
        seen.append((lines, out))
        return out

    n = len(sources) // 3 * 3
    ended = [s if s.rstrip()[-1:] in ".!?" else s.rstrip() + "." for s in sources]
    triples = [" ".join(ended[i : i + 3]) for i in range(0, n, 3)]
    joined_refs = [" ".join(references[i : i + 3]) for i in range(0, n, 3)]
    plain = run(sources)
    one_by_one_ended = run(ended)
    one_by_one = [" ".join(one_by_one_ended[i : i + 3]) for i in range(0, n, 3)]
    found["three, one by one"] = chrf(one_by_one, joined_refs)
    found["three in a line"] = chrf(run(triples), joined_refs)
    found["as written (ci)"] = chrf(plain, references, lowercase=True)
    found["ALL CAPS (ci)"] = chrf(run([s.upper() for s in sources]), references, lowercase=True)
    found["Title Case (ci)"] = chrf(run([title_case(s) for s in sources]), references, lowercase=True)
    rng = random.Random(rng_seed)
    spanned = [with_span(s, i, rng) for i, s in enumerate(sources)]
    out = run([line for line, _ in spanned])
    found["spans kept (%)"] = 100 * sum(value in o for (_, value), o in zip(spanned, out)) / len(out)
    found["letter loops"] = sum(loops(lines, outs) for lines, outs in seen)
    return found


def single_words(translator, data: Path, src: str, tgt: str) -> dict[str, float]:
    from mtkit.text.augment import word_translations, words

    words_alone = frequent_words(data / f"train.{src}", 200)
    pairs = zip(*((data / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:20000] for lang in (src, tgt)))
    lexicon = word_translations(pairs)
    outs = translator.translate(words_alone)
    short = [len(out.split()) <= 3 for out in outs]
    held = [s and lexicon.get(w) in words(out) for w, out, s in zip(words_alone, outs, short)]
    return {
        "single words, <= 3 words out (%)": 100 * sum(short) / len(outs),
        "... and holds its translation (%)": 100 * sum(held) / len(outs),
    }


def frequent_words(path: Path, count: int) -> list[str]:
    counts: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        for word in re.findall(r"[^\W\d_]+", line.lower()):
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--sets", default="val,test2016")
    parser.add_argument("--lines", type=int, default=300)
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--words-only", action="store_true", help="measure the single words alone")
    args = parser.parse_args()
    from mtkit.decoding.search_rules import SearchConfig
    from mtkit.interop.engines import Decoding, build_translator

    cfg = SearchConfig(beam=args.beam, lenpen=args.lenpen)
    settings = {"defaults": (True, True, True), "all three off": (False, False, False)}
    results, started = {}, time.perf_counter()
    for name, (split, spans, case) in settings.items():
        decoding = Decoding(search=cfg, device="cpu", split_sentences=split, keep_spans=spans, recase=case)
        translator = build_translator(decoding, [args.model])
        for part in args.sets.split(","):
            sources = (args.data / f"{part}.{args.src}").read_text(encoding="utf-8").splitlines()[: args.lines]
            references = (args.data / f"{part}.{args.tgt}").read_text(encoding="utf-8").splitlines()[: args.lines]
            found = {} if args.words_only else measure(translator, sources, references, zlib.crc32(part.encode()))
            results[name, part] = found
        words = single_words(translator, args.data, args.src, args.tgt)
        for part in args.sets.split(","):
            results[name, part].update(words)
    print(f"mtkit on what people type: {args.model}, beam {args.beam}, lenpen {args.lenpen}, "
          f"first {args.lines} lines of each set, precision {translator.precision}")  # fmt: skip
    print(f"conditions: {conditions()}; {time.perf_counter() - started:.0f} s in all")
    metrics = list(next(iter(results.values())))
    rows = [[metric, *(results[key][metric] for key in results)] for metric in metrics]
    print_table(["measure", *(f"{part}: {name}" for name, part in results)], rows)


if __name__ == "__main__":
    main()
