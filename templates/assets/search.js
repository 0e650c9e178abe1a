// Pagefind's UI on the search page; a ?q= query (from the home page form) runs at once.
window.addEventListener("DOMContentLoaded", function () {
  if (typeof PagefindUI === "undefined") {
    document.getElementById("search").textContent = "The search index is missing from this build.";
    return;
  }
  var ui = new PagefindUI({ element: "#search", showSubResults: false, showImages: false, resetStyles: false });
  var q = new URLSearchParams(window.location.search).get("q");
  if (q) ui.triggerSearch(q);
});
