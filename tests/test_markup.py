"""Markup through translation (mtkit.text.markup, mtkit.text.markup_placement): properties with copy
engines that know nothing of markup, then `translate --format`, `evaluate --format` and the server."""

import re
from html.parser import HTMLParser
from unittest import mock
from xml.parsers import expat

import pytest
from conftest import run_mtkit
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.core.errors import MtkitError
from mtkit.text.markup_placement import by_sentences, translate_markup
from mtkit.text.segments import plain_text

WORDS = st.sampled_from(["dog", "runs", "a", "red", "ball", "on", "the", "beach", "x&y", "<3", "café", "5"])
INLINE = ["b", "i", "em", "a", "span"]


def numbered(text: str) -> str:
    """The text with its elements' ids made unique: e0, e1, ..."""
    counter = iter(range(10**6))
    return re.sub(r'id="e\d+"', lambda _: f'id="e{next(counter)}"', text)


def copy(texts):
    """An engine that translates every word as itself, in place."""
    return [(text, [(i, i) for i in range(len(text.split()))]) for text in texts]


def reverse(texts):
    """An engine that puts the source words in reverse order: every span of words stays a span."""
    out = []
    for text in texts:
        words = text.split()
        out.append((" ".join(reversed(words)), [(i, len(words) - 1 - i) for i in range(len(words))]))
    return out


def escape(word: str) -> str:
    return word.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@st.composite
def inline_markup(draw, depth: int = 0, xml: bool = False):
    """Words, inline elements (each with a unique id) and empty elements, one space apart."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["word", "word", "element", "empty"] if depth < 2 else ["word"]))
        if kind == "word":
            parts.append(escape(draw(WORDS)))
        elif kind == "element":
            tag = draw(st.sampled_from(INLINE))
            attributes = ' id="e0"' + (' href="/x?a=1&amp;b=2"' if tag == "a" else "")
            parts.append(f"<{tag}{attributes}>{draw(inline_markup(depth + 1, xml))}</{tag}>")
        elif parts:  # an empty element after a word
            parts.append('<x id="1"/>' if xml else '<img src="a.png">')
    return " ".join(parts) or escape(draw(WORDS))


@st.composite
def documents(draw):
    """A line of HTML: inline markup alone, or paragraphs of it, with kept parts between."""
    if draw(st.booleans()):
        return numbered(draw(inline_markup()))
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        blocks.append(f"<p>{draw(inline_markup())}</p>")
        if draw(st.booleans()):
            blocks.append(draw(st.sampled_from(["<!-- a comment -->", "<script>if (a < b) x();</script>",
                                                '<div translate="no">keep <b>this</b></div>', "\n"])))  # fmt: skip
    return numbered("".join(blocks))


class Elements(HTMLParser):
    """Every start tag (as written), and whether the tags nest properly."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.starts: list[str] = []
        self.stack: list[str] = []
        self.nested = True
        self.feed(text)
        self.close()
        self.nested &= not self.stack

    def handle_starttag(self, tag, attrs):
        self.starts.append(self.get_starttag_text())
        if tag not in ("img", "br"):
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.starts.append(self.get_starttag_text())

    def handle_endtag(self, tag):
        self.nested &= bool(self.stack) and self.stack.pop() == tag


def words_in(text: str, element_id: str) -> list[str]:
    """The words inside the element with this id (its own and its children's)."""
    match = re.search(rf'<(\w+) id="{element_id}"[^>]*>', text)
    tag, depth, index, inner = match.group(1), 1, match.end(), []
    for token in re.finditer(rf"<(/?){tag}\b[^>]*>|[^<]+|<[^>]*>", text[index:]):
        if re.match(rf"<{tag}\b", token.group(0)):
            depth += 1
        elif token.group(0) == f"</{tag}>":
            depth -= 1
            if not depth:
                break
        if not token.group(0).startswith("<"):
            inner.append(token.group(0))
    return "".join(inner).split()


@settings(max_examples=200, deadline=None)
@given(documents())
def test_a_copy_engine_gives_the_line_back_byte_for_byte(line):
    assert translate_markup([line], "html", copy) == [line]


