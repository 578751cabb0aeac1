// The translation page of `mtkit serve`: plain JavaScript against the server's own API, nothing
// loaded from another host. Text mode translates as the user types (debounced; a newer request
// cancels the one before), with word alignments and, on request, alternatives; document mode
// translates a .txt sentence by sentence, a few lines a request, or an .html file whole with its
// markup kept (format "html"), and offers the result to download; any other file the server takes
// (Word, slides, OpenDocument, subtitles, PO, XLIFF, Markdown, EPUB: /frontend/settings) is uploaded
// to /translate_file, with the upload's progress, and its translation offered for download. Where the server gives confidences
// (serve --confidence), lines below UNSURE_BELOW are shaded: worth a person's check. The glossary box
// (pairs typed or a .tsv read) goes with every request, and the terms it placed are marked. Where the
// server keeps a translation memory (serve --tm), the translation can be corrected and saved, a line
// at a time, through LibreTranslate's /suggest; lines the memory answered are marked.
"use strict";

const DEBOUNCE_MS = 300;
const DOCUMENT_LINES_PER_REQUEST = 20;
const ALTERNATIVES = 3;
const UNSURE_BELOW = 0.5;
const $ = (id) => document.getElementById(id);
const state = { languages: [], targets: [], canDetect: false, pending: null, seq: 0, timer: null };

function headers() {
  const key = $("api-key").value.trim();
  return { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) };
}

async function call(method, path, body, signal) {
  const response = await fetch(path, { method, headers: headers(), body: body && JSON.stringify(body), signal });
  let data = null;
  try {
    data = await response.json();
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    throw new Error((data && data.error) || `${response.status} ${response.statusText}`);
  }
  return data;
}

function showError(message) {
  $("error").textContent = message || "";
  $("error").hidden = !message;
}

// --- languages ------------------------------------------------------------------------------------

async function loadLanguages() {
  const [languages, models] = await Promise.all([call("GET", "languages"), call("GET", "v1/models")]);
  // One model, or several (each pair routed to its model, or two through a pivot): the menus follow /languages.
  const model = models.models.find((m) => m.target_languages) || models.models[0];
  state.languages = languages;
  state.models = models.models;
  state.targets = model.target_languages.length ? model.target_languages : [model.target_language].filter(Boolean);
  state.defaultTarget = models.models.length === 1 ? model.target_language : null;
  state.canAlign = models.models.some((m) => m.alignment);
  state.confidence = models.models.some((m) => m.confidence);
  $("alignment-note").hidden = !state.canAlign;
  $("confidence-note").hidden = !state.confidence;
  try {  // /detect answers where the server has a language identifier (mtkit[langid])
    await call("POST", "detect", { q: "probe" });
    state.canDetect = true;
  } catch (_) {
    state.canDetect = false;
  }
  const sources = languages.filter((l) => l.targets.length).map((l) => l.code);
  const options = (state.canDetect && sources.length > 1 ? ["auto"] : []).concat(sources);
  fill($("source"), options.length ? options : ["?"], (code) => (code === "auto" ? "detect" : nameOf(code)));
  fillTargets();
}

// Whether a pair's translation comes with word alignments: its model's, or where two translate it
// through a pivot, every model from the source and into the target aligns.
function alignsPair(source, target) {
  if (state.models.length === 1) return state.models[0].alignment;
  const has = (model, test) => (model.directions || []).some(test);
  const direct = state.models.find((m) => m.state !== "failed" && has(m, ([s, t]) => s === source && t === target));
  if (direct) return direct.alignment;
  const legs = state.models.filter((m) => has(m, ([s, t]) => s === source || t === target));
  return legs.length > 0 && legs.every((m) => m.alignment);
}

function nameOf(code) {
  const entry = state.languages.find((l) => l.code === code);
  return entry && entry.name !== code ? `${entry.name} (${code})` : code;
}

function fill(select, codes, label) {
  const before = select.value;
  select.replaceChildren(...codes.map((code) => new Option(label(code), code)));
  if (codes.includes(before)) select.value = before;
}

function targetsOf(source) {
  const entry = state.languages.find((l) => l.code === source);
  return entry ? entry.targets : state.targets;
}

function fillTargets() {
  const targets = targetsOf($("source").value);
  fill($("target"), targets, nameOf);
  if (!targets.includes($("target").value) && targets.includes(state.defaultTarget)) {
    $("target").value = state.defaultTarget;
  }
}

// --- text mode ------------------------------------------------------------------------------------

function scheduleTranslation() {
  clearTimeout(state.timer);
  state.timer = setTimeout(translateText, DEBOUNCE_MS);
}

