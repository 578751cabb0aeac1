"""What other people's software sends, on a trained model served in this process: line breaks,
Weblate's placeholders, identifiers, and text that tempts a model to make spans up.

    python bench/clients.py -m MODEL [--lenpen 0.6] [--beam 5] [--data ../shared/data/multi30k]
        [--tatoeba ../shared/data/tatoeba-de-en] [--lines 300]

Rows (captions: the first --lines of test2016; each row's texts are built from them, seeded):
- "line breaks kept": two or three captions joined by "\\n", "\\r\\n" or a blank line, through
  /v1/translate, LibreTranslate's /translate and DeepL's /v2/translate (split_sentences 0, 1 and
  nonewlines, tag_handling xml): the share of answers whose line breaks are the source's, in order;
- "[X<n>X] kept": captions with one or two of Weblate's placeholders (alone, or around a word), through
  /translate as Weblate's LibreTranslate backend sends them: the share with each exactly once;
- "identifiers kept": captions with a gate, flight, flat, model or part number inserted: the share
  whose translation holds it exactly;
- "invented spans": outputs holding a span (mtkit.text.spans: number, link, address, price,
  placeholder, code, identifier) their source lacks, on the tatoeba-de-en test set (sentences the
  caption model has never seen), the captions in ALL CAPS, and 200 lines of punctuation, entities and
  markup-like text; "before the check" translates them with the check turned off, to show what it
  takes out.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from pathlib import Path

from common import DEFAULT_MULTI30K, REPO, conditions, print_table

sys.path.insert(0, str(REPO))

BREAKS = ["\n", "\r\n", "\n\n"]
IDENTIFIERS = [("{c}, at gate {v}.", lambda r: f"{r.choice('ABCD')}{r.randint(1, 60)}"),
               ("{c} on flight {v}.", lambda r: f"{r.choice(['LH', 'BA', 'AF', 'U2'])}{r.randint(100, 9999)}"),
               ("{c} in flat {v}.", lambda r: f"{r.randint(1, 20)}{r.choice('ABC')}"),
               ("{c} near a {v} plane.", lambda r: f"A{r.choice([318, 319, 320, 321, 330, 350, 380])}"),
               ("{c}, part {v}.", lambda r: f"XJ-{r.randint(1000, 9999)}")]  # fmt: skip
TEMPTING = ["Tom &amp; Jerry run.", "A &lt;b&gt; tag.", "Rock 'n' roll -- all night!", "Wait... what?!",
            "She said: \"yes\" (maybe).", "Use * and # or @ sign.", "A & B; C | D.", "It's 100 % sure, isn't it?",
            "The <em>best</em> day.", "See [above] {for} more.", "Hello, World!", "Why? Because.",
            "A ~ B ^ C = D + E.", "Cost: free.", "Ask Dr. Smith, Ph.D.", "Me & you & them.",
            "«Bonjour», he said.", "A dog — a big one — runs.", "The end…", "Name: ____"]  # fmt: skip


def read(path: Path, lines: int) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()[:lines]


def tempting_lines(count: int, rng: random.Random) -> list[str]:
    out = []
    for k in range(count):
        line = TEMPTING[k % len(TEMPTING)]
        out.append(line.upper() if k % 3 == 1 else line if k % 3 == 0 else f"{line} {rng.choice(TEMPTING)}")
    return out


def serve(model: Path, beam: int, lenpen: float):
    from fastapi.testclient import TestClient

    from mtkit.api.app import create_app
    from mtkit.decoding.search import SearchConfig
    from mtkit.model.files import load_model_file, resolve_model_path
    from mtkit.serving.service import Service
    from mtkit.serving.settings import ModelInfo, ServeConfig
    from mtkit.translation.translate import Translator

    path = resolve_model_path(model)
    model_file = load_model_file(path)
    cfg = SearchConfig(beam=beam, lenpen=lenpen)
    info = ModelInfo(path.name, path, "pytorch", model_file.meta.get("src_lang"), model_file.meta.get("tgt_lang"),
                     model_file.meta)  # fmt: skip
    service = Service(lambda: Translator(model_file, cfg, device="cpu"),
                      (model_file.src_tokenizer, model_file.tgt_tokenizer), cfg, info, ServeConfig())  # fmt: skip
    return TestClient(create_app(service, page=False))


def ask(client, route: str, texts: list[str], chunk: int = 25) -> list[str]:
    """texts through one route (name: mtkit's v1, libretranslate, or deepl-MODE), `chunk` a request."""
    if len(texts) > chunk:
        return [out for k in range(0, len(texts), chunk) for out in ask(client, route, texts[k : k + chunk], chunk)]
    if route == "v1":
        return client.post("/v1/translate", json={"text": texts}).json()["translations"]
    if route == "libretranslate":
        return client.post("/translate", json={"q": texts, "source": "en", "target": "de"}).json()["translatedText"]
    mode = route.split("-", 1)[1]
    fields = {"text": texts, "target_lang": "DE", "source_lang": "EN"}
    fields |= {"tag_handling": mode} if mode == "xml" else {"split_sentences": mode}
    return [entry["text"] for entry in client.post("/v2/translate", json=fields).json()["translations"]]


def share(kept: list[bool]) -> str:
    return f"{100 * sum(kept) / len(kept):.1f}% of {len(kept):,}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", type=Path, required=True)
    parser.add_argument("--lenpen", type=float, default=0.6)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DEFAULT_MULTI30K)
    parser.add_argument("--tatoeba", type=Path, default=REPO.parent / "shared" / "data" / "tatoeba-de-en")
    parser.add_argument("--lines", type=int, default=300)
    args = parser.parse_args()

    import mtkit.translation.sentences as sentences
    from mtkit.text.sentence_splitter import split_lines
    from mtkit.text.spans import invented_spans

    rng = random.Random(7)
    captions = read(args.data / "test2016.en", args.lines)
    rows = []
    with serve(args.model, args.beam, args.lenpen) as client:
        joined = [BREAKS[k % 3].join(captions[k : k + 2 + k % 2]) for k in range(0, len(captions) - 2, 3)]
        wanted = [split_lines(text).breaks for text in joined]
        for route in ["v1", "libretranslate", "deepl-0", "deepl-1", "deepl-nonewlines", "deepl-xml"]:
            outs = ask(client, route, joined)
            rows.append(
                [f"line breaks kept ({route})", share([split_lines(o).breaks == w for o, w in zip(outs, wanted)])]
            )
        placed = []
        for k, caption in enumerate(captions):
            words = caption.rstrip(".").split()
            at = rng.randrange(len(words))
            words[at] = f"[X{k % 40}X]{words[at]}[X{k % 40 + 1}X]" if k % 2 else f"[X{k % 40}X] {words[at]}"
            placed.append(" ".join(words) + ".")
        outs = ask(client, "libretranslate", placed)
        found = [
            Counter(re.findall(r"\[X\d+X\]", o)) == Counter(re.findall(r"\[X\d+X\]", p)) for o, p in zip(outs, placed)
        ]
        rows.append(["[X<n>X] kept, each exactly once (libretranslate)", share(found)])
        with_ids = []
        for k, caption in enumerate(captions):
            template, value_of = IDENTIFIERS[k % len(IDENTIFIERS)]
            with_ids.append((template.format(c=caption.rstrip(" ."), v=(value := value_of(rng))), value))
        outs = ask(client, "v1", [text for text, _ in with_ids])
        rows.append(["identifiers kept", share([value in out for (_, value), out in zip(with_ids, outs)])])
        sets = {"tatoeba-de-en test": read(args.tatoeba / "test.en", 2000), "captions in ALL CAPS":
                [c.upper() for c in captions], "punctuation, entities, markup-like": tempting_lines(200, rng)}  # fmt: skip
        check = sentences.without_invented
        for name, texts in sets.items():
            counts = []
            for on in (False, True):
                sentences.without_invented = check if on else (lambda translation, source: translation)
                outs = ask(client, "v1", texts)
                invented = [(text, out) for out, text in zip(outs, texts) if invented_spans(out, text)]
                counts.append(len(invented))
                for text, out in invented[:3] if on else []:  # what the check let through, to look at
                    print(f"invented: {text!r} -> {out!r}", file=sys.stderr)
            sentences.without_invented = check
            rows.append([f"invented spans: {name} ({len(texts):,})", f"{counts[1]} (before the check: {counts[0]})"])
    print(f"mtkit through other people's clients: {args.model}, beam {args.beam}, lenpen {args.lenpen}; {conditions()}")
    print_table(["row", "result"], rows)


if __name__ == "__main__":
    main()
