// Pagefind's UI on the search page, over the site's indexes (a large mirror has one per shard: the first is
// the UI's own, the others are merged into it); a ?q= query (from the home page form) runs at once.
window.addEventListener("DOMContentLoaded", function () {
  if (typeof PagefindUI === "undefined") {
    document.getElementById("search").textContent = "The search index is missing from this build.";
    return;
  }
  var indexes = JSON.parse(document.getElementById("search-indexes").textContent);
  // A pith number or arXiv id as the pages write them ("pith:5KDARQND", "pith:2020:5KDA...", "arXiv:2004.10856v1")
  // is searched as the ID the index holds: Pagefind finds no word in "pith:5kdarqnd" to mark.
  function asSearched(text) {
    return text.replace(/(^|\s)(pith:([0-9]{4}:)?|arxiv:)(?=\S)/gi, "$1");
  }
  var ui = new PagefindUI({
    element: "#search", showSubResults: false, showImages: false, resetStyles: false, processTerm: asSearched,
    bundlePath: indexes[0],
    mergeIndex: indexes.slice(1).map(function (path) { return { bundlePath: path }; }),
  });
  (function label() {  // Pagefind's input has only a title; give it a name that assistive technology reads
    var input = document.querySelector("#search input");
    if (!input) return window.requestAnimationFrame(label);
    input.setAttribute("aria-label", "Search titles, authors, abstracts, arXiv ids and pith numbers");
  })();
  // Pagefind answers a word it does not hold with the words that share the longest prefix with it ("xyzzyq"
  // finds "X", "verified" finds "version"): a result is shown only if a word its excerpt marks is the query's
  // word, or a prefix of a query word that ends where the query's punctuation splits it ("2004" of
  // "2004.10856"); an excerpt around a near miss marks nothing, or the shorter word.
  function matches(mark, term) {
    return mark.startsWith(term) || (term.startsWith(mark) && !/[\p{L}\p{N}]/u.test(term.charAt(mark.length)));
  }
  function dropNearMisses() {
    var input = document.querySelector("#search input"), message = document.querySelector(".pagefind-ui__message");
    if (!input || !message) return;
    var terms = asSearched(input.value).toLowerCase().split(/\s+/).filter(Boolean);
    var category = document.getElementById("filter-category").value, year = document.getElementById("filter-year").value;
    function meta(result, name) {
      var tag = result.querySelector('[data-pagefind-ui-meta="' + name + '"]');
      return tag ? tag.textContent.replace(/^[^:]*:\s*/, "").trim().split(/\s+/) : [];
    }
    var results = document.querySelectorAll(".pagefind-ui__result"), shown = 0, marked = 0;
    results.forEach(function (result) {
      if (result.querySelector(".pagefind-ui__loading")) { shown++; marked++; return; }  // (no excerpt yet: undecided)
      var marks = Array.from(result.querySelectorAll("mark"), function (m) { return m.textContent.toLowerCase(); });
      var found = marks.some(function (m) { return terms.some(function (t) { return matches(m, t); }); });
      var keep = found && (!category || meta(result, "categories").indexOf(category) >= 0)
        && (!year || meta(result, "year").indexOf(year) >= 0);
      if (result.hidden !== !keep) result.hidden = !keep;
      if (found) marked++;
      if (keep) shown++;
    });
    var total = results.length;
    // A near miss is Pagefind's answer to a word it does not hold, and then every result is one: no more of them
    // are offered.  Results a filter hides are: the next ones may be in its category or year.
    var more = document.querySelector(".pagefind-ui__button"), nearMissesOnly = total > 0 && marked === 0;
    if (more && more.hidden !== nearMissesOnly) more.hidden = nearMissesOnly;
    var text = null;
    if (total && shown < total) {
      if (!message.dataset.pagefind || message.dataset.query !== input.value) {
        message.dataset.pagefind = message.textContent;
        message.dataset.query = input.value;
      }
      text = (shown ? shown + (shown === 1 ? " result" : " results") : "No results") + " for " + input.value;
      if (more && !more.hidden) text += " among the first " + total;
    } else if (message.dataset.pagefind) {
      text = message.dataset.pagefind;
    }
    if (text !== null && message.textContent !== text) message.textContent = text;
    if (shown === total) delete message.dataset.pagefind;
  }
  new MutationObserver(dropNearMisses).observe(document.getElementById("search"), { childList: true, subtree: true });
  ["filter-category", "filter-year"].forEach(function (id) { document.getElementById(id).addEventListener("change", dropNearMisses); });
  var q = new URLSearchParams(window.location.search).get("q");
  if (q) ui.triggerSearch(q);
});
