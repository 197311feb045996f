// The teacher's live fleet view: renders the status the server pushes over /ws/fleet/.
// The browser never polls; on a lost connection it reconnects with a growing pause.
(function () {
  "use strict";
  var csrf = document.querySelector("#csrf-holder input[name=csrfmiddlewaretoken]").value;
  var live = document.getElementById("live");

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") node.textContent = attrs[name]; else node.setAttribute(name, attrs[name]);
    });
    (children || []).forEach(function (child) { if (child) node.appendChild(child); });
    return node;
  }
  function td(text, cls) { return el("td", cls ? {text: text, "class": cls} : {text: text}); }
  function dash(value, suffix) { return value === null || value === undefined ? "—" : value + (suffix || ""); }

  function actionForm(worker, action, label, extra) {
    var form = el("form", {method: "post", action: "/teacher/fleet/workers/" + worker.id + "/" + action + "/", "class": "inline"});
    form.appendChild(el("input", {type: "hidden", name: "csrfmiddlewaretoken", value: csrf}));
    if (extra) form.appendChild(extra);
    form.appendChild(el("button", {type: "submit", text: label, "aria-label": label + " " + worker.name}));
    return form;
  }

  function moveForm(worker, pools) {
    var select = el("select", {name: "pool", "aria-label": "Pool for " + worker.name});
    pools.forEach(function (pool) {
      var option = el("option", {value: pool, text: pool});
      if (pool === worker.pool) option.selected = true;
      select.appendChild(option);
    });
    return actionForm(worker, "move", "Move", select);
  }

  // Draining or disabling the last worker that serves a model leaves its students with none:
  // ask first (the form submits only if the teacher confirms).
  function lastOfModel(worker, workers) {
    return !workers.some(function (other) {
      return other.id !== worker.id && other.model === worker.model &&
        (other.state === "healthy" || other.state === "degraded");
    });
  }
  function confirming(form, worker, action) {
    form.addEventListener("submit", function (event) {
      var question = "Nothing else serves " + worker.model + ": " + action + " " + worker.name +
        " anyway? Students asking for it will get no answer.";
      if (!window.confirm(question)) event.preventDefault();
    });
    form.setAttribute("data-last-worker", worker.model);
    return form;
  }

  function renderWorkers(status) {
    var body = document.querySelector("#workers tbody");
    body.textContent = "";
    if (!status.workers.length) { body.appendChild(el("tr", {}, [el("td", {colspan: "10", text: "No workers registered."})])); return; }
    status.workers.forEach(function (w) {
      var actions = el("td", {"class": "actions"});
      if (w.state === "draining" || w.state === "disabled") actions.appendChild(actionForm(w, "enable", "Enable"));
      var last = lastOfModel(w, status.workers);
      var drain = actionForm(w, "drain", "Drain"), disable = actionForm(w, "disable", "Disable");
      if (last) { confirming(drain, w, "drain"); confirming(disable, w, "disable"); }
      if (w.state !== "draining" && w.state !== "disabled") actions.appendChild(drain);
      if (w.state !== "disabled") actions.appendChild(disable);
      actions.appendChild(moveForm(w, status.pools));
      var busyPct = w.slots ? Math.round(100 * w.busy / w.slots) : 0;
      var busy = el("td", {"class": "num"}, [el("span", {text: w.busy + " / " + w.slots}),
        el("span", {"class": "meter small", "aria-hidden": "true"}, [el("span", {style: "width: " + busyPct + "%"})])]);
      body.appendChild(el("tr", {"data-worker": w.name, "data-state": w.state}, [
        el("td", {}, [el("span", {text: w.name}), w.lane_tokens ? el("small", {"class": "note lane", "data-testid": "lane",
            title: "A lane worker: kept for short prompts, which go to it first; longer prompts never do",
            text: "for questions (prompts ≤ " + w.lane_tokens.toLocaleString("en") + " tokens)"}) : null]),
        el("td", {}, [el("span", {"class": "state " + w.state, "data-testid": "state", text: w.state}),
          w.slot_files_pruned ? el("small", {"class": "note", "data-testid": "pruned",
            title: "Slot files the rig agent deleted to stay within its budget: each costs a student a recomputed prompt",
            text: " · " + w.slot_files_pruned + " slot files pruned"}) : null,
          null]),
        td(w.pool), td(w.model), td((w.rig || "—") + (w.gpus && w.gpus.length ? " · GPU " + w.gpus.join(",") : "")),
        busy, td(String(w.queue), "num"), td(dash(w.tokens_per_s), "num"), td(dash(w.cold_start_s, " s"), "num"), actions]));
    });
  }

  function renderRigs(status) {
    var box = document.getElementById("rigs");
    box.textContent = "";
    if (!status.rigs.length) { box.appendChild(el("p", {text: "No rigs: workers here run on this machine or were registered by hand."})); return; }
    status.rigs.forEach(function (rig) {
      var age = rig.heartbeat_age_s === null ? "never" : rig.heartbeat_age_s + " s ago";
      var card = el("div", {"class": "rig"}, [el("h3", {text: rig.name + (rig.rehearsal ? " (rehearsal: GPUs faked, CPU workers)" : "")}),
        el("p", {"class": "muted", text: "heartbeat " + age + (rig.agent_version ? " · agent " + rig.agent_version : "") + (rig.gpu_status ? " · " + rig.gpu_status : "")})]);
      rig.gpus.forEach(function (gpu) {
        var memPct = gpu.memory_total_mib ? Math.round(100 * gpu.memory_used_mib / gpu.memory_total_mib) : 0;
        card.appendChild(el("div", {"class": "gpu"}, [
          el("strong", {text: "GPU " + gpu.index + " " + (gpu.name || "")}),
          el("span", {text: "use " + dash(gpu.utilization_pct, "%")}),
          el("span", {text: "memory " + (gpu.memory_used_mib / 1024).toFixed(1) + " / " + (gpu.memory_total_mib / 1024).toFixed(1) + " GiB (" + memPct + "%)"}),
          el("span", {text: dash(gpu.temperature_c, " °C")}), el("span", {text: dash(gpu.power_w, " W")})]));
      });
      box.appendChild(card);
    });
  }

  function renderEvents(status) {
    var list = document.getElementById("events");
    list.textContent = "";
    status.events.forEach(function (e) {
      list.appendChild(el("li", {}, [el("time", {datetime: e.at, text: e.at_text}),
        document.createTextNode(" " + e.worker + ": " + e.from + " → " + e.to + " (" + e.reason + ")")]));
    });
  }

  function render(status) { renderWorkers(status); renderRigs(status); renderEvents(status); }

  render(JSON.parse(document.getElementById("fleet-initial").textContent));

  var pause = 1000;
  function connect() {
    var socket = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/fleet/");
    socket.onopen = function () { pause = 1000; live.textContent = "live"; live.className = "live-badge on"; };
    socket.onmessage = function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "status") render(message.status);
    };
    socket.onclose = function (event) {
      live.className = "live-badge off";
      if (event.code === 4403) { live.textContent = "not allowed: sign in as a teacher"; return; }
      live.textContent = "reconnecting…";
      setTimeout(connect, pause);
      pause = Math.min(pause * 2, 30000);
    };
  }
  connect();
})();
