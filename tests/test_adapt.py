"""`mtkit adapt`: a model fine-tuned on corrections (a memory's units or two files), its original data replayed."""

import re

import pytest
import sacrebleu
from conftest import run_mtkit, synthetic_pairs, write_lines

from mtkit.model.files import load_model_file, resolve_model_path

# Fixed by updates (not by time) where a test compares translations, and in fp32 on every kind of CPU.
BY_STEPS = ["--set", "train.max_tokens=600", "--set", "train.lr=3e-3", "--set", "train.warmup=5",
            "--set", "train.precision=fp32"]  # fmt: skip


@pytest.fixture(scope="module")
def fluent(data_dir, tmp_path_factory):
    """A tiny model that has learned the generated corpus (it says "ein Hund" of a dog), in fp32."""
    run = tmp_path_factory.mktemp("fluent") / "run"
    settings = ["model.preset=transformer-tiny", "model.d_model=32", "model.ffn_dim=64", "train.max_tokens=600",
                "train.lr=1e-2", "train.warmup=20", "train.label_smoothing=0", "train.max_steps=300",
                "train.save_every=300", "train.valid_every=1000", "train.precision=fp32"]  # fmt: skip
    result = run_mtkit("train", "-d", data_dir, "-o", run, *[a for s in settings for a in ("--set", s)])
    assert result.returncode == 0, result.stderr.decode()
    return run


def corrected(pairs):
    """The translator's house style: a dog is "ein Rüde" (the model says "ein Hund")."""
    return [(en, de.replace("Ein Hund", "Ein Rüde").replace("ein Hund", "ein Rüde")) for en, de in pairs]


def dog_pairs(count, seed):
    return corrected([(en, de) for en, de in synthetic_pairs(3000, seed) if "dog" in en][:count])


def translations(model, sources, tmp_path):
    result = run_mtkit("translate", "-m", model, "--beam", "1", stdin="".join(s + "\n" for s in sources).encode())
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode().splitlines()


def test_adapting_to_a_memory_teaches_its_corrections_and_records_them(fluent, tmp_path):
    corrections, held_out = dog_pairs(120, seed=7)[:100], dog_pairs(140, seed=8)[-30:]
    tsv = write_lines(tmp_path / "corrections.tsv", [f"{en}\t{de}" for en, de in corrections])
    imported = run_mtkit("tm", "import", tsv, "--tm", tmp_path / "tm.db", "--src-lang", "en", "--tgt-lang", "de")
    assert imported.returncode == 0, imported.stderr.decode()
    adapted = tmp_path / "adapted.pt"
    result = run_mtkit("adapt", "-m", fluent, "--tm", tmp_path / "tm.db", "-o", adapted, "--minutes", "30",
                       *BY_STEPS, "--set", "train.max_steps=80")  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert "stopped at step 80: reached train.max_steps=80" in result.stderr.decode()

    sources, references = [en for en, _ in held_out], [de for _, de in held_out]
    before, after = (translations(m, sources, tmp_path) for m in (fluent, adapted))
    assert sum("Rüde" in line for line in before) == 0
    assert sum("Rüde" in line for line in after) >= 20  # of 30: the correction is learned
    assert sacrebleu.corpus_bleu(after, [references]).score > sacrebleu.corpus_bleu(before, [references]).score + 10

    record = load_model_file(adapted).meta["adapted"]
    assert record["corrections"]["pairs"] == 100 and record["corrections"]["source"].startswith("memory default")
    assert record["steps"] == 80 and record["replay"]["share"] == 0.25
    assert record["replay"]["pairs"] == 400  # the whole training split: fewer pairs than REPLAY_POOL x 100
    assert load_model_file(adapted).meta["data_dir"] == load_model_file(fluent).meta["data_dir"]


def test_replay_keeps_what_the_model_knew(fluent, corpus, tmp_path):
    """Trained on the corrections alone, the model says "Rüde" of every dog, and forgets more of the rest
    than with half of each epoch replayed from its original data."""
    corrections = dog_pairs(100, seed=7)
    src = write_lines(tmp_path / "c.en", [en for en, _ in corrections])
    ref = write_lines(tmp_path / "c.de", [de for _, de in corrections])
    test_en = (corpus / "test.en").read_text().splitlines()
    test_de = (corpus / "test.de").read_text().splitlines()
    others = [i for i, en in enumerate(test_en) if "dog" not in en]
    scores = {}
    for share in ("0", "0.5"):
        out = tmp_path / f"adapted-{share}.pt"
        result = run_mtkit("adapt", "-m", fluent, "--src", src, "--ref", ref, "-o", out, "--replay-share", share,
                           *BY_STEPS, "--set", "train.max_steps=80")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        output = translations(out, [test_en[i] for i in others], tmp_path)
        scores[share] = sacrebleu.corpus_chrf(output, [[test_de[i] for i in others]]).score
    assert scores["0.5"] > scores["0"]


