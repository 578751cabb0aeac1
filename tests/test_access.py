"""`mtkit serve` on the open network: API keys from a file (403 without one, 429 over a key's limit,
the file read again when it changes or on SIGHUP), per-address limits without keys, limits on texts
and body size, and clients that send slowly or too much cannot stall the others."""

import hashlib
import os
import re
import signal
import socket

import httpx
import pytest
from conftest import run_mtkit
from test_serve import Server, offline, wait_until

from mtkit.api.access import WINDOW_S, AccessRules, Gate, KeyFile, SlidingWindow, bearer_key, parse_key_file
from mtkit.api.edge import RequestError
from mtkit.core.errors import MtkitError

pytest.importorskip("fastapi")

ALPHA, BETA, GAMMA = "alpha-3f9c2d7e-aa41", "beta-a8d1c0b6-77e2", "gamma-0bd2e9f7-c351"
KEYS = f"# key  requests per minute  name\n{ALPHA} 2 newsroom\n\n{BETA}   # no limit, a name of its own\n"


@pytest.fixture(scope="module")
def sentences(corpus):
    return (corpus / "test.en").read_text().splitlines()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def write_atomic(path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


# --- the key file, the windows, the gate ---------------------------------------------------------


def test_a_key_file_gives_keys_limits_and_names_but_keeps_no_key():
    keys = parse_key_file(KEYS, "keys.txt")
    assert {key.name: key.per_minute for key in keys.values()} == {"newsroom": 2, _default_name(BETA): 0}
    assert not any(ALPHA in repr(key) or BETA in repr(key) for key in keys.values())


def test_a_fourth_column_is_a_character_quota_that_the_gate_charges():
    keys = parse_key_file("k1 60 office 100\nk2\n", "keys.txt")
    office, other = sorted(keys.values(), key=lambda key: key.name != "office")
    assert (office.characters, other.characters) == (100, 0)
    gate = Gate(AccessRules())
    gate.charge(office, 60)
    gate.charge(office, 40)  # exactly the quota
    with pytest.raises(RequestError) as refused:
        gate.charge(office, 1)
    assert refused.value.status == 456 and refused.value.message == "quota exceeded: 100 of 100 characters used"
    gate.charge(other, 10**9)  # no quota
    gate.charge(office, 5, check=False)  # a document's characters, counted once known
    assert (gate.usage.of("office"), gate.usage.of(other.name)) == (105, 10**9)


def _default_name(key: str) -> str:
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:8]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("k1 60\nk2 sixty\n", "keys.txt:2: expected KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]]"),
        ("k1 60 a b\n", "keys.txt:1: expected KEY"),
        ("k1 60 a 5 6\n", "keys.txt:1: expected KEY"),
        ("k1\nk1 5\n", "keys.txt:2: the key is given twice"),
        ("k1 1 team\nk2 1 team\n", "keys.txt:2: the name team is given twice"),
        ("# nothing but comments\n\n", "keys.txt: no keys"),
    ],
)
def test_a_key_file_that_does_not_read_is_one_error_naming_the_line(text, message):
    with pytest.raises(MtkitError, match=re.escape(message)):
        parse_key_file(text, "keys.txt")


def test_a_window_admits_its_limit_then_says_when_it_has_room_again():
    clock = Clock()
    window = SlidingWindow(clock)
    assert window.admit("k", 2) == 0.0  # at 0 s
    clock.now += 10
    assert window.admit("k", 2) == 0.0  # at 10 s
    assert window.admit("k", 2) == pytest.approx(WINDOW_S - 10)  # room when the first leaves the window
    assert window.admit("other", 2) == 0.0  # every name has its own window
    clock.now += WINDOW_S - 10
    assert window.admit("k", 2) == 0.0  # the first left: room for one
    assert window.admit("k", 2) == pytest.approx(10)  # the next when the one of 10 s leaves


def test_the_key_file_is_read_again_when_it_changes_and_kept_when_it_breaks(tmp_path, capfd):
    path = tmp_path / "keys.txt"
    path.write_text(KEYS)
    keys = KeyFile(path)
    write_atomic(path, f"{GAMMA} 5 desk\n")
    assert [key.name for key in keys.current().values()] == ["desk"]
    write_atomic(path, f"{GAMMA} five\n")
    assert [key.name for key in keys.current().values()] == ["desk"]
    assert [key.name for key in keys.current().values()] == ["desk"]
    assert capfd.readouterr().err.count("api keys: kept the 1 read before: ") == 1  # once, until it changes
    write_atomic(path, KEYS)
    assert sorted(key.name for key in keys.current().values()) == sorted(["newsroom", _default_name(BETA)])


