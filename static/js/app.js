// Small behaviours of the dashboard. Event delegation on document, so fragments that
// htmx or a WebSocket swap in later behave the same without re-binding.
(function () {
  "use strict";

  // --- Light / dark toggle, remembered in localStorage ----------------------------------
  function effectiveTheme() {
    var forced = document.documentElement.dataset.theme;
    if (forced === "light" || forced === "dark") return forced;
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches
      ? "dark"
      : "light";
  }

  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-theme-toggle]");
    if (!toggle) return;
    var next = effectiveTheme() === "dark" ? "light" : "dark";
    document.documentElement.dataset.theme = next;
    try {
      window.localStorage.setItem("auditor-theme", next);
    } catch (e) {
      /* storage disabled: the choice lasts for this page only */
    }
    document.dispatchEvent(new CustomEvent("auditor:themechange", { detail: next }));
  });

  // --- Evidence highlights <-> annotations ------------------------------------------------
  // A highlight carries data-ann="id id ..." (every annotation whose evidence covers it);
  // an annotation carries data-ann-id="id".
  function annotationIds(el) {
    return (el.getAttribute("data-ann") || "").split(" ").filter(Boolean);
  }

  function setLinked(ids, on) {
    ids.forEach(function (id) {
      document.querySelectorAll('[data-ann-id="' + CSS.escape(id) + '"]').forEach(function (a) {
        a.classList.toggle("is-linked", on);
      });
      document.querySelectorAll("[data-ann]").forEach(function (mark) {
        if (annotationIds(mark).indexOf(id) !== -1) mark.classList.toggle("is-linked", on);
      });
    });
  }

  function linkTarget(target) {
    var mark = target.closest && target.closest("[data-ann]");
    if (mark) return annotationIds(mark);
    var ann = target.closest && target.closest("[data-ann-id]");
    if (ann) return [ann.getAttribute("data-ann-id")];
    return null;
  }

  ["mouseover", "focusin"].forEach(function (type) {
    document.addEventListener(type, function (event) {
      var ids = linkTarget(event.target);
      if (ids) setLinked(ids, true);
    });
  });
  ["mouseout", "focusout"].forEach(function (type) {
    document.addEventListener(type, function (event) {
      var ids = linkTarget(event.target);
      if (ids) setLinked(ids, false);
    });
  });

  // Clicking a highlight scrolls to (and opens) its first annotation; clicking an
  // annotation's "show in response" button scrolls to its first highlight.
  function reveal(el) {
    var details = el.closest("details");
    if (details && !details.open) details.open = true;
    el.scrollIntoView({ behavior: "smooth", block: "center" });
    el.classList.add("is-flash");
    window.setTimeout(function () {
      el.classList.remove("is-flash");
    }, 1200);
  }

  document.addEventListener("click", function (event) {
    var mark = event.target.closest("mark[data-ann]");
    if (mark) {
      var ids = annotationIds(mark);
      var ann = ids.length && document.querySelector('[data-ann-id="' + CSS.escape(ids[0]) + '"]');
      if (ann) reveal(ann);
      return;
    }
    var jump = event.target.closest("[data-jump-ann]");
    if (jump) {
      var id = jump.getAttribute("data-jump-ann");
      var marks = Array.prototype.filter.call(document.querySelectorAll("mark[data-ann]"), function (m) {
        return annotationIds(m).indexOf(id) !== -1;
      });
      if (marks.length) reveal(marks[0]);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" && event.key !== " ") return;
    var mark = event.target.closest && event.target.closest("mark[data-ann]");
    if (!mark) return;
    event.preventDefault();
    mark.click();
  });

  // --- A recorded verdict keeps keyboard focus in its form ------------------------------
  // The clicked button is disabled while the verdict is on its way, so focus falls to the
  // page body, and htmx then replaces the whole form: give focus to the new form's pressed
  // button (else its first control). Only for the form this page submitted (a Live update
  // swapped in by WebSocket has no request), and only when focus is lost.
  document.addEventListener("htmx:afterSwap", function (event) {
    var form = event.target;
    var request = event.detail && event.detail.requestConfig;
    if (!form.matches || !form.matches("form.verdict") || !request || !request.elt) return;
    if (request.elt.id !== form.id) return;
    var active = document.activeElement;
    if (active && active !== document.body && active.isConnected) return;
    var control = form.querySelector('button[aria-pressed="true"]') ||
      form.querySelector("button, summary, textarea");
    if (control) control.focus({ preventScroll: true });
  });

  // --- Threshold slider: mirror its value in the <output> next to it -------------------
  document.addEventListener("input", function (event) {
    var slider = event.target.closest("input[type=range][data-output]");
    if (!slider) return;
    var out = document.getElementById(slider.getAttribute("data-output"));
    if (out) out.textContent = Number(slider.value).toFixed(2);
  });

  // --- Relative times: <time data-relative> (the `when` tag) kept fresh ------------------
  // The same rule as audit_ui.relative on the server; the absolute time is the title.
  function relativeTime(iso, now) {
    var then = new Date(iso);
    var seconds = (now - then) / 1000;
    if (isNaN(seconds)) return null;
    if (seconds < 60) return "just now";
    if (seconds >= 86400) return then.toISOString().slice(0, 10);  // past a day: the date
    var units = [[3600, "hour"], [60, "minute"]];
    for (var i = 0; i < units.length; i++) {
      var size = units[i][0], unit = units[i][1];
      if (seconds >= size) {
        var n = Math.floor(seconds / size);
        return n + " " + unit + (n === 1 ? "" : "s") + " ago";
      }
    }
    return then.toISOString().slice(0, 10);
  }

  function refreshTimes() {
    var now = Date.now();
    document.querySelectorAll("time[data-relative]").forEach(function (el) {
      var text = relativeTime(el.getAttribute("datetime"), now);
      if (text && el.textContent !== text) el.textContent = text;
    });
  }
  window.setInterval(refreshTimes, 30000);
})();
