// What the console's uPlot charts share (charts.js, compare.js, sweeps.js): time axes in UTC, as every time the
// console prints (uPlot draws the browser's own zone unless told), and step axes ticked at whole steps only.
"use strict";
(function () {
  // uPlot's own increments go down to 0.1 (an axis 1 to 8 steps wide ticked at halves): 1, 2, 5, 10, 20, ...
  const STEP_INCRS = Array.from({ length: 36 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));
  const count = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
  window.lkAxes = {
    utc: (seconds) => uPlot.tzDate(new Date(seconds * 1e3), "Etc/UTC"),
    // The x axis's options for ``kind`` ("step" or "time"); ``figure.dataset.xTicks`` keeps a step axis's ticks.
    x(kind, figure, style) {
      if (kind !== "step") return style;
      return {
        ...style,
        incrs: STEP_INCRS,
        values: (plotted, splits) => {
          figure.dataset.xTicks = splits.join(" ");
          return splits.map((v) => (v == null ? "" : count.format(v)));
        },
      };
    },
  };
})();