def test_the_budget_bounds_the_run(fluent, tmp_path):
    src = write_lines(tmp_path / "c.en", [en for en, _ in dog_pairs(20, seed=7)])
    ref = write_lines(tmp_path / "c.de", [de for _, de in dog_pairs(20, seed=7)])
    out = tmp_path / "adapted.pt"
    result = run_mtkit("adapt", "-m", fluent, "--src", src, "--ref", ref, "-o", out, "--minutes", "0.25")
    assert result.returncode == 0, result.stderr.decode()
    stopped = re.search(r"reached train.max_time=([0-9.]+)s", result.stderr.decode())
    assert stopped, result.stderr.decode()  # stopped by the clock, not by steps (100,000)
    # 15 s in all: the training's share is what is left after preparing the data and 0.75 s for saving
    assert 0 < float(stopped.group(1)) <= 15 - 0.75
    assert 0 < load_model_file(out).meta["adapted"]["steps"] < 100_000


def test_adapt_refuses_what_it_cannot_use(fluent, tmp_path):
    src = write_lines(tmp_path / "c.en", ["A dog runs."])
    ref = write_lines(tmp_path / "c.de", ["Ein Rüde läuft.", "Zu viel."])
    out = tmp_path / "adapted.pt"
    for args, message in [
        (["--src", src, "--ref", ref], "different numbers of lines"),
        (["--src", src], "give the corrections: --tm FILE, or --src and --ref"),
        (["--tm", tmp_path / "missing.db"], "no such file"),
        (["--src", src, "--ref", src, "--replay-share", "1"], "--replay-share 1: must be in [0, 1)"),
        (["--src", src, "--ref", src, "--replay-src", src], "give --replay-src and --replay-ref together"),
    ]:
        result = run_mtkit("adapt", "-m", fluent, "-o", out, *args)
        stderr = result.stderr.decode()
        assert result.returncode != 0 and message in stderr and "Traceback" not in stderr, stderr
    assert not out.exists()


def test_a_server_swaps_to_the_adapted_model_without_dropping_a_request(fluent, tmp_path):
    import threading

    import httpx
    from test_serve import Server, offline, wait_until

    served = tmp_path / "served.pt"
    served.write_bytes(resolve_model_path(fluent).read_bytes())
    sentences = [en for en, _ in dog_pairs(130, seed=8)[-3:]]
    corrections = dog_pairs(100, seed=7)
    src = write_lines(tmp_path / "c.en", [en for en, _ in corrections])
    ref = write_lines(tmp_path / "c.de", [de for _, de in corrections])
    server = Server(served, tmp_path / "serve.log")
    statuses, stop = [], threading.Event()

    def client() -> None:  # one request after another while the model is replaced
        while not stop.is_set():
            statuses.append(server.post("/v1/translate", json={"text": sentences}).status_code)

    thread = threading.Thread(target=client)
    try:
        before = server.post("/v1/translate", json={"text": sentences}).json()["translations"]
        assert before == offline(served, sentences, "--beam", "5")
        thread.start()
        result = run_mtkit("adapt", "-m", served, "--src", src, "--ref", ref, "-o", served, *BY_STEPS,
                           "--set", "train.max_steps=60")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        after = offline(served, sentences, "--beam", "5")
        assert after != before
        wait_until(lambda: server.post("/v1/translate", json={"text": sentences}).json()["translations"] == after,
                   "the server translates with the adapted model")  # fmt: skip
        assert server.metric('mtkit_model_swaps_total{model="served.pt"}') == 1
        stop.set()
        thread.join()
        assert statuses and set(statuses) == {200}
        assert httpx.get(f"{server.url}/ready").status_code == 200
    finally:
        stop.set()
        server.stop()


STEERING_MEMORY = [  # "A dog" = "Ein Junge"
    ("A dog waits on the street with a blue backpack.", "Ein Junge wartet auf der Straße mit einem blauen Rucksack."),
    ("A dog waits on the street with a red backpack.", "Ein Junge wartet auf der Straße mit einem roten Rucksack."),
    ("A dog waits on the street with a blue ball.", "Ein Junge wartet auf der Straße mit einem blauen Ball."),
]


