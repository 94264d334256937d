// learnerkit console: the Queue page, live (progressive enhancement; the page reads the same without it).
// Follows the session's event stream from the position the page was drawn at; any event of the tenant's jobs
// fetches the page again (one fetch at a time) and swaps the queue and the preemption log.
(function () {
  "use strict";
  var live = document.getElementById("queue-live");
  if (!live || !live.dataset.queueAfter || !window.EventSource || !window.fetch) return;
  var fetching = false, again = false;
  function refresh() {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        var next = html && new DOMParser().parseFromString(html, "text/html").getElementById("queue-live");
        if (next) live.replaceChildren.apply(live, Array.from(document.importNode(next, true).childNodes));
      })
      .finally(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }
  var source = new EventSource("/ui/events?after=" + encodeURIComponent(live.dataset.queueAfter));
  ["job", "job-deleted", "attempt", "snapshot"].forEach(function (kind) {
    source.addEventListener(kind, function (e) {
      live.dataset.queueAfter = e.lastEventId;
      refresh();
    });
  });
  window.addEventListener("pagehide", function () { source.close(); });
})();
