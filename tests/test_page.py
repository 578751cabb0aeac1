"""The translation page of `mtkit serve`, in a real browser (headless Chromium through Selenium):
typing translates as offline, targets switch for a multilingual model, pointing at a target word
highlights the source words aligned to it, a document keeps its lines, and errors show the
server's message. Without Chromium and its driver (`make browser` installs Debian's) these tests
skip, saying so."""

import json
import math
import shutil

import httpx
import pytest
from conftest import run_mtkit
from test_serve import Server, offline

pytest.importorskip("fastapi")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
WAIT_S = 120  # only turns a hang into a failure: every wait is for a state of the page


@pytest.fixture(scope="module")
def browser():
    selenium = pytest.importorskip("selenium", reason="the page's tests need selenium (pip install -e '.[dev]')")
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("the page's tests need Chromium and chromedriver: make browser (Debian: chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        options.add_argument(argument)
    options.binary_location = CHROMIUM
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.selenium = selenium
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def server(trained_run, tmp_path_factory):
    with Server(trained_run, tmp_path_factory.mktemp("page") / "serve.log", "--max-chars", "300") as served:
        yield served


@pytest.fixture(scope="module")
def lines(corpus):
    return (corpus / "test.en").read_text().splitlines()


def wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(lambda d: condition(), message=f"never happened: {what}")


def by_id(driver, name):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, name)


def output_lines(driver) -> list[str]:
    """The output's lines, read in one step of the page (a render between finding them and reading them
    would leave stale elements)."""
    return driver.execute_script("return [...document.querySelectorAll('#output .line')].map((l) => l.textContent)")


def open_page(driver, url: str) -> None:
    driver.get(url)
    wait(driver, lambda: by_id(driver, "target").get_attribute("value"), "the languages loaded")


def type_text(driver, text: str) -> None:
    box = by_id(driver, "input")
    box.clear()
    box.send_keys(text)


def test_typing_gives_the_offline_translation(browser, server, trained_run, lines):
    open_page(browser, server.url)
    expected = offline(trained_run, lines[:3])
    type_text(browser, "\n".join(lines[:3]))
    wait(browser, lambda: output_lines(browser) == expected, "the offline translation on the page")
    assert by_id(browser, "error").is_displayed() is False


def test_pointing_at_a_target_word_highlights_its_aligned_source_words(browser, server, lines):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    open_page(browser, server.url)
    type_text(browser, lines[4])
    answer = server.post("/v1/translate", json={"text": [lines[4]], "alignment": True}).json()
    best = answer["translations"][0][0]
    wait(browser, lambda: output_lines(browser) == [best["text"]], "the translation")
    pairs = [tuple(map(int, pair.split("-"))) for pair in best["alignment"].split()]
    targets = browser.find_elements(By.CSS_SELECTOR, "#output .word")

    def highlighted() -> list[int]:
        spans = browser.find_elements(By.CSS_SELECTOR, "#source-words .aligned")
        return sorted(int(span.get_attribute("data-word")) for span in spans)

    checked = 0
    for target in sorted({t for _, t in pairs})[:4]:
        ActionChains(browser).move_to_element(targets[target]).perform()
        expected = sorted(s for s, t in pairs if t == target)
        wait(browser, lambda: highlighted() == expected, f"source words {expected} for target word {target}")  # noqa: B023
        checked += 1
    assert checked >= 1


def test_a_document_keeps_its_lines(browser, server, trained_run, lines, tmp_path):
    document = [lines[0], "", f"{lines[1]} {lines[2]}", lines[3], ""]
    path = tmp_path / "notes.txt"
    path.write_text("\n".join(document) + "\n")
    open_page(browser, server.url)
    by_id(browser, "mode-document").click()
    by_id(browser, "document-file").send_keys(str(path))
    wait(browser, lambda: by_id(browser, "document-input").get_attribute("value") == path.read_text(), "the upload")
    by_id(browser, "document-go").click()
    wait(browser, lambda: by_id(browser, "document-download").is_displayed(), "the download link")
    expected = offline(trained_run, document, "--split-sentences")
    assert by_id(browser, "document-output").get_attribute("textContent") == "\n".join(expected) + "\n"
    assert by_id(browser, "document-download").get_attribute("download") == "notes.de.txt"
    assert by_id(browser, "document-status").text == f"{len(document)} of {len(document)} lines"


