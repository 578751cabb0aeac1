"""What a server keeps, in PostgreSQL where several servers stand behind one address: the translation
memory (`--tm postgresql://…`), DeepL's stored glossaries and the keys' character usage (`--state-dir
postgresql://…`). Against a real PostgreSQL server the tests start (tests/postgres.py; they skip, saying
why, where it cannot start): the same answers as SQLite's, and two real servers that share every
correction, glossary and quota."""

import concurrent.futures
import json

import deepl
import httpx
import pytest
from test_memory import run_cli

from mtkit.api.access import Usage
from mtkit.api.glossaries import GlossaryStore
from mtkit.core.database import Database
from mtkit.core.errors import MtkitError
from mtkit.memory.store import TranslationMemory
from mtkit.memory.tmx import Unit, Variant

UNITS = [
    Unit([Variant("en", "A dog runs on the beach at 7:45."), Variant("de", "Ein Hund läuft um 7:45 am Strand.")]),
    Unit(
        [
            Variant("en", "Two girls play in the park."),
            Variant("de", "Zwei Mädchen spielen im Park."),
            Variant("fr", "Deux filles jouent dans le parc."),
        ]
    ),  # fmt: skip
    Unit([Variant("en", "Write to help@example.com."), Variant("de", "Schreiben Sie an help@example.com.")]),
    Unit([Variant("en", "Two girls play in the park."), Variant("de", "Zwei Mädchen spielen in dem Park.")]),
    Unit([Variant("en", "The 100% sure way?"), Variant("de", "Der 100% sichere Weg?")]),  # % and ? in the text
]
QUERIES = ["A dog runs on the beach at 9:30.", "Two girls play in a park.", "Write to me@example.org.",
           "The 100% sure way?", "Nothing like it at all."]  # fmt: skip


def everything_a_memory_answers(memory: TranslationMemory) -> dict:
    counts = memory.add(UNITS, "en")
    info = memory.info()
    return {
        "imported": counts,
        "lookups": [memory.lookup(query, "en", "de", threshold=60) for query in QUERIES],
        "french": memory.lookup("Two girls play in the park.", "en", "fr"),
        "pages": [
            memory.page("en", 0, 2),
            memory.page("en", 2, 10),
            memory.page("EN", 0, 10, "GIRLS"),
            memory.page("en", 0, 10, "GIRLS", case_sensitive=True),
            memory.page("en", 0, 10, "100%"),
        ],  # fmt: skip
        "units": list(memory.units(page=2)),
        "info": (info.source_lang, info.target_langs, info.units),
        "owner": (memory.owner_units(), memory.owner_memories()),
    }


def test_a_memory_in_postgresql_answers_as_one_in_sqlite(tmp_path, postgres_url):
    in_sqlite = everything_a_memory_answers(TranslationMemory(tmp_path / "tm.db", "support", "office"))
    in_postgres = everything_a_memory_answers(TranslationMemory(postgres_url, "support", "office"))
    assert in_postgres == in_sqlite
    assert in_sqlite["imported"].added == 4 and in_sqlite["imported"].updated == 1
    assert in_sqlite["lookups"][0][0].target == "Ein Hund läuft um 9:30 am Strand."  # spans put back
    assert [len(page) for page in in_sqlite["pages"]] == [2, 2, 1, 0, 1]


def test_a_change_through_one_connection_reaches_the_word_index_of_another(postgres_url):
    reader, writer = TranslationMemory(postgres_url), TranslationMemory(postgres_url)
    writer.add(UNITS[:1], "en")
    assert [m.score for m in reader.lookup("A dog runs on a beach at 7:45.", "en", "de")] == [88]
    writer.add([Unit([Variant("en", "A cat runs on the beach."), Variant("de", "Eine Katze läuft am Strand.")])])
    assert [m.target for m in reader.lookup("A cat runs on a beach.", "en", "de")] == ["Eine Katze läuft am Strand."]
    writer.delete()
    assert TranslationMemory.existing(postgres_url, "default") is None


def test_the_tm_commands_take_a_postgresql_url(tmp_path, postgres_url):
    (tmp_path / "pairs.tsv").write_text("A dog runs.\tEin Hund läuft.\nTwo men talk.\tZwei Männer reden.\n")
    imported = run_cli(
        "tm", "import", str(tmp_path / "pairs.tsv"), "--src-lang", "en", "--tgt-lang", "de", "--tm", postgres_url
    )
    assert "2 units added" in imported.stderr and "postgresql://postgres@/" in imported.stderr
    found = run_cli("tm", "lookup", "--tm", postgres_url, "--json", "A dog runs.")
    assert [(m["score"], m["target"]) for m in json.loads(found.stdout)["matches"]] == [(100, "Ein Hund läuft.")]
    run_cli("tm", "export", "--tm", postgres_url, "-o", str(tmp_path / "out.tmx"))
    run_cli("tm", "import", str(tmp_path / "out.tmx"), "--tm", str(tmp_path / "copy.db"))
    assert list(TranslationMemory(tmp_path / "copy.db").units()) == list(TranslationMemory(postgres_url).units())


