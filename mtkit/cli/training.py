"""Commands that make models: train, average, choose, import, trim-vocab, export."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mtkit.cli.app import app, handle_errors
from mtkit.cli.options import (
    BatchSizeOption,
    CheckpointOption,
    DeviceOption,
    MaxTokensOption,
    ModelOption,
    PrecisionOption,
    input_lines,
)
from mtkit.core import console
from mtkit.core.errors import MtkitError

# --- train ---------------------------------------------------------------------------------------


@app.command("train")
@handle_errors
def train_command(
    data: Annotated[Path | None, typer.Option("--data", "-d", help="Dataset directory from mtkit preprocess.")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Run directory for checkpoints and logs.")
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config with model: and train: sections.")
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Option("--set", help="Override a setting: section.key=value (repeatable).")
    ] = None,
    resume: Annotated[
        Path | None, typer.Option(help="Continue the run in this directory exactly where it stopped.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Replace a run that RUN_DIR already holds.")] = False,
    auto_resume: Annotated[
        bool,
        typer.Option(
            help="Continue the run RUN_DIR holds, if it saved one, else start it: the same command again after a "
            "crash (torchrun --max-restarts, a job scheduler's requeue)."
        ),
    ] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(help="Fine-tune: start from this model's weights and architecture (model file or run directory)."),
    ] = None,
) -> None:
    """Train a Transformer (CPU or GPU, mixed precision, resumable; runs under torchrun for several processes).

    Example: [bold]mtkit train -d data-bin -o runs/en-de -c config.yaml --set train.max_steps=20000[/bold]

    Resume:  [bold]mtkit train --resume runs/en-de --set train.max_steps=40000[/bold]

    Fine-tune: [bold]mtkit train -d in-domain-bin -o runs/ft --init-from model.pt --set train.lr=1e-4[/bold]

    Restartable: [bold]torchrun --max-restarts 3 --nproc-per-node 2 -m mtkit train -d data-bin -o runs/en-de --auto-resume[/bold]
    """
    from mtkit.core.config import fine_tuning_config, load_config
    from mtkit.model.files import load_model_file
    from mtkit.training.rundir import STATE_FILE
    from mtkit.training.train import train

    if resume:
        if config:
            raise MtkitError(
                "--config cannot be combined with --resume: the run keeps its config (use --set for stopping criteria)"
            )
        if init_from:
            raise MtkitError("--init-from cannot be combined with --resume: a resumed run continues from its own state")
        train(None, data, resume, resume=True, overrides=overrides or [])
        return
    if data is None or output is None:
        raise MtkitError("give --data DATA_DIR and --output RUN_DIR (or --resume RUN_DIR)")
    if auto_resume and force:
        raise MtkitError("--auto-resume continues a run and --force replaces it: give one of them")
    model_file = load_model_file(init_from) if init_from else None
    if model_file:
        run_config = fine_tuning_config(model_file.config, config, overrides or [])
    else:
        run_config = load_config(config, overrides or [])
    if auto_resume and (output / STATE_FILE).is_file():
        train(run_config, data, output, resume=True, overrides=overrides or [])
        return
    # --auto-resume where no training state was saved yet: the run starts over
    train(run_config, data, output, force=force or auto_resume, init_from=model_file)


# --- average -------------------------------------------------------------------------------------


@app.command()
@handle_errors
def average(
    checkpoints: Annotated[list[Path], typer.Argument(help="Model files, or one run directory with --last/--best.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The averaged model file to write.")],
    last: Annotated[int | None, typer.Option(help="Average the run's last N checkpoints.")] = None,
    best: Annotated[int | None, typer.Option(help="Average the run's N best checkpoints by validation metric.")] = None,
) -> None:
    """Average checkpoints' weights into one self-contained model file.

    Example: [bold]mtkit average runs/en-de --last 5 -o model.pt[/bold]
    """
    from mtkit.model.files import save_model_file
    from mtkit.training.average import average_checkpoints, select_checkpoints

    if len(checkpoints) == 1 and checkpoints[0].is_dir():
        paths = select_checkpoints(checkpoints[0], last, best)
    elif last is not None or best is not None:
        raise MtkitError("--last/--best take one run directory, not model files")
    else:
        paths = checkpoints
    save_model_file(output, average_checkpoints(paths))
    console.info(f"wrote {output}: the average of {len(paths)} checkpoints ({', '.join(p.name for p in paths)})")


# --- choose --------------------------------------------------------------------------------------


@app.command()
@handle_errors
def choose(
    runs: Annotated[list[Path], typer.Argument(help="Run directories of mtkit train, one per setting tried.")],
    src: Annotated[Path, typer.Option(help="The validation set's sources.")],
    ref: Annotated[Path, typer.Option(help="The validation set's references.")],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Directory for the chosen model files and choice.json.")
    ],
    average: Annotated[
        str, typer.Option(help="Ways to average each run's checkpoints: last:N or best:N.")
    ] = "last:5,last:15,best:5,best:15",
    ensemble: Annotated[str, typer.Option(help="Ensemble sizes to try: the best N runs.")] = "1,2,3,4",
    lenpen: Annotated[
        str, typer.Option(help="Length penalties to try with the chosen ensemble.")
    ] = "0.6,1.0,1.4,1.8,2.2,2.6,3.0",
    rank_lenpen: Annotated[float, typer.Option(help="The length penalty of the averaging and ensemble stages.")] = 1.0,
    beam: Annotated[int, typer.Option(help="Beam size of every decoding.")] = 5,
    batch_size: BatchSizeOption = 128,
    max_tokens: MaxTokensOption = 8192,
    device: DeviceOption = "auto",
    precision: PrecisionOption = "auto",
    force: Annotated[bool, typer.Option(help="Replace the output directory.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print choice.json instead of a table.")] = False,
) -> None:
    """Choose on a validation set how to average each run, how many runs to ensemble (best first) and the
    length penalty; writes OUTPUT/model1.pt, model2.pt, ... and OUTPUT/choice.json.

    Example: [bold]mtkit choose runs/a runs/b runs/c --src val.en --ref val.de -o chosen[/bold]
    """
    import json

    from rich.console import Console

    from mtkit.cli.options import search_config
    from mtkit.core.textio import atomic_directory, write_text_atomic
    from mtkit.model.files import save_model_file
    from mtkit.training.selection import (
        ValidationSet,
        choice_record,
        choice_table,
        choose,
        parse_averagings,
        parse_numbers,
    )

    if output.exists() and not force:
        raise MtkitError(f"{output}: already exists (use --force to replace it)")
    averagings = parse_averagings(average)
    sizes = [int(n) for n in parse_numbers(ensemble, "--ensemble", whole=True)]
    lenpens = parse_numbers(lenpen, "--lenpen")
    search = search_config(beam=beam, lenpen=rank_lenpen)
    val = ValidationSet(src, ref, search, device, precision, batch_size, max_tokens)
    choice = choose(runs, averagings, sizes, lenpens, rank_lenpen, val)
    record = choice_record(choice)
    with atomic_directory(output, force) as tmp:
        for name, member in zip(record["models"], choice.members, strict=True):
            save_model_file(tmp / name, member.model)
        write_text_atomic(tmp / "choice.json", json.dumps(record, indent=1) + "\n")
    if as_json:
        print(json.dumps(record))
    else:
        Console(soft_wrap=False).print(choice_table(choice, f"{src} ({len(val.sources)} sentences)"))
    console.info(
        f"wrote {output}: {', '.join(record['models'])} at lenpen {choice.lenpen:g} (val BLEU {choice.bleu:.2f})"
    )


@app.command("import")
@handle_errors
def import_command(
    directory: Annotated[
        Path, typer.Argument(help="A MarianMT, NLLB-200 or M2M100 directory as transformers saves it.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The mtkit model file to write.")],
    force: Annotated[bool, typer.Option(help="Replace an existing model file.")] = False,
) -> None:
    """Import a MarianMT (OPUS-MT), NLLB-200 or M2M100 model to fine-tune, translate, serve or export it.

    Writes the model file and, beside it, its two tokenizers (OUTPUT's name with .src-tokenizer.json
    and .tgt-tokenizer.json), to preprocess data for fine-tuning with. An NLLB or M2M100 model then
    takes --src-lang and --tgt-lang: its own codes (deu_Latn, de) or ISO 639 codes. Needs pip
    install 'mtkit\\[marian]'.

    Example: [bold]mtkit import opus-mt-en-de -o en-de.pt[/bold]
    """
    from mtkit.interop.m2m100 import import_m2m100, is_m2m100
    from mtkit.interop.marian import import_marian, tokenizer_paths

    m2m100 = is_m2m100(directory)
    model_file = (import_m2m100 if m2m100 else import_marian)(directory, output, force)
    src, tgt = tokenizer_paths(output)
    model_file.src_tokenizer.save(src)
    model_file.tgt_tokenizer.save(tgt)
    cfg = model_file.config
    shape = f"{cfg.encoder_layers}+{cfg.decoder_layers} layers, d_model {cfg.d_model}"
    if m2m100:
        tensors = {w.data_ptr(): w for w in model_file.weights.values() if w.is_floating_point()}  # tied ones once
        parameters = sum(w.numel() for w in tensors.values())
        languages = model_file.meta["language_tokens"]
        console.info(
            f"wrote {output}: {model_file.meta['family']}, {shape}, {parameters / 1e6:,.1f}M parameters, "
            f"{len(languages)} languages, {cfg.tgt_vocab_size - 1:,} subwords (and <s> for the decoder's start); "
            f"tokenizers {src} and {tgt}"
        )
        return
    console.info(
        f"wrote {output}: {shape}, {cfg.tgt_vocab_size - 1:,} subwords (vocab.json's, and <s> for the decoder's start); "
        f"tokenizers {src} and {tgt}"
    )
    tags = model_file.meta.get("target_tags")
    if tags:
        console.info(f"translates into {len(tags)} languages, chosen with --tgt-lang: {', '.join(sorted(tags))}")


@app.command("trim-vocab")
@handle_errors
def trim_vocab(
    model: ModelOption,
    text: Annotated[
        list[Path], typer.Option("--text", "-i", help="A text file whose subwords the model keeps; repeat it.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The trimmed model file to write.")],
    checkpoint: CheckpointOption = "best",
    force: Annotated[bool, typer.Option(help="Replace an existing model file.")] = False,
) -> None:
    """Keep only the subwords that these texts use: smaller embedding and output matrices, for
    fine-tuning in less memory and decoding faster (an imported NLLB model's 256k rows, say).

    The texts encode exactly as before; other text may segment otherwise. Writes the model file
    and its tokenizers beside it (OUTPUT's name with .src-tokenizer.json and .tgt-tokenizer.json):
    preprocess the fine-tuning data with them.

    Example: [bold]mtkit trim-vocab -m nllb.pt -i train.en -i train.de -o nllb-en-de.pt[/bold]
    """
    from mtkit.core.textio import check_input_file
    from mtkit.interop.marian import tokenizer_paths
    from mtkit.interop.vocab_trim import trim_vocabulary
    from mtkit.model.files import load_model_file, save_model_file

    for path in text:
        check_input_file(path)
    if output.exists() and not force:
        raise MtkitError(f"{output}: exists; use --force to replace it")
    model_file = load_model_file(model, checkpoint)
    lines = (line for path in text for line in input_lines(path))
    trimmed, differing = trim_vocabulary(model_file, lines)
    save_model_file(output, trimmed)
    src, tgt = tokenizer_paths(output)
    trimmed.src_tokenizer.save(src)
    trimmed.tgt_tokenizer.save(tgt)
    kept, total = trimmed.config.tgt_vocab_size, model_file.config.tgt_vocab_size
    console.info(
        f"wrote {output}: {kept:,} of {total:,} subwords kept ({kept / total:.1%}); tokenizers {src} and {tgt}"
    )
    if differing:
        console.warn(f"{differing:,} lines of the texts encode otherwise than before")


@app.command()
@handle_errors
def export(
    model: ModelOption,
    output: Annotated[Path, typer.Option("--output", "-o", help="Directory to create.")],
    fmt: Annotated[
        str, typer.Option("--format", help="ctranslate2, or huggingface (MarianMT or, pre-norm, Pegasus).")
    ] = "ctranslate2",
    quantization: Annotated[
        str, typer.Option(help="CTranslate2: float32, int8, int16, float16, bfloat16, int8_float32 or int8_bfloat16.")
    ] = "float32",
    checkpoint: CheckpointOption = "best",
    force: Annotated[bool, typer.Option(help="Replace an existing directory.")] = False,
) -> None:
    """Export a model for a deployment engine (CTranslate2) or for Hugging Face transformers, with its tokenizer.

    --format huggingface writes a MarianMTModel directory (a pre-norm model: Pegasus; an imported
    NLLB or M2M100 model: M2M100) with config.json, model.safetensors and a fast tokenizer, that
    transformers.pipeline("translation", model=DIR) loads; models with a joint vocabulary only.
    Needs pip install 'mtkit\\[hf]'.

    Example: [bold]mtkit export -m model.pt --format ctranslate2 --quantization int8 -o model-ct2[/bold]
    """
    from mtkit.model.files import load_model_file

    if fmt not in ("ctranslate2", "huggingface"):
        raise MtkitError(f"--format {fmt}: must be ctranslate2 or huggingface")
    if fmt == "huggingface" and quantization != "float32":
        raise MtkitError("--quantization: only for --format ctranslate2")
    model_file = load_model_file(model, checkpoint)
    if fmt == "huggingface" and model_file.meta.get("language_tokens"):
        from mtkit.interop.m2m100_export import export_m2m100

        export_m2m100(model_file, output, force)
        console.info(
            f"wrote {output}: an M2M100ForConditionalGeneration with its languages' tokens (NllbTokenizerFast)"
        )
        return
    if fmt == "huggingface":
        from mtkit.interop.hf import export_huggingface

        export_huggingface(model_file, output, force)
        kind = "Pegasus" if model_file.config.norm == "pre" else "MarianMT"
        console.info(f'wrote {output}: a {kind} model; use transformers.pipeline("translation", model="{output}")')
        return
    from mtkit.interop.ct2 import export_ctranslate2

    export_ctranslate2(model_file, output, quantization, force)
    console.info(
        f"wrote {output}: a CTranslate2 model ({quantization}); use mtkit translate --engine ctranslate2 -m {output}"
    )
