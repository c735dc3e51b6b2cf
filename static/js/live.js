// Live pages (Live feed, a running audit): the htmx ws extension swaps the server's
// hx-swap-oob fragments; this file adds what htmx does not do by itself:
// - says what it has already seen when a socket opens, so the server sends what was missed;
// - turns an insert of an element the page already shows into a replacement (no duplicates);
// - pause/resume of the feed, a cap on visible rows, a burst that replaces the list,
//   the connection indicator;
// - reconnects after a clean server shutdown too (the extension only retries 1006/1011-1013).
(function () {
  "use strict";

  var RETRY_CODES = [1006, 1011, 1012, 1013];
  var paused = false;
  var queued = [];
  var resetQueued = false; // a burst came while paused: the queued rows replace the list

  function liveRoot(elt) {
    return elt && elt.closest ? elt.closest("[data-live-feed], [data-live-audit]") : null;
  }

  function setIndicator(root, state, text) {
    var indicator = root.querySelector("[data-live-indicator]");
    if (!indicator) return;
    indicator.dataset.state = state;
    indicator.textContent = text;
    indicator.classList.remove("status-ok", "status-running", "status-failed");
    indicator.classList.add("status", state === "connected" ? "status-ok" : "status-running");
  }

  function lastTracePosition(auditId) {
    var list = document.getElementById("trace-" + auditId);
    var last = -1;
    if (!list) return last;
    var prefix = "trace-" + auditId + "-";
    list.querySelectorAll("li[id^='" + prefix + "']").forEach(function (li) {
      var n = parseInt(li.id.slice(prefix.length), 10);
      if (!isNaN(n) && n > last) last = n;
    });
    return last;
  }

  function hello(root) {
    if (root.hasAttribute("data-live-feed")) {
      var status = document.getElementById("live-status");
      return { after: status ? status.dataset.cursor : null };
    }
    return { after_trace: lastTracePosition(root.dataset.liveAudit) };
  }

  document.addEventListener("htmx:wsConnecting", function (event) {
    var root = liveRoot(event.target);
    if (root && root.dataset.wasOpen) setIndicator(root, "reconnecting", "reconnecting…");
  });

  document.addEventListener("htmx:wsOpen", function (event) {
    var root = liveRoot(event.target);
    if (!root) return;
    root.dataset.wasOpen = "1";
    setIndicator(root, "connected", paused ? "connected (paused)" : "connected");
    event.detail.socketWrapper.send(JSON.stringify(hello(root)));
  });

  document.addEventListener("htmx:wsClose", function (event) {
    var root = liveRoot(event.target);
    if (!root || !document.body.contains(root)) return;
    setIndicator(root, "reconnecting", "reconnecting…");
    var code = event.detail.event && event.detail.event.code;
    if (RETRY_CODES.indexOf(code) < 0 && code < 4000) {
      var wrapper = event.detail.socketWrapper;
      window.setTimeout(function () {
        if (document.body.contains(root)) wrapper.reconnect();
      }, 500 + Math.random() * 1500);
    }
  });

  // Inserted rows (feed cards, trace lines, analyzer pills): replace what is already shown.
  function placeOrReplace(child, target, atTop) {
    var existing = child.id ? document.getElementById(child.id) : null;
    if (existing) {
      existing.replaceWith(child);
    } else if (atTop) {
      target.prepend(child);
    } else {
      target.append(child);
    }
    if (window.htmx) window.htmx.process(child);
  }

  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail.target;
    var fragment = event.detail.fragment;
    // An element fragment is an insert (afterbegin/beforeend); outerHTML swaps pass a
    // DocumentFragment and need nothing from us.
    if (!target || !fragment || fragment.nodeType !== 1) return;
    var children = Array.prototype.slice.call(fragment.children);
    // A burst: the server sent only the newest rows, which replace the list.
    var reset = target.id === "live-rows" && fragment.hasAttribute("data-live-reset");
    if (paused && target.id === "live-rows") {
      // Oldest first, so replaying with prepend puts the newest on top.
      queued = (reset ? [] : queued).concat(children.reverse());
      if (reset) resetQueued = true;
      children.forEach(function (child) { child.remove(); });
      showQueued();
      return;
    }
    if (reset) target.replaceChildren();
    children.forEach(function (child) {
      if (child.id && document.getElementById(child.id)) {
        child.remove();
        placeOrReplace(child, target, false);
      }
    });
    // Placeholders ("No trace lines yet.") go once real rows arrive.
    if (fragment.children.length) {
      target.querySelectorAll(":scope > li.muted").forEach(function (li) { li.remove(); });
    }
  });

  function tidy() {
    var rows = document.getElementById("live-rows");
    if (!rows) return;
    var root = liveRoot(rows);
    var cap = parseInt((root && root.dataset.liveCap) || "50", 10);
    var items = rows.querySelectorAll(":scope > li");
    for (var i = cap; i < items.length; i++) items[i].remove();
    var empty = document.getElementById("live-empty");
    if (empty) empty.hidden = rows.children.length > 0;
  }

  document.addEventListener("htmx:wsAfterMessage", function (event) {
    tidy();
    var root = liveRoot(event.target);
    var list = root && root.dataset.liveAudit && document.getElementById("trace-" + root.dataset.liveAudit);
    if (list) list.scrollTop = list.scrollHeight;
  });

  function showQueued() {
    var label = document.querySelector("[data-live-queued]");
    if (!label) return;
    label.hidden = !paused;
    label.textContent = queued.length + " new while paused";
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-live-pause]");
    if (!button) return;
    paused = !paused;
    button.setAttribute("aria-pressed", paused ? "true" : "false");
    button.textContent = paused ? "Resume" : "Pause";
    var root = liveRoot(button);
    var indicator = root && root.querySelector("[data-live-indicator]");
    if (indicator && indicator.dataset.state === "connected") {
      indicator.textContent = paused ? "connected (paused)" : "connected";
    }
    if (!paused) {
      var rows = document.getElementById("live-rows");
      var items = queued;
      queued = [];
      if (resetQueued) rows.replaceChildren();
      resetQueued = false;
      items.forEach(function (child) { placeOrReplace(child, rows, true); });
      tidy();
    }
    showQueued();
  });
})();
