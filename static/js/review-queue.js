// Review queue keyboard shortcuts: c confirm, f false positive, u unsure, s or j skip.
// Each key clicks the button marked data-review-key, so htmx (or the plain form without
// it) does the work. Keys are ignored while typing in a field; Esc leaves the field.
(function () {
  "use strict";

  var ALIASES = { j: "s" };

  function typing(el) {
    if (!el || el === document.body) return false;
    if (el.isContentEditable) return true;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT";
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    var panel = document.getElementById("review-panel");
    if (!panel) return;
    if (typing(event.target)) {
      if (event.key === "Escape") {
        event.target.blur();
        panel.focus();
      }
      return;
    }
    var key = (event.key || "").toLowerCase();
    key = ALIASES[key] || key;
    var button = panel.querySelector('[data-review-key="' + CSS.escape(key) + '"]');
    // A disabled button means a verdict is on its way: one key press, one verdict.
    if (!button || button.disabled || button.closest("fieldset:disabled")) return;
    event.preventDefault();
    // htmx wires freshly swapped content only when it settles (a few ms later); a fast key
    // press must not fall through to a full-page form post, so wire it now (idempotent).
    if (window.htmx) window.htmx.process(panel);
    button.click();
  });

  // After htmx swaps in the next audit, focus the panel: the old button is gone, and the
  // next key press should not depend on where focus happened to land.
  document.addEventListener("htmx:afterSettle", function () {
    var panel = document.getElementById("review-panel");
    var active = document.activeElement;
    if (!panel || (active && active !== document.body && active.isConnected)) return;
    panel.focus();
    panel.scrollIntoView({ block: "start" });
  });
})();
