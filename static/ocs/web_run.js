// A web-started research run (/research/start/<id>/): read its progress once a second until it
// is done or failed, then link the stored run (or, for a rig baseline, the baseline).
(function () {
  "use strict";
  var box = document.getElementById("web-run");
  if (!box) { return; }
  var url = box.getAttribute("data-progress-url");
  var bar = document.getElementById("web-run-bar");
  var count = document.getElementById("web-run-count");
  var status = document.getElementById("web-run-status");
  var result = document.getElementById("web-run-result");

  function show(p) {
    bar.max = Math.max(p.total, 1);
    bar.value = p.done;
    bar.textContent = p.done + " of " + p.total;
    count.textContent = p.done + " of " + p.total;
    box.setAttribute("data-status", p.status);
    status.textContent = "";
    var strong = document.createElement("strong");
    strong.textContent = p.status;
    status.append("Status: ", strong, p.error ? ": " + p.error : "");
    if ((p.run_id || p.baseline_id) && !result.querySelector("a")) {
      var link = document.createElement("a");
      link.href = p.run_id ? "/research/runs/" + p.run_id + "/" : "/research/baselines/" + p.baseline_id + "/";
      link.textContent = p.run_id ? "See the stored run " + p.run_id : "See the baseline " + p.baseline_id;
      result.append(link);
    }
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (p) {
        if (p) { show(p); }
        if (!p || p.status === "queued" || p.status === "running") { setTimeout(poll, 1000); }
      })
      .catch(function () { setTimeout(poll, 3000); });
  }

  if (box.getAttribute("data-status") === "queued" || box.getAttribute("data-status") === "running") { poll(); }
})();