async function translateText() {
  if (state.pending) state.pending.abort();
  const seq = ++state.seq;
  const lines = $("input").value.split("\n");
  if (!$("input").value.trim()) {
    render(lines, lines.map(() => []), null);
    showError("");
    return;
  }
  const controller = new AbortController();
  state.pending = controller;
  $("busy").hidden = false;
  try {
    let source = $("source").value;
    if (source === "auto") source = await detect($("input").value, controller.signal);
    const target = $("target").value || undefined;
    const body = { text: lines, target, alignment: state.canAlign && alignsPair(source, target) };
    if (source && source !== "?") body.source = source;
    if ($("alternatives").checked) body.nbest = ALTERNATIVES;
    const glossary = glossaryPairs();
    if (glossary.length) body.glossary = glossary;
    const answer = await call("POST", "v1/translate", body, controller.signal);
    if (seq !== state.seq) return;  // a newer request is on its way
    render(lines, answer.translations, answer.confidences, glossary, answer.origins);
    offerCorrection(lines, source, target, answer.translations);
    showError("");
  } catch (error) {
    if (error.name !== "AbortError" && seq === state.seq) {
      render(lines, [], null);  // no translation of an earlier text left standing beside the error
      showError(error.message);
    }
  } finally {
    if (seq === state.seq) $("busy").hidden = true;
  }
}

async function detect(text, signal) {
  const [guess] = await call("POST", "detect", { q: text }, signal);
  const known = state.languages.some((l) => l.code === guess.language && l.targets.length);
  $("detected").textContent = known ? `detected: ${nameOf(guess.language)}` : `detected ${guess.language}, not served`;
  return known ? guess.language : undefined;
}

function wordSpans(text, side, line) {
  const parts = text.split(/(\s+)/);
  let index = 0;
  return parts.map((part) => {
    if (!part || /^\s+$/.test(part)) return document.createTextNode(part);
    const span = document.createElement("span");
    span.className = "word";
    span.textContent = part;
    span.dataset.side = side;
    span.dataset.line = line;
    span.dataset.word = index++;
    if (side === "target") span.tabIndex = 0;
    return span;
  });
}

// The glossary box's [source term, target term] pairs; a line that is not one is an error naming it.
function glossaryPairs() {
  const pairs = [];
  $("glossary").value.split("\n").forEach((row, i) => {
    if (!row.trim() || row.trim().startsWith("#")) return;
    const cells = row.includes("\t") ? row.split("\t") : row.split(" = ");
    if (cells.length !== 2 || !cells[0].trim() || !cells[1].trim()) {
      throw new Error(`glossary line ${i + 1}: a source term, a tab (or " = ") and a target term`);
    }
    pairs.push([cells[0].trim(), cells[1].trim()]);
  });
  return pairs;
}

const bare = (word) => word.toLowerCase().replace(/^[\p{P}\p{S}]+|[\p{P}\p{S}]+$/gu, "");

// Marks the target words of each term whose source term the line holds and whose target it holds.
function markTerms(targetLine, source, target, glossary) {
  const sourceWords = ` ${source.split(/\s+/).map(bare).join(" ")} `;
  const marked = new Set();
  for (const [from, to] of glossary) {
    const fromWords = from.split(/\s+/).map(bare).join(" ");
    if (sourceWords.includes(` ${fromWords} `) && target.includes(to)) to.split(/\s+/).forEach((w) => marked.add(bare(w)));
  }
  targetLine.querySelectorAll(".word").forEach((span) => span.classList.toggle("term", marked.has(bare(span.textContent))));
}

// One line of the output per line of the input; each is a list of hypotheses, best first; with
// confidences, a line below UNSURE_BELOW is shaded and says its confidence; glossary terms marked.
function render(lines, translations, confidences, glossary = [], origins = null) {
  const source = $("source-words");
  const output = $("output");
  source.replaceChildren();
  output.replaceChildren();
  state.alignments = [];
  lines.forEach((line, i) => {
    const item = translations[i];  // a string, or (with alignment or alternatives) a list of {text, ...}
    const hypotheses = typeof item === "string" ? [{ text: item }] : item || [];
    const best = hypotheses[0];
    const sourceLine = document.createElement("div");
    sourceLine.className = "line";
    sourceLine.append(...wordSpans(line.trim(), "source", i));
    source.append(sourceLine);
    const targetLine = document.createElement("div");
    targetLine.className = "line";
    targetLine.append(...wordSpans(best ? best.text : "", "target", i));
    if (best && best.text) markTerms(targetLine, line, best.text, glossary);
    const confidence = confidences ? confidences[i] : undefined;
    if (confidence !== undefined && confidence < UNSURE_BELOW && best && best.text) {
      targetLine.classList.add("unsure");
      targetLine.title = `confidence ${confidence.toFixed(2)}: worth checking`;
    }
    if (origins && origins[i] && origins[i].startsWith("tm")) {
      targetLine.classList.add("remembered");
      targetLine.title = origins[i] === "tm 100" ? "from the translation memory" : `steered by the memory's matches (${origins[i]})`;
    }
    output.append(targetLine);
    state.alignments.push(parseAlignment(best && best.alignment));
    if (hypotheses.length > 1) {
      const more = document.createElement("div");
      more.className = "alternatives";
      more.textContent = hypotheses.slice(1).map((h) => `or: ${h.text}`).join("\n");
      output.append(more);
    }
  });
}

