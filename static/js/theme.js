// Applies the saved light/dark choice before first paint (loaded without defer in <head>).
(function () {
  "use strict";
  try {
    var saved = window.localStorage.getItem("auditor-theme");
    if (saved === "light" || saved === "dark") {
      document.documentElement.dataset.theme = saved;
    }
  } catch (e) {
    /* storage may be disabled: follow prefers-color-scheme */
  }
})();
