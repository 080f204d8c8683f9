// ctxbudget replay page: recomputes each rule's trigger in the browser. Trace text is only ever
// inserted with textContent; nothing from the data becomes markup, a URL or code.
"use strict";
(function () {
  var DATA = JSON.parse(document.getElementById("replay-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  // [context, output, task_start, after_compaction, the window of its model (0: none), max_tokens]
  var calls = DATA.calls;

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
    if (name === "ctxbudget") return w - ctxbudgetReserve(p, w, 0, 0, 0);
    return NaN;
  }
  function ctxbudgetReserve(p, w, largest, maxTokens, growth) {
    // Mirrors CtxbudgetPolicy.reserve_in_session: reply reserve (the max output asked for, the
    // request's when the trace records it, capped) + compaction reserve, or the largest reply
    // seen so far (up to W/2), or the largest step seen so far (up to W/4), whichever is
    // largest. Defaults shrink with small windows (W/4, W/16). With no max output known and
    // replies seen, the reply reserve is the learned floor.
    var C = DATA.constants;
    var wanted = maxTokens ? maxTokens : p.max_output;
    var unknown = wanted === null || wanted === undefined;
    var byDefault = Math.max(1, Math.min(C.default_reply_reserve, Math.floor(w / C.reply_share)));
    if (unknown && largest > 0) wanted = Math.min(C.learned_reply_floor, byDefault);
    else if (unknown) wanted = byDefault;
    var compaction = p.compaction_reserve === null || p.compaction_reserve === undefined
      ? Math.max(1, Math.min(C.default_compaction_reserve, Math.floor(w / C.compaction_share)))
      : p.compaction_reserve;
    return Math.max(Math.min(wanted, p.reply_cap) + compaction, Math.min(largest, Math.floor(w / C.learned_reply_share)),
      Math.min(growth, Math.floor(w / C.learned_growth_share)));
  }
  function fires(name, p, tokens, w, largest, maxTokens, growth) {
    var t = name === "ctxbudget" ? w - ctxbudgetReserve(p, w, largest, maxTokens, growth) : thresholdOf(name, p, w);
    return (name === "opencode" || name === "opencode-input-limit" || name === "codex")
      ? tokens >= t : tokens > t;
  }
  function checksAt(policy, call) {
    var c = policy.checked;
    if (c.indexOf("before_request") >= 0 || c.indexOf("after_step") >= 0) return true;
    return c.indexOf("task_end") >= 0 && call[2];
  }
  function segmentStarts() {
    // A segment: the calls from the start or a recorded compaction to the next one.
    var starts = [], i;
    for (i = 0; i < calls.length; i++) if (i === 0 || calls[i][3]) starts.push(i);
    return starts;
  }
  var STARTS = segmentStarts();
  function compute(w, params, perModel) {
    var size = function (i) { return perModel && calls[i][4] ? calls[i][4] : w; };
    var walls = [], seen = [], grown = [], largest = 0, growth = 0, last = null, i, k;
    for (i = 0; i < calls.length; i++) {
      // Mirrors replay.learned_before (SessionEvidence): the largest earlier reply, and the
      // largest jump between consecutive calls up to this one, not measured across a compaction.
      if (calls[i][3]) last = null;
      if (last !== null) growth = Math.max(growth, calls[i][0] - last);
      seen.push(largest); grown.push(growth);
      largest = Math.max(largest, calls[i][1]); last = calls[i][0];
    }
    for (k = 0; k < STARTS.length; k++) {
      var end = k + 1 < STARTS.length ? STARTS[k + 1] : calls.length, hit = null;
      for (i = STARTS[k]; i < end; i++) if (calls[i][0] + calls[i][1] > size(i)) { hit = i; break; }
      walls.push(hit);
    }
    var wall = walls.filter(function (x) { return x !== null; })[0];
    wall = wall === undefined ? null : wall;
    var out = [];
    DATA.policies.forEach(function (policy) {
      var p = params[policy.name], fireAt = [], lateCount = 0, fill = 0, lines = [];
      for (i = 0; i < calls.length; i++) {
        // The line as the session has taught it (ctxbudget's falls as its reserve is learned).
        lines.push(policy.name === "ctxbudget" ? size(i) - ctxbudgetReserve(p, size(i), seen[i], calls[i][5], grown[i])
          : thresholdOf(policy.name, p, size(i)));
      }
      for (k = 0; k < STARTS.length; k++) {
        var stop = k + 1 < STARTS.length ? STARTS[k + 1] : calls.length, fire = null;
        for (i = STARTS[k]; i < stop; i++) {
          if (checksAt(policy, calls[i]) && fires(policy.name, p, calls[i][0], size(i), seen[i], calls[i][5], grown[i])) { fire = i; break; }
        }
        fireAt.push(fire);
        if (walls[k] !== null && (fire === null || fire > walls[k])) lateCount++;
        if (fire !== null) fill += Math.min(1, calls[fire][0] / size(fire));
      }
      var fired = fireAt.filter(function (x) { return x !== null; });
      var trigger = fired.length ? fired[0] : null;
      var late = wall !== null && (trigger === null || trigger > wall);
      out.push({ name: policy.name, threshold: thresholdOf(policy.name, p, w), first_trigger: trigger, late: late,
        fires: fireAt, late_segments: lateCount, mean_fill_at_fire: fired.length ? fill / fired.length : null,
        lines: lines });
    });
    return { window: w, wall: wall, walls: walls, policies: out };
  }
  function defaults() {
    var params = {};
    DATA.policies.forEach(function (p) { params[p.name] = Object.assign({}, p.parameters); });
    return params;
  }
  function selfCheck() {
    var badge = document.getElementById("selfcheck"), diffs = [];
    DATA.expected.forEach(function (exp) {
      var got = compute(exp.window, defaults(), exp.per_model);
      if (got.wall !== exp.wall) diffs.push("W=" + exp.window + " wall: js " + got.wall + " vs python " + exp.wall);
      if (got.walls.join() !== exp.walls.join()) diffs.push("W=" + exp.window + " walls: js " + got.walls + " vs python " + exp.walls);
      exp.policies.forEach(function (e, k) {
        var g = got.policies[k];
        ["threshold", "first_trigger", "late", "late_segments"].forEach(function (key) {
          if (g[key] !== e[key]) diffs.push("W=" + exp.window + " " + e.name + " " + key + ": js " + g[key] + " vs python " + e[key]);
        });
        if (g.fires.join() !== e.fires.join()) diffs.push("W=" + exp.window + " " + e.name + " fires: js " + g.fires + " vs python " + e.fires);
        var fill = g.mean_fill_at_fire, want = e.mean_fill_at_fire;
        if ((fill === null) !== (want === null) || (fill !== null && Math.abs(fill - want) > 1e-9)) {
          diffs.push("W=" + exp.window + " " + e.name + " mean fill: js " + fill + " vs python " + want);
        }
      });
    });
    badge.setAttribute("data-status", diffs.length ? "failed" : "passed");
    badge.textContent = diffs.length ? "self-check failed: " + diffs.join("; ") : "self-check passed";
  }

  var state = { window: DATA.window, params: defaults(), perModel: DATA.expected[0].per_model };
  var CHECKS = { before_request: "before", after_step: "after", task_end: "task end" };

  function fmt(n) {
    // Thousands separators without Intl (its output depends on the browser's locale).
    if (n === null || n === undefined) return "-";
    if (typeof n !== "number" || !isFinite(n)) return String(n);
    var parts = String(Math.abs(n)).split(".");
    var whole = parts[0].replace(/\B(?=(\d{3})+(?!\d))/g, ",");
    return (n < 0 ? "-" : "") + whole + (parts.length > 1 ? "." + parts[1] : "");
  }
  function parseNumber(text) {
    var t = text.replace(/[,_\s]/g, "");
    return t === "" ? null : Number(t);
  }
  function niceStep(span, count) {
    // The smallest 1, 2 or 5 x 10^k step that splits span into at most `count` parts.
    var raw = Math.max(span / count, 1e-9), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = [1, 2, 5, 10].filter(function (f) { return f * p >= raw; })[0];
    return m * p;
  }
  function effectiveDefault(policy, key, w) {
    // What a blank (None) parameter means at window w; mirrors budget/rules.py like thresholdOf.
    var C = DATA.constants, p = state.params[policy];
    if (policy === "ctxbudget" && key === "max_output") {
      return "default " + fmt(Math.max(1, Math.min(C.default_reply_reserve, Math.floor(w / C.reply_share))));
    }
    if (policy === "ctxbudget" && key === "compaction_reserve") {
      return "default " + fmt(Math.max(1, Math.min(C.default_compaction_reserve, Math.floor(w / C.compaction_share))));
    }
    if (key === "reserved") return "default " + fmt(Math.min(p.compaction_buffer, p.max_output));
    if (key === "input_limit") return p.input_limit_is_window ? "= window" : "none";
    if (key === "configured_limit") return "none (90% of W)";
    return "default";
  }

  function el(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }
  function text(x, y, content, attrs) {
    var node = el("text", Object.assign({ x: x, y: y, "class": "tick" }, attrs || {}));
    node.textContent = content;
    return node;
  }
  function html(tag, content) {
    var node = document.createElement(tag);
    if (content !== undefined) node.textContent = content;
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }

  // Chart geometry in viewBox units; the SVG scales to the page width.
  var G = { width: 1000, height: 134, left: 72, right: 10, top: 28, bottom: 22 };
  function scales(maxY) {
    var plotW = G.width - G.left - G.right, bw = plotW / Math.max(1, calls.length);
    var plotH = G.height - G.top - G.bottom;
    return {
      bw: bw,
      x: function (i) { return G.left + i * bw; },
      y: function (v) { return G.top + plotH * (1 - Math.max(0, v) / maxY); }
    };
  }
  function axes(svg, s, maxY) {
    var step = niceStep(maxY, 4), v, i, base = s.y(0);
    for (v = 0; v <= maxY; v += step) {
      svg.appendChild(el("line", { x1: G.left - 4, x2: G.width - G.right, y1: s.y(v), y2: s.y(v), "class": "grid" }));
      svg.appendChild(text(G.left - 6, s.y(v) + 4, fmt(v), { "text-anchor": "end" }));
    }
    var xstep = Math.max(1, niceStep(calls.length, 10));
    for (i = 0; i < calls.length; i += xstep) {
      var cx = s.x(i) + s.bw / 2;
      svg.appendChild(el("line", { x1: cx, x2: cx, y1: base, y2: base + 4, "class": "axis" }));
      svg.appendChild(text(cx, base + 16, fmt(i), { "text-anchor": "middle" }));
    }
    svg.appendChild(el("line", { x1: G.left, x2: G.width - G.right, y1: base, y2: base, "class": "axis" }));
  }
  function panel(r, result, maxY) {
    var s = scales(maxY), y0 = s.y(0);
    var svg = el("svg", { viewBox: "0 0 " + G.width + " " + G.height, width: "100%", "data-policy": r.name, "class": "panel" });
    svg.appendChild(text(4, 14, r.name + ": threshold " + fmt(r.threshold) + " · " +
      (r.first_trigger === null ? "never fires" : "first compacts before call " + fmt(r.first_trigger)) +
      (r.late ? " · late" : "") + (STARTS.length > 1 ? " · " + fmt(STARTS.length) + " segments, " +
      fmt(r.late_segments) + " late" : ""), { "class": "panel-title" }));
    axes(svg, s, maxY);
    calls.forEach(function (c, i) {
      var bar = el("rect", { x: s.x(i), y: s.y(c[0]), width: Math.max(1, s.bw - 0.5), height: y0 - s.y(c[0]), "class": "bar" });
      var tip = el("title", {});
      tip.textContent = "call " + fmt(i) + ": " + fmt(c[0]) + " context tokens, " + fmt(c[1]) + " output" +
        (DATA.previews[i] ? "\n" + DATA.previews[i] : "");
      bar.appendChild(tip);
      svg.appendChild(bar);
    });
    var right = G.width - G.right;
    svg.appendChild(el("line", { x1: G.left, x2: right, y1: s.y(state.window), y2: s.y(state.window), "class": "window" }));
    var moves = r.lines.some(function (v) { return v !== r.lines[0]; });
    if (moves) {
      var d = r.lines.map(function (v, i) {
        return (i ? "L" : "M") + s.x(i) + " " + s.y(v) + " H" + (s.x(i) + s.bw);
      }).join(" ");
      svg.appendChild(el("path", { d: d, fill: "none", "class": "threshold", "data-moves": "true" }));
    } else {
      svg.appendChild(el("line", { x1: G.left, x2: right, y1: s.y(r.threshold), y2: s.y(r.threshold), "class": "threshold" }));
    }
    STARTS.slice(1).forEach(function (c) {
      // The harness's own compaction, as recorded in the trace.
      svg.appendChild(el("line", { x1: s.x(c), x2: s.x(c), y1: G.top, y2: y0, "class": "compaction", "data-call": c }));
    });
    result.walls.forEach(function (wall) {
      if (wall !== null) svg.appendChild(el("line", { x1: s.x(wall), x2: s.x(wall), y1: G.top, y2: y0, "class": "wall" }));
    });
    r.fires.forEach(function (f) {
      if (f === null || f === r.first_trigger) return; // the first is drawn below
      svg.appendChild(el("path", { d: "M" + s.x(f) + " " + G.top + " l-5 -7 h10 z", "class": "fire-mark", "data-call": f }));
    });
    if (r.first_trigger !== null) {
      svg.appendChild(el("line", { x1: s.x(r.first_trigger), x2: s.x(r.first_trigger), y1: G.top, y2: y0,
        "class": "trigger", "data-call": r.first_trigger, id: "trigger-" + r.name }));
      svg.appendChild(el("path", { d: "M" + s.x(r.first_trigger) + " " + G.top + " l-5 -7 h10 z", "class": "trigger-mark" }));
    }
    return svg;
  }
  function summary(result) {
    var body = document.getElementById("summary-rows");
    clear(body);
    result.policies.forEach(function (r, k) {
      var tr = html("tr"), late = html("td", r.late ? "✗ late" : "no");
      if (r.late) late.className = "late";
      tr.appendChild(html("td", r.name));
      tr.appendChild(html("td", DATA.policies[k].checked.map(function (c) { return CHECKS[c] || c; }).join("/")));
      tr.appendChild(html("td", fmt(r.threshold)));
      tr.appendChild(html("td", r.first_trigger === null ? "never" : "call " + fmt(r.first_trigger)));
      tr.appendChild(late);
      tr.appendChild(html("td", STARTS.length > 1 ? fmt(r.late_segments) + " of " + fmt(STARTS.length) : "-"));
      tr.appendChild(html("td", r.mean_fill_at_fire === null ? "-" : (100 * r.mean_fill_at_fire).toFixed(1) + "%"));
      body.appendChild(tr);
    });
  }
  function draw() {
    var result = compute(state.window, state.params, state.perModel);
    var panels = document.getElementById("panels");
    clear(panels);
    var maxY = state.window;
    calls.forEach(function (c) { maxY = Math.max(maxY, c[0]); });
    maxY *= 1.04; // headroom so the window line is not drawn on the frame
    result.policies.forEach(function (r) { panels.appendChild(panel(r, result, maxY)); });
    document.getElementById("wall-info").textContent = result.wall === null
      ? "wall: never hit" : "wall: call " + fmt(result.wall);
    summary(result);
    Object.keys(state.params).forEach(function (name) {
      Object.keys(state.params[name]).forEach(function (key) {
        var input = document.getElementById("param-" + name + "-" + key);
        if (input && input.type !== "checkbox") input.placeholder = effectiveDefault(name, key, state.window);
      });
    });
    var buttons = document.querySelectorAll("#window-choices button");
    Array.prototype.forEach.call(buttons, function (b) {
      b.setAttribute("aria-pressed", String(Number(b.getAttribute("data-window")) === state.window));
    });
  }
  function paramInput(policy, key, value) {
    var label = document.createElement("label"), input = document.createElement("input");
    input.id = "param-" + policy + "-" + key;
    if (typeof value === "boolean") { input.type = "checkbox"; input.checked = value; }
    else { input.type = "text"; input.inputMode = "decimal"; input.value = value === null ? "" : fmt(value); }
    input.addEventListener("input", function () {
      var v = input.type === "checkbox" ? input.checked : parseNumber(input.value);
      var bad = v !== null && typeof v === "number" && !isFinite(v);
      input.setAttribute("aria-invalid", String(bad));
      if (bad) return;
      state.params[policy][key] = v;
      draw();
    });
    input.addEventListener("change", function () {
      var v = state.params[policy][key];
      if (typeof v === "number" && input.getAttribute("aria-invalid") !== "true") input.value = fmt(v);
    });
    label.appendChild(document.createTextNode(key + " "));
    label.appendChild(input);
    return label;
  }
  function setup() {
    document.getElementById("trace-info").textContent = DATA.format + " · " + (DATA.model || "unknown model") +
      " · " + fmt(calls.length) + " calls · " + DATA.source;
    var slider = document.getElementById("window-slider"), box = document.getElementById("window-input");
    slider.min = String(DATA.slider.min); slider.max = String(DATA.slider.max); slider.step = String(DATA.slider.step);
    function setWindow(v, perModel) {
      if (!(v > 0) || !isFinite(v)) { box.setAttribute("aria-invalid", "true"); return; }
      state.perModel = Boolean(perModel);
      box.setAttribute("aria-invalid", "false");
      state.window = Math.round(v); slider.value = String(state.window); box.value = fmt(state.window); draw();
    }
    slider.addEventListener("input", function () { setWindow(Number(slider.value)); });
    box.addEventListener("change", function () { setWindow(parseNumber(box.value)); });
    var choices = document.getElementById("window-choices");
    if (DATA.expected.length > 1) {
      choices.appendChild(document.createTextNode("replayed windows: "));
      DATA.expected.forEach(function (exp, k) {
        var b = html("button", fmt(exp.window));
        b.type = "button"; b.id = "window-choice-" + k; b.setAttribute("data-window", String(exp.window));
        b.title = exp.wall === null ? "wall never hit" : "wall at call " + fmt(exp.wall);
        b.addEventListener("click", function () { setWindow(exp.window, exp.per_model); });
        choices.appendChild(b);
      });
    }
    var params = document.getElementById("params");
    DATA.policies.forEach(function (p) {
      var fs = document.createElement("fieldset");
      fs.appendChild(html("legend", p.name));
      Object.keys(p.parameters).forEach(function (k) { fs.appendChild(paramInput(p.name, k, p.parameters[k])); });
      params.appendChild(fs);
    });
    setWindow(state.window, state.perModel);
    selfCheck();
  }
  setup();
})();
