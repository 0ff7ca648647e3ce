// Live updates and in-page selection. A page that shows something running marks its
// <main id="live"> with data-refresh-ms; this script fetches the same URL at that interval and
// swaps the region in (a page without the mark stops the polling). Choosing a step row puts
// its selection in the URL (?attempt=N&step=K) and swaps the region the same way, so a reload
// or a shared link shows the same step. Clocks (data-since) tick every second; times
// (time.when) read "3 min ago" or, after the header's toggle, the local time (kept in local
// storage). Nothing here builds HTML from data: the server renders and escapes, the DOM parser
// only parses.
"use strict";
(function () {
  var timer = null;
  var skew = 0; // server clock minus this browser's clock, from the page's data-as-of
  var latest = 0; // number of the newest fetch: an older answer arriving later is dropped
  var MODE_KEY = "otel-jobsteps.times";
  var UNITS = [["d", 86400], ["h", 3600], ["min", 60], ["s", 1]];

  function region() { return document.getElementById("live"); }

  function formatDuration(ms) {
    var s = Math.max(ms, 0) / 1000;
    if (s === 0) return "0s";
    if (s < 0.001) return Math.round(s * 1e6) + "µs";
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(2) + "s";
    var m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (d) return d + "d" + (h % 24 ? two(h % 24) + "h" : "");
    if (h) return h + "h" + (m % 60 ? two(m % 60) + "m" : "");
    return m + "m" + (Math.floor(s) % 60 ? two(Math.floor(s) % 60) + "s" : "");
  }

  function formatAgo(ms) {
    var whole = Math.abs(ms) / 1000;
    if (whole < 1) return "just now";
    for (var i = 0; i < UNITS.length; i++) {
      if (whole >= UNITS[i][1]) {
        var count = Math.floor(whole / UNITS[i][1]) + " " + UNITS[i][0];
        return ms > 0 ? count + " ago" : "in " + count;
      }
    }
    return "just now";
  }

  function mode() {
    try { return window.localStorage.getItem(MODE_KEY) === "local" ? "local" : "relative"; }
    catch (e) { return "relative"; }
  }

  function readSkew() {
    var asOf = region() && region().getAttribute("data-as-of");
    var at = asOf ? Date.parse(asOf) : NaN;
    skew = isNaN(at) ? 0 : at - Date.now();
  }

  function tick() {
    var now = Date.now() + skew;
    document.querySelectorAll("[data-since]").forEach(function (el) {
      var since = Date.parse(el.getAttribute("data-since"));
      if (isNaN(since)) return;
      var text = formatDuration(now - since);
      el.textContent = el.classList.contains("silent-for") ? "silent for " + text : text;
    });
    var local = mode() === "local";
    document.querySelectorAll("time.when").forEach(function (el) {
      var at = Date.parse(el.getAttribute("datetime"));
      if (isNaN(at)) return;
      el.textContent = local ? new Date(at).toLocaleString() : formatAgo(now - at);
    });
    var button = document.getElementById("time-mode");
    if (button) button.textContent = local ? "Times: local" : "Times: relative";
  }

  function schedule() {
    var live = region();
    var every = live ? parseInt(live.getAttribute("data-refresh-ms") || "", 10) : NaN;
    if (timer !== null) clearTimeout(timer);
    timer = isNaN(every) || every <= 0 ? null : setTimeout(refresh, every);
  }

  // The row the keyboard was on (attempt and step key), to give it the focus back after a swap.
  function focusedRow() {
    var row = document.activeElement && document.activeElement.closest(".row[data-step-key]");
    return row ? [row.getAttribute("data-attempt"), row.getAttribute("data-step-key")] : null;
  }

  function refocus(where) {
    if (!where) return;
    var rows = document.querySelectorAll(".row[data-step-key]");
    for (var i = 0; i < rows.length; i++) {
      var row = rows[i];
      if (row.getAttribute("data-attempt") === where[0]
          && row.getAttribute("data-step-key") === where[1]) {
        var link = row.querySelector("a");
        if (link) link.focus({ preventScroll: true });
        return;
      }
    }
  }

  function refresh() {
    timer = null;
    var number = ++latest;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        if (number !== latest) return;
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var next = fresh.getElementById("live");
        var current = region();
        if (!next || !current) throw new Error("no live region");
        var where = focusedRow();
        current.replaceWith(document.importNode(next, true));
        document.title = fresh.title;
        refocus(where);
        readSkew();
        tick();
        schedule();
      })
      .catch(function () {
        if (number !== latest) return;
        var live = region();
        var note = live && live.querySelector(".offline");
        if (note) note.hidden = false;
        schedule(); // keep the old region and its interval: retry
      });
  }

  function select(event) {
    var link = event.target.closest && event.target.closest("a.row-link, a.attempt-link");
    if (!link || event.defaultPrevented || event.button !== 0
        || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    window.history.pushState(null, "", link.href);
    refresh();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("time-mode");
    if (button) {
      button.hidden = false;
      button.addEventListener("click", function () {
        try { window.localStorage.setItem(MODE_KEY, mode() === "local" ? "relative" : "local"); }
        catch (e) { /* storage refused: the toggle stays relative */ }
        tick();
      });
    }
    document.addEventListener("click", select);
    window.addEventListener("popstate", refresh);
    readSkew();
    tick();
    schedule();
    setInterval(tick, 1000);
  });
})();