def test_without_keys_or_limits_every_request_goes_in():
    gate = Gate(AccessRules(), Clock())
    assert gate.identify(None) is None
    for _ in range(100):
        gate.limit(None, "10.0.0.1")


def test_a_key_is_taken_from_a_bearer_header():
    assert bearer_key("Bearer abc") == bearer_key("bearer  abc ") == "abc"
    assert bearer_key("Basic abc") is bearer_key(None) is bearer_key("Bearer ") is None


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (AccessRules(per_address=-1), "--req-limit -1: must be at least 0"),
        (AccessRules(protect_status=True), "--private-status needs --api-keys"),
    ],
)
def test_contradictory_access_options_are_refused(rules, message):
    with pytest.raises(MtkitError, match=re.escape(message)):
        rules.validate()


def test_a_gate_with_keys_refuses_none_and_a_wrong_one_and_limits_each_key(tmp_path):
    path = tmp_path / "keys.txt"
    path.write_text(KEYS)
    clock = Clock()
    gate = Gate(AccessRules(keys=KeyFile(path)), clock)
    for presented in (None, "", "alpha", ALPHA + " "):
        with pytest.raises(RequestError) as refused:
            gate.identify(presented)
        assert refused.value.status == 403
    alpha, beta = gate.identify(ALPHA), gate.identify(BETA)
    gate.limit(alpha, "a")
    gate.limit(alpha, "b")  # alpha's second of two a minute, from another address
    with pytest.raises(RequestError) as over:
        gate.limit(alpha, "a")
    assert over.value.status == 429 and over.value.headers == {"Retry-After": "60"}
    for _ in range(50):
        gate.limit(beta, "a")  # no limit
    clock.now += WINDOW_S
    gate.limit(alpha, "a")


# --- the server ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed(trained_run, tmp_path_factory):
    """A server with a key file (newsroom: 2 a minute; beta: no limit), --private-status, --max-texts 2."""
    folder = tmp_path_factory.mktemp("keyed")
    (folder / "keys.txt").write_text(KEYS)
    with Server(trained_run, folder / "serve.log", "--api-keys", folder / "keys.txt", "--private-status",
                "--max-texts", "2", headers={"Authorization": f"Bearer {BETA}"}) as served:  # fmt: skip
        served.key_file = folder / "keys.txt"
        yield served


def test_without_a_valid_key_every_translating_and_status_endpoint_answers_403(keyed):
    requests = [
        ("POST", "/v1/translate", {"json": {"text": "A dog runs."}}),
        ("POST", "/v1/translate", {"json": {"text": "A dog runs.", "api_key": "wrong"}}),
        ("POST", "/translate", {"json": {"q": "A dog runs.", "target": "de", "api_key": "wrong"}}),
        ("POST", "/translate", {"data": {"q": "A dog runs.", "target": "de"}}),
        ("POST", "/detect", {"json": {"q": "A dog runs."}}),
        ("GET", "/health", {}),
        ("GET", "/ready", {"headers": {"Authorization": "Bearer wrong"}}),
        ("GET", "/metrics", {}),
    ]
    for method, path, options in requests:
        answer = httpx.request(method, f"{keyed.url}{path}", timeout=60, **options)
        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"].startswith("a valid API key is needed")
    assert httpx.get(f"{keyed.url}/languages").status_code == 200  # what the server offers stays public


def test_a_key_in_the_body_or_a_bearer_header_translates_as_offline(keyed, trained_run, sentences):
    expected = offline(trained_run, sentences[:2])
    bearer = keyed.post("/v1/translate", json={"text": sentences[:2]}, headers={"Authorization": f"Bearer {BETA}"})
    assert bearer.json() == {"translations": expected}
    in_body = keyed.post("/translate", json={"q": sentences[0], "source": "en", "target": "de", "api_key": BETA})
    assert in_body.json() == {"translatedText": expected[0]}
    too_many = keyed.post("/v1/translate", json={"text": sentences[:3], "api_key": BETA})
    assert too_many.status_code == 413 and "3 texts: the limit is 2 per request (--max-texts)" in too_many.text