@settings(max_examples=200, deadline=None)
@given(documents())
def test_reordered_words_keep_every_element_around_its_own_words(line):
    (out,) = translate_markup([line], "html", reverse)
    source, target = Elements(line), Elements(out)
    assert target.nested
    assert sorted(target.starts) == sorted(source.starts)  # the same elements, attributes as written
    for element_id in set(re.findall(r'id="(e\d+)"', line)):
        assert words_in(out, element_id) == words_in(line, element_id)[::-1]
    for kept in re.findall(r"<!--.*?-->|<script>.*?</script>|<div translate=\"no\">.*?</div>", line):
        assert kept in out


@settings(max_examples=200, deadline=None)
@given(documents(), st.randoms(use_true_random=False))
def test_any_word_order_gives_properly_nested_markup_with_the_same_elements(line, random):
    def shuffle(texts):
        out = []
        for text in texts:
            order = list(range(len(text.split())))
            random.shuffle(order)  # target position j holds source word order[j]
            words = text.split()
            out.append((" ".join(words[i] for i in order), [(i, j) for j, i in enumerate(order)]))
        return out

    (out,) = translate_markup([line], "html", shuffle)
    target = Elements(out)
    assert target.nested and sorted(target.starts) == sorted(Elements(line).starts)
    assert sorted(plain_text(out, "html").split()) == sorted(plain_text(line, "html").split())


@settings(max_examples=100, deadline=None)
@given(inline_markup(xml=True).map(numbered))
def test_xml_keeps_its_elements_and_stays_well_formed(line):
    (out,) = translate_markup([line], "xml", reverse)
    expat.ParserCreate().Parse(f"<x>{out}</x>", True)  # raises where not well-formed
    assert sorted(Elements(out).starts) == sorted(Elements(line).starts)


@pytest.mark.parametrize(
    "line, expected",
    [
        ("<ul><li>one two<li>three four</ul>", "<ul><li>two one</li><li>four three</li></ul>"),  # implied ends
        ("<p>one <b>two</p> three</b> four", "<p><b>two</b> one</p> four three"),  # a stray end tag
        ("Call <code>f(a &lt; b)</code> now", "now Call <code>f(a &lt; b)</code>"),  # kept, after its word
        ('<span class="notranslate">Keep Me</span> here', '<span class="notranslate">Keep Me</span> here'),
        ("fish &amp; chips", "chips &amp; fish"),  # decoded for the model, encoded again
        ("un<b>believ</b>able day", "day <b>unbelievable</b>"),  # a word cut by a tag is the element's
    ],
)
def test_repairs_kept_parts_and_entities(line, expected):
    assert translate_markup([line], "html", reverse) == [expected]


def test_the_engine_sees_the_plain_segments_one_space_apart():
    seen = []
    translate_markup(["<p>A  <b>dog</b>\nruns.</p><p>Fish &amp; chips<br>now</p>"], "html",
                     lambda texts: (seen.extend(texts), copy(texts))[1])  # fmt: skip
    assert seen == ["A dog runs.", "Fish & chips", "now"]


def test_sentences_are_translated_one_by_one_and_their_words_counted_across():
    def split(text):
        return re.split(r"(?<=\.) ", text)

    line = "<p>A <b>dog</b> runs. The <i>cat</i> sleeps.</p>"
    translated = translate_markup([line], "html", lambda texts: by_sentences(texts, split, reverse))
    assert translated == ["<p>runs. <b>dog</b> A sleeps. <i>cat</i> The</p>"]


def test_xml_that_is_not_well_formed_names_the_line_and_column():
    with pytest.raises(MtkitError, match=r"^line 2, column 7: not well-formed XML \(mismatched tag\)$"):
        translate_markup(["<b>fine</b>", "<b>x</i>"], "xml", copy)


def test_a_bound_met_while_a_text_is_parsed_keeps_its_kind_and_names_the_text(monkeypatch):
    """A document's time budget may end it inside the parser: still a FileTooLarge (a 413 at the
    server, not a 400), naming the segment."""
    from mtkit.documents.inline import FileTooLarge
    from mtkit.text import markup_placement

    def parse(text, fmt, kept):
        raise FileTooLarge("past the budget")

    monkeypatch.setattr(markup_placement, "parse", parse)
    with pytest.raises(FileTooLarge, match=r"^segment 1, past the budget$"):
        markup_placement.markup_segments(["a"], "html", lambda i: f"segment {i + 1}")