function parseAlignment(text) {
  return (text || "").split(/\s+/).filter(Boolean).map((pair) => pair.split("-").map(Number));
}

function pointAt(span) {
  clearPointing();
  if (!span || span.dataset.side !== "target") return;
  const line = Number(span.dataset.line);
  const word = Number(span.dataset.word);
  span.classList.add("pointed");
  for (const [s, t] of state.alignments[line] || []) {
    if (t !== word) continue;
    const aligned = $("source-words").querySelector(`.word[data-line="${line}"][data-word="${s}"]`);
    if (aligned) aligned.classList.add("aligned");
  }
}

function clearPointing() {
  document.querySelectorAll(".word.aligned, .word.pointed").forEach((w) => w.classList.remove("aligned", "pointed"));
}

// --- corrections ----------------------------------------------------------------------------------

function offerCorrection(lines, source, target, translations) {
  const best = translations.map((item) => (typeof item === "string" ? item : (item && item[0] && item[0].text) || ""));
  state.translated = { lines, source, target, best };
  $("correction").value = best.join("\n");
  $("correction-status").textContent = "";
}

// Each line whose correction differs from the translation is sent to /suggest; then the text is
// translated again, so that the lines come back from the memory.
async function saveCorrections() {
  const done = state.translated;
  if (!done) return;
  const corrected = $("correction").value.split("\n");
  const changed = done.lines
    .map((line, i) => [line.trim(), (corrected[i] || "").trim(), done.best[i]])
    .filter(([line, fixed, machine]) => line && fixed && fixed !== machine);
  try {
    for (const [q, s] of changed) {
      await call("POST", "suggest", { q, s, source: done.source, target: done.target });
    }
    showError("");
    if (changed.length) await translateText();
    $("correction-status").textContent = `saved ${changed.length} correction${changed.length === 1 ? "" : "s"}`;
  } catch (error) {
    showError(error.message);
  }
}

// --- document mode --------------------------------------------------------------------------------

const EDITED_HERE = /\.(txt|html?)$/i;  // shown in the box and translated by /v1/translate

function isHtml() {
  return /\.html?$/i.test(state.documentName || "");
}

async function loadFileTypes() {
  try {
    const settings = await call("GET", "frontend/settings");
    if (settings.filesTranslation) $("document-file").accept = settings.supportedFilesFormat.join(",");
    $("correction-box").hidden = !settings.suggestions;
  } catch (_) {
    // an older server: .txt and .html only
  }
}

function downloadName(name, extension) {
  const stem = (name || "document").replace(/\.[^.]*$/, "");
  return `${stem}.${$("target").value || "translated"}.${extension}`;
}

function translateFile(file) {
  const form = new FormData();
  form.append("file", file);
  if ($("target").value) form.append("target", $("target").value);
  if ($("source").value && $("source").value !== "?") form.append("source", $("source").value);
  const key = $("api-key").value.trim();
  if (key) form.append("api_key", key);
  const progress = $("document-progress");
  const status = $("document-status");
  progress.hidden = false;
  progress.value = 0;
  $("document-download").hidden = true;
  showError("");
  const request = new XMLHttpRequest();
  request.open("POST", "translate_file");
  request.responseType = "json";
  request.upload.onprogress = (event) => {
    if (!event.lengthComputable) return;
    progress.max = event.total;
    progress.value = event.loaded;
    status.textContent = `uploading ${Math.round((100 * event.loaded) / event.total)}%`;
  };
  request.upload.onload = () => {
    progress.removeAttribute("value");  // the server translates: no measure of its progress here
    status.textContent = `translating ${file.name}…`;
  };
  request.onload = () => {
    const answer = request.response || {};
    if (request.status !== 200) {
      progress.hidden = true;
      status.textContent = "";
      showError(answer.error || `${request.status} ${request.statusText}`);
      return;
    }
    progress.max = 1;
    progress.value = 1;
    status.textContent = `${file.name}: translated`;
    const link = $("document-download");
    link.href = answer.translatedFileUrl;
    link.download = downloadName(file.name, file.name.split(".").pop());
    link.hidden = false;
  };
  request.onerror = () => showError("the upload failed: the server could not be reached");
  request.send(form);
}