def test_a_key_over_its_limit_gets_429_and_metrics_count_by_name_never_by_key(keyed):
    before = keyed.metrics()
    answers = [keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": ALPHA}) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    assert 1 <= int(answers[2].headers["Retry-After"]) <= 60 and "2 requests per minute" in answers[2].text
    wait_until(keyed.settled, "the answers counted")
    after = keyed.metrics()
    counted = {
        status: after.get(f'mtkit_key_requests_total{{key="newsroom",status="{status}"}}', 0)
        - before.get(f'mtkit_key_requests_total{{key="newsroom",status="{status}"}}', 0)
        for status in ("200", "429")
    }
    assert counted == {"200": 2, "429": 1}
    metrics_text = httpx.get(f"{keyed.url}/metrics", headers=keyed.headers).text
    log = keyed.log_path.read_text()
    assert '"key": "newsroom"' in log and ALPHA not in log + metrics_text and BETA not in log + metrics_text


def test_a_key_file_changed_while_serving_takes_effect_at_the_next_request(keyed):
    new = KEYS.replace(BETA, GAMMA)
    write_atomic(keyed.key_file, new)
    keyed.headers = {"Authorization": f"Bearer {GAMMA}"}
    try:
        assert keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": BETA}).status_code == 403
        assert keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": GAMMA}).status_code == 200
        write_atomic(keyed.key_file, "this line has too many fields\n")  # a broken file keeps the keys
        assert keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": GAMMA}).status_code == 200
        assert "api keys: kept the 2 read before" in keyed.log_path.read_text()
        write_atomic(keyed.key_file, KEYS)
        assert keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": BETA}).status_code == 200
        reads = keyed.log_path.read_text().count("api keys: read")
        keyed.process.send_signal(signal.SIGHUP)  # read again at the next request, though the file is as it was
        wait_until(lambda: "SIGHUP" in keyed.log_path.read_text(), "the server took the signal")
        assert keyed.post("/v1/translate", json={"text": "A dog runs.", "api_key": BETA}).status_code == 200
        assert keyed.log_path.read_text().count("api keys: read") == reads + 1 and keyed.process.poll() is None
    finally:
        write_atomic(keyed.key_file, KEYS)
        keyed.headers = {"Authorization": f"Bearer {BETA}"}


def test_the_libretranslate_client_translates_with_a_key_and_is_refused_without(keyed):
    from libretranslatepy import LibreTranslateAPI

    assert LibreTranslateAPI(keyed.url, api_key=BETA).translate("A dog runs.", "en", "de")
    with pytest.raises(Exception, match="403"):
        LibreTranslateAPI(keyed.url).translate("A dog runs.", "en", "de")


def test_a_bad_key_file_stops_serve_at_once_with_one_line(trained_run, tmp_path):
    (tmp_path / "keys.txt").write_text("k1 sixty\n")
    result = run_mtkit("serve", "-m", trained_run, "--api-keys", tmp_path / "keys.txt", "--port", "0")
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        f"error: {tmp_path / 'keys.txt'}:1: expected KEY [REQUESTS_PER_MINUTE [NAME [CHARACTERS]]]"
    ]


@pytest.fixture(scope="module")
def limited(trained_run, tmp_path_factory):
    """A server without keys, 3 requests a minute per client address, 1,000 characters a request."""
    folder = tmp_path_factory.mktemp("limited")
    with Server(trained_run, folder / "serve.log", "--req-limit", "3", "--max-chars", "1000") as served:
        yield served


def test_without_keys_each_address_has_its_limit(limited):
    statuses = [limited.post("/v1/translate", json={"text": "A dog runs."}).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    assert httpx.get(f"{limited.url}/health").status_code == 200  # status endpoints are not limited


def read_response(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_body_over_the_limit_is_refused_before_it_is_read(limited):
    limit = 12 * 1000 + (64 << 10)
    with socket.create_connection(("127.0.0.1", limited.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n{")  # fmt: skip
        answer = read_response(sock)  # the server closes after answering: nothing else was waited for
    assert answer.startswith(b"HTTP/1.1 413") and f"over {limit:,} bytes".encode() in answer

    def chunks():
        yield b'{"text": "'
        for _ in range(200):
            yield b"x" * 1000  # 200 kB: over the limit, sent without a Content-Length

    streamed = httpx.post(f"{limited.url}/detect", content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413 and streamed.json() == {"error": f"the request body is over {limit:,} bytes"}


def test_slow_clients_do_not_stall_the_others(trained_run, sentences, tmp_path):
    server = Server(trained_run, tmp_path / "serve.log")
    slow = []
    try:
        for _ in range(50):  # each sends half a request, then nothing
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
            sock.sendall(b'POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"text":')
            slow.append(sock)
        answer = server.post("/v1/translate", json={"text": sentences[:2]})
        assert answer.json() == {"translations": offline(trained_run, sentences[:2])}
    finally:
        for sock in slow:
            sock.close()
        assert server.stop() == 0
