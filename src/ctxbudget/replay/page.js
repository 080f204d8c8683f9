// ctxbudget replay page: recomputes each rule's trigger in the browser. Trace text is only ever
// inserted with textContent; nothing from the data becomes markup, a URL or code.
"use strict";
(function () {
  var DATA = JSON.parse(document.getElementById("replay-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var calls = DATA.calls; // [context, output, task_start]

  function thresholdOf(name, p, w) {
    // Ports of ctxbudget.budget.rules; the self-check compares them with Python's numbers.
    if (name === "letta") {
      return Math.max(0, w - Math.min(p.reserve_tokens, Math.max(1, Math.floor(w * p.small_window_ratio))));
    }
    if (name === "pi") return w - p.reserve_tokens;
    if (name === "opencode" || name === "opencode-input-limit") {
      var limit = p.input_limit_is_window ? w : p.input_limit;
      if (limit === null || limit === undefined) return Math.max(0, w - p.max_output);
      var reserved = (p.reserved === null || p.reserved === undefined)
        ? Math.min(p.compaction_buffer, p.max_output) : p.reserved;
      return Math.max(0, limit - reserved);
    }
    if (name === "codex") {
      var line = Math.floor((w * 9) / 10);
      return p.configured_limit === null || p.configured_limit === undefined
        ? line : Math.min(p.configured_limit, line);
    }
    if (name === "corecoder") return Math.trunc(w * p.snip_ratio);
    if (name === "ctxbudget") {
      // Mirrors budget/rules.py: defaults shrink with small windows (W/4 reply, W/16 compaction).
      var C = DATA.constants;
      var wanted = p.max_output === null || p.max_output === undefined
        ? Math.max(1, Math.min(C.default_reply_reserve, Math.floor(w / C.reply_share)))
        : p.max_output;
      var compaction = p.compaction_reserve === null || p.compaction_reserve === undefined
        ? Math.max(1, Math.min(C.default_compaction_reserve, Math.floor(w / C.compaction_share)))
        : p.compaction_reserve;
      return w - (Math.min(wanted, p.reply_cap) + compaction);
    }
    return NaN;
  }
  function fires(name, p, tokens, w) {
    var t = thresholdOf(name, p, w);
    return (name === "opencode" || name === "opencode-input-limit" || name === "codex")
      ? tokens >= t : tokens > t;
  }
  function checksAt(policy, call) {
    var c = policy.checked;
    if (c.indexOf("before_request") >= 0 || c.indexOf("after_step") >= 0) return true;
    return c.indexOf("task_end") >= 0 && call[2];
  }
  function compute(w, params) {
    var wall = null, i;
    for (i = 0; i < calls.length; i++) if (calls[i][0] + calls[i][1] > w) { wall = i; break; }
    var out = [];
    DATA.policies.forEach(function (policy) {
      var p = params[policy.name], trigger = null;
      for (i = 0; i < calls.length; i++) {
        if (checksAt(policy, calls[i]) && fires(policy.name, p, calls[i][0], w)) { trigger = i; break; }
      }
      var late = wall !== null && (trigger === null || trigger > wall);
      out.push({ name: policy.name, threshold: thresholdOf(policy.name, p, w), first_trigger: trigger, late: late });
    });
    return { window: w, wall: wall, policies: out };
  }
  function defaults() {
    var params = {};
    DATA.policies.forEach(function (p) { params[p.name] = Object.assign({}, p.parameters); });
    return params;
  }
  function selfCheck() {
    var badge = document.getElementById("selfcheck"), diffs = [];
    DATA.expected.forEach(function (exp) {
      var got = compute(exp.window, defaults());
      if (got.wall !== exp.wall) diffs.push("W=" + exp.window + " wall: js " + got.wall + " vs python " + exp.wall);
      exp.policies.forEach(function (e, k) {
        var g = got.policies[k];
        ["threshold", "first_trigger", "late"].forEach(function (key) {
          if (g[key] !== e[key]) diffs.push("W=" + exp.window + " " + e.name + " " + key + ": js " + g[key] + " vs python " + e[key]);
        });
      });
    });
    badge.setAttribute("data-status", diffs.length ? "failed" : "passed");
    badge.textContent = diffs.length ? "self-check failed: " + diffs.join("; ") : "self-check passed";
  }

  var state = { window: DATA.window, params: defaults() };

  function el(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }
  function draw() {
    var result = compute(state.window, state.params);
    var panels = document.getElementById("panels");
    while (panels.firstChild) panels.removeChild(panels.firstChild);
    var width = 900, height = 110, left = 60, plotW = width - left - 10;
    var maxY = state.window;
    calls.forEach(function (c) { maxY = Math.max(maxY, c[0]); });
    var bw = plotW / Math.max(1, calls.length);
    function x(i) { return left + i * bw; }
    function y(v) { return 20 + (height - 30) * (1 - Math.max(0, v) / maxY); }
    result.policies.forEach(function (r) {
      var svg = el("svg", { width: width, height: height, "data-policy": r.name, "class": "panel" });
      var title = el("text", { x: 4, y: 14, "class": "panel-title" });
      title.textContent = r.name + ": threshold " + r.threshold + ", fires " +
        (r.first_trigger === null ? "never" : "at call " + r.first_trigger) + (r.late ? " (late)" : "");
      svg.appendChild(title);
      calls.forEach(function (c, i) {
        var bar = el("rect", { x: x(i), y: y(c[0]), width: Math.max(1, bw - 0.5), height: y(0) - y(c[0]), fill: "#9db4d0" });
        var tip = el("title", {});
        tip.textContent = "call " + i + ": " + c[0] + " tokens" + (DATA.previews[i] ? "\n" + DATA.previews[i] : "");
        bar.appendChild(tip);
        svg.appendChild(bar);
      });
      svg.appendChild(el("line", { x1: left, x2: width - 10, y1: y(state.window), y2: y(state.window), stroke: "#444", "stroke-dasharray": "2,2" }));
      svg.appendChild(el("line", { x1: left, x2: width - 10, y1: y(r.threshold), y2: y(r.threshold), stroke: "#d62728" }));
      if (result.wall !== null) {
        svg.appendChild(el("line", { x1: x(result.wall), x2: x(result.wall), y1: 20, y2: height - 10, stroke: "#000", "class": "wall" }));
      }
      if (r.first_trigger !== null) {
        svg.appendChild(el("line", { x1: x(r.first_trigger), x2: x(r.first_trigger), y1: 20, y2: height - 10, stroke: "#d62728",
          "stroke-width": 2, "stroke-dasharray": "4,2", "class": "trigger", "data-call": r.first_trigger, id: "trigger-" + r.name }));
      }
      panels.appendChild(svg);
    });
    document.getElementById("wall-info").textContent = result.wall === null
      ? "wall: never hit" : "wall: call " + result.wall;
    document.getElementById("summary").textContent = result.policies.map(function (r) {
      return r.name + " first_trigger=" + r.first_trigger + " late=" + r.late;
    }).join("\n");
  }
  function paramInput(policy, key, value) {
    var label = document.createElement("label"), input = document.createElement("input");
    input.id = "param-" + policy + "-" + key;
    if (typeof value === "boolean") { input.type = "checkbox"; input.checked = value; }
    else { input.type = "number"; input.step = "any"; input.value = value === null ? "" : String(value); }
    input.addEventListener("input", function () {
      var v = input.type === "checkbox" ? input.checked : (input.value === "" ? null : Number(input.value));
      if (v !== null && typeof v === "number" && !isFinite(v)) return;
      state.params[policy][key] = v;
      draw();
    });
    label.appendChild(document.createTextNode(key + " "));
    label.appendChild(input);
    return label;
  }
  function setup() {
    document.getElementById("trace-info").textContent = DATA.format + " · " + (DATA.model || "unknown model") +
      " · " + calls.length + " calls · " + DATA.source;
    var slider = document.getElementById("window-slider"), box = document.getElementById("window-input");
    slider.min = String(DATA.slider.min); slider.max = String(DATA.slider.max); slider.step = String(DATA.slider.step);
    slider.value = String(state.window); box.value = String(state.window);
    function setWindow(v) {
      if (!(v > 0)) return;
      state.window = Math.round(v); slider.value = String(state.window); box.value = String(state.window); draw();
    }
    slider.addEventListener("input", function () { setWindow(Number(slider.value)); });
    box.addEventListener("change", function () { setWindow(Number(box.value)); });
    var params = document.getElementById("params");
    DATA.policies.forEach(function (p) {
      var fs = document.createElement("fieldset"), legend = document.createElement("legend");
      legend.textContent = p.name;
      fs.appendChild(legend);
      Object.keys(p.parameters).forEach(function (k) { fs.appendChild(paramInput(p.name, k, p.parameters[k])); });
      params.appendChild(fs);
    });
    draw();
    selfCheck();
  }
  setup();
})();
