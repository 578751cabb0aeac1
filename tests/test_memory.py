"""Translation memories (mtkit.memory): TMX read and written as other tools do, exact matches that
ignore spans and put the query's back, fuzzy matches scored as CAT tools score them and found by the
index as a scan of every unit would find them, and the `mtkit tm` commands."""

import io
import json

import pytest
from conftest import run_mtkit
from hypothesis import given, settings
from hypothesis import strategies as st
from translate.storage import tmx as toolkit_tmx

from mtkit.core.errors import MtkitError
from mtkit.memory.matching import keyed, score, with_spans, words
from mtkit.memory.store import TranslationMemory
from mtkit.memory.tmx import Unit, Variant, read_tmx, write_tmx

THREE_LANGUAGES = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE tmx SYSTEM "tmx14.dtd">
<tmx version="1.4">
  <header creationtool="Trados" creationtoolversion="1" segtype="sentence" o-tmf="x" adminlang="en-US"
          srclang="en-US" datatype="rtf"/>
  <body>
    <tu tuid="1">
      <tuv xml:lang="en-US"><seg>Click <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> &amp; exit.</seg></tuv>
      <tuv xml:lang="de-DE"><seg>Klicken Sie auf <bpt i="1">&lt;b&gt;</bpt>Speichern<ept i="1">&lt;/b&gt;</ept> &amp; beenden.</seg></tuv>
      <tuv xml:lang="FR-fr"><seg>Cliquez sur <ph x="2">{tab}</ph>Enregistrer &amp; quitter.</seg></tuv>
    </tu>
    <tu><tuv xml:lang="en-US"><seg>Only one language.</seg></tuv></tu>
    <tu>
      <tuv lang="EN"><seg>The <hi type="b">red</hi> car.</seg></tuv>
      <tuv lang="de"><seg>Das <hi type="b">rote</hi> Auto.</seg></tuv>
    </tu>
  </body>