def test_an_html_document_keeps_its_markup(browser, server, trained_run, lines, tmp_path):
    document = f"<html><body>\n<h1>{lines[0]}</h1>\n<p>A <b>dog</b> runs.\n{lines[1]}</p>\n</body></html>\n"
    path = tmp_path / "page.html"
    path.write_text(document)
    open_page(browser, server.url)  # its own page: not the one an earlier test left
    by_id(browser, "mode-document").click()
    by_id(browser, "document-file").send_keys(str(path))
    wait(browser, lambda: by_id(browser, "document-input").get_attribute("value") == document, "the upload")
    by_id(browser, "document-go").click()
    wait(browser, lambda: by_id(browser, "document-download").is_displayed(), "the download link")
    expected = server.post("/v1/translate", json={"text": [document], "format": "html"}).json()["translations"][0]
    assert "<h1>" in expected and "<b>" in expected  # the markup is kept
    assert by_id(browser, "document-output").get_attribute("textContent") == expected
    assert by_id(browser, "document-download").get_attribute("download") == "page.de.html"


def test_an_error_shows_the_server_s_message(browser, server, trained_run, lines):
    open_page(browser, server.url)
    type_text(browser, lines[0])
    wait(browser, lambda: output_lines(browser) == offline(trained_run, lines[:1]), "a translation")
    by_id(browser, "input").send_keys(" " + "x" * (300 - len(lines[0])))
    expected = "301 characters: the limit is 300 per request (--max-chars)"
    wait(browser, lambda: by_id(browser, "error").text == expected, "the server's message")
    assert output_lines(browser) == [""]  # the translation of the shorter text is not left standing


def test_switching_targets_translates_into_each(browser, corpus, tmp_path):
    marian = pytest.importorskip("test_marian")
    directory = marian.build_marian(tmp_path, corpus, "opus-mt-en-ROMANCE", marian.MULTILINGUAL_TAGS)
    assert run_mtkit("import", directory, "-o", tmp_path / "mul.pt").returncode == 0
    source = (corpus / "test.en").read_text().splitlines()[:2]
    with Server(tmp_path / "mul.pt", tmp_path / "serve.log", "--tgt-lang", "fra") as server:
        open_page(browser, server.url)
        from selenium.webdriver.support.ui import Select

        target = Select(by_id(browser, "target"))
        assert sorted(option.get_attribute("value") for option in target.options) == ["fra", "por", "spa"]
        type_text(browser, "\n".join(source))
        for lang in ("spa", "por", "fra"):
            target.select_by_value(lang)
            expected = offline(tmp_path / "mul.pt", source, "--tgt-lang", lang)
            wait(browser, lambda: output_lines(browser) == expected, f"the translation into {lang}")  # noqa: B023


def test_no_page_leaves_the_json_api_alone(trained_run, tmp_path):
    with Server(trained_run, tmp_path / "serve.log", "--no-page") as server:
        assert httpx.get(f"{server.url}/").status_code == 404
        assert httpx.get(f"{server.url}/page/page.js").status_code == 404
        assert server.post("/v1/translate", json={"text": "A dog runs."}).status_code == 200


