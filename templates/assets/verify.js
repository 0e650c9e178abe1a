/* Verify a pith bundle in the reader's browser: no trust in the mirror's host or its build.
 *
 * The canonical form is Python's json.dumps(o, sort_keys=True, separators=(",", ":"), ensure_ascii=False):
 * keys sorted by code point, Python's string escapes, Python's number formatting. Numbers are kept as
 * their source text while parsing, because JSON.parse cannot tell 1.0 from 1 (Python can).
 * Signatures are Ed25519 over the 32 digest bytes, checked with Web Crypto against the pinned key
 * embedded in the page (never a key from the bundle).
 */
(function (global) {
  "use strict";

  function PyNumber(text) { this.text = text; }

  // ---- strict JSON parser (duplicate keys, NaN and lone surrogates refused) ----
  function parseJSON(text) {
    var i = 0;
    function fail(msg) { throw new Error("JSON: " + msg + " at " + i); }
    function ws() { while (i < text.length && " \t\n\r".indexOf(text[i]) >= 0) i++; }
    function value() {
      ws();
      var c = text[i];
      if (c === "{") return object();
      if (c === "[") return array();
      if (c === '"') return string();
      if (c === "t" && text.startsWith("true", i)) { i += 4; return true; }
      if (c === "f" && text.startsWith("false", i)) { i += 5; return false; }
      if (c === "n" && text.startsWith("null", i)) { i += 4; return null; }
      var m = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 400));
      if (!m) fail("unexpected character");
      i += m[0].length;
      return new PyNumber(m[0]);
    }
    function object() {
      var out = new Map();
      i++; ws();
      if (text[i] === "}") { i++; return out; }
      for (;;) {
        ws();
        if (text[i] !== '"') fail("expected a key");
        var k = string();
        if (out.has(k)) fail("duplicate key " + JSON.stringify(k));
        ws(); if (text[i] !== ":") fail("expected ':'"); i++;
        out.set(k, value());
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "}") { i++; return out; }
        fail("expected ',' or '}'");
      }
    }
    function array() {
      var out = [];
      i++; ws();
      if (text[i] === "]") { i++; return out; }
      for (;;) {
        out.push(value());
        ws();
        if (text[i] === ",") { i++; continue; }
        if (text[i] === "]") { i++; return out; }
        fail("expected ',' or ']'");
      }
    }
    function string() {
      var m = /^"((?:[^"\\\u0000-\u001f]|\\(?:["\\\/bfnrt]|u[0-9a-fA-F]{4}))*)"/.exec(text.slice(i));
      if (!m) fail("bad string");
      i += m[0].length;
      var s = JSON.parse(m[0]);
      if (/[\ud800-\udbff](?![\udc00-\udfff])|(^|[^\ud800-\udbff])[\udc00-\udfff]/.test(s)) fail("lone surrogate");
      return s;
    }
    var result = value();
    ws();
    if (i !== text.length) fail("trailing data");
    return result;
  }

  // ---- Python's canonical form ----
  var ESC = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f" };
  function pyString(s) {
    return '"' + s.replace(/["\\\u0000-\u001f]/g, function (c) {
      return ESC[c] || "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4);
    }) + '"';
  }
  function pyFloat(x) {
    if (!isFinite(x)) throw new Error("non-finite number");
    if (x === 0) return (1 / x < 0) ? "-0.0" : "0.0";
    var parts = x.toExponential().split("e");   // shortest round-trip digits, as Python's repr
    var digits = parts[0].replace(".", "").replace("-", ""), exp = parseInt(parts[1], 10), sign = x < 0 ? "-" : "";
    if (exp < -4 || exp >= 16) {
      var mant = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
      return sign + mant + "e" + (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
    }
    if (exp >= 0) {
      var whole = digits.length > exp + 1 ? digits.slice(0, exp + 1) : digits + "0".repeat(exp + 1 - digits.length);
      var frac = digits.length > exp + 1 ? digits.slice(exp + 1) : "0";
      return sign + whole + "." + frac;
    }
    return sign + "0." + "0".repeat(-exp - 1) + digits;
  }
  function pyNumber(n) {
    if (/^-?[0-9]+$/.test(n.text)) return BigInt(n.text).toString();
    return pyFloat(parseFloat(n.text));
  }
  function codePointCompare(a, b) {
    var ia = 0, ib = 0;
    while (ia < a.length && ib < b.length) {
      var ca = a.codePointAt(ia), cb = b.codePointAt(ib);
      if (ca !== cb) return ca < cb ? -1 : 1;
      ia += ca > 0xffff ? 2 : 1; ib += cb > 0xffff ? 2 : 1;
    }
    return (a.length - ia) - (b.length - ib);
  }
  function canonical(v, omit) {
    if (v === null) return "null";
    if (v === true) return "true";
    if (v === false) return "false";
    if (v instanceof PyNumber) return pyNumber(v);
    if (typeof v === "string") return pyString(v);
    if (Array.isArray(v)) return "[" + v.map(function (x) { return canonical(x); }).join(",") + "]";
    if (v instanceof Map) {
      var keys = Array.from(v.keys()).filter(function (k) { return !omit || omit.indexOf(k) < 0; });
      keys.sort(codePointCompare);
      return "{" + keys.map(function (k) { return pyString(k) + ":" + canonical(v.get(k)); }).join(",") + "}";
    }
    throw new Error("not a JSON value");
  }

  // ---- digests and signatures ----
  function hex(bytes) { return Array.from(new Uint8Array(bytes), function (b) { return ("0" + b.toString(16)).slice(-2); }).join(""); }
  function fromHex(h) { var out = new Uint8Array(h.length / 2); for (var i = 0; i < out.length; i++) out[i] = parseInt(h.substr(i * 2, 2), 16); return out; }
  function fromB64(s) { var bin = atob(s), out = new Uint8Array(bin.length); for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i); return out; }
  function sha256(text) { return crypto.subtle.digest("SHA-256", new TextEncoder().encode(text)).then(hex); }
  function base32(bytes) {
    var alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", bits = 0, value = 0, out = "";
    bytes.forEach(function (b) { value = (value << 8) | b; bits += 8; while (bits >= 5) { out += alphabet[(value >>> (bits - 5)) & 31]; bits -= 5; } });
    if (bits > 0) out += alphabet[(value << (5 - bits)) & 31];
    return out;
  }

  function ed25519Supported() {
    if (!global.crypto || !crypto.subtle) return Promise.resolve(false);
    return crypto.subtle.importKey("raw", new Uint8Array(32), { name: "Ed25519" }, false, ["verify"])
      .then(function () { return true; }, function (e) { return e && e.name === "DataError"; });
  }

  async function verifyBundle(text, pinnedKeys) {
    var checks = [];
    function record(name, ok, detail) { checks.push({ name: name, ok: ok, detail: detail }); return ok; }
    var b;
    try { b = parseJSON(text); } catch (e) { record("json", false, e.message); return checks; }
    var get = function (m, path) { return path.reduce(function (o, k) { return o instanceof Map ? o.get(k) : (o ? o[k] : undefined); }, m); };
    var keys = {};
    for (const k of pinnedKeys) {
      keys[k.key_id] = { fingerprint: k.fingerprint_sha256_hex,
        key: await crypto.subtle.importKey("raw", fromHex(k.public_key_hex), { name: "Ed25519" }, false, ["verify"]) };
    }
    async function sig(name, block, digestHex) {
      var k = keys[block.get("key_id")];
      if (!k || block.get("public_key_fingerprint") !== k.fingerprint) return record(name, false, "key " + block.get("key_id") + " is not the pinned key");
      var ok = false;
      try { ok = await crypto.subtle.verify({ name: "Ed25519" }, k.key, fromB64(block.get("signature_b64")), fromHex(digestHex)); } catch (e) { ok = false; }
      return record(name, ok, (ok ? "valid" : "INVALID") + " Ed25519 signature by " + block.get("key_id") + " over " + digestHex.slice(0, 16) + "…");
    }
    var pith = b.get("pith_number"), canonHex = b.get("canonical_sha256");
    var recordDigest = await sha256(canonical(b.get("canonical_record")));
    record("canonical_hash", recordDigest === canonHex, "sha256(canonical record) = " + recordDigest.slice(0, 16) + "…, bundle says " + String(canonHex).slice(0, 16) + "…");
    var derived = "pith:" + get(b, ["canonical_record", "metadata", "submitted_at"]).slice(0, 4) + ":" + base32(fromHex(recordDigest)).slice(0, 26);
    record("pith_number", derived === pith, "derived " + derived + ", bundle says " + pith);
    var events = b.get("events");
    for (var n = 0; n < events.length; n++) {
      var e = events[n], label = "event " + (n + 1) + " (" + e.get("event_type") + ")";
      if (e.get("event_type") === "record_created") {
        var receipt = get(e, ["payload", "receipt"]);
        record("receipt_digest", receipt.get("canonical_sha256") === recordDigest, "receipt signs " + String(receipt.get("canonical_sha256")).slice(0, 16) + "…");
        await sig("receipt_signature", receipt, recordDigest);
      }
      var content = await sha256(canonical(e, ["signature", "content_sha256", "event_id"]));
      record("event_hash", content === e.get("content_sha256"), label + ": content hashes to " + content.slice(0, 16) + "…");
      record("event_id", e.get("event_id") === "sha256:" + content, label + ": event_id " + String(e.get("event_id")).slice(0, 23) + "…");
      await sig("event_signature", e.get("signature"), content);
      record("event_subject", e.get("subject_pith_number") === pith, label + ": about " + e.get("subject_pith_number"));
    }
    var state = b.get("state");
    var stateDigest = await sha256(canonical(state, ["state_sha256"]));
    record("state_hash", stateDigest === state.get("state_sha256"), "sha256(state) = " + stateDigest.slice(0, 16) + "…");
    var bundleDigest = await sha256(canonical(b, ["bundle_signature"]));
    var bs = b.get("bundle_signature");
    record("bundle_hash", bundleDigest === bs.get("bundle_sha256"), "sha256(bundle) = " + bundleDigest.slice(0, 16) + "…, signature block says " + String(bs.get("bundle_sha256")).slice(0, 16) + "…");
    await sig("bundle_signature", bs, bundleDigest);
    return checks;
  }

  // ---- what the page shows, against the verified bundle ----
  // The page's signed fields are read from their visible text (never from attributes a host could leave intact
  // while editing the text), normalised as the templates write them.
  function norm(s) { return String(s == null ? "" : s).replace(/\s+/g, " ").trim(); }
  // What no page shows of a bundle's text (records.NOT_SHOWN): controls but tab and line ends, and the
  // noncharacters of every plane.  The page leaves them out; so must what it is compared with.
  var NOT_SHOWN = new RegExp("[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f\\ufdd0-\\ufdef\\ufffe\\uffff" +
    Array.from({ length: 16 }, function (_, i) { var p = (i + 1).toString(16); return "\\u{" + p + "fffe}\\u{" + p + "ffff}"; }).join("") +
    "]", "gu");
  function str(m, k) { var v = m instanceof Map ? m.get(k) : undefined; return typeof v === "string" ? v.replace(NOT_SHOWN, "") : ""; }
  // Python's whitespace (records.split_authors splits on it), which is JavaScript's \s but for U+FEFF.
  var WS = "[\\t\\n\\r \\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
  // The words of a text as Python's split() finds them (a title of a U+FEFF alone is one, which a page shows blank).
  var PY_SPACE = new RegExp(WS + "+");
  function pyWords(t) { return t.split(PY_SPACE).filter(Boolean).join(" "); }
  var AUTHOR_SPLIT = new RegExp("," + WS + "*|" + WS + "+and" + WS + "+"), PY_STRIP = new RegExp("^" + WS + "+|" + WS + "+$", "g");
  // Each author as Python strips it (not of a U+FEFF, which the page then shows beside the comma that follows).
  function splitAuthors(t) { return t.split(AUTHOR_SPLIT).map(function (a) { return a.replace(PY_STRIP, ""); }).filter(Boolean); }
  var decoder = new DOMParser();  // (an inert document: what it parses never runs or loads anything)
  function decodeEntity(entity) { return decoder.parseFromString(entity, "text/html").documentElement.textContent; }
  // What a claim says, of Markdown as its rendering shows it, in order: its letters and digits, and the
  // characters that change what a number or a comparison says but are never Markdown's syntax (".", "%", and
  // every math and currency sign but the ASCII ones Markdown uses, as in "≤", "±", "−", "€", "$"): "9.5 %" is not
  // "95 %", nor "≤" "≥".  Its syntax aside: emphasis (x*y*z shows as xyz), links' targets, reference definitions
  // ("[a]: https://...") and a reference link's label ("[text][ref]"), list markers and entities' spelling; a
  // link without text shows its address.  Both the page's text and the bundle's go through it, so what only one
  // of them spells out (an entity, a link written but not made, a character escaped: "1\\. x" shows as "1. x")
  // counts the same.
  function markdownWords(s) {
    return String(s).replace(/\\([!-\/:-@\[-`{-~])/g, "$1")
      .replace(/&(?:#[0-9]{1,8}|#[xX][0-9a-fA-F]{1,8}|[A-Za-z][A-Za-z0-9]{0,31});/g, decodeEntity)
      .replace(/^ {0,3}\[[^\]\n]+\]:[ \t]*\n?[ \t]*\S+.*$/gm, "")
      .replace(/!?\[\s*\]\(\s*<?([^\s)>]*)>?[^)]*\)/g, "$1").replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1")
      .replace(/!?\[([^\]]*)\]\[[^\]]*\]/g, "$1")
      .replace(/^\s*(?:(?:[-*+]|\d+[.)])\s+)+/gm, "").replace(/[^\p{L}\p{N}\p{Sm}\p{Sc}.%]+|[+<=>|~]/gu, "");
  }
  var SHOWN_AUTHORS = 10;

  function signedValues(b) {
    var record = b.get("canonical_record"), source = record.get("source"), meta = record.get("metadata");
    var snapshot = null;
    b.get("events").forEach(function (e) {
      if (e.get("event_type") === "graph_snapshot") snapshot = e.get("payload").get("graph_snapshot");
    });
    var paper = snapshot instanceof Map ? snapshot.get("paper") : null;
    var id = source.get("id"), version = pyNumber(source.get("version")), title = str(paper, "title");
    var primary = meta.get("primary_cat");
    var claims = [], items = snapshot instanceof Map && snapshot.get("claims") instanceof Map ? snapshot.get("claims").get("items") : null;
    (Array.isArray(items) ? items : []).forEach(function (c) {
      if (c instanceof Map) claims.push({ id: str(c, "claim_id"), kind: str(c, "kind").replace(/_/g, " "),
                                          text: str(c, "text"), status: str(c, "status").replace(/_/g, " ") });
    });
    return {
      title: pyWords(title) ? norm(title) : "arXiv:" + id + "v" + version,
      authors: splitAuthors(str(paper, "authors_text")),
      pith_number: b.get("pith_number"),
      arxiv: "arXiv:" + id + " v" + version,
      submitted: meta.get("submitted_at").slice(0, 10),
      // each once, as the page lists them: a signed bundle may repeat a cross-list or name the primary again
      categories: [primary].concat(meta.get("cross_cats_sorted")).filter(function (c, i, all) { return all.indexOf(c) === i; }),
      abstract: norm(str(paper, "abstract_excerpt")),
      claims: claims
    };
  }

  function comparePage(doc, v) {
    var results = [];
    function text(sel) { var el = doc.querySelector(sel); return el ? norm(el.textContent) : null; }
    function check(field, shown, signed) {
      var ok = shown === signed;
      results.push({ name: "page: " + field, ok: ok, field: field,
                     detail: ok ? "the page shows what the bundle signs" :
                       "the page shows " + JSON.stringify(shown === null ? "(nothing)" : shown).slice(0, 200) +
                       ", the signed bundle says " + JSON.stringify(signed).slice(0, 200) });
    }
    check("title", text('[data-field="title"]'), v.title);
    var first = v.authors.slice(0, SHOWN_AUTHORS), rest = v.authors.slice(SHOWN_AUTHORS);
    check("authors", text('[data-field="authors"]'), first.length ? norm(first.join(", ")) : "Authors not given");
    check("more authors", text('[data-field="more-authors"]'), rest.length ? norm("et al. (" + rest.length + " more) " + rest.join(", ")) : null);
    check("pith number", text('[data-field="pith_number"]'), v.pith_number);
    check("arXiv id and version", text('[data-field="arxiv"]'), v.arxiv);
    check("submitted", text('[data-field="submitted"]'), v.submitted);
    check("categories", Array.from(doc.querySelectorAll('[data-field="categories"] .cat-code'), function (e) { return norm(e.textContent); }).join(" "),
          v.categories.join(" "));
    // (an abstract of white space alone is none, whether the page leaves the section out or shows it blank)
    check("abstract", text('[data-field="abstract"]') || null, v.abstract || null);
    var shownClaims = Array.from(doc.querySelectorAll('[data-field="claims"] [data-claim]'), function (el) {
      function part(sel) { var p = el.querySelector(sel); return p ? norm(p.textContent) : ""; }
      var shownText = el.querySelector(".claim-text") ? el.querySelector(".claim-text").cloneNode(true) : null;
      if (shownText) shownText.querySelectorAll(".note").forEach(function (n) { n.remove(); });  // (the page's own words)
      return [part(".claim-id"), part(".kind"), markdownWords(shownText ? shownText.textContent : ""), part(".status")].join(" | ");
    });
    check("claims", shownClaims.join(" || "), v.claims.map(function (c) {
      return [norm(c.id), norm(c.kind), markdownWords(c.text), norm(c.status)].join(" | ");
    }).join(" || "));
    return results;
  }

  function listChecks(list, checks) {
    checks.forEach(function (c) {
      var li = document.createElement("li");
      li.className = c.ok ? "passed" : "failed";
      li.dataset.check = c.name;
      li.textContent = (c.ok ? "✓ " : "✗ ") + c.name + ": " + c.detail;
      list.appendChild(li);
    });
  }

  // The signed values, as a list of terms; *whole*: every author and the abstract (the standalone verifier's
  // record), else the first authors, as the page shows them.
  function listValues(dl, v, whole) {
    var authors = whole || v.authors.length <= SHOWN_AUTHORS ? v.authors.join(", ") :
      v.authors.slice(0, SHOWN_AUTHORS).join(", ") + ", et al. (" + v.authors.length + " authors)";
    var rows = [["Title", v.title], ["Authors", authors || "not given"], ["arXiv", v.arxiv],
                ["Submitted", v.submitted], ["Categories", v.categories.join(" ")], ["Pith number", v.pith_number]];
    if (whole && v.abstract) rows.push(["Abstract (excerpt)", v.abstract]);
    dl.textContent = "";
    rows.forEach(function (row) {
      var dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = row[0]; dd.textContent = row[1];
      dl.appendChild(dt); dl.appendChild(dd);
    });
  }

  function showValues(root, v) {
    var dl = root.querySelector("dl.verified-values");
    if (!dl) { dl = document.createElement("dl"); dl.className = "verified-values"; root.appendChild(dl); }
    listValues(dl, v, false);
  }

  function markFailed(root) {
    var panel = root.closest(".panel"), chip = document.getElementById("mirror-chip");
    if (panel) { panel.classList.remove("verified"); panel.classList.add("failed"); }
    var heading = panel && panel.querySelector("h2");
    if (heading) heading.textContent = "Verification FAILED in your browser";
    if (chip) { chip.classList.remove("ok"); chip.classList.add("bad"); chip.textContent = "✗ failed verification in your browser"; }
  }

  function attach() {
    var root = document.getElementById("verify-in-browser");
    if (!root) return;
    var button = root.querySelector("button"), out = root.querySelector("output"), list = root.querySelector("ol");
    button.addEventListener("click", async function () {
      button.disabled = true;
      list.textContent = "";
      out.textContent = "Checking…";
      root.dataset.state = "running";
      try {
        if (!(await ed25519Supported())) {
          out.textContent = "This browser has no Ed25519 in Web Crypto, so it cannot check the signatures. Nothing was verified here; use the shell snippet below instead.";
          root.dataset.state = "unsupported";
          return;
        }
        var pinned = JSON.parse(document.getElementById("pinned-keys").textContent);
        var response = await fetch(root.dataset.bundle, { cache: "no-store" });
        if (!response.ok) throw new Error("could not fetch bundle.json (HTTP " + response.status + ")");
        var text = await response.text();
        var checks = await verifyBundle(text, pinned);
        var values = null;
        if (checks.every(function (c) { return c.ok; })) {
          values = signedValues(parseJSON(text));
          checks = checks.concat(comparePage(document, values));
        }
        listChecks(list, checks);
        var failed = checks.filter(function (c) { return !c.ok; });
        root.dataset.state = failed.length ? "failed" : "verified";
        if (failed.length) {
          markFailed(root);
          var onPage = failed.filter(function (c) { return c.field; });
          out.textContent = "FAILED: " + failed.map(function (c) { return c.name; }).join(", ") + " — " +
            (onPage.length ? "this page does not show what the pinned key signed." :
                             "this copy of the bundle does not match what the pinned key signed.");
        } else {
          out.textContent = "Verified in your browser: every digest recomputed, every signature checked against the pinned key, and every signed field this page shows compared with the bundle. The signed values:";
          showValues(root, values);
        }
      } catch (e) {
        root.dataset.state = "failed";
        markFailed(root);
        out.textContent = "FAILED: could not verify: " + e.message;
      } finally {
        button.disabled = false;
      }
    });
  }

  global.PithVerify = { parseJSON: parseJSON, canonical: canonical, verifyBundle: verifyBundle, ed25519Supported: ed25519Supported,
                       signedValues: signedValues, comparePage: comparePage, listChecks: listChecks,
                       listValues: listValues };
  if (typeof document !== "undefined") {
    if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", attach); else attach();
  }
})(typeof window !== "undefined" ? window : globalThis);
