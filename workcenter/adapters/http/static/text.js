// How the dashboard shows text: every value set as text (never as markup), with the
// characters that reorder or hide text escaped as the terminal escapes them, a person's
// words in their own direction, and cuts between characters. Loaded first: the other
// scripts use these.
"use strict";

const $ = (id) => document.getElementById(id);

// Text cut to at most `units` UTF-16 units between two characters as a reader sees them
// (an emoji, a letter and its accents, a joined family): slice() cut inside an emoji
// and left half of it (found by acceptance testing, ADR-0144).
const GRAPHEMES = Intl.Segmenter ? new Intl.Segmenter(undefined, { granularity: "grapheme" }) : null;

function clip(text, units) {
  if (text.length <= units) return text;
  if (!GRAPHEMES) return text.slice(0, /[\uDC00-\uDFFF]/.test(text[units]) ? units - 1 : units);
  let end = 0;
  for (const { index, segment } of GRAPHEMES.segment(text)) {
    if (index + segment.length > units) break;
    end = index + segment.length;
  }
  return text.slice(0, end);
}

// Control characters and the invisible marks that reorder text (bidi embeddings,
// overrides and isolates, LRM and RLM) are shown as escapes, as the terminal shows
// them: a title "\u202egnp.exe" must not read "exe.png". Newlines and tabs stay.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function visible(value) {
  return String(value).replace(UNSAFE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff
      ? "\\x" + code.toString(16).padStart(2, "0")
      : "\\u" + code.toString(16).padStart(4, "0");
  });
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = visible(text);
  if (className) node.className = className;
  return node;
}

// A person's words in their own direction (dir="auto"), each path or address among them
// kept whole and left to right: in an Arabic title "/usr/local/bin/wc-123.py" was laid
// out in pieces (found by acceptance testing, ADR-0144). A path starts a word (after a
// space, or after right-to-left letters: a Hebrew prefix) as "/", "~/", "C:\", "\\"
// or a URL's scheme, and ends at a space or at right-to-left text after it (an Arabic
// comma); "docs/api.md" in a sentence lays out whole as it is, and Arabic words with a
// slash between them are words.
const PATH_LIKE = /(?<![A-Za-z0-9._~])(?:[A-Za-z][A-Za-z0-9+.-]*:\/\/|[A-Za-z]:\\|~?\/|\\\\)\S*/g;
const RIGHT_TO_LEFT_END = /[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufeff]+$/;

function setWords(node, text) {
  const shown = visible(text);
  node.textContent = "";
  node.dir = "auto";
  let last = 0;
  for (const found of shown.matchAll(PATH_LIKE)) {
    const path = found[0].replace(RIGHT_TO_LEFT_END, "");
    if (!/[A-Za-z0-9]/.test(path)) continue;
    if (found.index > last) node.append(shown.slice(last, found.index));
    const isolated = document.createElement("bdi");
    isolated.dir = "ltr";
    isolated.textContent = path;
    node.append(isolated);
    last = found.index + path.length;
  }
  if (last < shown.length) node.append(shown.slice(last));
  return node;
}

function ownWords(tag, text, className) {
  return setWords(el(tag, null, className), text);
}

function short(id) {
  return id ? String(id).slice(0, 8) : "";
}

// A time as the reader's clock shows it, with its date: the audit said UTC and the
// conversation local time, neither with a date (found by acceptance testing, ADR-0137).
function localTime(time) {
  return new Date(time).toLocaleString();
}
