// The Compare page's curves (docs/console.md): one uPlot chart per scalar metric of the jobs' learner 1, one line
// per job, each series thinned by the server to about a point per pixel of the chart (all of them in one request
// first); a drag selects a range,
// fetched again (at full resolution once it holds fewer points than that). One legend of checkboxes, one per job,
// shows or hides that job's line in every chart. uPlot's mode 2: each job keeps its own steps.
"use strict";
(function () {
  const root = document.getElementById("compare-charts");
  if (!root || typeof uPlot === "undefined") return;
  const jobs = root.dataset.jobs;
  const MAX_POINTS = 5000;
  const hidden = new Set();
  const charts = []; // {redraw} of each chart, for the legend
  const css = document.createElement("link");
  css.rel = "stylesheet";
  css.href = "/ui/static/vendor/uPlot.min.css";
  document.head.appendChild(css);

  const getJSON = (url) => window.lkGetJSON(url, "The curves");

  function cssColour(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#0a58b5";
  }

  // Hues spread by the golden angle: neighbours in the list never look alike; darker on a light page.
  function colour(index) {
    const dark = matchMedia("(prefers-color-scheme: dark)").matches;
    return `hsl(${Math.round((index * 137.508) % 360)}, 70%, ${dark ? 65 : 38}%)`;
  }

  function legend(ids) {
    const box = document.createElement("fieldset");
    box.className = "compare-legend";
    const title = document.createElement("legend");
    title.textContent = "Lines (untick a job to hide its line in every chart)";
    box.append(title);
    ids.forEach((id, index) => {
      const label = document.createElement("label");
      const tick = document.createElement("input");
      tick.type = "checkbox";
      tick.checked = true;
      tick.value = id;
      const swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colour(index);
      tick.addEventListener("change", () => {
        if (tick.checked) hidden.delete(id); else hidden.add(id);
        for (const c of charts) c.redraw();
      });
      label.append(tick, swatch, id);
      box.append(label);
    });
    return box;
  }

  function chart(name, ids, index, whole) {
    const figure = document.createElement("figure");
    figure.className = "chart";
    figure.dataset.series = name;
    const caption = document.createElement("figcaption");
    caption.textContent = name;
    const controls = document.createElement("div");
    controls.className = "chart-controls";
    const axisWrap = document.createElement("label");
    const axis = document.createElement("select");
    axis.name = "axis-" + index;
    for (const value of ["step", "time"]) axis.add(new Option(value, value));
    axisWrap.append("Axis ", axis);
    const logWrap = document.createElement("label");
    const log = document.createElement("input");
    Object.assign(log, { type: "checkbox", name: "log-" + index });
    logWrap.append(log, " Log scale");
    const reset = document.createElement("button");
    reset.type = "button";
    reset.textContent = "Whole series";
    controls.append(axisWrap, logWrap, reset);
    const plot = document.createElement("div");
    plot.className = "plot";
    plot.setAttribute("role", "img");
    plot.setAttribute("aria-label", "Chart of " + name + " for each job; the line below says what it shows");
    const note = document.createElement("p");
    note.className = "hint chart-note";
    note.setAttribute("role", "status");
    figure.append(caption, controls, plot, note);
    root.append(figure);

    let u = null;
    let shown = null; // the last answer
    let asked = 0;
    let first = true;

    function points() {
      return Math.min(MAX_POINTS, Math.max(100, Math.round(plot.clientWidth)));
    }

    function draw() {
      if (u) u.destroy();
      const fg = cssColour("--fg");
      const data = [null];
      const series = [{}];
      for (const s of shown.series) {
        data.push([s.x, log.checked ? s.y.map((y) => (y > 0 ? y : null)) : s.y]);
        series.push({
          label: s.job_id,
          stroke: colour(ids.indexOf(s.job_id)),
          width: 1,
          show: !hidden.has(s.job_id),
          points: { show: false },
          facets: [{ scale: "x", auto: true }, { scale: "y", auto: true }],
        });
      }
      const opts = {
        mode: 2,
        width: plot.clientWidth,
        height: 280,
        legend: { show: false }, // the page's own legend, one for all charts, is keyboard-usable
        tzDate: lkAxes.utc,
        scales: { x: { time: axis.value === "time" }, y: { distr: log.checked ? 3 : 1 } },
        axes: [lkAxes.x(axis.value, figure, { stroke: fg }), { stroke: fg }],
        series,
        cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
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
            if (first) {
              first = false;
              figure.dataset.drawnAt = String(performance.now()); // for bench/console.py's compare case
              root.dataset.drawn = String(Number(root.dataset.drawn || 0) + 1);
            }
          }],
        },
      };
      u = new uPlot(opts, data, plot);
      markHidden();
    }

    function markHidden() {
      figure.dataset.hidden = shown.series.filter((s) => hidden.has(s.job_id)).map((s) => s.job_id).join(",");
    }

    function show(series, part) {
      shown = { series };
      const sent = series.reduce((n, s) => n + s.x.length, 0);
      const held = series.reduce((n, s) => n + s.in_range, 0);
      figure.dataset.points = String(sent);
      figure.dataset.inRange = String(held);
      const thinned = held > sent ? ", thinned on the server" : "";
      note.textContent = `${series.length} of ${ids.length} jobs have ${name}: ${sent} of ${held} points of ${part}${thinned}; drag across the chart to zoom.`;
      draw();
    }

    async function load(from, to) {
      const ask = ++asked;
      const query = new URLSearchParams({ jobs, axis: axis.value, points: String(points()) });
      if (from !== undefined) query.set("from", String(from));
      if (to !== undefined) query.set("to", String(to));
      const url = "/ui/compare/series/" + name.split("/").map(encodeURIComponent).join("/") + "?" + query;
      try {
        const body = await getJSON(url);
        if (ask !== asked) return;
        show(body.series[name] || [], from === undefined ? "the whole series" : "a range");
      } catch (error) {
        note.textContent = error.message;
      }
    }

    axis.addEventListener("change", () => load());
    reset.addEventListener("click", () => load());
    log.addEventListener("change", () => shown && draw());
    new ResizeObserver(() => u && u.setSize({ width: plot.clientWidth, height: 280 })).observe(plot);
    charts.push({
      redraw() {
        if (!u) return;
        shown.series.forEach((s, i) => u.setSeries(i + 1, { show: !hidden.has(s.job_id) }));
        markHidden();
      },
    });
    show(whole, "the whole series");
  }

  // The first drawing of every chart in one request: each history is read once for all its metrics.
  const width = Math.min(MAX_POINTS, Math.max(100, Math.round(root.clientWidth)));
  getJSON("/ui/compare/series?" + new URLSearchParams({ jobs, points: String(width) })).then((index) => {
    root.replaceChildren();
    const names = Object.keys(index.series);
    if (!names.length) {
      const none = document.createElement("p");
      none.textContent = "None of these jobs has stored a metric history yet.";
      root.append(none);
      return;
    }
    root.append(legend(index.jobs));
    if (index.without.length) {
      const without = document.createElement("p");
      without.className = "hint";
      without.textContent = "No metric history yet: " + index.without.join(", ") + ".";
      root.append(without);
    }
    names.forEach((name, i) => chart(name, index.jobs, i, index.series[name]));
  }).catch((error) => {
    const why = document.createElement("p");
    why.className = "notice";
    why.textContent = error.message;
    root.replaceChildren(why);
  });
})();
