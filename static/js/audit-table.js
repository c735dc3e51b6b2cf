// The audit table's keyboard: j/k select the next/previous row, Enter opens it, and the
// review queue's verdict keys (c confirm, f false positive, u unsure) record a verdict on
// it by clicking the row's own button (htmx posts it to the same verdict endpoint).
// Keys are ignored while typing in a field; Esc leaves the field.
(function () {
  "use strict";

  var SELECTED = "is-selected";

  function typing(el) {
    if (!el || el === document.body) return false;
    if (el.isContentEditable) return true;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
  }

  function rows() {
    var body = document.getElementById("audit-table-rows");
    return body ? Array.prototype.slice.call(body.querySelectorAll("tr.audit-row")) : [];
  }

  function selected(all) {
    for (var i = 0; i < all.length; i++) {
      if (all[i].classList.contains(SELECTED)) return i;
    }
    return -1;
  }

  function select(all, index) {
    var current = selected(all);
    if (current >= 0) {
      all[current].classList.remove(SELECTED);
      all[current].removeAttribute("aria-selected");
    }
    var row = all[index];
    row.classList.add(SELECTED);
    row.setAttribute("aria-selected", "true");
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    var all = rows();
    if (!all.length) return;
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    var key = event.key || "";
    var index = selected(all);
    if (key === "j" || key === "k") {
      event.preventDefault();
      var next = index < 0 ? 0 : index + (key === "j" ? 1 : -1);
      select(all, Math.max(0, Math.min(all.length - 1, next)));
      return;
    }
    if (index < 0) return;
    var row = all[index];
    if (key === "Enter") {
      // Enter on a focused link or button keeps its own meaning.
      if (event.target !== row && event.target !== document.body) return;
      event.preventDefault();
      window.location.assign(row.getAttribute("data-href"));
      return;
    }
    var button = row.querySelector('[data-verdict-key="' + CSS.escape(key.toLowerCase()) + '"]');
    if (!button || button.disabled) return;
    event.preventDefault();
    // Wire freshly loaded rows now, so the key never falls through to a full-page post.
    if (window.htmx) window.htmx.process(row);
    button.click();
  });

  // The view switch carries the current filters: htmx may have changed the URL since the
  // page was rendered.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form || form.id !== "view-switch") return;
    var query = form.querySelector('input[name="query"]');
    if (query) query.value = window.location.search.replace(/^\?/, "");
  });

  // A click on a row selects it (the next key acts on it).
  document.addEventListener("click", function (event) {
    var row = event.target.closest ? event.target.closest("tr.audit-row") : null;
    if (!row) return;
    var all = rows();
    var index = all.indexOf(row);
    if (index >= 0 && selected(all) !== index) select(all, index);
  });
})();