async function translateDocument() {
  if (state.documentFile) {
    translateFile(state.documentFile);
    return;
  }
  const text = $("document-input").value;
  const html = isHtml();  // one request: an element may span lines
  const lines = html ? [text] : text.replace(/\n$/, "").split("\n");
  const out = [];
  const progress = $("document-progress");
  progress.hidden = false;
  progress.max = lines.length;
  progress.value = 0;
  $("document-download").hidden = true;
  $("document-output").textContent = "";
  showError("");
  try {
    for (let first = 0; first < lines.length; first += DOCUMENT_LINES_PER_REQUEST) {
      const chunk = lines.slice(first, first + DOCUMENT_LINES_PER_REQUEST);
      const body = html
        ? { text: chunk, format: "html", target: $("target").value || undefined }
        : { text: chunk, split_sentences: true, target: $("target").value || undefined };
      const glossary = glossaryPairs();
      if (glossary.length) body.glossary = glossary;
      const answer = await call("POST", "v1/translate", body);
      out.push(...answer.translations);
      progress.value = out.length;
      $("document-status").textContent = `${out.length} of ${lines.length} lines`;
    }
  } catch (error) {
    showError(error.message);
    return;
  }
  const result = html ? out[0] : out.join("\n") + (text.endsWith("\n") ? "\n" : "");
  $("document-output").textContent = result;
  const link = $("document-download");
  if (link.href) URL.revokeObjectURL(link.href);
  const type = html ? "text/html;charset=utf-8" : "text/plain;charset=utf-8";
  link.href = URL.createObjectURL(new Blob([result], { type }));
  link.download = downloadName(state.documentName, html ? "html" : "txt");
  link.hidden = false;
}

async function readDocument(file) {
  state.documentName = file.name;
  state.documentFile = EDITED_HERE.test(file.name) ? null : file;
  $("document-input").hidden = Boolean(state.documentFile);
  $("document-output").textContent = "";
  if (state.documentFile) {
    $("document-status").textContent = `${file.name}: ready to translate`;
  } else {
    $("document-input").value = await file.text();
  }
}

function setMode(documentMode) {
  $("text-mode").hidden = documentMode;
  $("document-mode").hidden = !documentMode;
  $("mode-text").classList.toggle("active", !documentMode);
  $("mode-document").classList.toggle("active", documentMode);
  $("mode-text").setAttribute("aria-pressed", String(!documentMode));
  $("mode-document").setAttribute("aria-pressed", String(documentMode));
}

// --- wiring ---------------------------------------------------------------------------------------

window.addEventListener("DOMContentLoaded", () => {
  $("api-key").value = localStorage.getItem("mtkit-api-key") || "";
  $("api-key").addEventListener("change", () => {
    localStorage.setItem("mtkit-api-key", $("api-key").value.trim());
    loadLanguages().then(scheduleTranslation, (error) => showError(error.message));
  });
  $("input").addEventListener("input", scheduleTranslation);
  $("source").addEventListener("change", () => {
    $("detected").textContent = "";
    fillTargets();
    scheduleTranslation();
  });
  $("target").addEventListener("change", scheduleTranslation);
  $("alternatives").addEventListener("change", scheduleTranslation);
  $("glossary").addEventListener("input", scheduleTranslation);
  $("glossary-file").addEventListener("change", async (event) => {
    if (!event.target.files[0]) return;
    $("glossary").value = await event.target.files[0].text();
    scheduleTranslation();
  });
  $("output").addEventListener("mouseover", (event) => pointAt(event.target.closest(".word")));
  $("output").addEventListener("focusin", (event) => pointAt(event.target.closest(".word")));
  $("output").addEventListener("mouseleave", clearPointing);
  $("mode-text").addEventListener("click", () => setMode(false));
  $("mode-document").addEventListener("click", () => setMode(true));
  $("document-file").addEventListener("change", (event) => event.target.files[0] && readDocument(event.target.files[0]));
  $("document-go").addEventListener("click", translateDocument);
  $("save-correction").addEventListener("click", saveCorrections);
  loadLanguages().catch((error) => showError(error.message));
  loadFileTypes();
});
