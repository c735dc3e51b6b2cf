// Charts of the trends and tuning pages. Data comes from <script type="application/json">
// blocks rendered by Django's json_script (never inline code); canvases name their chart in
// data-chart. Redrawn after htmx swaps and when the theme changes.
(function () {
  "use strict";

  var charts = [];

  function css(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }

  // The json_script blocks sit inside <template data-json-for=id>: htmx (allowScriptTags:
  // false) strips <script> elements from swapped fragments, but not a template's content.
  function readJSON(id) {
    var tpl = document.querySelector('template[data-json-for="' + id + '"]');
    var el = tpl ? tpl.content.getElementById(id) : document.getElementById(id);
    if (!el) return null;
    try {
      return JSON.parse(el.textContent);
    } catch (e) {
      return null;
    }
  }

  // Vertical lines at fractions of a 0..1 category axis (the histogram bins span it evenly).
  var thresholdLines = {
    id: "thresholdLines",
    afterDatasetsDraw: function (chart, _args, opts) {
      var lines = (opts && opts.lines) || [];
      var area = chart.chartArea;
      var ctx = chart.ctx;
      lines.forEach(function (line) {
        if (typeof line.value !== "number") return;
        var x = area.left + line.value * (area.right - area.left);
        ctx.save();
        ctx.strokeStyle = line.color;
        ctx.lineWidth = 2;
        ctx.setLineDash(line.dash || []);
        ctx.beginPath();
        ctx.moveTo(x, area.top);
        ctx.lineTo(x, area.bottom);
        ctx.stroke();
        ctx.setLineDash([]);
        ctx.fillStyle = line.color;
        ctx.font = "12px system-ui, sans-serif";
        ctx.textAlign = line.value > 0.8 ? "right" : "left";
        ctx.fillText(line.label, x + (line.value > 0.8 ? -4 : 4), area.top + 12 + (line.offset || 0));
        ctx.restore();
      });
    },
  };

  function baseOptions() {
    var text = css("--muted");
    var grid = css("--border");
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      plugins: {
        legend: { labels: { color: text, boxWidth: 12 } },
        tooltip: { mode: "index", intersect: false },
      },
      scales: {
        x: { ticks: { color: text, maxRotation: 0, autoSkip: true }, grid: { color: grid } },
        y: { beginAtZero: true, ticks: { color: text, precision: 0 }, grid: { color: grid } },
      },
    };
  }

  function merge(target, extra) {
    Object.keys(extra).forEach(function (key) {
      var value = extra[key];
      if (value && typeof value === "object" && !Array.isArray(value) && target[key]) {
        merge(target[key], value);
      } else {
        target[key] = value;
      }
    });
    return target;
  }

  function draw(canvas, config) {
    charts.push(new window.Chart(canvas, config));
  }

  function shortDay(iso) {
    return iso.slice(5); // MM-DD
  }

  function trendCharts(data) {
    var accent = css("--accent");
    var critical = css("--critical");
    var warning = css("--warning");
    var info = css("--info");
    var ok = css("--ok");
    var muted = css("--muted");
    document.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var kind = canvas.getAttribute("data-chart");
      if (kind === "per-day") {
        draw(canvas, {
          type: "bar",
          data: {
            // Hourly labels (YYYY-MM-DDTHH:MM) when the audits span a day or two.
            labels: data.per_day.labels.map(function (label) {
              return data.per_day.bucket === "hour" ? label.slice(5).replace("T", " ") : shortDay(label);
            }),
            datasets: [
              { label: "with a card", data: data.per_day.cards, backgroundColor: critical, stack: "s" },
              {
                label: "without",
                data: data.per_day.total.map(function (t, i) { return t - data.per_day.cards[i]; }),
                backgroundColor: accent,
                stack: "s",
              },
            ],
          },
          options: merge(baseOptions(), { scales: { x: { stacked: true }, y: { stacked: true } } }),
        });
      } else if (kind === "histogram") {
        // The highest score per audit, stacked by outcome (card or not), against the
        // global threshold (dashed) and any analyzer's own threshold (dotted).
        var cards = data.histogram.cards || data.histogram.counts.map(function () { return 0; });
        var lines = [{ value: data.threshold, color: css("--text"), dash: [6, 4], label: "threshold " + data.threshold.toFixed(2) }];
        Object.keys(data.own_thresholds || {}).forEach(function (name, i) {
          var value = data.own_thresholds[name];
          lines.push({ value: value, color: css("--muted"), dash: [2, 3], label: name + " " + value.toFixed(2), offset: 14 * (i + 1) });
        });
        draw(canvas, {
          type: "bar",
          data: {
            labels: data.histogram.labels,
            datasets: [
              { label: "with a card", data: cards, backgroundColor: critical, stack: "h",
                barPercentage: 1, categoryPercentage: 0.95 },
              { label: "no card", stack: "h", backgroundColor: accent,
                data: data.histogram.counts.map(function (n, i) { return n - cards[i]; }),
                barPercentage: 1, categoryPercentage: 0.95 },
            ],
          },
          options: merge(baseOptions(), {
            scales: { x: { stacked: true }, y: { stacked: true } },
            plugins: { thresholdLines: { lines: lines } },
          }),
          plugins: [thresholdLines],
        });
      } else if (kind === "types") {
        draw(canvas, {
          type: "bar",
          data: {
            labels: data.top_types.map(function (t) { return t.type; }),
            datasets: [
              { label: "✖ critical", data: data.top_types.map(function (t) { return t.critical; }), backgroundColor: critical, stack: "s" },
              { label: "▲ warning", data: data.top_types.map(function (t) { return t.warning; }), backgroundColor: warning, stack: "s" },
              { label: "ℹ info", data: data.top_types.map(function (t) { return t.info; }), backgroundColor: info, stack: "s" },
            ],
          },
          options: merge(baseOptions(), { indexAxis: "y", scales: { x: { stacked: true }, y: { stacked: true, ticks: { autoSkip: false } } } }),
        });
      } else if (kind === "surfaced") {
        draw(canvas, {
          type: "bar",
          data: {
            labels: data.analyzers.map(function (a) { return a.analyzer_id; }),
            datasets: [{ label: "% surfaced", data: data.analyzers.map(function (a) { return a.surfaced_pct; }), backgroundColor: accent }],
          },
          options: merge(baseOptions(), { plugins: { legend: { display: false } }, scales: { y: { max: 100, ticks: { precision: undefined } } } }),
        });
      } else if (kind === "failures") {
        draw(canvas, {
          type: "bar",
          data: {
            labels: data.analyzers.map(function (a) { return a.analyzer_id; }),
            datasets: [
              { label: "✖ failed", data: data.analyzers.map(function (a) { return a.failed; }), backgroundColor: critical, stack: "s" },
              { label: "◷ timed out", data: data.analyzers.map(function (a) { return a.timeout; }), backgroundColor: warning, stack: "s" },
            ],
          },
          options: merge(baseOptions(), { scales: { x: { stacked: true }, y: { stacked: true } } }),
        });
      } else if (kind === "precision" && data.quality) {
        precisionChart(canvas, data.quality);
      } else if (kind === "latency") {
        draw(canvas, {
          type: "bar",
          data: {
            labels: data.analyzers.map(function (a) { return a.analyzer_id; }),
            datasets: [
              { label: "mean ms", data: data.analyzers.map(function (a) { return a.avg_ms; }), backgroundColor: ok },
              { label: "max ms", data: data.analyzers.map(function (a) { return a.max_ms; }), backgroundColor: muted },
            ],
          },
          options: merge(baseOptions(), { scales: { y: { ticks: { precision: undefined } } } }),
        });
      }
    });
  }

  // Precision (%) per day or week: one line for all analyzers, one per analyzer; gaps where
  // nothing was decided; the tooltip gives n, the number of decided findings behind a point.
  function precisionChart(canvas, quality) {
    var palette = [css("--text"), css("--accent"), css("--critical"), css("--warning"), css("--ok"), css("--info"), css("--muted")];
    draw(canvas, {
      type: "line",
      data: {
        labels: quality.labels.map(shortDay),
        datasets: quality.series.map(function (s, i) {
          return {
            label: s.label,
            data: s.precision,
            n: s.n,
            borderColor: palette[i % palette.length],
            backgroundColor: palette[i % palette.length],
            borderWidth: i === 0 ? 3 : 1.5,
            pointRadius: 3,
            spanGaps: true,
          };
        }),
      },
      options: merge(baseOptions(), {
        plugins: {
          tooltip: {
            callbacks: {
              label: function (ctx) {
                var n = ctx.dataset.n[ctx.dataIndex];
                return ctx.dataset.label + ": " + ctx.parsed.y + "% (n = " + n + ")";
              },
            },
          },
        },
        scales: { y: { max: 100, ticks: { precision: undefined, callback: function (v) { return v + "%"; } } } },
      }),
    });
  }

  // Tuning evidence: reviewed false positives hidden and confirmed findings lost at each
  // candidate threshold, on a linear 0..1 axis so the threshold line sits where it should.
  function evidenceChart(data) {
    var canvas = document.querySelector('canvas[data-chart="evidence"]');
    if (!canvas) return;
    // Shares of each total, so the two lines compare; the tooltip gives the counts.
    function points(values, total) {
      return data.thresholds.map(function (t, i) {
        return { x: t, y: total ? Math.round(1000 * values[i] / total) / 10 : 0, n: values[i] };
      });
    }
    var chart = new window.Chart(canvas, {
      type: "line",
      data: {
        datasets: [
          { label: "false positives hidden (of " + data.fp_total + ")", data: points(data.fp_hidden, data.fp_total), total: data.fp_total, borderColor: css("--ok"), backgroundColor: css("--ok"), stepped: true, pointRadius: 2 },
          { label: "confirmed lost (of " + data.confirmed_total + ")", data: points(data.confirmed_lost, data.confirmed_total), total: data.confirmed_total, borderColor: css("--critical"), backgroundColor: css("--critical"), stepped: true, pointRadius: 2 },
        ],
      },
      options: merge(baseOptions(), {
        scales: {
          x: { type: "linear", min: 0, max: 1, ticks: { stepSize: 0.1 } },
          y: { max: 100, ticks: { precision: undefined, callback: function (v) { return v + "%"; } } },
        },
        plugins: {
          tooltip: {
            mode: "nearest",
            intersect: false,
            callbacks: {
              title: function (items) { return items.length ? "at " + items[0].parsed.x.toFixed(2) : ""; },
              label: function (ctx) {
                return ctx.dataset.label.replace(/ \(of \d+\)$/, "") + ": " + ctx.raw.n + " of " + ctx.dataset.total + " (" + ctx.parsed.y + "%)";
              },
            },
          },
          thresholdLines: { lines: [{ value: data.selected, color: css("--text"), dash: [], label: data.selected.toFixed(2) }] },
        },
      }),
      plugins: [thresholdLines],
    });
    chart.$setThreshold = function (t) {
      var line = chart.options.plugins.thresholdLines.lines[0];
      line.value = t;
      line.label = t.toFixed(2);
      chart.update("none");
    };
    charts.push(chart);
  }

  // The evidence table scrolls; keep the selected threshold's row in view.
  function showSelectedRow() {
    var row = document.querySelector("#evidence-table tr.selected");
    var wrap = row && row.closest(".evidence-table-wrap");
    if (!wrap) return;
    var offset = row.getBoundingClientRect().top - wrap.getBoundingClientRect().top;
    wrap.scrollTop = Math.max(0, wrap.scrollTop + offset - wrap.clientHeight / 2);
  }

  function tuningChart(data) {
    var canvas = document.querySelector('canvas[data-chart="tuning"]');
    if (!canvas) return;
    var accent = css("--accent");
    var critical = css("--critical");
    var slider = document.getElementById("threshold-slider");
    var current = slider ? parseFloat(slider.value) : data.threshold;
    function colours(t) {
      return data.labels.map(function (l) { return parseFloat(l) + 0.025 >= t ? critical : accent; });
    }
    var chart = new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: data.labels,
        datasets: [{ label: "audits", data: data.counts, backgroundColor: colours(current), barPercentage: 1, categoryPercentage: 0.95 }],
      },
      options: merge(baseOptions(), {
        plugins: {
          legend: { display: false },
          thresholdLines: {
            lines: [
              { value: data.current, color: css("--muted"), dash: [6, 4], label: "saved " + data.current.toFixed(2), offset: 16 },
              { value: current, color: css("--text"), dash: [], label: current.toFixed(2) },
            ],
          },
        },
      }),
      plugins: [thresholdLines],
    });
    chart.$setThreshold = function (t) {
      var lines = chart.options.plugins.thresholdLines.lines;
      lines[1].value = t;
      lines[1].label = t.toFixed(2);
      chart.data.datasets[0].backgroundColor = colours(t);
      chart.update("none");
    };
    charts.push(chart);
  }

  function render() {
    if (!window.Chart) return;
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    var trends = readJSON("trends-data");
    if (trends) trendCharts(trends);
    var tuning = readJSON("tuning-data");
    if (tuning) tuningChart(tuning);
    var evidence = readJSON("tuning-evidence-data");
    if (evidence) evidenceChart(evidence);
    showSelectedRow();
  }

  // The slider moves the line at once; the server's counts follow through htmx.
  document.addEventListener("input", function (event) {
    if (event.target.id !== "threshold-slider") return;
    var value = parseFloat(event.target.value);
    charts.forEach(function (c) { if (c.$setThreshold) c.$setThreshold(value); });
  });

  document.addEventListener("DOMContentLoaded", render);
  document.addEventListener("htmx:afterSettle", render);
  document.addEventListener("auditor:themechange", render);
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", render);
  }
})();