def test_an_unreachable_server_is_one_line_without_its_password(tmp_path):
    url = "postgresql://mt:s3cret@127.0.0.1:9/tm?connect_timeout=2"
    result = run_cli("tm", "lookup", "--tm", url, "A dog.", expect_exit=1)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot connect" in lines[0] and "postgresql://mt@127.0.0.1:9" in lines[0]
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr
    with pytest.raises(MtkitError, match="--state-dir .*: not mtkit's server state"):
        (tmp_path / "junk").write_bytes(b"not a database" * 100)
        GlossaryStore(Database(tmp_path / "junk", "--state-dir", "mtkit's server state"))


@pytest.fixture(params=["sqlite", "postgres"])
def state_url(request, tmp_path):
    """A state database two stores open: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return request.getfixturevalue("postgres_url")


def test_glossaries_are_read_when_asked_for_and_again_after_another_server_changes_them(state_url):
    one, two = GlossaryStore(Database(state_url)), GlossaryStore(Database(state_url))
    made = one.create("office", "g", "en", "de", [("dog", "Hund")])
    assert two._read == {}  # nothing read before it is asked for
    assert two.get("office", made.glossary_id).entries == [("dog", "Hund")]
    assert two.get("other", made.glossary_id) is None  # another key's is not found
    one.change("office", made.glossary_id, dictionaries=[("en", "de", [("cat", "Katze")])])
    seen = two.get("office", made.glossary_id)
    assert (seen.entries, seen.revision) == ([("dog", "Hund"), ("cat", "Katze")], 1)
    assert [g.glossary_id for g in two.owned("office")] == [made.glossary_id]
    assert one.delete("office", made.glossary_id) and two.get("office", made.glossary_id) is None


def test_glossaries_an_earlier_version_kept_as_files_move_into_the_state_database(tmp_path):
    from mtkit.api.glossaries import StoredGlossary, _stored

    folder = tmp_path / "state" / "glossaries"
    folder.mkdir(parents=True)
    old = StoredGlossary("0f0e", "old", "en", "de", "2026-01-01T00:00:00.000000Z", [("dog", "Hund")], "office")
    (folder / "0f0e.json").write_text(_stored(old))
    store = GlossaryStore(Database(tmp_path / "state" / "state.db"))
    assert store.take_folder(folder) == 1 and list(folder.iterdir()) == []
    assert GlossaryStore(Database(tmp_path / "state" / "state.db")).get("office", "0f0e") == old


def test_servers_sharing_a_quota_never_pass_it_together(state_url):
    usages = [Usage(Database(state_url)) for _ in range(4)]
    charges = [(usages[n % 4], 7) for n in range(400)]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        admitted = list(pool.map(lambda charge: charge[0].add("office", charge[1], 1000), charges))
    assert sum(admitted) == 1000 // 7 and usages[0].of("office") == 7 * (1000 // 7)
    assert usages[1].add("office", -7) and usages[2].of("office") == 7 * (1000 // 7 - 1)  # a refund


MINE = "m" * 32


@pytest.fixture()
def two_servers(trained_run, tmp_path, postgres_url):
    from test_serve import Server

    (tmp_path / "keys.txt").write_text(f"{MINE} 1000 mine 200\n")
    shared = ("--tm", postgres_url, "--state-dir", postgres_url, "--api-keys", tmp_path / "keys.txt")
    headers = {"Authorization": f"Bearer {MINE}"}
    with Server(trained_run, tmp_path / "a.log", *shared, headers=headers) as a:
        with Server(trained_run, tmp_path / "b.log", *shared, headers=headers) as b:
            yield a, b


def test_two_servers_on_one_database_share_corrections_glossaries_and_the_quota(two_servers):
    a, b = two_servers
    text, fixed = "A dog runs on the beach.", "Ein Hund rennt am Strand."
    assert a.post("/suggest", json={"q": text, "s": fixed, "source": "en", "target": "de", "api_key": MINE}).json() == {
        "success": True
    }
    answer = b.post("/translate", json={"q": text, "source": "en", "target": "de", "api_key": MINE}).json()
    assert answer["translatedText"] == fixed

    made = deepl.Translator(MINE, server_url=a.url, send_platform_info=False).create_glossary(
        "shared", "EN", "DE", {"dog": "Hund"}
    )
    other = deepl.Translator(MINE, server_url=b.url, send_platform_info=False)
    assert [(g.glossary_id, g.entry_count) for g in other.list_glossaries()] == [(made.glossary_id, 1)]
    other.delete_glossary(made.glossary_id)
    with pytest.raises(deepl.GlossaryNotFoundException):
        deepl.Translator(MINE, server_url=a.url, send_platform_info=False).get_glossary(made.glossary_id)

    used = len(text)  # the quota (200) is charged on both: the translation through b counted
    rest = "x" * (200 - used - 10)
    assert a.post("/translate", json={"q": rest, "source": "en", "target": "de", "api_key": MINE}).status_code == 200
    refused = b.post("/translate", json={"q": "y" * 11, "source": "en", "target": "de", "api_key": MINE})
    assert refused.status_code == 429 and f"{200 - 10:,} of 200" in refused.json()["error"]
    usage = httpx.get(f"{a.url}/v2/usage", headers={"Authorization": f"DeepL-Auth-Key {MINE}"}).json()
    assert usage == {"character_count": 190, "character_limit": 200}
