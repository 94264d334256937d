// The sweep pages' live updates and plots (docs/console.md, "Sweeps"); progressive enhancement: the pages read
// the same without it. The list and a sweep's page follow /ui/events from the position they were drawn at: a trial
// job's event (its id is <sweep>-t<n>) or the sweep's own (its state) fetches the page again and swaps its live
// parts, and the plots' data again;
// brushes and zoom stay. A sweep's page draws parallel coordinates (parcoords.js) filtering the rung table, one
// trial's learning curve with its rungs and pause/promote marks, objective against a parameter, best so far.
"use strict";
(function () {
  const list = document.getElementById("sweeps-live");
  const page = document.getElementById("sweep");
  const root = list || page;
  if (!root) return;
  const sweepId = page ? page.dataset.sweep : null;
  const plotting = page && typeof uPlot !== "undefined" && window.ParCoords;

  const getJSON = (url) => window.lkGetJSON(url, "The sweep");

  function colour(name, fallback) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  // A label beside its control, not around it: a wrapped select's name would take in its chosen option.
  function labelled(text, control) {
    const wrap = document.createElement("span");
    const label = document.createElement("label");
    control.id = control.id || "sweep-" + control.name;
    label.htmlFor = control.id;
    label.textContent = text;
    wrap.className = "labelled";
    wrap.append(label, control);
    return wrap;
  }

  function hint(text) {
    const p = document.createElement("p");
    p.className = "hint";
    p.setAttribute("role", "status");
    p.textContent = text;
    return p;
  }

  // --- The rung table, filtered by the parallel coordinates' brushes.
  let mask = null, byIndex = new Map(), rows = null;
  function applyFilter() {
    const count = page.querySelector("[data-live=shown]");
    if (!rows) rows = Array.from(page.querySelectorAll("tbody[data-live=trials] tr"), (row) => [row, byIndex.get(Number(row.dataset.trial))]);
    let shown = 0;
    for (const [row, i] of rows) {
      const hidden = !!mask && i !== undefined && mask[i] !== 1;
      if (row.hidden !== hidden) row.hidden = hidden; // only the rows that change: layout is the cost
      shown += hidden ? 0 : 1;
    }
    const body = page.querySelector("tbody[data-live=trials]");
    const total = Number(body && body.dataset.total) || rows.length, here = total > rows.length ? " on this page, of " + total : "";
    const text = shown === rows.length ? `${rows.length} trials${here}` : `${shown} of ${rows.length} trials${here} shown (the ranges of the parallel coordinates)`;
    if (count && count.textContent !== text) count.textContent = text;
  }

  // --- Timeline segments: their widths by duration (an inline style attribute would break the CSP; this is CSSOM).
  function sizeSegments() {
    page.querySelectorAll("ol.segments li").forEach((li) => {
      li.style.flexGrow = String(Math.max(0.5, Math.log1p(Number(li.dataset.seconds) || 0)));
    });
  }

  let data = null, parallel = null, curve = null, scatter = null, best = null;

  function chartBox(container, title) {
    const figure = document.createElement("figure");
    figure.className = "chart";
    const caption = document.createElement("figcaption");
    caption.textContent = title;
    const controls = document.createElement("div");
    controls.className = "chart-controls";
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.setAttribute("role", "img");
    // Named from the start: a chart whose data is still on its way is read out by its title, not as nameless.
    plot.setAttribute("aria-label", `${title}; the line below says what it shows`);
    const note = hint("");
    figure.append(caption, controls, plot, note);
    container.replaceChildren(figure);
    return { figure, controls, plot, note };
  }

  function axesStyle() {
    const fg = colour("--fg", "#1a1d21");
    return [{ stroke: fg, grid: { stroke: colour("--line", "#ddd") } }, { stroke: fg, grid: { stroke: colour("--line", "#ddd") } }];
  }

  // --- One trial's learning curve; rung boundaries and marks drawn over it by a draw hook.
  function curveChart() {
    const box = chartBox(document.getElementById("curves"), "Learning curve");
    const select = document.createElement("select");
    select.name = "trial";
    box.controls.append(labelled("Trial", select));
    const whole = document.createElement("button");
    whole.type = "button";
    whole.textContent = "Whole curve";
    box.controls.append(whole);
    let u = null, shown = null, asked = 0;
    const markColour = { promoted: "--ok", paused: "--warn", stopped: "--bad", end: "--muted" };

    function options(width) {
      return {
        width, height: 240,
        axes: [lkAxes.x("step", box.figure, axesStyle()[0]), axesStyle()[1]],
        scales: { x: { time: false } },
        series: [{ label: "step" }, { label: data.metric, stroke: colour("--accent", "#0a58b5"), width: 1.5 }],
        cursor: { drag: { x: true, y: false } },
        hooks: {
          draw: [(plotted) => {
            const ctx = plotted.ctx, r = window.devicePixelRatio || 1;
            ctx.save();
            ctx.font = `${11 * r}px system-ui, sans-serif`;
            for (const m of shown.marks) {
              const x = plotted.valToPos(m.step, "x", true);
              if (x < plotted.bbox.left || x > plotted.bbox.left + plotted.bbox.width) continue;
              ctx.strokeStyle = colour("--muted", "#888");
              ctx.setLineDash([4 * r, 4 * r]);
              ctx.beginPath();
              ctx.moveTo(x, plotted.bbox.top);
              ctx.lineTo(x, plotted.bbox.top + plotted.bbox.height);
              ctx.stroke();
              ctx.setLineDash([]);
              const y = plotted.valToPos(m.result, "y", true);
              ctx.fillStyle = colour(markColour[m.kind] || "--fg", "#333");
              ctx.beginPath();
              if (m.kind === "promoted") { ctx.moveTo(x, y - 7 * r); ctx.lineTo(x - 6 * r, y + 4 * r); ctx.lineTo(x + 6 * r, y + 4 * r); }
              else ctx.rect(x - 4 * r, y - 4 * r, 8 * r, 8 * r);
              ctx.fill();
              ctx.fillText(`rung ${m.rung}: ${m.kind}`, x + 6 * r, plotted.bbox.top + 12 * r);
            }
            ctx.restore();
            box.figure.dataset.drawn = String(Number(box.figure.dataset.drawn || 0) + 1);
          }],
        },
      };
    }

    async function load(keepZoom) {
      const ask = ++asked;
      const jobId = select.value;
      if (!jobId) return;
      try {
        const body = await getJSON(`/ui/sweeps/${encodeURIComponent(sweepId)}/curves/${encodeURIComponent(jobId)}`);
        if (ask !== asked) return;
        const same = shown && shown.job_id === body.job_id;
        shown = body;
        box.figure.dataset.job = body.job_id;
        box.figure.dataset.steps = String(body.steps);
        box.figure.dataset.x = body.x.join(",");
        box.plot.setAttribute("aria-label", `Learning curve of ${body.job_id}: ${data.metric} at ${body.steps} steps; the line below names its rungs`);
        const marks = body.marks.map((m) => `rung ${m.rung} at step ${m.step}: ${m.result.toPrecision(4)}, ${m.kind}`).join("; ");
        box.note.textContent = `${body.steps} steps, each once${marks ? "; " + marks : ""}. Drag across the chart to zoom.`;
        if (u && same && keepZoom) {
          // A zoomed chart keeps its range; one showing its whole curve grows with it.
          const had = u.data[0], zoomed = had.length && (u.scales.x.min > had[0] || u.scales.x.max < had[had.length - 1]);
          u.setData([body.x, body.y], !zoomed);
          return;
        }
        if (u) u.destroy();
        u = new uPlot(options(box.plot.clientWidth || 600), [body.x, body.y], box.plot);
      } catch (error) {
        box.note.textContent = error.message;
      }
    }

    function fill() {
      const now = select.value;
      const trials = data.trials.slice().sort((a, b) => b.results.length - a.results.length || a.index - b.index);
      select.replaceChildren(...trials.map((t) => new Option(`${t.job_id} (${t.results.length} rung${t.results.length === 1 ? "" : "s"}, ${t.state})`, t.job_id)));
      select.value = now && data.trials.some((t) => t.job_id === now) ? now : trials.length ? trials[0].job_id : "";
    }

    select.addEventListener("change", () => load(false));
    whole.addEventListener("click", () => load(false));
    new ResizeObserver(() => u && u.setSize({ width: box.plot.clientWidth, height: 240 })).observe(box.plot);
    return {
      update(jobIds) {
        const had = select.value;
        fill();
        if (!u || select.value !== had) load(false);
        else if (!jobIds || jobIds.has(select.value)) load(true);
      },
    };
  }

  // --- Objective against one parameter: points, a log axis for log-scaled ones, a choice's options by index.
  function scatterChart() {
    const box = chartBox(document.getElementById("scatter"), "Objective against a parameter");
    const select = document.createElement("select");
    select.name = "parameter";
    box.controls.append(labelled("Parameter", select));
    let u = null;

    function draw() {
      const a = data.axes.findIndex((x) => x.name === select.value);
      if (a < 0) return;
      const axis = data.axes[a];
      const values = axis.kind === "choice" ? axis.values.slice() : null;
      const points = data.trials.filter((t) => t.objective !== null && t.values[a] !== null)
        .map((t) => [values ? Math.max(0, values.indexOf(String(t.values[a]))) : t.values[a], t.objective])
        .sort((p, q) => p[0] - q[0]);
      const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
      box.plot.setAttribute("aria-label", `${data.metric} against ${axis.name}, ${points.length} trials`);
      box.note.textContent = `${points.length} trials with a result.`;
      const x = { stroke: colour("--fg", "#1a1d21"), grid: { stroke: colour("--line", "#ddd") } };
      if (values) Object.assign(x, { splits: () => values.map((_, i) => i), values: () => values });
      // uPlot's own labels round to the larger ticks' decimals: on a log axis 0.0001 read "0".
      else if (axis.kind === "log") x.values = (_, splits) => splits.map((v) => (v == null ? "" : v >= 1e-3 && v < 1e6 ? String(Number(v.toPrecision(4))) : v.toExponential()));
      const opts = {
        width: box.plot.clientWidth || 600, height: 240,
        scales: { x: { time: false, distr: axis.kind === "log" ? 3 : 1, ...(values ? { range: [-0.5, values.length - 0.5] } : {}) } },
        axes: [x, axesStyle()[1]],
        series: [{ label: axis.name }, { label: data.metric, stroke: colour("--accent", "#0a58b5"), paths: () => null, points: { show: true, size: 7, fill: colour("--accent", "#0a58b5") } }],
      };
      if (u) u.destroy();
      u = new uPlot(opts, [xs, ys], box.plot);
    }

    select.addEventListener("change", draw);
    new ResizeObserver(() => u && u.setSize({ width: box.plot.clientWidth, height: 240 })).observe(box.plot);
    return {
      update() {
        const now = select.value;
        select.replaceChildren(...data.axes.map((x) => new Option(x.name, x.name)));
        if (now) select.value = now;
        draw();
      },
    };
  }

  // --- The best objective reported by each moment: a step line over time.
  function bestChart() {
    const box = chartBox(document.getElementById("best"), "Best so far");
    let u = null;
    return {
      update() {
        const xs = data.best_so_far.map((p) => Date.parse(p[0]) / 1000), ys = data.best_so_far.map((p) => p[1]);
        box.plot.setAttribute("aria-label", `Best ${data.metric} so far over time, ${xs.length} results`);
        box.note.textContent = xs.length ? `Best ${data.metric}: ${data.best} (${data.goal}); times in UTC.` : "No rung has finished yet.";
        const opts = {
          width: box.plot.clientWidth || 600, height: 200, axes: axesStyle(), tzDate: lkAxes.utc,
          series: [{ label: "time" }, { label: "best " + data.metric, stroke: colour("--ok", "#1e6b34"), width: 2, paths: uPlot.paths.stepped({ align: 1 }) }],
        };
        if (u) { u.setData([xs, ys]); return; }
        u = new uPlot(opts, [xs, ys], box.plot);
        new ResizeObserver(() => u.setSize({ width: box.plot.clientWidth, height: 200 })).observe(box.plot);
      },
    };
  }

  async function loadData(jobIds) {
    try {
      data = await getJSON(`/ui/sweeps/${encodeURIComponent(sweepId)}/data`);
    } catch (error) {
      document.getElementById("parallel").replaceChildren(hint(error.message));
      return;
    }
    byIndex = new Map(data.trials.map((t, i) => [t.index, i]));
    rows = null;
    if (!parallel) parallel = window.ParCoords(document.getElementById("parallel"), (m) => { mask = m; applyFilter(); });
    const axes = data.axes.concat([{ name: data.metric, kind: "linear" }]);
    parallel.setData(axes, data.trials.map((t) => t.values.concat([t.objective])));
    if (!curve) curve = curveChart();
    if (!scatter) scatter = scatterChart();
    if (!best) best = bestChart();
    curve.update(jobIds);
    scatter.update();
    best.update();
  }

  // --- Live: fetch the page again (coalesced), swap its live parts, then the plots' data.
  const PARTS = list ? ["#sweeps-live"] : ["[data-live=header]", "[data-live=actions]", "tbody[data-live=trials]", "tbody[data-live=timelines]"];
  // `again`: undefined, no refresh waits; null, one of everything (a snapshot, the sweep's own event); else job ids.
  let fetching = false, again = undefined;
  function refresh(jobIds) {
    if (fetching) {
      again = again === undefined ? jobIds : again === null || jobIds === null ? null : new Set([...again, ...jobIds]);
      return;
    }
    fetching = true;
    const address = new URL(location.href);
    address.searchParams.delete("done"); // the notice of an action is the page's it was done on, not a later one's
    fetch(address.pathname + address.search, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then((r) => (r.ok ? r.text() : null))
      .then((html) => {
        if (!html) return;
        const fresh = new DOMParser().parseFromString(html, "text/html");
        for (const selector of PARTS) {
          const now = document.querySelector(selector), next = fresh.querySelector(selector);
          if (now && next) {
            if (selector === "#sweeps-live") now.replaceChildren(...Array.from(next.childNodes, (n) => document.importNode(n, true)));
            else now.replaceWith(document.importNode(next, true));
          }
        }
        if (page) { rows = null; applyFilter(); sizeSegments(); if (plotting) return loadData(jobIds); }
      })
      .finally(() => {
        fetching = false;
        root.dataset.refreshed = String(Number(root.dataset.refreshed || 0) + 1);
        if (again !== undefined) { const ids = again; again = undefined; refresh(ids); }
      });
  }

  function follow() {
    if (!root.dataset.after || !window.EventSource) return;
    const source = new EventSource("/ui/events?after=" + encodeURIComponent(root.dataset.after));
    const mine = (jobId) => (sweepId ? jobId.startsWith(sweepId + "-t") : /^sweep-.*-t\d+$/.test(jobId));
    ["job", "job-deleted", "attempt", "metrics", "snapshot", "sweep"].forEach((kind) => {
      source.addEventListener(kind, (e) => {
        root.dataset.after = e.lastEventId;
        const body = JSON.parse(e.data);
        if (kind === "snapshot") refresh(null);
        else if (kind === "sweep") { if (!sweepId || body.sweep_id === sweepId) refresh(null); } // its own record
        else if (mine(body.job_id)) refresh(new Set([body.job_id]));
      });
    });
    window.addEventListener("pagehide", () => source.close());
  }

  if (page) {
    sizeSegments();
    if (plotting) {
      const css = document.createElement("link");
      css.rel = "stylesheet";
      css.href = "/ui/static/vendor/uPlot.min.css";
      document.head.appendChild(css);
      loadData(null);
    }
  }
  follow();
})();
