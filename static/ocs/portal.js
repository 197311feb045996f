// The portal's small helpers: copy buttons, confirm-before-submit, the key on /connect/ and
// "Test my key". No framework, no external assets. A key just created is kept in this tab's
// sessionStorage (never sent to the server except as the API key of the test request).
(function () {
  "use strict";
  var KEY_STORE = "ocs-new-key";

  function copyText(text, button) {
    var done = function () {
      var label = button.textContent;
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = label; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallbackCopy(text); done(); });
    } else { fallbackCopy(text); done(); }
  }

  function fallbackCopy(text) {
    var area = document.createElement("textarea");
    area.value = text; area.setAttribute("readonly", ""); area.style.position = "absolute"; area.style.left = "-9999px";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* the text stays selectable */ }
    document.body.removeChild(area);
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("button.copy");
    if (!button) return;
    var target = document.getElementById(button.getAttribute("data-copy-target"));
    if (target) copyText(target.value !== undefined && target.tagName === "INPUT" ? target.value : target.textContent.trim(), button);
  });

  document.addEventListener("submit", function (event) {
    var message = event.target.getAttribute("data-confirm");
    if (message && !window.confirm(message)) event.preventDefault();
  });

  document.addEventListener("click", function (event) {
    if (!event.target.closest("button[data-print]")) return;
    document.body.classList.add("printing-slips");  // the print stylesheet then shows the slips only
    window.print();
    document.body.classList.remove("printing-slips");
  });

  var newKey = document.querySelector("[data-testid=new-key]");
  if (newKey) { try { sessionStorage.setItem(KEY_STORE, newKey.textContent.trim()); } catch (e) { /* private mode */ } }

  var keyInput = document.getElementById("connect-key");
  if (!keyInput) return;
  var placeholder = keyInput.getAttribute("data-placeholder");
  var snippets = Array.prototype.slice.call(document.querySelectorAll("[data-snippet]"));
  snippets.forEach(function (el) { el.setAttribute("data-template", el.textContent); });

  function fill() {
    var key = keyInput.value.trim() || placeholder;
    snippets.forEach(function (el) { el.textContent = el.getAttribute("data-template").split(placeholder).join(key); });
  }
  try { keyInput.value = sessionStorage.getItem(KEY_STORE) || ""; } catch (e) { /* private mode */ }
  keyInput.addEventListener("input", function () {
    try { sessionStorage.setItem(KEY_STORE, keyInput.value.trim()); } catch (e) { /* private mode */ }
    fill();
  });
  fill();

  var result = document.getElementById("test-result");
  document.getElementById("test-key").addEventListener("click", function () {
    var key = keyInput.value.trim();
    if (!key) { result.className = "error"; result.textContent = "Paste your key first."; return; }
    result.className = ""; result.textContent = "Sending one short request…";
    var model = document.getElementById("test-model").value;
    var started = performance.now();
    fetch("/v1/chat/completions", {
      method: "POST",
      headers: {"Content-Type": "application/json", "Authorization": "Bearer " + key},
      body: JSON.stringify({model: model, max_tokens: 16, messages: [{role: "user", content: "Say hello in five words."}]})
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (body) { return [response, body]; });
    }).then(function (pair) {
      var response = pair[0], body = pair[1], seconds = ((performance.now() - started) / 1000).toFixed(1);
      if (response.ok) {
        var text = body.choices && body.choices[0] && body.choices[0].message ? body.choices[0].message.content : "";
        result.className = "ok";
        result.textContent = "It works: " + model + " answered in " + seconds + " s: \u201c" + (text || "").trim() + "\u201d";
        return;
      }
      var why = body.error && body.error.message ? body.error.message : response.statusText;
      // The gateway's message says what happened (a paused class carries the teacher's note);
      // a hint only adds what to do, by the error's code first: every 403 is not one reason.
      var code = body.error && body.error.code;
      var byCode = {class_paused: "Nothing is wrong with your key: it works again when the pause ends.",
                    account_disabled: "", invalid_api_key: "Create a new key on the Keys page.",
                    model_not_found: "Pick another model in the list above."};
      var byStatus = {401: "The key is wrong, revoked or expired: create a new one on the Keys page.",
                      404: "That model is not served right now.",
                      429: "You hit a limit (or every worker is busy): wait a moment and try again."};
      var hint = Object.prototype.hasOwnProperty.call(byCode, code) ? byCode[code] : (byStatus[response.status] || "");
      result.className = "error";
      result.textContent = "Refused (" + response.status + "): " + why + (hint ? " " + hint : "");
    }).catch(function (error) {
      result.className = "error"; result.textContent = "No answer from the server: " + error;
    });
  });
})();
