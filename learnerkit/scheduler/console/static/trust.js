// The trust panel, live: the server checks the job's provenance again on its own schedule; this fetches the
// panel's part of the page every few seconds and swaps it in when it changed. Without it, a reload does the same.
(function () {
  "use strict";
  var panel = document.getElementById("trust-panel");
  if (!panel || !window.fetch) { return; }
  var every = Math.max(1, Number(panel.getAttribute("data-trust-every")) || 10) * 1000;
  var url = panel.getAttribute("data-trust-panel");
  var last = null;
  function tick() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html !== null && html !== last) { panel.innerHTML = html; last = html; }
      })
      .catch(function () { /* the next tick tries again */ })
      .then(function () { window.setTimeout(tick, every); });
  }
  window.setTimeout(tick, every);
})();
