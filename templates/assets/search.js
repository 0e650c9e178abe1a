// Pagefind's UI on the search page, over the site's indexes (a large mirror has one per shard: the first is
// the UI's own, the others are merged into it); a ?q= query (from the home page form) runs at once.
window.addEventListener("DOMContentLoaded", function () {
  if (typeof PagefindUI === "undefined") {
    document.getElementById("search").textContent = "The search index is missing from this build.";
    return;
  }
  var indexes = JSON.parse(document.getElementById("search-indexes").textContent);
  var ui = new PagefindUI({
    element: "#search", showSubResults: false, showImages: false, resetStyles: false,
    bundlePath: indexes[0],
    mergeIndex: indexes.slice(1).map(function (path) { return { bundlePath: path }; }),
  });
  (function label() {  // Pagefind's input has only a title; give it a name that assistive technology reads
    var input = document.querySelector("#search input");
    if (!input) return window.requestAnimationFrame(label);
    input.setAttribute("aria-label", "Search titles, authors, abstracts, arXiv ids and pith numbers");
  })();
  var q = new URLSearchParams(window.location.search).get("q");
  if (q) ui.triggerSearch(q);
});
