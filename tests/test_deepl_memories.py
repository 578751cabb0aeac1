"""DeepL's translation memories on `mtkit serve --tm`, through DeepL's own client: a TMX file written by
another tool (translate-toolkit) imported, listed, paged through, used by /v2/translate with its id and
threshold (a sentence it holds, spans aside, comes back as stored), exported to TMX and deleted; another
key sees none of it, and a server without --tm refuses the routes."""

import deepl
import httpx
import pytest
from translate.storage import tmx as toolkit_tmx

pytest.importorskip("fastapi")

MINE, THEIRS = "m" * 32, "t" * 32
PAIRS = [
    ("A dog runs on the beach at 7:45.", "Ein Hund läuft um 7:45 am Strand."),
    ("Two girls play in the park.", "Zwei Mädchen spielen im Park."),
    ("Write to help@example.com.", "Schreiben Sie an help@example.com."),
]


def written_by_translate_toolkit(path):
    store = toolkit_tmx.tmxfile(sourcelanguage="en", targetlanguage="de")
    for source, target in PAIRS:
        store.addsourceunit(source).target = target
    path.write_bytes(bytes(store))
    return path


def client(server, key: str) -> deepl.DeepLClient:
    return deepl.DeepLClient(key, server_url=server.url, send_platform_info=False)


@pytest.fixture()
def server(trained_run, tmp_path):
    from test_serve import Server

    (tmp_path / "keys.txt").write_text(f"{MINE} 100000 mine\n{THEIRS} 100000 theirs\n")
    options = ("--tm", tmp_path / "tm.db", "--api-keys", tmp_path / "keys.txt")
    with Server(trained_run, tmp_path / "serve.log", *options, headers={"Authorization": f"Bearer {MINE}"}) as running:
        yield running


def test_a_tmx_file_imported_through_deepl_s_client_is_used_paged_exported_and_deleted(server, tmp_path):
    mine = client(server, MINE)
    job = mine.import_translation_memory_from_filepath(written_by_translate_toolkit(tmp_path / "support.tmx"),
                                                       display_name="Support", timeout_s=60)  # fmt: skip
    memory_id = job.result.translation_memory_id
    assert job.ok and job.result.skipped_segment_count == 0
    (listed,) = mine.list_translation_memories()
    assert (listed.translation_memory_id, listed.name, listed.source_language, listed.target_languages,
            listed.segment_count) == (memory_id, "Support", "en", ["de"], 3)  # fmt: skip

    text = "A dog runs on the beach at 9:30."  # the first unit, another time: a 100% match, its span put back
    remembered = mine.translate_text(text, source_lang="EN", target_lang="DE", translation_memory=memory_id,
                                     translation_memory_threshold=80)  # fmt: skip
    assert remembered.text == "Ein Hund läuft um 9:30 am Strand."
    by_model = mine.translate_text(text, source_lang="EN", target_lang="DE").text
    assert by_model != remembered.text  # without the memory's id: the model's translation

    first = mine.list_translation_memory_segments(memory_id, page_size=2)
    rest = mine.list_translation_memory_segments(memory_id, page_size=2, page_cursor=first.next_page_cursor)
    assert [s.source_text for s in first.segments + rest.segments] == [source for source, _ in PAIRS]
    assert rest.next_page_cursor is None and first.segment_count == 3
    assert [(t.target_language, t.target_text) for t in rest.segments[0].targets] == [("de", PAIRS[2][1])]
    found = mine.list_translation_memory_segments(memory_id, filter_text="GIRLS")
    assert [s.source_text for s in found.segments] == [PAIRS[1][0]]

    mine.export_translation_memory_to_filepath(memory_id, tmp_path / "out.tmx", timeout_s=60)
    exported = toolkit_tmx.tmxfile((tmp_path / "out.tmx").read_bytes(), sourcelanguage="en", targetlanguage="de")
    assert [(unit.source, unit.target) for unit in exported.units] == PAIRS

    theirs = client(server, THEIRS)
    assert theirs.list_translation_memories() == []
    with pytest.raises(deepl.DeepLException, match="not found"):
        theirs.get_translation_memory(memory_id)
    with pytest.raises(deepl.DeepLException, match="not found"):
        theirs.translate_text(text, source_lang="EN", target_lang="DE", translation_memory=memory_id)

    mine.delete_translation_memory(memory_id)
    assert mine.list_translation_memories() == []
    with pytest.raises(deepl.DeepLException, match="not found"):
        mine.translate_text(text, source_lang="EN", target_lang="DE", translation_memory=memory_id)


def test_corrections_through_suggest_are_the_key_s_default_memory(server):
    text, correction = "Two men talk.", "Zwei Männer unterhalten sich."
    fields = {"q": text, "s": correction, "source": "en", "target": "de", "api_key": MINE}
    assert server.post("/suggest", json=fields).json() == {"success": True}
    (listed,) = client(server, MINE).list_translation_memories()
    assert (listed.translation_memory_id, listed.segment_count) == ("default", 1)
    assert client(server, THEIRS).list_translation_memories() == []


def test_bad_requests_get_deepl_s_errors(server):
    headers = {"Authorization": f"DeepL-Auth-Key {MINE}"}
    for body, status, message in [
        ({"text": ["x"], "target_lang": "DE", "translation_memory_threshold": 80}, 400,
         "Parameter 'translation_memory_threshold' requires 'translation_memory_id'."),
        ({"text": ["x"], "target_lang": "DE", "translation_memory_id": "default", "translation_memory_threshold": 101},
         400, "Value for 'translation_memory_threshold' not supported."),
        ({"text": ["x"], "target_lang": "DE", "translation_memory_id": "../../etc"}, 404, "Translation memory not found"),
    ]:  # fmt: skip
        answer = server.post("/v2/translate", json=body, headers=headers)
        assert (answer.status_code, answer.json()) == (status, {"message": message})
    big = server.post("/v3/translation_memories/import", headers=headers,
                      json={"source_file": {"file_name": "a.tmx", "content_length": 10**12}})  # fmt: skip
    assert big.status_code == 413
    made = server.post("/v3/translation_memories/import", headers=headers,
                       json={"source_file": {"file_name": "a.tmx", "content_length": 5}}).json()  # fmt: skip
    wrong = httpx.put(made["upload_url"].replace("token=", "token=x"), content=b"<tmx>")
    assert wrong.status_code == 404
    assert httpx.put(made["upload_url"], content=b"<tmx>").status_code == 200  # not a TMX file: the job says why
    status = httpx.get(f"{server.url}/v3/translation_memories/jobs/{made['job_id']}", headers=headers).json()
    assert (
        status["results"][0]["status"] == "failed" and "not well-formed XML" in status["results"][0]["error"]["message"]
    )


def test_a_server_without_tm_refuses_the_routes(trained_run, tmp_path):
    from test_serve import Server

    with Server(trained_run, tmp_path / "serve.log") as server:
        answer = httpx.get(f"{server.url}/v3/translation_memories")
        assert answer.status_code == 403 and "serve --tm FILE" in answer.json()["message"]
