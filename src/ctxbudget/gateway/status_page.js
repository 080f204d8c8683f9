"use strict";
// The gateway's status page: fetch the status JSON, draw it, again every few seconds.
// Text from requests (ids, models, summaries) goes in with textContent only, never as markup.
(function () {
  const body = document.body;
  const statusUrl = body.dataset.statusUrl;
  const refreshMs = Math.max(500, parseInt(body.dataset.refreshMs, 10) || 2000);
  const KEY = "ctxbudget.gateway.key";
  const MAX_SHOWN = 500;
  const $ = (id) => document.getElementById(id);
  let renders = 0;

  // A key given as #key=... is kept for this tab and taken out of the address bar.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has("key")) {
    sessionStorage.setItem(KEY, fragment.get("key"));
    history.replaceState(null, "", location.pathname + location.search);
  }

  function isNum(v) { return typeof v === "number" && Number.isFinite(v); }
  function fmt(v) { return isNum(v) ? Math.round(v).toLocaleString("en-US") : "-"; }
  function text(v) { return v === null || v === undefined ? "" : String(v); }
  function setText(root, selector, value) { root.querySelector(selector).textContent = value; }
  function clock(seconds) {
    if (!isNum(seconds)) return "";
    return "updated " + new Date(seconds * 1000).toLocaleTimeString("en-GB");
  }

  function setState(state, message) {
    const el = $("state");
    el.dataset.state = state;
    el.textContent = message;
  }

  // [system + tools | conversation | free | kept free], like `ctxbudget demo`'s bar.
  function barParts(c) {
    const win = Math.max(1, c.window);
    const floor = Math.max(0, Math.min(isNum(c.floor_tokens) ? c.floor_tokens : 0, c.tokens));
    const conversation = Math.max(0, c.tokens - floor);
    const reserve = isNum(c.threshold_tokens) ? Math.max(0, Math.min(win, win - c.threshold_tokens)) : 0;
    const free = Math.max(0, win - reserve - floor - conversation);
    return [floor, conversation, free, reserve];
  }

  function compactionLine(k) {
    const trigger = text(k.trigger).replace(/^context_/, "");
    return "turn " + fmt(k.turn) + " · " + trigger + " · " + text(k.strategy) + " · " +
      fmt(k.messages_before) + " → " + fmt(k.messages_after) + " messages · " +
      fmt(k.tokens_before) + " → " + fmt(k.tokens_after) + " tokens";
  }

  function drawConversation(c) {
    const node = $("conversation-template").content.firstElementChild.cloneNode(true);
    node.dataset.id = text(c.id);
    setText(node, ".conv-id", text(c.id));
    setText(node, ".conv-model", text(c.model));
    setText(node, ".conv-api", c.api ? "(" + text(c.api) + ")" : "");
    setText(node, ".conv-tokens", fmt(c.tokens));
    setText(node, ".conv-window", fmt(c.window));
    setText(node, ".conv-percent", isNum(c.tokens) && c.window > 0 ? (100 * c.tokens / c.window).toFixed(1) + "%" : "-");
    setText(node, ".conv-floor", fmt(c.floor_tokens));
    setText(node, ".conv-threshold", fmt(c.threshold_tokens));
    setText(node, ".conv-requests", fmt(c.requests));
    setText(node, ".conv-compactions", fmt(c.compactions));
    setText(node, ".conv-overflows", fmt(c.overflows));
    setText(node, ".conv-updated", clock(c.updated));
    const parts = barParts(c);
    const total = Math.max(1, parts.reduce((a, b) => a + b, 0));
    const bar = node.querySelector(".bar");
    bar.querySelectorAll(".seg").forEach((seg, i) => {
      seg.style.width = (100 * parts[i] / total).toFixed(3) + "%";
      seg.dataset.tokens = String(parts[i]);
    });
    bar.classList.toggle("over", c.tokens > c.window);
    bar.setAttribute("aria-label", fmt(c.tokens) + " of " + fmt(c.window) + " tokens");
    const list = node.querySelector(".compactions");
    for (const k of Array.isArray(c.recent_compactions) ? c.recent_compactions : []) {
      const item = document.createElement("li");
      item.textContent = compactionLine(k);
      list.appendChild(item);
    }
    if (c.summary) {
      node.querySelector(".conv-summary-box").hidden = false;
      setText(node, ".conv-summary", text(c.summary));
    }
    return node;
  }

  function draw(status) {
    $("upstream-url").textContent = text(status.upstream) || "-";
    $("upstream-window").textContent = fmt(status.window);
    $("upstream-window-source").textContent = status.window_source ? "(" + text(status.window_source) + ")" : "";
    $("summary-calls").textContent = fmt(status.summary_calls);
    const conversations = (Array.isArray(status.conversations) ? status.conversations : [])
      .filter((c) => c && isNum(c.window) && isNum(c.tokens));
    $("conversation-count").textContent = fmt(conversations.length);
    const main = $("conversations");
    main.replaceChildren(...conversations.slice(0, MAX_SHOWN).map(drawConversation));
    const empty = $("empty");
    empty.hidden = conversations.length > 0;
    if (conversations.length > MAX_SHOWN) {
      empty.hidden = false;
      empty.textContent = "Showing the " + MAX_SHOWN + " most recent of " + fmt(conversations.length) + ".";
    }
  }

  async function refresh() {
    const headers = { "Accept": "application/json" };
    const key = sessionStorage.getItem(KEY);
    if (key) headers["Authorization"] = "Bearer " + key;
    try {
      const response = await fetch(statusUrl, { headers: headers, cache: "no-store", credentials: "same-origin" });
      if (response.status === 401 || response.status === 403) {
        $("key-form").hidden = false;
        setState("error", "a key is needed");
        return;
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      draw(await response.json());
      renders += 1;
      body.dataset.renders = String(renders);
      setState("live", "live · " + new Date().toLocaleTimeString("en-GB"));
    } catch (error) {
      setState("error", "cannot read the status: " + text(error && error.message));
    } finally {
      setTimeout(refresh, refreshMs);
    }
  }

  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY, $("key-input").value);
    $("key-input").value = "";
    $("key-form").hidden = true;
  });

  refresh();
})();
