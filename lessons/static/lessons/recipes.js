// Fills the lessons' recipes with the key this tab created on /keys/ (kept in sessionStorage by
// the portal's script, never sent to the server). Without one, the placeholder stays for pasting.
(function () {
  "use strict";
  var key = "";
  try { key = sessionStorage.getItem("ocs-new-key") || ""; } catch (e) { return; }
  var note = document.getElementById("recipe-key-note");
  if (!key) { return; }
  document.querySelectorAll("[data-snippet]").forEach(function (el) {
    el.textContent = el.textContent.split("PASTE-YOUR-KEY-HERE").join(key);
  });
  if (note) { note.textContent = "The recipes below carry the key you created in this tab."; }
})();
