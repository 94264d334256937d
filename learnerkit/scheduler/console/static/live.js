// learnerkit console: live pages (progressive enhancement; the pages read the same without it).
// One EventSource per page on /ui/events, from the position the page was drawn at (data-live-after on <main>);
// a reconnect resumes by Last-Event-ID. Events patch the rows and fields they name in place; what an event cannot
// patch (a job new to the list, the timeline, the log's tail) is fetched again as HTML from the same URL and
// swapped in, so scroll, focus and the filters in the URL stay as they are.
(function () {
  "use strict";
  var main = document.getElementById("main");
  if (!main || !main.dataset.liveAfter || !window.EventSource || !window.fetch) return;
  var crumbs = document.querySelector(".crumbs[data-job]");
  var jobId = crumbs ? crumbs.dataset.job : null;

  function setStatus(el, status) {
    if (!el || !status) return;
    el.textContent = status;
    el.className = "status s-" + status.toLowerCase();
  }

  // As the server words it (views.status_reason): the job page says whether the job waits or ended.
  var ENDED = ["COMPLETED", "FAILED", "HALTED", "CANCELLED"];
  function setReason(el, reason, status) {
    if (!el || reason === undefined) return;
    if (el.tagName === "P") {
      el.hidden = !reason;
      if (reason) reason = (ENDED.indexOf(status) >= 0 ? "Ended: " : "Waiting: ") + reason;
    }
    el.textContent = reason;
  }

  // Fetches this page again (coalesced: one at a time, one more if events came meanwhile) and swaps the parts
  // `pick` names, each found by a selector in both documents.
  var fetching = false, again = false;
  function refresh(selectors) {
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var ticked = Array.from(document.querySelectorAll("input[form=compare-form]:checked"), function (i) { return i.value; });
        selectors.forEach(function (selector) {
          var now = document.querySelector(selector), next = fresh.querySelector(selector);
          if (!now && next) { swapSection(next); return; }
          if (!now || !next) return;
          if (now.tagName === "PRE") swapLog(now, next); else now.replaceWith(document.importNode(next, true));
        });
        // The list's Compare ticks are the person's, not the server's: kept on the rows swapped in.
        document.querySelectorAll("input[form=compare-form]").forEach(function (i) {
          if (ticked.indexOf(i.value) >= 0) i.checked = true;
        });
      })
      .finally(function () {
        fetching = false;
        if (again) { again = false; refresh(selectors); }
      });
  }

  // A part the page was drawn without (the log of a job that had not started): its whole section, as fetched.
  function swapSection(next) {
    var section = next.closest("section[aria-labelledby]");
    if (!section) return;
    var here = document.querySelector('section[aria-labelledby="' + section.getAttribute("aria-labelledby") + '"]');
    if (here) here.replaceWith(document.importNode(section, true));
  }

  // The log's tail: new text in place; kept at its end when it was there (following), else where it was.
  function swapLog(now, next) {
    if (!now.hasAttribute("data-follow") || now.textContent === next.textContent) return;
    var atEnd = now.scrollTop + now.clientHeight >= now.scrollHeight - 4;
    now.textContent = next.textContent;
    if (atEnd) now.scrollTop = now.scrollHeight;
  }

  var LIST = ["table.jobs tbody", "[data-live=count]", "nav.pager"];
  var PAGE = ["section[aria-labelledby=h-timeline]", "pre[data-live=log]", "nav.choices"];

  // Only a job's own record changes a row (attempts, learners and metrics are not in the list).
  function onList(kind, data) {
    if (kind === "snapshot") { refresh(LIST); return; }
    if (kind !== "job" && kind !== "job-deleted") return;
    var row = document.querySelector('tr[data-job="' + CSS.escape(data.job_id) + '"]');
    if (!row || kind === "job-deleted") { refresh(LIST); return; }
    setStatus(row.querySelector(".status"), data.status);
    setReason(row.querySelector("[data-live=reason]"), data.reason, data.status);
  }

  // charts.js follows its learner's history from these (it keeps no stream of its own).
  function toCharts(data) { document.dispatchEvent(new CustomEvent("lk:metrics", { detail: data })); }

  function onJob(kind, data) {
    if (kind === "snapshot") { toCharts({}); refresh(PAGE.concat(["h1 .status", "[data-live=reason]", "section[aria-labelledby=h-learners] tbody"])); return; }
    if (data.job_id !== jobId) return;
    if (kind === "metrics") toCharts(data);
    if (kind === "job") {
      setStatus(document.querySelector("h1 .status"), data.status);
      setReason(document.querySelector("p[data-live=reason]"), data.reason, data.status);
    } else if (kind === "learner" || kind === "metrics") {
      var row = document.querySelector('tr[data-learner="' + data.learner_id + '"]');
      if (!row) { refresh(["section[aria-labelledby=h-learners] tbody"]); return; }
      var cell = function (label) { return row.querySelector('td[data-label="' + label + '"]'); };
      if (data.status) setStatus(cell("Status").querySelector(".status"), data.status);
      if (data.alive !== undefined) cell("Sidecar").textContent = data.alive ? "connected" : "not connected";
      if ("exit_code" in data) cell("Exit").textContent = data.exit_code === null ? "\u2014" : String(data.exit_code);
      if ("message" in data) cell("Message").textContent = data.message || "";
      if (data.metrics) {
        var m = cell("Metrics");
        m.textContent = "";
        Object.keys(data.metrics).forEach(function (k) {
          var span = document.createElement("span");
          span.className = "metric";
          span.textContent = k + "=" + Number(data.metrics[k]).toPrecision(4).replace(/\.?0+(e|$)/, "$1");
          m.append(span, " ");
        });
      }
    }
    refresh(PAGE);
  }

  var handle = jobId ? onJob : onList;
  var source = new EventSource("/ui/events?after=" + encodeURIComponent(main.dataset.liveAfter));
  ["job", "job-deleted", "attempt", "learner", "metrics", "snapshot"].forEach(function (kind) {
    source.addEventListener(kind, function (e) {
      main.dataset.liveAfter = e.lastEventId;
      handle(kind, JSON.parse(e.data));
    });
  });
  window.addEventListener("pagehide", function () { source.close(); });
})();