def test_the_page_and_its_files_are_served_and_nothing_else(server):
    page = httpx.get(f"{server.url}/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "http://" not in page.text and "https://" not in page.text  # nothing from another host
    script = httpx.get(f"{server.url}/page/page.js")
    assert script.headers["content-type"].startswith("text/javascript") and "fetch(" in script.text
    assert httpx.get(f"{server.url}/page/../http.py").status_code == 404
    assert httpx.get(f"{server.url}/page/index.html").status_code == 404


def test_a_server_that_asks_for_a_key_says_so_until_the_page_has_one(browser, trained_run, lines, tmp_path):
    from selenium.webdriver.common.keys import Keys

    (tmp_path / "keys.txt").write_text("page-key-7c1d 0 page\n")
    with Server(trained_run, tmp_path / "serve.log", "--api-keys", tmp_path / "keys.txt") as server:
        open_page(browser, server.url)
        type_text(browser, lines[0])
        message = "a valid API key is needed: api_key in the body, or Authorization: Bearer KEY"
        wait(browser, lambda: by_id(browser, "error").text == message, "the server's 403 message")
        browser.find_element("css selector", "#key-box summary").click()
        by_id(browser, "api-key").send_keys("page-key-7c1d", Keys.TAB)  # the key is taken when the field changes
        expected = offline(trained_run, lines[:1])
        wait(browser, lambda: output_lines(browser) == expected, "the translation with the key")
        assert by_id(browser, "error").is_displayed() is False
        browser.execute_script("localStorage.clear()")


def test_the_glossary_box_places_its_terms_and_marks_them(browser, server, trained_run, tmp_path):
    """Pairs typed in the glossary box: the translation is `translate --glossary`'s, its terms marked; a
    malformed pair is the page's one-line error."""
    from selenium.webdriver.common.by import By

    text = "A dog runs at the beach.\nA woman sits on the grass."
    (tmp_path / "g.tsv").write_text("dog\tKater\n", encoding="utf-8")
    expected = offline(trained_run, text.split("\n"), "--glossary", tmp_path / "g.tsv")
    open_page(browser, server.url)
    browser.find_element(By.CSS_SELECTOR, "#glossary-box summary").click()
    by_id(browser, "glossary").send_keys("dog = Kater")
    type_text(browser, text)
    wait(browser, lambda: output_lines(browser) == expected, "the translation with the glossary")
    rows = browser.find_elements(By.CSS_SELECTOR, "#output .line")
    marked = [[span.text for span in row.find_elements(By.CSS_SELECTOR, ".term")] for row in rows]
    assert marked[0] and all("Kater" in word for word in marked[0]) and marked[1] == []
    by_id(browser, "glossary").send_keys("\nonly a source")
    message = 'glossary line 2: a source term, a tab (or " = ") and a target term'
    wait(browser, lambda: by_id(browser, "error").text == message, "the glossary's error")
    by_id(browser, "glossary").clear()


def test_lines_of_low_confidence_are_shaded(browser, trained_run, lines, tmp_path):
    """serve --confidence: each line under 0.5 is shaded and says its confidence; the others are not."""
    from selenium.webdriver.common.by import By

    uncalibrated = run_mtkit("translate", "-m", trained_run, "--confidence", "--precision", "fp32",
                             stdin="".join(line + "\n" for line in lines[:6]).encode())  # fmt: skip
    signals = sorted(math.log(float(row.split("\t")[0])) for row in uncalibrated.stdout.decode().splitlines())
    middle = (signals[2] + signals[3]) / 2  # a map that puts half the lines below 0.5
    (tmp_path / "flat.json").write_text(json.dumps({"format": "mtkit-confidence-1", "signal": "logprob",
                                                    "points": [[middle - 1e-6, 0.2], [middle + 1e-6, 0.8]], "scales": {}}))  # fmt: skip
    with Server(trained_run, tmp_path / "serve.log", "--confidence", "--calibration", tmp_path / "flat.json") as server:
        answer = server.post("/v1/translate", json={"text": lines[:6]}).json()
        unsure = [i for i, c in enumerate(answer["confidences"]) if c < 0.5]
        assert 0 < len(unsure) < 6, answer["confidences"]  # the map puts some lines on each side
        open_page(browser, server.url)
        assert by_id(browser, "confidence-note").is_displayed()
        type_text(browser, "\n".join(lines[:6]))
        wait(browser, lambda: output_lines(browser) == answer["translations"], "the translation")
        rows = browser.find_elements(By.CSS_SELECTOR, "#output .line")
        assert [i for i, row in enumerate(rows) if "unsure" in row.get_attribute("class").split()] == unsure
        for i in unsure:
            assert rows[i].get_attribute("title") == f"confidence {answer['confidences'][i]:.2f}: worth checking"


def test_a_word_document_uploaded_on_the_page_downloads_translated(browser, server, trained_run, tmp_path):
    from test_documents import RUNS, word_document, word_runs

    path = tmp_path / "report.docx"
    path.write_bytes(word_document(RUNS))
    open_page(browser, server.url)
    by_id(browser, "mode-document").click()
    wait(browser, lambda: ".docx" in by_id(browser, "document-file").get_attribute("accept"), "the file types loaded")
    by_id(browser, "document-file").send_keys(str(path))
    wait(
        browser, lambda: by_id(browser, "document-status").text == "report.docx: ready to translate", "the file chosen"
    )
    by_id(browser, "document-go").click()
    wait(browser, lambda: by_id(browser, "document-download").is_displayed(), "the download link")
    assert by_id(browser, "document-status").text == "report.docx: translated"
    assert by_id(browser, "document-download").get_attribute("download") == "report.de.docx"
    downloaded = httpx.get(by_id(browser, "document-download").get_attribute("href")).content
    offline_run = run_mtkit(
        "translate-file", path, "-o", tmp_path / "out.docx", "-m", trained_run, "--precision", "fp32"
    )
    assert offline_run.returncode == 0, offline_run.stderr.decode()
    assert word_runs(downloaded) == word_runs((tmp_path / "out.docx").read_bytes())


def test_a_file_the_server_refuses_shows_its_reason(browser, server, tmp_path):
    path = tmp_path / "broken.docx"
    path.write_bytes(b"not a zip archive")
    open_page(browser, server.url)
    by_id(browser, "mode-document").click()
    by_id(browser, "document-file").send_keys(str(path))
    wait(
        browser, lambda: by_id(browser, "document-status").text == "broken.docx: ready to translate", "the file chosen"
    )
    by_id(browser, "document-go").click()
    wait(browser, lambda: by_id(browser, "error").is_displayed(), "the error")
    assert by_id(browser, "error").text.startswith("broken.docx: not a .docx file (not a readable zip archive")


def test_a_correction_saved_on_the_page_comes_back_from_the_memory(browser, trained_run, lines, tmp_path):
    """With serve --tm the page offers its correction box: a line edited and saved goes through /suggest,
    and the text translated again gives the correction, marked as the memory's; the other line stays
    the model's."""
    with Server(trained_run, tmp_path / "serve.log", "--tm", tmp_path / "tm.db") as server:
        open_page(browser, server.url)
        wait(browser, lambda: by_id(browser, "correction-box").is_displayed(), "the correction box")
        expected = offline(trained_run, lines[:2])
        type_text(browser, "\n".join(lines[:2]))
        wait(browser, lambda: output_lines(browser) == expected, "the model's translation")
        browser.find_element("css selector", "#correction-box summary").click()
        correction = "Eine Korrektur, von Hand geschrieben."
        wait(browser, lambda: by_id(browser, "correction").get_attribute("value") == "\n".join(expected), "prefilled")
        by_id(browser, "correction").clear()
        by_id(browser, "correction").send_keys(f"{correction}\n{expected[1]}")
        by_id(browser, "save-correction").click()
        wait(browser, lambda: output_lines(browser) == [correction, expected[1]], "the correction on the page")
        assert by_id(browser, "correction-status").text == "saved 1 correction"
        marked = browser.execute_script(
            "return [...document.querySelectorAll('#output .line')].map((l) => l.classList.contains('remembered'))"
        )
        assert marked == [True, False]
        assert server.post("/translate", json={"q": lines[0], "source": "en", "target": "de"}).json() == {
            "translatedText": correction
        }