</tmx>
"""


def test_tmx_is_read_with_every_language_its_codes_left_out_of_the_text():
    source, units = read_tmx(io.BytesIO(THREE_LANGUAGES), "x.tmx")
    units = list(units)
    assert source == "en-US" and len(units) == 3
    click, alone, car = units
    assert [v.text for v in alone.variants] == ["Only one language."]  # no translation: the memory skips it
    assert [(v.locale, v.text) for v in click.variants] == [
        ("en-US", "Click Save & exit."),
        ("de-DE", "Klicken Sie auf Speichern & beenden."),
        ("FR-fr", "Cliquez sur Enregistrer & quitter."),
    ]
    assert click.variants[0].segment == 'Click <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept> &amp; exit.'
    assert [(v.locale, v.text, v.segment) for v in car.variants] == [
        ("EN", "The red car.", 'The <hi type="b">red</hi> car.'),
        ("de", "Das rote Auto.", 'Das <hi type="b">rote</hi> Auto.'),
    ]
    assert click.text_in("fr") == "Cliquez sur Enregistrer & quitter." and click.text_in("es") is None


def test_an_import_exported_and_imported_again_keeps_every_unit_and_code(tmp_path):
    memory = TranslationMemory(tmp_path / "tm.db")
    source, units = read_tmx(io.BytesIO(THREE_LANGUAGES), "x.tmx")
    assert vars(memory.add(units, source)) == {"added": 2, "updated": 0, "skipped": 1}
    out = io.StringIO()
    assert write_tmx(memory.units(), out, "en-US") == 2
    again = TranslationMemory(tmp_path / "again.db")
    source, units = read_tmx(io.BytesIO(out.getvalue().encode()), "out.tmx")
    again.add(units, source)
    assert [u.variants for u in again.units()] == [u.variants for u in memory.units()]
    # Another tool reads what mtkit writes: translate-toolkit's TMX reader, source and target by language.
    store = toolkit_tmx.tmxfile(out.getvalue().encode(), sourcelanguage="en-US", targetlanguage="de-DE")
    assert (store.units[0].source, store.units[0].target) == (
        "Click <b>Save</b> & exit.",
        "Klicken Sie auf <b>Speichern</b> & beenden.",
    )
    assert '<tuv xml:lang="EN"><seg>The <hi type="b">red</hi> car.</seg></tuv>' in out.getvalue()  # as written


def test_a_tmx_another_tool_wrote_is_imported(tmp_path):
    written = toolkit_tmx.tmxfile(sourcelanguage="en", targetlanguage="de")
    written.addtranslation("Fish & chips <b>now</b>.", "en", "Fisch & Pommes <b>jetzt</b>.", "de")
    written.addtranslation("Tom's 3 cats.", "en", "Toms 3 Katzen.", "de")
    (tmp_path / "toolkit.tmx").write_bytes(bytes(written))
    run_cli("tm", "import", str(tmp_path / "toolkit.tmx"), "--tm", str(tmp_path / "tm.db"))
    memory = TranslationMemory(tmp_path / "tm.db")
    assert [[(v.locale, v.text) for v in u.variants] for u in memory.units()] == [
        [("en", "Fish & chips <b>now</b>."), ("de", "Fisch & Pommes <b>jetzt</b>.")],
        [("en", "Tom's 3 cats."), ("de", "Toms 3 Katzen.")],
    ]
    assert memory.lookup("Tom's 12 cats.", "en", "de")[0].target == "Toms 12 Katzen."


def test_scores_are_word_level_edits_over_the_longer_rounded_down():
    assert score(words("the red car ."), words("the blue car .")) == 75
    assert score(words("a b c"), words("a b c d e f")) == 50
    assert score(words("one two three"), words("one two three")) == 100
    assert score(["w"] * 199 + ["x"], ["w"] * 200) == 99  # 99.5%: not a 100% match
    assert score([], []) == 100


def test_a_unit_that_differs_only_in_spans_is_a_100_match_with_the_querys_spans(tmp_path):
    memory = TranslationMemory(tmp_path / "tm.db")
    memory.add(
        [pair("Gate B12 closes at 7:45 for flight LH1234.", "Flugsteig B12 schließt um 7:45 für Flug LH1234.")], "en"
    )
    (match,) = memory.lookup("Gate C3 closes at 9:30 for flight BA42.", "en", "de")
    assert (match.score, match.target) == (100, "Flugsteig C3 schließt um 9:30 für Flug BA42.")
    assert keyed("Call {name} at 555-1234").spans == ("{name}", "555-1234")
    assert with_spans("Ruf {name} an: 555-1234", ("{name}", "555-1234"), ("%s", "555-9876")) == "Ruf %s an: 555-9876"


def test_fuzzy_matches_come_best_first_above_the_threshold_and_an_import_again_updates(tmp_path):
    memory = TranslationMemory(tmp_path / "tm.db")
    memory.add([pair("The red car is fast.", "Das rote Auto ist schnell."), pair("The red car.", "Das rote Auto."),
                pair("A blue bird sings.", "Ein blauer Vogel singt.")], "en")  # fmt: skip
    found = memory.lookup("The red car is slow.", "en", "de", threshold=50)
    assert [(m.score, m.target) for m in found] == [(83, "Das rote Auto ist schnell."), (66, "Das rote Auto.")]
    assert memory.lookup("The red car is slow.", "en", "de", threshold=84) == []
    assert memory.lookup("The red car is fast.", "de", "en") == []  # the other direction holds no German source
    counts = memory.add([pair("The red car.", "Der rote Wagen.")], "en")
    assert (counts.added, counts.updated, len(memory)) == (0, 1, 3)
    assert memory.lookup("The red car.", "en", "de")[0].target == "Der rote Wagen."
    other = TranslationMemory(tmp_path / "tm.db", "another")
    assert len(other) == 0 and other.lookup("The red car.", "en", "de") == []


WORDS = "the a red blue car bird sings is fast slow on road , .".split()
SENTENCE_WORDS = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12)


@settings(max_examples=80, deadline=None)
@given(
    memory_sentences=st.lists(SENTENCE_WORDS, min_size=1, max_size=30),
    query=SENTENCE_WORDS,
    edits=st.lists(st.tuples(st.integers(0, 11), st.sampled_from(WORDS)), max_size=40),
)
def test_the_index_finds_what_scoring_every_unit_finds(tmp_path_factory, memory_sentences, query, edits):
    """Reference: every unit of a memory (fewer than the index's candidates) scored against the query;
    the memory holds copies of the query with a word or two changed, so most queries have near units."""
    near = [list(query) for _ in range(len(edits) // 2)]
    for k, (at, word) in enumerate(edits[: 2 * len(near)]):
        near[k // 2][at % len(query)] = word
    memory = TranslationMemory(tmp_path_factory.mktemp("tm") / "tm.db")
    texts = list(dict.fromkeys(" ".join(sentence) for sentence in memory_sentences + near))
    memory.add([pair(text, text.upper()) for text in texts], "en")
    query_text = " ".join(query)
    expected = max(score(words(query_text), words(text)) for text in texts)
    found = memory.lookup(query_text, "en", "de", threshold=75, limit=1)
    assert [m.score for m in found] == ([expected] if expected >= 75 else [])


def test_the_commands_import_tsv_and_aligned_files_export_and_look_up(tmp_path):
    (tmp_path / "pairs.tsv").write_text("Where is the station?\tWo ist der Bahnhof?\nI like tea.\tIch mag Tee.\n")
    (tmp_path / "a.en").write_text("Good morning.\nThank you very much.\n")
    (tmp_path / "a.de").write_text("Guten Morgen.\nVielen Dank.\n")
    db = str(tmp_path / "tm.db")
    run_cli("tm", "import", str(tmp_path / "pairs.tsv"), "--tm", db, "--src-lang", "en", "--tgt-lang", "de")
    run_cli("tm", "import", "--src", str(tmp_path / "a.en"), "--ref", str(tmp_path / "a.de"), "--tm", db,
            "--src-lang", "en", "--tgt-lang", "de")  # fmt: skip
    result = run_cli("tm", "lookup", "Where is the station?", "--tm", db, "--json")
    assert json.loads(result.stdout) == {
        "text": "Where is the station?",
        "matches": [{"score": 100, "source": "Where is the station?", "target": "Wo ist der Bahnhof?"}],
    }
    result = run_cli("tm", "lookup", "--tm", db, "--threshold", "60", input="Thank you so much.\nNothing here.\n")
    assert result.stdout == "80\tThank you very much.\tVielen Dank.\n\n\n"  # 1 word of 5 differs
    run_cli("tm", "export", "--tm", db, "-o", str(tmp_path / "out.tmx"), "--src-lang", "en")
    store = toolkit_tmx.tmxfile((tmp_path / "out.tmx").read_bytes(), sourcelanguage="en", targetlanguage="de")
    assert len(store.units) == 4 and store.units[3].target == "Vielen Dank."


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--src", "{a}", "--ref", "{b}", "--src-lang", "en", "--tgt-lang", "de"], "short.de ends before line 2"),
        (["{tsv}"], "give --src-lang and --tgt-lang"),
        (["{bad}", "--src-lang", "en", "--tgt-lang", "de"], "bad.tsv, line 2: 3 tab-separated columns"),
        (["{broken}"], "broken.tmx: not well-formed XML"),
        ([], "give a FILE, or --src and --ref"),
    ],
)
def test_bad_inputs_are_one_line_naming_the_file_and_line(tmp_path, args, named):
    files = {"a": "a.en", "b": "short.de", "tsv": "ok.tsv", "bad": "bad.tsv", "broken": "broken.tmx"}
    (tmp_path / "a.en").write_text("One.\nTwo.\n")
    (tmp_path / "short.de").write_text("Eins.\n")
    (tmp_path / "ok.tsv").write_text("a\tb\n")
    (tmp_path / "bad.tsv").write_text("a\tb\na\tb\tc\n")
    (tmp_path / "broken.tmx").write_text('<tmx version="1.4"><header srclang="en"/><body><tu></body></tmx>')
    args = [arg.format(**{k: str(tmp_path / v) for k, v in files.items()}) for arg in args]
    result = run_cli("tm", "import", *args, "--tm", str(tmp_path / "tm.db"), expect_exit=1)
    assert named in result.stderr and "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_file_that_is_not_a_memory_is_refused_in_one_line(tmp_path):
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(MtkitError, match="junk.db: not a translation memory"):
        TranslationMemory(tmp_path / "junk.db")


def run_cli(*args: str, input: str | None = None, expect_exit: int = 0):
    result = run_mtkit(*args, stdin=input.encode() if input is not None else None)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == expect_exit, result.stderr
    return result


def pair(source: str, target: str) -> Unit:
    return Unit([Variant("en", source), Variant("de", target)])


def test_translate_takes_each_sentence_the_memory_holds_and_the_model_does_the_rest(trained_run, tmp_path):
    """Line 1 is in the memory but for its spans; line 3's first sentence is; the rest is the model's,
    as the model alone translates each sentence."""
    (tmp_path / "tm.tsv").write_text(
        "A dog runs at 7:45.\tEin Hund rennt um 7:45.\nTwo girls play.\tZwei Mädchen spielen.\n"
    )
    run_cli("tm", "import", str(tmp_path / "tm.tsv"), "--tm", str(tmp_path / "tm.db"), "--src-lang", "en",
            "--tgt-lang", "de")  # fmt: skip
    lines = "A dog runs at 9:30.\nA man is sitting on a bench.\nTwo girls play. A man is sitting on a bench.\n\n"
    alone = run_cli("translate", "-m", str(trained_run), "--beam", "2", input="A man is sitting on a bench.\n").stdout
    assert alone.strip() and alone.strip() != "Ein Hund rennt um 9:30."  # the model has its own translation
    args = ["translate", "-m", str(trained_run), "--beam", "2", "--tm", str(tmp_path / "tm.db"), "--src-lang", "en",
            "--tgt-lang", "de"]  # fmt: skip
    result = run_cli(*args, input=lines)
    assert result.stdout.splitlines() == [
        "Ein Hund rennt um 9:30.",
        alone.strip(),
        f"Zwei Mädchen spielen. {alone.strip()}",
        "",
    ]
    assert "2 of 4 sentences from the memory" in result.stderr
    result = run_cli(*args, "--json", input=lines)
    assert [json.loads(line) for line in result.stdout.splitlines()] == [
        {"translation": "Ein Hund rennt um 9:30.", "origin": "tm 100"},
        {"translation": alone.strip(), "origin": "mt"},
        {"translation": f"Zwei Mädchen spielen. {alone.strip()}", "origin": "tm 100 + mt"},
        {"translation": "", "origin": ""},
    ]
    refused = run_cli(*args, "--nbest", "2", input=lines, expect_exit=1)
    assert "--tm gives one plain-text translation a line" in refused.stderr
    (tmp_path / "src.en").write_text(lines)
    (tmp_path / "ref.de").write_text(lines)
    evaluated = run_cli("evaluate", *args[1:], "--src", str(tmp_path / "src.en"), "--ref", str(tmp_path / "ref.de"),
                        "-o", str(tmp_path / "out.de"), "--json")  # fmt: skip
    assert (tmp_path / "out.de").read_text() == "".join(
        f"{json.loads(line)['translation']}\n" for line in result.stdout.splitlines()
    )
    assert "2 of 4 sentences from the memory" in evaluated.stderr


def test_a_correction_through_suggest_comes_back_for_its_key_on_every_api_and_after_a_restart(trained_run, tmp_path):
    """LibreTranslate's /suggest with one key: that key's /translate, /v1/translate and DeepL's
    /v2/translate (through DeepL's own client) answer the correction, with the sentence's spans;
    another key gets the model's translation; the correction outlives the server; what the command
    line imported (the server's own memory) answers every key."""
    import deepl
    import httpx
    from test_serve import Server

    mine, theirs = "m" * 32, "o" * 32
    (tmp_path / "keys.txt").write_text(f"{mine} 1000 mine\n{theirs} 1000 theirs\n")
    options = ("--tm", tmp_path / "tm.db", "--api-keys", tmp_path / "keys.txt")
    text, correction = "A dog runs on the beach at 7:45.", "Ein Hund läuft um 7:45 am Strand."

    def translated(server, key: str, q: str = text) -> str:
        answer = server.post("/translate", json={"q": q, "source": "en", "target": "de", "api_key": key})
        assert answer.status_code == 200, answer.text
        return answer.json()["translatedText"]

    (tmp_path / "server.tsv").write_text("Two girls play.\tZwei Mädchen spielen.\n")  # the server's own memory
    run_cli("tm", "import", str(tmp_path / "server.tsv"), "--tm", str(tmp_path / "tm.db"), "--src-lang", "en",
            "--tgt-lang", "de")  # fmt: skip
    with Server(trained_run, tmp_path / "serve.log", *options, headers={"Authorization": f"Bearer {mine}"}) as server:
        assert translated(server, mine, "Two girls play.") == translated(server, theirs, "Two girls play.")
        assert translated(server, theirs, "Two girls play.") == "Zwei Mädchen spielen."
        by_model = translated(server, mine)
        assert by_model != correction
        fields = {"q": text, "s": correction, "source": "en", "target": "de", "api_key": mine}
        assert server.post("/suggest", json=fields).json() == {"success": True}
        assert translated(server, mine) == correction
        assert translated(server, mine, "A dog runs on the beach at 9:30.") == "Ein Hund läuft um 9:30 am Strand."
        v1 = server.post(
            "/v1/translate", json={"text": [text, "Two men talk."]}, headers={"Authorization": f"Bearer {mine}"}
        )
        assert v1.json()["translations"][0] == correction and v1.json()["origins"] == ["tm 100", "mt"]
        deepl_client = deepl.Translator(mine, server_url=server.url, send_platform_info=False)
        assert deepl_client.translate_text(text, source_lang="EN", target_lang="DE").text == correction
        assert translated(server, theirs) == by_model  # another key does not see it
        assert httpx.get(f"{server.url}/frontend/settings").json()["suggestions"] is True  # LibreTranslate's clients
        refused = server.post("/suggest", json={**fields, "s": ""})
        assert refused.status_code == 400 and refused.json() == {"error": "s: give a non-empty string"}
    with Server(trained_run, tmp_path / "again.log", *options, headers={"Authorization": f"Bearer {mine}"}) as server:
        assert translated(server, mine) == correction
    with Server(trained_run, tmp_path / "without.log") as server:
        answer = server.post("/suggest", json={"q": text, "s": correction, "source": "en", "target": "de"})
        assert answer.status_code == 403 and answer.json() == {"error": "Suggestions are disabled on this server."}
        assert httpx.post(f"{server.url}/v1/translate", json={"text": text}).json().get("origins") is None
        assert httpx.get(f"{server.url}/frontend/settings").json()["suggestions"] is False


def test_translate_file_takes_the_memory_s_sentences_into_a_file_without_formatting(trained_run, tmp_path):
    """Subtitles: a cue the memory holds (spans aside) is its stored translation, the other the model's,
    as translate gives them; a Markdown file with emphasis inside its paragraph is the model's alone."""
    (tmp_path / "tm.tsv").write_text("A dog runs at 7:45.\tEin Hund rennt um 7:45.\n")
    run_cli("tm", "import", str(tmp_path / "tm.tsv"), "--tm", str(tmp_path / "tm.db"), "--src-lang", "en",
            "--tgt-lang", "de")  # fmt: skip
    cues = (
        "1\n00:00:01,000 --> 00:00:02,000\nA dog runs at 9:30.\n\n2\n00:00:03,000 --> 00:00:04,000\nTwo men talk.\n\n"
    )
    (tmp_path / "in.srt").write_text(cues)
    alone = run_cli("translate", "-m", str(trained_run), "--beam", "2", input="Two men talk.\n").stdout.strip()
    memory = ["--tm", str(tmp_path / "tm.db"), "--src-lang", "en", "--tgt-lang", "de"]
    result = run_cli("translate-file", str(tmp_path / "in.srt"), "-o", str(tmp_path / "out.srt"), "-m",
                     str(trained_run), "--beam", "2", *memory)  # fmt: skip
    assert (tmp_path / "out.srt").read_text().split("\n")[2::4][:2] == ["Ein Hund rennt um 9:30.", alone]
    assert "1 of 2 sentences from the memory" in result.stderr
    (tmp_path / "in.md").write_text("A dog runs at **9:30**.\n")
    formatted = run_cli("translate-file", str(tmp_path / "in.md"), "-o", str(tmp_path / "out.md"), "-m",
                        str(trained_run), "--beam", "2", *memory)  # fmt: skip
    assert "has formatting inside its segments" in formatted.stderr
    assert "Ein Hund rennt" not in (tmp_path / "out.md").read_text()
