// props viewer: progressive additions only (every page works without this script).
// - the review page: one key per verdict (the key shown on its button);
// - a switch between the light and the dark theme, remembered in this browser.
(function () {
  "use strict";
  var root = document.documentElement;
  var saved = null;
  try { saved = window.localStorage.getItem("props-theme"); } catch (e) { saved = null; }
  if (saved === "light" || saved === "dark") { root.setAttribute("data-theme", saved); }

  document.addEventListener("DOMContentLoaded", function () {
    var toggle = document.querySelector("[data-theme-toggle]");
    if (toggle) {
      toggle.hidden = false;
      toggle.addEventListener("click", function () {
        var dark = root.getAttribute("data-theme") === "dark" ||
          (!root.getAttribute("data-theme") &&
           window.matchMedia("(prefers-color-scheme: dark)").matches);
        var next = dark ? "light" : "dark";
        root.setAttribute("data-theme", next);
        try { window.localStorage.setItem("props-theme", next); } catch (e) { /* private mode */ }
      });
    }
    if (!document.querySelector("[data-review]")) { return; }
    document.addEventListener("keydown", function (event) {
      var target = event.target;
      if (event.ctrlKey || event.metaKey || event.altKey ||
          (target && (target.tagName === "INPUT" || target.tagName === "TEXTAREA" ||
                      target.tagName === "SELECT"))) {
        return;  // typing a note, or a browser shortcut
      }
      var buttons = document.querySelectorAll("button[data-key]");
      for (var i = 0; i < buttons.length; i++) {
        if (buttons[i].getAttribute("data-key") === event.key) {
          event.preventDefault();
          buttons[i].click();
          return;
        }
      }
    });
  });
})();
