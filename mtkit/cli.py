"""The `mtkit` command line: thin adapters that parse options, call a stage, print a summary.

Expected failures raise MtkitError; `handle_errors` turns them into one red line and exit 1.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from mtkit import __version__, console
from mtkit.errors import MtkitError

app = typer.Typer(
    name="mtkit",
    help="Transformer neural machine translation: tokenize, preprocess, train, average, translate, evaluate.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def handle_errors(command: Callable) -> Callable:
    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except MtkitError as err:
            console.console.print(f"[bold red]error:[/bold red] {err}", soft_wrap=True, markup=True, highlight=False)
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            console.console.print("[red]interrupted[/red]")
            raise typer.Exit(130) from None
        except BrokenPipeError:  # e.g. `mtkit translate ... | head`
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


def _version(value: bool) -> None:
    if value:
        print(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[
        Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = None,
) -> None:
    """Transformer neural machine translation from the command line."""


# --- train-tokenizer -----------------------------------------------------------------------------


@app.command("train-tokenizer")
@handle_errors
def train_tokenizer_command(
    inputs: Annotated[
        list[Path], typer.Option("--input", "-i", help="Raw text file (plain or .gz); repeat for several.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write tokenizer.json.")],
    vocab_size: Annotated[
        int, typer.Option("--vocab-size", help="Vocabulary size, special and byte tokens included.")
    ] = 8000,
    kind: Annotated[str, typer.Option("--type", help="Subword model: bpe or unigram.")] = "bpe",
    min_frequency: Annotated[int, typer.Option("--min-frequency", help="BPE: least count for a merge.")] = 2,
) -> None:
    """Train a subword tokenizer (BPE or Unigram with byte fallback) on raw text.

    One tokenizer over source and target text gives a joint vocabulary.

    Example: [bold]mtkit train-tokenizer -i train.en -i train.de -o tokenizer.json --vocab-size 8000[/bold]
    """
    from mtkit.tokenizer import train_tokenizer

    report = train_tokenizer(inputs, output, vocab_size, kind, min_frequency)
    console.info(
        f"wrote {output}: {kind} vocabulary of {report.vocab_size:,} from {report.lines:,} lines in {report.seconds:.1f}s"
    )


# --- preprocess ----------------------------------------------------------------------------------


@app.command()
@handle_errors
def preprocess(
    src_lang: Annotated[str, typer.Option("--src-lang", "-s", help="Source language suffix, e.g. en.")],
    tgt_lang: Annotated[str, typer.Option("--tgt-lang", "-t", help="Target language suffix, e.g. de.")],
    train: Annotated[Path, typer.Option(help="Training prefix: reads PREFIX.SRC and PREFIX.TGT.")],
    tokenizer: Annotated[Path, typer.Option(help="tokenizer.json (the source one when vocabularies are separate).")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Dataset directory to create.")],
    valid: Annotated[Optional[Path], typer.Option(help="Validation prefix.")] = None,
    test: Annotated[Optional[Path], typer.Option(help="Test prefix.")] = None,
    tgt_tokenizer: Annotated[
        Optional[Path], typer.Option(help="Target tokenizer.json for separate vocabularies.")
    ] = None,
    strip: Annotated[bool, typer.Option(help="Strip whitespace around each line.")] = True,
    drop_empty: Annotated[bool, typer.Option(help="Drop training pairs with an empty side.")] = True,
    max_len: Annotated[
        int, typer.Option(help="Drop training pairs with more subwords on either side (0: no limit).")
    ] = 250,
    max_ratio: Annotated[
        float, typer.Option(help="Drop training pairs whose subword length ratio exceeds this (0: off).")
    ] = 3.0,
    dedup: Annotated[bool, typer.Option(help="Drop exact duplicate training pairs.")] = False,
    force: Annotated[bool, typer.Option(help="Replace an existing dataset directory.")] = False,
) -> None:
    """Clean, encode and binarize parallel text into a memory-mapped dataset.

    Example: [bold]mtkit preprocess -s en -t de --train data/train --valid data/val --tokenizer tokenizer.json -o data-bin[/bold]
    """
    from mtkit.preprocess import CleaningRules, preprocess as run_preprocess

    splits = {"train": train} | ({"valid": valid} if valid else {}) | ({"test": test} if test else {})
    rules = CleaningRules(strip=strip, drop_empty=drop_empty, max_len=max_len, max_ratio=max_ratio, dedup=dedup)
    manifest = run_preprocess(src_lang, tgt_lang, splits, tokenizer, output, tgt_tokenizer, rules, force)
    for name, split in manifest["splits"].items():
        dropped = ", ".join(f"{rule} {n}" for rule, n in split["dropped"].items() if n) or "none"
        console.info(
            f"{name}: kept {split['kept']:,} of {split['read']:,} pairs (dropped: {dropped}); "
            f"{split['src_tokens']:,} source and {split['tgt_tokens']:,} target subwords"
        )
    console.info(f"wrote {output} in {manifest['seconds']:.1f}s")


# --- train ---------------------------------------------------------------------------------------


@app.command("train")
@handle_errors
def train_command(
    data: Annotated[
        Optional[Path], typer.Option("--data", "-d", help="Dataset directory from mtkit preprocess.")
    ] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Run directory for checkpoints and logs.")
    ] = None,
    config: Annotated[
        Optional[Path], typer.Option("--config", "-c", help="YAML config with model: and train: sections.")
    ] = None,
    overrides: Annotated[
        Optional[list[str]], typer.Option("--set", help="Override a setting: section.key=value (repeatable).")
    ] = None,
    resume: Annotated[
        Optional[Path], typer.Option(help="Continue the run in this directory exactly where it stopped.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace a run that RUN_DIR already holds.")] = False,
) -> None:
    """Train a Transformer (CPU or GPU, mixed precision, resumable; runs under torchrun for several processes).

    Example: [bold]mtkit train -d data-bin -o runs/en-de -c config.yaml --set train.max_steps=20000[/bold]

    Resume:  [bold]mtkit train --resume runs/en-de --set train.max_steps=40000[/bold]
    """
    from mtkit.config import load_config
    from mtkit.train import train

    if resume:
        if config:
            raise MtkitError(
                "--config cannot be combined with --resume: the run keeps its config (use --set for stopping criteria)"
            )
        train(None, data, resume, resume=True, overrides=overrides or [])
        return
    if data is None or output is None:
        raise MtkitError("give --data DATA_DIR and --output RUN_DIR (or --resume RUN_DIR)")
    train(load_config(config, overrides or []), data, output, force=force)


# --- average -------------------------------------------------------------------------------------


@app.command()
@handle_errors
def average(
    checkpoints: Annotated[list[Path], typer.Argument(help="Model files, or one run directory with --last/--best.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The averaged model file to write.")],
    last: Annotated[Optional[int], typer.Option(help="Average the run's last N checkpoints.")] = None,
    best: Annotated[
        Optional[int], typer.Option(help="Average the run's N best checkpoints by validation metric.")
    ] = None,
) -> None:
    """Average checkpoints' weights into one self-contained model file.

    Example: [bold]mtkit average runs/en-de --last 5 -o model.pt[/bold]
    """
    from mtkit.average import average_checkpoints, select_checkpoints
    from mtkit.checkpoint import save_model_file

    if len(checkpoints) == 1 and checkpoints[0].is_dir():
        paths = select_checkpoints(checkpoints[0], last, best)
    elif last is not None or best is not None:
        raise MtkitError("--last/--best take one run directory, not model files")
    else:
        paths = checkpoints
    save_model_file(output, average_checkpoints(paths))
    console.info(f"wrote {output}: the average of {len(paths)} checkpoints ({', '.join(p.name for p in paths)})")


# --- translate and evaluate share their decoding options -----------------------------------------

ModelOption = Annotated[
    Path, typer.Option("--model", "-m", help="Model file, or a run directory (its best checkpoint).")
]
CheckpointOption = Annotated[str, typer.Option(help="With a run directory: best or last checkpoint.")]
BeamOption = Annotated[int, typer.Option(help="Beam size (1 = greedy).")]
LenpenOption = Annotated[float, typer.Option(help="Length penalty alpha: scores / ((5+len)/6)^alpha.")]
MaxLenAOption = Annotated[float, typer.Option(help="Output length <= a * source length + b: a.")]
MaxLenBOption = Annotated[int, typer.Option(help="Output length <= a * source length + b: b.")]
MinLenOption = Annotated[int, typer.Option(help="Least output tokens before end of sentence.")]
NoRepeatOption = Annotated[int, typer.Option(help="Forbid repeating any n-gram of this size (0: off).")]
BatchSizeOption = Annotated[int, typer.Option(help="Most sentences per batch.")]
MaxTokensOption = Annotated[int, typer.Option(help="Most source tokens x beam per batch.")]
DeviceOption = Annotated[str, typer.Option(help="auto, cpu or cuda.")]
PrecisionOption = Annotated[str, typer.Option(help="auto, fp32, bf16 or fp16.")]
EngineOption = Annotated[
    str, typer.Option(help="pytorch (mtkit's own search) or ctranslate2 (a model from mtkit export).")
]
COMPUTE_TYPES = {"auto": "default", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _make_translator(
    engine: str, model: Path, checkpoint: str, cfg, device: str, precision: str, batch_size: int, max_tokens: int
):
    if engine == "pytorch":
        from mtkit.checkpoint import load_model_file
        from mtkit.translate import Translator

        return Translator(load_model_file(model, checkpoint), cfg, device, precision, batch_size, max_tokens)
    if engine == "ctranslate2":
        from mtkit.ct2 import CTranslate2Translator

        if precision not in COMPUTE_TYPES:
            raise MtkitError(f"--precision {precision}: must be one of {', '.join(COMPUTE_TYPES)}")
        return CTranslate2Translator(model, cfg, device, COMPUTE_TYPES[precision], batch_size)
    raise MtkitError(f"--engine {engine}: must be pytorch or ctranslate2")


def _search_config(
    beam: int,
    lenpen: float,
    max_len_a: float,
    max_len_b: int,
    min_len: int,
    nbest: int = 1,
    no_repeat_ngram: int = 0,
    sample: bool = False,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int = 0,
):
    from mtkit.search import SearchConfig

    cfg = SearchConfig(
        beam=beam,
        lenpen=lenpen,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        min_len=min_len,
        nbest=nbest,
        no_repeat_ngram=no_repeat_ngram,
        sample=sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
    )
    cfg.validate()
    return cfg


def _input_lines(path: Optional[Path]) -> Iterator[str]:
    from mtkit.textio import decode_stream, iter_lines

    if path is None:
        return decode_stream(sys.stdin.buffer, "<stdin>")
    return iter_lines(path)


@app.command()
@handle_errors
def translate(
    model: ModelOption,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="Source text file (default: stdin).")] = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write translations here (default: stdout).")
    ] = None,
    checkpoint: CheckpointOption = "best",
    beam: BeamOption = 5,
    lenpen: LenpenOption = 0.6,
    nbest: Annotated[int, typer.Option(help="Print N lines per input: index<TAB>score<TAB>translation.")] = 1,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    sample: Annotated[bool, typer.Option(help="Sample instead of searching (use --beam 1).")] = False,
    temperature: Annotated[float, typer.Option(help="Sampling temperature.")] = 1.0,
    top_k: Annotated[int, typer.Option(help="Sample among the k likeliest tokens (0: all).")] = 0,
    top_p: Annotated[float, typer.Option(help="Sample from the smallest set with this much probability.")] = 1.0,
    seed: Annotated[int, typer.Option(help="Random seed for sampling.")] = 0,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    buffer_size: Annotated[int, typer.Option(help="Lines read before translating (1 on a terminal).")] = 2000,
    alignment: Annotated[
        bool, typer.Option(help="Append <TAB> and a source-target word alignment (i-j pairs).")
    ] = False,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
) -> None:
    """Translate raw text, one output line per input line, in order (stdin to stdout by default).

    With --alignment each line is `translation<TAB>i-j ...`: source word i aligned to target word j
    (0-based, whitespace-separated words), from the penultimate decoder layer's cross-attention
    averaged over heads.

    Example: [bold]echo "A dog runs on the beach." | mtkit translate -m model.pt[/bold]
    """
    from mtkit.textio import atomic_path, count_lines

    cfg = _search_config(
        beam, lenpen, max_len_a, max_len_b, min_len, nbest, no_repeat_ngram, sample, temperature, top_k, top_p, seed
    )
    if alignment and engine != "pytorch":
        raise MtkitError("--alignment needs --engine pytorch")
    translator = _make_translator(engine, model, checkpoint, cfg, device, precision, batch_size, max_tokens)
    interactive = input is None and sys.stdin.isatty()
    chunk = 1 if interactive else max(1, buffer_size)
    total = count_lines(input) if input else None

    def write_all(out) -> int:
        written = 0
        with console.progress("translating", total=total) as bar:
            for index, (line, nbest_list) in enumerate(translator.translate_stream(_input_lines(input), chunk)):
                if nbest > 1:
                    rows = [f"{index}\t{h.score:.4f}\t{text}" for h, text in nbest_list] or [f"{index}\t-inf\t"]
                else:
                    rows = [nbest_list[0][1] if nbest_list else ""]
                if alignment:
                    links = [translator.alignment(line, h) for h, _ in nbest_list] or [""]
                    rows = [f"{row}\t{link}" for row, link in zip(rows, links)]
                out.write("".join(row + "\n" for row in rows))
                written += 1
                if interactive or (total is None and written % chunk == 0):
                    out.flush()
                bar.advance()
        out.flush()
        return written

    if output:
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as out:
            n = write_all(out)
        console.info(f"wrote {n:,} translations to {output}")
    else:
        write_all(sys.stdout)


@app.command()
@handle_errors
def evaluate(
    ref: Annotated[list[Path], typer.Option("--ref", "-r", help="Reference file (raw text); repeat for several.")],
    model: Annotated[
        Optional[Path], typer.Option("--model", "-m", help="Model file or run directory to translate with.")
    ] = None,
    src: Annotated[Optional[Path], typer.Option(help="Source file to translate.")] = None,
    hyp: Annotated[Optional[Path], typer.Option(help="Score existing translations instead of translating.")] = None,
    metrics: Annotated[str, typer.Option(help="Comma-separated: bleu, chrf, ter.")] = "bleu,chrf,ter",
    lowercase: Annotated[bool, typer.Option(help="Case-insensitive scores.")] = False,
    tokenize: Annotated[Optional[str], typer.Option(help="sacrebleu BLEU tokenizer (default 13a).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the translations here.")] = None,
    checkpoint: CheckpointOption = "best",
    beam: BeamOption = 5,
    lenpen: LenpenOption = 0.6,
    max_len_a: MaxLenAOption = 1.0,
    max_len_b: MaxLenBOption = 50,
    min_len: MinLenOption = 1,
    no_repeat_ngram: NoRepeatOption = 0,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    engine: EngineOption = "pytorch",
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
) -> None:
    """Translate a test set (or take translations) and score it with sacrebleu: BLEU, chrF, TER.

    Example: [bold]mtkit evaluate -m model.pt --src test2016.en --ref test2016.de[/bold]
    """
    from mtkit.evaluate import check_line_counts, parse_metrics, read_lines_checked, score

    names = parse_metrics(metrics)
    if (hyp is None) == (src is None) or (src is not None and model is None):
        raise MtkitError("give either --model and --src (to translate), or --hyp (to score existing translations)")
    references = {path: read_lines_checked(path) for path in ref}
    source_path = src or hyp
    assert source_path is not None
    sources = read_lines_checked(source_path)
    check_line_counts({source_path: sources, **references})
    started = time.perf_counter()
    if hyp is not None:
        hypotheses = sources
    else:
        cfg = _search_config(beam, lenpen, max_len_a, max_len_b, min_len, no_repeat_ngram=no_repeat_ngram)
        translator = _make_translator(engine, model, checkpoint, cfg, device, precision, batch_size, max_tokens)
        started = time.perf_counter()  # translation only, not model loading
        hypotheses = translator.translate(sources)
    seconds = time.perf_counter() - started
    if output:
        from mtkit.textio import write_text_atomic

        write_text_atomic(output, "".join(line + "\n" for line in hypotheses))
    result = score(hypotheses, list(references.values()), names, lowercase, tokenize)
    result.update(
        {
            "sentences": len(hypotheses),
            "seconds": round(seconds, 3),
            "sentences_per_s": round(len(hypotheses) / seconds, 2) if hyp is None and seconds > 0 else None,
        }
    )
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"{source_path} ({len(hypotheses)} sentences)")
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_column("signature", overflow="fold")
    for name in names:
        table.add_row(
            name.upper() if name != "chrf" else "chrF", f"{result[name]['score']:.2f}", result[name]["signature"]
        )
    from rich.console import Console

    Console(soft_wrap=False).print(table)


@app.command()
@handle_errors
def export(
    model: ModelOption,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to create.")],
    fmt: Annotated[str, typer.Option("--format", help="Export format: ctranslate2.")] = "ctranslate2",
    quantization: Annotated[
        str, typer.Option(help="float32, int8, int16, float16, bfloat16, int8_float32 or int8_bfloat16.")
    ] = "float32",
    checkpoint: CheckpointOption = "best",
    force: Annotated[bool, typer.Option(help="Replace an existing directory.")] = False,
) -> None:
    """Export a model for a deployment engine (CTranslate2), with its tokenizer alongside.

    Example: [bold]mtkit export -m model.pt --format ctranslate2 --quantization int8 -o model-ct2[/bold]
    """
    from mtkit.checkpoint import load_model_file
    from mtkit.ct2 import export_ctranslate2

    if fmt != "ctranslate2":
        raise MtkitError(f"--format {fmt}: only ctranslate2 is supported")
    export_ctranslate2(load_model_file(model, checkpoint), output, quantization, force)
    console.info(
        f"wrote {output}: a CTranslate2 model ({quantization}); use mtkit translate --engine ctranslate2 -m {output}"
    )


# --- looking inside ------------------------------------------------------------------------------


def _pick(value: str, count: int, what: str, extra: tuple[str, ...]) -> list[int] | str:
    """A 1-based index, or one of the words in `extra`."""
    if value in extra:
        return value
    try:
        index = int(value)
    except ValueError:
        raise MtkitError(f"--{what} {value}: expected 1..{count} or {'/'.join(extra)}") from None
    if not 1 <= index <= count:
        raise MtkitError(f"--{what} {value}: the model has {what}s 1..{count}")
    return [index - 1]


@app.command()
@handle_errors
def attention(
    model: ModelOption,
    src: Annotated[str, typer.Option("--src", help="The source sentence.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="FILE.png, .svg, .html or .json.")] = None,
    tgt: Annotated[
        Optional[str], typer.Option("--tgt", help="A reference to force-decode instead of translating.")
    ] = None,
    kind: Annotated[str, typer.Option(help="cross (target x source), encoder or decoder self-attention.")] = "cross",
    layer: Annotated[str, typer.Option(help="Layer 1..N, or all (default: the last).")] = "last",
    head: Annotated[str, typer.Option(help="Head 1..h, mean (over heads) or all (a grid).")] = "mean",
    fmt: Annotated[
        Optional[str],
        typer.Option("--format", help="png, svg, html or json (default: from -o; json prints to stdout)."),
    ] = None,
    size: Annotated[Optional[str], typer.Option(help="Image size in pixels, WIDTHxHEIGHT.")] = None,
    checkpoint: CheckpointOption = "best",
    beam: BeamOption = 5,
) -> None:
    """Draw the attention weights of one sentence as heatmaps with the subword tokens on both axes.

    Example: [bold]mtkit attention -m model.pt --src "A dog runs on the beach." --head all -o attention.png[/bold]
    """
    from mtkit.attention import KINDS, attention_weights
    from mtkit.checkpoint import load_model_file
    from mtkit.search import SearchConfig
    from mtkit.translate import translate_ids

    if kind not in KINDS:
        raise MtkitError(f"--kind {kind}: must be one of {', '.join(KINDS)}")
    fmt = fmt or (output.suffix.lstrip(".").lower() if output else "json")
    if fmt not in ("png", "svg", "html", "json"):
        raise MtkitError(f"--format {fmt}: must be png, svg, html or json")
    if fmt != "json" and output is None:
        raise MtkitError(f"--format {fmt} needs -o FILE")
    model_file = load_model_file(model, checkpoint)
    net = model_file.build_model("cpu")
    src_tok, tgt_tok = model_file.src_tokenizer, model_file.tgt_tokenizer
    src_ids = src_tok.encode_batch([src.strip()])[0]
    if tgt is not None:
        tgt_ids = tgt_tok.encode_batch([tgt.strip()])[0]
    else:
        tgt_ids = translate_ids(
            net, [src_ids], SearchConfig(beam=beam, lenpen=0.6), net.tgt_embed.tokens.weight.device
        )[0][0].tokens
    weights = attention_weights(net, src_ids, tgt_ids)[kind]  # (layers, heads, queries, keys)
    src_labels = [src_tok.id_to_token(i) for i in src_ids] + ["</s>"]
    tgt_inputs = ["<s>"] + [tgt_tok.id_to_token(i) for i in tgt_ids]
    tgt_outputs = tgt_inputs[1:] + ["</s>"]
    rows, cols = {
        "cross": (tgt_outputs, src_labels),
        "encoder": (src_labels, src_labels),
        "decoder": (tgt_inputs, tgt_inputs),
    }[kind]
    n_layers, n_heads = weights.shape[:2]
    layers = (
        list(range(n_layers))
        if layer == "all"
        else [n_layers - 1]
        if layer == "last"
        else _pick(layer, n_layers, "layer", ("all", "last"))
    )
    heads = _pick(head, n_heads, "head", ("mean", "all"))
    maps = []
    for l in layers:
        if heads == "mean":
            maps.append((f"{kind} attention, layer {l + 1}, mean of {n_heads} heads", weights[l].mean(0)))
        else:
            for h in range(n_heads) if heads == "all" else heads:
                maps.append((f"{kind} attention, layer {l + 1}, head {h + 1}", weights[l, h]))
    if fmt == "json":
        payload = {
            "kind": kind,
            "source": src,
            "target": tgt_tok.decode_batch([tgt_ids])[0],
            "rows": rows,
            "columns": cols,
            "maps": [{"title": title, "weights": matrix.tolist()} for title, matrix in maps],
        }
        text = json.dumps(payload)
        if output:
            from mtkit.textio import write_text_atomic

            write_text_atomic(output, text + "\n")
        else:
            print(text)
        return
    assert output is not None
    if fmt == "html":
        from mtkit.plots import write_heatmaps_html

        write_heatmaps_html(maps, rows, cols, output)
    else:
        from mtkit.plots import draw_heatmaps

        pixels = _parse_size(size) if size else None
        columns = n_heads if heads == "all" else 1
        draw_heatmaps(maps, rows, cols, output, columns, pixels)
    console.info(
        f"wrote {output}: {len(maps)} heatmap(s) of {kind} attention; translation: {tgt_tok.decode_batch([tgt_ids])[0]}"
    )


def _parse_size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise MtkitError(f"--size {text}: expected WIDTHxHEIGHT, e.g. 1200x800") from None
    if width < 100 or height < 100:
        raise MtkitError(f"--size {text}: at least 100x100 pixels")
    return width, height


@app.command()
@handle_errors
def plot(
    run_dir: Annotated[Path, typer.Argument(help="A run directory (reads its metrics.jsonl).")],
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Image file (default: RUN_DIR/curves.png).")
    ] = None,
) -> None:
    """Plot training and validation curves (loss, perplexity, BLEU, learning rate, tokens/s); works while training runs.

    Example: [bold]mtkit plot runs/en-de -o curves.png[/bold]
    """
    from mtkit.plots import plot_training

    output = output or run_dir / "curves.png"
    plot_training(run_dir, output)
    console.info(f"wrote {output}")


def main() -> None:
    app()