XML_CHARACTERS = st.characters(exclude_characters="<&\ufffe\uffff", exclude_categories=("Cs", "Cc")) | st.sampled_from(
    " \n\t\r"
)
CHARACTER_REFERENCES = st.sampled_from(["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#233;", "&#x41;", ">", '"'])


@st.composite
def coded_segment(draw, depth: int = 0) -> str:
    """Words and inline codes, properly nested, as a document's reader writes a segment."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["text", "reference", "x", "g", "empty g"][: 5 if depth < 3 else 3]))
        number = draw(st.integers(0, 120))
        if kind == "text":
            parts.append(draw(st.text(XML_CHARACTERS, min_size=1, max_size=6)))
        elif kind == "reference":
            parts.append(draw(CHARACTER_REFERENCES))
        elif kind == "x":
            parts.append(f'<x id="{number}"/>')
        elif kind == "empty g":
            parts.append(f'<g id="{number}"/>')
        else:
            parts.append(f'<g id="{number}">{draw(coded_segment(depth + 1))}</g>')
    return "".join(parts)


@settings(max_examples=300, deadline=None)
@given(coded_segment())
def test_a_segment_of_inline_codes_parses_as_html_parser_reads_it(text):
    """Such a segment skips html.parser (a regular expression reads it): the same tree either way."""
    from mtkit.text import markup

    assert markup._code_events(text) is not None
    with mock.patch.object(markup, "_code_events", return_value=None):
        by_html_parser = markup.parse(text, "xml")
    assert markup.parse(text, "xml") == by_html_parser


@pytest.mark.parametrize(
    "text",
    ["<b>x</b>", 'a<x id="1"/><!-- note -->', '<g id="1" class="notranslate">x</g>', '<x id="1" />', "<![CDATA[<g>]]>"],
)
def test_other_markup_is_left_to_html_parser(text):
    from mtkit.text import markup

    assert markup._code_events(text) is None


# With a trained model.


LINES = ['A <b>dog</b> runs on the <a href="/beach">beach</a>.', "<p>Two men talk.</p><p>A girl <i>sings</i>.</p>"]


def test_translate_format_html_keeps_the_markup_around_the_model_s_translation(trained_run, tmp_path):
    source = tmp_path / "in.html"
    source.write_text("".join(line + "\n" for line in LINES))
    marked = run_mtkit("translate", "-m", trained_run, "-i", source, "--format", "html", "--precision", "fp32")
    assert marked.returncode == 0, marked.stderr.decode()
    lines = marked.stdout.decode().splitlines()
    assert len(lines) == 2 and all(Elements(line).nested for line in lines)
    assert [sorted(Elements(line).starts) for line in lines] == [sorted(Elements(line).starts) for line in LINES]
    plain = "A dog runs on the beach.\nTwo men talk.\nA girl sings.\n"
    expected = run_mtkit("translate", "-m", trained_run, "--precision", "fp32", stdin=plain.encode())
    segments = expected.stdout.decode().splitlines()
    assert plain_text(lines[0], "html") == segments[0]
    assert plain_text(lines[1], "html") == " ".join(segments[1:])


def test_split_sentences_in_markup_translates_as_the_plain_text_does(trained_run):
    line = "<p>A dog runs on the beach. Two men <b>talk</b>.</p>"
    options = ("-m", trained_run, "--split-sentences", "--precision", "fp32")
    marked = run_mtkit("translate", *options, "--format", "html", stdin=f"{line}\n".encode())
    plain = run_mtkit("translate", *options, stdin=b"A dog runs on the beach. Two men talk.\n")
    assert marked.returncode == 0, marked.stderr.decode()
    assert plain_text(marked.stdout.decode(), "html") == plain.stdout.decode().strip()
    assert Elements(marked.stdout.decode()).nested


@pytest.mark.parametrize(
    "options, message",
    [
        (["--format", "pdf"], "--format pdf: must be one of text, html, xml"),
        (
            ["--format", "html", "--nbest", "2", "--beam", "2"],
            "--format html gives one translation per line with its markup: not with --nbest",
        ),  # fmt: skip
        (["--format", "xml"], "line 2, column 7: not well-formed XML (mismatched tag)"),
    ],
)
def test_markup_refusals_are_one_line(trained_run, options, message):
    result = run_mtkit("translate", "-m", trained_run, *options, stdin=b"<b>fine</b>\n<b>x</i>\n")
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [f"error: {message}"]


def test_evaluate_format_html_scores_the_text_alone(trained_run, tmp_path):
    (tmp_path / "src.html").write_text("".join(line + "\n" for line in LINES[:1]))
    (tmp_path / "src.txt").write_text("A dog runs on the beach.\n")
    (tmp_path / "ref.html").write_text("Ein <b>Hund</b> rennt am Strand.\n")
    (tmp_path / "ref.txt").write_text("Ein Hund rennt am Strand.\n")

    def bleu(*files, fmt):
        result = run_mtkit("evaluate", "-m", trained_run, "--src", files[0], "--ref", files[1], "--format", fmt,
                           "--precision", "fp32", "--metrics", "bleu,chrf", "--json")  # fmt: skip
        assert result.returncode == 0, result.stderr.decode()
        return re.sub(r', "seconds".*', "", result.stdout.decode())

    assert bleu(tmp_path / "src.html", tmp_path / "ref.html", fmt="html") == bleu(
        tmp_path / "src.txt", tmp_path / "ref.txt", fmt="text"
    )


def test_the_server_translates_markup_as_translate_does(trained_run, tmp_path):
    """/v1/translate's "format" and LibreTranslate's (which libretranslatepy cannot send: as
    wagtail-localize sends it, a JSON body)."""
    from test_serve import Server

    source = tmp_path / "in.html"
    source.write_text("".join(line + "\n" for line in LINES))
    offline = run_mtkit("translate", "-m", trained_run, "-i", source, "--format", "html", "--precision", "fp32")
    expected = offline.stdout.decode().splitlines()
    with Server(trained_run, tmp_path / "serve.log") as server:
        answer = server.post("/v1/translate", json={"text": LINES, "format": "html"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"translations": expected}
        libre = server.post("/translate", json={"q": LINES[0], "source": "en", "target": "de", "format": "html"})
        assert libre.json() == {"translatedText": expected[0]}
        broken = server.post("/v1/translate", json={"text": ["<b>fine</b>", "<b>x</i>"], "format": "xml"})
        assert (broken.status_code, broken.json()) == (
            400,
            {"error": "text 1, column 7: not well-formed XML (mismatched tag)"},
        )
        unknown = server.post("/translate", json={"q": "A dog.", "source": "en", "target": "de", "format": "xml"})
        assert (unknown.status_code, unknown.json()) == (400, {"error": "format xml: must be text or html"})
        nbest = server.post("/v1/translate", json={"text": "A <b>dog</b>.", "format": "html", "nbest": 2, "beam": 2})
        assert nbest.status_code == 422


@pytest.mark.parametrize(
    ("line", "translation", "expected"),
    [
        ('Delete "<x id="0"/>"?', 'Löschen ""?', 'Löschen "<x id="0"/>"?'),  # inside a word: split the same way
        ('files in (<x id="0"/>) now', "Dateien in () jetzt", 'Dateien in (<x id="0"/>) jetzt'),
        ('Hello <x id="0"/>!', "Hallo !", 'Hallo <x id="0"/>!'),  # glued to "!", which the target has
        ('Hello <x id="0"/>!', "Hallo Freund.", 'Hallo <x id="0"/> Freund.'),  # not glued to another word
        ('a man<x id="0"/>, here', "ein Mann hier", 'ein Mann<x id="0"/> hier'),
    ],
)
def test_a_code_glued_to_its_word_stays_glued_only_where_the_target_word_is_alike(line, translation, expected):
    def engine(texts):
        return [(translation, [(i, i) for i in range(len(translation.split()))]) for _ in texts]

    assert translate_markup([line], "xml", engine) == [expected]
