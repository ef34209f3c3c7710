// lowkiq dashboard charts: every [data-rate-chart] box is drawn with uPlot from the JSON in the
// data-series attribute of the element it names (lowkiq_web/rates.py writes it). Drawn again
// with the new JSON after an htmx swap (the box itself is kept, hx-preserve), when the box is
// resized and when the colour scheme changes. A static file: no inline script (CSP-safe).
(function () {
  "use strict";
  if (typeof uPlot === "undefined") return;

  var FULL = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}");

  function utc(seconds) {
    return uPlot.tzDate(new Date(seconds * 1e3), "Etc/UTC");
  }

  function color(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // As lowkiq_web.formatting.rate: "0", "0.25", "12.5", "1,234".
  function rate(value) {
    if (value == null) return "–";
    if (value === 0) return "0";
    if (value < 10) return value.toFixed(2);
    if (value < 100) return value.toFixed(1);
    return Math.round(value).toLocaleString("en");
  }

  // Axis ticks: "500", "1.5K", "2M".
  function short(value) {
    var units = [[1e9, "B"], [1e6, "M"], [1e3, "K"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(value) >= units[i][0]) return +(value / units[i][0]).toFixed(1) + units[i][1];
    }
    return String(+value.toFixed(2));
  }

  // Time axis ticks in UTC, as precise as their spacing needs.
  function timeTicks(plot, splits, axis, space, increment) {
    var format = uPlot.fmtDate(
      increment < 60 ? "{HH}:{mm}:{ss}" : increment < 3600 ? "{HH}:{mm}" : "{MM}-{DD} {HH}:{mm}"
    );
    return splits.map(function (seconds) { return format(utc(seconds)); });
  }

  function read(box) {
    var source = document.getElementById(box.dataset.rateChart);
    return source ? JSON.parse(source.dataset.series) : null;
  }

  // Discarded jobs are drawn only on the charts whose data has them (History, Charts).
  function columns(data) {
    var result = [data.x, data.processed, data.failed];
    if (data.discarded) result.push(data.discarded);
    return result;
  }

  // The interval under the cursor, or the latest one when the cursor is elsewhere.
  function shownIndex(plot) {
    var idx = plot.cursor.idx;
    var last = plot.data[0].length - 2; // the final point repeats the last interval at its end
    if (idx == null || idx > last) return last >= 0 ? last : null;
    return idx;
  }

  // The interval under the cursor: the last one starting at or before it (uPlot's default,
  // the nearest point, would name the next interval past an interval's middle).
  function intervalAt(plot, series, closest, at) {
    var x = plot.data[0];
    var low = 0;
    var high = x.length - 2;
    if (high < 0) return closest;
    if (at <= x[0]) return 0;
    while (low < high) {
      var middle = (low + high + 1) >> 1;
      if (x[middle] <= at) low = middle;
      else high = middle - 1;
    }
    return low;
  }

  function intervalLabel(plot, idx) {
    var x = plot.data[0];
    if (idx == null || x[idx] == null) return "–";
    var text = FULL(utc(x[idx]));
    if (x[idx + 1] == null) return text + " UTC";
    var end = FULL(utc(x[idx + 1]));
    // The end's time of day, or its date too when the interval crosses midnight.
    return text + " – " + (end.slice(0, 10) === text.slice(0, 10) ? end.slice(11) : end) + " UTC";
  }

  function options(box, chart) {
    var line = color("--line");
    var muted = color("--muted");
    var ok = color("--ok");
    var bad = color("--bad");
    var steps = uPlot.paths.stepped({ align: 1 });
    var unit = function () { return chart.data.unit; };
    var axis = {
      stroke: muted,
      grid: { stroke: line, width: 1 },
      ticks: { stroke: line, width: 1 },
      font: "12px system-ui, sans-serif",
      labelFont: "12px system-ui, sans-serif",
    };
    var value = function (plot, v, series, idx) {
      var shown = plot.data[series][idx == null ? shownIndex(plot) : idx];
      return rate(shown) + " " + unit();
    };
    return {
      width: Math.max(box.clientWidth, 200),
      height: Number(box.dataset.height || 180),
      tzDate: utc,
      padding: [12, 48, 0, 0], // room for the last time tick's label
      cursor: {
        y: false,
        drag: { x: false, y: false, setScale: false },
        points: { size: 8 },
        dataIdx: intervalAt,
      },
      scales: {
        x: { time: true, range: function () { return [chart.data.start, chart.data.end]; } },
        y: { range: function (plot, min, max) { return [0, max > 0 ? max * 1.1 : 1]; } },
      },
      series: [
        {
          label: "interval",
          value: function (plot, v, series, idx) {
            return intervalLabel(plot, idx == null ? shownIndex(plot) : idx);
          },
        },
        {
          label: "processed",
          stroke: ok,
          fill: ok + "26",
          width: 2,
          paths: steps,
          points: { show: false },
          value: value,
        },
        {
          label: "failed",
          stroke: bad,
          width: 2,
          dash: [6, 4],
          paths: steps,
          // Markers where something failed, so the series reads without colour too.
          points: {
            show: true,
            size: 7,
            width: 2,
            stroke: bad,
            fill: color("--panel"),
            filter: function (plot, series) {
              var ys = plot.data[series];
              var shown = [];
              for (var i = 0; i < ys.length - 1; i++) if (ys[i] > 0) shown.push(i);
              return shown;
            },
          },
          value: value,
        },
      ].concat(
        chart.data.discarded
          ? [
              {
                label: "discarded",
                stroke: muted,
                width: 2,
                dash: [2, 3],
                paths: steps,
                points: { show: false },
                value: value,
              },
            ]
          : []
      ),
      axes: [
        Object.assign({ label: "time (UTC)", labelSize: 18, size: 34, space: 80, values: timeTicks }, axis),
        Object.assign(
          {
            label: unit(),
            labelSize: 20,
            size: 56,
            values: function (plot, splits) { return splits.map(short); },
          },
          axis
        ),
      ],
      legend: {
        markers: {
          dash: function (plot, series) {
            var dash = plot.series[series].dash;
            return !dash ? "solid" : dash[0] < 4 ? "dotted" : "dashed";
          },
        },
      },
      hooks: {
        // The legend shows the latest interval until the cursor points at another.
        setCursor: [function (plot) { if (plot.cursor.idx == null) plot.setLegend({ idx: shownIndex(plot) }); }],
      },
    };
  }

  function draw(box) {
    var data = read(box);
    if (!data) return;
    var chart = box.lowkiqChart;
    if (chart) {
      chart.data = data;
      chart.plot.setData(columns(data));
      chart.plot.setLegend({ idx: shownIndex(chart.plot) });
      return;
    }
    chart = { data: data, plot: null };
    box.lowkiqChart = chart;
    box.textContent = "";
    chart.plot = new uPlot(options(box, chart), columns(data), box);
    chart.plot.setLegend({ idx: shownIndex(chart.plot) });
    if (typeof ResizeObserver !== "undefined") {
      new ResizeObserver(function () {
        var width = Math.max(box.clientWidth, 200);
        if (chart.plot && width !== chart.plot.width) {
          chart.plot.setSize({ width: width, height: chart.plot.height });
        }
      }).observe(box);
    }
  }

  function drawAll() {
    document.querySelectorAll("[data-rate-chart]").forEach(draw);
  }

  // A new colour scheme: build every chart again with the new colours.
  function redrawAll() {
    document.querySelectorAll("[data-rate-chart]").forEach(function (box) {
      var chart = box.lowkiqChart;
      if (!chart) return;
      chart.plot.destroy();
      chart.plot = new uPlot(options(box, chart), columns(chart.data), box);
      chart.plot.setLegend({ idx: shownIndex(chart.plot) });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", drawAll);
  } else {
    drawAll();
  }
  document.addEventListener("htmx:afterSettle", drawAll);
  var scheme = window.matchMedia("(prefers-color-scheme: dark)");
  if (scheme.addEventListener) scheme.addEventListener("change", redrawAll);
})();
