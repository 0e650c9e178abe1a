// Site URLs in snippets, when the site was built without a full base_url: completed from this page's address,
// so that a copied curl line or badge works.
document.querySelectorAll(".site-url").forEach(function (el) {
  el.textContent = new URL(el.textContent, window.location.href).href;
});

// Copy buttons for the Cite block: copies the text of the element named by data-copy.
document.addEventListener("click", function (event) {
  var button = event.target.closest("button[data-copy]");
  if (!button) return;
  var source = document.getElementById(button.getAttribute("data-copy"));
  if (!source || !navigator.clipboard) return;
  navigator.clipboard.writeText(source.textContent).then(function () {
    var label = button.textContent;
    button.textContent = "Copied";
    setTimeout(function () { button.textContent = label; }, 1500);
  });
});
