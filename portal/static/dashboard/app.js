/* Berth dashboard: draws the charts from JSON the server rendered into the page,
   asks before destructive actions, copies secrets. Every page works without it;
   live fragments are htmx's job (hx-get / hx-trigger attributes in the templates). */
(function () {
  "use strict";

  var PALETTE = ["#2456d6", "#0f9d58", "#d97706", "#6a45cf", "#c62828", "#0e7490"];

  function readJson(id) {
    var el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  function shortDate(iso) {
    var d = new Date(iso + "T00:00:00Z");
    return d.toLocaleDateString(undefined, { month: "short", day: "numeric", timeZone: "UTC" });
  }

  function baseOptions(yTitle) {
    return {
      responsive: true,
      maintainAspectRatio: false,
      animation: false,
      interaction: { mode: "index", intersect: false },
      plugins: { legend: { position: "bottom", labels: { boxWidth: 12, boxHeight: 12 } } },
      scales: {
        x: { grid: { display: false }, ticks: { maxRotation: 0, autoSkipPadding: 12 } },
        y: { beginAtZero: true, title: { display: true, text: yTitle }, grid: { color: "#eef1f5" } },
      },
    };
  }

  function usageChart(canvas, data) {
    var options = baseOptions("GPU-hours");
    options.scales.x.stacked = true;
    options.scales.y.stacked = true;
    return new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: data.labels.map(shortDate),
        datasets: data.series.map(function (s, i) {
          return {
            label: s.label,
            data: s.data,
            backgroundColor: PALETTE[i % PALETTE.length],
            borderRadius: 3,
            maxBarThickness: 22,
          };
        }),
      },
      options: options,
    });
  }

  function waitChart(canvas, data) {
    return new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: data.labels.map(function (w) { return "wk of " + shortDate(w); }),
        datasets: [
          { type: "bar", label: "median", data: data.median_min, backgroundColor: "#2456d6", borderRadius: 3, maxBarThickness: 34, order: 2 },
          { type: "line", label: "p90", data: data.p90_min, borderColor: "#d97706", backgroundColor: "#d97706", pointRadius: 3, tension: 0, order: 1 },
        ],
      },
      options: baseOptions("minutes from submit to start"),
    });
  }

  var BUILDERS = { usage: usageChart, waits: waitChart };

  function initCharts(root) {
    if (typeof window.Chart === "undefined") return;
    window.Chart.defaults.font.family = getComputedStyle(document.body).fontFamily;
    window.Chart.defaults.color = "#556070";
    root.querySelectorAll("canvas[data-chart]").forEach(function (canvas) {
      var build = BUILDERS[canvas.dataset.chart];
      var data = readJson(canvas.dataset.source);
      if (!build || !data || canvas.dataset.ready) return;
      build(canvas, data);
      canvas.dataset.ready = "1";
      // The data table is open for readers without JavaScript; with a chart, fold it.
      var card = canvas.closest(".card");
      var table = card && card.querySelector("details.data");
      if (table) table.open = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () { initCharts(document); });

  // <time data-local datetime="…Z">10:06 UTC</time>: the reader's local clock; UTC stays in the title.
  function localTimes(root) {
    root.querySelectorAll("time[data-local]").forEach(function (el) {
      var d = new Date(el.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      var clock = { hour: "2-digit", minute: "2-digit" };
      var today = d.toDateString() === new Date().toDateString();
      el.textContent = today ? d.toLocaleTimeString([], clock)
        : d.toLocaleString([], Object.assign({ month: "short", day: "numeric" }, clock));
      el.removeAttribute("data-local");
    });
  }

  document.addEventListener("DOMContentLoaded", function () { localTimes(document); });
  document.addEventListener("htmx:load", function (event) { localTimes(event.detail.elt); });

  // A live fragment swap keeps what the reader opened: <details id=…> stay open.
  var openDetails = [];
  document.addEventListener("htmx:beforeSwap", function () {
    openDetails = Array.prototype.map.call(
      document.querySelectorAll("#live details[open][id]"), function (d) { return d.id; });
  });
  document.addEventListener("htmx:afterSettle", function () {
    openDetails.forEach(function (id) {
      var d = document.getElementById(id);
      if (d) d.open = true;
    });
  });

  // <form data-confirm="Cancel job #12?"> asks first.
  document.addEventListener("submit", function (event) {
    var message = event.target.dataset && event.target.dataset.confirm;
    if (message && !window.confirm(message)) event.preventDefault();
  }, true);

  // <button data-copy="element-id"> copies that element's text.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button || !navigator.clipboard) return;
    var source = document.getElementById(button.dataset.copy);
    navigator.clipboard.writeText(source.textContent.trim()).then(function () {
      button.textContent = "Copied";
    });
  });
})();