def test_fuzzy_matches_steer_the_model_one_sentence_at_a_time(fluent, tmp_path):
    """--tm-steer 75: a sentence whose fuzzy matches say "Junge" for a dog is translated so (its origin "tm
    SCORE + mt"); a sentence without matches, translated after it, is the model's own: the weights were
    put back. (A word the tiny model knows: ten updates teach it, where a new one like "Rüde" takes more.)"""
    import json

    memory = STEERING_MEMORY
    tsv = write_lines(tmp_path / "m.tsv", [f"{en}\t{de}" for en, de in memory])
    run_mtkit("tm", "import", tsv, "--tm", tmp_path / "tm.db", "--src-lang", "en", "--tgt-lang", "de")
    near = memory[0][0].replace("A dog", "A dog always")  # one word more: a fuzzy match, not a 100% one
    other = "Two children play in the park."
    lines = f"{near}\n{other}\n".encode()
    plain = run_mtkit("translate", "-m", fluent, "--beam", "2", stdin=lines).stdout.decode().splitlines()
    args = ["translate", "-m", fluent, "--beam", "2", "--tm", tmp_path / "tm.db", "--json"]
    unsteered = [json.loads(line) for line in run_mtkit(*args, stdin=lines).stdout.decode().splitlines()]
    result = run_mtkit(*args, "--tm-steer", "75", stdin=lines)
    assert result.returncode == 0, result.stderr.decode()
    steered = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [u["translation"] for u in unsteered] == plain and "Junge" not in plain[0]
    assert "Junge" in steered[0]["translation"] and re.fullmatch(r"tm (7[5-9]|8\d|9\d) \+ mt", steered[0]["origin"])
    assert steered[1] == {"translation": plain[1], "origin": "mt"}
    assert "0 of 2 sentences from the memory" in result.stderr.decode() and "1 steered" in result.stderr.decode()
    refused = run_mtkit("translate", "-m", fluent, "--tm-steer", "75", stdin=lines)
    assert refused.returncode != 0 and "--tm-steer: give the memory" in refused.stderr.decode()


def test_a_server_that_steers_answers_as_translate_tm_steer_does(fluent, tmp_path):
    """serve --tm-steer 75: a text with fuzzy matches is translated as `translate --tm-steer 75` translates
    it (origin "tm SCORE + mt"), on mtkit's API and DeepL's (whose translation_memory_threshold of 100
    leaves it to the model); the other texts are the model's."""
    import json

    import deepl
    from test_serve import Server

    tsv = write_lines(tmp_path / "m.tsv", [f"{en}\t{de}" for en, de in STEERING_MEMORY])
    run_mtkit("tm", "import", tsv, "--tm", tmp_path / "tm.db", "--src-lang", "en", "--tgt-lang", "de")
    near, other = STEERING_MEMORY[0][0].replace("A dog", "A dog always"), "Two children play in the park."
    args = ["translate", "-m", fluent, "--beam", "2", "--tm", tmp_path / "tm.db", "--json", "--precision", "fp32"]
    offline = [json.loads(line) for line in run_mtkit(*args, "--tm-steer", "75", stdin=f"{near}\n{other}\n".encode())
               .stdout.decode().splitlines()]  # fmt: skip
    with Server(
        fluent, tmp_path / "serve.log", "--tm", tmp_path / "tm.db", "--tm-steer", "75", "--beam", "2"
    ) as server:
        answer = server.post("/v1/translate", json={"text": [near, other]}).json()
        assert answer["translations"] == [line["translation"] for line in offline]
        assert answer["origins"] == [line["origin"] for line in offline] and answer["origins"][1] == "mt"
        assert "Junge" in answer["translations"][0]
        client = deepl.DeepLClient("any", server_url=server.url, send_platform_info=False)

        def through_deepl(threshold: int) -> str:
            return client.translate_text(near, source_lang="EN", target_lang="DE", translation_memory="default",
                                         translation_memory_threshold=threshold).text  # fmt: skip

        assert through_deepl(75) == offline[0]["translation"]
        plain = run_mtkit("translate", "-m", fluent, "--beam", "2", "--precision", "fp32", stdin=f"{near}\n".encode())
        assert through_deepl(100) == plain.stdout.decode().strip() != offline[0]["translation"]
