// Live reload for `site-builder serve` (never part of a built site): listens to the server's events,
// reloads this page when it changed, and shows build errors in a banner over the last good page.
(function () {
  "use strict";
  var here = location.pathname.replace(/index\.html$/, "");
  var banner = null;
  function show(message) {
    if (!banner) {
      banner = document.createElement("div");
      banner.className = "build-error";
      banner.id = "site-builder-error";
      banner.setAttribute("role", "alert");
      banner.style.cssText = "position:sticky;top:0;z-index:9999;background:#a4161a;color:#fff;padding:.7rem 1.2rem;" +
        "white-space:pre-wrap;font:14px/1.4 ui-monospace,monospace";
      document.body.insertBefore(banner, document.body.firstChild);
    }
    banner.textContent = message;
  }
  function clear() { if (banner) { banner.remove(); banner = null; } }
  var source = new EventSource(document.currentScript.dataset.events);
  source.addEventListener("status", function (e) {
    var data = JSON.parse(e.data);
    if (data.error) show(data.error); else clear();
  });
  source.addEventListener("reload", function (e) {
    var data = JSON.parse(e.data);
    if (data.all || data.paths.indexOf(here) >= 0) location.reload();
  });
})();
