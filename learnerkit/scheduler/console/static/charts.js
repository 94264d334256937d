// The job page's metric charts: one uPlot chart per scalar of a learner's history (docs/console.md); the
// learner comes from the page (its select, rendered by the server, is fetched again on change).
// Each series comes thinned by the server to about two points per pixel; a drag selects a range, fetched
// again at full resolution when it holds fewer points than that. Step or time axis, log scale, smoothing.
// Live: a `metrics` event of the chart's learner (live.js passes them on as "lk:metrics") fetches each chart's
// window again, the range it shows kept (a zoom stays a zoom), at most once per FOLLOW_MS; a scalar new to the
// history gets its chart.
"use strict";
(function () {
  const root = document.getElementById("charts");
  if (!root || typeof uPlot === "undefined") return;
  const job = root.dataset.job;
  const base = "/ui/jobs/" + encodeURIComponent(job) + "/series";
  const MAX_POINTS = 5000;
  const FOLLOW_MS = 2000;
  let charts = []; // [series' name, fetch its window again] of each chart drawn
  const choice = document.getElementById("chart-learner");
  let learner = root.dataset.learner || "1";
  let shows = 0;
  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = "/ui/static/vendor/uPlot.min.css";
  document.head.appendChild(css);

  const getJSON = (url) => window.lkGetJSON(url, "The series");

  // TensorBoard's smoothing: an exponential moving average, debiased so the first points are not pulled to 0.
  function smooth(ys, weight) {
    if (weight <= 0) return ys;
    let last = 0, debias = 0;
    return ys.map((y) => {
      if (y === null) return null;
      last = last * weight + (1 - weight) * y;
      debias = debias * weight + (1 - weight);
      return last / debias;
    });
  }

  function colour(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#0a58b5";
  }

  function control(tag, attrs, label) {
    const wrap = document.createElement("label");
    const input = document.createElement(tag);
    Object.assign(input, attrs);
    wrap.append(input, " " + label);
    return [wrap, input];
  }

  function chart(entry, index) {
    const figure = document.createElement("figure");
    figure.className = "chart";
    figure.dataset.series = entry.name;
    const caption = document.createElement("figcaption");
    caption.textContent = entry.name;
    const controls = document.createElement("div");
    controls.className = "chart-controls";
    const [axisWrap, axis] = control("select", { name: "axis-" + index }, "");
    axisWrap.prepend("Axis ");
    for (const value of ["step", "time"]) axis.add(new Option(value, value));
    const [logWrap, log] = control("input", { type: "checkbox", name: "log-" + index }, "Log scale");
    const [smoothWrap, smoothing] = control(
      "input", { type: "range", min: "0", max: "0.99", step: "0.01", value: "0", name: "smooth-" + index }, "Smoothing");
    const reset = document.createElement("button");
    reset.type = "button";
    reset.textContent = "Whole series";
    controls.append(axisWrap, logWrap, smoothWrap, reset);
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.setAttribute("role", "img");
    plot.setAttribute("aria-label", "Chart of " + entry.name + "; the line below says what it shows");
    const note = document.createElement("p");
    note.className = "hint chart-note";
    note.setAttribute("role", "status");
    figure.append(caption, controls, plot, note);
    root.append(figure);

    let u = null;
    let shown = null; // the last window the server sent
    let asked = 0; // answers to an earlier request are dropped
    let range = null; // the zoom: [from, to] of the window shown, null for the whole series

    function points() {
      return Math.min(MAX_POINTS, Math.max(100, Math.round(plot.clientWidth * 2)));
    }

    // The smoothed line only while smoothing is on: a hidden series' legend entry would be greyed out, unreadable.
    function data() {
      const ys = log.checked ? shown.y.map((y) => (y > 0 ? y : null)) : shown.y;
      const weight = Number(smoothing.value);
      return weight > 0 ? [shown.x, ys, smooth(ys, weight)] : [shown.x, ys];
    }

    // uPlot's own labels round to the decimals of the larger ticks' spacing: on a log scale 0.001 read "0".
    function logTicks(plotted, splits) {
      return splits.map((v) => (v == null ? "" : v >= 1e-3 && v < 1e6 ? String(Number(v.toPrecision(4))) : v.toExponential()));
    }

    function draw() {
      if (u) u.destroy();
      const line = colour("--accent");
      const smoothed = Number(smoothing.value) > 0;
      let first = true;
      const opts = {
        width: plot.clientWidth,
        height: 240,
        tzDate: lkAxes.utc,
        scales: { x: { time: axis.value === "time" }, y: { distr: log.checked ? 3 : 1 } },
        axes: [lkAxes.x(axis.value, figure, { stroke: colour("--fg") }), { stroke: colour("--fg"), ...(log.checked ? { values: logTicks } : {}) }],
        series: [
          { label: axis.value },
          { label: entry.name, stroke: line, width: 1, alpha: smoothed ? 0.35 : 1 },
          ...(smoothed ? [{ label: "smoothed", stroke: line, width: 2 }] : []),
        ],
        cursor: { drag: { x: true, y: false, setScale: false } },
        hooks: {
          setSelect: [(plotted) => {
            const sel = plotted.select;
            if (sel.width < 2) return;
            const from = plotted.posToVal(sel.left, "x"), to = plotted.posToVal(sel.left + sel.width, "x");
            plotted.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            load(from, to);
          }],
          draw: [() => {
            figure.dataset.drawn = String(Number(figure.dataset.drawn || 0) + 1);
            if (first) figure.dataset.drawnAt = String(performance.now()); // for bench/console_series.py
            first = false;
          }],
        },
      };
      u = new uPlot(opts, data(), plot);
    }

    async function load(from, to, following) {
      const ask = ++asked;
      range = from === undefined ? null : [from, to];
      const query = new URLSearchParams({ learner, axis: axis.value, points: String(points()) });
      if (from !== undefined) query.set("from", String(from));
      if (to !== undefined) query.set("to", String(to));
      const url = base + "/" + entry.name.split("/").map(encodeURIComponent).join("/") + "?" + query;
      try {
        const body = await getJSON(url);
        if (ask !== asked) return;
        shown = body;
        figure.dataset.points = String(body.x.length);
        figure.dataset.inRange = String(body.in_range);
        figure.dataset.total = String(body.total);
        const thinned = body.in_range > body.x.length ? ", thinned on the server" : "";
        const part = from === undefined ? "the whole series" : "a range";
        note.textContent = `${body.x.length} of ${body.in_range} points of ${part}${thinned}; drag across the chart to zoom.`;
        if (following && u) u.setData(data()); else draw();
        if (following) figure.dataset.followed = String(Number(figure.dataset.followed || 0) + 1);
      } catch (error) {
        note.textContent = error.message;
      }
    }

    axis.addEventListener("change", () => load());
    reset.addEventListener("click", () => load());
    for (const input of [log, smoothing]) input.addEventListener("change", () => shown && draw());
    new ResizeObserver(() => u && u.setSize({ width: plot.clientWidth, height: 240 })).observe(plot);
    load();
    charts.push([entry.name, () => (range ? load(range[0], range[1], true) : load(undefined, undefined, true))]);
  }

  // One fetch per FOLLOW_MS at most: events come as often as the learner logs, the history is stored less often.
  let waiting = null, lastFollow = 0;
  function follow() {
    if (waiting) return;
    waiting = setTimeout(() => {
      waiting = null;
      lastFollow = performance.now();
      getJSON(base + "?" + new URLSearchParams({ learner })).then((index) => {
        if (!charts.length) { show(); return; }
        const known = new Set(charts.map(([name]) => name));
        index.series.filter((entry) => !known.has(entry.name)).forEach((entry) => chart(entry, charts.length));
        charts.forEach(([, again]) => again());
      }).catch(() => {});
    }, Math.max(0, lastFollow + FOLLOW_MS - performance.now()));
  }

  document.addEventListener("lk:metrics", (e) => {
    if (e.detail.learner_id === undefined || String(e.detail.learner_id) === learner) follow();
  });

  function show() {
    const showing = ++shows;
    root.dataset.learner = learner;
    getJSON(base + "?" + new URLSearchParams({ learner })).then((index) => {
      if (showing !== shows) return;
      root.replaceChildren();
      charts = [];
      if (!index.series.length) {
        const none = document.createElement("p");
        none.textContent = `Learner ${learner} has stored no metric history yet.`;
        root.append(none);
      }
      index.series.forEach(chart);
    }).catch((error) => {
      if (showing !== shows) return;
      const why = document.createElement("p");
      why.className = "notice";
      why.textContent = error.message;
      root.replaceChildren(why);
    });
  }

  if (choice) choice.addEventListener("change", () => { learner = choice.value; show(); });
  show();
})();
