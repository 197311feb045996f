// The chat page (/chat/). Conversations live in this browser's localStorage only; each message
// goes to the gateway's chat route (/chat/v1/chat/completions) with the page's header, and the
// browser adds the page's HttpOnly key cookie itself: this script never sees the key.
(function () {
  "use strict";
  var root = document.getElementById("chat");
  if (!root) return;
  var ROUTE = root.getAttribute("data-route"), HEADER = root.getAttribute("data-header");
  var STORE = "ocs-chat:" + root.getAttribute("data-user");
  var $ = function (id) { return document.getElementById(id); };
  var list = $("chat-list"), log = $("chat-log"), input = $("chat-input"), picker = $("chat-model");
  var sendButton = $("chat-send"), stopButton = $("chat-stop"), regenButton = $("chat-regenerate");
  var problem = $("chat-problem"), announce = $("chat-announce"), contextLine = $("chat-context");
  var state = load(), running = null;

  function load() {
    try {
      var saved = JSON.parse(localStorage.getItem(STORE) || "null");
      if (saved && Array.isArray(saved.conversations)) return saved;
    } catch (e) { /* a damaged store starts afresh */ }
    return { conversations: [], current: null };
  }
  function save() {
    try { localStorage.setItem(STORE, JSON.stringify(state)); }
    catch (e) { showProblem("This browser's storage is full", "Delete some conversations to keep new ones."); }
  }
  function current() {
    for (var i = 0; i < state.conversations.length; i++) if (state.conversations[i].id === state.current) return state.conversations[i];
    return null;
  }
  function newConversation() {
    var conversation = { id: "c" + Date.now().toString(36) + Math.random().toString(36).slice(2, 7), title: "New chat",
      model: picker.value, messages: [], updated: Date.now(), usedTokens: 0 };
    state.conversations.unshift(conversation);
    state.current = conversation.id;
    return conversation;
  }

  // --- the model picker ---------------------------------------------------------------------
  function modelInfo() {
    var option = picker.options[picker.selectedIndex];
    return { id: option.value, context: +option.getAttribute("data-context"), output: +option.getAttribute("data-output"),
      description: option.getAttribute("data-description"), fallback: option.getAttribute("data-fallback") === "yes" };
  }
  function describeModel() {
    var m = modelInfo(), parts = [];
    if (m.description) parts.push(m.description);
    parts.push(m.context.toLocaleString("en-GB") + " tokens of context");
    if (m.fallback) parts.push("the fallback model: it answers when a token budget is spent");
    $("chat-model-about").textContent = parts.join(" · ");
  }

  // --- drawing --------------------------------------------------------------------------------
  function drawList() {
    list.textContent = "";
    $("chat-list-empty").hidden = state.conversations.length > 0;
    state.conversations.forEach(function (conversation) {
      var item = document.createElement("li");
      item.className = "chat-item" + (conversation.id === state.current ? " current" : "");
      var open = document.createElement("button");
      open.type = "button"; open.className = "chat-open"; open.textContent = conversation.title;
      if (conversation.id === state.current) open.setAttribute("aria-current", "true");
      open.addEventListener("click", function () { if (!running) { state.current = conversation.id; save(); drawAll(); input.focus(); } });
      var rename = document.createElement("button");
      rename.type = "button"; rename.className = "chat-small"; rename.textContent = "Rename";
      rename.setAttribute("aria-label", "Rename " + conversation.title);
      rename.addEventListener("click", function () {
        var title = window.prompt("A new name for this conversation", conversation.title);
        if (title && title.trim()) { conversation.title = title.trim().slice(0, 80); save(); drawAll(); }
      });
      var remove = document.createElement("button");
      remove.type = "button"; remove.className = "chat-small danger"; remove.textContent = "Delete";
      remove.setAttribute("aria-label", "Delete " + conversation.title);
      remove.addEventListener("click", function () {
        if (running || !window.confirm("Delete \u201c" + conversation.title + "\u201d from this browser?")) return;
        state.conversations = state.conversations.filter(function (c) { return c.id !== conversation.id; });
        if (state.current === conversation.id) state.current = state.conversations.length ? state.conversations[0].id : null;
        save(); drawAll();
      });
      item.appendChild(open); item.appendChild(rename); item.appendChild(remove);
      list.appendChild(item);
    });
  }

  function messageNode(message) {
    var node = document.createElement("article");
    node.className = "chat-msg " + message.role;
    var who = document.createElement("h3");
    who.className = "chat-who"; who.textContent = message.role === "user" ? "You" : "Model";
    node.appendChild(who);
    var body = document.createElement("div");
    body.className = "chat-body";
    if (message.role === "user") body.textContent = message.content;  // as typed, never Markdown
    else window.OcsMarkdown.render(body, message.content);
    node.appendChild(body);
    if (message.note) {
      var note = document.createElement("p");
      note.className = "chat-note muted"; note.textContent = message.note;
      node.appendChild(note);
    }
    return node;
  }

  function drawLog() {
    var conversation = current();
    log.textContent = "";
    $("chat-title").textContent = conversation ? conversation.title : "New chat";
    if (!conversation || !conversation.messages.length) {
      var hint = document.createElement("p");
      hint.className = "muted chat-empty"; hint.textContent = "Write a message below to start.";
      log.appendChild(hint);
    } else {
      conversation.messages.forEach(function (message) { log.appendChild(messageNode(message)); });
    }
    log.scrollTop = log.scrollHeight;
    drawContext();
    var last = conversation && conversation.messages[conversation.messages.length - 1];
    regenButton.hidden = !!running || !last;
    regenButton.textContent = last && last.role === "user" ? "Send again" : "Regenerate";
  }

  function drawAll() {
    var conversation = current();
    if (conversation && conversation.model) {
      for (var i = 0; i < picker.options.length; i++) if (picker.options[i].value === conversation.model) picker.selectedIndex = i;
    }
    describeModel(); drawList(); drawLog();
  }

  // How much of the model's context the conversation uses: the gateway's count after each
  // answer, else about four characters a token.
  function estimate(messages) {
    var chars = 0;
    messages.forEach(function (m) { chars += m.content.length + 8; });
    return Math.ceil(chars / 4);
  }
  function contextUse(conversation, extraText) {
    if (!conversation) return estimate([{ content: extraText || "" }]);
    var counted = conversation.usedTokens || 0;
    return Math.max(counted, estimate(conversation.messages)) + (extraText ? estimate([{ content: extraText }]) : 0);
  }
  function isFull(conversation, extraText) {
    var m = modelInfo();
    return contextUse(conversation, extraText) + Math.min(m.output, 256) > m.context;
  }
  function drawContext() {
    var conversation = current(), m = modelInfo(), used = contextUse(conversation, "");
    var percent = Math.min(100, Math.round(100 * used / Math.max(1, m.context)));
    contextLine.textContent = !conversation || !conversation.messages.length
      ? "The model reads up to " + m.context.toLocaleString("en-GB") + " tokens of a conversation."
      : isFull(conversation, "")
      ? "This chat is full: the model cannot read any more of it. Start a new chat."
      : "This chat uses about " + used.toLocaleString("en-GB") + " of the model's " + m.context.toLocaleString("en-GB") +
        " tokens of context (" + percent + "%).";
    contextLine.classList.toggle("warning", isFull(conversation, ""));
  }

  // --- problems, in the student's words -------------------------------------------------------
  function showProblem(title, detail) {
    problem.textContent = "";
    var strong = document.createElement("strong"); strong.textContent = title;
    problem.appendChild(strong);
    if (detail) problem.appendChild(document.createTextNode(" " + detail));
    problem.hidden = false;
  }
  function clearProblem() { problem.hidden = true; problem.textContent = ""; }

  function duration(seconds) {
    if (seconds >= 2 * 86400) return Math.round(seconds / 86400) + " days";
    if (seconds >= 3600) return Math.round(seconds / 3600) + " h";
    return Math.max(1, Math.round(seconds / 60)) + " min";
  }

  function refusal(status, body, retryAfter) {
    var error = (body && body.error) || {}, code = error.code || "", message = error.message || "";
    var wait = retryAfter ? " Try again in " + retryAfter + " s." : "";
    if (code === "class_paused") return ["Your class is paused.", message];
    if (code === "budget_exhausted" || code === "tokens_per_day_exceeded") {
      var resets = retryAfter ? " It resets in about " + duration(+retryAfter) + "." : "";
      return ["Your token budget is used up.", message + resets];
    }
    if (code === "account_disabled") return ["Your account is disabled.", message];
    if (code === "context_length_exceeded") return ["This chat is full: start a new chat.", message];
    if (code === "model_not_found" || code === "model_not_allowed") return ["You cannot use this model.", message];
    if (code === "chat_off") return ["The chat page is off for your class.", message];
    if (code === "no_worker_available" || code === "model_loading") return ["The model is not available right now.", message];
    if (status === 429 && /^All workers/.test(message)) return ["The model is busy \u2014 try again in " + (retryAfter || "a few") + " s.", message];
    if (status === 429 && /^Too many requests at once/.test(message)) return ["Too many at once: wait for your other answer to finish.", message];
    if (status === 429) return ["Too many requests.", message + wait];
    if (status === 401) return ["You are signed out.", "Sign in again to go on chatting."];
    if (code === "chat_origin_refused") return ["This page cannot chat.", message];
    return ["Something went wrong (" + status + ").", message + wait];
  }

  // A lapsed or revoked key: ask the site (with the page's session and CSRF token) for a fresh one, once.
  function renewKey() {
    var token = document.querySelector("#chat-csrf input[name=csrfmiddlewaretoken]").value;
    return fetch("/chat/key/", { method: "POST", credentials: "same-origin", redirect: "manual",
      headers: { "X-CSRFToken": token } }).then(function (response) {
      if (response.ok) return { ok: true };
      return response.json().then(function (body) { return { ok: false, status: response.status, body: body }; },
        function () { return { ok: false, status: 401, body: null }; });
    }, function () { return { ok: false, status: 401, body: null }; });
  }

  // --- sending and streaming ------------------------------------------------------------------
  function setRunning(on) {
    sendButton.hidden = on; stopButton.hidden = !on; regenButton.hidden = true;
    picker.disabled = on;
  }

  function ask(conversation, renewed) {
    var m = modelInfo();
    var answer = { role: "assistant", content: "" };
    var payload = { model: m.id, stream: true, stream_options: { include_usage: true },
      messages: conversation.messages.map(function (x) { return { role: x.role, content: x.content }; }) };
    var controller = new AbortController();
    running = { controller: controller, conversation: conversation };
    setRunning(true); clearProblem();
    var node = null, body = null, pending = false;
    announce.textContent = "Answering\u2026";
    function paint() {
      pending = false;
      if (!node) { node = messageNode(answer); body = node.querySelector(".chat-body"); log.appendChild(node); }
      else window.OcsMarkdown.render(body, answer.content);
      log.scrollTop = log.scrollHeight;
    }
    function schedule() { if (!pending) { pending = true; window.requestAnimationFrame(paint); } }
    function finish(note) {
      running = null; setRunning(false);
      if (note) answer.note = note;
      if (answer.content) conversation.messages.push(answer);
      conversation.updated = Date.now(); save();
      drawLog();
      announce.textContent = answer.content ? "Answer: " + answer.content + (note ? " " + note : "") : (note || "");
      input.focus();
    }

    fetch(ROUTE, { method: "POST", credentials: "same-origin", signal: controller.signal,
      headers: (function () { var h = { "Content-Type": "application/json" }; h[HEADER] = "1"; return h; })(),
      body: JSON.stringify(payload) }).then(function (response) {
      if (!response.ok) {
        return response.json().catch(function () { return null; }).then(function (body) {
          var code = body && body.error && body.error.code;
          if (response.status === 401 && code === "invalid_api_key" && !renewed) {
            return renewKey().then(function (renewal) {
              if (renewal.ok) { running = null; ask(conversation, true); return; }
              running = null; setRunning(false); drawLog();
              var said = refusal(renewal.status, renewal.body, null);
              showProblem(said[0], said[1]); announce.textContent = said[0];
            });
          }
          running = null; setRunning(false); drawLog();
          var said = refusal(response.status, body, response.headers.get("Retry-After"));
          showProblem(said[0], said[1]); announce.textContent = said[0];
        });
      }
      var reader = response.body.getReader(), decoder = new TextDecoder(), buffer = "";
      function onEvent(data) {
        if (data === "[DONE]") return;
        var chunk;
        try { chunk = JSON.parse(data); } catch (e) { return; }
        if (chunk.error) {
          var said = refusal(500, chunk, null);
          showProblem(said[0], said[1]);
          return;
        }
        if (chunk.usage) conversation.usedTokens = (chunk.usage.prompt_tokens || 0) + (chunk.usage.completion_tokens || 0);
        var choice = chunk.choices && chunk.choices[0];
        if (choice && choice.delta && typeof choice.delta.content === "string") { answer.content += choice.delta.content; schedule(); }
      }
      function pump() {
        return reader.read().then(function (step) {
          if (step.done) { finish(""); return; }
          buffer += decoder.decode(step.value, { stream: true });
          var events = buffer.split(/\r?\n\r?\n/);
          buffer = events.pop();
          events.forEach(function (event) {
            event.split(/\r?\n/).forEach(function (line) { if (line.indexOf("data:") === 0) onEvent(line.slice(5).trim()); });
          });
          return pump();
        });
      }
      return pump();
    }).catch(function (error) {
      if (error && error.name === "AbortError") { finish("Stopped."); return; }
      running = null; setRunning(false); drawLog();
      showProblem("The connection was lost.", "Check your network and send again.");
    });
  }

  function send() {
    var text = input.value.trim();
    if (!text || running) return;
    var conversation = current() || newConversation();
    if (isFull(conversation, text)) {
      showProblem("This chat is full: start a new chat.", "The model cannot read a conversation this long.");
      return;
    }
    conversation.model = picker.value;
    if (!conversation.messages.length) {
      var words = text.replace(/\s+/g, " ");
      conversation.title = words.length > 48 ? words.slice(0, 47) + "\u2026" : words;
    }
    conversation.messages.push({ role: "user", content: text });
    input.value = "";
    save(); drawList(); drawLog();
    ask(conversation, false);
  }

  $("chat-compose").addEventListener("submit", function (event) { event.preventDefault(); send(); });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); send(); }
  });
  stopButton.addEventListener("click", function () { if (running) running.controller.abort(); });
  regenButton.addEventListener("click", function () {
    var conversation = current();
    if (!conversation || running) return;
    var last = conversation.messages[conversation.messages.length - 1];
    if (!last) return;
    if (last.role === "assistant") conversation.messages.pop();
    save(); drawLog();
    ask(conversation, false);
  });
  $("chat-new").addEventListener("click", function () {
    if (running) return;
    state.current = null; save(); drawAll(); clearProblem(); input.focus();
  });
  $("chat-delete-all").addEventListener("click", function () {
    if (running || !window.confirm("Delete every conversation from this browser? This cannot be undone.")) return;
    state = { conversations: [], current: null };
    try { localStorage.removeItem(STORE); } catch (e) { /* nothing was stored */ }
    drawAll(); clearProblem(); announce.textContent = "All conversations deleted.";
  });
  picker.addEventListener("change", function () {
    var conversation = current();
    if (conversation) { conversation.model = picker.value; save(); }
    describeModel(); drawContext();
  });
  log.addEventListener("click", function (event) {
    var button = event.target.closest("button.code-copy");
    if (!button) return;
    var text = button.closest(".code-block").querySelector("code").textContent;
    var done = function () { button.textContent = "Copied"; setTimeout(function () { button.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) { navigator.clipboard.writeText(text).then(done, done); return; }
    var area = document.createElement("textarea");  // plain http: the old way
    area.value = text; area.setAttribute("readonly", ""); area.style.position = "absolute"; area.style.left = "-9999px";
    document.body.appendChild(area); area.select();
    try { document.execCommand("copy"); } catch (e) { /* the code stays selectable */ }
    document.body.removeChild(area); button.focus(); done();
  });

  drawAll();
})();
