// Live updates for pages that show something running: the page marks its <main id="live">
// with data-refresh-ms; this script fetches the same URL at that interval (one request per
// interval per open page) and swaps the region in. A page without the mark (the job settled)
// stops the polling. Clocks marked data-since tick every second between refreshes. Nothing
// here builds HTML from data: the server renders and escapes, the DOM parser only parses.
"use strict";
(function () {
  var timer = null;
  var skew = 0; // server clock minus this browser's clock, from the page's data-as-of

  function region() { return document.getElementById("live"); }

  function formatDuration(ms) {
    var s = Math.max(ms, 0) / 1000;
    if (s < 1) return Math.round(s * 1000) + "ms";
    if (s < 60) return s.toFixed(2) + "s";
    var m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (d) return d + "d" + (h % 24 ? two(h % 24) + "h" : "");
    if (h) return h + "h" + (m % 60 ? two(m % 60) + "m" : "");
    return m + "m" + (Math.floor(s) % 60 ? two(Math.floor(s) % 60) + "s" : "");
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
      el.textContent = el.classList.contains("silent") && el.closest(".lane-final, .steps")
        ? "silent for " + text : text;
    });
  }

  function schedule() {
    var live = region();
    var every = live ? parseInt(live.getAttribute("data-refresh-ms") || "", 10) : NaN;
    if (timer !== null) clearTimeout(timer);
    timer = isNaN(every) || every <= 0 ? null : setTimeout(refresh, every);
  }

  function refresh() {
    timer = null;
    fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        var next = fresh.getElementById("live");
        var current = region();
        if (!next || !current) throw new Error("no live region");
        current.replaceWith(document.importNode(next, true));
        document.title = fresh.title;
        readSkew();
        tick();
        schedule();
      })
      .catch(function () {
        var live = region();
        var note = live && live.querySelector(".offline");
        if (note) note.hidden = false;
        schedule(); // keep the old region and its interval: retry
      });
  }

  document.addEventListener("DOMContentLoaded", function () {
    readSkew();
    schedule();
    setInterval(tick, 1000);
  });
})();
