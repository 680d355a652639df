// A traceback the reader opened stays open when htmx refreshes its section:
// before the swap, remember the open ones by their text; after it, reopen them.
(function () {
  var opened = new Set();
  document.body.addEventListener("htmx:beforeSwap", function () {
    opened = new Set();
    document.querySelectorAll("details.traceback[open]").forEach(function (d) {
      opened.add(d.textContent);
    });
  });
  document.body.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("details.traceback").forEach(function (d) {
      if (opened.has(d.textContent)) { d.open = true; }
    });
  });
})();
