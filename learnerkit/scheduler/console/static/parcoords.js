// Parallel coordinates on one canvas (docs/console.md, "Sweeps"): one polyline per trial across its axes
// (linear, log or categorical), all of a kind stroked as one path, so 1,000 trials x 20 axes draw in a few ms.
// Dragging along an axis brushes a range of it; the same ranges are inputs under the chart (keyboard, screen
// readers). `onFilter(mask)` gets which trials are inside every brush; brushes survive `setData` (a live update).
"use strict";
window.ParCoords = (function () {
  const HEIGHT = 320, TOP = 34, BOTTOM = 26, SIDE = 46, GRAB = 14;

  function css(name, fallback) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || fallback;
  }

  function fmt(v) {
    return Math.abs(v) >= 1e-3 && Math.abs(v) < 1e5 ? String(Number(v.toPrecision(4))) : v.toExponential(2);
  }

  // An axis's scale: a value to [0, 1] (0 at the bottom) and back; null for a value it cannot place.
  function scale(axis, column) {
    if (axis.kind === "choice") {
      const values = axis.values && axis.values.length ? axis.values.slice() : [];
      for (const v of column) if (v !== null && values.indexOf(String(v)) < 0) values.push(String(v));
      const n = Math.max(1, values.length - 1);
      return {
        values,
        norm: (v) => { const i = values.indexOf(String(v)); return i < 0 ? null : values.length === 1 ? 0.5 : i / n; },
        value: (t) => values[Math.round(t * n)],
        ticks: values.map((v, i) => [values.length === 1 ? 0.5 : i / n, v]),
      };
    }
    const log = axis.kind === "log";
    const nums = column.filter((v) => typeof v === "number" && isFinite(v) && (!log || v > 0));
    let lo = Math.min(...nums, ...(axis.low !== undefined && (!log || axis.low > 0) ? [axis.low] : []));
    let hi = Math.max(...nums, ...(axis.high !== undefined && (!log || axis.high > 0) ? [axis.high] : []));
    if (!isFinite(lo) || !isFinite(hi)) { lo = log ? 1 : 0; hi = log ? 10 : 1; }
    const f = log ? Math.log10 : (v) => v, g = log ? (t) => Math.pow(10, t) : (t) => t;
    const a = f(lo), b = f(hi), span = b - a || 1;
    const norm = (v) => (typeof v !== "number" || !isFinite(v) || (log && v <= 0) ? null : b === a ? 0.5 : (f(v) - a) / span);
    return { norm, value: (t) => g(a + t * span), ticks: [0, 0.5, 1].map((t) => [t, fmt(g(a + t * span))]), lo, hi, log };
  }

  function ParCoords(root, onFilter) {
    const figure = document.createElement("figure");
    figure.className = "chart parcoords";
    const canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    canvas.tabIndex = 0;
    const note = document.createElement("p");
    note.className = "hint";
    note.setAttribute("role", "status");
    const form = document.createElement("fieldset");
    form.className = "brushes";
    const legend = document.createElement("legend");
    legend.textContent = "Show only the trials inside these ranges (empty: any)";
    const clear = document.createElement("button");
    clear.type = "button";
    clear.textContent = "Clear every range";
    form.append(legend);
    figure.append(canvas, note, form);
    root.replaceChildren(figure);

    let axes = [], trials = [], scales = [], norm = null, mask = new Uint8Array(0);
    const brushes = new Map(); // axis name -> [lo, hi] in [0, 1]
    const inputs = new Map(); // axis name -> [from, to] controls
    let drag = null, ids = 0;

    // The width as last observed: reading clientWidth while drawing would lay out the page (the table a brush
    // just filtered) synchronously, inside the brush's time.
    let observed = root.clientWidth;
    function width() { return Math.max(300, observed); }
    function xOf(a) { return axes.length < 2 ? width() / 2 : SIDE + (a * (width() - 2 * SIDE)) / (axes.length - 1); }
    function yOf(t) { return TOP + (1 - t) * (HEIGHT - TOP - BOTTOM); }
    function tOf(y) { return Math.min(1, Math.max(0, 1 - (y - TOP) / (HEIGHT - TOP - BOTTOM))); }

    function filter() {
      const started = performance.now();
      const active = axes.map((axis, a) => [a, brushes.get(axis.name)]).filter(([, b]) => b);
      const n = axes.length;
      let shown = 0;
      for (let i = 0; i < trials.length; i++) {
        let inside = 1;
        for (const [a, [lo, hi]] of active) {
          const t = norm[i * n + a];
          if (!(t >= lo - 1e-6 && t <= hi + 1e-6)) { inside = 0; break; }
        }
        mask[i] = inside;
        shown += inside;
      }
      onFilter(mask, shown);
      draw();
      root.dataset.filterMs = String(performance.now() - started);
      note.textContent = `${shown} of ${trials.length} trials inside every range.`;
    }

    function path(ctx, i) {
      const n = axes.length;
      let pen = false;
      for (let a = 0; a < n; a++) {
        const t = norm[i * n + a];
        if (Number.isNaN(t)) { pen = false; continue; }
        const x = xOf(a), y = yOf(t);
        if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        pen = true;
      }
    }

    function draw() {
      const started = performance.now();
      const w = width(), ratio = window.devicePixelRatio || 1;
      if (canvas.width !== Math.round(w * ratio)) {
        canvas.width = Math.round(w * ratio);
        canvas.height = Math.round(HEIGHT * ratio);
        canvas.style.width = w + "px";
        canvas.style.height = HEIGHT + "px";
      }
      const ctx = canvas.getContext("2d");
      ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
      ctx.clearRect(0, 0, w, HEIGHT);
      const fg = css("--fg", "#1a1d21"), muted = css("--line", "#d3d8de"), accent = css("--accent", "#0a58b5");
      const all = brushes.size === 0;
      ctx.lineWidth = 1;
      if (!all) {
        ctx.strokeStyle = muted;
        ctx.globalAlpha = 0.6;
        ctx.beginPath();
        for (let i = 0; i < trials.length; i++) if (!mask[i]) path(ctx, i);
        ctx.stroke();
      }
      ctx.strokeStyle = accent;
      ctx.globalAlpha = trials.length > 200 ? 0.35 : 0.8;
      ctx.beginPath();
      for (let i = 0; i < trials.length; i++) if (mask[i]) path(ctx, i);
      ctx.stroke();
      ctx.globalAlpha = 1;
      ctx.font = "12px system-ui, sans-serif";
      ctx.textAlign = "center";
      axes.forEach((axis, a) => {
        const x = xOf(a);
        ctx.strokeStyle = fg;
        ctx.beginPath();
        ctx.moveTo(x, yOf(1));
        ctx.lineTo(x, yOf(0));
        ctx.stroke();
        ctx.fillStyle = fg;
        ctx.fillText(axis.name + (axis.kind === "log" ? " (log)" : ""), x, 14);
        for (const [t, label] of scales[a].ticks) ctx.fillText(String(label), x, yOf(t) + (t === 0 ? 14 : t === 1 ? -4 : 4));
        const b = brushes.get(axis.name);
        if (b) {
          ctx.globalAlpha = 0.25;
          ctx.fillStyle = accent;
          ctx.fillRect(x - 7, yOf(b[1]), 14, Math.max(2, yOf(b[0]) - yOf(b[1])));
          ctx.globalAlpha = 1;
          ctx.strokeStyle = accent;
          ctx.strokeRect(x - 7, yOf(b[1]), 14, Math.max(2, yOf(b[0]) - yOf(b[1])));
        }
      });
      root.dataset.drawMs = String(performance.now() - started);
      root.dataset.drawn = String(Number(root.dataset.drawn || 0) + 1);
    }

    // The inputs show a brush in the axis's own values; typing there sets the brush.
    function showBrush(axis, a) {
      const [from, to] = inputs.get(axis.name);
      const b = brushes.get(axis.name);
      if (axis.kind === "choice") {
        from.value = b ? scales[a].value(b[0]) : "";
        to.value = b ? scales[a].value(b[1]) : "";
      } else {
        from.value = b ? fmt(scales[a].value(b[0])) : "";
        to.value = b ? fmt(scales[a].value(b[1])) : "";
      }
    }

    function fromInputs(axis, a) {
      const [from, to] = inputs.get(axis.name);
      if (from.value === "" && to.value === "") { brushes.delete(axis.name); filter(); return; }
      const s = scales[a];
      const place = (input, end) => {
        if (input.value === "") return end;
        const t = s.norm(axis.kind === "choice" ? input.value : Number(input.value));
        return t === null ? end : Math.min(1, Math.max(0, t));
      };
      const lo = place(from, 0), hi = place(to, 1);
      brushes.set(axis.name, [Math.min(lo, hi), Math.max(lo, hi)]);
      filter();
    }

    function buildInputs() {
      const kept = new Set(axes.map((x) => x.name));
      for (const name of inputs.keys()) if (!kept.has(name)) { inputs.get(name)[0].closest(".brush").remove(); inputs.delete(name); }
      axes.forEach((axis, a) => {
        if (inputs.has(axis.name)) {
          if (axis.kind === "choice") for (const sel of inputs.get(axis.name)) fillChoices(sel, scales[a].values);
          return;
        }
        const row = document.createElement("div");
        row.className = "brush";
        const controls = ["from", "to"].map((end) => {
          const label = document.createElement("label");
          let input;
          if (axis.kind === "choice") {
            input = document.createElement("select");
            fillChoices(input, scales[a].values);
          } else {
            input = document.createElement("input");
            input.type = "number";
            input.step = "any";
            input.inputMode = "decimal";
          }
          input.name = "brush-" + axis.name + "-" + end;
          input.id = "brush-" + (++ids) + "-" + end;
          label.htmlFor = input.id;
          label.textContent = `${axis.name} ${end}`;
          const cell = document.createElement("span");
          cell.append(label, input);
          row.append(cell);
          input.addEventListener("change", () => { // by name: a live update brings new axis objects
            const now = axes.findIndex((x) => x.name === axis.name);
            if (now >= 0) fromInputs(axes[now], now);
          });
          return input;
        });
        inputs.set(axis.name, controls);
        form.insertBefore(row, clear.parentNode === form ? clear : null);
      });
      if (clear.parentNode !== form) form.append(clear);
    }

    function fillChoices(select, values) {
      const now = select.value;
      select.replaceChildren(new Option("any", ""), ...values.map((v) => new Option(v, v)));
      select.value = values.indexOf(now) >= 0 ? now : "";
    }

    clear.addEventListener("click", () => {
      brushes.clear();
      axes.forEach(showBrush);
      filter();
    });

    function axisAt(x) {
      for (let a = 0; a < axes.length; a++) if (Math.abs(x - xOf(a)) <= GRAB) return a;
      return -1;
    }

    canvas.addEventListener("pointerdown", (e) => {
      const a = axisAt(e.offsetX);
      if (a < 0) return;
      drag = { a, from: tOf(e.offsetY), moved: false };
      canvas.setPointerCapture(e.pointerId);
    });
    canvas.addEventListener("pointermove", (e) => {
      if (!drag) return;
      const to = tOf(e.offsetY);
      if (Math.abs(to - drag.from) < 0.01 && !drag.moved) return;
      drag.moved = true;
      brushes.set(axes[drag.a].name, [Math.min(drag.from, to), Math.max(drag.from, to)]);
      filter();
    });
    canvas.addEventListener("pointerup", () => {
      if (!drag) return;
      const axis = axes[drag.a];
      if (!drag.moved) brushes.delete(axis.name); // a click on an axis clears its range
      showBrush(axis, drag.a);
      drag = null;
      filter();
    });

    new ResizeObserver(() => { observed = root.clientWidth; if (axes.length) draw(); }).observe(root);

    return {
      // axes: {name, kind: linear|log|choice, values?, low?, high?}; rows: each trial's values, one per axis.
      setData(newAxes, rows) {
        const started = performance.now();
        axes = newAxes;
        trials = rows;
        scales = axes.map((axis, a) => scale(axis, rows.map((r) => r[a])));
        norm = new Float32Array(rows.length * axes.length);
        rows.forEach((r, i) => axes.forEach((_, a) => {
          const t = scales[a].norm(r[a]);
          norm[i * axes.length + a] = t === null ? NaN : t;
        }));
        mask = new Uint8Array(rows.length).fill(1);
        for (const name of brushes.keys()) if (!axes.some((x) => x.name === name)) brushes.delete(name);
        canvas.setAttribute("aria-label", `Parallel coordinates of ${rows.length} trials over ${axes.map((x) => x.name).join(", ")}; the ranges below filter the rung table`);
        buildInputs();
        axes.forEach(showBrush);
        filter();
        root.dataset.setMs = String(performance.now() - started); // scales, inputs, filter, table and draw
      },
      brushes,
    };
  }
  return ParCoords;
})();
