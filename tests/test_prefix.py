"""Target prefixes: every translation begins with the given text and continues as the model's best completion."""

import pytest
import torch
import torch.nn.functional as F
from conftest import run_mtkit, with_output_vocab, write_lines

from mtkit.decoding.search import SearchConfig, max_output_length
from mtkit.interop.ct2 import CTranslate2Translator, export_ctranslate2
from mtkit.model.files import load_model_file
from mtkit.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mtkit.translation.translate import Translator


@pytest.fixture(scope="module")
def model_file(trained_run):
    return load_model_file(trained_run)


def prefixes_of(references: list[str]) -> list[str]:
    """The first one or two words of each reference (none for every third line)."""
    return ["" if i % 3 == 2 else " ".join(ref.split()[: 1 + i % 2]) for i, ref in enumerate(references)]


@torch.no_grad()
def test_greedy_continues_the_prefix_with_the_argmax_completion(model_file, corpus):
    sources = (corpus / "test.en").read_text().splitlines()
    prefixes = prefixes_of((corpus / "test.de").read_text().splitlines())
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=30, loop_ngram=0)
    translator = Translator(model_file, cfg, device="cpu", precision="fp32")
    model = translator.model
    results = translator.translate_hypotheses(sources, prefixes=prefixes)
    for source, prefix, ((hyp, text),) in zip(sources, prefixes, results):
        src_ids = translator.src_tokenizer.encode_batch([source])[0]
        forced = translator.tgt_tokenizer.encode_batch([prefix])[0] if prefix else []
        assert hyp.tokens[: len(forced)] == forced and text.startswith(prefix)
        out = list(forced)
        limit = max_output_length(len(src_ids), cfg)
        while len(out) < limit:  # the argmax continuation, recomputed from scratch
            logits = model(torch.tensor([src_ids + [EOS_ID]]), torch.tensor([[BOS_ID] + out]))[0, -1]
            lprobs = F.log_softmax(logits.float(), dim=-1)
            lprobs[[PAD_ID, BOS_ID]] = float("-inf")
            token = int(lprobs.argmax())
            if token == EOS_ID:
                break
            out.append(token)
        assert hyp.tokens == out


@torch.no_grad()
@pytest.mark.parametrize("beam", [1, 3])
def test_a_prefix_id_the_model_does_not_score_counts_as_unk(model_file, corpus, beam):
    """With model.output_vocab = target, a forced id outside the scored ones takes <unk>'s
    log-probability: the search goes on from the prefix instead of ending on a -inf score."""
    scoring_even = with_output_vocab(model_file, list(range(0, model_file.config.tgt_vocab_size, 2)))
    sources = (corpus / "test.en").read_text().splitlines()[:6]
    prefixes = [" ".join(ref.split()[:2]) for ref in (corpus / "test.de").read_text().splitlines()[:6]]
    cfg = SearchConfig(beam=beam, max_len_a=0, max_len_b=30)
    translator = Translator(scoring_even, cfg, device="cpu", precision="fp32")
    unscored = 0
    for source, prefix, ((hyp, text),) in zip(
        sources, prefixes, translator.translate_hypotheses(sources, prefixes=prefixes)
    ):
        src_ids = translator.src_tokenizer.encode_batch([source])[0]
        forced = translator.tgt_tokenizer.encode_batch([prefix])[0]
        unscored += sum(i % 2 for i in forced)
        assert hyp.tokens[: len(forced)] == forced and text.startswith(prefix)
        assert all(i % 2 == 0 for i in hyp.tokens[len(forced) :])
        tgt_in = torch.tensor([[BOS_ID] + hyp.tokens])
        lprobs = F.log_softmax(translator.model(torch.tensor([src_ids + [EOS_ID]]), tgt_in)[0].float(), dim=-1)
        taken = [i if i % 2 == 0 else UNK_ID for i in hyp.tokens] + ([EOS_ID] if hyp.ended else [])
        assert hyp.log_prob == pytest.approx(float(lprobs[range(len(taken)), taken].sum()), abs=1e-4)
    assert unscored > 0  # the prefixes did force ids the model does not score


def test_beam_hypotheses_all_begin_with_the_prefix(model_file, corpus):
    sources = (corpus / "test.en").read_text().splitlines()
    prefixes = prefixes_of((corpus / "test.de").read_text().splitlines())
    translator = Translator(model_file, SearchConfig(beam=4, nbest=4, max_len_a=0, max_len_b=30), device="cpu")
    for prefix, nbest in zip(prefixes, translator.translate_hypotheses(sources, prefixes=prefixes)):
        forced = translator.tgt_tokenizer.encode_batch([prefix])[0] if prefix else []
        assert len(nbest) == 4 and all(h.tokens[: len(forced)] == forced for h, _ in nbest)
        assert len({tuple(h.tokens) for h, _ in nbest}) == 4


def test_both_engines_complete_a_prefix_alike(model_file, corpus, tmp_path):
    export_ctranslate2(model_file, tmp_path / "ct2")
    sources = (corpus / "test.en").read_text().splitlines()
    prefixes = prefixes_of((corpus / "test.de").read_text().splitlines())
    cfg = SearchConfig(beam=1, max_len_a=0, max_len_b=30, loop_ngram=0)
    ours = Translator(model_file, cfg, device="cpu", precision="fp32").translate_hypotheses(sources, prefixes=prefixes)
    engine = CTranslate2Translator(tmp_path / "ct2", cfg, device="cpu", compute_type="float32")
    theirs = engine.translate_hypotheses(sources, prefixes=prefixes)
    assert [n[0][1] for n in ours] == [n[0][1] for n in theirs]
    assert [n[0][0].tokens for n in ours] == [n[0][0].tokens for n in theirs]


def test_prefix_file_and_prefix_in_input_through_the_cli(trained_run, corpus, tmp_path):
    sources = (corpus / "test.en").read_text().splitlines()[:6]
    prefixes = prefixes_of((corpus / "test.de").read_text().splitlines()[:6])
    write_lines(tmp_path / "src.en", sources)
    write_lines(tmp_path / "prefix.de", prefixes)
    by_file = run_mtkit(
        "translate", "-m", trained_run, "-i", tmp_path / "src.en", "--prefix-file", tmp_path / "prefix.de"
    )
    assert by_file.returncode == 0, by_file.stderr.decode()
    tabbed = "".join(f"{s}\t{p}\n" for s, p in zip(sources, prefixes)).encode()
    by_tab = run_mtkit("translate", "-m", trained_run, "--prefix-in-input", stdin=tabbed)
    assert by_tab.stdout == by_file.stdout
    lines = by_file.stdout.decode().splitlines()
    assert len(lines) == 6 and all(line.startswith(prefix) for line, prefix in zip(lines, prefixes))
    write_lines(tmp_path / "short.de", prefixes[:4])
    short = run_mtkit("translate", "-m", trained_run, "-i", tmp_path / "src.en", "--prefix-file", tmp_path / "short.de")
    assert short.returncode == 1
    assert short.stderr.decode().strip().splitlines() == [
        f"error: --prefix-file {tmp_path / 'short.de'}: 4 lines, fewer than the input ({tmp_path / 'src.en'})"
    ]
